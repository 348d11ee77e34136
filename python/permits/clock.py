"""Clocks: every limiter reads time from one. ManualClock makes time a test's to move."""

from __future__ import annotations

import weakref
from typing import Any

from . import _core, _pausing
from ._durations import MAX_CLOCK_NS, Duration, duration_ns
from ._unraisable import report_unraisable


class MonotonicClock(_core.MonotonicClock):
    """The default clock: the system's monotonic clock (never jumps with wall-clock changes).

    Where the kernel itself keeps time with the CPU's time-stamp counter (x86-64 Linux with an
    invariant TSC), the clock reads the counter directly, scaled to nanoseconds against
    ``CLOCK_MONOTONIC`` once per process (``source == "tsc"``): cheaper than ``clock_gettime``,
    on ``CLOCK_MONOTONIC``'s origin, but not slewed by NTP, so it drifts from
    ``time.monotonic_ns()`` by parts per million. Elsewhere, or with the environment
    variable ``PERMITS_CLOCK=monotonic``, it is ``CLOCK_MONOTONIC`` (``source == "monotonic"``).
    """

    def now(self) -> float:
        """Seconds since an arbitrary origin."""
        return self.now_ns() / 1e9

    def __repr__(self) -> str:
        return f"MonotonicClock(source={self.source!r})"


class ManualClock(_core.ManualClock):
    """A clock that moves only when ``advance`` is called.

    It starts at ``start`` seconds (default 0); time is kept as integer nanoseconds. ``advance``
    does at once, in the calling thread, all the engine work that has come due (replenishment,
    waking waiters, timeouts), so tests need no sleeps.
    """

    def __init__(self, start: Duration = 0.0) -> None:
        super().__init__(duration_ns(start, "start", allow_zero=True, maximum=MAX_CLOCK_NS))
        # Partitioned limiters on this clock, whose due evictions advance() performs.
        self._partitioned: weakref.WeakSet[Any] = weakref.WeakSet()

    def now(self) -> float:
        """The clock's time in seconds: its ``start`` plus every ``advance`` since."""
        return self.now_ns() / 1e9

    def advance(self, seconds: Duration) -> None:
        """Moves time forward by ``seconds`` (rounded to the nearest nanosecond); the clock stops
        at ``2**63 - 2**60`` ns (about 255 years)."""
        delta = duration_ns(seconds, "seconds", allow_zero=True, maximum=MAX_CLOCK_NS)
        if delta > MAX_CLOCK_NS - self.now_ns():
            raise ValueError(f"seconds: advancing by {seconds!r} would take the clock past 2**63 - 2**60 ns")
        self.advance_ns(delta)
        for limiter in list(self._partitioned):
            try:
                limiter._evict_idle(report=True)  # as on the way in acquire: close errors are unraisable
            except Exception as exc:  # one limiter's trouble is not the clock's caller's
                report_unraisable(exc, limiter, "Exception ignored while evicting idle partitions")
        _pausing.wake_all()  # custom limiters' pauses run on their clock: they look again

    def _on_advance(self, limiter: Any) -> None:
        self._partitioned.add(limiter)

    def __repr__(self) -> str:
        return f"ManualClock(now={self.now()!r})"


_default_clock: MonotonicClock | None = None


def resolve(clock: object) -> _core.Clock:
    """The clock a limiter given ``clock=`` runs on: that clock, or for None the process's shared
    ``MonotonicClock``. Raises ``TypeError`` for anything else."""
    global _default_clock
    if clock is None:
        if _default_clock is None:
            _default_clock = MonotonicClock()
        return _default_clock
    if not isinstance(clock, _core.Clock):
        raise TypeError(f"clock must be a permits.ManualClock or permits.MonotonicClock, got {type(clock).__name__}")
    return clock
