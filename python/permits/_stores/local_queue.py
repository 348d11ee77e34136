"""A store limiter's wait queue, in this process.

The permits live in a server; the requests waiting for them wait here, in the order of the
limiter's ``queue_order``, bounded by ``queue_limit`` permits, as the engine's queues are. Only
the head of the queue asks the server (head-of-line, as in the engine), so within one process the
rules of the queue hold; across processes each process has its own queue and the server serves
whichever asks first.

Waiters block (a thread) or suspend (a task); they look again whenever the queue changes, the
limiter closes or its clock advances: ``permits._pausing.wake_all`` is the one signal.
"""

from __future__ import annotations

import threading
from collections import deque

from .. import _pausing
from .._core import Lease
from .._forking import AfterFork


class Entry:
    """One queued request; ``outcome`` is set when something else ends it (an eviction)."""

    __slots__ = ("n", "outcome")

    def __init__(self, n: int) -> None:
        self.n = n
        self.outcome: Lease | None = None


def _forked(queue: LocalQueue) -> None:
    # The queued requests are the parent's threads' and tasks': the child has none of them, and
    # behind them (head-of-line) its own requests would wait for ever. A thread of the parent may
    # also have held the lock at the fork.
    queue._lock = threading.Lock()
    queue._entries.clear()
    queue.permits = 0
    queue.version += 1


_all: AfterFork[LocalQueue] = AfterFork(_forked)


class LocalQueue:
    __slots__ = ("__weakref__", "_entries", "_lock", "limit", "newest", "permits", "version")

    def __init__(self, limit: int, newest: bool) -> None:
        self.limit = limit
        self.newest = newest
        self.permits = 0
        #: Bumped on every change: a waiter pausing remembers it to notice a change.
        self.version = 0
        self._entries: deque[Entry] = deque()
        self._lock = threading.Lock()
        _all.add(self)

    def __len__(self) -> int:
        return len(self._entries)

    def is_head(self, entry: Entry) -> bool:
        # Under the lock: on a free-threaded build a close may empty the deque between a
        # check for emptiness and the index.
        with self._lock:
            entries = self._entries
            if not entries:
                return False
            return (entries[-1] if self.newest else entries[0]) is entry

    def join(self, n: int) -> Entry | None:
        """A new entry for ``n`` permits, or None when the queue has no room for it. Under
        NEWEST_FIRST the oldest entries are pushed out (reason "evicted") to make room."""
        if n > self.limit:
            return None
        with self._lock:
            evicted = False
            while self.permits + n > self.limit:
                if not self.newest:
                    return None
                oldest = self._entries.popleft()
                self.permits -= oldest.n
                oldest.outcome = Lease.denied("evicted")._with_permit_count(oldest.n)
                evicted = True
            entry = Entry(n)
            self._entries.append(entry)
            self.permits += n
            self.version += 1
        if evicted:
            _pausing.wake_all()
        return entry

    def leave(self, entry: Entry) -> None:
        """Removes the entry (if still queued) and lets the new head ask."""
        with self._lock:
            try:
                self._entries.remove(entry)
            except ValueError:
                return
            self.permits -= entry.n
            self.version += 1
        _pausing.wake_all()

    def changed(self) -> None:
        """Permits came back in this process (a release, a refund): the head asks again now."""
        if self._entries:
            with self._lock:
                self.version += 1
            _pausing.wake_all()

    def refuse_over(self, most: int) -> None:
        """A lowered limit: each queued request for more than ``most`` permits ends ``limit_reached``
        (it could never be granted)."""
        with self._lock:
            over = [entry for entry in self._entries if entry.n > most]
            for entry in over:
                entry.outcome = Lease.denied("limit_reached")._with_permit_count(entry.n)
                self._entries.remove(entry)
                self.permits -= entry.n
            if over:
                self.version += 1
        if over:
            _pausing.wake_all()

    def reconfigure(self, limit: int, newest: bool) -> None:
        """Other options: the requests beyond a lower ``limit`` end ``queue_full``, those that would
        be served last first (the newest under OLDEST_FIRST, the oldest under NEWEST_FIRST)."""
        with self._lock:
            self.limit, self.newest = limit, newest
            trimmed = False
            while self.permits > limit:
                entry = self._entries.popleft() if newest else self._entries.pop()
                entry.outcome = Lease.denied("queue_full")._with_permit_count(entry.n)
                self.permits -= entry.n
                trimmed = True
            self.version += 1
        if trimmed:
            _pausing.wake_all()

    def fail_all(self, lease: Lease) -> None:
        """Ends every queued request with a copy of ``lease`` (a close)."""
        with self._lock:
            for entry in self._entries:
                entry.outcome = lease._with_permit_count(entry.n)
            self._entries.clear()
            self.permits = 0
            self.version += 1
        _pausing.wake_all()
