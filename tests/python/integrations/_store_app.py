"""The app of test_store_servers, served by ``uvicorn --workers N``: each worker process makes its
own store in a server (Redis, PostgreSQL) and limits ``/work`` with ``fixed_window(NAME, 40,
3600)`` there, so that all of them share one window.

The server imports it by path, so it reads its settings from the environment:
``PERMITS_TEST_STORE`` ("redis": ``PERMITS_TEST_SERVER`` is a Redis URL, used with an asyncio
client; "postgres": a conninfo) and ``PERMITS_TEST_NAME`` (the window's name: each test its own).
Routes: ``/pid`` (not limited) answers the pid; ``/work`` (limited) answers ``{"pid"}``. Every
response carries the answering process's pid in ``x-pid``.
"""

import os
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from permits.asgi import RateLimitMiddleware

from _integration import with_pid

KIND = os.environ["PERMITS_TEST_STORE"]
SERVER = os.environ["PERMITS_TEST_SERVER"]
#: Each call to the server may take this long: workers starting on a busy machine are slow.
TIMEOUT = 10.0


def make_store() -> Any:
    if KIND == "redis":
        import redis.asyncio

        from permits.redis import RedisStore

        return RedisStore(redis.asyncio.Redis.from_url(SERVER), timeout=TIMEOUT)
    if KIND == "postgres":
        from permits.postgres import PostgresStore

        return PostgresStore(SERVER, timeout=TIMEOUT)
    raise ValueError(f"PERMITS_TEST_STORE: unknown store {KIND!r}")


STORE = make_store()
LIMITER = STORE.fixed_window(os.environ["PERMITS_TEST_NAME"], 40, 3600)


async def pid(request: Request) -> PlainTextResponse:
    return PlainTextResponse(str(os.getpid()))


async def work(request: Request) -> JSONResponse:
    return JSONResponse({"pid": os.getpid()})


app = with_pid(
    RateLimitMiddleware(Starlette(routes=[Route("/pid", pid), Route("/work", work)]), LIMITER, exempt=("/pid",))
)
