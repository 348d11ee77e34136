"""The entry points: ``run_demo`` (``python -m permits demo``) and ``simulate``."""

from __future__ import annotations

import asyncio
import math
import os
import sys
from typing import TextIO

import permits

from .display import _Display, _LiveDisplay, _PlainDisplay, _summary
from .driver import _Driver
from .plot import lacks_matplotlib, save_plot, write_plot
from .results import DemoResult, _make_rows, _Row


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
    """Run the demo and return the process exit status: 0 done, 1 the plot could not be written, 2
    bad arguments or matplotlib missing for ``plot`` (the message names the extra to install), 130
    interrupted."""
    out = stream if stream is not None else sys.stdout
    if not (math.isfinite(seconds) and seconds > 0):
        print("permits demo: --seconds must be a positive number", file=sys.stderr)
        return 2
    if plot is not None and lacks_matplotlib():
        return 2  # as a usage error: the command asked for what this install lacks

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
    if plot is not None and not save_plot(lambda path: write_plot(result, path), plot, out):
        return 1
    out.flush()
    return 0
