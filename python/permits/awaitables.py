"""What ``acquire_async`` and ``wait_async`` return: awaitables that are also async context
managers and that ``asyncio.create_task`` and the like accept as coroutines."""

from __future__ import annotations

import asyncio
import sys
import warnings
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Coroutine, Generator
from types import TracebackType
from typing import Any, Protocol

from . import _core, _pausing
from ._core import Lease


class LeaseWait(Coroutine[Any, Any, Lease]):
    """What ``wait_async`` returns: ``await`` it for a lease, or ``async with`` it to have the
    lease released on exit; ``asyncio.create_task`` and the like take it as a coroutine (so do type
    checkers). The engine's limiters return a C type, ``permits._core.EngineLeaseWait`` (registered as
    one); custom limiters, chains and partitions a Python one."""

    __slots__ = ()

    @abstractmethod
    def __aenter__(self) -> Awaitable[Lease]: ...

    @abstractmethod
    def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> Awaitable[None]: ...


LeaseWait.register(_core.EngineLeaseWait)


class _Steps(LeaseWait):
    """``send``/``throw``/``close`` drive the object's own ``__await__``, as a coroutine's do: so
    ``asyncio.create_task``, ``ensure_future``, ``TaskGroup.create_task``... take it (they accept
    what ``asyncio.iscoroutine`` accepts). ``await`` calls ``__await__`` directly and never makes
    this extra generator."""

    __slots__ = ("_steps", "_used")
    _steps: Generator[Any, None, Lease]  # made by the first step; unset until then
    _used: bool  # awaited, stepped, cancelled or closed; unset until then

    @property
    def _made_by(self) -> str:
        """The method that returned it, as its errors and warnings name it."""
        return "wait_async"

    def __await__(self) -> Generator[Any, None, Lease]:
        raise NotImplementedError

    # A coroutine's habits: no truth value that hides a missing await, and a warning when one is
    # collected without ever being awaited (nor cancelled, nor closed). Once stepped it is true:
    # asyncio tests a task's coroutine (`if task._coro:`, in its repr from 3.12).
    def __bool__(self) -> bool:
        if getattr(self, "_used", False):
            return True
        raise TypeError(
            f"the awaitable of {self._made_by}() has no truth value: did you forget await? "
            f"(if await limiter.{self._made_by}():)"
        )

    def __del__(self) -> None:
        if not getattr(self, "_used", False):
            warnings.warn(f"{self._made_by}() was never awaited", RuntimeWarning, stacklevel=2)

    def _started(self) -> Generator[Any, None, Lease]:
        self._used = True
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
        self._used = True
        steps: Generator[Any, None, Lease] | None = getattr(self, "_steps", None)
        if steps is not None:
            steps.close()


class _Ready(_Steps):
    """acquire_async's awaitable: the attempt is made at once, the lease is the result. Also
    usable as ``async with``, releasing the lease on exit."""

    __slots__ = ("_lease",)

    @property
    def _made_by(self) -> str:
        return "acquire_async"

    def __init__(self, lease: Lease) -> None:
        self._lease = lease

    def __await__(self) -> Generator[Any, None, Lease]:
        # The attempt was made already: any event loop, or none, may take the result.
        self._used = True
        return self._lease
        yield  # makes this a generator

    def throw(self, typ: Any, val: Any = None, tb: TracebackType | None = None) -> Any:
        self._used = True
        if getattr(self, "_steps", None) is None:
            self._lease._refund()  # cancelled before its first step: nobody gets the lease
        return super().throw(typ, val, tb)

    async def __aenter__(self) -> Lease:
        return await self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lease.release()


class _Waitable(Protocol):
    """What PolledLeaseWait waits on: a limiter, or one key of a per-key limiter."""

    @property
    def _rl_closed(self) -> bool: ...
    def _try_now(self, permit_count: int) -> Lease | None: ...
    def _wait_async(self, permit_count: int) -> Coroutine[Any, Any, Lease]: ...
    def _rl_waited(self, lease: object, permit_count: int) -> Lease: ...


