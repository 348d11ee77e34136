"""Shared-memory limiters (``permits.shm.SharedMemoryStore``): their check against the in-process
limiters, checks per second from several processes, the peers' cross-process limiters, and the
segment's bytes per key.

    python benchmarks/bench_shm.py                     # about two minutes
    python benchmarks/bench_shm.py --quick             # a smoke run, a few seconds
    python benchmarks/bench_shm.py --processes 1,2,4 --json FILE

Five parts, one table each:

1. One check from Python, in this process: ``acquire()`` on each kind of store limiter against the
   in-process limiter of the same parameters (huge limits, so every check is a grant; a token
   bucket of limit 1, used up, for a rejection), and concurrency ``acquire().release()``; ns per
   call and the ratio. Timed as bench_acquire.py times its cases (``_timing.py``: ``timeit``
   loops, the repeats of all the cases interleaved, best of them; each case that a goal uses is
   timed on 3 limiters and keeps the fastest).
2. Checks per second from 1, 2 and 4 processes (``--processes``; started with ``spawn``), each
   process on its own key of one ``store.partitioned(...)`` limiter, all of them on one hot key
   of it, and all of them on one named token bucket. Every check is a grant (huge limits).
3. The peers' cross-process limiters against permits' named limiters, from the fewest and the
   most processes: pyrate-limiter's ``MultiprocessBucket`` (a log in a ``multiprocessing``
   manager's list, a ``multiprocessing`` lock) and its ``MultiprocessStateStore`` token bucket,
   and limits' ``MemoryStorage`` with a ``FixedWindowRateLimiter`` served by a
   ``multiprocessing`` manager (every ``hit`` goes through the proxy). The same shape everywhere:
   one limit for every process, 1 second, limit huge, so every check is a grant.
4. The segment's bytes per key for a per-key token bucket and a ``"10/second"`` (sliding window)
   partitioned limiter: the table's own bytes over its keys (the segment takes its memory when it
   is made), with how much of ``/dev/shm/permits.<name>`` is in use (``st_blocks``).
5. New keys: a new key's first ``acquire(key)`` in a ``store.partitioned(...)`` table against
   ``PartitionedLimiter.per_key`` of the same spec, below the table's bound and at it (the table
   full of idle keys, so that each new key evicts one), and a known key's ``acquire(key)``; ns per
   key over passes of fresh keys (``--new-keys`` a pass), the passes of the two sides taken in
   turn, best and median of them; the bound ``--bound`` keys (1,000).

Parts 2 and 3 run in a pool of worker processes started once: for each round every worker taking
part is told one start time on the monotonic clock (shared by every process on the host) and
checks for ``--duration`` seconds; a round's figure is the sum over the workers of checks divided
by each worker's own elapsed time; the table shows the best round and the median one. The workers
report through pipes (a ``multiprocessing.Queue`` would start a feeder thread in them: see
bench_acquire.py for what a second thread costs permits). Segments are named after this process
and removed at the end. A peer that is not installed shows "not installed"; one that breaks shows
its error; neither stops the run. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import multiprocessing
import os
import platform
import random
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from multiprocessing.managers import BaseManager
from typing import Any

import permits

# The bench scripts run as files (python benchmarks/bench_shm.py): their directory is on sys.path.
from _timing import Case, NotInstalled, Settings, collect_phase, single_threaded
from bench_acquire import HUGE_CANDIDATES, INSTANCES, _git_commit, _version

TARGET_IN_PROCESS = 1.5
"""Store limiter acquire() / in-process limiter acquire(), same parameters: at most."""
TARGET_PEER = 50.0
"""permits' checks/s / the faster peer's, cross-process: at least."""
TARGET_STATE_BYTES = 64
"""Segment bytes per key, beyond the key's own bytes: at most."""

PEERS = ("permits", "pyrate-limiter", "limits")
SHM_DIR = "/dev/shm"


def _segment_path(name: str) -> str:
    return os.path.join(SHM_DIR, f"permits.{name}")


def _store_class() -> Any:
    try:
        from permits.shm import SharedMemoryStore
    except ImportError as exc:
        raise NotInstalled(f"permits.shm: {exc}") from exc
    return SharedMemoryStore


class Segments:
    """The stores this run opens in this process, each on a segment named after this process;
    every one is closed and unlinked by close_all(), whatever happened."""

    def __init__(self) -> None:
        self.prefix = f"bench-shm-{os.getpid()}"
        self.stores: list[Any] = []

    def open(self, tag: str, capacity: int) -> Any:
        store = _store_class()(f"{self.prefix}-{tag}", capacity=capacity)
        self.stores.append(store)
        return store

    def name(self, tag: str) -> str:
        return f"{self.prefix}-{tag}"

    def close_all(self) -> None:
        for store in self.stores:
            for step in (store.unlink, store.close):
                try:
                    step()
                except Exception as exc:
                    print(f"warning: {step.__qualname__}: {type(exc).__name__}: {exc}", file=sys.stderr)
        self.stores.clear()
        for entry in os.listdir(SHM_DIR) if os.path.isdir(SHM_DIR) else []:
            if entry.startswith(f"permits.{self.prefix}-"):  # one a worker made and nobody unlinked
                os.unlink(os.path.join(SHM_DIR, entry))


def _huge_value(make: Callable[[int], Any]) -> int:
    """The largest of HUGE_CANDIDATES that ``make`` accepts (ValueError/OverflowError: too big)."""
    last: Exception | None = None
    for limit in HUGE_CANDIDATES:
        try:
            make(limit)
        except (ValueError, OverflowError) as exc:
            last = exc
            continue
        return limit
    raise RuntimeError(f"no huge limit accepted: {last}")


# --------------------------------------------------------------------------- part 1: one check


@dataclass
class Pair:
    label: str
    in_process: str
    shm: str
    goal: bool


def _ok(lim: Any) -> Callable[[], bool]:
    return lambda: bool(lim.acquire())


def _key_ok(lim: Any, key: str) -> Callable[[], bool]:
    return lambda: bool(lim.acquire(key))


def _release_ok(lim: Any) -> Callable[[], bool]:
    def probe() -> bool:
        lease = lim.acquire()
        ok = bool(lease)
        lease.release()
        return ok

    return probe


