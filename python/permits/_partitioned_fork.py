"""os.fork() and PartitionedLimiter: a thread holding a limiter's lock, or building a partition,
is not in the child. The forking thread takes every live limiter's lock first, so that the child
gets each in a known state (its own), and drops the partitions another thread was building (the
key's next caller builds it)."""

from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .partitioned import PartitionedLimiter

_live: weakref.WeakSet[PartitionedLimiter] = weakref.WeakSet()
_live_lock = threading.Lock()
_forking: list[PartitionedLimiter] = []


def track(limiter: PartitionedLimiter) -> None:
    """A new limiter, locked and mended around every fork from now on."""
    with _live_lock:
        _live.add(limiter)


def _before_fork() -> None:
    # Every lock held by the forking thread: the child gets them in a known state (its own).
    _live_lock.acquire()
    _forking[:] = list(_live)
    for limiter in _forking:
        limiter._lock.acquire()


def _after_fork_in_parent() -> None:
    for limiter in _forking:
        limiter._lock.release()
    _forking.clear()
    _live_lock.release()


def _after_fork_in_child() -> None:
    me = threading.get_ident()
    for limiter in _forking:
        # A partition another thread was building never will be: the key's next caller builds it.
        for key, entry in list(limiter._entries.items()):
            if not entry.ready.is_set() and entry.builder != me:
                del limiter._entries[key]
        limiter._lock.release()
    _forking.clear()
    _live_lock.release()


if hasattr(os, "register_at_fork"):  # (not on Windows)
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
