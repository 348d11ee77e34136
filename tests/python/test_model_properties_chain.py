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
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import permits

from _model_support import (
    Config,
    LeaseView,
    build_limiter,
    configs,
    drain,
    durations,
    idle_view,
    lease_view,
    limiter_model,
    outcome_view,
    property_settings,
    stats_view,
)
from _support import SAFETY, start_waiter, wait_until
from model import ChainModel, Closed

SETTINGS = property_settings(max_examples=250)

#: A chain waiter resumes once per limiter: more event-loop rounds than for a single limiter.
CHAIN_DRAIN_ROUNDS = 12


@dataclass
class ChainScenario:
    configs: list[Config]
    ops: list[tuple[Any, ...]] = field(default_factory=list)


@st.composite
def chain_scenarios(draw: st.DrawFn) -> ChainScenario:
    count = draw(st.integers(2, 3))
    first = draw(configs(max_queue=4))
    first = dataclasses.replace(first, queue_limit=max(1, first.queue_limit))
    rest = [dataclasses.replace(draw(configs()), queue_limit=0, anchor_ns=first.anchor_ns) for _ in range(count - 1)]
    limiters = [first, *rest]
    most = min(c.limit for c in limiters)
    slots = st.integers(0, 15)
    direct = st.integers(0, count - 1).flatmap(
        lambda i: st.tuples(st.just("direct"), st.just(i), st.integers(0, limiters[i].limit))
    )
    op = st.one_of(
        st.tuples(st.just("acquire"), st.integers(0, most)),
        st.tuples(st.just("acquire"), st.integers(1, most)),
        st.tuples(st.just("wait"), st.integers(1, most)),
        st.tuples(st.just("wait"), st.integers(1, most)),
        st.tuples(st.just("wait"), st.integers(1, most)),
        st.tuples(st.just("cancel"), slots),
        direct,
        direct,
        st.tuples(st.just("release"), slots),
        st.tuples(st.just("release"), slots),
        st.one_of([st.tuples(st.just("advance"), durations(c)) for c in limiters]),
        st.one_of([st.tuples(st.just("advance"), durations(c)) for c in limiters]),
    )
    ops = draw(st.lists(op, min_size=10, max_size=40))
    close_at = draw(st.one_of(st.none(), st.integers(0, len(ops))))
    if close_at is not None:
        ops.insert(close_at, ("close",))
    return ChainScenario(limiters, ops)


class ChainRun:
    def __init__(self, scenario: ChainScenario) -> None:
        self.clock = permits.ManualClock()
        self.clock.advance_ns(scenario.configs[0].anchor_ns)
        now = self.clock.now_ns()
        self.limiters = [build_limiter(c, self.clock) for c in scenario.configs]
        self.chain = permits.chain(*self.limiters)
        assert isinstance(self.chain, permits.ChainedLimiter)
        self.model = ChainModel([limiter_model(c, now) for c in scenario.configs])
        self.tasks: dict[int, asyncio.Task[Any]] = {}
        self.completed: list[tuple[int, LeaseView]] = []
        #: Every granted lease, kept alive (no GC release), with its id in the model.
        self.leases: list[tuple[object, permits.Lease]] = []
        self.released: set[int] = set()
        self.history: list[tuple[Any, ...]] = []

    async def _waiter(self, wid: int, awaitable: Any) -> None:
        lease = await awaitable
        self.completed.append((wid, lease_view(lease)))
        if lease:
            self.leases.append((wid, lease))

    async def step(self, op: tuple[Any, ...]) -> None:
        self.history.append(op)
        model, name = self.model, op[0]
        where = self.history
        if name == "acquire":
            n, lease_id = op[1], ("acquire", len(self.history))
            try:
                expected = model.acquire(lease_id, n)
            except Closed:
                with pytest.raises(permits.LimiterClosedError):
                    self.chain.acquire(n)
                return
            lease = self.chain.acquire(n)
            assert lease_view(lease) == outcome_view(expected), where
            if lease:
                self.leases.append((lease_id, lease))
        elif name == "wait":
            n, wid = op[1], len(self.history)
            try:
                model.wait(wid, n)
            except Closed:
                with pytest.raises(permits.LimiterClosedError):
                    self.chain.wait_async(n)
                return
            self.tasks[wid] = asyncio.ensure_future(self._waiter(wid, self.chain.wait_async(n)))
        elif name == "cancel":
            pending = model.pending_ids()
            if pending:
                wid = pending[op[1] % len(pending)]
                model.cancel(wid)
                self.tasks[wid].cancel()
        elif name == "direct":
            i, n = op[1], op[2]
            expected = model.models[i].acquire(n)
            lease = self.limiters[i].acquire(n)
            assert lease_view(lease) == outcome_view(expected), where
            if lease:
                self.leases.append((("direct", i), lease))
        elif name == "release":
            if self.leases:
                k = op[1] % len(self.leases)
                lease_id, lease = self.leases[k]
                if k not in self.released:
                    self.released.add(k)
                    if isinstance(lease_id, tuple) and lease_id[0] == "direct":
                        model.models[lease_id[1]].release(lease.permit_count)
                        model.follow_up()
                    else:
                        model.release(lease_id)
                lease.release()  # a second release is a no-op
        elif name == "advance":
            model.advance(op[1])
            self.clock.advance(op[1] / 1e9)
        elif name == "close":
            model.close()
            self.chain.close()
        else:  # pragma: no cover
            raise AssertionError(op)
        await drain(CHAIN_DRAIN_ROUNDS)

    def check(self) -> None:
        model, where = self.model, self.history
        assert self.clock.now_ns() == model.models[0].now, where
        assert self.completed == [(wid, outcome_view(o)) for wid, o in model.completions], where
        waiting = sorted(wid for wid, task in self.tasks.items() if not task.done())
        assert waiting == model.pending_ids(), where
        for i, (limiter, m) in enumerate(zip(self.limiters, model.models, strict=True)):
            assert stats_view(limiter.statistics()) == m.statistics(), (i, where)
            assert limiter.available_permits() == m.available(), (i, where)
            if m.idle_known:  # after a refund: see test_idle_duration_after_a_refund_* below
                assert idle_view(limiter.idle_duration) == m.idle_duration(), (i, where)
        if model.closed:
            with pytest.raises(permits.LimiterClosedError):
                self.chain.statistics()
            with pytest.raises(permits.LimiterClosedError):
                self.chain.idle_duration  # noqa: B018
            return
        assert stats_view(self.chain.statistics()) == model.statistics(), where
        assert self.chain.available_permits() == model.statistics()[0], where
        if model.idle_duration() != "unknown":
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
        assert all(task.done() for task in self.tasks.values())
        for _, lease in self.leases:
            lease.release()


