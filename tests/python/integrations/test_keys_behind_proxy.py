"""client_ip behind a real reverse proxy on loopback that appends X-Forwarded-For (as nginx's
``$proxy_add_x_forwarded_for``) and passes the client's own headers through: the client cannot
choose its key. The client connects from 127.0.0.2, the proxy from 127.0.0.1 (the trusted one)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from _proxy import LONG_HEADERS, reverse_proxy
from aiohttp import web
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import permits
from permits import keys
from permits.aiohttp import rate_limit_middleware
from permits.asgi import RateLimitMiddleware
from permits.wsgi import RateLimitMiddleware as WSGIRateLimitMiddleware

from _integration import serve_wsgi

FRAMEWORKS = ["uvicorn", "aiohttp", "waitress", "flask"]

CLIENT = "127.0.0.2"
PROXY = "127.0.0.1"


def _starlette(limiter: Any, key: Any) -> Starlette:
    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    app = Starlette(routes=[Route("/", hello)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter, key=key)
    return app


def _aiohttp(limiter: Any, key: Any) -> web.Application:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    app = web.Application(middlewares=[rate_limit_middleware(limiter, key=key)])
    app.router.add_get("/", hello)
    return app


def _wsgi(limiter: Any, key: Any) -> Any:
    def hello(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"hello"]

    return WSGIRateLimitMiddleware(hello, limiter, key=key)


def _flask(limiter: Any, key: Any) -> Any:
    from flask import Flask

    from permits.flask import RateLimit

    app = Flask("behind_a_proxy")
    app.add_url_rule("/", "hello", lambda: "hello")
    RateLimit(limiter, key=key).init_app(app)
    return app


@asynccontextmanager
async def _served_wsgi(app: Any, server: str) -> AsyncIterator[str]:
    with serve_wsgi(app, server) as url:  # (its own threads: this loop goes on)
        yield url


def _serve(framework: str, serve_asgi: Any, serve_aiohttp: Any, limiter: Any, key: Any) -> Any:
    # Each server accepts header fields of up to LONG_HEADERS (werkzeug and waitress do by default).
    if framework == "uvicorn":  # (uvicorn's own proxy_headers off: the key reads the headers itself)
        return serve_asgi(_starlette(limiter, key), proxy_headers=False, h11_max_incomplete_event_size=LONG_HEADERS)
    if framework == "waitress":  # (waitress's clear_untrusted_proxy_headers off: the key decides)
        return _served_wsgi(_wsgi(limiter, key), "waitress")
    if framework == "flask":
        return _served_wsgi(_flask(limiter, key), "werkzeug")
    return serve_aiohttp(_aiohttp(limiter, key), max_field_size=LONG_HEADERS)


def _client(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, transport=httpx.AsyncHTTPTransport(local_address=CLIENT))


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_client_behind_an_xff_proxy_cannot_pick_its_key_with_forwarded(
    framework: str, serve_asgi, serve_aiohttp, clock: permits.ManualClock
) -> None:
    limiter = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(3, 60), clock=clock)
    key = keys.client_ip(trusted_proxies=[PROXY])
    async with (
        _serve(framework, serve_asgi, serve_aiohttp, limiter, key) as upstream,
        reverse_proxy(upstream, PROXY) as url,
        _client(url) as client,
    ):
        statuses = []
        for i in range(8):
            spoof = {"Forwarded": f"for=198.51.100.{i}", "X-Forwarded-For": f"203.0.113.{i}"}
            statuses.append((await client.get("/", headers=spoof)).status_code)
        assert statuses == [200, 200, 200, 429, 429, 429, 429, 429]
        assert limiter.statistics(CLIENT).total_successful_leases == 3
        assert limiter.statistics(CLIENT).total_failed_leases == 5
        assert limiter.statistics(PROXY).total_successful_leases == 0


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_forwarded_proto_alone_never_keys_the_client_as_the_proxy(
    framework: str, serve_asgi, serve_aiohttp, clock: permits.ManualClock
) -> None:
    limiter = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(3, 60), clock=clock)
    key = keys.client_ip(trusted_proxies=[PROXY])
    async with (
        _serve(framework, serve_asgi, serve_aiohttp, limiter, key) as upstream,
        reverse_proxy(upstream, PROXY) as url,
        _client(url) as client,
    ):
        assert (await client.get("/", headers={"Forwarded": "proto=https"})).status_code == 200
    assert limiter.statistics(CLIENT).total_successful_leases == 1
    assert limiter.statistics(PROXY).total_successful_leases == 0


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_key_reading_forwarded_ignores_x_forwarded_for(
    framework: str, serve_asgi, serve_aiohttp, clock: permits.ManualClock
) -> None:
    # No proxy here: the test client plays one (127.0.0.2, trusted) that writes Forwarded.
    limiter = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(3, 60), clock=clock)
    key = keys.client_ip(trusted_proxies=[CLIENT], header="Forwarded")
    async with _serve(framework, serve_asgi, serve_aiohttp, limiter, key) as url, _client(url) as client:
        headers = {"X-Forwarded-For": "203.0.113.1", "Forwarded": "for=198.51.100.7"}
        assert (await client.get("/", headers=headers)).status_code == 200
    assert limiter.statistics("198.51.100.7").total_successful_leases == 1
    assert limiter.statistics("203.0.113.1").total_successful_leases == 0


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_client_padding_x_forwarded_for_past_8_kib_is_still_keyed_as_itself(
    framework: str, serve_asgi, serve_aiohttp, clock: permits.ManualClock
) -> None:
    # The padding pushes the proxy's hop past 8 KiB: it is read from the header's right end all
    # the same, so the padded request counts against the client's own limit, not the proxy's.
    limiter = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(1, 60), clock=clock)
    key = keys.client_ip(trusted_proxies=[PROXY])
    padding = ", ".join(f"198.51.100.{i % 250}" for i in range(600))
    assert 8192 < len(padding) < LONG_HEADERS
    async with (
        _serve(framework, serve_asgi, serve_aiohttp, limiter, key) as upstream,
        reverse_proxy(upstream, PROXY) as url,
        _client(url) as client,
    ):
        plain = await client.get("/")
        padded = await client.get("/", headers={"X-Forwarded-For": padding})
        assert (plain.status_code, padded.status_code) == (200, 429)
    assert limiter.statistics(CLIENT).total_successful_leases == 1
    assert limiter.statistics(CLIENT).total_failed_leases == 1
    assert limiter.statistics(PROXY).total_successful_leases == 0


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_an_ipv6_client_rotating_through_its_64_keeps_one_key(
    framework: str, serve_asgi, serve_aiohttp, clock: permits.ManualClock
) -> None:
    # No proxy here: the test client plays one (127.0.0.2, trusted) reporting a client that takes
    # a new address of its /64 for each request; an IPv4-mapped address keys as its IPv4 address.
    limiter = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(1, 60), clock=clock)
    key = keys.client_ip(trusted_proxies=[CLIENT])
    async with _serve(framework, serve_asgi, serve_aiohttp, limiter, key) as url, _client(url) as client:
        statuses = [
            (await client.get("/", headers={"X-Forwarded-For": f"2001:db8:1:2::{i:x}"})).status_code
            for i in range(1, 4)
        ]
        assert statuses == [200, 429, 429]
        assert (await client.get("/", headers={"X-Forwarded-For": "2001:db8:1:3::1"})).status_code == 200
        mapped = [
            (await client.get("/", headers={"X-Forwarded-For": a})).status_code
            for a in ("192.0.2.1", "::ffff:192.0.2.1")
        ]
        assert mapped == [200, 429]
    assert limiter.statistics("2001:db8:1:2::/64").total_failed_leases == 2
    assert limiter.statistics("192.0.2.1").total_failed_leases == 1
