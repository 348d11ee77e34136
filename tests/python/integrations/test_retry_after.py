"""Retry-After and the RateLimit header's t= on a rejection a nanosecond before a refill: at least
1 (never 0, which would send the client straight back), under real uvicorn and aiohttp servers."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from aiohttp import web
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import permits
from permits.aiohttp import rate_limit_middleware
from permits.asgi import RateLimitMiddleware


def _serve(framework: str, serve_asgi: Any, serve_aiohttp: Any, limiter: Any) -> Any:
    if framework == "uvicorn":

        async def hello(request: Request) -> PlainTextResponse:
            return PlainTextResponse("hello")

        app = Starlette(routes=[Route("/", hello)])
        app.add_middleware(RateLimitMiddleware, limiter=limiter)
        return serve_asgi(app)

    async def aiohttp_hello(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    aiohttp_app = web.Application(middlewares=[rate_limit_middleware(limiter)])
    aiohttp_app.router.add_get("/", aiohttp_hello)
    return serve_aiohttp(aiohttp_app)


@pytest.mark.parametrize("framework", ["uvicorn", "aiohttp"])
@pytest.mark.parametrize("kind", ["fixed_window", "token_bucket"])
async def test_retry_after_is_at_least_one_a_nanosecond_before_a_refill(
    framework: str, kind: str, serve_asgi, serve_aiohttp, clock: permits.ManualClock
) -> None:
    if kind == "fixed_window":
        limiter: permits.RateLimiter = permits.FixedWindowLimiter(1, 10, clock=clock, name="w")
    else:
        limiter = permits.TokenBucketLimiter(1, 1, 10, clock=clock, name="w")
    async with _serve(framework, serve_asgi, serve_aiohttp, limiter) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/")).status_code == 200
        clock.advance_ns(10 * 10**9 - 1)
        rejected = await client.get("/")
    assert rejected.status_code == 429
    assert rejected.headers["retry-after"] == "1"
    assert rejected.headers["ratelimit"] == '"w";r=0;t=1'
