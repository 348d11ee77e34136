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
from ._http_policy import DISCONNECTS, Policy, wait_or_leave
from .keyed_limiter import KeyedRateLimiter

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]

#: The most of a waiting request's body the watcher reads: past it, it stops reading until the
#: permit comes (the server's flow control then stops reading the socket: the rest of an upload
#: waits in the client, not in the server's memory).
BODY_LIMIT = 64 * 1024
#: What a message costs besides its body (the dict itself), so that empty messages are bounded too.
MESSAGE_COST = 256


def at_once(policy: Policy, key: object) -> Lease | None:
    """The wait's immediate outcome, as its first step would give it (a grant, or a failure no
    wait can cure), without a task or an event loop round trip; None when the request must queue."""
    limiter = policy.limiter
    if isinstance(limiter, KeyedRateLimiter):
        return limiter._try_now(key, policy.permit_count)
    return limiter._try_now(policy.permit_count)


async def acquire_or_leave(policy: Policy, key: object, receive: Receive, held: deque[Message]) -> Lease | None:
    """The lease of a ``wait=True`` request, or None when the client left while queued. What the
    watcher read is in ``held``, for the application (``replaying``)."""
    lease = at_once(policy, key)
    if lease is not None:
        return lease
    return await wait_or_leave(policy.acquire(key), watch(receive, held))


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


__all__ = ["BODY_LIMIT", "acquire_or_leave", "at_once", "replaying", "watch"]
