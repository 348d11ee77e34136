"""permits.aiohttp.rate_limit_middleware and @limit under aiohttp's own server, driven by real
aiohttp clients; time on a ManualClock."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from typing import Any

import aiohttp
import pytest
from aiohttp import web

import permits
from permits import keys
from permits.aiohttp import limit, rate_limit_middleware

from _integration import DOT_SEGMENT_PATHS, eventually, raw_status

FEED = web.AppKey("feed", asyncio.Queue)
CALLS = web.AppKey("calls", list)


def make_app(
    global_limiter: Any = None, route_limiter: Any = None, middleware: Any = None, route: Any = None
) -> web.Application:
    middlewares = [] if global_limiter is None else [rate_limit_middleware(global_limiter, **(middleware or {}))]
    app = web.Application(middlewares=middlewares)
    feed: asyncio.Queue[bytes | None] = asyncio.Queue()
    calls: list[str] = []
    app[FEED], app[CALLS] = feed, calls
    decorate = (lambda handler: handler) if route_limiter is None else limit(route_limiter, **(route or {}))

    async def hello(request: web.Request) -> web.Response:
        calls.append(request.headers.get("x-order", request.path))
        return web.Response(text="hello")

    @decorate
    async def limited(request: web.Request) -> web.Response:
        return web.Response(text="limited")

    async def boom(request: web.Request) -> web.Response:
        raise RuntimeError("boom")

    async def missing(request: web.Request) -> web.Response:
        raise web.HTTPNotFound()

    @decorate
    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        while (chunk := await feed.get()) is not None:
            await response.write(chunk)
        await response.write_eof()
        return response

    async def ws(request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        async for message in socket:
            await socket.send_str(message.data)
        return socket

    app.router.add_get("/hello", hello)
    app.router.add_get("/health", hello)
    app.router.add_get("/health/live", hello)
    app.router.add_get("/healthz", hello)
    app.router.add_get("/limited", limited)
    app.router.add_get("/boom", boom)
    app.router.add_get("/missing", missing)
    app.router.add_get("/stream", stream)
    app.router.add_get("/ws", ws)
    return app


def rate_headers(response: aiohttp.ClientResponse) -> dict[str, str]:
    return {
        k.lower(): v
        for k, v in response.headers.items()
        if k.lower() in ("ratelimit", "ratelimit-policy", "retry-after")
    }


async def codes(session: aiohttp.ClientSession, url: str, *paths: str, **kw: Any) -> list[int]:
    found = []
    for path in paths:
        async with session.get(url + path, **kw) as response:
            await response.read()
            found.append(response.status)
    return found


async def test_exact_sequence_per_key_and_headers(serve_aiohttp, clock: permits.ManualClock) -> None:
    limiter = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(2, 10), clock=clock, name="api")
    app = make_app(limiter, middleware={"key": keys.header("x-client")})
    async with serve_aiohttp(app) as url, aiohttp.ClientSession() as session:
        a, b = {"headers": {"x-client": "a"}}, {"headers": {"x-client": "b"}}
        assert await codes(session, url, "/hello", "/hello", "/hello", **a) == [200, 200, 429]
        assert await codes(session, url, "/hello", **b) == [200]
        async with session.get(url + "/hello", **a) as response:
            assert rate_headers(response) == {
                "ratelimit-policy": '"api";q=2;w=10', "ratelimit": '"api";r=0;t=10', "retry-after": "10"
            }  # fmt: skip
        clock.advance_ns(10 * 10**9)
        assert await codes(session, url, "/hello", **a) == [200]
    assert limiter.statistics(("x-client", "a")).total_failed_leases == 2


async def test_an_aiohttp_http_error_gets_the_headers_and_exempt_paths(
    serve_aiohttp, clock: permits.ManualClock
) -> None:
    limiter = permits.FixedWindowLimiter(3, 10, clock=clock)
    app = make_app(limiter, middleware={"exempt": ["/health"]})
    async with serve_aiohttp(app) as url, aiohttp.ClientSession() as session:
        async with session.get(url + "/missing") as response:
            assert response.status == 404
            assert response.headers["RateLimit"] == '"default";r=2;t=10'
        assert await codes(session, url, "/health", "/health/live", "/hello", "/hello", "/healthz") == [
            200, 200, 200, 200, 429
        ]  # fmt: skip


@pytest.mark.parametrize("path", DOT_SEGMENT_PATHS)
async def test_a_dot_segment_in_any_spelling_is_never_exempt(
    path: str, serve_aiohttp, clock: permits.ManualClock
) -> None:
    limiter = permits.FixedWindowLimiter(1, 10, clock=clock)
    async with serve_aiohttp(make_app(limiter, middleware={"exempt": ["/health"]})) as url:
        loop = asyncio.get_running_loop()
        statuses = [
            await loop.run_in_executor(None, raw_status, url, p) for p in ("/hello", "/health", path, "/health/live")
        ]
    assert statuses == [200, 200, 429, 200]  # limited: not the exempt /health's way past the limit


async def test_a_route_rejection_counts_against_the_global_limit(serve_aiohttp, clock: permits.ManualClock) -> None:
    global_limiter = permits.TokenBucketLimiter(5, 1, 60, clock=clock, name="global")
    route = permits.FixedWindowLimiter(1, 60, clock=clock, name="route")
    app = make_app(global_limiter, route)
    async with serve_aiohttp(app) as url, aiohttp.ClientSession() as session:
        async with session.get(url + "/limited") as response:
            assert response.headers["RateLimit"] == '"route";r=0;t=60'  # fewer left than global's 4
        assert global_limiter.available_permits() == 4
        assert await codes(session, url, "/limited", "/limited") == [429, 429]
        assert global_limiter.available_permits() == 2  # the route's 429s kept their global permits
        assert await codes(session, url, "/hello") == [200]
        assert global_limiter.available_permits() == 1


async def test_the_decorator_alone(serve_aiohttp, clock: permits.ManualClock) -> None:
    route = permits.FixedWindowLimiter(1, 60, clock=clock, name="route")
    async with serve_aiohttp(make_app(route_limiter=route)) as url, aiohttp.ClientSession() as session:
        async with session.get(url + "/limited") as response:
            assert rate_headers(response) == {"ratelimit-policy": '"route";q=1;w=60', "ratelimit": '"route";r=0;t=60'}
        async with session.get(url + "/limited") as response:
            assert (response.status, response.headers["Retry-After"]) == (429, "60")


@pytest.mark.parametrize("with_middleware", [False, True])
async def test_a_stream_response_holds_its_concurrency_permit(
    serve_aiohttp, clock: permits.ManualClock, with_middleware: bool
) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    app = make_app(limiter) if with_middleware else make_app(route_limiter=limiter)
    async with serve_aiohttp(app) as url, aiohttp.ClientSession() as session:
        async with session.get(url + "/stream") as streaming:
            app[FEED].put_nowait(b"one")
            assert await streaming.content.readexactly(3) == b"one"
            assert limiter.available_permits() == 0
            assert await codes(session, url, "/limited" if not with_middleware else "/hello") == [429]
            app[FEED].put_nowait(None)
            assert await streaming.read() == b""
        await eventually(lambda: limiter.available_permits() == 1)


async def test_a_websocket_holds_its_permit_until_closed(serve_aiohttp, clock: permits.ManualClock) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    async with serve_aiohttp(make_app(limiter)) as url, aiohttp.ClientSession() as session:
        async with session.ws_connect(url + "/ws") as socket:
            await socket.send_str("ping")
            assert (await socket.receive()).data == "ping"
            assert limiter.available_permits() == 0
            with pytest.raises(aiohttp.WSServerHandshakeError) as denied:
                await session.ws_connect(url + "/ws")
            assert denied.value.status == 429
        await eventually(lambda: limiter.available_permits() == 1)


async def test_exceptions_give_a_500_and_the_permit_back(serve_aiohttp, clock: permits.ManualClock) -> None:
    limiter = permits.PartitionedLimiter.per_key(permits.specs.Concurrency(1), clock=clock)

    def key(request: web.Request) -> str:
        if "x-bad" in request.headers:
            raise ValueError("no key")
        return "k"

    app = make_app(limiter, middleware={"key": key})
    async with serve_aiohttp(app) as url, aiohttp.ClientSession() as session:
        assert await codes(session, url, "/boom") == [500]
        assert limiter.available_permits("k") == 1
        assert await codes(session, url, "/hello", headers={"x-bad": "1"}) == [500]
        assert limiter.statistics("k").total_successful_leases == 1
        assert await codes(session, url, "/hello") == [200]
        assert limiter.available_permits("k") == 1


async def test_on_rejected_sync_and_async(serve_aiohttp, clock: permits.ManualClock) -> None:
    def sync(request: web.Request, lease: permits.Lease) -> web.Response:
        return web.json_response({"retry_in": lease.retry_after}, status=429)

    async def async_(request: web.Request, lease: permits.Lease) -> None:
        return None

    for on_rejected, expected in ((sync, '{"retry_in": 60.0}'), (async_, "Too Many Requests (limiter: default)")):
        limiter = permits.FixedWindowLimiter(1, 60, clock=clock)
        app = make_app(limiter, middleware={"on_rejected": on_rejected, "status_code": 503})
        async with serve_aiohttp(app) as url, aiohttp.ClientSession() as session:
            await codes(session, url, "/hello")
            async with session.get(url + "/hello") as response:
                status = 429 if on_rejected is sync else 503
                assert (response.status, await response.text()) == (status, expected)
                assert response.headers["Retry-After"] == "60"


async def test_queued_in_order_and_a_client_that_leaves(serve_aiohttp, clock: permits.ManualClock) -> None:
    limiter = permits.FixedWindowLimiter(1, 1, queue_limit=3, clock=clock)
    app = make_app(limiter, middleware={"wait": True})
    async with serve_aiohttp(app) as url:
        async with aiohttp.ClientSession() as session:
            assert await codes(session, url, "/hello", headers={"x-order": "0"}) == [200]
            tasks = []
            for i in (1, 2):
                tasks.append(asyncio.create_task(codes(session, url, "/hello", headers={"x-order": str(i)})))
                await eventually(lambda i=i: limiter.statistics().current_queued_count == i)
            for n in (1, 2):
                clock.advance_ns(10**9)
                await eventually(lambda n=n: len(app[CALLS]) == n + 1)
            assert await asyncio.gather(*tasks) == [[200], [200]]
        assert app[CALLS] == ["0", "1", "2"]
        async with aiohttp.ClientSession() as session:
            leaving = asyncio.create_task(codes(session, url, "/hello"))
            await eventually(lambda: limiter.statistics().current_queued_count == 1)
        leaving.cancel()
        await eventually(lambda: limiter.statistics().current_queued_count == 0)
        clock.advance_ns(10**9)
        async with aiohttp.ClientSession() as session:
            assert await codes(session, url, "/hello") == [200]  # the permit went to nobody else
        assert app[CALLS] == ["0", "1", "2", "/hello"]


async def test_a_rejection_by_one_of_stacked_limits_refunds_the_others(
    serve_aiohttp, clock: permits.ManualClock
) -> None:
    wide = permits.TokenBucketLimiter(5, 1, 60, clock=clock, name="wide")
    narrow = permits.FixedWindowLimiter(1, 60, clock=clock, name="narrow")

    @limit(wide)
    @limit(narrow)
    async def both(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/both", both)
    async with serve_aiohttp(app) as url, aiohttp.ClientSession() as session:
        assert await codes(session, url, "/both", "/both", "/both") == [200, 429, 429]
    assert wide.available_permits() == 4


#: A response body larger than what loopback's socket buffers hold: its sending is still under way
#: when the client resets the connection.
LARGE = 32 * 1024 * 1024


@pytest.mark.parametrize("where", ["plain", "middleware", "limit"])
async def test_a_client_that_resets_mid_body_is_no_error(
    where: str, serve_aiohttp, clock: permits.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    # (Before: "Error handling request" with a traceback, and a 500 in the access log, 5 of 5 with
    # the middleware or @limit; never for the plain app, whose sending aiohttp does itself.)
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    answers: list[object] = []  # what the application answered aiohttp: a status, or an exception

    @web.middleware
    async def observe(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            response = await handler(request)
        except Exception as exc:
            answers.append(type(exc).__name__)  # (aiohttp logs it, and sends a 500 if it still can)
            raise
        answers.append(response.status)
        return response

    async def large(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * LARGE)

    middlewares = [observe, rate_limit_middleware(limiter)] if where == "middleware" else [observe]
    app = web.Application(middlewares=middlewares)
    app.router.add_get("/large", limit(limiter)(large) if where == "limit" else large)
    caplog.set_level(logging.ERROR)
    async with serve_aiohttp(app) as url:
        host, port = url.removeprefix("http://").split(":")
        for n in range(1, 4):
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"GET /large HTTP/1.1\r\nHost: t\r\n\r\n")
            assert (await reader.readexactly(12)) == b"HTTP/1.1 200"
            await reader.readexactly(64 * 1024)  # mid-body
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()  # a reset (RST), not a close
            await eventually(lambda n=n: len(answers) == n)
    assert answers == [200] * 3
    assert limiter.available_permits() == 1
    assert [record.getMessage() for record in caplog.records] == []


async def test_exempt_paths_of_a_sub_applications_middleware_are_the_ones_it_routes_on(
    serve_aiohttp, clock: permits.ManualClock
) -> None:
    # The middleware of a sub-application mounted at /api (and of one mounted below it, at
    # /api/v1) exempts paths as its routes are written; the root's middleware sees the full path.
    # (Before, "/health" exempted nothing in a sub-application: /api/health never matched it.)
    def limited_app(limiter: Any, exempt: list[str]) -> web.Application:
        app = web.Application(middlewares=[rate_limit_middleware(limiter, exempt=exempt)])
        app.router.add_get("/health", _hello)
        app.router.add_get("/hello", _hello)
        return app

    root_limiter = permits.FixedWindowLimiter(1, 60, clock=clock, name="root")
    api_limiter = permits.FixedWindowLimiter(1, 60, clock=clock, name="api")
    v1_limiter = permits.FixedWindowLimiter(1, 60, clock=clock, name="v1")
    root = limited_app(root_limiter, ["/api/health", "/api/v1/health"])
    api = limited_app(api_limiter, ["/health", "/v1/health"])
    v1 = limited_app(v1_limiter, ["/health"])
    api.add_subapp("/v1", v1)
    root.add_subapp("/api", api)
    async with serve_aiohttp(root) as url, aiohttp.ClientSession() as session:
        assert await codes(session, url, *["/api/health"] * 3, *["/api/v1/health"] * 3) == [200] * 6
        assert await codes(session, url, "/api/hello", "/api/hello") == [200, 429]  # refused by api's
        assert api_limiter.available_permits() == 0
        assert v1_limiter.available_permits() == 1
        assert root_limiter.available_permits() == 0  # /api/hello's
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, raw_status, url, "/api/health/../hello") == 429  # (never exempt)


async def _hello(request: web.Request) -> web.Response:
    return web.Response(text="hello")
