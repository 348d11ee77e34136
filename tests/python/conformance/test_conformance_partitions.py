"""Every plain implementation as the limiter of a ``Partition.custom`` partition of a general
``PartitionedLimiter``: one limiter per key, keys independent."""

from __future__ import annotations

from collections.abc import Hashable

import pytest

import permits
from permits import Partition, PartitionedLimiter

from _support import enqueue, result, stats
from subjects import IDLE_TIMEOUT, Make, Subject, needs

pytestmark = needs("plain")


def _partitioned(
    make: Make, clock: permits.ManualClock, limit: int, **queue: int
) -> tuple[PartitionedLimiter, list[Subject]]:
    """A PartitionedLimiter whose every key gets a new limiter of the implementation; the
    subjects made for the keys, in order."""
    built: list[Subject] = []

    def factory(key: Hashable) -> permits.RateLimiter:
        built.append(make(limit, **queue))
        limiter: permits.RateLimiter = built[-1].limiter
        return limiter

    limiter = PartitionedLimiter(lambda r: Partition.custom(r, factory), idle_timeout=IDLE_TIMEOUT, clock=clock)
    return limiter, built


def _key(subject: Subject, limiter: PartitionedLimiter, key: str) -> Subject:
    """One key of the partitioned limiter, with the implementation's way of restoring permits."""
    return Subject(subject.implementation, subject.clock, subject.limit, limiter, key)


def test_two_keys_are_independent(make: Make, clock: permits.ManualClock) -> None:
    limiter, built = _partitioned(make, clock, 2)
    a = limiter.acquire("a", 2)
    assert a.acquired
    refused = limiter.acquire("a")
    assert refused.reason == "limit_reached"
    b = limiter.acquire("b", 2)
    assert b.acquired  # a's limit is a's alone
    assert len(built) == 2
    sa, sb = _key(built[0], limiter, "a"), _key(built[1], limiter, "b")
    assert stats(sa) == (0, 0, 1, 1)
    assert stats(sb) == (0, 0, 1, 0)
    sa.restore(a)
    assert sa.available_permits() == 2
    sb.restore(b)
    assert stats(sb) == (2, 0, 1, 0)


def test_each_key_gets_its_limiter_once(make: Make, clock: permits.ManualClock) -> None:
    limiter, built = _partitioned(make, clock, 1)
    for _ in range(3):
        lease = limiter.acquire("a")
        _key(built[0], limiter, "a").restore(lease)
    limiter.statistics("a")
    assert len(built) == 1
    assert limiter.statistics("a").total_successful_leases == 3


@needs("queues")
async def test_a_wait_in_one_key_does_not_hold_up_another(make: Make, clock: permits.ManualClock) -> None:
    limiter, built = _partitioned(make, clock, 1, queue_limit=1)
    held = limiter.acquire("a")
    waiting = await enqueue(_key(built[0], limiter, "a"))
    assert limiter.statistics("a").current_queued_count == 1
    other = await result(limiter.wait_async("b"))
    assert other.acquired
    _key(built[0], limiter, "a").restore(held)
    assert (await result(waiting)).acquired


async def test_close_closes_every_keys_limiter(make: Make, clock: permits.ManualClock) -> None:
    limiter, built = _partitioned(make, clock, 1)
    leases = [limiter.acquire(key) for key in ("a", "b")]
    assert all(leases)
    await limiter.aclose()
    for subject in built:
        with pytest.raises(permits.LimiterClosedError):
            subject.acquire()
    with pytest.raises(permits.LimiterClosedError):
        limiter.acquire("a")
