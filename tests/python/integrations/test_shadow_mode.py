"""Shadow mode, ``enforce=False`` on every server integration (issue 42, item 3): a request the limit
refuses is decided, counted and sent the headers exactly as enforcing would, and served; the refusal
is logged once a second at INFO on the ``permits`` logger and counted ``shadow_rejected``. Real
loopback servers, real frameworks."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from starlette.responses import PlainTextResponse

import permits
from permits.asgi import RateLimitMiddleware
from permits.fastapi import RateLimit

from _frameworks import FRAMEWORKS, serving

MIDDLEWARES = ["asgi", "aiohttp", "wsgi", "flask", "django"]  # (the others are a route's limit)


def shadow_log(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "permits" and "shadow mode" in r.getMessage()]


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_refused_request_is_served_with_the_headers_enforcing_sends(
    framework: str, serve_asgi: Any, serve_aiohttp: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="permits")
    limiter = permits.FixedWindowLimiter(2, 60.0, name="api")
    async with (
        serving(framework, limiter, serve_asgi, serve_aiohttp, enforce=False) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        responses = [await client.get("/hello") for _ in range(5)]
    assert [r.status_code for r in responses] == [200] * 5
    assert all(r.text == "hello" for r in responses)
    assert limiter.statistics().total_failed_leases == 3  # decided and counted as enforcing would
    # (FastAPI drops the headers a dependency set when the route returns a Response of its own)
    if framework != "fastapi":
        assert responses[0].headers["ratelimit"] == '"api";r=1;t=60'
        last = responses[4].headers["ratelimit"]
        assert last.startswith('"api";r=0;t=') and 1 <= int(last.rsplit("=", 1)[1]) <= 60
        assert responses[4].headers["ratelimit-policy"] == '"api";q=2;w=60'
    assert "retry-after" not in responses[4].headers  # served: no rejection to retry
    logged = shadow_log(caplog)
    assert len(logged) == 1, [r.getMessage() for r in logged]  # three refusals within a second: one line
    assert logged[0].levelno == logging.INFO
    assert "'api' would have rejected 1 request(s)" in logged[0].getMessage()
    assert "limit_reached" in logged[0].getMessage()


@pytest.mark.parametrize("framework", MIDDLEWARES)
async def test_the_metrics_count_shadow_rejected(framework: str, serve_asgi: Any, serve_aiohttp: Any) -> None:
    registry = CollectorRegistry()
    limiter = permits.FixedWindowLimiter(1, 60.0, name="api")
    async with (
        serving(framework, limiter, serve_asgi, serve_aiohttp, enforce=False, metrics=registry) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        codes = [(await client.get("/hello")).status_code for _ in range(3)]
    assert codes == [200, 200, 200]

    def counted(result: str) -> float | None:
        return registry.get_sample_value("permits_requests_total", {"limiter": "api", "result": result})

    assert counted("acquired") == 1
    assert counted("shadow_rejected") == 2
    assert counted("global_limiter") is None


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_enforcing_is_the_default(framework: str, serve_asgi: Any, serve_aiohttp: Any) -> None:
    limiter = permits.FixedWindowLimiter(1, 60.0, name="api")
    async with (
        serving(framework, limiter, serve_asgi, serve_aiohttp, enforce=True) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        codes = [(await client.get("/hello")).status_code for _ in range(2)]
    assert codes == [200, 429]


def test_enforce_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="enforce must be a bool, got str"):
        RateLimitMiddleware(PlainTextResponse("x"), "2/second", enforce="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="enforce must be a bool, got int"):
        RateLimit("2/second", enforce=0)  # type: ignore[arg-type]
