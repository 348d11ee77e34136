"""Housekeeping of a PostgresStore's table: rows of states and leases that expired go, however
fast new keys came. The steps of the limiters delete nothing of other states (a step is one
statement, as short as it can be: it took a purge of two rows on its way until issue 37, item 7);
this purge, off the callers' path, deletes the expired rows in batches every PURGE_S while the store
is in use: in a daemon thread for a client that serves sync calls, in a task of the loop for an
asyncio one. With a ManualClock (tests) nothing runs by itself: ``purge_now()`` does a round."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .._forking import AfterFork, renewed_event

logger = logging.getLogger("permits")

#: Seconds between two rounds; rows per statement (a round goes on while a statement fills one).
PURGE_S = 1.0
BATCH = 5000


def _forked(purger: Purger) -> None:
    # (the parent's thread may have held the lock, or its wait the Event's)
    purger._lock, purger._stop = threading.Lock(), renewed_event(purger._stop)


_all: AfterFork[Purger] = AfterFork(_forked)


class Purger:
    def __init__(self, backend: Any, now: Callable[[], int | None], *, manual: bool) -> None:
        self._backend = weakref.ref(backend)
        self._now = now
        self._manual = manual
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._pid = 0
        self._tasks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = (
            weakref.WeakKeyDictionary()
        )
        _all.add(self)

    def poke(self) -> None:
        """The store is in use: make sure a purge runs (a thread, or a task of the running loop)."""
        if self._manual or self._stop.is_set():
            return
        backend = self._backend()
        if backend is None:
            return
        if backend.is_async is True:
            loop = asyncio._get_running_loop()
            if loop is not None and (loop not in self._tasks or self._tasks[loop].done()):
                self._tasks[loop] = loop.create_task(self._run_async())
            return
        with self._lock:
            if self._pid != os.getpid():  # (a fork's child has no thread)
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="permits-postgres-purge", daemon=True).start()

    def purge_now(self) -> int:
        """One round at once; the rows deleted."""
        backend = self._backend()
        gone = 0
        while backend is not None:
            deleted = backend.purge(self._now(), BATCH)
            gone += deleted
            if deleted < BATCH:
                break
        return gone

    def _run(self) -> None:
        while not self._stop.wait(PURGE_S):
            try:
                self.purge_now()
            except Exception:  # a round never dies (a server down...): the next one tries again
                logger.debug("permits: purging expired rows failed", exc_info=True)
            if self._backend() is None:
                return

    async def _run_async(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(PURGE_S)
            backend = self._backend()
            if backend is None:
                return
            try:
                while await backend.purge_async(self._now(), BATCH) >= BATCH:
                    pass
            except Exception:
                logger.debug("permits: purging expired rows failed", exc_info=True)
            del backend

    def stop(self) -> None:
        self._stop.set()
        for task in list(self._tasks.values()):
            with contextlib.suppress(RuntimeError):  # its loop is closed
                task.get_loop().call_soon_threadsafe(task.cancel)
