"""The ASGI middleware's C path (``permits._asgi_gate``): the same answers as its Python path for
every header style, built-in key and limit kind; its lease released whatever the application does;
what it hands back to Python (a refusal, a key read in Python, a route's figures, an application's
own header, an outer middleware). Time on a ManualClock; the application called in process."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

import permits
from permits import keys, specs
from permits.asgi import RateLimitMiddleware


def scope_of(client: str | None = "203.0.113.7", headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/",
        "raw_path": b"/",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"x"), *(headers or [])],
        "client": None if client is None else (client, 1234),
        "server": ("127.0.0.1", 80),
    }


async def hello(request: Request) -> Response:
    return PlainTextResponse("hello")


def app_of(limiter: Any, **options: Any) -> RateLimitMiddleware:
    return RateLimitMiddleware(Starlette(routes=[Route("/", hello)]), limiter, **options)


def python_path(app: RateLimitMiddleware) -> None:
    """Every request of ``app`` served by its Python coroutine, the extension's admission unused."""
    app._admit = None
    app._enter = app._call


async def call(app: Any, scope: dict[str, Any]) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], list(start["headers"]), body


LIMITS: dict[str, Callable[[permits.ManualClock], Any]] = {
    "per-key token bucket": lambda c: permits.PartitionedLimiter.per_key(
        specs.TokenBucket(3, 1, 2.0), clock=c, name="tb"
    ),
    "per-key fixed window": lambda c: permits.PartitionedLimiter.per_key(specs.FixedWindow(3, 5), clock=c, name="fw"),
    "per-key concurrency": lambda c: permits.PartitionedLimiter.per_key(specs.Concurrency(2), clock=c, name="cc"),
    "plain token bucket": lambda c: permits.TokenBucketLimiter(3, 1, 2.0, clock=c, name="plain"),
    "plain sliding window": lambda c: permits.SlidingWindowLimiter(3, 4, 2, clock=c, name='a "quoted" name'),
}


@pytest.mark.parametrize("headers", [True, "legacy", "both", False])
@pytest.mark.parametrize("limit", sorted(LIMITS))
def test_the_c_path_answers_as_the_python_path(limit: str, headers: bool | str) -> None:
    answers = []
    for fast in (True, False):
        clock = permits.ManualClock()
        app = app_of(LIMITS[limit](clock), headers=headers)
        if fast:
            assert app._admit is not None
            assert app._enter is not app._call
        else:
            python_path(app)
        seen = []
        for step in range(12):
            client = ["203.0.113.7", "198.51.100.2", "2001:db8::1", None][step % 4]
            seen.append(asyncio.run(call(app, scope_of(client))))
            clock.advance(0.7)
        answers.append(seen)
    assert answers[0] == answers[1]
    assert any(status == 200 for status, _, _ in answers[0])


@pytest.mark.parametrize(
    "value",
    [b"k1", b"  k1 ", b"", b"   ", None, "cl\u00e9".encode("latin-1"), b"\xa0k\xa0"],
)
def test_the_header_key_is_the_python_key(value: bytes | None) -> None:
    """A header's first value (latin-1, stripped) keys the request; a blank or absent one is Python's
    (its fallback: the client's address)."""
    answers = []
    for fast in (True, False):
        clock = permits.ManualClock()
        limiter = permits.PartitionedLimiter.per_key(specs.FixedWindow(1, 60), clock=clock)
        app = app_of(limiter, key=keys.header("X-Api-Key"))
        if not fast:
            python_path(app)
        headers = [] if value is None else [(b"x-api-key", value)]
        statuses = [asyncio.run(call(app, scope_of(headers=headers)))[0] for _ in range(2)]
        expected = keys.header("X-Api-Key")(Request(scope_of(headers=headers)))
        answers.append((statuses, limiter.available_permits(expected)))
    assert answers[0] == answers[1] == ([200, 429], 0)


def test_an_applications_own_header_and_a_route_limit_go_through_python() -> None:
    async def own(request: Request) -> Response:
        return PlainTextResponse("own", headers={"RateLimit": "mine"})

    clock = permits.ManualClock()
    limiter = permits.PartitionedLimiter.per_key(specs.FixedWindow(5, 60), clock=clock, name="n")
    app = RateLimitMiddleware(Starlette(routes=[Route("/", own)]), limiter)
    status, headers, _ = asyncio.run(call(app, scope_of()))
    assert status == 200
    assert [v for n, v in headers if n == b"ratelimit"] == [b"mine"]
    assert (b"ratelimit-policy", b'"n";q=5;w=60') in headers


def test_the_lease_is_released_when_the_application_returns_raises_or_is_cancelled() -> None:
    clock = permits.ManualClock()
    limiter = permits.PartitionedLimiter.per_key(specs.Concurrency(1), clock=clock)
    entered = asyncio.Event()

    async def slow(request: Request) -> Response:
        entered.set()
        await asyncio.sleep(3600)
        return PlainTextResponse("late")

    async def boom(request: Request) -> Response:
        raise RuntimeError("boom")

    app = RateLimitMiddleware(Starlette(routes=[Route("/", slow), Route("/boom", boom)]), limiter)

    async def main() -> None:
        task = asyncio.create_task(call(app, scope_of()))
        await entered.wait()
        assert limiter.available_permits("203.0.113.7") == 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert limiter.available_permits("203.0.113.7") == 1
        boom_scope = scope_of()
        boom_scope["path"] = boom_scope["raw_path"] = "/boom"
        boom_scope["raw_path"] = b"/boom"
        with pytest.raises(RuntimeError, match="boom"):
            await call(app, boom_scope)
        assert limiter.available_permits("203.0.113.7") == 1

    asyncio.run(main())


def test_options_the_c_path_cannot_serve_keep_the_python_path() -> None:
    clock = permits.ManualClock()

    def limiter() -> Any:
        return permits.PartitionedLimiter.per_key(specs.FixedWindow(5, 60), clock=clock)

    assert app_of(limiter(), wait=True)._admit is None
    for options in ({"cost": lambda request, sent: 1}, {"exempt": ["/health"]}, {"metrics": True}, {"wait": True}):
        app = app_of(limiter(), **options)
        assert app._enter == app._call, options  # (a request's coroutine in Python)
    assert app_of(limiter(), key=lambda request: "k")._admit is None
    assert app_of(permits.chain(limiter(), limiter()))._admit is None
    assert app_of(limiter(), cost=lambda request, sent: 1)._admit is not None  # (admitted in C, run in Python)
    assert app_of(limiter(), key=keys.client_ip(["10.0.0.0/8"]))._admit is None  # (a proxy's peer: Python reads it)


def test_a_refusal_answers_as_before() -> None:
    clock = permits.ManualClock()
    limiter = permits.PartitionedLimiter.per_key(specs.FixedWindow(1, 60), clock=clock, name="one")
    app = app_of(limiter, problem_details=True)
    assert asyncio.run(call(app, scope_of()))[0] == 200
    status, headers, body = asyncio.run(call(app, scope_of()))
    assert status == 429
    assert (b"retry-after", b"60") in headers
    assert b"quota-exceeded" in body or b"Too Many Requests" in body
