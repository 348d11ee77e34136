"""lease.settle(n): take the most a piece of work may need, keep what it used, give the rest back
(issue 42, item 1). Exact counts on a ManualClock; the property that a settle never loosens a
limit is in test_model_properties_refunds.py."""

from __future__ import annotations

import gc
import warnings
from typing import Any

import pytest

import permits
from permits import Lease, ManualClock, PartitionedLimiter, specs

TIMED = {
    "token_bucket": specs.TokenBucket(10, 10, 1.0),
    "fixed_window": specs.FixedWindow(10, 1.0),
    "sliding_window": specs.SlidingWindow(10, 1.0, 4),
    "sliding_log": specs.SlidingLog(10, 1.0),
    "sliding_window_counter": specs.SlidingWindowCounter(10, 1.0),
}
EVERY = {**TIMED, "concurrency": specs.Concurrency(10)}


def limiter_of(spec: specs.Spec[Any], how: str, clock: ManualClock) -> tuple[Any, Any]:
    """(take(n), available()) of ``spec`` made ``how``: a limiter, per key in the engine's table,
    or per key through a Python partitioner."""
    if how == "limiter":
        limiter: Any = spec.limiter(clock=clock)
        return limiter.acquire, limiter.available_permits
    if how == "per_key":
        keyed: Any = PartitionedLimiter.per_key(spec, clock=clock)
    else:
        keyed = PartitionedLimiter(lambda key: permits.Partition.of(key, spec), clock=clock)
    return (lambda n: keyed.acquire("k", n)), (lambda: keyed.available_permits("k"))


@pytest.mark.parametrize("how", ["limiter", "per_key", "partitioned"])
@pytest.mark.parametrize("kind", list(EVERY))
def test_settle_gives_back_what_the_work_did_not_use(kind: str, how: str) -> None:
    clock = ManualClock()
    take, available = limiter_of(EVERY[kind], how, clock)
    lease = take(10)
    assert lease and available() == 0
    lease.settle(7)
    assert lease.permit_count == 7 and available() == 3
    lease.settle(7)  # the same count: nothing changes
    assert available() == 3
    lease.settle(2)  # settled again: five more back
    assert lease.permit_count == 2 and available() == 8
    others = take(8)
    assert others and not take(1)
    lease.release()
    assert available() == (2 if kind == "concurrency" else 0)
    others.release()


@pytest.mark.parametrize("kind", list(TIMED))
def test_a_window_gone_by_takes_nothing_back(kind: str) -> None:
    clock = ManualClock()
    limiter = TIMED[kind].limiter(clock=clock)
    lease = limiter.acquire(10)
    clock.advance(5.0)  # the window (a bucket's refills) long past: all ten are back anyway
    assert limiter.available_permits() == 10
    lease.settle(0)
    assert limiter.available_permits() == 10  # the settle adds nothing on top


def test_a_bucket_takes_back_only_what_it_could_not_have_refilled() -> None:
    clock = ManualClock()
    bucket = permits.TokenBucketLimiter(10, 2, 1.0, clock=clock)
    lease = bucket.acquire(10)
    clock.advance(1.0)  # two refilled since the grant, and taken
    assert bucket.acquire(2)
    lease.settle(4)  # six unused: two of them the refill made up for already
    assert bucket.available_permits() == 4


@pytest.mark.parametrize("bad", ["3", 3.0, True, None])
def test_a_count_that_is_not_an_int_is_a_type_error(bad: object) -> None:
    lease = permits.FixedWindowLimiter(10, 1.0, clock=ManualClock()).acquire(5)
    with pytest.raises(TypeError, match="permit_count must be an int"):
        lease.settle(bad)  # type: ignore[arg-type]
    assert lease.permit_count == 5


@pytest.mark.parametrize("bad", [-1, 6, 2**70])
def test_a_count_out_of_range_is_a_value_error(bad: int) -> None:
    lease = permits.FixedWindowLimiter(10, 1.0, clock=ManualClock()).acquire(5)
    with pytest.raises(ValueError, match=r"permit_count must be from 0 to the lease's 5"):
        lease.settle(bad)
    assert lease.permit_count == 5


def test_a_failed_or_released_lease_cannot_be_settled() -> None:
    limiter = permits.ConcurrencyLimiter(2)
    held = limiter.acquire(2)
    with pytest.raises(ValueError, match="failed lease"):
        limiter.acquire().settle(0)
    held.release()
    with pytest.raises(ValueError, match="released lease: settle it before its release"):
        held.settle(1)
    assert limiter.available_permits() == 2  # nothing given back twice


def test_inside_with_the_lease_settles_then_releases() -> None:
    limiter = permits.ConcurrencyLimiter(10)
    with limiter.acquire(10) as lease:
        lease.settle(3)
        assert limiter.available_permits() == 7
    assert limiter.available_permits() == 10


