"""Time-based implementations on a ``ManualClock``: time moves only when the test moves it, and
``advance`` does the due work at once, in the calling thread (no sleeps anywhere)."""

from __future__ import annotations

import pytest

from _support import enqueue, result, settle
from subjects import Make, needs

pytestmark = needs("timed")

#: Far below any period of the tests: "just before" a moment.
EPSILON = 1e-6


def test_nothing_comes_back_while_the_clock_stands_still(make: Make) -> None:
    subject = make(3)
    _held = subject.exhaust()
    for _ in range(5):
        assert not subject.acquire()
        assert subject.available_permits() == 0
    subject.clock.advance(0)
    assert subject.available_permits() == 0


def test_everything_comes_back_after_the_recovery_time_and_not_before(make: Make) -> None:
    subject = make(3)
    _held = subject.exhaust()
    subject.clock.advance(subject.recovery - EPSILON)
    assert subject.available_permits() < 3
    assert not subject.acquire(3)
    subject.clock.advance(EPSILON)
    assert subject.available_permits() == 3
    assert subject.acquire(3)


def test_a_long_pause_counts_once(make: Make) -> None:
    subject = make(3)
    _held = subject.exhaust()
    subject.clock.advance(100 * subject.recovery)
    assert subject.available_permits() == 3  # never more than the limit
    assert subject.acquire(3)
    assert not subject.acquire()


def test_retry_after_counts_the_time_already_waited(make: Make) -> None:
    subject = make(2)
    _held = subject.exhaust()
    first = subject.acquire().retry_after
    assert first is not None
    subject.clock.advance(1.0)
    assert subject.acquire().retry_after == pytest.approx(first - 1.0)


@pytest.mark.parametrize("elapsed", [0.0, 2.5, 7.5])
def test_the_same_request_is_granted_exactly_retry_after_later(make: Make, elapsed: float) -> None:
    subject = make(3)
    subject.clock.advance(elapsed)
    _held = subject.exhaust()
    failed = subject.acquire(2)
    wait = failed.retry_after
    assert wait is not None and wait > 0
    subject.clock.advance(wait - EPSILON)
    assert not subject.acquire(2)  # a failed attempt changes nothing
    subject.clock.advance(EPSILON + 2e-9)
    assert subject.acquire(2)


@needs("queues", "clock_serves_queue")
async def test_advance_serves_the_queue_at_once(make: Make) -> None:
    subject = make(1, queue_limit=2)
    _held = subject.exhaust()
    first = await enqueue(subject)
    second = await enqueue(subject)
    subject.clock.advance(subject.recovery - EPSILON)
    await settle()
    assert not first.done()
    subject.clock.advance(EPSILON)
    assert subject.statistics().current_queued_count == 1  # granted in advance(), before any await
    assert (await result(first)).acquired
    subject.clock.advance(subject.recovery)
    assert (await result(second)).acquired


@needs("queues", "clock_serves_queue")
async def test_one_long_advance_serves_every_waiter_that_came_due(make: Make) -> None:
    subject = make(1, queue_limit=3)
    _held = subject.exhaust()
    waits = [await enqueue(subject) for _ in range(3)]
    subject.clock.advance(2 * subject.recovery)
    assert (await result(waits[0])).acquired
    assert (await result(waits[1])).acquired
    await settle()
    assert not waits[2].done()
    subject.clock.advance(subject.recovery)
    assert (await result(waits[2])).acquired


@needs("replenishes_manually")
async def test_without_auto_replenishment_permits_come_back_only_in_try_replenish(make: Make) -> None:
    subject = make(2, queue_limit=1, auto_replenishment=False)
    _held = subject.exhaust()
    waiting = await enqueue(subject)
    subject.clock.advance(3 * subject.recovery)
    await settle()
    assert not waiting.done()
    assert subject.available_permits() == 0
    assert subject.try_replenish() is True
    assert (await result(waiting)).acquired
    assert subject.available_permits() == 1


@needs("plain")
def test_try_replenish_with_auto_replenishment_does_nothing(make: Make) -> None:
    subject = make(1)
    _held = subject.exhaust()
    assert subject.try_replenish() is False
    assert subject.available_permits() == 0
    subject.clock.advance(subject.recovery)
    assert subject.try_replenish() is False
    assert subject.available_permits() == 1
