"""The one-statement takes (token bucket, fixed window, sliding window counter) of a sync connection
outside a transaction go straight through libpq: prepared once per session under a name of their
own, prepared again when the session lost them, never prepared where the connection asks for no
prepared statements; in a transaction the caller opened they go through psycopg. Either way they
count exactly, and the connection stays usable by psycopg, from another thread meanwhile too."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import psycopg_pool
from psycopg import sql

from permits.postgres import PostgresStore

from _pg_support import STEADY_TIMEOUT, new_table
from _servers.postgres import PostgresServer


def ours_prepared(conn: Any) -> list[str]:
    """The statements this session has prepared under our names."""
    rows = conn.execute("SELECT name FROM pg_prepared_statements WHERE name LIKE 'permits\\_%' ORDER BY name")
    return [name for (name,) in rows.fetchall()]


def limiters(store: PostgresStore) -> list[Any]:
    return [
        store.fixed_window("fw", 5, 100.0),
        store.token_bucket("tb", 5, 1, 100.0),
        store.sliding_window_counter("swc", 5, 100.0),
    ]


def granted(limiter: Any, times: int) -> list[bool]:
    return [bool(limiter.acquire()) for _ in range(times)]


def test_each_kinds_take_is_prepared_once_per_session(postgres_server: PostgresServer) -> None:
    with postgres_server.connect() as conn:
        store = PostgresStore(conn, table=new_table(), timeout=STEADY_TIMEOUT)
        for limiter in limiters(store):
            assert granted(limiter, 7) == [True] * 5 + [False] * 2
        assert len(ours_prepared(conn)) == 3


def test_a_statement_the_session_lost_is_prepared_again(postgres_server: PostgresServer) -> None:
    with postgres_server.connect() as conn:
        store = PostgresStore(conn, table=new_table(), timeout=STEADY_TIMEOUT)
        limiter = store.fixed_window("fw", 5, 100.0)
        assert granted(limiter, 2) == [True, True]
        (name,) = ours_prepared(conn)
        conn.execute(sql.SQL("DEALLOCATE {}").format(sql.Identifier(name)))
        assert ours_prepared(conn) == []
        assert granted(limiter, 4) == [True, True, True, False]
        assert ours_prepared(conn) == [name]


def test_a_connection_that_asks_for_no_prepared_statements_gets_none(postgres_server: PostgresServer) -> None:
    with postgres_server.connect() as conn:
        conn.prepare_threshold = None  # as for PgBouncer in transaction mode
        store = PostgresStore(conn, table=new_table(), timeout=STEADY_TIMEOUT)
        for limiter in limiters(store):
            assert granted(limiter, 7) == [True] * 5 + [False] * 2
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)


def test_in_a_transaction_the_caller_opened_the_take_goes_through_psycopg(postgres_server: PostgresServer) -> None:
    with psycopg.connect(postgres_server.conninfo) as conn:  # not in autocommit
        table = new_table()
        store = PostgresStore(conn, table=table, timeout=STEADY_TIMEOUT)
        limiter = store.fixed_window("fw", 5, 100.0)
        assert granted(limiter, 1) == [True]  # straight through libpq: prepared
        (name,) = ours_prepared(conn)  # (which opens the caller's transaction)
        conn.execute(sql.SQL("DEALLOCATE {}").format(sql.Identifier(name)))
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert granted(limiter, 1) == [True]  # through psycopg: not prepared again
        assert ours_prepared(conn) == []
        conn.rollback()
        # Outside a transaction again: straight through libpq, as a transaction of its own.
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert granted(limiter, 4) == [True, True, True, False]
        assert ours_prepared(conn) == [name]
        conn.rollback()
    with postgres_server.connect() as reader:
        row = reader.execute(sql.SQL("SELECT sum(b) FROM {}").format(sql.Identifier(table))).fetchone()
        assert row == (5,)


def test_a_pools_connections_take_directly_and_stay_idle(postgres_server: PostgresServer) -> None:
    with psycopg_pool.ConnectionPool(postgres_server.conninfo, min_size=1, max_size=1, open=True) as pool:
        store = PostgresStore(pool, table=new_table(), timeout=STEADY_TIMEOUT)
        for limiter in limiters(store):
            assert granted(limiter, 7) == [True] * 5 + [False] * 2
        with pool.connection() as conn:
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert len(ours_prepared(conn)) == 3


def test_the_connection_is_shared_with_psycopg_from_another_thread(postgres_server: PostgresServer) -> None:
    """psycopg's own calls on the same connection wait for a take in flight (the connection's lock),
    and the other way round: no answer goes to the wrong caller."""
    with postgres_server.connect() as conn:
        store = PostgresStore(conn, table=new_table(), timeout=STEADY_TIMEOUT)
        limiter = store.fixed_window("fw", 300, 100.0)
        errors: list[BaseException] = []
        answers: list[object] = []

        def theirs() -> None:
            try:
                for i in range(300):
                    answers.append(conn.execute("SELECT %s::int", (i,)).fetchone())
            except BaseException as e:  # (reported below)
                errors.append(e)

        thread = threading.Thread(target=theirs)
        thread.start()
        results = granted(limiter, 320)
        thread.join(60)
        assert not errors
        assert answers == [(i,) for i in range(300)]
        assert results == [True] * 300 + [False] * 20
