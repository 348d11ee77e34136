"""permits.flask.RateLimit (the global limit, init_app) and its limit() (a view's own) in a Flask app
under werkzeug's threaded server and waitress on loopback, driven by httpx; time on a ManualClock."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

import permits
from permits import keys

from _integration import require, serve_wsgi, until

flask = require("flask")
from permits.flask import RateLimit  # noqa: E402

USER = keys.header("x-user")


class Site:
    """A Flask app with /hello, /boom (raises), /stream (yields what the test feeds) and /health,
    each under ``decorate`` (a view's limits), and the global ``rate_limit`` installed."""

    def __init__(self, rate_limit: RateLimit | None, decorate: Callable[[Any], Any] = lambda view: view) -> None:
        self.app = flask.Flask(__name__)
        self.calls: list[str] = []
        self.feed: queue.Queue[bytes | None] = queue.Queue()
        self.closed = threading.Event()

        def hello() -> str:
            self.calls.append(flask.request.headers.get("x-order", flask.request.path))
            return "hello"

        def boom() -> str:
            raise RuntimeError("boom")

        def stream() -> Any:
            def chunks() -> Iterator[bytes]:
                try:
                    while (chunk := self.feed.get(timeout=20)) is not None:
                        yield chunk
                finally:
                    self.closed.set()

            return flask.Response(chunks(), mimetype="text/plain")

        for path, view in (("/hello", hello), ("/boom", boom), ("/stream", stream), ("/health", hello)):
            self.app.add_url_rule(path, path, view_func=decorate(view))
        if rate_limit is not None:
            rate_limit.init_app(self.app)


def rate_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k in ("ratelimit", "ratelimit-policy", "retry-after")}


@pytest.fixture(params=["werkzeug", "waitress"])
def server(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_global_limit_then_the_views(server: str, clock: permits.ManualClock) -> None:
    per_user = permits.PartitionedLimiter.per_key(permits.specs.TokenBucket(100, 10, 1.0), name="per-user", clock=clock)
    searches = permits.FixedWindowLimiter(2, 60, name="search", clock=clock)
    rate_limit = RateLimit(per_user, key=USER, exempt=["/health"])
    site = Site(rate_limit, rate_limit.limit(searches))
    with serve_wsgi(site.app, server) as url, httpx.Client(base_url=url) as client:
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
    site = Site(RateLimit(limiter))
    with serve_wsgi(site.app, server) as url, httpx.Client(base_url=url) as client:
        first, second, third = [client.get("/hello") for _ in range(3)]
    assert rate_headers(first) == {"ratelimit-policy": '"api";q=2;w=5', "ratelimit": '"api";r=1;t=3'}
    assert second.status_code == 200
    assert (third.status_code, third.text) == (429, "Too Many Requests (limiter: api)")
    assert rate_headers(third) == {
        "ratelimit-policy": '"api";q=2;w=5',
        "ratelimit": '"api";r=0;t=3',
        "retry-after": "3",
    }


def test_stacked_view_limits_give_back_what_the_others_granted(clock: permits.ManualClock) -> None:
    outer = permits.FixedWindowLimiter(5, 60, name="outer", clock=clock)
    inner = permits.FixedWindowLimiter(1, 60, name="inner", clock=clock)
    rate_limit = RateLimit()
    site = Site(rate_limit, lambda view: rate_limit.limit(outer)(rate_limit.limit(inner)(view)))
    with serve_wsgi(site.app) as url, httpx.Client(base_url=url) as client:
        assert [client.get("/hello").status_code for _ in range(3)] == [200, 429, 429]
    assert outer.available_permits() == 4  # the rejected requests' permits came back
    assert inner.statistics().total_failed_leases == 2


def test_key_functions_receive_the_flask_request(clock: permits.ManualClock) -> None:
    seen: list[tuple[str, bool, str]] = []

    def key(where: str) -> Callable[[Any], str]:
        def read(request: Any) -> str:
            seen.append((where, isinstance(request, flask.Request), request.path))
            return str(request.headers.get("x-user", request.remote_addr))

        return read

    per_user = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(1, 60), clock=clock)
    route = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(5, 60), clock=clock)
    rate_limit = RateLimit(per_user, key=key("global"))
    site = Site(rate_limit, rate_limit.limit(route, key=key("view")))
    with serve_wsgi(site.app) as url, httpx.Client(base_url=url) as client:
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


