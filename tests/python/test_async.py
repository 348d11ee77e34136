"""asyncio: ``acquire_async``, ``wait_async`` (awaitable and async context manager), cancellation,
``aclose``. Requests are queued in the engine and resolved from its thread; after
``clock.advance`` the event loop resolves the awaitable shortly after.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

import permits

from _support import (
    NEWEST,
    OLDEST,
    SAFETY,
    cancel_and_wait,
    enqueue,
    result,
    settle,
    spawn,
    stats,
    until,
)


async def test_acquire_async_completes_at_once(clock):
    lim = permits.TokenBucketLimiter(1, 1, 10.0, clock=clock, queue_limit=5)
    ok = await result(lim.acquire_async())
    assert ok.acquired
    failed = await result(lim.acquire_async())
    assert not failed.acquired
    assert failed.reason == "limit_reached"
    assert failed.retry_after == pytest.approx(10.0)
    assert lim.statistics().current_queued_count == 0


async def test_wait_async_async_context_manager_releases_concurrency_lease():
    lim = permits.ConcurrencyLimiter(1, queue_limit=1)
    async with lim.wait_async() as lease:
        assert lease.acquired
        assert lim.available_permits() == 0
    assert lim.available_permits() == 1


async def test_wait_async_context_manager_releases_on_exception():
    lim = permits.ConcurrencyLimiter(2, queue_limit=1)
    with pytest.raises(KeyError):
        async with lim.wait_async(2) as lease:
            assert lease.acquired
            raise KeyError("boom")
    assert lim.available_permits() == 2


async def test_wait_async_context_manager_waits_in_the_queue(clock):
    lim = permits.FixedWindowLimiter(1, 10.0, clock=clock, queue_limit=1)
    assert lim.acquire().acquired
    entered = asyncio.Event()

    async def user():
        async with lim.wait_async() as lease:
            entered.set()
            return lease

    task = asyncio.ensure_future(user())
    await settle()
    assert not entered.is_set()
    assert lim.statistics().current_queued_count == 1
    clock.advance(10.0)
    lease = await result(task)
    assert lease.acquired


async def test_wait_async_context_manager_yields_failed_lease_without_raising(clock):
    lim = permits.FixedWindowLimiter(1, 10.0, clock=clock, queue_limit=0)
    assert lim.acquire().acquired
    async with lim.wait_async() as lease:
        assert not lease.acquired
        assert lease.reason == "queue_full"
        assert lease.retry_after == pytest.approx(10.0)


async def test_cancelling_removes_the_request_from_the_queue_at_once(clock):
    lim = permits.TokenBucketLimiter(1, 1, 10.0, clock=clock, queue_limit=3)
    assert lim.acquire().acquired
    tasks = [await enqueue(lim) for _ in range(3)]
    assert lim.statistics().current_queued_count == 3
    tasks[1].cancel()
    with pytest.raises(asyncio.CancelledError):
        await tasks[1]
    assert lim.statistics().current_queued_count == 2
    # The others keep their places.
    clock.advance(10.0)
    assert (await result(tasks[0])).acquired
    await settle()
    assert not tasks[2].done()
    clock.advance(10.0)
    assert (await result(tasks[2])).acquired
    assert stats(lim) == (0, 0, 3, 0)


async def test_wait_for_timeout_cancels_and_dequeues():
    lim = permits.ConcurrencyLimiter(1, queue_limit=1)
    held = lim.acquire()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(lim.wait_async(), timeout=0.01)
    assert lim.statistics().current_queued_count == 0
    assert lim.statistics().total_failed_leases == 0
    held.release()
    assert lim.available_permits() == 1


async def test_cancellation_racing_a_grant_does_not_leak_permits():
    # The release grants the queued request, but its task is cancelled before it resumes:
    # the permit must come back rather than be lost.
    lim = permits.ConcurrencyLimiter(1, queue_limit=1)
    held = lim.acquire()
    task = await enqueue(lim)
    held.release()  # granted in the engine, resolution pending on the loop
    task.cancel()
    try:
        lease = await asyncio.wait_for(task, SAFETY)
    except asyncio.CancelledError:
        await until(lambda: lim.available_permits() == 1)
    else:
        # If the task won the race it owns the lease.
        assert lease.acquired
        lease.release()
    assert lim.available_permits() == 1
    assert lim.statistics().current_queued_count == 0


async def test_many_cancellation_races_do_not_leak_permits():
    lim = permits.ConcurrencyLimiter(1, queue_limit=1)
    for _ in range(50):
        held = lim.acquire()
        assert held.acquired
        task = await enqueue(lim)
        held.release()
        task.cancel()
        try:
            lease = await asyncio.wait_for(task, SAFETY)
            lease.release()
        except asyncio.CancelledError:
            pass
        await until(lambda: lim.available_permits() == 1)


async def test_advance_from_another_thread_resolves_waiters(clock):
    lim = permits.TokenBucketLimiter(2, 2, 5.0, clock=clock, queue_limit=2)
    assert lim.acquire(2).acquired
    a = await enqueue(lim)
    b = await enqueue(lim)
    t = threading.Thread(target=clock.advance, args=(5.0,))
    t.start()
    t.join(SAFETY)
    assert (await result(a)).acquired
    assert (await result(b)).acquired


async def test_release_from_another_thread_resolves_waiter():
    lim = permits.ConcurrencyLimiter(1, queue_limit=1)
    held = lim.acquire()
    task = await enqueue(lim)
    await asyncio.get_running_loop().run_in_executor(None, held.release)
    lease = await result(task)
    assert lease.acquired


async def test_fifo_order_with_many_waiters(clock):
    lim = permits.FixedWindowLimiter(1, 1.0, clock=clock, queue_limit=10, queue_order=OLDEST)
    assert lim.acquire().acquired
    tasks = [await enqueue(lim) for _ in range(10)]
    order = []
    for i, t in enumerate(tasks):
        t.add_done_callback(lambda _t, i=i: order.append(i))
    for served in range(1, 11):
        clock.advance(1.0)
        await until(lambda served=served: len(order) == served)
    assert order == list(range(10))


async def test_lifo_order_with_many_waiters(clock):
    lim = permits.FixedWindowLimiter(1, 1.0, clock=clock, queue_limit=10, queue_order=NEWEST)
    assert lim.acquire().acquired
    tasks = [await enqueue(lim) for _ in range(10)]
    order = []
    for i, t in enumerate(tasks):
        t.add_done_callback(lambda _t, i=i: order.append(i))
    for served in range(1, 11):
        clock.advance(1.0)
        await until(lambda served=served: len(order) == served)
    assert order == list(reversed(range(10)))


async def test_aclose_completes_waiters_with_closed(clock):
    lim = permits.SlidingWindowCounterLimiter(1, 10.0, clock=clock, queue_limit=2)
    assert lim.acquire().acquired
    tasks = [await enqueue(lim) for _ in range(2)]
    await lim.aclose()
    for t in tasks:
        lease = await result(t)
        assert not lease.acquired
        assert lease.reason == "closed"
        assert lease.retry_after is None
    with pytest.raises(permits.LimiterClosedError):
        await lim.acquire_async()
    with pytest.raises(permits.LimiterClosedError):
        await lim.wait_async()


async def test_close_from_another_thread_completes_async_waiters():
    lim = permits.ConcurrencyLimiter(1, queue_limit=1)
    held = lim.acquire()
    task = await enqueue(lim)
    await asyncio.get_running_loop().run_in_executor(None, lim.close)
    lease = await result(task)
    assert lease.reason == "closed"
    held.release()


async def test_many_tasks_share_a_concurrency_limiter():
    lim = permits.ConcurrencyLimiter(3, queue_limit=1000)
    active = 0
    peak = 0

    async def worker():
        nonlocal active, peak
        async with lim.wait_async() as lease:
            assert lease.acquired
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0)
            active -= 1

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(300))), 30)
    assert peak <= 3
    assert stats(lim) == (3, 0, 300, 0)


async def test_wait_async_zero_permits_resolves_when_tokens_arrive(clock):
    lim = permits.TokenBucketLimiter(1, 1, 2.0, clock=clock)
    assert lim.acquire().acquired
    probe = spawn(lim.wait_async(0))
    await settle()
    assert not probe.done()
    clock.advance(2.0)
    lease = await result(probe)
    assert lease.acquired and lease.permit_count == 0
    assert lim.available_permits() == 1


async def test_cancelling_a_zero_permit_waiter(clock):
    lim = permits.TokenBucketLimiter(1, 1, 2.0, clock=clock)
    assert lim.acquire().acquired
    probe = await enqueue(lim, 0)
    await cancel_and_wait(probe)
    clock.advance(2.0)
    assert lim.available_permits() == 1
    assert stats(lim)[1:] == (0, 1, 0)
