"""Property tests: ``permits.chain(a, b[, c])`` of plain limiters of mixed kinds against the model
(tests/python/model/chain.py).

Hypothesis draws two or three limiters (any kinds and queue orders, on one ManualClock, built at
the same time; the first may queue, the others have queue_limit 0 so a chain waiter only ever
queues in the first) and a random sequence of operations: acquire on the chain, wait_async on the
chain, cancelling a queued chain waiter, acquire directly on one of the limiters (contention),
releasing a lease (a chain lease releases its inner leases in reverse order), advancing the
clock, closing the chain. After every step the real limiters and the model agree on: every lease
(acquired, permit_count, reason, retry_after to the nanosecond), the chain waiters completed and
their order, those still queued, each limiter's statistics, available_permits() and
idle_duration, and the chain's statistics and idle_duration.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import permits

from _model_support import (
    KEYS,
    Config,
    ModelRun,
    build_limiter,
    configs,
    drain,
    draw_ops,
    durations,
    idle_view,
    lease_view,
    limiter_model,
    outcome_view,
    partition,
    property_settings,
    stats_view,
)
from _support import SAFETY, start_waiter, wait_until
from model import ChainModel, Closed, KeyedModel

SETTINGS = property_settings(max_examples=250)

#: A chain waiter resumes once per limiter: more event-loop rounds than for a single limiter.
CHAIN_DRAIN_ROUNDS = 12


@dataclass
class ChainScenario:
    configs: list[Config]
    ops: list[tuple[Any, ...]] = field(default_factory=list)
    keyed: int | None = None  # which limiter is PartitionedLimiter.per_key(...) of its config
    keys: list[Hashable] = field(default_factory=lambda: [None])


#: A per-key limiter in a chain never evicts here (eviction: test_model_properties_keyed.py).
NEVER_IDLE_NS = 10**15


@st.composite
def chain_scenarios(draw: st.DrawFn, keyed: bool = False) -> ChainScenario:
    """Operations carry the index of a key last (the chain's resource; ignored without keys)."""
    count = draw(st.integers(2, 3))
    first = draw(configs(max_queue=4))
    first = dataclasses.replace(first, queue_limit=None if first.queue_limit is None else max(1, first.queue_limit))
    rest = [dataclasses.replace(draw(configs()), queue_limit=0, anchor_ns=first.anchor_ns) for _ in range(count - 1)]
    limiters = [first, *rest]
    index = draw(st.integers(1, count - 1)) if keyed else None
    keys: list[Hashable] = (
        draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True)) if keyed else [None]
    )
    key = st.integers(0, len(keys) - 1)
    most = min(c.limit for c in limiters)
    slots = st.integers(0, 15)
    direct = st.integers(0, count - 1).flatmap(
        lambda i: st.tuples(st.just("direct"), st.just(i), st.integers(0, limiters[i].limit), key)
    )
    op = st.one_of(
        st.tuples(st.just("acquire"), st.integers(0, most), key),
        st.tuples(st.just("acquire"), st.integers(1, most), key),
        st.tuples(st.just("wait"), st.integers(1, most), key),
        st.tuples(st.just("wait"), st.integers(1, most), key),
        st.tuples(st.just("wait"), st.integers(1, most), key),
        st.tuples(st.just("cancel"), slots),
        direct,
        direct,
        st.tuples(st.just("release"), slots),
        st.tuples(st.just("release"), slots),
        st.one_of([st.tuples(st.just("advance"), durations(c)) for c in limiters]),
        st.one_of([st.tuples(st.just("advance"), durations(c)) for c in limiters]),
    )
    return ChainScenario(limiters, draw_ops(draw, op, max_size=40), index, keys)


