"""A short live demo of the permits limiters: ``python -m permits demo``.

The same bursty traffic (a burst at the start, a steady stream at twice the limit, a quiet
gap, then another burst) is offered at once to each algorithm, all configured for about
10 permits per second, and the terminal shows, as it happens, how many requests each one
granted, rejected and (for the queued variant) holds waiting. ``--plot FILE`` writes the
granted rate of each algorithm over time as a PNG (needs matplotlib).

By default the demo runs in real time on the in-process engine (``MonotonicClock``) inside
an asyncio event loop; the queued variant waits with ``await limiter.wait_async()``.
``--simulate`` runs the same script on a ``ManualClock`` as fast as possible instead.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import permits

__all__ = ["DemoResult", "RowResult", "run_demo", "simulate", "traffic", "write_plot"]

RATE = 10
"""Every limiter of the demo admits about this many requests per second."""
WINDOW = 1.0
BURST = 30
"""Requests in each burst (three times what a limiter admits per second)."""
STEADY_RATE = 20
"""Requests per second of the steady stream (twice the limit)."""
QUEUE_LIMIT = 10
CONCURRENCY = 3
HOLD = 0.25
"""Seconds a request of the concurrency variant holds its permit."""

TICK = 0.01
REDRAW = 0.1
PLAIN_EVERY = 1.0
SPARK_CELLS = 50


# --------------------------------------------------------------------------- traffic


def _plan(seconds: float) -> tuple[float, list[float]]:
    """The end of the steady stream and the times of the last burst's requests."""
    boundary = math.floor(0.8 * seconds / WINDOW) * WINDOW
    if boundary >= WINDOW and boundary + 0.05 < seconds:
        # half the burst just before a window boundary, half just after it: the fixed
        # window's weak spot (twice its limit in 0.1 s); the quiet window before it lets
        # every limiter start that burst full
        half = BURST // 2
        last = [boundary - 0.05] * half + [boundary + 0.05] * (BURST - half)
        return min(0.6 * seconds, boundary - WINDOW), last
    return 0.6 * seconds, [0.8 * seconds] * BURST


def traffic(seconds: float) -> list[float]:
    """The arrival times (seconds from the start) of the demo's requests, sorted.

    A burst of ``BURST`` requests at 0 s; a steady stream of ``STEADY_RATE`` per second from
    0.1 s to about 60 % of the run; quiet; then another burst of ``BURST``, split across the
    window boundary nearest to 80 % of the run (windows are anchored at the start).
    """
    steady_end, last = _plan(seconds)
    arrivals = [0.0] * BURST
    n = max(0, math.ceil((steady_end - 0.1) * STEADY_RATE))
    arrivals += [0.1 + i / STEADY_RATE for i in range(n)]
    arrivals += last
    return sorted(arrivals)


def _describe_traffic(seconds: float) -> str:
    steady_end, last = _plan(seconds)
    steady = f"{STEADY_RATE}/s until {steady_end:.1f} s, quiet, " if steady_end > 0.1 else ""
    if last[0] != last[-1]:
        boundary = (last[0] + last[-1]) / 2
        tail = f"{len(last)} around the window boundary at {boundary:g} s"
    else:
        tail = f"burst of {len(last)} at {last[0]:.1f} s"
    return f"burst of {BURST} at 0 s, {steady}{tail}"


# --------------------------------------------------------------------------- results


@dataclass
class RowResult:
    """What one limiter of the demo did with the traffic."""

    label: str
    detail: str
    mode: str
    """``"acquire"``, ``"queue"`` (``wait_async``) or ``"hold"`` (concurrency)."""
    granted_at: list[float] = field(default_factory=list)
    rejected_at: list[float] = field(default_factory=list)
    queued: int = 0
    """Requests waiting in the limiter's queue (its ``statistics()``), last sampled."""
    queued_peak: int = 0
    unfinished: int = 0
    """Requests still queued when the demo ended."""
    total_wait: float = 0.0
    """Seconds waited, summed over the queued requests that were granted."""
    last_retry_after: float | None = None
    last_reject_time: float = -1.0
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def granted(self) -> int:
        return len(self.granted_at)

    @property
    def rejected(self) -> int:
        return len(self.rejected_at)


