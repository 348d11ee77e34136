"""The waits of limiters without a queue of their own (custom limiters): ask, pause for the
failed lease's ``retry_after`` (or a short pause), ask again.

The attempts on the way are not counted: only the outcome is, as for the engine's queued waits
(a timeout or a close is no failure). A close while waiting ends the wait with a failed lease
(reason ``"closed"``), as the engine's queues do.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from . import _foreign
from ._core import Lease

#: Reasons for which waiting longer cannot help: the wait returns the failed lease.
FINAL_REASONS = frozenset({"queue_full", "evicted", "closed", "timeout", "partition_limit"})
#: The pause between attempts when a failed lease does not say how long to wait.
PAUSE = 0.01


def _ends(lease: Lease) -> bool:
    return bool(lease) or lease.reason in FINAL_REASONS


def _pause(lease: Lease) -> float:
    return lease.retry_after if lease.retry_after is not None else PAUSE


def wait(attempt: Callable[[], Lease], closed: Callable[[], bool], permit_count: int, timeout_ns: int) -> Lease:
    """Blocks until ``attempt()`` grants, fails for good, the time is up (``timeout_ns`` < 0:
    never) or the limiter closes."""
    deadline = None if timeout_ns < 0 else time.monotonic() + timeout_ns / 1e9
    while True:
        if closed():
            return Lease.denied("closed")._with_permit_count(permit_count)
        lease = attempt()
        if _ends(lease):
            return lease
        pause = _pause(lease)
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return Lease.denied("timeout")._with_permit_count(permit_count)
            pause = min(pause, left)
        time.sleep(pause)


async def wait_async(attempt: Callable[[], Awaitable[Lease]], closed: Callable[[], bool], permit_count: int) -> Lease:
    """As :func:`wait`, awaiting each attempt and pausing with the running library's sleep."""
    while True:
        if closed():
            return Lease.denied("closed")._with_permit_count(permit_count)
        lease = await attempt()
        if _ends(lease):
            return lease
        await _foreign.sleep(_pause(lease))


def counts(lease: Lease) -> bool:
    """Whether a wait's outcome counts in the statistics (a timeout or a close does not)."""
    return bool(lease) or lease.reason not in ("timeout", "closed")
