"""RateLimiter: the base of every limiter, and what a custom limiter written in Python subclasses."""

from __future__ import annotations

import enum
import time
from abc import abstractmethod
from collections.abc import Awaitable, Coroutine, Generator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NoReturn, Protocol

from . import _core, _foreign
from ._core import Lease, LimiterClosedError
from ._durations import timeout_ns

#: Reasons for which waiting longer cannot help: wait() and wait_async() return the failed lease.
_FINAL_REASONS = frozenset({"queue_full", "evicted", "closed", "timeout", "partition_limit"})


class QueueOrder(enum.Enum):
    """Which queued request is served first when permits come back."""

    OLDEST_FIRST = 0
    NEWEST_FIRST = 1


@dataclass(frozen=True)
class Statistics:
    """A snapshot of a limiter's counters (a new object on every call)."""

    current_available_permits: int
    current_queued_count: int
    total_successful_leases: int
    total_failed_leases: int


def _check_permit_count(permit_count: object) -> int:
    if isinstance(permit_count, bool) or not isinstance(permit_count, int):
        raise TypeError(f"permit_count must be an int, got {type(permit_count).__name__}")
    n = int.__int__(permit_count)  # a subclass's own comparisons cannot sneak a bad value past
    if n < 0:
        raise ValueError(f"permit_count must not be negative, got {n}")
    if n > 2**63 - 1:
        raise ValueError(f"permit_count is too large: {n}")
    return n


class LeaseWait(Coroutine[Any, Any, Lease]):
    """What ``wait_async`` returns: ``await`` it for a lease, or ``async with`` it to have the
    lease released on exit; ``asyncio.create_task`` and the like take it as a coroutine (so do type
    checkers). The engine's limiters return a C type, ``permits._core.AsyncWait`` (registered as
    one); custom limiters, chains and partitions a Python one."""

    __slots__ = ()

    @abstractmethod
    def __aenter__(self) -> Awaitable[Lease]: ...

    @abstractmethod
    def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> Awaitable[None]: ...


LeaseWait.register(_core.AsyncWait)


def _no_copies(self: object, protocol: object = None) -> NoReturn:
    """__reduce_ex__ of the limiters that refuse copies: a copy would share the original's state
    (partitions, members) and could close it, or count apart from it."""
    raise TypeError(f"cannot copy or pickle {type(self).__name__!r} object: share the limiter itself")


class _Steps(LeaseWait):
    """``send``/``throw``/``close`` drive the object's own ``__await__``, as a coroutine's do: so
    ``asyncio.create_task``, ``ensure_future``, ``TaskGroup.create_task``... take it (they accept
    what ``asyncio.iscoroutine`` accepts). ``await`` calls ``__await__`` directly and never makes
    this extra generator."""

    __slots__ = ("_steps",)
    _steps: Generator[Any, None, Lease]  # made by the first step; unset until then

    def __await__(self) -> Generator[Any, None, Lease]:
        raise NotImplementedError

    def _started(self) -> Generator[Any, None, Lease]:
        steps: Generator[Any, None, Lease] | None = getattr(self, "_steps", None)
        if steps is None:
            steps = self._steps = self.__await__()
        return steps

    def send(self, value: object) -> Any:
        return self._started().send(value)  # type: ignore[arg-type]

    def throw(self, typ: Any, val: Any = None, tb: TracebackType | None = None) -> Any:
        steps = self._started()
        if val is None and tb is None:
            return steps.throw(typ)
        return steps.throw(typ, val, tb)

    def close(self) -> None:
        steps: Generator[Any, None, Lease] | None = getattr(self, "_steps", None)
        if steps is not None:
            steps.close()


class _Ready(_Steps):
    """acquire_async's awaitable: the attempt is made at once, the lease is the result. Also
    usable as ``async with``, releasing the lease on exit."""

    __slots__ = ("_lease",)

    def __init__(self, lease: Lease) -> None:
        self._lease = lease

    def __await__(self) -> Generator[Any, None, Lease]:
        # The attempt was made already: any event loop, or none, may take the result.
        return self._lease
        yield  # makes this a generator

    def throw(self, typ: Any, val: Any = None, tb: TracebackType | None = None) -> Any:
        if getattr(self, "_steps", None) is None:
            self._lease._give_back()  # cancelled before its first step: nobody gets the lease
        return super().throw(typ, val, tb)

    async def __aenter__(self) -> Lease:
        return await self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lease.release()


class _Waitable(Protocol):
    """What WaitAsync waits on: a limiter, or one key of a per-key limiter."""

    def _try_now(self, permit_count: int) -> Lease | None: ...
    def _wait_async(self, permit_count: int) -> Coroutine[Any, Any, Lease]: ...


