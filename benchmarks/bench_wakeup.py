"""Waits that each need the engine to wake the event loop: the cost of one wake-up.

    python benchmarks/bench_wakeup.py [--rounds N] [--repeats R]

One task waits for one token at a time from an empty ``TokenBucketLimiter`` on a ``ManualClock``;
a loop callback advances the clock by one period, so the engine grants the queued wait, writes one
byte to the loop's wake-up socket, and the loop drains the bridge and resumes the task. Every round
is one wake-up through the socket (checked: wake-ups per round), in one thread, so no GIL hand-over
muddles it. The same on two loops: one that watches the socket (``add_reader``, the selector loop)
and one that cannot and receives from it (``add_reader`` refuses, as on Windows' proactor loop).
Rounds per second, best and median of the repeats.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import permits
from permits import _asyncio


class ReceivingLoop(asyncio.SelectorEventLoop):
    """Cannot watch a descriptor for its users (as the proactor loop): the bridge receives."""

    def add_reader(self, fd: Any, callback: Callable[..., object], *args: Any) -> None:
        raise NotImplementedError


LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "watching (selector)": asyncio.SelectorEventLoop,
    "receiving (as proactor)": ReceivingLoop,
}


def one_run(loop_factory: Callable[[], asyncio.AbstractEventLoop], rounds: int) -> tuple[float, float]:
    """Seconds for `rounds` queued waits, and the loop's wake-ups per round."""
    clock = permits.ManualClock()
    limiter = permits.TokenBucketLimiter(1, 1, 1.0, queue_limit=1, clock=clock)

    async def waits() -> tuple[float, float]:
        loop = asyncio.get_running_loop()

        async def one() -> None:
            wait = limiter.wait_async()
            loop.call_soon(clock.advance, 1.0)  # runs once the wait is queued: the refill grants it
            assert (await wait).acquired

        assert limiter.acquire().acquired  # empty: every wait queues
        await one()  # the bridge exists before the clock starts
        bridge = _asyncio.bridge_of(loop)
        assert bridge is not None
        before = bridge.wakeups
        began = time.perf_counter()
        for _ in range(rounds):
            await one()
        return time.perf_counter() - began, (bridge.wakeups - before) / rounds

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(waits())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"permits {permits.__version__}, Python {sys.version.split()[0]}, {args.rounds:,} rounds x {args.repeats}")
    print(f"{'loop':<26}{'best rounds/s':>15}{'median':>12}{'wake-ups/round':>16}")
    for name, factory in LOOPS.items():
        try:
            runs = [one_run(factory, args.rounds) for _ in range(args.repeats)]
        except Exception as e:  # an older build, say, that cannot wait on such a loop
            print(f"{name:<26}fails: {type(e).__name__}: {e}")
            continue
        rates = [args.rounds / seconds for seconds, _ in runs]
        wakes = statistics.median(w for _, w in runs)
        print(f"{name:<26}{max(rates):>15,.0f}{statistics.median(rates):>12,.0f}{wakes:>16.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
