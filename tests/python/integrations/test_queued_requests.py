"""Requests with ``wait=True`` (the ASGI middleware and the FastAPI dependency) under a real
uvicorn server and real clients: a free permit is taken at once, without watching the client."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import Depends, FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

import permits
from permits.asgi import RateLimitMiddleware
from permits.fastapi import RateLimit


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
