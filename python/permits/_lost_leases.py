"""Leases a shared state forgot while their holder lived (it was paused past ``lease_ttl``, the
server restarted or was flushed) and that could not be taken back: each loss is logged once, as a
warning on the ``permits`` logger naming the limiter, and counted by the instrumented limiters of
that name (``permits_leases_lost_total``, ``permits.leases.lost``)."""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Protocol

from ._forking import in_child

_log = logging.getLogger("permits")


class LostSink(Protocol):
    """An exporter's count of lost leases for one limiter name."""

    @property
    def lost_key(self) -> object:
        """The instrument it adds to: two sinks on the same instrument count a loss once."""

    def lost(self, leases: int) -> None: ...


_sinks: dict[str, weakref.WeakSet[LostSink]] = {}
_lock = threading.Lock()


@in_child
def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # (a store's renewal thread reporting a loss may have held it at the fork)


def listen(name: str, sink: LostSink) -> None:
    """Has ``sink.lost(leases)`` called for each loss of a limiter named ``name``, while the sink lives."""
    with _lock:
        _sinks.setdefault(name, weakref.WeakSet()).add(sink)


def report(name: str, leases: int) -> None:
    """``leases`` of limiter ``name`` were found lost: logged, and counted by its sinks."""
    if leases <= 0:
        return
    _log.warning(
        "limiter %r lost %d lease(s): the shared state forgot them while this process held them (it was "
        "paused past lease_ttl, or the server lost them) and the limit no longer allowed taking them "
        "back; their metadata['lost'] is True and their release gives nothing back",
        name,
        leases,
    )
    with _lock:
        sinks = list(_sinks.get(name, ()))
    counted: set[int] = set()
    for sink in sinks:
        key = id(sink.lost_key)
        if key not in counted:
            counted.add(key)
            sink.lost(leases)
