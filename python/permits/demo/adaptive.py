"""``python -m permits demo --adaptive``: a ``permits.AdaptiveLimiter`` learning a limit it is not told.

On a ``ManualClock`` (the same run every time, in a second): a client that sends as fast as its
limiter lets it, guessing 2 requests/s, against a server whose hidden token bucket allows 10 a
second, then 20, then 5. Each request's answer (200, or 429 with a ``Retry-After`` in whole
seconds) goes to ``on_response``. Prints what each phase got; ``--plot FILE`` draws the rate learned
against the hidden limit (needs matplotlib).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

import permits

from .plot import _require_matplotlib, lacks_matplotlib, save_plot

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: (from, hidden rate per second): the server's limit over the run.
PHASES = ((0.0, 10.0), (300.0, 20.0), (600.0, 5.0))
SECONDS = 900.0
GUESS = 2.0
SERVICE = 0.001  # seconds a request takes to be answered


@dataclass
class AdaptiveRun:
    """What the client sent and learned: each request's (time, status), the rate after each answer."""

    answers: list[tuple[float, int]] = field(default_factory=list)
    rates: list[tuple[float, float]] = field(default_factory=list)


def hidden_rate(now: float) -> float:
    return [rate for start, rate in PHASES if start <= now][-1]


def simulate_adaptive() -> AdaptiveRun:
    clock = permits.ManualClock()
    limiter = permits.AdaptiveLimiter(GUESS, clock=clock, name="adaptive")
    run = AdaptiveRun()
    tokens, last = hidden_rate(0.0), 0.0
    while clock.now() < SECONDS:
        lease = limiter.acquire()
        if not lease:
            clock.advance(lease.retry_after or 1e-6)
            continue
        now = clock.now()
        rate = hidden_rate(now)
        tokens, last = min(rate, tokens + (now - last) * rate), now  # a bucket of a second's worth
        if tokens >= 1:
            tokens -= 1
            status, headers = 200, {}
        else:
            status, headers = 429, {"Retry-After": str(math.ceil((1 - tokens) / rate))}
        run.answers.append((now, status))
        clock.advance(SERVICE)
        limiter.on_response(status, headers)
        run.rates.append((clock.now(), limiter.rate))
    return run


def summary(run: AdaptiveRun) -> str:
    lines = [f"permits demo --adaptive: a client guessing {GUESS:g} requests/s, a server whose hidden limit moves"]
    ends = [start for start, _ in PHASES[1:]] + [SECONDS]
    for (start, rate), end in zip(PHASES, ends, strict=True):
        # the second half of each phase: after the client has found the limit
        settled = (start + end) / 2
        within = [status for t, status in run.answers if settled <= t < end]
        ok = within.count(200)
        learned = [r for t, r in run.rates if settled <= t < end]
        got = ok / (end - settled)
        lines.append(
            f"  {start:4.0f}-{end:4.0f} s, hidden limit {rate:4.1f}/s: over its second half {got:5.2f}/s "
            f"({got / rate:4.0%} of the limit), {(len(within) - ok) / max(1, len(within)):5.2%} "
            f"answered 429, rate learned {sum(learned) / max(1, len(learned)):5.2f}/s on average"
        )
    return "\n".join(lines) + "\n"


def plot_figure(run: AdaptiveRun) -> Figure:
    _require_matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax = fig.subplots()
    times = [start for start, _ in PHASES] + [SECONDS]
    ax.stairs([rate for _, rate in PHASES], times, color="black", linestyle="--", label="the server's hidden limit")
    ax.plot([t for t, _ in run.rates], [r for _, r in run.rates], color="tab:blue", linewidth=1, label="rate learned")
    throttled = [t for t, status in run.answers if status == 429]
    ax.plot(throttled, [0.3] * len(throttled), "|", color="tab:red", markersize=8, label="a 429")
    ax.set_xlim(0, SECONDS)
    ax.set_ylim(0, 1.6 * max(rate for _, rate in PHASES))  # (the slow start overshoots at first)
    ax.set_xlabel("time (s, on a ManualClock)")
    ax.set_ylabel("requests/s")
    ax.grid(True, alpha=0.3)
    ax.set_title(
        f"permits.AdaptiveLimiter, first guess {GUESS:g}/s: 429s and Retry-After only (no RateLimit headers)",
        loc="left",
        fontsize="medium",
    )
    ax.legend(loc="upper right", fontsize="small")
    return fig


def run_adaptive_demo(plot: str | None = None, *, stream: TextIO | None = None) -> int:
    """Run the simulation, print its summary, draw it to ``plot``; the exit status (as run_demo's)."""
    out = stream if stream is not None else sys.stdout
    if plot is not None and lacks_matplotlib():
        return 2
    run = simulate_adaptive()
    out.write(summary(run))
    if plot is not None and not save_plot(lambda path: plot_figure(run).savefig(path, dpi=100), plot, out):
        return 1
    out.flush()
    return 0
