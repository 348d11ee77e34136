"""permits.metrics: limiter statistics and middleware events, exported to Prometheus
(prometheus-client) and OpenTelemetry (opentelemetry-api). Install them with ``permits[metrics]``.

``instrument`` returns a limiter to use in place of the one given: the same members, whose
every acquisition, queued wait and release is counted. Neither library is imported before it is
called; a limiter not instrumented pays nothing."""

from __future__ import annotations

from typing import Any, overload

from ..keyed_limiter import KeyedRateLimiter
from ..rate_limiter import RateLimiter
from ._instrumented import InstrumentedKeyedLimiter, InstrumentedLimiter, _Instrumented, wrapped_limiter
from ._observer import Observer, Sink

_EXTRA = "pip install 'permits[metrics]'"


def _registry(registry: object) -> Any:
    try:
        import prometheus_client
    except ImportError as exc:
        raise ImportError(f"exporting to Prometheus needs prometheus-client: {_EXTRA}") from exc
    if registry is None:
        return prometheus_client.REGISTRY
    if not isinstance(registry, prometheus_client.CollectorRegistry):
        raise TypeError(
            f"registry must be a prometheus_client.CollectorRegistry or None, got {type(registry).__name__}"
        )
    return registry


def _checked_meter(meter: object) -> Any:
    try:
        from opentelemetry.metrics import Meter
    except ImportError as exc:
        raise ImportError(f"exporting to OpenTelemetry needs opentelemetry-api: {_EXTRA}") from exc
    if not isinstance(meter, Meter):
        raise TypeError(f"meter must be an opentelemetry.metrics.Meter or None, got {type(meter).__name__}")
    return meter


def _sinks(limiter: Any, registry: object, meter: object, prometheus: bool) -> list[tuple[object, Sink]]:
    """(the registry or meter, its sink) for each exporter asked for."""
    found: list[tuple[object, Sink]] = []
    if prometheus:
        chosen = _registry(registry)  # (first: it names the extra when the library is missing)
        from . import _prometheus as prom

        found.append((chosen, prom.PrometheusSink(prom.metrics_of(chosen), limiter)))
    if meter is not None:
        chosen = _checked_meter(meter)
        from . import _opentelemetry as otel

        found.append((chosen, otel.OpenTelemetrySink(otel.metrics_of(chosen), limiter)))
    return found


@overload
def instrument(limiter: RateLimiter, *, registry: object = None, meter: object = None) -> RateLimiter: ...
@overload
def instrument(limiter: KeyedRateLimiter, *, registry: object = None, meter: object = None) -> KeyedRateLimiter: ...


def instrument(
    limiter: RateLimiter | KeyedRateLimiter, *, registry: object = None, meter: object = None
) -> RateLimiter | KeyedRateLimiter:
    """The limiter to use in place of ``limiter``, exporting its leases, releases and queue.

    ``registry``: a prometheus_client ``CollectorRegistry`` (None: the default registry);
    ``meter``: an OpenTelemetry ``Meter``. With a meter alone it exports to OpenTelemetry alone;
    with a registry, or with neither, to Prometheus; with both, to both. Instrumenting an
    instrumented limiter again adds the exporters it does not have yet (never counts twice)."""
    if not isinstance(limiter, RateLimiter | KeyedRateLimiter):
        raise TypeError(f"limiter must be a permits.RateLimiter or KeyedRateLimiter, got {type(limiter).__name__}")
    inner = wrapped_limiter(limiter)
    sinks = _sinks(inner, registry, meter, prometheus=registry is not None or meter is None)
    if isinstance(limiter, _Instrumented):
        observer = limiter._observer
        targets: list[object] = limiter.__dict__.setdefault("_metrics_targets", [])
    else:
        observer = Observer(limiter._rl_clock)
        targets = []
        if isinstance(limiter, KeyedRateLimiter):
            limiter = InstrumentedKeyedLimiter(limiter, observer)
        else:
            limiter = InstrumentedLimiter(limiter, observer)
        limiter.__dict__["_metrics_targets"] = targets
    for target, sink in sinks:
        if not any(known is target for known in targets):
            targets.append(target)
            observer.add(sink)
    return limiter


__all__ = ["InstrumentedKeyedLimiter", "InstrumentedLimiter", "instrument"]
