"""What the processes of test_store_processes run (importable by spawned interpreters): each makes a
store of its own on the server it is given (a new client, as another host would), then acquires.

Every worker puts one message on ``results``: ``("ok", ...)`` with what it observed, or
``("error", traceback)``, so that a failure in a child fails the test at once, with its traceback.
"""

from __future__ import annotations

import asyncio
import os
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from permits import specs

KINDS = ("token_bucket", "fixed_window", "sliding_window", "sliding_window_counter", "concurrency")
#: Periods no test outlives: nothing refills or slides out while the processes count.
LONG = 3600.0
#: Every call to the server may take this long: the many processes and tasks starting at once on a
#: busy machine are slow, not failing (failures have tests of their own).
TIMEOUT = 20.0
#: A net for a child that hangs, never the thing measured.
SAFETY = 60.0
#: The key every process of a per-key test uses.
KEY = "the-key"


@dataclass(frozen=True)
class Target:
    """A server, and the names a test uses on it: ``server`` is "redis", "cluster" or "postgres";
    ``address`` is host:port (a Cluster's: one of its nodes) or a conninfo; ``name`` is unique to
    the test (the limiter's name, and for Redis the key prefix too)."""

    server: str
    address: str
    name: str

    @property
    def prefix(self) -> str:
        return f"{self.name}:"

    def host_port(self) -> tuple[str, int]:
        host, port = self.address.rsplit(":", 1)
        return host, int(port)


def sync_store(target: Target) -> Any:
    """A store with a sync client: redis.Redis, a sync RedisCluster, or a conninfo string."""
    if target.server == "postgres":
        from permits.postgres import PostgresStore

        return PostgresStore(target.address, timeout=TIMEOUT)
    import redis
    import redis.cluster

    from permits.redis import RedisStore

    host, port = target.host_port()
    client = redis.Redis(host=host, port=port) if target.server == "redis" else redis.cluster.RedisCluster(host, port)
    return RedisStore(client, prefix=target.prefix, timeout=TIMEOUT)


async def async_store(target: Target) -> tuple[Any, Callable[[], Awaitable[None]]]:
    """A store with an asyncio client (redis.asyncio's, or a psycopg AsyncConnectionPool), and what
    closes that client."""
    if target.server == "postgres":
        import psycopg_pool

        from permits.postgres import PostgresStore

        pool = psycopg_pool.AsyncConnectionPool(target.address, min_size=1, max_size=8, open=False)
        await pool.open()
        return PostgresStore(pool, timeout=TIMEOUT), pool.close
    import redis.asyncio
    import redis.asyncio.cluster

    from permits.redis import RedisStore

    host, port = target.host_port()
    client: Any
    if target.server == "redis":
        client = redis.asyncio.Redis(host=host, port=port)
    else:
        client = redis.asyncio.cluster.RedisCluster(host=host, port=port)
    return RedisStore(client, prefix=target.prefix, timeout=TIMEOUT), client.aclose


def spec_of(kind: str, limit: int) -> specs.Spec[Any]:
    return {
        "token_bucket": lambda: specs.TokenBucket(limit, 1, LONG),
        "fixed_window": lambda: specs.FixedWindow(limit, LONG),
        "sliding_window": lambda: specs.SlidingWindow(limit, LONG, 4),
        "sliding_window_counter": lambda: specs.SlidingWindowCounter(limit, LONG),
        "concurrency": lambda: specs.Concurrency(limit),
    }[kind]()


def limiter_of(store: Any, name: str, kind: str, limit: int, keyed: bool) -> Any:
    """The test's limiter: per key (``store.partitioned``), or named through the store's maker of
    that kind (``store.token_bucket(...)`` etc.)."""
    if keyed:
        return store.partitioned(spec_of(kind, limit), name=name)
    return {
        "token_bucket": lambda: store.token_bucket(name, limit, 1, LONG),
        "fixed_window": lambda: store.fixed_window(name, limit, LONG),
        "sliding_window": lambda: store.sliding_window(name, limit, LONG, 4),
        "sliding_window_counter": lambda: store.sliding_window_counter(name, limit, LONG),
        "concurrency": lambda: store.concurrency(name, limit),
    }[kind]()


