"""The permits Meters of one exporter's instrument set: one per limiter name and clock (a lease's
duration is measured on its limiter's clock), kept for as long as the set (counts outlive their
limiters, as counters do), read by limiter name when the exporter collects."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .._core import Clock, Meter


class Metered:
    """A limiter name's Meter on one clock, and what it could not count itself (more distinct
    results than it has room for)."""

    __slots__ = ("_clock", "_lock", "created", "meter", "name", "overflow")

    def __init__(self, name: str, meter: Meter, clock: Clock, lock: threading.Lock) -> None:
        self.name = name
        self.meter = meter
        self.created = time.time()
        self.overflow: dict[str, int] = {}
        self._clock = clock  # (kept: the table's key is its id, which no other clock may take)
        self._lock = lock

    def count(self, result: str) -> None:
        if not self.meter.count(result):
            with self._lock:
                self.overflow[result] = self.overflow.get(result, 0) + 1

    def results(self) -> dict[str, int]:
        """Leases counted by result, the overflow's included."""
        found = self.meter.results()
        with self._lock:
            overflow = list(self.overflow.items())
        for result, n in overflow:
            found[result] = found.get(result, 0) + n
        return found


class MeterTable:
    """The Meters of one instrument set, made by ``make(name, clock)`` on first use."""

    def __init__(self, make: Callable[[str, Clock], Meter]) -> None:
        self._make = make
        self._meters: dict[tuple[str, int], Metered] = {}  # (name, id(clock)): never dropped
        self._lock = threading.Lock()  # two limiters of a name instrumented at once share one

    def metered_for(self, name: str, clock: Clock) -> Metered:
        with self._lock:
            found = self._meters.get((name, id(clock)))
            if found is None:
                found = self._meters[(name, id(clock))] = Metered(name, self._make(name, clock), clock, self._lock)
            return found

    def by_name(self) -> dict[str, list[Metered]]:
        """Every limiter name's Meters, in name order."""
        found: dict[str, list[Metered]] = {}
        with self._lock:
            for metered in self._meters.values():
                found.setdefault(metered.name, []).append(metered)
        return dict(sorted(found.items()))


def results_of(found: list[Metered]) -> dict[str, int]:
    """Leases by result over several Meters (a name's on several clocks)."""
    totals: dict[str, int] = {}
    for metered in found:
        for result, n in metered.results().items():
            totals[result] = totals.get(result, 0) + n
    return totals