@dataclass
class DemoResult:
    seconds: float
    offered_at: list[float]
    rows: list[RowResult]


@dataclass
class _Row:
    result: RowResult
    limiter: permits.RateLimiter


def _make_rows(concurrency: bool, clock: permits.ManualClock | None) -> list[_Row]:
    def row(label: str, detail: str, mode: str, limiter: permits.RateLimiter) -> _Row:
        return _Row(RowResult(label, detail, mode), limiter)

    period = 1.0 / RATE
    rows = [
        row(
            "token bucket",
            f"{RATE} tokens, +1 every {period:g} s",
            "acquire",
            permits.TokenBucketLimiter(RATE, 1, period, clock=clock, name="token_bucket"),
        ),
        row(
            "fixed window",
            f"{RATE} per {WINDOW:g} s window",
            "acquire",
            permits.FixedWindowLimiter(RATE, WINDOW, clock=clock, name="fixed_window"),
        ),
        row(
            "sliding window",
            f"{RATE} per {WINDOW:g} s, 4 segments",
            "acquire",
            permits.SlidingWindowLimiter(RATE, WINDOW, 4, clock=clock, name="sliding_window"),
        ),
        row(
            "sliding window counter",
            f"{RATE} per {WINDOW:g} s, weighted",
            "acquire",
            permits.SlidingWindowCounterLimiter(RATE, WINDOW, clock=clock, name="sliding_window_counter"),
        ),
        row(
            "token bucket + queue",
            f"as above, queue {QUEUE_LIMIT}, wait_async",
            "queue",
            permits.TokenBucketLimiter(
                RATE, 1, period, queue_limit=QUEUE_LIMIT, clock=clock, name="token_bucket_queued"
            ),
        ),
    ]
    if concurrency:
        rows.append(
            row(
                "concurrency",
                f"{CONCURRENCY} at once, {HOLD:g} s each",
                "hold",
                permits.ConcurrencyLimiter(CONCURRENCY, clock=clock, name="concurrency"),
            )
        )
    return rows


# --------------------------------------------------------------------------- driver


