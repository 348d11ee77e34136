"""Per-key checks: permits' per_key table against a dict lookup over the same keys and the peers'
keyed in-memory checks, plus memory per key and the time to evict every key.

    python benchmarks/bench_per_key.py            # 100k and 1M keys
    python benchmarks/bench_per_key.py --quick    # 10k and 100k keys

Keys are visited in a shuffled order (a real key mix misses the caches); each case is the best of
three passes over all keys, in ns per check. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import permits
from permits import Partition, PartitionedLimiter

HUGE = 2**31 - 1


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def best_pass(check: Callable[[str], Any], order: list[str], passes: int = 3) -> float:
    best = float("inf")
    for _ in range(passes):
        start = time.perf_counter()
        for key in order:
            check(key)
        best = min(best, (time.perf_counter() - start) / len(order) * 1e9)
    return best


def peers(keys: list[str]) -> dict[str, Callable[[str], Any]]:
    found: dict[str, Callable[[str], Any]] = {}
    try:
        from limits import RateLimitItemPerSecond, storage, strategies

        item = RateLimitItemPerSecond(10**9)
        lim = strategies.FixedWindowRateLimiter(storage.MemoryStorage())
        found["limits FixedWindowRateLimiter.hit(item, key)"] = lambda key: lim.hit(item, key)
    except ImportError:
        pass
    try:
        from throttled import MemoryStore, RateLimiterType, Throttled, rate_limiter

        t = Throttled(
            using=RateLimiterType.TOKEN_BUCKET.value,
            quota=rate_limiter.per_sec(10**9, burst=10**9),
            store=MemoryStore(),
        )
        found["throttled-py token_bucket .limit(key)"] = lambda key: t.limit(key)
    except ImportError:
        pass
    for check in found.values():  # every key exists before timing, as for permits
        for key in keys:
            check(key)
    return found


def run(n: int, with_peers: bool) -> list[tuple[str, str]]:
    keys = [f"user-{i}" for i in range(n)]
    order = keys[:]
    random.Random(n).shuffle(order)
    rows: list[tuple[str, str]] = []

    table = {key: 1 for key in keys}
    floor = best_pass(table.get, order)
    rows.append(("dict.get over the same keys (floor)", f"{floor:,.0f}"))

    clock = permits.ManualClock()
    gc.collect()
    before = rss_kib()
    per_key = PartitionedLimiter.per_key(Partition.token_bucket(None, HUGE, HUGE, 1.0), idle_timeout=1.0, clock=clock)
    start = time.perf_counter()
    for key in keys:
        per_key.acquire(key)
    created = (time.perf_counter() - start) / n * 1e9
    grown = (rss_kib() - before) * 1024 / n
    check = best_pass(per_key.acquire, order)
    rows.append(("permits per_key acquire(key)", f"{check:,.0f} ({check / floor:.1f}x dict.get)"))
    rows.append(("permits per_key: first acquire of a new key", f"{created:,.0f}"))
    rows.append(("permits per_key: process memory per live key", f"{grown:,.0f} bytes"))
    start = time.perf_counter()
    clock.advance(5.0)  # every key idle for longer than 1 s: the engine's timer drops them all
    evicting = time.perf_counter() - start
    assert per_key.partition_count == 0
    rows.append(("permits per_key: evicting every key (clock.advance)", f"{evicting:.3f} s in all"))
    del per_key
    gc.collect()

    if n <= 100_000:
        general = PartitionedLimiter(lambda r: Partition.token_bucket(r, HUGE, HUGE, 1.0))
        for key in keys:
            general.acquire(key)
        check = best_pass(general.acquire, order)
        rows.append(("permits PartitionedLimiter (general path) acquire(key)", f"{check:,.0f} ({check / floor:.1f}x)"))
        del general
        gc.collect()

    if with_peers:
        for name, peer in peers(keys).items():
            check = best_pass(peer, order, passes=1)
            rows.append((name, f"{check:,.0f} ({check / floor:.1f}x)"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10k and 100k keys")
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args()
    sizes = (10_000, 100_000) if args.quick else (100_000, 1_000_000)
    print(f"permits per-key benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"- command: `python {' '.join(sys.argv)}`")
    for n in sizes:
        print(f"\n### {n:,} keys\n\n| case | ns per check (or as noted) |\n|---|---:|")
        for name, value in run(n, not args.no_peers):
            print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
