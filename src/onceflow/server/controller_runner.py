"""The controller on a node: the sans-IO ``QuorumController`` driven by the metadata quorum.

- Every committed batch goes to ``controller.handle_commit``; waiting requests whose records are now
  committed are answered.
- When the quorum says this node leads, the controller activates (writing the bootstrap records on
  an empty log, and a single-node data dir's topics the first time), and its timers run
  (``next_deadline_ms`` / ``poll``: session expiry, leader rebalance, NoOps).
- :meth:`ControllerRunner.call` runs one operation (``create_topics``, ``broker_heartbeat`` ...):
  append its records as one batch, wait until they are committed, return the response. On a node
  that is not the active controller it raises ``NotController``; when leadership is lost while a
  request waits, the request fails with NOT_CONTROLLER too (the caller retries on the new leader).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from onceflow.controller.config import ControllerResult
from onceflow.controller.quorum_controller import NotController, QuorumController
from onceflow.metadata.records import to_bytes
from onceflow.server.quorum import MetadataQuorum, NotLeader, now_ms

log = logging.getLogger(__name__)

# The timers woke this much later than due: the process stalled rather than the brokers going quiet.
STALL_MS = 2000


class ControllerRunner:
    """Feeds one ``QuorumController`` from the quorum and runs its operations against it."""

    def __init__(
        self,
        controller: QuorumController,
        quorum: MetadataQuorum,
        *,
        bootstrap_records: Callable[[], Sequence[Any]] | None = None,
        on_activate: Callable[[QuorumController], None] | None = None,
    ) -> None:
        self.controller = controller
        self.quorum = quorum
        self._bootstrap_records = bootstrap_records
        self._on_activate = on_activate
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.active_changed = asyncio.Event()

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._task = asyncio.create_task(self._run_timers(), name="controller-timers")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._fail_waiters("the controller is stopping")
        self.controller.renounce()

    @property
    def active(self) -> bool:
        return self.controller.active

    # ------------------------------------------------------------ quorum listener

    def handle_commit(self, batch: Any) -> None:
        self.controller.handle_commit(batch)
        committed = self.controller.committed_offset
        still = []
        for offset, future in self._waiters:
            if offset <= committed:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((offset, future))
        self._waiters = still

    def handle_load_snapshot(self, snapshot: Any) -> None:
        self.controller.handle_load_snapshot(snapshot)

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        was_active = self.controller.active
        self.controller.handle_leader_change(leader_id, epoch)
        if was_active and not self.controller.active:
            self._fail_waiters(f"leadership moved to {leader_id} in epoch {epoch}")
        if leader_id == self.controller.config.node_id and not self.controller.active:
            self._activate(epoch)
        self.active_changed.set()
        self.active_changed = asyncio.Event()
        self._wake.set()

    def _activate(self, epoch: int) -> None:
        next_offset = self.quorum.log_end_offset
        empty_log = self.controller.committed_image.metadata_version == 0
        result = self.controller.activate(
            epoch, next_offset, now_ms(), previous_leader=self.quorum.last_leader_contact()
        )
        self._append(result, epoch)
        if empty_log and self._bootstrap_records is not None:
            records = list(self._bootstrap_records())
            if records:
                self._append(self.controller.bootstrap(records, now_ms()), epoch)
        if self._on_activate is not None:
            self._on_activate(self.controller)

    # ------------------------------------------------------------ operations

    async def call(self, operation: Callable[[int], ControllerResult]) -> Any:
        """Run ``operation(now_ms)`` on the active controller and answer once it is committed."""
        if not self.controller.active:
            raise NotController(
                f"node {self.controller.config.node_id} is not the active controller "
                f"(leader: {self.controller.leader_id})"
            )
        epoch = self.controller.epoch
        result = operation(now_ms())
        self._append(result, epoch)
        if result.wait_offset > self.controller.committed_offset:
            future = asyncio.get_running_loop().create_future()
            self._waiters.append((result.wait_offset, future))
            await future
        return result.response

    def _append(self, result: ControllerResult, epoch: int) -> None:
        if not result.records:
            return
        # This result's own last record: poll() decides several results before any is appended, so
        # the controller's next offset is already past the later ones.
        expected = result.wait_offset
        try:
            offset = self.quorum.append([to_bytes(r) for r in result.records], epoch)
        except NotLeader as exc:
            self.controller.renounce()
            self._fail_waiters(str(exc))
            raise NotController(f"lost the leadership while writing: {exc}") from exc
        if offset != expected:
            log.error("metadata records landed at %d, not %d: renouncing", offset, expected)
            self.controller.renounce()
            self._fail_waiters("the metadata log moved under the controller")
            raise NotController("the metadata log moved under the controller")
        self._wake.set()

    def _fail_waiters(self, why: str) -> None:
        waiters, self._waiters = self._waiters, []
        for _offset, future in waiters:
            if not future.done():
                future.set_exception(NotController(why))

    # ------------------------------------------------------------ timers

    def _renew_sessions(self) -> None:
        """The process stalled (the event loop was blocked, e.g. opening many logs): heartbeats may
        be waiting behind the stall, so no broker is fenced for the silence it caused; every
        registered broker's session starts again, as on a controller that just became active."""
        sessions = self.controller.sessions
        if sessions is None:
            return
        now = now_ms()
        log.warning("controller %d stalled; broker sessions start again", self.controller.config.node_id)
        for broker in self.controller.image.brokers.values():
            sessions.register(broker.id, broker.fenced, now)

    async def _run_timers(self) -> None:
        while True:
            deadline = self.controller.next_deadline_ms()
            self._wake.clear()
            timeout = None if deadline is None else max(0.0, (deadline - now_ms()) / 1000.0)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            if not self.controller.active:
                continue
            if deadline is not None and now_ms() - deadline > STALL_MS:
                self._renew_sessions()
            deadline = self.controller.next_deadline_ms()
            if deadline is None or deadline > now_ms():
                continue
            epoch = self.controller.epoch
            for result in self.controller.poll(now_ms()):
                try:
                    self._append(result, epoch)
                except NotController:
                    break
