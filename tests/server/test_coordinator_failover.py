"""Coordinators following their partitions' leadership (``server.coordinator_failover``), with a
recording coordinator: a leader loads under its leader epoch and then finishes its partition's work,
a follower unloads, and what happens before the coordinators exist is left to their start."""

from __future__ import annotations

import asyncio

from onceflow.server.coordinator_failover import CoordinatorFailover

TOPIC = "__transaction_state"


class Recording:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def load_partition(self, partition: int, coordinator_epoch: int) -> None:
        self.calls.append(("load", partition, coordinator_epoch))

    def unload_partition(self, partition: int, coordinator_epoch: int | None = None) -> None:
        self.calls.append(("unload", partition, coordinator_epoch))


def test_leadership_loads_and_unloads_under_the_leader_epoch():
    async def run() -> list:
        led = {0: 4, 3: 7}
        failover = CoordinatorFailover(lambda topic: led if topic == TOPIC else {})
        coordinator = Recording()
        finished: list[int] = []

        async def finish(partition: int) -> None:
            finished.append(partition)

        failover.leadership_changed(TOPIC, 1, True, 2)  # before attach: the start loads what is owned
        assert failover.owned(TOPIC) == {0: 4, 3: 7}
        failover.attach(TOPIC, coordinator, after_load=finish)
        failover.leadership_changed(TOPIC, 1, True, 5)
        failover.leadership_changed(TOPIC, 0, False, 6)
        failover.leadership_changed("__consumer_offsets", 2, True, 1)  # no coordinator attached for it
        await asyncio.sleep(0)
        failover.detach_all()
        failover.leadership_changed(TOPIC, 2, True, 9)  # stopping: nothing loads any more
        assert finished == [1]
        return coordinator.calls

    assert asyncio.run(run()) == [("load", 1, 5), ("unload", 0, 6)]
