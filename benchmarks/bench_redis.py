"""What a Redis backend step costs: on the server (``INFO commandstats``) and from a Python client.

    python benchmarks/bench_redis.py [--host 127.0.0.1] [--port 6379] [--steps 5000] [--keys 100]

For each kind and each clock (the server's ``TIME``, or small ManualClock-like ``now_ns`` that
advance 1 ms a step), and for a rule that grants every step, one that mostly refuses and one whose
numbers need the scripts' general (limbs) path: CONFIG
RESETSTAT, ``--steps`` sync ``RedisBackend.take`` calls cycling over ``--keys`` names, then the
server's ``usec_per_call`` of EVALSHA and the client's calls per second. A script that only
returns 1 is the floor of an EVALSHA. Each case runs ``--rounds`` times; the best is shown.
Flushes nothing: every run uses a prefix of its own and its keys expire.
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

import redis

from permits._stores.redis_backend import RedisBackend
from permits._stores.rules import KINDS, Rule

S = 10**9


def rules(kind: str) -> dict[str, Rule]:
    """A rule that grants every step of a run (a million a second), one that refuses most (3 an
    hour), and one whose numbers leave the doubles (2**31 - 1 every 2**61 ns: the general path)."""
    if kind == "concurrency":
        ttl = 60 * S
        return {
            "grants": Rule(kind, 10**6, lease_ttl_ns=ttl),
            "refuses": Rule(kind, 1, lease_ttl_ns=ttl),
            "wide": Rule(kind, 2**31 - 1, lease_ttl_ns=2**61),
        }
    amount = {"token_bucket": 1, "sliding_window": 4}.get(kind, 0)
    return {
        "grants": Rule(kind, 10**6, S, amount),
        "refuses": Rule(kind, 3, 3600 * S, amount),
        # (the token bucket refills at once: 2**31 - 1 periods of 2**61 ns are past any key ttl)
        "wide": Rule(kind, 2**31 - 1, 2**61, 2**31 - 1 if kind == "token_bucket" else amount),
    }


def evalsha_usec(client: Any) -> float:
    stats = client.info("commandstats")
    return float(stats["cmdstat_evalsha"]["usec_per_call"])


def run(client: Any, backend: RedisBackend, rule: Rule, clock: str, steps: int, keys: int) -> tuple[float, float]:
    names = [f"bench-{uuid.uuid4().hex[:8]}-{i}" for i in range(keys)]
    lease_ids = [f"lease-{i}" for i in range(steps)]
    backend.take(names[0], rule, 1, "warm", None if clock == "server" else 0)  # loads the script
    client.config_resetstat()
    start = time.perf_counter()
    for i in range(steps):
        now = None if clock == "server" else 1_000_000 * (i + 1)
        backend.take(names[i % keys], rule, 1, lease_ids[i], now)
    rate = steps / (time.perf_counter() - start)
    return evalsha_usec(client), rate


def floor(client: Any, steps: int) -> tuple[float, float]:
    sha = client.script_load("return 1")
    client.config_resetstat()
    start = time.perf_counter()
    for _ in range(steps):
        client.evalsha(sha, 0)
    return evalsha_usec(client), steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6379)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated kinds (default: all)")
    args = parser.parse_args()
    kinds = [k for k in KINDS if not args.only or k in args.only.split(",")]
    client = redis.Redis(args.host, args.port)
    backend = RedisBackend(client, prefix=f"bench-{uuid.uuid4().hex[:8]}:", timeout=10.0)
    try:
        usec, rate = min((floor(client, args.steps) for _ in range(args.rounds)), key=lambda r: r[0])
        print(f"{'return 1':24} {'':8} {'':7} {usec:6.2f} us/call {rate:9,.0f} calls/s")
        for kind in kinds:
            for outcome, rule in rules(kind).items():
                for clock in ("server", "manual"):
                    results = [run(client, backend, rule, clock, args.steps, args.keys) for _ in range(args.rounds)]
                    usec = min(r[0] for r in results)
                    rate = max(r[1] for r in results)
                    print(f"{kind:24} {outcome:8} {clock:7} {usec:6.2f} us/call {rate:9,.0f} calls/s")
    finally:
        backend.close()
        client.close()


if __name__ == "__main__":
    main()
