"""_sending: a request's permit is taken before it asks for a connection and renewed as it is
written if it waited too long for the connection (or for a new one to open); requests of one key
take their permits in turn. The steps one by one on a ManualClock (the client's hooks are called
by hand here; the clients' tests call them through httpcore's trace and aiohttp's signals)."""

from __future__ import annotations

import asyncio
import threading

import pytest

import permits
from permits._sending import FRESH_NS, SLOW_SETUP_NS, Repaused, Sender
from permits.specs import FixedWindow

STALE = 2 * FRESH_NS / 1e9  # seconds: a permit this old when its request is written is renewed


def test_a_fresh_permit_is_the_one_counted(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock)
    attempt = Sender(limiter).attempt("k", at_write=True)
    attempt.begin(None)
    clock.advance(FRESH_NS / 1e9)
    attempt.writing()
    assert attempt.finish()
    assert limiter.statistics().total_successful_leases == 1


def test_a_permit_taken_before_a_long_wait_for_the_connection_is_renewed(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock)
    attempt = Sender(limiter).attempt("k", at_write=True)
    attempt.begin(None)  # window [0, 1): its one permit
    clock.advance(1.5)  # waiting for a connection
    attempt.writing()  # counted now, in window [1, 2)
    assert attempt.finish()
    assert limiter.available_permits() == 0
    assert limiter.statistics().total_successful_leases == 2  # (a renewal is a grant of its own)


def test_a_renewal_gives_the_old_permit_back_when_the_limiter_can(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(2, 10.0, clock=clock)
    attempt = Sender(limiter).attempt("k", at_write=True)
    attempt.begin(None)
    clock.advance(0.5)
    attempt.writing()
    assert limiter.available_permits() == 1  # the same window: the first permit came back


def test_a_renewal_in_a_later_segment_of_a_sliding_window_costs_a_permit(clock: permits.ManualClock):
    # (a sliding window takes back only a permit of its current segment: the first one still counts)
    limiter = permits.SlidingWindowLimiter(2, 1.0, 10, clock=clock)
    attempt = Sender(limiter).attempt("k", at_write=True)
    attempt.begin(None)
    clock.advance(0.5)
    attempt.writing()
    assert limiter.available_permits() == 0
    clock.advance(0.5)  # the segment of 0 has left the window
    assert limiter.available_permits() == 1


def test_opening_a_new_connection_is_not_a_wait_for_the_pool(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock)
    attempt = Sender(limiter).attempt("k", at_write=True)
    attempt.begin(None)
    attempt.connecting()  # the pool gave it a new connection at once
    clock.advance(0.5)  # opening it (the limit's margin covers set-up times, up to SLOW_SETUP)
    attempt.writing()
    assert attempt.finish()
    assert limiter.statistics().total_successful_leases == 1


def test_a_wait_for_the_pool_before_a_new_connection_renews(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock)
    attempt = Sender(limiter).attempt("k", at_write=True)
    attempt.begin(None)
    clock.advance(1.5)
    attempt.connecting()
    attempt.writing()
    assert limiter.statistics().total_successful_leases == 2


def test_a_very_slow_new_connection_renews(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock)
    attempt = Sender(limiter).attempt("k", at_write=True)
    attempt.begin(None)
    attempt.connecting()
    clock.advance_ns(SLOW_SETUP_NS + 1)
    attempt.writing()
    assert limiter.statistics().total_successful_leases == 2


def test_with_no_permit_left_the_write_waits_for_one(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock)  # sync on a ManualClock: waits advance it
    sender = Sender(limiter)
    attempt = sender.attempt("k", at_write=True)
    attempt.begin(None)
    clock.advance(1.5)
    assert limiter.acquire()  # someone else takes the permit of window [1, 2)
    attempt.writing()  # its own (of window 0) is given back in vain: it waits for window [2, 3)
    assert clock.now() == 2.0
    assert attempt.finish()


def test_a_concurrency_permit_is_never_renewed(clock: permits.ManualClock):
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    attempt = Sender(limiter).attempt("k", at_write=True)
    attempt.begin(None)
    clock.advance(5.0)
    attempt.writing()  # no permit left to renew with, and none will come by waiting: it keeps its own
    lease = attempt.finish()
    assert limiter.available_permits() == 0
    lease.release()
    assert limiter.available_permits() == 1


def test_a_key_paused_meanwhile_steps_back_and_gives_its_permit_back(clock: permits.ManualClock):
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    sender = Sender(limiter)
    attempt = sender.attempt("k", at_write=True)
    attempt.begin(None)
    sender.pacer.pause("k", 5.0)
    with pytest.raises(Repaused):
        attempt.writing()
    attempt.abandon()
    assert limiter.available_permits() == 1
    assert sender.attempt("other", at_write=True).begin(None) is None  # its turn ended


def test_a_closed_limiter_ends_the_write(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock)
    attempt = Sender(limiter).attempt("k", at_write=True)
    attempt.begin(None)
    clock.advance(STALE)
    limiter.close()
    with pytest.raises(permits.LimiterClosedError):
        attempt.writing()
    attempt.abandon()


def test_the_write_is_noted_once(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(5, 1.0, clock=clock)
    attempt = Sender(limiter).attempt("k", at_write=True)
    attempt.begin(None)
    clock.advance(STALE)
    attempt.writing()
    attempt.writing()  # (a tunnel's CONNECT, then the request)
    assert limiter.statistics().total_successful_leases == 2


# ---- turns ----
def test_requests_of_one_key_take_their_permits_in_turn():
    limiter = permits.PartitionedLimiter.per_key(FixedWindow(10, 1.0))
    sender = Sender(limiter)
    first = sender.attempt("k", at_write=True)
    first.begin(None)
    second_began = threading.Event()

    def second() -> None:
        attempt = sender.attempt("k", at_write=True)
        attempt.begin(None)
        second_began.set()
        attempt.finish()

    thread = threading.Thread(target=second)
    thread.start()
    other = sender.attempt("other", at_write=True)
    other.begin(None)  # another key does not wait
    other.finish()
    assert not second_began.wait(0.2)  # "k" waits until the first is written
    first.writing()
    assert second_began.wait(10)
    thread.join(10)
    first.finish()


async def test_a_cancelled_wait_for_a_turn_holds_nothing():
    limiter = permits.FixedWindowLimiter(10, 1.0)
    sender = Sender(limiter)
    first = sender.attempt("k", at_write=True)
    await first.begin_async(None)
    waiting = asyncio.create_task(sender.attempt("k", at_write=True).begin_async(None))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await first.writing_async()
    first.finish()
    third = sender.attempt("k", at_write=True)
    await asyncio.wait_for(third.begin_async(None), 10)  # the cancelled one took no turn
    third.abandon()
    assert limiter.available_permits() == 8  # the first (renewed, if it took a while) and the third
