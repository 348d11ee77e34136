"""The suite's report: a header (date, commit, command, machine), the goals, the measurements."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from ._goals import Goal

ROOT = Path(__file__).resolve().parent.parent
PEERS = ("permits", "throttled-py", "limits", "pyrate-limiter", "aiolimiter")


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def commit() -> str:
    head = _git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("-dirty" if _git("status", "--porcelain", "--untracked-files=no") else "")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def header(argv: list[str]) -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "command": shlex.join(["python", "-m", "benchmarks", *argv]),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "versions": {dist: _version(dist) for dist in PEERS},
    }


def header_lines(meta: dict[str, Any]) -> list[str]:
    return [
        f"- date: {meta['date']}; commit: {meta['commit']}",
        f"- command: `{meta['command']}`",
        f"- {meta['python']} on {meta['platform']} ({meta['cpus']} CPUs); load average before: "
        f"{meta['load_before']}, after: {meta.get('load_after', '-')}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
    ]


def goals_table(goals: list[Goal]) -> list[str]:
    lines = ["| goal (ratio in the same run) | measured | target | met |", "|---|---:|---|---|"]
    for g in goals:
        value = "-" if g.value is None else f"{g.value:.2f}{g.unit}"
        met = {True: "met", False: "**missed**", None: "not measured"}[g.met]
        detail = f" ({g.detail})" if g.detail else ""
        lines.append(f"| {g.name}{detail} | {value} | {g.target_text} | {met} |")
    return lines


def _ns(v: float) -> str:
    return f"{v:,.0f} ns" if v >= 100 else f"{v:.1f} ns"


def _x(a: float | None, b: float | None) -> str:
    return "" if a is None or not b else f"{a / b:.1f}"


def _sync_rows(data: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    results = data.get("results", [])
    floor = next((r["best_ns"] for r in results if r.get("key") == "dict_get" and r.get("best_ns")), None)
    for r in results:
        if r.get("best_ns") is None:
            yield "sync", r["name"], r.get("status", ""), ""
        else:
            yield "sync", r["name"], _ns(r["best_ns"]), _x(r["best_ns"], floor)


def _per_key_rows(data: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    sizes = data.get("sizes", [])
    for row in sizes:
        n, floor = f"{row['n']:,}", row["dict_ns"]
        yield "per-key", f"dict.get over {n} keys (floor)", _ns(floor), "1.0"
        yield "per-key", f"permits per_key acquire(key), {n} keys", _ns(row["per_key_ns"]), _x(row["per_key_ns"], floor)
        mem = row.get("memory")
        if mem:
            yield (
                "per-key",
                f"memory per key, {n} keys: permits per_key (dict)",
                (f"{mem['per_key_bytes']:,.0f} B ({mem['dict_bytes']:,.0f} B)"),
                "",
            )
            if "engine_state_bytes" in mem:
                yield (
                    "per-key",
                    f"engine state per key (+ the key's bytes), {n} keys, by the table's accounting",
                    f"{mem['engine_state_bytes']:,.1f} B (+ {mem['key_bytes']:,.1f} B)",
                    "",
                )
    if sizes:
        last = sizes[-1]
        for name, ns in last.get("peers", {}).items():
            yield "per-key", f"{name}, {last['n']:,} keys", _ns(ns), _x(ns, last["dict_ns"])


def _async_rows(data: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    results = data.get("results", [])
    floor = next((r["best_per_s"] for r in results if r["key"] == "floor" and r["status"] == "ok"), None)
    for r in results:
        if r["status"] != "ok":
            yield "async", r["name"], r["status"], ""
        else:
            yield (
                "async",
                f"{r['name']}, N = {r['n']:,}",
                f"{r['best_per_s']:,.0f} waiters/s",
                _x(r["best_per_s"], floor),
            )


def _cpp_rows(data: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    s = data.get("summary")
    if not s:
        yield "C++", "engine benchmark", data.get("status", "not run"), ""
        return
    floor = s.get("floor_ns")
    if floor:
        yield "C++", "clock read + uncontended CAS (floor)", _ns(floor), "1.0"
    for lim, e in s["limiters"].items():
        if "check_ns" in e:
            yield "C++", f"{lim} check, 1 thread", _ns(e["check_ns"]), _x(e["check_ns"], floor)
        if "two_thread_ns" in e:
            yield "C++", f"{lim}, 2 threads on separate limiters (wall time per check)", _ns(e["two_thread_ns"]), ""
        if "shared_two_thread_ns" in e:
            yield "C++", f"{lim}, 2 threads on one limiter (wall time per check)", _ns(e["shared_two_thread_ns"]), ""
    if "concurrency_acquire_release_ns" in s:
        yield "C++", "Concurrency acquire + give back", _ns(s["concurrency_acquire_release_ns"]), ""
    for k in s.get("keyed", []):
        if k["map_ns"]:
            # libstdc++ compares up to 20 string keys one by one, without hashing
            note = ", a scan: no hash" if k["keys"] <= 20 else ""
            label = f"std::unordered_map find over {k['keys']:,} keys (per-key floor{note})"
            yield "C++", label, _ns(k["map_ns"]), "1.0"
        label = f"per-key TokenBucket check over {k['keys']:,} keys"
        yield "C++", label, _ns(k["keyed_ns"]), _x(k["keyed_ns"], k["map_ns"])


def measurements_table(collected: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["| scenario | case | measured (best) | x floor |", "|---|---|---:|---:|"]
    makers = {"sync": _sync_rows, "per_key": _per_key_rows, "async": _async_rows, "cpp": _cpp_rows}
    for key, make in makers.items():
        if key in collected:
            lines += [f"| {a} | {b.replace('|', '/')} | {c} | {d} |" for a, b, c, d in make(collected[key])]
    return lines


def report(meta: dict[str, Any], goals: list[Goal], collected: dict[str, dict[str, Any]]) -> str:
    lines = [*header_lines(meta), "", *goals_table(goals), "", *measurements_table(collected)]
    return "\n".join(lines) + "\n"


def record(text: str, meta: dict[str, Any], results_md: Path) -> None:
    """Appends a dated entry to RESULTS.md."""
    entry = f"\n## {meta['date'][:10]}: the suite (`python -m benchmarks`), commit {meta['commit']}\n\n{text}"
    with results_md.open("a", encoding="utf-8") as f:
        f.write(entry)
