"""``PartitionedLimiter.wait_async``'s awaitable: a request that must queue waits on its partition's
limiter's own awaitable when that limiter is one of the engine's.

The general path (``PolledLeaseWait``) runs the partition's wait in a coroutine watched for this
limiter's close (``_pausing.closable``): a Python frame per step and a waker that every
``_pausing.wake_all`` calls, so a ``ManualClock`` advance or any limiter's close cost time in
proportion to every wait queued (benchmarks/bench_async.py --partitioned). An engine limiter needs
neither: the task waits on the engine's awaitable (``yield from``), whose cancellation takes the
request out of the queue and gives back a grant not handed over, and which the partition's close
(``PartitionedLimiter.close`` closes every partition) ends at once with a failed lease, reason
``"closed"``. Any other partition limiter (custom, instrumented, a subclass) waits the general way.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from . import _pausing
from ._core import Lease, LimiterClosedError
from .awaitables import PolledLeaseWait, WaitsOnce
from .engine_limiters import (
    ConcurrencyLimiter,
    FixedWindowLimiter,
    SlidingLogLimiter,
    SlidingWindowCounterLimiter,
    SlidingWindowLimiter,
    TokenBucketLimiter,
)
from .keyed_limiter import _OneResource

if TYPE_CHECKING:
    from .partitioned import PartitionedLimiter

#: The exact classes whose close ends their queued waits and whose wait_async is the engine's own
#: (a subclass may override either: it waits the general way).
ENGINE_TYPES = frozenset(
    {
        ConcurrencyLimiter,
        TokenBucketLimiter,
        FixedWindowLimiter,
        SlidingWindowLimiter,
        SlidingLogLimiter,
        SlidingWindowCounterLimiter,
    }
)


class PartitionWait(WaitsOnce):
    """Waits once, as every ``wait_async``'s awaitable: awaiting it again raises RuntimeError. Also
    an async context manager releasing the lease on exit."""

    __slots__ = ("_owner", "_permit_count", "_resource")

    def __init__(self, owner: PartitionedLimiter, resource: object, permit_count: int) -> None:
        super().__init__()
        self._owner = owner
        self._resource = resource
        self._permit_count = permit_count

    def __await__(self) -> Generator[Any, None, Lease]:
        self._start()
        owner, resource, n = self._owner, self._resource, self._permit_count
        while True:
            found = owner._entry(resource)
            if found is None:
                return owner._partition_limit(n)
            key, entry = found
            limiter = entry.limiter
            if type(limiter) not in ENGINE_TYPES:
                return (yield from PolledLeaseWait(_OneResource(owner, resource), n).__await__())
            assert limiter is not None
            # As PolledLeaseWait: an immediate outcome (no event loop asked, none counted again),
            # then the wait; each as PartitionedLimiter's _try_now and _wait_async judge a
            # partition evicted (and closed) meanwhile: the key's new limiter is asked.
            try:
                lease = limiter._try_now(n)
                if lease is None:
                    lease = yield from limiter.wait_async(n).__await__()
                    if lease or lease.reason != "closed":
                        return owner._rl_waited(lease, n, resource)
                    if owner._rl_closed:  # ended by this limiter's close: named as this limiter, as ever
                        return owner._rl_waited(_pausing.closed_lease(n), n, resource)
                    if not owner._superseded(key, entry):
                        return owner._rl_waited(lease, n, resource)
                    continue
            except LimiterClosedError:
                if owner._superseded(key, entry):
                    continue
                raise
            if not lease or owner._entries.get(key) is entry:
                return lease
            lease._refund()
