"""``wait=True`` is bounded in the asyncio integrations (the ASGI middleware, the FastAPI
dependency, aiohttp's middleware and ``@limit``), on real servers on loopback: past
``max_queued`` requests waiting, one more is refused at once (reason ``"queue_full"``); a wait
past ``timeout`` on the limiter's clock (a ManualClock: its ``advance`` ends it) is refused
(reason ``"timeout"``); neither takes a permit nor keeps its place. With the defaults (30 s,
1000 requests) a flood of uploads is bounded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web
from fastapi import Depends, FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

import permits
from permits.aiohttp import limit, rate_limit_middleware
from permits.asgi import RateLimitMiddleware
from permits.fastapi import RateLimit

from _integration import eventually

WHERE = ["asgi", "fastapi", "aiohttp", "aiohttp-limit"]


class Served:
    """A server with one limited route, ``/hello``: its URL, the reasons of the rejections its
    ``on_rejected`` saw, and the calls of the handler."""

    def __init__(self, url: str, reasons: list[str | None], calls: list[str]) -> None:
        self.url = url
        self.reasons = reasons
        self.calls = calls


@contextlib.asynccontextmanager
async def served(
    where: str, limiter: Any, serve_asgi: Any, serve_aiohttp: Any, *, server: Any = None, **bounds: Any
) -> AsyncIterator[Served]:
    reasons: list[str | None] = []
    calls: list[str] = []

    def seen(request: Any, lease: permits.Lease) -> None:
        reasons.append(lease.reason)  # (None: the default rejection is sent)

    options: dict[str, Any] = {"wait": True, "on_rejected": seen, **bounds}
    if where in ("asgi", "fastapi"):
        app: Any
        if where == "asgi":

            async def hello(request: Request) -> Response:
                calls.append("/hello")
                return PlainTextResponse("hello")

            app = RateLimitMiddleware(Starlette(routes=[Route("/hello", hello)]), limiter, **options)
        else:
            app = FastAPI()

            @app.get("/hello", dependencies=[Depends(RateLimit(limiter, **options))])
            async def limited() -> Response:
                calls.append("/hello")
                return PlainTextResponse("hello")

        async with serve_asgi(app) as url:
            yield Served(url, reasons, calls)
        return

    async def handler(request: web.Request) -> web.Response:
        calls.append("/hello")
        return web.Response(text="hello")

    if where == "aiohttp":
        aio = web.Application(middlewares=[rate_limit_middleware(limiter, **options)])
        aio.router.add_get("/hello", handler)
    else:
        aio = web.Application()
        aio.router.add_get("/hello", limit(limiter, **options)(handler))
    async with serve_aiohttp(aio, **(server or {})) as url:
        yield Served(url, reasons, calls)


def queued(limiter: Any) -> Callable[[], bool]:
    return lambda: limiter.statistics().current_queued_count == 1


@pytest.mark.timeout(30)
@pytest.mark.parametrize("where", WHERE)
async def test_a_request_beyond_max_queued_is_refused_at_once(
    where: str, clock: permits.ManualClock, serve_asgi: Any, serve_aiohttp: Any
) -> None:
    # Its queue has no bound; its window (10 s) ends within the default timeout (30 s).
    limiter = permits.FixedWindowLimiter(1, 10, clock=clock, name="w")
    async with (
        served(where, limiter, serve_asgi, serve_aiohttp, max_queued=1) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        assert (await client.get("/hello")).status_code == 200  # the window's only permit
        waiting = asyncio.create_task(client.get("/hello"))
        await eventually(queued(limiter))
        refused = await client.get("/hello")  # answered now, the first one still waiting
        assert (refused.status_code, server.reasons) == (429, ["queue_full"])
        assert limiter.statistics().current_queued_count == 1  # it never queued in the limiter
        assert not waiting.done()
        clock.advance(10)
        assert (await waiting).status_code == 200
    assert server.calls == ["/hello", "/hello"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("where", WHERE)
async def test_a_wait_past_its_timeout_is_refused_and_takes_nothing(
    where: str, clock: permits.ManualClock, serve_asgi: Any, serve_aiohttp: Any
) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock, name="c")
    held = limiter.acquire()
    async with (
        served(where, limiter, serve_asgi, serve_aiohttp, timeout=5, max_queued=1) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        waiting = asyncio.create_task(client.get("/hello"))
        await eventually(queued(limiter))
        clock.advance(4)
        with pytest.raises(TimeoutError):  # (4 s of 5 on the limiter's clock: still waiting)
            await asyncio.wait_for(asyncio.shield(waiting), 0.2)
        clock.advance(1)
        timed_out = await waiting
        assert (timed_out.status_code, server.reasons) == (429, ["timeout"])
        assert limiter.statistics().current_queued_count == 0  # it left the limiter's queue
        # Its place among the max_queued is free again: the next request queues, not refused.
        again = asyncio.create_task(client.get("/hello"))
        await eventually(queued(limiter))
        held.release()
        assert (await again).status_code == 200
    assert server.reasons == ["timeout"]
    assert server.calls == ["/hello"]
    await eventually(lambda: limiter.available_permits() == 1)  # the timed-out request took none


@pytest.mark.timeout(30)
@pytest.mark.parametrize("where", WHERE)
async def test_a_permit_granted_as_the_timeout_ends_is_not_lost(
    where: str, clock: permits.ManualClock, serve_asgi: Any, serve_aiohttp: Any
) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock, name="c")
    held = limiter.acquire()
    async with (
        served(where, limiter, serve_asgi, serve_aiohttp, timeout=5) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        waiting = asyncio.create_task(client.get("/hello"))
        await eventually(queued(limiter))
        clock.advance(5)  # the timeout ends and the permit comes back, before the loop runs again
        held.release()
        answer = await waiting
    # Either the grant won (served) or the timeout did (refused, the grant given back): never both,
    # never a permit lost.
    assert (answer.status_code, server.reasons, server.calls) in [(200, [], ["/hello"]), (429, ["timeout"], [])]
    await eventually(lambda: limiter.available_permits() == 1)
    assert limiter.statistics().current_queued_count == 0


@pytest.mark.timeout(30)
@pytest.mark.parametrize("where", [*WHERE, "aiohttp-cancelling"])
async def test_a_client_that_leaves_while_queued_gives_its_place_back(
    where: str, clock: permits.ManualClock, serve_asgi: Any, serve_aiohttp: Any
) -> None:
    # (aiohttp's handler_cancellation=True cancels the handler, and so the wait, when the client
    # leaves: the place must come back from a cancelled task too.)
    limiter = permits.FixedWindowLimiter(1, 10, clock=clock, name="w")
    cancelling = where == "aiohttp-cancelling"
    options = {"handler_cancellation": True} if cancelling else None
    async with served(
        "aiohttp" if cancelling else where, limiter, serve_asgi, serve_aiohttp, server=options, max_queued=1
    ) as server:
        async with httpx.AsyncClient(base_url=server.url) as client:
            assert (await client.get("/hello")).status_code == 200
            leaving = asyncio.create_task(client.get("/hello"))
            await eventually(queued(limiter))
        leaving.cancel()  # closing the client closed the connection under it
        await eventually(lambda: limiter.statistics().current_queued_count == 0)
        async with httpx.AsyncClient(base_url=server.url) as client:
            waiting = asyncio.create_task(client.get("/hello"))
            await eventually(lambda: queued(limiter)() or waiting.done())
            assert not waiting.done()  # queued, not refused: the place was given back
            clock.advance(10)
            assert (await waiting).status_code == 200
    assert server.reasons == []
    assert server.calls == ["/hello", "/hello"]


async def post(url: str, body: bytes) -> asyncio.StreamReader:
    """A raw POST of ``body`` on a connection of its own, left open to read the answer."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /hello HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    reader.writer = writer  # type: ignore[attr-defined]  # (kept alive with the reader)
    return reader