class ChainRun(ModelRun):
    drain_rounds = CHAIN_DRAIN_ROUNDS

    def __init__(self, scenario: ChainScenario) -> None:
        super().__init__(scenario.configs[0].anchor_ns)
        now = self.clock.now_ns()
        self.keyed, self.keys = scenario.keyed, scenario.keys
        self.limiters: list[Any] = []
        models: list[Any] = []
        for i, config in enumerate(scenario.configs):
            if i == self.keyed:
                self.limiters.append(
                    permits.PartitionedLimiter.per_key(
                        partition(config, None), idle_timeout=NEVER_IDLE_NS / 1e9, clock=self.clock
                    )
                )
                models.append(KeyedModel(lambda t, c=config: limiter_model(c, t), NEVER_IDLE_NS, None, now))
            else:
                self.limiters.append(build_limiter(config, self.clock))
                models.append(limiter_model(config, now))
        self.chain = permits.chain(*self.limiters)
        partitioned = self.keyed is not None
        assert isinstance(self.chain, permits.ChainedPartitionedLimiter if partitioned else permits.ChainedLimiter)
        self.model = ChainModel(models)
        # The leases are kept with their id in the model; no blocking waits here.

    def close(self) -> None:
        for limiter in self.limiters:
            limiter.close()

    def _key(self, op: tuple[Any, ...], at: int) -> Hashable:
        return self.keys[op[at] % len(self.keys)] if len(op) > at else self.keys[0]

    def _args(self, key: Hashable, *args: Any) -> tuple[Any, ...]:
        """A partitioned chain takes the resource first."""
        return args if self.keyed is None else (key, *args)

    async def step(self, op: tuple[Any, ...]) -> None:
        self.history.append(op)
        model, name = self.model, op[0]
        where = self.history
        if name == "acquire":
            n, key, lease_id = op[1], self._key(op, 2), ("acquire", len(self.history))
            try:
                expected = model.acquire(lease_id, n, key)
            except Closed:
                with pytest.raises(permits.LimiterClosedError):
                    self.chain.acquire(*self._args(key, n))
                return
            lease = self.chain.acquire(*self._args(key, n))
            assert lease_view(lease) == outcome_view(expected), where
            if lease:
                self.leases.append((lease_id, lease))
        elif name == "wait":
            n, key, wid = op[1], self._key(op, 2), len(self.history)
            try:
                model.wait(wid, n, key)
            except Closed:
                with pytest.raises(permits.LimiterClosedError):
                    await self.chain.wait_async(*self._args(key, n))  # a partitioned chain raises here
                return
            self.tasks[wid] = asyncio.ensure_future(self._waiter(wid, self.chain.wait_async(*self._args(key, n)), wid))
        elif name == "cancel":
            self._cancel(op[1], model.pending_ids(), model.cancel)
        elif name == "direct":
            i, n, key = op[1], op[2], self._key(op, 3)
            expected = model.at(i, key).acquire(n)
            lease = self.limiters[i].acquire(*((key, n) if i == self.keyed else (n,)))
            assert lease_view(lease) == outcome_view(expected), where
            if lease:
                self.leases.append((("direct", i, key), lease))
        elif name == "release":
            self._release(op[1], self._release_in_model)
        elif name == "advance":
            model.advance(op[1])
            self.clock.advance(op[1] / 1e9)
        elif name == "close":
            model.close()
            self.chain.close()
        else:  # pragma: no cover
            raise AssertionError(op)
        await drain(CHAIN_DRAIN_ROUNDS)

    def _release_in_model(self, lease_id: Any, lease: permits.Lease) -> None:
        if isinstance(lease_id, tuple) and lease_id[0] == "direct":
            self.model.at(lease_id[1], lease_id[2]).release(lease.permit_count)
            self.model.follow_up()
        else:
            self.model.release(lease_id)

    def _live_keys(self) -> list[Hashable]:
        keyed = self.model.models[self.keyed] if self.keyed is not None else None
        return [None] if keyed is None else [k for k in self.keys if k in keyed.parts]

    def check(self) -> None:
        model, where = self.model, self.history
        assert self.clock.now_ns() == model.models[0].now, where
        assert self.completed == [(wid, outcome_view(o)) for wid, o in model.completions], where
        assert self._waiting() == model.pending_ids(), where
        for i, (limiter, m) in enumerate(zip(self.limiters, model.models, strict=True)):
            if i == self.keyed:  # every partition there is: no statistics(key) creates one
                assert limiter.partition_count == m.partition_count(), (i, where)
                assert stats_view(limiter.statistics()) == m.totals(), (i, where)
                for key in self._live_keys():
                    assert stats_view(limiter.statistics(key)) == m.statistics(key), (i, key, where)
                    assert limiter.available_permits(key) == m.available(key), (i, key, where)
                continue
            assert stats_view(limiter.statistics()) == m.statistics(), (i, where)
            assert limiter.available_permits() == m.available(), (i, where)
            if m.idle_known:  # after a refund: see test_idle_duration_after_a_refund_* below
                assert idle_view(limiter.idle_duration) == m.idle_duration(), (i, where)
        if model.closed:
            with pytest.raises(permits.LimiterClosedError):
                self.chain.statistics(*self._args(self.keys[0]))
            return
        for key in self._live_keys():
            args = self._args(key)
            assert stats_view(self.chain.statistics(*args)) == model.statistics(key), (key, where)
            assert self.chain.available_permits(*args) == model.statistics(key)[0], (key, where)
        if self.keyed is None and model.idle_duration() != "unknown":
            assert isinstance(self.chain, permits.ChainedLimiter)
            assert idle_view(self.chain.idle_duration) == model.idle_duration(), where

    async def finish(self) -> None:
        """Closes the limiters themselves: queued chain waiters fail with "closed"."""
        for limiter in self.limiters:
            limiter.close()
        for m in self.model.models:
            m.close()
        self.model.follow_up()
        await drain(CHAIN_DRAIN_ROUNDS)
        assert self.completed == [(wid, outcome_view(o)) for wid, o in self.model.completions], self.history
        self._let_go()


