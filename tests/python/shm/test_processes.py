"""Several processes on one segment: exact totals for every kind and per key (spawn and fork),
processes racing to create it, a creator killed while creating it, holders killed with SIGKILL (also
in a loop while others go on checking the limit), and waits woken by a release in another process."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

import permits
from permits.shm import SharedMemoryStore

import _shm_workers as workers
from _support import wait_until

KINDS = ["token_bucket", "fixed_window", "sliding_window", "sliding_window_counter", "concurrency"]
PROCESSES = 4
SAFETY = 60.0  # seconds: a net for a hung child, never the thing measured


_RUNNING: list[Any] = []


def run_all(ctx: Any, target: Any, args_of: Any, n: int = PROCESSES, join: bool = True) -> list[Any]:
    """Starts n processes of target(*args_of(start, results)), sets `start`, returns what each put
    (and, with `join`, waits for each to exit with status 0)."""
    start = ctx.Event()
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=args_of(start, results)) for _ in range(n)]
    _RUNNING.extend(procs)
    for p in procs:
        p.start()
    start.set()
    out = [results.get(timeout=SAFETY) for _ in range(n)]
    if join:
        for p in procs:
            p.join(SAFETY)
            assert p.exitcode == 0, f"a worker exited with {p.exitcode}"
    return out


@pytest.fixture(autouse=True)
def _no_worker_left() -> Any:
    yield
    while _RUNNING:
        p = _RUNNING.pop()
        p.join(SAFETY)
        if p.is_alive():
            p.kill()
            p.join()
            raise AssertionError("a worker did not exit")
        assert p.exitcode == 0, f"a worker exited with {p.exitcode}"


@pytest.fixture(params=["spawn", "fork"])
def ctx(request: pytest.FixtureRequest) -> Any:
    return multiprocessing.get_context(request.param)


@pytest.mark.parametrize("kind", KINDS)
def test_processes_hammering_one_limiter_get_exactly_the_limit(ctx: Any, kind: str, segment_name: str) -> None:
    limit, attempts = 300, 200  # 800 attempts for 300 permits
    finish = ctx.Event()
    try:
        out = run_all(
            ctx,
            workers.hammer,
            lambda start, results: (segment_name, kind, limit, attempts, start, finish, results),
            join=False,
        )
        assert sum(out) == limit
        limiter = workers.SPECS[kind](SharedMemoryStore(segment_name), limit)
        assert limiter.available_permits() == 0
    finally:
        finish.set()
    if kind == "concurrency":
        limiter = workers.SPECS[kind](SharedMemoryStore(segment_name), limit)
        wait_until(lambda: limiter.available_permits() == limit)  # every lease released as its worker ended


def test_per_key_totals_across_processes(ctx: Any, segment_name: str) -> None:
    keys = 3
    out = run_all(ctx, workers.hammer_keys, lambda start, results: (segment_name, keys, 150, start, results))
    assert [sum(per[k] for per in out) for k in range(keys)] == [100] * keys


def test_processes_racing_to_create_a_segment_share_one(ctx: Any, segment_name: str) -> None:
    for round_ in range(3):
        name = f"{segment_name}-{round_}"
        try:
            out = run_all(ctx, workers.create_and_take, lambda start, results: (name, start, results))  # noqa: B023
            assert sum(out) == 50
        finally:
            SharedMemoryStore(name).unlink()


def creating(pid: int) -> bool:
    """True once process `pid` has a file of /dev/shm open: its creation of a segment is under way."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/dev/shm/"):
                return True
        except OSError:
            pass
    return False


