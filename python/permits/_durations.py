"""Argument checks for the Python face: durations in seconds (or timedelta) and counts.

Subclasses of int and float are read through the base type's own conversion (``int.__int__``,
``float.__float__``): an overridden hook, or one that raises, cannot change what a limit is.
"""

from __future__ import annotations

import math
from datetime import timedelta

Duration = float | int | timedelta

#: The longest duration, in ns (146 years): far beyond any sensible period.
MAX_NS = 2**62
#: The latest time a ManualClock may reach, in ns (about 255 years; the engine's kMaxTime).
MAX_CLOCK_NS = 2**63 - 2**60


def _too_large(name: str, value: object, maximum: int) -> ValueError:
    limit = "2**62 ns, about 146 years" if maximum == MAX_NS else "2**63 - 2**60 ns, about 255 years"
    return ValueError(f"{name} is too large: {value!r} seconds (at most {limit})")


def duration_ns(value: object, name: str, *, allow_zero: bool = False, maximum: int = MAX_NS) -> int:
    """Seconds (int, float or timedelta) to integer nanoseconds, rounded to the nearest one
    (at most ``maximum``: MAX_NS, or MAX_CLOCK_NS for a time on a clock)."""
    if isinstance(value, timedelta):
        ns = ((value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds) * 1_000  # exact
        shown: object = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be seconds (int or float) or a timedelta, got {type(value).__name__}")
    elif isinstance(value, int):
        whole = int.__int__(value)
        if whole > maximum // 1_000_000_000:
            raise _too_large(name, whole, maximum)
        ns, shown = whole * 1_000_000_000, whole
    else:
        seconds = float.__float__(value)
        if math.isnan(seconds) or math.isinf(seconds):
            raise ValueError(f"{name} must be finite, got {seconds}")
        if seconds < 0:
            raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'} seconds, got {seconds}")
        if seconds > maximum / 1e9:
            raise _too_large(name, seconds, maximum)
        ns, shown = round(seconds * 1e9), seconds
    if ns < 0 or (ns == 0 and not allow_zero and shown == 0):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'} seconds, got {shown}")
    if ns > maximum:
        raise _too_large(name, shown, maximum)
    if ns == 0 and not allow_zero:
        raise ValueError(f"{name} must be at least 1 nanosecond, got {shown}")
    return ns


def count(value: object, name: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int.__int__(value)  # a subclass's own comparisons cannot sneak a bad value past
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value > 2**31 - 1:
        raise ValueError(f"{name} must be <= {2**31 - 1}, got {value}")
    return value


def segments(segments_per_window: object, window_ns: int) -> int:
    """A sliding window's segments: each at least 1 ns long."""
    n = count(segments_per_window, "segments_per_window")  # a plain int from here on
    if n > 65536:
        raise ValueError(f"segments_per_window must be <= 65536, got {n}")
    if window_ns // n < 1:
        raise ValueError("window must be at least segments_per_window nanoseconds")
    return n


def timeout_ns(value: object) -> int:
    """wait()'s timeout: None waits forever (-1)."""
    if value is None:
        return -1
    return duration_ns(value, "timeout", allow_zero=True)
