"""Pure-Python reference models of the limiters, for the property tests (never shipped).

Each algorithm module holds the state of one algorithm as docs/design.md states it, driven by
integer nanoseconds; ``queue.LimiterModel`` adds what every limiter shares (the queue, statistics,
retry_after, idleness, close). The models favour being obviously right over being fast.
"""

from __future__ import annotations

from .chain import ChainModel
from .concurrency import ConcurrencyModel
from .fixed_window import FixedWindowModel
from .keyed import KeyedModel
from .queue import Closed, LimiterModel, Outcome
from .sliding_window import SlidingWindowModel
from .sliding_window_counter import SlidingWindowCounterModel
from .token_bucket import TokenBucketModel

__all__ = [
    "ChainModel",
    "Closed",
    "ConcurrencyModel",
    "FixedWindowModel",
    "KeyedModel",
    "LimiterModel",
    "Outcome",
    "SlidingWindowCounterModel",
    "SlidingWindowModel",
    "TokenBucketModel",
]
