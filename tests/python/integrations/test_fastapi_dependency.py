"""permits.fastapi.RateLimit: a route's limit as a dependency, with and without the global
middleware, under a real uvicorn server and httpx client; time on a ManualClock."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import websockets
from fastapi import APIRouter, Depends, FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, StreamingResponse

import permits
from permits import keys
from permits.asgi import RateLimitMiddleware
from permits.fastapi import RateLimit, RateLimitExceeded, rejection_handler

from _integration import eventually


def make_app(route_limit: RateLimit, global_limiter: Any = None, **middleware: Any) -> FastAPI:
    app = FastAPI()
    feed: asyncio.Queue[bytes | None] = asyncio.Queue()
    app.state.feed = feed

    @app.get("/free")
    async def free() -> dict[str, str]:
        return {"route": "free"}

    @app.get("/limited", dependencies=[Depends(route_limit)])
    async def limited() -> dict[str, str]:
        return {"route": "limited"}

    @app.get("/lease")
    async def lease(held: permits.Lease = Depends(route_limit)) -> dict[str, bool]:  # noqa: B008 (FastAPI's way)
        return {"acquired": held.acquired}

    @app.get("/stream", dependencies=[Depends(route_limit)])
    async def stream() -> StreamingResponse:
        async def chunks():  # type: ignore[no-untyped-def]
            while (chunk := await feed.get()) is not None:
                yield chunk

        return StreamingResponse(chunks())

    router = APIRouter(prefix="/group", dependencies=[Depends(route_limit)])

    @router.get("/one")
    async def one() -> dict[str, int]:
        return {"n": 1}

    app.include_router(router)
    if global_limiter is not None:
        app.add_middleware(RateLimitMiddleware, limiter=global_limiter, **middleware)
    return app


async def test_a_route_rejection_counts_against_the_global_limit(serve_asgi, clock: permits.ManualClock) -> None:
    global_limiter = permits.TokenBucketLimiter(5, 1, 60, clock=clock, name="global")
    route = permits.FixedWindowLimiter(1, 60, clock=clock, name="route")
    app = make_app(RateLimit(route), global_limiter)
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/limited")).status_code == 200
        assert global_limiter.available_permits() == 4
        for left in (3, 2, 1):
            rejected = await client.get("/limited")
            assert rejected.status_code == 429
            assert rejected.json() == {"detail": "Too Many Requests (limiter: route)"}  # as every integration's
            assert rejected.headers["retry-after"] == "60"
            assert rejected.headers["ratelimit"] == '"route";r=0;t=60'
            assert global_limiter.available_permits() == left  # the route's 429 kept its global permit
        assert (await client.get("/free")).status_code == 200
        assert global_limiter.available_permits() == 0
        assert (await client.get("/limited")).headers["ratelimit"] == '"global";r=0;t=60'  # the global 429
    assert route.statistics().total_failed_leases == 3  # the last one never reached the route


async def test_a_flood_of_route_rejections_stops_at_the_global_limit(serve_asgi, clock: permits.ManualClock) -> None:
    # A per-client global limit of 5: a flood on a route-limited path reaches the route (and its
    # expensive dependency) at most 5 times, not once per request.
    per_client = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(5, 60), clock=clock)
    route = permits.FixedWindowLimiter(1, 60, clock=clock, name="route")
    ran: list[int] = []

    async def expensive() -> None:
        ran.append(1)

    app = FastAPI()

    @app.get("/search", dependencies=[Depends(expensive), Depends(RateLimit(route))])
    async def search() -> dict[str, bool]:
        return {"ok": True}

    app.add_middleware(RateLimitMiddleware, limiter=per_client)
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        statuses = [(await client.get("/search")).status_code for _ in range(64)]
    assert statuses.count(200) == 1
    assert per_client.statistics("127.0.0.1").total_successful_leases == 5
    assert per_client.statistics("127.0.0.1").total_failed_leases == 59
    assert route.statistics().total_failed_leases == 4
    assert len(ran) == 5


async def test_a_route_rejection_gives_a_global_concurrency_permit_back_once_sent(
    serve_asgi, clock: permits.ManualClock
) -> None:
    global_limiter = permits.ConcurrencyLimiter(1, clock=clock)
    route = permits.FixedWindowLimiter(1, 60, clock=clock, name="route")
    async with serve_asgi(make_app(RateLimit(route), global_limiter)) as url, httpx.AsyncClient(base_url=url) as client:
        assert [(await client.get("/limited")).status_code for _ in range(3)] == [200, 429, 429]
        await eventually(lambda: global_limiter.available_permits() == 1)
    assert global_limiter.statistics().total_successful_leases == 3


async def test_the_headers_are_those_of_the_limiter_with_fewer_left(serve_asgi, clock: permits.ManualClock) -> None:
    global_limiter = permits.FixedWindowLimiter(3, 60, clock=clock, name="global")
    route = permits.FixedWindowLimiter(10, 60, clock=clock, name="route")
    app = make_app(RateLimit(route), global_limiter)
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        first = await client.get("/limited")  # global 2 left, route 9
        assert first.headers["ratelimit"] == '"global";r=2;t=60'
        assert first.headers["ratelimit-policy"] == '"global";q=3;w=60'
        assert (await client.get("/free")).headers["ratelimit"] == '"global";r=1;t=60'
    global_limiter = permits.FixedWindowLimiter(30, 60, clock=clock, name="global")
    app = make_app(RateLimit(route), global_limiter)
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        response = await client.get("/limited")  # global 29 left, route 8
        assert response.headers["ratelimit"] == '"route";r=8;t=60'
        assert response.headers.get_list("ratelimit") == ['"route";r=8;t=60']  # once, not twice


async def test_without_the_middleware_the_dependency_writes_its_headers(serve_asgi, clock: permits.ManualClock) -> None:
    route = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(2, 30), clock=clock, name="r")
    app = make_app(RateLimit(route, key=keys.header("x-user")))
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        codes = []
        for user in ("a", "a", "a", "b"):
            response = await client.get("/limited", headers={"x-user": user})
            codes.append((response.status_code, response.headers["ratelimit"]))
        assert codes == [(200, '"r";r=1;t=30'), (200, '"r";r=0;t=30'), (429, '"r";r=0;t=30'), (200, '"r";r=1;t=30')]
        assert (await client.get("/free")).headers.get("ratelimit") is None


async def test_the_dependency_yields_the_lease(serve_asgi, clock: permits.ManualClock) -> None:
    app = make_app(RateLimit(permits.ConcurrencyLimiter(1, clock=clock)))
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/lease")).json() == {"acquired": True}


async def test_router_dependencies_and_exempt_paths(serve_asgi, clock: permits.ManualClock) -> None:
    global_limiter = permits.FixedWindowLimiter(100, 60, clock=clock)
    route = permits.FixedWindowLimiter(1, 60, clock=clock)
    app = make_app(RateLimit(route), global_limiter, exempt=["/group"])
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        # The global limiter skips /group; the router's own dependency still applies.
        assert [(await client.get("/group/one")).status_code for _ in "ab"] == [200, 429]
        assert global_limiter.available_permits() == 100


async def test_a_concurrency_lease_is_held_until_the_stream_is_sent(serve_asgi, clock: permits.ManualClock) -> None:
    for with_middleware in (False, True):
        route = permits.ConcurrencyLimiter(1, clock=clock)
        global_limiter = permits.ConcurrencyLimiter(10, clock=clock) if with_middleware else None
        app = make_app(RateLimit(route), global_limiter)
        async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
            async with client.stream("GET", "/stream") as streaming:
                app.state.feed.put_nowait(b"x")
                chunks = streaming.aiter_bytes()
                assert await anext(chunks) == b"x"
                assert route.available_permits() == 0
                rejected = await client.get("/limited")
                assert rejected.status_code == 429
                app.state.feed.put_nowait(None)
                assert [c async for c in chunks] == []
            await eventually(lambda route=route: route.available_permits() == 1)
            if global_limiter is not None:
                await eventually(lambda g=global_limiter: g.available_permits() == 10)


async def test_an_endpoint_exception_releases_the_route_lease(serve_asgi, clock: permits.ManualClock) -> None:
    route = permits.ConcurrencyLimiter(1, clock=clock)
    app = FastAPI()

    @app.get("/boom", dependencies=[Depends(RateLimit(route))])
    async def boom() -> None:
        raise RuntimeError("boom")

    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/boom")).status_code == 500
        assert route.available_permits() == 1


async def test_on_rejected_sync_and_async_with_the_rejection_handler(serve_asgi, clock: permits.ManualClock) -> None:
    def sync(request: Request, lease: permits.Lease) -> JSONResponse:
        return JSONResponse({"retry_in": lease.retry_after}, status_code=429)

    async def async_(request: Request, lease: permits.Lease) -> None:
        return None

    for on_rejected, body in ((sync, {"retry_in": 60.0}), (async_, None)):
        route = permits.FixedWindowLimiter(1, 60, clock=clock)
        app = make_app(RateLimit(route, on_rejected=on_rejected, status_code=503))
        app.add_exception_handler(RateLimitExceeded, rejection_handler)
        async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
            await client.get("/limited")
            response = await client.get("/limited")
            assert response.headers["retry-after"] == "60"
            if body is None:
                assert (response.status_code, response.text) == (503, "Too Many Requests (limiter: default)")
            else:
                assert (response.status_code, response.json()) == (429, body)


async def test_a_queued_route_request_is_granted_and_one_that_leaves_is_dropped(
    serve_asgi, clock: permits.ManualClock
) -> None:
    route = permits.FixedWindowLimiter(1, 1, queue_limit=2, clock=clock)
    app = make_app(RateLimit(route, wait=True))
    async with serve_asgi(app) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/limited")).status_code == 200
            waiting = asyncio.create_task(client.get("/limited"))
            await eventually(lambda: route.statistics().current_queued_count == 1)
            clock.advance_ns(10**9)
            assert (await waiting).status_code == 200
        async with httpx.AsyncClient(base_url=url) as client:
            leaving = asyncio.create_task(client.get("/limited"))
            await eventually(lambda: route.statistics().current_queued_count == 1)
        leaving.cancel()
        await eventually(lambda: route.statistics().current_queued_count == 0)
        clock.advance_ns(10**9)
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/limited")).status_code == 200  # nobody took the permit


async def test_a_rejection_by_one_of_stacked_limits_refunds_the_others(serve_asgi, clock: permits.ManualClock) -> None:
    wide = permits.TokenBucketLimiter(5, 1, 60, clock=clock, name="wide")
    narrow = permits.FixedWindowLimiter(1, 60, clock=clock, name="narrow")
    global_limiter = permits.TokenBucketLimiter(9, 1, 60, clock=clock)
    for installed in (None, global_limiter):
        app = FastAPI()

        @app.get("/both", dependencies=[Depends(RateLimit(wide)), Depends(RateLimit(narrow))])
        async def both() -> dict[str, bool]:
            return {"ok": True}

        if installed is not None:
            app.add_middleware(RateLimitMiddleware, limiter=installed)
        async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
            assert [(await client.get("/both")).status_code for _ in range(3)] == [200, 429, 429]
        assert wide.available_permits() == 4  # only the granted request took one
        wide = permits.TokenBucketLimiter(5, 1, 60, clock=clock, name="wide")
        narrow = permits.FixedWindowLimiter(1, 60, clock=clock, name="narrow")
    assert global_limiter.available_permits() == 6  # every request, rejected by the route or not


async def test_a_queued_request_keeps_its_body(serve_asgi, clock: permits.ManualClock) -> None:
    route = permits.FixedWindowLimiter(1, 1, queue_limit=1, clock=clock)
    app = FastAPI()

    @app.post("/echo", dependencies=[Depends(RateLimit(route, wait=True))])
    async def echo(item: dict[str, int]) -> dict[str, int]:
        return item

    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.post("/echo", json={"n": 1})).json() == {"n": 1}
        queued = asyncio.create_task(client.post("/echo", json={"n": 2}))
        await eventually(lambda: route.statistics().current_queued_count == 1)
        clock.advance_ns(10**9)
        assert (await queued).json() == {"n": 2}


async def test_a_websocket_route_rejected_is_closed_1013(serve_asgi, clock: permits.ManualClock) -> None:
    route = permits.ConcurrencyLimiter(1, clock=clock)
    app = FastAPI()

    @app.websocket("/ws", dependencies=[Depends(RateLimit(route))])
    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        async for text in websocket.iter_text():
            await websocket.send_text(text)

    async with serve_asgi(app) as url:
        ws_url = url.replace("http", "ws") + "/ws"
        async with websockets.connect(ws_url) as ws:
            await ws.send("ping")
            assert await ws.recv() == "ping"
            assert route.available_permits() == 0
            with pytest.raises(websockets.InvalidStatus):  # closed before accept: uvicorn answers 403
                await websockets.connect(ws_url)
        await eventually(lambda: route.available_permits() == 1)


async def test_an_endpoint_that_builds_its_response_gets_the_headers_from_the_middleware(
    serve_asgi, clock: permits.ManualClock
) -> None:
    route = permits.FixedWindowLimiter(5, 60, clock=clock, name="route")
    for installed in (False, True):
        app = FastAPI()

        @app.get("/own", dependencies=[Depends(RateLimit(route))])
        async def own() -> JSONResponse:
            return JSONResponse({"own": True})

        if installed:
            app.add_middleware(RateLimitMiddleware, limiter=permits.FixedWindowLimiter(100, 60, clock=clock))
        async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
            response = await client.get("/own")
        # FastAPI drops the injected Response's headers when the endpoint returns its own.
        assert response.headers.get("ratelimit") == ('"route";r=3;t=60' if installed else None)
