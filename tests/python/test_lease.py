"""permits.Lease: docs/design.md: Leases, Retry-after, Reasons."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Mapping

import pytest

import permits

from _support import FREE_THREADED


def test_successful_lease_fields(clock):
    lim = permits.TokenBucketLimiter(3, 1, 1.0, clock=clock)
    lease = lim.acquire(2)
    assert isinstance(lease, permits.Lease)
    assert lease.acquired is True
    assert bool(lease) is True
    assert lease.permit_count == 2
    assert lease.retry_after is None
    assert lease.reason is None
    assert isinstance(lease.metadata, Mapping)
    assert "retry_after" not in lease.metadata
    assert "reason" not in lease.metadata


def test_failed_lease_fields(clock):
    lim = permits.TokenBucketLimiter(3, 1, 1.0, clock=clock)
    lim.acquire(3)
    lease = lim.acquire(2)
    assert lease.acquired is False
    assert bool(lease) is False
    assert lease.permit_count == 2
    assert lease.reason == "limit_reached"
    assert isinstance(lease.retry_after, float)
    assert lease.retry_after == pytest.approx(2.0)
    assert lease.metadata["retry_after"] == lease.retry_after
    assert lease.metadata["reason"] == "limit_reached"


def test_metadata_is_read_only(clock):
    lim = permits.FixedWindowLimiter(1, 1.0, clock=clock)
    lim.acquire()
    lease = lim.acquire()
    with pytest.raises(TypeError):
        lease.metadata["reason"] = "other"  # type: ignore[index]
    with pytest.raises((TypeError, AttributeError)):
        del lease.metadata["reason"]  # type: ignore[attr-defined]
    assert lease.metadata["reason"] == "limit_reached"


def test_if_lease_pattern():
    lim = permits.ConcurrencyLimiter(1)
    taken = []
    for _ in range(3):
        if lease := lim.acquire():
            taken.append(lease)
    assert len(taken) == 1


def test_release_is_idempotent_and_returns_concurrency_permits():
    lim = permits.ConcurrencyLimiter(4)
    lease = lim.acquire(3)
    for _ in range(3):
        lease.release()
    assert lim.available_permits() == 4
    other = lim.acquire(4)
    assert other.acquired


def test_with_lease_releases_on_exception():
    lim = permits.ConcurrencyLimiter(1)
    with pytest.raises(KeyError), lim.acquire():
        raise KeyError("boom")
    assert lim.available_permits() == 1


def test_with_statement_returns_the_lease():
    lim = permits.ConcurrencyLimiter(1)
    lease = lim.acquire()
    with lease as entered:
        assert entered is lease


def test_time_based_release_is_a_no_op(clock):
    # docs/design.md, Leases: releasing gives nothing back on the time-based limiters.
    limiters = [
        permits.TokenBucketLimiter(1, 1, 10.0, clock=clock),
        permits.FixedWindowLimiter(1, 10.0, clock=clock),
        permits.SlidingWindowLimiter(1, 10.0, 2, clock=clock),
        permits.SlidingWindowCounterLimiter(1, 10.0, clock=clock),
    ]
    for lim in limiters:
        lease = lim.acquire()
        lease.release()
        lease.release()
        assert lim.available_permits() == 0, type(lim).__name__
        assert not lim.acquire().acquired


def test_unreleased_concurrency_lease_is_released_on_gc_with_resource_warning():
    lim = permits.ConcurrencyLimiter(1)
    lease = lim.acquire()
    assert lim.available_permits() == 0
    with pytest.warns(ResourceWarning):
        del lease
        gc.collect()
    assert lim.available_permits() == 1
    assert lim.acquire().acquired


def test_dropped_acquire_result_is_released_with_resource_warning():
    lim = permits.ConcurrencyLimiter(2)
    with pytest.warns(ResourceWarning):
        lim.acquire(2)  # result dropped at once
        gc.collect()
    assert lim.available_permits() == 2


def test_unreleased_lease_from_wait_is_released_on_gc_with_resource_warning():
    lim = permits.ConcurrencyLimiter(2)
    lease = lim.wait(2)
    assert lim.available_permits() == 0
    with pytest.warns(ResourceWarning):
        del lease
        gc.collect()
    assert lim.available_permits() == 2


async def test_unreleased_lease_from_wait_async_is_released_on_gc_with_resource_warning():
    lim = permits.ConcurrencyLimiter(1, queue_limit=1)
    held = lim.acquire()
    task = asyncio.ensure_future(lim.wait_async())
    for _ in range(10):
        await asyncio.sleep(0)
    held.release()
    lease = await asyncio.wait_for(task, 5)
    assert lease.acquired
    assert lim.available_permits() == 0
    with pytest.warns(ResourceWarning):
        del lease, task
        # 3.13's loop keeps the handle it ran last (which holds the task) until its next step.
        await asyncio.sleep(0)
        gc.collect()
    assert lim.available_permits() == 1


def test_released_concurrency_lease_does_not_warn_on_gc():
    lim = permits.ConcurrencyLimiter(1)
    lease = lim.acquire()
    lease.release()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del lease
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert lim.available_permits() == 1


def test_failed_concurrency_lease_does_not_warn_on_gc():
    lim = permits.ConcurrencyLimiter(1)
    held = lim.acquire()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        failed = lim.acquire()
        assert not failed.acquired
        del failed
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    held.release()


def test_lease_released_by_context_manager_does_not_warn():
    lim = permits.ConcurrencyLimiter(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with lim.acquire():
            pass
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


def test_lease_granted_and_denied_constructors():
    calls = []
    granted = permits.Lease.granted(3, on_release=lambda: calls.append(1), metadata={"k": "v"})
    assert granted.acquired
    assert granted.permit_count == 3
    assert granted.reason is None
    assert granted.retry_after is None
    assert granted.metadata["k"] == "v"
    granted.release()
    granted.release()
    assert calls == [1]

    denied = permits.Lease.denied("cpu_high", retry_after=1.5, metadata={"cpu": 97})
    assert not denied.acquired
    assert denied.reason == "cpu_high"
    assert denied.retry_after == pytest.approx(1.5)
    assert denied.metadata["cpu"] == 97
    assert denied.metadata["reason"] == "cpu_high"
    assert denied.metadata["retry_after"] == pytest.approx(1.5)
    denied.release()  # a failed lease holds nothing


def test_lease_denied_defaults():
    denied = permits.Lease.denied()
    assert not denied.acquired
    assert denied.reason == "limit_reached"
    assert denied.retry_after is None
    assert "retry_after" not in denied.metadata


def test_lease_granted_defaults():
    granted = permits.Lease.granted()
    assert granted.acquired
    assert granted.permit_count == 1
    with granted:
        pass


def test_lease_outliving_its_limiter_can_still_be_released():
    lim = permits.ConcurrencyLimiter(1)
    lease = lim.acquire()
    del lim
    gc.collect()
    lease.release()
    lease.release()


def test_unreleased_lease_of_a_closed_limiter_is_collected_quietly():
    lim = permits.ConcurrencyLimiter(1)
    lease = lim.acquire()
    lim.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        del lease
        gc.collect()
    with pytest.raises(permits.LimiterClosedError):
        lim.acquire()


def test_a_time_based_lease_refunds_its_limiter_without_owning_it(clock):
    # Time-based leases name their limiter in a registry instead of owning it (no atomic reference
    # counting per acquire); a refund still reaches it, among many limiters come and gone.
    for _ in range(300):
        permits.FixedWindowLimiter(1, 60.0, clock=clock).acquire()  # registered, then gone
    gc.collect()
    lim = permits.TokenBucketLimiter(3, 1, 60.0, clock=clock)
    lease = lim.acquire(2)
    assert lim.available_permits() == 1
    lease._refund()
    assert lim.available_permits() == 3
    lease._refund()  # once only
    assert lim.available_permits() == 3


def test_a_refund_after_the_limiter_is_gone_does_nothing(clock):
    lim = permits.FixedWindowLimiter(1, 60.0, clock=clock)
    per_key = permits.PartitionedLimiter.per_key(permits.Partition.token_bucket(None, 2, 1, 60.0), clock=clock)
    leases = [lim.acquire(), per_key.acquire("k")]
    del lim, per_key
    gc.collect()
    for lease in leases:
        assert lease
        lease._refund()
        lease.release()


def _success_paths(clock):
    big = 10**9
    limiters = {
        "token_bucket": permits.TokenBucketLimiter(big, big, 1.0, clock=clock),
        "fixed_window": permits.FixedWindowLimiter(big, 1.0, clock=clock),
        "sliding_window": permits.SlidingWindowLimiter(big, 1.0, 4, clock=clock),
        "sliding_window_counter": permits.SlidingWindowCounterLimiter(big, 1.0, clock=clock),
    }
    paths = {name: lim.acquire for name, lim in limiters.items()}
    concurrency = permits.ConcurrencyLimiter(big)
    paths["concurrency acquire+release"] = lambda: concurrency.acquire().release()
    per_key = permits.PartitionedLimiter.per_key(
        permits.Partition.token_bucket(None, big, big, 1.0), idle_timeout=60.0, clock=clock
    )
    paths["per_key"] = lambda: per_key.acquire("user-1")
    return paths


@pytest.mark.skipif(FREE_THREADED, reason="a free-threaded build keeps no freelist (mimalloc: a heap per thread)")
@pytest.mark.parametrize("name", list(_success_paths(permits.ManualClock())))
def test_the_success_path_allocates_no_lease(clock, name):
    # Leases discarded as they are made go back to a freelist: after the first ones, a granted
    # acquire calls no allocator (the "no allocation on the success path").
    check = _success_paths(clock)[name]
    for _ in range(10):
        assert check() is not False
    before = permits._core._lease_allocations()
    for _ in range(10_000):
        check()
    assert permits._core._lease_allocations() == before


def test_leases_kept_alive_are_allocated_and_counted(clock):
    # The counter the test above reads does count: leases that stay alive need memory of their own.
    lim = permits.TokenBucketLimiter(10**9, 10**9, 1.0, clock=clock)
    before = permits._core._lease_allocations()
    kept = [lim.acquire() for _ in range(1_000)]
    assert all(kept)
    assert permits._core._lease_allocations() - before >= 1_000 - 128  # at most the freelist's 128 reused


def test_on_refund_is_called_instead_of_on_release_when_a_chain_gives_a_lease_back():
    calls: list[str] = []
    lease = permits.Lease.granted(2, on_release=lambda: calls.append("release"), on_refund=lambda: calls.append("undo"))
    lease._refund()
    lease.release()
    lease._refund()
    assert calls == ["undo"]


def test_release_calls_on_release_not_on_refund():
    calls: list[str] = []
    lease = permits.Lease.granted(on_release=lambda: calls.append("release"), on_refund=lambda: calls.append("undo"))
    lease.release()
    lease._refund()
    assert calls == ["release"]


def test_without_on_refund_a_refund_calls_on_release():
    calls: list[str] = []
    lease = permits.Lease.granted(on_release=lambda: calls.append("release"))
    lease._refund()
    assert calls == ["release"]


def test_on_refund_alone():
    calls: list[str] = []
    released = permits.Lease.granted(on_refund=lambda: calls.append("undo"))
    released.release()
    refunded = permits.Lease.granted(on_refund=lambda: calls.append("undo"))
    refunded._refund()
    assert calls == ["undo"]


def test_on_refund_must_be_callable():
    with pytest.raises(TypeError, match="on_refund must be callable"):
        permits.Lease.granted(on_refund=1)  # type: ignore[arg-type]


def test_a_chain_refund_reaches_on_refund():
    calls: list[str] = []

    class Custom(permits.RateLimiter):
        def _acquire(self, permit_count: int) -> permits.Lease:
            return permits.Lease.granted(
                permit_count, on_release=lambda: calls.append("release"), on_refund=lambda: calls.append("undo")
            )

    full = permits.ConcurrencyLimiter(1)
    held = full.acquire()
    assert not permits.chain(Custom(), full).acquire()
    assert calls == ["undo"]
    held.release()
    lease = permits.chain(Custom(), full).acquire()
    lease.release()
    assert calls == ["undo", "release"]
