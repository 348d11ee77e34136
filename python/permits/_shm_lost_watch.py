"""A shared-memory store's reporter of lost leases: one daemon thread per store (started with its
first concurrency limiter, again in a forked child) that sleeps in the engine, without the GIL,
until the engine finds leases of this process lost, then reports each limiter's new losses by
its name (``_lost_leases.report``). The engine finds them itself (its heartbeat, a lease looked
at or released); this thread only tells Python."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from . import _lost_leases
from ._forking import AfterFork

_WAKE_NS = 5_000_000_000  # a closed or collected store's thread ends within this


class LostWatch:
    __slots__ = ("__weakref__", "_core", "_pid", "_sources", "_store", "_told")

    def __init__(self, store: Any, core: Any) -> None:
        self._store = weakref.ref(store)
        self._core = core
        self._sources: weakref.WeakSet[Any] = weakref.WeakSet()
        self._told: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._pid = 0
        _watches.add(self)

    def add(self, source: Any) -> None:
        """Watches ``source`` (its ``name`` and ``_lost_leases`` count), and starts the thread."""
        self._told[source] = source._lost_leases
        self._sources.add(source)
        self.start()

    def start(self) -> None:
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        threading.Thread(target=self._run, name="permits-shm-lost-leases", daemon=True).start()

    def _run(self) -> None:
        core = self._core
        seen = core._lost_seq
        while True:
            now = core._wait_lost(seen, _WAKE_NS)
            store = self._store()
            if store is None or store._closed or self._pid != os.getpid():
                return
            del store
            if now != seen:
                seen = now
                self.report()

    def report(self) -> None:
        for source in list(self._sources):
            count = source._lost_leases
            new = count - self._told.get(source, 0)
            if new > 0:
                self._told[source] = count
                _lost_leases.report(source.name, new)


def _watch_again(watch: LostWatch) -> None:
    # The parent's threads are gone: a store that was watched is watched again here.
    if watch._pid != 0:
        watch._pid = 0
        watch.start()


_watches: AfterFork[LostWatch] = AfterFork(_watch_again)
