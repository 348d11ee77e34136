"""Wrong arguments to the WSGI middleware and the Flask extension fail when the object is built,
naming the argument; a WSGI key function cannot be awaited, nor an on_rejected."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

import permits
from permits.wsgi import RateLimitMiddleware

from _integration import require

flask = require("flask")
from permits.flask import RateLimit  # noqa: E402


def limiter() -> permits.RateLimiter:
    return permits.FixedWindowLimiter(5, 1)


def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [])
    return [b"ok"]


BUILDERS = {
    "wsgi": lambda lim, **kw: RateLimitMiddleware(app, lim, **kw),
    "flask": lambda lim, **kw: RateLimit(lim, **kw),
    "flask view": lambda lim, **kw: RateLimit().limit(lim, **kw),
}


async def async_key(request: Any) -> str:
    return "k"


class AsyncCallable:
    async def __call__(self, request: Any, lease: permits.Lease) -> None:
        return None


BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"key": "x-api-key"}, TypeError, "key must be callable"),
    ({"key": async_key}, TypeError, "key must be a plain function"),
    ({"on_rejected": AsyncCallable()}, TypeError, "on_rejected must be a plain function"),
    ({"on_rejected": "sorry"}, TypeError, "on_rejected"),
    ({"permit_count": 0}, ValueError, "permit_count"),
    ({"permit_count": 6}, ValueError, "permit_count 6 exceeds the limiter's limit of 5"),
    ({"permit_count": True}, TypeError, "permit_count"),
    ({"wait": "yes"}, TypeError, "wait"),
    ({"timeout": 5}, ValueError, "timeout bounds a wait: it needs wait=True"),
    ({"wait": True, "timeout": "5"}, TypeError, "timeout"),
    ({"wait": True, "timeout": True}, TypeError, "timeout"),
    ({"wait": True, "timeout": -1}, ValueError, "timeout"),
    ({"wait": True, "timeout": float("nan")}, ValueError, "timeout"),
    ({"wait": True, "timeout": float("inf")}, ValueError, "timeout"),
    ({"max_queued": 5}, ValueError, "max_queued bounds the waiting requests: it needs wait=True"),
    ({"wait": True, "max_queued": True}, TypeError, "max_queued must be an int or None"),
    ({"wait": True, "max_queued": "5"}, TypeError, "max_queued must be an int or None"),
    ({"wait": True, "max_queued": -1}, ValueError, "max_queued must be >= 0"),
    ({"status_code": 200}, ValueError, "status_code"),
    ({"status_code": "429"}, TypeError, "status_code"),
    ({"headers": 1}, TypeError, "headers"),
]


@pytest.mark.parametrize("build", BUILDERS)
def test_a_limiter_is_required(build: str) -> None:
    for wrong in (42, object()):
        with pytest.raises(TypeError, match=r"limiter must be a permits\.RateLimiter or KeyedRateLimiter, a spec"):
            BUILDERS[build](wrong)
    with pytest.raises(ValueError, match=r"limiter: not a rate: 'limiter'"):  # a rate string, but not one
        BUILDERS[build]("limiter")


@pytest.mark.parametrize("build", BUILDERS)
@pytest.mark.parametrize(("options", "error", "message"), BAD)
def test_bad_options(build: str, options: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        BUILDERS[build](limiter(), **options)


def test_the_middlewares_and_the_extensions_own_arguments() -> None:
    with pytest.raises(TypeError, match="app must be a WSGI application"):
        RateLimitMiddleware(None, limiter())  # type: ignore[arg-type]
    for build in (BUILDERS["wsgi"], BUILDERS["flask"]):
        with pytest.raises(ValueError, match="exempt paths must be str starting with '/'"):
            build(limiter(), exempt=["health"])
        with pytest.raises(TypeError, match="exempt"):
            build(limiter(), exempt=5)
    with pytest.raises(TypeError, match="without a limiter has no global limit to configure: key, wait"):
        RateLimit(key=lambda request: "k", wait=True)
    with pytest.raises(TypeError, match="decorates a view function"):
        RateLimit().limit(limiter())("view")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="init_app"):
        RateLimit(limiter()).init_app("app")  # type: ignore[arg-type]
    flask_app = flask.Flask(__name__)
    RateLimit().init_app(flask_app)
    with pytest.raises(RuntimeError, match="has a RateLimit already"):
        RateLimit(limiter()).init_app(flask_app)


def test_good_options_are_kept() -> None:
    keyed = permits.PartitionedLimiter.per_key(permits.specs.Concurrency(3))
    middleware = RateLimitMiddleware(app, keyed, permit_count=3, wait=True, timeout=2, status_code=503, headers=False)
    policy = middleware.policy
    assert (policy.permit_count, policy.wait, policy.status_code, policy.headers) == (3, True, 503, False)
    assert middleware.gate.timeout == 2.0
    assert policy.max_queued == 1000  # the default
    bounded = RateLimitMiddleware(app, limiter(), wait=True).policy
    assert (bounded.timeout, bounded.max_queued) == (30.0, 1000)
    unbounded = RateLimitMiddleware(app, limiter(), wait=True, timeout=None, max_queued=None).policy
    assert (unbounded.timeout, unbounded.max_queued) == (None, None)
    assert policy.key is not None  # keyed: the client's address by default
    assert RateLimitMiddleware(app, limiter()).policy.key is None  # a plain limiter ignores the key
    RateLimit(exempt=[])  # (no global limit: nothing given)


def test_a_key_that_returns_an_awaitable_is_an_error_and_nothing_is_taken() -> None:
    keyed = permits.PartitionedLimiter.per_key(permits.specs.Concurrency(1))
    middleware = RateLimitMiddleware(app, keyed, key=lambda environ: async_key(environ))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (the coroutine is closed: no "never awaited" warning)
        with pytest.raises(TypeError, match="returned an awaitable"):
            middleware({"PATH_INFO": "/", "REMOTE_ADDR": "127.0.0.1"}, lambda *a: None)  # type: ignore[arg-type]
    assert keyed.statistics() == permits.Statistics(0, 0, 0, 0)
