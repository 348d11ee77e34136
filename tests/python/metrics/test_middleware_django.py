"""metrics= of permits.django's middleware (settings.PERMITS) with a view's @limit, a Django site
served by werkzeug: requests counted by result (acquired, global_limiter, route_limiter,
client_left), scraped from a real exposition."""

from __future__ import annotations

import httpx
import pytest
from _scrape import exposition, scrape, value

import permits

from _integration import raw_request, require, until
from _support import need


@pytest.mark.timeout(60)
def test_requests_by_result() -> None:
    require("django")
    from _django_site import Site, serve_django

    from permits.django import limit

    registry = need("prometheus_client").CollectorRegistry()
    clock = permits.ManualClock()
    queue = permits.ConcurrencyLimiter(1, queue_limit=1, clock=clock, name="global")
    route = permits.FixedWindowLimiter(2, 60, clock=clock, name="route")

    def requests(result: str) -> float | None:
        return registry.get_sample_value("permits_requests_total", {"limiter": "global", "result": result})

    site = Site(limit(route))
    options = {"limiter": queue, "wait": True, "exempt": ["/health"], "metrics": registry}
    with serve_django(site, options) as url, httpx.Client(base_url=url) as client:
        # The route's limit refuses the third; /health skips the middleware (not counted), not the route's limit.
        statuses = [client.get(path).status_code for path in ("/hello", "/hello", "/hello", "/health")]
        assert statuses == [200, 200, 429, 429]
        # (a request's permit comes back when the server closes its response, which may be after
        # its client has read it)
        until(lambda: queue.available_permits() == 1)
        held = queue.acquire()
        assert held
        leaving = raw_request(url, "/hello")
        until(lambda: queue.statistics().current_queued_count == 1)
        assert client.get("/hello").status_code == 429  # the queue is full: the global limiter refuses
        leaving.close()
        until(lambda: requests("client_left") == 1)
        held.release()
    with exposition(registry) as exposed:
        samples = scrape(exposed)
    assert value(samples, "permits_requests_total", limiter="global", result="acquired") == 2
    assert value(samples, "permits_requests_total", limiter="global", result="route_limiter") == 1
    assert value(samples, "permits_requests_total", limiter="global", result="global_limiter") == 1
    assert value(samples, "permits_requests_total", limiter="global", result="client_left") == 1
    # The wait the client left is a cancelled one; the request refused while it queued, queue_full.
    assert value(samples, "permits_queue_duration_seconds_count", limiter="global", result="cancelled") == 1
    assert value(samples, "permits_leases_total", limiter="global", result="queue_full") == 1


def test_metrics_setting_is_checked() -> None:
    require("django")
    from _django_site import build

    with pytest.raises(TypeError, match="metrics must be"):
        build({"limiter": permits.TokenBucketLimiter(1, 1, 1.0), "metrics": "yes"})


def test_opentelemetry_meter_in_settings() -> None:
    require("django")
    from _django_site import Site, serve_django
    from _scrape import OTel

    otel = OTel()
    limiter = permits.FixedWindowLimiter(1, 60, clock=permits.ManualClock(), name="django")
    with serve_django(Site(), {"limiter": limiter, "metrics": otel.meter}) as url, httpx.Client(base_url=url) as client:
        assert [client.get("/hello").status_code for _ in range(3)] == [200, 429, 429]
    assert otel.value("permits.requests", limiter="django", result="acquired").value == 1
    assert otel.value("permits.requests", limiter="django", result="global_limiter").value == 2
