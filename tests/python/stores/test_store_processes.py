"""One limit held across processes through a server: four spawned processes, each with a store and
a client of its own (sync, or asyncio with many tasks), race for one limit in a single Redis, a
Redis Cluster and PostgreSQL, for every kind, named and one key of a per-key limiter; the total
granted is exactly the limit. Then concurrency leases in real time: a holder killed with SIGKILL
gives its permit back only when its lease expires, and a living holder's renewed lease is never
taken from it."""

from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import _store_workers as workers
from _store_workers import KEY, KINDS, SAFETY, Target

PROCESSES = 4
LIMIT = 50
#: Fewer than the limit per process: reaching the limit takes grants in at least two processes.
ATTEMPTS = 40
#: asyncio: tasks per process, and the attempts of each (as many attempts per process as sync).
TASKS, TASK_ATTEMPTS = 20, 2
#: Concurrency leases of the real-time tests expire this long (seconds) after their last renewal.
LEASE_TTL = 1.5

ctx = multiprocessing.get_context("spawn")


def require_client(module: str, install: str) -> None:
    """The client library of a server: without it (outside CI) tests/python/conftest.py has no
    fixture for that server, so its tests skip; under CI they fail."""
    if importlib.util.find_spec(module) is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is not installed (pip install {install!r})")
        pytest.skip(f"{module} is not installed: pip install {install!r}")


def target_of(request: pytest.FixtureRequest, server: str) -> Target:
    name = f"procs-{uuid.uuid4().hex[:12]}"
    if server == "postgres":
        require_client("psycopg_pool", "psycopg[binary]>=3.2 psycopg-pool>=3.2")
        return Target(server, request.getfixturevalue("postgres_server").conninfo, name)
    require_client("redis", "redis>=5")
    running = request.getfixturevalue("redis_server" if server == "redis" else "redis_cluster")
    return Target(server, f"{running.host}:{running.port}", name)


@pytest.fixture(params=["redis", "cluster", "postgres"])
def target(request: pytest.FixtureRequest) -> Target:
    return target_of(request, request.param)


@pytest.fixture(params=["redis", "postgres"])
def single_target(request: pytest.FixtureRequest) -> Target:
    return target_of(request, request.param)


class WorkerPool:
    """PROCESSES spawned workers (``workers.serve``) kept for the tests of this module that race
    them: spawning four interpreters for each of those tests took most of its time. A job's
    ``start`` and ``finish`` are the pool's two events, cleared before each job; a test that
    does not end its job cleanly (``finish``) leaves the pool to be replaced."""

    def __init__(self) -> None:
        self.start, self.finish, self.results = ctx.Event(), ctx.Event(), ctx.Queue()
        self._jobs = [ctx.Queue() for _ in range(PROCESSES)]
        self._processes = [
            ctx.Process(target=workers.serve, args=(jobs, self.start, self.finish, self.results)) for jobs in self._jobs
        ]
        for process in self._processes:
            process.start()
        self.clean = True

    def run(self, name: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """Each worker runs ``name(*args, start, finish, results)``, started at once: their reports."""
        assert self.clean and all(process.is_alive() for process in self._processes)
        self.clean = False
        self.start.clear()
        self.finish.clear()
        for jobs in self._jobs:
            jobs.put((name, args))
        self.start.set()  # the workers block on it once their store and limiter are made: they race
        return [message(self.results) for _ in self._processes]

    def end(self) -> None:
        """``finish`` set; back once every worker has finished its job (its leases released)."""
        self.finish.set()
        done = [self.results.get(timeout=SAFETY) for _ in self._processes]
        assert [kind for kind, *_ in done] == ["done"] * PROCESSES, done
        self.clean = True

    def close(self) -> None:
        for jobs in self._jobs:
            with contextlib.suppress(Exception):
                jobs.put(None)
        for process in self._processes:
            process.join(5 if self.clean else 0)
            if process.is_alive():
                process.kill()
                process.join(SAFETY)


@pytest.fixture(scope="module")
def _pools() -> Iterator[list[WorkerPool]]:
    pools: list[WorkerPool] = []
    yield pools
    for pool in pools:
        pool.close()


@pytest.fixture
def pool(_pools: list[WorkerPool]) -> Iterator[WorkerPool]:
    """The module's worker pool; a new one when a test left the last one in the middle of a job."""
    if _pools and not _pools[-1].clean:
        _pools.pop().close()
    if not _pools:
        _pools.append(WorkerPool())
    yield _pools[-1]


@pytest.fixture
def children() -> Iterator[list[Any]]:
    """The test's child processes: any still running at its end is killed (a hang, a failure)."""
    started: list[Any] = []
    yield started
    for child in started:
        if child.is_alive():
            child.kill()
        child.join(SAFETY)


def message(results: Any) -> tuple[Any, ...]:
    """A worker's next report; a worker's error fails the test with the worker's traceback."""
    got = results.get(timeout=SAFETY)
    assert got[0] == "ok", got[1]
    return tuple(got[1:])


def joined(child: Any) -> None:
    child.join(SAFETY)
    assert child.exitcode == 0, f"a worker exited with {child.exitcode}"


def server_limiter(target: Target, kind: str, keyed: bool) -> tuple[Any, Any]:
    """The test's own store on ``target`` and the limiter the workers share, to read its state."""
    store = workers.sync_store(target)
    return store, workers.limiter_of(store, target.name, kind, LIMIT, keyed)


# ---- one exact limit across processes ----


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["sync", "asyncio"])
@pytest.mark.parametrize("keyed", [False, True], ids=["named", "per_key"])
@pytest.mark.parametrize("kind", KINDS)
def test_processes_share_one_exact_limit(target: Target, kind: str, keyed: bool, mode: str, pool: WorkerPool) -> None:
    if mode == "sync":
        per_process = ATTEMPTS
        reports = pool.run("hammer", (target, kind, LIMIT, keyed, ATTEMPTS))
    else:
        per_process = TASKS * TASK_ATTEMPTS
        reports = pool.run("hammer_async", (target, kind, LIMIT, keyed, TASKS, TASK_ATTEMPTS))

    granted = [report[0] for report in reports]
    refused: Counter[str] = sum((Counter(report[1]) for report in reports), Counter())
    assert sum(granted) == LIMIT, f"granted per process: {granted}"
    assert refused == {"limit_reached": PROCESSES * per_process - LIMIT}
    assert len({report[2] for report in reports}) == PROCESSES
    store, limiter = server_limiter(target, kind, keyed)
    with store:
        # The server's state, read by a fifth client: spent (concurrency: every lease still held).
        if keyed:
            assert limiter.available_permits(KEY) == 0
            assert limiter.available_permits("another-key") == LIMIT  # each key has a state of its own
        else:
            assert limiter.available_permits() == 0
        pool.end()
        left = limiter.available_permits(KEY) if keyed else limiter.available_permits()
    # The workers released their leases before they exited: concurrency permits are all back (the
    # rates' are spent for the hour).
    assert left == (LIMIT if kind == "concurrency" else 0)