class _Driver:
    """Offers the traffic to every limiter, on real or manual time."""

    def __init__(
        self,
        seconds: float,
        rows: list[_Row],
        clock: permits.ManualClock | None,
        display: _Display | None,
    ) -> None:
        self.seconds = seconds
        self.rows = rows
        self.clock = clock
        self.display = display
        self.arrivals = traffic(seconds)
        self.offered_at: list[float] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.held: list[tuple[float, int, permits.Lease]] = []
        self._held_seq = 0
        self._t0 = clock.now() if clock is not None else time.monotonic()

    def now(self) -> float:
        if self.clock is not None:
            return self.clock.now() - self._t0
        return time.monotonic() - self._t0

    async def sleep(self, seconds: float) -> None:
        if self.clock is None:
            await asyncio.sleep(seconds)
            return
        self.clock.advance(seconds)
        # let the waiters the engine just woke run their continuations
        for _ in range(3):
            await asyncio.sleep(0)

    def result(self) -> DemoResult:
        return DemoResult(self.seconds, self.offered_at, [r.result for r in self.rows])

    # -- one request, offered to every limiter

    def _arrive(self, t: float) -> None:
        self.offered_at.append(t)
        for row in self.rows:
            res = row.result
            if res.mode == "queue":
                task = asyncio.ensure_future(self._queued_request(row, t))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
                continue
            lease = row.limiter.acquire()
            if lease:
                res.granted_at.append(t)
                if res.mode == "hold":
                    self._held_seq += 1
                    heapq.heappush(self.held, (t + HOLD, self._held_seq, lease))
            else:
                self._rejected(res, t, lease)

    def _rejected(self, res: RowResult, t: float, lease: permits.Lease) -> None:
        res.rejected_at.append(t)
        res.last_retry_after = lease.retry_after
        res.last_reject_time = t
        reason = lease.reason or "?"
        res.reasons[reason] = res.reasons.get(reason, 0) + 1

    async def _queued_request(self, row: _Row, t: float) -> None:
        res = row.result
        lease: permits.Lease | None
        try:
            lease = await row.limiter.wait_async()
        except permits.LimiterClosedError:
            lease = None
        if lease is None or (not lease and lease.reason == "closed"):
            res.unfinished += 1
        elif lease:
            done = self.now()
            res.granted_at.append(done)
            res.total_wait += max(0.0, done - t)
        else:
            self._rejected(res, t, lease)

    def _sample_queues(self) -> None:
        for row in self.rows:
            res = row.result
            if res.mode == "queue":
                res.queued = row.limiter.statistics().current_queued_count
                res.queued_peak = max(res.queued_peak, res.queued)

    def _release_due(self, t: float) -> None:
        while self.held and self.held[0][0] <= t:
            _, _, lease = heapq.heappop(self.held)
            lease.release()

    # -- the loop

    async def run(self) -> DemoResult:
        arrivals = self.arrivals
        i = 0
        next_draw = self.display.first if self.display is not None else 0.0
        try:
            while True:
                t = self.now()
                if t >= self.seconds:
                    break
                while i < len(arrivals) and arrivals[i] <= t:
                    self._arrive(t)
                    i += 1
                self._release_due(t)
                self._sample_queues()
                if self.display is not None and t >= next_draw:
                    self.display.update(self.result(), t)
                    next_draw = t + self.display.every
                await self.sleep(TICK)
        finally:
            await self._shutdown()
        return self.result()

    async def _shutdown(self) -> None:
        self._sample_queues()
        while self.held:
            heapq.heappop(self.held)[2].release()
        for row in self.rows:
            row.limiter.close()  # queued requests complete with failed leases ("closed")
        if self.tasks:
            pending = set(self.tasks)
            if self.clock is not None:
                for _ in range(10):
                    await asyncio.sleep(0)
                pending = {task for task in pending if not task.done()}
            if pending:
                _, pending = await asyncio.wait(pending, timeout=2.0)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)


# --------------------------------------------------------------------------- display


def _encoding_supports(stream: TextIO, text: str) -> bool:
    try:
        text.encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def _counts(times: Sequence[float], seconds: float, cells: int) -> list[int]:
    out = [0] * cells
    for t in times:
        out[min(cells - 1, max(0, int(t / seconds * cells)))] += 1
    return out


class _Display:
    every = REDRAW
    """Seconds between updates."""
    first = 0.0
    """When the first update is due."""

    def update(self, result: DemoResult, t: float) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        pass


