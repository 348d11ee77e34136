"""The Prometheus instruments: one set per CollectorRegistry (a name registers once per registry),
shared by every limiter instrumented to it. The queue's length is read at collection time; in
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``), where the collecting process is not the one
whose limiters queue, it is a gauge each process writes as its waits enter and leave the queue."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .. import _lost_leases
from .._core import LimiterClosedError

_sets: weakref.WeakKeyDictionary[CollectorRegistry, PrometheusMetrics] = weakref.WeakKeyDictionary()


def multiprocess() -> bool:
    """Whether prometheus_client writes its values to PROMETHEUS_MULTIPROC_DIR's files (as it
    decided when first imported), for MultiProcessCollector to read from another process."""
    return values.ValueClass is not values.MutexValue


_sets_lock = threading.Lock()  # two threads instrumenting at once register one set, not two


def metrics_of(registry: CollectorRegistry) -> PrometheusMetrics:
    with _sets_lock:
        found = _sets.get(registry)
        if found is None:
            found = _sets[registry] = PrometheusMetrics(registry)
        return found


class _Queued(Collector):
    """permits_queued: each instrumented limiter's statistics().current_queued_count, summed by name."""

    def __init__(self) -> None:
        self.limiters: weakref.WeakSet[Any] = weakref.WeakSet()

    def describe(self) -> list[Metric]:
        return [GaugeMetricFamily("permits_queued", "Requests waiting in a limiter's queue", labels=["limiter"])]

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("permits_queued", "Requests waiting in a limiter's queue", labels=["limiter"])
        totals: dict[str, int] = {}
        for limiter in list(self.limiters):
            try:
                queued = limiter.statistics().current_queued_count
            except LimiterClosedError:
                queued = 0
            totals[limiter.name] = totals.get(limiter.name, 0) + queued
        for name, queued in sorted(totals.items()):
            family.add_metric([name], queued)
        yield family


class PrometheusMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.leases = Counter(
            "permits_leases", "Leases handed out, by result", ["limiter", "result"], registry=registry
        )
        # livesum: in multiprocess mode the sum over the live processes (a dead one holds nothing).
        self.active = Gauge(
            "permits_active_leases", "Granted leases not yet released", ["limiter"], registry=registry,
            multiprocess_mode="livesum",
        )  # fmt: skip
        self.lease_duration = Histogram(
            "permits_lease_duration_seconds", "Time from a lease's grant to its release", ["limiter"], registry=registry
        )
        self.queue_duration = Histogram(
            "permits_queue_duration_seconds",
            "Time requests spent queued, by outcome",
            ["limiter", "result"],
            registry=registry,
        )
        self.requests = Counter(
            "permits_requests", "Requests seen by a rate-limiting middleware, by result", ["limiter", "result"],
            registry=registry,
        )  # fmt: skip
        self.lost = Counter(
            "permits_leases_lost",
            "Leases a shared state forgot while they were held, and that could not be taken back",
            ["limiter"],
            registry=registry,
        )
        self.queued: _Queued | None = None
        self.queued_gauge: Gauge | None = None
        if multiprocess():  # (a custom collector runs only in the collecting process: never read)
            self.queued_gauge = Gauge(
                "permits_queued", "Requests waiting in a limiter's queue", ["limiter"], registry=registry,
                multiprocess_mode="livesum",
            )  # fmt: skip
        else:
            self.queued = _Queued()
            registry.register(self.queued)


class PrometheusSink:
    """The instruments' children of one limiter name, made once per result."""

    __slots__ = (
        "__weakref__", "_active", "_duration", "_leases", "_metrics", "_name", "_queue", "_queued", "_requests",
        "lost_key",
    )  # fmt: skip

    def __init__(self, metrics: PrometheusMetrics, limiter: Any) -> None:
        self._metrics = metrics
        self._name = name = limiter.name
        self._active = metrics.active.labels(name)
        self._duration = metrics.lease_duration.labels(name)
        self._leases: dict[str, Any] = {}
        self._queue: dict[str, Any] = {}
        self._requests: dict[str, Any] = {}
        if metrics.queued is not None:
            metrics.queued.limiters.add(limiter)
        gauge = metrics.queued_gauge
        self._queued = None if gauge is None else gauge.labels(name)
        self.lost_key = metrics.lost.labels(name)
        _lost_leases.listen(name, self)

    def leased(self, result: str) -> None:
        child = self._leases.get(result)
        if child is None:
            child = self._leases[result] = self._metrics.leases.labels(self._name, result)
        child.inc()

    def active(self, delta: int) -> None:
        self._active.inc(delta)

    def lease_duration(self, seconds: float) -> None:
        self._duration.observe(seconds)

    def queue_duration(self, result: str, seconds: float) -> None:
        child = self._queue.get(result)
        if child is None:
            child = self._queue[result] = self._metrics.queue_duration.labels(self._name, result)
        child.observe(seconds)

    def queue(self, delta: int) -> None:
        if self._queued is not None:  # (else read from statistics() when collected)
            self._queued.inc(delta)

    def request(self, result: str) -> None:
        child = self._requests.get(result)
        if child is None:
            child = self._requests[result] = self._metrics.requests.labels(self._name, result)
        child.inc()

    def lost(self, leases: int) -> None:
        self.lost_key.inc(leases)
