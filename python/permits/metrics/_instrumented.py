"""The limiters instrument() returns: the limiter itself seen through an Observer. Each member
passes to the limiter it wraps; a granted lease comes back wrapped (same permit_count and
metadata) so that its release is seen. The limiter itself is untouched: one not instrumented
pays nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .._core import Lease, LimiterClosedError, Tally
from .._loop_check import blocks_the_loop
from ..awaitables import Attempt, LeaseWait
from ..keyed_limiter import KeyedRateLimiter
from ..rate_limiter import RateLimiter, Statistics, _check_permit_count
from ._observer import Observer


def _closed(limiter: Any) -> bool:
    # The engine's limiters say so in `closed`; the others in the flag their base keeps.
    return bool(getattr(limiter, "closed", False) or getattr(limiter, "_rl_closed", False))


class _Instrumented:
    """What both wrappers share: the wrapped limiter's other members, read through."""

    __wrapped__: Any
    _observer: Observer

    def __init__(self, limiter: RateLimiter | KeyedRateLimiter, observer: Observer) -> None:
        # Not the limiter base's __init__: name, clock and the closed flag are the wrapped limiter's.
        self.__wrapped__ = limiter
        self._observer = observer
        self.name = limiter.name
        """The wrapped limiter's name: the ``limiter`` label of its series."""
        self._rl_clock = limiter._rl_clock
        self._rl_tally = Tally()

    @property
    def _rl_closed(self) -> bool:
        return _closed(self.__wrapped__)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.__wrapped__, name)

    def __repr__(self) -> str:
        return f"<instrumented {self.__wrapped__!r}>"

    def _reconfigure(self, spec: Any, queue_limit: Any, queue_order: Any) -> None:
        self.__wrapped__.reconfigure(spec, queue_limit=queue_limit, queue_order=queue_order)

    def _observe_wait(self, waiting: Callable[[], Lease | None], permit_count: int = 1) -> Lease | None:
        """A queued wait made on the wrapped limiter by someone else (a sync server's wait that
        watches its client): its time queued and its outcome observed. None (the client left
        while queued) is seen as a cancelled wait."""
        start = self._observer.clock.now_ns()
        told = self._observer.enqueued(permit_count)
        try:
            lease = waiting()
        except BaseException:
            self._observer.queued("cancelled", start)
            raise
        finally:
            self._observer.dequeued(told, permit_count)
        return self._seen(lease, start)

    async def _observe_wait_async(
        self, waiting: Callable[[], Awaitable[Lease | None]], permit_count: int = 1
    ) -> Lease | None:
        """As ``_observe_wait``, for an asyncio server's wait (whose timeout, ended by the server,
        is seen as the wait's outcome ``"timeout"``, not as a cancellation)."""
        start = self._observer.clock.now_ns()
        told = self._observer.enqueued(permit_count)
        try:
            lease = await waiting()
        except BaseException:
            self._observer.queued("cancelled", start)
            raise
        finally:
            self._observer.dequeued(told, permit_count)
        return self._seen(lease, start)

    def _seen(self, lease: Lease | None, start: int) -> Lease | None:
        if lease is None:
            self._observer.queued("cancelled", start)
            return None
        return self._observer.waited(lease, start)


class InstrumentedLimiter(_Instrumented, RateLimiter):  # type: ignore[override]  # (_rl_closed: a property here)
    """A RateLimiter whose every acquisition and release is observed."""

    __wrapped__: RateLimiter

    def acquire(self, permit_count: int = 1) -> Lease:
        """The wrapped limiter's ``acquire``, its outcome counted; a granted lease comes back wrapped
        (same ``permit_count`` and ``metadata``) so that its release is seen, unless stamped."""
        lease = self.__wrapped__.acquire(permit_count)
        stamp = self._observer.stamp  # (inline: a call less on the common path)
        if stamp is not None and stamp(lease):
            return lease
        return self._observer.told(lease)

    def _try_now(self, permit_count: int) -> Lease | None:
        lease = self.__wrapped__._try_now(permit_count)
        return None if lease is None else self._observer.outcome(lease)

    def wait(self, permit_count: int = 1, timeout: float | None = None) -> Lease:
        """The wrapped limiter's ``wait``, its outcome counted; the time spent queued is observed when
        it was not granted at once. Raises as the wrapped limiter's."""
        blocks_the_loop(timeout)
        inner = self.__wrapped__
        return _waited_sync(
            self._observer, inner, inner._try_now, inner.wait, (_check_permit_count(permit_count),), timeout
        )

    def acquire_async(self, permit_count: int = 1) -> LeaseWait:
        """The wrapped limiter's ``acquire_async``, its outcome counted when awaited."""
        attempt = self.__wrapped__.acquire_async(permit_count)  # (checks its arguments now)
        observer = self._observer

        async def observed() -> Lease:
            return observer.outcome(await attempt)

        return Attempt(observed, "acquire_async", attempt)

    def wait_async(self, permit_count: int = 1) -> LeaseWait:
        """The wrapped limiter's ``wait_async``, its outcome counted and its time queued observed (a
        cancelled wait as ``"cancelled"``). Raises ``LimiterClosedError`` if the limiter is closed."""
        inner = self.__wrapped__
        n = _check_permit_count(permit_count)
        if _closed(inner):
            raise LimiterClosedError("the limiter is closed")
        return Attempt(lambda: _waited(self._observer, inner._try_now, inner.wait_async, (n,)), "wait_async")

    def statistics(self) -> Statistics:
        """The wrapped limiter's ``statistics()``."""
        return self.__wrapped__.statistics()

    def available_permits(self) -> int:
        """The wrapped limiter's ``available_permits()``."""
        return self.__wrapped__.available_permits()

    @property
    def idle_duration(self) -> float | None:
        """The wrapped limiter's ``idle_duration``."""
        return self.__wrapped__.idle_duration

    def try_replenish(self) -> bool:
        """The wrapped limiter's ``try_replenish()``."""
        return self.__wrapped__.try_replenish()

    def close(self) -> None:
        """Closes the wrapped limiter."""
        self.__wrapped__.close()

    async def aclose(self) -> None:
        """Closes the wrapped limiter, awaiting its ``aclose()``."""
        await self.__wrapped__.aclose()


