"""The pacing a server sees. A real loopback server notes when each request arrives; the clients
pace with "5 per 1.2 s" (a margin over the server's "5 per second" for what may pass between a
permit and the server noting the request: the client's own scheduling, the network, the server's
loop) and the test asserts that no 1 s window at the server holds more than 5 requests.

The connection pool holds one connection, and the first response is slow: requests queue for the
connection. Their permits must be counted when they are written, not when they started to wait
for a connection (else all that queued behind the slow response go out back to back, then as
many again with the permits granted meanwhile). Once with a connection kept alive between
requests, once with a new connection for each.

The property asserted is the limit (never more than 5 in any second at the server), not speed:
a loaded machine makes the requests later, never more of them in a second."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import _upstream
import aiohttp
import httpx
import pytest
from _upstream import Upstream

import permits
from permits.aiohttp import RateLimitedSession
from permits.httpx import AsyncRateLimitedTransport, RateLimitedTransport

upstream = _upstream.upstream  # the server fixture

LIMIT = 5  # the server's limit: 5 in any 1 s
REQUESTS = 16
WORKERS = 6
SLOW = 1.5  # the first response takes this long: the others queue for the one connection


def pacing() -> permits.RateLimiter:
    # 24 segments of 50 ms: a permit comes back 1.2 s (24 segments) to 1.25 s after it was taken
    return permits.SlidingWindowLimiter(LIMIT, 1.25, 25)


def busiest_second(arrivals: list[float]) -> int:
    """The most arrivals in any window of 1 s (closed: a request exactly 1 s later counts too)."""
    times = sorted(arrivals)
    return max(sum(1 for t in times[i:] if t - start <= 1.0) for i, start in enumerate(times))


def check(upstream: Upstream) -> None:
    assert upstream.hits["/paced"] == REQUESTS
    busiest = busiest_second(upstream.arrivals)
    times = sorted(upstream.arrivals)
    span = min(b - a for a, b in zip(times, times[LIMIT:], strict=False))
    print(f"busiest second at the server: {busiest} requests; 6 in a row took at least {span:.3f} s")
    gaps = [round(b - a, 3) for a, b in zip(upstream.arrivals, upstream.arrivals[1:], strict=False)]
    assert busiest <= LIMIT, f"{busiest} requests in one second at the server; gaps {gaps}"


def in_turns(upstream: Upstream, send_first: Callable[[], None], send: Callable[[], None]) -> None:
    """The first request (slow) alone, then WORKERS threads sending the rest."""
    left = iter(range(REQUESTS - 1))
    lock = threading.Lock()
    failures: list[BaseException] = []

    def work() -> None:
        while True:
            with lock:
                if next(left, None) is None:
                    return
            try:
                send()
            except BaseException as exc:
                failures.append(exc)
                return

    first = threading.Thread(target=send_first)
    first.start()
    assert upstream.arrived.wait(30)
    threads = [threading.Thread(target=work) for _ in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in [first, *threads]:
        thread.join(60)
    assert not failures, failures


def limits(kept_alive: bool) -> httpx.Limits:
    return httpx.Limits(max_connections=1, max_keepalive_connections=1 if kept_alive else 0)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kept_alive", [True, False], ids=["pooled", "new-connections"])
def test_httpx(upstream: Upstream, kept_alive: bool):
    transport = RateLimitedTransport(pacing(), transport=httpx.HTTPTransport(limits=limits(kept_alive)))
    with httpx.Client(transport=transport, timeout=60.0) as client:

        def send_first() -> None:
            assert client.get(upstream.url(f"/paced?wait={SLOW}")).status_code == 200

        def send() -> None:
            assert client.get(upstream.url("/paced")).status_code == 200

        in_turns(upstream, send_first, send)
    check(upstream)


async def _gather(first: Callable[[], object], rest: Callable[[], object], upstream: Upstream) -> None:
    slow = asyncio.create_task(first())  # type: ignore[arg-type]
    await asyncio.to_thread(upstream.arrived.wait, 30)
    left = iter(range(REQUESTS - 1))

    async def work() -> None:
        while next(left, None) is not None:
            await rest()  # type: ignore[misc]

    await asyncio.gather(slow, *(work() for _ in range(WORKERS)))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kept_alive", [True, False], ids=["pooled", "new-connections"])
async def test_async_httpx(upstream: Upstream, kept_alive: bool):
    inner = httpx.AsyncHTTPTransport(limits=limits(kept_alive))
    async with httpx.AsyncClient(
        transport=AsyncRateLimitedTransport(pacing(), transport=inner), timeout=60.0
    ) as client:

        async def first() -> None:
            assert (await client.get(upstream.url(f"/paced?wait={SLOW}"))).status_code == 200

        async def rest() -> None:
            assert (await client.get(upstream.url("/paced"))).status_code == 200

        await _gather(first, rest, upstream)
    check(upstream)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kept_alive", [True, False], ids=["pooled", "new-connections"])
async def test_aiohttp(upstream: Upstream, kept_alive: bool):
    connector = aiohttp.TCPConnector(limit=1, force_close=not kept_alive)
    async with RateLimitedSession(pacing(), connector=connector) as session:

        async def first() -> None:
            async with session.get(upstream.url(f"/paced?wait={SLOW}")) as response:
                assert response.status == 200

        async def rest() -> None:
            async with session.get(upstream.url("/paced")) as response:
                assert response.status == 200

        await _gather(first, rest, upstream)
    check(upstream)
