"""acquire_async() of the engine's limiters: the attempt is made when it is called, and the
awaitable (the engine's own, no Python frame) returns that lease on every await."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import permits
from permits import _core

from _support import KINDS, LimiterKit


def make(kind: str, limit: int = 2) -> Any:
    return LimiterKit(kind, permits.ManualClock()).make(limit)


@pytest.mark.parametrize("kind", KINDS)
async def test_it_is_the_engines_awaitable_and_acquires_when_called(kind: str) -> None:
    limiter = make(kind)
    attempt = limiter.acquire_async(2)
    assert type(attempt) is _core.EngineLeaseWait
    assert limiter.available_permits() == 0  # taken at the call, before any await
    lease = await attempt
    assert lease and lease.permit_count == 2
    assert await attempt is lease  # awaited again: the same lease, nothing more taken
    refused = await limiter.acquire_async()
    assert not refused and refused.reason == "limit_reached"
    lease.release()


async def test_async_with_releases_on_exit() -> None:
    pool = permits.ConcurrencyLimiter(1)
    async with pool.acquire_async() as lease:
        assert lease and pool.available_permits() == 0
    assert pool.available_permits() == 1


@pytest.mark.parametrize("kind", KINDS)
def test_thrown_into_before_its_first_step_it_gives_the_lease_back(kind: str) -> None:
    limiter = make(kind)
    attempt = limiter.acquire_async(2)
    with pytest.raises(asyncio.CancelledError):
        attempt.throw(asyncio.CancelledError())
    assert limiter.available_permits() == 2


async def test_a_task_cancelled_before_it_ran_gives_the_lease_back() -> None:
    bucket = permits.TokenBucketLimiter(2, 1, 10.0, clock=permits.ManualClock())
    task = asyncio.create_task(bucket.acquire_async(2))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert bucket.available_permits() == 2


async def test_a_task_takes_it_as_a_coroutine() -> None:
    bucket = permits.TokenBucketLimiter(2, 1, 10.0, clock=permits.ManualClock())
    lease = await asyncio.create_task(bucket.acquire_async())
    assert lease and bucket.available_permits() == 1
