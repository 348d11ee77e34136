"""``problem_details=True`` on every server integration (issue 43, item 2): a rejection's body is an
RFC 9457 ``application/problem+json`` document of the draft's quota-exceeded problem type
(draft-ietf-httpapi-ratelimit-headers-11), naming the violated policy as ``RateLimit-Policy`` does.
Real loopback servers; the document is parsed as a client would."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from starlette.responses import PlainTextResponse

import permits
from permits.asgi import RateLimitMiddleware

from _frameworks import FRAMEWORKS, serving

QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_rejection_is_a_problem_document(framework: str, serve_asgi: Any, serve_aiohttp: Any) -> None:
    limiter = permits.FixedWindowLimiter(1, 60.0, name="api")
    async with (
        serving(framework, limiter, serve_asgi, serve_aiohttp, problem_details=True) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        served = await client.get("/hello")
        refused = await client.get("/hello")
    assert served.status_code == 200 and served.text == "hello"  # a served request is untouched
    assert refused.status_code == 429
    assert refused.headers["content-type"].split(";")[0] == "application/problem+json"
    problem = json.loads(refused.content)
    assert problem["type"] == QUOTA_EXCEEDED
    assert problem["title"] == "Request cannot be satisfied as assigned quota has been exceeded"
    assert problem["status"] == 429
    assert problem["violated-policies"] == ["api"]
    assert "'api'" in problem["detail"] and "limit_reached" in problem["detail"]
    assert problem["retry-after"] == int(refused.headers["retry-after"])
    assert 1 <= problem["retry-after"] <= 60
    assert refused.headers["ratelimit-policy"] == '"api";q=1;w=60'  # the same name as the headers'


@pytest.mark.parametrize("framework", ["asgi", "aiohttp", "wsgi", "flask", "django"])
async def test_a_concurrency_refusal_says_no_retry_after_unless_given(
    framework: str, serve_asgi: Any, serve_aiohttp: Any
) -> None:
    pool = permits.ConcurrencyLimiter(1, name="busy")
    held = pool.acquire()
    async with (
        serving(framework, pool, serve_asgi, serve_aiohttp, problem_details=True, status_code=503) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        refused = await client.get("/hello")
    held.release()
    problem = json.loads(refused.content)
    assert refused.status_code == problem["status"] == 503
    assert problem["violated-policies"] == ["busy"]
    assert "retry-after" not in problem and "retry-after" not in refused.headers


@pytest.mark.parametrize("framework", ["asgi", "wsgi"])
async def test_the_plain_text_stays_the_default(framework: str, serve_asgi: Any, serve_aiohttp: Any) -> None:
    limiter = permits.FixedWindowLimiter(1, 60.0, name="api")
    async with (
        serving(framework, limiter, serve_asgi, serve_aiohttp) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        await client.get("/hello")
        refused = await client.get("/hello")
    assert refused.headers["content-type"].startswith("text/plain")
    assert refused.text == "Too Many Requests (limiter: api)"


def test_problem_details_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="problem_details must be a bool, got str"):
        RateLimitMiddleware(PlainTextResponse("x"), "2/second", problem_details="yes")  # type: ignore[arg-type]
