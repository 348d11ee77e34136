"""The blocking ``wait``: granted at once, queued until permits come back, timed out on the
limiter's clock (a ``ManualClock`` here: no wall-clock wait)."""

from __future__ import annotations

import pytest

from _support import start_waiter, stats
from subjects import Implementation, Make, Subject, needs


def _with_room(make: Make, implementation: Implementation, limit: int) -> Subject:
    """A subject whose waits may wait: room for one request in the queue, if it has one."""
    return make(limit, queue_limit=1) if "queues" in implementation.caps else make(limit)


def test_wait_grants_at_once_when_permits_are_available(make: Make) -> None:
    subject = make(2)
    lease = subject.wait(2)
    assert lease.acquired and lease.permit_count == 2
    assert stats(subject) == (0, 0, 1, 0)
    subject.restore(lease)
    assert subject.wait(1, timeout=0).acquired


def test_wait_with_a_zero_timeout_fails_with_timeout(make: Make, implementation: Implementation) -> None:
    subject = _with_room(make, implementation, 1)
    held = subject.exhaust()
    lease = subject.wait(1, timeout=0)
    assert not lease.acquired
    assert lease.reason == "timeout"
    assert lease.permit_count == 1
    assert lease.retry_after is None
    assert subject.statistics().current_queued_count == 0
    subject.restore(held)
    assert subject.wait(1, timeout=0).acquired


def test_a_timeout_is_not_a_failed_lease(make: Make, implementation: Implementation) -> None:
    subject = _with_room(make, implementation, 1)
    _held = subject.exhaust()
    assert subject.wait(1, timeout=0).reason == "timeout"
    assert stats(subject)[1:] == (0, 1, 0)


@pytest.mark.parametrize("timeout", [-1.0, float("nan"), float("-inf")])
def test_a_bad_timeout_is_a_value_error(make: Make, timeout: float) -> None:
    subject = make(1)
    _held = subject.exhaust()
    with pytest.raises(ValueError, match="timeout"):
        subject.wait(1, timeout=timeout)
    assert stats(subject) == (0, 0, 1, 0)


@needs("queues")
def test_a_blocking_wait_is_granted_when_permits_come_back(make: Make) -> None:
    subject = make(1, queue_limit=1)
    held = subject.exhaust()
    waiter = start_waiter(subject, 1, queued_after=1)
    subject.restore(held)
    lease = waiter.outcome()
    assert lease.acquired
    assert stats(subject) == (0, 0, 2, 0)
    subject.restore(lease)


@needs("queues")
def test_a_blocking_wait_times_out_on_the_limiters_clock(make: Make) -> None:
    subject = make(1, queue_limit=1)
    held = subject.exhaust()
    waiter = start_waiter(subject, 1, queued_after=1, timeout=6.0)
    subject.clock.advance(5.0)  # not yet (and nothing has come back: the recovery time is longer)
    assert subject.statistics().current_queued_count == 1  # advance() did the due work already
    subject.clock.advance(1.0)
    lease = waiter.outcome()
    assert not lease.acquired
    assert lease.reason == "timeout"
    assert lease.retry_after is None
    assert stats(subject)[1:] == (0, 1, 0)  # left the queue; not a failed lease
    subject.restore(held)
    assert subject.available_permits() == 1


@needs("queues")
def test_a_blocking_wait_on_a_full_queue_is_refused_at_once(make: Make) -> None:
    subject = make(1, queue_limit=1)
    held = subject.exhaust()
    waiter = start_waiter(subject, 1, queued_after=1)
    refused = subject.wait(1)
    assert refused.reason == "queue_full"
    subject.restore(held)
    assert waiter.outcome().acquired


@needs("queues", "close_fails_waiters")
def test_close_ends_a_blocking_wait(make: Make) -> None:
    subject = make(1, queue_limit=1)
    held = subject.exhaust()
    waiter = start_waiter(subject, 1, queued_after=1)
    subject.close()
    lease = waiter.outcome()
    assert not lease.acquired
    assert lease.reason == "closed"
    assert lease.retry_after is None
    held.release()
