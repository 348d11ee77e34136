"""Property tests: partitioned limiters against the pure-Python model (tests/python/model/keyed.py).

Both ways of building one are driven: ``PartitionedLimiter.per_key(Partition.<kind>(None, ...))``
(every key's state in the engine) and the general ``PartitionedLimiter(lambda key:
Partition.<kind>(key, ...))``. Hypothesis draws a partition configuration, a few keys (str, int,
bytes, tuples: "7", 7 and b"7" are different keys), an idle timeout, a bound on the partitions, and a
random sequence of operations on the keys: acquire, wait_async, blocking wait(timeout) (in a
thread; timeouts on the ManualClock), cancelling a queued asynchronous waiter,
releasing a lease, statistics and available_permits of a key (which create its partition too),
advancing the ManualClock, closing. After every step the real limiter and the model agree on: every
lease (acquired, permit_count, reason, retry_after to the nanosecond), each key's completed waiters
in order, the waiters still queued, partition_count, the totals of statistics() and, for every live
partition, statistics(key) and available_permits(key).

Which idle partition gives its place to a new key at the bound is not specified: the driver
follows every choice (a fork of the model per candidate) and keeps those the limiter agrees with.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import permits
from permits import PartitionedLimiter

from _model_support import (
    KEYS,
    Config,
    LeaseView,
    ModelRun,
    configs,
    drain,
    draw_ops,
    durations,
    lease_view,
    limiter_model,
    outcome_view,
    partition,
    property_settings,
    stats_view,
)
from _support import SAFETY, Waiter, wait_until
from model import Closed, KeyedModel

SETTINGS = property_settings(max_examples=160)

PATHS = ["per_key", "general"]


@dataclass
class KeyedScenario:
    config: Config
    keys: list[Hashable]
    idle_timeout_ns: int
    max_partitions: int | None
    ops: list[tuple[Any, ...]] = field(default_factory=list)


@st.composite
def keyed_scenarios(draw: st.DrawFn) -> KeyedScenario:
    config = draw(configs(max_queue=4))
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True))
    window = config.period_ns
    idle_timeout = draw(st.sampled_from([0, 1, window // 2, window, 2 * window + 1, 50 * window]))
    max_partitions = draw(st.sampled_from([None, None, 1, 2, 3]))
    key = st.integers(0, len(keys) - 1)
    counts = st.integers(0, config.limit)
    slots = st.integers(0, 15)
    timeouts = st.one_of(st.none(), st.just(0), st.integers(1, 2 * window))
    op = st.one_of(
        st.tuples(st.just("acquire"), key, counts),
        st.tuples(st.just("acquire"), key, counts),
        st.tuples(st.just("block"), key, st.integers(1, config.limit), timeouts),
        st.tuples(st.just("wait"), key, st.integers(1, config.limit)),
        st.tuples(st.just("wait"), key, counts),
        st.tuples(st.just("cancel"), slots),
        st.tuples(st.just("release"), slots),
        st.tuples(st.just("query"), key),
        st.tuples(st.just("advance"), durations(config)),
        st.tuples(st.just("advance"), durations(config)),
    )
    return KeyedScenario(config, keys, idle_timeout, max_partitions, draw_ops(draw, op, max_size=40))


CLOSED = "LimiterClosedError"


class _KeyOf:
    """One key of a partitioned limiter, as _support.Waiter calls it: wait(n, timeout=...)."""

    def __init__(self, limiter: PartitionedLimiter, key: Hashable) -> None:
        self.limiter, self.key = limiter, key

    def wait(self, n: int, timeout: float | None = None) -> permits.Lease:
        return self.limiter.wait(self.key, n, timeout)


class KeyedRun(ModelRun):
    """One scenario: the real partitioned limiter and every model fork still consistent with it."""

    def __init__(self, scenario: KeyedScenario, path: str) -> None:
        config = scenario.config
        super().__init__(config.anchor_ns)
        self.config = config
        self.keys = scenario.keys
        options: dict[str, Any] = dict(
            idle_timeout=scenario.idle_timeout_ns / 1e9, max_partitions=scenario.max_partitions, clock=self.clock
        )
        self.limiter: PartitionedLimiter
        if path == "per_key":
            self.limiter = PartitionedLimiter.per_key(partition(config, None), **options)
            assert isinstance(self.limiter, permits.PerKeyLimiter)
        else:
            self.limiter = PartitionedLimiter(lambda key: partition(config, key), **options)
        self.models = [
            KeyedModel(
                make=lambda now: limiter_model(config, now),
                idle_timeout=scenario.idle_timeout_ns,
                max_partitions=scenario.max_partitions,
                now=config.anchor_ns,
            )
        ]
        self.waiter_key: dict[int, Hashable] = {}  # the key of each waiter

    def close(self) -> None:
        self.limiter.close()

    # ---- forks ----
    def _fork(self, key: Hashable) -> None:
        """Before a use of `key`: one model per idle partition that could give its place."""
        forks: list[KeyedModel] = []
        for model in self.models:
            candidates = model.place_candidates(key)
            if len(candidates) <= 1:
                forks.append(model)
                continue
            for victim in candidates:
                fork = copy.deepcopy(model)
                fork.victim = victim
                forks.append(fork)
        self.models = forks

    def _keep(self, predicted: list[Any], observed: Any, what: str) -> None:
        kept = [m for m, p in zip(self.models, predicted, strict=True) if p == observed]
        assert kept, f"{what}: limiter {observed!r}, model {predicted[0]!r}; steps {self.history}"
        self.models = kept

    def _cancel_in_models(self, wid: int) -> None:
        for m in self.models:
            m.cancel(wid)

    def _release_in_models(self, key: Hashable, lease: permits.Lease) -> None:
        for m in self.models:
            m.release(key, lease.permit_count)

    @staticmethod
    def _call(f: Any, *args: Any) -> Any:
        try:
            return f(*args)
        except Closed:
            return CLOSED

    # ---- steps ----
    async def step(self, op: tuple[Any, ...]) -> None:
        self.history.append(op)
        name = op[0]
        if name == "acquire":
            key, n = self.keys[op[1]], op[2]
            self._fork(key)
            predicted = [self._call(m.acquire, key, n) for m in self.models]
            predicted = [p if p == CLOSED else outcome_view(p) for p in predicted]
            try:
                lease = self.limiter.acquire(key, n)
            except permits.LimiterClosedError:
                self._keep(predicted, CLOSED, "acquire")
            else:
                self._keep(predicted, lease_view(lease), "acquire")
                if lease:
                    self.leases.append((key, lease))
        elif name == "wait":
            key, n = self.keys[op[1]], op[2]
            wid = len(self.history)
            self._fork(key)
            predicted = [self._call(m.wait, wid, key, n) == CLOSED for m in self.models]
            try:
                awaitable = self.limiter.wait_async(key, n)
            except permits.LimiterClosedError:
                self._keep(predicted, True, "wait_async raises")
            else:
                self._keep(predicted, False, "wait_async raises")
                self.waiter_key[wid] = key
                self.tasks[wid] = asyncio.ensure_future(self._waiter(wid, awaitable, key))
        elif name == "block":
            key, n, timeout = self.keys[op[1]], op[2], op[3]
            wid = len(self.history)
            self._fork(key)
            predicted = [self._call(m.wait, wid, key, n, timeout) == CLOSED for m in self.models]
            seconds = None if timeout is None else timeout / 1e9
            if predicted[0]:
                with pytest.raises(permits.LimiterClosedError):
                    self.limiter.wait(key, n, timeout=seconds)
                self._keep(predicted, True, "wait raises")
            else:
                self._keep(predicted, False, "wait raises")
                self.waiter_key[wid] = key
                waiter = self.blocking[wid] = Waiter(_KeyOf(self.limiter, key), n, timeout=seconds)
                waiter.start()
                # Until the call has returned or joined the queue (the totals show it).
                expected = [m.totals() for m in self.models]
                wait_until(lambda: waiter.done.is_set() or stats_view(self.limiter.statistics()) in expected)
        elif name == "cancel":
            self._cancel(op[1], self.models[0].pending_ids(), self._cancel_in_models)
        elif name == "release":
            self._release(op[1], self._release_in_models)
        elif name == "query":
            key = self.keys[op[1]]
            self._fork(key)
            predicted = [(self._call(m.statistics, key), self._call(m.available, key)) for m in self.models]
            try:
                observed: Any = (stats_view(self.limiter.statistics(key)), self.limiter.available_permits(key))
            except permits.LimiterClosedError:
                observed = (CLOSED, CLOSED)
            self._keep(predicted, observed, f"statistics/available_permits of {key!r}")
        elif name == "advance":
            forks = []
            for m in self.models:
                maybe = m.advance(op[1])
                for chosen in itertools.product([False, True], repeat=len(maybe)):
                    fork = copy.deepcopy(m) if any(chosen) else m
                    fork.evict([k for k, evict in zip(maybe, chosen, strict=True) if evict])
                    forks.append(fork)
            self.models = forks
            self.clock.advance(op[1] / 1e9)
        elif name == "close":
            for m in self.models:
                m.close()
            self.limiter.close()
        else:  # pragma: no cover
            raise AssertionError(op)
        await drain()

    def check(self) -> None:
        assert all(m.now == self.clock.now_ns() for m in self.models), self.history
        # Asynchronous waits complete in the model's order, per key; blocking ones each in its thread.
        by_key: dict[Hashable, list[tuple[int, LeaseView]]] = {}
        for wid, view in self.completed:
            by_key.setdefault(self.waiter_key[wid], []).append((wid, view))
        self._keep(
            [
                {
                    k: done
                    for k, c in m.completions.items()
                    if (done := [(w, outcome_view(o)) for w, o in c if w not in self.blocking])
                }
                for m in self.models
            ],
            by_key,
            "completed waiters per key",
        )
        finished = [
            {w: outcome_view(o) for c in m.completions.values() for w, o in c if w in self.blocking}
            for m in self.models
        ]
        for wid in sorted(set().union(*finished) - self.joined):
            # Done in every fork: it must return (a wall-clock safety net); in some: it may.
            self.blocking[wid].join(SAFETY if all(wid in f for f in finished) else 0.2)
            if not self.blocking[wid].is_alive():
                self.joined.add(wid)
                lease = self.blocking[wid].outcome()
                if lease:
                    self.leases.append((self.waiter_key[wid], lease))
        self._keep(
            finished,
            {wid: lease_view(self.blocking[wid].outcome()) for wid in sorted(self.joined)},
            "blocking waits",
        )
        self._keep([m.pending_ids() for m in self.models], self._waiting(), "queued waiters")
        if self.models[0].closed:
            with pytest.raises(permits.LimiterClosedError):
                self.limiter.statistics()
            return
        self._keep([m.partition_count() for m in self.models], self.limiter.partition_count, "partition_count")
        self._keep([m.totals() for m in self.models], stats_view(self.limiter.statistics()), "statistics()")
        # Every partition live in every fork: its own statistics (no partition is created).
        live = [k for k in self.keys if all(k in m.parts for m in self.models)]
        for key in live:
            predicted = [(m.statistics(key), m.available(key)) for m in self.models]
            observed = (stats_view(self.limiter.statistics(key)), self.limiter.available_permits(key))
            self._keep(predicted, observed, f"statistics/available_permits of {key!r}")


async def run_keyed(scenario: KeyedScenario, path: str) -> None:
    await KeyedRun(scenario, path).drive(scenario.ops)


@pytest.mark.parametrize("path", PATHS)
def test_partitioned_limiter_matches_model(path: str) -> None:
    @SETTINGS
    @given(keyed_scenarios())
    def check(scenario: KeyedScenario) -> None:
        asyncio.run(run_keyed(scenario, path))

    check()


# ------------------------------------------------------------- found by the property test above
# Each was a difference from the contract, fixed since; the smallest reproduction stays.


async def test_per_key_eviction_is_on_time_after_a_queue_is_served() -> None:
    clock = permits.ManualClock()
    limiter = PartitionedLimiter.per_key(
        permits.Partition.token_bucket(None, 1, 1, 1.0, queue_limit=1), idle_timeout=0.5, clock=clock
    )
    assert limiter.acquire("k")  # the bucket is empty until t=1
    waiter = asyncio.ensure_future(limiter.wait_async("k"))
    await drain()
    clock.advance(3.0)  # the waiter is served at t=1, the bucket is full from t=2: idle for 1 s
    assert await asyncio.wait_for(waiter, 5)
    assert limiter.partition_count == 0


def test_general_path_evicts_by_idleness_not_by_last_use() -> None:
    clock = permits.ManualClock()
    limiter = PartitionedLimiter(
        lambda key: permits.Partition.fixed_window(key, 1, 10.0), idle_timeout=1.0, clock=clock
    )
    assert limiter.statistics("k").current_available_permits == 1  # created at t=0, fully idle
    clock.advance(0.5)
    limiter.statistics("k")  # still fully idle
    clock.advance(0.6)  # idle for 1.1 s > idle_timeout
    assert limiter.partition_count == 0
