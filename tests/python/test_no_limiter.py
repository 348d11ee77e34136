"""NoLimiter: every request succeeds (docs/design.md, Partitions; .NET's Create_NoLimiter test)."""

from __future__ import annotations

import pytest

import permits

from _support import MAX_INT32, result


def test_no_limiter_grants_everything():
    lim = permits.NoLimiter()
    assert isinstance(lim, permits.RateLimiter)
    for n in (0, 1, 1000, MAX_INT32):
        lease = lim.acquire(n)
        assert lease.acquired
        assert lease.reason is None
        assert lease.retry_after is None
    assert lim.wait(5).acquired


async def test_no_limiter_async():
    lim = permits.NoLimiter()
    assert (await result(lim.wait_async(3))).acquired
    assert (await result(lim.acquire_async(3))).acquired
    async with lim.wait_async() as lease:
        assert lease.acquired


def test_no_limiter_statistics_count_successes():
    lim = permits.NoLimiter()
    for _ in range(5):
        lim.acquire().release()
    s = lim.statistics()
    assert s.total_successful_leases == 5
    assert s.total_failed_leases == 0
    assert s.current_queued_count == 0


def test_no_limiter_rejects_negative_counts():
    lim = permits.NoLimiter()
    with pytest.raises(ValueError, match="permit_count"):
        lim.acquire(-1)
    with pytest.raises(TypeError):
        lim.acquire(1.0)
