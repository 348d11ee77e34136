"""What the property tests share (test_model_properties*.py): hypothesis settings, drawing a
limiter's configuration and a sequence of operations, building the real limiter (or a partition
template) and its model from one configuration, comparing leases with the model's outcomes, and
the driver's bookkeeping (ModelRun: waiters, leases, the run of a scenario).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import permits

from _support import SAFETY, Waiter
from model import (
    ConcurrencyModel,
    FixedWindowModel,
    LimiterModel,
    Outcome,
    SlidingWindowCounterModel,
    SlidingWindowModel,
    TokenBucketModel,
)

KINDS = ["concurrency", "token_bucket", "fixed_window", "sliding_window", "sliding_window_counter"]
ORDERS = [permits.QueueOrder.OLDEST_FIRST, permits.QueueOrder.NEWEST_FIRST]
#: Partition keys: "7", 7 and b"7" are different keys.
KEYS: list[Hashable] = ["7", 7, b"7", ("a", 7), ("a", (b"b", -1))]

#: Event-loop rounds after each step: the engine completes waiters synchronously (in acquire,
#: release, cancel or ManualClock.advance); the loop resolves their futures shortly after.
DRAIN_ROUNDS = 4


#: The share of each property test's examples to run: scripts/test runs them all on the main
#: interpreter and a quarter (the same first ones: derandomized) on each other CPython it checks.
EXAMPLES_SCALE = float(os.environ.get("PERMITS_TEST_EXAMPLES_SCALE", "1"))


def property_settings(max_examples: int) -> Any:
    return settings(
        max_examples=max(10, round(max_examples * EXAMPLES_SCALE)),
        database=None,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )


#: The model's queue limit for queue_limit=None: larger than any count it can queue.
NO_BOUND = 2**63 - 1


@dataclass
class Config:
    kind: str
    limit: int
    queue_limit: int | None  # None: the default, no bound
    order: permits.QueueOrder
    anchor_ns: int  # the clock's time when the limiter is built
    period_ns: int = 1  # token bucket period / window
    tokens_per_period: int = 1
    segments: int = 1
    scale: int = 1  # the unit the durations were drawn in (1 ns, 1 µs or 1 s)
    manual: bool = False  # auto_replenishment=False (the replenishing kinds only)

    @property
    def timed(self) -> bool:
        return self.kind != "concurrency"


@st.composite
def configs(
    draw: st.DrawFn,
    kind: str | None = None,
    order: permits.QueueOrder | None = None,
    *,
    max_limit: int = 4,
    max_queue: int = 5,
    manual: bool = False,
) -> Config:
    """A limiter: small limits and queue limits, durations in integer nanoseconds at several
    scales, a construction time; manual=True draws auto_replenishment=False sometimes."""
    kind = draw(st.sampled_from(KINDS)) if kind is None else kind
    order = draw(st.sampled_from(ORDERS)) if order is None else order
    scale = draw(st.sampled_from([1, 1, 1_000, 1_000_000_000]))
    base = draw(st.integers(1, 12))
    return Config(
        kind=kind,
        limit=draw(st.integers(1, max_limit)),
        queue_limit=draw(st.one_of(st.integers(0, max_queue), st.none())),
        order=order,
        anchor_ns=draw(st.sampled_from([0, 1, 7 * scale + 3])),
        period_ns=base * scale,
        tokens_per_period=draw(st.integers(1, 5)),
        segments=draw(st.integers(1, min(4, base * scale))),
        scale=scale,
        manual=manual and kind != "concurrency" and draw(st.booleans()),
    )


def draw_ops(draw: st.DrawFn, op: st.SearchStrategy[tuple[Any, ...]], *, max_size: int) -> list[tuple[Any, ...]]:
    """10 to ``max_size`` operations, and sometimes a ("close",) among them (or first or last)."""
    ops = draw(st.lists(op, min_size=10, max_size=max_size))
    close_at = draw(st.one_of(st.none(), st.integers(0, len(ops))))
    if close_at is not None:
        ops.insert(close_at, ("close",))
    return ops


def durations(config: Config) -> st.SearchStrategy[int]:
    """Times to advance by: anything up to a few windows, whole multiples of the scale, and one
    nanosecond either side of them (so boundaries are hit exactly and just missed)."""
    base = config.period_ns // config.scale
    whole = st.integers(0, 3 * base).map(lambda k: k * config.scale)
    return st.one_of(
        st.integers(0, 3 * config.period_ns),
        whole,
        st.tuples(whole, st.sampled_from([-1, 1])).map(lambda p: max(0, p[0] + p[1])),
        st.integers(0, max(1, config.period_ns // 2)),
    )


def algorithm(config: Config, anchor_ns: int) -> Any:
    """The model of the configuration's algorithm, anchored (built) at ``anchor_ns``."""
    window, limit = config.period_ns, config.limit
    if config.kind == "concurrency":
        return ConcurrencyModel(limit)
    if config.kind == "token_bucket":
        return TokenBucketModel(limit, config.tokens_per_period, window, anchor_ns)
    if config.kind == "fixed_window":
        return FixedWindowModel(limit, window, anchor_ns)
    if config.kind == "sliding_window":
        return SlidingWindowModel(limit, window, config.segments, anchor_ns)
    return SlidingWindowCounterModel(limit, window, anchor_ns)


