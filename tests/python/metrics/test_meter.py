"""The Meter a Prometheus-instrumented limiter keeps its lease counts and durations in (atomics in
the extension, read when the registry is collected): what a stamped lease counts, the buckets'
bounds, what the meter cannot count itself, threads, and leases that must be observed the slow way."""

from __future__ import annotations

import gc
import threading

import pytest
from _reasons import REASONS, Reasons

import permits
from permits._core import Meter
from permits.metrics import instrument

from _support import need, run_threads

BOUNDS = (0.005, 0.01, 1.0, float("inf"))


def sample(registry: object, name: str, **labels: str) -> float | None:
    got: float | None = registry.get_sample_value(name, labels)  # type: ignore[attr-defined]
    return got


@pytest.fixture
def registry() -> object:
    return need("prometheus_client").CollectorRegistry()


def test_a_stamped_lease_is_counted_and_ends_in_its_bucket() -> None:
    clock = permits.ManualClock()
    meter = Meter(clock, BOUNDS)
    limiter = permits.ConcurrencyLimiter(3, clock=clock)
    leases = [limiter.acquire() for _ in range(3)]
    assert all(meter.stamp(lease) for lease in leases)
    assert meter.stamp(limiter.acquire())  # a refusal, by its reason
    assert meter.results() == {"acquired": 3, "limit_reached": 1} and meter.active == 3
    clock.advance(0.005)
    leases[0].release()  # on the bound: le 0.005
    clock.advance(0.005)
    leases[1].release()  # 0.01: le 0.01
    leases[2]._refund()  # a refund: never used, no duration
    assert meter.active == 0
    assert meter.durations() == ([1, 1, 0, 0], 0.015)
    leases[0].release()  # once is all
    assert meter.durations() == ([1, 1, 0, 0], 0.015) and meter.active == 0


def test_a_refusal_without_a_reason_counts_as_limit_reached() -> None:
    meter = Meter(permits.ManualClock(), BOUNDS)
    assert meter.stamp(permits.Lease.denied(reason="")) and meter.stamp(permits.Lease.denied(reason=None))  # type: ignore[arg-type]
    assert meter.results() == {"limit_reached": 2}


def test_a_lease_is_stamped_once_and_never_after_its_release() -> None:
    clock = permits.ManualClock()
    first, second = Meter(clock, BOUNDS), Meter(clock, BOUNDS)
    limiter = permits.ConcurrencyLimiter(2, clock=clock)
    lease = limiter.acquire()
    assert first.stamp(lease) and not second.stamp(lease) and not first.stamp(lease)
    released = limiter.acquire()
    released.release()
    assert not first.stamp(released)
    assert not first.stamp(permits.Lease.granted(1).__class__)  # not a lease at all
    lease.release()
    assert (first.active, second.active) == (0, 0) and first.results() == {"acquired": 1}
    assert second.results() == {}


def test_a_stamped_lease_collected_unreleased_counts_as_released() -> None:
    clock = permits.ManualClock()
    meter = Meter(clock, BOUNDS)
    limiter = permits.TokenBucketLimiter(5, 5, 1.0, clock=clock)
    lease = limiter.acquire()
    assert meter.stamp(lease)
    clock.advance(2.0)
    del lease
    assert meter.active == 0 and meter.durations() == ([0, 0, 0, 1], 2.0)


def test_bad_arguments_name_themselves() -> None:
    clock = permits.ManualClock()
    with pytest.raises(TypeError, match="clock"):
        Meter(object(), BOUNDS)
    for bounds in ([1.0, 0.5], [float("nan")], [-1.0], [1.0, 1.0], [float("inf"), 1.0]):
        with pytest.raises(ValueError, match="bounds"):
            Meter(clock, bounds)
    with pytest.raises(TypeError, match="bounds"):
        Meter(clock, ["a"])
    with pytest.raises(TypeError, match="result"):
        Meter(clock, BOUNDS).count(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="record"):
        Meter(clock, BOUNDS, record=3)  # type: ignore[arg-type]


def test_more_results_than_the_meter_holds_are_all_counted(registry: object) -> None:
    limiter = instrument(Reasons(), registry=registry)
    for _ in range(2 * REASONS):
        assert not limiter.acquire()
    for n in range(REASONS):
        assert sample(registry, "permits_leases_total", limiter="reasons", result=f"r{n}") == 2


