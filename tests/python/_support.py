"""Helpers shared by the permits test suite (fixtures live in conftest.py).

Time is driven only by ``permits.ManualClock``: ``clock.advance()`` performs, in the calling
thread, all the engine work that has come due. Wall-clock timeouts in these helpers are safety
nets against hangs, never the thing under test.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import permits

OLDEST = permits.QueueOrder.OLDEST_FIRST
NEWEST = permits.QueueOrder.NEWEST_FIRST

#: Replenishment period / window used by the shared (parametrised) tests, in seconds.
PERIOD = 10.0

#: Wall-clock safety net for anything that should complete "at once".
SAFETY = 5.0

KINDS = [
    "concurrency",
    "token_bucket",
    "fixed_window",
    "sliding_window",
    "sliding_window_counter",
]
TIMED_KINDS = KINDS[1:]
MAX_INT32 = 2**31 - 1


class ReceivingLoop(asyncio.SelectorEventLoop):
    """An event loop that cannot watch a descriptor for its users, as Windows' proactor loop:
    ``add_reader`` raises NotImplementedError. It still receives from sockets
    (``sock_recv``), which is how the asyncio bridge is woken on such a loop."""

    def add_reader(self, fd: Any, callback: Callable[..., object], *args: Any) -> None:
        raise NotImplementedError("this loop watches no descriptor (as the proactor loop)")


#: The loops the asyncio bridge is tested on: one that watches its pipe (add_reader: the selector
#: loop) and one that can only receive from a socket (ReceivingLoop); on Windows the proactor loop
#: itself too.
BRIDGE_LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "watching": asyncio.SelectorEventLoop,
    "receiving": ReceivingLoop,
}
if sys.platform == "win32":
    BRIDGE_LOOPS["proactor"] = asyncio.ProactorEventLoop  # type: ignore[attr-defined,unused-ignore]


class LimiterKit:
    """Builds one kind of limiter with a given limit, and gives permits back.

    * concurrency: ``give_back`` releases the leases passed in.
    * token bucket: ``tokens_per_period == limit`` so one period refills the bucket completely.
    * fixed window: one window of ``PERIOD``.
    * sliding window: a window of ``PERIOD`` in 2 segments; permits taken at a window boundary
      come back one window later.
    * sliding window counter: permits taken in window k stop weighing at the start of window k+2,
      so ``give_back`` advances two windows.
    * sliding log (not in ``KINDS``: the conformance suite's): permits come back a window and a
      nanosecond after they were taken.

    ``give_back`` on a time-based kit assumes every permit in use was taken at the current
    clock reading and that this reading is a period/window boundary (the shared tests only
    acquire at such times).
    """

    def __init__(self, kind: str, clock: permits.ManualClock) -> None:
        self.kind = kind
        self.clock = clock

    def __repr__(self) -> str:
        return f"LimiterKit({self.kind})"

    @property
    def timed(self) -> bool:
        return self.kind != "concurrency"

    @property
    def recovery(self) -> float:
        """Time after a use (at a boundary) at which all its permits are available again."""
        if self.kind == "concurrency":
            return 0.0
        if self.kind == "sliding_window_counter":
            return 2 * PERIOD
        if self.kind == "sliding_log":
            return PERIOD + 1e-9
        return PERIOD

    def make(
        self,
        limit: int,
        queue_limit: int = 0,
        queue_order: Any = OLDEST,
        **kwargs: Any,
    ) -> permits.RateLimiter:
        common = dict(queue_limit=queue_limit, queue_order=queue_order, clock=self.clock, **kwargs)
        if self.kind == "concurrency":
            return permits.ConcurrencyLimiter(limit, **common)
        if self.kind == "token_bucket":
            return permits.TokenBucketLimiter(limit, limit, PERIOD, **common)
        if self.kind == "fixed_window":
            return permits.FixedWindowLimiter(limit, PERIOD, **common)
        if self.kind == "sliding_window":
            return permits.SlidingWindowLimiter(limit, PERIOD, 2, **common)
        if self.kind == "sliding_window_counter":
            return permits.SlidingWindowCounterLimiter(limit, PERIOD, **common)
        if self.kind == "sliding_log":
            return permits.SlidingLogLimiter(limit, PERIOD, **common)
        raise AssertionError(self.kind)

    def give_back(self, *leases: permits.Lease) -> None:
        """Makes the permits held by ``leases`` (or, for time-based kinds, all permits) available."""
        if self.kind == "concurrency":
            for lease in leases:
                lease.release()
        else:
            self.clock.advance(self.recovery)


# ---------------------------------------------------------------------------------------------
# asyncio helpers


async def _run(aw: Awaitable[Any]) -> Any:
    return await aw


def spawn(aw: Awaitable[Any]) -> asyncio.Task[Any]:
    """Runs any awaitable (coroutine or awaitable object) as a task."""
    return asyncio.ensure_future(_run(aw))


async def settle(rounds: int = 10) -> None:
    """Lets the event loop run a few rounds (tasks reach their await points)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def result(aw: Awaitable[Any]) -> Any:
    """Awaits ``aw`` with a wall-clock safety net."""
    return await asyncio.wait_for(_run(aw), SAFETY)


async def enqueue(limiter: Any, permit_count: int = 1) -> asyncio.Task[Any]:
    """Starts ``limiter.wait_async(permit_count)`` in a task and lets it reach the engine."""
    task = spawn(limiter.wait_async(permit_count))
    await settle()
    return task


async def until(cond: Callable[[], bool], timeout: float = SAFETY) -> None:
    deadline = time.monotonic() + timeout
    spins = 0
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached within the safety timeout")
        spins += 1
        await asyncio.sleep(0 if spins < 200 else 0.001)


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, SAFETY)