def limiter_model(config: Config, now_ns: int) -> LimiterModel:
    newest = config.order is permits.QueueOrder.NEWEST_FIRST
    return LimiterModel(
        algorithm(config, now_ns),
        queue_limit=NO_BOUND if config.queue_limit is None else config.queue_limit,
        newest_first=newest,
        now=now_ns,
        manual=config.manual,
    )


def build_limiter(config: Config, clock: permits.ManualClock) -> permits.RateLimiter:
    common: dict[str, Any] = dict(queue_limit=config.queue_limit, queue_order=config.order, clock=clock)
    if config.timed:
        common["auto_replenishment"] = not config.manual
    window, limit = config.period_ns / 1e9, config.limit
    if config.kind == "concurrency":
        return permits.ConcurrencyLimiter(limit, **common)
    if config.kind == "token_bucket":
        return permits.TokenBucketLimiter(limit, config.tokens_per_period, window, **common)
    if config.kind == "fixed_window":
        return permits.FixedWindowLimiter(limit, window, **common)
    if config.kind == "sliding_window":
        return permits.SlidingWindowLimiter(limit, window, config.segments, **common)
    return permits.SlidingWindowCounterLimiter(limit, window, **common)


def partition(config: Config, key: Any) -> permits.Partition:
    """The configuration as a partition of ``key`` (None: a per_key template)."""
    assert not config.manual, "partitions replenish automatically"
    queue: dict[str, Any] = dict(queue_limit=config.queue_limit, queue_order=config.order)
    window, limit = config.period_ns / 1e9, config.limit
    if config.kind == "concurrency":
        return permits.Partition.concurrency(key, limit, **queue)
    if config.kind == "token_bucket":
        return permits.Partition.token_bucket(key, limit, config.tokens_per_period, window, **queue)
    if config.kind == "fixed_window":
        return permits.Partition.fixed_window(key, limit, window, **queue)
    if config.kind == "sliding_window":
        return permits.Partition.sliding_window(key, limit, window, config.segments, **queue)
    return permits.Partition.sliding_window_counter(key, limit, window, **queue)


LeaseView = tuple[bool, int, "str | None", "int | None"]


def lease_view(lease: permits.Lease) -> LeaseView:
    # retry_after is reported as ns / 1e9: compared to the nanosecond (stricter than 1e-9 s).
    retry = lease.retry_after
    return (lease.acquired, lease.permit_count, lease.reason, None if retry is None else round(retry * 1e9))


def outcome_view(outcome: Outcome) -> LeaseView:
    return (outcome.acquired, outcome.permit_count, outcome.reason, outcome.retry_after_ns)


