"""A limit in a server shared by the worker processes of a real web server: ``uvicorn --workers 2``
serving ``_store_app.py``, each worker with a store of its own in one Redis or one PostgreSQL
(``permits.asgi.RateLimitMiddleware`` over ``fixed_window(name, 40, 3600)``). Each request is a new
connection, so the kernel spreads them over the workers; the window holds across both.

The server runs in a session of its own and is killed as a whole process group, then the test
checks that no process of it is left (_integration.serve). The Redis and PostgreSQL servers are
the session's (tests/python/_servers)."""

from __future__ import annotations

import importlib.util
import os
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from _integration import app_env, command, serve

WORKERS = 2


@pytest.fixture(params=["redis", "postgres"])
def store_server(request: pytest.FixtureRequest) -> tuple[str, str]:
    """("redis", its URL) or ("postgres", its conninfo): the session's server (tests/python/conftest.py)."""
    module = "redis" if request.param == "redis" else "psycopg"
    if importlib.util.find_spec(module) is None:  # then the server's fixture is absent too
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is not installed (scripts/test installs it)")
        pytest.skip(f"{module} is not installed: pip install {module}")
    if request.param == "redis":
        return "redis", request.getfixturevalue("redis_server").url
    return "postgres", request.getfixturevalue("postgres_server").conninfo


def available_in(kind: str, address: str, name: str) -> int:
    """The window's permits left, as a third party (this process, a store of its own) reads them."""
    store: Any
    if kind == "redis":
        import redis

        from permits.redis import RedisStore

        store = RedisStore(redis.Redis.from_url(address))
    else:
        from permits.postgres import PostgresStore

        store = PostgresStore(address)
    with store:
        return int(store.fixed_window(name, 40, 3600).available_permits())


@pytest.mark.timeout(90)
def test_uvicorn_workers_share_one_fixed_window_in_a_server(store_server: tuple[str, str], tmp_path: Path) -> None:
    kind, address = store_server
    name = f"store-servers-{uuid.uuid4().hex[:12]}"
    env = app_env(PERMITS_TEST_STORE=kind, PERMITS_TEST_SERVER=address, PERMITS_TEST_NAME=name)
    with serve(
        lambda port: command("uvicorn", "_store_app:app", port, WORKERS), env, tmp_path, workers=WORKERS, label=kind
    ) as server:
        server.pids.clear()  # from here on: the workers that answer the 120 requests
        responses = server.get_many("/work", 120, at_once=8)
        answered_by = set(server.pids)
    assert Counter(r.status_code for r in responses) == {200: 40, 429: 80}, server.output()
    assert len(answered_by) == WORKERS, f"the requests reached {sorted(answered_by)}"
    granted_by = {r.json()["pid"] for r in responses if r.status_code == 200}
    assert len(granted_by) == WORKERS, "every grant came from one worker: the test shows no sharing"
    # A rejection says when to come back: within the hour of the window.
    retry_after = [int(r.headers["retry-after"]) for r in responses if r.status_code == 429]
    assert all(0 < seconds <= 3600 for seconds in retry_after), sorted(set(retry_after))
    assert available_in(kind, address, name) == 0
