"""A short live demo of the permits limiters: ``python -m permits demo``.

The same bursty traffic (a burst at the start, a steady stream at twice the limit, a quiet
gap, then another burst) is offered at once to each algorithm, all configured for about
10 permits per second, and the terminal shows, as it happens, how many requests each one
granted, rejected and (for the queued variant) holds waiting. ``--plot FILE`` writes what each
algorithm granted, rejected and queued over time as a PNG (needs matplotlib).

By default the demo runs in real time on the in-process engine (``MonotonicClock``) inside
an asyncio event loop; the queued variant waits with ``await limiter.wait_async()``.
``--simulate`` runs the same script on a ``ManualClock`` as fast as possible instead.

One module per part: ``scenario`` (the limits and the traffic), ``results``, ``driver``,
``display``, ``plot`` and ``run`` (the entry points); the public names are re-exported here.
"""

from __future__ import annotations

from .plot import plot_figure, write_plot
from .results import DemoResult, RowResult
from .run import run_demo, simulate
from .scenario import traffic

__all__ = ["DemoResult", "RowResult", "plot_figure", "run_demo", "simulate", "traffic", "write_plot"]
