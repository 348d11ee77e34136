"""The Prometheus instruments: one set per CollectorRegistry (a name registers once per registry),
shared by every limiter instrumented to it. Leases by result, active leases and lease durations are
kept in a Meter per limiter name (atomics in the extension: a stamped lease ends itself there, no
Python call per lease) and read when the registry is collected, as is the queue's length. In
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``), where the collecting process is not the one whose
limiters count, each is an instrument of prometheus-client's that each process writes as it goes."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from .. import _lost_leases
from .._core import LimiterClosedError, Meter
from ._meters import Metered, MeterTable, results_of

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


_LEASES = ("permits_leases", "Leases handed out, by result")
_ACTIVE = ("permits_active_leases", "Granted leases not yet released")
_DURATION = ("permits_lease_duration_seconds", "Time from a lease's grant to its release")
BOUNDS = Histogram.DEFAULT_BUCKETS


class _Leases(Collector):
    """permits_leases, permits_active_leases and permits_lease_duration_seconds read from the
    registry's meters, summed by limiter name."""

    def __init__(self) -> None:
        self.meters = MeterTable(lambda name, clock: Meter(clock, BOUNDS))

    def describe(self) -> list[Metric]:
        return [
            CounterMetricFamily(*_LEASES, labels=["limiter", "result"]),
            GaugeMetricFamily(*_ACTIVE, labels=["limiter"]),
            HistogramMetricFamily(*_DURATION, labels=["limiter"]),
        ]

    def collect(self) -> Iterator[Metric]:
        leases = CounterMetricFamily(*_LEASES, labels=["limiter", "result"])
        active = GaugeMetricFamily(*_ACTIVE, labels=["limiter"])
        duration = HistogramMetricFamily(*_DURATION, labels=["limiter"])
        for name, found in self.meters.by_name().items():
            created = min(m.created for m in found)
            counts = [0] * (len(BOUNDS))
            total = 0.0
            for metered in found:
                buckets, seconds = metered.meter.durations()
                counts = [a + b for a, b in zip(counts, buckets, strict=True)]
                total += seconds
            for result, n in sorted(results_of(found).items()):
                leases.add_metric([name, result], n, created=created)
            active.add_metric([name], sum(m.meter.active for m in found))
            cumulative, running = [], 0
            for bound, n in zip(BOUNDS, counts, strict=True):
                running += n
                cumulative.append((floatToGoString(bound), running))  # type: ignore[no-untyped-call]
            duration.add_metric([name], cumulative, total)
            duration.samples.append(Sample(f"{_DURATION[0]}_created", {"limiter": name}, created))
        yield leases
        yield active
        yield duration


class PrometheusMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.leases: Counter | None = None
        self.active: Gauge | None = None
        self.lease_duration: Histogram | None = None
        self.metered: _Leases | None = None
        if multiprocess():
            self.leases = Counter(*_LEASES, ["limiter", "result"], registry=registry)
            # livesum: in multiprocess mode the sum over the live processes (a dead one holds nothing).
            self.active = Gauge(*_ACTIVE, ["limiter"], registry=registry, multiprocess_mode="livesum")
            self.lease_duration = Histogram(*_DURATION, ["limiter"], registry=registry)
        else:
            self.metered = _Leases()
            registry.register(self.metered)
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
    """The instruments' children of one limiter name, made once per result. ``meter``: the Meter
    a lease can be stamped with, to end itself there (None in multiprocess mode)."""

    __slots__ = (
        "__weakref__", "_active", "_duration", "_leases", "_metered", "_metrics", "_name", "_queue", "_queued",
        "_requests", "lost_key", "meter",
    )  # fmt: skip

    def __init__(self, metrics: PrometheusMetrics, limiter: Any) -> None:
        self._metrics = metrics
        self._name = name = limiter.name
        self._metered: Metered | None = None
        self.meter: Meter | None = None
        if metrics.metered is not None:
            self._metered = metrics.metered.meters.metered_for(name, limiter._rl_clock)
            self.meter = self._metered.meter
        else:
            assert metrics.active is not None and metrics.lease_duration is not None
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
        if self._metered is not None:
            self._metered.count(result)
            return
        child = self._leases.get(result)
        if child is None:
            assert self._metrics.leases is not None
            child = self._leases[result] = self._metrics.leases.labels(self._name, result)
        child.inc()

    def active(self, delta: int) -> None:
        if self.meter is not None:
            self.meter.add_active(delta)
        else:
            self._active.inc(delta)

    def lease_duration(self, seconds: float) -> None:
        if self.meter is not None:
            self.meter.observe(seconds)
        else:
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
