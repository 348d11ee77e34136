"""``--plot FILE``: the granted rate of each limiter over time, as a PNG (needs matplotlib)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .results import DemoResult
from .scenario import RATE


class _MatplotlibMissing(RuntimeError):
    pass


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise _MatplotlibMissing(
            "permits demo: --plot needs matplotlib, which is not installed: pip install matplotlib"
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plot(result: DemoResult, path: str) -> None:
    """Write a PNG: granted per time bucket for each algorithm, over the offered traffic."""
    plt = _pyplot()
    seconds = result.seconds
    bucket = max(0.25, seconds / 40)
    n = max(1, math.ceil(seconds / bucket - 1e-9))
    lefts = [k * bucket for k in range(n)]

    def rate(times: Sequence[float]) -> list[float]:
        counts = [0] * n
        for t in times:
            counts[min(n - 1, max(0, int(t / bucket)))] += 1
        return [c / bucket for c in counts]

    rows = result.rows
    offered = rate(result.offered_at)
    granted = [rate(r.granted_at) for r in rows]
    top = max(3.0 * RATE, *(1.15 * max(g) for g in granted))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles: list[Any] = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1))]

    fig, axes = plt.subplots(
        len(rows) + 1,
        1,
        figsize=(10, 1.9 * len(rows) + 3.4),
        sharex=True,
        gridspec_kw={"height_ratios": [1.0] * len(rows) + [2.0]},
    )
    fig.suptitle(f"permits demo: the same bursty traffic offered to each limiter (each admits ~{RATE}/s)")
    for k, (r, ys) in enumerate(zip(rows, granted, strict=True)):
        ax = axes[k]
        ax.bar(
            lefts,
            [min(v, top) for v in offered],
            width=bucket,
            align="edge",
            color="0.88",
            label="offered",
        )
        for x, v in zip(lefts, offered, strict=True):
            if v > top:
                ax.text(
                    x + bucket / 2,
                    top * 0.97,
                    f"{v:.0f}",
                    ha="center",
                    va="top",
                    fontsize="x-small",
                    color="0.4",
                )
        ax.bar(
            lefts,
            ys,
            width=bucket * 0.8,
            align="edge",
            color=colors[k % len(colors)],
            label="granted",
        )
        ax.axhline(RATE, color="black", linestyle="--", linewidth=0.8)
        ax.set_ylim(0, top)
        ax.set_ylabel("req/s", fontsize="small")
        ax.set_title(
            f"{r.label} ({r.detail}): granted {r.granted}, rejected {r.rejected}",
            loc="left",
            fontsize="small",
            fontweight="bold",
        )
        if k == 0:
            ax.legend(loc="upper right", fontsize="x-small", ncol=2)
        ax.grid(True, axis="x", alpha=0.3)

    ax_cum = axes[-1]
    for k, r in enumerate(rows):
        cum_t = [0.0, *sorted(r.granted_at), seconds]
        cum_y = [0, *range(1, r.granted + 1), r.granted]
        ax_cum.step(
            cum_t,
            cum_y,
            where="post",
            color=colors[k % len(colors)],
            linestyle=styles[k % len(styles)],
            linewidth=1.8,
            label=f"{r.label} ({r.granted})",
        )
    ax_cum.plot(
        [0, seconds],
        [RATE, RATE * (seconds + 1)],
        color="black",
        linestyle=":",
        linewidth=1,
        label=f"{RATE} at once + {RATE}/s",
    )
    ax_cum.set_ylabel("granted, cumulative")
    ax_cum.set_xlabel(f"time (s); bars: requests per second in {bucket:g} s buckets, dashed line: {RATE}/s")
    ax_cum.legend(loc="upper left", fontsize="small")
    ax_cum.grid(True, alpha=0.3)
    ax_cum.set_xlim(0, seconds)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
