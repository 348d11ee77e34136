"""PartitionedLimiter (docs/design.md, Partitions)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable

import pytest

import permits
from permits import Partition, PartitionedLimiter


def by_user(limit: int = 2, **kw: object):  # type: ignore[no-untyped-def]
    return lambda resource: Partition.fixed_window(resource["user"], limit, 10.0, **kw)


def test_the_partitioner_runs_on_every_call_and_each_key_gets_its_own_limiter() -> None:
    clock = permits.ManualClock()
    calls: list[object] = []

    def partitioner(resource: object) -> Partition:
        calls.append(resource)
        return Partition.token_bucket(resource, 1, 1, 1.0)

    limiter = PartitionedLimiter(partitioner, clock=clock)
    assert limiter.acquire("a")
    assert not limiter.acquire("a")
    assert limiter.acquire("b")  # a separate limiter per key
    assert limiter.statistics("a").total_failed_leases == 1
    assert calls == ["a", "a", "b", "a"]
    assert limiter.partition_count == 2


async def test_a_partitions_limiter_is_named_by_the_partition_else_by_the_partitioned_limiter() -> None:
    # A failed lease says which limit refused: a partition's own name, else its PartitionedLimiter's
    # (it was "default", whatever the PartitionedLimiter was called).
    def partitioner(user: str) -> Partition:
        if user.startswith("free-"):
            return Partition.fixed_window(user, 1, 60.0, queue_limit=0, name="free-tier")
        return Partition.of(user, permits.specs.FixedWindow(1, 60.0), queue_limit=0)

    limiter = PartitionedLimiter(partitioner, clock=permits.ManualClock(), name="api")
    for user, named in (("free-ann", "free-tier"), ("bob", "api")):
        assert limiter.acquire(user)
        assert limiter.acquire(user).metadata["limiter"] == named
        assert limiter.wait(user).metadata["limiter"] == named
        assert (await limiter.wait_async(user)).metadata["limiter"] == named
    unnamed = PartitionedLimiter(lambda r: Partition.fixed_window(r, 1, 60.0))
    assert unnamed.acquire("a")
    assert unnamed.acquire("a").metadata["limiter"] == "default"


def test_a_partitions_limiter_is_built_once_per_key() -> None:
    built: list[object] = []

    def factory(key: object) -> permits.RateLimiter:
        built.append(key)
        return permits.ConcurrencyLimiter(1)

    limiter = PartitionedLimiter(lambda r: Partition.custom(r, factory))
    for _ in range(5):
        limiter.acquire("k").release()
    limiter.statistics("k")  # statistics create the limiter too, and reuse it
    assert built == ["k"]


def test_keys_of_different_types_are_different_partitions() -> None:
    limiter = PartitionedLimiter.per_key(Partition.concurrency(None, 1))
    held = [limiter.acquire(k) for k in ("7", 7, b"7", (7,), ("7",))]
    assert all(held)
    assert limiter.partition_count == 5


@pytest.mark.parametrize("bad", [1.5, None, True, ["list"], {"a": 1}, (1, [2]), object()])
def test_keys_must_be_str_bytes_int_or_tuples_of_them(bad: object) -> None:
    limiter = PartitionedLimiter.per_key(Partition.concurrency(None, 1))
    with pytest.raises(TypeError, match="partition key"):
        limiter.acquire(bad)


def test_deeply_nested_keys_are_refused() -> None:
    key: object = 1
    for _ in range(40):
        key = (key,)
    with pytest.raises(ValueError, match="nest"):
        PartitionedLimiter.per_key(Partition.concurrency(None, 1)).acquire(key)


def test_the_partitioner_must_return_a_partition() -> None:
    with pytest.raises(TypeError, match="Partition"):
        PartitionedLimiter(lambda r: "nope").acquire("x")  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="callable"):
        PartitionedLimiter("nope")  # type: ignore[arg-type]


def test_options_are_checked() -> None:
    for bad in (0, -1):
        with pytest.raises(ValueError, match="max_partitions"):
            PartitionedLimiter(by_user(), max_partitions=bad)
    with pytest.raises(TypeError, match="max_partitions"):
        PartitionedLimiter(by_user(), max_partitions=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="idle_timeout"):
        PartitionedLimiter(by_user(), idle_timeout=float("nan"))
    with pytest.raises(ValueError, match="key None"):
        PartitionedLimiter.per_key(Partition.concurrency("key", 1))  # a template has key None


def test_a_bad_partition_option_is_a_value_error_naming_it_at_first_use() -> None:
    limiter = PartitionedLimiter(lambda r: Partition.token_bucket(r, 0, 1, 1.0))
    with pytest.raises(ValueError, match="token_limit"):
        limiter.acquire("x")
    assert limiter.partition_count == 0  # nothing half-built is kept


def test_permit_counts_are_checked_before_the_partition() -> None:
    limiter = PartitionedLimiter(by_user())
    with pytest.raises(ValueError, match="permit_count"):
        limiter.acquire({"user": 1}, -1)
    with pytest.raises(TypeError, match="permit_count"):
        limiter.acquire({"user": 1}, 1.0)  # type: ignore[arg-type]


def test_no_limiter_partitions_grant_anything() -> None:
    limiter = PartitionedLimiter(lambda r: Partition.no_limiter(r))
    assert limiter.acquire("x", 10**6)
    stats = limiter.statistics("x")
    assert stats.total_successful_leases == 1 and stats.total_failed_leases == 0


def test_a_slow_factory_blocks_only_its_own_key() -> None:
    release = threading.Event()
    started = threading.Event()
    built: list[object] = []

    def factory(key: object) -> permits.RateLimiter:
        built.append(key)
        if key == "slow":
            started.set()
            release.wait(10)
        return permits.ConcurrencyLimiter(5)

    limiter = PartitionedLimiter(lambda r: Partition.custom(r, factory))
    results: list[bool] = []
    slow = [threading.Thread(target=lambda: results.append(bool(limiter.acquire("slow")))) for _ in range(3)]
    for t in slow:
        t.start()
    assert started.wait(10)
    assert limiter.acquire("fast")  # not blocked by the slow key's factory
    release.set()
    for t in slow:
        t.join(10)
    assert results == [True, True, True]
    assert built.count("slow") == 1  # concurrent first callers share one creation


def test_a_factory_error_reaches_the_caller_and_the_next_call_tries_again() -> None:
    attempts: list[int] = []

    def factory(key: object) -> permits.RateLimiter:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("boom")
        return permits.ConcurrencyLimiter(1)

    limiter = PartitionedLimiter(lambda r: Partition.custom(r, factory))
    with pytest.raises(RuntimeError, match="boom"):
        limiter.acquire("k")
    assert limiter.acquire("k")
    assert len(attempts) == 2


def test_waiting_in_one_partition_does_not_block_another() -> None:
    clock = permits.ManualClock()
    limiter = PartitionedLimiter(lambda r: Partition.concurrency(r, 1, queue_limit=1), clock=clock)
    held = limiter.acquire("a")
    done: list[permits.Lease] = []
    waiter = threading.Thread(target=lambda: done.append(limiter.wait("a")))
    waiter.start()
    deadline = time.monotonic() + 10
    while limiter.statistics("a").current_queued_count == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert limiter.acquire("b")  # another partition answers at once
    held.release()
    waiter.join(10)
    assert done and done[0]


async def test_close_completes_waiters_in_every_partition_and_later_calls_raise() -> None:
    clock = permits.ManualClock()
    limiter = PartitionedLimiter(lambda r: Partition.token_bucket(r, 1, 1, 60.0, queue_limit=1), clock=clock)
    waits = []
    for key in ("a", "b"):
        assert limiter.acquire(key)
        waits.append(asyncio.ensure_future(limiter.wait_async(key)))
    await asyncio.sleep(0)
    limiter.close()
    leases = await asyncio.wait_for(asyncio.gather(*waits), 5)
    assert [lease.reason for lease in leases] == ["closed", "closed"]
    with pytest.raises(permits.LimiterClosedError):
        limiter.acquire("a")
    with pytest.raises(permits.LimiterClosedError):
        limiter.statistics()


# ---------------------------------------------------------------- eviction (docs/design.md, Partitions)


def test_an_idle_partition_is_evicted_after_the_idle_timeout_and_rebuilt_fresh() -> None:
    clock = permits.ManualClock()
    built: list[object] = []

    def partitioner(resource: object) -> Partition:
        return Partition.custom(
            resource, lambda k: built.append(k) or permits.TokenBucketLimiter(2, 1, 1.0, clock=clock)
        )

    limiter = PartitionedLimiter(partitioner, idle_timeout=10.0, clock=clock)
    assert limiter.acquire("k", 2)
    clock.advance(2.0)  # full again at 2 s: idle from then on
    clock.advance(10.0)  # idle for exactly 10 s: not yet (strictly longer is needed)
    assert limiter.partition_count == 1
    clock.advance(0.001)
    assert limiter.partition_count == 0  # advance performed the eviction
    assert limiter.acquire("k", 2)
    assert built == ["k", "k"]


def test_eviction_never_loosens_a_limit() -> None:
    clock = permits.ManualClock()
    limiter = PartitionedLimiter(lambda r: Partition.fixed_window(r, 1, 3600.0), idle_timeout=1.0, clock=clock)
    assert limiter.acquire("k")
    clock.advance(60.0)  # unused for a minute, but its window still holds the grant
    assert limiter.partition_count == 1
    assert not limiter.acquire("k")


def test_a_held_concurrency_permit_keeps_its_partition() -> None:
    clock = permits.ManualClock()
    limiter = PartitionedLimiter(lambda r: Partition.concurrency(r, 1), idle_timeout=1.0, clock=clock)
    held = limiter.acquire("k")
    clock.advance(100.0)
    assert limiter.partition_count == 1
    held.release()
    clock.advance(1.5)
    assert limiter.partition_count == 0


def test_a_custom_limiter_that_is_never_idle_is_never_evicted() -> None:
    class Always(permits.RateLimiter):
        def _acquire(self, permit_count: int) -> permits.Lease:
            return permits.Lease.granted(permit_count)

    clock = permits.ManualClock()
    limiter = PartitionedLimiter(lambda r: Partition.custom(r, lambda k: Always()), idle_timeout=1.0, clock=clock)
    limiter.acquire("k")
    clock.advance(1000.0)
    assert limiter.partition_count == 1


def test_no_limiter_partitions_are_evicted_by_last_use() -> None:
    clock = permits.ManualClock()
    limiter = PartitionedLimiter(lambda r: Partition.no_limiter(r), idle_timeout=1.0, clock=clock)
    limiter.acquire("k")
    clock.advance(0.9)
    limiter.acquire("k")
    clock.advance(0.9)
    assert limiter.partition_count == 1
    clock.advance(0.2)
    assert limiter.partition_count == 0


def test_totals_survive_eviction() -> None:
    clock = permits.ManualClock()
    limiter = PartitionedLimiter(lambda r: Partition.token_bucket(r, 1, 1, 1.0), idle_timeout=1.0, clock=clock)
    for key in range(10):
        assert limiter.acquire(key)
        assert not limiter.acquire(key)
    clock.advance(5.0)
    assert limiter.partition_count == 0
    stats = limiter.statistics()
    assert stats.total_successful_leases == 10 and stats.total_failed_leases == 10


def test_many_keys_are_evicted_and_memory_of_them_is_released() -> None:
    clock = permits.ManualClock()
    limiter = PartitionedLimiter.per_key(Partition.fixed_window(None, 5, 1.0), idle_timeout=1.0, clock=clock)
    for key in range(20_000):
        assert limiter.acquire(key)
    assert limiter.partition_count == 20_000
    clock.advance(3.0)
    assert limiter.partition_count == 0


# ---------------------------------------------------------------- max_partitions (docs/design.md, Partitions)


def test_at_the_bound_a_new_key_takes_the_place_of_an_idle_partition() -> None:
    clock = permits.ManualClock()
    limiter = PartitionedLimiter(lambda r: Partition.concurrency(r, 1), max_partitions=2, clock=clock)
    a = limiter.acquire("a")
    limiter.acquire("b").release()  # b is idle at once
    c = limiter.acquire("c")  # takes b's place
    assert c
    assert limiter.partition_count == 2
    denied = limiter.acquire("d")  # a and c are in use: no place
    assert not denied and denied.reason == "partition_limit" and denied.permit_count == 1
    a.release()
    assert limiter.acquire("d")


async def test_the_bound_applies_to_waits_too() -> None:
    limiter = PartitionedLimiter(lambda r: Partition.concurrency(r, 1), max_partitions=1)
    held = limiter.acquire("a")
    lease = await limiter.wait_async("b")
    assert lease.reason == "partition_limit"
    async with limiter.wait_async("b") as again:
        assert again.reason == "partition_limit"
    assert limiter.wait("b").reason == "partition_limit"
    held.release()


# ---------------------------------------------------------------- chains of partitioned limiters


def test_a_chain_with_a_partitioned_limiter_takes_the_resource_and_refunds() -> None:
    clock = permits.ManualClock()
    global_bucket = permits.TokenBucketLimiter(100, 1, 1.0, clock=clock)
    per_user = PartitionedLimiter(by_user(limit=2), clock=clock)
    chained = permits.chain(global_bucket, per_user)
    assert isinstance(chained, permits.ChainedPartitionedLimiter)
    alice = {"user": "alice"}
    assert chained.acquire(alice) and chained.acquire(alice)
    denied = chained.acquire(alice)
    assert not denied and denied.reason == "limit_reached" and denied.retry_after == 10.0
    assert global_bucket.available_permits() == 98  # the rejected request cost the bucket nothing
    assert chained.acquire({"user": "bob"})
    stats = chained.statistics(alice)
    assert stats.current_available_permits == 0


async def test_a_chain_with_a_partitioned_limiter_waits_in_order() -> None:
    clock = permits.ManualClock()
    pool = permits.ConcurrencyLimiter(1)
    per_user = PartitionedLimiter(lambda r: Partition.token_bucket(r, 1, 1, 1.0, queue_limit=1), clock=clock)
    chained = permits.chain(pool, per_user)
    first = chained.acquire("u")
    first.release()
    task = asyncio.ensure_future(chained.wait_async("u"))
    for _ in range(3):
        await asyncio.sleep(0)
    assert pool.available_permits() == 0 and not task.done()
    clock.advance(1.0)
    lease = await asyncio.wait_for(task, 5)
    assert lease
    lease.release()
    assert pool.available_permits() == 1


def test_keys_evicted_and_built_again_leave_nothing_behind() -> None:
    clock = permits.ManualClock()
    limiter = PartitionedLimiter(lambda r: Partition.concurrency(r, 1), max_partitions=1, idle_timeout=1.0, clock=clock)
    for i in range(1000):
        limiter.acquire(i % 2).release()  # each new key takes the other's place
        if i % 100 == 0:
            clock.advance(2.0)
    assert limiter.partition_count <= 1
    assert len(limiter._due) <= 2 * 1 + 64  # bounded by the live partitions, not by the churn


async def _awaited(awaitable: Awaitable[permits.Lease]) -> permits.Lease:
    return await awaitable


@pytest.mark.parametrize("how", ["acquire", "wait", "wait_async"])
def test_a_grant_from_a_partition_evicted_meanwhile_is_given_back_and_asked_again(how: str) -> None:
    # The partition's limiter gets evicted while its acquire runs (it reports being idle): the
    # grant it made would count nowhere, so the partitioned limiter gives it back and asks the
    # key's new limiter.
    clock = permits.ManualClock()
    built: list[Sneaky] = []
    given_back: list[int] = []

    class Sneaky(permits.RateLimiter):
        def _acquire(self, permit_count: int) -> permits.Lease:
            if len(built) == 1:
                clock.advance(2.0)
                limiter.evict_idle()  # evicts this very limiter: it says it is idle
            return permits.Lease.granted(permit_count, on_release=lambda: given_back.append(len(built)))

        @property
        def idle_duration(self) -> float | None:
            return 100.0

        def _try_now(self, permit_count: int) -> permits.Lease | None:
            return self._acquire(permit_count)  # a wait's immediate grant, like the engine's limiters

    def factory(key: object) -> permits.RateLimiter:
        built.append(Sneaky())
        return built[-1]

    limiter = PartitionedLimiter(lambda r: Partition.custom(r, factory), idle_timeout=1.0, clock=clock)
    if how == "acquire":
        lease = limiter.acquire("k")
    elif how == "wait":
        lease = limiter.wait("k", timeout=1.0)
    else:
        lease = asyncio.run(_awaited(limiter.wait_async("k")))
    assert lease
    assert len(built) == 2  # asked again, from the key's new limiter
    assert given_back == [1]  # the first grant was given back, before the second limiter was built
