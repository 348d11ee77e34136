"""Queue rules shared by every limiter (docs/design.md: Queues, Statistics, Idleness, Close; after
.NET's BaseRateLimiterTests).

Each test runs once per limiter kind (see ``LimiterKit`` in _support.py). Permits are taken at
period boundaries, and ``kit.give_back`` makes them available again (a release for the
concurrency limiter, a clock advance for the time-based ones).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import pytest

import permits

from _support import (
    MAX_INT32,
    NEWEST,
    OLDEST,
    PERIOD,
    TIMED_KINDS,
    LimiterKit,
    cancel_and_wait,
    enqueue,
    result,
    settle,
    spawn,
    stats,
)

# --------------------------------------------------------------------------- acquire basics


def test_can_acquire_resource(kit):
    lim = kit.make(1)
    lease = lim.acquire()
    assert lease.acquired
    assert bool(lease) is True
    failed = lim.acquire()
    assert not failed.acquired
    assert bool(failed) is False
    assert failed.reason == "limit_reached"
    if kit.timed:
        # Releasing a time-based lease gives nothing back (docs/design.md, Leases).
        lease.release()
        assert not lim.acquire().acquired
    kit.give_back(lease)
    assert lim.acquire().acquired


async def test_can_acquire_resource_async(kit):
    lim = kit.make(1, queue_limit=1)
    lease = await result(lim.wait_async())
    assert lease.acquired
    waiting = await enqueue(lim)
    assert not waiting.done()
    assert lim.statistics().current_queued_count == 1
    kit.give_back(lease)
    second = await result(waiting)
    assert second.acquired
    assert lim.statistics().current_queued_count == 0


async def test_acquire_async_is_a_non_queuing_attempt(kit):
    lim = kit.make(1, queue_limit=5)
    lease = await result(lim.acquire_async())
    assert lease.acquired
    failed = await result(lim.acquire_async())
    assert not failed.acquired
    assert failed.reason == "limit_reached"
    assert lim.statistics().current_queued_count == 0


# --------------------------------------------------------------------------- queue order


async def test_queues_and_grabs_oldest(kit):
    lim = kit.make(1, queue_limit=2, queue_order=OLDEST)
    lease = lim.acquire()
    first = await enqueue(lim)
    second = await enqueue(lim)
    assert lim.statistics().current_queued_count == 2
    kit.give_back(lease)
    lease1 = await result(first)
    assert lease1.acquired
    await settle()
    assert not second.done()
    assert lim.statistics().current_queued_count == 1
    kit.give_back(lease1)
    assert (await result(second)).acquired


async def test_queues_and_grabs_newest(kit):
    lim = kit.make(1, queue_limit=2, queue_order=NEWEST)
    lease = lim.acquire()
    first = await enqueue(lim)
    second = await enqueue(lim)
    assert lim.statistics().current_queued_count == 2
    kit.give_back(lease)
    lease2 = await result(second)
    assert lease2.acquired
    await settle()
    assert not first.done()
    assert lim.statistics().current_queued_count == 1
    kit.give_back(lease2)
    assert (await result(first)).acquired


async def test_fails_when_queuing_more_than_limit_oldest_first(kit):
    lim = kit.make(1, queue_limit=1, queue_order=OLDEST)
    lease = lim.acquire()
    queued = await enqueue(lim)
    failed = await result(lim.wait_async())
    assert not failed.acquired
    assert failed.reason == "queue_full"
    assert failed.permit_count == 1
    if kit.kind == "concurrency":
        assert failed.retry_after is None
    elif kit.kind in ("token_bucket", "fixed_window"):
        # One permit queued ahead + one requested: two periods/windows (docs/design.md, Retry-after).
        assert failed.retry_after == pytest.approx(2 * PERIOD)
    else:
        assert failed.retry_after is not None
        assert failed.retry_after > 0
    assert not queued.done()
    assert stats(lim)[1:] == (1, 1, 1)
    kit.give_back(lease)
    assert (await result(queued)).acquired


async def test_drops_oldest_when_queuing_more_than_limit_newest_first(kit):
    lim = kit.make(1, queue_limit=1, queue_order=NEWEST)
    lease = lim.acquire()
    oldest = await enqueue(lim)
    newest = await enqueue(lim)
    evicted = await result(oldest)
    assert not evicted.acquired
    assert evicted.reason == "evicted"
    assert evicted.retry_after is None
    assert "retry_after" not in evicted.metadata
    assert not newest.done()
    # The eviction counts as a failed lease (docs/design.md, Statistics).
    assert stats(lim)[1:] == (1, 1, 1)
    kit.give_back(lease)
    assert (await result(newest)).acquired


async def test_drops_multiple_oldest_when_queuing_more_than_limit_newest_first(kit):
    lim = kit.make(2, queue_limit=2, queue_order=NEWEST)
    lease = lim.acquire(2)
    w1 = await enqueue(lim, 1)
    w2 = await enqueue(lim, 1)
    w3 = await enqueue(lim, 2)
    for w in (w1, w2):
        lost = await result(w)
        assert not lost.acquired
        assert lost.reason == "evicted"
        assert lost.permit_count == 1
    assert not w3.done()
    assert stats(lim)[1:] == (2, 1, 2)
    kit.give_back(lease)
    granted = await result(w3)
    assert granted.acquired
    assert granted.permit_count == 2


async def test_drops_requested_lease_if_permit_count_greater_than_queue_limit_newest_first(kit):
    lim = kit.make(2, queue_limit=1, queue_order=NEWEST)
    lease = lim.acquire(2)
    queued = await enqueue(lim, 1)
    failed = await result(lim.wait_async(2))
    assert not failed.acquired
    assert failed.reason == "queue_full"
    # Nothing was evicted for the request that could never fit.
    await settle()
    assert not queued.done()
    assert lim.statistics().current_queued_count == 1
    kit.give_back(lease)
    assert (await result(queued)).acquired


async def test_queue_available_after_queue_limit_hit_and_resources_become_available(kit):
    lim = kit.make(1, queue_limit=1)
    lease = lim.acquire()
    queued = await enqueue(lim)
    rejected = await result(lim.wait_async())
    assert rejected.reason == "queue_full"
    kit.give_back(lease)
    lease2 = await result(queued)
    assert lease2.acquired
    again = await enqueue(lim)
    assert not again.done()
    assert lim.statistics().current_queued_count == 1
    kit.give_back(lease2)
    assert (await result(again)).acquired


async def test_large_acquires_and_queues_do_not_integer_overflow(kit):
    lim = kit.make(MAX_INT32, queue_limit=MAX_INT32, queue_order=OLDEST)
    lease = lim.acquire(MAX_INT32)
    assert lease.acquired
    w1 = await enqueue(lim, 3)
    w2 = await enqueue(lim, MAX_INT32 - 3)
    assert lim.statistics().current_queued_count == MAX_INT32
    rejected = await result(lim.wait_async(1))
    assert rejected.reason == "queue_full"
    kit.give_back(lease)
    assert (await result(w1)).acquired
    assert (await result(w2)).acquired
    assert stats(lim)[:2] == (0, 0)


async def test_large_queue_newest_first_evicts_without_overflow(kit):
    lim = kit.make(MAX_INT32, queue_limit=MAX_INT32, queue_order=NEWEST)
    lease = lim.acquire(MAX_INT32)
    w1 = await enqueue(lim, 3)
    w2 = await enqueue(lim, MAX_INT32 - 3)
    w3 = await enqueue(lim, 1)
    assert (await result(w1)).reason == "evicted"
    assert lim.statistics().current_queued_count == MAX_INT32 - 2
    kit.give_back(lease)
    assert (await result(w3)).acquired
    assert (await result(w2)).acquired
    assert stats(lim)[:2] == (2, 0)


# --------------------------------------------------------------------------- argument checks


@pytest.mark.parametrize("count", [2, 3, MAX_INT32, MAX_INT32 + 1])
async def test_throws_when_acquiring_or_waiting_for_more_than_limit(kit, count):
    lim = kit.make(1, queue_limit=5)
    with pytest.raises(ValueError, match="permit_count"):
        lim.acquire(count)
    with pytest.raises(ValueError, match="permit_count"):
        lim.wait(count, timeout=0)
    with pytest.raises(ValueError, match="permit_count"):
        await lim.wait_async(count)
    with pytest.raises(ValueError, match="permit_count"):
        await lim.acquire_async(count)
    assert stats(lim) == (1, 0, 0, 0)


@pytest.mark.parametrize("count", [-1, -(2**31), -(2**40)])
async def test_throws_when_acquiring_or_waiting_for_less_than_zero(kit, count):
    lim = kit.make(1, queue_limit=5)
    with pytest.raises(ValueError, match="permit_count"):
        lim.acquire(count)
    with pytest.raises(ValueError, match="permit_count"):
        lim.wait(count, timeout=0)
    with pytest.raises(ValueError, match="permit_count"):
        await lim.wait_async(count)
    with pytest.raises(ValueError, match="permit_count"):
        await lim.acquire_async(count)
    assert stats(lim) == (1, 0, 0, 0)


# --------------------------------------------------------------------------- zero permits


def test_acquire_zero_with_availability(kit):
    lim = kit.make(1)
    lease = lim.acquire(0)
    assert lease.acquired
    assert lease.permit_count == 0
    assert lim.available_permits() == 1
    held = lim.acquire(1)
    assert held.acquired


def test_acquire_zero_without_availability(kit):
    lim = kit.make(1)
    held = lim.acquire(1)
    assert held.acquired
    lease = lim.acquire(0)
    assert not lease.acquired
    assert lease.permit_count == 0
    assert lease.reason == "limit_reached"


async def test_acquire_async_zero_with_availability(kit):
    lim = kit.make(1)
    lease = await result(lim.wait_async(0))
    assert lease.acquired
    assert lease.permit_count == 0
    assert lim.available_permits() == 1


async def test_acquire_async_zero_without_availability_waits_for_availability(kit):
    # queue_limit 0: a zero-permit wait is queued anyway, and counts nothing in the queue.
    lim = kit.make(1, queue_limit=0)
    lease = lim.acquire(1)
    probe = await enqueue(lim, 0)
    assert not probe.done()
    assert lim.statistics().current_queued_count == 0
    kit.give_back(lease)
    got = await result(probe)
    assert got.acquired
    assert got.permit_count == 0
    # Nothing was taken.
    assert lim.available_permits() == 1


# --------------------------------------------------------------------------- dequeue / barging


async def test_can_dequeue_multiple_resources_at_once(kit):
    lim = kit.make(2, queue_limit=2)
    lease = lim.acquire(2)
    w1 = await enqueue(lim, 1)
    w2 = await enqueue(lim, 1)
    assert lim.statistics().current_queued_count == 2
    kit.give_back(lease)
    assert (await result(w1)).acquired
    assert (await result(w2)).acquired
    assert stats(lim)[:2] == (0, 0)


async def test_can_acquire_resources_with_acquire_async_with_queued_items_if_newest_first(kit):
    lim = kit.make(2, queue_limit=2, queue_order=NEWEST)
    lease = lim.acquire(1)
    big = await enqueue(lim, 2)
    assert not big.done()
    small = await result(lim.wait_async(1))  # barges past the queued request
    assert small.acquired
    assert not big.done()
    kit.give_back(lease, small)
    assert (await result(big)).acquired


async def test_cannot_acquire_resources_with_acquire_async_with_queued_items_if_oldest_first(kit):
    lim = kit.make(2, queue_limit=3, queue_order=OLDEST)
    lease = lim.acquire(1)
    big = await enqueue(lim, 2)
    small = await enqueue(lim, 1)  # no barging: it queues behind
    assert not small.done()
    assert lim.statistics().current_queued_count == 3
    kit.give_back(lease)
    big_lease = await result(big)
    assert big_lease.acquired
    await settle()
    assert not small.done()
    kit.give_back(big_lease)
    assert (await result(small)).acquired


async def test_can_acquire_resources_with_acquire_with_queued_items_if_newest_first(kit):
    lim = kit.make(2, queue_limit=2, queue_order=NEWEST)
    lease = lim.acquire(1)
    big = await enqueue(lim, 2)
    small = lim.acquire(1)
    assert small.acquired
    assert not big.done()
    kit.give_back(lease, small)
    assert (await result(big)).acquired


async def test_cannot_acquire_resources_with_acquire_with_queued_items_if_oldest_first(kit):
    lim = kit.make(2, queue_limit=2, queue_order=OLDEST)
    lease = lim.acquire(1)
    big = await enqueue(lim, 2)
    small = lim.acquire(1)  # one permit is available, but a request is queued ahead
    assert not small.acquired
    assert small.reason == "limit_reached"
    assert lim.available_permits() == 1
    kit.give_back(lease)
    assert (await result(big)).acquired


# --------------------------------------------------------------------------- cancellation


async def test_can_cancel_acquire_async_after_queuing(kit):
    lim = kit.make(1, queue_limit=1)
    lease = lim.acquire()
    waiting = await enqueue(lim)
    assert lim.statistics().current_queued_count == 1
    await cancel_and_wait(waiting)
    # Removed from the queue at once; a cancellation is not a failed lease.
    assert stats(lim)[1:] == (0, 1, 0)
    kit.give_back(lease)
    assert lim.available_permits() == 1


async def test_can_cancel_acquire_async_before_queuing(kit):
    lim = kit.make(1, queue_limit=1)

    async def ask():
        return await lim.wait_async()

    task = asyncio.ensure_future(ask())
    task.cancel()  # cancelled before it ever ran: the limiter is not touched
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stats(lim) == (1, 0, 0, 0)


async def test_cancel_updates_queue_limit(kit):
    lim = kit.make(1, queue_limit=1)
    lease = lim.acquire()
    first = await enqueue(lim)
    await cancel_and_wait(first)
    second = await enqueue(lim)  # the cancelled request's room is free again
    assert not second.done()
    assert lim.statistics().current_queued_count == 1
    kit.give_back(lease)
    assert (await result(second)).acquired


async def test_can_fill_queue_with_newest_first_after_canceling_queued_request_with_another_queued_request(kit):
    lim = kit.make(2, queue_limit=2, queue_order=NEWEST)
    lease = lim.acquire(2)
    cancelled = await enqueue(lim, 1)
    await cancel_and_wait(cancelled)
    w2 = await enqueue(lim, 1)
    w3 = await enqueue(lim, 2)  # must evict w2 (the cancelled entry holds nothing)
    lost = await result(w2)
    assert not lost.acquired
    assert lost.reason == "evicted"
    assert not w3.done()
    assert stats(lim)[1:] == (2, 1, 1)
    kit.give_back(lease)
    assert (await result(w3)).acquired


async def test_can_fill_queue_with_oldest_first_after_canceling_first_queued_request_manually(kit):
    lim = kit.make(2, queue_limit=2, queue_order=OLDEST)
    lease = lim.acquire(2)
    cancelled = await enqueue(lim, 2)
    await cancel_and_wait(cancelled)
    w2 = await enqueue(lim, 1)
    w3 = await enqueue(lim, 1)
    assert lim.statistics().current_queued_count == 2
    kit.give_back(lease)
    assert (await result(w2)).acquired
    assert (await result(w3)).acquired
    assert stats(lim) == (0, 0, 3, 0)


async def test_can_dispose_after_canceling_queued_request(kit):
    lim = kit.make(1, queue_limit=2)
    _held = lim.acquire()  # kept: a dropped concurrency lease is released
    cancelled = await enqueue(lim)
    await cancel_and_wait(cancelled)
    other = await enqueue(lim)
    lim.close()
    closed = await result(other)
    assert not closed.acquired
    assert closed.reason == "closed"
    with pytest.raises(permits.LimiterClosedError):
        lim.acquire()


# --------------------------------------------------------------------------- metadata


def test_no_metadata_on_acquired_lease(kit):
    lim = kit.make(1)
    lease = lim.acquire()
    assert lease.acquired
    assert lease.reason is None
    assert lease.retry_after is None
    assert "retry_after" not in lease.metadata
    assert "reason" not in lease.metadata


def test_metadata_holds_reason_and_retry_after_of_a_failed_lease(kit):
    lim = kit.make(1)
    _held = lim.acquire()  # kept: a dropped concurrency lease is released
    failed = lim.acquire()
    assert isinstance(failed.metadata, Mapping)
    assert failed.metadata["reason"] == "limit_reached"
    if kit.timed:
        assert failed.retry_after is not None
        assert failed.metadata["retry_after"] == failed.retry_after
        assert set(failed.metadata) >= {"reason", "retry_after"}
    else:
        assert failed.retry_after is None
        assert "retry_after" not in failed.metadata
    with pytest.raises(TypeError):
        failed.metadata["reason"] = "changed"  # type: ignore[index]
    assert failed.reason == "limit_reached"


# --------------------------------------------------------------------------- close


async def test_dispose_releases_queued_acquires(kit):
    lim = kit.make(1, queue_limit=3)
    lease = lim.acquire()
    waiters = [await enqueue(lim) for _ in range(3)]
    lim.close()
    for w in waiters:
        got = await result(w)
        assert not got.acquired
        assert got.reason == "closed"
        assert got.retry_after is None
        assert got.permit_count == 1
    with pytest.raises(permits.LimiterClosedError):
        lim.acquire()
    with pytest.raises(permits.LimiterClosedError):
        lim.wait(1, timeout=0)
    with pytest.raises(permits.LimiterClosedError):
        await lim.wait_async()
    with pytest.raises(permits.LimiterClosedError):
        await lim.acquire_async()
    with pytest.raises(permits.LimiterClosedError):
        lim.available_permits()
    # Releasing after close is a silent no-op; close is idempotent.
    lease.release()
    lim.close()


async def test_dispose_async_releases_queued_acquires(kit):
    lim = kit.make(1, queue_limit=3)
    _held = lim.acquire()  # kept: a dropped concurrency lease is released
    waiters = [await enqueue(lim) for _ in range(3)]
    await lim.aclose()
    for w in waiters:
        got = await result(w)
        assert not got.acquired
        assert got.reason == "closed"
    with pytest.raises(permits.LimiterClosedError):
        lim.acquire()
    await lim.aclose()


async def test_close_completes_newest_first_waiters_too(kit):
    lim = kit.make(1, queue_limit=2, queue_order=NEWEST)
    _held = lim.acquire()  # kept: a dropped concurrency lease is released
    waiters = [await enqueue(lim) for _ in range(2)]
    lim.close()
    for w in waiters:
        assert (await result(w)).reason == "closed"


def test_with_statement_holds_a_permit_and_closing_closes(kit):
    lim = kit.make(2)
    with lim:
        held = lim.acquire()
        assert held.acquired and not lim.acquire().acquired  # the block holds the other permit
    held.release()
    with contextlib.closing(lim):
        pass
    with pytest.raises(permits.LimiterClosedError):
        lim.acquire()
    assert issubclass(permits.LimiterClosedError, RuntimeError)


# --------------------------------------------------------------------------- idle duration


def test_null_idle_duration_when_active(kit):
    lim = kit.make(1)
    _held = lim.acquire()  # kept: a dropped concurrency lease is released
    assert lim.idle_duration is None


def test_idle_duration_updates_when_idle(kit, clock):
    lim = kit.make(1)
    assert lim.idle_duration == pytest.approx(0.0)
    clock.advance(3.0)
    assert lim.idle_duration == pytest.approx(3.0)


def test_zero_permit_acquire_keeps_the_limiter_idle(kit, clock):
    lim = kit.make(1)
    clock.advance(1.0)
    assert lim.acquire(0).acquired
    assert lim.idle_duration == pytest.approx(1.0)


def test_idle_duration_updates_when_changing_from_active(kit, clock):
    lim = kit.make(1)
    lease = lim.acquire()
    assert lim.idle_duration is None
    if kit.timed:
        # Idleness is computed from state: the limiter became idle when its permits came
        # back (kit.recovery after the acquisition), however late we look.
        clock.advance(kit.recovery + 4.0)
        assert lim.idle_duration == pytest.approx(4.0)
    else:
        clock.advance(5.0)
        assert lim.idle_duration is None
        lease.release()
        assert lim.idle_duration == pytest.approx(0.0)
        clock.advance(4.0)
        assert lim.idle_duration == pytest.approx(4.0)


async def test_idle_duration_is_none_while_a_request_is_queued(kit, clock):
    lim = kit.make(1, queue_limit=1)
    lease = lim.acquire()
    waiting = await enqueue(lim)
    assert lim.idle_duration is None
    kit.give_back(lease)
    got = await result(waiting)
    assert lim.idle_duration is None
    kit.give_back(got)
    assert lim.idle_duration is not None


# --------------------------------------------------------------------------- statistics


def test_get_statistics_returns_new_instances(kit):
    lim = kit.make(1)
    s1 = lim.statistics()
    held = lim.acquire()
    assert held.acquired
    s2 = lim.statistics()
    assert s1 is not s2
    assert s1.current_available_permits == 1
    assert s1.total_successful_leases == 0
    assert s2.current_available_permits == 0
    assert s2.total_successful_leases == 1


async def test_get_statistics_has_correct_values(kit):
    lim = kit.make(100, queue_limit=50, queue_order=OLDEST)
    assert stats(lim) == (100, 0, 0, 0)
    lease = lim.acquire(60)
    assert stats(lim) == (40, 0, 1, 0)
    queued = await enqueue(lim, 50)
    assert stats(lim) == (40, 50, 1, 0)
    rejected = await result(lim.wait_async(1))
    assert rejected.reason == "queue_full"
    assert stats(lim) == (40, 50, 1, 1)
    assert not lim.acquire(100).acquired
    assert stats(lim) == (40, 50, 1, 2)
    kit.give_back(lease)
    assert (await result(queued)).acquired
    assert stats(lim) == (50, 0, 2, 2)


async def test_get_statistics_with_zero_permit_count(kit):
    lim = kit.make(1)
    assert lim.acquire(0).acquired
    assert stats(lim)[2:] == (1, 0)
    assert (await result(lim.wait_async(0))).acquired
    assert stats(lim)[2:] == (2, 0)
    held = lim.acquire(1)
    assert held.acquired
    assert stats(lim)[2:] == (3, 0)
    assert not lim.acquire(0).acquired
    assert stats(lim) == (0, 0, 3, 1)


def test_get_statistics_throws_after_dispose(kit):
    lim = kit.make(1)
    lim.close()
    with pytest.raises(permits.LimiterClosedError):
        lim.statistics()


def test_statistics_do_not_count_argument_errors(kit):
    lim = kit.make(1)
    with pytest.raises(ValueError):
        lim.acquire(2)
    with pytest.raises(ValueError):
        lim.acquire(-1)
    assert stats(lim) == (1, 0, 0, 0)


def test_available_permits_tracks_acquisitions(kit):
    lim = kit.make(5)
    assert lim.available_permits() == 5
    _held = lim.acquire(2)  # kept: a dropped concurrency lease is released
    assert lim.available_permits() == 3
    _held2 = lim.acquire(3)  # kept: a dropped concurrency lease is released
    assert lim.available_permits() == 0


# --------------------------------------------------------------------------- time-based only


def test_try_replenish_with_auto_replenish_returns_false(timed_kit, clock):
    lim = timed_kit.make(1)
    assert lim.acquire().acquired
    assert lim.try_replenish() is False
    assert lim.available_permits() == 0
    clock.advance(timed_kit.recovery)
    assert lim.try_replenish() is False
    assert lim.available_permits() == 1


def test_manual_mode_advances_only_in_try_replenish(timed_kit, clock):
    lim = timed_kit.make(2, auto_replenishment=False)
    assert lim.acquire(2).acquired
    clock.advance(timed_kit.recovery * 3)
    assert lim.available_permits() == 0
    assert not lim.acquire().acquired
    assert lim.try_replenish() is True
    assert lim.available_permits() == 2
    assert lim.acquire(2).acquired


async def test_manual_mode_serves_the_queue_only_in_try_replenish(timed_kit, clock):
    lim = timed_kit.make(1, queue_limit=1, auto_replenishment=False)
    assert lim.acquire().acquired
    waiting = await enqueue(lim)
    clock.advance(timed_kit.recovery * 2)
    await settle()
    assert not waiting.done()
    assert lim.try_replenish() is True
    assert (await result(waiting)).acquired


def test_failed_acquire_always_carries_a_non_negative_retry_after(timed_kit, clock):
    lim = timed_kit.make(3)
    assert lim.acquire(3).acquired
    for _ in range(7):
        for n in (0, 1, 2, 3):
            lease = lim.acquire(n)
            if not lease.acquired:
                assert lease.retry_after is not None
                assert lease.retry_after >= 0.0
                assert lease.reason == "limit_reached"
        clock.advance(PERIOD / 4)


def test_zero_permit_failure_retry_after_equals_one_permit(timed_kit, clock):
    lim = timed_kit.make(2)
    assert lim.acquire(2).acquired
    clock.advance(PERIOD / 4)
    zero = lim.acquire(0)
    one = lim.acquire(1)
    assert not zero.acquired and not one.acquired
    assert zero.retry_after == pytest.approx(one.retry_after)


@pytest.mark.parametrize("seed", range(6))
def test_retry_after_is_the_exact_time_until_granted(timed_kit, clock, seed):
    # docs/design.md, Retry-after: a failed request is granted exactly retry_after later (nothing
    # else arriving) and not a microsecond before.
    import random

    rng = random.Random(seed)
    limit = 5
    lim = timed_kit.make(limit)
    checked = 0
    for _ in range(40):
        clock.advance(rng.choice([0.0, 0.25, 0.5, 1.0, 2.5]) * PERIOD / 10)
        n = rng.randint(1, limit)
        lease = lim.acquire(n)
        if lease.acquired:
            continue
        wait = lease.retry_after
        assert wait is not None and wait > 0
        # Probe the same request just before and at the promised time. A failed probe changes
        # no state, so the probes do not disturb the limiter.
        delta = 1e-6
        clock.advance(wait - delta)
        assert not lim.acquire(n).acquired, (seed, n, wait)
        clock.advance(delta + 2e-9)
        assert lim.acquire(n).acquired, (seed, n, wait)
        checked += 1
    assert checked >= 3


async def test_a_single_large_advance_serves_every_waiter_that_came_due(timed_kit, clock):
    # docs/design.md, Time: a late or missed timer never loses replenishment. One advance over
    # two recovery times must serve the waiter due after the first and the one due after the
    # second, exactly as two separate advances (or a punctual engine thread) would.
    lim = timed_kit.make(1, queue_limit=3)
    assert lim.acquire().acquired
    waiters = [await enqueue(lim) for _ in range(3)]
    clock.advance(2 * timed_kit.recovery)
    assert (await result(waiters[0])).acquired
    assert (await result(waiters[1])).acquired
    await settle()
    assert not waiters[2].done()
    assert lim.statistics().current_queued_count == 1
    clock.advance(timed_kit.recovery)
    assert (await result(waiters[2])).acquired


@pytest.mark.parametrize("kind", ["token_bucket", "fixed_window", "sliding_window", "sliding_window_counter"])
@pytest.mark.parametrize("seed", range(8))
async def test_retry_after_is_exact_with_requests_queued_ahead(kind, clock, seed):
    # docs/design.md, Retry-after, with a queue: under OLDEST_FIRST the permits queued ahead are
    # served first (head-of-line, one after the other), and the failed request is granted
    # exactly retry_after later.
    import random

    rng = random.Random(1000 + seed)
    limit = 4
    timed_kit = LimiterKit(kind, clock)
    lim = timed_kit.make(limit, queue_limit=2 * limit, queue_order=OLDEST)
    held = []
    for _ in range(rng.randint(1, 4)):
        clock.advance(rng.choice([0.0, 0.25, 0.5]) * PERIOD)
        lease = lim.acquire(rng.randint(1, limit))
        held.append(lease)
    queued = []
    for _ in range(rng.randint(1, 2)):
        queued.append(await enqueue(lim, rng.randint(1, limit)))
    n = rng.randint(1, limit)
    failed = lim.acquire(n)
    if failed.acquired:  # nothing was queued after all
        return
    wait = failed.retry_after
    assert wait is not None and wait > 0
    delta = 1e-6
    clock.advance(wait - delta)
    assert not lim.acquire(n).acquired, (seed, n, wait)
    clock.advance(delta + 2e-9)
    await settle()
    assert lim.statistics().current_queued_count == 0, (seed, n, wait)
    assert lim.acquire(n).acquired, (seed, n, wait)
    for t in queued:
        assert (await result(t)).acquired


# --------------------------------------------------------------------------- more queue rules


async def test_queue_limit_counts_permits_not_requests(kit):
    lim = kit.make(2, queue_limit=3)
    held = lim.acquire(2)
    two = await enqueue(lim, 2)
    rejected = await result(lim.wait_async(2))  # 2 + 2 > 3
    assert rejected.reason == "queue_full"
    one = await enqueue(lim, 1)  # 2 + 1 == 3 fits
    assert not one.done()
    assert lim.statistics().current_queued_count == 3
    kit.give_back(held)
    assert (await result(two)).acquired


async def test_zero_permit_requests_ignore_the_queue_while_permits_are_available(kit):
    lim = kit.make(2, queue_limit=2, queue_order=OLDEST)
    held = lim.acquire(1)
    big = await enqueue(lim, 2)  # waits: only 1 available
    assert not big.done()
    assert lim.acquire(0).acquired
    probe = await result(lim.wait_async(0))
    assert probe.acquired and probe.permit_count == 0
    assert lim.statistics().current_queued_count == 2
    kit.give_back(held)
    assert (await result(big)).acquired


async def test_zero_permit_waiter_does_not_take_queue_room(kit):
    lim = kit.make(1, queue_limit=1)
    held = lim.acquire()
    probe = await enqueue(lim, 0)
    waiting = await enqueue(lim, 1)  # the zero-permit waiter holds no room
    assert not waiting.done()
    assert lim.statistics().current_queued_count == 1
    kit.give_back(held)
    assert (await result(probe)).acquired
    assert (await result(waiting)).acquired


def test_with_statement_gives_the_lease_it_holds(kit):
    lim = kit.make(1)
    with lim as lease:
        assert isinstance(lease, permits.Lease) and lease.acquired and lease.permit_count == 1
        assert not lim.acquire().acquired


async def test_many_waiters_are_served_in_bulk(timed_kit, clock):
    lim = timed_kit.make(500, queue_limit=1000)
    assert lim.acquire(500).acquired
    tasks = [spawn(lim.wait_async()) for _ in range(1000)]
    await settle()
    assert lim.statistics().current_queued_count == 1000
    clock.advance(timed_kit.recovery)
    await asyncio.wait_for(asyncio.gather(*tasks[:500]), 10)
    assert lim.statistics().current_queued_count == 500
    assert not any(t.done() for t in tasks[500:])
    clock.advance(timed_kit.recovery)
    leases = await asyncio.wait_for(asyncio.gather(*tasks[500:]), 10)
    assert all(lease.acquired for lease in leases)


@pytest.mark.parametrize("kind", TIMED_KINDS)
async def test_a_clock_far_from_zero(kind):
    # 1e9 s is 1e18 ns: state arithmetic must not overflow near the int64 range.
    clock = permits.ManualClock(start=1e9)
    far = LimiterKit(kind, clock)
    lim = far.make(1, queue_limit=1)
    assert lim.acquire(1).acquired
    failed = lim.acquire()
    assert failed.retry_after is not None and failed.retry_after > 0
    waiting = await enqueue(lim)
    clock.advance(far.recovery)
    assert (await result(waiting)).acquired
    clock.advance(far.recovery)
    assert lim.idle_duration == pytest.approx(0.0, abs=1e-6)
