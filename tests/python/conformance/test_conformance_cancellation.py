"""Cancelling a queued ``wait_async``: it leaves the queue at once and counts as nothing."""

from __future__ import annotations

import asyncio

import pytest

from _support import NEWEST, cancel_and_wait, enqueue, result, settle, spawn, stats
from subjects import Make, needs

pytestmark = needs("queues")


async def test_a_cancelled_waiter_leaves_the_queue(make: Make) -> None:
    subject = make(1, queue_limit=2)
    held = subject.exhaust()
    doomed = await enqueue(subject)
    waiting = await enqueue(subject)
    assert subject.statistics().current_queued_count == 2
    await cancel_and_wait(doomed)
    assert stats(subject)[1:] == (1, 1, 0)  # a cancellation is not a failed lease
    subject.restore(held)
    lease = await result(waiting)  # the grant goes to the next waiter
    assert lease.acquired
    assert stats(subject) == (0, 0, 2, 0)
    subject.restore(lease)


async def test_the_others_keep_their_places(make: Make) -> None:
    subject = make(1, queue_limit=3)
    held = subject.exhaust()
    tasks = [await enqueue(subject) for _ in range(3)]
    await cancel_and_wait(tasks[1])
    assert subject.statistics().current_queued_count == 2
    subject.restore(held)
    first = await result(tasks[0])
    assert first.acquired
    await settle()
    assert not tasks[2].done()
    subject.restore(first)
    assert (await result(tasks[2])).acquired


async def test_a_cancelled_waiter_gives_its_room_back(make: Make) -> None:
    subject = make(1, queue_limit=1)
    held = subject.exhaust()
    doomed = await enqueue(subject)
    await cancel_and_wait(doomed)
    again = await enqueue(subject)
    assert not again.done()
    assert subject.statistics().current_queued_count == 1
    subject.restore(held)
    assert (await result(again)).acquired


async def test_newest_first_after_a_cancellation_evicts_only_live_waiters(make: Make) -> None:
    subject = make(2, queue_limit=2, queue_order=NEWEST)
    held = subject.exhaust()
    doomed = await enqueue(subject, 1)
    await cancel_and_wait(doomed)
    small = await enqueue(subject, 1)
    big = await enqueue(subject, 2)  # evicts small (the cancelled request holds nothing)
    lost = await result(small)
    assert lost.reason == "evicted"
    assert not big.done()
    assert stats(subject)[1:] == (2, 1, 1)
    subject.restore(held)
    assert (await result(big)).acquired


async def test_a_task_cancelled_before_it_runs_touches_nothing(make: Make) -> None:
    subject = make(1, queue_limit=1)

    async def ask() -> object:
        return await subject.wait_async()

    task = asyncio.ensure_future(ask())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stats(subject) == (1, 0, 0, 0)


async def test_an_asyncio_timeout_leaves_the_queue(make: Make) -> None:
    subject = make(1, queue_limit=1)
    held = subject.exhaust()
    scopes: list[asyncio.Timeout] = []

    async def ask() -> object:
        async with asyncio.timeout(None) as scope:
            scopes.append(scope)
            return await subject.wait_async()

    task = spawn(ask())
    await settle()
    assert subject.statistics().current_queued_count == 1
    scopes[0].reschedule(asyncio.get_running_loop().time())  # due now: no wall-clock wait
    with pytest.raises(TimeoutError):
        await result(task)
    assert stats(subject)[1:] == (0, 1, 0)
    subject.restore(held)
    assert subject.available_permits() == 1


async def test_cancelling_a_zero_permit_waiter(make: Make) -> None:
    subject = make(1, queue_limit=1)
    held = subject.exhaust()
    probe = await enqueue(subject, 0)
    await cancel_and_wait(probe)
    subject.restore(held)
    assert subject.available_permits() == 1
    assert stats(subject)[1:] == (0, 1, 0)
