"""Glue between the sans-IO coordinator and the asyncio handlers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# The broker listens on loopback only; Kafka reports member hosts in this form.
CLIENT_HOST = "/127.0.0.1"


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


def no_coordinator(ctx: Any) -> bool:
    """True when the broker runs without a group coordinator (tests of other layers)."""
    return ctx.groups is None
