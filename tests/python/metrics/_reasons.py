"""A limiter that refuses with more distinct reasons than a Meter has room for."""

from __future__ import annotations

import permits

#: Distinct reasons it refuses with, in turn: more than a Meter's 32 slots.
REASONS = 40


class Reasons(permits.RateLimiter):
    """Refuses each acquisition with a reason of its own (made at the call: never the same str)."""

    def __init__(self) -> None:
        super().__init__(name="reasons")
        self.calls = 0

    def _acquire(self, permit_count: int) -> permits.Lease:
        self.calls += 1
        return permits.Lease.denied(reason="r" + str(self.calls % REASONS))
