"""Requests queued by aiohttp's middleware or ``@limit(wait=True)``, on a real server on loopback:
a queued request costs nothing while it waits (no timer, no wakeup: the connection's loss is an
event), yet a client that leaves is noticed at once; the queue's bounds answer as the other
integrations'; and a request queued on a route holds no global permit while it waits."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

import permits
from permits.aiohttp import limit, rate_limit_middleware

from _integration import eventually

QUEUED = 20


async def hello(request: web.Request) -> web.Response:
    return web.Response(text="hello")


def waiting_app(where: str, limiter: Any, **options: Any) -> web.Application:
    """``/hello`` limited by the middleware or by ``@limit``, waiting with ``options``."""
    if where == "middleware":
        app = web.Application(middlewares=[rate_limit_middleware(limiter, wait=True, **options)])
        app.router.add_get("/hello", hello)
    else:
        app = web.Application()
        app.router.add_get("/hello", limit(limiter, wait=True, **options)(hello))
    return app


class Raw:
    """A GET on a connection of its own, sent from this loop (a blocking socket would stop the
    server it talks to): the test reads its status, or closes it to leave."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def get(cls, url: str, path: str) -> Raw:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path.encode())
        await writer.drain()
        return cls(reader, writer)

    async def status(self) -> int:
        line = await self.reader.readline()
        self.close()
        return int(line.split()[1])

    def close(self) -> None:
        self.writer.close()


def queued(limiter: Any, n: int) -> Callable[[], bool]:
    return lambda: limiter.statistics().current_queued_count == n


def counting_timers(loop: asyncio.AbstractEventLoop, counted: list[object]) -> Callable[[], None]:
    """Counts the timers scheduled in ``loop`` by anything but the calling task (every sleep and
    every delayed callback goes through ``call_at``); returns what undoes it."""
    me = asyncio.current_task()
    original = loop.call_at

    def call_at(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        if asyncio.current_task() is not me:
            counted.append(callback)
        return original(when, callback, *args, **kwargs)

    loop.call_at = call_at  # type: ignore[method-assign]
    return lambda: setattr(loop, "call_at", original)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["middleware", "limit"])
