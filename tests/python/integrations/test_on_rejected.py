"""on_rejected under real uvicorn and aiohttp servers: a FastAPI route's response is what the
client gets, a broken callback gives the default rejection (logged), never a 500. The scenarios
of ASP.NET Core's RateLimitingMiddleware tests that apply here are ported at the end."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web
from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.requests import Request

import permits
from permits.aiohttp import rate_limit_middleware
from permits.asgi import RateLimitMiddleware
from permits.fastapi import RateLimit, RateLimitExceeded, rejection_handler


def _fastapi(route: RateLimit, global_limiter: Any = None, *, handler: bool = False, **middleware: Any) -> FastAPI:
    app = FastAPI()

    @app.get("/limited", dependencies=[Depends(route)])
    async def limited() -> dict[str, str]:
        return {"route": "limited"}

    if handler:
        app.add_exception_handler(RateLimitExceeded, rejection_handler)
    if global_limiter is not None:
        app.add_middleware(RateLimitMiddleware, limiter=global_limiter, **middleware)
    return app


def _custom(status: int, text: str) -> Any:
    def on_rejected(request: Request, lease: permits.Lease) -> PlainTextResponse:
        return PlainTextResponse(text, status_code=status)

    return on_rejected


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "permits" and r.levelno >= logging.WARNING]


@pytest.mark.parametrize("handler", [False, True])
async def test_with_the_middleware_the_routes_on_rejected_response_is_sent(
    handler: bool, serve_asgi, clock: permits.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    route = permits.FixedWindowLimiter(1, 60, clock=clock, name="route")
    app = _fastapi(RateLimit(route, on_rejected=_custom(503, "route says no")), permits.NoLimiter(), handler=handler)
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/limited")).status_code == 200
        rejected = await client.get("/limited")
    assert (rejected.status_code, rejected.text) == (503, "route says no")
    assert rejected.headers["retry-after"] == "60"
    assert rejected.headers.get_list("ratelimit") == ['"route";r=0;t=60']
    assert _warnings(caplog) == []


async def test_on_an_exempt_path_the_routes_on_rejected_response_is_sent_too(
    serve_asgi, clock: permits.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    route = permits.ConcurrencyLimiter(1, clock=clock, name="route")
    app = _fastapi(
        RateLimit(route, on_rejected=_custom(503, "route says no")),
        permits.FixedWindowLimiter(1, 60, clock=clock),
        exempt=["/limited"],
    )
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        held = route.acquire()  # the route's one permit, taken: every request is rejected
        rejected = await client.get("/limited")
        assert (rejected.status_code, rejected.text) == (503, "route says no")
        held.release()
        assert [(await client.get("/limited")).status_code for _ in range(3)] == [200, 200, 200]
        assert route.available_permits() == 1  # each request's permit came back
    assert _warnings(caplog) == []


async def test_without_middleware_or_handler_the_first_dropped_response_logs_a_warning(
    serve_asgi, clock: permits.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    route = permits.FixedWindowLimiter(1, 60, clock=clock)
    app = _fastapi(RateLimit(route, on_rejected=_custom(503, "dropped")))
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        answers = [await client.get("/limited") for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 429, 429]  # FastAPI's own answer
    assert answers[1].json() == {"detail": "Too Many Requests (limiter: default)"}
    (warning,) = _warnings(caplog)
    assert "rejection_handler" in warning.getMessage() and "RateLimitMiddleware" in warning.getMessage()


async def test_with_the_handler_alone_nothing_is_logged(
    serve_asgi, clock: permits.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    route = permits.FixedWindowLimiter(1, 60, clock=clock)
    app = _fastapi(RateLimit(route, on_rejected=_custom(503, "handled")), handler=True)
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert [(await client.get("/limited")).text for _ in range(2)][1] == "handled"
    assert _warnings(caplog) == []


# ---- an on_rejected that returns something else, or raises: the default rejection, logged ----
def _returns_a_dict(request: Any, lease: permits.Lease) -> Any:
    return {"error": "slow down"}


async def _raises(request: Any, lease: permits.Lease) -> Any:
    raise RuntimeError("broken callback")


BROKEN = [_returns_a_dict, _raises]


def _assert_default_rejection(status: int, headers: Any, text: str) -> None:
    assert (status, text) == (429, "Too Many Requests (limiter: default)")
    assert headers["Retry-After"] == "60"
    assert headers["RateLimit"] == '"default";r=0;t=60'


@pytest.mark.parametrize("broken", BROKEN)
async def test_a_broken_on_rejected_in_the_asgi_middleware(
    broken: Any, serve_asgi, clock: permits.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    app = _fastapi(RateLimit(permits.NoLimiter()), permits.FixedWindowLimiter(1, 60, clock=clock), on_rejected=broken)
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.get("/limited")
        rejected = await client.get("/limited")
    _assert_default_rejection(rejected.status_code, rejected.headers, rejected.text)
    assert len(_warnings(caplog)) == 1


@pytest.mark.parametrize("broken", BROKEN)
@pytest.mark.parametrize("handler", [False, True])
async def test_a_broken_on_rejected_in_the_fastapi_dependency(
    broken: Any, handler: bool, serve_asgi, clock: permits.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    route = permits.FixedWindowLimiter(1, 60, clock=clock)
    app = _fastapi(RateLimit(route, on_rejected=broken), permits.NoLimiter(), handler=handler)
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.get("/limited")
        rejected = await client.get("/limited")
    assert rejected.status_code == 429
    assert rejected.headers["Retry-After"] == "60"
    assert rejected.headers["RateLimit"] == '"default";r=0;t=60'
    assert len(_warnings(caplog)) == 1


@pytest.mark.parametrize("broken", BROKEN)
async def test_a_broken_on_rejected_in_aiohttp(
    broken: Any, serve_aiohttp, clock: permits.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    limiter = permits.FixedWindowLimiter(1, 60, clock=clock)
    app = web.Application(middlewares=[rate_limit_middleware(limiter, on_rejected=broken)])
    app.router.add_get("/", hello)
    async with serve_aiohttp(app) as url, aiohttp.ClientSession() as session:
        await (await session.get(url + "/")).read()
        async with session.get(url + "/") as response:
            _assert_default_rejection(response.status, response.headers, await response.text())
    assert len(_warnings(caplog)) == 1


# ---- ASP.NET Core's RateLimitingMiddlewareTests, where they apply (a FastAPI route's limit is
# an endpoint policy; the middleware is the global limiter) ----
def _on_rejected_recording(seen: list[str], name: str, status: int) -> Any:
    def on_rejected(request: Request, lease: permits.Lease) -> JSONResponse:
        seen.append(name)
        return JSONResponse({"by": name}, status_code=status)

    return on_rejected


async def _second_answer(serve_asgi: Any, app: FastAPI, path: str = "/limited") -> httpx.Response:
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.get(path)  # takes the one permit of each limiter that has one
        return await client.get(path)


async def test_requests_call_next_if_accepted(serve_asgi) -> None:
    app = _fastapi(RateLimit(permits.NoLimiter()), permits.NoLimiter())
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/limited")).json() == {"route": "limited"}


async def test_request_rejected_on_rejected_wins_over_the_default_status(serve_asgi, clock) -> None:
    seen: list[str] = []
    on_rejected = _on_rejected_recording(seen, "global", 503)
    app = _fastapi(
        RateLimit(permits.NoLimiter()), permits.FixedWindowLimiter(1, 60, clock=clock), on_rejected=on_rejected
    )
    answer = await _second_answer(serve_asgi, app)
    assert (answer.status_code, seen) == (503, ["global"])


@pytest.mark.parametrize(
    ("global_allows", "route_allows", "winner", "status"),
    [
        (True, False, "route", 404),  # GlobalAndEndpoint_EndpointRejects_EndpointWins
        (False, True, "global", 429),  # GlobalAndEndpoint_GlobalRejects_GlobalWins
        (False, False, "global", 429),  # GlobalAndEndpoint_BothReject_GlobalWins
    ],
)
async def test_global_and_endpoint_the_rejecting_limiters_on_rejected_fires(
    global_allows: bool, route_allows: bool, winner: str, status: int, serve_asgi, clock: permits.ManualClock
) -> None:
    seen: list[str] = []
    route_limiter = permits.NoLimiter() if route_allows else permits.FixedWindowLimiter(1, 60, clock=clock)
    global_limiter = permits.NoLimiter() if global_allows else permits.FixedWindowLimiter(1, 60, clock=clock)
    route = RateLimit(route_limiter, on_rejected=_on_rejected_recording(seen, "route", 404))
    app = _fastapi(route, global_limiter, on_rejected=_on_rejected_recording(seen, "global", 429))
    answer = await _second_answer(serve_asgi, app)
    assert (answer.status_code, answer.json(), seen) == (status, {"by": winner}, [winner])


async def test_endpoint_limiters_with_the_same_partition_key_do_not_collide(
    serve_asgi, clock: permits.ManualClock
) -> None:
    # EndpointLimiter_DuplicatePartitionKey_NoCollision: two routes, each its own per-key limit,
    # the same key: each route's limit is its own.
    app = FastAPI()
    for path in ("/one", "/two"):
        own = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(1, 60), clock=clock)
        app.add_api_route(path, lambda: {"ok": True}, dependencies=[Depends(RateLimit(own, key=lambda r: "same"))])
    app.add_middleware(RateLimitMiddleware, limiter=permits.NoLimiter())
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert [(await client.get(p)).status_code for p in ("/one", "/two", "/one", "/two")] == [200, 200, 429, 429]


# ---- which limit refused: metadata["limiter"] tells a per-key limit from the global one ----
async def test_one_on_rejected_tells_the_per_key_limit_from_the_global_one(
    serve_asgi, clock: permits.ManualClock
) -> None:
    per_user = permits.PartitionedLimiter.per_key("1/minute", clock=clock, name="per-user")
    everyone = permits.FixedWindowLimiter(2, 60, clock=clock, name="global")

    def on_rejected(request: Request, lease: permits.Lease) -> PlainTextResponse:
        if lease.metadata["limiter"] == "per-user":
            return PlainTextResponse("you, slow down", status_code=429)
        return PlainTextResponse("everyone, slow down", status_code=503)

    app = FastAPI()

    @app.get("/")
    async def root() -> dict[str, str]:
        return {}

    app.add_middleware(
        RateLimitMiddleware,
        limiter=permits.chain(per_user, everyone),
        key=lambda request: request.headers["x-user"],
        on_rejected=on_rejected,
    )
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        answers = [await client.get("/", headers={"x-user": user}) for user in ("a", "a", "b", "c")]
    assert [(r.status_code, r.text) for r in answers[1:]] == [
        (429, "you, slow down"),
        (200, "{}"),
        (503, "everyone, slow down"),
    ]


async def test_the_default_rejection_names_the_limit_that_refused(serve_asgi, clock: permits.ManualClock) -> None:
    per_user = permits.PartitionedLimiter.per_key("1/minute", clock=clock, name="per-user")
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=per_user, key=lambda request: "k")
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.get("/")
        rejected = await client.get("/")
    assert (rejected.status_code, rejected.text) == (429, "Too Many Requests (limiter: per-user)")
