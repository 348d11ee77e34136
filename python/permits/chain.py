"""permits.chain: several limits at once, all or nothing.

Acquires from each limiter in order; at the first failure it gives back what the earlier ones
granted (tokens return to buckets, window counts are decremented while their window or segment
is current, concurrency permits are released) and returns that failed lease, so a rejected
request costs nothing anywhere (unlike .NET's chained limiters). Giving back a lease calls its
``on_refund`` (an undo), not its ``on_release``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, overload

from . import _core, _pausing
from ._core import Lease
from ._durations import timeout_ns
from ._loop_check import blocks_the_loop
from .keyed_limiter import KeyedRateLimiter
from .rate_limiter import RateLimiter, Statistics, _check_permit_count, _no_copies

Member = RateLimiter | KeyedRateLimiter
"""What a chain may hold: plain limiters and keyed ones."""


def _each(leases: Sequence[Lease], give_back: Callable[[Lease], object]) -> list[BaseException]:
    """Gives back every lease, in reverse order, whatever any of them raises (a custom
    limiter's callback: an error, a KeyboardInterrupt, a cancellation); returns what was raised."""
    errors: list[BaseException] = []
    for lease in reversed(leases):
        try:
            give_back(lease)
        except BaseException as exc:
            errors.append(exc)
    return errors


def _refund_all(leases: Sequence[Lease]) -> list[BaseException]:
    return _each(leases, lambda lease: lease._refund())


def _raise_with(errors: list[BaseException], original: BaseException | None) -> None:
    """Raises what went wrong while unwinding: the original error alone if giving back worked;
    an interruption (KeyboardInterrupt, a cancellation...) raised by a callback is raised itself,
    the first if several, once every lease was given back."""
    if not errors:
        if original is not None:
            raise original
        return
    for exc in errors:
        if not isinstance(exc, Exception):
            raise exc
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
        for lease in reversed(leases):  # every one, whatever any raises (as _each; inlined: a hot path)
            try:
                lease.release()
            except BaseException as exc:
                errors.append(exc)
        if errors:
            _raise_with(errors, None)

    def refund_all() -> None:  # the chain's own lease given back (a chain in a chain): undo each
        _raise_with(_refund_all(leases), None)

    def lost() -> bool:  # live: an inner lease the shared state forgot makes the chain's lost
        return any(lease._is_lost() for lease in leases)

    def settle_all(keep: int) -> None:  # every member took the chain's count: each keeps `keep`
        _raise_with(_each(leases, lambda lease: lease.settle(keep)), None)

    return Lease.granted(
        permit_count,
        on_release=release_all,
        on_refund=refund_all,
        metadata=metadata or None,
        lost=lost,
        on_settle=settle_all,
    )


def _acquire_each(
    limiters: Sequence[Any], n: int, step: Callable[[Any], Lease], closed: Callable[[], bool] | None = None
) -> Lease:
    """Asks each limiter in order; the first failure gives back what the earlier ones granted.
    ``closed``: the chain's own close (while a blocking wait was in a member) ends it too."""
    taken: list[Lease] = []
    for limiter in limiters:
        try:
            lease = step(limiter)
        except BaseException as exc:
            _raise_with(_refund_all(taken), exc)
            raise
        if closed is not None and closed():  # the chain's own close: its name, not the member's
            if lease:
                taken.append(lease)
            lease = _pausing.closed_lease(n)
        if not lease:
            _raise_with(_refund_all(taken), None)
            return lease
        taken.append(lease)
    return _combine(taken, n)


async def _await_each(limiters: Sequence[Any], n: int, step: Callable[[Any], Awaitable[Lease]]) -> Lease:
    """The same, awaiting each (an asynchronous attempt, or a wait): each limiter is asked only
    once the previous one granted (a queued wait in the first does not touch the second);
    cancellation gives back what was taken."""
    taken: list[Lease] = []
    for limiter in limiters:
        try:
            lease = await step(limiter)
        except BaseException as exc:
            _raise_with(_refund_all(taken), exc)
            raise
        if not lease:
            _raise_with(_refund_all(taken), None)
            return lease
        taken.append(lease)
    return _combine(taken, n)


def _combined_statistics(stats: Sequence[Statistics]) -> Statistics:
    return Statistics(
        current_available_permits=min(s.current_available_permits for s in stats),
        current_queued_count=sum(s.current_queued_count for s in stats),
        total_successful_leases=stats[-1].total_successful_leases,  # the inner-most limiter's, as .NET
        total_failed_leases=sum(s.total_failed_leases for s in stats),
    )


class _BlockingWaits:
    """A chain's blocking waits in progress, each in a ``CancelScope``: the chain's close cancels
    them, so a wait blocked in a member (an engine queue, a pause between attempts) ends at once."""

    def __init__(self) -> None:
        self._scopes: set[_core.CancelScope] = set()

    def run(self, closed: Callable[[], bool], wait: Callable[[], Lease]) -> Lease:
        scope = _core.CancelScope()
        self._scopes.add(scope)
        try:
            if closed():  # closed after the caller's check, before the scope was seen: end it now
                scope.cancel()
            with scope:
                return wait()
        finally:
            self._scopes.discard(scope)

    def cancel_all(self) -> None:
        for scope in list(self._scopes):
            scope.cancel()
        _pausing.wake_all()  # a member pausing between attempts looks again, and sees the scope


class _Deadline:
    """A chain's blocking wait: how long each next limiter may still wait, measured on that
    limiter's own clock (a ManualClock in tests: timeouts run on the limiter's clock)."""

    def __init__(self, timeout: float | None, limiters: Sequence[Member]) -> None:
        limit = timeout_ns(timeout)
        self._limit = None if limit < 0 else limit
        self._starts: dict[int, tuple[_core.Clock, int]] = {}
        if self._limit is not None:
            for limiter in limiters:
                clock = limiter._rl_clock
                self._starts[id(limiter)] = (clock, clock.now_ns())

    def left(self, limiter: Member) -> float | None:
        if self._limit is None:
            return None
        clock, start = self._starts[id(limiter)]
        return max(0, self._limit - (clock.now_ns() - start)) / 1e9


class ChainedLimiter(RateLimiter):
    """What ``chain`` returns for plain limiters."""

    __reduce_ex__ = _no_copies

    def __init__(self, limiters: Sequence[RateLimiter], *, name: str | None = None) -> None:
        super().__init__(name=name, clock=limiters[0]._rl_clock)
        self._limiters = tuple(limiters)
        self._blocking = _BlockingWaits()

    @property
    def limiters(self) -> tuple[RateLimiter, ...]:
        """The chained limiters, in the order they are asked."""
        return self._limiters

    def _acquire(self, permit_count: int) -> Lease:
        return _acquire_each(self._limiters, permit_count, lambda limiter: limiter.acquire(permit_count))

    async def _acquire_async(self, permit_count: int) -> Lease:
        return await _await_each(self._limiters, permit_count, lambda limiter: limiter.acquire_async(permit_count))

    async def _wait_async(self, permit_count: int) -> Lease:
        return await _await_each(self._limiters, permit_count, lambda limiter: limiter.wait_async(permit_count))

    def _statistics(self) -> Statistics:
        return _combined_statistics([limiter.statistics() for limiter in self._limiters])

    def wait(self, permit_count: int = 1, timeout: float | None = None) -> Lease:
        """Blocks the calling thread until every limiter has granted ``permit_count`` permits, and
        returns one lease for all; each limiter is waited for in turn, holding what the earlier ones
        granted.

        ``timeout`` (seconds; None: as long as it takes) bounds the whole wait, each limiter's part
        measured on that limiter's clock. A limiter's failure (``"timeout"``, ``"queue_full"``...)
        gives back what the earlier ones granted and is returned; closing the chain meanwhile ends
        the wait with reason ``"closed"``. Raises ``ValueError`` for a bad ``permit_count``,
        ``LimiterClosedError`` if the chain is closed already.
        """
        blocks_the_loop(timeout)
        n = _check_permit_count(permit_count)
        deadline = _Deadline(timeout, self._limiters)
        self._check_open()
        closed = lambda: self._rl_closed  # noqa: E731
        # (checked: a close of the chain itself names the chain; a member's failure names the member)
        lease = self._blocking.run(
            closed,
            lambda: _acquire_each(self._limiters, n, lambda limiter: limiter.wait(n, deadline.left(limiter)), closed),
        )
        return self._rl_checked(lease, n, "wait")

    @property
    def idle_duration(self) -> float | None:
        """The shortest idle duration; None while any limiter is in use."""
        self._check_open()
        durations = [limiter.idle_duration for limiter in self._limiters]
        if any(d is None for d in durations):
            return None
        return min(d for d in durations if d is not None)

    def try_replenish(self) -> bool:
        """Calls every limiter's ``try_replenish()``; True if any of them replenished (those made
        with ``auto_replenishment=False``). Raises ``LimiterClosedError`` after ``close()``."""
        self._check_open()
        replenished = False
        for limiter in self._limiters:
            replenished = limiter.try_replenish() or replenished
        return replenished

    def close(self) -> None:
        """Closes the chain only: the limiters in it stay open (they may be shared). Its pending
        waits end at once with a failed lease, reason "closed" (what they took is given back)."""
        self._rl_mark_closed()
        self._blocking.cancel_all()

    def __repr__(self) -> str:
        return f"<ChainedLimiter of {len(self._limiters)} limiters>"


class ChainedPartitionedLimiter(KeyedRateLimiter):
    """What ``chain`` returns when any of its limiters is keyed: a keyed limiter whose every
    member takes the resource first; keyed members get it, plain ones ignore it. It keeps no
    partitions of its own: ``partition_count`` and ``evict_idle`` add up those of its keyed members."""

    __reduce_ex__ = _no_copies

    def __init__(self, limiters: Sequence[Member], *, name: str | None = None) -> None:
        super().__init__(name=name, clock=limiters[0]._rl_clock)
        self._limiters = tuple(limiters)
        self.idle_timeout = None
        """None: the chain evicts nothing itself; its keyed members have their own idle timeouts."""
        self.max_partitions = None
        """None: the chain bounds nothing itself; its keyed members have their own bounds."""
        self._blocking = _BlockingWaits()

    @property
    def limiters(self) -> tuple[Member, ...]:
        """The chained limiters, in the order they are asked."""
        return self._limiters

    @property
    def partition_count(self) -> int:
        """The live partitions of the keyed members, added up (plain members have none)."""
        return sum(lim.partition_count for lim in self._limiters if isinstance(lim, KeyedRateLimiter))

    def evict_idle(self) -> int:
        """Every keyed member's evict_idle(); one member's errors do not stop the others."""
        evicted = 0
        errors: list[Exception] = []
        for lim in self._limiters:
            if isinstance(lim, KeyedRateLimiter):
                try:
                    evicted += lim.evict_idle()
                except Exception as exc:
                    errors.append(exc)
        if errors:
            raise ExceptionGroup("errors while closing evicted partitions", errors)
        return evicted

    def _reset(self, resource: object) -> None:
        # The keyed members' state of the key; a plain member's limit is everybody's, not the key's.
        for lim in self._limiters:
            if isinstance(lim, KeyedRateLimiter):
                lim.reset(resource)

    def _acquire(self, resource: object, permit_count: int) -> Lease:
        def step(lim: Member) -> Lease:
            if isinstance(lim, KeyedRateLimiter):
                return lim.acquire(resource, permit_count)
            return lim.acquire(permit_count)

        return _acquire_each(self._limiters, permit_count, step)

    async def _acquire_async(self, resource: object, permit_count: int) -> Lease:
        def step(lim: Member) -> Awaitable[Lease]:
            if isinstance(lim, KeyedRateLimiter):
                return lim.acquire_async(resource, permit_count)
            return lim.acquire_async(permit_count)

        return await _await_each(self._limiters, permit_count, step)

    async def _wait_async(self, resource: object, permit_count: int) -> Lease:
        def step(lim: Member) -> Awaitable[Lease]:
            if isinstance(lim, KeyedRateLimiter):
                return lim.wait_async(resource, permit_count)
            return lim.wait_async(permit_count)

        return await _await_each(self._limiters, permit_count, step)

    def _statistics(self, resource: object) -> Statistics:
        return _combined_statistics(
            [
                lim.statistics(resource) if isinstance(lim, KeyedRateLimiter) else lim.statistics()
                for lim in self._limiters
            ]
        )

    def wait(self, resource: object, permit_count: int = 1, timeout: float | None = None) -> Lease:
        """As ``ChainedLimiter.wait``, for ``resource``: the keyed members wait for its
        permits, the plain ones for their own."""
        blocks_the_loop(timeout)
        n = _check_permit_count(permit_count)
        deadline = _Deadline(timeout, self._limiters)
        self._check_open()

        def step(lim: Member) -> Lease:
            left = deadline.left(lim)
            return lim.wait(resource, n, left) if isinstance(lim, KeyedRateLimiter) else lim.wait(n, left)

        closed = lambda: self._rl_closed  # noqa: E731
        lease = self._blocking.run(closed, lambda: _acquire_each(self._limiters, n, step, closed))
        return self._rl_checked(lease, n, "wait")

    def close(self) -> None:
        """Closes the chain only (as ``ChainedLimiter.close``): its pending waits end at once."""
        self._rl_mark_closed()
        self._blocking.cancel_all()

    def __repr__(self) -> str:
        return f"<ChainedPartitionedLimiter of {len(self._limiters)} limiters>"


@overload
def chain(*limiters: RateLimiter, name: str | None = None) -> ChainedLimiter: ...  # type: ignore[overload-overlap]
@overload
def chain(*limiters: Member, name: str | None = None) -> ChainedPartitionedLimiter: ...


# Typed by overloads: chain(a, b).acquire("key") type-checks when any member is keyed.
def chain(*limiters: Member, name: str | None = None) -> ChainedLimiter | ChainedPartitionedLimiter:
    """Acquires from each limiter in order, all or nothing: a rejection by a later limiter gives
    back what the earlier ones granted. The combined lease releases them in reverse order.
    With any keyed limiter in it, the chain takes the resource first, as they do. ``name`` names
    the chain (a failed lease of its own, such as one ended by its close, and its metrics); a
    member's refusal names that member."""
    if not limiters:
        raise ValueError("chain() needs at least one limiter")
    for i, limiter in enumerate(limiters):
        if not isinstance(limiter, (RateLimiter, KeyedRateLimiter)):
            raise TypeError(
                f"chain() argument {i} must be a permits.RateLimiter or KeyedRateLimiter, got {type(limiter).__name__}"
            )
    if any(isinstance(limiter, KeyedRateLimiter) for limiter in limiters):
        return ChainedPartitionedLimiter(limiters, name=name)
    return ChainedLimiter(limiters, name=name)  # type: ignore[arg-type]


__all__ = ["ChainedLimiter", "ChainedPartitionedLimiter", "chain"]
