"""Gives the permits a reserving limiter holds back to the server once it has been idle, so that
other processes may use them.

A limiter's stock goes back after IDLE_NS without use (on its pause clock), and is dropped once
expired; a round every ROUND_S seconds looks at every limiter holding a stock: in a daemon thread
for a sync client, in a task of the event loop for an asyncio one, running only while some limiter
holds one. With a ManualClock (tests) nothing runs by itself, as its time is the test's to move:
``return_now()`` does a round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import weakref
from typing import TYPE_CHECKING

from .._forking import AfterFork, renewed_event

if TYPE_CHECKING:
    from .reserving import ReservingLimiter

#: How long a stock stays in an idle limiter (ns on its pause clock).
IDLE_NS = 1_000_000_000
#: Seconds between two rounds.
ROUND_S = 0.25

logger = logging.getLogger("permits")


def _forked(returns: Returns) -> None:
    # (a round of the parent's thread may have held the lock, or its wait the Event's)
    returns._lock = threading.Lock()
    returns._stop = renewed_event(returns._stop)
    returns._thread = None


_all: AfterFork[Returns] = AfterFork(_forked)


class Returns:
    def __init__(self, is_async: bool | None, *, manual: bool) -> None:
        self._is_async = is_async
        self._manual = manual
        self._limiters: weakref.WeakSet[ReservingLimiter] = weakref.WeakSet()
        #: Closed limiters whose stock still goes back (nobody else keeps them: an evicted key's).
        self._kept: set[ReservingLimiter] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._tasks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = (
            weakref.WeakKeyDictionary()
        )
        _all.add(self)

    def watch(self, limiter: ReservingLimiter, *, keep: bool = False) -> None:
        """``limiter`` holds a stock now: make sure a round looks at it (``keep``: and keep it alive
        until its stock is back)."""
        with self._lock:
            self._limiters.add(limiter)
            if keep:
                self._kept.add(limiter)
            if self._stop.is_set() or self._manual:
                return
            if self._is_async is True:
                self._start_task()
            elif self._thread is None or self._pid != os.getpid():  # (a fork's child has no thread)
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name="permits-reserve-returns", daemon=True)
                self._thread.start()

    def return_now(self) -> bool:
        """One round: idle limiters give their stock back; True while some limiter still holds one."""
        holding = False
        with self._lock:
            limiters = set(self._limiters) | self._kept
        for limiter in limiters:
            try:
                kept = limiter._return_idle()
            except Exception:  # a round never dies (a store closed meanwhile...): the next one retries
                logger.debug("permits: returning a reserved stock failed", exc_info=True)
                kept = True
            if kept:
                holding = True
                continue
            with self._lock:
                if limiter._stock is None:  # (checked again: it may have taken a batch meanwhile)
                    self._limiters.discard(limiter)
                    self._kept.discard(limiter)
        return holding

    def _done(self) -> bool:
        """Under the lock: no stock left to look at (a stock made since the round calls watch())."""
        return not self._kept and not any(limiter._stock is not None for limiter in self._limiters)

    def _run(self) -> None:
        while not self._stop.wait(ROUND_S):
            if not self.return_now():
                with self._lock:
                    if self._done():
                        self._thread = None
                        return

    def _start_task(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # (an asyncio client's batches are taken in a loop: watch() is called there)
        task = self._tasks.get(loop)
        if task is None or task.done():
            self._tasks[loop] = loop.create_task(self._run_async())

    async def _run_async(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(ROUND_S)
            if not self.return_now():
                with self._lock:
                    if self._done():
                        return

    def stop(self) -> None:
        self._stop.set()
        for task in list(self._tasks.values()):
            with contextlib.suppress(RuntimeError):  # its loop is closed
                task.get_loop().call_soon_threadsafe(task.cancel)
