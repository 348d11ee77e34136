"""The default clock on each of its sources: the CPU's time-stamp counter where the kernel keeps
time with it, CLOCK_MONOTONIC elsewhere or with PERMITS_CLOCK=monotonic. Each source is checked
in a fresh process (the source is chosen once per process); no tight timing thresholds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import permits

# Runs in a child process: which source, agreement with time.monotonic_ns() after a sleep, and a
# queued request served in real time by the engine thread.
CHILD = """
import json, time, permits
clock = permits.MonotonicClock()
start = clock.now_ns()
time.sleep(0.05)
before = time.monotonic_ns(); now = clock.now_ns(); after = time.monotonic_ns()
t0 = clock.now_ns()
bucket = permits.TokenBucketLimiter(1, 1, 0.02, queue_limit=1)  # on the default clock: this one
assert bucket.acquire().acquired
lease = bucket.wait(1, timeout=10)
waited = clock.now_ns() - t0
print(json.dumps({"source": clock.source, "slept": now - start, "before": before, "now": now,
                  "after": after, "acquired": lease.acquired, "waited": waited}))
"""


def _tsc_trusted() -> bool:
    try:
        clocksource = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource").read_text().strip()
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return False
    words = flags.split()
    return clocksource == "tsc" and "constant_tsc" in words and "nonstop_tsc" in words


def _run(env_value: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("PERMITS_CLOCK", None)
    if env_value is not None:
        env["PERMITS_CLOCK"] = env_value
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("env_value", [None, "monotonic"])
def test_each_source_keeps_time_with_clock_monotonic(env_value: str | None) -> None:
    got = _run(env_value)
    tsc = env_value is None and sys.platform == "linux" and _tsc_trusted()
    assert got["source"] == ("tsc" if tsc else "monotonic")
    ms = 1_000_000
    assert got["slept"] >= 49 * ms
    # Same origin as time.monotonic_ns(); the TSC's rate is off by parts per million at most.
    assert got["before"] - 5 * ms <= got["now"] <= got["after"] + 5 * ms
    assert got["acquired"] is True
    assert got["waited"] >= 20 * ms  # the next token's period, from construction


def test_the_default_clock_never_goes_back() -> None:
    clock = permits.MonotonicClock()
    assert clock.source in ("tsc", "monotonic")
    prev = clock.now_ns()
    for _ in range(10_000):
        now = clock.now_ns()
        assert now >= prev
        prev = now
    assert abs(clock.now_ns() - time.monotonic_ns()) < 1_000_000_000
