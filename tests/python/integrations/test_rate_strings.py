"""Every server integration takes a rate string (or a spec) where it takes a limiter, and limits
each key with it; ``retry_after=`` is the Retry-After of a rejection whose lease knows none; the
rejection's body is the same everywhere (issue 40, item 5). Real loopback servers."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.responses import PlainTextResponse

import permits
from permits import keys
from permits.asgi import RateLimitMiddleware
from permits.fastapi import RateLimit

from _frameworks import CLIENT, FRAMEWORKS, serving


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("rate", ["2/minute", "2/min", "5/minute;2/hour", permits.specs.FixedWindow(2, 60.0)], ids=str)
async def test_a_rate_string_or_a_spec_limits_each_key(
    framework: str, rate: object, serve_asgi: Any, serve_aiohttp: Any
) -> None:
    async with (
        serving(framework, rate, serve_asgi, serve_aiohttp, key=CLIENT) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        alice = [(await client.get("/hello", headers={"x-client": "alice"})).status_code for _ in range(3)]
        bob = (await client.get("/hello", headers={"x-client": "bob"})).status_code
    assert alice == [200, 200, 429]
    assert bob == 200  # a limit of its own


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_rate_tells_the_client_its_own_interval(framework: str, serve_asgi: Any, serve_aiohttp: Any) -> None:
    """ "2/minute" (a SlidingLog): the policy says w=60, and a refusal's Retry-After is at most 60
    (the permits taken come back a minute after they were: issue 40, item 3)."""
    async with (
        serving(framework, "2/minute", serve_asgi, serve_aiohttp, key=CLIENT) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        responses = [await client.get("/hello", headers={"x-client": "alice"}) for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    # (FastAPI drops the headers a dependency set when the route returns a Response of its own)
    policies = [r.headers.get("ratelimit-policy") for r in responses]
    assert policies[2] is not None and all(p is None or p.endswith(";q=2;w=60") for p in policies), policies
    assert 1 <= int(responses[2].headers["retry-after"]) <= 60


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_several_rates_tell_the_client_the_one_that_binds(
    framework: str, serve_asgi: Any, serve_aiohttp: Any
) -> None:
    """ "5/minute;2/hour" (issue 42, item 7): every rate holds, and the policy sent is the one with
    the fewest permits left: the hour's, whose refusal's Retry-After is at most an hour."""
    async with (
        serving(framework, "5/minute;2/hour", serve_asgi, serve_aiohttp, key=CLIENT) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        responses = [await client.get("/hello", headers={"x-client": "alice"}) for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert responses[2].headers["ratelimit-policy"].endswith(";q=2;w=3600")
    assert 60 < int(responses[2].headers["retry-after"]) <= 3600


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_translated_key_limits_the_names_it_maps_together(
    framework: str, serve_asgi: Any, serve_aiohttp: Any
) -> None:
    """``keyed.with_translated_key(fn)`` (issue 42, item 6): "Alice" and "alice" are one client, and
    the headers tell that client's figures. (``keys.header`` keys a request ``(name, value)``.)"""
    users = permits.PartitionedLimiter.per_key("2/minute", name="users")
    folded = users.with_translated_key(lambda key: (key[0], key[1].casefold()))
    async with (
        serving(framework, folded, serve_asgi, serve_aiohttp, key=CLIENT) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        codes = [(await client.get("/hello", headers={"x-client": name})).status_code for name in ("Alice", "alice")]
        refused = await client.get("/hello", headers={"x-client": "ALICE"})
        bob = await client.get("/hello", headers={"x-client": "Bob"})
    assert codes == [200, 200] and refused.status_code == 429 and bob.status_code == 200
    assert refused.headers["ratelimit-policy"] == '"users";q=2;w=60'


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_retry_after_is_sent_when_the_lease_knows_none(
    framework: str, serve_asgi: Any, serve_aiohttp: Any
) -> None:
    limiter = permits.ConcurrencyLimiter(1, name="busy")
    held = limiter.acquire()  # the one permit: every request is rejected, with no retry_after of its own
    async with (
        serving(framework, limiter, serve_asgi, serve_aiohttp, retry_after=4.2) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        rejected = await client.get("/hello")
    held.release()
    assert rejected.status_code == 429
    assert rejected.headers["retry-after"] == "5"  # whole seconds, rounded up
    assert rejected.text == "Too Many Requests (limiter: busy)"  # one body everywhere


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [("soon", TypeError, "retry_after"), (-1, ValueError, "retry_after"), (float("nan"), ValueError, "retry_after")],
)
def test_a_bad_retry_after_is_refused_when_built(value: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        RateLimitMiddleware(PlainTextResponse("x"), "2/second", retry_after=value)  # type: ignore[arg-type]
    with pytest.raises(error, match=match):
        RateLimit("2/second", retry_after=value)  # type: ignore[arg-type]


def test_a_bad_rate_is_refused_when_built() -> None:
    with pytest.raises(ValueError, match="'2/fortnight'"):
        RateLimitMiddleware(PlainTextResponse("x"), "2/fortnight")
    with pytest.raises(TypeError, match="rate such as"):
        RateLimit(None)  # type: ignore[arg-type]


def test_a_rate_string_makes_a_per_key_limiter_keyed_by_client_ip() -> None:
    middleware = RateLimitMiddleware(PlainTextResponse("x"), "100/minute")
    assert isinstance(middleware.policy.limiter, permits.KeyedRateLimiter)
    assert isinstance(middleware.policy.key, type(keys.client_ip()))
    assert middleware.policy.limiter.spec == permits.specs.parse("100/minute")  # type: ignore[union-attr]


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("style", ["legacy", "both"])
async def test_legacy_headers_or_both(framework: str, style: str, serve_asgi: Any, serve_aiohttp: Any) -> None:
    """``headers="legacy"``: X-RateLimit-Limit, -Remaining and -Reset (seconds); ``"both"``: those and
    the IETF fields (issue 43, item 1)."""
    limiter = permits.FixedWindowLimiter(2, 60.0, name="api")
    async with (
        serving(framework, limiter, serve_asgi, serve_aiohttp, headers=style) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        responses = [await client.get("/hello") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    rejected = responses[2]
    assert rejected.headers["x-ratelimit-limit"] == "2"
    assert rejected.headers["x-ratelimit-remaining"] == "0"
    assert 1 <= int(rejected.headers["x-ratelimit-reset"]) <= 60
    assert ("ratelimit-policy" in rejected.headers) == (style == "both")
    # (FastAPI drops the headers a dependency set when the route returns a Response of its own)
    if framework != "fastapi":
        assert responses[0].headers["x-ratelimit-remaining"] == "1"


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_concurrency_limit_says_its_unit(framework: str, serve_asgi: Any, serve_aiohttp: Any) -> None:
    limiter = permits.ConcurrencyLimiter(1, name="busy")
    held = limiter.acquire()
    async with (
        serving(framework, limiter, serve_asgi, serve_aiohttp, headers="both") as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        rejected = await client.get("/hello")
    held.release()
    assert rejected.headers["ratelimit-policy"] == '"busy";q=1;qu="concurrent-requests"'
    assert "x-ratelimit-reset" not in rejected.headers  # time frees nothing


@pytest.mark.parametrize("bad", ["ietf2", 1, None])
def test_a_bad_headers_style_is_refused_when_built(bad: object) -> None:
    with pytest.raises(TypeError, match="headers"):
        RateLimitMiddleware(PlainTextResponse("x"), "2/second", headers=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="headers"):
        RateLimit("2/second", headers=bad)  # type: ignore[arg-type]