def part1_cases(store: Any, held_store: Any, pairs: list[Pair], held: list[Any]) -> Callable[[], Iterator[Case]]:
    """The cases of part 1, in-process and store limiter of each kind side by side; fills ``pairs``,
    and ``held`` with the leases the cases hold throughout (released once they are timed), taken
    in ``held_store``: a segment of their own, since a process keeps its holder slot of a segment
    while it holds any permit of it."""

    def source() -> Iterator[Case]:
        serial = iter(range(10**6))

        def named(prefix: str) -> str:
            return f"{prefix}{next(serial)}"

        kinds: list[tuple[str, str, Callable[[int], Any], Callable[[int], Any]]] = [
            (
                "token bucket",
                "token_bucket",
                lambda n: permits.TokenBucketLimiter(n, n, 1.0),
                lambda n: store.token_bucket(named("tb"), token_limit=n, tokens_per_period=n, replenishment_period=1.0),
            ),
            (
                "fixed window",
                "fixed_window",
                lambda n: permits.FixedWindowLimiter(n, 1.0),
                lambda n: store.fixed_window(named("fw"), permit_limit=n, window=1.0),
            ),
            (
                "sliding window (10 segments)",
                "sliding_window",
                lambda n: permits.SlidingWindowLimiter(n, 1.0, 10),
                lambda n: store.sliding_window(named("sw"), permit_limit=n, window=1.0, segments_per_window=10),
            ),
            (
                "sliding window counter",
                "sliding_window_counter",
                lambda n: permits.SlidingWindowCounterLimiter(n, 1.0),
                lambda n: store.sliding_window_counter(named("swc"), permit_limit=n, window=1.0),
            ),
        ]
        for label, key, local, shared in kinds:
            huge = min(_huge_value(local), _huge_value(shared))
            for side, make in (("in-process", local), ("shared memory", shared)):
                lims = [make(huge) for _ in range(INSTANCES)]
                yield Case(
                    f"{side} {label}: acquire() ok",
                    "permits",
                    "lim.acquire()",
                    {"lim": lims[0]},
                    probe=_ok(lims[0]),
                    expect=True,
                    note=f"limit {huge:,}/s; fastest of {INSTANCES} limiters",
                    key=f"{'local' if side == 'in-process' else 'shm'}_{key}_ok",
                    alternates=[{"lim": lim} for lim in lims[1:]],
                )
            pairs.append(Pair(f"{label}: acquire() ok", f"local_{key}_ok", f"shm_{key}_ok", goal=True))

        full_local = permits.TokenBucketLimiter(1, 1, 3600.0)
        full_shm = store.token_bucket(named("tb"), token_limit=1, tokens_per_period=1, replenishment_period=3600.0)
        for side, full in (("in-process", full_local), ("shared memory", full_shm)):
            full.acquire()
            yield Case(
                f"{side} token bucket: acquire() fail",
                "permits",
                "lim.acquire()",
                {"lim": full},
                probe=_ok(full),
                expect=False,
                note="limit 1 per hour, used: a failed lease",
                key=f"{'local' if side == 'in-process' else 'shm'}_token_bucket_fail",
            )
        pairs.append(Pair("token bucket: acquire() fail", "local_token_bucket_fail", "shm_token_bucket_fail", False))

        conc_local = [permits.ConcurrencyLimiter(1) for _ in range(INSTANCES)]
        conc_shm = [store.concurrency(named("c"), permit_limit=1, lease_ttl=60.0) for _ in range(INSTANCES)]
        for side, lims in (("in-process", conc_local), ("shared memory", conc_shm)):
            yield Case(
                f"{side} concurrency: acquire().release() ok",
                "permits",
                "lim.acquire().release()",
                {"lim": lims[0]},
                probe=_release_ok(lims[0]),
                expect=True,
                note=f"permit_limit 1; fastest of {INSTANCES} limiters",
                key=f"{'local' if side == 'in-process' else 'shm'}_concurrency_release",
                alternates=[{"lim": lim} for lim in lims[1:]],
            )
        pairs.append(
            Pair("concurrency: acquire().release()", "local_concurrency_release", "shm_concurrency_release", True)
        )

        # The same with another lease of the process held throughout: the shared limiter's holder
        # slot stays claimed, so its pin and unpin are one compare-and-swap each (without it, each
        # acquire claims a slot and each release frees it).
        held_local = [permits.ConcurrencyLimiter(2) for _ in range(INSTANCES)]
        held_shm = [held_store.concurrency(named("c"), permit_limit=2, lease_ttl=60.0) for _ in range(INSTANCES)]
        for side, lims in (("in-process", held_local), ("shared memory", held_shm)):
            kept = [lim.acquire() for lim in lims]
            assert all(kept)
            held.extend(kept)
            yield Case(
                f"{side} concurrency, a lease held: acquire().release() ok",
                "permits",
                "lim.acquire().release()",
                {"lim": lims[0], "kept": kept},
                probe=_release_ok(lims[0]),
                expect=True,
                note=f"permit_limit 2, one lease held throughout; fastest of {INSTANCES} limiters",
                key=f"{'local' if side == 'in-process' else 'shm'}_concurrency_held_release",
                alternates=[{"lim": lim, "kept": kept} for lim in lims[1:]],
            )
        pairs.append(
            Pair(
                "concurrency, another lease held: acquire().release()",
                "local_concurrency_held_release",
                "shm_concurrency_held_release",
                False,
            )
        )

        spec_huge = _huge_value(lambda n: permits.specs.TokenBucket(n, n, 1.0))
        spec = permits.specs.TokenBucket(spec_huge, spec_huge, 1.0)
        keyed_local = permits.PartitionedLimiter.per_key(spec, idle_timeout=60.0)
        keyed_shm = store.partitioned(spec, name=named("keyed"), idle_timeout=60.0)
        for side, keyed in (("in-process", keyed_local), ("shared memory", keyed_shm)):
            yield Case(
                f"{side} per-key token bucket: acquire('user-42') ok",
                "permits",
                "lim.acquire('user-42')",
                {"lim": keyed},
                probe=_key_ok(keyed, "user-42"),
                expect=True,
                note="in-process: PartitionedLimiter.per_key; one key",
                key=f"{'local' if side == 'in-process' else 'shm'}_per_key_ok",
            )
        pairs.append(Pair("per-key token bucket: acquire(key) ok", "local_per_key_ok", "shm_per_key_ok", False))

    return source


