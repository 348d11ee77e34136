"""Property tests: refunds and settles at any later time never let a limiter grant more than its
algorithm allows.

A refund (a chain giving back an earlier member's grant, a cancelled ``acquire_async``) may come
long after the grant: a slow member of a chain answers after seconds, a queued wait in it is
cancelled after a while. The rule: a refund never lets a limiter grant more, in any interval,
than it could have had the refunded grant never happened.

Hypothesis draws a limiter of every kind (plain, or per key through ``PartitionedLimiter.per_key``
with a few keys) on a ManualClock and a random sequence of operations: acquire(n), refunding a
held grant (``Lease._refund()``, what a chain calls), settling one to fewer permits
(``lease.settle(k)``: as if it had taken only k), releasing one, advancing the clock. Every grant
is recorded with its time and key; after the run, the grants never refunded are checked, each
with the count it kept, against what the algorithm allows, for every interval:

* token bucket: in any interval [a, b], at most ``token_limit`` plus ``tokens_per_period`` for
  every refill in (a, b];
* fixed window: at most ``permit_limit`` in any window;
* sliding window: at most ``permit_limit`` in any ``segments_per_window`` consecutive segments;
* sliding window counter: at every grant, previous * (W - e) + current * W <= permit_limit * W
  (counts of the grants kept, e the time into the current window);
* concurrency: never more than ``permit_limit`` held at once (a settled lease holds its first
  count until it is settled, then what it kept).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import permits

from _model_support import KINDS, Config, build_limiter, configs, durations, partition, property_settings

SETTINGS = property_settings(max_examples=300)
NEVER_IDLE = 10.0**6  # seconds: a per-key partition is never evicted here (its anchor would move)
RUN_KEYS: list[Hashable] = ["a", "b"]


@dataclass
class Grant:
    key: Hashable
    at: int  # ns on the clock
    n: int
    lease: permits.Lease
    ended: int | None = None  # when it was released (concurrency) or refunded
    refunded: bool = False
    settled: list[tuple[int, int]] = field(default_factory=list)  # (when, the count kept from then)
    first: int = 0  # the count granted

    def __post_init__(self) -> None:
        self.first = self.n

    def held_at(self, t: int) -> int:
        """What the lease held at time t (its count, or what a settle before then kept)."""
        return next((n for at, n in reversed(self.settled) if at <= t), self.first)


@dataclass
class Scenario:
    config: Config
    keyed: bool
    ops: list[tuple[Any, ...]] = field(default_factory=list)


@st.composite
def scenarios(draw: st.DrawFn, kind: str) -> Scenario:
    config = draw(configs(kind, permits.QueueOrder.OLDEST_FIRST))
    keyed = draw(st.booleans())
    key = st.integers(0, len(RUN_KEYS) - 1) if keyed else st.just(0)
    slots = st.integers(0, 20)
    op = st.one_of(
        st.tuples(st.just("acquire"), st.integers(1, config.limit), key),
        st.tuples(st.just("acquire"), st.integers(1, config.limit), key),
        st.tuples(st.just("acquire"), st.integers(1, config.limit), key),
        st.tuples(st.just("refund"), slots),
        st.tuples(st.just("refund"), slots),
        st.tuples(st.just("release"), slots),
        st.tuples(st.just("settle"), slots, st.integers(0, config.limit)),
        st.tuples(st.just("advance"), durations(config)),
        st.tuples(st.just("advance"), durations(config)),
    )
    return Scenario(config, keyed, draw(st.lists(op, min_size=5, max_size=50)))


def run(scenario: Scenario) -> tuple[list[Grant], dict[Hashable, int]]:
    """Drives the limiter; returns every grant and each key's anchor (its partition's creation)."""
    config = scenario.config
    clock = permits.ManualClock(config.anchor_ns / 1e9)
    limiter: Any
    if scenario.keyed:
        limiter = permits.PartitionedLimiter.per_key(partition(config, None), idle_timeout=NEVER_IDLE, clock=clock)
    else:
        limiter = build_limiter(config, clock)
    grants: list[Grant] = []
    anchors: dict[Hashable, int] = {}
    for op in scenario.ops:
        if op[0] == "acquire":
            key = RUN_KEYS[op[2]]
            # A partition starts (is anchored) at its key's first use; a plain limiter when built.
            anchors.setdefault(key, clock.now_ns() if scenario.keyed else config.anchor_ns)
            lease = limiter.acquire(key, op[1]) if scenario.keyed else limiter.acquire(op[1])
            if lease:
                grants.append(Grant(key, clock.now_ns(), op[1], lease))
        elif op[0] == "settle":
            held = [g for g in grants if g.ended is None]
            if held:
                g = held[op[1] % len(held)]
                keep = op[2] % (g.n + 1)
                g.lease.settle(keep)
                g.n = keep
                g.settled.append((clock.now_ns(), keep))
        elif op[0] in ("refund", "release"):
            held = [g for g in grants if g.ended is None]
            if held:
                g = held[op[1] % len(held)]
                g.ended = clock.now_ns()
                if op[0] == "refund":
                    g.refunded = True
                    g.lease._refund()
                else:
                    g.lease.release()
        else:
            clock.advance(op[1] / 1e9)
    limiter.close()
    return grants, anchors


def check(config: Config, grants: list[Grant], anchor: int) -> None:
    """The grants of one limiter (one key) against what its algorithm allows."""
    kept = sorted((g for g in grants if not g.refunded), key=lambda g: g.at)
    limit, period = config.limit, config.period_ns
    if config.kind == "concurrency":
        for g in kept:
            held = sum(h.held_at(g.at) for h in grants if h.at <= g.at and (h.ended is None or h.ended > g.at))
            assert held <= limit, (g.at, held)
        return
    if config.kind == "token_bucket":
        times = sorted({g.at for g in kept})
        for i, a in enumerate(times):
            for b in times[i:]:
                refills = (b - anchor) // period - (a - anchor) // period
                granted = sum(g.n for g in kept if a <= g.at <= b)
                assert granted <= limit + config.tokens_per_period * refills, (a, b, granted)
        return
    if config.kind == "fixed_window":
        per_window: dict[int, int] = defaultdict(int)
        for g in kept:
            per_window[(g.at - anchor) // period] += g.n
        assert max(per_window.values(), default=0) <= limit, dict(per_window)
        return
    if config.kind == "sliding_window":
        segment = period // config.segments
        per_segment: dict[int, int] = defaultdict(int)
        for g in kept:
            per_segment[(g.at - anchor) // segment] += g.n
        for s in per_segment:
            in_window = sum(c for j, c in per_segment.items() if s - config.segments < j <= s)
            assert in_window <= limit, (s, dict(per_segment))
        return
    assert config.kind == "sliding_window_counter"
    for g in kept:
        w, e = divmod(g.at - anchor, period)
        previous = sum(h.n for h in kept if (h.at - anchor) // period == w - 1)
        current = sum(h.n for h in kept if (h.at - anchor) // period == w and h.at <= g.at)
        assert previous * (period - e) + current * period <= limit * period, (g.at, previous, current)


def check_scenario(scenario: Scenario) -> None:
    grants, anchors = run(scenario)
    for key, anchor in anchors.items():
        check(scenario.config, [g for g in grants if g.key == key], anchor)


def _issue_example(kind: str, keyed: bool) -> Scenario:
    """3 taken at t=0 (limit 3, 3 a period); 10 periods later 3 more taken, then the first 3
    refunded (a chain's slow member refused): nothing more may pass at that instant."""
    config = Config(kind, 3, 0, permits.QueueOrder.OLDEST_FIRST, 0, period_ns=1_000_000_000, tokens_per_period=3)
    ops = [("acquire", 3, 0), ("advance", 10_000_000_000), ("acquire", 3, 0), ("refund", 0), ("acquire", 3, 0)]
    return Scenario(config, keyed, ops)


@pytest.mark.parametrize("kind", KINDS)
def test_refunds_at_any_later_time_never_exceed_the_algorithm(kind: str) -> None:
    @SETTINGS
    @given(scenarios(kind))
    @example(_issue_example(kind, keyed=False))
    @example(_issue_example(kind, keyed=True))
    def prop(scenario: Scenario) -> None:
        check_scenario(scenario)

    prop()


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "per_key"])
def test_a_late_refund_gives_back_what_the_bucket_could_not_have_refilled(keyed: bool) -> None:
    """limit 3, 3 taken at t=0; one token came at t=1 and was taken: a refund at t=1 gives back 2."""
    clock = permits.ManualClock()
    limiter: Any
    if keyed:
        limiter = permits.PartitionedLimiter.per_key(permits.specs.TokenBucket(3, 1, 1.0), clock=clock)
        take = lambda n: limiter.acquire("k", n)  # noqa: E731
        available = lambda: limiter.available_permits("k")  # noqa: E731
    else:
        limiter = permits.TokenBucketLimiter(3, 1, 1.0, clock=clock)
        take = limiter.acquire
        available = limiter.available_permits
    first = take(3)
    assert first
    clock.advance(1.0)
    assert take(1)
    first._refund()
    assert available() == 2
    assert take(2)
    assert not take(1)


