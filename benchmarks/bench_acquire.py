"""Cost of one rate-limit check: permits against a Python-to-C floor and the PyPI peers.

    python benchmarks/bench_acquire.py [--quick] [--json FILE]

Every sync case is a ``timeit`` loop over one statement (best of several repeats; the median
of the repeats is shown too). The floor is ``d.get(k)`` on a small dict: the cheapest useful
call from Python into C. Async cases time ``await``/``async with`` in a plain ``for`` loop inside
one running event loop. Peers that are not installed are reported as "not installed".
Limits are configured huge so that the "ok" cases always succeed, and tiny (already used up)
for the "fail" cases; each case checks its outcome before and after it is timed.

Two phases: first in a process that has never started a second thread (floors, permits,
throttled-py), then after an idle thread was started (the floor and two permits cases again,
marked "2nd thread alive"; limits and pyrate-limiter, which start threads themselves; the async
cases). Once a process has started a thread, C++ shared_ptr reference counts are atomic, which
costs permits about 30 ns per check on the machine this was written on.
See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

# The bench scripts run as files (python benchmarks/bench_acquire.py): their directory is on sys.path.
from _peers import aiolimiter_cases, limits_cases, pyrate_cases, throttled_async_cases, throttled_cases
from _timing import Case, NotInstalled, Result, Settings, Source, collect

HUGE_CANDIDATES = (10**12, 2**31 - 1, 10**9)
"""Limits tried in turn for the cases that must always succeed (the first one accepted)."""

TARGET_TIME_BASED = 3.0
TARGET_CONCURRENCY = 6.0
TARGET_PEER = 30.0


# --------------------------------------------------------------------------- cases


def _huge(factory: Callable[[int], Any]) -> Any:
    """Build a limiter with the largest limit the engine accepts."""
    last: Exception | None = None
    for limit in HUGE_CANDIDATES:
        try:
            return factory(limit)
        except (ValueError, OverflowError) as exc:
            last = exc
    raise RuntimeError(f"no huge limit accepted: {last}")


def _import_permits() -> Any:
    try:
        import permits
    except ImportError as exc:
        raise NotInstalled(str(exc)) from exc
    return permits


INSTANCES = 3
"""Independently built instances of the floors and of the permits cases in the goals (see Case.alternates)."""


def _instances(make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Keyword arguments of a Case timed on INSTANCES namespaces built by ``make``."""
    return {"namespace": make(), "alternates": [make() for _ in range(INSTANCES - 1)]}


def floor_cases() -> Iterator[Case]:
    yield Case(
        "dict.get on a 4-item dict (floor)",
        "floor",
        "d.get(k)",
        **_instances(lambda: {"d": {"a": 1, "b": 2, "c": 3, "d": 4}, "k": "b"}),
        note=f"fastest of {INSTANCES} dicts",
        key="dict_get",
    )
    yield Case(
        "no-op C method: lst.clear() on an empty list (floor)",
        "floor",
        "lst.clear()",
        **_instances(lambda: {"lst": []}),
        note=f"a bound METH_NOARGS call that does nothing; fastest of {INSTANCES} lists",
        key="noop_c_method",
    )
    yield Case("empty loop (timeit overhead, not subtracted)", "floor", "pass", key="empty")