def run_part1(segments: Segments, s: Settings, verbose: bool) -> dict[str, Any]:
    pairs: list[Pair] = []
    held: list[Any] = []
    try:
        store = segments.open("p1", capacity=1_000)
        held_store = segments.open("p1-held", capacity=10)
    except NotInstalled as exc:
        return {"status": f"not installed ({exc})"}
    except Exception as exc:
        return {"status": f"error: {type(exc).__name__}: {exc}"}
    before = single_threaded()
    try:
        results = collect_phase([("part 1", "permits", part1_cases(store, held_store, pairs, held))], s, verbose)
    finally:
        for lease in held:
            lease.release()
    by_key = {r.key: r for r in results}
    rows = []
    for pair in pairs:
        local, shm = by_key.get(pair.in_process), by_key.get(pair.shm)
        ratio = (
            shm.best_ns / local.best_ns
            if local and shm and local.best_ns is not None and shm.best_ns is not None and local.best_ns
            else None
        )
        rows.append({"pair": asdict(pair), "ratio": ratio})
    return {
        "status": "ok",
        "single_threaded_before": before,
        "results": [asdict(r) for r in results],
        "rows": rows,
    }


def _fmt_ns(v: float | None) -> str:
    return "-" if v is None else (f"{v:,.0f}" if v >= 1000 else f"{v:.1f}")


def print_part1(data: dict[str, Any]) -> None:
    print("\n### 1. One check from Python: store limiter against the in-process limiter\n")
    if data["status"] != "ok":
        print(f"not measured: {data['status']}")
        return
    by_key = {r["key"]: r for r in data["results"]}
    print("| case | in-process ns (best / median) | shared memory ns (best / median) | shm / in-process | goal | met |")
    print("|---|---:|---:|---:|---|---|")
    for row in data["rows"]:
        pair = row["pair"]
        cells = []
        for key in (pair["in_process"], pair["shm"]):
            r = by_key.get(key)
            if r is None:
                cells.append("missing")
            elif r["best_ns"] is None:
                cells.append(r["status"])
            else:
                cells.append(f"{_fmt_ns(r['best_ns'])} / {_fmt_ns(r['median_ns'])}")
        ratio = row["ratio"]
        goal = f"<= {TARGET_IN_PROCESS:g}x" if pair["goal"] else "-"
        met = "-" if not pair["goal"] or ratio is None else ("yes" if ratio <= TARGET_IN_PROCESS else "**no**")
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        print(f"| {pair['label']} | {cells[0]} | {cells[1]} | {shown} | {goal} | {met} |")
    states = {r["single_threaded"] for r in data["results"]}
    state = (
        "a process that had never started a second thread"
        if states == {True}
        else "a process with a second thread"
        if states == {False}
        else "a process whose thread state was unknown or changed"
    )
    notes = [f"all timed in {state}, both sides alike"]
    if states == {False} and data.get("single_threaded_before") is False:
        notes.append("the thread was there before part 1 began (importing permits starts one: the clock's calibration)")
    warnings = [r["name"] for r in data["results"] if "WARNING" in (r.get("note") or "")]
    if warnings:
        notes.append("outcome changed during the run: " + ", ".join(warnings))
    print("\n" + "; ".join(notes) + ".")


# --------------------------------------------------------------------------- parts 2 and 3: processes


@dataclass(frozen=True)
class Job:
    """What a worker checks: ``kind`` is ``keyed`` (a partitioned store limiter: ``key`` is
    ``own`` or ``hot``), ``named`` (a store limiter of kind ``limiter``), or a peer's name."""

    kind: str
    segment: str = ""
    capacity: int = 0
    limiter: str = "token_bucket"
    key: str = ""
    huge: int = 0


def _named_limiter(store: Any, job: Job) -> Any:
    n = job.huge
    if job.limiter == "token_bucket":
        return store.token_bucket("tb", token_limit=n, tokens_per_period=n, replenishment_period=1.0)
    if job.limiter == "fixed_window":
        return store.fixed_window("fw", permit_limit=n, window=1.0)
    if job.limiter == "sliding_window":
        return store.sliding_window("sw", permit_limit=n, window=1.0, segments_per_window=10)
    raise ValueError(f"unknown limiter {job.limiter!r}")


def _build(job: Job, index: int, peers: dict[str, Any]) -> tuple[Callable[[Any], Any], Any, list[Any]]:
    """In a worker: the check to call (one argument), its argument, and what to close after."""
    if job.kind in ("keyed", "named"):
        store = _store_class()(job.segment, capacity=job.capacity)
        if job.kind == "named":
            lim = _named_limiter(store, job)
            return lim.acquire, 1, [lim, store]
        spec = permits.specs.TokenBucket(job.huge, job.huge, 1.0)
        keyed = store.partitioned(spec, name="keyed", idle_timeout=60.0)
        return keyed.acquire, (f"worker-{index}" if job.key == "own" else "hot"), [keyed, store]
    peer = peers.get(job.kind)
    if peer is None:
        raise NotInstalled(job.kind)
    if job.kind in ("pyrate_log", "pyrate_state"):
        from pyrate_limiter import Limiter

        lim = Limiter(peer)
        # blocking (the default): with blocking=False a check refuses as soon as another process
        # holds the bucket's lock, which is no rate limit; the limit is huge, so it never waits for one
        return (lambda name: lim.try_acquire(name)), "bench", [lim]
    if job.kind == "limits":
        from limits import RateLimitItemPerSecond

        item = RateLimitItemPerSecond(job.huge)
        return (lambda key: peer.hit(item, key)), "bench", []
    raise ValueError(f"unknown job {job.kind!r}")


def _batch_for(check: Callable[[Any], Any], arg: Any) -> int:
    """Checks between two reads of the clock: about 0.2 ms of them."""
    start = time.perf_counter()
    for _ in range(20):
        check(arg)
    per_call = (time.perf_counter() - start) / 20
    return max(1, min(1000, int(0.0002 / max(per_call, 1e-9))))


def _round(check: Callable[[Any], Any], arg: Any, batch: int, start_at: float, duration: float) -> dict[str, Any]:
    # perf_counter is CLOCK_MONOTONIC on Linux: the same clock in every process of the host
    delay = start_at - time.perf_counter() - 0.002
    if delay > 0:
        time.sleep(delay)
    while time.perf_counter() < start_at:
        pass
    end = start_at + duration
    checks = granted = 0
    start = time.perf_counter()
    while True:
        for _ in range(batch):
            if check(arg):
                granted += 1
        checks += batch
        now = time.perf_counter()
        if now >= end:
            break
    return {"checks": checks, "granted": granted, "seconds": now - start, "single_threaded": single_threaded()}


