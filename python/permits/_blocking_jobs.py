"""The blocking wait of a sync job (``@permits.limit`` on a plain function or a generator function,
``throttle`` of a plain iterable), which must never deadlock an event loop.

A sync job called from a coroutine runs on the loop's thread: while it blocks, nothing else on
that loop runs. If the permit it waits for is held by a task of that loop (a concurrency permit,
which only its holder's release brings back), that release never comes: the loop hangs for
good. The wait cannot tell that holder from one on another thread, so on a running loop's thread
it does not wait for a permit only a release can bring back: it raises, and says to use the async
form. A permit that time brings back (a rate limit's) is waited for, as before: that wait ends.
"""

from __future__ import annotations

import asyncio

from ._core import Lease
from ._pacing import Pacer
from .keyed_limiter import KeyedRateLimiter

_WOULD_DEADLOCK = (
    "{what} would block the running event loop's thread until a permit of {limiter!r} is released "
    "(it has none free, and time will not free one), and the holder may be a task of this very loop, "
    "which cannot run while the loop is blocked: a deadlock. From a coroutine, use the async form "
    "({async_form}), or run the call in a thread (await asyncio.to_thread(...))"
)


def wait(pacer: Pacer, key: object, permit_count: int, what: str, async_form: str) -> Lease:
    """``pacer.wait(key, permit_count)``; on a running event loop's thread, a ``RuntimeError``
    instead of a wait that only a release could end. ``what`` and ``async_form`` name the job and
    what to use instead, for the error."""
    if asyncio._get_running_loop() is None:  # (no loop on this thread: blocking blocks no one else)
        return pacer.wait(key, permit_count)
    limiter = pacer.limiter
    if isinstance(limiter, KeyedRateLimiter):
        lease = limiter.acquire(key, permit_count)
    else:
        lease = limiter.acquire(permit_count)
    if lease:
        return lease
    if lease.retry_after is None:
        raise RuntimeError(_WOULD_DEADLOCK.format(what=what, limiter=limiter, async_form=async_form))
    return pacer.wait(key, permit_count)


__all__ = ["wait"]
