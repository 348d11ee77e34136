"""Several threads hammering one limiter: the limit holds exactly and the totals add up."""

from __future__ import annotations

import threading
import time

import pytest

import permits

import _support
from _support import SAFETY, TIMED_KINDS, LimiterKit, stats, wait_until

THREADS = 8


def run_threads(target, n=THREADS):
    _support.run_threads(target, n)


def test_concurrency_limiter_never_exceeds_its_limit():
    limit, per_thread = 4, 3000
    lim = permits.ConcurrencyLimiter(limit)
    guard = threading.Lock()
    holders = 0
    peak = 0
    ok = [0] * THREADS
    failed = [0] * THREADS

    def work(i):
        nonlocal holders, peak
        for _ in range(per_thread):
            lease = lim.acquire()
            if lease.acquired:
                with guard:
                    holders += 1
                    peak = max(peak, holders)
                    assert holders <= limit
                with guard:
                    holders -= 1
                lease.release()
                ok[i] += 1
            else:
                failed[i] += 1

    run_threads(work)
    assert peak <= limit
    assert sum(ok) + sum(failed) == THREADS * per_thread
    assert stats(lim) == (limit, 0, sum(ok), sum(failed))


def test_concurrency_limiter_multi_permit_requests_never_exceed_the_limit():
    limit, per_thread = 10, 2000
    lim = permits.ConcurrencyLimiter(limit)
    guard = threading.Lock()
    held = 0
    counts = {"ok": 0, "failed": 0}

    def work(i):
        nonlocal held
        for j in range(per_thread):
            n = 1 + (i + j) % 4
            lease = lim.acquire(n)
            with guard:
                if lease.acquired:
                    held += n
                    assert held <= limit
                    counts["ok"] += 1
                else:
                    counts["failed"] += 1
            if lease.acquired:
                with guard:
                    held -= n
                lease.release()

    run_threads(work)
    assert counts["ok"] + counts["failed"] == THREADS * per_thread
    assert stats(lim) == (limit, 0, counts["ok"], counts["failed"])


@pytest.mark.parametrize("kind", TIMED_KINDS)
def test_time_based_limiter_with_a_frozen_clock_grants_exactly_its_limit(kind):
    clock = permits.ManualClock()
    limit, per_thread = 1000, 400
    lim = LimiterKit(kind, clock).make(limit)
    ok = [0] * THREADS
    failed = [0] * THREADS

    def work(i):
        for _ in range(per_thread):
            if lim.acquire().acquired:
                ok[i] += 1
            else:
                failed[i] += 1

    run_threads(work)
    assert sum(ok) == limit
    assert sum(failed) == THREADS * per_thread - limit
    assert stats(lim) == (0, 0, limit, THREADS * per_thread - limit)


def test_token_bucket_frozen_clock_multi_permit_never_overgrants():
    clock = permits.ManualClock()
    limit = 997
    lim = permits.TokenBucketLimiter(limit, 1, 1.0, clock=clock)
    granted = [0] * THREADS

    def work(i):
        for j in range(300):
            n = 1 + (i * 7 + j) % 5
            if lim.acquire(n).acquired:
                granted[i] += n

    run_threads(work)
    assert sum(granted) <= limit
    # Single permits always fit the remainder, so the bucket is drained to below 5 tokens.
    assert lim.available_permits() == limit - sum(granted)
    assert lim.available_permits() < 5


def test_token_bucket_threads_with_clock_advancing():
    # Worker threads acquire while another thread advances time: total grants never exceed
    # the initial burst plus what the elapsed periods allow.
    clock = permits.ManualClock()
    limit, periods = 50, 200
    lim = permits.TokenBucketLimiter(limit, 5, 1.0, clock=clock)
    granted = [0] * THREADS
    stop = threading.Event()

    def work(i):
        if i == 0:
            for _ in range(periods):
                clock.advance(1.0)
            stop.set()
            return
        while not stop.is_set():
            if lim.acquire().acquired:
                granted[i] += 1
        while lim.acquire().acquired:
            granted[i] += 1

    run_threads(work)
    assert sum(granted) <= limit + 5 * periods
    assert lim.available_permits() == 0


def test_blocking_waiters_on_a_concurrency_limiter_all_complete():
    limit, workers, rounds = 3, 8, 200
    lim = permits.ConcurrencyLimiter(limit, queue_limit=workers)
    guard = threading.Lock()
    holders = 0
    peak = 0

    def work(i):
        nonlocal holders, peak
        for _ in range(rounds):
            lease = lim.wait()
            assert lease.acquired, lease.reason
            with guard:
                holders += 1
                peak = max(peak, holders)
            with guard:
                holders -= 1
            lease.release()

    run_threads(work, workers)
    assert peak <= limit
    assert stats(lim) == (limit, 0, workers * rounds, 0)


