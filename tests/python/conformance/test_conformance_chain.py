"""Every implementation inside a chain with an engine limiter: all or nothing, whichever refuses."""

from __future__ import annotations

import permits

from _support import enqueue, result, stats
from subjects import Make, needs


def test_a_chain_takes_from_both_and_its_lease_releases_both(make: Make) -> None:
    subject = make(3)
    pool = permits.ConcurrencyLimiter(5)
    chained = subject.chained(after=[pool])
    lease = chained.acquire(2)
    assert lease.acquired and lease.permit_count == 2
    assert subject.available_permits() == 1
    assert pool.available_permits() == 3
    lease.release()
    lease.release()
    assert pool.available_permits() == 5
    assert subject.available_permits() == (3 if subject.has("releases") else 1)


@needs("refunds")
def test_a_refusal_further_on_gives_this_limiters_grant_back(make: Make) -> None:
    subject = make(3)
    blocker = permits.ConcurrencyLimiter(3)
    held = blocker.acquire(3)
    chained = subject.chained(after=[blocker])
    for _ in range(3):
        refused = chained.acquire(2)
        assert not refused.acquired
        assert refused.reason == "limit_reached"
        assert refused.permit_count == 2
    assert subject.available_permits() == 3  # nothing taken by the refused requests
    held.release()
    lease = chained.acquire(3)
    assert lease.acquired
    assert subject.available_permits() == 0
    lease.release()


def test_a_refusal_by_this_limiter_gives_the_earlier_grant_back(make: Make) -> None:
    subject = make(2)
    pool = permits.ConcurrencyLimiter(5)
    chained = subject.chained(before=[pool])
    _held = subject.exhaust()
    refused = chained.acquire(2)
    assert not refused.acquired
    assert refused.reason == "limit_reached"
    assert refused.permit_count == 2
    if subject.has("timed"):
        assert refused.retry_after is not None and refused.retry_after > 0
    else:
        assert refused.retry_after is None
    assert pool.available_permits() == 5
    assert stats(pool) == (5, 0, 1, 0)


async def test_acquire_async_and_wait_async_through_a_chain(make: Make) -> None:
    subject = make(2)
    pool = permits.ConcurrencyLimiter(5)
    chained = subject.chained(before=[pool])
    first = await result(chained.acquire_async(1))
    async with chained.wait_async(1) as second:
        assert first.acquired and second.acquired
        assert subject.available_permits() == 0
        assert pool.available_permits() == 3
        refused = await result(chained.acquire_async(1))
        assert not refused.acquired
        assert pool.available_permits() == 3
    first.release()
    assert pool.available_permits() == 5


@needs("queues")
async def test_a_chain_waits_in_this_limiters_queue(make: Make) -> None:
    subject = make(1, queue_limit=1)
    pool = permits.ConcurrencyLimiter(5)
    chained = subject.chained(before=[pool])
    held = subject.exhaust()
    waiting = await enqueue(chained)
    assert not waiting.done()
    assert subject.statistics().current_queued_count == 1
    assert pool.available_permits() == 4  # taken while the chain waits further on
    subject.restore(held)
    lease = await result(waiting)
    assert lease.acquired
    lease.release()
    assert pool.available_permits() == 5


@needs("queues")
async def test_a_chain_refused_by_this_limiters_full_queue_gives_back(make: Make) -> None:
    subject = make(1, queue_limit=0)
    pool = permits.ConcurrencyLimiter(5)
    chained = subject.chained(before=[pool])
    held = subject.exhaust()
    refused = await result(chained.wait_async())
    assert refused.reason == "queue_full"
    assert pool.available_permits() == 5
    subject.restore(held)
