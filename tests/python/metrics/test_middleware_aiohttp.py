"""metrics= of permits.aiohttp.rate_limit_middleware under aiohttp's own server: requests counted by
result (acquired, global_limiter, route_limiter, client_left), scraped from a real exposition."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from _scrape import exposition, scrape, value

import permits

from _integration import eventually, require
from _support import need


@contextlib.asynccontextmanager
async def aiohttp_serving(app: Any) -> AsyncIterator[str]:
    web = require("aiohttp.web", "aiohttp")
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def make_app(limiter: Any, route: Any, metrics: object) -> Any:
    web = require("aiohttp.web", "aiohttp")
    from permits.aiohttp import limit, rate_limit_middleware

    async def hello(request: Any) -> Any:
        return web.Response(text="hello")

    @limit(route)
    async def limited(request: Any) -> Any:
        return web.Response(text="limited")

    app = web.Application(middlewares=[rate_limit_middleware(limiter, wait=True, metrics=metrics)])
    app.router.add_get("/hello", hello)
    app.router.add_get("/limited", limited)
    return app


async def test_requests_by_result() -> None:
    aiohttp = require("aiohttp")
    prometheus_client = need("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    clock = permits.ManualClock()
    queue = permits.ConcurrencyLimiter(1, queue_limit=1, clock=clock, name="global")
    route = permits.FixedWindowLimiter(1, 60, clock=clock, name="route")

    def requests(result: str) -> float | None:
        return registry.get_sample_value("permits_requests_total", {"limiter": "global", "result": result})

    async with aiohttp_serving(make_app(queue, route, registry)) as base:
        async with aiohttp.ClientSession() as session:
            statuses = []
            for path in ("/hello", "/limited", "/limited"):
                async with session.get(base + path) as response:
                    statuses.append(response.status)
            assert statuses == [200, 200, 429]
        # (a request's permit comes back once its handler has returned, which may be after its
        # client has read the response)
        await eventually(lambda: queue.available_permits() == 1)
        held = queue.acquire()
        assert held
        leaving_session = aiohttp.ClientSession()
        leaving = asyncio.create_task(leaving_session.get(base + "/hello"))
        await eventually(lambda: queue.statistics().current_queued_count == 1)
        async with aiohttp.ClientSession() as session, session.get(base + "/hello") as response:
            assert response.status == 429  # the queue is full: the global limiter refuses
        leaving.cancel()
        await leaving_session.close()
        with contextlib.suppress(asyncio.CancelledError):
            await leaving
        await eventually(lambda: requests("client_left") == 1)
        assert queue.statistics().current_queued_count == 0
        held.release()
    with exposition(registry) as url:
        samples = scrape(url)
    assert value(samples, "permits_requests_total", limiter="global", result="acquired") == 2
    assert value(samples, "permits_requests_total", limiter="global", result="route_limiter") == 1
    assert value(samples, "permits_requests_total", limiter="global", result="global_limiter") == 1
    assert value(samples, "permits_requests_total", limiter="global", result="client_left") == 1
    assert value(samples, "permits_leases_total", limiter="global", result="queue_full") == 1


def test_metrics_argument_is_checked() -> None:
    require("aiohttp")
    from permits.aiohttp import rate_limit_middleware

    with pytest.raises(TypeError, match="metrics must be"):
        rate_limit_middleware(permits.TokenBucketLimiter(1, 1, 1.0), metrics="yes")
