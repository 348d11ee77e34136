"""reconfigure() on a shared-memory store's named limiters: the new amounts are the segment's, so
every process decides with them from its next decision on, and a process opening the name later
takes them over the ones it asks for. The state is kept as an engine limiter keeps it. Concurrency
limiters and per-key tables refuse: their permits are counted from the limit they were made with."""

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


@pytest.mark.parametrize("spec", [permits.specs.Concurrency(10)], ids=["concurrency"])
def test_a_shared_concurrency_limiter_refuses_and_keeps_its_limit(segment_name: str, spec: Any) -> None:
    store = SharedMemoryStore(segment_name, clock=permits.ManualClock())
    limiter = store.limiter("api", spec)
    with pytest.raises(NotImplementedError, match="shared-memory store cannot be reconfigured"):
        limiter.reconfigure(permits.specs.Concurrency(5))
    assert limiter.spec == spec
    assert granted(limiter, 11) == 10


def test_a_per_key_table_refuses(segment_name: str) -> None:
    keyed = SharedMemoryStore(segment_name, clock=permits.ManualClock()).partitioned("10/hour", name="keys")
    with pytest.raises(NotImplementedError):
        keyed.reconfigure("5/hour")
    assert len([lease for lease in (keyed.acquire("a") for _ in range(11)) if lease]) == 10