class _SlowRefusal(permits.RateLimiter):
    """A member that answers only when told to (a server slow to reply), then refuses."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()

    def _acquire(self, permit_count: int) -> permits.Lease:
        return permits.Lease.denied()

    async def _acquire_async(self, permit_count: int) -> permits.Lease:
        self.asked.set()
        await self.answer.wait()
        return permits.Lease.denied()


async def test_a_chain_whose_slow_member_refuses_late_never_over_grants_the_bucket() -> None:
    clock = permits.ManualClock()
    bucket = permits.TokenBucketLimiter(3, 3, 1.0, clock=clock)
    slow = _SlowRefusal()
    attempt = asyncio.ensure_future(permits.chain(bucket, slow).acquire_async(3))
    await slow.asked.wait()  # the bucket granted 3 at t=0
    clock.advance(10.0)
    assert bucket.acquire(3)  # refilled meanwhile: someone else takes 3 at t=10
    slow.answer.set()
    assert not await attempt  # refused: the bucket's 3 are refunded at t=10
    assert bucket.available_permits() == 0
    assert not bucket.acquire(1)  # 3 granted at t=10, not 6


async def test_a_chain_wait_cancelled_late_never_over_grants_the_bucket() -> None:
    clock = permits.ManualClock()
    bucket = permits.TokenBucketLimiter(3, 3, 1.0, clock=clock)
    pool = permits.ConcurrencyLimiter(3, queue_limit=3)
    held = pool.acquire(3)
    waiting = asyncio.ensure_future(permits.chain(bucket, pool).wait_async(3))
    for _ in range(5):
        await asyncio.sleep(0)
    assert bucket.available_permits() == 0  # granted by the bucket, queued in the pool
    clock.advance(10.0)
    assert bucket.acquire(3)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not bucket.acquire(1)
    held.release()


async def test_a_cancelled_acquire_async_refunds_by_the_same_rule() -> None:
    clock = permits.ManualClock()
    bucket = permits.TokenBucketLimiter(3, 3, 1.0, clock=clock)
    attempt = bucket.acquire_async(3)  # the engine's: granted when called, at t=0
    clock.advance(10.0)
    assert bucket.acquire(3)
    with pytest.raises(asyncio.CancelledError):
        attempt.throw(asyncio.CancelledError())  # cancelled before its first step: refunded
    assert not bucket.acquire(1)
