"""The requests a rate-limiting middleware counts (``metrics=`` of the integrations), by result:
``acquired``, ``global_limiter`` (the middleware's limiter refused), ``route_limiter`` (a route's
own limit refused), ``client_left`` (the client went away while queued)."""

from __future__ import annotations

from typing import Any

from . import _checked_meter, _registry, _sinks, instrument
from ._observer import Sink


class RequestCounter:
    __slots__ = ("_sinks",)

    def __init__(self, sinks: list[Sink]) -> None:
        self._sinks = sinks

    def count(self, result: str) -> None:
        for sink in self._sinks:
            sink.request(result)  # type: ignore[attr-defined]


def _target(metrics: object) -> tuple[object, object]:
    """(registry, meter) of a middleware's ``metrics=``: True (Prometheus' default registry), a
    prometheus_client CollectorRegistry or an OpenTelemetry Meter."""
    if metrics is True:
        return None, None
    module = type(metrics).__module__
    if module.startswith("prometheus_client"):
        return metrics, None
    if module.startswith("opentelemetry"):
        return None, metrics
    raise TypeError(
        "metrics must be a bool, a prometheus_client.CollectorRegistry or an opentelemetry.metrics.Meter, "
        f"got {type(metrics).__name__}"
    )


def check(metrics: object) -> None:
    """The checks ``for_middleware`` makes of ``metrics=`` (its type; the exporter library
    installed), without instrumenting anything nor registering a series."""
    registry, meter = _target(metrics)
    if meter is None:
        _registry(registry)
    else:
        _checked_meter(meter)


def for_middleware(metrics: object, limiter: Any) -> tuple[Any, RequestCounter]:
    """The middleware's limiter, instrumented, and the counter of its requests (labelled with the
    limiter's name)."""
    registry, meter = _target(metrics)
    limiter = instrument(limiter, registry=registry, meter=meter)
    sinks = [sink for _, sink in _sinks(limiter.__wrapped__, registry, meter, prometheus=meter is None)]
    return limiter, RequestCounter(sinks)
