"""Queued ``wait_async(key)``: the event loop's CPU time per wait, ``PartitionedLimiter`` (a Python
partitioner, each partition an engine limiter) against ``per_key`` (the engine's table).

Used by ``bench_async.py --partitioned``. Every round: ``KEYS`` keys, each a token bucket on a
``ManualClock`` emptied first, N tasks (N / KEYS per key) each ``await limiter.wait_async(key)``;
timed with ``time.thread_time()`` on the loop's thread (the engine's thread, which decides the
grants, is not the loop's cost):

- enqueue: from the first ``create_task`` until all N requests are queued;
- wake-up + completion: ``clock.advance`` grants every request, until every task holds its lease;
  either at once (one advance) or one request per key at each advance (N / KEYS advances: a clock
  that moves while requests wait, as a real one does);
- cancel: N queued requests, every task cancelled, until all are done.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import permits
from permits import Partition, PartitionedLimiter

KEYS = 100

#: round(n) -> (enqueue seconds, wake-up + completion seconds) of the loop's thread.
Round = Callable[[int], Coroutine[Any, Any, tuple[float, float]]]


def _limiter(kind: str, per_key_waits: int, tokens_per_period: int, clock: permits.ManualClock) -> Any:
    if kind == "per_key":
        template = Partition.token_bucket(None, per_key_waits, tokens_per_period, 1.0, queue_limit=per_key_waits)
        return PartitionedLimiter.per_key(template, clock=clock)

    def partitioner(key: str) -> Partition:
        return Partition.token_bucket(key, per_key_waits, tokens_per_period, 1.0, queue_limit=per_key_waits)

    return PartitionedLimiter(partitioner, clock=clock)


async def _queued(limiter: Any, n: int) -> tuple[list[asyncio.Task[Any]], float]:
    """N tasks queued over KEYS keys (each key emptied first); the loop's seconds to queue them."""
    keys = [f"user-{i}" for i in range(KEYS)]
    for key in keys:
        assert limiter.acquire(key, n // KEYS)
    start = time.thread_time()
    tasks = [asyncio.create_task(limiter.wait_async(keys[i % KEYS])) for i in range(n)]
    for _ in range(100):
        await asyncio.sleep(0)
        if limiter.statistics().current_queued_count == n:
            return tasks, time.thread_time() - start
    raise RuntimeError("the waits did not all queue")


class _Done:
    """Counts finished tasks (one done callback each, the same for both kinds)."""

    def __init__(self, tasks: list[asyncio.Task[Any]]) -> None:
        self.count = 0
        for task in tasks:
            task.add_done_callback(self.one)

    def one(self, _task: object) -> None:
        self.count += 1

    async def until(self, count: int) -> None:
        while self.count < count:
            await asyncio.sleep(0)


def granted_round(kind: str, one_by_one: bool) -> Round:
    async def run(n: int) -> tuple[float, float]:
        clock = permits.ManualClock()
        steps = n // KEYS if one_by_one else 1
        limiter = _limiter(kind, n // KEYS, n // KEYS // steps, clock)
        tasks, enqueue = await _queued(limiter, n)
        done = _Done(tasks)
        start = time.thread_time()
        for step in range(1, steps + 1):
            clock.advance(1.0)
            await done.until(n * step // steps)
        woken = time.thread_time() - start
        assert all(t.result() for t in tasks)
        limiter.close()
        return enqueue, woken

    return run


def cancelled_round(kind: str) -> Round:
    async def run(n: int) -> tuple[float, float]:
        limiter = _limiter(kind, n // KEYS, n // KEYS, permits.ManualClock())
        tasks, enqueue = await _queued(limiter, n)
        done = _Done(tasks)
        start = time.thread_time()
        for task in tasks:
            task.cancel()
        await done.until(n)
        cancelled = time.thread_time() - start
        assert all(t.cancelled() for t in tasks) and limiter.statistics().current_queued_count == 0
        limiter.close()
        return enqueue, cancelled

    return run


CASES: list[tuple[str, Callable[[str], Round]]] = [
    ("granted at once", lambda kind: granted_round(kind, False)),
    ("granted one a key per clock step", lambda kind: granted_round(kind, True)),
    ("cancelled while queued", cancelled_round),
]
KINDS = ("PartitionedLimiter", "per_key")
