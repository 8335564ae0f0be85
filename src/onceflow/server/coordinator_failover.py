"""Coordinators follow the leadership of their partitions (Kafka's ``onElection`` / ``onResignation``
of the group and transaction coordinators, called by its ``ReplicaManager``).

The group coordinator serves the groups of the ``__consumer_offsets`` partitions this broker leads;
the transaction coordinator the transactional ids of the ``__transaction_state`` partitions it leads.

- When the replica manager makes this broker **leader** of one of them, its coordinator loads the
  partition from the local replica under the partition's leader epoch, which is the **coordinator
  epoch** (a new leader was in the ISR, so its log holds every committed record). A transaction
  coordinator then finishes the transactions it finds in PrepareCommit/PrepareAbort: its markers
  carry the new coordinator epoch, and each partition refuses a marker of an older one once it has
  one of the new (TRANSACTION_COORDINATOR_FENCED, the check Kafka's producer state makes).
- When it becomes **follower** (or the partition is gone), the coordinator unloads the partition: its
  state is dropped, its timers stop, requests for its keys answer NOT_COORDINATOR, and operations
  waiting for their records to commit fail with NOT_COORDINATOR (the client finds the new one).
- Leadership changes heard before the coordinators exist (while the broker starts) are not lost: the
  coordinators load what the broker leads when they are attached (:meth:`owned`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)


class PartitionCoordinator(Protocol):
    def load_partition(self, partition: int, coordinator_epoch: int) -> None: ...

    def unload_partition(self, partition: int, coordinator_epoch: int | None = None) -> None: ...


class CoordinatorFailover:
    def __init__(self, leaderships: Callable[[str], dict[int, int]]) -> None:
        """``leaderships(topic)``: {partition: leader epoch} of the partitions of ``topic`` this
        broker leads now."""
        self._leaderships = leaderships
        self._coordinators: dict[str, PartitionCoordinator] = {}
        self._after_load: dict[str, Callable[[int], Any]] = {}

    def owned(self, topic: str) -> dict[int, int]:
        """The partitions of ``topic`` to load at start, with their coordinator epochs."""
        return dict(self._leaderships(topic))

    def attach(
        self,
        topic: str,
        coordinator: PartitionCoordinator,
        after_load: Callable[[int], Any] | None = None,
    ) -> None:
        """From now on, ``coordinator`` follows the leadership of ``topic``'s partitions;
        ``after_load(partition)`` runs after each load caused by a leadership change (a coroutine
        function runs as a task)."""
        self._coordinators[topic] = coordinator
        if after_load is not None:
            self._after_load[topic] = after_load

    def detach_all(self) -> None:
        self._coordinators.clear()
        self._after_load.clear()

    def leadership_changed(self, topic: str, partition: int, leader: bool, leader_epoch: int) -> None:
        coordinator = self._coordinators.get(topic)
        if coordinator is None:
            return  # not a coordinator topic, or the coordinators are not up yet (they load at start)
        if not leader:
            log.info("%s-%d: no longer leader (epoch %d): unloading", topic, partition, leader_epoch)
            coordinator.unload_partition(partition, leader_epoch)
            return
        log.info("%s-%d: leader in epoch %d: loading its coordinator state", topic, partition, leader_epoch)
        try:
            coordinator.load_partition(partition, leader_epoch)
        except Exception:  # noqa: BLE001 - the runtime marks the partition failed; the broker goes on
            log.exception("%s-%d: loading failed", topic, partition)
            return
        after = self._after_load.get(topic)
        if after is not None:
            result = after(partition)
            if asyncio.iscoroutine(result):
                task = asyncio.get_running_loop().create_task(result)
                task.add_done_callback(_log_failure)


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("finishing a loaded partition's work failed: %r", task.exception())
