"""metrics= of the middlewares: requests counted by result on real servers (uvicorn, werkzeug,
waitress), scraped from a real exposition."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from _scrape import exposition, scrape, value

import permits

from _integration import raw_request, require, serve_wsgi, until
from _support import need


@contextlib.asynccontextmanager
async def uvicorn_serving(app: Any) -> AsyncIterator[str]:
    uvicorn = require("uvicorn")
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="critical", lifespan="off")
    config.load()
    server = uvicorn.Server(config)
    server.lifespan = config.lifespan_class(config)  # (startup() without serve(): as serve() sets it)
    await server.startup()
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        for listening in server.servers:
            listening.close()
        for connection in list(server.server_state.connections):
            connection.shutdown()
        for listening in server.servers:
            await listening.wait_closed()


async def test_asgi_requests_by_result_on_uvicorn() -> None:
    require("starlette")
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from permits.asgi import RateLimitMiddleware

    registry = need("prometheus_client").CollectorRegistry()
    clock = permits.ManualClock()

    async def hello(request: Any) -> PlainTextResponse:
        return PlainTextResponse("hi")

    app = Starlette(routes=[Route("/", hello)])
    limiter = permits.TokenBucketLimiter(2, 1, 1.0, clock=clock, name="global")
    app.add_middleware(RateLimitMiddleware, limiter=limiter, metrics=registry)
    async with uvicorn_serving(app) as base, httpx.AsyncClient(base_url=base) as client:
        codes = [(await client.get("/")).status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    with exposition(registry) as url:
        samples = scrape(url)
    assert value(samples, "permits_requests_total", limiter="global", result="acquired") == 2
    assert value(samples, "permits_requests_total", limiter="global", result="global_limiter") == 1
    assert value(samples, "permits_leases_total", limiter="global", result="acquired") == 2


async def test_fastapi_route_limiter_and_client_left() -> None:
    require("fastapi")
    from fastapi import Depends, FastAPI

    from permits.asgi import RateLimitMiddleware
    from permits.fastapi import RateLimit

    registry = need("prometheus_client").CollectorRegistry()
    clock = permits.ManualClock()
    route = permits.TokenBucketLimiter(1, 1, 1.0, clock=clock, name="route")
    app = FastAPI()

    @app.get("/limited", dependencies=[Depends(RateLimit(route))])
    async def limited() -> str:
        return "ok"

    @app.get("/open")
    async def open_route() -> str:
        return "ok"

    queue = permits.ConcurrencyLimiter(1, queue_limit=5, clock=clock, name="global")
    app.add_middleware(RateLimitMiddleware, limiter=queue, wait=True, metrics=registry)
    async with uvicorn_serving(app) as base, httpx.AsyncClient(base_url=base) as client:
        assert (await client.get("/limited")).status_code == 200
        assert (await client.get("/limited")).status_code == 429
        for _ in range(500):  # (a request's permit comes back once the application has returned)
            if queue.available_permits() == 1:
                break
            await asyncio.sleep(0.01)
        held = queue.acquire()  # the next request queues; its client gives up
        assert held
        with pytest.raises(httpx.ReadTimeout):
            await client.get("/open", timeout=0.5)
        for _ in range(100):
            if queue.statistics().current_queued_count == 0:
                break
            await asyncio.sleep(0.02)
        held.release()
    with exposition(registry) as url:
        samples = scrape(url)
    assert value(samples, "permits_requests_total", limiter="global", result="acquired") == 1
    assert value(samples, "permits_requests_total", limiter="global", result="route_limiter") == 1
    assert value(samples, "permits_requests_total", limiter="global", result="client_left") == 1


@pytest.mark.parametrize("server", ["werkzeug", "waitress"])
def test_wsgi_requests_by_result(server: str) -> None:
    from permits.wsgi import RateLimitMiddleware

    registry = need("prometheus_client").CollectorRegistry()
    clock = permits.ManualClock()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"hi"]

    limiter = permits.FixedWindowLimiter(3, 1.0, clock=clock, name="wsgi")
    wrapped = RateLimitMiddleware(app, limiter, metrics=registry)
    with serve_wsgi(wrapped, server) as base, httpx.Client(base_url=base) as client:
        codes = [client.get("/").status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]
    with exposition(registry) as url:
        samples = scrape(url)
    assert value(samples, "permits_requests_total", limiter="wsgi", result="acquired") == 3
    assert value(samples, "permits_requests_total", limiter="wsgi", result="global_limiter") == 2


def test_metrics_argument_is_checked() -> None:
    from permits.wsgi import RateLimitMiddleware

    with pytest.raises(TypeError, match="metrics must be"):
        RateLimitMiddleware(lambda e, s: [], permits.TokenBucketLimiter(1, 1, 1.0), metrics="yes")


@pytest.mark.timeout(60)
def test_wsgi_client_left_while_queued_under_werkzeug() -> None:
    # werkzeug's server exposes the connection's socket: a queued wait ends when its client leaves.
    from permits.wsgi import RateLimitMiddleware

    registry = need("prometheus_client").CollectorRegistry()
    clock = permits.ManualClock()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"hi"]

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"limiter": "pool", **labels})

    limiter = permits.ConcurrencyLimiter(1, queue_limit=2, clock=clock, name="pool")
    with serve_wsgi(RateLimitMiddleware(app, limiter, wait=True, metrics=registry), "werkzeug") as url:
        held = limiter.acquire()
        staying = raw_request(url)
        until(lambda: limiter.statistics().current_queued_count == 1)
        leaving = raw_request(url)
        until(lambda: limiter.statistics().current_queued_count == 2)
        clock.advance(0.5)
        leaving.close()
        until(lambda: sample("permits_requests_total", result="client_left") == 1)
        held.release()  # to the request that stayed
        answer = staying.recv(4096)
        staying.close()
        until(lambda: sample("permits_requests_total", result="acquired") == 1)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert sample("permits_requests_total", result="global_limiter") is None
    # The queued waits, seen through the instrumented limiter: one cancelled, one granted (0.5 s).
    assert sample("permits_queue_duration_seconds_count", result="cancelled") == 1
    assert sample("permits_queue_duration_seconds_count", result="acquired") == 1
    assert sample("permits_queue_duration_seconds_sum", result="acquired") == 0.5
    assert sample("permits_leases_total", result="acquired") == 1


def test_flask_checks_metrics_without_instrumenting() -> None:
    require("flask")
    from flask import Flask

    from permits.flask import RateLimit

    registry = need("prometheus_client").CollectorRegistry()
    limiter = permits.FixedWindowLimiter(1, 60, clock=permits.ManualClock(), name="flask")
    with pytest.raises(TypeError, match="metrics must be"):
        RateLimit(limiter, metrics="yes")
    rate_limit = RateLimit(limiter, metrics=registry)
    assert registry.get_sample_value("permits_active_leases", {"limiter": "flask"}) is None  # nothing built yet
    app = Flask(__name__)

    @app.get("/")
    def hello() -> str:
        return "hi"

    rate_limit.init_app(app)
    with serve_wsgi(app) as url, httpx.Client(base_url=url) as client:
        assert [client.get("/").status_code for _ in range(3)] == [200, 429, 429]
    assert registry.get_sample_value("permits_requests_total", {"limiter": "flask", "result": "acquired"}) == 1
    assert registry.get_sample_value("permits_requests_total", {"limiter": "flask", "result": "global_limiter"}) == 2
    assert registry.get_sample_value("permits_leases_total", {"limiter": "flask", "result": "acquired"}) == 1


@pytest.mark.timeout(60)
def test_flask_a_view_wait_whose_client_leaves_counts_as_client_left() -> None:
    # Left in a view's own queue (not the global one): client_left, as ASP.NET Core's "canceled".
    require("flask")
    import flask

    from permits.flask import RateLimit

    registry = need("prometheus_client").CollectorRegistry()
    clock = permits.ManualClock()
    everyone = permits.TokenBucketLimiter(100, 100, 1.0, clock=clock, name="global")
    view_gate = permits.ConcurrencyLimiter(1, queue_limit=1, clock=clock, name="view")
    rate_limit = RateLimit(everyone, metrics=registry)
    app = flask.Flask("metrics_view_wait")
    app.add_url_rule("/", "hello", rate_limit.limit(view_gate, wait=True)(lambda: "hi"))
    rate_limit.init_app(app)

    def sample(result: str) -> float | None:
        return registry.get_sample_value("permits_requests_total", {"limiter": "global", "result": result})

    with serve_wsgi(app, "werkzeug") as url:
        held = view_gate.acquire()
        leaving = raw_request(url)
        until(lambda: view_gate.statistics().current_queued_count == 1)
        leaving.close()
        until(lambda: sample("client_left") == 1)
        held.release()
        with httpx.Client(base_url=url) as client:
            assert client.get("/").status_code == 200
        until(lambda: sample("acquired") == 1)
    assert sample("route_limiter") is None


async def test_fastapi_a_route_wait_whose_client_leaves_counts_as_client_left() -> None:
    require("fastapi")
    from fastapi import Depends, FastAPI

    from permits.asgi import RateLimitMiddleware
    from permits.fastapi import RateLimit

    registry = need("prometheus_client").CollectorRegistry()
    clock = permits.ManualClock()
    route = permits.ConcurrencyLimiter(1, queue_limit=1, clock=clock, name="route")
    app = FastAPI()

    @app.get("/", dependencies=[Depends(RateLimit(route, wait=True))])
    async def root() -> str:
        return "ok"

    everyone = permits.TokenBucketLimiter(100, 100, 1.0, clock=clock, name="global")
    app.add_middleware(RateLimitMiddleware, limiter=everyone, metrics=registry)
    async with uvicorn_serving(app) as base, httpx.AsyncClient(base_url=base) as client:
        held = route.acquire()
        with pytest.raises(httpx.ReadTimeout):
            await client.get("/", timeout=0.5)  # queued in the route's limiter; its client gives up
        for _ in range(250):
            if registry.get_sample_value("permits_requests_total", {"limiter": "global", "result": "client_left"}):
                break
            await asyncio.sleep(0.02)
        held.release()
    with exposition(registry) as url:
        samples = scrape(url)
    assert value(samples, "permits_requests_total", limiter="global", result="client_left") == 1
    assert value(samples, "permits_requests_total", limiter="global", result="acquired") is None
