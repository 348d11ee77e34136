"""reconfigure() on a shared-memory store's named limiters: the new amounts are the segment's, so
every process decides with them from its next decision on, and a process opening the name later
takes them over the ones it asks for. The state is kept as an engine limiter keeps it; a per-key
table's every key, present and future, follows; a concurrency limiter's held permits stay held."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import permits
from permits.shm import SharedMemoryStore

import _shm_workers as workers

#: The time-based kinds at a limit, with a window no test outlives.
TIMED: dict[str, Any] = {
    "token_bucket": lambda limit: permits.specs.TokenBucket(limit, limit, 60.0),
    "fixed_window": lambda limit: permits.specs.FixedWindow(limit, 60.0),
    "sliding_window": lambda limit: permits.specs.SlidingWindow(limit, 60.0, 4),
    "sliding_log": lambda limit: permits.specs.SlidingLog(limit, 60.0),
    "sliding_window_counter": lambda limit: permits.specs.SlidingWindowCounter(limit, 60.0),
}
#: What each kind calls its limit.
LIMIT = {kind: "token_limit" if kind == "token_bucket" else "permit_limit" for kind in TIMED}


def granted(limiter: Any, attempts: int) -> int:
    return len([lease for lease in (limiter.acquire() for _ in range(attempts)) if lease])


def two(segment_name: str, spec: Any) -> tuple[Any, Any, permits.ManualClock]:
    """The same named limiter in two stores of one segment (as two processes open it)."""
    clock = permits.ManualClock()
    first = SharedMemoryStore(segment_name, clock=clock).limiter("api", spec)
    second = SharedMemoryStore(segment_name, clock=clock).limiter("api", spec)
    return first, second, clock


@pytest.mark.parametrize("kind", list(TIMED))
def test_a_lower_limit_set_through_one_store_holds_in_the_other(segment_name: str, kind: str) -> None:
    mine, theirs, clock = two(segment_name, TIMED[kind](10))
    assert granted(mine, 4) == 4
    mine.reconfigure(TIMED[kind](5))
    # What was taken stays taken under the new limit (a token bucket keeps its tokens up to it).
    assert granted(theirs, 10) == (5 if kind == "token_bucket" else 1)
    assert theirs.spec == TIMED[kind](5)
    assert getattr(theirs, LIMIT[kind]) == 5
    assert isinstance(theirs, type(TIMED[kind](5))._limiter_type)
    clock.advance(200.0)
    assert granted(theirs, 10) == 5
    theirs.reconfigure(TIMED[kind](8))
    assert mine.spec == TIMED[kind](8) and getattr(mine, LIMIT[kind]) == 8


def test_a_token_buckets_rate_reaches_the_other_store(segment_name: str) -> None:
    mine, theirs, clock = two(segment_name, permits.specs.TokenBucket(10, 10, 1.0))
    mine.reconfigure(permits.specs.TokenBucket(4, 1, 1.0))
    assert theirs.tokens_per_period == 1
    assert granted(theirs, 10) == 4
    clock.advance(1.0)
    assert granted(theirs, 10) == 1


@pytest.mark.parametrize("kind", list(TIMED))
def test_a_store_opened_later_takes_the_segments_limit_over_its_own(segment_name: str, kind: str) -> None:
    clock = permits.ManualClock()
    first = SharedMemoryStore(segment_name, clock=clock).limiter("api", TIMED[kind](10))
    first.reconfigure(TIMED[kind](3))
    later = SharedMemoryStore(segment_name, clock=clock).limiter("api", TIMED[kind](10))
    assert later.spec == TIMED[kind](3)
    assert granted(later, 10) == 3


def test_another_window_is_still_another_limiter(segment_name: str) -> None:
    clock = permits.ManualClock()
    first = SharedMemoryStore(segment_name, clock=clock).limiter("api", permits.specs.FixedWindow(10, 60.0))
    first.reconfigure(permits.specs.FixedWindow(3, 60.0))
    with pytest.raises(ValueError, match="has window=60s, not window=30s"):
        SharedMemoryStore(segment_name, clock=clock).limiter("api", permits.specs.FixedWindow(3, 30.0))
    with pytest.raises(ValueError, match="keeps its window"):
        first.reconfigure(permits.specs.FixedWindow(3, 30.0))
    assert first.spec == permits.specs.FixedWindow(3, 60.0)


def test_never_reconfigured_another_limit_is_still_refused(segment_name: str) -> None:
    clock = permits.ManualClock()
    SharedMemoryStore(segment_name, clock=clock).limiter("api", permits.specs.FixedWindow(10, 60.0))
    with pytest.raises(ValueError, match="has permit_limit=10, not permit_limit=5"):
        SharedMemoryStore(segment_name, clock=clock).limiter("api", permits.specs.FixedWindow(5, 60.0))


def test_another_process_sets_the_limit_for_this_one(segment_name: str) -> None:
    limiter = SharedMemoryStore(segment_name).limiter("api", "10/hour")
    assert granted(limiter, 4) == 4
    spec, available = workers.in_spawned_process(workers.reconfigure_named, segment_name, "10/hour", "6/hour")
    assert spec == permits.specs.parse("6/hour") and available == 2
    assert granted(limiter, 10) == 2
    assert limiter.spec == permits.specs.parse("6/hour")


def test_a_queue_of_another_store_is_served_under_a_raised_limit(segment_name: str) -> None:
    clock = permits.ManualClock()
    mine = SharedMemoryStore(segment_name, clock=clock).limiter("api", permits.specs.FixedWindow(2, 60.0))
    theirs = SharedMemoryStore(segment_name, clock=clock).limiter(
        "api", permits.specs.FixedWindow(2, 60.0), queue_limit=10
    )
    assert granted(mine, 2) == 2

    async def main() -> None:
        async def one() -> permits.Lease:
            return await theirs.wait_async(1)

        tasks = [asyncio.create_task(one()) for _ in range(3)]
        for _ in range(3):
            await asyncio.sleep(0)
        assert theirs.statistics().current_queued_count == 3
        mine.reconfigure(permits.specs.FixedWindow(4, 60.0))
        theirs.available_permits()  # its next look takes the new limit on and serves its queue
        first, second = await asyncio.wait_for(asyncio.gather(*tasks[:2]), 10)
        assert first and second
        assert not tasks[2].done() and theirs.statistics().current_queued_count == 1
        tasks[2].cancel()

    asyncio.run(main())


def test_a_shared_concurrency_limit_raised_or_lowered_holds_in_every_store(segment_name: str) -> None:
    mine, theirs, _ = two(segment_name, permits.specs.Concurrency(3))
    held = [theirs.acquire() for _ in range(3)]
    assert all(held) and not mine.acquire()
    mine.reconfigure(permits.specs.Concurrency(5))
    assert theirs.spec == permits.specs.Concurrency(5) and theirs.permit_limit == 5
    more = [theirs.acquire() for _ in range(3)]
    assert [bool(lease) for lease in more] == [True, True, False]
    theirs.reconfigure(permits.specs.Concurrency(2))  # 5 held of 2: they stay held
    assert mine.permit_limit == 2 and mine.available_permits() == 0
    for lease in [*held, more[0]]:  # 4 of the 5 back
        lease.release()
    assert mine.available_permits() == 1  # 1 held of 2
    assert mine.acquire() and not theirs.acquire()


def test_a_store_opened_later_takes_the_shared_concurrency_limit_over_its_own(segment_name: str) -> None:
    clock = permits.ManualClock()
    first = SharedMemoryStore(segment_name, clock=clock).limiter("api", permits.specs.Concurrency(4))
    held = first.acquire(4)
    with pytest.raises(ValueError, match="has permit_limit=4, not permit_limit=2"):
        SharedMemoryStore(segment_name, clock=clock).limiter("api", permits.specs.Concurrency(2))
    first.reconfigure(permits.specs.Concurrency(1))  # 4 held of 1: no damage to a later opener
    for own in (4, 1, 9):
        later = SharedMemoryStore(segment_name, clock=clock).limiter("api", permits.specs.Concurrency(own))
        assert later.spec == permits.specs.Concurrency(1) and later.available_permits() == 0
    held.release()
    assert later.available_permits() == 1


def test_another_process_sets_the_shared_concurrency_limit_for_this_one(segment_name: str) -> None:
    limiter = SharedMemoryStore(segment_name).limiter("api", permits.specs.Concurrency(2))
    held = limiter.acquire(2)
    spec, available = workers.in_spawned_process(workers.reconfigure_concurrency, segment_name, 2, 5)
    assert spec == permits.specs.Concurrency(5) and available == 3
    assert limiter.acquire(3) and not limiter.acquire()
    assert limiter.permit_limit == 5
    held.release()


def test_a_per_key_concurrency_limit_keeps_every_keys_held_permits(segment_name: str) -> None:
    clock = permits.ManualClock()
    mine = SharedMemoryStore(segment_name, clock=clock).partitioned(permits.specs.Concurrency(2), name="held")
    theirs = SharedMemoryStore(segment_name, clock=clock).partitioned(permits.specs.Concurrency(2), name="held")
    first = theirs.acquire("a", 2)
    mine.reconfigure(permits.specs.Concurrency(3))
    assert theirs.spec == permits.specs.Concurrency(3)
    second = theirs.acquire("a")
    assert second and not theirs.acquire("a") and mine.available_permits("b") == 3
    theirs.reconfigure(permits.specs.Concurrency(1))  # 3 held of 1: they stay held
    assert mine.available_permits("a") == 0
    first.release()
    assert not mine.acquire("a")
    second.release()
    assert mine.acquire("a")


# ---- per-key tables: every key, present and future, of every process ----


def two_keyed(segment_name: str, spec: Any, **options: Any) -> tuple[Any, Any, permits.ManualClock]:
    clock = permits.ManualClock()
    first = SharedMemoryStore(segment_name, clock=clock).partitioned(spec, name="keys", **options)
    second = SharedMemoryStore(segment_name, clock=clock).partitioned(spec, name="keys", **options)
    return first, second, clock


def granted_of(keyed: Any, key: str, attempts: int) -> int:
    return len([lease for lease in (keyed.acquire(key) for _ in range(attempts)) if lease])


@pytest.mark.parametrize("kind", list(TIMED))
def test_a_lower_limit_for_every_key_holds_in_the_other_store(segment_name: str, kind: str) -> None:
    mine, theirs, clock = two_keyed(segment_name, TIMED[kind](10))
    assert granted_of(theirs, "a", 4) == 4
    mine.reconfigure(TIMED[kind](5))
    assert theirs.spec == TIMED[kind](5)
    # What a key took stays taken (a token bucket keeps its tokens up to the new limit).
    assert granted_of(theirs, "a", 10) == (5 if kind == "token_bucket" else 1)
    assert granted_of(theirs, "new", 10) == 5
    with pytest.raises(ValueError, match="permit_count"):
        theirs.acquire("other", 6)
    clock.advance(200.0)
    assert granted_of(theirs, "a", 10) == 5
    theirs.reconfigure(TIMED[kind](8))
    assert mine.spec == TIMED[kind](8)
    assert granted_of(mine, "a", 10) == (0 if kind == "token_bucket" else 3)  # (tokens come with time)


def test_a_token_buckets_rate_reaches_every_key_of_the_other_store(segment_name: str) -> None:
    mine, theirs, clock = two_keyed(segment_name, permits.specs.TokenBucket(10, 10, 1.0))
    mine.reconfigure(permits.specs.TokenBucket(4, 1, 1.0))
    assert theirs.spec == permits.specs.TokenBucket(4, 1, 1.0)
    assert granted_of(theirs, "a", 10) == 4
    clock.advance(1.0)
    assert granted_of(theirs, "a", 10) == 1


@pytest.mark.parametrize("kind", list(TIMED))
def test_a_store_opened_later_takes_the_tables_limit_over_its_own(segment_name: str, kind: str) -> None:
    clock = permits.ManualClock()
    first = SharedMemoryStore(segment_name, clock=clock).partitioned(TIMED[kind](10), name="keys")
    assert granted_of(first, "a", 1) == 1
    with pytest.raises(ValueError, match=r"(permit|token)_limit"):  # never changed: refused, as before
        SharedMemoryStore(segment_name, clock=clock).partitioned(TIMED[kind](4), name="keys")
    first.reconfigure(TIMED[kind](3))
    for own in (10, 3, 30):
        later = SharedMemoryStore(segment_name, clock=clock).partitioned(TIMED[kind](own), name="keys")
        assert later.spec == TIMED[kind](3)
        # (a token bucket's 9 tokens read up to the new limit)
        assert later.available_permits("a") == (3 if kind == "token_bucket" else 2)
        assert later.available_permits("b") == 3


def test_another_window_is_refused_for_a_per_key_table_and_nothing_changes(segment_name: str) -> None:
    mine, theirs, _ = two_keyed(segment_name, permits.specs.SlidingWindow(10, 60.0, 4))
    with pytest.raises(ValueError, match="keeps its window"):
        mine.reconfigure(permits.specs.SlidingWindow(10, 30.0, 4))
    with pytest.raises(ValueError, match="segments"):
        mine.reconfigure(permits.specs.SlidingWindow(10, 60.0, 6))
    with pytest.raises(TypeError, match="SlidingWindow"):
        mine.reconfigure(permits.specs.FixedWindow(10, 60.0))
    assert theirs.spec == permits.specs.SlidingWindow(10, 60.0, 4)
    assert granted_of(theirs, "a", 11) == 10


def test_a_waiting_key_of_another_store_fails_when_lowered_and_is_served_when_raised(segment_name: str) -> None:
    clock = permits.ManualClock()
    mine = SharedMemoryStore(segment_name, clock=clock).partitioned(permits.specs.FixedWindow(4, 60.0), name="keys")
    theirs = SharedMemoryStore(segment_name, clock=clock).partitioned(
        permits.Partition.fixed_window(None, permit_limit=4, window=60.0, queue_limit=10), name="keys"
    )
    assert granted_of(mine, "a", 4) == 4

    async def main() -> None:
        big = asyncio.create_task(theirs.wait_async("a", 3))
        small = asyncio.create_task(theirs.wait_async("a", 1))
        for _ in range(3):
            await asyncio.sleep(0)
        assert theirs.statistics("a").current_queued_count == 4
        mine.reconfigure(permits.specs.FixedWindow(2, 60.0))
        theirs.available_permits("a")  # its next look takes the new limit on
        lease = await asyncio.wait_for(big, 10)
        assert not lease and lease.reason == "limit_reached"
        assert not small.done()
        theirs.reconfigure(permits.specs.FixedWindow(5, 60.0))  # raised here: served at once
        assert await asyncio.wait_for(small, 10)

    asyncio.run(main())


def test_another_process_sets_every_keys_limit_for_this_one(segment_name: str) -> None:
    keyed = SharedMemoryStore(segment_name).partitioned("10/hour", name="keys")
    assert granted_of(keyed, "a", 4) == 4
    spec, available = workers.in_spawned_process(workers.reconfigure_keyed, segment_name, "10/hour", "6/hour")
    assert spec == permits.specs.parse("6/hour") and available == 2
    assert granted_of(keyed, "a", 10) == 2 and granted_of(keyed, "b", 10) == 6
    assert keyed.spec == permits.specs.parse("6/hour")