class WaitAsync(_Steps):
    """What ``wait_async`` returns: await it for a lease, or ``async with`` it to release on exit;
    ``asyncio.create_task`` and the like take it as they take a coroutine."""

    __slots__ = ("_lease", "_limiter", "_permit_count")

    def __init__(self, limiter: _Waitable, permit_count: int) -> None:
        self._limiter = limiter
        self._permit_count = permit_count
        self._lease: Lease | None = None

    def __await__(self) -> Generator[Any, None, Lease]:
        # Granted at once: no coroutine, no event loop round trip (and none asked: a wait works
        # the same under asyncio and trio, granted at once or queued).
        lease = self._limiter._try_now(self._permit_count)
        if lease is not None:
            return lease
        return (yield from self._limiter._wait_async(self._permit_count).__await__())

    async def __aenter__(self) -> Lease:
        self._lease = await self
        return self._lease

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._lease is not None:
            self._lease.release()


class RateLimiter:
    """The interface of every limiter.

    A custom limiter subclasses it, calls ``super().__init__()`` and implements
    ``_acquire(permit_count) -> Lease``; optionally ``_wait_async``, ``_statistics`` and
    ``idle_duration``. Every public member then works.
    """

    def __init__(self, *, name: str | None = None) -> None:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        self.name = "default" if name is None else name
        self._rl_closed = False
        self._rl_successful = 0
        self._rl_failed = 0

    # ---- hooks for custom limiters ----
    def _try_now(self, permit_count: int) -> Lease | None:
        """A wait's immediate grant; None sends the wait to ``_wait_async``."""
        return None

    def _acquire(self, permit_count: int) -> Lease:
        raise NotImplementedError(f"{type(self).__name__} must implement _acquire(permit_count)")

    async def _wait_async(self, permit_count: int) -> Lease:
        # Ask, sleep for the lease's retry_after (or a short pause), ask again; a denial that
        # waiting cannot cure (a full queue, a closed limiter...) ends the wait.
        while True:
            lease = self.acquire(permit_count)
            if lease or lease.reason in _FINAL_REASONS:
                return lease
            await _foreign.sleep(lease.retry_after if lease.retry_after is not None else 0.01)

    def _statistics(self) -> Statistics:
        return Statistics(0, 0, self._rl_successful, self._rl_failed)

    # ---- the public API ----
    def _check_open(self) -> None:
        if self._rl_closed:
            raise LimiterClosedError("the limiter is closed")

    def acquire(self, permit_count: int = 1) -> Lease:
        """Takes permits now or returns a failed lease; never blocks, never queues."""
        n = _check_permit_count(permit_count)
        self._check_open()
        lease = self._acquire(n)
        if not isinstance(lease, Lease):
            raise TypeError(f"{type(self).__name__}._acquire must return a permits.Lease, got {type(lease).__name__}")
        if lease:
            self._rl_successful += 1
        else:
            self._rl_failed += 1
            lease._with_permit_count(n)
        return lease

    def acquire_async(self, permit_count: int = 1) -> Awaitable[Lease]:
        """The same attempt as :meth:`acquire`, as an awaitable."""
        return _Ready(self.acquire(permit_count))

    def wait(self, permit_count: int = 1, timeout: float | None = None) -> Lease:
        """Blocks until acquired, rejected, timed out (reason "timeout") or closed."""
        n = _check_permit_count(permit_count)
        limit = timeout_ns(timeout)
        deadline = None if limit < 0 else time.monotonic() + limit / 1e9
        while True:
            lease = self.acquire(n)
            if lease or lease.reason in _FINAL_REASONS:
                return lease
            pause = lease.retry_after if lease.retry_after is not None else 0.01
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return Lease.denied("timeout")._with_permit_count(n)
                pause = min(pause, left)
            time.sleep(pause)

    def wait_async(self, permit_count: int = 1) -> LeaseWait:
        """Waits in the queue (asyncio). Also an async context manager releasing the lease on exit."""
        _check_permit_count(permit_count)
        self._check_open()
        return WaitAsync(self, permit_count)

    def available_permits(self) -> int:
        return self.statistics().current_available_permits

    def statistics(self) -> Statistics:
        self._check_open()
        return self._statistics()

    @property
    def idle_duration(self) -> float | None:
        """Seconds since the limiter became fully idle; None while in use (custom: never idle)."""
        return None

    def try_replenish(self) -> bool:
        return False

    def close(self) -> None:
        self._rl_closed = True

    async def aclose(self) -> None:
        self.close()

    def __enter__(self) -> RateLimiter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> RateLimiter:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