def _report(results: Any, work: Callable[[], None]) -> None:
    try:
        work()
    except BaseException:
        results.put(("error", f"process {os.getpid()}:\n{traceback.format_exc()}"))
        raise


def _tally(leases: list[Any]) -> tuple[str, int, dict[str, int], int]:
    """("ok", granted, the refusals' reasons counted, this pid)."""
    refused = Counter(str(lease.reason) for lease in leases if not lease)
    return "ok", sum(1 for lease in leases if lease), dict(refused), os.getpid()


def hammer(
    target: Target, kind: str, limit: int, keyed: bool, attempts: int, start: Any, finish: Any, results: Any
) -> None:
    """Sync: ``attempts`` acquisitions as fast as it can once ``start`` is set; reports them, keeps
    its leases until ``finish`` (concurrency permits stay taken until every process has counted),
    then releases them."""

    def work() -> None:
        with sync_store(target) as store:
            limiter = limiter_of(store, target.name, kind, limit, keyed)
            acquire = (lambda: limiter.acquire(KEY)) if keyed else limiter.acquire
            assert start.wait(SAFETY)
            leases = [acquire() for _ in range(attempts)]
            results.put(_tally(leases))
            assert finish.wait(SAFETY)
            for lease in leases:
                lease.release()

    _report(results, work)


def hammer_async(
    target: Target,
    kind: str,
    limit: int,
    keyed: bool,
    tasks: int,
    attempts: int,
    start: Any,
    finish: Any,
    results: Any,
) -> None:
    """asyncio: ``tasks`` tasks of ``attempts`` acquisitions each, in one ``asyncio.run``; as
    :func:`hammer` otherwise."""

    async def main() -> None:
        store, close_client = await async_store(target)
        async with store:  # its exit waits for the releases sent in tasks of this loop
            limiter = limiter_of(store, target.name, kind, limit, keyed)
            acquire = (lambda: limiter.acquire_async(KEY)) if keyed else limiter.acquire_async
            assert await asyncio.to_thread(start.wait, SAFETY)

            async def task() -> list[Any]:
                return [await acquire() for _ in range(attempts)]

            leases = [lease for each in await asyncio.gather(*(task() for _ in range(tasks))) for lease in each]
            results.put(_tally(leases))
            assert await asyncio.to_thread(finish.wait, SAFETY)
            for lease in leases:
                lease.release()
        await close_client()

    _report(results, lambda: asyncio.run(main()))


def hold(target: Target, use_async: bool, lease_ttl: float, ready: Any, done: Any, results: Any) -> None:
    """Takes the one permit of ``concurrency(name, 1, lease_ttl=lease_ttl)``, sets ``ready`` and
    holds it (its lease renewed in the background) until ``done`` is set, then releases it. The
    test may kill it instead."""

    def sync() -> None:
        with sync_store(target) as store:
            lease = store.concurrency(target.name, 1, lease_ttl=lease_ttl).acquire()
            assert lease, lease.reason
            ready.set()
            assert done.wait(SAFETY)
            lease.release()
        results.put(("ok", os.getpid()))

    async def asynchronous() -> None:
        store, close_client = await async_store(target)
        async with store:
            lease = await store.concurrency(target.name, 1, lease_ttl=lease_ttl).acquire_async()
            assert lease, lease.reason
            ready.set()
            assert await asyncio.to_thread(done.wait, SAFETY)  # the loop runs: the renewal task too
            lease.release()
        await close_client()
        results.put(("ok", os.getpid()))

    _report(results, (lambda: asyncio.run(asynchronous())) if use_async else sync)


def serve(jobs: Any, start: Any, finish: Any, results: Any) -> None:
    """A worker kept for many tests (test_store_processes.WorkerPool): runs each job it gets, a
    function of this module by name with its arguments (``start``, ``finish`` and ``results``
    are the worker's own, the same for every job), and says ``("done", pid)`` after each, until it
    gets None. Each job makes a store and a client of its own, as a new process would."""
    while (job := jobs.get()) is not None:
        name, args = job
        try:
            globals()[name](*args, start, finish, results)
        except Exception:  # (a job's own are reported by _report already: the test fails at the first)
            results.put(("error", f"process {os.getpid()}:\n{traceback.format_exc()}"))
        results.put(("done", os.getpid()))
