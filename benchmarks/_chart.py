"""The chart of a suite run (docs/performance.png): cost per check, per-key scaling, async release."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._goals import TIME_BASED, sync_ns

COLORS = {"floor": "#9e9e9e", "permits": "#1f77b4", "peer": "#ff7f0e", "cpp": "#2ca02c"}
PEER_PREFIXES = ("throttled-py", "limits", "pyrate-limiter")


def _cost_bars(collected: dict[str, dict[str, Any]]) -> list[tuple[str, float, str]]:
    """(label, ns per call, group), cheapest first."""
    bars: list[tuple[str, float, str]] = []
    sync = collected.get("sync", {})
    ns = sync_ns(sync)
    for key, label in (("dict_get", "dict.get (floor)"), ("noop_c_method", "no-op C method (floor)")):
        if key in ns:
            bars.append((label, ns[key], "floor"))
    for key, label in TIME_BASED:
        if f"permits_{key}_ok" in ns:
            bars.append((f"permits {label}.acquire()", ns[f"permits_{key}_ok"], "permits"))
    for key, label in (
        ("permits_concurrency_acquire_release", "permits Concurrency acquire().release()"),
        ("permits_token_bucket_with", "permits TokenBucket with acquire()"),
        ("permits_token_bucket_ok_threaded", "permits TokenBucket acquire(), 2nd thread alive"),
    ):
        if key in ns:
            bars.append((label, ns[key], "permits"))
    for prefix in PEER_PREFIXES:  # each peer's fastest successful check
        mine = [
            (r["best_ns"], r["name"])
            for r in sync.get("results", [])
            if r.get("group") == "peer"
            and r.get("best_ns")
            and r["name"].startswith(prefix)
            and " fail" not in r["name"]
        ]
        if mine:
            best, name = min(mine)
            bars.append((name.replace(" ok", ""), best, "peer"))
    cpp = collected.get("cpp", {}).get("summary") or {}
    if cpp.get("floor_ns"):
        bars.append(("C++: clock read + CAS (floor)", cpp["floor_ns"], "cpp"))
    tb = cpp.get("limiters", {}).get("TokenBucket", {})
    if "check_ns" in tb:
        bars.append(("C++: engine TokenBucket check", tb["check_ns"], "cpp"))
    return sorted(bars, key=lambda b: b[1])


def write_chart(collected: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig = plt.figure(figsize=(13, 7.5))
    grid = fig.add_gridspec(2, 2, width_ratios=(1.35, 1), hspace=0.45, wspace=0.5)
    ax = fig.add_subplot(grid[:, 0])
    bars = _cost_bars(collected)
    if bars:
        ax.barh([b[0] for b in bars], [b[1] for b in bars], color=[COLORS[b[2]] for b in bars])
        for i, (_, v, _) in enumerate(bars):
            ax.text(v * 1.08, i, f"{v:,.0f} ns" if v >= 100 else f"{v:.0f} ns", va="center", fontsize=8)
        ax.set_xscale("log")
        ax.set_xlim(right=max(b[1] for b in bars) * 4)
        ax.invert_yaxis()
    ax.set_xlabel("ns per check (log scale; best of repeats)")
    ax.set_title("One check: permits vs floors and peers", fontsize=10)
    ax.tick_params(axis="y", labelsize=8)
    handles = [Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    ax.legend(
        handles, ["floor", "permits", "pure-Python peer", "C++ engine (no Python)"], fontsize=8, loc="upper right"
    )

    ax = fig.add_subplot(grid[0, 1])
    sizes = collected.get("per_key", {}).get("sizes", [])
    if sizes:
        xs = [row["n"] for row in sizes]
        ax.plot(xs, [row["dict_ns"] for row in sizes], "o-", color=COLORS["floor"], label="dict.get, same keys")
        ax.plot(xs, [row["per_key_ns"] for row in sizes], "o-", color=COLORS["permits"], label="permits per_key")
        ax.plot(xs, [6 * row["dict_ns"] for row in sizes], ":", color=COLORS["floor"], label="6 x dict.get (goal)")
        for name, style in zip(sizes[-1].get("peers", {}), ("s--", "^--", "v--"), strict=False):
            pts = [(row["n"], row["peers"][name]) for row in sizes if name in row.get("peers", {})]
            ax.plot(*zip(*pts, strict=True), style, color=COLORS["peer"], alpha=0.8, label=name.split(" ")[0])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=7)
    ax.set_xlabel("distinct keys (shuffled order)")
    ax.set_ylabel("ns per check")
    ax.set_title("Per-key check as keys grow", fontsize=10)

    ax = fig.add_subplot(grid[1, 1])
    rows = [r for r in collected.get("async", {}).get("results", []) if r.get("status") == "ok"]
    if rows:
        labels = {
            "floor": "call_soon_threadsafe (floor)",
            "in_loop": "call_soon, same thread (info)",
            "permits_concurrency": "permits Concurrency",
            "permits_token_bucket": "permits TokenBucket (time)",
            "aiolimiter": "aiolimiter (time)",
        }
        groups = {"floor": "floor", "in_loop": "floor", "aiolimiter": "peer"}
        ax.barh(
            [labels.get(r["key"], r["key"]) for r in rows],
            [r["best_per_s"] / 1000 for r in rows],
            color=[COLORS[groups.get(r["key"], "permits")] for r in rows],
        )
        ax.invert_yaxis()
        ax.set_xlabel(f"thousand waiters released per second (N = {rows[0]['n']:,})")
    ax.set_title("asyncio: queued waiters released", fontsize=10)
    ax.tick_params(axis="y", labelsize=8)

    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
