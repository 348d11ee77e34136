"""acquire() per second of a RedisStore limiter with reserve=N against one without (one process,
a sync client, the server's clock).

    python benchmarks/bench_redis_reserve.py redis://127.0.0.1:6379/0 [--reserve 100] [--seconds 1] [--rounds 5]

Both limiters are token buckets that never run out (every acquire is granted), and fixed windows
of the same size: without reserve each acquire is one script on the server; with it, one in N.
Rounds alternate; the best of each is shown.
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

import redis

from permits.redis import RedisStore


def rate(limiter: Any, seconds: float) -> float:
    done, start = 0, time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(100):
            limiter.acquire()
        done += 100
        now = time.perf_counter()
        if now >= deadline:
            return done / (now - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--reserve", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    client = redis.Redis.from_url(args.url)
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    plain = RedisStore(client, prefix=prefix + "plain:")
    reserving = RedisStore(client, prefix=prefix + "reserve:", reserve=args.reserve)
    huge = 10**9
    pairs = {
        "token_bucket": [store.token_bucket("bench-tb", huge, huge, 1.0) for store in (plain, reserving)],
        "fixed_window": [store.fixed_window("bench-fw", huge, 3600.0) for store in (plain, reserving)],
    }
    for kind, (without, with_reserve) in pairs.items():
        best = [0.0, 0.0]
        for _ in range(args.rounds):
            best[0] = max(best[0], rate(without, args.seconds))
            best[1] = max(best[1], rate(with_reserve, args.seconds))
        print(
            f"{kind:14} without reserve {best[0]:>10,.0f}/s   reserve={args.reserve} {best[1]:>10,.0f}/s"
            f"   {best[1] / best[0]:.1f}x"
        )
    plain.close()
    reserving.close()
    for key in client.scan_iter(match=prefix + "*"):
        client.delete(key)
    client.close()


if __name__ == "__main__":
    main()
