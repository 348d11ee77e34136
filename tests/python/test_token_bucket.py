"""TokenBucketLimiter: docs/design.md: Token bucket, Time, Replenishment, Retry-after.

Tokens are integers; ``tokens_per_period`` are added for every whole ``replenishment_period``
elapsed since the limiter's anchor (its construction), capped at ``token_limit``; the anchor
advances by whole periods whether or not the bucket is full.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import permits

from _support import NEWEST, OLDEST, enqueue, result, stats


def bucket(clock, token_limit, tokens_per_period, period, **kw):
    return permits.TokenBucketLimiter(token_limit, tokens_per_period, period, clock=clock, **kw)


# --------------------------------------------------------------------------- retry_after (docs/design.md, Retry-after)


async def test_retry_metadata_on_failed_wait_async(clock):
    lim = bucket(clock, 2, 1, 20.0, queue_limit=1)
    assert lim.acquire(2).acquired
    failed = await result(lim.wait_async(2))
    assert not failed.acquired
    assert failed.reason == "queue_full"
    assert failed.retry_after == pytest.approx(40.0)
    assert failed.metadata["retry_after"] == pytest.approx(40.0)


async def test_retry_after_accounts_for_time_elapsed_in_the_current_period(clock):
    # docs/design.md, Retry-after: the same request at t=5 -> 35 s.
    lim = bucket(clock, 2, 1, 20.0, queue_limit=1)
    assert lim.acquire(2).acquired
    clock.advance(5.0)
    failed = await result(lim.wait_async(2))
    assert failed.retry_after == pytest.approx(35.0)
    assert lim.acquire(2).retry_after == pytest.approx(35.0)


async def test_correct_retry_metadata_with_queued_item(clock):
    lim = bucket(clock, 2, 1, 20.0, queue_limit=1, queue_order=OLDEST)
    assert lim.acquire(2).acquired
    queued = await enqueue(lim, 1)
    failed = await result(lim.wait_async(2))
    assert failed.reason == "queue_full"
    # One token for the queued request, then two for this one.
    assert failed.retry_after == pytest.approx(60.0)
    assert not queued.done()


async def test_retry_after_ignores_queued_permits_newest_first(clock):
    lim = bucket(clock, 2, 1, 20.0, queue_limit=1, queue_order=NEWEST)
    assert lim.acquire(2).acquired
    await enqueue(lim, 1)
    failed = lim.acquire(2)
    assert failed.reason == "limit_reached"
    assert failed.retry_after == pytest.approx(40.0)


async def test_correct_retry_metadata_with_multiple_tokens_per_period(clock):
    # .NET floors (20 s); permits reports the exact time: 3 tokens needed at 2 per period.
    lim = bucket(clock, 2, 2, 20.0, queue_limit=1)
    assert lim.acquire(2).acquired
    await enqueue(lim, 1)
    failed = await result(lim.wait_async(2))
    assert failed.reason == "queue_full"
    assert failed.retry_after == pytest.approx(40.0)


async def test_correct_retry_metadata_with_large_tokens_per_period(clock):
    lim = bucket(clock, 2, 100, 20.0, queue_limit=1)
    assert lim.acquire(2).acquired
    failed = await result(lim.wait_async(2))
    assert failed.retry_after == pytest.approx(20.0)


async def test_correct_retry_metadata_with_non_zero_available_items(clock):
    lim = bucket(clock, 3, 1, 20.0, queue_limit=1)
    assert lim.acquire(2).acquired
    failed = await result(lim.wait_async(3))
    assert failed.retry_after == pytest.approx(40.0)


def test_retry_after_on_failed_acquire_and_zero_permit_failure(clock):
    lim = bucket(clock, 1, 1, 10.0)
    assert lim.acquire().acquired
    clock.advance(3.0)
    one = lim.acquire(1)
    zero = lim.acquire(0)
    assert one.retry_after == pytest.approx(7.0)
    # A zero-permit failure counts as one permit.
    assert zero.retry_after == pytest.approx(7.0)
    assert zero.reason == "limit_reached"


async def test_retry_after_counts_queued_ahead_when_acquire_is_blocked_by_the_queue(clock):
    lim = bucket(clock, 3, 1, 20.0, queue_limit=2, queue_order=OLDEST)
    assert lim.acquire(2).acquired
    queued = await enqueue(lim, 2)  # 1 token left: the 2-token request waits
    failed = lim.acquire(1)  # no barging under OLDEST_FIRST
    assert failed.reason == "limit_reached"
    # 2 queued + 1 requested - 1 available = 2 tokens short -> two periods.
    assert failed.retry_after == pytest.approx(40.0)
    clock.advance(20.0)
    assert (await result(queued)).acquired


def test_retry_after_is_exact(clock):
    lim = bucket(clock, 4, 2, 10.0)
    assert lim.acquire(4).acquired
    clock.advance(2.5)
    failed = lim.acquire(3)
    assert failed.retry_after == pytest.approx(17.5)
    clock.advance(17.5 - 0.001)
    assert not lim.acquire(3).acquired
    clock.advance(0.001)
    assert lim.acquire(3).acquired


# --------------------------------------------------------------------------- replenishment


def test_replenish_honors_tokens_per_period(clock):
    lim = bucket(clock, 7, 3, 1.0)
    assert lim.acquire(5).acquired
    assert lim.available_permits() == 2
    clock.advance(1.0)
    assert lim.available_permits() == 5
    clock.advance(1.0)
    assert lim.available_permits() == 7  # capped at token_limit
    clock.advance(1.0)
    assert lim.available_permits() == 7


def test_try_replenish_with_all_tokens_available_noops(clock):
    lim = bucket(clock, 10, 1, 1.0, auto_replenishment=False)
    clock.advance(5.0)
    assert lim.try_replenish() is True
    assert lim.available_permits() == 10


def test_try_replenish_with_auto_replenish_returns_false(clock):
    lim = bucket(clock, 10, 1, 1.0)
    assert lim.acquire(10).acquired
    assert lim.try_replenish() is False
    assert lim.available_permits() == 0


def test_auto_replenish_replenishes_tokens(clock):
    lim = bucket(clock, 2, 1, 1.0)
    assert lim.acquire(2).acquired
    assert not lim.acquire().acquired
    clock.advance(1.0)
    assert lim.acquire().acquired


def test_manual_mode_reads_the_clock_only_in_try_replenish(clock):
    lim = bucket(clock, 3, 1, 1.0, auto_replenishment=False)
    assert lim.acquire(3).acquired
    clock.advance(10.0)
    assert lim.available_permits() == 0
    assert not lim.acquire().acquired
    assert lim.try_replenish() is True
    # All the replenishment elapsed time allows, at once, capped at the limit.
    assert lim.available_permits() == 3


def test_manual_replenish_preserves_time_with_timer_jitter(clock):
    lim = bucket(clock, 10, 1, 1.0, auto_replenishment=False)
    assert lim.acquire(3).acquired
    clock.advance(1.0 - 0.001)
    assert lim.try_replenish() is True
    assert lim.available_permits() == 7
    clock.advance(1.0 + 0.001)
    assert lim.try_replenish() is True
    assert lim.available_permits() == 9


def test_manual_replenish_keeps_the_partial_period(clock):
    lim = bucket(clock, 10, 1, 1.0, auto_replenishment=False)
    assert lim.acquire(10).acquired
    clock.advance(1.5)
    lim.try_replenish()
    assert lim.available_permits() == 1
    clock.advance(0.5)  # anchor moved by whole periods: t=2.0 is a boundary
    lim.try_replenish()
    assert lim.available_permits() == 2


async def test_manual_mode_serves_queued_requests_on_try_replenish(clock):
    lim = bucket(clock, 1, 1, 1.0, auto_replenishment=False, queue_limit=1)
    assert lim.acquire().acquired
    queued = await enqueue(lim)
    clock.advance(5.0)
    assert not queued.done()
    assert lim.statistics().current_queued_count == 1
    assert lim.try_replenish() is True
    assert (await result(queued)).acquired


def test_replenish_works_with_ticks_over_int32_max():
    clock = permits.ManualClock(start=1_000_000.0)
    lim = bucket(clock, 10, 1, 2.0)
    assert lim.acquire(10).acquired
    clock.advance(1.0)  # half a period: nothing
    assert not lim.acquire().acquired
    clock.advance(1.0)  # a whole period
    assert lim.acquire().acquired
    assert lim.available_permits() == 0


def test_auto_replenish_ignores_timer_jitter_but_not_time(clock):
    # .NET adds a whole period on a tick 1 ms early; permits computes from time: nothing
    # arrives before the boundary, and the boundary itself is exact.
    lim = bucket(clock, 10, 1, 1.0)
    assert lim.acquire(10).acquired
    clock.advance(1.0 - 0.001)
    assert lim.available_permits() == 0
    clock.advance(0.001)
    assert lim.available_permits() == 1


def test_late_replenishment_is_never_lost(clock):
    # docs/design.md, Time: a long gap delivers every period's tokens, and the next token
    # still arrives on the anchored schedule.
    lim = bucket(clock, 10, 2, 1.0)
    assert lim.acquire(10).acquired
    clock.advance(3.5)
    assert lim.available_permits() == 6
    clock.advance(0.5)
    assert lim.available_permits() == 8


def test_no_double_burst_after_a_full_period(clock):
    # docs/design.md, Token bucket: the anchor advances while the bucket is full, so draining a
    # long-full bucket does not credit the time it spent full.
    lim = bucket(clock, 10, 1, 1.0)
    clock.advance(9.0)
    assert lim.acquire(10).acquired
    clock.advance(0.1)
    assert lim.available_permits() == 0
    assert not lim.acquire().acquired
    clock.advance(0.9)
    assert lim.available_permits() == 1


def test_no_double_burst_in_manual_mode(clock):
    lim = bucket(clock, 10, 1, 1.0, auto_replenishment=False)
    clock.advance(9.0)
    lim.try_replenish()
    assert lim.acquire(10).acquired
    clock.advance(0.1)
    lim.try_replenish()
    assert lim.available_permits() == 0
    clock.advance(0.9)
    lim.try_replenish()
    assert lim.available_permits() == 1


def test_sub_millisecond_periods_work(clock):
    # docs/design.md, Time: .NET stalls below 1 ms.
    lim = bucket(clock, 1, 1, 1e-6)
    for _ in range(5):
        assert lim.acquire().acquired
        assert not lim.acquire().acquired
        clock.advance(1e-6)
    clock.advance(1e-3)
    assert lim.available_permits() == 1


async def test_sub_millisecond_periods_serve_queued_requests(clock):
    lim = bucket(clock, 1, 1, 250e-9, queue_limit=3)
    assert lim.acquire().acquired
    waiters = [await enqueue(lim) for _ in range(3)]
    clock.advance(250e-9)
    assert (await result(waiters[0])).acquired
    assert lim.statistics().current_queued_count == 2
    clock.advance(500e-9)
    assert (await result(waiters[1])).acquired
    assert (await result(waiters[2])).acquired


def test_anchor_is_the_clock_reading_at_construction():
    clock = permits.ManualClock(start=100.0)
    clock.advance(0.25)
    lim = bucket(clock, 1, 1, 1.0)  # anchored at 100.25
    assert lim.acquire().acquired
    clock.advance(0.75)  # t=101.0: not a boundary of this limiter
    assert lim.available_permits() == 0
    clock.advance(0.25)  # t=101.25
    assert lim.available_permits() == 1


def test_timedelta_period(clock):
    lim = bucket(clock, 1, 1, timedelta(milliseconds=1500))
    assert lim.acquire().acquired
    failed = lim.acquire()
    assert failed.retry_after == pytest.approx(1.5)
    clock.advance(1.499)
    assert not lim.acquire().acquired
    clock.advance(0.001)
    assert lim.acquire().acquired


def test_lease_release_gives_no_token_back(clock):
    lim = bucket(clock, 2, 1, 10.0)
    lease = lim.acquire(2)
    lease.release()
    with lease:
        pass
    assert lim.available_permits() == 0
    assert stats(lim) == (0, 0, 1, 0)


def test_idle_when_bucket_refills(clock):
    lim = bucket(clock, 3, 1, 1.0)
    lim.acquire(2)
    clock.advance(1.0)
    assert lim.idle_duration is None  # 2 of 3
    clock.advance(1.0)
    assert lim.idle_duration == pytest.approx(0.0)
    clock.advance(2.5)
    assert lim.idle_duration == pytest.approx(2.5)


def test_replenishing_rate_limiter_properties_have_correct_values(clock):
    # No IsAutoReplenishing/ReplenishmentPeriod properties in the contract: the same facts,
    # observed through behaviour.
    auto = bucket(clock, 1, 1, 7.0)
    manual = bucket(clock, 1, 1, 7.0, auto_replenishment=False)
    assert auto.try_replenish() is False
    assert manual.try_replenish() is True
    for lim in (auto, manual):
        assert lim.acquire().acquired
        assert lim.acquire().retry_after == pytest.approx(7.0)


def test_idle_duration_in_manual_mode_is_computed_from_state(clock):
    lim = bucket(clock, 1, 1, 1.0, auto_replenishment=False)
    assert lim.acquire().acquired
    clock.advance(5.0)
    assert lim.idle_duration is None  # state not replenished yet
    lim.try_replenish()
    # The bucket was full again at t=1: idle for 4 s.
    assert lim.idle_duration == pytest.approx(4.0)


def test_retry_after_beyond_the_int64_nanosecond_range_is_still_reported(clock):
    # 2**31 - 1 tokens at one per 5 s take about 340 years (over 2**63 ns): a failed lease of
    # a time-based limiter still carries retry_after (docs/design.md, Retry-after: never None).
    limit = 2**31 - 1
    lim = bucket(clock, limit, 1, 5.0)
    assert lim.acquire(limit).acquired
    failed = lim.acquire(limit)
    assert not failed.acquired
    assert failed.retry_after is not None
    assert failed.retry_after == pytest.approx(limit * 5.0, rel=1e-6)