async def status(reader: asyncio.StreamReader) -> int:
    line = await reader.readline()
    reader.writer.close()  # type: ignore[attr-defined]
    return int(line.split()[1])


@pytest.mark.timeout(120)
async def test_with_the_defaults_a_flood_of_waiting_uploads_is_bounded(
    clock: permits.ManualClock, serve_asgi: Any
) -> None:
    # The 2,000 queued uploads, with the defaults: 1000 wait, the next is refused at once,
    # and after 30 s on the limiter's clock every wait ends (before, all of them waited forever).
    limiter = permits.FixedWindowLimiter(1, 3600, clock=clock, name="uploads")  # an unbounded queue
    reasons: list[str | None] = []

    async def hello(request: Request) -> Response:
        return PlainTextResponse("hello")

    def seen(request: Any, lease: permits.Lease) -> None:
        reasons.append(lease.reason)

    inner = Starlette(routes=[Route("/hello", hello, methods=["POST"])])
    app = RateLimitMiddleware(inner, limiter, wait=True, on_rejected=seen)
    body = b"x" * 10 * 1024
    async with serve_asgi(app) as url:
        assert await status(await post(url, body)) == 200  # the window's only permit
        uploads = []
        for _ in range(1000):
            uploads.append(await post(url, body))
        await eventually(lambda: app.policy.waiting == 1000)
        assert await status(await post(url, body)) == 429
        assert reasons == ["queue_full"]
        assert limiter.statistics().current_queued_count == 1000
        clock.advance(30)
        assert await asyncio.gather(*(status(upload) for upload in uploads)) == [429] * 1000
    assert reasons == ["queue_full"] + ["timeout"] * 1000
    assert (app.policy.waiting, limiter.statistics().current_queued_count) == (0, 0)