class InstrumentedKeyedLimiter(_Instrumented, KeyedRateLimiter):  # type: ignore[override]  # (_rl_closed: a property here)
    """A KeyedRateLimiter whose every acquisition and release is observed (labelled with the keyed
    limiter's name, never the key)."""

    __wrapped__: KeyedRateLimiter

    def acquire(self, resource: object, permit_count: int = 1) -> Lease:
        """The wrapped limiter's ``acquire``, its outcome counted; a granted lease comes back wrapped
        (same ``permit_count`` and ``metadata``) so that its release is seen, unless stamped."""
        lease = self.__wrapped__.acquire(resource, permit_count)
        stamp = self._observer.stamp
        if stamp is not None and stamp(lease):
            return lease
        return self._observer.told(lease)

    def _try_now(self, resource: object, permit_count: int) -> Lease | None:
        lease = self.__wrapped__._try_now(resource, permit_count)
        return None if lease is None else self._observer.outcome(lease)

    def wait(self, resource: object, permit_count: int = 1, timeout: float | None = None) -> Lease:
        """The wrapped limiter's ``wait``, its outcome counted; the time spent queued is observed when
        it was not granted at once. Raises as the wrapped limiter's."""
        blocks_the_loop(timeout)
        inner = self.__wrapped__
        n = _check_permit_count(permit_count)
        return _waited_sync(self._observer, inner, inner._try_now, inner.wait, (resource, n), timeout)

    def acquire_async(self, resource: object, permit_count: int = 1) -> LeaseWait:
        """The wrapped limiter's ``acquire_async``, its outcome counted when awaited."""
        attempt = self.__wrapped__.acquire_async(resource, permit_count)
        observer = self._observer

        async def observed() -> Lease:
            return observer.outcome(await attempt)

        return Attempt(observed, "acquire_async", attempt)

    def wait_async(self, resource: object, permit_count: int = 1) -> LeaseWait:
        """The wrapped limiter's ``wait_async``, its outcome counted and its time queued observed (a
        cancelled wait as ``"cancelled"``). Raises ``LimiterClosedError`` if the limiter is closed."""
        inner = self.__wrapped__
        n = _check_permit_count(permit_count)
        if _closed(inner):
            raise LimiterClosedError("the limiter is closed")
        return Attempt(lambda: _waited(self._observer, inner._try_now, inner.wait_async, (resource, n)), "wait_async")

    def statistics(self, resource: object = None) -> Statistics:
        """The wrapped limiter's ``statistics(resource)``."""
        return self.__wrapped__.statistics(resource)

    def available_permits(self, resource: object) -> int:
        """The wrapped limiter's ``available_permits(resource)``."""
        return self.__wrapped__.available_permits(resource)

    @property
    def partition_count(self) -> int:
        """The wrapped limiter's ``partition_count``."""
        return self.__wrapped__.partition_count

    def evict_idle(self) -> int:
        """The wrapped limiter's ``evict_idle()``."""
        return self.__wrapped__.evict_idle()

    def reset(self, resource: object) -> None:
        """The wrapped limiter's ``reset(resource)``."""
        self.__wrapped__.reset(resource)

    def close(self) -> None:
        """Closes the wrapped limiter."""
        self.__wrapped__.close()

    async def aclose(self) -> None:
        """Closes the wrapped limiter, awaiting its ``aclose()``."""
        await self.__wrapped__.aclose()


async def _waited(observer: Observer, try_now: Any, wait_async: Any, args: tuple[object, ...]) -> Lease:
    """A wait_async: granted (or refused) at once, or queued, its time in the queue observed with
    its outcome ("cancelled" when the waiting task was cancelled)."""
    now = try_now(*args)
    if now is not None:
        return observer.outcome(now)
    start = observer.clock.now_ns()
    permit_count: int = args[-1]  # type: ignore[assignment]  # ((resource,) permit_count)
    told = observer.enqueued(permit_count)
    try:
        lease = await wait_async(*args)
    except BaseException:
        observer.queued("cancelled", start)
        raise
    finally:
        observer.dequeued(told, permit_count)
    return observer.waited(lease, start)


def _waited_sync(
    observer: Observer, inner: Any, try_now: Any, wait: Any, args: tuple[object, ...], timeout: float | None
) -> Lease:
    """A blocking wait: granted (or refused) at once, never queued, or queued, its time in the
    queue observed with its outcome."""
    if not _closed(inner):
        now = try_now(*args)
        if now is not None:
            return observer.outcome(now)
    start = observer.clock.now_ns()
    permit_count: int = args[-1]  # type: ignore[assignment]  # ((resource,) permit_count)
    told = observer.enqueued(permit_count)
    try:
        lease = wait(*args, timeout)
    finally:
        observer.dequeued(told, permit_count)
    return observer.waited(lease, start)


def wrapped_limiter(limiter: RateLimiter | KeyedRateLimiter) -> RateLimiter | KeyedRateLimiter:
    """The limiter an instrumented one wraps (the limiter itself if not instrumented)."""
    return limiter.__wrapped__ if isinstance(limiter, _Instrumented) else limiter
