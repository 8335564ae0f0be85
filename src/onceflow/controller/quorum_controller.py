"""The controller: one object per controller node, active while it leads the metadata quorum
(Kafka's ``QuorumController``), sans-IO.

Two images:

- the **committed** image: every committed batch replayed (:meth:`handle_commit`,
  :meth:`handle_load_snapshot`); it is all a standby controller has;
- the **uncommitted** image (:attr:`image`), on the active controller only: the committed image plus
  the records this controller has decided but the quorum has not committed yet. Every operation
  reads it and applies its own records to it at once, so consecutive operations see each other
  (Kafka does the same with its snapshot registry). Losing leadership (:meth:`handle_leader_change`,
  :meth:`renounce`) drops it: the controller falls back to the committed image.

An operation (``register_broker``, ``create_topics``, ``poll`` for the timers ...) returns a
:class:`~onceflow.controller.config.ControllerResult`: the records to append to the log as one batch
(at offsets ``next_offset`` onwards, which the controller predicts: the caller checks that the Raft
append really put them there, and renounces if not), and the response to send once the log has
committed up to ``wait_offset``. Nothing here reads a clock: every entry point takes ``now_ms``.

Driving it (what the server wiring, or a test's fake log, does): deliver every committed batch to
:meth:`handle_commit` in order; on becoming the Raft leader, once every batch before the leader's
first offset has been delivered, call :meth:`activate` and append its bootstrap records; call
:meth:`poll` when :meth:`next_deadline_ms` is reached.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Iterable
from typing import Any

from onceflow.controller import acls, brokers, configs, elections, producer_ids, quotas, scram, topics
from onceflow.controller.brokers import BrokerState
from onceflow.controller.config import ControllerConfig, ControllerResult
from onceflow.controller.sessions import BrokerSessions
from onceflow.metadata.image import METADATA_VERSION, MetadataImage
from onceflow.metadata.records import FeatureLevelRecord, NoOpRecord, from_bytes
from onceflow.metadata.snapshot import load_snapshot, snapshot_bytes
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.messages import (
    AllocateProducerIdsResponse,
    AlterPartitionResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    UnregisterBrokerResponse,
)

log = logging.getLogger(__name__)


class NotController(KafkaError):
    """This node is not the active controller (NOT_CONTROLLER): the caller should ask the leader."""

    code = ErrorCode.NOT_CONTROLLER


def _decode(record: Any) -> Any:
    return from_bytes(bytes(record)) if isinstance(record, bytes | bytearray | memoryview) else record


class QuorumController:
    def __init__(
        self,
        config: ControllerConfig | None = None,
        rng: random.Random | None = None,
        image: MetadataImage | None = None,
        committed_offset: int = -1,
    ) -> None:
        self.config = config or ControllerConfig()
        # Topic ids and placements come from here: seeded in tests, from the OS otherwise (a fixed
        # seed would give two controllers, or one controller after a restart, the same topic ids).
        self.rng = rng or random.Random()
        self._committed = image or MetadataImage.EMPTY
        self._committed_offset = committed_offset
        self._image = self._committed
        self._next_offset = committed_offset + 1
        # (last offset of a batch we wrote, the uncommitted image after it), oldest first
        self._pending: deque[tuple[int, MetadataImage]] = deque()
        self._epoch = -1
        self._activation_offset = 0
        self.sessions: BrokerSessions | None = None
        self.leader_id: int | None = None
        self.leader_epoch = -1
        self._next_rebalance_ms = 0
        self._next_unclean_ms = 0
        self._last_write_ms = 0

    # ------------------------------------------------------------ state

    @property
    def active(self) -> bool:
        return self._epoch >= 0

    @property
    def epoch(self) -> int:
        """The quorum epoch this controller is active in, or -1."""
        return self._epoch

    @property
    def image(self) -> MetadataImage:
        """The newest image: uncommitted on the active controller, committed elsewhere."""
        return self._image

    @property
    def committed_image(self) -> MetadataImage:
        return self._committed

    @property
    def committed_offset(self) -> int:
        return self._committed_offset

    @property
    def next_offset(self) -> int:
        return self._next_offset

    def snapshot(self) -> tuple[int, list[bytes]]:
        """The committed image as a snapshot: (the first offset after it, its records as bytes)."""
        return self._committed_offset + 1, snapshot_bytes(self._committed)

    # ------------------------------------------------------------ the log's listener

    def handle_commit(self, batch: Any) -> None:
        """A committed batch (``base_offset``, ``last_offset``, ``records`` as bytes or records)."""
        last = batch.last_offset
        if self.active and last >= self._activation_offset:
            image = None
            offset = -1
            while self._pending and self._pending[0][0] <= last:
                offset, image = self._pending.popleft()
            if image is None or offset != last:
                raise RuntimeError(
                    f"committed batch ending at {last} is not one this controller wrote (pending up to {offset})"
                )
            self._committed = image
        else:
            self._committed = self._committed.apply_all(_decode(r) for r in batch.records)
            if not self.active:
                self._image = self._committed
                self._next_offset = last + 1
        self._committed_offset = last

    def handle_load_snapshot(self, snapshot: Any) -> None:
        """A snapshot (``offset``: the first offset after it; ``records``) replaces everything."""
        if self.active:
            self.renounce()
        self._committed = load_snapshot(snapshot.records)
        self._committed_offset = snapshot.offset - 1
        self._image = self._committed
        self._next_offset = snapshot.offset

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        """The quorum's leader changed; an active controller that is no longer it renounces."""
        self.leader_id, self.leader_epoch = leader_id, epoch
        if self.active and (leader_id != self.config.node_id or epoch != self._epoch):
            self.renounce()

    # ------------------------------------------------------------ leadership

    def activate(
        self,
        epoch: int,
        next_offset: int,
        now_ms: int,
        *,
        previous_leader: tuple[int, int] | None = None,
    ) -> ControllerResult:
        """Become the active controller of ``epoch``, writing from ``next_offset`` (every batch
        before it must have been delivered). On an empty log the result carries the bootstrap
        records (``metadata.version``).

        ``previous_leader``: (node id, ms) of this node's last word from the quorum's previous
        leader. Every broker's session starts now (as Kafka's), except that node's when it is also a
        registered broker (process.roles=broker,controller): its process is the one the quorum just
        lost, so its session is dated from that last word. A controller's failover then fences a
        dead leader's broker a session timeout after it fell silent, not after the new controller's
        election. A broker that is alive after all keeps its session by heartbeating within that
        time, or is unfenced by its next heartbeat (nothing it holds is lost: fencing only moves
        leaderships within the ISR)."""
        if self.active:
            raise RuntimeError(f"already active in epoch {self._epoch}")
        if next_offset <= self._committed_offset:
            raise RuntimeError(
                f"cannot write from {next_offset}: offset {self._committed_offset} is committed"
            )
        self._epoch = epoch
        self.leader_id, self.leader_epoch = self.config.node_id, epoch
        self._activation_offset = next_offset
        self._next_offset = next_offset
        self._image = self._committed
        self._pending.clear()
        self.sessions = BrokerSessions(self.config.broker_session_timeout_ms)
        for broker in self._image.brokers.values():
            self.sessions.register(broker.id, broker.fenced, now_ms)
        if previous_leader is not None:
            node, heard_ms = previous_leader
            session = self.sessions.get(node)
            if node != self.config.node_id and session is not None and not session.fenced:
                session.last_contact_ms = min(heard_ms, now_ms)
                log.info(
                    "broker %d led the quorum until %d ms ago: its session dates from then",
                    node,
                    now_ms - session.last_contact_ms,
                )
        self._next_rebalance_ms = now_ms + self.config.leader_imbalance_check_interval_seconds * 1000
        self._next_unclean_ms = now_ms + self.config.unclean_leader_election_interval_ms
        self._last_write_ms = now_ms
        records: list = []
        if METADATA_VERSION not in self._image.features:
            records.append(
                FeatureLevelRecord(name=METADATA_VERSION, feature_level=self.config.metadata_version)
            )
        log.info("controller %d active in epoch %d from offset %d", self.config.node_id, epoch, next_offset)
        return self._write(records, None, now_ms)

    def bootstrap(self, records: Iterable[Any], now_ms: int) -> ControllerResult:
        """Write ``records`` just after activating on an empty log (Kafka's bootstrap metadata): the
        topics and producer-id allocator of a data dir written by a single-node onceflow."""
        self._check_active()
        return self._write(list(records), None, now_ms)

    def renounce(self) -> None:
        """Stop being active: forget every uncommitted record and every broker session."""
        if not self.active:
            return
        log.info(
            "controller %d renounces epoch %d; back to offset %d",
            self.config.node_id,
            self._epoch,
            self._committed_offset,
        )
        self._epoch = -1
        self._image = self._committed
        self._next_offset = self._committed_offset + 1
        self._pending.clear()
        self.sessions = None

    def _check_active(self) -> None:
        if not self.active:
            raise NotController(
                f"node {self.config.node_id} is not the active controller (leader: {self.leader_id})"
            )

    def _write(self, records: list, response: Any, now_ms: int) -> ControllerResult:
        if records:
            self._image = self._image.apply_all(records)
            self._next_offset += len(records)
            self._pending.append((self._next_offset - 1, self._image))
            self._last_write_ms = now_ms
            wait = self._next_offset - 1
        else:
            wait = self._next_offset - 1 if self._next_offset - 1 > self._committed_offset else -1
        return ControllerResult(tuple(records), response, wait)

    # ------------------------------------------------------------ brokers

    def register_broker(self, request, now_ms: int) -> ControllerResult:
        self._check_active()
        try:
            records, response = brokers.register_broker(
                self._image, self.config, self.sessions, request, self._next_offset, now_ms
            )
        except KafkaError as exc:
            log.info("registration of broker %d refused: %s", request.broker_id, exc)
            return self._write(
                [],
                BrokerRegistrationResponse(throttle_time_ms=0, error_code=int(exc.code), broker_epoch=-1),
                now_ms,
            )
        return self._write(records, response, now_ms)

    def broker_heartbeat(self, request, now_ms: int) -> ControllerResult:
        self._check_active()
        try:
            records, response, state = brokers.broker_heartbeat(
                self._image, self.config, self.sessions, request, now_ms
            )
        except KafkaError as exc:
            return self._write(
                [],
                BrokerHeartbeatResponse(
                    throttle_time_ms=0,
                    error_code=int(exc.code),
                    is_caught_up=False,
                    is_fenced=True,
                    should_shut_down=False,
                ),
                now_ms,
            )
        result = self._write(records, response, now_ms)
        if state is BrokerState.CONTROLLED_SHUTDOWN:
            self.sessions.start_controlled_shutdown(request.broker_id, self._next_offset - 1)
        return result

    def unregister_broker(self, request, now_ms: int) -> ControllerResult:
        self._check_active()
        try:
            records = brokers.unregister_broker(self._image, self.config, self.sessions, request.broker_id)
        except KafkaError as exc:
            return self._write(
                [],
                UnregisterBrokerResponse(
                    throttle_time_ms=0, error_code=int(exc.code), error_message=str(exc)
                ),
                now_ms,
            )
        return self._write(
            records, UnregisterBrokerResponse(throttle_time_ms=0, error_code=0, error_message=None), now_ms
        )

    # ------------------------------------------------------------ topics, configs, quotas, producer ids

    def create_topics(self, request, now_ms: int) -> ControllerResult:
        self._check_active()
        records, response = topics.create_topics(self._image, self.config, request, self.rng)
        return self._write(records, response, now_ms)

    def create_partitions(self, request, now_ms: int) -> ControllerResult:
        self._check_active()
        records, response = topics.create_partitions(self._image, request, self.rng)
        return self._write(records, response, now_ms)

    def delete_topics(self, request, now_ms: int, version: int | None = None) -> ControllerResult:
        self._check_active()
        version = _version(request, version)
        records, response = topics.delete_topics(self._image, request, version)
        return self._write(records, response, now_ms)

    def incremental_alter_configs(self, request, now_ms: int) -> ControllerResult:
        self._check_active()
        records, response = configs.incremental_alter_configs(self._image, self.config, request)
        return self._write(records, response, now_ms)

    def alter_configs(self, request, now_ms: int) -> ControllerResult:
        self._check_active()
        records, response = configs.alter_configs(self._image, self.config, request)
        return self._write(records, response, now_ms)

    def alter_client_quotas(self, request, now_ms: int) -> ControllerResult:
        self._check_active()
        records, response = quotas.alter_client_quotas(request)
        return self._write(records, response, now_ms)

    def allocate_producer_ids(self, request, now_ms: int) -> ControllerResult:
        self._check_active()
        try:
            records, response = producer_ids.allocate_producer_ids(self._image, request)
        except KafkaError as exc:
            return self._write(
                [],
                AllocateProducerIdsResponse(
                    throttle_time_ms=0, error_code=int(exc.code), producer_id_start=-1, producer_id_len=0
                ),
                now_ms,
            )
        return self._write(records, response, now_ms)

    # ------------------------------------------------------------ ACLs and SCRAM credentials

    def create_acls(self, request, now_ms: int) -> ControllerResult:
        self._check_active()
        records, response = acls.create_acls(self._image, request, self.rng)
        return self._write(records, response, now_ms)

    def delete_acls(self, request, now_ms: int) -> ControllerResult:
        self._check_active()
        records, response = acls.delete_acls(self._image, request)
        return self._write(records, response, now_ms)

    def alter_user_scram_credentials(self, request, now_ms: int) -> ControllerResult:
        self._check_active()
        records, response = scram.alter_user_scram_credentials(self._image, request)
        return self._write(records, response, now_ms)

    # ------------------------------------------------------------ leaders and ISRs

    def alter_partition(self, request, now_ms: int, version: int | None = None) -> ControllerResult:
        self._check_active()
        version = _version(request, version)
        try:
            brokers.check_broker_epoch(self._image, request.broker_id, request.broker_epoch)
        except KafkaError as exc:
            return self._write(
                [], AlterPartitionResponse(throttle_time_ms=0, error_code=int(exc.code), topics=[]), now_ms
            )
        records, response = elections.alter_partition(
            self._image, request, version, self.config.unclean_leader_election_enable
        )
        return self._write(records, response, now_ms)

    def elect_leaders(self, request, now_ms: int) -> ControllerResult:
        self._check_active()
        records, response = elections.elect_leaders(self._image, request)
        return self._write(records, response, now_ms)

    # ------------------------------------------------------------ timers

    def next_deadline_ms(self) -> int | None:
        """When :meth:`poll` next has something to do (None: not active)."""
        if not self.active:
            return None
        deadlines = [self._next_unclean_ms]
        expiry = self.sessions.next_expiry_ms()
        if expiry is not None:
            deadlines.append(expiry)
        if self.config.auto_leader_rebalance_enable:
            deadlines.append(self._next_rebalance_ms)
        if self.config.metadata_max_idle_interval_ms > 0:
            deadlines.append(self._last_write_ms + self.config.metadata_max_idle_interval_ms)
        return min(deadlines)

    def poll(self, now_ms: int) -> list[ControllerResult]:
        """The timed operations due at ``now_ms``: fencing brokers whose session expired (one result
        each), the leader rebalance, unclean elections, a NoOpRecord when the log was idle."""
        if not self.active:
            return []
        results = []
        for broker_id in self.sessions.stale_brokers(now_ms):
            broker = self._image.broker(broker_id)
            self.sessions.fence(broker_id)
            if broker is None or broker.fenced:
                continue
            log.info(
                "fencing broker %d: no heartbeat for %d ms", broker_id, self.config.broker_session_timeout_ms
            )
            results.append(
                self._write(brokers.fence_records(self._image, self.config, broker_id), None, now_ms)
            )
        if self.config.auto_leader_rebalance_enable and now_ms >= self._next_rebalance_ms:
            self._next_rebalance_ms = now_ms + self.config.leader_imbalance_check_interval_seconds * 1000
            records = elections.rebalance(
                self._image,
                self.config.leader_imbalance_per_broker_percentage,
                self.config.max_elections_per_imbalance,
            )
            if records:
                results.append(self._write(records, None, now_ms))
        if now_ms >= self._next_unclean_ms:
            self._next_unclean_ms = now_ms + self.config.unclean_leader_election_interval_ms
            records = elections.unclean_elections(
                self._image,
                self.config.unclean_leader_election_enable,
                self.config.max_elections_per_imbalance,
            )
            if records:
                results.append(self._write(records, None, now_ms))
        idle = self.config.metadata_max_idle_interval_ms
        if idle > 0 and now_ms - self._last_write_ms >= idle:
            results.append(self._write([NoOpRecord()], None, now_ms))
        return results


def _version(request: Any, version: int | None) -> int:
    if version is not None:
        return version
    known = getattr(request, "API_VERSION", None)
    return known if known is not None else request.max_version


def replay_all(batches: Iterable[Iterable[Any]]) -> MetadataImage:
    """The image of the given batches of records (bytes or records) replayed from nothing."""
    image = MetadataImage.EMPTY
    for batch in batches:
        image = image.apply_all(_decode(r) for r in batch)
    return image
