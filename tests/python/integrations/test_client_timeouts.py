"""A client's timeout bounds the Retry-After pauses. httpx: a retry that would wait past the
request's pool timeout (httpx's wait before sending) returns the 429 at once; a request for a host
paused past it raises ``httpx.PoolTimeout`` at once (its pauses, all together, fit in the timeout). aiohttp: the
session's ``ClientTimeout`` bounds everything the request does, pauses included. Real clients
against the loopback server; httpx on a ManualClock (the clock tells how long a request waited)."""

from __future__ import annotations

import asyncio
import time

import _upstream
import aiohttp
import httpx
import pytest
from _upstream import Upstream

import permits
from permits.aiohttp import RateLimitedSession
from permits.httpx import AsyncRateLimitedTransport, RateLimitedTransport

upstream = _upstream.upstream  # the server fixture


def limiter(clock: permits.ManualClock) -> permits.RateLimiter:
    return permits.FixedWindowLimiter(100, 1.0, queue_limit=0, clock=clock)


def test_httpx_a_pause_longer_than_the_timeout_returns_the_429_at_once(upstream: Upstream, clock):
    with httpx.Client(transport=RateLimitedTransport(limiter(clock))) as client:
        refused = client.get(upstream.url("/busy/t?times=9&after=5"), timeout=0.5)
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "5"
        assert clock.now() == 0.0 and upstream.hits["/busy/t"] == 1
        with pytest.raises(httpx.PoolTimeout, match="Retry-After"):  # the host is paused for 5 s
            client.get(upstream.url("/ok"), timeout=0.5)
        assert clock.now() == 0.0 and upstream.hits["/ok"] == 0
        assert client.get(upstream.url("/ok"), timeout=10.0).status_code == 200  # 5 s fit in 10
        assert clock.now() == 5.0


async def test_async_httpx_a_pause_longer_than_the_timeout_returns_the_429_at_once(upstream: Upstream, clock):
    async with httpx.AsyncClient(transport=AsyncRateLimitedTransport(limiter(clock))) as client:
        assert (await client.get(upstream.url("/busy/t?times=9&after=5"), timeout=0.5)).status_code == 429
        with pytest.raises(httpx.PoolTimeout):
            await client.get(upstream.url("/ok"), timeout=httpx.Timeout(60.0, pool=4.0))
        assert clock.now() == 0.0 and upstream.hits["/ok"] == 0
        assert (await client.get(upstream.url("/ok"), timeout=httpx.Timeout(1.0, pool=5.0))).status_code == 200
        assert clock.now() == 5.0


def test_httpx_the_pauses_of_one_request_add_up(upstream: Upstream, clock: permits.ManualClock):
    with httpx.Client(transport=RateLimitedTransport(limiter(clock), max_retries=5)) as client:
        response = client.get(upstream.url("/busy/a?times=9&after=3"), timeout=7.0)
    assert response.status_code == 429
    assert upstream.hits["/busy/a"] == 3  # paused 3 s and 3 s: a third pause would end at 9 s
    assert clock.now() == 6.0


@pytest.mark.parametrize("timeout", [None, httpx.Timeout(5.0, pool=None)])
def test_httpx_without_a_pool_timeout_pauses_are_not_bounded(upstream: Upstream, clock, timeout):
    with httpx.Client(transport=RateLimitedTransport(limiter(clock)), timeout=timeout) as client:
        assert client.get(upstream.url("/busy/n?times=2&after=600")).status_code == 200
    assert clock.now() == 1200.0


def test_httpx_the_default_timeout_is_five_seconds(upstream: Upstream, clock: permits.ManualClock):
    with httpx.Client(transport=RateLimitedTransport(limiter(clock))) as client:
        assert client.get(upstream.url("/busy/f?times=1&after=5")).status_code == 200  # 5 s fit
        assert client.get(upstream.url("/busy/s?times=9&after=6")).status_code == 429  # 6 s do not
    assert clock.now() == 5.0


@pytest.mark.timeout(60)
async def test_aiohttp_the_sessions_timeout_ends_a_pause(upstream: Upstream):
    limiter = permits.FixedWindowLimiter(100, 1.0)  # a real clock: aiohttp's timeout is real time
    quick = aiohttp.ClientTimeout(total=0.5)
    async with RateLimitedSession(limiter) as session:
        started = time.monotonic()
        with pytest.raises(asyncio.TimeoutError):  # waiting 30 s to retry
            await session.get(upstream.url("/busy/t?times=9&after=30"), timeout=quick)
        with pytest.raises(asyncio.TimeoutError):  # waiting for the host's pause
            await session.get(upstream.url("/ok"), timeout=quick)
        assert time.monotonic() - started < 20.0  # the timeouts, not the 30 s pause (a loaded machine: slack)
    assert upstream.hits["/busy/t"] == 1 and upstream.hits["/ok"] == 0