def test_a_concurrency_lease_settled_to_nothing_holds_nothing() -> None:
    limiter = permits.ConcurrencyLimiter(4)
    lease = limiter.acquire(4)
    lease.settle(0)
    assert limiter.available_permits() == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)  # collected unreleased: nothing to say
        del lease
        gc.collect()
    assert limiter.available_permits() == 4


def test_a_chain_settles_every_member() -> None:
    clock = ManualClock()
    bucket = permits.TokenBucketLimiter(10, 10, 1.0, clock=clock)
    pool = permits.ConcurrencyLimiter(10)
    per_user = PartitionedLimiter.per_key(specs.FixedWindow(10, 1.0), clock=clock)
    chained = permits.chain(bucket, pool, per_user)
    lease = chained.acquire("alice", 10)
    lease.settle(4)
    assert lease.permit_count == 4
    assert bucket.available_permits() == pool.available_permits() == per_user.available_permits("alice") == 6
    lease.release()
    assert pool.available_permits() == 10 and bucket.available_permits() == 6


def test_several_rates_settle_as_a_chain() -> None:
    clock = ManualClock()
    limiter = specs.parse("100/minute;1000/hour").limiter(clock=clock)
    lease = limiter.acquire(100)  # an LLM call's most tokens
    lease.settle(30)  # what it used
    assert limiter.acquire(70) and not limiter.acquire(1)


def test_a_custom_lease_settles_by_its_on_settle() -> None:
    kept: list[int] = []
    lease = Lease.granted(5, on_settle=kept.append)
    lease.settle(3)
    lease.settle(1)
    assert kept == [3, 1] and lease.permit_count == 1

    def refuse(n: int) -> None:
        raise RuntimeError("the server said no")

    stubborn = Lease.granted(5, on_settle=refuse)
    with pytest.raises(RuntimeError, match="said no"):
        stubborn.settle(2)
    assert stubborn.permit_count == 5  # kept: the callback could not give them back
    with pytest.raises(TypeError, match="on_settle must be callable"):
        Lease.granted(5, on_settle=3)  # type: ignore[arg-type]


def test_a_custom_lease_without_on_settle_keeps_its_permits_counted() -> None:
    released: list[str] = []
    lease = Lease.granted(5, on_release=lambda: released.append("released"))
    lease.settle(2)  # lowers the count; the custom limiter gets nothing back: never looser
    assert lease.permit_count == 2
    lease.release()
    assert released == ["released"]


class _Pool(permits.RateLimiter):
    """A custom limiter whose leases give back by on_settle."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.free = limit

    def _acquire(self, permit_count: int) -> Lease:
        if permit_count > self.free:
            return Lease.denied()
        self.free -= permit_count
        held = [permit_count]

        def settle(keep: int) -> None:
            self.free += held[0] - keep
            held[0] = keep

        def release() -> None:
            self.free += held[0]

        return Lease.granted(permit_count, on_release=release, on_settle=settle)


def test_a_custom_limiter_with_on_settle_works_in_a_chain() -> None:
    pool = _Pool(10)
    lease = permits.chain(pool, permits.ConcurrencyLimiter(10)).acquire(8)
    lease.settle(5)
    assert pool.free == 5
    lease.release()
    assert pool.free == 10


def test_an_instrumented_limiter_settles_its_inner_lease() -> None:
    from prometheus_client import CollectorRegistry

    from permits.metrics import instrument

    limiter = permits.ConcurrencyLimiter(10, name="pool")
    observed = instrument(limiter, registry=CollectorRegistry())
    lease = observed.acquire(10)
    lease.settle(4)
    assert limiter.available_permits() == 6
    lease.release()
    assert limiter.available_permits() == 10


@pytest.mark.parametrize("kind", list(TIMED))
def test_a_settle_after_its_key_was_evicted_and_made_again_gives_nothing_back(kind: str) -> None:
    """A key's record made again (evicted once idle, then used) starts a new timeline at a later
    anchor: a lease of the evicted record settled late (work that ran long) gives nothing back into
    the new record's windows, which count other grants (before: 20 grants in a window of 10)."""
    clock = ManualClock()
    spec = TIMED[kind]
    keyed: Any = PartitionedLimiter.per_key(spec, idle_timeout=0.5, clock=clock)
    old = keyed.acquire("k", 10)
    assert old
    clock.advance(5.0)  # full again and idle: evicted
    assert keyed.partition_count == 0
    clock.advance(0.375)
    assert keyed.acquire("k", 10)  # the new record's whole limit
    old.settle(0)
    assert keyed.available_permits("k") == 0
    assert not keyed.acquire("k")
