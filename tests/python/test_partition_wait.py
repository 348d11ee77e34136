"""PartitionedLimiter.wait_async (permits._partition_wait): a request that must queue in a
partition whose limiter is the engine's waits on the engine's own awaitable, and keeps every
behaviour of the general path: the close of the partitioned limiter ends it at once ("closed"),
cancellation takes the request out of the queue and gives back a grant not handed over, a
partition evicted before the wait queues is asked again through the key's new limiter, and a
partition with a queued wait is never evicted."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

import pytest

import permits
from permits import Partition, PartitionedLimiter
from permits._partition_wait import PartitionWait


def concurrency(clock: permits.ManualClock, **kw: Any) -> PartitionedLimiter:
    return PartitionedLimiter(lambda r: Partition.concurrency(r, 1, queue_limit=1), clock=clock, **kw)


async def queued(limiter: PartitionedLimiter, key: str) -> asyncio.Task[permits.Lease]:
    task = asyncio.ensure_future(limiter.wait_async(key))
    for _ in range(10):
        await asyncio.sleep(0)
        if limiter.statistics(key).current_queued_count == 1:
            return task
    raise AssertionError("the wait did not queue")


def test_wait_async_returns_the_partition_wait_and_checks_its_arguments_at_once() -> None:
    limiter = concurrency(permits.ManualClock())
    wait = limiter.wait_async("k")
    assert isinstance(wait, PartitionWait) and isinstance(wait, permits.awaitables.LeaseWait)
    wait.close()
    with pytest.raises(ValueError, match="permit_count"):
        limiter.wait_async("k", -1)
    limiter.close()
    with pytest.raises(permits.LimiterClosedError):
        limiter.wait_async("k")


async def test_a_cancelled_queued_wait_leaves_the_queue_and_takes_no_permit(clock: permits.ManualClock) -> None:
    limiter = concurrency(clock)
    held = limiter.acquire("k")
    task = await queued(limiter, "k")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert limiter.statistics("k").current_queued_count == 0
    held.release()
    assert limiter.available_permits("k") == 1  # nothing handed to the cancelled wait


async def test_a_wait_cancelled_once_granted_but_not_yet_resumed_gives_the_grant_back(
    clock: permits.ManualClock,
) -> None:
    limiter = concurrency(clock)
    held = limiter.acquire("k")
    task = await queued(limiter, "k")
    held.release()  # the engine grants the queued request; its task has not run since
    assert limiter.available_permits("k") == 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert limiter.available_permits("k") == 1
    assert limiter.acquire("k")


async def test_close_ends_queued_waits_at_once_with_closed_named_as_the_partitioned_limiter(
    clock: permits.ManualClock,
) -> None:
    limiter = PartitionedLimiter(
        lambda r: Partition.concurrency(r, 1, queue_limit=1, name="partition"), clock=clock, name="api"
    )
    held = [limiter.acquire(key) for key in "ab"]
    tasks = [await queued(limiter, key) for key in "ab"]
    limiter.close()
    leases = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    # The PartitionedLimiter was closed, not the partition: its name, as on the general path.
    assert [(lease.reason, lease.metadata["limiter"]) for lease in leases] == [("closed", "api")] * 2
    assert all(held)


class SlowClose(permits.RateLimiter):
    """A custom partition whose aclose() waits until the test lets it finish."""

    def __init__(self) -> None:
        super().__init__()
        self.finish = asyncio.Event()

    def _acquire(self, permit_count: int) -> permits.Lease:
        return permits.Lease.granted(permit_count)

    async def aclose(self) -> None:
        await self.finish.wait()
        self.close()


async def test_aclose_ends_the_engine_partitions_waits_before_awaiting_a_slow_custom_aclose(
    clock: permits.ManualClock,
) -> None:
    slow = SlowClose()

    def partitioner(key: str) -> Partition:
        if key == "custom":
            return Partition.custom(key, lambda _key: slow)
        return Partition.concurrency(key, 1, queue_limit=1)

    limiter = PartitionedLimiter(partitioner, clock=clock)
    assert limiter.acquire("custom")  # built first: its aclose comes first in the map
    held = limiter.acquire("k")
    task = await queued(limiter, "k")
    closing = asyncio.ensure_future(limiter.aclose())
    lease = await asyncio.wait_for(task, 5)
    assert lease.reason == "closed" and not closing.done()
    slow.finish.set()
    await asyncio.wait_for(closing, 5)
    assert held


async def test_a_wait_made_before_its_partition_is_evicted_asks_the_keys_new_limiter(
    clock: permits.ManualClock,
) -> None:
    limiter = concurrency(clock, idle_timeout=1.0)
    limiter.acquire("k").release()
    wait = limiter.wait_async("k")  # not yet awaited: nothing asked, nothing queued
    clock.advance(2.0)  # the idle partition is evicted, its limiter closed
    assert limiter.partition_count == 0
    lease = await wait
    assert lease and limiter.partition_count == 1
    assert limiter.available_permits("k") == 0  # the grant is the key's new limiter's


class EvictsOnLookup(PartitionedLimiter):
    """Evicts and closes the partition it has just found, once: what another thread's eviction
    does between a wait's lookup and its request reaching the partition's limiter."""

    evictions = 0

    def _entry(self, resource: object) -> Any:
        found = super()._entry(resource)
        if found is not None and self.evictions == 0:
            self.evictions += 1
            key, entry = found
            with self._lock:
                del self._entries[key]
            entry.limiter.close()
        return found


async def test_a_partition_evicted_between_lookup_and_queueing_asks_the_keys_new_limiter(
    clock: permits.ManualClock,
) -> None:
    built: list[permits.RateLimiter] = []

    def make(_key: Hashable) -> permits.RateLimiter:
        built.append(permits.ConcurrencyLimiter(1, queue_limit=1, clock=clock))
        return built[-1]

    limiter = EvictsOnLookup(lambda r: Partition.custom(r, make), clock=clock)
    lease = await limiter.wait_async("k")
    assert lease and limiter.evictions == 1
    assert len(built) == 2 and built[1].available_permits() == 0  # granted by the new limiter


async def test_a_partition_with_a_queued_wait_is_never_evicted(clock: permits.ManualClock) -> None:
    limiter = PartitionedLimiter(
        lambda r: Partition.token_bucket(r, 1, 1, 60.0, queue_limit=1), idle_timeout=1.0, clock=clock
    )
    assert limiter.acquire("k")
    task = await queued(limiter, "k")
    clock.advance(30.0)  # far past the idle timeout, not yet a token
    assert limiter.evict_idle() == 0 and limiter.partition_count == 1
    clock.advance(30.0)  # the token: the queued wait's
    lease = await asyncio.wait_for(task, 5)
    assert lease and limiter.statistics().total_successful_leases == 2


async def test_a_custom_partition_still_waits_the_general_way(clock: permits.ManualClock) -> None:
    class Never(permits.RateLimiter):
        def _acquire(self, permit_count: int) -> permits.Lease:
            return permits.Lease.denied(retry_after=60.0)

    limiter = PartitionedLimiter(lambda r: Partition.custom(r, lambda _key: Never(clock=clock)), clock=clock)
    task = asyncio.ensure_future(limiter.wait_async("k"))
    await asyncio.sleep(0)
    assert not task.done()
    limiter.close()  # a custom limiter's pause ends with the partitioned limiter's close
    assert (await asyncio.wait_for(task, 5)).reason == "closed"


async def test_a_subclass_with_its_own_wait_hooks_waits_through_them(clock: permits.ManualClock) -> None:
    class Logged(PartitionedLimiter):
        asked: list[object] = []

        async def _wait_async(self, resource: object, permit_count: int) -> permits.Lease:
            self.asked.append(resource)
            return await super()._wait_async(resource, permit_count)

    limiter = Logged(lambda r: Partition.concurrency(r, 1, queue_limit=1), clock=clock)
    held = limiter.acquire("k")
    task = await queued(limiter, "k")
    held.release()
    assert await asyncio.wait_for(task, 5)
    assert Logged.asked == ["k"]
