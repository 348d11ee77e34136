"""``statistics()`` and ``available_permits()``: what every implementation reports."""

from __future__ import annotations

import dataclasses

import pytest

import permits

from _support import enqueue, result, stats
from subjects import Make, needs


def test_a_new_limiter(make: Make) -> None:
    subject = make(5)
    assert stats(subject) == (5, 0, 0, 0)
    assert subject.available_permits() == 5


def test_successes_and_failures_are_counted(make: Make) -> None:
    subject = make(5)
    first = subject.acquire(2)
    assert stats(subject) == (3, 0, 1, 0)
    second = subject.acquire(3)
    assert stats(subject) == (0, 0, 2, 0)
    assert not subject.acquire(1)
    assert not subject.acquire(5)
    assert stats(subject) == (0, 0, 2, 2)
    subject.restore(first, second)
    assert stats(subject) == (5, 0, 2, 2)


def test_zero_permit_requests_are_counted(make: Make) -> None:
    subject = make(1)
    assert subject.acquire(0)
    assert subject.wait(0)
    assert stats(subject) == (1, 0, 2, 0)
    _held = subject.acquire(1)
    assert not subject.acquire(0)
    assert stats(subject) == (0, 0, 3, 1)


async def test_async_requests_are_counted(make: Make) -> None:
    subject = make(2)
    granted = await result(subject.acquire_async())
    waited = await result(subject.wait_async())
    refused = await result(subject.acquire_async())
    assert granted and waited and not refused
    assert stats(subject) == (0, 0, 2, 1)


def test_argument_errors_are_not_counted(make: Make) -> None:
    subject = make(1)
    for bad in (2, -1):
        with pytest.raises(ValueError):
            subject.acquire(bad)
    with pytest.raises(TypeError):
        subject.acquire(1.5)  # type: ignore[arg-type]
    assert stats(subject) == (1, 0, 0, 0)


def test_each_call_returns_a_new_snapshot(make: Make) -> None:
    subject = make(1)
    before = subject.statistics()
    held = subject.acquire()
    after = subject.statistics()
    assert isinstance(before, permits.Statistics)
    assert before is not after
    assert before == permits.Statistics(1, 0, 0, 0)  # not changed by the acquire
    assert after == permits.Statistics(0, 0, 1, 0)
    assert subject.statistics() == after and subject.statistics() is not after
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.total_successful_leases = 7  # type: ignore[misc]
    subject.restore(held)


@needs("queues")
async def test_queued_permits_and_queue_refusals_are_counted(make: Make) -> None:
    subject = make(100, queue_limit=50)
    lease = subject.acquire(60)
    assert stats(subject) == (40, 0, 1, 0)
    queued = await enqueue(subject, 50)
    assert stats(subject) == (40, 50, 1, 0)
    assert (await result(subject.wait_async(1))).reason == "queue_full"
    assert stats(subject) == (40, 50, 1, 1)
    assert not subject.acquire(100)
    assert stats(subject) == (40, 50, 1, 2)
    subject.restore(lease)
    assert (await result(queued)).acquired
    assert stats(subject) == (50, 0, 2, 2)
