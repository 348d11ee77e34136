"""Many threads on one object at once, as a free-threaded CPython (3.13t) runs them: in parallel,
with no GIL between them. Each test counts exactly (nothing granted twice, nothing lost) and
watches for what the GIL used to hide in the bindings: one lease released from several threads,
the registry leases refund through, the per-thread asyncio bridges, a forgotten lease collected
while another thread logs one. They run on every build (with the GIL they are thread tests too);
./scripts/test ft runs them without it."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest

import permits
from permits import Partition, PartitionedLimiter

from _support import FREE_THREADED, need, run_threads

THREADS = 8


def together(work: Callable[[int], None], n: int = THREADS) -> None:
    """Runs work(0..n-1) on n threads started at one barrier; re-raises the first error."""
    run_threads(work, n, join_timeout=60)


@pytest.mark.skipif(not FREE_THREADED, reason="a free-threaded CPython (3.13t) only: ./scripts/test ft")
def test_importing_permits_leaves_the_gil_off():
    # A child interpreter: this one may have the GIL on for another extension of the test run, or
    # off by PYTHON_GIL=0 (./scripts/test ft), which would hide an extension that turns it on.
    code = "import sys, permits; print(sys._is_gil_enabled())"
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    out = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", code], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_lease_released_by_many_threads_at_once_gives_back_once():
    limit, rounds = 3, 400
    lim = permits.ConcurrencyLimiter(limit)
    for _ in range(rounds):
        leases = [lim.acquire() for _ in range(limit)]
        assert all(leases)
        # Every thread releases every lease: each must count once, or the limit grows.
        together(lambda _i, leases=leases: [lease.release() for lease in leases], n=4)
        assert lim.available_permits() == limit
    held = [lim.acquire() for _ in range(limit + 1)]
    assert [bool(lease) for lease in held] == [True] * limit + [False]


@pytest.mark.parametrize("keyed", [False, True], ids=["limiter", "per_key"])
def test_leases_settled_and_released_at_once_give_back_exactly_what_they_took(keyed):
    """settle() on some threads while others release the same leases: a release gives back what
    the lease holds when it lands, a settle only what it no longer keeps, never both the same permit."""
    limit, rounds = 40, 200
    if keyed:
        keyed_limiter = PartitionedLimiter.per_key(permits.specs.Concurrency(limit))
        take = lambda n: keyed_limiter.acquire("k", n)  # noqa: E731
        available = lambda: keyed_limiter.available_permits("k")  # noqa: E731
    else:
        lim = permits.ConcurrencyLimiter(limit)
        take, available = lim.acquire, lim.available_permits
    for _ in range(rounds):
        leases = [take(10) for _ in range(limit // 10)]
        assert all(leases)

        def work(i, leases=leases):
            for lease in leases:
                if i % 2:
                    lease.release()
                else:
                    # each settling thread keeps fewer; ValueError: released first, or settled lower
                    with contextlib.suppress(ValueError):
                        lease.settle(10 - 1 - i)

        together(work, n=4)
        assert available() == limit


def test_threads_on_one_concurrency_limiter_never_hold_more_than_its_limit():
    limit, per_thread = 4, 5_000
    lim = permits.ConcurrencyLimiter(limit)
    held = [0]
    peak = [0]
    guard = threading.Lock()
    granted = [0] * THREADS

    def work(i: int) -> None:
        for _ in range(per_thread):
            with lim.acquire() as lease:
                if lease:
                    with guard:
                        held[0] += 1
                        peak[0] = max(peak[0], held[0])
                    granted[i] += 1
                    with guard:
                        held[0] -= 1

    together(work)
    assert peak[0] <= limit
    assert lim.available_permits() == limit
    s = lim.statistics()
    assert s.total_successful_leases == sum(granted)
    assert s.total_successful_leases + s.total_failed_leases == THREADS * per_thread


def test_threads_on_one_key_grant_exactly_its_limit():
    clock = permits.ManualClock()
    limit = 1_000
    keyed = PartitionedLimiter.per_key(Partition.token_bucket(None, limit, limit, 60.0), clock=clock)
    granted = [0] * THREADS

    def work(i: int) -> None:
        for _ in range(limit):  # THREADS x limit attempts on a frozen clock: exactly `limit` granted
            if keyed.acquire("one-key"):
                granted[i] += 1

    together(work)
    assert sum(granted) == limit


def test_threads_on_their_own_keys_of_one_concurrency_table_lose_nothing():
    limit, per_thread = 2, 3_000
    keyed = PartitionedLimiter.per_key(Partition.concurrency(None, limit))

    def work(i: int) -> None:
        for j in range(per_thread):
            key = (i, j % 5)  # a few keys each, made and used again
            first = keyed.acquire(key)
            second = keyed.acquire(key)
            assert first and second
            assert not keyed.acquire(key)  # the key's limit holds while both are held
            second.release()
            first.release()

    together(work)
    for i in range(THREADS):
        for k in range(5):
            s = keyed.statistics((i, k))
            assert s is not None and s.current_available_permits == limit


def test_threads_on_one_chain_grant_exactly_its_tightest_limit():
    clock = permits.ManualClock()
    window = permits.FixedWindowLimiter(500, 60.0, clock=clock)
    concurrency = permits.ConcurrencyLimiter(1_000)
    chained = permits.chain(concurrency, window)
    kept: list[list[permits.Lease]] = [[] for _ in range(THREADS)]

    def work(i: int) -> None:
        for _ in range(200):
            lease = chained.acquire()
            if lease:
                kept[i].append(lease)

    together(work)
    # The window allows 500; the chain's refused attempts gave the concurrency permit back (a
    # refund through the lease registry, from every thread).
    assert sum(map(len, kept)) == 500
    assert concurrency.available_permits() == 1_000 - 500
    for leases in kept:
        for lease in leases:
            lease.release()
    assert concurrency.available_permits() == 1_000


def test_refunds_find_their_limiter_while_other_threads_register_new_ones():
    # A time-based lease refunds through a registry of limiters by id (it does not own its
    # limiter); new limiters register in it, and it is swept as it grows. Both from every thread.
    clock = permits.ManualClock()

    def work(i: int) -> None:
        for _ in range(300):
            bucket = permits.TokenBucketLimiter(2, 2, 60.0, clock=clock)
            refusing = permits.ConcurrencyLimiter(1)
            hold = refusing.acquire()
            assert not permits.chain(bucket, refusing).acquire()  # the bucket's permit is refunded
            assert bucket.available_permits() == 2
            hold.release()

    together(work)


def test_threads_each_running_asyncio_wait_on_one_limiter():
    limit, per_thread = 3, 300
    lim = permits.ConcurrencyLimiter(limit, queue_limit=10_000)
    held = [0]
    peak = [0]
    guard = threading.Lock()

    async def one() -> None:
        async with lim.wait_async() as lease:
            assert lease
            with guard:
                held[0] += 1
                peak[0] = max(peak[0], held[0])
            await asyncio.sleep(0)
            with guard:
                held[0] -= 1

    async def many() -> None:
        await asyncio.gather(*(one() for _ in range(per_thread)))

    together(lambda _i: asyncio.run(many()), n=4)
    assert peak[0] <= limit
    assert lim.available_permits() == limit
    assert lim.statistics().total_successful_leases == 4 * per_thread


def test_forgotten_leases_dropped_on_many_threads_all_come_back(caplog):
    limit = THREADS * 50
    lim = permits.ConcurrencyLimiter(limit)

    def work(_i: int) -> None:
        for _ in range(50):
            lease = lim.acquire()
            assert lease
            del lease  # never released: given back when collected, with a warning logged

    with caplog.at_level(logging.WARNING, logger="permits"), pytest.warns(ResourceWarning):
        together(work)
        gc.collect()
    assert lim.available_permits() == limit
    assert sum("without release()" in r.getMessage() for r in caplog.records) == limit


def test_threads_instrumenting_at_once_share_one_set_of_metrics():
    prometheus_client = need("prometheus_client")
    from permits.metrics import instrument

    for _ in range(20):
        registry = prometheus_client.CollectorRegistry()
        limiters = [permits.TokenBucketLimiter(100, 100, 1.0, name=f"lim-{i}") for i in range(THREADS)]
        instrumented: list[permits.RateLimiter] = [limiters[0]] * THREADS

        def work(i: int, registry=registry, limiters=limiters, instrumented=instrumented) -> None:
            instrumented[i] = instrument(limiters[i], registry=registry)  # one registration of the metrics
            assert instrumented[i].acquire()

        together(work)
        granted = [
            registry.get_sample_value("permits_leases_total", {"limiter": f"lim-{i}", "result": "acquired"})
            for i in range(THREADS)
        ]
        assert granted == [1.0] * THREADS


def test_threads_counting_in_one_meter_while_it_is_read_lose_nothing():
    # Stamped leases end in the meter from every thread while new results take their slots and a
    # reader collects: each count exact once the threads are done.
    prometheus_client = need("prometheus_client")
    from permits.metrics import instrument

    registry = prometheus_client.CollectorRegistry()
    limiter = instrument(permits.ConcurrencyLimiter(THREADS, name="metered"), registry=registry)
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            registry.get_sample_value("permits_active_leases", {"limiter": "metered"})

    reader = threading.Thread(target=read)
    reader.start()
    try:

        def work(i: int) -> None:
            meter = limiter._observer.stamp.__self__  # (the meter's own: a result per thread)
            for n in range(2000):
                with limiter.acquire() as lease:
                    assert lease
                if n % 100 == 0:
                    meter.count(f"thread-{i}")

        together(work)
    finally:
        stop.set()
        reader.join(10)

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"limiter": "metered", **labels})

    assert sample("permits_leases_total", result="acquired") == THREADS * 2000
    assert sample("permits_active_leases") == 0
    assert sample("permits_lease_duration_seconds_count") == THREADS * 2000
    assert [sample("permits_leases_total", result=f"thread-{i}") for i in range(THREADS)] == [20.0] * THREADS


def test_threads_ending_leases_while_opentelemetry_collects_record_each_duration_once():
    # Each release holds its duration in the meter while a reader collects, taking them out from
    # under the releasing threads: every duration recorded once, none lost, once the threads are done.
    need("opentelemetry.sdk.metrics")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from permits.metrics import instrument

    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("ft")
    limiter = instrument(permits.ConcurrencyLimiter(THREADS, name="otel-ft"), meter=meter)
    stop = threading.Event()

    def collect() -> None:
        while not stop.is_set():
            reader.collect()

    collector = threading.Thread(target=collect)
    collector.start()
    try:

        def work(i: int) -> None:
            for _ in range(1000):
                with limiter.acquire() as lease:
                    assert lease

        together(work)
    finally:
        stop.set()
        collector.join(30)
    points = [
        point
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == "permits.lease.duration"
        for point in metric.data.data_points
    ]
    assert [point.count for point in points] == [THREADS * 1000]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="shared memory is Linux only")
def test_threads_on_one_shared_memory_limiter_and_key_lose_nothing():
    from permits.shm import SharedMemoryStore

    clock = permits.ManualClock()
    store = SharedMemoryStore(f"test-ft-{os.getpid()}", clock=clock)
    try:
        window = store.fixed_window("window", permit_limit=700, window=60.0)
        slots = store.concurrency("slots", permit_limit=3)
        per_key = store.partitioned(Partition.token_bucket(None, 300, 300, 60.0), name="per-key")
        granted = [0] * THREADS
        keyed = [0] * THREADS

        def work(i: int) -> None:
            for _ in range(200):
                if window.acquire():
                    granted[i] += 1
                if per_key.acquire("one-key"):
                    keyed[i] += 1
                with slots.acquire() as lease:
                    assert lease or lease.reason == "limit_reached"

        together(work)
        assert sum(granted) == 700
        assert sum(keyed) == 300
        assert slots.available_permits() == 3
        assert window.statistics().total_successful_leases == 700
    finally:
        store.close()
        store.unlink()


def test_threads_through_one_wsgi_middleware_hold_exactly_its_limit():
    """The WSGI middleware's C path (permits.wsgi): each request holds its lease until its response
    is closed, and one response closed by several threads at once gives its lease back once."""
    from permits.wsgi import RateLimitMiddleware

    limit, rounds = 3, 300
    limiter = PartitionedLimiter.per_key(permits.specs.Concurrency(limit))

    def hello(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    middleware = RateLimitMiddleware(hello, limiter)
    assert middleware.gate._fast is not None
    statuses: list[str] = []

    def start_response(status, headers, exc_info=None):
        statuses.append(status)

    def environ():
        return {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "203.0.113.7"}

    for _ in range(rounds):
        held = [middleware(environ(), start_response) for _ in range(limit)]
        assert middleware(environ(), start_response) == [b"Too Many Requests (limiter: default)"]
        # Every thread closes every response: each lease must come back once, or the limit grows.
        together(lambda _i, held=held: [response.close() for response in held], n=4)
        assert limiter.available_permits("203.0.113.7") == limit
    assert statuses == (["200 OK"] * limit + ["429 Too Many Requests"]) * rounds

    def requests(_i):
        for _ in range(200):
            response = middleware(environ(), start_response)
            for _chunk in response:
                pass
            if hasattr(response, "close"):  # (a rejection is a plain list)
                response.close()

    statuses.clear()
    together(requests)
    assert limiter.available_permits("203.0.113.7") == limit  # nothing kept, nothing lost
    assert statuses.count("200 OK") + statuses.count("429 Too Many Requests") == THREADS * 200


def test_threads_each_running_asyncio_through_one_asgi_middleware_hold_its_limit():
    """The ASGI middleware's C path (permits.asgi, its requests the extension's awaitables): threads
    each running their own event loop through one middleware grant exactly its window, and one
    request sent to by several threads at once finishes once (the others get a coroutine's errors) and
    gives its lease back once."""
    from permits.asgi import RateLimitMiddleware

    clock = permits.ManualClock()
    limiter = PartitionedLimiter.per_key(permits.specs.FixedWindow(500, 60), clock=clock)
    holding = PartitionedLimiter.per_key(permits.specs.Concurrency(1))

    async def hello(scope, receive, send):
        await asyncio.sleep(0)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    middleware = RateLimitMiddleware(hello, limiter)
    assert middleware._enter is not middleware._call
    statuses: list[int] = []

    def scope():
        return {"type": "http", "path": "/", "headers": [], "client": ("203.0.113.7", 1)}

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def requests():
        for _ in range(100):
            await middleware(scope(), receive, send)

    together(lambda _i: asyncio.run(requests()))
    assert sorted(set(statuses)) == [200, 429]
    assert statuses.count(200) == 500 and len(statuses) == THREADS * 100

    # (started here, so that the objects it makes are made and freed on this thread: the interpreter's
    # own hand-over of an object between threads is out of ThreadSanitizer's sight)
    one = RateLimitMiddleware(hello, holding)
    for _ in range(200):
        request = one(scope(), receive, send)
        request.send(None)  # (the application's first await)
        outcomes: list[str] = []

        def poke(_i, request=request, outcomes=outcomes):
            try:
                request.send(None)
                outcomes.append("stepped")
            except StopIteration:
                outcomes.append("done")
            except (ValueError, RuntimeError) as exc:
                outcomes.append(type(exc).__name__)

        together(poke, n=4)
        assert outcomes.count("done") == 1 and len(outcomes) == 4, outcomes
        assert holding.available_permits("203.0.113.7") == 1
