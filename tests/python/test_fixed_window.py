"""FixedWindowLimiter: docs/design.md: Fixed window, Time, Replenishment, Retry-after.

Windows are anchored at construction and follow each other back to back; the count resets at
each boundary however late the first request after it arrives.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import permits

from _support import NEWEST, OLDEST, enqueue, result, stats


def window(clock, permit_limit, length, **kw):
    return permits.FixedWindowLimiter(permit_limit, length, clock=clock, **kw)


# --------------------------------------------------------------------------- retry_after


async def test_retry_metadata_on_failed_wait_async(clock):
    lim = window(clock, 2, 20.0, queue_limit=1)
    assert lim.acquire(2).acquired
    failed = await result(lim.wait_async(2))
    assert not failed.acquired
    assert failed.reason == "queue_full"
    assert failed.retry_after == pytest.approx(20.0)
    assert failed.metadata["retry_after"] == pytest.approx(20.0)


async def test_retry_after_is_the_time_to_the_next_boundary(clock):
    # The .NET <= 10 formula reports whole windows (dotnet/runtime#92557); permits reports the
    # time left in the current window.
    lim = window(clock, 2, 20.0, queue_limit=1)
    assert lim.acquire(2).acquired
    clock.advance(5.0)
    assert lim.acquire().retry_after == pytest.approx(15.0)
    failed = await result(lim.wait_async(2))
    assert failed.retry_after == pytest.approx(15.0)


async def test_correct_retry_metadata_with_queued_item(clock):
    lim = window(clock, 2, 20.0, queue_limit=1, queue_order=OLDEST)
    assert lim.acquire(2).acquired
    queued = await enqueue(lim, 1)
    failed = await result(lim.wait_async(2))
    assert failed.reason == "queue_full"
    # The next window serves the queued permit and leaves 1: this request needs the one after.
    assert failed.retry_after == pytest.approx(40.0)
    assert not queued.done()


async def test_retry_after_ignores_queued_permits_newest_first(clock):
    lim = window(clock, 2, 20.0, queue_limit=1, queue_order=NEWEST)
    assert lim.acquire(2).acquired
    await enqueue(lim, 1)
    failed = lim.acquire(2)
    assert failed.reason == "limit_reached"
    assert failed.retry_after == pytest.approx(20.0)


async def test_correct_retry_metadata_with_non_zero_available_items(clock):
    lim = window(clock, 3, 20.0, queue_limit=1)
    assert lim.acquire(2).acquired
    failed = await result(lim.wait_async(3))
    assert failed.retry_after == pytest.approx(20.0)
    clock.advance(7.0)
    assert lim.acquire(3).retry_after == pytest.approx(13.0)


def test_retry_after_on_zero_permit_failure(clock):
    lim = window(clock, 1, 10.0)
    assert lim.acquire().acquired
    clock.advance(4.0)
    zero = lim.acquire(0)
    assert not zero.acquired
    assert zero.retry_after == pytest.approx(6.0)


def test_retry_after_is_exact(clock):
    lim = window(clock, 3, 10.0)
    clock.advance(12.5)
    assert lim.acquire(3).acquired
    failed = lim.acquire(2)
    assert failed.retry_after == pytest.approx(7.5)
    clock.advance(7.5 - 0.001)
    assert not lim.acquire(2).acquired
    clock.advance(0.001)
    assert lim.acquire(2).acquired


# --------------------------------------------------------------------------- replenishment


def test_try_replenish_with_auto_replenish_returns_false(clock):
    lim = window(clock, 1, 1.0)
    assert lim.acquire().acquired
    assert lim.try_replenish() is False
    assert lim.available_permits() == 0


def test_auto_replenish_replenishes_counters(clock):
    lim = window(clock, 2, 1.0)
    assert lim.acquire(2).acquired
    assert not lim.acquire().acquired
    clock.advance(1.0)
    assert lim.available_permits() == 2
    assert lim.acquire(2).acquired


def test_manual_mode_reads_the_clock_only_in_try_replenish(clock):
    lim = window(clock, 2, 1.0, auto_replenishment=False)
    assert lim.acquire(2).acquired
    clock.advance(3.0)
    assert lim.available_permits() == 0
    assert not lim.acquire().acquired
    assert lim.try_replenish() is True
    assert lim.available_permits() == 2


def test_manual_mode_keeps_windows_anchored(clock):
    # .NET re-anchors manual windows to the replenish call; permits keeps the construction anchor.
    lim = window(clock, 1, 1.0, auto_replenishment=False)
    assert lim.acquire().acquired
    clock.advance(1.5)
    lim.try_replenish()
    assert lim.acquire().acquired  # window [1, 2)
    clock.advance(0.5)  # t=2.0: a boundary of the construction anchor
    lim.try_replenish()
    assert lim.acquire().acquired


def test_try_replenish_in_manual_mode_with_nothing_to_do_returns_true(clock):
    lim = window(clock, 1, 1.0, auto_replenishment=False)
    assert lim.try_replenish() is True
    assert lim.available_permits() == 1


def test_auto_replenish_ignores_timer_jitter_but_not_time(clock):
    lim = window(clock, 2, 1.0)
    assert lim.acquire(2).acquired
    clock.advance(1.0 - 0.001)
    assert lim.available_permits() == 0
    clock.advance(0.001)
    assert lim.available_permits() == 2


def test_windows_are_anchored_at_construction_and_reset_however_late():
    clock = permits.ManualClock(start=3.0)
    lim = window(clock, 2, 10.0)  # boundaries at 13, 23, 33, ...
    clock.advance(22.0)  # t=25, in window [23, 33)
    assert lim.acquire(2).acquired
    clock.advance(7.999)
    assert lim.available_permits() == 0
    clock.advance(0.001)  # t=33
    assert lim.available_permits() == 2


def test_count_resets_at_each_boundary_after_a_long_gap(clock):
    lim = window(clock, 5, 1.0)
    assert lim.acquire(5).acquired
    clock.advance(1000.25)
    assert lim.acquire(5).acquired
    clock.advance(0.75)
    assert lim.acquire(5).acquired


def test_boundary_burst_is_allowed_by_design(clock):
    # Fixed windows allow up to 2 x limit around a boundary (dotnet/runtime#101612).
    lim = window(clock, 3, 10.0)
    clock.advance(9.999)
    assert lim.acquire(3).acquired
    clock.advance(0.001)
    assert lim.acquire(3).acquired


def test_sub_millisecond_windows_work(clock):
    lim = window(clock, 1, 1e-6)
    for _ in range(5):
        assert lim.acquire().acquired
        assert not lim.acquire().acquired
        clock.advance(1e-6)


async def test_queued_requests_are_served_at_the_boundary(clock):
    lim = window(clock, 2, 10.0, queue_limit=3)
    assert lim.acquire(2).acquired
    first = await enqueue(lim, 2)
    second = await enqueue(lim, 1)
    clock.advance(9.999)
    assert not first.done()
    assert lim.statistics().current_queued_count == 3
    clock.advance(0.001)
    assert (await result(first)).acquired
    assert lim.statistics().current_queued_count == 1
    clock.advance(10.0)
    assert (await result(second)).acquired
    assert stats(lim) == (1, 0, 3, 0)


def test_timedelta_window(clock):
    lim = window(clock, 1, timedelta(seconds=2))
    assert lim.acquire().acquired
    assert lim.acquire().retry_after == pytest.approx(2.0)
    clock.advance(2.0)
    assert lim.acquire().acquired


def test_lease_release_gives_nothing_back(clock):
    lim = window(clock, 1, 10.0)
    lease = lim.acquire()
    lease.release()
    assert lim.available_permits() == 0


def test_idle_from_the_boundary(clock):
    lim = window(clock, 2, 10.0)
    clock.advance(4.0)
    lim.acquire()
    assert lim.idle_duration is None
    clock.advance(9.0)  # t=13: reset happened at t=10
    assert lim.idle_duration == pytest.approx(3.0)


def test_replenishing_rate_limiter_properties_have_correct_values(clock):
    auto = window(clock, 1, 7.0)
    manual = window(clock, 1, 7.0, auto_replenishment=False)
    assert auto.try_replenish() is False
    assert manual.try_replenish() is True
    for lim in (auto, manual):
        assert lim.acquire().acquired
        assert lim.acquire().retry_after == pytest.approx(7.0)
