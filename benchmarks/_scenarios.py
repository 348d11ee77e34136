"""The scenarios of the suite: each one a script run in its own process, writing JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Scenario:
    key: str
    script: str
    what: str


SCENARIOS = (
    Scenario("sync", "bench_acquire.py", "one check from Python: floors, permits, peers (sync and async)"),
    Scenario("per_key", "bench_per_key.py", "per-key checks and memory as keys grow 1 -> 1M"),
    Scenario("async", "bench_async.py", "waiters released per second by wait_async"),
    Scenario("cpp", "bench_cpp.py", "the C++ engine's check (Google Benchmark)"),
)


def run_one(scenario: Scenario, quick: bool, verbose: bool) -> dict[str, Any]:
    """Runs one scenario in a fresh interpreter; returns its JSON plus ``status``, ``seconds``, ``text``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{scenario.key}.json"
        cmd = [sys.executable, str(HERE / scenario.script), "--json", str(out)]
        cmd += ["--quick"] if quick else []
        cmd += [] if verbose else ["-q"]
        start = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
        seconds = time.perf_counter() - start
        data: dict[str, Any] = {}
        if out.exists():
            data = json.loads(out.read_text(encoding="utf-8"))
    status = data.get("status", "ok") if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    return data | {"status": status, "seconds": seconds, "text": proc.stdout}


def run_all(keys: list[str], quick: bool, verbose: bool) -> dict[str, dict[str, Any]]:
    collected: dict[str, dict[str, Any]] = {}
    for scenario in SCENARIOS:
        if scenario.key not in keys:
            continue
        print(f"[{scenario.key}] {scenario.what} ({scenario.script}) ...", file=sys.stderr, flush=True)
        result = collected[scenario.key] = run_one(scenario, quick, verbose)
        print(f"[{scenario.key}] {result['status']} in {result['seconds']:.0f} s", file=sys.stderr, flush=True)
    return collected