# ---- concurrency leases in real time ----


def start_holder(target: Target, mode: str, children: list[Any]) -> tuple[Any, Any, Any]:
    """A child holding the one permit of concurrency(target.name, 1, lease_ttl=LEASE_TTL): the
    child, the event that ends its hold, and its results."""
    ready, done, results = ctx.Event(), ctx.Event(), ctx.Queue()
    holder = ctx.Process(target=workers.hold, args=(target, mode == "asyncio", LEASE_TTL, ready, done, results))
    children.append(holder)
    holder.start()
    while not ready.wait(0.05):
        assert results.empty(), results.get()[1]  # the holder failed: its traceback
        assert holder.is_alive() or holder.exitcode == 0, f"the holder exited with {holder.exitcode}"
    return holder, done, results


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["sync", "asyncio"])
def test_a_killed_holders_permit_comes_back_when_its_lease_expires(
    single_target: Target, mode: str, children: list[Any]
) -> None:
    holder, _, _ = start_holder(single_target, mode, children)
    with workers.sync_store(single_target) as store:
        limiter = store.concurrency(single_target.name, 1, lease_ttl=LEASE_TTL)
        held_since = time.monotonic()
        # Held past a renewal or two first (its lease then expires a lease_ttl after the last one,
        # whatever the phase of the kill between two renewals).
        while time.monotonic() - held_since < 1.25 * LEASE_TTL:
            assert not limiter.acquire()
            time.sleep(0.1)
        os.kill(holder.pid, signal.SIGKILL)
        killed = time.monotonic()
        holder.join(SAFETY)
        # Renewed every third of its lease_ttl until the kill, the lease is held until at least
        # 2/3 of it after: refused at every try up to half of it.
        tries = []  # (sent, answered, lease), seconds after the kill
        while (sent := time.monotonic() - killed) < LEASE_TTL / 2:
            lease = limiter.acquire()
            tries.append((round(sent, 3), round(time.monotonic() - killed, 3), lease))
            time.sleep(0.05)
        assert len(tries) >= 3
        assert not any(lease for _, _, lease in tries), tries
        last = tries[-1][1]
        assert last < 0.6 * LEASE_TTL, f"the machine is too slow for this test: the last try answered at {last} s"
        # Then it expires: a new acquisition is granted within a few lease_ttl.
        while not (lease := limiter.acquire()) and time.monotonic() - killed < 5 * LEASE_TTL:
            time.sleep(0.02)
        back = time.monotonic() - killed
        assert lease, f"the permit is not back {back:.2f} s after its holder was killed"
        assert back <= 3 * LEASE_TTL, f"the permit came back {back:.2f} s after its holder was killed"
        lease.release()
    assert holder.exitcode == -signal.SIGKILL
    print(f"the permit came back {back:.2f} s after its holder was killed (lease_ttl {LEASE_TTL} s)")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["sync", "asyncio"])
def test_a_living_holder_keeps_its_lease_past_its_ttl(single_target: Target, mode: str, children: list[Any]) -> None:
    holder, done, results = start_holder(single_target, mode, children)
    with workers.sync_store(single_target) as store:
        limiter = store.concurrency(single_target.name, 1, lease_ttl=LEASE_TTL)
        held_since = time.monotonic()
        tries = 0
        while time.monotonic() - held_since < 3 * LEASE_TTL:  # its lease renewed all along
            lease = limiter.acquire()
            assert not lease, f"granted {time.monotonic() - held_since:.2f} s into a hold: the lease was not renewed"
            assert lease.reason == "limit_reached"
            tries += 1
            time.sleep(0.05)
        assert tries >= 20
        done.set()  # the holder releases: the permit is free at once, not a lease_ttl later
        assert message(results) == (holder.pid,)
        joined(holder)
        lease = limiter.acquire()
        assert lease, lease.reason
        lease.release()
