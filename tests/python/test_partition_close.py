"""The general PartitionedLimiter closes what it drops: every evicted partition's limiter (as .NET
disposes it), and on aclose() it awaits each partition's aclose().

Errors of those closes never stop the others: ``evict_idle()`` and ``aclose()`` raise an
ExceptionGroup after closing everything; the evictions done on the way (acquire, ...,
``ManualClock.advance``) hand them to ``sys.unraisablehook``. A caller that found a partition
just before its eviction gets its answer from the key's new limiter, never a LimiterClosedError.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

import permits
from permits import Partition, PartitionedLimiter

IDLE = 10.0
PAST_IDLE_NS = int(IDLE * 1e9) + 1_000


class Tracked(permits.RateLimiter):
    """A custom partition limiter: always idle, grants everything, records its closes."""

    def __init__(self, key: Any, fail: bool = False) -> None:
        super().__init__(name=str(key))
        self.key = key
        self.fail = fail
        self.closes = 0
        self.acloses = 0

    def _acquire(self, permit_count: int) -> permits.Lease:
        return permits.Lease.granted(permit_count)

    @property
    def idle_duration(self) -> float | None:
        return 0.0 if self._rl_closed else 3600.0

    def close(self) -> None:
        self.closes += 1
        super().close()
        if self.fail:
            raise RuntimeError(f"close of {self.key}")

    async def aclose(self) -> None:
        self.acloses += 1
        await asyncio.sleep(0)  # a real await: aclose() must be awaited, not called
        super().close()
        if self.fail:
            raise RuntimeError(f"aclose of {self.key}")


class Tracker:
    """Partitions of Tracked limiters (the keys in `failing` raise on close)."""

    def __init__(self, *failing: Any) -> None:
        self.failing = set(failing)
        self.built: list[Tracked] = []

    def __call__(self, key: Any) -> permits.RateLimiter:
        limiter = Tracked(key, key in self.failing)
        self.built.append(limiter)
        return limiter

    def partitioned(self, clock: permits.ManualClock, **kwargs: Any) -> PartitionedLimiter:
        return PartitionedLimiter(lambda r: Partition.custom(r, self), idle_timeout=IDLE, clock=clock, **kwargs)


def engine_partitions(
    clock: permits.ManualClock, built: list[permits.RateLimiter], **kwargs: Any
) -> PartitionedLimiter:
    def make(key: Any) -> permits.RateLimiter:
        limiter = permits.ConcurrencyLimiter(1, queue_limit=1, clock=clock)
        built.append(limiter)
        return limiter

    return PartitionedLimiter(lambda r: Partition.custom(r, make), idle_timeout=IDLE, clock=clock, **kwargs)


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []
    monkeypatch.setattr("sys.unraisablehook", seen.append)
    return seen


def test_evict_idle_closes_every_evicted_limiter(clock: permits.ManualClock) -> None:
    tracker = Tracker()
    limiter = tracker.partitioned(clock)
    for key in "abc":
        assert limiter.acquire(key)
    clock.advance_ns(PAST_IDLE_NS)  # the engine's clock only: nothing evicted yet
    assert [t.closes for t in tracker.built] == [0, 0, 0]
    assert limiter.evict_idle() == 3
    assert [t.closes for t in tracker.built] == [1, 1, 1]
    assert limiter.partition_count == 0


def test_evictions_on_the_way_close_too(clock: permits.ManualClock) -> None:
    tracker = Tracker()
    limiter = tracker.partitioned(clock)
    assert limiter.acquire("a")
    clock.advance_ns(PAST_IDLE_NS)
    assert limiter.acquire("b")  # evicts "a" on the way
    assert tracker.built[0].closes == 1
    clock.advance(IDLE + 1)  # ManualClock.advance evicts too
    assert tracker.built[1].closes == 1


def test_the_partition_evicted_to_make_room_is_closed(clock: permits.ManualClock) -> None:
    built: list[permits.RateLimiter] = []
    limiter = engine_partitions(clock, built, max_partitions=1)
    limiter.acquire("a").release()
    assert limiter.acquire("b")  # "a" is idle: it gives its place to "b"
    with pytest.raises(permits.LimiterClosedError):
        built[0].acquire()


def test_evict_idle_closes_them_all_then_raises_an_exception_group(clock: permits.ManualClock) -> None:
    tracker = Tracker("a", "c")
    limiter = tracker.partitioned(clock)
    for key in "abc":
        assert limiter.acquire(key)
    clock.advance_ns(PAST_IDLE_NS)
    with pytest.raises(ExceptionGroup) as caught:
        limiter.evict_idle()
    assert sorted(str(e) for e in caught.value.exceptions) == ["close of a", "close of c"]
    assert [t.closes for t in tracker.built] == [1, 1, 1]
    assert limiter.partition_count == 0


def test_close_errors_of_the_evictions_on_the_way_go_to_the_unraisable_hook(
    clock: permits.ManualClock, unraisable: list[Any]
) -> None:
    tracker = Tracker("a", "b")
    limiter = tracker.partitioned(clock)
    assert limiter.acquire("a")
    clock.advance_ns(PAST_IDLE_NS)
    assert limiter.acquire("b")  # evicts "a", whose close raises: acquire still answers
    assert [str(u.exc_value) for u in unraisable] == ["close of a"]
    assert unraisable[0].object is tracker.built[0]
    assert "evicted partition" in unraisable[0].err_msg
    clock.advance(IDLE + 1)  # evicts "b": advance does not raise either
    assert [str(u.exc_value) for u in unraisable] == ["close of a", "close of b"]


def test_a_chain_evicts_in_every_member_and_gathers_their_errors(clock: permits.ManualClock) -> None:
    first, second = Tracker("x"), Tracker("x")
    chained = permits.chain(first.partitioned(clock), second.partitioned(clock))
    assert chained.acquire("x")
    clock.advance_ns(PAST_IDLE_NS)
    with pytest.raises(ExceptionGroup) as caught:
        chained.evict_idle()
    assert len(caught.value.exceptions) == 2
    assert first.built[0].closes == second.built[0].closes == 1


# ---- a caller that found the partition just before its eviction asks the key's new limiter ----
# The lookup evicts what is due right after finding the caller's own partition: with the engine's
# clock moved past idle_timeout (and no evict_idle), the partition found is evicted and closed
# before the caller uses it.


def _found_then_evicted(clock: permits.ManualClock) -> tuple[PartitionedLimiter, list[permits.RateLimiter]]:
    built: list[permits.RateLimiter] = []
    limiter = engine_partitions(clock, built)
    limiter.acquire("a").release()
    clock.advance_ns(PAST_IDLE_NS)
    return limiter, built


def _old_closed_new_used(built: list[permits.RateLimiter]) -> None:
    assert len(built) == 2, "the key's new limiter should have been built"
    with pytest.raises(permits.LimiterClosedError):
        built[0].acquire()


def test_acquire_on_a_partition_evicted_meanwhile_asks_the_new_limiter(clock: permits.ManualClock) -> None:
    limiter, built = _found_then_evicted(clock)
    lease = limiter.acquire("a")
    assert lease
    _old_closed_new_used(built)
    assert built[1].available_permits() == 0  # the grant counts in the new limiter
    lease.release()


def test_wait_on_a_partition_evicted_meanwhile_asks_the_new_limiter(clock: permits.ManualClock) -> None:
    limiter, built = _found_then_evicted(clock)
    lease = limiter.wait("a", timeout=0)
    assert lease
    _old_closed_new_used(built)
    lease.release()


async def test_wait_async_on_a_partition_evicted_meanwhile_asks_the_new_limiter(clock: permits.ManualClock) -> None:
    limiter, built = _found_then_evicted(clock)
    lease = await limiter.wait_async("a")
    assert lease
    _old_closed_new_used(built)
    lease.release()


def test_available_permits_of_a_partition_evicted_meanwhile_come_from_the_new_limiter(
    clock: permits.ManualClock,
) -> None:
    limiter, built = _found_then_evicted(clock)
    assert limiter.available_permits("a") == 1
    _old_closed_new_used(built)


def test_statistics_of_a_partition_evicted_meanwhile_come_from_the_new_limiter(clock: permits.ManualClock) -> None:
    limiter, built = _found_then_evicted(clock)
    assert limiter.statistics("a").current_available_permits == 1
    _old_closed_new_used(built)


# ---- aclose ----
async def test_aclose_awaits_every_partitions_aclose_and_gathers_their_errors(clock: permits.ManualClock) -> None:
    tracker = Tracker("b", "c")
    limiter = tracker.partitioned(clock)
    for key in "abc":
        assert limiter.acquire(key)
    with pytest.raises(ExceptionGroup) as caught:
        await limiter.aclose()
    assert sorted(str(e) for e in caught.value.exceptions) == ["aclose of b", "aclose of c"]
    assert [t.acloses for t in tracker.built] == [1, 1, 1]
    with pytest.raises(permits.LimiterClosedError):
        limiter.acquire("a")


async def test_async_with_awaits_the_partitions_aclose(clock: permits.ManualClock) -> None:
    tracker = Tracker()
    async with contextlib.aclosing(tracker.partitioned(clock)) as limiter:
        assert limiter.acquire("a")
    assert tracker.built[0].acloses == 1