class WaitsOnce(_Steps):
    """A ``wait_async`` awaitable written in Python: it waits once (awaiting it again raises
    RuntimeError, as for the engine's own), and ``async with`` it releases the lease on exit.
    A subclass calls ``_start()`` first in its ``__await__``."""

    __slots__ = ("_lease", "_started_once")

    def __init__(self) -> None:
        self._lease: Lease | None = None
        self._started_once = False

    def _start(self) -> None:
        self._used = True
        if self._started_once:
            raise RuntimeError("cannot reuse an already awaited wait_async()")
        self._started_once = True

    async def __aenter__(self) -> Lease:
        self._lease = await self
        return self._lease

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._lease is not None:
            self._lease.release()


class PolledLeaseWait(WaitsOnce):
    """What ``wait_async`` returns: await it for a lease, or ``async with`` it to release on exit;
    ``asyncio.create_task`` and the like take it as they take a coroutine. Waits once: awaiting
    it again raises RuntimeError, as for the engine's own."""

    __slots__ = ("_limiter", "_permit_count")

    def __init__(self, limiter: _Waitable, permit_count: int) -> None:
        super().__init__()
        self._limiter = limiter
        self._permit_count = permit_count

    def __await__(self) -> Generator[Any, None, Lease]:
        self._start()
        limiter, n = self._limiter, self._permit_count
        # Granted at once: no coroutine, no event loop round trip (and none asked: a wait works
        # the same under asyncio and trio, granted at once or queued).
        lease = limiter._try_now(n)
        if lease is not None:
            return lease
        # Whichever hook waits, its outcome is checked and counted once; a close of the limiter
        # ends the wait at once (its request leaves any queue, a grant goes back). Under asyncio the
        # wait's first step runs bare: only a wait that suspends pays for being closable.
        steps = limiter._wait_async(n).__await__()
        if "trio" in sys.modules and asyncio._get_running_loop() is None:
            waited = yield from _pausing.closable_from_start(steps, lambda: limiter._rl_closed, n).__await__()
            return limiter._rl_waited(waited, n)
        try:
            first = steps.send(None)
        except StopIteration as done:
            return limiter._rl_waited(done.value, n)
        waited = yield from _pausing.closable(steps, first, lambda: limiter._rl_closed, n).__await__()
        return limiter._rl_waited(waited, n)


class Attempt(_Steps):
    """``acquire_async``'s awaitable for a limiter that asks elsewhere (a custom limiter's
    ``_acquire_async``, a chain, a partition): the attempt is made when awaited, so one never
    awaited asks nothing and holds nothing. It asks once: a second await returns the same lease
    (as the engine's does). Also usable as ``async with``."""

    __slots__ = ("_ask", "_asking", "_by", "_inner", "_lease")

    def __init__(
        self, ask: Callable[[], Coroutine[Any, Any, Lease]], made_by: str = "acquire_async", inner: object = None
    ) -> None:
        """``made_by``: the method it stands for; ``inner``: an awaitable made already that ``ask``
        awaits (a wrapped limiter's), closed when this one goes (dropped unawaited, closed or
        cancelled before it asked): one warning at most, this one's."""
        self._ask = ask
        self._lease: Lease | None = None
        self._asking = False
        self._by = made_by
        self._inner = inner

    @property
    def _made_by(self) -> str:
        return self._by

    def __del__(self) -> None:
        super().__del__()
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()  # (nothing to do for one awaited to its end)

    def __await__(self) -> Generator[Any, None, Lease]:
        self._used = True
        if self._lease is not None:
            return self._lease
        if self._asking:
            raise RuntimeError("acquire_async() is being awaited already")
        self._asking = True
        try:
            self._lease = yield from self._ask().__await__()
        finally:
            self._asking = False
        return self._lease

    async def __aenter__(self) -> Lease:
        return await self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._lease is not None:
            self._lease.release()