class _LiveDisplay(_Display):
    """A small table redrawn in place with ANSI escapes, about 10 times a second."""

    bar_width = 24

    def __init__(self, stream: TextIO, seconds: float) -> None:
        self.stream = stream
        self.seconds = seconds
        self.lines_drawn = 0
        self.unicode = _encoding_supports(stream, "█▒░▁▂▃▄▅▆▇·")
        self.color = "NO_COLOR" not in os.environ
        # one column spare, so that no line ever wraps (a wrapped line breaks the redraw)
        self.width = max(40, shutil.get_terminal_size((100, 24)).columns - 1)
        # cells of at least 0.1 s, as many as fit beside the bar
        self.cells = max(
            5,
            min(SPARK_CELLS, self.width - self.bar_width - 2, math.ceil(seconds / 0.1)),
        )
        # a full block is 3x the limit: the steady state shows a third, bursts a full cell
        self.full = 3 * RATE * seconds / self.cells
        self.stream.write("\x1b[?25l")  # hide the cursor

    def _fit(self, segments: Sequence[tuple[str, str]]) -> str:
        """Join (SGR code, text) segments, cut to the terminal's width."""
        room = self.width
        out = []
        for code, text in segments:
            if room <= 0:
                break
            text = text[:room]
            room -= len(text)
            out.append(f"\x1b[{code}m{text}\x1b[0m" if code and self.color and text else text)
        return "".join(out)

    def _spark(self, times: Sequence[float], t: float) -> list[tuple[str, str]]:
        blocks = " ▁▂▃▄▅▆▇█" if self.unicode else " .:-=+*#@"
        counts = _counts(times, self.seconds, self.cells)
        done = min(self.cells, int(t / self.seconds * self.cells) + 1)
        out: list[tuple[str, str]] = []
        for n in counts[:done]:
            if n == 0:
                out.append(("2", "·" if self.unicode else "_"))
            else:
                out.append(("", blocks[max(1, min(8, math.ceil(n / self.full * 8)))]))
        return out

    def _bar(self, res: RowResult, offered: int) -> list[tuple[str, str]]:
        w = self.bar_width
        if offered == 0:
            return [("", " " * w)]
        g = min(w, round(res.granted / offered * w))
        q = min(w - g, round(res.queued / offered * w))
        r = max(0, min(w - g - q, round(res.rejected / offered * w)))
        full, mid, empty = ("█", "▒", "░") if self.unicode else ("#", "~", "x")
        return [
            ("32", full * g),
            ("33", mid * q),
            ("31", empty * r),
            ("", " " * (w - g - q - r)),
        ]

    def render(self, result: DemoResult, t: float) -> list[str]:
        offered = len(result.offered_at)
        progress_w = 20
        filled = round(min(1.0, t / self.seconds) * progress_w)
        progress = ("█" if self.unicode else "#") * filled + "-" * (progress_w - filled)
        lines = [
            self._fit(
                [
                    ("1", "permits demo"),
                    ("", f"  [{progress}] {min(t, self.seconds):4.1f} s / {self.seconds:.1f} s"),
                    ("", f"   offered {offered}, each limiter admits ~{RATE}/s"),
                ]
            ),
            self._fit([("2", "traffic: " + _describe_traffic(self.seconds))]),
            "",
            self._fit(
                [
                    ("", f"{'requests offered':<{self.bar_width}}  "),
                    *self._spark(result.offered_at, t),
                ]
            ),
            "",
        ]
        lines.append(
            self._fit(
                [
                    ("2", f"{'':<24}"),
                    ("32", f"{'granted':>7} "),
                    ("31", f"{'rejected':>8} "),
                    ("33", f"{'queued':>6} "),
                    ("2", f"{'retry_after':>12}   configuration"),
                ]
            )
        )
        for res in result.rows:
            recent = res.last_retry_after is not None and t - res.last_reject_time < 0.5
            retry = f"{res.last_retry_after:.2f} s" if recent else ""
            queued = f"{res.queued}" if res.mode == "queue" else "-"
            lines.append(
                self._fit(
                    [
                        ("1", f"{res.label:<24}"),
                        ("32", f"{res.granted:>7} "),
                        ("31", f"{res.rejected:>8} "),
                        ("33", f"{queued:>6} "),
                        ("", f"{retry:>12}   "),
                        ("2", res.detail),
                    ]
                )
            )
            lines.append(self._fit([*self._bar(res, offered), ("", "  "), *self._spark(res.granted_at, t)]))
        full, mid, empty = ("█", "▒", "░") if self.unicode else ("#", "~", "x")
        lines.append("")
        lines.append(
            self._fit(
                [
                    ("2", "left: share of requests "),
                    ("32", full + " granted "),
                    ("33", mid + " queued "),
                    ("31", empty + " rejected"),
                    ("2", f"   right: granted per {self.seconds / self.cells:.2g} s"),
                ]
            )
        )
        return lines

    def update(self, result: DemoResult, t: float) -> None:
        lines = self.render(result, t)
        out = []
        if self.lines_drawn:
            out.append(f"\x1b[{self.lines_drawn}F")  # back to the table's first line
        out.extend(line + "\x1b[K\n" for line in lines)
        self.stream.write("".join(out))
        self.stream.flush()
        self.lines_drawn = len(lines)

    def finish(self) -> None:
        self.stream.write("\x1b[?25h")  # show the cursor again
        self.stream.flush()