def test_blocking_waiters_and_time_based_limiter():
    clock = permits.ManualClock()
    workers, rounds = 6, 50
    lim = permits.TokenBucketLimiter(2, 2, 1.0, clock=clock, queue_limit=2 * workers)
    got = [0] * workers

    def work(i):
        for _ in range(rounds):
            lease = lim.wait(timeout=None)
            assert lease.acquired, lease.reason
            got[i] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    # Drive time until everybody is served; the wall-clock deadline is only a safety net.
    deadline = time.monotonic() + 30
    while any(t.is_alive() for t in threads):
        assert time.monotonic() < deadline, "waiters were not all served"
        clock.advance(1.0)
        time.sleep(0.0002)
    assert sum(got) == workers * rounds
    s = lim.statistics()
    assert s.total_successful_leases == workers * rounds
    assert s.total_failed_leases == 0


def test_concurrent_close_completes_all_waiters():
    lim = permits.ConcurrencyLimiter(1, queue_limit=100)
    held = lim.acquire()
    results: list[permits.Lease] = []
    guard = threading.Lock()

    def work():
        lease = lim.wait()
        with guard:
            results.append(lease)

    threads = [threading.Thread(target=work) for _ in range(20)]
    for t in threads:
        t.start()
    wait_until(lambda: lim.statistics().current_queued_count == 20)
    lim.close()
    for t in threads:
        t.join(SAFETY)
        assert not t.is_alive()
    assert len(results) == 20
    assert all(r.reason == "closed" for r in results)
    held.release()


def test_close_racing_with_acquire_and_release():
    # Closing while threads acquire and release: no crash, no hang; every call either
    # completes normally or raises LimiterClosedError.
    lim = permits.ConcurrencyLimiter(4, queue_limit=50)
    barrier = threading.Barrier(THREADS + 1)
    unexpected: list[BaseException] = []

    def work(i):
        barrier.wait(SAFETY)
        for j in range(2000):
            try:
                lease = lim.wait(timeout=0) if j % 3 == 0 else lim.acquire()
            except permits.LimiterClosedError:
                return
            except BaseException as exc:
                unexpected.append(exc)
                return
            lease.release()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    barrier.wait(SAFETY)
    time.sleep(0.005)  # let the workers get going (wall clock, not limiter time)
    lim.close()
    for t in threads:
        t.join(SAFETY)
        assert not t.is_alive()
    assert not unexpected
    with pytest.raises(permits.LimiterClosedError):
        lim.acquire()


def test_async_waiters_cancelled_while_threads_release():
    import asyncio

    lim = permits.ConcurrencyLimiter(2, queue_limit=1000)

    async def scenario():
        holders = [lim.acquire() for _ in range(2)]
        tasks = [asyncio.ensure_future(lim.wait_async()) for _ in range(200)]
        for _ in range(10):
            await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        releaser = loop.run_in_executor(None, lambda: [h.release() for h in holders])
        for k, t in enumerate(tasks):
            if k % 2:
                t.cancel()
        granted = 0
        for t in tasks:
            try:
                lease = await asyncio.wait_for(t, 10)
            except asyncio.CancelledError:
                continue
            assert lease.acquired
            granted += 1
            lease.release()
        await releaser
        # Every waiter was either served or cancelled; nothing leaked.
        deadline = time.monotonic() + SAFETY
        while lim.available_permits() != 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        assert lim.available_permits() == 2
        assert lim.statistics().current_queued_count == 0
        assert granted >= 100

    asyncio.run(scenario())


def test_blocking_waiters_with_timeouts_and_a_ticking_clock():
    clock = permits.ManualClock()
    lim = permits.FixedWindowLimiter(3, 1.0, clock=clock, queue_limit=100)
    outcomes: list[str] = []
    guard = threading.Lock()
    per_thread = 40

    def work(i):
        for j in range(per_thread):
            lease = lim.wait(timeout=0.5 + (i + j) % 3)
            with guard:
                outcomes.append("ok" if lease.acquired else lease.reason)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while any(t.is_alive() for t in threads):
        assert time.monotonic() < deadline, "waiters hung"
        clock.advance(0.25)
        time.sleep(0.0002)
    assert len(outcomes) == THREADS * per_thread
    assert set(outcomes) <= {"ok", "timeout"}
    s = lim.statistics()
    assert s.total_successful_leases == outcomes.count("ok")
    assert s.total_failed_leases == 0  # timeouts are not failures
    assert s.current_queued_count == 0
