"""``cost=`` on every server integration (issue 42, item 2): admission by ``permit_count`` before the
handler; once the response has been sent, ``cost(request, response)`` settles the request's permits
(fewer: given back; more: the rest taken without waiting, a refusal not retroactive). Real loopback
servers; the response is a ``permits.SentResponse`` everywhere."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI
from starlette.responses import PlainTextResponse

import permits
from permits import SentResponse
from permits.asgi import RateLimitMiddleware
from permits.fastapi import RateLimit

from _frameworks import FRAMEWORKS, serving

MIDDLEWARES = ["asgi", "aiohttp", "wsgi", "flask", "django"]  # (the others are a route's limit)


async def settled(check: Callable[[], bool], what: str) -> None:
    """The cost is settled once the response has been sent, which the client may see first: waits
    (a few ms at most on loopback) until ``check()`` holds."""
    deadline = time.monotonic() + 5.0
    while not check():
        assert time.monotonic() < deadline, f"not settled: {what}"
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("framework", MIDDLEWARES)
async def test_count_only_failures(framework: str, serve_asgi: Any, serve_aiohttp: Any) -> None:
    """flask-limiter's deduct_when, django-ratelimit's "count failed logins": a request is admitted
    if a permit is free, and keeps it only when its response is an error."""
    limiter = permits.FixedWindowLimiter(2, 60.0, name="logins")
    seen: list[SentResponse] = []

    def failures(request: Any, response: SentResponse) -> int:
        seen.append(response)
        return 1 if response.status_code >= 400 else 0

    async with (
        serving(framework, limiter, serve_asgi, serve_aiohttp, cost=failures) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        for i in range(4):  # successes cost nothing: never refused
            assert (await client.get("/hello")).status_code == 200
            await settled(lambda i=i: len(seen) == i + 1 and limiter.available_permits() == 2, "a success")
        for i in range(2):
            assert (await client.get("/missing")).status_code == 404
            await settled(lambda i=i: limiter.available_permits() == 1 - i, "a failure")
        assert (await client.get("/hello")).status_code == 429  # two failures: the limit is spent
    assert seen[0].status_code == 200 and seen[0].body_size == 5 and seen[0].headers["ratelimit-policy"]
    assert seen[-1].status_code == 404


@pytest.mark.parametrize("framework", [f for f in FRAMEWORKS if f != "fastapi"])
async def test_a_cost_above_permit_count_takes_the_rest(framework: str, serve_asgi: Any, serve_aiohttp: Any) -> None:
    """Charge by the response: each /hello costs its body's 5 bytes though admitted for 1."""
    limiter = permits.FixedWindowLimiter(12, 60.0, name="bytes")
    async with (
        serving(framework, limiter, serve_asgi, serve_aiohttp, cost=lambda req, resp: resp.body_size) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        assert (await client.get("/hello")).status_code == 200
        await settled(lambda: limiter.available_permits() == 7, "5 taken")
        assert (await client.get("/hello")).status_code == 200
        await settled(lambda: limiter.available_permits() == 2, "10 taken")
        # Admitted (1 free of the 2), then its cost of 5 finds only 1 more: not retroactive.
        assert (await client.get("/hello")).status_code == 200
        await settled(lambda: limiter.statistics().total_failed_leases == 1, "the rest refused")
        assert limiter.available_permits() == 1
        assert (await client.get("/hello")).status_code == 200
        await settled(lambda: limiter.available_permits() == 0, "spent")
        assert (await client.get("/hello")).status_code == 429


@pytest.mark.parametrize("framework", [f for f in FRAMEWORKS if f != "fastapi"])
async def test_a_concurrency_lease_settles_before_its_release(
    framework: str, serve_asgi: Any, serve_aiohttp: Any
) -> None:
    pool = permits.ConcurrencyLimiter(3, name="pool")
    async with (
        serving(framework, pool, serve_asgi, serve_aiohttp, permit_count=3, cost=lambda req, resp: 1) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        for _ in range(3):
            assert (await client.get("/hello")).status_code == 200
            await settled(lambda: pool.available_permits() == 3, "released")


@pytest.mark.parametrize("framework", MIDDLEWARES)
async def test_a_cost_that_raises_or_is_no_count_keeps_the_permits(
    framework: str, serve_asgi: Any, serve_aiohttp: Any, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = permits.FixedWindowLimiter(3, 60.0, name="api")
    answers: list[object] = [ValueError("broken"), -1, "2"]

    def cost(request: Any, response: SentResponse) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async with (
        serving(framework, limiter, serve_asgi, serve_aiohttp, cost=cost) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        for i in range(3):
            assert (await client.get("/hello")).status_code == 200  # the response is never hurt
            await settled(lambda i=i: len(answers) == 2 - i, "asked")
        assert (await client.get("/hello")).status_code == 429  # each kept its permit
    messages = [r.getMessage() for r in caplog.records if r.name == "permits"]
    assert any("cost(request, response) raised" in m for m in messages)
    assert any("returned -1, not a count" in m for m in messages)
    assert any("returned '2', not a count" in m for m in messages)


async def test_a_fastapi_route_cost_settles_through_the_middleware(serve_asgi: Any) -> None:
    global_limit = permits.FixedWindowLimiter(100, 60.0, name="global")
    route_limit = permits.FixedWindowLimiter(2, 60.0, name="route")
    api = FastAPI()
    api.add_middleware(RateLimitMiddleware, limiter=global_limit)

    @api.get("/hello", dependencies=[Depends(RateLimit(route_limit, cost=lambda req, resp: 0))])
    async def hello() -> PlainTextResponse:
        return PlainTextResponse("hello")

    async with serve_asgi(api) as url, httpx.AsyncClient(base_url=url) as client:
        for _ in range(4):
            assert (await client.get("/hello")).status_code == 200
            await settled(lambda: route_limit.available_permits() == 2, "refunded")


async def test_a_fastapi_route_cost_without_the_middleware_says_it_cannot(
    serve_asgi: Any, caplog: pytest.LogCaptureFixture
) -> None:
    route_limit = permits.FixedWindowLimiter(2, 60.0, name="route")
    api = FastAPI()

    @api.get("/hello", dependencies=[Depends(RateLimit(route_limit, cost=lambda req, resp: 0))])
    async def hello() -> PlainTextResponse:
        return PlainTextResponse("hello")

    async with serve_asgi(api) as url, httpx.AsyncClient(base_url=url) as client:
        codes = [(await client.get("/hello")).status_code for _ in range(3)]
    assert codes == [200, 200, 429]  # permit_count kept
    warned = [r for r in caplog.records if r.name == "permits" and r.levelno == logging.WARNING]
    assert len(warned) == 1 and "needs permits.asgi.RateLimitMiddleware" in warned[0].getMessage()


@pytest.mark.parametrize("bad", ["1", 3])
def test_cost_must_be_a_plain_function(bad: object) -> None:
    with pytest.raises(TypeError, match="cost must be callable"):
        RateLimitMiddleware(PlainTextResponse("x"), "2/second", cost=bad)  # type: ignore[arg-type]

    async def later(request: Any, response: SentResponse) -> int:
        return 1

    with pytest.raises(TypeError, match="cost must be a plain function"):
        RateLimit("2/second", cost=later)  # type: ignore[arg-type]
