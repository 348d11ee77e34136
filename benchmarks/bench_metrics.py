"""The cost of permits.metrics on ``acquire()`` + ``release()`` of an engine token bucket.

    python benchmarks/bench_metrics.py [--number N] [--repeats R]

Four cases, each in a fresh interpreter (so that "not imported" means it): the metrics module not
imported; imported but not used (goal: at most 1.02x the first); the limiter instrumented to a
Prometheus registry; instrumented to an OpenTelemetry SDK meter read by an in-memory reader; the
same with each duration recorded to the SDK as its lease ends (none held for the collection).
Nanoseconds per acquire+release, best of the repeats, and what instrumenting adds; then the same with
the exporter's collection after each N leases (a scrape, or the SDK's collect) counted in, per lease:
an OpenTelemetry histogram takes one value per call, so the durations a release holds are recorded
when the SDK collects, and that work is paid there.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CHILD = """
import time
import timeit
import permits
{setup}
limiter = {limiter}
def once():
    limiter.acquire().release()
once()
collect()
best, best_with = float("inf"), float("inf")
for _ in range({repeats}):
    took = timeit.timeit(once, number={number})
    start = time.perf_counter()
    collect()
    collecting = time.perf_counter() - start
    best, best_with = min(best, took), min(best_with, took + collecting)
print(best / {number} * 1e9, best_with / {number} * 1e9)
"""

BUCKET = "permits.TokenBucketLimiter(1_000_000, 1_000_000, 0.001, name='bench')"
NOTHING = "def collect():\n    pass"
CASES = {
    "metrics not imported": (NOTHING, BUCKET),
    "imported, not used": ("import permits.metrics\n" + NOTHING, BUCKET),
    "Prometheus": (
        "from prometheus_client import CollectorRegistry\nfrom permits.metrics import instrument\n"
        "registry = CollectorRegistry()\ndef collect():\n    list(registry.collect())",
        "instrument(" + BUCKET + ", registry=registry)",
    ),
    "OpenTelemetry": (
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "from opentelemetry.sdk.metrics.export import InMemoryMetricReader\n"
        "from permits.metrics import instrument\n"
        "reader = InMemoryMetricReader()\nmeter = MeterProvider(metric_readers=[reader]).get_meter('bench')\n"
        "def collect():\n    reader.get_metrics_data()",
        "instrument(" + BUCKET + ", meter=meter)",
    ),
}
# The same, each duration recorded as its lease ends (as before durations were held for collection).
CASES["OpenTelemetry, at release"] = (
    CASES["OpenTelemetry"][0] + "\nfrom permits.metrics import _opentelemetry\n_opentelemetry._PENDING = 0",
    CASES["OpenTelemetry"][1],
)


def run(setup: str, limiter: str, number: int, repeats: int) -> tuple[float, float]:
    code = CHILD.format(setup=setup, limiter=limiter, number=number, repeats=repeats)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    alone, with_collection = out.split()[-2:]
    return float(alone), float(with_collection)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=50_000, help="leases between two collections")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    found = {name: run(setup, limiter, args.number, args.repeats) for name, (setup, limiter) in CASES.items()}
    base, base_with = found["metrics not imported"]
    print(f"{'case':<24} {'ns/op':>8} {'ratio':>7} {'added ns':>9} {'with collection, added ns':>26}")
    for name, (ns, with_collection) in found.items():
        print(f"{name:<24} {ns:>8.0f} {ns / base:>6.2f}x {ns - base:>9.0f} {with_collection - base_with:>26.0f}")


if __name__ == "__main__":
    main()
