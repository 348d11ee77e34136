"""permits.django: the middleware (settings.PERMITS) and limit() (a view's own) in a Django project
under werkzeug's threaded server and waitress on loopback, driven by httpx; time on a ManualClock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from _django_site import UNSET, Site, build, serve_django
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views import View

import permits
from permits import keys
from permits.django import limit

from _integration import until

USER = keys.header("x-user")


def rate_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k in ("ratelimit", "ratelimit-policy", "retry-after")}


@pytest.fixture(params=["werkzeug", "waitress"])
def server(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_global_limit_then_the_views(server: str, clock: permits.ManualClock) -> None:
    per_user = permits.PartitionedLimiter.per_key(permits.specs.TokenBucket(100, 10, 1.0), name="per-user", clock=clock)
    searches = permits.FixedWindowLimiter(2, 60, name="search", clock=clock)
    site = Site(limit(searches))
    with (
        serve_django(site, {"limiter": per_user, "key": USER, "exempt": ["/health"]}, server) as url,
        httpx.Client(base_url=url) as client,
    ):
        ok = client.get("/hello", headers={"x-user": "alice"})
        assert ok.status_code == 200
        # Of the two limits, the headers describe the one with fewer permits left.
        assert rate_headers(ok) == {"ratelimit-policy": '"search";q=2;w=60', "ratelimit": '"search";r=1;t=60'}
        assert client.get("/hello", headers={"x-user": "bob"}).status_code == 200
        rejected = client.get("/hello", headers={"x-user": "alice"})
        assert (rejected.status_code, rejected.text) == (429, "Too Many Requests (limiter: search)")
        assert rate_headers(rejected) == {
            "ratelimit-policy": '"search";q=2;w=60',
            "ratelimit": '"search";r=0;t=60',
            "retry-after": "60",
        }
        # The view rejected alice's second request, and it still counts against her global limit.
        assert per_user.available_permits(("x-user", "alice")) == 98
        # Exempt from the global limit; the view's own still applies.
        assert client.get("/health", headers={"x-user": "carol"}).status_code == 429
        assert per_user.statistics(("x-user", "carol")).total_successful_leases == 0
    assert site.calls == ["/hello", "/hello"]


def test_the_global_limit_alone_and_its_rejection(server: str, clock: permits.ManualClock) -> None:
    limiter = permits.TokenBucketLimiter(2, 1, 2.5, clock=clock, name="api")
    site = Site()
    with serve_django(site, {"limiter": limiter}, server) as url, httpx.Client(base_url=url) as client:
        first, second, third = [client.get("/hello") for _ in range(3)]
        clock.advance(2.5)
        fourth = client.get("/hello")
    assert rate_headers(first) == {"ratelimit-policy": '"api";q=2;w=5', "ratelimit": '"api";r=1;t=3'}
    assert second.status_code == 200
    assert (third.status_code, third.text) == (429, "Too Many Requests (limiter: api)")
    assert third.headers["content-type"] == "text/plain; charset=utf-8"
    assert rate_headers(third) == {
        "ratelimit-policy": '"api";q=2;w=5',
        "ratelimit": '"api";r=0;t=3',
        "retry-after": "3",
    }
    assert fourth.status_code == 200
    assert site.calls == ["/hello", "/hello", "/hello"]


def test_stacked_view_limits_give_back_what_the_others_granted(clock: permits.ManualClock) -> None:
    outer = permits.FixedWindowLimiter(5, 60, name="outer", clock=clock)
    inner = permits.FixedWindowLimiter(1, 60, name="inner", clock=clock)
    site = Site(lambda view: limit(outer)(limit(inner)(view)))
    with serve_django(site, None) as url, httpx.Client(base_url=url) as client:
        responses = [client.get("/hello") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 429, 429]
    assert outer.available_permits() == 4  # the rejected requests' permits came back
    assert inner.statistics().total_failed_leases == 2
    # Without the middleware the view's limit writes its own headers.
    assert rate_headers(responses[0])["ratelimit"] == '"inner";r=0;t=60'


def test_a_class_based_view_is_limited_in_its_dispatch(clock: permits.ManualClock) -> None:
    items = permits.FixedWindowLimiter(2, 60, name="items", clock=clock)
    site = Site(lambda view: limit(items)(view) if isinstance(view, type) else view)
    limiter = permits.FixedWindowLimiter(100, 60, name="global", clock=clock)
    with serve_django(site, {"limiter": limiter}) as url, httpx.Client(base_url=url) as client:
        codes = [client.get("/items").status_code, client.post("/items").status_code, client.get("/items").status_code]
        assert client.get("/hello").status_code == 200  # (not decorated)
    assert codes == [200, 201, 429]
    assert site.calls == ["GET /items", "POST /items", "/hello"]
    assert limiter.available_permits() == 96  # the view's rejection counts against the global limit


def test_a_limited_method_of_a_class_based_view(clock: permits.ManualClock) -> None:
    gets = permits.FixedWindowLimiter(1, 60, clock=clock)

    class Only(View):
        @limit(gets)
        def get(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("got")

    site = Site()
    site.urlpatterns.append(path("only", Only.as_view()))
    with serve_django(site, None) as url, httpx.Client(base_url=url) as client:
        assert [client.get("/only").status_code for _ in range(2)] == [200, 429]


# ---- leases held until the response is closed; released at once when the view raises ----
@pytest.mark.timeout(30)
@pytest.mark.parametrize("where", ["global", "view"])
def test_a_streaming_response_holds_its_permit_to_the_end(server: str, where: str) -> None:
    gate = permits.ConcurrencyLimiter(1, name="streams")
    site = Site(limit(gate) if where == "view" else lambda view: view)
    options = {"limiter": gate} if where == "global" else None
    with serve_django(site, options, server) as url, httpx.Client(base_url=url, timeout=20) as client:
        site.feed.put(b"first ")  # (a server sends the headers with the first chunk)
        with client.stream("GET", "/stream") as streaming:
            assert streaming.status_code == 200
            assert streaming.headers["ratelimit"] == '"streams";r=0'
            chunks = streaming.iter_raw()
            assert next(chunks) == b"first "
            assert gate.available_permits() == 0
            busy = client.get("/hello")
            assert (busy.status_code, busy.text) == (429, "Too Many Requests (limiter: streams)")
            assert "retry-after" not in busy.headers  # (time frees no concurrency permit)
            site.feed.put(b"last")
            site.feed.put(None)
            assert b"".join(chunks) == b"last"
        until(lambda: gate.available_permits() == 1)
        assert site.closed.is_set()
        assert client.get("/hello").status_code == 200


@pytest.mark.parametrize("where", ["global", "view", "both"])
def test_a_view_that_raises_gives_its_permits_back_at_once(where: str) -> None:
    global_gate = permits.ConcurrencyLimiter(1, name="global")
    view_gate = permits.ConcurrencyLimiter(1, name="view")
    site = Site(limit(view_gate) if where != "global" else lambda view: view)
    site.error_permits = lambda: (global_gate.available_permits(), view_gate.available_permits())
    options = {"limiter": global_gate} if where != "view" else None
    with serve_django(site, options) as url, httpx.Client(base_url=url) as client:
        failed = client.get("/boom")
        assert (failed.status_code, failed.text) == (500, "server error")
        # Already free while Django rendered its error page.
        assert site.on_error == [(1, 1)]
        for _ in range(2):
            assert client.get("/hello").status_code == 200
            # (the server closes the response, which releases its permits, after sending it)
            until(lambda: (global_gate.available_permits(), view_gate.available_permits()) == (1, 1))


# ---- keys: Django's HttpRequest, the client behind a trusted proxy ----
def test_key_functions_receive_the_django_request(clock: permits.ManualClock) -> None:
    seen: list[tuple[str, bool, str]] = []

    def key(where: str) -> Callable[[Any], str]:
        def read(request: Any) -> str:
            seen.append((where, isinstance(request, HttpRequest), request.path))
            return str(request.headers.get("x-user", request.META["REMOTE_ADDR"]))

        return read

    per_user = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(1, 60), clock=clock)
    route = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(5, 60), clock=clock)
    site = Site(limit(route, key=key("view")))
    with serve_django(site, {"limiter": per_user, "key": key("global")}) as url, httpx.Client(base_url=url) as client:
        codes = [client.get("/hello", headers=h).status_code for h in ({"x-user": "a"}, {"x-user": "a"}, {})]
    assert codes == [200, 429, 200]
    assert seen == [
        ("global", True, "/hello"),
        ("view", True, "/hello"),
        ("global", True, "/hello"),
        ("global", True, "/hello"),
        ("view", True, "/hello"),
    ]
    assert route.available_permits("127.0.0.1") == 4  # keyed by the peer: no x-user


def test_the_client_address_behind_a_trusted_proxy(clock: permits.ManualClock) -> None:
    per_ip = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(1, 60), clock=clock)
    route = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(1, 60), clock=clock)
    by_view = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(1, 60), clock=clock)
    trusted = keys.client_ip(trusted_proxies=["127.0.0.1"])
    # The view's client_ip is called with the HttpRequest (the middleware's reads the environ).
    site = Site(lambda view: limit(route)(limit(by_view, key=lambda request: trusted(request))(view)))
    with serve_django(site, {"limiter": per_ip, "key": trusted}) as url, httpx.Client(base_url=url) as client:
        first = client.get("/hello", headers={"X-Forwarded-For": "6.6.6.6, 198.51.100.7"})
        spoofed = client.get("/hello", headers={"X-Forwarded-For": "198.51.100.7", "Forwarded": "for=1.2.3.4"})
        other = client.get("/hello", headers={"X-Forwarded-For": "203.0.113.9"})
    assert first.status_code == 200
    assert (spoofed.status_code, spoofed.text) == (429, "Too Many Requests (limiter: default)")
    assert per_ip.statistics("198.51.100.7").total_successful_leases == 1
    assert by_view.statistics("198.51.100.7").total_successful_leases == 1
    assert route.statistics("127.0.0.1").total_successful_leases == 1  # the default key: the peer
    assert (other.status_code, other.text) == (429, "Too Many Requests (limiter: default)")  # route's limit


# ---- wait=True: the request's thread waits, at most timeout seconds ----
@pytest.mark.timeout(30)
@pytest.mark.parametrize("where", ["global", "view"])
def test_wait_blocks_until_a_permit_or_the_timeout(where: str) -> None:
    gate = permits.ConcurrencyLimiter(1, name="one")
    site = Site(limit(gate, wait=True, timeout=0.3) if where == "view" else lambda view: view)
    options = {"limiter": gate, "wait": True, "timeout": 0.3} if where == "global" else None
    with serve_django(site, options) as url, httpx.Client(base_url=url, timeout=20) as client:
        lease = gate.acquire()
        assert lease
        started = time.monotonic()
        timed_out = client.get("/hello")
        assert time.monotonic() - started < 0.3 + 1.0
        assert (timed_out.status_code, timed_out.text) == (429, "Too Many Requests (limiter: one)")
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(client.get, "/hello")
            until(lambda: gate.statistics().current_queued_count == 1)
            threading.Timer(0.0, lease.release).start()
            assert waiting.result(timeout=10).status_code == 200
    assert site.calls == ["/hello"]
    until(lambda: gate.available_permits() == 1)  # (released when the server has closed the response)


# ---- exempt paths are relative to SCRIPT_NAME ----
def test_exempt_prefixes_are_below_the_script_name(clock: permits.ManualClock) -> None:
    limiter = permits.FixedWindowLimiter(1, 60, clock=clock)
    site = Site()
    options = {"limiter": limiter, "exempt": ["/health"]}
    with serve_django(site, options, script_name="/app") as url, httpx.Client(base_url=url) as client:
        assert [client.get("/app/health").status_code for _ in range(3)] == [200, 200, 200]
        assert [client.get("/app/hello").status_code for _ in range(2)] == [200, 429]
    assert site.calls == ["/app/health"] * 3 + ["/app/hello"]


# ---- on_rejected: an HttpResponse, or None; a broken one gives the default rejection ----
def test_on_rejected_responses_of_the_global_limit_and_of_a_view(clock: permits.ManualClock) -> None:
    def as_response(request: HttpRequest, lease: permits.Lease) -> HttpResponse:
        return JsonResponse(
            {"error": "slow down", "limiter": lease.metadata["limiter"], "path": request.path}, status=503
        )

    global_limit = permits.FixedWindowLimiter(1, 60, name="global", clock=clock)
    view_limit = permits.FixedWindowLimiter(1, 60, name="view", clock=clock)
    site = Site(limit(view_limit, on_rejected=as_response, status_code=503))
    options = {"limiter": global_limit, "on_rejected": as_response, "exempt": ["/health"]}
    with serve_django(site, options) as url, httpx.Client(base_url=url) as client:
        assert client.get("/hello").status_code == 200
        by_global = client.get("/hello")
        by_view = client.get("/health")  # (exempt from the global limit: the view's rejects)
    assert (by_global.status_code, by_global.json()) == (
        503,
        {"error": "slow down", "limiter": "global", "path": "/hello"},
    )
    assert by_global.headers["retry-after"] == "60"
    assert by_global.headers["ratelimit"] == '"global";r=0;t=60'
    assert (by_view.status_code, by_view.json()) == (503, {"error": "slow down", "limiter": "view", "path": "/health"})
    assert by_view.headers["ratelimit"] == '"view";r=0;t=60'


def _returns_text(request: Any, lease: permits.Lease) -> Any:
    return "slow down"


def _raises(request: Any, lease: permits.Lease) -> Any:
    raise RuntimeError("broken callback")


def _declines(request: Any, lease: permits.Lease) -> Any:
    return None


@pytest.mark.parametrize("callback", [_returns_text, _raises, _declines])
@pytest.mark.parametrize("where", ["global", "view"])
def test_other_on_rejected_answers_give_the_default_rejection(
    callback: Any, where: str, clock: permits.ManualClock
) -> None:
    limiter = permits.FixedWindowLimiter(1, 60, clock=clock)
    site = Site(limit(limiter, on_rejected=callback) if where == "view" else lambda view: view)
    options = {"limiter": limiter, "on_rejected": callback} if where == "global" else None
    with serve_django(site, options) as url, httpx.Client(base_url=url) as client:
        responses = [client.get("/hello") for _ in range(2)]
    assert [r.status_code for r in responses] == [200, 429]
    assert responses[1].text == "Too Many Requests (limiter: default)"
    assert responses[1].headers["retry-after"] == "60"


# ---- bad settings: TypeError (or ValueError) when Django builds the middleware ----
async def _async(request: Any) -> str:
    return "k"


@pytest.mark.parametrize(
    ("setting", "error"),
    [
        (UNSET, TypeError),
        ([], TypeError),
        ({}, TypeError),
        ({"key": USER}, TypeError),
        ({"limiter": object()}, TypeError),
        ({"limiter": "not a rate"}, ValueError),  # text is a rate string (issue 40, item 5)
        ({"limiter": "100/minute", "retry_after": -1}, ValueError),
        ({"limiter": permits.FixedWindowLimiter(1, 60), "key": "x-user"}, TypeError),
        ({"limiter": permits.FixedWindowLimiter(1, 60), "app": object()}, TypeError),
        ({"limiter": permits.FixedWindowLimiter(1, 60), "timeout": 1.0}, ValueError),
        ({"limiter": permits.FixedWindowLimiter(1, 60), "wait": True, "max_queued": -1}, ValueError),
        ({"limiter": permits.FixedWindowLimiter(1, 60), "wait": True, "max_queued": True}, TypeError),
        ({"limiter": permits.FixedWindowLimiter(1, 60), "permit_count": 2}, ValueError),
        ({"limiter": permits.FixedWindowLimiter(1, 60), "exempt": ["health"]}, ValueError),
        (
            {"limiter": permits.PartitionedLimiter.per_key(permits.specs.Concurrency(1)), "key": _async},
            TypeError,
        ),
    ],
)
def test_bad_settings_fail_when_django_builds_the_middleware(setting: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        build(setting)


def test_good_settings_build() -> None:
    handler = build({"limiter": permits.FixedWindowLimiter(1, 60), "exempt": ("/health",), "wait": False})
    assert handler is not None


def test_limit_checks_its_arguments_and_what_it_decorates() -> None:
    with pytest.raises(TypeError):
        limit(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limiter: not a rate"):
        limit("no limiter")
    with pytest.raises(ValueError):
        limit(permits.FixedWindowLimiter(1, 60), timeout=1.0)
    with pytest.raises(TypeError):
        limit(permits.FixedWindowLimiter(1, 60))(42)  # type: ignore[type-var]

    async def async_view(request: HttpRequest) -> HttpResponse:
        return HttpResponse()

    with pytest.raises(TypeError):
        limit(permits.FixedWindowLimiter(1, 60))(async_view)
