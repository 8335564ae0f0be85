"""``onceflow groups list|describe|delete|reset-offsets``: consumer groups, like Kafka's
``kafka-consumer-groups.sh``.

The requests go to the group's coordinator (found with FindCoordinator), log end offsets to the
partition leaders, so the commands also work against a Kafka cluster.
"""

from __future__ import annotations

import asyncio
import dataclasses

import click
from kafka.protocol.admin.groups import DeleteGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from rich.table import Table

from onceflow.cli.common import bootstrap_option, friendly_errors, out
from onceflow.client.admin import AsyncAdminClient
from onceflow.client.async_client import AsyncClient
from onceflow.client.connection import Connection
from onceflow.protocol.errors import ErrorCode, KafkaError

EARLIEST, LATEST = -2, -1


def _check(code: int, what: str) -> None:
    if code != 0:
        raise KafkaError(f"{what}: {ErrorCode(code).name}", ErrorCode(code))


@dataclasses.dataclass
class MemberView:
    member_id: str
    client_id: str
    host: str
    partitions: list[tuple[str, int]]
    epoch: int | None = None  # consumer-protocol members (KIP-848)


@dataclasses.dataclass
class GroupView:
    group_id: str
    state: str
    protocol: str
    members: list[MemberView]
    # (topic, partition) -> (committed offset or -1, log end offset)
    offsets: dict[tuple[str, int], tuple[int, int]]
    group_type: str = "classic"
    group_epoch: int | None = None


class GroupAdmin:
    """The requests behind the commands, over :class:`AsyncClient` connections."""

    def __init__(self, bootstrap: str) -> None:
        self.client = AsyncClient(bootstrap, client_id="onceflow-groups")
        self.admin = AsyncAdminClient(bootstrap, client_id="onceflow-groups")
        self._coordinators: dict[str, Connection] = {}

    async def close(self) -> None:
        for conn in self._coordinators.values():
            await conn.close()
        await self.client.close()
        await self.admin.close()

    async def coordinator(self, group_id: str) -> Connection:
        if group_id not in self._coordinators:
            any_conn = await self.client.any_connection()
            resp = await any_conn.send(
                FindCoordinatorRequest(key=group_id, key_type=0, coordinator_keys=[group_id])
            )
            if resp.coordinators:
                c = resp.coordinators[0]
                _check(c.error_code, f"cannot find the coordinator of group {group_id}")
                host, port = c.host, c.port
            else:
                _check(resp.error_code, f"cannot find the coordinator of group {group_id}")
                host, port = resp.host, resp.port
            self._coordinators[group_id] = await Connection.open(
                host, port, client_id="onceflow-groups", request_timeout_s=30.0
            )
        return self._coordinators[group_id]

    async def list_groups(self) -> list[tuple[str, str, str]]:
        conn = await self.client.any_connection()
        resp = await conn.send(ListGroupsRequest(states_filter=[], types_filter=[]))
        _check(resp.error_code, "listing groups failed")
        return sorted((g.group_id, g.group_state or "", g.protocol_type) for g in resp.groups)

    async def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        conn = await self.coordinator(group_id)
        req = OffsetFetchRequest(
            group_id=group_id,
            topics=None,
            groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group_id, topics=None)],
            require_stable=True,
        )
        resp = await conn.send(req)
        if getattr(resp, "groups", None):
            g = resp.groups[0]
            _check(g.error_code, f"fetching offsets of {group_id} failed")
            topics = g.topics
        else:
            _check(resp.error_code or 0, f"fetching offsets of {group_id} failed")
            topics = resp.topics
        return {(t.name, p.partition_index): p.committed_offset for t in topics for p in t.partitions}

    async def log_offsets(self, topic: str, partitions: list[int], which: int) -> dict[int, int]:
        return await self.client.list_offsets(topic, partitions, timestamp=which)

    async def topic_partitions(self, topic: str) -> list[int]:
        meta = await self.client.metadata([topic])
        info = meta.topics.get(topic)
        if info is None or info.error != ErrorCode.NONE:
            raise KafkaError(f"unknown topic {topic}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return sorted(info.partitions)

    async def describe(self, group_id: str) -> GroupView:
        g = await self.admin.describe_group(group_id)
        members = [
            MemberView(
                m.member_id,
                m.client_id,
                m.client_host,
                sorted((tp.topic, tp.partition) for tp in m.assignment),
                m.member_epoch,
            )
            for m in g.members
        ]
        committed = await self.committed(group_id)
        keys = set(committed) | {tp for m in members for tp in m.partitions}
        ends: dict[tuple[str, int], int] = {}
        for topic in {t for t, _ in keys}:
            parts = sorted(p for t, p in keys if t == topic)
            for p, off in (await self.log_offsets(topic, parts, LATEST)).items():
                ends[(topic, p)] = off
        offsets = {tp: (committed.get(tp, -1), ends.get(tp, -1)) for tp in keys}
        return GroupView(g.group_id, g.state, g.protocol, members, offsets, g.group_type, g.group_epoch)

    async def delete(self, group_ids: list[str]) -> dict[str, int]:
        results: dict[str, int] = {}
        for group_id in group_ids:
            conn = await self.coordinator(group_id)
            resp = await conn.send(DeleteGroupsRequest(groups_names=[group_id]))
            results[group_id] = resp.results[0].error_code
        return results

    async def commit(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        conn = await self.coordinator(group_id)
        topics: dict[str, list] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append(
                OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    committed_metadata="",
                )
            )
        req = OffsetCommitRequest(
            group_id=group_id,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in topics.items()
            ],
        )
        resp = await conn.send(req)
        for t in resp.topics:
            for p in t.partitions:
                _check(p.error_code, f"committing {group_id} {t.name}-{p.partition_index} failed")


