"""The app of test_shm_servers, served by uvicorn or gunicorn with several worker processes that
share one limiter through a ``permits.shm.SharedMemoryStore``.

The servers import it by path, so it reads its settings from the environment:
``PERMITS_TEST_SHM`` (the segment's name) and ``PERMITS_TEST_LIMITER``:

- ``window``: ``fixed_window("api", 40, 3600)``, a request rejected with 429 once spent;
- ``queue``: ``concurrency("c", 2)`` with ``wait=True``, a request queued until a permit is free;
- ``hold``: ``concurrency("c", 1, lease_ttl=60)``, a request rejected with 429 while it is held.

The store is opened at import: in each worker, or in gunicorn's master with ``--preload`` (before
the workers are forked). Every response carries the answering process's pid in ``x-pid``.
Routes: ``/pid`` (not limited) answers the pid; ``/work`` (limited) sleeps ``PERMITS_TEST_SLEEP``
seconds (default 0) and answers ``{"pid", "start", "end"}``, its start and end on
``time.monotonic()`` (CLOCK_MONOTONIC: one clock for every process of the host); ``/hold``
(limited) streams a first line, then holds its permit for a minute.
"""

import asyncio
import os
import time
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

from permits.asgi import RateLimitMiddleware
from permits.shm import SharedMemoryStore

from _integration import with_pid

KIND = os.environ["PERMITS_TEST_LIMITER"]
SLEEP = float(os.environ.get("PERMITS_TEST_SLEEP", "0"))
STORE = SharedMemoryStore(os.environ["PERMITS_TEST_SHM"])

if KIND == "window":
    LIMITER = STORE.fixed_window("api", 40, 3600)
elif KIND == "queue":
    LIMITER = STORE.concurrency("c", 2)
elif KIND == "hold":
    LIMITER = STORE.concurrency("c", 1, lease_ttl=60)
else:
    raise ValueError(f"PERMITS_TEST_LIMITER: unknown kind {KIND!r}")


async def pid(request: Request) -> PlainTextResponse:
    return PlainTextResponse(str(os.getpid()))


async def work(request: Request) -> JSONResponse:
    start = time.monotonic()
    if SLEEP:
        await asyncio.sleep(SLEEP)
    return JSONResponse({"pid": os.getpid(), "start": start, "end": time.monotonic()})


async def hold(request: Request) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        yield b"held\n"  # the client knows it holds the permit (and who does: x-pid)
        await asyncio.sleep(60)
        yield b"done\n"

    return StreamingResponse(body(), media_type="text/plain")


#: The limited app, with ``x-pid`` on every response (a rejection too).
app = with_pid(
    RateLimitMiddleware(
        Starlette(routes=[Route("/pid", pid), Route("/work", work), Route("/hold", hold)]),
        LIMITER,
        wait=KIND == "queue",
        exempt=("/pid",),
    )
)
