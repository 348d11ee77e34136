"""What a forked child makes anew before its own code goes on.

A fork copies every lock as it was: one a thread of the parent held at that moment (a store's renewal
or purge thread, a waiter's pause, a caller between two steps) stays held in the child, by a thread
the child does not have, and the child's first use of it hangs. Each kind of object holding such
locks registers how to renew one (``AfterFork(renew)``, then ``.add(obj)`` for each live one); the
child runs them all, in the order the kinds were made, right after the fork.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

_hooks: list[Callable[[], None]] = []
#: A forked child's copies of its parent's clients and connections: kept, never used nor closed
#: (closing one would end the parent's session on the shared socket; their locks may have been
#: copied held), for as long as the child lives.
_inherited: list[object] = []


def in_child(hook: Callable[[], None]) -> Callable[[], None]:
    """Runs ``hook()`` in every forked child (a module's own locks); returns it (a decorator)."""
    _hooks.append(hook)
    return hook


class AfterFork(Generic[T]):
    """The live objects of one kind, each renewed in a forked child by ``renew(obj)``."""

    def __init__(self, renew: Callable[[T], None]) -> None:
        self._members: weakref.WeakSet[T] = weakref.WeakSet()
        self._renew = renew
        in_child(self._in_child)

    def add(self, obj: T) -> None:
        self._members.add(obj)

    def _in_child(self) -> None:
        for obj in list(self._members):
            self._renew(obj)


def keep_inherited(obj: object) -> None:
    """Keeps a copy of the parent's client or connection alive, unused, in a forked child."""
    _inherited.append(obj)


def renewed_event(event: threading.Event) -> threading.Event:
    """A new Event in the state of ``event``: the parent's threads may have held the old one's lock
    at the fork (inside ``wait()`` or ``set()``)."""
    fresh = threading.Event()
    if event.is_set():
        fresh.set()
    return fresh


def _after_fork_in_child() -> None:
    for hook in _hooks:
        hook()


if hasattr(os, "register_at_fork"):  # (not on Windows)
    os.register_at_fork(after_in_child=_after_fork_in_child)
