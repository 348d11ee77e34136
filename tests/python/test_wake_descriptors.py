"""Wake-up descriptors are never leaked, and a wait never hangs on a loop that cannot be woken.

Each event loop's bridge, and each wait queued under trio, has a pipe or socket pair the engine
writes to when it completes a request. A completed request that was never delivered (its loop
closed by hand, its trio wait cancelled after the grant) must not keep them open: these tests
count ``/proc/self/fd`` before and after, and run the same rounds in a child limited to 256
descriptors, where a leak of two per round fails within the first rounds.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import permits

from _child import run_ok
from _support import ReceivingLoop, need

_FDS = "/proc/self/fd"
pytestmark = pytest.mark.skipif(not os.path.isdir(_FDS), reason="counts open descriptors in /proc/self/fd (Linux)")


def open_fds() -> int:
    return len(os.listdir(_FDS))


def fds_settle_at_most(before: int, timeout: float = 10.0) -> int:
    """The count of open descriptors once it is back to ``before`` or less (a leak never is), or after
    ``timeout``: another thread (an engine's, a previous test's loop collected late) may close one of
    its own a moment later, in either direction of the count."""
    deadline = time.monotonic() + timeout
    while (now := open_fds()) > before and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    return now


def _uvloop() -> asyncio.AbstractEventLoop:
    return need("uvloop").new_event_loop()  # type: ignore[no-any-return]


LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "selector": asyncio.SelectorEventLoop,
    "receiving": ReceivingLoop,
    "uvloop": _uvloop,
}


async def _queued(limiter: permits.ConcurrencyLimiter) -> None:
    while limiter.statistics().current_queued_count < 1:
        await asyncio.sleep(0)


def close_with_a_grant_undelivered(new_loop: Callable[[], asyncio.AbstractEventLoop]) -> permits.ConcurrencyLimiter:
    """A wait queued in a loop, granted while the loop is not running, then the loop closed by hand."""
    limiter = permits.ConcurrencyLimiter(1, queue_limit=1)
    held = limiter.acquire()
    loop = new_loop()
    task = loop.create_task(limiter.wait_async().__aenter__())
    loop.run_until_complete(_queued(limiter))
    held.release()  # granted: the grant waits in the bridge for a loop that will never run again
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Task was destroyed but it is pending": as for any such task
        loop.close()
        del task, loop
        gc.collect()
    return limiter


@pytest.mark.parametrize("loop_kind", list(LOOPS))
def test_a_loop_closed_with_a_grant_undelivered_leaves_no_descriptor_open(loop_kind: str, frozen_heap: None) -> None:
    new_loop = LOOPS[loop_kind]
    close_with_a_grant_undelivered(new_loop)  # the first bridge of a kind may set up what lasts
    before = open_fds()
    for _ in range(10):
        limiter = close_with_a_grant_undelivered(new_loop)
        assert limiter.available_permits() == 1  # the undelivered grant went back
    assert fds_settle_at_most(before) <= before


async def _cancelled_after_the_grant(trio: Any, limiter: permits.ConcurrencyLimiter) -> None:
    held = limiter.acquire()
    outcome: list[object] = []

    async def waiter(scope: Any) -> None:
        with scope:
            outcome.append(await limiter.wait_async())

    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, scope)
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.statistics().current_queued_count == 1
        held.release()  # granted: the byte is written, the waiter not yet resumed
        scope.cancel()  # ... and cancelled before it runs
    assert outcome == []
    assert limiter.available_permits() == 1  # the grant went back


def test_trio_waits_cancelled_after_their_grant_leave_no_descriptor_open() -> None:
    trio = need("trio")
    need("trio.testing")  # wait_all_tasks_blocked

    limiter = permits.ConcurrencyLimiter(1, queue_limit=1)

    async def main() -> tuple[int, int]:
        await _cancelled_after_the_grant(trio, limiter)
        before = open_fds()
        for _ in range(40):
            await _cancelled_after_the_grant(trio, limiter)
        return before

    before = trio.run(main)
    assert fds_settle_at_most(before) <= before


def test_many_rounds_fit_in_256_descriptors() -> None:
    """With 2 descriptors leaked a round, 256 run out within the first hundred rounds."""
    need("trio")
    need("uvloop")
    run_ok(
        f"""
        import resource, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        import trio, trio.testing
        import test_wake_descriptors as t

        t.gc.freeze()  # (what is imported: each round's collection looks at the round's objects)
        limiter = t.permits.ConcurrencyLimiter(1, queue_limit=1)

        async def rounds():
            for _ in range(300):
                await t._cancelled_after_the_grant(trio, limiter)

        trio.run(rounds)
        for new_loop in t.LOOPS.values():
            for _ in range(150):
                assert t.close_with_a_grant_undelivered(new_loop).available_permits() == 1
        print("ok")
        """
    )


def test_a_receiving_loop_closed_by_hand_gives_its_waits_back_at_once() -> None:
    """No garbage collection needed: the waits leave their queues when the loop closes, and a
    permit released afterwards is not handed to a wait nobody can resume."""
    limiter = permits.ConcurrencyLimiter(1, queue_limit=4)
    held = limiter.acquire()
    loop = ReceivingLoop()
    tasks = [loop.create_task(limiter.wait_async().__aenter__()) for _ in range(3)]
    loop.run_until_complete(asyncio.sleep(0.01))
    assert limiter.statistics().current_queued_count == 3
    gc.disable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loop.close()
        assert limiter.statistics().current_queued_count == 0
        held.release()
        assert limiter.available_permits() == 1
    finally:
        gc.enable()
        del tasks, loop
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gc.collect()


class _DeafLoop(ReceivingLoop):
    """A loop that can neither watch a descriptor nor receive from a socket."""

    async def sock_recv(self, sock: Any, nbytes: int) -> bytes:
        raise NotImplementedError


def test_a_loop_that_cannot_be_woken_refuses_a_wait_that_would_queue() -> None:
    limiter = permits.ConcurrencyLimiter(1, queue_limit=4)
    held = limiter.acquire()
    gc.collect()  # earlier tests' garbage closes its descriptors now, not in the count below
    before = open_fds()

    async def main() -> None:
        async with limiter.acquire_async() as lease:
            assert not lease  # acquire_async asks no loop: it works there
        with pytest.raises(RuntimeError, match=r"neither watch a descriptor .* nor receive"):
            await asyncio.wait_for(limiter.wait_async(), 10)

    loop = _DeafLoop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert limiter.statistics().current_queued_count == 0  # nothing was left queued
    held.release()
    assert limiter.available_permits() == 1
    gc.collect()
    assert fds_settle_at_most(before) <= before
