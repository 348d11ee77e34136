"""Argument checks for the Python face: durations in seconds (or timedelta) and counts."""

from __future__ import annotations

import math
from datetime import timedelta

Duration = float | int | timedelta

_MAX_NS = 2**62  # far beyond any sensible period, far below int64 overflow in the engine


def duration_ns(value: object, name: str, *, allow_zero: bool = False) -> int:
    """Seconds (int, float or timedelta) to integer nanoseconds, rounded to the nearest one."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be seconds (int or float) or a timedelta, got {type(value).__name__}")
    else:
        seconds = float(value)
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"{name} must be finite, got {seconds}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'} seconds, got {seconds}")
    ns = round(seconds * 1e9)
    if ns > _MAX_NS:
        raise ValueError(f"{name} is too large: {seconds} seconds")
    if ns == 0 and not allow_zero:
        raise ValueError(f"{name} must be at least 1 nanosecond, got {seconds}")
    return ns


def count(value: object, name: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value > 2**31 - 1:
        raise ValueError(f"{name} must be <= {2**31 - 1}, got {value}")
    return value


def timeout_ns(value: object) -> int:
    """wait()'s timeout: None waits forever (-1)."""
    if value is None:
        return -1
    return duration_ns(value, "timeout", allow_zero=True)
