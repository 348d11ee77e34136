"""How the clients' waits sit with their connections. A request waits for its permit before it
asks for a connection: one waiting for its permit holds none, so requests for other hosts are not
held up by it. A key paused while a request waited for its connection sends that request back to
wait the pause out, unsent. The caller's own tracing (an httpx ``trace`` extension, aiohttp trace
configs) still sees every event. Real clients against the loopback server."""

from __future__ import annotations

import asyncio
import threading

import _upstream
import aiohttp
import httpx
import pytest
from _upstream import Upstream

import permits
from permits import Partition
from permits.aiohttp import RateLimitedSession
from permits.httpx import AsyncRateLimitedTransport, RateLimitedTransport
from permits.specs import FixedWindow

from _integration import until

upstream = _upstream.upstream  # the server fixture

ONE_CONNECTION = httpx.Limits(max_connections=1, max_keepalive_connections=1)


@pytest.mark.timeout(60)
def test_httpx_a_request_waiting_for_its_permit_holds_no_connection(upstream: Upstream):
    per_host = permits.PartitionedLimiter.per_key(FixedWindow(1, 600.0))  # one request per host
    transport = RateLimitedTransport(per_host, transport=httpx.HTTPTransport(limits=ONE_CONNECTION))
    with httpx.Client(transport=transport) as client:
        assert client.get(upstream.url("/ok")).status_code == 200
        outcome: list[object] = []

        def second() -> None:  # waits 10 minutes for a permit of 127.0.0.1
            try:
                outcome.append(client.get(upstream.url("/ok")))
            except permits.LimiterClosedError as exc:
                outcome.append(exc)

        waiting = threading.Thread(target=second)
        waiting.start()
        while per_host.statistics("127.0.0.1").current_queued_count == 0:
            waiting.join(0.01)
        # the only connection is free for another host meanwhile
        assert client.get(upstream.url("/ok", "localhost")).status_code == 200
        per_host.close()
        waiting.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], permits.LimiterClosedError)
    assert upstream.hits["/ok"] == 2


async def test_aiohttp_a_request_waiting_for_its_permit_holds_no_connection(upstream: Upstream):
    per_host = permits.PartitionedLimiter.per_key(FixedWindow(1, 600.0))
    async with RateLimitedSession(per_host, connector=aiohttp.TCPConnector(limit=1)) as session:
        async with session.get(upstream.url("/ok")) as response:
            assert response.status == 200
        waiting = asyncio.create_task(session.get(upstream.url("/ok")))
        while per_host.statistics("127.0.0.1").current_queued_count == 0:
            await asyncio.sleep(0.01)
        async with session.get(upstream.url("/ok", "localhost")) as response:
            assert response.status == 200
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    assert upstream.hits["/ok"] == 2


# ---- a pause that arrives while a request waits for its connection ----
def paced(clock: permits.ManualClock) -> permits.RateLimiter:
    return permits.FixedWindowLimiter(100, 1.0, queue_limit=0, clock=clock)


async def test_async_httpx_a_request_paused_while_it_waited_for_its_connection_waits_it_out(
    upstream: Upstream, clock: permits.ManualClock
):
    inner = httpx.AsyncHTTPTransport(limits=ONE_CONNECTION)
    transport = AsyncRateLimitedTransport(paced(clock), transport=inner, retry_429=False)
    async with httpx.AsyncClient(transport=transport) as client:
        # the first holds the only connection 0.3 s, then answers 429 "come back in 5 s"
        refused = asyncio.create_task(client.get(upstream.url("/busy/w?times=1&after=5&wait=0.3")))
        await asyncio.to_thread(until, lambda: upstream.hits["/busy/w"] == 1)
        second = await client.get(upstream.url("/ok"))  # its permit taken, it waits for the connection
        assert (await refused).status_code == 429
    assert second.status_code == 200
    assert clock.now() == 5.0  # it was sent after the pause, not into it
    assert upstream.hits["/ok"] == 1


async def test_aiohttp_a_request_paused_while_it_waited_for_its_connection_waits_it_out(
    upstream: Upstream, clock: permits.ManualClock
):
    async with RateLimitedSession(paced(clock), retry_429=False, connector=aiohttp.TCPConnector(limit=1)) as session:
        refused = asyncio.create_task(session.get(upstream.url("/busy/w?times=1&after=5&wait=0.3")))
        await asyncio.to_thread(until, lambda: upstream.hits["/busy/w"] == 1)
        async with session.get(upstream.url("/ok")) as second:
            assert second.status == 200
        (await refused).close()
    assert clock.now() == 5.0
    assert upstream.hits["/ok"] == 1


# ---- the caller's own tracing ----
def test_httpx_the_callers_trace_still_sees_every_event(upstream: Upstream, clock: permits.ManualClock):
    events: list[str] = []
    with httpx.Client(transport=RateLimitedTransport(paced(clock))) as client:
        response = client.get(upstream.url("/ok"), extensions={"trace": lambda name, info: events.append(name)})
    assert response.status_code == 200
    assert "connection.connect_tcp.started" in events
    assert "http11.send_request_headers.started" in events
    assert "http11.response_closed.complete" in events


async def test_aiohttp_the_callers_trace_configs_still_run(upstream: Upstream, clock: permits.ManualClock):
    seen: list[str] = []

    async def headers(session: object, context: object, params: aiohttp.TraceRequestHeadersSentParams) -> None:
        seen.append(params.url.path)

    mine = aiohttp.TraceConfig()
    mine.on_request_headers_sent.append(headers)
    limiter = permits.PartitionedLimiter.per_key(Partition.of(None, FixedWindow(5, 1.0), queue_limit=0), clock=clock)
    async with RateLimitedSession(limiter, trace_configs=[mine]) as session:
        async with session.get(upstream.url("/ok")) as response:
            assert response.status == 200
    assert seen == ["/ok"]
    assert limiter.statistics("127.0.0.1").total_successful_leases == 1


def test_aiohttp_trace_configs_must_be_a_sequence():
    with pytest.raises(TypeError, match="trace_configs"):
        RateLimitedSession(permits.NoLimiter(), trace_configs=3)


def test_async_httpx_under_trio(upstream: Upstream):
    trio = pytest.importorskip("trio")
    per_host = permits.PartitionedLimiter.per_key(FixedWindow(2, 0.2))  # real time: a few waits
    statuses: list[int] = []

    async def main() -> None:
        inner = httpx.AsyncHTTPTransport(limits=ONE_CONNECTION)
        async with httpx.AsyncClient(transport=AsyncRateLimitedTransport(per_host, transport=inner)) as client:

            async def get() -> None:
                statuses.append((await client.get(upstream.url("/paced?wait=0.02"))).status_code)

            async with trio.open_nursery() as nursery:
                for _ in range(6):
                    nursery.start_soon(get)

    trio.run(main)
    assert statuses == [200] * 6
    assert upstream.hits["/paced"] == 6
