"""``acquire_async`` and ``wait_async``: awaited, as ``async with``, in tasks."""

from __future__ import annotations

import asyncio

import pytest

from _support import enqueue, result, settle, spawn, stats
from subjects import Make, needs


async def test_acquire_async_grants_at_once(make: Make) -> None:
    subject = make(2)
    lease = await result(subject.acquire_async(2))
    assert lease.acquired and lease.permit_count == 2
    assert subject.available_permits() == 0
    subject.restore(lease)


async def test_acquire_async_never_queues(make: Make) -> None:
    subject = make(1)
    held = subject.exhaust()
    failed = await result(subject.acquire_async())
    assert not failed.acquired
    assert failed.reason == "limit_reached"
    assert stats(subject)[1:] == (0, 1, 1)
    subject.restore(held)


@needs("queues")
async def test_acquire_async_never_queues_even_with_queue_room(make: Make) -> None:
    subject = make(1, queue_limit=5)
    held = subject.exhaust()
    failed = await result(subject.acquire_async())
    assert failed.reason == "limit_reached"
    assert subject.statistics().current_queued_count == 0
    subject.restore(held)


async def test_acquire_async_as_async_with(make: Make) -> None:
    subject = make(2)
    async with subject.acquire_async(2) as lease:
        assert lease.acquired and lease.permit_count == 2
        assert subject.available_permits() == 0
    assert subject.available_permits() == (2 if subject.has("releases") else 0)


@needs("refunds")
async def test_acquire_async_cancelled_before_it_runs_gives_its_grant_back(make: Make) -> None:
    subject = make(2)
    task = asyncio.ensure_future(subject.acquire_async(2))  # the attempt is made here, granted
    task.cancel()  # before the task's first step: nobody gets the lease
    with pytest.raises(asyncio.CancelledError):
        await task
    assert subject.available_permits() == 2
    lease = subject.acquire(2)
    assert lease
    subject.restore(lease)


async def test_a_wait_async_never_awaited_takes_nothing(make: Make) -> None:
    subject = make(2)
    wait = subject.wait_async(2)
    wait.close()
    del wait
    assert stats(subject) == (2, 0, 0, 0)


async def test_wait_async_grants_at_once_when_permits_are_available(make: Make) -> None:
    subject = make(2)
    lease = await result(subject.wait_async(2))
    assert lease.acquired and lease.permit_count == 2
    assert stats(subject) == (0, 0, 1, 0)
    subject.restore(lease)


async def test_wait_async_as_async_with_releases_on_exit(make: Make) -> None:
    subject = make(2)
    async with subject.wait_async(2) as lease:
        assert lease.acquired
        assert subject.available_permits() == 0
    assert subject.available_permits() == (2 if subject.has("releases") else 0)


async def test_wait_async_as_async_with_releases_on_an_exception(make: Make) -> None:
    subject = make(1)
    with pytest.raises(KeyError):
        async with subject.wait_async() as lease:
            assert lease.acquired
            raise KeyError("boom")
    assert subject.available_permits() == (1 if subject.has("releases") else 0)


async def test_wait_async_runs_as_a_task(make: Make) -> None:
    subject = make(2)
    first = asyncio.ensure_future(subject.wait_async())
    second = spawn(subject.wait_async())
    leases = await result(asyncio.gather(first, second))
    assert all(leases)
    assert subject.available_permits() == 0
    subject.restore(*leases)


async def test_zero_permit_wait_async_with_availability(make: Make) -> None:
    subject = make(1)
    lease = await result(subject.wait_async(0))
    assert lease.acquired and lease.permit_count == 0
    assert subject.available_permits() == 1


@needs("queues")
async def test_wait_async_waits_until_permits_come_back(make: Make) -> None:
    subject = make(2, queue_limit=2)
    held = subject.exhaust()
    waiting = await enqueue(subject, 2)
    assert not waiting.done()
    assert subject.statistics().current_queued_count == 2
    subject.restore(held)
    lease = await result(waiting)
    assert lease.acquired and lease.permit_count == 2
    assert stats(subject) == (0, 0, 2, 0)
    subject.restore(lease)


@needs("queues")
async def test_async_with_waits_in_the_queue(make: Make) -> None:
    subject = make(1, queue_limit=1)
    held = subject.exhaust()
    entered = asyncio.Event()

    async def user() -> bool:
        async with subject.wait_async() as lease:
            entered.set()
            return bool(lease.acquired)

    task = spawn(user())
    await settle()
    assert not entered.is_set()
    assert subject.statistics().current_queued_count == 1
    subject.restore(held)
    assert await result(task)
    assert subject.available_permits() == (1 if subject.has("releases") else 0)


@needs("queues")
async def test_async_with_yields_a_refused_wait_without_raising(make: Make) -> None:
    subject = make(1, queue_limit=0)
    held = subject.exhaust()
    async with subject.wait_async() as lease:
        assert not lease.acquired
        assert lease.reason == "queue_full"
        assert lease.permit_count == 1
        if subject.has("timed"):
            assert lease.retry_after == pytest.approx(subject.recovery)
        else:
            assert lease.retry_after is None
    assert stats(subject)[1:] == (0, 1, 1)
    subject.restore(held)


@needs("queues")
async def test_a_zero_permit_wait_waits_for_a_permit_and_takes_none(make: Make) -> None:
    subject = make(1, queue_limit=0)
    held = subject.exhaust()
    probe = await enqueue(subject, 0)
    assert not probe.done()
    assert subject.statistics().current_queued_count == 0  # it holds no room in the queue
    subject.restore(held)
    lease = await result(probe)
    assert lease.acquired and lease.permit_count == 0
    assert subject.available_permits() == 1
