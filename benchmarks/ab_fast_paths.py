"""A/B of permits' fast paths between two installs (say, the last release's venv and this one's).

Each round runs the same timing child once under each interpreter, alternating, so that a change
of load on a shared machine hits both sides alike; the table keeps each case's best over the
rounds and prints the ratio new / old.

    python benchmarks/ab_fast_paths.py --old /path/to/old/venv/bin/python --new .venv/bin/python

Cases: a time-based acquire() granted, a concurrency acquire().release(), a per-key acquire(key),
await wait_async() granted at once (token bucket), async with wait_async() (concurrency), and
await acquire_async(), each in ns per call.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import asyncio, json, timeit
import permits

N = 100_000
bucket = permits.TokenBucketLimiter(10**9, 10**9, 1.0)
conc = permits.ConcurrencyLimiter(10**6)
per_key = permits.PartitionedLimiter.per_key(permits.Partition.token_bucket(None, 10**9, 10**9, 1.0))
keys = [f"user-{i}" for i in range(1000)] * (N // 1000)


def best(fn, number=N, repeat=5):
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e9


def loop_best(make, repeat=5):
    result = float("inf")
    for _ in range(repeat):
        start = timeit.default_timer()
        asyncio.run(make())
        result = min(result, timeit.default_timer() - start)
    return result / N * 1e9


async def wait_async_granted():
    w = bucket.wait_async
    for _ in range(N):
        await w()


async def async_with_wait_async():
    w = conc.wait_async
    for _ in range(N):
        async with w():
            pass


async def acquire_async():
    a = bucket.acquire_async
    for _ in range(N):
        await a()


async def empty_loop():
    for _ in range(N):
        pass


def per_key_pass():
    a = per_key.acquire
    for k in keys:
        a(k)


results = {
    "TokenBucketLimiter.acquire()": best(bucket.acquire),
    "ConcurrencyLimiter.acquire().release()": best(lambda: conc.acquire().release()),
    "per_key acquire(key), 1,000 keys": best(per_key_pass, number=1) / N,
    "await wait_async() granted (token bucket)": loop_best(wait_async_granted) - loop_best(empty_loop),
    "async with wait_async() (concurrency)": loop_best(async_with_wait_async) - loop_best(empty_loop),
    "await acquire_async() (token bucket)": loop_best(acquire_async) - loop_best(empty_loop),
}
print(json.dumps(results))
"""


def run(python: str) -> dict[str, float]:
    out = subprocess.run([python, "-c", CHILD], capture_output=True, text=True, check=True, cwd="/")
    return dict(json.loads(out.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="the interpreter with the old install")
    parser.add_argument("--new", required=True, help="the interpreter with the new install")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    old: dict[str, float] = {}
    new: dict[str, float] = {}
    for _ in range(args.rounds):
        for python, best in ((args.old, old), (args.new, new)):
            for case, ns in run(python).items():
                best[case] = min(ns, best.get(case, float("inf")))
    print("| case | old ns | new ns | new / old |")
    print("|---|---:|---:|---:|")
    for case in old:
        print(f"| {case} | {old[case]:.1f} | {new[case]:.1f} | {new[case] / old[case]:.2f} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
