"""Threads in parallel: does a second thread add throughput, with the GIL and without it?

    python benchmarks/bench_threads.py [--seconds S] [--repeats R] [--python EXE ...] [--json FILE]

Each case runs in a fresh child interpreter: 1 thread, then 2 threads started at one barrier,
each looping over its own work for S seconds; the result is operations per second over all
threads, and the scaling (2 threads' throughput over 1 thread's; 2.0 is perfect on 2 free cores,
1.0 is none, below 1.0 the threads hinder each other). Median of R runs.

Cases, each thread on its own state (nothing shared but the limiter object where named):
  floor        a Python function that does nothing: how far the interpreter and the machine scale
  per-key      one PartitionedLimiter.per_key (token bucket), each thread its own key
  concurrency  each thread its own ConcurrencyLimiter: acquire() then release()
  peer ...     the fastest in-memory Python peers, each thread its own key of one limiter

Interpreters: this one, and each --python; a free-threaded one (3.13t) runs twice, with the GIL
off and with PYTHON_GIL=1 (the same loop with the GIL). A peer that is not installed in an
interpreter is reported as such. Results: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import sys, threading, time
    case, threads, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])

    def make(case, i):
        if case == "floor":
            def op():
                pass
            return op
        if case == "per-key":
            import permits
            keyed = SHARED.setdefault("keyed", permits.PartitionedLimiter.per_key(
                permits.Partition.token_bucket(None, 2**31 - 1, 2**31 - 1, 0.001)))
            key = f"key-{i}"
            acquire = keyed.acquire
            def op():
                acquire(key)
            return op
        if case == "concurrency":
            import permits
            lim = permits.ConcurrencyLimiter(10**9)
            acquire = lim.acquire
            def op():
                acquire().release()
            return op
        if case == "peer limits":
            from limits import RateLimitItemPerSecond, storage, strategies
            item = RateLimitItemPerSecond(10**9)
            lim = SHARED.setdefault("limits", strategies.FixedWindowRateLimiter(storage.MemoryStorage()))
            key = f"key-{i}"
            def op():
                lim.hit(item, key)
            return op
        if case == "peer throttled-py":
            from throttled import MemoryStore, RateLimiterType, Throttled, rate_limiter
            t = SHARED.setdefault("throttled", Throttled(using=RateLimiterType.TOKEN_BUCKET.value,
                quota=rate_limiter.per_sec(10**9, burst=10**9), store=MemoryStore()))
            key = f"key-{i}"
            def op():
                t.limit(key)
            return op
        raise SystemExit(f"unknown case {case}")

    SHARED = {}
    try:
        ops = [make(case, i) for i in range(threads)]
    except ImportError as exc:
        print("MISSING " + str(exc))
        raise SystemExit(0)
    for op in ops:  # warm: every key and lease path made before timing
        for _ in range(1000):
            op()
    counts = [0] * threads
    barrier = threading.Barrier(threads + 1)
    stop = [False]

    def run(i):
        op = ops[i]
        n = 0
        barrier.wait()
        while not stop[0]:
            for _ in range(200):
                op()
            n += 200
        counts[i] = n

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    start = time.perf_counter()
    time.sleep(seconds)
    stop[0] = True
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    print("RESULT", sum(counts) / elapsed, gil)
    """
)

PROBE = "import sys, sysconfig; print(sys.version.split()[0], bool(sysconfig.get_config_var('Py_GIL_DISABLED')))"
PROBE = "import sys, sysconfig; print(sys.version.split()[0], bool(sysconfig.get_config_var('Py_GIL_DISABLED')))"
CASES = ["floor", "per-key", "concurrency", "peer limits", "peer throttled-py"]


def run_case(python: str, env: dict[str, str], case: str, threads: int, seconds: float) -> tuple[float, bool] | str:
    out = subprocess.run(
        [python, "-c", CHILD, case, str(threads), str(seconds)],
        capture_output=True,
        text=True,
        env=env,
        timeout=seconds * 10 + 60,
    )
    for line in out.stdout.splitlines():
        if line.startswith("MISSING "):
            return "not installed"
        if line.startswith("RESULT "):
            _, rate, gil = line.split()
            return float(rate), gil == "True"
    raise RuntimeError(f"{python} {case} x{threads} failed:\n{out.stdout}\n{out.stderr}")


def interpreters(extra: list[str]) -> list[tuple[str, str, dict[str, str]]]:
    """(label, executable, environment) for each run: a free-threaded one twice."""
    found = []
    base = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    for exe in [sys.executable, *extra]:
        probe = subprocess.run(
            [exe, "-c", PROBE],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        version, free = probe[0], probe[1] == "True"
        if free:
            found.append((f"{version}t, GIL off", exe, {**base, "PYTHON_GIL": "0"}))
            found.append((f"{version}t, PYTHON_GIL=1", exe, {**base, "PYTHON_GIL": "1"}))
        else:
            found.append((f"{version}, GIL", exe, base))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--python", action="append", default=[], help="another interpreter to run (repeatable)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    rows = []
    when = f"{datetime.date.today()} {platform.machine()} {os.cpu_count()} CPUs"
    print(f"# {when}; {args.seconds} s per run, median of {args.repeats}")
    print(f"{'interpreter':24} {'case':20} {'1 thread ops/s':>15} {'2 threads ops/s':>16} {'scaling':>8}")
    for label, exe, env in interpreters(args.python):
        for case in CASES:
            rates: dict[int, list[float]] = {1: [], 2: []}
            missing = False
            for _ in range(args.repeats):
                for threads in (1, 2):  # interleaved: a busy moment weighs on both alike
                    r = run_case(exe, env, case, threads, args.seconds)
                    if isinstance(r, str):
                        missing = True
                        break
                    rates[threads].append(r[0])
                if missing:
                    break
            if missing:
                print(f"{label:24} {case:20} {'not installed':>15}")
                rows.append({"interpreter": label, "case": case, "missing": True})
                continue
            one, two = statistics.median(rates[1]), statistics.median(rates[2])
            print(f"{label:24} {case:20} {one:15,.0f} {two:16,.0f} {two / one:8.2f}")
            rows.append({"interpreter": label, "case": case, "one": one, "two": two, "scaling": two / one})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
