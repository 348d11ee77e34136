"""Blocking ``wait(permit_count=1, timeout=None)``.

The waiter runs in a thread; the test thread drives the ManualClock (or releases leases) and
joins with a wall-clock safety timeout. ``timeout`` is measured on the limiter's clock.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

import permits

from _support import NEWEST, OLDEST, start_waiter, stats


def test_wait_returns_at_once_when_permits_are_available(clock):
    lim = permits.TokenBucketLimiter(2, 1, 1.0, clock=clock)
    lease = lim.wait()
    assert lease.acquired
    assert lease.permit_count == 1
    lease2 = lim.wait(1, timeout=0)
    assert lease2.acquired


def test_wait_blocks_until_the_clock_replenishes(clock):
    lim = permits.TokenBucketLimiter(1, 1, 10.0, clock=clock, queue_limit=1)
    assert lim.acquire().acquired
    waiter = start_waiter(lim, queued_after=1)
    clock.advance(9.999)
    assert not waiter.done.is_set()
    clock.advance(0.001)
    lease = waiter.outcome()
    assert lease.acquired
    assert stats(lim) == (0, 0, 2, 0)


def test_wait_blocks_until_a_concurrency_lease_is_released():
    lim = permits.ConcurrencyLimiter(1, queue_limit=1)
    held = lim.acquire()
    waiter = start_waiter(lim, queued_after=1)
    held.release()
    lease = waiter.outcome()
    assert lease.acquired
    assert lim.available_permits() == 0
    lease.release()
    assert lim.available_permits() == 1


def test_wait_releases_the_gil_while_blocked(clock):
    # While a thread is blocked in wait(), other Python threads keep running.
    lim = permits.ConcurrencyLimiter(1, queue_limit=1, clock=clock)
    held = lim.acquire()
    waiter = start_waiter(lim, queued_after=1)
    counter = 0
    done = threading.Event()

    def spin():
        nonlocal counter
        for _ in range(20000):
            counter += 1
        done.set()

    t = threading.Thread(target=spin)
    t.start()
    assert done.wait(5)
    t.join(5)
    assert counter == 20000
    assert not waiter.done.is_set()
    held.release()
    assert waiter.outcome().acquired


def test_wait_with_timeout_expires_on_the_limiter_clock(clock):
    lim = permits.FixedWindowLimiter(1, 100.0, clock=clock, queue_limit=1)
    assert lim.acquire().acquired
    waiter = start_waiter(lim, timeout=5.0, queued_after=1)
    clock.advance(4.999)
    assert not waiter.done.is_set()
    assert lim.statistics().current_queued_count == 1
    clock.advance(0.002)
    lease = waiter.outcome()
    assert not lease.acquired
    assert lease.reason == "timeout"
    assert lease.permit_count == 1
    assert lease.retry_after is None
    assert lease.metadata["reason"] == "timeout"
    # Left the queue; a timeout is not a failed lease (like a cancellation).
    assert stats(lim) == (0, 0, 1, 0)


def test_wait_with_timeout_succeeds_when_granted_in_time(clock):
    lim = permits.TokenBucketLimiter(1, 1, 3.0, clock=clock, queue_limit=1)
    assert lim.acquire().acquired
    waiter = start_waiter(lim, timeout=5.0, queued_after=1)
    clock.advance(3.0)
    lease = waiter.outcome()
    assert lease.acquired
    assert lease.reason is None
    clock.advance(10.0)  # the expired deadline of a served request does nothing
    assert lim.available_permits() == 1


def test_wait_timeout_zero_does_not_wait(clock):
    lim = permits.ConcurrencyLimiter(1, queue_limit=5, clock=clock)
    held = lim.acquire()
    lease = start_waiter(lim, timeout=0).outcome()
    assert not lease.acquired
    assert lease.reason in ("timeout", "limit_reached")
    assert lim.statistics().current_queued_count == 0
    held.release()
    assert lim.wait(1, timeout=0).acquired


def test_timed_out_waiter_frees_its_queue_room(clock):
    lim = permits.TokenBucketLimiter(1, 1, 100.0, clock=clock, queue_limit=1)
    assert lim.acquire().acquired
    first = start_waiter(lim, timeout=1.0, queued_after=1)
    clock.advance(1.5)
    assert first.outcome().reason == "timeout"
    second = start_waiter(lim, queued_after=1)
    clock.advance(98.5)  # t=100
    assert second.outcome().acquired


def test_timed_out_head_lets_the_next_request_through(clock):
    # Head-of-line blocking ends when the head leaves the queue by timing out.
    lim = permits.TokenBucketLimiter(2, 1, 10.0, clock=clock, queue_limit=3, queue_order=OLDEST)
    assert lim.acquire(2).acquired
    big = start_waiter(lim, 2, timeout=15.0, queued_after=2)
    small = start_waiter(lim, 1, queued_after=3)
    clock.advance(10.0)  # 1 token: the head needs 2
    assert not small.done.is_set()
    clock.advance(6.0)  # t=16: the head times out, the small request takes the token
    assert big.outcome().reason == "timeout"
    assert small.outcome().acquired


def test_wait_queue_full_returns_a_failed_lease(clock):
    lim = permits.FixedWindowLimiter(1, 10.0, clock=clock, queue_limit=1)
    assert lim.acquire().acquired
    queued = start_waiter(lim, queued_after=1)
    rejected = start_waiter(lim).outcome()
    assert not rejected.acquired
    assert rejected.reason == "queue_full"
    assert rejected.retry_after == pytest.approx(20.0)
    clock.advance(10.0)
    assert queued.outcome().acquired


def test_wait_newest_first_eviction(clock):
    lim = permits.FixedWindowLimiter(1, 10.0, clock=clock, queue_limit=1, queue_order=NEWEST)
    assert lim.acquire().acquired
    old = start_waiter(lim, queued_after=1)
    new = start_waiter(lim)
    evicted = old.outcome()
    assert evicted.reason == "evicted"
    clock.advance(10.0)
    assert new.outcome().acquired


def test_close_wakes_blocked_waiters(clock):
    lim = permits.SlidingWindowLimiter(1, 10.0, 2, clock=clock, queue_limit=2)
    assert lim.acquire().acquired
    a = start_waiter(lim, queued_after=1)
    b = start_waiter(lim, queued_after=2)
    lim.close()
    for w in (a, b):
        lease = w.outcome()
        assert not lease.acquired
        assert lease.reason == "closed"
    with pytest.raises(permits.LimiterClosedError):
        lim.wait()


def test_wait_zero_permits_waits_for_availability(clock):
    lim = permits.TokenBucketLimiter(1, 1, 10.0, clock=clock)  # queue_limit 0
    assert lim.acquire().acquired
    waiter = start_waiter(lim, 0)
    # A zero-permit waiter holds no queue room, so only its thread shows it waits.
    assert not waiter.done.wait(0.05)
    assert lim.statistics().current_queued_count == 0
    clock.advance(10.0)
    lease = waiter.outcome()
    assert lease.acquired
    assert lease.permit_count == 0
    assert lim.available_permits() == 1


def test_waiters_are_served_in_fifo_order(clock):
    lim = permits.TokenBucketLimiter(1, 1, 1.0, clock=clock, queue_limit=3)
    assert lim.acquire().acquired
    waiters = [start_waiter(lim, queued_after=i + 1) for i in range(3)]
    for i, w in enumerate(waiters):
        clock.advance(1.0)
        assert w.outcome().acquired
        for later in waiters[i + 1 :]:
            assert not later.done.is_set()


def test_waiters_are_served_in_lifo_order_newest_first(clock):
    lim = permits.TokenBucketLimiter(1, 1, 1.0, clock=clock, queue_limit=3, queue_order=NEWEST)
    assert lim.acquire().acquired
    waiters = [start_waiter(lim, queued_after=i + 1) for i in range(3)]
    for i, w in enumerate(reversed(waiters)):
        clock.advance(1.0)
        assert w.outcome().acquired
        for earlier in waiters[: 2 - i]:
            assert not earlier.done.is_set()


def test_wait_on_manual_mode_limiter_is_served_by_try_replenish(clock):
    lim = permits.FixedWindowLimiter(1, 1.0, clock=clock, queue_limit=1, auto_replenishment=False)
    assert lim.acquire().acquired
    waiter = start_waiter(lim, queued_after=1)
    clock.advance(5.0)
    assert not waiter.done.is_set()
    assert lim.try_replenish() is True
    assert waiter.outcome().acquired


def test_timeout_is_in_seconds_or_timedelta(clock):
    lim = permits.ConcurrencyLimiter(1, queue_limit=2, clock=clock)
    held = lim.acquire()
    a = start_waiter(lim, timeout=0.25, queued_after=1)
    b = start_waiter(lim, timeout=timedelta(milliseconds=500), queued_after=2)
    clock.advance(0.3)
    assert a.outcome().reason == "timeout"
    assert not b.done.is_set()
    clock.advance(0.25)
    assert b.outcome().reason == "timeout"
    held.release()


def test_zero_permit_wait_can_time_out(clock):
    lim = permits.TokenBucketLimiter(1, 1, 10.0, clock=clock)
    assert lim.acquire().acquired
    waiter = start_waiter(lim, 0, timeout=1.0)
    assert not waiter.done.wait(0.05)
    clock.advance(1.5)
    lease = waiter.outcome()
    assert not lease.acquired
    assert lease.reason == "timeout"
    assert lease.permit_count == 0


def test_one_advance_serves_waiters_of_several_limiters(clock):
    a = permits.TokenBucketLimiter(1, 1, 2.0, clock=clock, queue_limit=1)
    b = permits.SlidingWindowLimiter(1, 3.0, 3, clock=clock, queue_limit=1)
    assert a.acquire().acquired and b.acquire().acquired
    wa = start_waiter(a, queued_after=1)
    wb = start_waiter(b, queued_after=1)
    clock.advance(3.0)
    assert wa.outcome().acquired
    assert wb.outcome().acquired


def test_timeout_expires_in_manual_mode_without_try_replenish(clock):
    # Manual mode freezes the limiter's state, not the timeout, which runs on the clock.
    lim = permits.TokenBucketLimiter(1, 1, 1.0, clock=clock, queue_limit=1, auto_replenishment=False)
    assert lim.acquire().acquired
    waiter = start_waiter(lim, timeout=2.0, queued_after=1)
    clock.advance(2.5)
    lease = waiter.outcome()
    assert lease.reason == "timeout"
    assert lim.available_permits() == 0
    assert lim.try_replenish() is True
    assert lim.available_permits() == 1
