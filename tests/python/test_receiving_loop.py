"""The asyncio bridge on a loop that cannot watch a descriptor (Windows' proactor loop).

Such a loop's ``add_reader`` raises NotImplementedError; the bridge then takes its wake-up socket
and keeps one ``loop.sock_recv`` on it in flight. ``ReceivingLoop`` (a selector loop whose
``add_reader`` refuses) is that kind of loop on any platform. The modules that exercise the
bridge also run all their async tests on it (conftest.py); these tests are about the receiving
itself: what it owns, and what happens when its loop ends. (On Windows the same modules also run
on the real proactor loop.)
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import warnings

import pytest

import permits
from permits import _asyncio

from _support import ReceivingLoop

_FDS = "/proc/self/fd"
linux_fds = pytest.mark.skipif(not os.path.isdir(_FDS), reason="counts open descriptors in /proc/self/fd (Linux)")


def open_fds() -> int:
    return len(os.listdir(_FDS))


def run(main: object) -> object:
    with asyncio.Runner(loop_factory=ReceivingLoop) as runner:
        return runner.run(main)  # type: ignore[arg-type]


def test_the_receiving_loop_watches_no_descriptor() -> None:
    loop = ReceivingLoop()
    try:
        with pytest.raises(NotImplementedError):
            loop.add_reader(0, lambda: None)
    finally:
        loop.close()


async def test_the_bridge_receives_only_where_it_cannot_watch() -> None:
    limiter = permits.ConcurrencyLimiter(1, queue_limit=1)
    held = limiter.acquire()
    tasks_before = len(asyncio.all_tasks())
    waiter = asyncio.ensure_future(limiter.wait_async())
    await asyncio.sleep(0)
    bridge = _asyncio.bridge_of(asyncio.get_running_loop())
    assert bridge is not None
    loop = asyncio.get_running_loop()
    receiving = isinstance(loop, ReceivingLoop) or type(loop).__name__ == "ProactorEventLoop"
    # The socket was handed over to the receive (-1), or is watched where it is.
    assert (bridge.fd == -1) is receiving
    assert bridge.take_reader() == -1 if receiving else bridge.fd >= 0
    # The receive is no task: only the waiter was added.
    assert len(asyncio.all_tasks()) == tasks_before + 1
    held.release()
    lease = await asyncio.wait_for(waiter, 10)
    assert lease.acquired
    lease.release()


def test_shutdown_code_that_awaits_every_other_task_finishes() -> None:
    limiter = permits.ConcurrencyLimiter(1, queue_limit=4)

    async def main() -> int:
        held = limiter.acquire()
        waiters = [asyncio.ensure_future(limiter.wait_async()) for _ in range(3)]
        await asyncio.sleep(0)
        held.release()

        async def release_each() -> None:
            for w in waiters:
                (await w).release()

        releaser = asyncio.ensure_future(release_each())
        # A common shutdown: wait for every task but this one. A receive run as a task would be
        # among them, and never finish.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        await asyncio.wait_for(asyncio.gather(*others), 10)
        assert releaser.done()
        return limiter.statistics().total_successful_leases

    assert run(main()) == 4


def test_waits_completed_from_another_thread_wake_the_loop() -> None:
    clock = permits.ManualClock()
    limiter = permits.TokenBucketLimiter(10, 10, 1.0, queue_limit=100, clock=clock)

    async def main() -> int:
        assert limiter.acquire(10)
        tasks = [asyncio.ensure_future(limiter.wait_async(2)) for _ in range(5)]
        await asyncio.sleep(0)
        assert limiter.statistics().current_queued_count == 10  # permits
        # The engine grants them in the advancing thread, which signals the loop's socket.
        threading.Thread(target=clock.advance, args=(1.0,)).start()
        leases = await asyncio.wait_for(asyncio.gather(*tasks), 10)
        return sum(lease.acquired for lease in leases)

    assert run(main()) == 5


@linux_fds
def test_a_loop_closed_by_hand_gives_queued_permits_back_and_its_socket_is_closed() -> None:
    limiter = permits.ConcurrencyLimiter(1, queue_limit=2)
    held = limiter.acquire()
    gc.collect()
    fds = open_fds()
    loop = ReceivingLoop()

    async def wait() -> None:
        await limiter.wait_async()

    task = loop.create_task(wait())
    loop.run_until_complete(asyncio.sleep(0.01))
    assert limiter.statistics().current_queued_count == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Task was destroyed but it is pending": the point here
        loop.close()
        del task, loop
        # The receive and its receiver hold each other: the GC, not the close, abandons the bridge.
        gc.collect()
    assert limiter.statistics().current_queued_count == 0
    assert open_fds() == fds
    held.release()
    assert limiter.acquire().acquired


@linux_fds
def test_many_threads_each_running_a_receiving_loop_share_one_limiter() -> None:
    limiter = permits.ConcurrencyLimiter(3, queue_limit=10_000)
    results: list[int] = []
    lock = threading.Lock()

    async def one() -> bool:
        async with limiter.wait_async() as lease:
            await asyncio.sleep(0)
            return lease.acquired

    async def main() -> None:
        granted = await asyncio.gather(*(one() for _ in range(200)))
        with lock:
            results.append(sum(granted))

    gc.collect()
    fds = open_fds()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)  # every socket is closed, not dropped
        threads = [threading.Thread(target=run, args=(main(),)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        gc.collect()
    assert results == [200] * 4
    stats = limiter.statistics()
    assert (stats.current_available_permits, stats.current_queued_count) == (3, 0)
    assert stats.total_successful_leases == 800
    assert open_fds() == fds
