"""RateLimiter: the interface of every limiter, and what a custom limiter written in Python subclasses."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import EllipsisType
from typing import TYPE_CHECKING, Any, NoReturn

from . import _polling
from ._core import Lease
from ._durations import timeout_ns
from ._limiter_base import LimiterBase
from ._loop_check import blocks_the_loop
from .awaitables import Attempt, LeaseWait, PolledLeaseWait

if TYPE_CHECKING:
    from .specs import Spec


class QueueOrder(enum.Enum):
    """Which queued request is served first when permits come back."""

    OLDEST_FIRST = 0
    """First in, first out: a request that cannot be granted at once waits behind those queued
    before it, and no later request takes permits ahead of them."""
    NEWEST_FIRST = 1
    """Last in, first out: the newest request is served first; when the queue is full, a new request
    pushes the oldest queued ones out (their waits end with reason ``"evicted"``)."""


@dataclass(frozen=True)
class Statistics:
    """A snapshot of a limiter's counters (a new object on every call)."""

    current_available_permits: int
    """Permits a request could take now."""
    current_queued_count: int
    """Permits (not requests) waiting in the queue."""
    total_successful_leases: int
    """Leases granted since construction, at once or from the queue."""
    total_failed_leases: int
    """Failed leases since construction; timeouts, cancellations and close are not counted."""


def _check_permit_count(permit_count: object) -> int:
    if isinstance(permit_count, bool) or not isinstance(permit_count, int):
        raise TypeError(f"permit_count must be an int, got {type(permit_count).__name__}")
    n = int.__int__(permit_count)  # a subclass's own comparisons cannot sneak a bad value past
    if n < 0:
        raise ValueError(f"permit_count must not be negative, got {n}")
    if n > 2**63 - 1:
        raise ValueError(f"permit_count is too large: {n}")
    return n


def _no_copies(self: object, protocol: object = None) -> NoReturn:
    """__reduce_ex__ of the limiters that refuse copies: a copy would share the original's state
    (partitions, members) and could close it, or count apart from it."""
    raise TypeError(f"cannot copy or pickle {type(self).__name__!r} object: share the limiter itself")