async def test_metrics_count_a_timeout_and_a_full_queue_as_the_limiters_refusals(
    clock: permits.ManualClock, serve_asgi: Any, serve_aiohttp: Any
) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    limiter = permits.ConcurrencyLimiter(3, clock=clock, name="g")
    route = permits.ConcurrencyLimiter(1, clock=clock, name="r")
    held, held_route = limiter.acquire(3), route.acquire()

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    bounds = {"wait": True, "timeout": 5, "max_queued": 1}
    app = web.Application(middlewares=[rate_limit_middleware(limiter, metrics=registry, **bounds)])
    app.router.add_get("/hello", hello)
    app.router.add_get("/route", limit(route, **bounds)(hello))
    async with serve_aiohttp(app) as url, aiohttp.ClientSession() as session:

        async def get(path: str) -> int:
            async with session.get(url + path) as response:
                return response.status

        waiting = asyncio.create_task(get("/hello"))
        await eventually(queued(limiter))
        assert await get("/hello") == 429  # queue_full
        clock.advance(5)
        assert await waiting == 429  # timeout
        held.release()  # the route's requests pass the global limit, then wait in the route's
        waiting = asyncio.create_task(get("/route"))
        await eventually(queued(route))
        assert await get("/route") == 429  # the route's queue_full
        clock.advance(5)
        assert await waiting == 429  # the route's timeout
        held_route.release()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in registry.collect() for s in f.samples}

    def count(name: str, **labels: str) -> float | None:
        return samples.get((name, tuple(sorted(labels.items()))))

    assert count("permits_requests_total", limiter="g", result="global_limiter") == 2
    assert count("permits_requests_total", limiter="g", result="route_limiter") == 2
    # The limiter saw the timed-out wait end with "timeout" (not as a cancelled one), as a sync
    # server's wait is seen.
    assert count("permits_leases_total", limiter="g", result="timeout") == 1
    assert count("permits_queue_duration_seconds_count", limiter="g", result="timeout") == 1
    assert count("permits_queue_duration_seconds_count", limiter="g", result="cancelled") is None