def stats_view(statistics: permits.Statistics) -> tuple[int, int, int, int]:
    return (
        statistics.current_available_permits,
        statistics.current_queued_count,
        statistics.total_successful_leases,
        statistics.total_failed_leases,
    )


def idle_view(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1e9)


async def drain(rounds: int = DRAIN_ROUNDS) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


class ModelRun:
    """What the drivers of the property tests share: the ManualClock, the asynchronous waiters
    (tasks) and blocking ones (threads), the leases, the history of steps, and the run of a
    scenario. A driver builds its limiter(s) and model(s), and provides step(), check() and
    close() (finish() too when closing differs)."""

    #: Event-loop rounds after each step and before the end.
    drain_rounds = DRAIN_ROUNDS

    def __init__(self, anchor_ns: int) -> None:
        self.clock = permits.ManualClock()
        self.clock.advance_ns(anchor_ns)
        self.tasks: dict[int, asyncio.Task[Any]] = {}
        self.completed: list[tuple[int, LeaseView]] = []
        #: Every granted lease, kept alive (no GC release), after what the driver gives back to
        #: the model when it is released (its key, its id, ...).
        self.leases: list[tuple[Any, permits.Lease]] = []
        self.released: set[int] = set()
        self.history: list[tuple[Any, ...]] = []
        self.blocking: dict[int, Waiter] = {}  # blocking wait(..., timeout=...) calls, in threads
        self.joined: set[int] = set()

    async def step(self, op: tuple[Any, ...]) -> None:
        raise NotImplementedError

    def check(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Closes the real limiter(s)."""
        raise NotImplementedError

    async def _waiter(self, wid: int, awaitable: Any, tag: Any) -> None:
        lease = await awaitable
        self.completed.append((wid, lease_view(lease)))
        if lease:
            self.leases.append((tag, lease))

    def _cancel(self, slot: int, pending: Iterable[int], cancel: Callable[[int], None]) -> None:
        """Cancels one of the model's pending waiters, by ``slot``: an asynchronous one (a blocking
        one cannot be cancelled); ``cancel(wid)`` cancels it in the model."""
        asynchronous = [wid for wid in pending if wid not in self.blocking]
        if asynchronous:
            wid = asynchronous[slot % len(asynchronous)]
            cancel(wid)
            self.tasks[wid].cancel()

    def _release(self, slot: int, give_back: Callable[[Any, permits.Lease], None]) -> None:
        """Releases one of the leases, by ``slot``; the first time, ``give_back(tag, lease)``
        releases it in the model."""
        if self.leases:
            i = slot % len(self.leases)
            tag, lease = self.leases[i]
            if i not in self.released:
                self.released.add(i)
                give_back(tag, lease)
            lease.release()  # a second release is a no-op

    def _waiting(self) -> list[int]:
        """The waiters not done yet, asynchronous and blocking, in order."""
        waiting = [wid for wid, task in self.tasks.items() if not task.done()]
        waiting += [wid for wid, waiter in self.blocking.items() if not waiter.done.is_set()]
        return sorted(waiting)

    def _let_go(self) -> None:
        """At the end: every waiter is done; every lease is released."""
        assert all(task.done() for task in self.tasks.values())
        assert all(not waiter.is_alive() for waiter in self.blocking.values())
        for _, lease in self.leases:
            lease.release()

    async def finish(self) -> None:
        """Closes both (queued waiters fail with "closed"), checks, and lets every task end."""
        await self.step(("close",))
        self.check()
        self._let_go()

    async def drive(self, ops: list[tuple[Any, ...]]) -> None:
        """Checks, then each operation followed by a check, then finish()."""
        try:
            self.check()
            for op in ops:
                await self.step(op)
                self.check()
            await self.finish()
        finally:  # a failed check leaves no waiting task or thread behind
            self.close()
            for task in self.tasks.values():
                task.cancel()
            await drain(self.drain_rounds)
            for waiter in self.blocking.values():
                waiter.join(SAFETY)