class RateLimiter(LimiterBase):
    """The interface of every limiter.

    A custom limiter subclasses it, calls ``super().__init__()`` and implements
    ``_acquire(permit_count) -> Lease``; optionally ``_acquire_async`` (a coroutine: a limiter
    that asks a server over the network), ``_wait_async``, ``_statistics`` and ``idle_duration``.
    The public members validate their arguments, then call these hooks.
    """

    # ---- hooks for custom limiters ----
    def _acquire(self, permit_count: int) -> Lease:
        raise NotImplementedError(f"{type(self).__name__} must implement _acquire(permit_count)")

    async def _acquire_async(self, permit_count: int) -> Lease:
        """The attempt of ``acquire_async``; by default ``_acquire``'s."""
        return self._acquire(permit_count)

    async def _wait_async(self, permit_count: int) -> Lease:
        # Ask through _acquire_async, pause for the lease's retry_after (or a short pause), ask
        # again; a denial that waiting cannot cure (a full queue...) or a close ends the wait.
        async def attempt() -> Lease:
            return self._rl_checked(await self._acquire_async(permit_count), permit_count, "_acquire_async")

        return await _polling.wait_async(attempt, lambda: self._rl_closed, permit_count, self._rl_clock)

    def _try_now(self, permit_count: int) -> Lease | None:
        """A wait's immediate grant, made without an event loop; None sends the wait to
        ``_wait_async`` (which then makes the first attempt too)."""
        return None

    def _statistics(self) -> Statistics:
        return Statistics(0, 0, self._rl_tally.granted, self._rl_tally.refused)

    # ---- the public API ----
    def _rl_count(self, lease: Lease) -> Lease:
        if lease:
            self._rl_tally.grant()
        elif _polling.counts(lease):
            self._rl_tally.refuse()
        return lease

    def _rl_counted(self, lease: object, permit_count: int, hook: str = "_acquire") -> Lease:
        return self._rl_count(self._rl_checked(lease, permit_count, hook))

    def _rl_waited(self, lease: object, permit_count: int) -> Lease:
        """The outcome of a wait_async, whichever hook made it: checked, counted once."""
        if lease.__class__ is Lease and lease:  # the common case, without the calls below
            self._rl_tally.grant()
            return lease
        return self._rl_counted(lease, permit_count, "_wait_async")

    def acquire(self, permit_count: int = 1) -> Lease:
        """Takes permits now or returns a failed lease; never blocks, never queues."""
        n = _check_permit_count(permit_count)
        self._check_open()
        return self._rl_counted(self._acquire(n), n)

    def acquire_async(self, permit_count: int = 1) -> LeaseWait:
        """The same attempt as ``acquire``, as an awaitable that asks through
        ``_acquire_async`` (so a limiter asking a server never blocks the event loop)."""
        n = _check_permit_count(permit_count)
        self._check_open()

        async def attempt() -> Lease:
            self._check_open()
            return self._rl_counted(await self._acquire_async(n), n, "_acquire_async")

        return Attempt(attempt)

    def wait(self, permit_count: int = 1, timeout: float | None = None) -> Lease:
        """Blocks until acquired, rejected, timed out (reason "timeout") or closed."""
        blocks_the_loop(timeout)
        n = _check_permit_count(permit_count)
        limit = timeout_ns(timeout)
        self._check_open()
        attempt = lambda: self._rl_checked(self._acquire(n), n)  # noqa: E731
        # (checked again: the wait's own "timeout" or "closed" names this limiter too)
        return self._rl_counted(_polling.wait(attempt, lambda: self._rl_closed, n, limit, self._rl_clock), n, "wait")

    def wait_async(self, permit_count: int = 1) -> LeaseWait:
        """Waits in the queue (asyncio). Also an async context manager releasing the lease on exit."""
        n = _check_permit_count(permit_count)
        self._check_open()
        return PolledLeaseWait(self, n)

    def _rl_block_wait(self) -> Lease:
        return self.wait()

    async def _rl_block_wait_async(self) -> Lease:
        return await self.wait_async()

    def available_permits(self) -> int:
        """The permits a request could take now: ``statistics().current_available_permits``."""
        return self.statistics().current_available_permits

    def statistics(self) -> Statistics:
        """A snapshot of the limiter's counters; raises ``LimiterClosedError`` after ``close()``. A custom
        limiter without ``_statistics`` reports its own grant and failure counts, 0 available and 0 queued."""
        self._check_open()
        return self._statistics()

    @property
    def idle_duration(self) -> float | None:
        """Seconds since the limiter became fully idle; None while in use (custom: never idle)."""
        return None

    def try_replenish(self) -> bool:
        """In manual mode (``auto_replenishment=False``) applies the replenishment due and returns True;
        False where there is nothing to do by hand. This default, a custom limiter's, returns False."""
        return False

    def reconfigure(
        self,
        spec: Spec[Any] | str,
        *,
        queue_limit: int | EllipsisType | None = ...,
        queue_order: QueueOrder | EllipsisType = ...,
    ) -> None:
        """Makes ``spec``'s limit this limiter's from now on, without losing its state or its waiters:
        what is taken stays taken (a lower limit holds as permits come back, a higher one adds the
        difference at once) and queued requests are served from the new limit. ``queue_limit`` and
        ``queue_order`` change the queue too (``...``: as they are); the requests queued beyond a new
        ``queue_limit`` (those that would be served last) fail with ``"queue_full"``, and those asking
        for more than the new limit with ``"limit_reached"``. ``spec`` (or a rate such as "10/second")
        is of the limiter's kind, with its window (period, segments): ``TypeError`` or ``ValueError``
        otherwise, and nothing changes.
        A request deciding as the limit changes is decided under the old or the new one. Raises
        ``LimiterClosedError`` once closed; ``NotImplementedError`` for a limiter that cannot change
        (a custom one without ``_reconfigure``)."""
        self._check_open()
        self._reconfigure(self._spec_given(spec), queue_limit, queue_order)

    def _reconfigure(self, spec: object, queue_limit: object, queue_order: object) -> None:
        """What ``reconfigure`` does: a custom limiter whose limit can change overrides it."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot be reconfigured: "
            "it implements no _reconfigure(spec, queue_limit, queue_order)"
        )