async def run_chain(scenario: ChainScenario) -> None:
    run = ChainRun(scenario)
    try:
        run.check()
        for op in scenario.ops:
            await run.step(op)
            run.check()
        await run.finish()
    finally:  # a failed check leaves no waiting task behind
        for limiter in run.limiters:
            limiter.close()
        for task in run.tasks.values():
            task.cancel()
        await drain(CHAIN_DRAIN_ROUNDS)


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


# ------------------------------------------------------------- disagreements with the contract
# idle_duration after a chain's refund: "seconds since the limiter became fully idle" reads either
# as 0 (it became idle again at the refund) or as before the refunded grant (a rejected request
# costs nothing anywhere, semantics.md 8). The engine answers neither; the property test above
# does not compare idle durations after a refund (until the limiter's next grant).

TIMED = {
    "token_bucket": lambda clock: permits.TokenBucketLimiter(1, 1, 1.0, clock=clock),
    "fixed_window": lambda clock: permits.FixedWindowLimiter(1, 1.0, clock=clock),
    "sliding_window": lambda clock: permits.SlidingWindowLimiter(1, 1.0, 2, clock=clock),
    "sliding_window_counter": lambda clock: permits.SlidingWindowCounterLimiter(1, 1.0, clock=clock),
}


@pytest.mark.xfail(
    strict=True,
    reason="after a chain's refund the engine reports idleness since the start of the current "
    "period or window (sliding window: since construction), neither 0 nor the idle duration before",
)
@pytest.mark.parametrize("kind", list(TIMED))
def test_idle_duration_after_a_refund_is_zero_or_unchanged(kind: str) -> None:
    clock = permits.ManualClock()
    limiter = TIMED[kind](clock)
    pool = permits.ConcurrencyLimiter(1)
    held = pool.acquire()
    assert limiter.acquire()  # in use from t=0 until t=1 (sliding window counter: t=2)
    clock.advance(3.5)
    before = limiter.idle_duration
    assert before is not None
    assert not permits.chain(limiter, pool).acquire()  # granted by the limiter, then refunded
    assert limiter.available_permits() == 1
    assert limiter.idle_duration in (0.0, before)
    held.release()


@pytest.mark.xfail(
    strict=True,
    reason="sliding window: after a refund that empties the current segment, idle_duration counts "
    "from construction, including the time its permits were held",
)
def test_sliding_window_idle_duration_after_a_refund_excludes_time_in_use() -> None:
    clock = permits.ManualClock()
    window = permits.SlidingWindowLimiter(1, 1.0, 1, clock=clock)
    pool = permits.ConcurrencyLimiter(1)
    held = pool.acquire()
    assert window.acquire()  # held until t=1
    clock.advance(3.5)
    assert not permits.chain(window, pool).acquire()
    idle = window.idle_duration
    assert idle is not None and idle <= 2.5  # the engine says 3.5: idle since t=0
    held.release()


@pytest.mark.xfail(
    strict=True,
    reason="chain.wait(timeout) splits the timeout between its limiters with time.monotonic(), "
    "not the limiters' clock: with a ManualClock the later limiters get the whole timeout again "
    "(docs/behaviour.md: timeouts run on the limiter's clock)",
)
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
