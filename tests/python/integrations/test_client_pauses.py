"""A Retry-After pauses its key for every request, whether the request that got it is retried or
not: with retries off, none left, or a body that cannot be sent twice, the caller gets the 429 and
the next request for that host still waits out the pause. Real clients against the loopback
server, paced on a ManualClock (a paced wait advances it: the clock tells who waited how long)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import _upstream
import httpx
import pytest
from _upstream import Upstream

import permits
from permits.aiohttp import RateLimitedSession
from permits.httpx import AsyncRateLimitedTransport, RateLimitedTransport

upstream = _upstream.upstream  # the server fixture

#: (options, whether the body is streamed, when the 429 is returned, when the next request goes)
CASES = [
    pytest.param({"retry_429": False}, False, 0.0, 5.0, id="retry_429=False"),
    pytest.param({"max_retries": 0}, False, 0.0, 5.0, id="max_retries=0"),
    pytest.param({}, True, 0.0, 5.0, id="streamed-body"),
    pytest.param({"max_retries": 1}, False, 5.0, 10.0, id="last-attempt"),  # its own retry waited 5 s
]


def limiter(clock: permits.ManualClock) -> permits.RateLimiter:
    return permits.FixedWindowLimiter(100, 1.0, queue_limit=0, clock=clock)


def chunks() -> Iterator[bytes]:
    yield b"x" * 100


async def achunks() -> AsyncIterator[bytes]:
    yield b"x" * 100


@pytest.mark.parametrize(("options", "streamed", "refused_at", "next_at"), CASES)
def test_httpx(upstream: Upstream, clock: permits.ManualClock, options, streamed, refused_at, next_at):
    with httpx.Client(transport=RateLimitedTransport(limiter(clock), **options)) as client:
        refused = client.post(upstream.url("/busy/a?times=9&after=5"), content=chunks() if streamed else b"x")
        assert refused.status_code == 429
        assert clock.now() == refused_at
        assert client.get(upstream.url("/ok")).status_code == 200
        assert clock.now() == next_at
    assert upstream.hits["/ok"] == 1


@pytest.mark.parametrize(("options", "streamed", "refused_at", "next_at"), CASES)
async def test_async_httpx(upstream: Upstream, clock: permits.ManualClock, options, streamed, refused_at, next_at):
    async with httpx.AsyncClient(transport=AsyncRateLimitedTransport(limiter(clock), **options)) as client:
        body = achunks() if streamed else b"x"
        assert (await client.post(upstream.url("/busy/a?times=9&after=5"), content=body)).status_code == 429
        assert clock.now() == refused_at
        assert (await client.get(upstream.url("/ok"))).status_code == 200
        assert clock.now() == next_at


@pytest.mark.parametrize(("options", "streamed", "refused_at", "next_at"), CASES)
async def test_aiohttp(upstream: Upstream, clock: permits.ManualClock, options, streamed, refused_at, next_at):
    async with RateLimitedSession(limiter(clock), **options) as session:
        body = achunks() if streamed else b"x"
        async with session.post(upstream.url("/busy/a?times=9&after=5"), data=body) as refused:
            assert refused.status == 429
        assert clock.now() == refused_at
        async with session.get(upstream.url("/ok")) as response:
            assert response.status == 200
        assert clock.now() == next_at


def test_a_pause_holds_the_other_threads_requests_too(upstream: Upstream, clock: permits.ManualClock):
    transport = RateLimitedTransport(limiter(clock), retry_429=False)
    with (
        httpx.Client(transport=transport, timeout=None) as first,
        httpx.Client(transport=transport, timeout=None) as second,
    ):
        assert first.get(upstream.url("/busy/t?after=7")).status_code == 429
        assert second.get(upstream.url("/ok", "localhost")).status_code == 200  # another host: at once
        assert clock.now() == 0.0
        assert second.get(upstream.url("/ok")).status_code == 200
        assert clock.now() == 7.0