def permits_cases() -> Iterator[Case]:
    permits = _import_permits()

    def lease_ok(lim: Any) -> Callable[[], bool]:
        return lambda: bool(lim.acquire())

    time_based: list[tuple[str, str, Callable[[int], Any], Callable[[], Any]]] = [
        (
            "TokenBucketLimiter",
            "token_bucket",
            lambda n: permits.TokenBucketLimiter(n, n, 1.0),
            lambda: permits.TokenBucketLimiter(1, 1, 3600.0),
        ),
        (
            "FixedWindowLimiter",
            "fixed_window",
            lambda n: permits.FixedWindowLimiter(n, 1.0),
            lambda: permits.FixedWindowLimiter(1, 3600.0),
        ),
        (
            "SlidingWindowLimiter",
            "sliding_window",
            lambda n: permits.SlidingWindowLimiter(n, 1.0, 10),
            lambda: permits.SlidingWindowLimiter(1, 3600.0, 10),
        ),
        (
            "SlidingWindowCounterLimiter",
            "sliding_window_counter",
            lambda n: permits.SlidingWindowCounterLimiter(n, 1.0),
            lambda: permits.SlidingWindowCounterLimiter(1, 3600.0),
        ),
    ]
    for cls, key, huge, tiny in time_based:
        lim = _huge(huge)
        yield Case(
            f"permits {cls}.acquire() ok",
            "permits",
            "lim.acquire()",
            {"lim": lim},
            probe=lease_ok(lim),
            expect=True,
            note=f"fastest of {INSTANCES} limiters",
            key=f"permits_{key}_ok",
            alternates=[{"lim": _huge(huge)} for _ in range(INSTANCES - 1)],
        )
        full = tiny()
        full.acquire()
        yield Case(
            f"permits {cls}.acquire() fail",
            "permits",
            "lim.acquire()",
            {"lim": full},
            probe=lease_ok(full),
            expect=False,
            note="failed lease with retry_after",
            key=f"permits_{key}_fail",
        )

    bucket = _huge(lambda n: permits.TokenBucketLimiter(n, n, 1.0))
    yield Case(
        "permits TokenBucketLimiter: with acquire()",
        "permits",
        "with lim.acquire():\n    pass",
        {"lim": bucket},
        probe=lease_ok(bucket),
        expect=True,
        key="permits_token_bucket_with",
    )

    conc = permits.ConcurrencyLimiter(1)

    def conc_probe() -> bool:
        lease = conc.acquire()
        ok = bool(lease)
        lease.release()
        return ok

    yield Case(
        "permits ConcurrencyLimiter.acquire().release() ok",
        "permits",
        "lim.acquire().release()",
        {"lim": conc},
        probe=conc_probe,
        expect=True,
        note=f"fastest of {INSTANCES} limiters",
        key="permits_concurrency_acquire_release",
        alternates=[{"lim": permits.ConcurrencyLimiter(1)} for _ in range(INSTANCES - 1)],
    )
    yield Case(
        "permits ConcurrencyLimiter: with acquire()",
        "permits",
        "with lim.acquire():\n    pass",
        {"lim": conc},
        probe=conc_probe,
        expect=True,
        key="permits_concurrency_with",
    )
    held = permits.ConcurrencyLimiter(1)
    holder = held.acquire()
    yield Case(
        "permits ConcurrencyLimiter.acquire() fail",
        "permits",
        "lim.acquire()",
        {"lim": held, "holder": holder},
        probe=lease_ok(held),
        expect=False,
        key="permits_concurrency_fail",
    )


def threaded_cases() -> Iterator[Case]:
    """The floor and two permits cases again, once the process has a second thread (see collect)."""
    for case in (*floor_cases(), *permits_cases()):
        if case.key in ("dict_get", "permits_token_bucket_ok", "permits_concurrency_acquire_release"):
            case.name += ", 2nd thread alive"
            case.key += "_threaded"
            yield case


def async_floor_cases() -> Iterator[Case]:
    async def noop() -> None:
        return None

    def floor() -> Callable[[int], Awaitable[float]]:
        async def run(n: int) -> float:
            t0 = time.perf_counter()
            for _ in range(n):
                await noop()
            return time.perf_counter() - t0

        return run

    yield Case(
        "await of a trivial coroutine (async floor)",
        "async-floor",
        async_factory=floor,
        key="async_noop",
    )


