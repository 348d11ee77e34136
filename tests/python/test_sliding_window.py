"""SlidingWindowLimiter: docs/design.md: Sliding window, Time, Replenishment, Retry-after.

Segments of ``window / segments_per_window`` (integer nanoseconds, rounded down) slide with
time, anchored at construction; a permit taken in a segment comes back when that segment
leaves the window; after a long gap every elapsed segment is freed at once.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import permits

from _support import NEWEST, OLDEST, enqueue, result, settle, stats


def sliding(clock, permit_limit, length, segments, **kw):
    return permits.SlidingWindowLimiter(permit_limit, length, segments, clock=clock, **kw)


async def test_can_acquire_multiple_requests_async(clock):
    # The worked example of docs/design.md, Sliding window (segments of 1 s).
    lim = sliding(clock, 4, 3.0, 3, queue_limit=4, queue_order=NEWEST)
    assert lim.acquire(2).acquired  # t=0, segment 0 holds 2
    three = await enqueue(lim, 3)
    assert not three.done()
    clock.advance(1.0)  # segment 1 begins, nothing freed
    assert not three.done()
    barged = await result(lim.wait_async(2))  # NEWEST_FIRST: takes the 2 available at once
    assert barged.acquired
    clock.advance(1.0)  # t=2, nothing freed
    two = await enqueue(lim, 2)  # no room: evicts the queued 3
    evicted = await result(three)
    assert not evicted.acquired
    assert evicted.reason == "evicted"
    assert not two.done()
    clock.advance(1.0)  # t=3: segment 0 leaves the window, its 2 permits serve the queued 2
    assert (await result(two)).acquired
    assert stats(lim) == (0, 0, 3, 1)
    clock.advance(1.0)  # t=4: the barged 2 come back
    assert lim.available_permits() == 2


# --------------------------------------------------------------------------- retry_after


async def test_retry_metadata_on_failed_wait_async(clock):
    lim = sliding(clock, 2, 20.0, 4, queue_limit=1)
    assert lim.acquire(2).acquired
    failed = await result(lim.wait_async(2))
    assert failed.reason == "queue_full"
    assert failed.retry_after == pytest.approx(20.0)


async def test_correct_retry_metadata_with_queued_item(clock):
    lim = sliding(clock, 4, 20.0, 4, queue_limit=1, queue_order=OLDEST)
    assert lim.acquire(1).acquired  # segment [0, 5): back at 20
    clock.advance(5.0)
    assert lim.acquire(1).acquired  # segment [5, 10): back at 25
    clock.advance(5.0)
    assert lim.acquire(2).acquired  # segment [10, 15): back at 30
    clock.advance(2.0)  # t=12
    queued = await enqueue(lim, 1)
    failed = await result(lim.wait_async(2))
    assert failed.reason == "queue_full"
    # 1 queued ahead + 2 requested: the permits freed at 20, 25 and 30 -> t=30.
    assert failed.retry_after == pytest.approx(18.0)
    assert not queued.done()


async def test_retry_after_ignores_queued_permits_newest_first(clock):
    lim = sliding(clock, 4, 20.0, 4, queue_limit=1, queue_order=NEWEST)
    assert lim.acquire(1).acquired
    clock.advance(5.0)
    assert lim.acquire(1).acquired
    clock.advance(5.0)
    assert lim.acquire(2).acquired
    clock.advance(2.0)  # t=12
    await enqueue(lim, 1)
    failed = lim.acquire(2)
    assert failed.reason == "limit_reached"
    assert failed.retry_after == pytest.approx(13.0)  # two permits back at t=25


async def test_correct_retry_metadata_with_non_zero_available_items(clock):
    lim = sliding(clock, 3, 20.0, 4, queue_limit=1)
    assert lim.acquire(2).acquired
    failed = await result(lim.wait_async(3))
    assert failed.retry_after == pytest.approx(20.0)


def test_retry_after_with_partially_elapsed_segment(clock):
    lim = sliding(clock, 2, 20.0, 4)
    assert lim.acquire(2).acquired
    clock.advance(2.0)
    failed = lim.acquire()
    assert failed.retry_after == pytest.approx(18.0)


def test_retry_after_clamps_to_zero_when_window_expired(clock):
    # Manual mode: the state is as of the last try_replenish(); the permits would be back
    # already, so the request could be granted as soon as the limiter is replenished.
    lim = sliding(clock, 2, 20.0, 4, auto_replenishment=False)
    assert lim.acquire(2).acquired
    clock.advance(25.0)
    failed = lim.acquire()
    assert not failed.acquired
    assert failed.retry_after is not None
    assert failed.retry_after >= 0.0
    assert failed.retry_after == pytest.approx(0.0)


def test_retry_metadata_on_failed_attempt_acquire(clock):
    lim = sliding(clock, 2, 20.0, 4)
    assert lim.acquire(2).acquired
    failed = lim.acquire()
    assert failed.reason == "limit_reached"
    assert failed.retry_after == pytest.approx(20.0)
    assert failed.metadata["retry_after"] == pytest.approx(20.0)


def test_retry_metadata_on_failed_attempt_acquire_zero_permit_count(clock):
    lim = sliding(clock, 2, 20.0, 4)
    assert lim.acquire(2).acquired
    clock.advance(1.0)
    failed = lim.acquire(0)
    assert not failed.acquired
    assert failed.retry_after == pytest.approx(19.0)


def test_retry_after_accounts_for_permits_across_multiple_segments(clock):
    lim = sliding(clock, 4, 8.0, 4)  # segments of 2 s
    assert lim.acquire(3).acquired  # segment [0, 2): back at 8
    clock.advance(2.0)
    assert lim.acquire(1).acquired  # segment [2, 4): back at 10
    failed = lim.acquire(2)
    assert failed.retry_after == pytest.approx(6.0)  # the 3 freed at t=8 cover the 2
    clock.advance(6.0 - 0.001)
    assert not lim.acquire(2).acquired
    clock.advance(0.001)
    assert lim.acquire(2).acquired


def test_retry_after_walks_until_enough_is_freed(clock):
    lim = sliding(clock, 4, 8.0, 4)
    assert lim.acquire(1).acquired  # back at 8
    clock.advance(2.0)
    assert lim.acquire(1).acquired  # back at 10
    clock.advance(2.0)
    assert lim.acquire(2).acquired  # back at 12
    clock.advance(1.0)  # t=5
    assert lim.acquire(2).retry_after == pytest.approx(5.0)  # 1 at 8 + 1 at 10
    assert lim.acquire(3).retry_after == pytest.approx(7.0)  # ... + 2 at 12
    assert lim.acquire(1).retry_after == pytest.approx(3.0)


# --------------------------------------------------------------------------- replenishment


def test_try_replenish_with_auto_replenish_returns_false(clock):
    lim = sliding(clock, 1, 1.0, 2)
    assert lim.acquire().acquired
    assert lim.try_replenish() is False
    assert lim.available_permits() == 0


def test_auto_replenish_replenishes_counters(clock):
    lim = sliding(clock, 2, 2.0, 2)
    assert lim.acquire(2).acquired
    clock.advance(1.0)
    assert lim.available_permits() == 0
    clock.advance(1.0)
    assert lim.available_permits() == 2


def test_permits_come_back_segment_by_segment(clock):
    lim = sliding(clock, 4, 4.0, 4)
    for _ in range(4):
        assert lim.acquire().acquired
        clock.advance(1.0)
    # t=4: the permit of segment [0, 1) is back.
    assert lim.available_permits() == 1
    clock.advance(1.0)
    assert lim.available_permits() == 2
    clock.advance(2.0)
    assert lim.available_permits() == 4


def test_auto_replenish_ignores_timer_jitter_but_not_time(clock):
    lim = sliding(clock, 2, 2.0, 2)
    assert lim.acquire(2).acquired
    clock.advance(2.0 - 0.001)
    assert lim.available_permits() == 0
    clock.advance(0.001)
    assert lim.available_permits() == 2


def test_catch_up_frees_every_elapsed_segment_at_once(clock):
    # .NET slides one segment per tick (or per TryReplenish); permits frees all at once.
    lim = sliding(clock, 4, 4.0, 4)
    for _ in range(4):
        assert lim.acquire().acquired
        clock.advance(1.0)
    clock.advance(100.0)
    assert lim.available_permits() == 4


def test_manual_mode_catches_up_in_one_try_replenish(clock):
    lim = sliding(clock, 4, 4.0, 4, auto_replenishment=False)
    assert lim.acquire(4).acquired
    clock.advance(100.0)
    assert lim.available_permits() == 0
    assert not lim.acquire().acquired
    assert lim.try_replenish() is True
    assert lim.available_permits() == 4


def test_manual_mode_frees_only_expired_segments(clock):
    lim = sliding(clock, 4, 4.0, 4, auto_replenishment=False)
    assert lim.acquire(1).acquired  # t=0
    clock.advance(2.0)
    lim.try_replenish()
    assert lim.acquire(3).acquired  # t=2
    clock.advance(2.5)  # t=4.5
    lim.try_replenish()
    assert lim.available_permits() == 1


def test_segment_length_is_rounded_down_to_the_nanosecond(clock):
    # 1 s / 3 segments = 333_333_333 ns; a permit taken at t=0 is back after 3 segments,
    # i.e. at 999_999_999 ns.
    lim = sliding(clock, 1, 1.0, 3)
    assert lim.acquire().acquired
    clock.advance(0.999999998)
    assert lim.available_permits() == 0
    clock.advance(1e-9)
    assert lim.available_permits() == 1


def test_one_segment_behaves_like_a_fixed_window(clock):
    lim = sliding(clock, 2, 10.0, 1)
    clock.advance(9.0)
    assert lim.acquire(2).acquired
    assert lim.acquire().retry_after == pytest.approx(1.0)
    clock.advance(1.0)
    assert lim.acquire(2).acquired


def test_burst_in_one_segment_blocks_for_the_whole_window(clock):
    lim = sliding(clock, 3, 9.0, 3)
    assert lim.acquire(3).acquired
    clock.advance(8.999)
    assert lim.available_permits() == 0
    clock.advance(0.001)
    assert lim.available_permits() == 3


def test_sub_millisecond_segments_work(clock):
    lim = sliding(clock, 2, 2e-6, 2)  # segments of 1 us
    assert lim.acquire().acquired
    clock.advance(1e-6)
    assert lim.acquire().acquired
    assert not lim.acquire().acquired
    clock.advance(1e-6)
    assert lim.available_permits() == 1
    clock.advance(1e-6)
    assert lim.available_permits() == 2


async def test_queued_requests_are_served_as_segments_expire(clock):
    lim = sliding(clock, 2, 4.0, 2, queue_limit=2)
    assert lim.acquire(1).acquired  # back at 4
    clock.advance(2.0)
    assert lim.acquire(1).acquired  # back at 6
    first = await enqueue(lim, 1)
    second = await enqueue(lim, 1)
    clock.advance(1.999)
    await settle()
    assert not first.done()
    clock.advance(0.001)  # t=4
    assert (await result(first)).acquired
    assert lim.statistics().current_queued_count == 1
    clock.advance(2.0)  # t=6
    assert (await result(second)).acquired


def test_timedelta_window(clock):
    lim = sliding(clock, 1, timedelta(seconds=4), 2)
    assert lim.acquire().acquired
    clock.advance(3.999)
    assert not lim.acquire().acquired
    clock.advance(0.001)
    assert lim.acquire().acquired


def test_anchor_is_the_clock_reading_at_construction():
    clock = permits.ManualClock(start=0.5)
    lim = sliding(clock, 2, 2.0, 2)  # segments [0.5, 1.5), [1.5, 2.5), ...
    clock.advance(0.75)  # t=1.25
    assert lim.acquire(2).acquired  # in segment [0.5, 1.5): back at 2.5
    clock.advance(1.2)  # t=2.45
    assert lim.available_permits() == 0
    clock.advance(0.05)  # t=2.5
    assert lim.available_permits() == 2


def test_lease_release_gives_nothing_back(clock):
    lim = sliding(clock, 1, 10.0, 2)
    lim.acquire().release()
    assert lim.available_permits() == 0


def test_idle_from_the_moment_the_last_segment_expires(clock):
    lim = sliding(clock, 2, 4.0, 2)
    clock.advance(1.0)
    lim.acquire()  # segment [0, 2): back at 4
    clock.advance(2.0)
    lim.acquire()  # segment [2, 4): back at 6
    clock.advance(2.0)  # t=5
    assert lim.idle_duration is None
    clock.advance(3.0)  # t=8
    assert lim.idle_duration == pytest.approx(2.0)


def test_replenishing_rate_limiter_properties_have_correct_values(clock):
    # The replenishment period of a sliding window is window / segments_per_window.
    auto = sliding(clock, 2, 9.0, 3)
    manual = sliding(clock, 2, 9.0, 3, auto_replenishment=False)
    assert auto.try_replenish() is False
    assert manual.try_replenish() is True
    for lim in (auto, manual):
        assert lim.acquire().acquired  # segment [0, 3)
    clock.advance(3.0)
    manual.try_replenish()
    for lim in (auto, manual):
        assert lim.acquire().acquired  # segment [3, 6)
        assert lim.acquire().retry_after == pytest.approx(6.0)  # back at 9
    clock.advance(6.0)
    manual.try_replenish()
    for lim in (auto, manual):
        assert lim.available_permits() == 1


async def test_retry_after_when_the_queue_ahead_needs_more_than_the_window_frees(clock):
    # Everything held comes back at t=10 and serves the 3 queued permits (held again until
    # t=20), leaving 1: this request for 2 is granted at t=20.
    lim = sliding(clock, 4, 10.0, 2, queue_limit=8, queue_order=OLDEST)
    assert lim.acquire(2).acquired
    clock.advance(2.5)
    assert lim.acquire(2).acquired  # both in segment [0, 5): back at 10
    clock.advance(5.0)  # t=7.5
    q1 = await enqueue(lim, 1)
    q2 = await enqueue(lim, 2)
    failed = lim.acquire(2)
    assert failed.retry_after == pytest.approx(12.5)
    clock.advance(2.5)  # t=10
    assert (await result(q1)).acquired
    assert (await result(q2)).acquired
    clock.advance(9.999)
    assert not lim.acquire(2).acquired
    clock.advance(0.001)  # t=20
    assert lim.acquire(2).acquired
