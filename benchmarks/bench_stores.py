"""The stores in a server (``permits.redis.RedisStore``, ``permits.postgres.PostgresStore``) against the
peers' Redis and PostgreSQL limiters and against the floor of the same server, in one run.

    python benchmarks/bench_stores.py                  # about three minutes
    python benchmarks/bench_stores.py --quick          # a smoke run
    python benchmarks/bench_stores.py --json FILE

It starts its own redis-server and PostgreSQL (the test suite's fixtures in tests/python/_servers:
free loopback ports, temporary directories, removed at the end). Every check is a grant (huge
limits). Four tables:

1. Redis, sync, one client, checks per second: permits' limiters (one Lua script per check), limits'
   RedisStorage strategies and pyrate-limiter's RedisBucket configured alike (a limit per second), and
   the floor: an ``EVALSHA`` of a script that only returns 1, through the same client.
2. Redis, asyncio, 64 tasks on one loop sharing one asyncio client: the same, awaited.
3. Local reservation: ``RedisStore(client, reserve=100)`` against the same limiter without it.
4. PostgreSQL, sync, one connection: the store's token bucket and fixed window (one round trip
   each) against a bare ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING`` on a table of the same
   shape, and pyrate-limiter's PostgresBucket.

Cases of a table alternate in rounds of ``--duration`` seconds; each case shows its best round and
its median, and each goal's ratio is of medians (of bests in brackets). A peer missing shows "not
installed"; one that fails shows its error.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import hashlib
import json
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))  # the server fixtures

HUGE = 10**12
TASKS = 64


@dataclass
class Row:
    table: str
    name: str
    group: str  # floor, permits, peer
    rounds: list[float] = field(default_factory=list)
    status: str = "ok"

    @property
    def best(self) -> float:
        return max(self.rounds, default=0.0)

    @property
    def median(self) -> float:
        return statistics.median(self.rounds) if self.rounds else 0.0


Sync = Callable[[], object]
Async = Callable[[], Awaitable[object]]


def time_sync(check: Sync, duration: float) -> float:
    n, start = 0, time.perf_counter()
    end = start + duration
    while True:
        for _ in range(50):
            check()
        n += 50
        now = time.perf_counter()
        if now >= end:
            return n / (now - start)


async def time_async(check: Async, duration: float) -> float:
    counts = [0] * TASKS
    start = time.perf_counter()
    end = start + duration

    async def worker(i: int) -> None:
        while time.perf_counter() < end:
            await check()
            counts[i] += 1

    await asyncio.gather(*(worker(i) for i in range(TASKS)))
    return sum(counts) / (time.perf_counter() - start)


def run_table(table: str, cases: list[tuple[str, str, Any]], args: argparse.Namespace, is_async: bool) -> list[Row]:
    """``cases``: (name, group, maker), a maker returning the check (or raising ImportError)."""
    rows, checks = [], []
    for name, group, maker in cases:
        row = Row(table, name, group)
        rows.append(row)
        try:
            check = maker if is_async else maker()  # (an async case makes its check in each round's loop)
            if is_async:
                asyncio.run(_once(check))
            else:
                check()
            checks.append((row, check))
        except ImportError as exc:
            row.status = f"not installed ({exc.name})"
        except Exception as exc:  # a peer that breaks is reported, not fatal
            row.status = f"error: {type(exc).__name__}: {exc}"[:120]
    for _ in range(args.rounds):
        for row, check in checks:
            if row.status != "ok":
                continue
            try:
                if is_async:
                    row.rounds.append(asyncio.run(_timed_async(check, args.duration)))
                else:
                    row.rounds.append(time_sync(check, args.duration))
            except Exception as exc:  # a peer that breaks mid-run is reported, not fatal
                row.status = f"error: {type(exc).__name__}: {exc}"[:120]
    return rows


async def _once(make_check: Any) -> None:
    check = await make_check() if asyncio.iscoroutinefunction(make_check) else make_check
    await check()


async def _timed_async(make_check: Any, duration: float) -> float:
    # Async clients belong to a loop: each round makes its check in its own loop.
    check = await make_check() if asyncio.iscoroutinefunction(make_check) else make_check
    return await time_async(check, duration)


# ---------------------------------------------------------------------------------------- Redis


def redis_sync_cases(url: str) -> list[tuple[str, str, Any]]:
    import redis

    from permits.redis import RedisStore

    client = redis.Redis.from_url(url)
    store = RedisStore(client, prefix=f"bench:{uuid.uuid4().hex[:6]}:")

    def floor() -> Sync:
        sha = client.script_load("return 1")
        return lambda: client.evalsha(sha, 0)

    def ours(kind: str) -> Callable[[], Sync]:
        def make() -> Sync:
            if kind == "token_bucket":
                limiter = store.token_bucket("tb", HUGE // 10**3, HUGE // 10**3, 1.0)
            elif kind == "fixed_window":
                limiter = store.fixed_window("fw", HUGE // 10**3, 1.0)
            elif kind == "sliding_window_counter":
                limiter = store.sliding_window_counter("swc", HUGE // 10**3, 1.0)
            elif kind == "sliding_window":
                limiter = store.sliding_window("sw", HUGE // 10**3, 1.0, 10)
            else:
                limiter = store.concurrency("c", 1000)
                return lambda: limiter.acquire().release()
            return limiter.acquire

        return make

    def limits_case(strategy: str) -> Callable[[], Sync]:
        def make() -> Sync:
            from limits import RateLimitItemPerSecond, storage, strategies

            store_ = storage.RedisStorage(url)
            limiter = getattr(strategies, strategy)(store_)
            item = RateLimitItemPerSecond(HUGE // 10**3)
            key = uuid.uuid4().hex
            return lambda: limiter.hit(item, key)

        return make

    def pyrate() -> Sync:
        from pyrate_limiter import Duration, Limiter, Rate, RedisBucket

        bucket = RedisBucket.init([Rate(HUGE // 10**3, Duration.SECOND)], client, f"pyrate-{uuid.uuid4().hex}")
        limiter = Limiter(bucket)
        return lambda: limiter.try_acquire("bench", blocking=False)

    return [
        ("EVALSHA of `return 1` (redis-py)", "floor", floor),
        ("permits token_bucket acquire()", "permits", ours("token_bucket")),
        ("permits fixed_window acquire()", "permits", ours("fixed_window")),
        ("permits sliding_window_counter acquire()", "permits", ours("sliding_window_counter")),
        ("permits sliding_window(10 segments) acquire()", "permits", ours("sliding_window")),
        ("permits concurrency acquire().release()", "permits", ours("concurrency")),
        ("limits FixedWindowRateLimiter.hit", "peer", limits_case("FixedWindowRateLimiter")),
        ("limits SlidingWindowCounterRateLimiter.hit", "peer", limits_case("SlidingWindowCounterRateLimiter")),
        ("limits MovingWindowRateLimiter.hit", "peer", limits_case("MovingWindowRateLimiter")),
        ("pyrate-limiter RedisBucket try_acquire", "peer", pyrate),
    ]


def redis_async_cases(url: str) -> list[tuple[str, str, Any]]:
    def floor() -> Any:
        async def make() -> Async:
            import redis.asyncio

            client = redis.asyncio.Redis.from_url(url, max_connections=2 * TASKS)
            sha = await client.script_load("return 1")
            return lambda: client.evalsha(sha, 0)

        return make

    def ours(kind: str) -> Any:
        async def make() -> Async:
            import redis.asyncio

            from permits.redis import RedisStore

            client = redis.asyncio.Redis.from_url(url, max_connections=2 * TASKS)
            store = RedisStore(client, prefix=f"bench:{uuid.uuid4().hex[:6]}:")
            if kind == "token_bucket":
                limiter = store.token_bucket("tb", HUGE // 10**3, HUGE // 10**3, 1.0)
            else:
                limiter = store.fixed_window("fw", HUGE // 10**3, 1.0)
            return lambda: limiter.acquire_async()

        return make

    def limits_case() -> Any:
        async def make() -> Async:
            from limits import RateLimitItemPerSecond
            from limits.aio import storage, strategies

            store = storage.RedisStorage("async+" + url, implementation="redispy")
            limiter = strategies.FixedWindowRateLimiter(store)
            item = RateLimitItemPerSecond(HUGE // 10**3)
            key = uuid.uuid4().hex
            return lambda: limiter.hit(item, key)

        return make

    def pyrate() -> Any:
        async def make() -> Async:
            import redis.asyncio
            from pyrate_limiter import Duration, Limiter, Rate, RedisBucket

            client = redis.asyncio.Redis.from_url(url, max_connections=2 * TASKS)
            bucket = await RedisBucket.init([Rate(HUGE // 10**3, Duration.SECOND)], client, f"p-{uuid.uuid4().hex}")
            limiter = Limiter(bucket)

            async def check() -> object:
                return await limiter.try_acquire("bench", blocking=False)  # type: ignore[misc]

            return check

        return make

    return [
        ("EVALSHA of `return 1` (redis.asyncio)", "floor", floor()),
        ("permits token_bucket acquire_async()", "permits", ours("token_bucket")),
        ("permits fixed_window acquire_async()", "permits", ours("fixed_window")),
        ("limits (aio, redispy) FixedWindowRateLimiter.hit", "peer", limits_case()),
        ("pyrate-limiter RedisBucket (redis.asyncio) try_acquire", "peer", pyrate()),
    ]


def reservation_cases(url: str) -> list[tuple[str, str, Any]]:
    import redis

    from permits.redis import RedisStore

    def ours(reserve: int | None) -> Callable[[], Sync]:
        def make() -> Sync:
            store = RedisStore(redis.Redis.from_url(url), prefix=f"bench:{uuid.uuid4().hex[:6]}:", reserve=reserve)
            return store.fixed_window("fw", HUGE // 10**3, 1.0).acquire

        return make

    return [
        ("permits fixed_window acquire(), plain", "floor", ours(None)),
        ("permits fixed_window acquire(), reserve=100", "permits", ours(100)),
    ]


# ----------------------------------------------------------------------------------- PostgreSQL

PLAIN = """
INSERT INTO {table} AS t (key, lease, sig, anchor, a, b, ok, seen, expires)
VALUES (%(key)s, ''::bytea, 'plain', 0, 0, 1, true, 0, 0)
ON CONFLICT (key, lease) DO UPDATE SET b = t.b + 1, seen = excluded.seen, expires = excluded.expires
RETURNING t.b
"""


def postgres_cases(conninfo: str) -> list[tuple[str, str, Any]]:
    import psycopg
    from psycopg import sql

    from permits.postgres import PostgresStore

    ours_table = f"bench_{uuid.uuid4().hex[:8]}"

    def ours(kind: str) -> Callable[[], Sync]:
        def make() -> Sync:
            conn = psycopg.connect(conninfo, autocommit=True)
            store = PostgresStore(conn, table=ours_table)
            if kind == "token_bucket":
                return store.token_bucket(f"tb-{uuid.uuid4().hex}", HUGE // 10**3, HUGE // 10**3, 1.0).acquire
            return store.fixed_window(f"fw-{uuid.uuid4().hex}", HUGE // 10**3, 1.0).acquire

        return make

    def plain() -> Sync:
        conn = psycopg.connect(conninfo, autocommit=True)
        table = f"bench_{uuid.uuid4().hex[:8]}"
        # The same columns and indexes as the store's table (made by a first step).
        PostgresStore(conn, table=ours_table).fixed_window("warm", 10, 1.0).acquire()
        conn.execute(
            sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(sql.Identifier(table), sql.Identifier(ours_table))
        )
        query = sql.SQL(PLAIN).format(table=sql.Identifier(table))
        key = hashlib.sha256(b"plain").digest()
        return lambda: conn.execute(query, {"key": key}).fetchone()

    def pyrate() -> Sync:
        from psycopg_pool import ConnectionPool
        from pyrate_limiter import Duration, Limiter, PostgresBucket, Rate

        pool = ConnectionPool(conninfo, min_size=1, max_size=1, open=True)
        bucket = PostgresBucket(pool, f"pyrate_{uuid.uuid4().hex[:8]}", [Rate(HUGE // 10**3, Duration.SECOND)])
        limiter = Limiter(bucket)
        return lambda: limiter.try_acquire("bench", blocking=False)

    return [
        ("INSERT ... ON CONFLICT ... RETURNING (plain)", "floor", plain),
        ("permits token_bucket acquire()", "permits", ours("token_bucket")),
        ("permits fixed_window acquire()", "permits", ours("fixed_window")),
        ("pyrate-limiter PostgresBucket try_acquire", "peer", pyrate),
    ]


# -------------------------------------------------------------------------------------- report


def show(rows: list[Row]) -> None:
    for table in dict.fromkeys(row.table for row in rows):
        print(f"\n{table}")
        print(f"  {'case':<58} {'best/s':>10} {'median/s':>10}")
        for row in (r for r in rows if r.table == table):
            if row.status != "ok":
                print(f"  {row.name:<58} {row.status}")
            else:
                print(f"  {row.name:<58} {row.best:>10,.0f} {row.median:>10,.0f}")


def ratios(rows: list[Row]) -> list[str]:
    """Each goal's ratio of medians (of the interleaved rounds), then of bests."""

    def row(table: str, name: str) -> Row | None:
        return next((r for r in rows if r.table == table and r.name == name and r.status == "ok"), None)

    def fastest(table: str, group: str) -> Row | None:
        found = [r for r in rows if r.table == table and r.group == group and r.status == "ok"]
        return max(found, key=lambda r: r.median, default=None)

    def ratio(ours: Row | None, other: Row | None) -> str:
        if ours is None or other is None or not other.median or not other.best:
            return "-"
        return f"{ours.median / other.median:.2f} (best {ours.best / other.best:.2f})"

    lines = []
    for table, ours_name in (
        ("Redis, sync", "permits fixed_window acquire()"),
        ("Redis, asyncio (64 tasks)", "permits fixed_window acquire_async()"),
    ):
        ours, peer, floor = row(table, ours_name), fastest(table, "peer"), fastest(table, "floor")
        if ours and peer:
            lines.append(f"{table}: {ours_name} / fastest peer ({peer.name}) = {ratio(ours, peer)}x (goal >= 1)")
        if ours and floor:
            lines.append(f"{table}: {ours_name} / floor ({floor.name}) = {ratio(ours, floor)} (goal >= 0.7)")
    plain = row("Reservation", "permits fixed_window acquire(), plain")
    reserved = row("Reservation", "permits fixed_window acquire(), reserve=100")
    if plain and reserved:
        lines.append(f"Reservation: reserve=100 / plain = {ratio(reserved, plain)}x (goal >= 20)")
    upsert = row("PostgreSQL, sync", "INSERT ... ON CONFLICT ... RETURNING (plain)")
    for name in ("permits token_bucket acquire()", "permits fixed_window acquire()"):
        ours = row("PostgreSQL, sync", name)
        if upsert and ours:
            lines.append(f"PostgreSQL: {name} / plain upsert = {ratio(ours, upsert)} (goal >= 0.8)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=1.0, help="seconds per round (default 1)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="0.2 s rounds, 2 of them")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if args.quick:
        args.duration, args.rounds = 0.2, 2

    import contextlib

    from _servers.postgres import PostgresServer, _need_bin_dir
    from _servers.redis import _server

    rows: list[Row] = []
    with contextlib.ExitStack() as stack:
        redis_server = stack.enter_context(_server("permits-bench-redis-"))
        postgres = PostgresServer(_need_bin_dir())
        stack.callback(postgres.cleanup)
        rows += run_table("Redis, sync", redis_sync_cases(redis_server.url), args, is_async=False)
        rows += run_table("Redis, asyncio (64 tasks)", redis_async_cases(redis_server.url), args, is_async=True)
        rows += run_table("Reservation", reservation_cases(redis_server.url), args, is_async=False)
        rows += run_table("PostgreSQL, sync", postgres_cases(postgres.conninfo), args, is_async=False)
    import permits

    print(f"bench_stores.py, {datetime.date.today()}, Python {platform.python_version()}, {platform.machine()}")
    print(f"permits from {Path(permits.__file__).parent}")
    show(rows)
    print()
    for line in ratios(rows):
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(row) for row in rows], indent=2))


if __name__ == "__main__":
    main()