async def run_chain(scenario: ChainScenario) -> None:
    await ChainRun(scenario).drive(scenario.ops)


def _late_refund(first: Config) -> ChainScenario:
    """A chain waiter granted by `first` at t=10 gets its answer from the second limiter only at
    t=25, after the advance: refused, it gives back the grant in a later window or period."""
    pool = Config("concurrency", 1, 0, permits.QueueOrder.OLDEST_FIRST, 0)
    ops = [("direct", 0, 2), ("direct", 1, 1), ("wait", 1), ("advance", 25), ("release", 1), ("acquire", 1)]
    return ChainScenario([first, pool], ops)


OLDEST = permits.QueueOrder.OLDEST_FIRST


@SETTINGS
@given(chain_scenarios())
@example(_late_refund(Config("fixed_window", 2, 2, OLDEST, 0, period_ns=10)))
@example(_late_refund(Config("sliding_window", 2, 2, OLDEST, 0, period_ns=10, segments=2)))
@example(_late_refund(Config("sliding_window_counter", 2, 2, OLDEST, 0, period_ns=10)))
@example(_late_refund(Config("token_bucket", 2, 2, OLDEST, 0, period_ns=10, tokens_per_period=1)))
def test_chain_matches_model(scenario: ChainScenario) -> None:
    asyncio.run(run_chain(scenario))


@property_settings(max_examples=120)
@given(chain_scenarios(keyed=True))
def test_chain_with_a_per_key_limiter_matches_model(scenario: ChainScenario) -> None:
    """chain(plain, PartitionedLimiter.per_key(...)[, plain]): the resource picks the partition;
    refunds and releases reach that key's partition in the engine's per-key table."""
    asyncio.run(run_chain(scenario))


# ------------------------------------------------------------- idle_duration after a refund
# "Seconds since the limiter became fully idle" after a chain's refund: the state word keeps no
# time finer than its period, window or segment, so a refunded limiter counts its idle time from
# the start of the current one (docs/behaviour.md) -- never from before the refunded grant's. The
# property test above does not compare idle durations after a refund (until the next grant).

