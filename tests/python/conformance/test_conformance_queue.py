"""The wait queue: order, bounds, room (implementations that queue)."""

from __future__ import annotations

import pytest

import permits

from _support import MAX_INT32, NEWEST, OLDEST, enqueue, result, settle, stats
from subjects import Make, needs

pytestmark = needs("queues")


async def test_oldest_first_serves_the_oldest_waiter(make: Make) -> None:
    subject = make(1, queue_limit=2, queue_order=OLDEST)
    held = subject.exhaust()
    first = await enqueue(subject)
    second = await enqueue(subject)
    assert subject.statistics().current_queued_count == 2
    subject.restore(held)
    lease = await result(first)
    assert lease.acquired
    await settle()
    assert not second.done()
    assert subject.statistics().current_queued_count == 1
    subject.restore(lease)
    assert (await result(second)).acquired


async def test_newest_first_serves_the_newest_waiter(make: Make) -> None:
    subject = make(1, queue_limit=2, queue_order=NEWEST)
    held = subject.exhaust()
    first = await enqueue(subject)
    second = await enqueue(subject)
    subject.restore(held)
    lease = await result(second)
    assert lease.acquired
    await settle()
    assert not first.done()
    assert subject.statistics().current_queued_count == 1
    subject.restore(lease)
    assert (await result(first)).acquired


async def test_a_full_queue_refuses_with_queue_full_oldest_first(make: Make) -> None:
    subject = make(1, queue_limit=1, queue_order=OLDEST)
    held = subject.exhaust()
    queued = await enqueue(subject)
    refused = await result(subject.wait_async())
    assert not refused.acquired
    assert refused.reason == "queue_full"
    assert refused.permit_count == 1
    if subject.has("timed"):
        assert refused.retry_after is not None and refused.retry_after > 0
    else:
        assert refused.retry_after is None
    assert not queued.done()
    assert stats(subject)[1:] == (1, 1, 1)  # the refusal counts as a failed lease
    subject.restore(held)
    assert (await result(queued)).acquired


async def test_a_full_queue_evicts_the_oldest_waiter_newest_first(make: Make) -> None:
    subject = make(1, queue_limit=1, queue_order=NEWEST)
    held = subject.exhaust()
    oldest = await enqueue(subject)
    newest = await enqueue(subject)
    evicted = await result(oldest)
    assert not evicted.acquired
    assert evicted.reason == "evicted"
    assert evicted.retry_after is None
    assert evicted.permit_count == 1
    assert not newest.done()
    assert stats(subject)[1:] == (1, 1, 1)  # the eviction counts as a failed lease
    subject.restore(held)
    assert (await result(newest)).acquired


@pytest.mark.parametrize("order", [OLDEST, NEWEST])
async def test_a_request_larger_than_the_queue_is_refused(make: Make, order: permits.QueueOrder) -> None:
    subject = make(2, queue_limit=1, queue_order=order)
    held = subject.exhaust()
    queued = await enqueue(subject, 1)
    refused = await result(subject.wait_async(2))
    assert refused.reason == "queue_full"
    await settle()
    assert not queued.done()  # nobody was evicted for a request that could never fit
    subject.restore(held)
    assert (await result(queued)).acquired


async def test_the_queue_limit_counts_permits_not_requests(make: Make) -> None:
    subject = make(2, queue_limit=3)
    held = subject.exhaust()
    two = await enqueue(subject, 2)
    refused = await result(subject.wait_async(2))  # 2 + 2 > 3
    assert refused.reason == "queue_full"
    one = await enqueue(subject, 1)  # 2 + 1 == 3 fits
    assert not one.done()
    assert subject.statistics().current_queued_count == 3
    subject.restore(held)
    granted = await result(two)
    assert granted.acquired
    subject.restore(granted)
    assert (await result(one)).acquired