def _permits_async_cases() -> Iterator[Case]:
    permits = _import_permits()

    def awaiting(make: Callable[[], Any], attr: str) -> Callable[[], Callable[[int], Awaitable[float]]]:
        def factory() -> Callable[[int], Awaitable[float]]:
            lim = make()

            async def run(n: int) -> float:
                call = getattr(lim, attr)
                t0 = time.perf_counter()
                for _ in range(n):
                    lease = await call()
                t1 = time.perf_counter()
                if n and not lease:
                    raise RuntimeError(f"{attr}() failed: {lease.reason}")
                return t1 - t0

            return run

        return factory

    def entering(make: Callable[[], Any]) -> Callable[[], Callable[[int], Awaitable[float]]]:
        def factory() -> Callable[[int], Awaitable[float]]:
            lim = make()

            async def run(n: int) -> float:
                ok = True
                t0 = time.perf_counter()
                for _ in range(n):
                    async with lim.wait_async() as lease:
                        ok = ok and bool(lease)
                t1 = time.perf_counter()
                if not ok:
                    raise RuntimeError("wait_async() failed")
                return t1 - t0

            return run

        return factory

    def bucket() -> Any:
        return _huge(lambda n: permits.TokenBucketLimiter(n, n, 1.0))

    yield Case(
        "permits TokenBucketLimiter: await wait_async()",
        "permits-async",
        async_factory=awaiting(bucket, "wait_async"),
        key="permits_token_bucket_wait_async",
    )
    yield Case(
        "permits TokenBucketLimiter: async with wait_async()",
        "permits-async",
        async_factory=entering(bucket),
        key="permits_token_bucket_async_with",
    )
    yield Case(
        "permits TokenBucketLimiter: await acquire_async()",
        "permits-async",
        async_factory=awaiting(bucket, "acquire_async"),
        key="permits_token_bucket_acquire_async",
    )
    yield Case(
        "permits ConcurrencyLimiter: async with wait_async()",
        "permits-async",
        async_factory=entering(lambda: permits.ConcurrencyLimiter(1)),
        note="released on exit",
        key="permits_concurrency_async_with",
    )


# --------------------------------------------------------------------------- report


