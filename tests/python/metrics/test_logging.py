"""The logger "permits": a store falling back to on_error, a failing on_rejected."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from _scrape import free_port

import permits

from _integration import require, serve_wsgi


def test_store_degrading_to_on_error_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    redis = require("redis")
    from permits.redis import RedisStore

    client = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.5)  # nobody listens
    store = RedisStore(client, on_error="deny", timeout=0.5)
    limiter = store.token_bucket("api", 5, 5, 1.0)
    with caplog.at_level(logging.WARNING, logger="permits"):
        assert limiter.acquire().reason == "backend_unavailable"
        assert limiter.acquire().reason == "backend_unavailable"
    warned = [r for r in caplog.records if r.name == "permits" and "on_error='deny'" in r.getMessage()]
    assert len(warned) == 1 and "'api'" in warned[0].getMessage()


def test_failing_on_rejected_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    from permits.wsgi import RateLimitMiddleware

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [b"hi"]

    def on_rejected(environ: Any, lease: permits.Lease) -> Any:
        raise RuntimeError("broken callback")

    limiter = permits.TokenBucketLimiter(1, 1, 1.0, clock=permits.ManualClock())
    with (
        caplog.at_level(logging.ERROR, logger="permits"),
        serve_wsgi(RateLimitMiddleware(app, limiter, on_rejected=on_rejected)) as base,
    ):
        assert httpx.get(base).status_code == 200
        assert httpx.get(base).status_code == 429
    assert any(r.name == "permits" and "on_rejected" in r.getMessage() and r.exc_info for r in caplog.records)
