"""What the demo shows: a live table on a terminal, plain lines elsewhere, and the summary."""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Sequence
from typing import TextIO

from .results import DemoResult, RowResult
from .scenario import RATE, _describe_traffic

REDRAW = 0.1
PLAIN_EVERY = 1.0
SPARK_CELLS = 50


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
