"""Awaiting the runtime's commit callbacks from the broker's event loop.

The runtime is sans-IO: it calls back when a partition is committed up to an offset. Handlers and the
transaction coordinator await that here. On one broker every append is committed when it returns, so
the usual case returns without creating a future.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from onceflow.broker.coordinator.runtime import CoordinatorRuntime
from onceflow.protocol.errors import KafkaError

T = TypeVar("T")


async def committed(runtime: CoordinatorRuntime, partition: int, offset: int | None = None) -> None:
    """Return once ``partition`` is committed up to ``offset`` (default: everything written to it
    so far); raise NOT_COORDINATOR if the partition is unloaded first."""
    if offset is None:
        offset = runtime.last_written_offset(partition)
    if runtime.is_committed(partition, offset):
        return
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(error: KafkaError | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)

    runtime.when_committed(partition, offset, done)
    await future


async def once_committed(runtime: CoordinatorRuntime, partition: int, call: Callable[[], T]) -> T:
    """Run ``call`` (an operation, or a read, of ``partition``) and return its answer once all it
    wrote, and all written before it, is committed: no client hears of an uncommitted state."""
    answer = call()
    await committed(runtime, partition)
    return answer