def _run(bootstrap: str, work):
    async def main():
        admin = GroupAdmin(bootstrap)
        try:
            return await work(admin)
        finally:
            await admin.close()

    with friendly_errors(bootstrap):
        return asyncio.run(main())


@click.group()
def groups():
    """List, describe, delete consumer groups and reset their offsets."""


@groups.command(name="list")
@bootstrap_option
def list_(bootstrap):
    """List groups with their state and protocol type."""
    rows = _run(bootstrap, lambda a: a.list_groups())
    table = Table()
    for column in ("group", "state", "protocol type"):
        table.add_column(column)
    for group_id, state, protocol_type in rows:
        table.add_row(group_id, state, protocol_type)
    out.print(table)


@groups.command()
@click.argument("group_id")
@bootstrap_option
def describe(group_id, bootstrap):
    """Members and assignment of GROUP_ID, and per partition: committed offset, log end, lag."""
    view = _run(bootstrap, lambda a: a.describe(group_id))
    out.print(
        f"group {view.group_id}: {view.state}"
        + (f", assignor {view.protocol}" if view.protocol else "")
        + (f", consumer protocol at group epoch {view.group_epoch}" if view.group_type == "consumer" else "")
    )
    owner = {tp: m for m in view.members for tp in m.partitions}
    table = Table()
    for column in ("topic", "partition", "committed", "log end", "lag", "member", "client", "host"):
        table.add_column(column)
    for (topic, partition), (committed, end) in sorted(view.offsets.items()):
        lag = "-" if committed < 0 or end < 0 else str(max(end - committed, 0))
        m = owner.get((topic, partition))
        table.add_row(
            topic,
            str(partition),
            "-" if committed < 0 else str(committed),
            "-" if end < 0 else str(end),
            lag,
            m.member_id if m else "-",
            m.client_id if m else "-",
            m.host if m else "-",
        )
    out.print(table)
    idle = [m for m in view.members if not m.partitions]
    for m in idle:
        out.print(f"member {m.member_id} ({m.client_id}, {m.host}) has no partitions")
    for m in view.members:
        if m.epoch is not None:
            out.print(f"member {m.member_id} at epoch {m.epoch}")


@groups.command()
@click.argument("group_ids", nargs=-1, required=True)
@bootstrap_option
def delete(group_ids, bootstrap):
    """Delete empty groups and their committed offsets."""
    results = _run(bootstrap, lambda a: a.delete(list(group_ids)))
    failed = False
    for group_id, code in results.items():
        if code == 0:
            out.print(f"deleted group {group_id}")
        else:
            failed = True
            hint = " (stop its consumers first)" if code == ErrorCode.NON_EMPTY_GROUP else ""
            out.print(f"could not delete group {group_id}: {ErrorCode(code).name}{hint}")
    if failed:
        raise SystemExit(1)


@groups.command(name="reset-offsets")
@click.argument("group_id")
@click.option("--topic", "topic", required=True, help="Topic whose offsets to reset (all its partitions).")
@click.option("--to-earliest", "mode", flag_value="earliest", help="Reset to the log start.")
@click.option("--to-latest", "mode", flag_value="latest", help="Reset to the log end.")
@click.option("--to-offset", type=int, default=None, help="Reset every partition to this offset.")
@click.option("--shift-by", type=int, default=None, help="Move the committed offsets by N (may be negative).")
@click.option("--execute", is_flag=True, help="Commit the new offsets (without it: only show the plan).")
@bootstrap_option
def reset_offsets(group_id, topic, mode, to_offset, shift_by, execute, bootstrap):
    """Plan (and with --execute commit) new offsets for GROUP_ID on TOPIC; the group must be empty."""
    chosen = [x for x in (mode, to_offset, shift_by) if x is not None]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --shift-by")

    async def work(admin: GroupAdmin):
        view = await admin.describe(group_id)
        if execute and view.state not in ("Empty", "Dead"):
            raise click.ClickException(
                f"group {group_id} is {view.state}: stop its consumers before resetting"
            )
        parts = await admin.topic_partitions(topic)
        start = await admin.log_offsets(topic, parts, EARLIEST)
        end = await admin.log_offsets(topic, parts, LATEST)
        plan = {}
        for p in parts:
            current = view.offsets.get((topic, p), (-1, -1))[0]
            if mode == "earliest":
                target = start[p]
            elif mode == "latest":
                target = end[p]
            elif to_offset is not None:
                target = to_offset
            else:
                target = (current if current >= 0 else start[p]) + shift_by
            plan[(topic, p)] = (current, min(max(target, start[p]), end[p]))
        if execute:
            await admin.commit(group_id, {tp: new for tp, (_old, new) in plan.items()})
        return plan

    plan = _run(bootstrap, work)
    table = Table(title=("new offsets of " if execute else "plan (use --execute to commit) for ") + group_id)
    for column in ("topic", "partition", "current", "new"):
        table.add_column(column)
    for (t, p), (old, new) in sorted(plan.items()):
        table.add_row(t, str(p), "-" if old < 0 else str(old), str(new))
    out.print(table)
