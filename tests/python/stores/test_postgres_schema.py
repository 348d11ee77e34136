"""The PostgreSQL backend's table: made once by racing processes, names of any content, expired
rows purged, concurrency leases that expire and are renewed."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator

import psycopg
import pytest

from permits._stores.postgres_backend import PostgresBackend
from permits._stores.rules import Rule

from _pg_support import STEADY_TIMEOUT, key_of, new_table
from _servers.postgres import PostgresServer

SECOND = 10**9
BUCKET = Rule("token_bucket", 10, SECOND, 1)


def _race(
    conninfo: str, table: str, barrier: multiprocessing.synchronize.Barrier, results: multiprocessing.Queue
) -> None:  # type: ignore[type-arg]
    backend = PostgresBackend(conninfo, table=table, timeout=30.0)
    barrier.wait()
    try:
        results.put(backend.take("raced", BUCKET, 1, None, 0).granted)
    except BaseException as e:
        results.put(repr(e))
    finally:
        backend.close()


def test_four_processes_make_the_schema_at_once(postgres_server: PostgresServer) -> None:
    table = new_table()
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    results = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(postgres_server.conninfo, table, barrier, results)) for _ in range(4)]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert got == [True] * 4
    backend = PostgresBackend(postgres_server.conninfo, table=table, timeout=STEADY_TIMEOUT)
    assert backend.available("raced", BUCKET, 0) == 6
    backend.close()


@pytest.fixture
def conn(postgres_server: PostgresServer) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with postgres_server.connect() as c:
        yield c


HOSTILE_TABLES = [
    'we"ird; DROP TABLE pg_class; --',
    "it's",
    "a.b",
    "$fn$ x $fn$",
    "ünïcødé 表 😀",
    "x" * 63,
    "  ",
]


@pytest.mark.parametrize("table", HOSTILE_TABLES)
def test_hostile_table_names_are_exact_names(
    postgres_server: PostgresServer, conn: psycopg.Connection[tuple[object, ...]], table: str
) -> None:
    conn.execute(psycopg.sql.SQL("DROP TABLE IF EXISTS {}").format(psycopg.sql.Identifier(table)))
    backend = PostgresBackend(postgres_server.conninfo, table=table, timeout=STEADY_TIMEOUT)
    assert backend.take("s", BUCKET, 3, None, 0).granted
    sw = Rule("sliding_window", 4, SECOND, 2)
    assert backend.take("w", sw, 4, None, 0).granted
    assert not backend.take("w", sw, 1, None, 0).granted
    assert backend.take("c", Rule("concurrency", 1, lease_ttl_ns=SECOND), 1, "l", 0).granted
    # The table has exactly that name, in the current schema: the states s, w, c and c's lease.
    row = conn.execute(
        psycopg.sql.SQL("SELECT count(*) FROM {}").format(psycopg.sql.Identifier("public", table))
    ).fetchone()
    assert row == (4,)
    assert conn.execute("SELECT count(*) FROM pg_class WHERE relname = 'pg_class'").fetchone() == (1,)
    backend.close()


@pytest.mark.parametrize("table", ["", "x" * 64, "é" * 32, "a\x00b"])
def test_names_postgresql_cannot_hold_exactly_are_refused(table: str) -> None:
    with pytest.raises(ValueError, match="table"):
        PostgresBackend("host=127.0.0.1", table=table)


def test_hostile_state_names_are_states_of_their_own(postgres_server: PostgresServer) -> None:
    backend = PostgresBackend(postgres_server.conninfo, table=new_table(), timeout=STEADY_TIMEOUT)
    rule = Rule("fixed_window", 3, SECOND)
    long = "n" * 10_000
    names = [
        "",
        "'",
        '"',
        "a'; DROP TABLE x; --",
        "ünï 😀",
        "nul\x00byte",
        "\ud800",
        long,
        long[:-1] + "m",
        "%s",
        "{x}",
    ]
    for i, name in enumerate(names):
        assert backend.take(name, rule, 1 + i % 3, "lease", 0).granted
    for i, name in enumerate(names):
        assert backend.available(name, rule, 0) == 3 - (1 + i % 3)
    sw = Rule("sliding_window", 3, SECOND, 3)
    conc = Rule("concurrency", 2, lease_ttl_ns=SECOND)
    assert backend.take(long + "sw", sw, 3, None, 0).granted
    assert backend.take(long + "c", conc, 2, long, 0).granted
    assert backend.take(long + "c", conc, 2, long, 0).granted  # the same lease: not counted twice
    assert backend.available(long + "c", conc, 0) == 0
    backend.refund(long + "c", conc, 2, 0, long, 0)
    assert backend.available(long + "c", conc, 0) == 2
    backend.close()


def _rows(conn: psycopg.Connection[tuple[object, ...]], table: str, name: str) -> int:
    row = conn.execute(
        psycopg.sql.SQL("SELECT count(*) FROM {} WHERE key = %s").format(psycopg.sql.Identifier(table)),
        [key_of(name)],
    ).fetchone()
    assert row is not None
    return int(row[0])  # type: ignore[call-overload]


def test_expired_rows_are_purged(postgres_server: PostgresServer, conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Rows go by the purge (the store's housekeeping), between one and two lifetimes after their
    state's last step; a step deletes only its own state's expired leases."""
    table = new_table()
    backend = PostgresBackend(postgres_server.conninfo, table=table, timeout=STEADY_TIMEOUT)
    window = Rule("fixed_window", 5, SECOND)  # lifetime 2 s
    bucket = Rule("token_bucket", 4, SECOND, 2)  # lifetime 2 periods: 2 s
    conc = Rule("concurrency", 3, lease_ttl_ns=SECOND)
    backend.take("old-window", window, 1, None, 0)
    backend.take("old-bucket", bucket, 1, None, 0)
    backend.take("old-conc", conc, 2, "lease", 0)
    assert _rows(conn, table, "old-window") == 1 and _rows(conn, table, "old-conc") == 2
    backend.take("kept", window, 1, None, SECOND // 2)
    assert _rows(conn, table, "old-conc") == 2  # its lease lives until 1 s
    # A state is purged between one and two lifetimes after its last step: not at one.
    for i in range(4):
        backend.take(f"early-{i}", window, 1, None, 2 * SECOND)
    assert _rows(conn, table, "old-conc") == 2  # steps on other states delete nothing of it
    assert backend.purge(2 * SECOND, 100) == 1
    assert _rows(conn, table, "old-window") == 1 and _rows(conn, table, "old-bucket") == 1
    assert _rows(conn, table, "old-conc") == 1  # its lease (expired at 1 s) went; the state lives on
    for i in range(4):
        backend.take(f"other-{i}", window, 1, None, 4 * SECOND + 1)
    assert _rows(conn, table, "old-window") == 1  # (still there: the purge deletes it)
    assert backend.purge(4 * SECOND + 1, 100) == 3
    assert _rows(conn, table, "old-window") == 0
    assert _rows(conn, table, "old-bucket") == 0
    assert _rows(conn, table, "old-conc") == 0
    assert _rows(conn, table, "kept") == 1  # its last step at 0.5 s: not before 2.5 s, up to 4.5 s
    # A purged state is as good as new.
    assert backend.available("old-window", window, 4 * SECOND + 1) == 5
    backend.close()


def test_concurrency_leases_expire_and_renew(
    postgres_server: PostgresServer, conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    table = new_table()
    backend = PostgresBackend(postgres_server.conninfo, table=table, timeout=STEADY_TIMEOUT)
    conc = Rule("concurrency", 3, lease_ttl_ns=SECOND)
    assert backend.take("c", conc, 2, "a", 0).granted
    assert backend.take("c", conc, 1, "b", 0).granted
    refused = backend.take("c", conc, 1, "c", SECOND // 2)
    assert (refused.granted, refused.available, refused.retry_after_ns) == (False, 0, -1)
    backend.renew("c", conc, ["a", "unknown"], SECOND // 2)  # a: until 1.5 s
    assert backend.available("c", conc, SECOND - 1) == 0
    assert backend.available("c", conc, SECOND) == 1  # b expired at 1 s: it no longer counts
    out = backend.take("c", conc, 1, "c", SECOND)
    assert (out.granted, out.available) == (True, 0)
    assert _rows(conn, table, "c") == 3  # the state, a and c: the expired b was deleted
    backend.renew("c", conc, ["b"], SECOND)  # expired: not revived
    assert backend.available("c", conc, SECOND) == 0
    assert backend.available("c", conc, 3 * SECOND // 2) == 2  # a expired at 1.5 s
    # A retried take of a recorded lease is granted again, counted once.
    assert backend.take("c", conc, 1, "c", 3 * SECOND // 2).granted
    assert backend.available("c", conc, 3 * SECOND // 2) == 2
    backend.refund("c", conc, 1, 0, "c", 3 * SECOND // 2)
    assert backend.available("c", conc, 3 * SECOND // 2) == 3
    backend.close()


def test_a_dropped_table_is_made_again(
    postgres_server: PostgresServer, conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    table = new_table()
    backend = PostgresBackend(postgres_server.conninfo, table=table, timeout=STEADY_TIMEOUT)
    sw = Rule("sliding_window", 4, SECOND, 2)
    for _ in range(6):  # enough for psycopg to prepare the statements
        backend.take("s", BUCKET, 1, None, 0)
        backend.take("w", sw, 0, None, 0)
    conn.execute(psycopg.sql.SQL("DROP TABLE {}").format(psycopg.sql.Identifier(table)))
    assert backend.take("s", BUCKET, 1, None, 0).available == 9  # a new state in a new table
    assert backend.take("w", sw, 1, None, 0).available == 3
    backend.close()


def test_the_purge_keeps_up_with_a_flood_of_keys(
    postgres_server: PostgresServer, conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    """2,000 keys stepped once each, then nothing: the store's housekeeping round deletes every
    expired row, however many."""
    import permits
    from permits.postgres import PostgresStore

    clock = permits.ManualClock()
    table = new_table()
    store = PostgresStore(postgres_server.conninfo, table=table, clock=clock, timeout=STEADY_TIMEOUT)
    keyed = store.partitioned(permits.specs.FixedWindow(5, 1.0), name="flood", idle_timeout=0.0)
    for key in range(2000):
        assert keyed.acquire(key)
    clock.advance(10.0)  # every state expired (a window of 1 s lives one to two lifetimes)
    count = psycopg.sql.SQL("SELECT count(*) FROM {}").format(psycopg.sql.Identifier(table))
    before = conn.execute(count).fetchone()
    assert before is not None and int(before[0]) == 2000
    assert store._purger.purge_now() == 2000  # (a real clock's store runs it every second by itself)
    after = conn.execute(count).fetchone()
    assert after is not None and int(after[0]) == 0
    assert keyed.acquire(0)  # a purged state is as good as new
    store.close()


def test_a_store_in_use_purges_by_itself(
    postgres_server: PostgresServer, conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    import time

    import permits
    from permits.postgres import PostgresStore

    table = new_table()
    # The real clock: its own purge thread.
    store = PostgresStore(postgres_server.conninfo, table=table, timeout=STEADY_TIMEOUT)
    keyed = store.partitioned(permits.specs.FixedWindow(5, 0.05), name="flood", idle_timeout=0.0)
    for key in range(300):
        assert keyed.acquire(key)
    count = psycopg.sql.SQL("SELECT count(*) FROM {}").format(psycopg.sql.Identifier(table))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (row := conn.execute(count).fetchone()) is not None and int(row[0]):
        time.sleep(0.05)
    row = conn.execute(count).fetchone()
    assert row is not None and int(row[0]) == 0  # the keys' states expired (0.1 s), and went
    store.close()