def test_the_default_key_is_the_client_address_behind_a_trusted_proxy(clock: permits.ManualClock) -> None:
    per_ip = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(1, 60), clock=clock)
    route = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(1, 60), clock=clock)
    rate_limit = RateLimit(per_ip, key=keys.client_ip(trusted_proxies=["127.0.0.1"]))
    site = Site(rate_limit, rate_limit.limit(route))  # (the view's: the peer alone)
    with serve_wsgi(site.app) as url, httpx.Client(base_url=url) as client:
        first = client.get("/hello", headers={"X-Forwarded-For": "6.6.6.6, 198.51.100.7"})
        spoofed = client.get("/hello", headers={"X-Forwarded-For": "198.51.100.7", "Forwarded": "for=1.2.3.4"})
    assert first.status_code == 200
    assert (spoofed.status_code, spoofed.text) == (429, "Too Many Requests (limiter: default)")
    assert per_ip.statistics("198.51.100.7").total_successful_leases == 1
    assert route.statistics("127.0.0.1").total_successful_leases == 1


# ---- on_rejected: a Flask response, or None; a broken one gives the default rejection ----
def test_on_rejected_responses_of_the_global_limit_and_of_a_view(clock: permits.ManualClock) -> None:
    def as_response(request: Any, lease: permits.Lease) -> Any:
        # (in a request context: jsonify and flask.request work in the global limit's callback too)
        assert flask.request.path == request.path
        body = flask.jsonify(error="slow down", limiter=lease.metadata["limiter"], path=request.path)
        return flask.make_response(body, 503)

    global_limit = permits.FixedWindowLimiter(1, 60, name="global", clock=clock)
    view_limit = permits.FixedWindowLimiter(1, 60, name="view", clock=clock)
    rate_limit = RateLimit(global_limit, on_rejected=as_response, exempt=["/health"])
    site = Site(rate_limit, rate_limit.limit(view_limit, on_rejected=as_response, status_code=503))
    with serve_wsgi(site.app) as url, httpx.Client(base_url=url) as client:
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


def _returns_a_tuple(request: Any, lease: permits.Lease) -> Any:
    return "slow down", 429


def _raises(request: Any, lease: permits.Lease) -> Any:
    raise RuntimeError("broken callback")


