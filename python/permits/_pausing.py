"""Pauses and waits that a close (or a ManualClock's advance) must end at once.

The waits of limiters without a queue of their own (custom limiters) pause between attempts: for
the failed lease's ``retry_after`` on the limiter's clock, or for a short poll. A pause is a run
of bounded real sleeps (so a ``retry_after`` of 1e10 s never overflows a sleep) that ends early
when anything calls ``wake_all``: a limiter closing, a ManualClock advancing. Each pause then
looks again at what it waits for (its clock, its limiter's close).

``closable`` (a wait that suspended under asyncio) and ``closable_from_start`` (under
trio) run a wait (a chain's, a partition's, a custom limiter's own ``_wait_async``) so that the
owner's close ends it at once: the wait is cancelled where it waits (its request
leaves any queue, what it was granted goes back) and the caller gets a failed lease, reason
``"closed"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Generator
from typing import Any

from . import _core, _foreign
from ._core import Clock, Lease
from ._forking import in_child

#: The longest real sleep of a pause before it looks again (its clock, its limiter).
SLICE = 1.0

_changed = threading.Condition()
#: Registered wakers, in the order they were registered (a dict as an ordered set).
_wakers: dict[Callable[[], object], None] = {}


@in_child
def _after_fork_in_child() -> None:
    global _changed
    _changed = threading.Condition()  # (a waiting thread of the parent may have held its lock)


def cancelled_here() -> bool:
    """True when a blocking wait on this thread is a step of a wait whose owner closed (a chain's
    ``CancelScope``, cancelled by its close): the wait ends with a closed lease."""
    return _core._cancelled_here()


def closed_lease(permit_count: int) -> Lease:
    """What a wait ended by its limiter's close returns."""
    return Lease.denied("closed")._with_permit_count(permit_count)


def wake_all() -> None:
    """Something a pause or a wait may be waiting for has happened: every one looks again."""
    with _changed:
        _changed.notify_all()
        wakers = list(_wakers)
    for wake in wakers:
        with contextlib.suppress(Exception):  # its loop closed meanwhile: nothing there to wake
            wake()


def _slice(clock: Clock, until_ns: int | None, poll_end: float | None) -> float | None:
    """Seconds to sleep before looking again; None once the pause is over."""
    seconds = SLICE
    if until_ns is not None:
        left = until_ns - clock.now_ns()
        if left <= 0:
            return None
        seconds = min(seconds, left / 1e9)
    if poll_end is not None:
        left_s = poll_end - time.monotonic()
        if left_s <= 0:
            return None
        seconds = min(seconds, left_s)
    return seconds


def pause(clock: Clock, until_ns: int | None, poll: float | None, stop: Callable[[], bool]) -> None:
    """Blocks until ``clock`` reads ``until_ns``, ``poll`` real seconds have passed, or ``stop()``."""
    poll_end = None if poll is None else time.monotonic() + poll
    with _changed:
        # (or a scope this thread entered was cancelled: the close of a chain this wait is a step of)
        while not stop() and not cancelled_here():
            seconds = _slice(clock, until_ns, poll_end)
            if seconds is None:
                return
            _changed.wait(seconds)


async def pause_async(clock: Clock, until_ns: int | None, poll: float | None, stop: Callable[[], bool]) -> None:
    """As ``pause``, sleeping in the running event loop (asyncio or trio)."""
    poll_end = None if poll is None else time.monotonic() + poll
    while not stop():
        seconds = _slice(clock, until_ns, poll_end)
        if seconds is None:
            return
        await _nap(seconds)


async def _nap(seconds: float) -> None:
    """Sleeps up to ``seconds``, or until ``wake_all``."""
    loop = asyncio._get_running_loop()
    if loop is None:
        trio = _foreign.in_trio()
        token = trio.lowlevel.current_trio_token()
        with trio.move_on_after(seconds) as scope:
            wake = lambda: token.run_sync_soon(scope.cancel)  # noqa: E731
            _add(wake)
            try:
                await trio.sleep_forever()
            finally:
                _discard(wake)
        return
    done = loop.create_future()
    timer = loop.call_later(seconds, _finish, done)
    wake = _in_loop(loop, _finish, done)
    _add(wake)
    try:
        await done
    finally:
        timer.cancel()
        _discard(wake)


