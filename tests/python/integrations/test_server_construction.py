"""Wrong arguments to the server integrations fail when the object is built, naming the argument."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.applications import Starlette

import permits
from permits.aiohttp import limit, rate_limit_middleware
from permits.asgi import RateLimitMiddleware
from permits.fastapi import RateLimit


def limiter() -> permits.RateLimiter:
    return permits.FixedWindowLimiter(5, 1)


def builders() -> list[Any]:
    app = Starlette()
    return [
        lambda lim, **kw: RateLimitMiddleware(app, lim, **kw),
        lambda lim, **kw: RateLimit(lim, **kw),
        lambda lim, **kw: rate_limit_middleware(lim, **kw),
        lambda lim, **kw: limit(lim, **kw),
    ]


BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"key": "x-api-key"}, TypeError, "key must be callable"),
    ({"permit_count": 0}, ValueError, "permit_count"),
    ({"permit_count": 6}, ValueError, "permit_count 6 exceeds the limiter's limit of 5"),
    ({"permit_count": 1.0}, TypeError, "permit_count"),
    ({"permit_count": True}, TypeError, "permit_count"),
    ({"wait": "yes"}, TypeError, "wait"),
    ({"status_code": 200}, ValueError, "status_code"),
    ({"status_code": "429"}, TypeError, "status_code"),
    ({"on_rejected": "sorry"}, TypeError, "on_rejected"),
    ({"headers": 1}, TypeError, "headers"),
    ({"timeout": 5}, ValueError, "timeout bounds a wait: it needs wait=True"),
    ({"wait": True, "timeout": "5"}, TypeError, "timeout must be seconds"),
    ({"wait": True, "timeout": True}, TypeError, "timeout must be seconds"),
    ({"wait": True, "timeout": -1}, ValueError, "timeout must be a finite number of seconds >= 0"),
    ({"wait": True, "timeout": float("nan")}, ValueError, "timeout must be a finite number"),
    ({"wait": True, "timeout": float("inf")}, ValueError, "timeout must be a finite number"),
    ({"max_queued": 5}, ValueError, "max_queued bounds the waiting requests: it needs wait=True"),
    ({"wait": True, "max_queued": True}, TypeError, "max_queued must be an int or None"),
    ({"wait": True, "max_queued": 1.5}, TypeError, "max_queued must be an int or None"),
    ({"wait": True, "max_queued": -1}, ValueError, "max_queued must be >= 0"),
]


@pytest.mark.parametrize("build", range(4))
def test_a_limiter_is_required(build: int) -> None:
    for wrong in (None, 42, object()):
        with pytest.raises(TypeError, match=r"limiter must be a permits\.RateLimiter or KeyedRateLimiter, a spec"):
            builders()[build](wrong)
    with pytest.raises(ValueError, match=r"limiter: not a rate: 'limiter'"):  # a rate string, but not one
        builders()[build]("limiter")


@pytest.mark.parametrize("build", range(4))
@pytest.mark.parametrize(("options", "error", "message"), BAD)
def test_bad_options(build: int, options: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        builders()[build](limiter(), **options)


def test_the_middlewares_own_arguments() -> None:
    with pytest.raises(TypeError, match="app must be an ASGI application"):
        RateLimitMiddleware(None, limiter())  # type: ignore[arg-type]
    for build in (lambda **kw: RateLimitMiddleware(Starlette(), limiter(), **kw), rate_limit_middleware_with):
        with pytest.raises(ValueError, match="exempt paths must be str starting with '/'"):
            build(exempt=["health"])
        with pytest.raises(TypeError, match="exempt"):
            build(exempt=5)
    with pytest.raises(TypeError, match="decorates a handler"):
        limit(limiter())("handler")  # type: ignore[arg-type]


def rate_limit_middleware_with(**kw: Any) -> Any:
    return rate_limit_middleware(limiter(), **kw)


def test_good_options_are_kept() -> None:
    keyed = permits.PartitionedLimiter.per_key(permits.specs.Concurrency(3))
    dependency = RateLimit(keyed, permit_count=3, wait=True, status_code=503, headers=False)
    policy = dependency.policy
    assert (policy.permit_count, policy.wait, policy.status_code, policy.headers) == (3, True, 503, False)
    assert policy.key is not None  # keyed: the client's address by default
    assert RateLimit(limiter()).policy.key is None  # a plain limiter ignores the key


@pytest.mark.parametrize("build", range(4))
def test_a_wait_is_bounded_by_default(build: int) -> None:
    # 30 s and 1000 requests waiting unless told otherwise; None lifts a bound, 0 lets none wait.
    # (aiohttp's functions keep their policy in the closure they return.)
    made = builders()[build](limiter(), wait=True)
    if build < 2:
        assert (made.policy.timeout, made.policy.max_queued) == (30.0, 1000)
        unbounded = builders()[build](limiter(), wait=True, timeout=None, max_queued=None).policy
        assert (unbounded.timeout, unbounded.max_queued) == (None, None)
        assert builders()[build](limiter(), wait=True, timeout=0, max_queued=0).policy.max_queued == 0
    # The defaults, or None, given without wait=True are not mistakes.
    builders()[build](limiter(), timeout=30, max_queued=1000)
    builders()[build](limiter(), timeout=None, max_queued=None)