@pytest.mark.parametrize("broken", [_returns_a_tuple, _raises])
@pytest.mark.parametrize("where", ["global", "view"])
def test_a_broken_on_rejected_gives_the_default_rejection_logged(
    broken: Any, where: str, clock: permits.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = permits.FixedWindowLimiter(1, 60, clock=clock)
    if where == "global":
        site = Site(RateLimit(limiter, on_rejected=broken))
    else:
        rate_limit = RateLimit()
        site = Site(rate_limit, rate_limit.limit(limiter, on_rejected=broken))
    with serve_wsgi(site.app) as url, httpx.Client(base_url=url) as client:
        client.get("/hello")
        rejected = client.get("/hello")
    assert (rejected.status_code, rejected.text) == (429, "Too Many Requests (limiter: default)")
    assert rejected.headers["retry-after"] == "60"
    assert rejected.headers["ratelimit"] == '"default";r=0;t=60'
    assert len([r for r in caplog.records if r.name == "permits" and r.levelname == "ERROR"]) == 1


# ---- leases held until the response is sent ----
@pytest.mark.parametrize("where", ["global", "view", "view without init_app"])
def test_a_streamed_response_holds_its_concurrency_permit_to_its_end(
    where: str, server: str, clock: permits.ManualClock
) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    if where == "global":
        site = Site(RateLimit(limiter))
    else:
        rate_limit = RateLimit()
        site = Site(rate_limit if where == "view" else None, rate_limit.limit(limiter))
    with serve_wsgi(site.app, server) as url, httpx.Client(base_url=url) as client:
        site.feed.put(b"one")
        with client.stream("GET", "/stream") as streaming:
            assert streaming.headers["ratelimit"] == '"default";r=0'
            chunks = streaming.iter_raw()
            assert next(chunks) == b"one"
            assert limiter.available_permits() == 0
            assert client.get("/hello").status_code == 429
            site.feed.put(None)
            assert list(chunks) == []
        until(site.closed.is_set)
        until(lambda: limiter.available_permits() == 1)
        assert client.get("/hello").status_code == 200


@pytest.mark.parametrize("where", ["global", "view", "view without init_app"])
def test_a_client_that_leaves_mid_stream_gives_the_permit_back(where: str, clock: permits.ManualClock) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    if where == "global":
        site = Site(RateLimit(limiter))
    else:
        rate_limit = RateLimit()
        site = Site(rate_limit if where == "view" else None, rate_limit.limit(limiter))
    with serve_wsgi(site.app) as url:
        site.feed.put(b"one")
        with httpx.Client(base_url=url) as client, client.stream("GET", "/stream") as streaming:
            assert next(streaming.iter_raw()) == b"one"
            assert limiter.available_permits() == 0
        for _ in range(200):  # until a write to the closed connection fails
            if limiter.available_permits() == 1:
                break
            site.feed.put(b"more")
            # (drained, or the stream ended on the write before: nothing drains the feed then)
            until(lambda: site.feed.empty() or limiter.available_permits() == 1)
        until(lambda: limiter.available_permits() == 1)
        assert site.closed.is_set()


@pytest.mark.parametrize("where", ["global", "view", "view without init_app"])
def test_a_view_that_raises_gives_a_500_and_the_permit_back(where: str, clock: permits.ManualClock) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    if where == "global":
        site = Site(RateLimit(limiter))
    else:
        rate_limit = RateLimit()
        site = Site(rate_limit if where == "view" else None, rate_limit.limit(limiter))
    with serve_wsgi(site.app) as url, httpx.Client(base_url=url) as client:
        assert client.get("/boom").status_code == 500
        until(lambda: limiter.available_permits() == 1)
        assert client.get("/hello").status_code == 200


def test_a_view_limit_without_init_app(clock: permits.ManualClock) -> None:
    limiter = permits.FixedWindowLimiter(2, 60, name="view", clock=clock)
    site = Site(None, RateLimit().limit(limiter))
    with serve_wsgi(site.app) as url, httpx.Client(base_url=url) as client:
        answers = [client.get("/hello") for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert [a.headers["ratelimit"] for a in answers] == ['"view";r=1;t=60', '"view";r=0;t=60', '"view";r=0;t=60']
    assert answers[2].headers["retry-after"] == "60"


# ---- wait=True ----
@pytest.mark.parametrize("where", ["global", "view"])
def test_a_queued_request_is_served_when_a_permit_comes_back_or_times_out(
    where: str, server: str, clock: permits.ManualClock
) -> None:
    limiter = permits.ConcurrencyLimiter(1, queue_limit=1, clock=clock)
    if where == "global":
        site = Site(RateLimit(limiter, wait=True, timeout=5))
    else:
        rate_limit = RateLimit()
        site = Site(rate_limit, rate_limit.limit(limiter, wait=True, timeout=5))
    with serve_wsgi(site.app, server) as url, httpx.Client(base_url=url, timeout=20) as client:
        with ThreadPoolExecutor(1) as pool:
            held = limiter.acquire()
            queued = pool.submit(client.get, "/hello", headers={"x-order": "served"})
            until(lambda: limiter.statistics().current_queued_count == 1)
            assert site.calls == []
            held.release()
            assert queued.result(timeout=20).status_code == 200
            until(lambda: limiter.available_permits() == 1)  # (once the server has closed the response)
            held = limiter.acquire()
            queued = pool.submit(client.get, "/hello", headers={"x-order": "timed out"})
            until(lambda: limiter.statistics().current_queued_count == 1)
            clock.advance_ns(5 * 10**9)
            assert queued.result(timeout=20).status_code == 429
            held.release()
    assert site.calls == ["served"]


def test_a_views_key_and_on_rejected_get_the_request_itself(clock: permits.ManualClock) -> None:
    """Not the ``flask.request`` proxy, which is unbound once the request has ended (issue 43,
    item 6): what a key function keeps is still readable afterwards."""
    kept: list[Any] = []

    def key(request: Any) -> str:
        kept.append(request)
        return "k"

    def on_rejected(request: Any, lease: permits.Lease) -> Any:
        kept.append(request)
        return None

    route = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(1, 60), clock=clock)
    rate_limit = RateLimit()
    site = Site(rate_limit, rate_limit.limit(route, key=key, on_rejected=on_rejected))
    with serve_wsgi(site.app) as url, httpx.Client(base_url=url) as client:
        codes = [client.get("/hello", params={"n": str(i)}).status_code for i in range(2)]
    assert codes == [200, 429]
    assert [request.args["n"] for request in kept] == ["0", "1", "1"]  # read after the requests ended
    assert all(type(request) is flask.Request for request in kept)


def test_a_global_key_that_raises_is_answered_by_the_applications_error_handling(
    clock: permits.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Under init_app the global limit runs before Flask: a key function's error is still the
    application's to answer (its errorhandler(500) page, its log), as an error in a view is."""

    def key(request: Any) -> str:
        raise LookupError("no tenant header")

    per_user = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(5, 60), clock=clock)
    site = Site(RateLimit(per_user, key=key))
    site.app.register_error_handler(500, lambda error: ("sorry, our fault", 500))
    with serve_wsgi(site.app) as url, httpx.Client(base_url=url) as client:
        response = client.get("/hello")
    assert response.status_code == 500 and response.text == "sorry, our fault"
    assert site.calls == []  # the view never ran
    assert any("no tenant header" in (r.exc_text or "") for r in caplog.records if r.exc_info)
