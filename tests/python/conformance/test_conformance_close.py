"""Closing: later calls raise ``LimiterClosedError``; queued waits end with a failed lease."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import permits

from _support import NEWEST, OLDEST, enqueue, result, settle, spawn
from subjects import Make, Subject, needs


def _calls(subject: Subject) -> list[tuple[str, Callable[[], Any]]]:
    return [
        ("acquire", lambda: subject.acquire()),
        ("wait", lambda: subject.wait(1, timeout=0)),
        ("available_permits", subject.available_permits),
        ("statistics", subject.statistics),
    ]


def _async_calls(subject: Subject) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    return [("acquire_async", lambda: subject.acquire_async()), ("wait_async", lambda: subject.wait_async())]


async def _assert_closed(subject: Subject) -> None:
    for name, call in _calls(subject):
        with pytest.raises(permits.LimiterClosedError):
            call()
            pytest.fail(f"{name} after close")
    for name, make_awaitable in _async_calls(subject):
        with pytest.raises(permits.LimiterClosedError):
            await make_awaitable()
            pytest.fail(f"{name} after close")


async def test_calls_after_close_raise(make: Make) -> None:
    subject = make(2)
    lease = subject.acquire()
    subject.close()
    await _assert_closed(subject)
    lease.release()  # releasing after close is a silent no-op
    subject.close()  # and so is a second close
    assert issubclass(permits.LimiterClosedError, RuntimeError)


async def test_calls_after_aclose_raise(make: Make) -> None:
    subject = make(2)
    await subject.aclose()
    await _assert_closed(subject)
    await subject.aclose()


async def test_closing_closes_the_limiter(make: Make) -> None:
    subject = make(2)
    with contextlib.closing(subject.limiter) as entered:
        assert entered is subject.limiter
        lease = subject.acquire()
        assert lease
    await _assert_closed(subject)
    lease.release()


async def test_aclosing_closes_the_limiter(make: Make) -> None:
    subject = make(2)
    async with contextlib.aclosing(subject.limiter) as entered:
        assert entered is subject.limiter
        assert subject.acquire(0)
    await _assert_closed(subject)


async def test_an_async_with_block_holds_one_permit_and_never_closes(make: Make) -> None:
    subject = make(2)
    limiter = subject.limiter
    if isinstance(limiter, permits.KeyedRateLimiter):  # no permit without a key
        with pytest.raises(TypeError, match=r"wait_async\(key\)"):
            async with limiter:
                pytest.fail("the block must not run")
        assert subject.acquire()
        return
    async with limiter as lease:
        assert lease and lease.permit_count == 1
        other = subject.acquire()
        assert other and not subject.acquire()  # the block holds the first of the two
    other.release()
    subject.statistics()  # still open
    await subject.aclose()


@needs("queues", "close_fails_waiters")
@pytest.mark.parametrize("order", [OLDEST, NEWEST])
async def test_close_ends_queued_waits_with_closed(make: Make, order: permits.QueueOrder) -> None:
    subject = make(1, queue_limit=3, queue_order=order)
    held = subject.exhaust()
    waits = [await enqueue(subject) for _ in range(3)]
    subject.close()
    for wait in waits:
        lease = await result(wait)
        assert not lease.acquired
        assert lease.reason == "closed"
        assert lease.retry_after is None
        assert lease.permit_count == 1
    await _assert_closed(subject)
    held.release()


@needs("queues", "close_fails_waiters")
async def test_aclose_ends_queued_waits_with_closed(make: Make) -> None:
    subject = make(2, queue_limit=2)
    held = subject.exhaust()
    wait = await enqueue(subject, 2)
    await subject.aclose()
    lease = await result(wait)
    assert lease.reason == "closed" and lease.permit_count == 2
    held.release()


@needs("queues", "close_fails_waiters")
async def test_close_after_a_cancellation(make: Make) -> None:
    subject = make(1, queue_limit=2)
    held = subject.exhaust()
    doomed = await enqueue(subject)
    doomed.cancel()
    other = await enqueue(subject)
    subject.close()
    assert (await result(other)).reason == "closed"
    assert doomed.cancelled()
    held.release()


@needs("polls", "releases")  # no retry_after: the wait asks again every 10 ms and sees the close at once
async def test_close_ends_a_polling_wait_with_closed(make: Make) -> None:
    subject = make(1)
    held = subject.exhaust()
    polling = spawn(subject.wait_async())
    await settle()  # it has asked once and pauses before asking again
    subject.close()
    lease = await result(polling)
    assert not lease.acquired
    assert lease.reason == "closed"
    held.release()
