"""Keyed implementations: the subject's key and the others, and the whole limiter's totals."""

from __future__ import annotations

import pytest

import permits

from _support import enqueue, result, stats
from subjects import Make, needs

pytestmark = needs("keyed")


def test_other_keys_are_independent(make: Make) -> None:
    subject = make(2)
    other = subject.with_key(("tenant", "b"))
    held = subject.exhaust()
    assert not subject.acquire()
    assert stats(other) == (2, 0, 0, 0)
    lease = other.acquire(2)
    assert lease
    assert stats(subject) == (0, 0, 1, 1)
    assert stats(other) == (0, 0, 1, 0)
    subject.restore(held, lease)
    assert subject.available_permits() == 2 and other.available_permits() == 2


@needs("queues")
async def test_the_totals_add_up_every_key(make: Make) -> None:
    subject = make(3, queue_limit=2)
    other = subject.with_key(("tenant", "b"))
    assert stats(subject.limiter) == (0, 0, 0, 0)  # no key yet
    first = subject.acquire(2)
    second = other.exhaust()
    assert not other.acquire()
    waiting = await enqueue(other, 2)
    assert stats(subject.limiter) == (1, 2, 2, 1)
    other.restore(second)
    granted = await result(waiting)
    assert granted.acquired
    # The subject's key: 1 left, or all 3 back once the clock moved; the other's: 3 back, 2 taken.
    subject_left = 1 if subject.has("releases") else 3
    assert stats(subject.limiter) == (subject_left + 1, 0, 3, 1)
    subject.restore(first, granted)


@needs("queues")
async def test_close_closes_every_key(make: Make) -> None:
    subject = make(1, queue_limit=1)
    other = subject.with_key(("tenant", "b"))
    held = [subject.exhaust(), other.exhaust()]
    waits = [await enqueue(subject), await enqueue(other)]
    subject.close()
    for wait in waits:
        assert (await result(wait)).reason == "closed"
    for key in (subject, other, subject.with_key("never used")):
        with pytest.raises(permits.LimiterClosedError):
            key.acquire()
    with pytest.raises(permits.LimiterClosedError):
        subject.limiter.statistics()
    for lease in held:
        lease.release()
