"""instrument() to OpenTelemetry, read through the SDK's InMemoryMetricReader."""

from __future__ import annotations

import asyncio

from _reasons import REASONS, Reasons
from _scrape import OTel

import permits
from permits.metrics import instrument


def test_counts_durations_and_queue_through_the_sdk() -> None:
    otel = OTel()
    clock = permits.ManualClock()
    limiter = instrument(permits.ConcurrencyLimiter(1, queue_limit=1, clock=clock, name="db"), meter=otel.meter)

    async def main() -> None:
        held = await limiter.wait_async()
        queued = asyncio.ensure_future(limiter.wait_async())
        await asyncio.sleep(0)
        assert otel.value("permits.queued", limiter="db").value == 1
        assert limiter.wait(timeout=0).reason == "queue_full"
        clock.advance(0.5)
        held.release()
        second = await queued
        clock.advance(0.25)
        second.release()

    asyncio.run(main())
    assert otel.value("permits.leases", limiter="db", result="acquired").value == 2
    assert otel.value("permits.leases", limiter="db", result="queue_full").value == 1
    assert otel.value("permits.active_leases", limiter="db").value == 0
    durations = otel.value("permits.lease.duration", limiter="db")
    assert (durations.count, durations.sum) == (2, 0.75)
    queue = otel.value("permits.queue.duration", limiter="db", result="acquired")
    assert (queue.count, queue.sum) == (1, 0.5)
    assert otel.value("permits.queued", limiter="db").value == 0


def test_keyed_limiter_and_both_exporters() -> None:
    from _support import need

    registry = need("prometheus_client").CollectorRegistry()
    otel = OTel()
    keyed = permits.PartitionedLimiter.per_key(permits.specs.TokenBucket(1, 1, 1.0), name="per_user")
    limiter = instrument(keyed, registry=registry, meter=otel.meter)
    assert limiter.acquire("a") and not limiter.acquire("a")
    assert otel.value("permits.leases", limiter="per_user", result="acquired").value == 1
    assert (
        registry.get_sample_value(  # type: ignore[attr-defined]
            "permits_leases_total", {"limiter": "per_user", "result": "limit_reached"}
        )
        == 1
    )


def test_lost_leases_are_counted() -> None:
    from permits import _lost_leases

    otel = OTel()
    limiter = instrument(permits.ConcurrencyLimiter(1, name="lost-db"), meter=otel.meter)
    _lost_leases.report("lost-db", 3)
    assert otel.value("permits.leases.lost", limiter="lost-db").value == 3
    assert limiter


def test_a_stamped_lease_records_its_own_duration_as_it_ends() -> None:
    import gc

    otel = OTel()
    clock = permits.ManualClock()
    limiter = instrument(permits.TokenBucketLimiter(3, 3, 1.0, clock=clock, name="own"), meter=otel.meter)
    leases = [limiter.acquire() for _ in range(3)]
    assert all(leases) and not any(gc.is_tracked(lease) for lease in leases)  # the engine's own: not wrapped
    clock.advance(0.5)
    leases[0].release()
    leases[1]._refund()  # never used: no duration
    assert otel.value("permits.active_leases", limiter="own").value == 1
    del leases  # the last one collected unreleased: released then
    durations = otel.value("permits.lease.duration", limiter="own")
    assert (durations.count, durations.sum) == (2, 1.0)
    assert otel.value("permits.active_leases", limiter="own").value == 0
    assert otel.value("permits.leases", limiter="own", result="acquired").value == 3


def test_more_results_than_a_meter_holds_are_all_counted() -> None:
    otel = OTel()
    limiter = instrument(Reasons(), meter=otel.meter)
    for _ in range(2 * REASONS):
        assert not limiter.acquire()
    for n in range(REASONS):
        assert otel.value("permits.leases", limiter="reasons", result=f"r{n}").value == 2


def test_an_exporter_that_raises_never_fails_a_release() -> None:
    import sys

    from permits._core import Meter

    def broken(seconds: float) -> None:
        raise RuntimeError("exporter down")

    clock = permits.ManualClock()
    meter = Meter(clock, [1.0], record=broken)
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    seen: list[BaseException | None] = []
    hook, sys.unraisablehook = sys.unraisablehook, lambda u: seen.append(u.exc_value)
    try:
        lease = limiter.acquire()
        assert meter.stamp(lease)
        lease.release()  # (raises nothing)
    finally:
        sys.unraisablehook = hook
    assert [str(e) for e in seen] == ["exporter down"]
    assert meter.active == 0 and limiter.available_permits() == 1


def test_an_interpreter_exits_quietly_with_stamped_leases_held() -> None:
    import subprocess
    import sys

    from _support import need

    need("opentelemetry.sdk.metrics")
    child = """
import permits
from opentelemetry.sdk.metrics import MeterProvider
from permits.metrics import instrument
meter = MeterProvider().get_meter("exit")
limiter = instrument(permits.ConcurrencyLimiter(2, name="held"), meter=meter)
held = [limiter.acquire(), limiter.acquire()]
cycle = [held]
cycle.append(cycle)  # one collected by the last collection, after the modules are gone
print("held", len(held))
"""
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "held 2")
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_durations_are_recorded_when_the_sdk_collects_to_every_reader() -> None:
    otel = OTel(others=1)
    clock = permits.ManualClock()
    limiter = instrument(permits.TokenBucketLimiter(5, 5, 1.0, clock=clock, name="two"), meter=otel.meter)
    for seconds in (0.5, 0.25):
        lease = limiter.acquire()
        clock.advance(seconds)
        lease.release()
    durations = otel.value("permits.lease.duration", limiter="two")  # the first reader's collection
    assert (durations.count, durations.sum) == (2, 0.75)
    (other,) = otel.points(otel.others[0])["permits.lease.duration"]  # recorded in the first's
    assert (other.count, other.sum) == (2, 0.75)


def test_a_meter_nobody_collects_holds_a_bounded_number_of_durations(monkeypatch: object) -> None:
    from permits.metrics import _opentelemetry

    from _support import need

    monkeypatch.setattr(_opentelemetry, "_PENDING", 3)  # type: ignore[attr-defined]
    meter = need("opentelemetry.sdk.metrics").MeterProvider().get_meter("unread")  # no reader
    limiter = instrument(permits.ConcurrencyLimiter(1, name="unread"), meter=meter)
    for _ in range(10):
        with limiter.acquire():
            pass
    (metered,) = _opentelemetry.metrics_of(meter).meters.by_name()["unread"]
    assert metered.meter.pending == 3  # the seven past them were recorded at once


def test_durations_held_at_exit_are_in_the_sdks_last_export() -> None:
    import subprocess
    import sys

    from _support import need

    need("opentelemetry.sdk.metrics")
    child = """
import sys
import permits
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
from permits.metrics import instrument

def counts(data):
    found = [p.count for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
             if m.name == "permits.lease.duration" for p in m.data.data_points]
    return f"durations {found}\\n"

exporter = ConsoleMetricExporter(out=sys.stdout, formatter=counts)
reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)  # none before the exit's
meter = MeterProvider(metric_readers=[reader]).get_meter("exit")
limiter = instrument(permits.TokenBucketLimiter(10, 10, 1.0, name="exiting"), meter=meter)
for _ in range(7):
    with limiter.acquire():
        pass
print("released 7")
"""
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.split("\n")[:2]) == (0, ["released 7", "durations [7]"]), done.stderr
    assert "Traceback" not in done.stderr, done.stderr
