"""keys.header over real uvicorn and aiohttp servers: its keys never collide with its fallback's
(a header naming a victim's address is not the victim's key), a blank value counts as absent,
and an async fallback is awaited."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from aiohttp import web
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import permits
from permits import keys
from permits.aiohttp import rate_limit_middleware
from permits.asgi import RateLimitMiddleware

VICTIM = "127.0.0.1"
ATTACKER = "127.0.0.2"


def _serve(framework: str, serve_asgi: Any, serve_aiohttp: Any, limiter: Any, key: Any) -> Any:
    if framework == "uvicorn":

        async def hello(request: Request) -> PlainTextResponse:
            return PlainTextResponse("hello")

        app = Starlette(routes=[Route("/", hello)])
        app.add_middleware(RateLimitMiddleware, limiter=limiter, key=key)
        return serve_asgi(app)

    async def aiohttp_hello(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    aiohttp_app = web.Application(middlewares=[rate_limit_middleware(limiter, key=key)])
    aiohttp_app.router.add_get("/", aiohttp_hello)
    return serve_aiohttp(aiohttp_app)


def _client(url: str, local_address: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, transport=httpx.AsyncHTTPTransport(local_address=local_address))


@pytest.mark.parametrize("framework", ["uvicorn", "aiohttp"])
async def test_a_header_naming_the_victims_address_is_not_the_victims_key(
    framework: str, serve_asgi, serve_aiohttp, clock: permits.ManualClock
) -> None:
    limiter = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(2, 60), clock=clock)
    async with (
        _serve(framework, serve_asgi, serve_aiohttp, limiter, keys.header("X-User")) as url,
        _client(url, ATTACKER) as attacker,
        _client(url, VICTIM) as victim,
    ):
        for _ in range(5):
            await attacker.get("/", headers={"X-User": VICTIM})
        assert [(await victim.get("/")).status_code for _ in range(3)] == [200, 200, 429]
    assert limiter.statistics(("x-user", VICTIM)).total_successful_leases == 2
    assert limiter.statistics(VICTIM).total_successful_leases == 2


async def _raw_get(url: str, local_address: str, header_line: bytes) -> int:
    """A GET over a raw socket with one header line as given (httpx refuses blank values)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=(local_address, 0))
    try:
        writer.write(b"GET / HTTP/1.1\r\nHost: test\r\n" + header_line + b"\r\nConnection: close\r\n\r\n")
        await writer.drain()
        status_line = await reader.readline()
        return int(status_line.split()[1])
    finally:
        writer.close()
        await writer.wait_closed()


@pytest.mark.parametrize("framework", ["uvicorn", "aiohttp"])
@pytest.mark.parametrize("line", [b"X-User:", b"X-User:    ", b"X-User: \t "])
async def test_an_empty_or_blank_value_counts_as_absent(
    framework: str, line: bytes, serve_asgi, serve_aiohttp, clock: permits.ManualClock
) -> None:
    limiter = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(2, 60), clock=clock)
    async with _serve(framework, serve_asgi, serve_aiohttp, limiter, keys.header("X-User")) as url:
        # Were a blank value a key, both clients would share it: the attacker would starve the victim.
        assert [await _raw_get(url, ATTACKER, line) for _ in range(3)] == [200, 200, 429]
        assert await _raw_get(url, VICTIM, line) == 200
    assert limiter.statistics(ATTACKER).total_successful_leases == 2
    assert limiter.statistics(VICTIM).total_successful_leases == 1


@pytest.mark.parametrize("framework", ["uvicorn", "aiohttp"])
async def test_an_async_fallback_is_awaited(
    framework: str, serve_asgi, serve_aiohttp, clock: permits.ManualClock
) -> None:
    async def tenant(request: Any) -> str:
        return "anonymous"

    limiter = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(2, 60), clock=clock)
    key = keys.header("X-User", fallback=tenant)
    async with _serve(framework, serve_asgi, serve_aiohttp, limiter, key) as url, _client(url, VICTIM) as client:
        assert [(await client.get("/")).status_code for _ in range(3)] == [200, 200, 429]
        assert (await client.get("/", headers={"X-User": "bob"})).status_code == 200
    assert limiter.statistics("anonymous").total_successful_leases == 2
    assert limiter.statistics(("x-user", "bob")).total_successful_leases == 1
