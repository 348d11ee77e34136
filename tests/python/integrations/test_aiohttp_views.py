"""``permits.aiohttp.limit`` on aiohttp's class-based views (``web.View``): on the class (every
method shares the limit) or on one method, under aiohttp's own server, with and without the
middleware. (Before: every request to a decorated view was a 500, after spending a permit under
the key ``"unknown"``: the decorator took the view for the request.)"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp import web

import permits
from permits import keys
from permits.aiohttp import limit, rate_limit_middleware

CLIENT = keys.header("x-client")


def per_client(clock: permits.ManualClock) -> permits.PartitionedLimiter:
    return permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(1, 60), clock=clock, name="view")


async def statuses(session: aiohttp.ClientSession, calls: list[tuple[str, str, str]]) -> list[tuple[int, str]]:
    found = []
    for method, url, client in calls:
        async with session.request(method, url, headers={"x-client": client}) as response:
            found.append((response.status, response.headers.get("RateLimit", "")))
    return found


@pytest.mark.parametrize("with_middleware", [False, True])
async def test_a_limited_view_class_limits_every_method_by_the_requests_key(
    with_middleware: bool, serve_aiohttp: Any, clock: permits.ManualClock
) -> None:
    limiter = per_client(clock)

    @limit(limiter, key=CLIENT)
    class Items(web.View):
        async def get(self) -> web.Response:
            return web.Response(text="list")

        async def post(self) -> web.Response:
            return web.Response(text="made")

    assert issubclass(Items, web.View)  # still a view: add_view takes it
    middlewares = [rate_limit_middleware(permits.ConcurrencyLimiter(10, clock=clock))] if with_middleware else []
    app = web.Application(middlewares=middlewares)
    app.router.add_view("/items", Items)
    async with serve_aiohttp(app) as url, aiohttp.ClientSession() as session:
        items = url + "/items"
        found = await statuses(session, [("GET", items, "a"), ("POST", items, "a"), ("POST", items, "b")])
    assert [status for status, _ in found] == [200, 429, 200]
    assert found[0][1] == '"view";r=0;t=60'  # the view's own figures (fewer left than the global's)
    assert limiter.statistics(("x-client", "a")).total_successful_leases == 1
    assert limiter.statistics(("x-client", "b")).total_successful_leases == 1


async def test_a_limited_view_method_limits_that_method_only(serve_aiohttp: Any, clock: permits.ManualClock) -> None:
    limiter = per_client(clock)

    class Items(web.View):
        @limit(limiter, key=CLIENT)
        async def get(self) -> web.Response:
            return web.Response(text="list")

        async def post(self) -> web.Response:
            return web.Response(text="made")

    app = web.Application()
    app.router.add_view("/items", Items)
    async with serve_aiohttp(app) as url, aiohttp.ClientSession() as session:
        items = url + "/items"
        found = await statuses(
            session, [("GET", items, "a"), ("GET", items, "a"), ("POST", items, "a"), ("GET", items, "b")]
        )
    assert [status for status, _ in found] == [200, 429, 200, 200]
    assert limiter.statistics(("x-client", "a")).total_successful_leases == 1


def test_a_class_that_is_no_view_is_refused_when_decorated() -> None:
    with pytest.raises(TypeError, match=r"limit\(\) decorates a handler or a web.View class, got class NotAView"):

        @limit(permits.ConcurrencyLimiter(1))
        class NotAView:
            pass
