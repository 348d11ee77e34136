"""metadata["limiter"]: every failed lease names the limiter that refused it (its ``name``,
"default" unless given), through chains, partitions, custom limiters and waits; a successful
lease's metadata is left as it was."""

from __future__ import annotations

import asyncio

import pytest

import permits
from permits import Lease, ManualClock, Partition, PartitionedLimiter
from permits.chain import ChainedLimiter


def _named(lease: Lease) -> object:
    assert not lease
    return lease.metadata.get("limiter")


ENGINE = [
    lambda clock, **kw: permits.TokenBucketLimiter(1, 1, 10.0, clock=clock, **kw),
    lambda clock, **kw: permits.FixedWindowLimiter(1, 10.0, clock=clock, **kw),
    lambda clock, **kw: permits.SlidingWindowLimiter(1, 10.0, 2, clock=clock, **kw),
    lambda clock, **kw: permits.SlidingWindowCounterLimiter(1, 10.0, clock=clock, **kw),
    lambda clock, **kw: permits.ConcurrencyLimiter(1, clock=clock, **kw),
]


@pytest.mark.parametrize("make", ENGINE)
def test_an_engine_limiters_failed_lease_names_it(make, clock: ManualClock) -> None:
    limiter = make(clock, name="global")
    granted = limiter.acquire()
    assert "limiter" not in granted.metadata  # a grant is left as it was
    assert _named(limiter.acquire()) == "global"
    assert _named(_spent(make(clock))) == "default"
    granted.release()


def _spent(limiter: permits.RateLimiter) -> Lease:
    held = limiter.acquire()  # (held: a concurrency permit comes back when its lease dies)
    refused = limiter.acquire()
    held.release()
    return refused


@pytest.mark.parametrize("make", ENGINE)
def test_an_engine_limiters_waits_name_it_whatever_ends_them(make, clock: ManualClock) -> None:
    full = make(clock, name="q", queue_limit=0)
    held = full.acquire()
    lease = full.wait(timeout=0)
    assert (lease.reason, _named(lease)) == ("queue_full", "q")

    limiter = make(clock, name="w")
    held = limiter.acquire()
    timed_out = limiter.wait(timeout=0.0)
    assert (timed_out.reason, _named(timed_out)) == ("timeout", "w")

    async def closed_while_queued() -> Lease:
        wait = asyncio.ensure_future(limiter.wait_async())
        await asyncio.sleep(0)
        limiter.close()
        return await wait

    lease = asyncio.run(closed_while_queued())
    assert (lease.reason, _named(lease)) == ("closed", "w")
    held.release()


def test_a_limiters_name_is_read_when_it_refuses(clock: ManualClock) -> None:
    limiter = permits.FixedWindowLimiter(1, 10.0, clock=clock, name="before")
    limiter.acquire()
    limiter.name = "after"
    assert _named(limiter.acquire()) == "after"


def test_a_per_key_limiter_names_itself(clock: ManualClock) -> None:
    per_key = PartitionedLimiter.per_key("1/second", clock=clock, name="per-user")
    assert "limiter" not in per_key.acquire("a").metadata
    assert _named(per_key.acquire("a")) == "per-user"
    assert _named(per_key.wait("a", timeout=0)) == "per-user"
    bounded = PartitionedLimiter.per_key("1/second", clock=clock, max_partitions=1, name="bounded")
    bounded.acquire("a")
    lease = bounded.acquire("b")
    assert _named(lease) == "bounded"


def test_a_partitioned_limiter_names_the_partitions_limiter_or_itself(clock: ManualClock) -> None:
    def partition(key: object) -> Partition:
        return Partition.custom(key, lambda k: permits.FixedWindowLimiter(1, 10.0, clock=clock, name=f"user-{k}"))

    limiter = PartitionedLimiter(partition, max_partitions=1, clock=clock, name="users")
    assert "limiter" not in limiter.acquire("a").metadata
    assert _named(limiter.acquire("a")) == "user-a"  # the partition's limiter refused
    assert _named(limiter.wait("a", timeout=0)) == "user-a"
    for refused in (limiter.acquire("b"), limiter.wait("b"), asyncio.run(_acquire_async(limiter, "b"))):
        assert (refused.reason, _named(refused)) == ("partition_limit", "users")


