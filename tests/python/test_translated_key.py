"""keyed.with_translated_key(fn) (.NET's WithTranslatedKey; issue 42, item 6): one keyed limiter's
state seen through a key mapping, sharing its partitions. Exact counts on a ManualClock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import permits
from permits import LimiterClosedError, ManualClock, Partition, PartitionedLimiter, specs
from permits.translated import TranslatedKeyLimiter


def keyed_limiters(clock: ManualClock) -> dict[str, Any]:
    return {
        "per_key": PartitionedLimiter.per_key(specs.FixedWindow(3, 1.0), clock=clock, name="users"),
        "partitioned": PartitionedLimiter(lambda k: Partition.of(k, specs.FixedWindow(3, 1.0)), clock=clock),
        "chain": permits.chain(
            PartitionedLimiter.per_key(specs.FixedWindow(3, 1.0), clock=clock), permits.ConcurrencyLimiter(100)
        ),
    }


@pytest.mark.parametrize("how", ["per_key", "partitioned", "chain"])
def test_translated_keys_share_one_state(how: str) -> None:
    clock = ManualClock()
    users = keyed_limiters(clock)[how]
    folded = users.with_translated_key(str.casefold)
    assert isinstance(folded, TranslatedKeyLimiter) and isinstance(folded, permits.KeyedRateLimiter)
    assert folded.acquire("Alice", 2)
    assert folded.available_permits("ALICE") == 1 == users.available_permits("alice")
    assert users.acquire("alice")  # the original sees the same key
    refused = folded.acquire("aLiCe")
    assert not refused and refused.reason == "limit_reached"
    assert folded.acquire("Bob", 3)  # another key
    assert folded.statistics("BOB").current_available_permits == 0
    assert folded.partition_count == users.partition_count
    clock.advance(1.0)
    assert folded.acquire("ALICE", 3)


def test_a_wait_goes_into_the_translated_keys_queue() -> None:
    clock = ManualClock()
    users = PartitionedLimiter.per_key(Partition.of(None, specs.FixedWindow(1, 1.0), queue_limit=2), clock=clock)
    folded = users.with_translated_key(str.lower)

    async def run() -> None:
        assert folded.acquire("X")
        waiting = asyncio.ensure_future(folded.wait_async("x"))
        await asyncio.sleep(0)
        assert users.statistics("x").current_queued_count == 1
        clock.advance(1.0)
        assert (await asyncio.wait_for(waiting, 5.0)).acquired

    asyncio.run(run())


def test_closing_the_view_leaves_the_limiter_open() -> None:
    clock = ManualClock()
    users = PartitionedLimiter.per_key("3/second", clock=clock)
    view = users.with_translated_key(str.casefold)
    view.close()
    with pytest.raises(LimiterClosedError):
        view.acquire("a")
    assert users.acquire("a")


def test_a_mapping_that_raises_takes_nothing() -> None:
    clock = ManualClock()
    users = PartitionedLimiter.per_key(specs.FixedWindow(3, 1.0), clock=clock)

    def strict(name: object) -> object:
        if not isinstance(name, str):
            raise TypeError(f"user names are str, got {type(name).__name__}")
        return name.casefold()

    view = users.with_translated_key(strict)
    with pytest.raises(TypeError, match="user names are str"):
        view.acquire(42)
    assert users.partition_count == 0


def test_bad_arguments() -> None:
    users = PartitionedLimiter.per_key("3/second")
    with pytest.raises(TypeError, match="translate must be callable"):
        users.with_translated_key("casefold")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"limiter must be a permits\.KeyedRateLimiter"):
        TranslatedKeyLimiter(permits.ConcurrencyLimiter(1), str)  # type: ignore[arg-type]


def test_a_view_of_a_view_maps_twice() -> None:
    users = PartitionedLimiter.per_key(specs.FixedWindow(2, 1.0), clock=ManualClock())
    by_domain = users.with_translated_key(lambda email: email.split("@")[1]).with_translated_key(str.lower)
    assert by_domain.acquire("A@Example.org") and by_domain.acquire("b@Example.org")
    assert not by_domain.acquire("c@Example.org")
    assert users.available_permits("example.org") == 0  # lowered first (the outer view), then split
