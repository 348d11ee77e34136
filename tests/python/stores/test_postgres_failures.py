"""A PostgreSQL server that dies, restarts or hangs: every call ends within the backend's timeout
(plus a little) with BackendError, and the same backend works again once the server is back."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg_pool
import pytest

import permits
from permits._stores.postgres_backend import PostgresBackend
from permits._stores.rules import Rule

from _servers.postgres import PostgresServer

TIMEOUT = 1.0
#: The bound a failing call must answer within: the timeout, and a second for the rest.
BOUND = TIMEOUT + 1.0
RULE = Rule("fixed_window", 1000, 3600 * 10**9)
SW = Rule("sliding_window", 1000, 3600 * 10**9, 4)


@pytest.fixture
def backend(own_postgres: PostgresServer) -> Iterator[PostgresBackend]:
    b = PostgresBackend(own_postgres.conninfo, table="t", timeout=TIMEOUT)
    yield b
    b.close()


def _fails_in_time(call: Callable[[], Any]) -> None:
    start = time.monotonic()
    with pytest.raises(permits.BackendError) as raised:
        call()
    assert time.monotonic() - start < BOUND
    assert isinstance(raised.value, ConnectionError)


async def _fails_in_time_async(call: Callable[[], Any]) -> None:
    start = time.monotonic()
    with pytest.raises(permits.BackendError):
        await call()
    assert time.monotonic() - start < BOUND


def test_killed_then_restarted(own_postgres: PostgresServer, backend: PostgresBackend) -> None:
    assert backend.take("s", RULE, 1, None, None).granted
    own_postgres.kill()
    for _ in range(3):  # an idle connection to the dead server, then connects refused
        _fails_in_time(lambda: backend.take("s", RULE, 1, None, None))
    _fails_in_time(lambda: backend.available("s", RULE, None))
    own_postgres.start()
    assert backend.take("s", RULE, 1, None, None).granted  # at once: the stale connection is not used
    assert backend.take("w", SW, 1, None, None).granted


def test_hung_then_continued(own_postgres: PostgresServer, backend: PostgresBackend) -> None:
    assert backend.take("s", RULE, 1, None, None).granted
    assert backend.take("w", SW, 1, None, None).granted
    own_postgres.pause()
    try:
        # The first call hangs on an idle connection (the watchdog ends it); the next ones on connecting.
        for call in (
            lambda: backend.take("s", RULE, 1, None, None),
            lambda: backend.take("w", SW, 1, None, None),
            lambda: backend.refund("s", RULE, 1, 0, None, None),
        ):
            _fails_in_time(call)
    finally:
        own_postgres.resume()
    out = backend.take("s", RULE, 1, None, None)
    assert out.granted
    assert backend.take("w", SW, 1, None, None).granted


async def test_async_killed_then_restarted(own_postgres: PostgresServer, backend: PostgresBackend) -> None:
    assert (await backend.take_async("s", RULE, 1, None, None)).granted
    own_postgres.kill()
    for _ in range(2):
        await _fails_in_time_async(lambda: backend.take_async("s", RULE, 1, None, None))
    own_postgres.start()
    assert (await backend.take_async("s", RULE, 1, None, None)).granted


async def test_async_hung_then_continued(own_postgres: PostgresServer, backend: PostgresBackend) -> None:
    assert (await backend.take_async("s", RULE, 1, None, None)).granted
    own_postgres.pause()
    try:
        for _ in range(2):
            await _fails_in_time_async(lambda: backend.take_async("s", RULE, 1, None, None))
    finally:
        own_postgres.resume()
    assert (await backend.take_async("s", RULE, 1, None, None)).granted
    # A step that timed out may still have been done: its query was sent, and the server ran it
    # once it went on (BackendError means "unknown", not "not done").
    assert 1000 - 4 <= await backend.available_async("s", RULE, None) <= 1000 - 2


def test_a_given_pool_hung_then_continued(own_postgres: PostgresServer) -> None:
    with psycopg_pool.ConnectionPool(own_postgres.conninfo, min_size=1, max_size=2, open=True) as pool:
        backend = PostgresBackend(pool, table="t", timeout=TIMEOUT)
        assert backend.take("s", RULE, 1, None, None).granted
        own_postgres.pause()
        try:
            _fails_in_time(lambda: backend.take("s", RULE, 1, None, None))
            _fails_in_time(lambda: backend.take("s", RULE, 1, None, None))
        finally:
            own_postgres.resume()
        # The pool replaces the connection that timed out in the background: give it a moment.
        deadline = time.monotonic() + 30
        while True:
            try:
                assert backend.take("s", RULE, 1, None, None).granted
                break
            except permits.BackendError:
                assert time.monotonic() < deadline
                time.sleep(0.1)


def test_a_given_connection_that_timed_out_is_discarded(own_postgres: PostgresServer) -> None:
    conn = own_postgres.connect()
    backend = PostgresBackend(conn, table="t", timeout=TIMEOUT)
    assert backend.take("s", RULE, 1, None, None).granted
    own_postgres.pause()
    try:
        _fails_in_time(lambda: backend.take("s", RULE, 1, None, None))
    finally:
        own_postgres.resume()
    assert conn.closed  # never used again in an unknown state
    _fails_in_time(lambda: backend.take("s", RULE, 1, None, None))
