"""Fixtures of the store tests under faults and hostile input (import them into a test module):

* ``own_server``: a Redis or a PostgreSQL server of the test's own, which it may kill, restart on
  the same port, pause and resume. Its Redis writes every step to its append-only file before
  answering, so that, as PostgreSQL, it keeps what it answered across a SIGKILL.
* ``shared_server``: the session's server of either kind, under a namespace of the test's own.

Without a client library (redis-py, psycopg) the tests of its server skip, or fail under CI=true.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pytest

from _store_support import BACKENDS, Server, make_server

__all__ = ["own_server", "shared_server"]

_CLIENTS = {"redis": "redis", "postgres": "psycopg_pool"}


def _need_client(kind: str) -> None:
    module = _CLIENTS[kind]
    if importlib.util.find_spec(module) is None:
        message = f"{module} is not installed: pip install 'redis>=5' 'psycopg[binary]>=3.2' 'psycopg-pool>=3.2'"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(params=BACKENDS)
def own_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    _need_client(request.param)
    if request.param == "redis":
        from _servers.redis import _server

        durable = ["--appendonly", "yes", "--appendfsync", "always"]
        with _server("permits-faults-redis-", durable) as process, make_server("redis", process) as server:
            yield server
    else:
        from _servers.postgres import PostgresServer, _need_bin_dir

        process = PostgresServer(_need_bin_dir())
        try:
            with make_server("postgres", process) as server:
                yield server
        finally:
            process.cleanup()


@pytest.fixture(params=BACKENDS)
def shared_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    _need_client(request.param)
    process = request.getfixturevalue("redis_server" if request.param == "redis" else "postgres_server")
    with make_server(request.param, process) as server:
        yield server