def test_threads_count_every_lease_once(registry: object) -> None:
    clock = permits.ManualClock()
    inner = permits.TokenBucketLimiter(10_000, 1, 1000.0, clock=clock, name="busy")
    limiter = instrument(inner, registry=registry)
    granted = [0] * 8

    def body(i: int) -> None:
        for _ in range(2000):
            lease = limiter.acquire()
            if lease:
                granted[i] += 1
                lease.release()

    run_threads(body, 8)
    assert sum(granted) == 10_000
    assert sample(registry, "permits_leases_total", limiter="busy", result="acquired") == 10_000
    assert sample(registry, "permits_leases_total", limiter="busy", result="limit_reached") == 6_000
    assert sample(registry, "permits_active_leases", limiter="busy") == 0
    assert sample(registry, "permits_lease_duration_seconds_count", limiter="busy") == 10_000


class Passing(permits.RateLimiter):
    """Hands out the leases of another (instrumented) limiter: already stamped."""

    def __init__(self, inner: permits.RateLimiter) -> None:
        super().__init__(name="outer", clock=inner._rl_clock)
        self.inner = inner

    def _acquire(self, permit_count: int) -> permits.Lease:
        return self.inner.acquire(permit_count)


def test_a_lease_stamped_already_is_observed_the_slow_way(registry: object) -> None:
    prometheus_client = need("prometheus_client")
    clock = permits.ManualClock()
    other = prometheus_client.CollectorRegistry()
    inner = instrument(permits.ConcurrencyLimiter(1, clock=clock, name="inner"), registry=registry)
    outer = instrument(Passing(inner), registry=other)
    lease = outer.acquire()
    assert lease and not outer.acquire()
    clock.advance(0.5)
    lease.release()
    assert inner.available_permits() == 1
    for reg, name in ((registry, "inner"), (other, "outer")):
        assert sample(reg, "permits_leases_total", limiter=name, result="acquired") == 1
        assert sample(reg, "permits_active_leases", limiter=name) == 0
        assert sample(reg, "permits_lease_duration_seconds_sum", limiter=name) == 0.5


def test_limiters_of_one_name_share_their_series(registry: object) -> None:
    clock = permits.ManualClock()
    first = instrument(permits.ConcurrencyLimiter(1, clock=clock, name="db"), registry=registry)
    second = instrument(permits.ConcurrencyLimiter(1, clock=clock, name="db"), registry=registry)
    third = instrument(permits.ConcurrencyLimiter(1, clock=permits.ManualClock(), name="db"), registry=registry)
    held = [first.acquire(), second.acquire(), third.acquire()]
    assert all(held)
    assert sample(registry, "permits_leases_total", limiter="db", result="acquired") == 3
    assert sample(registry, "permits_active_leases", limiter="db") == 3
    del first, second, third  # the counts outlive the limiters: a counter never goes down
    for lease in held:
        lease.release()
    assert sample(registry, "permits_leases_total", limiter="db", result="acquired") == 3
    assert sample(registry, "permits_active_leases", limiter="db") == 0
    assert sample(registry, "permits_lease_duration_seconds_count", limiter="db") == 3


