"""Instructions per call of permits' fast paths, for one or more installs: load-independent.

Timings on a shared machine move with its load; instruction counts do not. For each case this runs
a child under ``valgrind --tool=callgrind`` twice, making SMALL and then LARGE calls, and divides the
difference of the totals by LARGE - SMALL (so the import and set-up cancel out; the loop's own
bytecode is included). ``PYTHONHASHSEED=0`` keeps the import's own count the same between runs.

    python benchmarks/count_instructions.py /path/to/old/venv/bin/python .venv/bin/python

Needs valgrind (Debian: ``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

SMALL, LARGE = 20_000, 120_000

CHILD = r"""
import asyncio, sys
import permits

case, calls = sys.argv[1], int(sys.argv[2])
bucket = permits.TokenBucketLimiter(10**9, 10**9, 1.0)
conc = permits.ConcurrencyLimiter(10**6)
per_key = permits.PartitionedLimiter.per_key(permits.Partition.token_bucket(None, 10**9, 10**9, 1.0))
parsed = permits.PartitionedLimiter.per_key("10/second")

if case == "acquire":
    for _ in range(calls):
        bucket.acquire()
elif case == "acquire_release":
    for _ in range(calls):
        conc.acquire().release()
elif case == "per_key":
    for _ in range(calls):
        per_key.acquire("user-42")
elif case == "per_key_new_parsed":
    for key in range(calls):
        parsed.acquire(key)
elif case == "wait_async":
    async def main():
        for _ in range(calls):
            await bucket.wait_async()
    asyncio.run(main())
elif case == "acquire_async":
    async def main():
        for _ in range(calls):
            await bucket.acquire_async()
    asyncio.run(main())
elif case == "trivial_await":
    async def trivial():
        return 1
    async def main():
        for _ in range(calls):
            await trivial()
    asyncio.run(main())
elif case == "async_with":
    async def main():
        for _ in range(calls):
            async with conc.wait_async():
                pass
    asyncio.run(main())
elif case == "chain_wait":
    chained = permits.chain(bucket, conc)
    async def main():
        for _ in range(calls):
            (await chained.wait_async()).release()
    asyncio.run(main())
elif case == "custom_wait":
    class Custom(permits.RateLimiter):
        def _acquire(self, n):
            return permits.Lease.granted(n)
    custom = Custom()
    async def main():
        for _ in range(calls):
            (await custom.wait_async()).release()
    asyncio.run(main())
"""

CASES = {
    "acquire": "TokenBucketLimiter.acquire()",
    "acquire_release": "ConcurrencyLimiter.acquire().release()",
    "per_key": 'per_key acquire("user-42")',
    "per_key_new_parsed": 'per_key("10/second") acquire(new key)',
    "wait_async": "await wait_async() granted (token bucket)",
    "async_with": "async with wait_async() (concurrency)",
    "acquire_async": "await acquire_async() (token bucket)",
    "trivial_await": "await of a trivial coroutine (the floor)",
    "chain_wait": "await chain(bucket, conc).wait_async() granted, released",
    "custom_wait": "await custom limiter wait_async() granted, released",
}


def total(python: str, case: str, calls: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", python, "-c", CHILD, case, str(calls)],
            check=True,
            capture_output=True,
            env=env,
            cwd="/",
        )
        with open(out) as f:
            match = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M)
        if match is None:
            raise RuntimeError("no total in callgrind's output")
        return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pythons", nargs="+", help="interpreters, each with permits installed")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="only these cases (repeatable)")
    args = parser.parse_args()
    rows = []
    for case, label in CASES.items():
        if args.case and case not in args.case:
            continue
        per_call = []
        for python in args.pythons:
            per_call.append((total(python, case, LARGE) - total(python, case, SMALL)) / (LARGE - SMALL))
            print(f"{label}: {python}: {per_call[-1]:,.0f}", file=sys.stderr)
        rows.append((label, per_call))
    print("| case | " + " | ".join(args.pythons) + " |")
    print("|---|" + "---:|" * len(args.pythons))
    for label, per_call in rows:
        print(f"| {label} | " + " | ".join(f"{n:,.0f}" for n in per_call) + " |")


if __name__ == "__main__":
    main()
