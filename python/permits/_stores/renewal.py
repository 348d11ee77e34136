"""Keeps a store's concurrency leases alive on the server while this process holds them.

A lease recorded on the server expires ``lease_ttl`` after its last renewal, so a holder that dies
gives its permits back ``lease_ttl`` later; a living holder renews its leases every third of the
shortest ``lease_ttl`` of its limiters: in a daemon thread for a sync client, in a task of the
event loop for an asyncio one (started when a lease is granted, ended once none is held).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._forking import AfterFork, renewed_event
from ..errors import BackendError
from . import reasserting

if TYPE_CHECKING:
    from .store_limiter import StoreLimiter


logger = logging.getLogger("permits")


#: After a round that could not reach the server, the next comes this soon (doubling up to the
#: round's interval): renewal goes on as soon as the server answers again, so an outage shorter than
#: lease_ttl loses no lease.
RETRY_FIRST = 0.05


class _Round:
    """Whether every step of a renewal round reached the server."""

    __slots__ = ("failed",)

    def __init__(self) -> None:
        self.failed = False

    @contextlib.contextmanager
    def quiet(self, doing: str) -> Iterator[None]:
        """A background round never dies: a server down (BackendError), a store closed meanwhile or
        a client library's own error (redis-py raises AttributeError on a connection closed under
        it) ends this step only, and the round is tried again soon."""
        try:
            yield
        except BackendError:
            self.failed = True
        except Exception:
            self.failed = True
            logger.debug("permits: %s failed", doing, exc_info=True)


@contextlib.contextmanager
def _quiet(doing: str) -> Iterator[None]:
    with _Round().quiet(doing):
        yield


_all: AfterFork[Renewal] = AfterFork(lambda renewal: renewal._forked())


class Renewal:
    def __init__(self, backend: Any, now: Any) -> None:
        self._backend = backend
        self._now = now
        self._limiters: weakref.WeakSet[StoreLimiter] = weakref.WeakSet()
        self._lock = threading.RLock()  # (drop() runs in finalizers: maybe inside watch())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._tasks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = (
            weakref.WeakKeyDictionary()
        )
        #: Leases dropped without release(): the thread gives their permits back at once.
        self._dropped: collections.deque[tuple[StoreLimiter, str, int]] = collections.deque()
        self._pending = 0  # dropped leases not yet given back
        self._settled = threading.Condition()
        self._kick = threading.Event()
        _all.add(self)

    def _forked(self) -> None:
        """In a forked child: the parent's thread is not here, and what it may have held at the
        fork (a lock, an Event's) is made anew. Its dropped leases are the parent's to give back."""
        self._lock = threading.RLock()
        self._stop, self._kick = renewed_event(self._stop), threading.Event()
        self._settled = threading.Condition()
        self._dropped.clear()
        self._pending = 0
        self._thread = None

    def watch(self, limiter: StoreLimiter) -> None:
        """``limiter`` holds a lease now: make sure something renews it."""
        with self._lock:
            self._limiters.add(limiter)
            if self._stop.is_set():
                return
            if self._backend.is_async is True:
                self._start_task()
                return
        self._start_thread()

    def _start_thread(self) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            if self._thread is None or self._pid != os.getpid():  # (a fork's child has no thread)
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name="permits-lease-renewal", daemon=True)
                self._thread.start()

    def drop(self, limiter: StoreLimiter, lid: str, n: int, loop: asyncio.AbstractEventLoop | None) -> bool:
        """A lease was dropped without release() (called from its finalizer, in any thread: no I/O
        here): its permits are given back by the renewal thread, or (an asyncio client) by a task
        of ``loop``, the lease's. False when nothing can: the lease, no longer renewed, expires
        lease_ttl later."""
        if self._stop.is_set():
            return False
        if self._backend.is_async is True:
            if loop is None or loop.is_closed():
                return False
            try:
                loop.call_soon_threadsafe(self._give_back_in_loop, limiter, lid, n)
            except RuntimeError:  # closed meanwhile
                return False
            return True
        with self._settled:
            self._pending += 1
        self._dropped.append((limiter, lid, n))
        self._kick.set()
        self._start_thread()
        return True

    def _give_back_in_loop(self, limiter: StoreLimiter, lid: str, n: int) -> None:
        limiter.store._give_back(limiter, n, 0, lid)  # (a task of this loop, kept until it lands)
        limiter._queue.changed()

    def flush(self, deadline: float) -> bool:
        """Waits, until ``deadline`` (time.monotonic()) at the latest, for the dropped leases to be
        given back; whether they are."""
        if not self._pending:
            return True
        with self._settled:
            return self._settled.wait_for(lambda: not self._pending, timeout=max(0.0, deadline - time.monotonic()))

    def _give_back_dropped(self) -> None:
        while self._dropped:
            limiter, lid, n = self._dropped.popleft()
            try:
                with _quiet("giving back a dropped lease"):  # on failure, it expires lease_ttl later
                    self._backend.refund(limiter._state, limiter._rule, n, 0, lid, self._now())
                limiter._queue.changed()
            finally:
                with self._settled:
                    self._pending -= 1
                    self._settled.notify_all()

    def _interval(self) -> float:
        ttls = [limiter._rule.lease_ttl_ns for limiter in list(self._limiters)]
        return max(0.001, min(ttls, default=3_000_000_000) / 3e9)

    def _due(self) -> list[tuple[StoreLimiter, list[str]]]:
        return [(limiter, list(held)) for limiter in list(self._limiters) if (held := limiter.held_here())]

    def _run(self) -> None:
        next_round = time.monotonic() + self._interval()
        retry = RETRY_FIRST
        while not self._stop.is_set():
            self._kick.wait(max(0.0, next_round - time.monotonic()))
            self._kick.clear()
            if self._stop.is_set():
                return
            self._give_back_dropped()
            if time.monotonic() < next_round:
                continue
            attempt = _Round()
            for limiter, ids in self._due():
                with attempt.quiet("renewing leases"):
                    forgotten = self._backend.renew(limiter._state, limiter._rule, ids, self._now())
                    if forgotten:
                        reasserting.reassert(limiter, forgotten)
            interval = self._interval()
            if attempt.failed:  # again soon: the server may answer again any moment
                next_round, retry = time.monotonic() + min(retry, interval), min(retry * 2, interval)
            else:
                next_round, retry = time.monotonic() + interval, RETRY_FIRST

    def _start_task(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = self._tasks.get(loop)
        if task is None or task.done():
            self._tasks[loop] = loop.create_task(self._run_async())

    async def _run_async(self) -> None:
        pause = self._interval()
        retry = RETRY_FIRST
        while not self._stop.is_set():
            await asyncio.sleep(pause)
            due = self._due()
            if not due:
                return
            attempt = _Round()
            for limiter, ids in due:
                with attempt.quiet("renewing leases"):
                    forgotten = await self._backend.renew_async(limiter._state, limiter._rule, ids, self._now())
                    if forgotten:
                        await reasserting.reassert_async(limiter, forgotten)
            interval = self._interval()
            if attempt.failed:
                pause, retry = min(retry, interval), min(retry * 2, interval)
            else:
                pause, retry = interval, RETRY_FIRST

    def renew_now(self) -> None:
        """One round at once (tests; a process about to block for long)."""
        for limiter, ids in self._due():
            forgotten = self._backend.renew(limiter._state, limiter._rule, ids, self._now())
            if forgotten:
                reasserting.reassert(limiter, forgotten)

    async def renew_now_async(self) -> None:
        """One round at once, with an asyncio client (tests)."""
        for limiter, ids in self._due():
            forgotten = await self._backend.renew_async(limiter._state, limiter._rule, ids, self._now())
            if forgotten:
                await reasserting.reassert_async(limiter, forgotten)

    def stop(self) -> None:
        self._stop.set()
        self._kick.set()
        for task in list(self._tasks.values()):
            with contextlib.suppress(RuntimeError):  # its loop is closed
                task.get_loop().call_soon_threadsafe(task.cancel)