def test_a_creator_killed_while_creating_holds_no_one_up(segment_name: str) -> None:
    # A segment of about 400 MB (less where /dev/shm has less than four times that free): its
    # creator takes some 200 ms to allocate it, and is killed meanwhile.
    fs = os.statvfs("/dev/shm")
    capacity = max(1000, min(400 << 20, fs.f_bavail * fs.f_frsize // 4) // 2048)
    store = f"SharedMemoryStore({segment_name!r}, capacity={capacity})"
    open_it = f"from permits.shm import SharedMemoryStore\nstore = {store}\n"
    creator = subprocess.Popen([sys.executable, "-c", open_it])
    try:
        wait_until(lambda: creating(creator.pid) or creator.poll() is not None)
    finally:
        creator.kill()
        creator.wait(SAFETY)
    # Another process opens the store, as a restarted service does: it creates the segment (it once
    # waited 2 s for the dead creator, then failed until the file was removed by hand).
    use_it = open_it + "w = store.fixed_window('w', 1, 60.0)\nprint(bool(w.acquire()), bool(w.acquire()))\n"
    done = subprocess.run([sys.executable, "-c", use_it], capture_output=True, text=True, timeout=SAFETY)
    assert done.stdout == "True False\n", done.stdout + done.stderr
    prefix = f"permits.{segment_name}"
    # Nothing else of this name in /dev/shm (names that merely start with it are other segments').
    left = [f for f in os.listdir("/dev/shm") if f.startswith(prefix) and f != prefix]
    assert [f for f in left if not (f[len(prefix)].isalnum() or f[len(prefix)] in "_.-")] == []


@pytest.mark.parametrize("keyed", [False, True], ids=["named", "per_key"])
def test_a_holder_killed_with_sigkill_has_its_permits_back(segment_name: str, keyed: bool) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=workers.hold, args=(segment_name, 2, keyed, ready))
    holder.start()
    try:
        assert ready.wait(SAFETY)
        store = SharedMemoryStore(segment_name)
        if keyed:
            limiter: Any = store.partitioned(
                permits.Partition.concurrency(None, 2), name="pk-conc", lease_ttl=3600, idle_timeout=0
            )
            assert not limiter.acquire("k")
            os.kill(holder.pid, signal.SIGKILL)
            holder.join(SAFETY)
            lease = limiter.wait("k", 2, timeout=SAFETY)  # lease_ttl is an hour: the dead pid gives them back
        else:
            limiter = store.concurrency("conc", 2, lease_ttl=3600)
            assert not limiter.acquire()
            os.kill(holder.pid, signal.SIGKILL)
            holder.join(SAFETY)
            lease = limiter.wait(2, timeout=SAFETY)
        assert lease, lease.reason
        lease.release()
    finally:
        if holder.is_alive():
            holder.kill()
            holder.join()


def test_workers_killed_in_a_loop_never_let_the_others_exceed_the_limit(segment_name: str) -> None:
    ctx = multiprocessing.get_context("fork")
    n, limit = 5, 3
    flags = ctx.Array("b", n, lock=False)
    stop = ctx.Value("b", 0, lock=False)
    procs: list[Any] = [None] * n

    def start(i: int) -> None:
        flags[i] = 0
        procs[i] = ctx.Process(target=workers.churn, args=(segment_name, i, flags, stop))
        procs[i].start()

    rng = random.Random(7)
    try:
        for i in range(n):
            start(i)
        SharedMemoryStore(segment_name).concurrency("churn", limit, lease_ttl=3600)
        peak = 0
        kills = 0
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            # The live workers' flags, read twice alike: a worker sets its flag only while it holds a permit.
            live = [i for i in range(n) if procs[i].is_alive()]
            first = [flags[i] for i in live]
            second = [flags[i] for i in live]
            if first == second:
                held = sum(first)
                assert held <= limit, f"{held} live workers hold a permit of a limit of {limit}"
                peak = max(peak, held)
            if rng.random() < 0.02:
                victim = rng.randrange(n)
                os.kill(procs[victim].pid, signal.SIGKILL)
                procs[victim].join(SAFETY)
                kills += 1
                start(victim)
        assert kills >= 5
        assert peak >= 2  # the permits were in use at once: the check above could fail
    finally:
        stop.value = 1
        for p in procs:
            if p is not None:
                p.join(10)
                if p.is_alive():
                    p.kill()
                    p.join()
    # Every permit comes back: those of the killed workers too.
    limiter = SharedMemoryStore(segment_name).concurrency("churn", limit, lease_ttl=3600)
    lease = limiter.wait(limit, timeout=SAFETY)
    assert lease, lease.reason


def test_a_blocking_wait_is_woken_by_a_release_in_another_process(segment_name: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready, go = ctx.Event(), ctx.Event()
    other = ctx.Process(target=workers.release_later, args=(segment_name, ready, go))
    other.start()
    try:
        assert ready.wait(SAFETY)
        limiter = SharedMemoryStore(segment_name).concurrency("handoff", 1)
        assert not limiter.acquire()
        go.set()
        lease = limiter.wait(timeout=SAFETY)
        assert lease, lease.reason
        other.join(SAFETY)
        assert other.exitcode == 0
    finally:
        if other.is_alive():
            other.kill()
            other.join()


async def test_wait_async_is_woken_by_a_release_in_another_process(segment_name: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready, go = ctx.Event(), ctx.Event()
    other = ctx.Process(target=workers.release_later, args=(segment_name, ready, go))
    other.start()
    try:
        assert ready.wait(SAFETY)
        limiter = SharedMemoryStore(segment_name).concurrency("handoff", 1)
        assert not limiter.acquire()
        go.set()
        async with limiter.wait_async() as lease:
            assert lease
        other.join(SAFETY)
    finally:
        if other.is_alive():
            other.kill()
            other.join()


def start_each(ctx: Any, target: Any, segment: str, n: int) -> tuple[list[str], list[Any]]:
    """Starts n processes of target(segment, results, release) one after another, each given its
    own `release` event, and returns what each reported (the processes stay alive)."""
    results = ctx.Queue()
    releases = [ctx.Event() for _ in range(n)]
    reports = []
    for release in releases:
        p = ctx.Process(target=target, args=(segment, results, release))
        _RUNNING.append(p)
        p.start()
        reports.append(results.get(timeout=SAFETY))
    return reports, releases


def test_live_processes_that_gave_their_permits_back_keep_no_holder_slot(segment_name: str) -> None:
    # More live processes than the segment has holder slots (256), each taking and giving back a
    # permit: a process holding nothing keeps no slot, so all are served (a recycling worker pool).
    # (forked by a small spawned process: 264 forks of this one are too slow in a loaded run)
    ctx = multiprocessing.get_context("spawn")
    results, release = ctx.Queue(), ctx.Event()
    helper = ctx.Process(
        target=workers.start_each_from_here, args=(workers.take_and_give_back, segment_name, 264, results, release)
    )
    _RUNNING.append(helper)
    helper.start()
    try:
        reports = [results.get(timeout=SAFETY) for _ in range(264)]
        assert [r for r in reports if r != "ok"] == []
        assert SharedMemoryStore(segment_name).concurrency("recycled", 4, lease_ttl=3600).available_permits() == 4
    finally:
        release.set()


def test_twenty_processes_hold_one_key(segment_name: str) -> None:
    ctx = multiprocessing.get_context("fork")
    reports, releases = start_each(ctx, workers.hold_one_of_key, segment_name, 20)
    try:
        assert reports == ["ok"] * 20
        keyed = SharedMemoryStore(segment_name).partitioned(permits.Partition.concurrency(None, 100), name="many")
        lease = keyed.acquire("k")  # a 21st
        assert lease, lease.reason
        assert keyed.available_permits("k") == 79
        lease.release()
    finally:
        for release in releases:
            release.set()


def test_a_process_beyond_a_keys_holders_is_told_why_and_waits_for_one(segment_name: str) -> None:
    ctx = multiprocessing.get_context("fork")
    reports, releases = start_each(ctx, workers.hold_one_of_key, segment_name, 64)
    try:
        assert reports == ["ok"] * 64
        keyed = SharedMemoryStore(segment_name).partitioned(permits.Partition.concurrency(None, 100), name="many")
        refused = keyed.acquire("k")
        # 36 permits are free, but one key records 64 holding processes at most: the true reason,
        # and no retry_after (only a release makes room, not time).
        assert (refused.reason, refused.retry_after) == ("process_limit", None)
        assert keyed.available_permits("k") == 36
        releases[0].set()
        lease = keyed.wait("k", timeout=SAFETY)
        assert lease, lease.reason
        lease.release()
    finally:
        for release in releases:
            release.set()


def test_a_raised_per_key_concurrency_limit_keeps_the_holders_its_records_have_room_for(segment_name: str) -> None:
    ctx = multiprocessing.get_context("fork")
    reports, releases = start_each(ctx, workers.hold_one_of_small_key, segment_name, 2)
    try:
        assert reports == ["ok"] * 2
        keyed = SharedMemoryStore(segment_name).partitioned(permits.Partition.concurrency(None, 2), name="small")
        keyed.reconfigure(permits.specs.Concurrency(5))
        # 3 permits free, but the key's records have room for the 2 holding processes it was made for.
        refused = keyed.acquire("k")
        assert (refused.reason, keyed.available_permits("k")) == ("process_limit", 3)
        releases[0].set()
        lease = keyed.wait("k", 2, timeout=SAFETY)
        assert lease, lease.reason
        assert keyed.available_permits("k") == 2
        lease.release()
    finally:
        for release in releases:
            release.set()


def test_keys_held_by_dead_processes_become_idle(segment_name: str) -> None:
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    holder = ctx.Process(target=workers.hold, args=(segment_name, 2, True, ready))
    holder.start()
    try:
        assert ready.wait(SAFETY)
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(SAFETY)
    keyed = SharedMemoryStore(segment_name).partitioned(
        permits.Partition.concurrency(None, 2), name="pk-conc", lease_ttl=3600, idle_timeout=0
    )
    assert keyed.evict_idle() == 1  # its holder is dead: nothing of it is held
    assert keyed.partition_count == 0
