"""SlidingWindowCounterLimiter (docs/design.md, Sliding window counter).

Two fixed windows back to back, anchored at construction; with ``f`` the elapsed fraction of
the current window, a request for ``n`` is granted iff
``previous * (1 - f) + current + n <= permit_limit``.
"""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

import permits

from _support import NEWEST, OLDEST, enqueue, result, settle, stats

NS = 1e-9


def counter(clock, permit_limit, length, **kw):
    return permits.SlidingWindowCounterLimiter(permit_limit, length, clock=clock, **kw)


def test_estimate_weighs_the_previous_window(clock):
    lim = counter(clock, 10, 10.0)
    assert lim.acquire(10).acquired  # window [0, 10)
    assert not lim.acquire().acquired
    clock.advance(10.0)  # f = 0: previous counts fully
    assert lim.available_permits() == 0
    clock.advance(5.0)  # f = 0.5: 10 * 0.5 = 5
    assert lim.available_permits() == 5
    clock.advance(2.5)  # f = 0.75
    assert lim.available_permits() == 7
    clock.advance(2.5)  # t=20: window [10, 20) held nothing
    assert lim.available_permits() == 10


def test_available_permits_is_the_floor_of_the_estimate(clock):
    lim = counter(clock, 10, 10.0)
    assert lim.acquire(3).acquired
    clock.advance(11.0)  # previous 3, f = 0.1: 10 - 2.7 = 7.3
    assert lim.available_permits() == 7
    assert lim.statistics().current_available_permits == 7
    assert lim.acquire(2).acquired  # 2.7 + 2 = 4.7 <= 10
    assert lim.available_permits() == 5  # 10 - 2.7 - 2 = 5.3
    assert not lim.acquire(6).acquired
    assert lim.acquire(5).acquired


def test_no_boundary_burst(clock):
    lim = counter(clock, 10, 10.0)
    clock.advance(9.0)
    assert lim.acquire(10).acquired
    clock.advance(1.0)  # a fixed window would reset here
    assert not lim.acquire().acquired
    clock.advance(1.0)  # f = 0.1: 9 held
    assert lim.acquire(1).acquired
    assert not lim.acquire(1).acquired


def test_retry_after_is_exact(clock):
    lim = counter(clock, 10, 10.0)
    assert lim.acquire(10).acquired
    failed = lim.acquire()
    assert failed.reason == "limit_reached"
    # In window [10, 20), previous 10: 10 * (1 - f) + 1 <= 10 -> f >= 0.1 -> t = 11.
    assert failed.retry_after == pytest.approx(11.0)
    clock.advance(10.0)
    assert lim.acquire().retry_after == pytest.approx(1.0)
    assert lim.acquire(5).retry_after == pytest.approx(5.0)
    assert lim.acquire(10).retry_after == pytest.approx(10.0)


def test_retry_after_is_exact_to_the_nanosecond(clock):
    lim = counter(clock, 3, 1.0)
    assert lim.acquire(3).acquired
    clock.advance(1.0)
    # 3 * (1 - e / 1 s) + 1 <= 3  <=>  e >= 1/3 s  ->  e = 333_333_334 ns (integer ns).
    failed = lim.acquire()
    assert failed.retry_after == pytest.approx(0.333333334, abs=0.5 * NS)
    clock.advance(0.333333333)
    assert not lim.acquire().acquired
    clock.advance(NS)
    assert lim.acquire().acquired


def test_zero_permit_failure_counts_as_one_permit(clock):
    lim = counter(clock, 4, 8.0)
    assert lim.acquire(4).acquired
    clock.advance(8.0)
    zero = lim.acquire(0)
    assert not zero.acquired
    assert zero.reason == "limit_reached"
    assert zero.retry_after == pytest.approx(2.0)  # 4 * (1 - f) + 1 <= 4 -> f = 1/4


def test_retry_after_counts_the_current_window(clock):
    lim = counter(clock, 10, 10.0)
    assert lim.acquire(4).acquired  # window [0, 10)
    clock.advance(12.0)  # previous 4, f = 0.2: 3.2 held
    assert lim.acquire(6).acquired  # 3.2 + 6 = 9.2
    failed = lim.acquire(2)
    # 4 * (1 - f) + 6 + 2 <= 10 -> f >= 0.5 -> t = 15.
    assert failed.retry_after == pytest.approx(3.0)


def test_retry_after_waits_for_the_next_window_when_the_current_is_full(clock):
    lim = counter(clock, 10, 10.0)
    clock.advance(5.0)
    assert lim.acquire(8).acquired  # current window [0, 10) holds 8
    failed = lim.acquire(3)
    # Not before t=10; in [10, 20): 8 * (1 - f) + 3 <= 10 -> f >= 1/8 -> t = 11.25.
    assert failed.retry_after == pytest.approx(6.25)
    clock.advance(6.25 - 0.001)
    assert not lim.acquire(3).acquired
    clock.advance(0.001)
    assert lim.acquire(3).acquired


async def test_retry_after_counts_queued_permits_oldest_first(clock):
    lim = counter(clock, 10, 10.0, queue_limit=2, queue_order=OLDEST)
    assert lim.acquire(10).acquired
    clock.advance(10.0)  # previous 10, current 0
    queued = await enqueue(lim, 2)
    failed = await result(lim.wait_async(1))
    assert failed.reason == "queue_full"
    # 2 queued + 1: 10 * (1 - f) + 3 <= 10 -> f >= 0.3.
    assert failed.retry_after == pytest.approx(3.0)
    assert not queued.done()


async def test_retry_after_ignores_queued_permits_newest_first(clock):
    lim = counter(clock, 10, 10.0, queue_limit=2, queue_order=NEWEST)
    assert lim.acquire(10).acquired
    clock.advance(10.0)
    await enqueue(lim, 2)
    failed = lim.acquire(1)
    assert failed.retry_after == pytest.approx(1.0)


