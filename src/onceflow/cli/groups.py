"""``onceflow groups list|describe|delete|reset-offsets``: consumer groups, like Kafka's
``kafka-consumer-groups.sh``.

Every request goes through :class:`~onceflow.client.admin.AsyncAdminClient`: group requests to the
group's coordinator, ListOffsets to the partition leaders, so the commands also work against a Kafka
cluster.
"""

from __future__ import annotations

import asyncio

import click
from rich.table import Table

from onceflow.cli.common import bootstrap_option, client_security, friendly_errors, out
from onceflow.client.admin import AsyncAdminClient, GroupDescription
from onceflow.client.async_client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from onceflow.client.consumer.structs import TopicPartition
from onceflow.protocol.errors import ErrorCode, KafkaError


async def _offsets_and_log_ends(
    admin: AsyncAdminClient, group_id: str, description: GroupDescription
) -> dict[TopicPartition, tuple[int, int]]:
    """``(committed offset or -1, log end offset)`` of every partition the group committed to or
    whose member holds it. A partition whose next commit is pending in an open transaction shows -1
    (only the stable offsets count)."""
    committed = await admin.list_group_offsets(group_id)
    stable = await admin.list_group_offsets(group_id, require_stable=True)
    keys = set(committed) | {tp for m in description.members for tp in m.assignment}
    ends: dict[TopicPartition, int] = {}
    for topic in sorted({tp.topic for tp in keys}):
        mine = [tp for tp in keys if tp.topic == topic]
        try:
            ends.update(await admin.list_offsets(dict.fromkeys(mine, LATEST_TIMESTAMP)))
        except KafkaError as exc:
            # Offsets of a topic that is gone (deleted before its offsets were cleaned up, or
            # committed for a topic that never existed) show with no log end, like Kafka's tool.
            if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise
    return {tp: (stable[tp].offset if tp in stable else -1, ends.get(tp, -1)) for tp in keys}


async def _partitions(admin: AsyncAdminClient, topic: str) -> list[TopicPartition]:
    try:
        info = await admin.describe_topic(topic)
    except KafkaError as exc:
        if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise
        raise KafkaError(f"unknown topic {topic}", exc.code) from None
    return [TopicPartition(topic, p) for p in sorted(info.partitions)]


def _run(bootstrap: str, work):
    async def main():
        async with AsyncAdminClient(
            bootstrap, client_id="onceflow-groups", security=client_security()
        ) as admin:
            return await work(admin)

    with friendly_errors(bootstrap):
        return asyncio.run(main())


@click.group()
def groups():
    """List, describe, delete consumer groups and reset their offsets."""


@groups.command(name="list")
@bootstrap_option
def list_(bootstrap):
    """List groups with their state and protocol type."""
    listings = _run(bootstrap, lambda admin: admin.list_groups())
    table = Table()
    for column in ("group", "state", "protocol type"):
        table.add_column(column)
    for g in listings:
        table.add_row(g.group_id, g.state, g.protocol_type)
    out.print(table)


@groups.command()
@click.argument("group_id")
@bootstrap_option
def describe(group_id, bootstrap):
    """Members and assignment of GROUP_ID, and per partition: committed offset, log end, lag."""

    async def work(admin: AsyncAdminClient):
        description = await admin.describe_group(group_id)
        coordinator = await admin.group_coordinator(group_id)
        return description, coordinator, await _offsets_and_log_ends(admin, group_id, description)

    group, (node_id, host, port), offsets = _run(bootstrap, work)
    if group.state == "Dead" and not group.members and not offsets:
        # What a coordinator answers for a group it does not know (as Kafka's tool says it).
        raise click.ClickException(
            f"consumer group {group_id!r} does not exist; list groups with `onceflow groups list`"
        )
    out.print(
        f"group {group.group_id}: {group.state}"
        + (f", assignor {group.protocol}" if group.protocol else "")
        + (
            f", consumer protocol at group epoch {group.group_epoch}"
            if group.group_type == "consumer"
            else ""
        )
        # which broker to watch (or kill -9) to see the group move to another coordinator
        + f", coordinator {node_id} ({host}:{port})"
    )
    owner = {tp: m for m in group.members for tp in m.assignment}
    table = Table()
    for column in ("topic", "partition", "committed", "log end", "lag", "member", "client", "host"):
        table.add_column(column)
    for tp, (committed, end) in sorted(offsets.items()):
        lag = "-" if committed < 0 or end < 0 else str(max(end - committed, 0))
        m = owner.get(tp)
        table.add_row(
            tp.topic,
            str(tp.partition),
            "-" if committed < 0 else str(committed),
            "-" if end < 0 else str(end),
            lag,
            m.member_id if m else "-",
            m.client_id if m else "-",
            m.client_host if m else "-",
        )
    out.print(table)
    idle = [m for m in group.members if not m.assignment]
    for m in idle:
        out.print(f"member {m.member_id} ({m.client_id}, {m.client_host}) has no partitions")
    for m in group.members:
        if m.member_epoch is not None:
            out.print(f"member {m.member_id} at epoch {m.member_epoch}")


@groups.command()
@click.argument("group_ids", nargs=-1, required=True)
@bootstrap_option
def delete(group_ids, bootstrap):
    """Delete empty groups and their committed offsets."""
    results = _run(bootstrap, lambda admin: admin.delete_groups(list(group_ids)))
    failed = False
    for group_id, code in results.items():
        if code == ErrorCode.NONE:
            out.print(f"deleted group {group_id}")
        else:
            failed = True
            hint = " (stop its consumers first)" if code == ErrorCode.NON_EMPTY_GROUP else ""
            out.print(f"could not delete group {group_id}: {code.name}{hint}")
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

    async def work(admin: AsyncAdminClient):
        state = (await admin.describe_group(group_id)).state
        if execute and state not in ("Empty", "Dead"):
            raise click.ClickException(f"group {group_id} is {state}: stop its consumers before resetting")
        partitions = await _partitions(admin, topic)
        committed = await admin.list_group_offsets(group_id, partitions, require_stable=True)
        start = await admin.list_offsets(dict.fromkeys(partitions, EARLIEST_TIMESTAMP))
        end = await admin.list_offsets(dict.fromkeys(partitions, LATEST_TIMESTAMP))
        plan = {}
        for tp in partitions:
            current = committed[tp].offset if tp in committed else -1
            if mode == "earliest":
                target = start[tp]
            elif mode == "latest":
                target = end[tp]
            elif to_offset is not None:
                target = to_offset
            else:
                target = (current if current >= 0 else start[tp]) + shift_by
            plan[tp] = (current, min(max(target, start[tp]), end[tp]))
        if execute:
            await admin.alter_group_offsets(group_id, {tp: new for tp, (_old, new) in plan.items()})
        return plan

    plan = _run(bootstrap, work)
    table = Table(title=("new offsets of " if execute else "plan (use --execute to commit) for ") + group_id)
    for column in ("topic", "partition", "current", "new"):
        table.add_column(column)
    for (t, p), (old, new) in sorted(plan.items()):
        table.add_row(t, str(p), "-" if old < 0 else str(old), str(new))
    out.print(table)
