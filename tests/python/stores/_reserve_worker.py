"""A process of the reserve tests (spawned): hammers one limiter of a RedisStore(reserve=N) on the
server's clock and returns when each grant happened, as (time before, time after) the acquire in
the server's time base (CLOCK_REALTIME, as Redis's TIME on the same host)."""

from __future__ import annotations

import time
from typing import Any

import redis

from permits import specs
from permits.redis import RedisStore

KINDS: dict[str, Any] = {
    "token_bucket": specs.TokenBucket,
    "fixed_window": specs.FixedWindow,
    "sliding_window": specs.SlidingWindow,
    "sliding_window_counter": specs.SlidingWindowCounter,
}


def hammer(
    port: int, prefix: str, kind: str, params: tuple[Any, ...], reserve: int, together: Any, run_ns: int, pace: float
) -> tuple[list[tuple[int, int]], int]:
    """Once every process is ready (``together``, a barrier), acquires one permit every ``pace``
    seconds (0: back to back) for ``run_ns``: the grants' times and the number refused."""
    client = redis.Redis(host="127.0.0.1", port=port)
    store = RedisStore(client, prefix=prefix, reserve=reserve, timeout=5.0)
    limiter = store.limiter("hammer", KINDS[kind](*params))
    grants: list[tuple[int, int]] = []
    refused = 0
    together.wait(60)
    stop_ns = time.time_ns() + run_ns
    while (before := time.time_ns()) < stop_ns:
        lease = limiter.acquire()
        after = time.time_ns()
        if lease:
            grants.append((before, after))
        else:
            refused += 1
        if pace:
            time.sleep(pace)
    store.close()
    client.close()
    return grants, refused
