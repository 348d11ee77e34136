"""permits.chain: several limits at once, all or nothing.

Acquires from each limiter in order; at the first failure it gives back what the earlier ones
granted (tokens return to buckets, window counts are decremented while their window or segment
is current, concurrency permits are released) and returns that failed lease, so a rejected
request costs nothing anywhere (semantics.md item 8, unlike .NET's chained limiters).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence

from ._core import Lease, LimiterClosedError
from ._durations import timeout_ns
from .limiter import RateLimiter, Statistics, WaitAsync, _check_permit_count, _Ready


def _give_back_all(leases: Sequence[Lease]) -> list[BaseException]:
    """Gives back granted leases in reverse order, attempting every one; returns the errors."""
    errors: list[BaseException] = []
    for lease in reversed(leases):
        try:
            lease._give_back()
        except Exception as exc:  # a custom limiter's on_release may raise
            errors.append(exc)
    return errors


def _raise_with(errors: list[BaseException], original: BaseException | None) -> None:
    """Raises what went wrong while unwinding: the original error alone if giving back worked."""
    if not errors:
        if original is not None:
            raise original
        return
    group = [*errors, *([original] if original is not None else [])]
    raise BaseExceptionGroup("errors while giving back the permits of a chain", group)


def _combine(leases: Sequence[Lease], permit_count: int) -> Lease:
    """One lease for all: metadata from the first inner lease that has each name; release()
    releases the inner leases in reverse order."""
    metadata: dict[str, object] = {}
    for lease in leases:
        for key, value in lease.metadata.items():
            metadata.setdefault(key, value)

    def release_all() -> None:
        errors: list[BaseException] = []
        for lease in reversed(leases):
            try:
                lease.release()
            except Exception as exc:
                errors.append(exc)
        _raise_with(errors, None)

    return Lease.granted(permit_count, on_release=release_all, metadata=metadata or None)


class ChainedLimiter(RateLimiter):
    """What :func:`chain` returns for plain limiters."""

    def __init__(self, limiters: Sequence[RateLimiter], *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._limiters = tuple(limiters)

    @property
    def limiters(self) -> tuple[RateLimiter, ...]:
        return self._limiters

    def _unwind(self, taken: list[Lease], original: BaseException | None) -> None:
        _raise_with(_give_back_all(taken), original)

    def acquire(self, permit_count: int = 1) -> Lease:
        n = _check_permit_count(permit_count)
        self._check_open()
        return self._each(n, lambda limiter: limiter.acquire(n))

    def acquire_async(self, permit_count: int = 1) -> Awaitable[Lease]:
        return _Ready(self.acquire(permit_count))

    def wait(self, permit_count: int = 1, timeout: float | None = None) -> Lease:
        n = _check_permit_count(permit_count)
        limit = timeout_ns(timeout)
        self._check_open()
        deadline = None if limit < 0 else time.monotonic() + limit / 1e9

        def step(limiter: RateLimiter) -> Lease:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            return limiter.wait(n, left)

        return self._each(n, step)

    def _each(self, n: int, step: Callable[[RateLimiter], Lease]) -> Lease:
        taken: list[Lease] = []
        for limiter in self._limiters:
            try:
                lease = step(limiter)
            except BaseException as exc:
                self._unwind(taken, exc)
                raise
            if not lease:
                self._unwind(taken, None)
                return lease
            taken.append(lease)
        return _combine(taken, n)

    def wait_async(self, permit_count: int = 1) -> WaitAsync:
        _check_permit_count(permit_count)
        self._check_open()
        return WaitAsync(self, permit_count)

    async def _wait_async(self, permit_count: int) -> Lease:
        # Each limiter is asked only once the previous one granted (a queued wait in the first
        # does not touch the second); cancellation gives back what was taken.
        taken: list[Lease] = []
        for limiter in self._limiters:
            try:
                lease = await limiter.wait_async(permit_count)
            except BaseException as exc:
                self._unwind(taken, exc)
                raise
            if not lease:
                self._unwind(taken, None)
                return lease
            taken.append(lease)
        return _combine(taken, permit_count)

    def available_permits(self) -> int:
        return self.statistics().current_available_permits

    def statistics(self) -> Statistics:
        self._check_open()
        stats = [limiter.statistics() for limiter in self._limiters]
        return Statistics(
            current_available_permits=min(s.current_available_permits for s in stats),
            current_queued_count=sum(s.current_queued_count for s in stats),
            total_successful_leases=stats[-1].total_successful_leases,  # the inner-most limiter's, as .NET
            total_failed_leases=sum(s.total_failed_leases for s in stats),
        )

    @property
    def idle_duration(self) -> float | None:
        """The shortest idle duration; None while any limiter is in use."""
        self._check_open()
        durations = [limiter.idle_duration for limiter in self._limiters]
        if any(d is None for d in durations):
            return None
        return min(d for d in durations if d is not None)

    def try_replenish(self) -> bool:
        self._check_open()
        replenished = False
        for limiter in self._limiters:
            replenished = limiter.try_replenish() or replenished
        return replenished

    def close(self) -> None:
        """Closes the chain only: the limiters in it stay open (they may be shared)."""
        self._rl_closed = True

    def __repr__(self) -> str:
        return f"<ChainedLimiter of {len(self._limiters)} limiters>"


def chain(*limiters: RateLimiter) -> ChainedLimiter:
    """Acquires from each limiter in order, all or nothing: a rejection by a later limiter gives
    back what the earlier ones granted. The combined lease releases them in reverse order."""
    if not limiters:
        raise ValueError("chain() needs at least one limiter")
    for i, limiter in enumerate(limiters):
        if not isinstance(limiter, RateLimiter):
            raise TypeError(f"chain() argument {i} must be a permits.RateLimiter, got {type(limiter).__name__}")
    return ChainedLimiter(limiters)


__all__ = ["ChainedLimiter", "LimiterClosedError", "chain"]
