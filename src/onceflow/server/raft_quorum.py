"""The metadata quorum of a node on disk: ``onceflow.raft``'s :class:`RaftServer` behind the server's
``MetadataQuorum`` contract.

- The log and the quorum state live in ``<data-dir>/__cluster_metadata-0`` (``FileStorage``), so
  they survive kill -9; ``controller.quorum.*`` settings reach the Raft core (``RaftConfig``).
- One controller listener per node: the node's ``ControllerListener`` owns the port and hands the
  quorum's own requests (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot) to the Raft
  server (:meth:`RaftQuorum.served_apis`); the Raft server keeps its own outbound connections to the
  other voters, opened with the controller listener's security (TLS, SASL) when it has any. A
  broker-only node is an observer: it fetches the log from the leader like a voter,
  but never votes.
- Every committed batch, snapshot and leader change is handed to each of the node's listeners in
  order (the controller first, then the broker's metadata, then the snapshot policy).
- A single node (the only voter) commits an append as soon as it is written; :meth:`commit_now` does
  that at once, for the synchronous topic changes of ``topic_admin.LocalTopicAdmin``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from onceflow.server.config import ServerConfig
from onceflow.server.quorum import NotLeader, QuorumDescription, ReplicaState

log = logging.getLogger(__name__)


class QuorumUnavailable(RuntimeError):
    """This build cannot run the Raft quorum."""


class _Reply:
    """Where the Raft server writes one answer (its ``reply_to`` writer): handed back to the
    controller listener, which writes answers in request order."""

    def __init__(self, future: asyncio.Future) -> None:
        self._future = future

    def is_closing(self) -> bool:
        return self._future.done()

    def write(self, data: bytes) -> None:
        if not self._future.done():
            self._future.set_result(bytes(data))


class RaftQuorum:
    durable = True  # the log and the quorum state are on disk

    def __init__(self, server: ServerConfig, data_dir: Path, cluster_id: str, connect: Any = None) -> None:
        """``connect(host, port)``: how this node opens a stream to another's controller listener
        (``server.peer_security``'s connector on a secured controller listener; plain TCP without)."""
        try:
            from onceflow.raft.config import RaftConfig
            from onceflow.raft.file_storage import FileStorage
            from onceflow.raft.server import RaftServer
        except ImportError:
            raise QuorumUnavailable(
                "a cluster node needs the Raft quorum (onceflow.raft), missing from this build"
            ) from None
        self.node_id = server.node_id
        self.voters = dict(server.voters)
        properties = dict(server.quorum)
        if server.single_node:
            # The only voter: nothing to batch appends for, and topic changes commit at once.
            properties.setdefault("controller.quorum.append.linger.ms", "0")
        self.storage = FileStorage(data_dir, cluster_id=cluster_id)
        self.raft = RaftServer(
            server.node_id,
            self.voters,
            self.storage,
            RaftConfig.from_properties(properties),
            listener=self,
            cluster_id=cluster_id,
            connect=connect,
        )
        # The node's ControllerListener owns the controller listener's port.
        self.raft.listen = None
        self._listeners: list[Any] = []

    # ------------------------------------------------------------ MetadataQuorum

    def add_listener(self, listener: Any) -> None:
        self._listeners.append(listener)

    async def start(self) -> None:
        await self.raft.start()

    async def stop(self) -> None:
        await self.raft.stop()

    def append(self, records: Sequence[bytes], epoch: int) -> int:
        from onceflow.raft.errors import NotLeader as RaftNotLeader

        if self.raft.failure is not None:
            raise NotLeader(f"the quorum stopped: {self.raft.failure!r}")
        try:
            return self.raft.append(list(records), epoch=epoch)
        except RaftNotLeader as exc:
            raise NotLeader(str(exc)) from exc

    @property
    def leader(self) -> tuple[int | None, int]:
        if self.raft.node is None:
            return None, -1
        return self.raft.node.leader_and_epoch

    @property
    def high_watermark(self) -> int:
        hw = None if self.raft.node is None else self.raft.node.high_watermark
        return hw or 0

    @property
    def log_end_offset(self) -> int:
        """Where this node's next append lands (what an activating controller writes from)."""
        node = self.raft.node
        return self.storage.log_end_offset if node is None else node.next_append_offset

    def last_leader_contact(self) -> tuple[int, int] | None:
        contact = None if self.raft.node is None else self.raft.node.last_leader_contact
        return None if contact is None else (contact[0], contact[2])

    def leader_address(self) -> tuple[str, int] | None:
        leader, _epoch = self.leader
        return None if leader is None else self.voters.get(leader)

    def describe(self) -> QuorumDescription | None:
        if self.raft.node is None or self.leader[0] != self.node_id:
            return None
        answer = self.raft.describe_quorum()
        if answer.error:
            return None

        def states(replicas):
            return tuple(
                ReplicaState(
                    r.replica_id, r.log_end_offset, r.last_fetch_timestamp, r.last_caught_up_timestamp
                )
                for r in replicas
            )

        return QuorumDescription(
            answer.leader_id,
            answer.leader_epoch,
            answer.high_watermark,
            states(answer.voters),
            states(answer.observers),
        )

    def create_snapshot(self, offset: int, now_ms: int) -> Any:
        return self.raft.create_snapshot(offset)

    def commit_now(self) -> None:
        """Write what was appended and deliver what that commits, before returning (the only voter
        commits what it has flushed)."""
        raft = self.raft
        raft._dispatch(raft.node.poll(raft._clock_ms()))  # noqa: SLF001 - the driver's own step

    # ------------------------------------------------------------ the quorum's APIs on the listener

    def served_apis(self) -> dict:
        from onceflow.protocol import apis
        from onceflow.raft import wire

        return {
            key: (low, high, apis.request_class(key), self._answer(key))
            for key, (low, high) in wire.VERSIONS.items()
            if key != wire.DESCRIBE_QUORUM  # the listener answers it from describe()
        }

    def _answer(self, api_key: int):
        async def answer(version: int, request: Any, correlation_id: int) -> bytes:
            from onceflow.protocol import apis
            from onceflow.raft import wire
            from onceflow.raft.messages import Inbound

            try:
                body = wire.request_from_wire(api_key, request)
            except wire.WireError as exc:
                return apis.encode_response(
                    wire.error_response(api_key, version, exc.code), correlation_id, version
                )
            future = asyncio.get_running_loop().create_future()
            source = getattr(
                body, "candidate_id", getattr(body, "leader_id", getattr(body, "replica_id", -1))
            )
            # The Raft server's own input step: the answer comes through reply_to, possibly later
            # (a Fetch waits for new data up to replica.fetch.wait.max.ms).
            self.raft._inbound(
                Inbound(source, correlation_id, body, reply_to=(_Reply(future), api_key, version))
            )  # noqa: SLF001
            return await future

        return answer

    # ------------------------------------------------------------ the Raft server's listener

    def handle_commit(self, batch: Any) -> None:
        for listener in self._listeners:
            listener.handle_commit(batch)

    def handle_load_snapshot(self, snapshot: Any) -> None:
        for listener in self._listeners:
            listener.handle_load_snapshot(snapshot)

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        for listener in self._listeners:
            listener.handle_leader_change(leader_id, epoch)


def raft_quorum(server: ServerConfig, data_dir: Path, cluster_id: str, connect: Any = None) -> RaftQuorum:
    return RaftQuorum(server, data_dir, cluster_id, connect)