# ---------------------------------------------------------------------------------------------
# threading helpers


def wait_until(cond: Callable[[], bool], timeout: float = SAFETY) -> None:
    """Polls ``cond`` (a synchronisation aid between threads, not a way to let time pass)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached within the safety timeout")
        time.sleep(0.0005)


class Waiter(threading.Thread):
    """Runs ``limiter.wait(...)`` in a thread and keeps the lease (or the exception)."""

    def __init__(self, limiter: Any, permit_count: int = 1, **kwargs: Any) -> None:
        super().__init__(daemon=True)
        self.limiter = limiter
        self.permit_count = permit_count
        self.kwargs = kwargs
        self.lease: permits.Lease | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.lease = self.limiter.wait(self.permit_count, **self.kwargs)
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    def outcome(self, timeout: float = SAFETY) -> permits.Lease:
        self.join(timeout)
        assert not self.is_alive(), "wait() did not return"
        if self.error is not None:
            raise self.error
        assert self.lease is not None
        return self.lease


def start_waiter(limiter: Any, permit_count: int = 1, *, queued_after: int | None = None, **kwargs: Any) -> Waiter:
    """Starts a blocking waiter; when ``queued_after`` is given, waits until the limiter reports
    that many queued permits (so the waiter is known to be in the queue)."""
    waiter = Waiter(limiter, permit_count, **kwargs)
    waiter.start()
    if queued_after is not None:
        wait_until(lambda: waiter.done.is_set() or limiter.statistics().current_queued_count == queued_after)
        assert not waiter.done.is_set(), f"waiter finished early: {waiter.lease!r} {waiter.error!r}"
    return waiter


def stats(limiter: Any) -> tuple[int, int, int, int]:
    """(available, queued, successful, failed)."""
    s = limiter.statistics()
    return (
        s.current_available_permits,
        s.current_queued_count,
        s.total_successful_leases,
        s.total_failed_leases,
    )


#: Optional test dependencies with no build for a platform (sys.platform, or "free-threaded": a
#: CPython built with --disable-gil): there the test skips, in CI too. gevent needs CFFI, which
#: supports free-threading only from 3.14.
NO_BUILD = {"uvloop": {"win32"}, "gevent": {"free-threaded"}}
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def no_build(module: str) -> str | None:
    """Why `module` cannot be installed on this interpreter (NO_BUILD), or None."""
    here = {sys.platform, "free-threaded"} if FREE_THREADED else {sys.platform}
    missing = sorted(NO_BUILD.get(module, set()) & here)
    return f"{module} has no build for {' or '.join(missing)}" if missing else None


def need(module: str) -> Any:
    """Imports an optional test dependency (uvloop, trio, anyio): ./scripts/test installs them, so
    in CI (CI=true) a missing one fails; elsewhere the test skips, saying how to install it."""
    if (reason := no_build(module)) is not None:
        return pytest.importorskip(module, reason=reason)
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed: pip install {module}")


def join_while_progressing(threads: list[threading.Thread], progress: Callable[[], int], stall: float) -> None:
    """Joins threads that count their work in ``progress()``: fails when nothing moves for ``stall``
    seconds (a hang), not when a loaded machine is slow (a store's four threads contending for one
    row took over 5 s for 600 steps in a free-threaded CI run, each step moving)."""
    seen, moved = progress(), time.monotonic()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.05)
        now, count = time.monotonic(), progress()
        if count != seen:
            seen, moved = count, now
        assert now - moved < stall, f"no thread moved for {stall} s (at {seen}): a worker thread hung"


def run_threads(target: Callable[[int], object], n: int, *, join_timeout: float = 30.0) -> None:
    """Runs target(0..n-1) on n threads started at one barrier; re-raises the first error. A thread
    still running after ``join_timeout`` seconds fails the test (a hang), never the run."""
    start = threading.Barrier(n)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            start.wait(SAFETY)
            target(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_timeout)
        assert not t.is_alive(), "a worker thread hung"
    if errors:
        raise errors[0]
