"""How every process of a store learns a changed limit (``limiter.reconfigure``).

A change is recorded on the server per limiter name (the base signature its states were made
with, the rule now, a generation: ``rules.Record``); the states keep their base signature, and each
step passes the limit the process knows. A process learns the record of a name before its first
step on it (one read, once per name: a process started after a change has the changed limit), then
follows it: every ``FOLLOW_S`` seconds one read of the records of all its names, off the callers'
path (a daemon thread for a client that serves sync calls, a task of the loop for an asyncio one).
A change reaches every process within a round and a round trip; until then a process counts with
the limit it had (the server's counts are shared: nothing is counted twice or lost).
"""

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
from .rules import Record

logger = logging.getLogger("permits")

#: Seconds between two reads of a process's records.
FOLLOW_S = 1.0


def _forked(book: RuleBook) -> None:
    # (the parent's thread may have held the lock, or its wait the Event's.) The child has no thread
    # following: its limiters read their names' records again at their next step, which starts one.
    book._lock, book._stop = threading.Lock(), renewed_event(book._stop)
    book._pid = 0
    book._records.clear()
    store = book._store()
    for limiter in [] if store is None else list(store._limiters):
        if hasattr(limiter, "_take_on"):
            limiter._gen = -1
            limiter._direct = False


_all: AfterFork[RuleBook] = AfterFork(_forked)


class RuleBook:
    """The records of the names a store's limiters use in this process."""

    def __init__(self, store: Any, backend: Any) -> None:
        self._store = weakref.ref(store)
        self._backend = backend
        #: Names learned: their record (None: never changed).
        self._records: dict[str, Record | None] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pid = 0
        self._tasks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = (
            weakref.WeakKeyDictionary()
        )
        self._loop: Callable[[], asyncio.AbstractEventLoop | None] = lambda: None  # the last task's
        _all.add(self)

    # ---- learning a name ----
    def known(self, limiter: Any) -> bool:
        """``limiter`` takes on the record of its name if this process has it (no I/O)."""
        name = limiter.name
        if name not in self._records:
            return False
        limiter._take_on(self._records.get(name))
        return True

    def learn(self, limiter: Any) -> None:
        """Before a limiter's first step: the record of its name (raises ``BackendError``)."""
        if not self.known(limiter):
            name = limiter.name
            self._learned(self._backend.read_rules([name]))
            self._start_thread()

    async def learn_async(self, limiter: Any) -> None:
        if not self.known(limiter):
            self._learned(await self._backend.read_rules_async([limiter.name]))
            self._start_task()

    def _learned(self, records: dict[str, Record | None]) -> None:
        """Records read: each name's limiters in this process take on those newer than theirs."""
        changed = []
        with self._lock:
            for name, record in records.items():
                # (a lower generation: the records were lost, a server flushed or restarted without
                # persistence; the limiters keep their limit, and follow the next change)
                if name not in self._records or _gen(record) != _gen(self._records[name]):
                    self._records[name] = record
                    changed.append(name)
        if changed:
            self._apply(changed)

    def _apply(self, names: list[str]) -> None:
        store = self._store()
        if store is None:
            return
        wanted = set(names)
        for limiter in list(store._limiters):
            if limiter.name in wanted and hasattr(limiter, "_take_on"):
                limiter._take_on(self._records.get(limiter.name))

    def unchanged(self, name: str) -> bool:
        """Whether the limit of ``name`` was never changed (as learned: its first change records the
        base, which must be the states')."""
        return self._records.get(name) is None

    def base(self, name: str, rule: Any) -> str:
        """The signature the states of ``name`` were made with: its record's, else ``rule``'s."""
        record = self._records.get(name)
        return rule.signature if record is None else record.base

    # ---- a change made here ----
    def published(self, name: str, record: Record) -> None:
        """This process changed the limit of ``name``: its limiters of that name take it on now."""
        self._learned({name: record})

    # ---- following ----
    def _names(self) -> list[str]:
        """The names a limiter of this process uses (the records of the others are forgotten)."""
        store = self._store()
        used = set() if store is None else {limiter.name for limiter in list(store._limiters)}
        with self._lock:
            for name in [name for name in self._records if name not in used]:
                del self._records[name]
        return sorted(used)

    def follow_now(self) -> None:
        """One round at once (tests; the thread's round)."""
        names = self._names()
        if names:
            self._learned(self._backend.read_rules(names))

    async def follow_now_async(self) -> None:
        names = self._names()
        if names:
            self._learned(await self._backend.read_rules_async(names))

    def _start_thread(self) -> None:
        if self._stop.is_set():
            return
        with self._lock:
            if self._pid != os.getpid():  # (a fork's child has no thread)
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="permits-rule-follow", daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(FOLLOW_S):
            if self._store() is None:
                return
            try:
                self.follow_now()
            except Exception:  # a round never dies (a server down...): the next one tries again
                logger.debug("permits: reading the limits' changes failed", exc_info=True)

    def poke(self) -> None:
        """An asyncio step: the running loop follows (a loop started after the names were learned).
        (Every asyncio step asks: the loop that started the last task is one comparison.)"""
        if self._records and self._loop() is not asyncio._get_running_loop():
            self._start_task()

    def _start_task(self) -> None:
        loop = asyncio._get_running_loop()
        if loop is None or self._stop.is_set() or self._backend.is_async is False:
            return
        task = self._tasks.get(loop)
        if task is None or task.done():
            self._tasks[loop] = loop.create_task(self._run_async())
        self._loop = weakref.ref(loop)

    async def _run_async(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(FOLLOW_S)
            if self._store() is None:
                return
            try:
                await self.follow_now_async()
            except Exception:
                logger.debug("permits: reading the limits' changes failed", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        for task in list(self._tasks.values()):
            with contextlib.suppress(RuntimeError):  # its loop is closed
                task.get_loop().call_soon_threadsafe(task.cancel)


def _gen(record: Record | None) -> int:
    return 0 if record is None else record.gen