class _PlainDisplay(_Display):
    """When the output is not a terminal: one plain line per second."""

    every = PLAIN_EVERY
    first = PLAIN_EVERY

    def __init__(self, stream: TextIO, seconds: float, rows: Sequence[RowResult]) -> None:
        self.stream = stream
        names = ", ".join(r.label for r in rows)
        stream.write(
            f"permits demo: {seconds:g} s of traffic ({_describe_traffic(seconds)}) "
            f"against {names}; each admits ~{RATE}/s. "
            "Columns: granted/rejected/queued so far.\n"
        )
        stream.flush()

    def update(self, result: DemoResult, t: float) -> None:
        parts = [f"t={t:4.1f}s offered={len(result.offered_at):<4}"]
        for r in result.rows:
            key = r.label.replace(" + ", "+").replace(" ", "_")
            parts.append(f"{key}={r.granted}/{r.rejected}/{r.queued}")
        self.stream.write("  ".join(parts) + "\n")
        self.stream.flush()


def _summary(result: DemoResult) -> str:
    offered = len(result.offered_at)
    lines = [
        "",
        f"After {result.seconds:g} s: {offered} requests offered to each limiter (each admits ~{RATE}/s).",
        "",
        f"{'algorithm':<24}{'granted':>8}{'rejected':>10}{'still queued':>14}  notes",
    ]
    for r in result.rows:
        notes = []
        if r.mode == "queue":
            mean = r.total_wait / r.granted if r.granted else 0.0
            notes.append(f"peak queue {r.queued_peak}, mean wait {mean:.2f} s")
        if r.reasons:
            notes.append(", ".join(f"{k}: {v}" for k, v in sorted(r.reasons.items())))
        lines.append(f"{r.label:<24}{r.granted:>8}{r.rejected:>10}{r.unfinished:>14}  {'; '.join(notes)}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- plot


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


# --------------------------------------------------------------------------- entry points


async def _run(
    seconds: float,
    rows: list[_Row],
    clock: permits.ManualClock | None,
    display: _Display | None,
) -> DemoResult:
    return await _Driver(seconds, rows, clock, display).run()


def simulate(seconds: float = 5.0, *, concurrency: bool = False) -> DemoResult:
    """Run the demo's traffic on a ``ManualClock``, as fast as possible, with no display."""
    clock = permits.ManualClock()
    return asyncio.run(_run(seconds, _make_rows(concurrency, clock), clock, None))


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False


def run_demo(
    seconds: float = 5.0,
    plot: str | None = None,
    *,
    concurrency: bool = False,
    simulate: bool = False,
    stream: TextIO | None = None,
) -> int:
    """Run the demo and return the process exit status."""
    out = stream if stream is not None else sys.stdout
    if not (math.isfinite(seconds) and seconds > 0):
        print("permits demo: --seconds must be a positive number", file=sys.stderr)
        return 2
    if plot is not None:
        try:
            _pyplot()  # fail before the demo, not after it
        except _MatplotlibMissing as exc:
            print(exc, file=sys.stderr)
            return 1

    clock = permits.ManualClock() if simulate else None
    rows = _make_rows(concurrency, clock)
    display: _Display
    if not simulate and _is_terminal(out):
        display = _LiveDisplay(out, seconds)
    else:
        display = _PlainDisplay(out, seconds, [r.result for r in rows])
    try:
        result = asyncio.run(_run(seconds, rows, clock, display))
        display.update(result, seconds)
    except KeyboardInterrupt:
        print("\npermits demo: interrupted", file=sys.stderr)
        return 130
    finally:
        display.finish()  # the live display shows the cursor again, whatever happened
    out.write(_summary(result))
    if plot is not None:
        try:
            write_plot(result, plot)
        except OSError as exc:
            out.flush()
            print(f"permits demo: cannot write the plot to {plot}: {exc}", file=sys.stderr)
            return 1
        out.write(f"plot written to {plot}\n")
    out.flush()
    return 0