async def test_oldest_first_lets_nobody_pass_the_queue(make: Make) -> None:
    subject = make(2, queue_limit=2, queue_order=OLDEST)
    held = subject.acquire(1)
    big = await enqueue(subject, 2)
    refused = subject.acquire(1)  # a permit is free, but a request waits ahead
    assert not refused.acquired
    assert refused.reason == "limit_reached"
    assert subject.available_permits() == 1
    subject.restore(held)
    assert (await result(big)).acquired


async def test_newest_first_lets_a_new_request_pass_the_queue(make: Make) -> None:
    subject = make(2, queue_limit=2, queue_order=NEWEST)
    held = subject.acquire(1)
    big = await enqueue(subject, 2)
    small = subject.acquire(1)
    assert small.acquired
    assert not big.done()
    subject.restore(held, small)
    assert (await result(big)).acquired


async def test_room_comes_back_once_the_queue_is_served(make: Make) -> None:
    subject = make(1, queue_limit=1)
    held = subject.exhaust()
    queued = await enqueue(subject)
    assert (await result(subject.wait_async())).reason == "queue_full"
    subject.restore(held)
    lease = await result(queued)
    assert lease.acquired
    again = await enqueue(subject)
    assert not again.done()
    assert subject.statistics().current_queued_count == 1
    subject.restore(lease)
    assert (await result(again)).acquired


async def test_one_restore_serves_every_waiter_that_fits(make: Make) -> None:
    subject = make(2, queue_limit=2)
    held = subject.exhaust()
    first = await enqueue(subject)
    second = await enqueue(subject)
    subject.restore(held)
    assert (await result(first)).acquired
    assert (await result(second)).acquired
    assert stats(subject) == (0, 0, 3, 0)


async def test_zero_permit_requests_pass_the_queue_while_a_permit_is_available(make: Make) -> None:
    subject = make(2, queue_limit=2, queue_order=OLDEST)
    held = subject.acquire(1)
    big = await enqueue(subject, 2)  # waits: only 1 available
    assert subject.acquire(0).acquired
    probe = await result(subject.wait_async(0))
    assert probe.acquired and probe.permit_count == 0
    assert subject.statistics().current_queued_count == 2
    subject.restore(held)
    assert (await result(big)).acquired


async def test_a_zero_permit_waiter_holds_no_room_in_the_queue(make: Make) -> None:
    subject = make(1, queue_limit=1)
    held = subject.exhaust()
    probe = await enqueue(subject, 0)
    waiting = await enqueue(subject, 1)
    assert not waiting.done()
    assert subject.statistics().current_queued_count == 1
    subject.restore(held)
    assert (await result(probe)).acquired
    assert (await result(waiting)).acquired


async def test_the_largest_limits_do_not_overflow_oldest_first(make: Make) -> None:
    subject = make(MAX_INT32, queue_limit=MAX_INT32, queue_order=OLDEST)
    held = subject.exhaust()
    first = await enqueue(subject, 3)
    second = await enqueue(subject, MAX_INT32 - 3)
    assert subject.statistics().current_queued_count == MAX_INT32
    assert (await result(subject.wait_async(1))).reason == "queue_full"
    subject.restore(held)
    assert (await result(first)).acquired
    assert (await result(second)).acquired
    assert stats(subject)[:2] == (0, 0)


async def test_the_largest_limits_do_not_overflow_newest_first(make: Make) -> None:
    subject = make(MAX_INT32, queue_limit=MAX_INT32, queue_order=NEWEST)
    held = subject.exhaust()
    first = await enqueue(subject, 3)
    second = await enqueue(subject, MAX_INT32 - 3)
    third = await enqueue(subject, 1)  # pushes the oldest out
    assert (await result(first)).reason == "evicted"
    assert subject.statistics().current_queued_count == MAX_INT32 - 2
    subject.restore(held)
    assert (await result(third)).acquired
    assert (await result(second)).acquired
    assert stats(subject)[:2] == (2, 0)
