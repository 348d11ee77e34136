"""permits: rate limiting with a lock-free C++ engine, after .NET's System.Threading.RateLimiting."""

from __future__ import annotations

from . import _interpreter  # noqa: F401  (refuses a subinterpreter before the extension is loaded)

# isort: split
from . import _asyncio, _foreign, specs  # noqa: F401  (the event loops' bridge, other libraries' waits; specs)
from ._core import Lease, LimiterClosedError
from ._cost import SentResponse
from .adaptive import AdaptiveLimiter
from .chain import ChainedLimiter, ChainedPartitionedLimiter, chain
from .clock import ManualClock, MonotonicClock
from .engine_limiters import (
    ConcurrencyLimiter,
    FixedWindowLimiter,
    NoLimiter,
    SlidingLogLimiter,
    SlidingWindowCounterLimiter,
    SlidingWindowLimiter,
    TokenBucketLimiter,
)
from .errors import BackendError, LeaseFailedError
from .jobs import limit, throttle
from .keyed_limiter import KeyedRateLimiter
from .partition import Partition
from .partitioned import PartitionedLimiter
from .per_key import PerKeyLimiter
from .rate_limiter import QueueOrder, RateLimiter, Statistics


def __getattr__(name: str) -> str:
    # The version has one source, the package's metadata (pyproject.toml); read on first use, so
    # that importing permits does not import importlib.metadata.
    if name == "__version__":
        from importlib.metadata import version

        return version("permits")
    raise AttributeError(f"module 'permits' has no attribute {name!r}")


__all__ = [
    "AdaptiveLimiter",
    "BackendError",
    "ChainedLimiter",
    "ChainedPartitionedLimiter",
    "ConcurrencyLimiter",
    "FixedWindowLimiter",
    "KeyedRateLimiter",
    "Lease",
    "LeaseFailedError",
    "LimiterClosedError",
    "ManualClock",
    "MonotonicClock",
    "NoLimiter",
    "Partition",
    "PartitionedLimiter",
    "PerKeyLimiter",
    "QueueOrder",
    "RateLimiter",
    "SentResponse",
    "SlidingLogLimiter",
    "SlidingWindowCounterLimiter",
    "SlidingWindowLimiter",
    "Statistics",
    "TokenBucketLimiter",
    "__version__",
    "chain",
    "limit",
    "specs",
    "throttle",
]
