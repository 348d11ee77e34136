"""``wait_async`` outside asyncio: under trio (anyio's trio backend too).

The engine's awaitable is granted at once without asking any event loop. When it has to queue,
it needs the running loop's help to wake up: in asyncio that is the loop's bridge; elsewhere the
awaitable hands its wait to ``queued_wait``, whose coroutine queues the request with a
notifier of its own (a pipe, or on Windows a socket, that the engine writes a byte to when it
completes the request) and lets the library wait for it to be readable. Without any running event
loop it is an error, as awaiting an asyncio future is.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any

from . import _core
from ._core import Lease


def in_trio() -> Any:
    """The trio module when this thread runs trio; else RuntimeError (no running event loop)."""
    trio = _in_trio()
    if trio is None:
        raise _no_loop()
    return trio


def _in_trio() -> Any:
    """The trio module when this thread runs trio, else None."""
    trio = sys.modules.get("trio")
    if trio is None:
        return None
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return None
    return trio


def _no_loop() -> RuntimeError:
    return RuntimeError(
        "no running event loop: wait_async() waits in asyncio (or uvloop) or trio; use acquire() or wait() elsewhere"
    )


def queued_wait(owner: Any, key: object, permit_count: int) -> Coroutine[Any, Any, Lease]:
    """The wait of a request that could not be granted at once (called by the engine's awaitable,
    whose coroutine it then drives)."""
    trio = _in_trio()
    if trio is None:
        raise _no_loop()
    return _trio_wait(trio, owner, key, permit_count)


async def sleep(seconds: float) -> None:
    """asyncio.sleep, or trio.sleep under trio: how a custom limiter's default wait pauses."""
    if asyncio._get_running_loop() is not None:  # only on a waiting path: the lookup costs a getpid()
        await asyncio.sleep(seconds)
        return
    trio = _in_trio()
    if trio is None:
        raise _no_loop()
    await trio.sleep(seconds)


async def _trio_wait(trio: Any, owner: Any, key: object, permit_count: int) -> Lease:
    notifier = _core.Notifier()
    queued = (
        owner._enqueue(permit_count, -1, notifier) if key is None else owner._enqueue(key, permit_count, -1, notifier)
    )
    if isinstance(queued, Lease):
        return queued
    try:
        while True:
            # The engine writes the byte once the request's outcome is complete.
            await trio.lowlevel.wait_readable(notifier.fd)
            notifier.drain()
            if queued.done():
                return queued.lease()  # type: ignore[no-any-return]
    except BaseException:
        if not queued.cancel():
            queued.lease()._refund()  # granted meanwhile: nobody will use it
        raise


_core._set_foreign_wait(queued_wait)
