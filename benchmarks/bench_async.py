"""Waiters released per second: N tasks queued in a limiter, then released at once.

    python benchmarks/bench_async.py [--quick] [--n N] [--json FILE]
    python benchmarks/bench_async.py --partitioned [--n N] [--repeats R]

``--partitioned`` measures something else instead: the event loop's CPU time per queued
``wait_async(key)``, ``PartitionedLimiter`` against ``per_key`` (``_partitioned_waits.py``).

Every case has the same shape: N tasks each wait for one permit (or one future), all of them
are blocked before the clock starts, then one event makes room for all N and the clock runs
until the last task holds its lease. Rate = N / that time. The cases:

- floor: N tasks each ``await`` a bare future; another thread resolves them one by one with
  ``loop.call_soon_threadsafe(fut.set_result, i)`` (what any library that completes asyncio
  futures from a non-loop thread must at least do);
- in-loop (for reference, not a goal): the same futures resolved with ``loop.call_soon`` from
  the loop's own thread: no second thread, no wake-up pipe; what resuming N tasks costs;
- permits ``ConcurrencyLimiter(N, queue_limit=N)``: one lease holds all N permits, N
  ``wait_async()`` waiters queue (checked with ``statistics()``), the big lease is released;
- permits ``TokenBucketLimiter(N, N, 1 s, queue_limit=N)`` on a ``ManualClock``: the bucket is
  emptied, N waiters queue, ``clock.advance(1 s)`` refills it (release by time);
- aiolimiter ``AsyncLimiter(max_rate=N, time_period=1e9 s)``: the bucket is filled, N tasks
  block in ``acquire()``, then the event loop's clock jumps by one period, so the whole bucket
  has leaked and all N fit: aiolimiter releases them as fast as its machinery allows (its
  rate cap is irrelevant: N fit at once). The loop clock jump is the only way to release
  aiolimiter's waiters by time without sleeping; every case runs on the same loop class.

The garbage collector is off while a round is timed (all cases alike). Best and median of the
repeats (a fresh loop and limiter for each).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

Round = Callable[[int], Coroutine[Any, Any, float]]
"""``round(n)`` -> seconds from the releasing event to the last lease in hand."""


class JumpLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock can jump forward (for aiolimiter's time-based release)."""

    offset = 0.0

    def time(self) -> float:
        return super().time() + self.offset