def _worker_main(index: int, conn: Connection, peers: dict[str, Any]) -> None:
    """A pool worker: ``("prepare", job)``, then ``("round", start_at, duration)`` any number of
    times, then ``("drop",)``; ``("exit",)`` ends it. Every command gets one reply."""
    check: Callable[[Any], Any] | None = None
    arg: Any = None
    closers: list[Any] = []
    batch = 1
    while True:
        command = conn.recv()
        try:
            if command[0] == "prepare":
                check, arg, closers = _build(command[1], index, peers)
                if not check(arg):
                    raise RuntimeError("the first check was refused")
                batch = _batch_for(check, arg)
                gc.collect()
                conn.send({"status": "ok", "batch": batch})
            elif command[0] == "round":
                assert check is not None
                gc_was = gc.isenabled()
                gc.disable()
                try:
                    conn.send(_round(check, arg, batch, command[1], command[2]))
                finally:
                    if gc_was:
                        gc.enable()
            elif command[0] == "drop":
                for obj in closers:
                    obj.close()
                check, arg, closers = None, None, []
                conn.send({"status": "ok"})
            else:
                conn.send({"status": "ok"})
                return
        except NotInstalled as exc:
            conn.send({"status": f"not installed: {exc}"})
        except Exception as exc:
            conn.send({"status": f"error: {type(exc).__name__}: {exc}"})


