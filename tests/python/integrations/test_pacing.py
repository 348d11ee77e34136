"""The client and job integrations' pacing: waiting without a queue (sleeping for retry_after,
on a ManualClock, which the wait advances), with one, per-key pauses and Retry-After parsing."""

from __future__ import annotations

import asyncio
import math
import time
from email.utils import formatdate

import pytest

import permits
from permits._pacing import MAX_RETRY_AFTER, Pacer, PauseOutlasts, parse_retry_after
from permits.specs import FixedWindow

NOW = 1_000_000_000.0  # a wall-clock time for the dates


# ---- Retry-After ----
@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 3 ", 3.0),
        ("0", 0.0),
        ("1.5", 1.5),
        ("-5", 0.0),
        ("86400", MAX_RETRY_AFTER),
        ("9" * 400, MAX_RETRY_AFTER),
        (formatdate(NOW + 30, usegmt=True), 30.0),
        (formatdate(NOW - 30, usegmt=True), 0.0),
        ("Sun, 06 Nov 1994 08:49:37 GMT", 0.0),
        ("Fri, 31 Dec 9999 23:59:59 GMT", MAX_RETRY_AFTER),
        (formatdate(NOW + 7, usegmt=True).replace("GMT", "-0000"), 7.0),  # a date without a zone is GMT
    ],
)
def test_retry_after_values(value: str, seconds: float):
    assert parse_retry_after(value, now=NOW) == seconds


@pytest.mark.parametrize(
    "value", [None, "", "  ", "soon", "1e3", "nan", "inf", "0x10", "Mon, 99 Foo 2020 00:00:00 GMT", b"5", 5]
)
def test_unreadable_retry_after_is_ignored(value: object):
    assert parse_retry_after(value, now=NOW) is None  # type: ignore[arg-type]


def test_a_date_is_measured_from_now_by_default():
    seconds = parse_retry_after(formatdate(time.time() + 60, usegmt=True))
    assert seconds is not None and 0.0 < seconds <= 60.0  # the date has whole seconds


# ---- waiting without a queue: sleep for retry_after, ask again ----
def test_without_a_queue_it_sleeps_for_retry_after(clock: permits.ManualClock):
    pacer = Pacer(permits.FixedWindowLimiter(2, 1.0, clock=clock))
    seen = []
    for _ in range(5):
        assert pacer.wait(None)
        seen.append(clock.now())
    assert seen == [0.0, 0.0, 1.0, 1.0, 2.0]


def test_the_sleep_can_be_given(clock: permits.ManualClock):
    slept = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    pacer = Pacer(permits.TokenBucketLimiter(1, 1, 0.25, clock=clock), sleep=sleep)
    for _ in range(3):
        assert pacer.wait(None)
    assert slept == [0.25, 0.25]


async def test_async_without_a_queue(clock: permits.ManualClock):
    pacer = Pacer(permits.SlidingWindowLimiter(2, 2.0, 2, queue_limit=0, clock=clock))
    seen = []
    for _ in range(4):
        assert await pacer.wait_async(None)
        seen.append(clock.now())
    assert seen == [0.0, 0.0, 2.0, 2.0]


def test_a_plain_limiter_ignores_the_key(clock: permits.ManualClock):
    pacer = Pacer(permits.FixedWindowLimiter(1, 1.0, clock=clock))
    assert pacer.wait("a")
    assert pacer.wait("b")
    assert clock.now() == 1.0


def test_a_keyed_limiter_waits_per_key(clock: permits.ManualClock):
    limiter = permits.PartitionedLimiter.per_key(FixedWindow(1, 1.0), clock=clock)
    pacer = Pacer(limiter)
    assert pacer.wait("a") and pacer.wait("b")
    assert clock.now() == 0.0
    assert pacer.wait("a", 1)
    assert clock.now() == 1.0


async def test_a_concurrency_limit_without_a_queue_is_polled(clock: permits.ManualClock):
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    pacer = Pacer(limiter)
    held = await pacer.wait_async(None)
    second = asyncio.create_task(pacer.wait_async(None))
    for _ in range(3):
        await asyncio.sleep(0)
    assert not second.done()
    held.release()
    lease = await second
    assert lease and limiter.available_permits() == 0
    lease.release()


async def test_with_a_queue_it_waits_in_it(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock, queue_limit=1)
    pacer = Pacer(limiter)
    assert await pacer.wait_async(None)
    second = asyncio.create_task(pacer.wait_async(None))
    while limiter.statistics().current_queued_count == 0:
        await asyncio.sleep(0)
    clock.advance(1.0)
    assert await second
    assert clock.now() == 1.0


async def test_a_close_while_queued_raises(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock, queue_limit=1)
    pacer = Pacer(limiter)
    assert await pacer.wait_async(None)
    second = asyncio.create_task(pacer.wait_async(None))
    while limiter.statistics().current_queued_count == 0:
        await asyncio.sleep(0)
    limiter.close()
    with pytest.raises(permits.LimiterClosedError):
        await second


def test_a_closed_limiter_raises(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock)
    limiter.close()
    with pytest.raises(permits.LimiterClosedError):
        Pacer(limiter).wait(None)


def test_a_request_larger_than_the_limit_is_an_error(clock: permits.ManualClock):
    with pytest.raises(ValueError, match="permit_count"):
        Pacer(permits.FixedWindowLimiter(1, 1.0, clock=clock)).wait(None, 2)


def test_the_limiter_is_checked():
    with pytest.raises(TypeError, match="limiter"):
        Pacer(object())


