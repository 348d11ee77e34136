"""permits.aiohttp.RateLimitedSession: a real aiohttp client session against a real local
server. Pacing runs on a ManualClock (a paced wait advances it)."""

from __future__ import annotations

import asyncio

import _upstream
import aiohttp
import pytest
from _upstream import Upstream, refused_url

import permits
from permits import Partition
from permits.aiohttp import RateLimitedSession
from permits.specs import FixedWindow

upstream = _upstream.upstream  # the server fixture


async def test_the_session_is_an_aiohttp_session(upstream: Upstream):
    async with RateLimitedSession(permits.NoLimiter(), raise_for_status=False) as session:
        assert isinstance(session, aiohttp.ClientSession)
        async with session.get(upstream.url("/ok")) as response:
            assert await response.text() == "ok"


async def test_every_request_takes_a_permit(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(2, 1.0, queue_limit=0, clock=clock)
    seen = []
    async with RateLimitedSession(limiter) as session:
        for _ in range(5):
            async with session.get(upstream.url("/ok")) as response:
                assert response.status == 200
            seen.append(clock.now())
    assert seen == [0.0, 0.0, 1.0, 1.0, 2.0]
    assert upstream.hits["/ok"] == 5
    assert limiter.statistics().total_successful_leases == 5


async def test_keys_are_hosts_by_default(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.PartitionedLimiter.per_key(Partition.of(None, FixedWindow(1, 1.0), queue_limit=0), clock=clock)
    seen = []
    async with RateLimitedSession(limiter) as session:
        for host in ("127.0.0.1", "localhost", "127.0.0.1", "localhost"):
            async with session.get(upstream.url("/ok", host)):
                seen.append(clock.now())
    assert seen == [0.0, 0.0, 1.0, 1.0]
    assert limiter.statistics("localhost").total_successful_leases == 2


async def test_an_async_key_callable_receives_the_request(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.PartitionedLimiter.per_key(FixedWindow(5, 1.0), clock=clock)
    requests = []

    async def by_path(request: aiohttp.ClientRequest) -> str:
        requests.append(request)
        return request.url.path

    async with RateLimitedSession(limiter, key=by_path) as session:
        async with session.get(upstream.url("/ok")):
            pass
    assert all(isinstance(r, aiohttp.ClientRequest) for r in requests)
    assert limiter.statistics("/ok").total_successful_leases == 1


async def test_its_own_middlewares_run_too(upstream: Upstream):
    seen = []

    async def note(request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType) -> aiohttp.ClientResponse:
        seen.append(request.url.path)
        return await handler(request)

    limiter = permits.FixedWindowLimiter(5, 1.0)
    async with RateLimitedSession(limiter, middlewares=[note]) as session:
        async with session.get(upstream.url("/ok")):
            pass
    assert seen == ["/ok"]
    assert limiter.statistics().total_successful_leases == 1


@pytest.mark.parametrize(("status", "form"), [(429, "seconds"), (503, "seconds"), (429, "date")])
async def test_retry_after_pauses_then_retries(upstream: Upstream, clock: permits.ManualClock, status: int, form: str):
    limiter = permits.FixedWindowLimiter(100, 1.0, clock=clock)
    async with RateLimitedSession(limiter) as session:
        async with session.get(upstream.url(f"/busy/r?times=2&after=3&status={status}&form={form}")) as response:
            assert response.status == 200
    assert upstream.hits["/busy/r"] == 3
    assert limiter.statistics().total_successful_leases == 3
    if form == "seconds":
        assert clock.now() == 6.0
    else:
        assert 0.0 < clock.now() <= 6.0  # dates have whole seconds


async def test_a_post_body_is_sent_again(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(100, 1.0, clock=clock)
    async with RateLimitedSession(limiter) as session:
        async with session.post(upstream.url("/busy/b?times=1&after=1"), data=b"payload") as response:
            assert response.status == 200
    assert upstream.hits["/busy/b"] == 2


async def test_retries_run_out_and_the_last_response_is_returned(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(100, 1.0, clock=clock)
    async with RateLimitedSession(limiter, max_retries=2) as session:
        async with session.get(upstream.url("/busy/x?times=10&after=1")) as response:
            assert response.status == 429
            assert await response.text() == "busy"
    assert upstream.hits["/busy/x"] == 3
    assert clock.now() == 2.0


@pytest.mark.parametrize(
    ("options", "path"),
    [({"retry_429": False}, "/busy/n?times=1&after=1"), ({}, "/busy/n?times=1&form=none")],
)
async def test_no_retry(upstream: Upstream, clock: permits.ManualClock, options: dict[str, object], path: str):
    limiter = permits.FixedWindowLimiter(100, 1.0, clock=clock)
    async with RateLimitedSession(limiter, **options) as session:  # type: ignore[arg-type]
        async with session.get(upstream.url(path)) as response:
            assert response.status == 429
    assert upstream.hits["/busy/n"] == 1


async def test_a_streamed_response_holds_its_permit_until_released(upstream: Upstream):
    limiter = permits.ConcurrencyLimiter(1)
    async with RateLimitedSession(limiter) as session:
        async with session.get(upstream.url("/stream")) as response:
            assert await response.content.readexactly(5) == b"first"
            assert limiter.available_permits() == 0
        assert limiter.available_permits() == 1
        upstream.finish_streams()
        async with session.get(upstream.url("/stream")) as response:
            assert await response.read() == b"firstlast"
            assert limiter.available_permits() == 1  # read to the end: the connection is released


async def test_a_refused_connection_releases():
    limiter = permits.ConcurrencyLimiter(1)
    async with RateLimitedSession(limiter) as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get(refused_url())
    assert limiter.available_permits() == 1


async def test_cancelling_a_request_releases(upstream: Upstream):
    limiter = permits.ConcurrencyLimiter(1)
    async with RateLimitedSession(limiter) as session:
        task = asyncio.create_task(session.get(upstream.url("/hang")))
        await asyncio.to_thread(upstream.arrived.wait)
        assert limiter.available_permits() == 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert limiter.available_permits() == 1


@pytest.mark.parametrize(
    ("args", "options", "error", "words"),
    [
        ((None,), {}, TypeError, "limiter"),
        ((permits.NoLimiter(),), {"key": "host"}, TypeError, "key"),
        ((permits.NoLimiter(),), {"retry_429": "yes"}, TypeError, "retry_429"),
        ((permits.NoLimiter(),), {"max_retries": -1}, ValueError, "max_retries"),
        ((permits.NoLimiter(),), {"middlewares": 3}, TypeError, "middlewares"),
    ],
)
async def test_bad_arguments_fail_when_built(args, options, error, words):
    with pytest.raises(error, match=words):
        RateLimitedSession(*args, **options)
