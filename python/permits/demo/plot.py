"""``--plot FILE``: what each limiter did with the traffic over time, as a PNG (needs matplotlib).

One panel per limiter, on the same scales: its grants and rejections as stacked bars (requests per
second, counted in short bins), the offered traffic as an outline over them, its limit, its window
boundaries, and for the queued variant the requests waiting in its queue. The legend sits outside the
panels, so it hides nothing.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from .results import DemoResult, RowResult
from .scenario import RATE, _describe_traffic

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

BIN = 0.25
"""Seconds per bar (a quarter of the windows: the fixed window's lumps and the boundary burst show)."""
GRANTED, REJECTED, QUEUED = "tab:green", "tab:red", "tab:orange"


class _MatplotlibMissing(RuntimeError):
    pass


def _require_matplotlib() -> None:
    try:
        import matplotlib
    except ImportError as exc:
        raise _MatplotlibMissing(
            'permits demo: --plot needs matplotlib, which is not installed: pip install "permits[plot]"'
        ) from exc
    # the legend "outside" the panels, placed by the constrained layout, is new in 3.7
    major, minor = (int(part) for part in matplotlib.__version__.split(".")[:2])
    if (major, minor) < (3, 7):
        raise _MatplotlibMissing(
            f"permits demo: --plot needs matplotlib 3.7 or later, not {matplotlib.__version__}: "
            'pip install -U "permits[plot]"'
        )


def lacks_matplotlib() -> bool:
    """True, having said on stderr what to install, when ``--plot`` cannot be drawn here: checked
    before a demo runs, not after it."""
    try:
        _require_matplotlib()
    except _MatplotlibMissing as exc:
        print(exc, file=sys.stderr)
        return True
    return False


def save_plot(write: Callable[[str], object], path: str, out: TextIO) -> bool:
    """``write(path)``, then says so on ``out``; False, having said why on stderr, when the file
    cannot be written (its directory missing or not writable)."""
    try:
        write(path)
    except OSError as exc:
        out.flush()
        print(f"permits demo: cannot write the plot to {path}: {exc}", file=sys.stderr)
        return False
    out.write(f"plot written to {path}\n")
    return True


def plot_figure(result: DemoResult) -> Figure:
    """Draw the demo's result on a new matplotlib ``Figure`` (not shown, not saved)."""
    _require_matplotlib()
    from matplotlib.figure import Figure  # a Figure of its own: no pyplot, no global state

    seconds = result.seconds
    n = max(1, math.ceil(seconds / BIN - 1e-9))
    edges = [k * BIN for k in range(n + 1)]

    def per_second(times: Sequence[float]) -> list[float]:
        counts = [0] * n
        for t in times:
            counts[min(n - 1, max(0, int(t / BIN)))] += 1
        return [c / BIN for c in counts]

    offered = per_second(result.offered_at)
    rows = [(row, per_second(row.granted_at), per_second(row.rejected_at)) for row in result.rows]
    top = 1.1 * max(*offered, *(g + r for _, gs, rs in rows for g, r in zip(gs, rs, strict=True)))

    fig = Figure(figsize=(11, 2.1 * len(rows) + 2.0), layout="constrained")
    axes: list[Axes] = list(fig.subplots(len(rows), 1, sharex=True, sharey=True, squeeze=False)[:, 0])
    fig.suptitle(
        f"permits demo: the same traffic offered to each limiter, each set to about {RATE} requests/s\n"
        f"traffic: {_describe_traffic(seconds)}",
        fontsize="medium",
    )
    handles: dict[str, Any] = {}  # legend label -> artist, one entry per kind of series
    for ax, (row, granted, rejected) in zip(axes, rows, strict=True):
        _panel(ax, row, edges, offered, granted, rejected, handles)
        ax.set_ylim(0, top)
        ax.set_ylabel("requests/s")
        ax.grid(True, axis="y", alpha=0.3)
    axes[-1].set_xlim(0, seconds)
    axes[-1].set_xlabel(f"time since the start (s); bars count the requests in each {BIN:g} s, as requests/s")
    # under the panels, beside no data: it hides nothing (constrained layout makes room for it)
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncols=4, fontsize="small")
    return fig


def _panel(
    ax: Axes,
    row: RowResult,
    edges: list[float],
    offered: list[float],
    granted: list[float],
    rejected: list[float],
    handles: dict[str, Any],
) -> None:
    """One limiter: grants and rejections stacked, the offered outline, its limit and windows, its queue."""
    lefts, seconds = edges[:-1], edges[-1]
    handles["granted"] = ax.bar(lefts, granted, BIN, align="edge", color=GRANTED)
    handles["rejected"] = ax.bar(lefts, rejected, BIN, bottom=granted, align="edge", color=REJECTED)
    handles["offered"] = ax.stairs(offered, edges, color="black", linewidth=1)
    if row.mode != "hold":  # a concurrency limit is not a rate
        handles[f"limit: {RATE} requests/s"] = ax.axhline(RATE, color="black", linestyle="--", linewidth=0.8)
    if row.window is not None:
        step = row.window / row.segments
        for k in range(1, math.ceil(seconds / step - 1e-9)):
            if k % row.segments == 0:
                label, style, width = f"window boundary (every {row.window:g} s)", "--", 1.2
            else:
                label, style, width = f"segment boundary (sliding window, every {step:g} s)", ":", 0.8
            handles[label] = ax.axvline(k * step, color="tab:blue", linestyle=style, linewidth=width)
    title = f"{row.label} ({row.detail}): granted {row.granted}, rejected {row.rejected}"
    if row.mode == "queue":
        title += f", at most {row.queued_peak} queued"
        times = [t for t, _ in row.queued_over_time] + [seconds]
        counts = [q for _, q in row.queued_over_time]
        counts.append(counts[-1] if counts else 0)
        axq = ax.twinx()
        handles["queued: requests waiting (right axis)"] = axq.fill_between(
            times, counts, step="post", color=QUEUED, alpha=0.35, edgecolor=QUEUED
        )
        axq.set_ylim(0, 1.6 * max(*counts, 1))
        axq.set_ylabel("waiting (requests)", color=QUEUED)
        ax.set_zorder(axq.get_zorder() + 1)  # the bars over the queue, not under it
        ax.patch.set_visible(False)
    ax.set_title(title, loc="left", fontsize="small", fontweight="bold")


def write_plot(result: DemoResult, path: str) -> Figure:
    """Write the demo's picture as a PNG at ``path``; returns the figure drawn."""
    fig = plot_figure(result)
    fig.savefig(path, dpi=100)
    return fig