class Finish:
    """Counts tasks that got their lease; the last one stamps the time."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.held: list[Any] = []

    def one(self, lease: Any) -> None:
        self.held.append(lease)
        self.left -= 1
        if self.left == 0:
            self.done.set_result(time.perf_counter())


async def settle(check: Callable[[], bool], what: str) -> None:
    """Lets the queued tasks run until ``check()`` holds (they are all blocked)."""
    for _ in range(1000):
        await asyncio.sleep(0)
        if check():
            return
    raise RuntimeError(f"the waiters did not all queue: {what}")


async def queue_waiters(
    n: int, wait: Callable[[int], Awaitable[Any]], what: str, queued: Callable[[], bool] | None = None
) -> tuple[Finish, list[asyncio.Task[None]]]:
    """Starts N tasks, task i doing ``fin.one(await wait(i))``, and lets them run until
    ``queued()`` holds (by default: until they have run, none of them done)."""
    fin = Finish(n)

    async def waiter(i: int) -> None:
        fin.one(await wait(i))

    tasks = [asyncio.create_task(waiter(i)) for i in range(n)]
    await settle(queued or (lambda: all(not t.done() for t in tasks)), what)
    return fin, tasks


async def floor_round(n: int) -> float:
    loop = asyncio.get_running_loop()
    futs: list[asyncio.Future[int]] = [loop.create_future() for _ in range(n)]
    fin, _ = await queue_waiters(n, futs.__getitem__, "floor")
    go = threading.Event()
    started: list[float] = []

    def resolver() -> None:
        go.wait()
        started.append(time.perf_counter())
        for i, fut in enumerate(futs):
            loop.call_soon_threadsafe(fut.set_result, i)

    thread = threading.Thread(target=resolver)
    thread.start()
    go.set()
    end = await fin.done
    thread.join()
    assert len(fin.held) == n
    return end - started[0]


async def in_loop_round(n: int) -> float:
    loop = asyncio.get_running_loop()
    futs: list[asyncio.Future[int]] = [loop.create_future() for _ in range(n)]
    fin, _ = await queue_waiters(n, futs.__getitem__, "in-loop")
    start = time.perf_counter()
    for i, fut in enumerate(futs):
        loop.call_soon(fut.set_result, i)
    end = await fin.done
    return end - start


def permits_concurrency_round() -> Round:
    import permits

    async def run(n: int) -> float:
        lim = permits.ConcurrencyLimiter(n, queue_limit=n)
        big = lim.acquire(n)
        assert big
        fin, tasks = await queue_waiters(
            n, lambda _: lim.wait_async(), "permits concurrency", lambda: lim.statistics().current_queued_count == n
        )
        start = time.perf_counter()
        big.release()
        end = await fin.done
        assert all(fin.held) and len(tasks) == n
        assert lim.statistics().current_available_permits == 0
        return end - start

    return run


def permits_token_bucket_round() -> Round:
    import permits

    async def run(n: int) -> float:
        clock = permits.ManualClock()
        lim = permits.TokenBucketLimiter(n, n, 1.0, queue_limit=n, clock=clock)
        assert lim.acquire(n)
        fin, tasks = await queue_waiters(
            n, lambda _: lim.wait_async(), "permits token bucket", lambda: lim.statistics().current_queued_count == n
        )
        start = time.perf_counter()
        clock.advance(1.0)
        end = await fin.done
        assert all(fin.held) and len(tasks) == n
        return end - start

    return run


def aiolimiter_round() -> Round:
    from aiolimiter import AsyncLimiter

    period = 1e9  # seconds: nothing leaks while the waiters queue (N / 1e9 per second)

    async def run(n: int) -> float:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, JumpLoop)
        lim = AsyncLimiter(n, period)
        await lim.acquire(n)  # the bucket is full
        # Queued: all N in its heap of blocked waiters.
        fin, tasks = await queue_waiters(n, lambda _: lim.acquire(), "aiolimiter", lambda: len(lim._waiters) >= n)
        assert not any(t.done() for t in tasks)
        start = time.perf_counter()
        loop.offset += period  # a whole period passes: the bucket is empty, its waker timer is due
        end = await fin.done
        return end - start

    return run


CASES: list[tuple[str, str, Callable[[], Round]]] = [
    ("floor", "call_soon_threadsafe(fut.set_result) from a thread (floor)", lambda: floor_round),
    ("in_loop", "call_soon(fut.set_result) on the loop's thread (info: no thread, no wake-up)", lambda: in_loop_round),
    ("permits_concurrency", "permits ConcurrencyLimiter wait_async(), released by a lease", permits_concurrency_round),
    ("permits_token_bucket", "permits TokenBucketLimiter wait_async(), released by time", permits_token_bucket_round),
    ("aiolimiter", "aiolimiter AsyncLimiter acquire(), released by time", aiolimiter_round),
]


def measure(make: Callable[[], Round], n: int, repeats: int) -> list[float]:
    """Seconds per round, each round in a fresh event loop."""
    make_round = make()
    times: list[float] = []
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            with asyncio.Runner(loop_factory=JumpLoop) as runner:
                times.append(runner.run(make_round(n)))
        finally:
            gc.enable()
    return times


def partitioned_main(n: int, repeats: int) -> int:
    """The loop's µs per queued wait_async(key), best of the repeats (each in a fresh loop, GC off)."""
    from _partitioned_waits import CASES as WAIT_CASES
    from _partitioned_waits import KEYS, KINDS

    if n % KEYS:
        raise SystemExit(f"--n must be a multiple of {KEYS} with --partitioned")
    print(f"Queued wait_async(key): the loop's CPU µs per wait, N = {n:,} over {KEYS} keys (best of {repeats})\n")
    print("| case | limiter | enqueue | wake-up + completion | total | x per_key |\n|---|---|---:|---:|---:|---:|")
    for case, make in WAIT_CASES:
        best: dict[str, tuple[float, float]] = {}
        for _ in range(repeats):
            for kind in KINDS:  # taken in turn: a change of load hits both alike
                gc.collect()
                gc.disable()
                try:
                    with asyncio.Runner() as runner:
                        enqueue, rest = runner.run(make(kind)(n))
                finally:
                    gc.enable()
                if kind not in best or enqueue + rest < sum(best[kind]):
                    best[kind] = (enqueue, rest)
        floor = sum(best["per_key"])
        for kind in KINDS:
            enqueue, rest = best[kind]
            print(
                f"| {case} | {kind} | {enqueue / n * 1e6:.2f} | {rest / n * 1e6:.2f} | "
                f"{(enqueue + rest) / n * 1e6:.2f} | {(enqueue + rest) / floor:.1f} |",
                flush=True,
            )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Waiters released per second (asyncio).")
    parser.add_argument("--quick", action="store_true", help="10,000 waiters, 2 repeats")
    parser.add_argument("--n", type=int, default=None, help="waiters per round (default 100,000)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.add_argument(
        "--partitioned", action="store_true", help="instead: loop time per queued wait, PartitionedLimiter vs per_key"
    )
    args = parser.parse_args(argv)
    n = args.n or (10_000 if args.quick else 100_000)
    repeats = args.repeats or (2 if args.quick else 5)
    if args.partitioned:
        return partitioned_main(n, args.repeats or 3)

    results: list[dict[str, Any]] = []
    for key, name, make in CASES:
        row: dict[str, Any] = {"key": key, "name": name, "n": n}
        try:
            times = measure(make, n, repeats)
        except ImportError as exc:
            row["status"] = f"not installed: {exc}"
        except Exception as exc:  # a broken peer must not stop the run
            row["status"] = f"error: {type(exc).__name__}: {exc}"
        else:
            row |= {
                "status": "ok",
                "best_per_s": n / min(times),
                "median_per_s": n / statistics.median(times),
                "best_ns_per_waiter": min(times) / n * 1e9,
                "repeats": repeats,
            }
        if not args.quiet:
            shown = f"{row['best_per_s']:12,.0f} /s" if row["status"] == "ok" else row["status"]
            print(f"  {name:<70} {shown}", file=sys.stderr, flush=True)
        results.append(row)

    by = {r["key"]: r for r in results if r["status"] == "ok"}
    print(f"Waiters released per second, N = {n:,} (best / median of {repeats})\n")
    print("| case | waiters/s (best) | waiters/s (median) | ns per waiter | x floor |\n|---|---:|---:|---:|---:|")
    for r in results:
        if r["status"] != "ok":
            print(f"| {r['name']} | {r['status']} | | | |")
            continue
        ratio = f"{r['best_per_s'] / by['floor']['best_per_s']:.2f}" if "floor" in by else "-"
        print(
            f"| {r['name']} | {r['best_per_s']:,.0f} | {r['median_per_s']:,.0f} | "
            f"{r['best_ns_per_waiter']:,.0f} | {ratio} |"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"n": n, "repeats": repeats, "results": results}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