TIMED = {
    "token_bucket": lambda clock: permits.TokenBucketLimiter(1, 1, 1.0, clock=clock),
    "fixed_window": lambda clock: permits.FixedWindowLimiter(1, 1.0, clock=clock),
    "sliding_window": lambda clock: permits.SlidingWindowLimiter(1, 1.0, 2, clock=clock),
    "sliding_window_counter": lambda clock: permits.SlidingWindowCounterLimiter(1, 1.0, clock=clock),
}
#: At t=3.5: the current period or window began at 3.0; the sliding window's segment at 3.5.
IDLE_AFTER_REFUND = {"token_bucket": 0.5, "fixed_window": 0.5, "sliding_window": 0.0, "sliding_window_counter": 0.5}


@pytest.mark.parametrize("kind", list(TIMED))
def test_idle_duration_after_a_refund_counts_from_the_current_period(kind: str) -> None:
    clock = permits.ManualClock()
    limiter = TIMED[kind](clock)
    pool = permits.ConcurrencyLimiter(1)
    held = pool.acquire()
    assert limiter.acquire()  # in use from t=0 until t=1 (sliding window counter: t=2)
    clock.advance(3.5)
    assert limiter.idle_duration == 3.5 - (2.0 if kind == "sliding_window_counter" else 1.0)
    assert not permits.chain(limiter, pool).acquire()  # granted by the limiter, then refunded
    assert limiter.available_permits() == 1
    assert limiter.idle_duration == IDLE_AFTER_REFUND[kind]
    held.release()


def test_sliding_window_idle_duration_after_a_refund_excludes_time_in_use() -> None:
    clock = permits.ManualClock()
    window = permits.SlidingWindowLimiter(1, 1.0, 1, clock=clock)
    pool = permits.ConcurrencyLimiter(1)
    held = pool.acquire()
    assert window.acquire()  # held until t=1
    clock.advance(3.5)
    assert not permits.chain(window, pool).acquire()
    idle = window.idle_duration
    assert idle is not None and idle <= 2.5  # not since t=0: its permit was held until t=1
    held.release()


def test_a_chains_blocking_wait_times_out_on_the_limiters_clock() -> None:
    clock = permits.ManualClock()
    bucket = permits.TokenBucketLimiter(1, 1, 4.0, queue_limit=1, clock=clock)
    window = permits.FixedWindowLimiter(1, 100.0, queue_limit=1, clock=clock)
    assert bucket.acquire() and window.acquire()
    waiter = start_waiter(permits.chain(bucket, window), 1, timeout=5.0)
    wait_until(lambda: bucket.statistics().current_queued_count == 1)
    clock.advance(4.0)  # the bucket grants at t=4: 1 s of the timeout is left for the window
    wait_until(lambda: window.statistics().current_queued_count == 1)
    clock.advance(2.0)  # t=6: past the chain's deadline
    try:
        wait_until(lambda: waiter.done.is_set(), timeout=1.0)
        assert waiter.outcome().reason == "timeout"
    finally:
        window.close()  # lets the waiter go when it still waits
        waiter.join(SAFETY)


@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
async def test_a_partitioned_chains_wait_async_is_an_async_context_manager() -> None:
    per_key = permits.PartitionedLimiter.per_key(permits.Partition.concurrency(None, 1))
    chained = permits.chain(per_key, permits.NoLimiter())
    async with chained.wait_async("k") as lease:
        assert lease and per_key.available_permits("k") == 0
    assert per_key.available_permits("k") == 1


def test_a_partitioned_chain_is_a_keyed_limiter() -> None:
    per_key = permits.PartitionedLimiter.per_key(permits.Partition.concurrency(None, 1))
    chained = permits.chain(per_key, permits.NoLimiter())
    assert isinstance(chained, permits.KeyedRateLimiter)
    assert permits.chain(chained, permits.NoLimiter()).acquire("k")
