"""Reading the exported numbers back: a Prometheus exposition scraped over HTTP and parsed, an
OpenTelemetry SDK's in-memory reader."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import httpx

from _support import need


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def exposition(registry: Any) -> Iterator[str]:
    """``registry`` served by prometheus_client's own HTTP server on a free loopback port."""
    prometheus_client = need("prometheus_client")
    server, thread = prometheus_client.start_http_server(free_port(), addr="127.0.0.1", registry=registry)
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition at ``url``: (name, sorted labels) -> value."""
    parser = need("prometheus_client.parser")
    text = httpx.get(url, timeout=10).text
    samples = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


class OTel:
    """A meter of an SDK MeterProvider read by an InMemoryMetricReader (and ``others`` beside it)."""

    def __init__(self, others: int = 0) -> None:
        sdk_metrics = need("opentelemetry.sdk.metrics")
        export = need("opentelemetry.sdk.metrics.export")
        self.reader = export.InMemoryMetricReader()
        self.others = [export.InMemoryMetricReader() for _ in range(others)]
        self.provider = sdk_metrics.MeterProvider(metric_readers=[self.reader, *self.others])
        self.meter = self.provider.get_meter("permits-tests")

    def points(self, reader: Any = None) -> dict[str, list[Any]]:
        """Every data point ``reader`` (the first reader by default) collects now, by metric name."""
        data = (reader or self.reader).get_metrics_data()
        found: dict[str, list[Any]] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found

    def value(self, name: str, **attributes: str) -> Any:
        for point in self.points().get(name, []):
            if dict(point.attributes) == attributes:
                return point
        return None
