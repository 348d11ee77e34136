"""Keeps a store's concurrency leases alive on the server while this process holds them.

A lease recorded on the server expires ``lease_ttl`` after its last renewal, so a holder that dies
gives its permits back ``lease_ttl`` later; a living holder renews its leases every third of the
shortest ``lease_ttl`` of its limiters: in a daemon thread for a sync client, in a task of the
event loop for an asyncio one (started when a lease is granted, ended once none is held).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any

from ..errors import BackendError

if TYPE_CHECKING:
    from .store_limiter import StoreLimiter


class Renewal:
    def __init__(self, backend: Any, now: Any) -> None:
        self._backend = backend
        self._now = now
        self._limiters: weakref.WeakSet[StoreLimiter] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._tasks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = (
            weakref.WeakKeyDictionary()
        )

    def watch(self, limiter: StoreLimiter) -> None:
        """``limiter`` holds a lease now: make sure something renews it."""
        with self._lock:
            self._limiters.add(limiter)
            if self._stop.is_set():
                return
            if self._backend.is_async is True:
                self._start_task()
            elif self._thread is None or self._pid != os.getpid():  # (a fork's child has no thread)
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name="permits-lease-renewal", daemon=True)
                self._thread.start()

    def _interval(self) -> float:
        ttls = [limiter._rule.lease_ttl_ns for limiter in list(self._limiters)]
        return max(0.001, min(ttls, default=3_000_000_000) / 3e9)

    def _due(self) -> list[tuple[StoreLimiter, list[str]]]:
        return [(limiter, list(limiter.held)) for limiter in list(self._limiters) if limiter.held]

    def _run(self) -> None:
        while not self._stop.wait(self._interval()):
            for limiter, ids in self._due():
                with contextlib.suppress(BackendError):  # the next round tries again
                    self._backend.renew(limiter._state, limiter._rule, ids, self._now())

    def _start_task(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = self._tasks.get(loop)
        if task is None or task.done():
            self._tasks[loop] = loop.create_task(self._run_async())

    async def _run_async(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(self._interval())
            due = self._due()
            if not due:
                return
            for limiter, ids in due:
                with contextlib.suppress(BackendError):
                    await self._backend.renew_async(limiter._state, limiter._rule, ids, self._now())

    def renew_now(self) -> None:
        """One round at once (tests; a process about to block for long)."""
        for limiter, ids in self._due():
            self._backend.renew(limiter._state, limiter._rule, ids, self._now())

    def stop(self) -> None:
        self._stop.set()
        for task in list(self._tasks.values()):
            with contextlib.suppress(RuntimeError):  # its loop is closed
                task.get_loop().call_soon_threadsafe(task.cancel)