async def test_queued_request_is_served_when_the_estimate_admits_it(clock):
    lim = counter(clock, 10, 10.0, queue_limit=5)
    assert lim.acquire(10).acquired
    clock.advance(10.0)
    waiting = await enqueue(lim, 4)  # admitted at f = 0.4, t = 14
    clock.advance(3.999)
    await settle()
    assert not waiting.done()
    assert lim.statistics().current_queued_count == 4
    clock.advance(0.001)
    assert (await result(waiting)).acquired
    assert stats(lim)[:2] == (0, 0)


def test_long_gap_keeps_windows_anchored(clock):
    lim = counter(clock, 10, 10.0)
    assert lim.acquire(10).acquired
    clock.advance(1000.0 + 5.0)  # window [1000, 1010): previous window counts 0
    assert lim.available_permits() == 10
    assert lim.acquire(10).acquired
    clock.advance(5.0)  # t=1010, previous 10
    assert lim.available_permits() == 0
    clock.advance(5.0)  # t=1015
    assert lim.available_permits() == 5


def test_windows_are_anchored_at_construction():
    clock = permits.ManualClock(start=7.0)
    lim = counter(clock, 4, 10.0)  # windows [7, 17), [17, 27), ...
    assert lim.acquire(4).acquired
    clock.advance(10.0)  # t=17: previous 4, f = 0
    assert lim.available_permits() == 0
    clock.advance(5.0)  # t=22: f = 0.5
    assert lim.available_permits() == 2


def test_manual_mode_reads_the_clock_only_in_try_replenish(clock):
    lim = counter(clock, 4, 10.0, auto_replenishment=False)
    assert lim.acquire(4).acquired
    clock.advance(25.0)
    assert lim.available_permits() == 0
    assert not lim.acquire().acquired
    assert lim.try_replenish() is True
    assert lim.available_permits() == 4


def test_try_replenish_with_auto_replenish_returns_false(clock):
    lim = counter(clock, 4, 10.0)
    assert lim.acquire(4).acquired
    assert lim.try_replenish() is False
    assert lim.available_permits() == 0


def test_idle_once_the_estimate_is_zero(clock):
    lim = counter(clock, 4, 10.0)
    clock.advance(3.0)
    assert lim.acquire(1).acquired  # window [0, 10)
    clock.advance(12.0)  # t=15: previous 1, f=0.5
    assert lim.idle_duration is None
    clock.advance(8.0)  # t=23: nothing has weighed since t=20
    assert lim.idle_duration == pytest.approx(3.0)


def test_sub_millisecond_windows_work(clock):
    lim = counter(clock, 2, 1e-6)
    assert lim.acquire(2).acquired
    clock.advance(1.5e-6)  # previous 2, f = 0.5: 1 held
    assert lim.available_permits() == 1
    clock.advance(0.5e-6)
    assert lim.available_permits() == 2


def test_timedelta_window(clock):
    lim = counter(clock, 2, timedelta(seconds=4))
    assert lim.acquire(2).acquired
    clock.advance(4.0)
    assert lim.available_permits() == 0
    clock.advance(2.0)
    assert lim.available_permits() == 1


def test_lease_release_gives_nothing_back(clock):
    lim = counter(clock, 1, 10.0)
    lim.acquire().release()
    assert lim.available_permits() == 0


def test_estimate_matches_the_formula_over_time(clock):
    # Property check over a deterministic schedule of acquisitions.
    limit, length = 7, 4.0
    lim = counter(clock, limit, length)
    counts: dict[int, int] = {}
    now = 0.0
    step = 0.25
    for i in range(200):
        k = (i * 7) % 4  # 0..3 permits requested
        w = int(now // length)
        f = (now - w * length) / length
        held = counts.get(w - 1, 0) * (1 - f) + counts.get(w, 0)
        available = max(0, math.floor(limit - held + 1e-9))
        # A zero-permit request succeeds iff a permit is available.
        expected_ok = available > 0 if k == 0 else held + k <= limit + 1e-9
        assert lim.available_permits() == available, (now, counts)
        lease = lim.acquire(k)
        assert lease.acquired == expected_ok, (now, k, counts)
        if lease.acquired:
            counts[w] = counts.get(w, 0) + k
        clock.advance(step)
        now += step


async def test_retry_after_when_queued_ahead_exceeds_the_limit(clock):
    # Limit 1: the permit taken at t=0 weighs until t=20, where the queued request is served;
    # that one weighs until t=40, when this request can be granted.
    lim = counter(clock, 1, 10.0, queue_limit=1, queue_order=OLDEST)
    assert lim.acquire().acquired
    queued = await enqueue(lim, 1)
    failed = await result(lim.wait_async(1))
    assert failed.reason == "queue_full"
    assert failed.retry_after == pytest.approx(40.0)
    clock.advance(20.0)
    assert (await result(queued)).acquired
    clock.advance(19.999)
    assert not lim.acquire().acquired
    clock.advance(0.001)
    assert lim.acquire().acquired


async def test_queued_request_is_counted_in_the_window_it_was_served(clock):
    # One advance over several windows serves the waiter at its due time (t = 13.33, in
    # window [10, 20)), so its permit stops weighing at t=30, not at t=40.
    lim = counter(clock, 3, 10.0, queue_limit=1)
    assert lim.acquire(3).acquired
    waiting = await enqueue(lim, 1)
    clock.advance(25.0)
    assert (await result(waiting)).acquired
    assert lim.available_permits() == 2  # 1 * (1 - 0.5) held
    clock.advance(5.0)  # t=30
    assert lim.available_permits() == 3
    assert lim.idle_duration == pytest.approx(0.0)
