"""The OpenTelemetry instruments: one set per Meter, shared by every limiter instrumented to it.
Leases by result and active leases are kept in a permits Meter per limiter name (atomics in the
extension) and observed at collection time, as is the queue's length. OpenTelemetry's API has no
asynchronous histogram: a stamped lease's duration is held in its Meter as it ends and recorded to
the histogram when the SDK collects (the leases' callback flushes them first), so the release makes
no Python call; a Meter holding _PENDING durations already has the next recorded at once."""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from .. import _core, _lost_leases
from .._core import Clock, LimiterClosedError
from ._meters import MeterTable, results_of

# Seconds: OpenTelemetry's default boundaries are meant for milliseconds.
_BOUNDARIES = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]

# Durations a limiter name holds between two collections (8 bytes each, 1 MiB at most); past
# them, a release records its own at once. The SDK takes several microseconds a value: this many
# keep a collection's flush near a second, far inside its callbacks' timeout.
_PENDING = 1 << 17

_sets: dict[int, tuple[Meter, OpenTelemetryMetrics]] = {}  # (the meter kept: its id stays its own)


_sets_lock = threading.Lock()  # two threads instrumenting at once make one set, not two


def metrics_of(meter: Meter) -> OpenTelemetryMetrics:
    with _sets_lock:
        found = _sets.get(id(meter))
        if found is None:
            found = _sets[id(meter)] = (meter, OpenTelemetryMetrics(meter))
        return found[1]


def _histogram(meter: Meter, name: str, description: str) -> Any:
    advice = "explicit_bucket_boundaries_advisory"
    extra = {advice: _BOUNDARIES} if advice in inspect.signature(meter.create_histogram).parameters else {}
    return meter.create_histogram(name, unit="s", description=description, **extra)


class OpenTelemetryMetrics:
    def __init__(self, meter: Meter) -> None:
        self.limiters: weakref.WeakSet[Any] = weakref.WeakSet()
        self.meters = MeterTable(self._meter)
        meter.create_observable_counter(
            "permits.leases", callbacks=[self._leases], unit="{lease}", description="Leases handed out, by result"
        )
        meter.create_observable_up_down_counter(
            "permits.active_leases", callbacks=[self._active], unit="{lease}",
            description="Granted leases not yet released",
        )  # fmt: skip
        self.lease_duration = _histogram(meter, "permits.lease.duration", "Time from a lease's grant to its release")
        self.queue_duration = _histogram(meter, "permits.queue.duration", "Time requests spent queued, by outcome")
        self.requests = meter.create_counter(
            "permits.requests", unit="{request}", description="Requests seen by a rate-limiting middleware, by result"
        )
        self.lost = meter.create_counter(
            "permits.leases.lost",
            unit="{lease}",
            description="Leases a shared state forgot while they were held, and that could not be taken back",
        )
        self.lost_keys: dict[str, object] = {}  # one per limiter name: a loss counts once per meter
        meter.create_observable_up_down_counter(
            "permits.queued", callbacks=[self._queued], unit="{request}", description="Requests waiting in a queue"
        )

    def _meter(self, name: str, clock: Clock) -> _core.Meter:
        """The permits Meter of limiters named ``name`` on ``clock``: their leases' durations are
        recorded to ``permits.lease.duration`` when the SDK collects."""
        record = functools.partial(self.lease_duration.record, attributes={"limiter": name})
        return _core.Meter(clock, _BOUNDARIES, record=record, pending_limit=_PENDING)

    def _leases(self, options: CallbackOptions) -> Iterable[Observation]:
        # (Called before the SDK reads its synchronous instruments: the durations recorded here are
        # in this collection.)
        for found in self.meters.by_name().values():
            for metered in found:
                metered.meter.flush()
        return [
            Observation(n, {"limiter": name, "result": result})
            for name, found in self.meters.by_name().items()
            for result, n in sorted(results_of(found).items())
        ]

    def _active(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(sum(m.meter.active for m in found), {"limiter": name})
            for name, found in self.meters.by_name().items()
        ]

    def _queued(self, options: CallbackOptions) -> Iterable[Observation]:
        totals: dict[str, int] = {}
        for limiter in list(self.limiters):
            try:
                queued = limiter.statistics().current_queued_count
            except LimiterClosedError:
                queued = 0
            totals[limiter.name] = totals.get(limiter.name, 0) + queued
        return [Observation(queued, {"limiter": name}) for name, queued in sorted(totals.items())]


class OpenTelemetrySink:
    """The attribute sets of one limiter name, made once per result. ``meter``: the permits Meter
    a lease can be stamped with, to end itself there."""

    __slots__ = ("__weakref__", "_attributes", "_by_result", "_metered", "_metrics", "_name", "lost_key", "meter")

    def __init__(self, metrics: OpenTelemetryMetrics, limiter: Any) -> None:
        self._metrics = metrics
        self._metered = metrics.meters.metered_for(limiter.name, limiter._rl_clock)
        self.meter = self._metered.meter
        self._name = limiter.name
        self._attributes = {"limiter": limiter.name}
        self._by_result: dict[str, dict[str, str]] = {}
        metrics.limiters.add(limiter)
        self.lost_key = metrics.lost_keys.setdefault(limiter.name, object())
        _lost_leases.listen(limiter.name, self)

    def _with(self, result: str) -> dict[str, str]:
        found = self._by_result.get(result)
        if found is None:
            found = self._by_result[result] = {"limiter": self._name, "result": result}
        return found

    def leased(self, result: str) -> None:
        self._metered.count(result)

    def active(self, delta: int) -> None:
        self.meter.add_active(delta)

    def lease_duration(self, seconds: float) -> None:
        self._metrics.lease_duration.record(seconds, self._attributes)

    def queue_duration(self, result: str, seconds: float) -> None:
        self._metrics.queue_duration.record(seconds, self._with(result))

    def queue(self, delta: int) -> None:
        pass  # (permits.queued is observed from statistics() at collection time)

    def request(self, result: str) -> None:
        self._metrics.requests.add(1, self._with(result))

    def lost(self, leases: int) -> None:
        self._metrics.lost.add(leases, self._attributes)
