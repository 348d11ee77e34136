"""Property tests: the engine against the pure-Python reference models (tests/python/model).

Hypothesis draws a limiter (kind, small limits and queue limits, queue order, durations in integer
nanoseconds at several scales, a construction time) and a random sequence of operations: acquire(n),
wait_async(n) (queued in the engine), cancelling a queued waiter, releasing a lease, advancing the
ManualClock, closing. Each operation is applied to the real limiter and to the model; after every
step (and a few event-loop rounds, so waiters completed by the engine are resolved) they must agree on:
every lease (acquired, permit_count, reason, retry_after to the nanosecond), the statistics tuple,
available_permits(), the waiters completed so far with their outcomes and in their order, the waiters
still queued, and idle_duration (None or not, and its value to the nanosecond).

A second test draws any kind and order, sometimes auto_replenishment=False, and adds blocking
wait(n, timeout) calls (each in a thread; timeouts on the ManualClock) and try_replenish().
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import permits

from _model_support import (
    KINDS,
    ORDERS,
    Config,
    ModelRun,
    build_limiter,
    configs,
    drain,
    draw_ops,
    durations,
    lease_view,
    limiter_model,
    outcome_view,
    property_settings,
)
from _support import Waiter, start_waiter, stats, wait_until
from model import Closed, LimiterModel

SETTINGS = property_settings(max_examples=250)


# --------------------------------------------------------------------------------- scenarios


@dataclass
class Scenario:
    config: Config
    ops: list[tuple[Any, ...]] = field(default_factory=list)


@st.composite
def scenarios(draw: st.DrawFn, kind: str, order: permits.QueueOrder) -> Scenario:
    limit = draw(st.integers(1, 4))
    scale = draw(st.sampled_from([1, 1, 1_000, 1_000_000_000]))
    base = draw(st.integers(1, 12))
    config = Config(
        kind=kind,
        limit=limit,
        queue_limit=draw(st.one_of(st.integers(0, 5), st.none())),
        order=order,
        anchor_ns=draw(st.sampled_from([0, 1, 7 * scale + 3])),
        period_ns=base * scale,
        tokens_per_period=draw(st.integers(1, 5)),
        segments=draw(st.integers(1, min(4, base * scale))),
    )
    window = config.period_ns
    counts = st.integers(0, limit)
    slots = st.integers(0, 15)
    # Times: anything up to a few windows, whole multiples of the scale, and one nanosecond either
    # side of them (so boundaries are hit exactly and just missed).
    whole = st.integers(0, 3 * base).map(lambda k: k * scale)
    dts = st.one_of(
        st.integers(0, 3 * window),
        whole,
        st.tuples(whole, st.sampled_from([-1, 1])).map(lambda p: max(0, p[0] + p[1])),
    )
    short = st.integers(0, max(1, window // 2))
    op = st.one_of(
        st.tuples(st.just("acquire"), counts),
        st.tuples(st.just("acquire"), counts),
        st.tuples(st.just("wait"), counts),
        st.tuples(st.just("wait"), st.integers(1, limit)),
        st.tuples(st.just("wait"), st.integers(1, limit)),
        st.tuples(st.just("cancel"), slots),
        st.tuples(st.just("release"), slots),
        st.tuples(st.just("advance"), dts),
        st.tuples(st.just("advance"), short),
    )
    return Scenario(config, draw_ops(draw, op, max_size=40))


def build(config: Config, clock: permits.ManualClock) -> tuple[Any, LimiterModel]:
    return build_limiter(config, clock), limiter_model(config, config.anchor_ns)


# --------------------------------------------------------------------------------- the driver


class Run(ModelRun):
    """One scenario: the real limiter and the model side by side."""

    def __init__(self, config: Config) -> None:
        super().__init__(config.anchor_ns)
        self.limiter, self.model = build(config, self.clock)

    def close(self) -> None:
        self.limiter.close()

    async def step(self, op: tuple[Any, ...]) -> None:
        self.history.append(op)
        name = op[0]
        if name == "acquire":
            n = op[1]
            try:
                expected = self.model.acquire(n)
            except Closed:
                with pytest.raises(permits.LimiterClosedError):
                    self.limiter.acquire(n)
                return
            lease = self.limiter.acquire(n)
            assert lease_view(lease) == outcome_view(expected), self.history
            if lease:
                self.leases.append((None, lease))
        elif name == "wait":
            n = op[1]
            wid = len(self.history)
            try:
                self.model.wait(wid, n)
            except Closed:
                with pytest.raises(permits.LimiterClosedError):
                    self.limiter.wait_async(n)
                return
            self.tasks[wid] = asyncio.ensure_future(self._waiter(wid, self.limiter.wait_async(n), None))
        elif name == "cancel":
            self._cancel(op[1], self.model.pending_ids(), self.model.cancel)
        elif name == "release":
            self._release(op[1], lambda _, lease: self.model.release(lease.permit_count))
        elif name == "block":
            n, timeout = op[1], op[2]
            wid = len(self.history)
            try:
                self.model.wait(wid, n, timeout)
            except Closed:
                with pytest.raises(permits.LimiterClosedError):
                    self.limiter.wait(n, timeout=None if timeout is None else timeout / 1e9)
                return
            waiter = self.blocking[wid] = Waiter(self.limiter, n, timeout=None if timeout is None else timeout / 1e9)
            waiter.start()
            # Until the call has returned or joined the queue (the statistics show it: queued
            # permits up, or an eviction counted): then the next step may run.
            expected = self.model.statistics()
            wait_until(lambda: waiter.done.is_set() or stats(self.limiter) == expected)
        elif name == "try_replenish":
            try:
                expected_replenished = self.model.try_replenish()
            except Closed:
                with pytest.raises(permits.LimiterClosedError):
                    self.limiter.try_replenish()
                return
            assert self.limiter.try_replenish() is expected_replenished, self.history
        elif name == "advance":
            self.model.advance(op[1])
            self.clock.advance(op[1] / 1e9)
        elif name == "close":
            self.model.close()
            self.limiter.close()
        else:  # pragma: no cover
            raise AssertionError(op)
        await drain()

    def check(self) -> None:
        model, limiter, where = self.model, self.limiter, self.history
        assert self.clock.now_ns() == model.now, where
        # Asynchronous waits complete in the model's order; blocking ones each in their thread.
        expected_completions = [(wid, outcome_view(o)) for wid, o in model.completions if wid not in self.blocking]
        assert self.completed == expected_completions, where
        blocking_done = {wid: outcome_view(o) for wid, o in model.completions if wid in self.blocking}
        for wid in sorted(blocking_done):
            if wid not in self.joined:
                self.joined.add(wid)
                lease = self.blocking[wid].outcome()  # joins (a wall-clock safety net: it should be done)
                assert lease_view(lease) == blocking_done[wid], (wid, where)
                if lease:
                    self.leases.append((None, lease))
        assert self._waiting() == sorted(model.pending_ids()), where
        if model.closed:
            with pytest.raises(permits.LimiterClosedError):
                limiter.statistics()
            with pytest.raises(permits.LimiterClosedError):
                limiter.available_permits()
            return
        assert tuple(vars(limiter.statistics()).values()) == model.statistics(), where
        assert limiter.available_permits() == model.available(), where
        idle = limiter.idle_duration
        assert (None if idle is None else round(idle * 1e9)) == model.idle_duration(), where


async def run_scenario(scenario: Scenario) -> None:
    await Run(scenario.config).drive(scenario.ops)


@pytest.mark.parametrize("order", ORDERS, ids=["oldest_first", "newest_first"])
@pytest.mark.parametrize("kind", KINDS)
def test_engine_matches_model(kind: str, order: permits.QueueOrder) -> None:
    @SETTINGS
    @given(scenarios(kind, order))
    def check(scenario: Scenario) -> None:
        asyncio.run(run_scenario(scenario))

    check()


# ------------------------------------------- blocking waits with timeouts, and manual replenishment


@st.composite
def timeout_scenarios(draw: st.DrawFn) -> Scenario:
    """Any kind and order, sometimes auto_replenishment=False; besides the operations above,
    blocking wait(n, timeout) calls (in threads; timeouts on the ManualClock, None, 0 or a few
    periods) and try_replenish()."""
    config = draw(configs(max_queue=4, manual=True))
    limit, window = config.limit, config.period_ns
    timeouts = st.one_of(
        st.none(),
        st.just(0),
        st.integers(1, max(1, window // 2)),
        st.integers(1, 2 * window),
        st.integers(1, 3).map(lambda k: k * window),
    )
    slots = st.integers(0, 15)
    op = st.one_of(
        st.tuples(st.just("acquire"), st.integers(0, limit)),
        st.tuples(st.just("wait"), st.integers(0, limit)),
        st.tuples(st.just("block"), st.integers(1, limit), timeouts),
        st.tuples(st.just("block"), st.integers(1, limit), timeouts),
        st.tuples(st.just("block"), st.integers(1, limit), timeouts),
        st.tuples(st.just("cancel"), slots),
        st.tuples(st.just("release"), slots),
        st.tuples(st.just("try_replenish")),
        st.tuples(st.just("advance"), durations(config)),
        st.tuples(st.just("advance"), durations(config)),
    )
    return Scenario(config, draw_ops(draw, op, max_size=30))


@property_settings(max_examples=150)
@given(timeout_scenarios())
# Found by this test: the head times out at t=1 and the second request could be served then.
@example(
    Scenario(
        Config("token_bucket", 4, 3, permits.QueueOrder.OLDEST_FIRST, 0, manual=True),
        [("acquire", 3), ("block", 2, 1), ("block", 1, 2), ("advance", 2)],
    )
)
def test_engine_matches_model_with_timeouts_and_manual_replenishment(scenario: Scenario) -> None:
    asyncio.run(run_scenario(scenario))


def test_try_replenish_after_close_raises() -> None:
    limiter = permits.TokenBucketLimiter(1, 1, 1.0, clock=permits.ManualClock())
    limiter.close()
    with pytest.raises(permits.LimiterClosedError):
        limiter.try_replenish()


def test_manual_mode_serves_the_queue_when_an_earlier_deadline_frees_it() -> None:
    clock = permits.ManualClock()
    limiter = permits.TokenBucketLimiter(2, 1, 1.0, queue_limit=3, auto_replenishment=False, clock=clock)
    assert limiter.acquire(1)  # one token left; none comes back without try_replenish()
    head = start_waiter(limiter, 2, timeout=1.0, queued_after=2)
    second = start_waiter(limiter, 1, timeout=2.0, queued_after=3)  # behind the head (no barging)
    clock.advance(3.0)  # the head times out at t=1: the token is the second's then
    assert head.outcome().reason == "timeout"
    assert second.outcome()