def _git_commit() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(
            ["git", "-C", here, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    commit = out.stdout.strip()
    if not commit:
        return "unknown (no commit)"
    dirty = subprocess.run(
        ["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=5,
        check=False,
    ).stdout.strip()
    return commit + ("-dirty" if dirty else "")


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def metadata_block(argv: list[str]) -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _git_commit(),
        "command": "python benchmarks/bench_acquire.py " + shlex.join(argv),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "versions": {
            dist: _version(dist) for dist in ("permits", "throttled-py", "limits", "pyrate-limiter", "aiolimiter")
        },
    }


def _by_key(results: list[Result]) -> dict[str, Result]:
    return {r.key: r for r in results if r.key and r.best_ns is not None}


def ratios(results: list[Result]) -> list[dict[str, Any]]:
    """The ratios the project tracks, with their targets (best-of-repeats times)."""
    got = _by_key(results)
    floor = got.get("dict_get")
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, target: str, ok: bool | None) -> None:
        out.append({"name": name, "value": value, "target": target, "met": ok})

    def over_floor(r: Result | None) -> float | None:
        if r is None or r.best_ns is None or floor is None or not floor.best_ns:
            return None
        return r.best_ns / floor.best_ns

    for key, label in (
        ("permits_token_bucket_ok", "TokenBucketLimiter"),
        ("permits_fixed_window_ok", "FixedWindowLimiter"),
        ("permits_sliding_window_ok", "SlidingWindowLimiter"),
        ("permits_sliding_window_counter_ok", "SlidingWindowCounterLimiter"),
    ):
        value = over_floor(got.get(key))
        add(
            f"time-based acquire / dict.get ({label})",
            value,
            f"<= {TARGET_TIME_BASED:g}x",
            None if value is None else value <= TARGET_TIME_BASED,
        )
    value = over_floor(got.get("permits_concurrency_acquire_release"))
    add(
        "concurrency acquire+release / dict.get",
        value,
        f"<= {TARGET_CONCURRENCY:g}x",
        None if value is None else value <= TARGET_CONCURRENCY,
    )
    threaded_floor = got.get("dict_get_threaded")
    for key, label, target in (
        ("permits_token_bucket_ok_threaded", "time-based acquire / dict.get (TokenBucketLimiter)", TARGET_TIME_BASED),
        ("permits_concurrency_acquire_release_threaded", "concurrency acquire+release / dict.get", TARGET_CONCURRENCY),
    ):
        r = got.get(key)
        value = (
            r.best_ns / threaded_floor.best_ns
            if r and r.best_ns and threaded_floor and threaded_floor.best_ns
            else None
        )
        add(f"{label}, 2nd thread alive", value, f"<= {target:g}x", None if value is None else value <= target)
    peers = [r for r in results if r.group == "peer" and r.key.endswith("_ok") and r.best_ns is not None]
    tb = got.get("permits_token_bucket_ok")
    if peers and tb and tb.best_ns:
        fastest = min(peers, key=lambda r: r.best_ns or 0.0)
        assert fastest.best_ns is not None
        value = fastest.best_ns / tb.best_ns
        add(
            f"fastest peer ({fastest.name}) / permits token bucket acquire",
            value,
            f">= {TARGET_PEER:g}x",
            value >= TARGET_PEER,
        )
    else:
        add("fastest peer / permits token bucket acquire", None, f">= {TARGET_PEER:g}x", None)
    aio = got.get("aiolimiter_async_with")
    mine = got.get("permits_token_bucket_async_with")
    if aio and mine and aio.best_ns and mine.best_ns:
        add(
            "aiolimiter async with / permits async with wait_async() (info)",
            aio.best_ns / mine.best_ns,
            "-",
            None,
        )
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _fmt_ns(v: float | None) -> str:
    return "-" if v is None else (f"{v:,.0f}" if v >= 1000 else f"{v:.1f}")


def markdown(results: list[Result], meta: dict[str, Any], rats: list[dict[str, Any]]) -> str:
    floor = _by_key(results).get("dict_get")
    lines = [
        f"permits acquire benchmark, {meta['date']}, commit {meta['commit']}",
        "",
        f"- command: `{meta['command']}`",
        f"- {meta['python']} on {meta['platform']} ({meta['cpus']} CPUs)",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "- timed first in a process that had never started a second thread, then (from the rows marked "
        '"2nd thread alive" on) with an idle second thread',
        "",
        "| benchmark | ns/call (best) | ns/call (median) | x dict.get | notes |",
        "|---|---:|---:|---:|---|",
    ]
    for r in results:
        if r.best_ns is None:
            lines.append(f"| {_cell(r.name)} | {_cell(r.status)} | | | {_cell(r.note)} |")
            continue
        base = _by_key(results).get("dict_get_threaded") if r.key.endswith("_threaded") else floor
        ratio = f"{r.best_ns / base.best_ns:.1f}" if base and base.best_ns else "-"
        lines.append(f"| {_cell(r.name)} | {_fmt_ns(r.best_ns)} | {_fmt_ns(r.median_ns)} | {ratio} | {_cell(r.note)} |")
    lines += ["", "| ratio (best of repeats) | value | target | met |", "|---|---:|---|---|"]
    for q in rats:
        value = "-" if q["value"] is None else f"{q['value']:.1f}x"
        met = {True: "yes", False: "**no**", None: "-"}[q["met"]]
        lines.append(f"| {q['name']} | {value} | {q['target']} | {met} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description="Time one rate-limit check: permits vs dict.get and the PyPI peers.")
    parser.add_argument("--quick", action="store_true", help="short repeats (a few seconds in all; noisier)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per case")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(args_list)

    s = Settings(target=0.05, repeats=5) if args.quick else Settings(target=0.2, repeats=7)
    if args.repeats is not None:
        s.repeats = max(1, args.repeats)

    phases: list[list[Source]] = [
        [  # a process that has never started a second thread
            ("floor", "floor", floor_cases),
            ("permits", "permits", permits_cases),
            ("throttled-py", "peer", throttled_cases),
        ],
        [  # a second thread alive (limits and pyrate-limiter start their own)
            ("2nd thread alive", "threaded", threaded_cases),
            ("limits", "peer", limits_cases),
            ("pyrate-limiter", "peer", pyrate_cases),
            ("async floor", "async-floor", async_floor_cases),
            ("permits (async)", "permits-async", _permits_async_cases),
            ("aiolimiter", "peer-async", aiolimiter_cases),
            ("throttled-py (asyncio)", "peer-async", throttled_async_cases),
        ],
    ]
    results = collect(phases, s, verbose=not args.quiet)
    meta = metadata_block(args_list)
    rats = ratios(results)
    print(markdown(results, meta, rats))
    if args.json:
        payload = {
            "meta": meta,
            "settings": {"target_seconds": s.target, "repeats": s.repeats},
            "results": [r.__dict__ for r in results],
            "ratios": rats,
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(payload, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
