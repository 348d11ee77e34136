"""What each limiter did with the traffic (the results), and the limiters the demo drives."""

from __future__ import annotations

from dataclasses import dataclass, field

import permits

from .scenario import CONCURRENCY, HOLD, QUEUE_LIMIT, RATE, SEGMENTS, WINDOW


@dataclass
class RowResult:
    """What one limiter of the demo did with the traffic."""

    label: str
    detail: str
    mode: str
    """``"acquire"``, ``"queue"`` (``wait_async``) or ``"hold"`` (concurrency)."""
    granted_at: list[float] = field(default_factory=list)
    rejected_at: list[float] = field(default_factory=list)
    queued: int = 0
    """Requests waiting in the limiter's queue (its ``statistics()``), last sampled."""
    queued_peak: int = 0
    queued_over_time: list[tuple[float, int]] = field(default_factory=list)
    """(seconds from the start, requests waiting) each time the queue's length changed."""
    unfinished: int = 0
    """Requests still queued when the demo ended."""
    total_wait: float = 0.0
    """Seconds waited, summed over the queued requests that were granted."""
    last_retry_after: float | None = None
    last_reject_time: float = -1.0
    reasons: dict[str, int] = field(default_factory=dict)
    window: float | None = None
    """The length of its window, for the windowed limiters (the plot marks their boundaries)."""
    segments: int = 1
    """How many segments its window slides by (the sliding window's)."""

    @property
    def granted(self) -> int:
        return len(self.granted_at)

    @property
    def rejected(self) -> int:
        return len(self.rejected_at)


@dataclass
class DemoResult:
    seconds: float
    offered_at: list[float]
    rows: list[RowResult]


@dataclass
class _Row:
    result: RowResult
    limiter: permits.RateLimiter


def _make_rows(concurrency: bool, clock: permits.ManualClock | None) -> list[_Row]:
    def row(
        label: str,
        detail: str,
        mode: str,
        limiter: permits.RateLimiter,
        window: float | None = None,
        segments: int = 1,
    ) -> _Row:
        return _Row(RowResult(label, detail, mode, window=window, segments=segments), limiter)

    period = 1.0 / RATE
    rows = [
        row(
            "token bucket",
            f"{RATE} tokens, +1 every {period:g} s",
            "acquire",
            permits.TokenBucketLimiter(RATE, 1, period, clock=clock, name="token_bucket"),
        ),
        row(
            "fixed window",
            f"{RATE} per {WINDOW:g} s window",
            "acquire",
            permits.FixedWindowLimiter(RATE, WINDOW, clock=clock, name="fixed_window"),
            WINDOW,
        ),
        row(
            "sliding window",
            f"{RATE} per {WINDOW:g} s, {SEGMENTS} segments",
            "acquire",
            permits.SlidingWindowLimiter(RATE, WINDOW, SEGMENTS, clock=clock, name="sliding_window"),
            WINDOW,
            SEGMENTS,
        ),
        row(
            "sliding window counter",
            f"{RATE} per {WINDOW:g} s, weighted",
            "acquire",
            permits.SlidingWindowCounterLimiter(RATE, WINDOW, clock=clock, name="sliding_window_counter"),
            WINDOW,
        ),
        row(
            "token bucket + queue",
            f"as above, queue {QUEUE_LIMIT}, wait_async",
            "queue",
            permits.TokenBucketLimiter(
                RATE, 1, period, queue_limit=QUEUE_LIMIT, clock=clock, name="token_bucket_queued"
            ),
        ),
    ]
    if concurrency:
        rows.append(
            row(
                "concurrency",
                f"{CONCURRENCY} at once, {HOLD:g} s each",
                "hold",
                permits.ConcurrencyLimiter(CONCURRENCY, clock=clock, name="concurrency"),
            )
        )
    return rows
