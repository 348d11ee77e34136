"""Requests with ``wait=True`` (the ASGI middleware and the FastAPI dependency) under a real
uvicorn server and real clients (httpx, websockets): a free permit is taken at once, without
watching the client; a queued client that leaves, leaves the queue."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets
from fastapi import Depends, FastAPI, WebSocket
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

import permits
from permits.asgi import RateLimitMiddleware
from permits.fastapi import RateLimit

from _integration import eventually


class CountingReceive:
    """An outer ASGI app counting the receive() calls made under it, and how many had been made
    when the endpoint began (``at_endpoint``)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.calls = 0
        self.at_endpoint: list[int] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def counted() -> Any:
            self.calls += 1
            return await receive()

        await self.app(scope, counted, send)

    def endpoint_began(self) -> None:
        self.at_endpoint.append(self.calls)


def starlette_app(limiter: Any, outer: list[CountingReceive]) -> CountingReceive:
    async def hello(request: Request) -> Response:
        outer[0].endpoint_began()
        return PlainTextResponse("hello")

    app = Starlette(routes=[Route("/hello", hello, methods=["GET", "POST"])])
    app.add_middleware(RateLimitMiddleware, limiter=limiter, wait=True)
    outer.append(CountingReceive(app))
    return outer[0]


def fastapi_app(limiter: Any, outer: list[CountingReceive]) -> CountingReceive:
    app = FastAPI()

    @app.post("/hello", dependencies=[Depends(RateLimit(limiter, wait=True))])
    async def hello() -> Response:
        outer[0].endpoint_began()
        return PlainTextResponse("hello")

    outer.append(CountingReceive(app))
    return outer[0]


async def test_a_free_permit_is_taken_at_once_by_the_middleware(serve_asgi, clock: permits.ManualClock) -> None:
    limiter = permits.FixedWindowLimiter(2, 1, queue_limit=2, clock=clock)
    app = starlette_app(limiter, [])
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.post("/hello", content=b"body")).text == "hello"
        assert (await client.get("/hello")).text == "hello"
    # Nothing was read from the client before the endpoint ran: no watcher, the body untouched.
    assert app.at_endpoint == [0, 0]
    assert limiter.statistics().total_successful_leases == 2


async def test_a_free_permit_is_taken_at_once_by_the_dependency(serve_asgi, clock: permits.ManualClock) -> None:
    limiter = permits.FixedWindowLimiter(2, 1, queue_limit=2, clock=clock)
    app = fastapi_app(limiter, [])
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.post("/hello", content=b"body")).text == "hello"
        assert (await client.post("/hello", content=b"body")).text == "hello"
    assert app.at_endpoint == [0, 0]
    assert limiter.statistics().total_successful_leases == 2


@contextlib.contextmanager
def server_errors() -> Iterator[list[logging.LogRecord]]:
    """The errors uvicorn logs meanwhile (an exception escaping the application among them): the
    fixture's server logs only critical ones."""
    found: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = found.append  # type: ignore[method-assign]
    logger = logging.getLogger("uvicorn.error")
    level = logger.level
    logger.setLevel(logging.ERROR)
    logger.addHandler(handler)
    try:
        yield found
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def websocket_app(limiter: Any, ran: list[str], *, route: bool) -> Any:
    """/ws echoes text; limited by the route's dependency (``route``) or by the middleware."""
    app = FastAPI()
    dependencies = [Depends(RateLimit(limiter, wait=True))] if route else []

    @app.websocket("/ws", dependencies=dependencies)
    async def echo(websocket: WebSocket) -> None:
        ran.append(websocket.query_params.get("who", ""))
        await websocket.accept()
        async for text in websocket.iter_text():
            await websocket.send_text(text)

    if not route:
        app.add_middleware(RateLimitMiddleware, limiter=limiter, wait=True)
    return app


@pytest.mark.timeout(30)  # before the fix the queued client was never noticed leaving: a hang
@pytest.mark.parametrize("route", [True, False], ids=["dependency", "middleware"])
async def test_a_websocket_client_that_leaves_while_queued_leaves_the_queue(
    serve_asgi, clock: permits.ManualClock, route: bool
) -> None:
    limiter = permits.ConcurrencyLimiter(1, queue_limit=2, clock=clock)
    ran: list[str] = []
    async with serve_asgi(websocket_app(limiter, ran, route=route)) as url:
        with server_errors() as errors:  # (after the server's start, which sets uvicorn's log level)
            ws_url = url.replace("http://", "ws://") + "/ws"
            async with websockets.connect(ws_url + "?who=first") as first:
                await first.send("hi")
                assert await first.recv() == "hi"
                leaving = asyncio.ensure_future(websockets.connect(ws_url + "?who=leaving", open_timeout=None))
                await eventually(lambda: limiter.statistics().current_queued_count == 1)
                leaving.cancel()  # the client gives up during its handshake: its connection closes
                with contextlib.suppress(asyncio.CancelledError):
                    await leaving
                await eventually(
                    lambda: limiter.statistics().current_queued_count == 0
                )  # while `first` holds the permit
            await eventually(lambda: limiter.statistics().current_available_permits == 1)  # nobody took it
            async with websockets.connect(ws_url + "?who=next") as after:
                await after.send("again")
                assert await after.recv() == "again"
    assert ran == ["first", "next"]  # the handler of the client that left never ran
    assert [r.getMessage() for r in errors] == []
    await eventually(lambda: limiter.statistics().current_available_permits == 1)