async def _acquire_async(limiter: permits.KeyedRateLimiter, key: object) -> Lease:
    return await limiter.acquire_async(key)


def test_a_chain_returns_the_refusing_members_lease_with_its_name(clock: ManualClock) -> None:
    per_user = PartitionedLimiter.per_key("1/second", clock=clock, name="per-user")
    everyone = permits.FixedWindowLimiter(2, 10.0, clock=clock, name="global")
    limiter = permits.chain(per_user, everyone)
    assert "limiter" not in limiter.acquire("a").metadata
    assert _named(limiter.acquire("a")) == "per-user"
    limiter.acquire("b")
    assert _named(limiter.acquire("c")) == "global"
    assert _named(limiter.wait("c", timeout=0)) == "global"

    plain = ChainedLimiter([permits.FixedWindowLimiter(1, 10.0, clock=clock, name="inner")], name="outer")
    plain.acquire()
    assert _named(plain.acquire()) == "inner"


def test_a_chain_closed_during_its_wait_names_itself() -> None:
    outer = ChainedLimiter([permits.NoLimiter()], name="mine")
    outer._limiters = (_ClosesChain(outer),)  # type: ignore[attr-defined]
    refused = outer.wait()
    assert (refused.reason, _named(refused)) == ("closed", "mine")


class _ClosesChain(permits.RateLimiter):
    """Grants, closing the given chain meanwhile (as another thread's close would)."""

    def __init__(self, chain: permits.RateLimiter) -> None:
        super().__init__(name="member")
        self._chain = chain

    def _acquire(self, permit_count: int) -> Lease:
        self._chain.close()
        return Lease.granted(permit_count)


class _Custom(permits.RateLimiter):
    def __init__(self, denial: Lease, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.denial = denial

    def _acquire(self, permit_count: int) -> Lease:
        return self.denial


def test_a_custom_limiters_denial_gets_its_name_on_a_copy(clock: ManualClock) -> None:
    kept = Lease.denied("busy", retry_after=2.0, metadata={"shard": 3})
    limiter = _Custom(kept, name="custom", clock=clock)
    lease = limiter.acquire()
    assert dict(lease.metadata) == {"shard": 3, "limiter": "custom", "reason": "busy", "retry_after": 2.0}
    assert "limiter" not in kept.metadata  # the hook's own denial is untouched
    assert _named(_Custom(kept).acquire()) == "default"
    assert _named(asyncio.run(_attempt(limiter))) == "custom"


async def _attempt(limiter: permits.RateLimiter) -> Lease:
    return await limiter.acquire_async()


def test_a_custom_limiter_that_names_a_limiter_itself_keeps_it(clock: ManualClock) -> None:
    limiter = _Custom(Lease.denied(metadata={"limiter": "upstream"}), name="custom", clock=clock)
    assert _named(limiter.acquire()) == "upstream"


def test_a_custom_limiters_waits_name_it(clock: ManualClock) -> None:
    limiter = _Custom(Lease.denied(retry_after=1.0), name="custom", clock=clock)
    timed_out = limiter.wait(timeout=0)
    assert (timed_out.reason, _named(timed_out)) == ("timeout", "custom")

    async def closed_while_waiting() -> Lease:
        wait = asyncio.ensure_future(limiter.wait_async())
        await asyncio.sleep(0)
        limiter.close()
        return await wait

    closed = asyncio.run(closed_while_waiting())
    assert (closed.reason, _named(closed)) == ("closed", "custom")


def test_a_successful_leases_metadata_is_left_as_it_was(clock: ManualClock) -> None:
    class Granting(permits.RateLimiter):
        def _acquire(self, permit_count: int) -> Lease:
            return Lease.granted(permit_count, metadata={"shard": 1})

    assert dict(Granting(name="g").acquire().metadata) == {"shard": 1}
    assert dict(permits.chain(Granting(), permits.NoLimiter()).acquire().metadata) == {"shard": 1}
