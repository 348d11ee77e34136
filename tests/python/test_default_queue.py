"""`wait` waits: with no queue_limit given, a wait past the limit queues (no bound on the queue) and
is granted in order as permits come back, for every limiter kind, however it is built (the class,
``spec.limiter()``, a ``Partition`` factory, ``per_key``). ``queue_limit=0`` fails such a wait at
once with "queue_full"; ``queue_limit=N`` bounds the queued permits."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from typing import Any

import pytest

import permits
from permits import Partition, PartitionedLimiter, specs

from _support import KINDS, PERIOD, SAFETY, LimiterKit, settle, spawn, until, wait_until

LIMIT = 2
WAITERS = 7  # more than the limit, and more permits than a small bounded queue would hold

SPECS: dict[str, permits.specs.Spec[Any]] = {
    "concurrency": specs.Concurrency(LIMIT),
    "token_bucket": specs.TokenBucket(LIMIT, LIMIT, PERIOD),
    "fixed_window": specs.FixedWindow(LIMIT, PERIOD),
    "sliding_window": specs.SlidingWindow(LIMIT, PERIOD, 2),
    "sliding_window_counter": specs.SlidingWindowCounter(LIMIT, PERIOD),
}
FACTORIES: dict[str, Callable[..., Partition]] = {
    "concurrency": lambda key, **q: Partition.concurrency(key, LIMIT, **q),
    "token_bucket": lambda key, **q: Partition.token_bucket(key, LIMIT, LIMIT, PERIOD, **q),
    "fixed_window": lambda key, **q: Partition.fixed_window(key, LIMIT, PERIOD, **q),
    "sliding_window": lambda key, **q: Partition.sliding_window(key, LIMIT, PERIOD, 2, **q),
    "sliding_window_counter": lambda key, **q: Partition.sliding_window_counter(key, LIMIT, PERIOD, **q),
}
ARGUMENTS: dict[str, tuple[Any, ...]] = {
    "concurrency": (LIMIT,),
    "token_bucket": (LIMIT, LIMIT, PERIOD),
    "fixed_window": (LIMIT, PERIOD),
    "sliding_window": (LIMIT, PERIOD, 2),
    "sliding_window_counter": (LIMIT, PERIOD),
}
CLASSES: dict[str, Callable[..., permits.RateLimiter]] = {
    "concurrency": permits.ConcurrencyLimiter,
    "token_bucket": permits.TokenBucketLimiter,
    "fixed_window": permits.FixedWindowLimiter,
    "sliding_window": permits.SlidingWindowLimiter,
    "sliding_window_counter": permits.SlidingWindowCounterLimiter,
}
BUILDS = ["class", "spec", "partition_factory", "partition_of", "per_key_spec", "per_key_template"]


class Subject:
    """One limiter of ``kind`` as ``build`` makes it, seen through one key when it is keyed;
    ``queue`` holds the queue options given (none: the defaults)."""

    def __init__(self, kind: str, build: str, clock: permits.ManualClock, **queue: Any) -> None:
        self.kit = LimiterKit(kind, clock)
        spec = SPECS[kind]
        self.keyed = build not in ("class", "spec")
        limiter: Any
        if build == "class":
            limiter = CLASSES[kind](*ARGUMENTS[kind], clock=clock, **queue)
        elif build == "spec":
            limiter = spec.limiter(clock=clock, **queue)
        elif build == "partition_factory":
            limiter = PartitionedLimiter(lambda key: FACTORIES[kind](key, **queue), clock=clock)
        elif build == "partition_of":
            limiter = PartitionedLimiter(lambda key: Partition.of(key, spec, **queue), clock=clock)
        elif build == "per_key_spec" and not queue:
            limiter = PartitionedLimiter.per_key(spec, clock=clock)
        elif build == "per_key_spec":
            limiter = PartitionedLimiter.per_key(Partition.of(None, spec, **queue), clock=clock)
        else:
            limiter = PartitionedLimiter.per_key(FACTORIES[kind](None, **queue), clock=clock)
        self.limiter = limiter

    def acquire(self, n: int = 1) -> permits.Lease:
        return self.limiter.acquire("k", n) if self.keyed else self.limiter.acquire(n)

    def wait_async(self, n: int = 1) -> Any:
        return self.limiter.wait_async("k", n) if self.keyed else self.limiter.wait_async(n)

    def wait(self, n: int = 1, **kwargs: Any) -> permits.Lease:
        return self.limiter.wait("k", n, **kwargs) if self.keyed else self.limiter.wait(n, **kwargs)

    def queued(self) -> int:
        stats = self.limiter.statistics("k") if self.keyed else self.limiter.statistics()
        return stats.current_queued_count


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("build", BUILDS)
async def test_a_wait_past_the_limit_queues_and_is_granted_in_order(kind: str, build: str) -> None:
    clock = permits.ManualClock()
    subject = Subject(kind, build, clock)
    held = [subject.acquire() for _ in range(LIMIT)]
    assert all(held)
    tasks = []
    for _ in range(WAITERS):
        tasks.append(spawn(subject.wait_async()))
        await settle()
    assert subject.queued() == WAITERS
    assert not any(task.done() for task in tasks)
    granted: list[int] = []
    while len(granted) < WAITERS:
        subject.kit.give_back(*held)  # a release for concurrency, the time that frees the permits otherwise
        expected = min(WAITERS, len(granted) + LIMIT)
        await until(lambda n=expected: sum(t.done() for t in tasks) >= n)
        newly = [i for i, t in enumerate(tasks) if t.done() and i not in granted]
        assert newly == list(range(len(granted), len(granted) + len(newly)))  # in queue order
        assert len(newly) == min(LIMIT, WAITERS - len(granted))
        held = [tasks[i].result() for i in newly]
        assert all(held) and all(lease.reason is None for lease in held)
        granted += newly
    assert subject.queued() == 0
    for lease in held:
        lease.release()


@pytest.mark.parametrize("build", ["class", "per_key_spec"])
def test_a_blocking_wait_past_the_limit_waits(kind: str, build: str) -> None:
    clock = permits.ManualClock()
    subject = Subject(kind, build, clock)
    held = [subject.acquire() for _ in range(LIMIT)]
    leases: list[permits.Lease] = []
    thread = threading.Thread(target=lambda: leases.append(subject.wait()), daemon=True)
    thread.start()
    wait_until(lambda: subject.queued() == 1)
    assert not leases
    subject.kit.give_back(*held)
    thread.join(SAFETY)
    assert len(leases) == 1 and leases[0].acquired
    leases[0].release()


@pytest.mark.parametrize("build", BUILDS)
async def test_queue_limit_zero_fails_a_wait_at_once(kind: str, build: str) -> None:
    clock = permits.ManualClock()
    subject = Subject(kind, build, clock, queue_limit=0)
    held = [subject.acquire() for _ in range(LIMIT)]
    assert all(held)
    lease = await asyncio.wait_for(subject.wait_async(), SAFETY)
    assert not lease and lease.reason == "queue_full"
    assert subject.wait().reason == "queue_full"  # does not block
    assert subject.queued() == 0


@pytest.mark.parametrize("build", BUILDS)
async def test_queue_limit_n_bounds_the_queued_permits(kind: str, build: str) -> None:
    clock = permits.ManualClock()
    subject = Subject(kind, build, clock, queue_limit=3)
    held = [subject.acquire() for _ in range(LIMIT)]
    assert all(held)
    first = spawn(subject.wait_async(2))
    second = spawn(subject.wait_async(1))
    await settle()
    assert subject.queued() == 3
    full = await asyncio.wait_for(subject.wait_async(1), SAFETY)
    assert not full and full.reason == "queue_full"
    subject.kit.give_back(*held)
    granted = await asyncio.wait_for(first, SAFETY)
    assert granted
    assert not second.done() or (await second)  # behind the head: granted only once permits allow
    second.cancel()
    granted.release()


def test_the_defaults_are_no_bound() -> None:
    """The signatures say so: the classes, spec.limiter(), the Partition factories and Partition.of."""
    callables: list[Callable[..., Any]] = [
        permits.ConcurrencyLimiter,
        permits.TokenBucketLimiter,
        permits.FixedWindowLimiter,
        permits.SlidingWindowLimiter,
        permits.SlidingWindowCounterLimiter,
        specs.TokenBucket(1, 1, 1.0).limiter,
        Partition.of,
        Partition.concurrency,
        Partition.token_bucket,
        Partition.fixed_window,
        Partition.sliding_window,
        Partition.sliding_window_counter,
    ]
    for c in callables:
        assert inspect.signature(c).parameters["queue_limit"].default is None, c


def test_partition_repr_shows_a_queue_limit_given() -> None:
    spec = specs.FixedWindow(1, 1.0)
    assert repr(Partition.of("a", spec)) == "Partition.of('a', FixedWindow(permit_limit=1, window=1.0))"
    assert repr(Partition.of("a", spec, queue_limit=0)) == (
        "Partition.of('a', FixedWindow(permit_limit=1, window=1.0), queue_limit=0)"
    )


@pytest.mark.parametrize("bad", [-1, 2**31, 1.5, "3", True])
def test_queue_limit_still_refuses_bad_values(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="queue_limit"):
        permits.ConcurrencyLimiter(1, queue_limit=bad)  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError), match="queue_limit"):
        Partition.of("k", specs.Concurrency(1), queue_limit=bad)  # type: ignore[arg-type]
