"""wait_async under trio and anyio's trio backend: granted at once or queued, the same answers
as under asyncio (a wait does not work only while permits are free)."""

from __future__ import annotations

from typing import Any

import pytest

import permits

from _support import need

trio = need("trio")
anyio = need("anyio")


def _limiters(clock: permits.ManualClock) -> list[tuple[Any, tuple[object, ...]]]:
    """(limiter, leading args): each allows one permit at a time and queues up to 10."""
    per_key = permits.PartitionedLimiter.per_key(permits.Partition.concurrency(None, 1, queue_limit=10), clock=clock)
    return [
        (permits.ConcurrencyLimiter(1, queue_limit=10, clock=clock), ()),
        (permits.TokenBucketLimiter(1, 1, 1.0, queue_limit=10, clock=clock), ()),
        (per_key, ("k",)),
    ]


def _queued(limiter: Any, args: tuple[object, ...]) -> int:
    return limiter.statistics(*args).current_queued_count  # type: ignore[no-any-return]


def _refund(limiter: Any, lease: permits.Lease, clock: permits.ManualClock) -> None:
    lease.release()  # concurrency
    clock.advance(1.0)  # token bucket


def test_under_trio_a_wait_is_granted_at_once_or_after_queueing() -> None:
    clock = permits.ManualClock()

    async def main() -> list[bool]:
        results = []
        for limiter, args in _limiters(clock):
            first = await limiter.wait_async(*args)  # granted at once
            got: list[permits.Lease] = []

            async def waiter(limiter: Any = limiter, args: tuple[object, ...] = args, got: list[Any] = got) -> None:
                got.append(await limiter.wait_async(*args))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter)
                while _queued(limiter, args) == 0:
                    await trio.sleep(0)
                _refund(limiter, first, clock)
            results.append(got[0].acquired)
            got[0].release()
        return results

    assert trio.run(main) == [True, True, True]


def test_under_trio_a_cancelled_wait_leaves_the_queue() -> None:
    clock = permits.ManualClock()

    async def main() -> None:
        for limiter, args in _limiters(clock):
            held = await limiter.wait_async(*args)
            with trio.move_on_after(0.05) as scope:
                await limiter.wait_async(*args)
            assert scope.cancelled_caught
            assert _queued(limiter, args) == 0
            _refund(limiter, held, clock)
            lease = await limiter.wait_async(*args)  # the permit was not kept by the cancelled wait
            assert lease.acquired
            lease.release()

    trio.run(main)


def test_under_trio_async_with_releases_the_lease() -> None:
    async def main() -> int:
        limiter = permits.ConcurrencyLimiter(1, queue_limit=10)
        async with limiter.wait_async() as lease:
            assert lease.acquired
            assert limiter.available_permits() == 0
        return limiter.available_permits()

    assert trio.run(main) == 1


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_under_anyio_many_tasks_share_a_concurrency_limit(backend: str) -> None:
    limiter = permits.ConcurrencyLimiter(3, queue_limit=1000)
    peak = holders = 0

    async def one() -> None:
        nonlocal peak, holders
        async with limiter.wait_async() as lease:
            assert lease.acquired
            holders += 1
            peak = max(peak, holders)
            await anyio.sleep(0.001)
            holders -= 1

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(200):
                tg.start_soon(one)

    anyio.run(main, backend=backend)
    assert peak == 3
    assert limiter.available_permits() == 3
    assert limiter.statistics().total_successful_leases == 200
