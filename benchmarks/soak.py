"""Soak: mixed sync, threaded and asyncio load with random cancellations, timeouts and closes,
checking invariants as it goes and RSS stability over the run (real time, real threads).

    python benchmarks/soak.py --minutes 10      # the documented run (docs/soak.md)
    python benchmarks/soak.py --seconds 30      # a short one

Exits non-zero if an invariant breaks: more concurrency holders than the limit, permits or
queue entries left behind once the load stops, or RSS growing after warm-up beyond --max-growth-mb.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import threading
import time

import permits
from permits import Partition, PartitionedLimiter

HOLDERS_LIMIT = 8
KEY_HOLDERS_LIMIT = 2  # per key, in a per-key concurrency limiter
IDLE_TIMEOUT = 0.5


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Soak:
    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.lock = threading.Lock()
        self.holders = 0
        self.peak_holders = 0
        self.counts = {"granted": 0, "refused": 0, "timeouts": 0, "cancelled": 0, "closed": 0, "recreated": 0}
        self.errors: list[str] = []
        self.pool = permits.ConcurrencyLimiter(HOLDERS_LIMIT, queue_limit=64)
        self.rate = permits.TokenBucketLimiter(200, 50, 0.05, queue_limit=200)
        self.windows = [
            permits.FixedWindowLimiter(500, 0.5, queue_limit=100),
            permits.SlidingWindowLimiter(300, 0.5, 5, queue_limit=100),
            permits.SlidingWindowCounterLimiter(300, 0.5, queue_limit=100),
        ]
        self.per_key = PartitionedLimiter.per_key(
            Partition.token_bucket(None, 5, 5, 0.1, queue_limit=5), idle_timeout=IDLE_TIMEOUT, max_partitions=20_000
        )
        # Few keys, held and queued for: keys move to full limiters, waits time out and are
        # cancelled, keys are evicted once idle and created again.
        self.per_key_pool = PartitionedLimiter.per_key(
            Partition.concurrency(None, KEY_HOLDERS_LIMIT, queue_limit=4), idle_timeout=IDLE_TIMEOUT
        )
        self.key_holders: dict[str, int] = {}
        self.both = permits.chain(self.rate, self.per_key)
        self.doomed = permits.TokenBucketLimiter(1, 1, 60.0, queue_limit=1000)  # closed and recreated often

    def running(self) -> bool:
        return time.monotonic() < self.deadline

    def count(self, key: str) -> None:
        with self.lock:
            self.counts[key] += 1

    def hold(self, lease: permits.Lease) -> None:
        with self.lock:
            self.holders += 1
            self.peak_holders = max(self.peak_holders, self.holders)
            if self.holders > HOLDERS_LIMIT:
                self.errors.append(f"{self.holders} concurrency holders > {HOLDERS_LIMIT}")
        time.sleep(random.random() * 0.001)
        with self.lock:
            self.holders -= 1
        lease.release()

    def hold_key(self, key: str, lease: permits.Lease) -> None:
        with self.lock:
            self.key_holders[key] = self.key_holders.get(key, 0) + 1
            if self.key_holders[key] > KEY_HOLDERS_LIMIT:
                self.errors.append(f"{self.key_holders[key]} holders of key {key} > {KEY_HOLDERS_LIMIT}")
        time.sleep(random.random() * 0.001)
        with self.lock:
            self.key_holders[key] -= 1
        lease.release()

    def sync_worker(self, seed: int) -> None:
        rng = random.Random(seed)
        while self.running():
            choice = rng.random()
            if choice < 0.3:
                lease = self.pool.wait(timeout=rng.choice([0, 0.001, 0.01]))
                if lease:
                    self.count("granted")
                    self.hold(lease)
                else:
                    self.count("timeouts" if lease.reason == "timeout" else "refused")
            elif choice < 0.5:
                lease = self.both.acquire(f"user-{rng.randrange(30_000)}")
                self.count("granted" if lease else "refused")
                lease.release()
            elif choice < 0.6:
                key = f"k{rng.randrange(20)}"
                lease = self.per_key_pool.wait(key, timeout=rng.choice([0, 0.001, 0.01]))
                if lease:
                    self.count("granted")
                    self.hold_key(key, lease)
                else:
                    self.count("timeouts" if lease.reason == "timeout" else "refused")
            elif choice < 0.9:
                limiter = rng.choice(self.windows)
                lease = limiter.wait(rng.randint(1, 3), timeout=0.005)
                self.count("granted" if lease else "refused")
            else:
                lease = self.doomed.wait(timeout=0.002)
                self.count("closed" if lease.reason == "closed" else "granted" if lease else "timeouts")

    async def async_one(self, rng: random.Random) -> None:
        if rng.random() < 0.2:
            await self.async_key(rng)
            return
        limiter = rng.choice([self.pool, self.rate, *self.windows])
        try:
            async with asyncio.timeout(rng.choice([0.0005, 0.002, 0.02])):
                async with limiter.wait_async() as lease:
                    if lease:
                        self.count("granted")
                        await asyncio.sleep(0)
                    else:
                        self.count("refused")
        except TimeoutError:
            self.count("cancelled")

    async def async_key(self, rng: random.Random) -> None:
        key = f"k{rng.randrange(20)}"
        try:
            async with asyncio.timeout(rng.choice([0.0005, 0.002, 0.02])):
                lease = await self.per_key_pool.wait_async(key)
        except TimeoutError:
            self.count("cancelled")
            return
        if not lease:
            self.count("refused")
            return
        self.count("granted")
        with self.lock:
            self.key_holders[key] = self.key_holders.get(key, 0) + 1
            if self.key_holders[key] > KEY_HOLDERS_LIMIT:
                self.errors.append(f"{self.key_holders[key]} holders of key {key} > {KEY_HOLDERS_LIMIT}")
        await asyncio.sleep(0)
        with self.lock:
            self.key_holders[key] -= 1
        lease.release()

    async def async_load(self, seed: int) -> None:
        rng = random.Random(seed)
        while self.running():
            await asyncio.gather(*(self.async_one(rng) for _ in range(200)))

    def closer(self) -> None:
        while self.running():
            time.sleep(0.05)
            old = self.doomed
            self.doomed = permits.TokenBucketLimiter(1, 1, 60.0, queue_limit=1000)
            old.close()  # its waiters fail with "closed" while others keep arriving
            self.count("recreated")

    def check_quiet(self) -> None:
        stats = self.pool.statistics()
        if stats.current_available_permits != HOLDERS_LIMIT:
            self.errors.append(f"pool: {stats.current_available_permits} permits back of {HOLDERS_LIMIT}")
        for limiter in (self.pool, self.rate, *self.windows):
            queued = limiter.statistics().current_queued_count
            if queued:
                self.errors.append(f"{limiter!r}: {queued} permits still queued")
        for key in (f"k{i}" for i in range(20)):
            stats = self.per_key_pool.statistics(key)
            if stats.current_available_permits != KEY_HOLDERS_LIMIT or stats.current_queued_count:
                self.errors.append(f"per-key pool, key {key}: {stats} once quiet")
        # Every key idle now: all are evicted once the idle timeout has passed.
        time.sleep(IDLE_TIMEOUT + 0.5)
        for keyed in (self.per_key, self.per_key_pool):
            if keyed.partition_count:
                self.errors.append(f"{keyed.partition_count} partitions left after every key went idle")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=None)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-growth-mb", type=float, default=64.0)
    args = parser.parse_args()
    seconds = args.minutes * 60 if args.minutes is not None else args.seconds
    soak = Soak(seconds)
    threads = [threading.Thread(target=soak.sync_worker, args=(i,)) for i in range(3)]
    threads.append(threading.Thread(target=lambda: asyncio.run(soak.async_load(99))))
    threads.append(threading.Thread(target=soak.closer))
    start = time.monotonic()
    for t in threads:
        t.start()
    samples: list[tuple[float, float]] = []
    while any(t.is_alive() for t in threads):
        samples.append((time.monotonic() - start, rss_mb()))
        time.sleep(min(10.0, max(1.0, seconds / 20)))
    for t in threads:
        t.join()
    soak.check_quiet()
    warm = [mb for at, mb in samples if at >= min(30.0, seconds / 4)] or [samples[-1][1]]
    growth = max(warm) - warm[0]
    if growth > args.max_growth_mb:
        soak.errors.append(f"RSS grew {growth:.1f} MB after warm-up")
    print(f"soak: {seconds:.0f} s, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| count | value |\n|---|---:|")
    for key, value in soak.counts.items():
        print(f"| {key} | {value:,} |")
    print(f"| peak concurrency holders (limit {HOLDERS_LIMIT}) | {soak.peak_holders} |")
    print(f"| per-key partitions at the end | {soak.per_key.partition_count:,} |")
    print(f"| RSS after warm-up: first / max / last (MB) | {warm[0]:.1f} / {max(warm):.1f} / {warm[-1]:.1f} |")
    for error in soak.errors:
        print(f"INVARIANT BROKEN: {error}")
    print("soak: all invariants held" if not soak.errors else f"soak: {len(soak.errors)} invariant(s) broken")
    return 1 if soak.errors else 0


if __name__ == "__main__":
    sys.exit(main())
