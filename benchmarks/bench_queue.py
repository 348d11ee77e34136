"""The wait queue at scale: a flood of queued ``wait_async`` beside one timed waiter.

    python benchmarks/bench_queue.py [--n 20000] [--big 100000] [--repeats 3] [--json FILE]

A timed waiter is a thread blocked in ``wait(timeout=...)`` (a WSGI view with ``wait=True``, a sync
job, a sync client) on the same limiter as an asyncio service whose requests queue. Every number
here is the event loop's own time, spent under the limiter's lock on the loop's thread.

- flood: N tasks each ``await limiter.wait_async()`` on a limiter with no permit left (they all
  queue), then all are cancelled (they leave the queue). Seconds from the first task made to the
  last one queued, plus seconds from the first cancel to the last task done, with and without one
  timed waiter queued first; the ratio is the cost of that one waiter. On a plain token bucket and
  on one key of a per-key table.
- stall: ``--big`` awaitables queued and then withdrawn one by one, driven directly (no task), each
  step timed in the loop thread's CPU time (``time.thread_time_ns``: a step the OS preempted on a
  busy machine does not count the other processes' time): the longest single enqueue and
  withdrawal is the longest the loop stalls in the engine for one request, with one timed waiter
  queued first.

The garbage collector is off while a round is timed. Best of ``--repeats`` rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import permits

Subject = tuple[Callable[[], Any], Callable[[], int]]
"""(make one queued wait's awaitable, read the queued permit count)"""


def plain() -> tuple[Any, Subject, Callable[[], permits.Lease]]:
    bucket = permits.TokenBucketLimiter(1, 1, 3600.0)
    assert bucket.acquire()
    return bucket, (bucket.wait_async, lambda: bucket.statistics().current_queued_count), lambda: bucket.wait(1, 3600.0)


def per_key() -> tuple[Any, Subject, Callable[[], permits.Lease]]:
    table = permits.PartitionedLimiter.per_key(permits.specs.TokenBucket(1, 1, 3600.0))
    assert table.acquire("k")
    return (
        table,
        (lambda: table.wait_async("k"), lambda: table.statistics("k").current_queued_count),
        lambda: table.wait("k", 1, 3600.0),
    )


TARGETS = {"token bucket": plain, "per-key, one key": per_key}


def with_timed_waiter(
    make: Callable[[], tuple[Any, Subject, Callable[[], permits.Lease]]], timed: bool
) -> tuple[Any, Subject, threading.Thread | None]:
    limiter, subject, blocking = make()
    if not timed:
        return limiter, subject, None
    thread = threading.Thread(target=blocking, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while subject[1]() != 1:
        if time.monotonic() > deadline:
            raise RuntimeError("the timed waiter did not queue")
        time.sleep(0.001)
    return limiter, subject, thread


async def flood_round(make: Callable[..., Any], n: int, timed: bool) -> tuple[float, float]:
    limiter, (wait_async, queued), thread = with_timed_waiter(make, timed)
    base = queued()
    gc.disable()
    try:
        start = time.perf_counter()
        tasks = [asyncio.create_task(wait_async()) for _ in range(n)]
        while queued() != base + n:
            await asyncio.sleep(0)
        enqueued = time.perf_counter()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        cancelled = time.perf_counter()
    finally:
        gc.enable()
    assert queued() == base
    limiter.close()
    if thread is not None:
        thread.join()
    return enqueued - start, cancelled - enqueued


async def stall_round(make: Callable[..., Any], n: int) -> tuple[float, float, float, float]:
    """(longest enqueue, mean enqueue, longest withdrawal, mean withdrawal), in seconds."""
    limiter, (wait_async, queued), thread = with_timed_waiter(make, True)
    waits = [wait_async() for _ in range(n)]
    steps = [0] * n
    leaves = [0] * n
    clock = time.thread_time_ns
    gc.disable()
    try:
        for i, aw in enumerate(waits):
            t0 = clock()
            aw.send(None)  # its first step: queued in the engine (it yields itself to its task)
            steps[i] = clock() - t0
        assert queued() == n + 1
        for i, aw in enumerate(waits):
            t0 = clock()
            aw.close()  # it leaves the queue
            leaves[i] = clock() - t0
    finally:
        gc.enable()
    assert queued() == 1
    limiter.close()
    assert thread is not None
    thread.join()
    return max(steps) / 1e9, sum(steps) / n / 1e9, max(leaves) / 1e9, sum(leaves) / n / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The wait queue at scale (asyncio flood beside a timed waiter).")
    parser.add_argument("--n", type=int, default=20_000, help="queued waits in the flood (default 20,000)")
    parser.add_argument("--big", type=int, default=100_000, help="queued waits in the stall case (default 100,000)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    print(f"permits queue benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"- CPython {sys.version.split()[0]}; flood n={args.n:,}; stall n={args.big:,}; best of {args.repeats}\n")
    print("| flood of queued wait_async, enqueued then cancelled | untimed (s) | one timed waiter (s) | ratio |")
    print("|---|---:|---:|---:|")
    for name, make in TARGETS.items():
        best: dict[bool, float] = {}
        for timed in (False, True):
            rounds = [sum(asyncio.run(flood_round(make, args.n, timed))) for _ in range(args.repeats)]
            best[timed] = min(rounds)
        ratio = best[True] / best[False]
        results[f"flood {name}"] = {"untimed_s": best[False], "timed_s": best[True], "ratio": ratio}
        print(f"| {name} | {best[False]:.3f} | {best[True]:.3f} | {ratio:.2f}x |")
    print()
    print("| stall: one request's step on the loop (CPU) | longest enqueue | mean | longest withdrawal | mean |")
    print("|---|---:|---:|---:|---:|")
    for name, make in TARGETS.items():
        rounds = [asyncio.run(stall_round(make, args.big)) for _ in range(args.repeats)]
        worst = min(rounds, key=lambda r: r[0] + r[2])
        results[f"stall {name}"] = dict(
            zip(("max_enqueue_s", "mean_enqueue_s", "max_leave_s", "mean_leave_s"), worst, strict=True)
        )
        cells = " | ".join(f"{v * 1e6:,.1f} µs" for v in worst)
        print(f"| {name}, {args.big:,} queued | {cells} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"n": args.n, "big": args.big, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
