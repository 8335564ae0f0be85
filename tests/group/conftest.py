"""A group coordinator on a fake clock and an in-memory ``__consumer_offsets``."""

from __future__ import annotations

import dataclasses

import pytest

from onceflow.broker.coordinator.scheduler import ManualScheduler
from onceflow.broker.group.config import GroupCoordinatorConfig
from onceflow.broker.group.coordinator import GroupCoordinator
from onceflow.broker.group.persistence import InMemoryOffsetsTopic
from onceflow.broker.group.requests import JoinRequest, JoinResult, SyncResult
from onceflow.protocol.errors import ErrorCode

SESSION_MS = 10_000
REBALANCE_MS = 30_000


class Harness:
    def __init__(self, *, initial_delay_ms: int = 0, **config) -> None:
        self.clock = ManualScheduler()
        self.topic = InMemoryOffsetsTopic(num_partitions=3)
        self.config = GroupCoordinatorConfig(group_initial_rebalance_delay_ms=initial_delay_ms, **config)
        self.coord = self.new_coordinator()

    def new_coordinator(self) -> GroupCoordinator:
        coord = GroupCoordinator(self.config, self.clock, self.topic)
        coord.load()
        return coord

    def restart(self) -> GroupCoordinator:
        self.coord.shutdown()
        self.coord = self.new_coordinator()
        return self.coord

    def join(
        self,
        group: str = "g",
        member_id: str = "",
        *,
        instance_id: str | None = None,
        protocols=(("range", b"r-meta"),),
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        client_id: str = "c",
        require_known: bool = True,
    ) -> list[JoinResult]:
        """Send a JoinGroup; the returned list fills when the coordinator answers."""
        out: list[JoinResult] = []
        req = JoinRequest(
            group_id=group,
            member_id=member_id,
            group_instance_id=instance_id,
            client_id=client_id,
            client_host="/127.0.0.1",
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            protocol_type="consumer",
            protocols=list(protocols),
            require_known_member_id=require_known,
        )
        self.coord.join_group(req, out.append)
        return out

    def join_new(self, group: str = "g", **kw) -> list[JoinResult]:
        """KIP-394 two-step join: get a member id, then join with it."""
        first = self.join(group, **kw)
        if kw.get("instance_id") is not None:
            return first  # static members skip the KIP-394 round
        assert len(first) == 1 and first[0].error is ErrorCode.MEMBER_ID_REQUIRED
        return self.join(group, first[0].member_id, **kw)

    def sync(
        self, group: str, member_id: str, generation: int, assignments=None, instance_id: str | None = None
    ) -> list[SyncResult]:
        out: list[SyncResult] = []
        self.coord.sync_group(group, member_id, instance_id, generation, dict(assignments or {}), out.append)
        return out

    def stable_single(self, group: str = "g", **kw) -> JoinResult:
        """One member, joined and synced; returns its JoinResult."""
        res = self.join_new(group, **kw)
        assert res and res[0].error is ErrorCode.NONE, res
        r = res[0]
        synced = self.sync(group, r.member_id, r.generation_id, {r.member_id: b"A"})
        assert synced and synced[0].error is ErrorCode.NONE
        return r


def replace(obj, **kw):
    return dataclasses.replace(obj, **kw)


@pytest.fixture
def h() -> Harness:
    return Harness()
