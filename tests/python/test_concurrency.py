"""ConcurrencyLimiter: docs/design.md: Concurrency, Statistics, Idleness (after .NET's ConcurrencyLimiter tests)."""

from __future__ import annotations

import threading

import pytest

import permits

from _support import NEWEST, OLDEST, enqueue, result, settle, stats


def test_acquire_and_release_return_exactly_the_lease_permits():
    lim = permits.ConcurrencyLimiter(5)
    a = lim.acquire(2)
    b = lim.acquire(3)
    assert a.acquired and b.acquired
    assert a.permit_count == 2 and b.permit_count == 3
    assert lim.available_permits() == 0
    a.release()
    assert lim.available_permits() == 2
    a.release()  # idempotent
    assert lim.available_permits() == 2
    b.release()
    assert lim.available_permits() == 5


def test_lease_as_context_manager_releases():
    lim = permits.ConcurrencyLimiter(1)
    with lim.acquire() as lease:
        assert lease.acquired
        assert lim.available_permits() == 0
    assert lim.available_permits() == 1
    lease.release()  # already released: no-op
    assert lim.available_permits() == 1


def test_failed_and_zero_permit_leases_hold_nothing():
    lim = permits.ConcurrencyLimiter(1)
    zero = lim.acquire(0)
    assert zero.acquired
    zero.release()
    held = lim.acquire()
    failed = lim.acquire()
    failed.release()
    assert lim.available_permits() == 0
    held.release()
    assert lim.available_permits() == 1


def test_failed_acquire_has_reason_but_no_retry_after():
    lim = permits.ConcurrencyLimiter(1)
    _held = lim.acquire()
    failed = lim.acquire()
    assert failed.reason == "limit_reached"
    assert failed.retry_after is None
    assert dict(failed.metadata) == {"reason": "limit_reached", "limiter": "default"}


async def test_reason_metadata_on_failed_wait_async():
    lim = permits.ConcurrencyLimiter(1, queue_limit=1)
    _held = lim.acquire()
    _waiting = await enqueue(lim)
    failed = await result(lim.wait_async())
    assert not failed.acquired
    assert failed.reason == "queue_full"
    assert failed.metadata["reason"] == "queue_full"
    assert failed.retry_after is None
    assert "retry_after" not in failed.metadata


async def test_get_statistics_has_correct_values_worked_example():
    # docs/design.md, Statistics, step by step.
    lim = permits.ConcurrencyLimiter(100, queue_limit=50, queue_order=OLDEST)
    lease = lim.acquire(60)
    assert stats(lim) == (40, 0, 1, 0)
    queued = await enqueue(lim, 50)
    assert stats(lim) == (40, 50, 1, 0)
    assert (await result(lim.wait_async(1))).reason == "queue_full"
    assert stats(lim) == (40, 50, 1, 1)
    assert not lim.acquire(100).acquired
    assert stats(lim) == (40, 50, 1, 2)
    lease.release()
    assert (await result(queued)).acquired
    assert stats(lim) == (50, 0, 2, 2)


async def test_release_serves_queue_head_of_line():
    # A large request at the head blocks smaller ones behind it (OLDEST_FIRST).
    lim = permits.ConcurrencyLimiter(3, queue_limit=5, queue_order=OLDEST)
    a = lim.acquire(2)
    b = lim.acquire(1)
    big = await enqueue(lim, 3)
    small = await enqueue(lim, 1)
    b.release()  # 1 available, but the head needs 3
    await settle()
    assert not big.done() and not small.done()
    assert lim.available_permits() == 1
    a.release()
    big_lease = await result(big)
    assert big_lease.acquired
    await settle()
    assert not small.done()
    big_lease.release()
    assert (await result(small)).acquired


async def test_newest_first_head_of_line_blocking():
    lim = permits.ConcurrencyLimiter(3, queue_limit=5, queue_order=NEWEST)
    held = lim.acquire(3)
    small = await enqueue(lim, 1)
    big = await enqueue(lim, 3)  # newest: served first, blocks the older small one
    held.release()
    big_lease = await result(big)
    assert big_lease.acquired
    await settle()
    assert not small.done()
    big_lease.release()
    assert (await result(small)).acquired


def test_release_after_close_is_a_silent_no_op():
    lim = permits.ConcurrencyLimiter(2)
    lease = lim.acquire(2)
    lim.close()
    lease.release()
    with pytest.raises(permits.LimiterClosedError):
        lim.acquire()


def test_release_from_another_thread():
    lim = permits.ConcurrencyLimiter(1)
    lease = lim.acquire()
    t = threading.Thread(target=lease.release)
    t.start()
    t.join(5)
    assert lim.available_permits() == 1


def test_idle_duration_follows_the_clock(clock):
    lim = permits.ConcurrencyLimiter(2, clock=clock)
    clock.advance(2.0)
    assert lim.idle_duration == pytest.approx(2.0)
    a = lim.acquire()
    b = lim.acquire()
    a.release()
    assert lim.idle_duration is None  # one still held
    clock.advance(1.0)
    b.release()
    assert lim.idle_duration == pytest.approx(0.0)
    clock.advance(1.5)
    assert lim.idle_duration == pytest.approx(1.5)


def test_concurrency_permits_do_not_come_back_with_time(clock):
    lim = permits.ConcurrencyLimiter(1, clock=clock)
    lease = lim.acquire()
    clock.advance(3600.0)
    assert lim.available_permits() == 0
    assert not lim.acquire().acquired
    lease.release()
    assert lim.acquire().acquired


async def test_wait_async_lease_released_by_context_manager():
    lim = permits.ConcurrencyLimiter(1, queue_limit=1)
    async with lim.wait_async() as lease:
        assert lease.acquired
        assert lim.available_permits() == 0
    assert lim.available_permits() == 1


def test_default_clock_works_without_manual_clock():
    lim = permits.ConcurrencyLimiter(1)
    assert lim.idle_duration is not None
    assert lim.idle_duration >= 0.0
    lease = lim.acquire()
    assert lim.idle_duration is None
    lease.release()
    assert lim.idle_duration is not None
