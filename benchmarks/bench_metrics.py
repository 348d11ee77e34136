"""The cost of permits.metrics on ``acquire()`` + ``release()`` of an engine token bucket.

    python benchmarks/bench_metrics.py [--number N] [--repeats R]

Four cases, each in a fresh interpreter (so that "not imported" means it): the metrics module not
imported; imported but not used (goal: at most 1.02x the first); the limiter instrumented to a
Prometheus registry; instrumented to an OpenTelemetry SDK meter. Nanoseconds per acquire+release,
best of the repeats, and what instrumenting adds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CHILD = """
import timeit
import permits
{setup}
limiter = {limiter}
def once():
    limiter.acquire().release()
once()
times = timeit.repeat(once, number={number}, repeat={repeats})
print(min(times) / {number} * 1e9)
"""

BUCKET = "permits.TokenBucketLimiter(1_000_000, 1_000_000, 0.001, name='bench')"
CASES = {
    "metrics not imported": ("", BUCKET),
    "imported, not used": ("import permits.metrics", BUCKET),
    "Prometheus": (
        "from prometheus_client import CollectorRegistry\nfrom permits.metrics import instrument",
        f"instrument({BUCKET}, registry=CollectorRegistry())",
    ),
    "OpenTelemetry": (
        "from opentelemetry.sdk.metrics import MeterProvider\nfrom permits.metrics import instrument",
        f"instrument({BUCKET}, meter=MeterProvider().get_meter('bench'))",
    ),
}


def run(setup: str, limiter: str, number: int, repeats: int) -> float:
    code = CHILD.format(setup=setup, limiter=limiter, number=number, repeats=repeats)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    found = {name: run(setup, limiter, args.number, args.repeats) for name, (setup, limiter) in CASES.items()}
    base = found["metrics not imported"]
    print(f"{'case':<24} {'ns/op':>8} {'ratio':>7} {'added ns':>9}")
    for name, ns in found.items():
        print(f"{name:<24} {ns:>8.0f} {ns / base:>6.2f}x {ns - base:>9.0f}")


if __name__ == "__main__":
    main()
