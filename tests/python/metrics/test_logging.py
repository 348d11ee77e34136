"""The logger "permits": a store falling back to on_error, a failing on_rejected, a concurrency lease
collected unreleased (the engine's, a store's)."""

from __future__ import annotations

import gc
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


def _forgotten(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if r.name == "permits" and r.levelno == logging.WARNING]


@pytest.mark.parametrize("make", ["limiter", "per_key"])
def test_a_collected_unreleased_concurrency_lease_is_logged(make: str, caplog: pytest.LogCaptureFixture) -> None:
    gc.collect()  # (leases other tests left in cycles, e.g. in a failed test's traceback: not this test's)
    if make == "limiter":
        limiter: Any = permits.ConcurrencyLimiter(3)
        lease = limiter.acquire(2)
        available = limiter.available_permits
    else:
        limiter = permits.PartitionedLimiter.per_key(permits.specs.Concurrency(3))
        lease = limiter.acquire("a", 2)
        available = lambda: limiter.available_permits("a")  # noqa: E731
    assert lease and available() == 1
    with caplog.at_level(logging.WARNING, logger="permits"):
        del lease
        gc.collect()
    assert available() == 3
    assert _forgotten(caplog.records) == [
        "a concurrency lease of 2 permit(s) was garbage-collected without release(); its permits were released"
    ]


def test_released_failed_and_time_based_leases_are_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    pool = permits.ConcurrencyLimiter(1)
    bucket = permits.TokenBucketLimiter(1, 1, 1.0, clock=permits.ManualClock())
    with caplog.at_level(logging.DEBUG, logger="permits"):
        released = pool.acquire()
        released.release()
        held = pool.acquire()
        failed = pool.acquire()  # refused: it holds nothing
        timed = bucket.acquire()  # a token is spent, never given back: nothing to release
        assert held and not failed and timed
        del released, failed, timed
        gc.collect()
        held.release()
    assert _forgotten(caplog.records) == []


def test_a_lease_of_a_closed_limiter_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    limiter = permits.ConcurrencyLimiter(2)
    lease = limiter.acquire()
    limiter.close()  # its permits go nowhere now
    with caplog.at_level(logging.WARNING, logger="permits"):
        del lease
        gc.collect()
    assert _forgotten(caplog.records) == []


def test_a_dropped_lease_of_a_store_limiter_is_logged(redis_server: Any, caplog: pytest.LogCaptureFixture) -> None:
    from permits.redis import RedisStore

    store = RedisStore(redis_server.client(), prefix="permits-test-logging:")
    limiter = store.concurrency("pool", 3)
    lease = limiter.acquire(2)
    assert lease and limiter.available_permits() == 1
    with caplog.at_level(logging.WARNING, logger="permits"):
        del lease
        gc.collect()
    assert limiter.available_permits() == 3  # (given back by the store's renewal thread)
    assert _forgotten(caplog.records) == [
        "a lease of 2 permit(s) of 'pool' was dropped without release(): its permits are given back now"
    ]
    store.close()
