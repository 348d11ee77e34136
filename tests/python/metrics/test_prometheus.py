"""instrument() to Prometheus: every count scraped over HTTP from a real exposition, durations
exact on a ManualClock."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from _scrape import exposition, scrape, value

import permits
from permits.metrics import instrument

from _support import need


@pytest.fixture
def registry() -> object:
    return need("prometheus_client").CollectorRegistry()


def test_concurrency_leases_releases_and_durations(registry: object) -> None:
    clock = permits.ManualClock()
    limiter = instrument(permits.ConcurrencyLimiter(2, queue_limit=0, clock=clock, name="db"), registry=registry)
    first, second = limiter.acquire(), limiter.acquire()
    assert first and second and not limiter.acquire()
    assert limiter.wait().reason == "queue_full"
    clock.advance(1.5)
    first.release()
    with limiter.acquire():
        clock.advance(0.25)
    with exposition(registry) as url:
        samples = scrape(url)
    assert value(samples, "permits_leases_total", limiter="db", result="acquired") == 3
    assert value(samples, "permits_leases_total", limiter="db", result="limit_reached") == 1
    assert value(samples, "permits_leases_total", limiter="db", result="queue_full") == 1
    assert value(samples, "permits_active_leases", limiter="db") == 1
    assert value(samples, "permits_lease_duration_seconds_count", limiter="db") == 2
    assert value(samples, "permits_lease_duration_seconds_sum", limiter="db") == 1.75
    second.release()
    assert limiter.statistics().current_available_permits == 2  # the wrapped limiter's own


def test_dropped_lease_counts_as_released_when_collected(registry: object) -> None:
    clock = permits.ManualClock()
    limiter = instrument(permits.ConcurrencyLimiter(1, clock=clock, name="pool"), registry=registry)
    lease = limiter.acquire()
    clock.advance(2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        del lease
        gc.collect()
    assert limiter.available_permits() == 1
    with exposition(registry) as url:
        samples = scrape(url)
    assert value(samples, "permits_active_leases", limiter="pool") == 0
    assert value(samples, "permits_lease_duration_seconds_sum", limiter="pool") == 2.0


def test_queue_gauge_and_queue_duration_by_outcome(registry: object) -> None:
    clock = permits.ManualClock()
    bucket = permits.TokenBucketLimiter(1, 1, 1.0, queue_limit=5, clock=clock, name="api")
    limiter = instrument(bucket, registry=registry)

    async def main() -> None:
        assert await limiter.wait_async()  # granted at once: never queued
        waiting = [asyncio.ensure_future(limiter.wait_async()) for _ in range(3)]
        await asyncio.sleep(0)
        with exposition(registry) as url:
            assert value(scrape(url), "permits_queued", limiter="api") == 3
        waiting[2].cancel()
        clock.advance(1.0)
        first = await waiting[0]
        clock.advance(1.0)
        second = await waiting[1]
        assert first and second
        with pytest.raises(asyncio.CancelledError):
            await waiting[2]

    asyncio.run(main())
    with exposition(registry) as url:
        samples = scrape(url)
    assert value(samples, "permits_queued", limiter="api") == 0
    assert value(samples, "permits_leases_total", limiter="api", result="acquired") == 3
    assert value(samples, "permits_queue_duration_seconds_count", limiter="api", result="acquired") == 2
    assert value(samples, "permits_queue_duration_seconds_sum", limiter="api", result="acquired") == 3.0
    assert value(samples, "permits_queue_duration_seconds_count", limiter="api", result="cancelled") == 1


@pytest.mark.parametrize(
    "make",
    [
        lambda clock: permits.TokenBucketLimiter(2, 1, 1.0, clock=clock, name="x"),
        lambda clock: permits.FixedWindowLimiter(2, 1.0, clock=clock, name="x"),
        lambda clock: permits.SlidingWindowLimiter(2, 1.0, 2, clock=clock, name="x"),
        lambda clock: permits.SlidingWindowCounterLimiter(2, 1.0, clock=clock, name="x"),
        lambda clock: permits.ConcurrencyLimiter(2, clock=clock, name="x"),
        lambda clock: _named(
            permits.chain(
                permits.TokenBucketLimiter(5, 1, 1.0, clock=clock), permits.ConcurrencyLimiter(2, clock=clock)
            )
        ),
    ],
    ids=["token_bucket", "fixed_window", "sliding_window", "sliding_window_counter", "concurrency", "chain"],
)
def test_every_limiter_kind_sync_and_async(registry: object, make: object) -> None:
    clock = permits.ManualClock()
    limiter = instrument(make(clock), registry=registry)  # type: ignore[operator]
    held = [limiter.acquire(), limiter.wait(timeout=0)]

    async def main() -> None:
        held.append(await limiter.acquire_async())

    asyncio.run(main())
    assert [bool(lease) for lease in held] == [True, True, False]
    for lease in held:
        lease.release()
    with exposition(registry) as url:
        samples = scrape(url)
    assert value(samples, "permits_leases_total", limiter="x", result="acquired") == 2
    assert value(samples, "permits_leases_total", limiter="x", result="limit_reached") == 1
    assert value(samples, "permits_active_leases", limiter="x") == 0


def _named(limiter: permits.RateLimiter) -> permits.RateLimiter:
    limiter.name = "x"
    return limiter


def test_keyed_limiter_is_labelled_with_its_name_never_the_key(registry: object) -> None:
    clock = permits.ManualClock()
    per_user = permits.PartitionedLimiter.per_key(permits.specs.TokenBucket(1, 1, 1.0), clock=clock, name="per_user")
    limiter = instrument(per_user, registry=registry)
    assert isinstance(limiter, permits.KeyedRateLimiter)
    assert limiter.acquire("alice") and limiter.acquire("bob") and not limiter.acquire("alice")
    with exposition(registry) as url:
        samples = scrape(url)
    assert value(samples, "permits_leases_total", limiter="per_user", result="acquired") == 2
    assert value(samples, "permits_leases_total", limiter="per_user", result="limit_reached") == 1
    assert not any("alice" in str(labels) for _, labels in samples)


def test_a_per_key_limiter_is_labelled_with_its_templates_name(registry: object) -> None:
    # Issue 35, item 7: the series said limiter="default".
    template = permits.Partition.fixed_window(None, 1, 60.0, name="per-user")
    limiter = instrument(permits.PartitionedLimiter.per_key(template, clock=permits.ManualClock()), registry=registry)
    assert limiter.acquire("alice") and not limiter.acquire("alice")
    with exposition(registry) as url:
        samples = scrape(url)
    assert value(samples, "permits_leases_total", limiter="per-user", result="acquired") == 1
    assert value(samples, "permits_leases_total", limiter="per-user", result="limit_reached") == 1
    assert value(samples, "permits_leases_total", limiter="default", result="acquired") is None


def test_store_limiter_on_shared_memory(registry: object, tmp_path: object) -> None:
    shm = pytest.importorskip("permits.shm", reason="permits.shm is Linux only")
    import os

    name = f"test-metrics-{os.getpid()}"
    clock = permits.ManualClock()
    try:
        with shm.SharedMemoryStore(name, clock=clock) as store:
            limiter = instrument(store.token_bucket("shared", 1, 1, 1.0), registry=registry)
            assert limiter.acquire() and not limiter.acquire()
            with exposition(registry) as url:
                samples = scrape(url)
            assert value(samples, "permits_leases_total", limiter="shared", result="acquired") == 1
            assert value(samples, "permits_leases_total", limiter="shared", result="limit_reached") == 1
    finally:
        path = f"/dev/shm/permits.{name}"
        if os.path.exists(path):
            os.unlink(path)


def test_instrumenting_twice_never_counts_twice(registry: object) -> None:
    limiter = instrument(permits.TokenBucketLimiter(5, 1, 1.0, name="twice"), registry=registry)
    again = instrument(limiter, registry=registry)
    assert again is limiter
    assert again.acquire()
    with exposition(registry) as url:
        assert value(scrape(url), "permits_leases_total", limiter="twice", result="acquired") == 1


def test_bad_input_is_a_type_error_naming_the_argument(registry: object) -> None:
    with pytest.raises(TypeError, match="limiter must be"):
        instrument(42)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="registry must be"):
        instrument(permits.TokenBucketLimiter(1, 1, 1.0), registry="default")
    with pytest.raises(TypeError, match="meter must be"):
        instrument(permits.TokenBucketLimiter(1, 1, 1.0), meter=object())


def _worker(directory: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "_multiprocess_worker.py")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def _read(worker: subprocess.Popen[str], expected: str) -> None:
    assert worker.stdout is not None
    line = worker.stdout.readline().strip()
    assert line == expected, f"worker {worker.pid} printed {line!r}"


def _tell(worker: subprocess.Popen[str]) -> None:
    assert worker.stdin is not None
    worker.stdin.write("\n")
    worker.stdin.flush()


def _collected(directory: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    prometheus_client = need("prometheus_client")
    from prometheus_client import multiprocess

    registry = prometheus_client.CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))
    with exposition(registry) as url:
        return scrape(url)


def test_multiprocess_mode_exports_every_instrument(tmp_path: Path) -> None:
    # Two worker processes write into one PROMETHEUS_MULTIPROC_DIR, as gunicorn's or uvicorn's
    # workers do; MultiProcessCollector, in this process, reads every instrument from its files.
    need("prometheus_client")
    workers = [_worker(tmp_path) for _ in range(2)]
    try:
        for worker in workers:
            _read(worker, "ready")
        samples = _collected(tmp_path)
        assert value(samples, "permits_queued", limiter="api") == 4  # two waits of one permit, each
        assert value(samples, "permits_active_leases", limiter="api") == 2  # one held in each
        assert value(samples, "permits_leases_total", limiter="api", result="acquired") == 4
        assert value(samples, "permits_leases_total", limiter="api", result="limit_reached") == 2
        assert value(samples, "permits_requests_total", limiter="api", result="acquired") == 2
        assert value(samples, "permits_requests_total", limiter="api", result="global_limiter") == 2
        assert value(samples, "permits_lease_duration_seconds_count", limiter="api") == 2
        assert value(samples, "permits_queue_duration_seconds_count", limiter="api", result="acquired") is None
        for worker in workers:
            _tell(worker)
            _read(worker, "done")
        samples = _collected(tmp_path)
        assert value(samples, "permits_queued", limiter="api") == 0
        assert value(samples, "permits_active_leases", limiter="api") == 0
        assert value(samples, "permits_leases_total", limiter="api", result="acquired") == 8
        assert value(samples, "permits_queue_duration_seconds_count", limiter="api", result="acquired") == 4
        assert value(samples, "permits_queue_duration_seconds_sum", limiter="api", result="acquired") == 6.0
        assert value(samples, "permits_lease_duration_seconds_count", limiter="api") == 8
        assert value(samples, "permits_lease_duration_seconds_sum", limiter="api") == 3.0  # the held ones
        for worker in workers:
            _tell(worker)
            assert worker.wait(60) == 0
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def test_lost_leases_are_counted_once_per_instrument(registry: object) -> None:
    from permits import _lost_leases

    first = instrument(permits.ConcurrencyLimiter(1, name="lost-db"), registry=registry)
    second = instrument(permits.ConcurrencyLimiter(1, name="lost-db"), registry=registry)  # the same counter
    other = instrument(permits.ConcurrencyLimiter(1, name="lost-other"), registry=registry)
    _lost_leases.report("lost-db", 2)  # what a store does when it finds leases of "lost-db" lost
    with exposition(registry) as url:
        text = scrape(url)
        assert value(text, "permits_leases_lost_total", limiter="lost-db") == 2
        assert value(text, "permits_leases_lost_total", limiter="lost-other") == 0
    assert first and second and other
