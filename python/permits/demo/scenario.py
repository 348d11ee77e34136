"""The scenario: the limit every limiter of the demo gets, and the traffic offered to them."""

from __future__ import annotations

import math

RATE = 10
"""Every limiter of the demo admits about this many requests per second."""
WINDOW = 1.0
SEGMENTS = 4
"""Segments of the sliding window."""
BURST = 30
"""Requests in each burst (three times what a limiter admits per second)."""
STEADY_RATE = 20
"""Requests per second of the steady stream (twice the limit)."""
QUEUE_LIMIT = 10
CONCURRENCY = 3
HOLD = 0.25
"""Seconds a request of the concurrency variant holds its permit."""


def _plan(seconds: float) -> tuple[float, list[float]]:
    """The end of the steady stream and the times of the last burst's requests."""
    boundary = math.floor(0.8 * seconds / WINDOW) * WINDOW
    if boundary >= WINDOW and boundary + 0.05 < seconds:
        # half the burst just before a window boundary, half just after it: the fixed
        # window's weak spot (twice its limit in 0.1 s); the quiet window before it lets
        # every limiter start that burst full
        half = BURST // 2
        last = [boundary - 0.05] * half + [boundary + 0.05] * (BURST - half)
        return min(0.6 * seconds, boundary - WINDOW), last
    return 0.6 * seconds, [0.8 * seconds] * BURST


def traffic(seconds: float) -> list[float]:
    """The arrival times (seconds from the start) of the demo's requests, sorted.

    A burst of ``BURST`` requests at 0 s; a steady stream of ``STEADY_RATE`` per second from
    0.1 s to about 60 % of the run; quiet; then another burst of ``BURST``, split across the
    window boundary nearest to 80 % of the run (windows are anchored at the start).
    """
    steady_end, last = _plan(seconds)
    arrivals = [0.0] * BURST
    n = max(0, math.ceil((steady_end - 0.1) * STEADY_RATE))
    arrivals += [0.1 + i / STEADY_RATE for i in range(n)]
    arrivals += last
    return sorted(arrivals)


def _describe_traffic(seconds: float) -> str:
    steady_end, last = _plan(seconds)
    steady = f"{STEADY_RATE}/s until {steady_end:.1f} s, quiet, " if steady_end > 0.1 else ""
    if last[0] != last[-1]:
        boundary = (last[0] + last[-1]) / 2
        tail = f"{len(last)} around the window boundary at {boundary:g} s"
    else:
        tail = f"burst of {len(last)} at {last[0]:.1f} s"
    return f"burst of {BURST} at 0 s, {steady}{tail}"
