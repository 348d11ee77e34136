"""reconfigure() on a shared-memory store's limiters: refused, and nothing changes. Every process
decides with its own copy of the limit; one process changing it alone would disagree with the others."""

from __future__ import annotations

from typing import Any

import pytest

import permits
from permits.shm import SharedMemoryStore

#: Each kind at a limit of 10, and of 5.
SPECS: dict[str, Any] = {
    "token_bucket": lambda limit: permits.specs.TokenBucket(limit, limit, 60.0),
    "fixed_window": lambda limit: permits.specs.FixedWindow(limit, 60.0),
    "sliding_window": lambda limit: permits.specs.SlidingWindow(limit, 60.0, 4),
    "sliding_log": lambda limit: permits.specs.SlidingLog(limit, 60.0),
    "sliding_window_counter": lambda limit: permits.specs.SlidingWindowCounter(limit, 60.0),
    "concurrency": lambda limit: permits.specs.Concurrency(limit),
}


@pytest.mark.parametrize("kind", list(SPECS))
def test_a_shared_limiter_refuses_and_keeps_its_limit(segment_name: str, kind: str) -> None:
    store = SharedMemoryStore(segment_name, clock=permits.ManualClock())
    limiter = store.limiter("api", SPECS[kind](10))
    with pytest.raises(NotImplementedError, match="shared-memory store cannot be reconfigured"):
        limiter.reconfigure(SPECS[kind](5))
    assert limiter.spec == SPECS[kind](10)
    assert len([lease for lease in (limiter.acquire() for _ in range(11)) if lease]) == 10