class Pool:
    """Worker processes (spawn), started once for parts 2 and 3."""

    def __init__(self, size: int, peers: dict[str, Any]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        for i in range(size):
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(target=_worker_main, args=(i, theirs, peers), name=f"bench-shm-{i}", daemon=True)
            proc.start()
            theirs.close()
            self.conns.append(ours)
            self.procs.append(proc)

    def run(self, job: Job, n: int, rounds: int, duration: float) -> dict[str, Any]:
        conns = self.conns[:n]
        for conn in conns:
            conn.send(("prepare", job))
        ready = [conn.recv() for conn in conns]
        failed = [r["status"] for r in ready if r["status"] != "ok"]
        out: dict[str, Any] = {"processes": n, "status": failed[0] if failed else "ok"}
        if not failed:
            totals, rejected, singles = [], 0, set()
            for _ in range(rounds):
                start_at = time.perf_counter() + 0.05
                for conn in conns:
                    conn.send(("round", start_at, duration))
                replies = [conn.recv() for conn in conns]
                bad = [r["status"] for r in replies if "status" in r]
                if bad:
                    out["status"] = bad[0]
                    break
                totals.append(sum(r["checks"] / r["seconds"] for r in replies))
                rejected += sum(r["checks"] - r["granted"] for r in replies)
                singles |= {r["single_threaded"] for r in replies}
            if totals:
                out.update(
                    best_per_s=max(totals),
                    median_per_s=statistics.median(totals),
                    rounds=len(totals),
                    rejected=rejected,
                    workers_single_threaded=singles.pop() if len(singles) == 1 else None,
                )
        for conn in conns:
            conn.send(("drop",))
        for conn in conns:
            conn.recv()
        return out

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(("exit",))
                conn.recv()
            except (OSError, EOFError):
                pass
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()


def _limits_fixed_window() -> Any:
    """Served by the limits manager process: one FixedWindowRateLimiter over one MemoryStorage."""
    from limits import storage, strategies

    return strategies.FixedWindowRateLimiter(storage.MemoryStorage())


class LimitsManager(BaseManager):
    """Serves one limits limiter to every process (see make_peers)."""


LimitsManager.register("FixedWindowRateLimiter", callable=_limits_fixed_window)


def make_peers(huge: int) -> tuple[dict[str, Any], dict[str, str], list[Callable[[], None]]]:
    """The peers' shared objects (made here, handed to the workers when they are spawned), what
    could not be made, and how to stop the managers they started."""
    peers: dict[str, Any] = {}
    missing: dict[str, str] = {}
    stops: list[Callable[[], None]] = []
    try:
        from pyrate_limiter import (
            Duration,
            MultiprocessBucket,
            MultiprocessStateStore,
            Rate,
            StateBucket,
            TokenBucket,
        )
    except ImportError as exc:
        missing["pyrate_log"] = missing["pyrate_state"] = f"not installed ({exc})"
    else:
        for key, make in (
            ("pyrate_log", lambda: MultiprocessBucket.init([Rate(huge, Duration.SECOND)])),
            (
                "pyrate_state",
                lambda: StateBucket(
                    [Rate(huge, Duration.SECOND)], algorithm=TokenBucket(), store=MultiprocessStateStore.init()
                ),
            ),
        ):
            try:
                peers[key] = make()
            except Exception as exc:
                missing[key] = f"error: {type(exc).__name__}: {exc}"
                continue
            proxy = peers[key].items if key == "pyrate_log" else peers[key].store._values
            manager = getattr(proxy, "_manager", None)
            if manager is not None:
                stops.append(manager.shutdown)
    try:
        import limits  # noqa: F401
    except ImportError as exc:
        missing["limits"] = f"not installed ({exc})"
    else:
        try:
            manager = LimitsManager(ctx=multiprocessing.get_context("spawn"))
            manager.start()
            stops.append(manager.shutdown)
            peers["limits"] = manager.FixedWindowRateLimiter()  # type: ignore[attr-defined]
        except Exception as exc:
            missing["limits"] = f"error: {type(exc).__name__}: {exc}"
    return peers, missing, stops


PEER_ROWS = (
    # job kind, label, the permits kind of the same algorithm
    ("pyrate_log", "pyrate-limiter MultiprocessBucket (sliding log), Limiter.try_acquire()", "sliding_window"),
    (
        "pyrate_state",
        "pyrate-limiter StateBucket(TokenBucket(), MultiprocessStateStore), Limiter.try_acquire()",
        "token_bucket",
    ),
    ("limits", "limits FixedWindowRateLimiter(MemoryStorage) via a BaseManager proxy, .hit", "fixed_window"),
)
PERMITS_ROWS = (
    ("token_bucket", "permits store.token_bucket, acquire()"),
    ("fixed_window", "permits store.fixed_window, acquire()"),
    ("sliding_window", "permits store.sliding_window (10 segments), acquire()"),
)


def store_huge(segments: Segments) -> int:
    """The largest limit of HUGE_CANDIDATES that the store's token bucket, fixed window and
    sliding window all accept (parts 2 and 3 give it to every limiter, the peers' too)."""
    store = segments.open("probe", capacity=16)
    serial = iter(range(10**6))
    return min(
        _huge_value(lambda n: store.token_bucket(f"tb{next(serial)}", n, n, 1.0)),
        _huge_value(lambda n: store.fixed_window(f"fw{next(serial)}", n, 1.0)),
        _huge_value(lambda n: store.sliding_window(f"sw{next(serial)}", n, 1.0, 10)),
    )


def run_part2(pool: Pool, segments: Segments, counts: list[int], rounds: int, duration: float) -> dict[str, Any]:
    spec_huge = _huge_value(lambda n: permits.specs.TokenBucket(n, n, 1.0))
    rows = []
    for case, kind, key in (
        ("own key each (partitioned)", "keyed", "own"),
        ("one hot key (partitioned)", "keyed", "hot"),
        ("one named token bucket", "named", ""),
    ):
        for n in counts:
            tag = f"p2-{kind}-{key or 'tb'}-{n}"
            segments.open(tag, capacity=1_000)  # made here, so that this process unlinks it
            job = Job(kind, segments.name(tag), 1_000, "token_bucket", key, spec_huge)
            rows.append({"case": case, **pool.run(job, n, rounds, duration)})
    return {"status": "ok", "rows": rows, "limit": spec_huge}


def run_part3(
    pool: Pool, segments: Segments, counts: list[int], rounds: int, duration: float, huge: int, missing: dict[str, str]
) -> dict[str, Any]:
    rows = []
    for kind, label in PERMITS_ROWS:
        for n in counts:
            tag = f"p3-{kind}-{n}"
            segments.open(tag, capacity=1_000)
            job = Job("named", segments.name(tag), 1_000, kind, "", huge)
            rows.append({"row": kind, "label": label, **pool.run(job, n, rounds, duration)})
    for kind, label, _ in PEER_ROWS:
        for n in counts:
            if kind in missing:
                rows.append({"row": kind, "label": label, "processes": n, "status": missing[kind]})
            else:
                rows.append({"row": kind, "label": label, **pool.run(Job(kind, huge=huge), n, rounds, duration)})
    return {"status": "ok", "rows": rows, "limit": huge}


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _cpu_note() -> str:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return (
        f"This machine has {cpus} CPU{'s' if cpus != 1 else ''} (shared with other tenants): "
        f"more than {cpus} processes share them, so it cannot show scaling beyond {cpus}"
    )


def _thread_note(rows: list[dict[str, Any]]) -> str:
    states = {r.get("workers_single_threaded") for r in rows if r.get("status") == "ok"}
    if states == {True}:
        return "permits' workers had never started a second thread"
    if states == {False}:
        return "the workers had a second thread"
    return "the workers' thread state differed between rows (the peers start threads of their own)"


def print_part2(data: dict[str, Any]) -> None:
    print("\n### 2. Checks per second from several processes (store limiters, every check a grant)\n")
    if data["status"] != "ok":
        print(f"not measured: {data['status']}")
        return
    print("| case | processes | checks/s, all processes (best round) | median round | per process | x 1 process |")
    print("|---|---:|---:|---:|---:|---:|")
    one: dict[str, float] = {}
    for row in data["rows"]:
        if row["status"] != "ok":
            print(f"| {row['case']} | {row['processes']} | {row['status']} | | | |")
            continue
        best = row["best_per_s"]
        if row["processes"] == 1:
            one[row["case"]] = best
        base = one.get(row["case"])
        scale = f"{best / base:.2f}" if base else "-"
        print(
            f"| {row['case']} | {row['processes']} | {_rate(best)} | {_rate(row['median_per_s'])} | "
            f"{_rate(best / row['processes'])} | {scale} |"
        )
    rejected = sum(r.get("rejected", 0) for r in data["rows"])
    print(
        f"\nA token bucket of {data['limit']:,} per second (one per key, or one named limiter); "
        f"{rejected:,} checks refused. {_cpu_note()}; {_thread_note(data['rows'])}."
    )


def print_part3(data: dict[str, Any], counts: list[int]) -> list[dict[str, Any]]:
    print("\n### 3. Cross-process limiters: permits against the peers (one limit shared by all processes)\n")
    goals: list[dict[str, Any]] = []
    if data["status"] != "ok":
        print(f"not measured: {data['status']}")
        return goals
    rates: dict[tuple[str, int], float] = {}
    status: dict[tuple[str, int], str] = {}
    labels: dict[str, str] = {}
    refused: dict[tuple[str, int], int] = {}
    for row in data["rows"]:
        labels[row["row"]] = row["label"]
        status[row["row"], row["processes"]] = row["status"]
        if row["status"] == "ok":
            rates[row["row"], row["processes"]] = row["best_per_s"]
            refused[row["row"], row["processes"]] = row["rejected"]
    matched = {kind: same for kind, _, same in PEER_ROWS}
    head = " | ".join(f"{n} process{'es' if n > 1 else ''}, checks/s" for n in counts)
    ratios = " | ".join(f"permits / this, {n} p." for n in counts)
    print(f"| limiter | {head} | {ratios} | checks refused ({', '.join(map(str, counts))} p.) |")
    print("|---|" + "---:|" * (2 * len(counts) + 1))
    for kind, _ in (*PERMITS_ROWS, *((k, label) for k, label, _ in PEER_ROWS)):
        cells = [
            _rate(rates[kind, n]) if (kind, n) in rates else status.get((kind, n), "-").replace("|", "/")
            for n in counts
        ]
        ratio_cells = []
        for n in counts:
            same = matched.get(kind)
            if same is None:
                ratio_cells.append("")
            elif (kind, n) in rates and (same, n) in rates:
                ratio_cells.append(f"{rates[same, n] / rates[kind, n]:,.0f}x (vs {same})")
            else:
                ratio_cells.append("-")
        refusals = ", ".join(f"{refused[kind, n]:,}" if (kind, n) in refused else "-" for n in counts)
        print(f"| {labels[kind]} | {' | '.join(cells)} | {' | '.join(ratio_cells)} | {refusals} |")
    for n in counts:
        peers_here = [(rates[kind, n], kind) for kind, _, _ in PEER_ROWS if (kind, n) in rates]
        if not peers_here:
            goals.append({"name": f"permits / the faster peer, {n} processes", "value": None})
            continue
        peer_rate, peer = max(peers_here)
        same = matched[peer]
        mine = rates.get((same, n))
        value = None if mine is None else mine / peer_rate
        goals.append(
            {
                "name": f"permits {same} / the faster peer ({peer}), {n} process{'es' if n > 1 else ''}",
                "value": value,
                "target": f">= {TARGET_PEER:g}x",
                "met": None if value is None else value >= TARGET_PEER,
            }
        )
    print(
        f"\nEvery limiter: one limit of {data['limit']:,} per second shared by every process, so every "
        "check is a grant (pyrate-limiter's log bucket keeps one entry per grant for a second, in its manager "
        "process; under a limit this high its put() appends without searching the log; `try_acquire()` is "
        "called blocking, its default, which waits for the bucket's lock: non-blocking, a check refuses "
        "whenever another process holds it). The ratio compares each peer "
        f"with permits' limiter of the same algorithm. {_cpu_note()}; the peers' managers run in "
        "processes of their own, on the same CPUs."
    )
    return goals


# --------------------------------------------------------------------------- part 4: bytes per key


def _disk_bytes(path: str) -> int:
    return os.stat(path).st_blocks * 512


def _store_figure(store: Any, keyed: Any) -> dict[str, int] | None:
    """The table's own accounting, where the store gives one: its bytes in the segment, the bytes of
    one key's record, and the segment's arena in use (not public: read from the limiter's table and
    the store's engine object, so absent when they are not there)."""
    table = getattr(keyed, "_table", None)
    core = getattr(store, "_core", None)
    figure = {
        "table_bytes": getattr(table, "bytes", None),
        "record_bytes": getattr(table, "bytes_per_key", None),
        "arena_used": getattr(core, "used_bytes", None),
    }
    found = {k: int(v) for k, v in figure.items() if isinstance(v, int)}
    return found or None


def run_part4(segments: Segments, n: int) -> dict[str, Any]:
    keys = [f"user-{i}" for i in range(n)]
    key_bytes = sum(len(k.encode()) for k in keys) / n
    rows = []
    spec_huge = _huge_value(lambda v: permits.specs.TokenBucket(v, v, 1.0))
    for label, tag, template in (
        ("token bucket (huge limit)", "p4-tb", permits.specs.TokenBucket(spec_huge, spec_huge, 1.0)),
        ('"10/second" (a sliding log of 33 segments)', "p4-sw", "10/second"),
    ):
        row: dict[str, Any] = {"label": label, "keys": n, "key_bytes": key_bytes}
        try:
            store = segments.open(tag, capacity=n)
            path = _segment_path(segments.name(tag))
            row["store_bytes"] = _disk_bytes(path)
            keyed = store.partitioned(template, name="keyed", idle_timeout=3600.0)
            row["size"] = os.stat(path).st_size
            row["empty_bytes"] = _disk_bytes(path)
            row["figure_empty"] = _store_figure(store, keyed)
            for key in keys:
                if not keyed.acquire(key):
                    raise RuntimeError(f"the first check of {key!r} was refused")
            row["full_bytes"] = _disk_bytes(path)
            row["figure_full"] = _store_figure(store, keyed)
            row["partitions"] = keyed.partition_count
            # The segment takes all its memory when it is made (posix_fallocate): its pages in use do
            # not grow with keys, so a key's cost is the table's own bytes over its keys where the
            # store gives them; else the growth of the pages in use from before the table was made.
            figure = row["figure_full"] or {}
            grown = (row["full_bytes"] - row["store_bytes"]) / n
            row["per_key"] = figure["table_bytes"] / n if "table_bytes" in figure else grown
            row["size_per_capacity"] = row["size"] / n
            row["status"] = "ok"
            keyed.close()
        except NotInstalled as exc:
            row["status"] = f"not installed ({exc})"
        except Exception as exc:
            row["status"] = f"error: {type(exc).__name__}: {exc}"
        rows.append(row)
    return {"status": "ok", "rows": rows}


def print_part4(data: dict[str, Any]) -> list[dict[str, Any]]:
    print("\n### 4. Engine state per key: the segment's bytes\n")
    goals: list[dict[str, Any]] = []
    print(
        "| partitioned limiter | keys | segment in use: store alone | + the limiter, 0 keys | + the keys | "
        "bytes per key | the table's accounting: bytes / keys (one record) | "
        "key bytes (mean) | segment size / capacity |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in data["rows"]:
        if row["status"] != "ok":
            print(f"| {row['label']} | {row['keys']:,} | {row['status']} | | | | | | |")
            goals.append({"name": f"segment bytes per key, {row['label']}", "value": None})
            continue
        figure = row["figure_full"] or {}
        if "table_bytes" in figure and "record_bytes" in figure:
            own = f"{figure['table_bytes'] / row['keys']:,.1f} B ({figure['record_bytes']:,} B)"
        else:
            own = "not given"
        print(
            f"| {row['label']} | {row['keys']:,} | {row['store_bytes']:,} B | {row['empty_bytes']:,} B | "
            f"{row['full_bytes']:,} B | {row['per_key']:,.1f} B | {own} | {row['key_bytes']:.1f} B | "
            f"{row['size_per_capacity']:,.1f} B |"
        )
        bound = TARGET_STATE_BYTES + row["key_bytes"]
        goals.append(
            {
                "name": f"segment bytes per key, {row['label']}",
                "value": row["per_key"],
                "target": f"<= {TARGET_STATE_BYTES} B + key ({bound:.1f} B)",
                "met": row["per_key"] <= bound,
                "unit": " B",
            }
        )
    print(
        "\nBytes per key: the table's own bytes in the segment over its keys, where the store gives them "
        "(a segment takes all its memory when it is made, so its pages in use, `os.stat(path).st_blocks * "
        "512` of /dev/shm/permits.<name>, shown for the store alone, with the limiter and with every key "
        "checked once, do not grow with keys); else the growth of those pages, divided by the keys; a "
        "store of capacity = the keys (the limiter's max_partitions by default). The table's accounting: "
        "its own bytes in the segment "
        "(records, shard locks, head) over the keys, and in brackets one key's record, key included "
        "(read from the limiter's private `_table`). Segment size / capacity: the segment's length "
        "(`st_size`) over its capacity, touched or not."
    )
    return goals


# --------------------------------------------------------------------------- part 5: new keys


TARGET_NEW_KEY = 3.5
"""A new key's first acquire in a store's per-key table / in PartitionedLimiter.per_key: at most."""
TARGET_KNOWN_KEY = 3.0
"""A known key's acquire, the same: at most."""
BOUND = 1_000
"""max_partitions of the tables timed at their bound (--bound)."""


def _pass_ns(check: Callable[[str], Any], keys: list[str]) -> tuple[float, int]:
    """ns per key of one pass of ``check`` over ``keys``, and how many were refused."""
    refused = 0
    start = time.perf_counter()
    for key in keys:
        if not check(key):
            refused += 1
    return (time.perf_counter() - start) / len(keys) * 1e9, refused


def run_part5(segments: Segments, repeats: int, keys_per_pass: int, bound: int = BOUND) -> dict[str, Any]:
    """A new key's first acquire, below the table's bound and at it, and a known key's acquire:
    the store's per-key table against ``PartitionedLimiter.per_key`` of the same spec, each pass
    of one side followed by the same pass of the other."""
    huge = _huge_value(lambda v: permits.specs.TokenBucket(v, v, 0.000001))
    # Replenished every microsecond: a key is fully idle again a microsecond after its grant, so
    # that at the bound every key but the newest can make room for the next.
    spec = permits.specs.TokenBucket(huge, huge, 0.000001)
    below_bound = keys_per_pass * (repeats + 1)
    try:
        store = segments.open("p5", capacity=below_bound + 3 * bound)
    except NotInstalled as exc:
        return {"status": f"not installed ({exc})"}
    except Exception as exc:
        return {"status": f"error: {type(exc).__name__}: {exc}"}
    per_key = permits.PartitionedLimiter.per_key
    sides: dict[str, dict[str, Any]] = {
        "below": {
            "local": per_key(spec, idle_timeout=3600.0, max_partitions=below_bound),
            "shm": store.partitioned(spec, name="below", max_partitions=below_bound, idle_timeout=3600.0),
        },
        # In process a key fully idle, however briefly, makes room at the bound (and idle_timeout
        # only times its eviction by the engine's timer: an hour, so none runs); in the store a
        # key makes room once idle for idle_timeout: 0.
        "bound": {
            "local": per_key(spec, idle_timeout=3600.0, max_partitions=bound),
            "shm": store.partitioned(spec, name="bound", max_partitions=bound, idle_timeout=0.0),
        },
        "known": {
            "local": per_key(spec, idle_timeout=3600.0, max_partitions=bound),
            "shm": store.partitioned(spec, name="known", max_partitions=bound, idle_timeout=3600.0),
        },
    }
    fill = {case: [f"{case}-fill-{i}" for i in range(bound)] for case in ("bound", "known")}
    for case, keys in fill.items():
        for lim in sides[case].values():
            for key in keys:
                if not lim.acquire(key):
                    return {"status": f"error: the first check of {key!r} ({case}) was refused"}
    known_order = fill["known"] * max(1, -(-keys_per_pass // bound))
    random.Random(7).shuffle(known_order)
    times: dict[tuple[str, str], list[float]] = {(c, side): [] for c in sides for side in ("local", "shm")}
    refused: dict[tuple[str, str], int] = dict.fromkeys(times, 0)
    gc.collect()
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for r in range(repeats):
            new_keys = {case: [f"{case}-{r}-{i}" for i in range(keys_per_pass)] for case in ("below", "bound")}
            # Each side's pass after the other's: in turn, the first side alternating per repeat.
            order = ("local", "shm") if r % 2 == 0 else ("shm", "local")
            for case in sides:
                keys = known_order if case == "known" else new_keys[case]
                for side in order:
                    ns, no = _pass_ns(sides[case][side].acquire, keys)
                    times[case, side].append(ns)
                    refused[case, side] += no
    finally:
        if gc_was:
            gc.enable()
    sizes = {case: {side: lim.partition_count for side, lim in pair.items()} for case, pair in sides.items()}
    for pair in sides.values():
        for lim in pair.values():
            lim.close()
    rows = []
    for case in sides:
        local, shm = times[case, "local"], times[case, "shm"]
        rows.append(
            {
                "case": case,
                "local_best_ns": min(local),
                "local_median_ns": statistics.median(local),
                "shm_best_ns": min(shm),
                "shm_median_ns": statistics.median(shm),
                "ratio": min(shm) / min(local),
                "median_ratio": statistics.median(shm) / statistics.median(local),
                "refused_local": refused[case, "local"],
                "refused_shm": refused[case, "shm"],
                "partitions": sizes[case],
            }
        )
    return {
        "status": "ok",
        "repeats": repeats,
        "keys_per_pass": keys_per_pass,
        "bound": bound,
        "limit": huge,
        "single_threaded": single_threaded(),
        "rows": rows,
    }


def _part5_labels(bound: int) -> dict[str, str]:
    return {
        "below": "a new key's first acquire, below the bound",
        "bound": f"a new key's first acquire, at the bound ({bound:,} idle keys: each new key evicts one)",
        "known": f"a known key's acquire ({bound:,} keys in turn)",
    }


def print_part5(data: dict[str, Any]) -> list[dict[str, Any]]:
    print("\n### 5. New keys: a store's per-key table against `PartitionedLimiter.per_key`\n")
    goals: list[dict[str, Any]] = []
    if data["status"] != "ok":
        print(f"not measured: {data['status']}")
        return [{"name": f"shared / in-process, {label}", "value": None} for label in _part5_labels(BOUND).values()]
    labels = _part5_labels(data["bound"])
    print(
        "| case | in-process ns (best / median) | shared memory ns (best / median) | shm / in-process "
        "(best; medians) | goal | met |"
    )
    print("|---|---:|---:|---:|---|---|")
    for row in data["rows"]:
        label = labels[row["case"]]
        target = TARGET_KNOWN_KEY if row["case"] == "known" else TARGET_NEW_KEY
        refusals = row["refused_local"] + row["refused_shm"]
        met = row["ratio"] <= target and refusals == 0
        print(
            f"| {label} | {_fmt_ns(row['local_best_ns'])} / {_fmt_ns(row['local_median_ns'])} | "
            f"{_fmt_ns(row['shm_best_ns'])} / {_fmt_ns(row['shm_median_ns'])} | {row['ratio']:.2f}x; "
            f"{row['median_ratio']:.2f}x | <= {target:g}x | {'yes' if met else '**no**'} |"
        )
        goals.append(
            {
                "name": f"shared / in-process, {label}",
                "value": row["ratio"],
                "target": f"<= {target:g}x",
                "met": met,
            }
        )
    refused = [
        f"{labels[row['case']]}: {row['refused_local']:,} in process, {row['refused_shm']:,} shared"
        for row in data["rows"]
        if row["refused_local"] or row["refused_shm"]
    ]
    print(
        f"\nA token bucket of {data['limit']:,} permits replenished every microsecond (every check a grant, "
        "and every key fully idle a microsecond after it); ns per key over passes of "
        f"{data['keys_per_pass']:,} keys, {data['repeats']} passes of each side taken in turn, keys made "
        "before the pass (new keys: fresh ones each pass; known keys: the table's keys shuffled). Below "
        "the bound: max_partitions room for every pass. At the bound: max_partitions "
        f"{data['bound']:,}, filled first; the store's table with idle_timeout=0 (its keys make room once "
        "idle that long), the in-process one with an hour (a fully idle key makes room there however "
        "briefly idle; the hour keeps its eviction timer from running). Partitions after the run: "
        + ", ".join(
            f"{row['case']} {row['partitions']['local']:,} / {row['partitions']['shm']:,}" for row in data["rows"]
        )
        + " (in process / shared). "
        + ("Refused: " + "; ".join(refused) + "." if refused else "No check was refused.")
    )
    return goals


# --------------------------------------------------------------------------- main


def metadata_block(argv: list[str]) -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _git_commit(),
        "command": "python benchmarks/bench_shm.py " + shlex.join(argv),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "permits": os.path.dirname(permits.__file__),
        "versions": {dist: _version(dist) for dist in PEERS},
    }


def print_goals(goals: list[dict[str, Any]]) -> None:
    print("\n### Goals\n")
    print("| ratio or figure (same run) | value | target | met |")
    print("|---|---:|---|---|")
    for g in goals:
        if g.get("value") is None:
            print(f"| {g['name']} | - | {g.get('target', '-')} | not measured |")
            continue
        v = g["value"]
        value = f"{v:.1f}{g['unit']}" if g.get("unit") else (f"{v:,.0f}x" if v >= 100 else f"{v:.2f}x")
        met = {True: "yes", False: "**no**", None: "-"}[g.get("met")]
        print(f"| {g['name']} | {value} | {g['target']} | {met} |")


def _counts(text: str) -> list[int]:
    counts = sorted({int(x) for x in text.split(",") if x.strip()})
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError("process counts are positive integers, e.g. 1,2,4")
    return counts


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (a few seconds in all; noisier)")
    parser.add_argument("--processes", type=_counts, default=[1, 2, 4], help="process counts (default 1,2,4)")
    parser.add_argument("--parts", type=_counts, default=[1, 2, 3, 4, 5], help="which parts to run (default 1,2,3,4,5)")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per case (part 1) or rounds (parts 2, 3)")
    parser.add_argument("--duration", type=float, default=None, help="seconds per round in parts 2 and 3")
    parser.add_argument("--keys", type=int, default=10_000, help="keys for part 4 (default 10,000)")
    parser.add_argument("--new-keys", type=int, default=None, help="keys per pass in part 5 (default 2,000)")
    parser.add_argument(
        "--bound", type=int, default=BOUND, help=f"max_partitions of part 5's tables at their bound (default {BOUND:,})"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(args_list)

    s = Settings(target=0.02, repeats=3) if args.quick else Settings(target=0.2, repeats=7)
    rounds = 2 if args.quick else 5
    if args.repeats is not None:
        s.repeats = rounds = max(1, args.repeats)
    duration = args.duration or (0.1 if args.quick else 0.5)
    counts = args.processes
    peer_counts = sorted({counts[0], counts[-1]})

    def progress(text: str) -> None:
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    meta = metadata_block(args_list)
    print(f"permits shared-memory benchmark, {meta['date']}, commit {meta['commit']}")
    print()
    print(f"- command: `{meta['command'].strip()}`")
    print(f"- {meta['python']} on {meta['platform']} ({meta['cpus']} CPUs); permits from {meta['permits']}")
    print("- versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()))
    print(f"- load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    # pyrate-limiter's bucket holds a lock and a manager made with the default context: the workers
    # are spawned, and a lock made for fork cannot be handed to a spawned process
    multiprocessing.set_start_method("spawn", force=True)
    out: dict[str, Any] = {"meta": meta}
    goals: list[dict[str, Any]] = []
    segments = Segments()
    pool: Pool | None = None
    stops: list[Callable[[], None]] = []
    try:
        if 1 in args.parts:  # first, in a process that has started nothing yet
            progress("part 1: one check from Python")
            out["part1"] = run_part1(segments, s, verbose=not args.quiet)
            print_part1(out["part1"])
            if out["part1"]["status"] != "ok":
                goals.append({"name": "shared memory / in-process, acquire()", "value": None})
            for row in out["part1"].get("rows", []):
                if row["pair"]["goal"]:
                    ratio = row["ratio"]
                    goals.append(
                        {
                            "name": f"shared memory / in-process, {row['pair']['label']}",
                            "value": ratio,
                            "target": f"<= {TARGET_IN_PROCESS:g}x",
                            "met": None if ratio is None else ratio <= TARGET_IN_PROCESS,
                        }
                    )
        if 2 in args.parts or 3 in args.parts:
            try:
                _store_class()
            except NotInstalled as exc:
                print(f"\n### 2. and 3. Checks per second from several processes\n\nnot measured: {exc}")
                goals.append({"name": "permits / the faster peer, cross-process", "value": None})
            else:
                huge = store_huge(segments)
                peers: dict[str, Any] = {}
                missing: dict[str, str] = {}
                if 3 in args.parts:
                    progress("part 3: starting the peers' managers")
                    peers, missing, stops = make_peers(huge)
                progress(f"starting {counts[-1]} worker processes (spawn)")
                pool = Pool(max(counts[-1], peer_counts[-1]), peers)
                if 2 in args.parts:
                    progress("part 2: checks per second from several processes")
                    out["part2"] = run_part2(pool, segments, counts, rounds, duration)
                    print_part2(out["part2"])
                if 3 in args.parts:
                    progress("part 3: the peers, cross-process")
                    out["part3"] = run_part3(pool, segments, peer_counts, rounds, duration, huge, missing)
                    goals += print_part3(out["part3"], peer_counts)
        if 4 in args.parts:
            progress("part 4: bytes per key")
            out["part4"] = run_part4(segments, args.keys)
            goals += print_part4(out["part4"])
        if 5 in args.parts:
            progress("part 5: new keys")
            new_keys = args.new_keys or (500 if args.quick else 2_000)
            out["part5"] = run_part5(segments, max(3, s.repeats), new_keys, args.bound)
            goals += print_part5(out["part5"])
    finally:
        if pool is not None:
            pool.close()
        for stop in stops:
            try:
                stop()
            except Exception as exc:
                print(f"warning: stopping a peer's manager: {type(exc).__name__}: {exc}", file=sys.stderr)
        segments.close_all()
    print_goals(goals)
    print(f"\n- load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    out["goals"] = goals
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2, default=str)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
