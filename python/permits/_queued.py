"""A request that waits for its permit (``wait=True``): a free permit is taken at once, with no
task and no watcher; a request that must queue is watched (ASGI middleware, FastAPI dependency)
to notice its client leaving, without holding more than ``BODY_LIMIT`` of its body and without
spinning on a ``receive()`` that never suspends."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ._core import Lease
from ._http_policy import DISCONNECTS, Policy

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]

#: The most of a waiting request's body the watcher reads: past it, it stops reading until the
#: permit comes (the server's flow control then stops reading the socket: the rest of an upload
#: waits in the client, not in the server's memory).
BODY_LIMIT = 64 * 1024
#: What a message costs besides its body (the dict itself), so that empty messages are bounded too.
MESSAGE_COST = 256


async def acquire_or_leave(policy: Policy, key: object, receive: Receive | None, held: deque[Message]) -> Lease | None:
    """The lease of a ``wait=True`` request (a failed one past ``max_queued`` or ``timeout``), or
    None when the client left while queued. What the watcher read is in ``held``, for the
    application (``replaying``); without a ``receive`` nothing is watched."""
    lease = policy.at_once(key)
    if lease is not None:
        return lease
    if receive is None:
        return await policy.wait_queued(key, _forever)
    return await policy.wait_queued(key, lambda: watch(receive, held))


async def _forever() -> None:
    await asyncio.get_running_loop().create_future()


async def watch(receive: Receive, held: deque[Message]) -> None:
    """Returns when the client disconnects. Reads (keeping each message in ``held``) only while
    that stays bounded; then holds on, reading nothing more, until cancelled (the permit came)."""
    cost = 0
    complete = False
    while cost < BODY_LIMIT:
        message = await receive()
        held.append(message)
        kind = message.get("type")
        if kind in DISCONNECTS:
            return
        if complete:
            # After a request's last message a server's receive() waits for the disconnect: one
            # that answers again is not the socket's (an outer middleware replaying the body), and
            # reading it on would spin.
            break
        complete = kind == "websocket.connect" or (kind == "http.request" and not message.get("more_body", False))
        body = message.get("body")
        cost += MESSAGE_COST + (len(body) if isinstance(body, bytes | bytearray) else 0)
    await asyncio.get_running_loop().create_future()  # never set: cancelled when the wait ends


def replaying(held: deque[Message], receive: Receive) -> Receive:
    """``receive`` giving first the messages the watcher read, in order."""
    if not held:
        return receive

    async def replay() -> Message:
        return held.popleft() if held else await receive()

    return replay


__all__ = ["BODY_LIMIT", "acquire_or_leave", "replaying", "watch"]
