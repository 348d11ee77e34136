"""The asyncio bridge: several event loops in several threads, and one wake-up per batch."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections.abc import Callable

import pytest

import permits
from permits import _asyncio, _core

from _support import BRIDGE_LOOPS


def test_event_loops_in_several_threads_share_one_limiter() -> None:
    limiter = permits.ConcurrencyLimiter(5, queue_limit=10_000)
    holders = 0
    peak = 0
    lock = threading.Lock()
    granted: list[int] = []

    async def one() -> bool:
        nonlocal holders, peak
        async with limiter.wait_async() as lease:
            with lock:
                holders += 1
                peak = max(peak, holders)
            await asyncio.sleep(0)
            with lock:
                holders -= 1
            return lease.acquired

    async def main() -> None:
        results = await asyncio.gather(*(one() for _ in range(500)))
        with lock:
            granted.append(sum(results))

    threads = [threading.Thread(target=asyncio.run, args=(main(),)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert granted == [500, 500, 500]
    assert peak <= 5
    stats = limiter.statistics()
    assert stats.total_successful_leases == 1500
    assert stats.current_available_permits == 5
    assert stats.current_queued_count == 0


async def test_a_thousand_waiters_released_together_cost_one_wake_up() -> None:
    clock = permits.ManualClock()
    limiter = permits.TokenBucketLimiter(1000, 1000, 1.0, queue_limit=1000, clock=clock)
    assert limiter.acquire(1000)
    tasks = [asyncio.ensure_future(limiter.wait_async()) for _ in range(1000)]
    await asyncio.sleep(0)
    assert limiter.statistics().current_queued_count == 1000
    bridge = _asyncio.bridge_of(asyncio.get_running_loop())
    assert bridge is not None
    before = bridge.wakeups
    clock.advance(1.0)  # the engine grants all 1000 in one timer run
    leases = await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert all(leases)
    assert bridge.wakeups - before == 1
    assert bridge.pending == 0


@pytest.mark.parametrize("loop_factory", BRIDGE_LOOPS.values(), ids=BRIDGE_LOOPS.keys())
def test_a_finished_event_loop_leaves_no_bridge_behind(loop_factory: Callable[[], asyncio.AbstractEventLoop]) -> None:
    limiter = permits.ConcurrencyLimiter(1, queue_limit=1)
    bridges: list[weakref.ref[_core.LoopBridge]] = []

    async def main() -> None:
        held = limiter.acquire()
        waiter = asyncio.ensure_future(limiter.wait_async())
        await asyncio.sleep(0)
        bridge = _asyncio.bridge_of(asyncio.get_running_loop())
        assert bridge is not None
        bridges.append(weakref.ref(bridge))
        held.release()
        (await waiter).release()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())
    gc.collect()
    assert bridges[0]() is None
