"""Helpers of the PostgreSQL backend's tests: the differential run against the engine's limiter,
driven the same way through the sync and the asyncio members."""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Generator
from typing import Any

import permits
from permits._stores.backend import Outcome
from permits._stores.rules import Rule, rule_of

#: One spec per kind, with limits, periods and segments that make the arithmetic uneven.
SPECS: dict[str, Any] = {
    "token_bucket": permits.specs.TokenBucket(7, 3, 1.0),
    "fixed_window": permits.specs.FixedWindow(5, 1.0),
    "sliding_window": permits.specs.SlidingWindow(9, 1.0, 4),
    "sliding_window_counter": permits.specs.SlidingWindowCounter(7, 1.0),
    "sliding_log": permits.specs.SlidingLog(8, 1.0),
    "concurrency": permits.specs.Concurrency(4),
}
#: Long enough that no lease expires in a differential run (the engine's leases never do).
LONG_TTL = 10**15

Call = tuple[str, tuple[Any, ...]]

#: The timeout of the backends whose tests are about what they decide, not how fast a busy machine
#: answers (one SELECT of a differential run took over a second under a loaded CI run).
STEADY_TIMEOUT = 10.0


def new_table() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


def key_of(name: str) -> bytes:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()


def retry_ns(lease: permits.Lease) -> int:
    return -1 if lease.retry_after is None else round(lease.retry_after * 1e9)


def differential(kind: str, seed: int, steps: int) -> Generator[Call, Any, int]:
    """Takes, refunds and clock advances at random, each also done on an engine limiter of the
    same spec on the same ManualClock; yields the backend calls (member name, arguments), is sent
    their results, and asserts they agree: granted, available, retry_after (within 1 ns). Returns
    the number of grants (a run that never grants or never refuses proves little)."""
    spec = SPECS[kind]
    clock = permits.ManualClock()
    engine = spec.limiter(clock=clock)
    rule: Rule = rule_of(spec, lease_ttl_ns=LONG_TTL)
    period = max(rule.period_ns, 1)
    rng = random.Random(seed)
    name = f"diff-{kind}-{seed}"
    held: list[tuple[permits.Lease, int, int, str]] = []
    grants = refusals = 0
    for step in range(steps):
        what = rng.random() if step else 0.0  # the first step makes the state, as the engine's creation
        if what < 0.6:
            n = rng.choice([0, 1, 1, 2, rng.randint(0, rule.limit)])
            lease_id = f"lease-{step}"
            lease = engine.acquire(n)
            got: Outcome = yield "take", (name, rule, n, lease_id, clock.now_ns())
            expected = (lease.acquired, engine.available_permits(), retry_ns(lease))
            assert (got.granted, got.available) == expected[:2], (kind, step, n, got, expected)
            assert abs(got.retry_after_ns - expected[2]) <= 1, (kind, step, n, got, expected)
            if lease.acquired:
                grants += 1
                if n > 0:
                    held.append((lease, n, got.stamp, lease_id))
            else:
                refusals += 1
        elif what < 0.75 and held:
            lease, n, stamp, lease_id = held.pop(rng.randrange(len(held)))
            if kind == "concurrency":
                lease.release()
            else:
                lease._refund()
            yield "refund", (name, rule, n, stamp, lease_id, clock.now_ns())
        else:
            clock.advance_ns(rng.choice([0, 1, period // 7, period // 4, period - 1, rng.randrange(2 * period)]))
        available = yield "available", (name, rule, clock.now_ns())
        assert available == engine.available_permits(), (kind, step, available)
    assert grants > 0 and refusals > 0, (kind, grants, refusals)
    return grants


def run_sync(backend: Any, plan: Generator[Call, Any, int]) -> int:
    try:
        member, args = next(plan)
        while True:
            member, args = plan.send(getattr(backend, member)(*args))
    except StopIteration as stop:
        return int(stop.value)


async def run_async(backend: Any, plan: Generator[Call, Any, int]) -> int:
    try:
        member, args = next(plan)
        while True:
            member, args = plan.send(await getattr(backend, member + "_async")(*args))
    except StopIteration as stop:
        return int(stop.value)
