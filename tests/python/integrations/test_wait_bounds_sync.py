"""``wait=True`` is bounded in the sync integrations (the WSGI middleware, Flask's extension and
view limit, Django's middleware and view limit), on real servers on loopback (werkzeug's, which
gives the request its socket, and waitress, which does not): past ``max_queued`` requests
waiting, one more is refused at once (reason ``"queue_full"``); a wait past ``timeout`` on the
limiter's clock (a ManualClock) is refused (reason ``"timeout"``); neither takes a permit nor
keeps its place. The defaults bound a wait to 30 s."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

import permits
from permits.wsgi import RateLimitMiddleware

from _integration import require, serve_wsgi, until

flask = require("flask")
from _django_site import Site, serve_django  # noqa: E402

import permits.django  # noqa: E402
from permits.flask import RateLimit  # noqa: E402

WHERE = ["wsgi", "wsgi-waitress", "flask", "flask-view", "django", "django-view"]


class Served:
    def __init__(self, url: str, reasons: list[str | None], calls: list[str]) -> None:
        self.url = url
        self.reasons = reasons
        self.calls = calls


@contextlib.contextmanager
def served(where: str, limiter: Any, **bounds: Any) -> Iterator[Served]:
    """A server with one limited route, ``/hello``: the reasons of the rejections its
    ``on_rejected`` saw, and the calls of the view."""
    reasons: list[str | None] = []

    def seen(request: Any, lease: permits.Lease) -> None:
        reasons.append(lease.reason)  # (None: the default rejection is sent)

    options: dict[str, Any] = {"wait": True, "on_rejected": seen, **bounds}
    if where.startswith("django"):
        site = Site(permits.django.limit(limiter, **options) if where == "django-view" else lambda view: view)
        with serve_django(site, None if where == "django-view" else {"limiter": limiter, **options}) as url:
            yield Served(url, reasons, site.calls)
        return
    calls: list[str] = []
    if where.startswith("wsgi"):

        def hello(environ: dict[str, Any], start_response: Any) -> list[bytes]:
            calls.append(environ["PATH_INFO"])
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"hello"]

        server = "waitress" if where == "wsgi-waitress" else "werkzeug"
        with serve_wsgi(RateLimitMiddleware(hello, limiter, **options), server) as url:
            yield Served(url, reasons, calls)
        return
    app = flask.Flask(__name__)
    rate_limit = RateLimit(limiter, **options) if where == "flask" else RateLimit()
    rate_limit.init_app(app)
    view: Callable[[Callable[..., Any]], Callable[..., Any]] = (
        rate_limit.limit(limiter, **options) if where == "flask-view" else (lambda function: function)
    )

    @app.get("/hello")
    @view
    def hello_view() -> str:
        calls.append(flask.request.path)
        return "hello"

    with serve_wsgi(app) as url:
        yield Served(url, reasons, calls)


def queued(limiter: Any) -> Callable[[], bool]:
    return lambda: limiter.statistics().current_queued_count == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", WHERE)
def test_a_request_beyond_max_queued_is_refused_at_once(where: str, clock: permits.ManualClock) -> None:
    # Its queue has no bound; its window (10 s) ends within the default timeout (30 s).
    limiter = permits.FixedWindowLimiter(1, 10, clock=clock, name="w")
    with (
        served(where, limiter, max_queued=1) as server,
        httpx.Client(base_url=server.url, timeout=20) as client,
        ThreadPoolExecutor(1) as pool,
    ):
        assert client.get("/hello").status_code == 200  # the window's only permit
        waiting = pool.submit(client.get, "/hello")
        until(queued(limiter))
        refused = client.get("/hello")  # answered now, the first one still waiting
        assert (refused.status_code, server.reasons) == (429, ["queue_full"])
        assert limiter.statistics().current_queued_count == 1  # it never queued in the limiter
        assert not waiting.done()
        clock.advance(10)
        assert waiting.result(timeout=20).status_code == 200
    assert server.calls == ["/hello", "/hello"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", WHERE)
def test_a_wait_past_its_timeout_is_refused_and_takes_nothing(where: str, clock: permits.ManualClock) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock, name="c")
    held = limiter.acquire()
    with (
        served(where, limiter, timeout=5, max_queued=1) as server,
        httpx.Client(base_url=server.url, timeout=20) as client,
        ThreadPoolExecutor(1) as pool,
    ):
        waiting = pool.submit(client.get, "/hello")
        until(queued(limiter))
        clock.advance(4)
        with pytest.raises(TimeoutError):
            waiting.result(timeout=0.2)  # (4 s of 5 on the limiter's clock: still waiting)
        clock.advance(1)
        timed_out = waiting.result(timeout=20)
        assert (timed_out.status_code, server.reasons) == (429, ["timeout"])
        assert limiter.statistics().current_queued_count == 0  # it left the limiter's queue
        # Its place among the max_queued is free again: the next request queues, not refused.
        again = pool.submit(client.get, "/hello")
        until(queued(limiter))
        held.release()
        assert again.result(timeout=20).status_code == 200
    assert server.reasons == ["timeout"]
    assert server.calls == ["/hello"]
    until(lambda: limiter.available_permits() == 1)  # the timed-out request took none


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["wsgi", "wsgi-waitress", "flask", "django"])
def test_with_the_defaults_a_wait_ends_after_30_seconds(where: str, clock: permits.ManualClock) -> None:
    # Before, a wait had no bound unless given one: it waited until a permit came, or forever.
    limiter = permits.FixedWindowLimiter(1, 3600, clock=clock, name="w")
    with (
        served(where, limiter) as server,
        httpx.Client(base_url=server.url, timeout=20) as client,
        ThreadPoolExecutor(1) as pool,
    ):
        assert client.get("/hello").status_code == 200
        waiting = pool.submit(client.get, "/hello")
        until(queued(limiter))
        clock.advance(30)
        assert waiting.result(timeout=20).status_code == 429
    assert server.reasons == ["timeout"]


def test_metrics_count_a_timeout_and_a_full_queue_as_the_limiters_refusals(clock: permits.ManualClock) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    limiter = permits.ConcurrencyLimiter(1, clock=clock, name="g")
    held = limiter.acquire()

    def hello(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [b"hello"]

    middleware = RateLimitMiddleware(hello, limiter, wait=True, timeout=5, max_queued=1, metrics=registry)
    with (
        serve_wsgi(middleware) as url,
        httpx.Client(base_url=url, timeout=20) as client,
        ThreadPoolExecutor(1) as pool,
    ):
        waiting = pool.submit(client.get, "/")
        until(queued(limiter))
        assert client.get("/").status_code == 429  # queue_full
        clock.advance(5)
        assert waiting.result(timeout=20).status_code == 429  # timeout
    held.release()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in registry.collect() for s in f.samples}
    assert samples[("permits_requests_total", (("limiter", "g"), ("result", "global_limiter")))] == 2
    assert samples[("permits_leases_total", (("limiter", "g"), ("result", "timeout")))] == 1
