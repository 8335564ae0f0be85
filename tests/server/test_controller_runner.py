"""The controller runner on a quorum double: the results one ``poll`` decides together (several brokers
fenced at once, as when a new controller hears no heartbeat from brokers still waiting on the old
one) are appended one by one, each landing where the controller placed it, and the controller stays
active."""

from __future__ import annotations

import asyncio

from onceflow.controller.config import ControllerConfig
from onceflow.controller.quorum_controller import QuorumController
from onceflow.metadata.records import NoOpRecord
from onceflow.server.controller_runner import ControllerRunner


class AppendOnlyQuorum:
    """Just enough of a MetadataQuorum for appends: every batch lands at the log end."""

    def __init__(self) -> None:
        self.log_end_offset = 1

    def append(self, records, epoch: int) -> int:
        self.log_end_offset += len(records)
        return self.log_end_offset - 1

    def last_leader_contact(self):
        return None


def test_results_decided_together_are_appended_where_the_controller_placed_them():
    async def run() -> None:
        controller = QuorumController(ControllerConfig(node_id=1))
        runner = ControllerRunner(controller, AppendOnlyQuorum())
        runner._activate(5)  # noqa: SLF001 - the runner's own activation, without a Raft election
        assert controller.active
        now = 1_000
        # Two results decided before either is appended, as poll() decides fencings.
        first = controller._write([NoOpRecord()], None, now)  # noqa: SLF001
        second = controller._write([NoOpRecord(), NoOpRecord()], None, now)  # noqa: SLF001
        runner._append(first, 5)  # noqa: SLF001
        runner._append(second, 5)  # noqa: SLF001
        assert controller.active

    asyncio.run(run())
