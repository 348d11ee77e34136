"""The waits of limiters without a queue of their own (custom limiters): ask, pause for the
failed lease's ``retry_after`` (or a short poll), ask again.

Pauses and timeouts run on the limiter's clock (a ManualClock in tests: advancing it ends them),
in bounded real sleeps (a ``retry_after`` of 1e10 s waits, it does not overflow), and a close ends
them at once (``_pausing``). The attempts on the way are not counted: only the outcome is, as for
the engine's queued waits (a timeout or a close is no failure). A close while waiting ends the
wait with a failed lease (reason ``"closed"``), as the engine's queues do.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

from . import _pausing
from ._core import Clock, Lease

#: Reasons for which waiting longer cannot help: the wait returns the failed lease.
FINAL_REASONS = frozenset({"queue_full", "evicted", "closed", "timeout", "partition_limit"})
#: The pause (real seconds) between attempts when a failed lease does not say how long to wait.
PAUSE = 0.01


def _ends(lease: Lease) -> bool:
    return bool(lease) or lease.reason in FINAL_REASONS


def _next(lease: Lease, asked: int, deadline: int | None) -> tuple[int | None, float | None]:
    """Until when (clock ns) and for how long a poll (real s) to pause after a failed attempt made
    at ``asked``: its ``retry_after`` counts from when the limiter was asked (time spent answering is
    part of the pause, not added to it)."""
    retry = lease.retry_after
    if retry is None or not math.isfinite(retry) or retry < 0:
        return deadline, PAUSE
    until = asked + math.ceil(retry * 1e9)
    return (until if deadline is None else min(until, deadline)), None


def timed_out(permit_count: int) -> Lease:
    """What a wait whose timeout ran out returns."""
    return Lease.denied("timeout")._with_permit_count(permit_count)


def wait(
    attempt: Callable[[], Lease], closed: Callable[[], bool], permit_count: int, timeout_ns: int, clock: Clock
) -> Lease:
    """Blocks until ``attempt()`` grants, fails for good, the time on ``clock`` is up
    (``timeout_ns`` < 0: never) or the limiter closes."""
    deadline = None if timeout_ns < 0 else clock.now_ns() + timeout_ns
    while True:
        if closed() or _pausing.cancelled_here():
            return _pausing.closed_lease(permit_count)
        asked = clock.now_ns()
        lease = attempt()
        if _ends(lease):
            return lease
        if deadline is not None and clock.now_ns() >= deadline:
            return timed_out(permit_count)
        until, poll = _next(lease, asked, deadline)
        _pausing.pause(clock, until, poll, closed)


async def wait_async(
    attempt: Callable[[], Awaitable[Lease]], closed: Callable[[], bool], permit_count: int, clock: Clock
) -> Lease:
    """As ``wait`` with no timeout, awaiting each attempt and pausing in the running loop."""
    while True:
        if closed():
            return _pausing.closed_lease(permit_count)
        asked = clock.now_ns()
        lease = await attempt()
        if _ends(lease):
            return lease
        until, poll = _next(lease, asked, None)
        await _pausing.pause_async(clock, until, poll, closed)


def counts(lease: Lease) -> bool:
    """Whether a wait's outcome counts in the statistics (a timeout or a close does not)."""
    return bool(lease) or lease.reason not in ("timeout", "closed")