def test_a_thread_releasing_what_another_stamped() -> None:
    clock = permits.ManualClock()
    meter = Meter(clock, BOUNDS)
    limiter = permits.ConcurrencyLimiter(100, clock=clock)
    leases = [limiter.acquire() for _ in range(100)]
    assert all(meter.stamp(lease) for lease in leases)
    threads = [threading.Thread(target=lambda: [lease.release() for lease in leases]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert meter.active == 0 and sum(meter.durations()[0]) == 100


def test_an_instrumented_engine_limiter_hands_out_its_own_leases(registry: object) -> None:
    # (the engine's leases hold no Python object, so the collector never tracks them; a lease
    # wrapped to see its release holds a callback, and is tracked)
    clock = permits.ManualClock()
    limiter = instrument(permits.TokenBucketLimiter(2, 2, 1.0, clock=clock, name="own"), registry=registry)
    lease = limiter.acquire()
    assert lease and not gc.is_tracked(lease)
    both = instrument(limiter, meter=need("opentelemetry.sdk.metrics").MeterProvider().get_meter("t"))
    wrapped = both.acquire()
    assert wrapped and gc.is_tracked(wrapped)  # two exporters: each told of every event
    assert sample(registry, "permits_leases_total", limiter="own", result="acquired") == 2


def test_durations_held_for_record_until_flushed() -> None:
    clock = permits.ManualClock()
    recorded: list[float] = []
    meter = Meter(clock, BOUNDS, record=recorded.append, pending_limit=2)
    limiter = permits.ConcurrencyLimiter(3, clock=clock)
    leases = [limiter.acquire() for _ in range(3)]
    assert all(meter.stamp(lease) for lease in leases)
    clock.advance(0.25)
    leases[0].release()
    clock.advance(0.25)
    leases[1].release()
    assert (recorded, meter.pending) == ([], 2)  # held: no call on the release
    leases[2].release()  # none left to hold it: recorded at once
    assert (recorded, meter.pending) == ([0.5], 2)
    assert meter.flush() == 2 and recorded == [0.5, 0.25, 0.5] and meter.pending == 0
    assert meter.flush() == 0 and recorded == [0.5, 0.25, 0.5]
    assert meter.durations() == ([0, 0, 3, 0], 1.25)  # the buckets count at the release, held or not


def test_bad_pending_limits_name_themselves() -> None:
    clock = permits.ManualClock()
    for limit in (-1, 2**24 + 1, 2**70):
        with pytest.raises(ValueError, match="pending_limit"):
            Meter(clock, BOUNDS, record=print, pending_limit=limit)
    for bad in ("3", 2.0, True):
        with pytest.raises(TypeError, match="pending_limit"):
            Meter(clock, BOUNDS, record=print, pending_limit=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pending_limit needs record"):
        Meter(clock, BOUNDS, pending_limit=1)
    assert Meter(clock, BOUNDS, pending_limit=0).flush() == 0


def test_a_record_that_raises_in_flush_loses_no_other_duration() -> None:
    import sys

    clock = permits.ManualClock()
    recorded: list[float] = []

    def record(seconds: float) -> None:
        recorded.append(seconds)
        if len(recorded) == 2:
            raise RuntimeError("exporter down")

    meter = Meter(clock, BOUNDS, record=record, pending_limit=10)
    limiter = permits.ConcurrencyLimiter(3, clock=clock)
    for _ in range(3):
        lease = limiter.acquire()
        assert meter.stamp(lease)
        clock.advance(1.0)
        lease.release()
        assert limiter.available_permits() == 3
    seen: list[BaseException | None] = []
    hook, sys.unraisablehook = sys.unraisablehook, lambda u: seen.append(u.exc_value)
    try:
        assert meter.flush() == 3
    finally:
        sys.unraisablehook = hook
    assert recorded == [1.0, 1.0, 1.0] and [str(e) for e in seen] == ["exporter down"]


def test_a_record_that_releases_a_lease_of_its_meter_while_flushing() -> None:
    clock = permits.ManualClock()
    limiter = permits.ConcurrencyLimiter(2, clock=clock)
    recorded: list[float] = []
    later: list[permits.Lease] = []

    def record(seconds: float) -> None:
        recorded.append(seconds)
        while later:
            later.pop().release()  # held again while the flush runs: no deadlock, kept for the next

    meter = Meter(clock, BOUNDS, record=record, pending_limit=4)
    first, second = limiter.acquire(), limiter.acquire()
    assert meter.stamp(first) and meter.stamp(second)
    clock.advance(1.0)
    first.release()
    later.append(second)
    clock.advance(1.0)
    assert meter.flush() == 1 and recorded == [1.0] and meter.pending == 1
    assert meter.flush() == 1 and recorded == [1.0, 2.0] and meter.pending == 0


def test_threads_releasing_while_another_flushes_record_each_duration_once() -> None:
    clock = permits.ManualClock()
    recorded: list[float] = []
    meter = Meter(clock, BOUNDS, record=recorded.append, pending_limit=64)
    limiter = permits.ConcurrencyLimiter(10_000, clock=clock)
    leases = [limiter.acquire() for _ in range(4 * 2000)]
    assert all(meter.stamp(lease) for lease in leases)
    done = threading.Event()
    flushed = [0]

    def body(i: int) -> None:
        if i == 4:  # the collector
            while not done.is_set():
                flushed[0] += meter.flush()
            return
        for lease in leases[i * 2000 : (i + 1) * 2000]:
            lease.release()

    def workers(i: int) -> None:
        try:
            body(i)
        finally:
            if i != 4 and meter.active == 0:
                done.set()

    run_threads(workers, 5)
    flushed[0] += meter.flush()
    assert meter.active == 0 and meter.pending == 0 and len(recorded) == 8000
    assert sum(meter.durations()[0]) == 8000 and flushed[0] <= 8000
