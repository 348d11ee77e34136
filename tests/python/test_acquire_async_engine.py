"""acquire_async() of the engine's limiters and per-key tables: the attempt is made when the
awaitable is first stepped, and the awaitable (the engine's own, no Python frame) returns that
lease on every await. One never stepped takes nothing, however it ends: dropped, closed, thrown
into, or its task cancelled before it ran."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable
from typing import Any

import pytest

import permits
from permits import _core

from _support import KINDS, LimiterKit


def make(kind: str, limit: int = 2) -> Any:
    return LimiterKit(kind, permits.ManualClock()).make(limit)


class Keyed:
    """One key of a per-key table, shaped as a limiter for these tests."""

    def __init__(self, kind: str, limit: int = 2) -> None:
        spec = make(kind, limit).spec
        self.table = permits.PartitionedLimiter.per_key(spec, clock=permits.ManualClock())
        self.key = "k"

    def acquire_async(self, n: int = 2) -> Any:
        return self.table.acquire_async(self.key, n)

    def available_permits(self) -> int:
        return int(self.table.available_permits(self.key))


SUBJECTS: dict[str, Callable[[str], Any]] = {"limiter": make, "per_key": Keyed}


@pytest.mark.parametrize("kind", KINDS)
async def test_it_is_the_engines_awaitable_and_acquires_when_awaited(kind: str) -> None:
    limiter = make(kind)
    attempt = limiter.acquire_async(2)
    assert type(attempt) is _core.EngineLeaseWait
    assert limiter.available_permits() == 2  # nothing taken by the call
    lease = await attempt
    assert lease and lease.permit_count == 2
    assert limiter.available_permits() == 0
    assert await attempt is lease  # awaited again: the same lease, nothing more taken
    refused = await limiter.acquire_async()
    assert not refused and refused.reason == "limit_reached"
    lease.release()


@pytest.mark.parametrize("kind", KINDS)
async def test_per_key_acquire_async_is_the_engines_awaitable_too(kind: str) -> None:
    keyed = Keyed(kind)
    attempt = keyed.acquire_async(2)
    assert type(attempt) is _core.EngineLeaseWait
    assert keyed.available_permits() == 2
    lease = await attempt
    assert lease and keyed.available_permits() == 0
    assert await attempt is lease
    lease.release()


async def test_async_with_releases_on_exit() -> None:
    pool = permits.ConcurrencyLimiter(1)
    async with pool.acquire_async() as lease:
        assert lease and pool.available_permits() == 0
    assert pool.available_permits() == 1


@pytest.mark.parametrize("subject", SUBJECTS)
@pytest.mark.parametrize("kind", KINDS)
def test_thrown_into_before_its_first_step_it_takes_nothing(kind: str, subject: str) -> None:
    limiter = SUBJECTS[subject](kind)
    attempt = limiter.acquire_async(2)
    with pytest.raises(asyncio.CancelledError):
        attempt.throw(asyncio.CancelledError())
    assert limiter.available_permits() == 2


@pytest.mark.parametrize("subject", SUBJECTS)
@pytest.mark.parametrize("kind", KINDS)
def test_closed_before_its_first_step_it_takes_nothing(kind: str, subject: str) -> None:
    limiter = SUBJECTS[subject](kind)
    attempt = limiter.acquire_async(2)
    attempt.close()
    assert limiter.available_permits() == 2
    with pytest.raises(RuntimeError, match="already awaited"):
        attempt.send(None)  # a closed attempt never asks afterwards either
    assert limiter.available_permits() == 2


@pytest.mark.parametrize("subject", SUBJECTS)
@pytest.mark.parametrize("kind", KINDS)
def test_dropped_unawaited_it_takes_nothing_and_logs_nothing(
    kind: str, subject: str, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = SUBJECTS[subject](kind)
    gc.collect()  # (earlier tests' garbage first: a lease they dropped is logged when collected)
    # (it warns as a coroutine does: a dropped awaitable is a forgotten await)
    with caplog.at_level(logging.WARNING, logger="permits"), pytest.warns(RuntimeWarning, match="never awaited"):
        for _ in range(5):
            limiter.acquire_async(2)  # dropped at once
        gc.collect()
    assert limiter.available_permits() == 2
    # (the engine's record: a store's lease another test dropped may be collected meanwhile)
    assert not [r.getMessage() for r in caplog.records if "garbage-collected without release" in r.getMessage()]


@pytest.mark.parametrize("subject", SUBJECTS)
@pytest.mark.parametrize("kind", KINDS)
async def test_a_task_cancelled_before_it_ran_takes_nothing(kind: str, subject: str) -> None:
    limiter = SUBJECTS[subject](kind)
    task = asyncio.create_task(limiter.acquire_async(2))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert limiter.available_permits() == 2


@pytest.mark.parametrize("subject", SUBJECTS)
@pytest.mark.parametrize("kind", KINDS)
async def test_a_worker_handed_the_awaitable_and_cancelled_before_it_starts_loses_nothing(
    kind: str, subject: str
) -> None:
    # The habit the issue names: the awaitable is made by the caller and handed to a worker that a
    # TaskGroup cancels (a sibling failed) before the worker ever ran.
    limiter = SUBJECTS[subject](kind)
    done: list[Any] = []

    async def worker(attempt: Any) -> None:
        done.append(await attempt)

    async def fails() -> None:
        raise LookupError("a sibling fails first")

    # (the awaitables the workers never awaited warn, as coroutines handed to them would)
    with pytest.warns(RuntimeWarning, match="never awaited"):
        with pytest.raises(ExceptionGroup):
            async with asyncio.TaskGroup() as group:
                for _ in range(5):
                    group.create_task(worker(limiter.acquire_async(2)))
                group.create_task(fails())
                raise LookupError("the body fails before any task ran")
        assert done == []
        gc.collect()
    assert limiter.available_permits() == 2


@pytest.mark.parametrize("kind", KINDS)
async def test_the_same_program_behaves_alike_with_a_limiter_and_its_chain(kind: str) -> None:
    outcomes = []
    for wrap in (lambda limiter: limiter, lambda limiter: permits.chain(limiter)):
        limiter = make(kind)
        subject = wrap(limiter)
        attempts = [subject.acquire_async(2) for _ in range(3)]
        attempts[0].close()
        with pytest.warns(RuntimeWarning, match="never awaited"):  # (dropped: a forgotten await)
            del attempts[1]
            gc.collect()
        outcomes.append(limiter.available_permits())
        lease = await attempts[-1]
        outcomes.append((bool(lease), limiter.available_permits()))
    assert outcomes[:2] == outcomes[2:] == [2, (True, 0)]


async def test_a_close_between_the_call_and_the_await_raises_at_the_await() -> None:
    bucket = permits.TokenBucketLimiter(2, 1, 10.0, clock=permits.ManualClock())
    attempt = bucket.acquire_async()
    bucket.close()
    with pytest.raises(permits.LimiterClosedError):
        await attempt


def test_bad_input_is_refused_at_the_call() -> None:
    bucket = permits.TokenBucketLimiter(2, 1, 10.0, clock=permits.ManualClock())
    with pytest.raises(ValueError, match="permit_count"):
        bucket.acquire_async(3)
    with pytest.raises(ValueError, match="permit_count"):
        bucket.acquire_async(-1)
    table = permits.PartitionedLimiter.per_key(permits.specs.TokenBucket(2, 1, 10.0))
    with pytest.raises(TypeError):
        table.acquire_async(object())
    bucket.close()
    with pytest.raises(permits.LimiterClosedError):
        bucket.acquire_async()


async def test_a_task_takes_it_as_a_coroutine() -> None:
    bucket = permits.TokenBucketLimiter(2, 1, 10.0, clock=permits.ManualClock())
    lease = await asyncio.create_task(bucket.acquire_async())
    assert lease and bucket.available_permits() == 1
