"""The client integrations close a retried 429 unread: a large refusal body is not downloaded.
A real uvicorn server answers the first request with a 429 streaming 60 MB, the next with 200;
it counts what it managed to send of the refusal before its client went away (all of it when the
client reads it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

import permits
from permits.aiohttp import RateLimitedSession
from permits.httpx import AsyncRateLimitedTransport, RateLimitedTransport

from _integration import eventually

REFUSAL = 60 * 1024 * 1024
CHUNK = 64 * 1024


def refusing_app() -> tuple[Starlette, dict[str, Any]]:
    """/data: a 429 with ``Retry-After: 0`` and a 60 MB body, then 200."""
    state: dict[str, Any] = {"calls": 0, "sent": 0, "ended": False}

    async def data(request: Request) -> Response:
        state["calls"] += 1
        if state["calls"] > 1:
            return PlainTextResponse("ok")

        async def body() -> AsyncIterator[bytes]:
            try:
                for _ in range(REFUSAL // CHUNK):
                    # (uvicorn drops what is sent after a disconnect, silently: stop counting there)
                    if await request.is_disconnected():
                        break
                    yield b"x" * CHUNK  # returns once uvicorn's buffer has room: paced by the client
                    state["sent"] += CHUNK
            finally:
                state["ended"] = True

        headers = {"Retry-After": "0", "Content-Length": str(REFUSAL)}
        return StreamingResponse(body(), status_code=429, headers=headers)

    return Starlette(routes=[Route("/data", data)]), state


async def refusal_sent(state: dict[str, Any]) -> int:
    await eventually(lambda: state["ended"])  # the server is done with the refusal (its client left)
    print(f"sent {state['sent'] / (1 << 20):.1f} MiB of the refusal's {REFUSAL >> 20} MiB")
    return int(state["sent"])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("streamed", [False, True], ids=["get", "stream"])
async def test_the_async_httpx_transport_closes_a_retried_refusal_unread(serve_asgi, streamed: bool) -> None:
    app, state = refusing_app()
    limiter = permits.TokenBucketLimiter(10, 10, 1.0)
    async with serve_asgi(app) as url:
        async with httpx.AsyncClient(transport=AsyncRateLimitedTransport(limiter)) as client:
            if streamed:
                async with client.stream("GET", url + "/data") as response:
                    assert response.status_code == 200
                    assert await response.aread() == b"ok"
            else:
                assert (await client.get(url + "/data")).text == "ok"
        assert await refusal_sent(state) < REFUSAL
    assert state["calls"] == 2


@pytest.mark.timeout(60)
async def test_the_httpx_transport_closes_a_retried_refusal_unread(serve_asgi) -> None:
    app, state = refusing_app()
    limiter = permits.TokenBucketLimiter(10, 10, 1.0)

    def fetch(url: str) -> str:
        with httpx.Client(transport=RateLimitedTransport(limiter)) as client, client.stream("GET", url) as response:
            return response.read().decode()

    async with serve_asgi(app) as url:
        assert await asyncio.to_thread(fetch, url + "/data") == "ok"
        assert await refusal_sent(state) < REFUSAL
    assert state["calls"] == 2


@pytest.mark.timeout(60)
async def test_the_aiohttp_session_closes_a_retried_refusal_unread(serve_asgi) -> None:
    app, state = refusing_app()
    limiter = permits.TokenBucketLimiter(10, 10, 1.0)
    async with serve_asgi(app) as url:
        async with RateLimitedSession(limiter) as session, session.get(url + "/data") as response:
            assert response.status == 200
            assert await response.text() == "ok"
        assert await refusal_sent(state) < REFUSAL
    assert state["calls"] == 2
    assert isinstance(session, aiohttp.ClientSession)