# ---- pauses ----
def test_a_pause_holds_its_key_only(clock: permits.ManualClock):
    pacer = Pacer(permits.PartitionedLimiter.per_key(FixedWindow(10, 1.0), clock=clock))
    pacer.pause("a", 2.5)
    assert pacer.wait("b") and clock.now() == 0.0
    assert pacer.paused_for("a") == 2.5
    assert pacer.wait("a") and clock.now() == 2.5
    assert pacer.paused_for("a") == 0.0


def test_a_longer_pause_stays(clock: permits.ManualClock):
    pacer = Pacer(permits.FixedWindowLimiter(10, 1.0, clock=clock))
    pacer.pause("a", 5.0)
    pacer.pause("a", 1.0)
    assert pacer.paused_for("a") == 5.0
    pacer.pause("a", 7.0)
    assert pacer.paused_for("a") == 7.0


async def test_an_async_wait_sleeps_out_a_pause(clock: permits.ManualClock):
    pacer = Pacer(permits.FixedWindowLimiter(10, 1.0, clock=clock))
    pacer.pause("a", 1 / 3)
    assert await pacer.wait_async("a")
    assert clock.now_ns() == 333_333_334  # rounded up to the nanosecond, never short


async def test_a_pause_set_while_queued_is_kept(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock, queue_limit=1)
    pacer = Pacer(limiter)
    assert await pacer.wait_async("k")
    queued = asyncio.create_task(pacer.wait_async("k"))
    while limiter.statistics().current_queued_count == 0:
        await asyncio.sleep(0)
    pacer.pause("k", 5.0)
    clock.advance(1.0)  # grants the queued request, which gives the permit back and sleeps out the pause
    assert await queued
    assert clock.now() == 5.0
    assert limiter.statistics().total_successful_leases == 3  # the first, the refunded one, the kept one


# ---- the pause table: cheap however many keys are paused ----
def _seconds_per_pause(paused: int, added: int = 100) -> float:
    """Seconds per ``pause`` of a new key when ``paused`` keys are paused already (none ends: the
    clock does not move), the best of a few runs."""
    best = math.inf
    for _ in range(5):
        pacer = Pacer(permits.FixedWindowLimiter(1, 1.0, clock=permits.ManualClock()))
        for i in range(paused):
            pacer.pause(("old", i), 60.0)
        start = time.perf_counter()
        for i in range(added):
            pacer.pause(("new", i), 60.0)
        best = min(best, (time.perf_counter() - start) / added)
    return best


def test_a_pause_costs_about_as_much_with_16k_keys_paused_as_with_900():
    # O(log n): 16k keys cost a little more than 900 (a deeper heap), never a rebuild of the table
    # per pause (that was 1,000 times as much). A ratio, not a time: the machine may be loaded.
    ratio = _seconds_per_pause(16_000) / _seconds_per_pause(900)
    assert ratio < 20, f"a pause costs {ratio:.0f} times as much with 16k keys paused"


def test_ended_pauses_are_dropped(clock: permits.ManualClock):
    pacer = Pacer(permits.FixedWindowLimiter(1, 1.0, clock=clock))
    for i in range(5_000):
        pacer.pause(i, 1.0)
    pacer.pause("long", 60.0)
    clock.advance(2.0)
    pacer.pause("new", 1.0)  # drops the ended ones on its way
    assert len(pacer._paused) == 2
    assert pacer.paused_for(0) == 0.0 and pacer.paused_for("long") == 58.0


def test_a_longer_pause_of_one_key_replaces_its_shorter_one(clock: permits.ManualClock):
    pacer = Pacer(permits.FixedWindowLimiter(1, 1.0, clock=clock))
    for seconds in range(1, 1_000):  # each one longer: stale heap entries, compacted on the way
        pacer.pause("k", float(seconds))
    assert len(pacer._paused._heap) <= 2 * 1 + 64 + 1
    clock.advance(998.5)
    assert pacer.paused_for("k") == 0.5
    clock.advance(0.5)
    pacer.pause("other", 1.0)
    assert len(pacer._paused) == 1


# ---- deadlines, and taking a permit only while the key is not paused ----
def test_a_pause_past_the_deadline_raises_at_once(clock: permits.ManualClock):
    pacer = Pacer(permits.FixedWindowLimiter(10, 1.0, clock=clock))
    pacer.pause("k", 5.0)
    with pytest.raises(PauseOutlasts, match="5 s") as raised:
        pacer.wait("k", deadline_ns=4_999_999_999)
    assert raised.value.left == 5.0 and clock.now() == 0.0
    assert pacer.wait("k", deadline_ns=5_000_000_000) and clock.now() == 5.0


async def test_an_async_pause_past_the_deadline_raises_at_once(clock: permits.ManualClock):
    pacer = Pacer(permits.FixedWindowLimiter(10, 1.0, queue_limit=0, clock=clock))
    pacer.pause("k", 2.0)
    with pytest.raises(PauseOutlasts):
        await pacer.wait_async("k", deadline_ns=1_000_000_000)
    assert await pacer.wait_async("other", deadline_ns=0)  # another key is not paused
    assert clock.now() == 0.0


def test_take_gives_up_on_a_paused_key(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(10, 1.0, clock=clock)
    pacer = Pacer(limiter)
    pacer.pause("k", 1.0)
    assert pacer.take("k") is None
    assert pacer.take("other")
    assert limiter.statistics().total_successful_leases == 1 and clock.now() == 0.0


async def test_take_async_gives_back_a_permit_granted_to_a_key_paused_meanwhile(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock, queue_limit=1)
    pacer = Pacer(limiter)
    assert await pacer.take_async("k")
    queued = asyncio.create_task(pacer.take_async("k"))
    while limiter.statistics().current_queued_count == 0:
        await asyncio.sleep(0)
    pacer.pause("k", 5.0)
    clock.advance(1.0)  # grants the queued request: it gives the permit back and returns None
    assert await queued is None
    assert limiter.available_permits() == 1