async def test_queued_requests_schedule_nothing_while_they_wait(where: str, serve_aiohttp: Any) -> None:
    # The real clock: a ManualClock's timeouts are followed by naps of their own. With timeout=None
    # nothing but the client's leaving or the permit ends a wait. (Before: each queued request
    # looked at its connection every 50 ms, 2,000 of them burning 69 % of a core.)
    limiter = permits.ConcurrencyLimiter(1, name="c")
    held = limiter.acquire()
    async with serve_aiohttp(waiting_app(where, limiter, timeout=None)) as url:
        clients = [await Raw.get(url, "/hello") for _ in range(QUEUED)]
        try:
            await eventually(queued(limiter, QUEUED))
            timers: list[object] = []
            undo = counting_timers(asyncio.get_running_loop(), timers)
            try:
                await asyncio.sleep(0.25)  # idle: what runs now runs on its own
            finally:
                undo()
            assert timers == []
            # Still watched: clients that leave leave the queue at once.
            for client in clients[: QUEUED // 2]:
                client.close()
            await eventually(queued(limiter, QUEUED - QUEUED // 2))
            held.release()
            assert [await client.status() for client in clients[QUEUED // 2 :]] == [200] * (QUEUED - QUEUED // 2)
        finally:
            for client in clients:
                client.close()
        await eventually(lambda: limiter.available_permits() == 1)
    assert limiter.statistics().total_successful_leases == 1 + QUEUED - QUEUED // 2


@pytest.mark.timeout(30)
@pytest.mark.parametrize("where", ["middleware", "limit"])
async def test_a_client_that_leaves_frees_its_place_and_the_bounds_answer_with_the_status(
    where: str, serve_aiohttp: Any, clock: permits.ManualClock
) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock, name="c")
    held = limiter.acquire()
    app = waiting_app(where, limiter, timeout=5, max_queued=1, status_code=503)
    async with serve_aiohttp(app) as url:
        leaving = await Raw.get(url, "/hello")
        await eventually(queued(limiter, 1))
        assert await (await Raw.get(url, "/hello")).status() == 503  # queue_full, at once
        leaving.close()
        await eventually(queued(limiter, 0))
        waiting = await Raw.get(url, "/hello")  # the place is free again: it queues
        await eventually(queued(limiter, 1))
        clock.advance(5)
        assert await waiting.status() == 503  # timeout
        held.release()
        assert await (await Raw.get(url, "/hello")).status() == 200
    assert limiter.available_permits() == 1


def route_app(global_limiter: Any, route: Any, **global_options: Any) -> web.Application:
    app = web.Application(middlewares=[rate_limit_middleware(global_limiter, **global_options)])
    app.router.add_get("/", hello)
    app.router.add_get("/route", limit(route, wait=True, timeout=None)(hello))
    return app


async def get(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url) as response:
        await response.read()
        return response.status


@pytest.mark.timeout(30)
async def test_requests_queued_on_a_route_hold_no_global_permit(serve_aiohttp: Any, clock: permits.ManualClock) -> None:
    # The case: 4 requests queued on a 1-per-30 s route, a global limit of 4 at once.
    global_limiter = permits.ConcurrencyLimiter(4, clock=clock, name="global")
    route = permits.FixedWindowLimiter(1, 30, clock=clock, name="route")
    async with serve_aiohttp(route_app(global_limiter, route)) as url, aiohttp.ClientSession() as session:
        assert await get(session, url + "/route") == 200
        waiting = [asyncio.create_task(get(session, url + "/route")) for _ in range(4)]
        await eventually(queued(route, 4))
        assert global_limiter.available_permits() == 4  # (before: 0, each queued request held one)
        assert [await get(session, url + "/") for _ in range(5)] == [200] * 5
        for n in range(4):
            clock.advance(30)  # the route grants the next: it takes its global permit then
            await eventually(lambda n=n: sum(task.done() for task in waiting) == n + 1)
        assert await asyncio.gather(*waiting) == [200] * 4
    await eventually(lambda: global_limiter.available_permits() == 4)
    # The first request's, the 4 queued ones' twice (given back on queuing, taken on the route's
    # grant), and the 5 of "/".
    assert global_limiter.statistics().total_successful_leases == 1 + 4 * 2 + 5


@pytest.mark.timeout(30)
async def test_a_global_refusal_after_the_routes_grant_is_the_global_rejection(
    serve_aiohttp: Any, clock: permits.ManualClock
) -> None:
    global_limiter = permits.ConcurrencyLimiter(1, clock=clock, name="global")
    route = permits.FixedWindowLimiter(1, 30, clock=clock, name="route")
    async with serve_aiohttp(route_app(global_limiter, route)) as url, aiohttp.ClientSession() as session:
        assert await get(session, url + "/route") == 200
        waiting = asyncio.create_task(session.get(url + "/route"))
        await eventually(queued(route, 1))
        taken = global_limiter.acquire()  # the permit it gave back is someone else's now
        assert taken
        clock.advance(30)
        async with await waiting as refused:
            assert (refused.status, await refused.text()) == (429, "Too Many Requests (limiter: global)")
        taken.release()
        assert route.available_permits() == 1  # the route's permit went back with the refusal
        assert await get(session, url + "/route") == 200
    await eventually(lambda: global_limiter.available_permits() == 1)


@pytest.mark.timeout(30)
async def test_a_route_grant_waits_for_the_global_permit_when_the_middleware_waits(
    serve_aiohttp: Any, clock: permits.ManualClock
) -> None:
    global_limiter = permits.ConcurrencyLimiter(1, clock=clock, name="global")
    route = permits.FixedWindowLimiter(1, 30, clock=clock, name="route")
    app = route_app(global_limiter, route, wait=True)
    async with serve_aiohttp(app) as url, aiohttp.ClientSession() as session:
        assert await get(session, url + "/route") == 200
        waiting = asyncio.create_task(get(session, url + "/route"))
        await eventually(queued(route, 1))
        taken = global_limiter.acquire()
        assert taken
        clock.advance(30)
        await eventually(queued(global_limiter, 1))  # granted by the route, now queued globally
        assert not waiting.done()
        taken.release()
        assert await waiting == 200
    await eventually(lambda: global_limiter.available_permits() == 1)