def _finish(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


def _in_loop(loop: asyncio.AbstractEventLoop, act: Callable[[Any], object], target: object) -> Callable[[], None]:
    """A waker running ``act(target)`` in ``loop``. It holds both weakly: a wait left in a loop
    closed by hand must stay garbage the GC can collect (giving its permits back)."""
    loop_ref, target_ref = weakref.ref(loop), weakref.ref(target)

    def wake() -> None:
        loop, target = loop_ref(), target_ref()
        if loop is not None and target is not None:
            loop.call_soon_threadsafe(act, target)

    return wake


def _add(wake: Callable[[], object]) -> None:
    with _changed:
        _wakers[wake] = None


def _discard(wake: Callable[[], object]) -> None:
    with _changed:
        _wakers.pop(wake, None)


def closable_from_start(steps: Generator[Any, None, Lease], closed: Callable[[], bool], n: int) -> Any:
    """A wait not yet started, outside asyncio: under trio in a cancel scope that a close cancels
    (scopes nest, so it must enclose every step); with no event loop at all, as it is (granted at
    once, or the wait itself says why not)."""
    trio = _foreign._in_trio()
    if trio is None:
        return _Resume(steps, None, started=False)
    return _guarded_trio(trio, steps, closed, n)


def closable(steps: Generator[Any, None, Lease], first: Any, closed: Callable[[], bool], n: int) -> Any:
    """A wait that has suspended (its first step yielded ``first``) under asyncio, or with no event
    loop at all, driven on so that ``closed()`` turning true ends it at once."""
    loop = asyncio._get_running_loop()
    if loop is None:  # no event loop (nor trio): the wait goes on as it is
        return _Resume(steps, first)
    return _guarded(loop, _Resume(steps, first), closed, n)


async def _guarded_trio(trio: Any, steps: Generator[Any, None, Lease], closed: Callable[[], bool], n: int) -> Lease:
    token = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as scope:
        wake = lambda: closed() and token.run_sync_soon(scope.cancel)  # noqa: E731
        _add(wake)
        try:
            if closed():
                scope.cancel()
            return await _Resume(steps, None, started=False)
        finally:
            _discard(wake)
    return closed_lease(n)


async def _guarded(loop: asyncio.AbstractEventLoop, rest: _Resume, closed: Callable[[], bool], n: int) -> Lease:
    deadline = asyncio.timeout(None)
    expire = _in_loop(loop, _expire, deadline)
    wake = lambda: closed() and expire()  # noqa: E731
    try:
        async with deadline:
            _add(wake)
            try:
                if closed():
                    deadline.reschedule(loop.time())
                return await rest
            finally:
                _discard(wake)
    except TimeoutError:
        if not closed():
            raise
        return closed_lease(n)


def _expire(deadline: asyncio.Timeout) -> None:
    if deadline.when() is None:  # not expired, and still inside its block
        with contextlib.suppress(RuntimeError):  # its block is over
            deadline.reschedule(asyncio.get_running_loop().time())


class _Resume:
    """Drives a generator as ``yield from`` would, going on from its first yield (``first``)
    when it was started already."""

    __slots__ = ("_first", "_started", "_steps")

    def __init__(self, steps: Generator[Any, None, Lease], first: Any, *, started: bool = True) -> None:
        self._steps = steps
        self._first = first
        self._started = started

    def __await__(self) -> Generator[Any, None, Lease]:
        steps, out = self._steps, self._first
        if not self._started:
            try:
                out = steps.send(None)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        while True:
            try:
                sent = yield out
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as exc:
                try:
                    out = steps.throw(exc)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
                continue
            try:
                out = steps.send(sent)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
