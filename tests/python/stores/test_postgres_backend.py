"""The PostgreSQL backend against a real server: it grants, refuses and reports exactly as the
engine's limiter of the same spec on the same ManualClock, through every kind of connection."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg_pool
import pytest

from permits._stores.postgres_backend import PostgresBackend
from permits._stores.rules import Rule, rule_of

from _pg_support import SPECS, STEADY_TIMEOUT, differential, new_table, run_async, run_sync
from _servers.postgres import PostgresServer

KINDS = list(SPECS)


@pytest.fixture
def backend(postgres_server: PostgresServer) -> Iterator[PostgresBackend]:
    b = PostgresBackend(postgres_server.conninfo, table=new_table(), timeout=STEADY_TIMEOUT)
    yield b
    b.close()


@pytest.mark.parametrize("kind", KINDS)
def test_sync_steps_agree_with_the_engine(backend: PostgresBackend, kind: str) -> None:
    for seed in range(2):
        run_sync(backend, differential(kind, seed, 300))


@pytest.mark.parametrize("kind", KINDS)
async def test_async_steps_agree_with_the_engine(backend: PostgresBackend, kind: str) -> None:
    assert backend.is_async is None  # a conninfo serves both
    await run_async(backend, differential(kind, 7, 150))


@pytest.mark.parametrize("kind", KINDS)
def test_a_given_connection_and_pool_serve_sync(postgres_server: PostgresServer, kind: str) -> None:
    with postgres_server.connect() as conn:
        b = PostgresBackend(conn, table=new_table(), timeout=STEADY_TIMEOUT)
        assert b.is_async is False
        run_sync(b, differential(kind, 3, 100))
    # A pool's connections are not in autocommit: each step is committed (none stays open).
    with psycopg_pool.ConnectionPool(postgres_server.conninfo, min_size=1, max_size=2, open=True) as pool:
        b = PostgresBackend(pool, table=new_table(), timeout=STEADY_TIMEOUT)
        run_sync(b, differential(kind, 4, 100))
        with pool.connection() as conn:
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


@pytest.mark.parametrize("kind", KINDS)
async def test_a_given_async_connection_and_pool_serve_asyncio(postgres_server: PostgresServer, kind: str) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_server.conninfo) as conn:
        b = PostgresBackend(conn, table=new_table(), timeout=STEADY_TIMEOUT)
        assert b.is_async is True
        await run_async(b, differential(kind, 5, 100))
    async with psycopg_pool.AsyncConnectionPool(postgres_server.conninfo, min_size=1, max_size=2, open=False) as pool:
        b = PostgresBackend(pool, table=new_table(), timeout=STEADY_TIMEOUT)
        await run_async(b, differential(kind, 6, 100))


async def test_each_kind_of_source_refuses_the_other_kind_of_call(postgres_server: PostgresServer) -> None:
    rule = Rule("fixed_window", 5, 10**9)
    async with await psycopg.AsyncConnection.connect(postgres_server.conninfo) as aconn:
        with pytest.raises(TypeError, match="_async"):
            PostgresBackend(aconn).take("x", rule, 1, None, 0)
    with postgres_server.connect() as conn:
        with pytest.raises(TypeError, match="take\\(\\)"):
            await PostgresBackend(conn).take_async("x", rule, 1, None, 0)


@pytest.mark.parametrize("bad", [None, 5, b"host=x", object()])
def test_anything_else_is_a_type_error_naming_the_argument(bad: Any) -> None:
    with pytest.raises(TypeError, match="conninfo_or_pool"):
        PostgresBackend(bad)


def test_threads_each_running_asyncio_run_share_one_backend_exactly(backend: PostgresBackend) -> None:
    # 4 threads x 30 takes on one state of 50 permits (time stands still): exactly 50 granted.
    bucket = Rule("token_bucket", 50, 10**12, 1)
    conc = Rule("concurrency", 7, lease_ttl_ns=10**12)
    granted: list[int] = []
    errors: list[BaseException] = []

    async def worker(t: int) -> int:
        got = 0
        for i in range(30):
            got += (await backend.take_async("shared", bucket, 1, None, 0)).granted
            got += 1000 * (await backend.take_async("leases", conc, 1, f"{t}-{i}", 0)).granted
        return got

    def thread(t: int) -> None:
        try:
            granted.append(asyncio.run(worker(t)))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=thread, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    # Sync callers at the same time, on the same backend.
    sync_got = sum(backend.take("shared", bucket, 1, None, 0).granted for _ in range(20))
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert sum(g % 1000 for g in granted) + sync_got == 50
    assert sum(g // 1000 for g in granted) == 7
    assert backend.available("shared", bucket, 0) == 0


def test_server_time_when_now_is_none(backend: PostgresBackend) -> None:
    hour = 3600 * 10**9
    for kind, rule in [
        ("token_bucket", Rule("token_bucket", 2, hour, 1)),
        ("fixed_window", Rule("fixed_window", 2, hour)),
        ("sliding_window", Rule("sliding_window", 2, hour, 2)),
        ("sliding_window_counter", Rule("sliding_window_counter", 2, hour)),
    ]:
        assert backend.take(kind, rule, 2, None, None).granted
        refused = backend.take(kind, rule, 1, None, None)
        assert not refused.granted
        assert 0 < refused.retry_after_ns <= 2 * hour, (kind, refused)
        assert backend.available(kind, rule, None) == 0
    conc = Rule("concurrency", 1, lease_ttl_ns=hour)
    assert backend.take("c", conc, 1, "a", None).granted
    assert not backend.take("c", conc, 1, "b", None).granted
    backend.refund("c", conc, 1, 0, "a", None)
    assert backend.available("c", conc, None) == 1


def test_a_token_bucket_refund_gives_back_only_what_no_refill_has_since(backend: PostgresBackend) -> None:
    rule = Rule("token_bucket", 4, 10**9, 1)
    out = backend.take("tb", rule, 3, None, 0)
    assert (out.granted, out.available) == (True, 1)
    backend.refund("tb", rule, 3, out.stamp, None, 2 * 10**9)  # two refills since: one token comes back
    assert backend.available("tb", rule, 2 * 10**9) == 4
    out = backend.take("tb", rule, 4, None, 2 * 10**9)
    backend.refund("tb", rule, 4, out.stamp, None, 2 * 10**9)  # same period: all come back
    assert backend.available("tb", rule, 2 * 10**9) == 4


@pytest.mark.parametrize("kind", KINDS)
def test_another_rule_on_a_state_is_a_value_error_naming_both(backend: PostgresBackend, kind: str) -> None:
    rule = rule_of(SPECS[kind], lease_ttl_ns=10**12)
    other = Rule(rule.kind, rule.limit + 1, rule.period_ns, rule.amount, rule.lease_ttl_ns)
    out = backend.take("s", rule, 1, "l1", 0)
    assert out.granted
    for call in (
        lambda: backend.take("s", other, 1, "l2", 0),
        lambda: backend.available("s", other, 0),
        lambda: backend.refund("s", other, 1, out.stamp, "l1", 0),
    ):
        with pytest.raises(ValueError, match="made with") as raised:
            call()
        assert rule.signature in str(raised.value) and other.signature in str(raised.value)
    if kind == "concurrency":
        with pytest.raises(ValueError, match=other.signature):
            backend.renew("s", other, ["l1"], 0)
    # Nothing changed, and the backend goes on (no transaction left open by the errors).
    assert backend.available("s", rule, 0) == rule.limit - 1
    assert backend.take("s", rule, 1, "l3", 0).granted


@pytest.mark.parametrize("kind", ["token_bucket", "fixed_window", "sliding_window_counter"])
async def test_another_rule_on_a_state_is_a_value_error_under_asyncio_too(backend: PostgresBackend, kind: str) -> None:
    # (the kinds whose take is one statement take a short way once the schema is made: a state of
    # another rule answers it with no row, and the step is asked again the long way, which tells why)
    rule = rule_of(SPECS[kind])
    other = Rule(rule.kind, rule.limit + 1, rule.period_ns, rule.amount)
    assert (await backend.take_async("s", rule, 1, None, 0)).granted
    with pytest.raises(ValueError, match="made with") as raised:
        await backend.take_async("s", other, 1, None, 0)
    assert rule.signature in str(raised.value) and other.signature in str(raised.value)
    assert await backend.available_async("s", rule, 0) == rule.limit - 1


def test_more_names_than_the_kept_parameters_each_count_their_own(backend: PostgresBackend) -> None:
    # The parameters of a name's takes are kept for 1024 names; past them the cache starts again,
    # and every name's state stays its own.
    rule = Rule("fixed_window", 1, 10**12)
    names = [f"n{i}" for i in range(1100)] + [b"a bytes name"]  # (a per-key limiter's names are bytes)
    assert all(backend.take(name, rule, 1, None, 0).granted for name in names)
    assert not any(backend.take(name, rule, 1, None, 0).granted for name in names)
    assert len(backend._made_params) <= 1024


def test_no_transaction_stays_open_after_errors(postgres_server: PostgresServer) -> None:
    b = PostgresBackend(postgres_server.conninfo, table=new_table(), timeout=STEADY_TIMEOUT)
    rule = Rule("fixed_window", 5, 10**9)
    b.take("s", rule, 1, None, 0)
    for _ in range(3):
        with pytest.raises(ValueError):
            b.take("s", Rule("fixed_window", 6, 10**9), 1, None, 0)
    with postgres_server.connect() as conn:
        states = conn.execute(
            "SELECT state FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchall()
    assert states and all(state == "idle" for (state,) in states), states
    b.close()
