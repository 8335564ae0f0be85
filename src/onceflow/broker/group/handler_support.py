"""Glue between the sans-IO coordinator and the asyncio handlers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from onceflow.broker.group.coordinator import OffsetCommitEntry
from onceflow.protocol.errors import ErrorCode

T = TypeVar("T")

# Kafka reports member hosts in this form ("/" and the address); for requests without a connection.
CLIENT_HOST = "/127.0.0.1"


def client_host(ctx: Any) -> str:
    """The member host Kafka reports: "/" and the client's address."""
    host = ctx.session.client_host
    return f"/{host}" if host else CLIENT_HOST


async def await_callback(start: Callable[[Callable[[T], None]], None]) -> T:
    """Run ``start(respond)`` and wait until the coordinator calls ``respond`` (maybe at once).

    If the client goes away first, this task is cancelled and the later ``respond`` is ignored.
    """
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def respond(result: T) -> None:
        if not future.done():
            future.set_result(result)

    start(respond)
    return await future


def requested_offsets(request: Any, with_leader_epoch: bool) -> dict[tuple[str, int], OffsetCommitEntry]:
    """The offsets an OffsetCommit or TxnOffsetCommit request asks to store, by (topic, partition).

    ``with_leader_epoch`` is False for the versions that carry no committed leader epoch (-1 then).
    """
    return {
        (t.name, p.partition_index): OffsetCommitEntry(
            offset=p.committed_offset,
            leader_epoch=p.committed_leader_epoch if with_leader_epoch else -1,
            metadata=p.committed_metadata,
        )
        for t in request.topics or []
        for p in t.partitions or []
    }


def offset_commit_topics(
    request: Any, top: ErrorCode, per_partition: dict, topic_type: type, partition_type: type
) -> list:
    """The response topics of an (Txn)OffsetCommit: every requested partition, with the request-wide
    error ``top`` if there is one, else its own code from ``per_partition`` (NONE if absent)."""
    return [
        topic_type(
            name=t.name,
            partitions=[
                partition_type(
                    partition_index=p.partition_index,
                    error_code=int(
                        top
                        if top is not ErrorCode.NONE
                        else per_partition.get((t.name, p.partition_index), ErrorCode.NONE)
                    ),
                )
                for p in t.partitions or []
            ],
        )
        for t in request.topics or []
    ]
