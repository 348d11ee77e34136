"""A request whose body is a stream (an iterator, an async iterator, another request's body being
proxied) cannot be sent twice: a retry would send 0 bytes and the caller would get the server's
answer to that (data lost, silently). Such a request is never retried: the caller gets the 429.
Bodies in memory are retried whole. Real clients against the loopback server, which records the
bytes each attempt sent; pacing on a ManualClock."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterator

import _upstream
import aiohttp
import httpx
import pytest
from _upstream import Upstream
from aiohttp import web

import permits
from permits.aiohttp import RateLimitedSession
from permits.httpx import AsyncRateLimitedTransport, RateLimitedTransport

upstream = _upstream.upstream  # the server fixture

BODY = 8000
REFUSED_ONCE = "/busy/u?times=1&after=1"


def limiter(clock: permits.ManualClock) -> permits.RateLimiter:
    return permits.FixedWindowLimiter(100, 1.0, queue_limit=0, clock=clock)


def chunks() -> Iterator[bytes]:
    for _ in range(8):
        yield b"x" * (BODY // 8)


async def achunks() -> AsyncIterator[bytes]:
    for chunk in chunks():
        yield chunk


# ---- streams: sent once, the 429 returned ----
async def test_aiohttp_an_async_iterator_is_not_sent_twice(upstream: Upstream, clock: permits.ManualClock):
    async with RateLimitedSession(limiter(clock)) as session:
        async with session.post(upstream.url(REFUSED_ONCE), data=achunks()) as response:
            assert response.status == 429
    assert upstream.bodies["u"] == [BODY]


async def test_aiohttp_a_proxied_request_body_is_not_sent_twice(
    upstream: Upstream, clock: permits.ManualClock, serve_aiohttp
):
    async with RateLimitedSession(limiter(clock)) as session:

        async def forward(request: web.Request) -> web.Response:  # a proxy: the body streams through
            async with session.post(upstream.url(REFUSED_ONCE), data=request.content) as answer:
                return web.Response(status=answer.status, body=await answer.read())

        app = web.Application()
        app.router.add_post("/", forward)
        async with serve_aiohttp(app) as proxy, aiohttp.ClientSession() as plain:
            async with plain.post(proxy + "/", data=b"y" * BODY) as response:
                assert response.status == 429
    assert upstream.bodies["u"] == [BODY]


def test_httpx_an_iterator_is_not_sent_twice(upstream: Upstream, clock: permits.ManualClock):
    with httpx.Client(transport=RateLimitedTransport(limiter(clock))) as client:
        assert client.post(upstream.url(REFUSED_ONCE), content=chunks()).status_code == 429
    assert upstream.bodies["u"] == [BODY]


async def test_async_httpx_an_async_iterator_is_not_sent_twice(upstream: Upstream, clock: permits.ManualClock):
    async with httpx.AsyncClient(transport=AsyncRateLimitedTransport(limiter(clock))) as client:
        assert (await client.post(upstream.url(REFUSED_ONCE), content=achunks())).status_code == 429
    assert upstream.bodies["u"] == [BODY]


# ---- bodies in memory: sent again, whole ----
@pytest.mark.parametrize(
    "body", [b"z" * BODY, {"field": "z" * 100}, io.BytesIO(b"z" * BODY)], ids=["bytes", "form", "seekable-file"]
)
async def test_aiohttp_a_body_it_can_replay_is_sent_again_whole(upstream: Upstream, clock: permits.ManualClock, body):
    async with RateLimitedSession(limiter(clock)) as session:
        async with session.post(upstream.url(REFUSED_ONCE), data=body) as response:
            assert response.status == 200
    first, second = upstream.bodies["u"]
    assert first == second > 0


@pytest.mark.parametrize("body", [{"content": b"z" * BODY}, {"json": {"a": "z" * 100}}, {"data": {"f": "z"}}])
def test_httpx_a_body_in_memory_is_sent_again_whole(upstream: Upstream, clock: permits.ManualClock, body):
    with httpx.Client(transport=RateLimitedTransport(limiter(clock))) as client:
        assert client.post(upstream.url(REFUSED_ONCE), **body).status_code == 200
    first, second = upstream.bodies["u"]
    assert first == second > 0
