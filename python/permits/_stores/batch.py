"""A batch of permits taken at once (a reserving limiter's step), and the backends that take them.

A batch of ``n`` to ``most`` permits is granted iff a take of ``n`` would be; it then takes
``min(most, what fits now)``: as many as the same number of single takes at that moment would
be granted, counted where they would be (``stamp``). The permits stay valid ``valid_ns`` from the
step's time: until their window (fixed window, counter), their segment (sliding window) or their
period (token bucket) ends. Within it, serving them later in this process is as good as taking
them one by one then: the server counted them where a single take would have, and no window,
segment or refill passed between. Time-based kinds only (a concurrency lease is its holder's).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from .backend import Outcome
from .rules import Rule


class Batch(NamedTuple):
    granted: bool
    #: The permits available after the step (the batch taken).
    available: int
    #: As Outcome's: -1 for a grant.
    retry_after_ns: int
    stamp: int
    #: Permits taken: from n to most when granted, 0 when refused.
    taken: int
    #: Nanoseconds from the step's time until the stamp's window, segment or period ends (0 when refused).
    valid_ns: int

    @property
    def outcome(self) -> Outcome:
        return Outcome(self.granted, self.available, self.retry_after_ns, self.stamp)


class Batching(Protocol):
    """A backend that takes batches (sync or asyncio, as its other steps)."""

    def take_batch(self, name: str | bytes, rule: Rule, n: int, most: int, now_ns: int | None) -> Batch: ...

    async def take_batch_async(self, name: str | bytes, rule: Rule, n: int, most: int, now_ns: int | None) -> Batch: ...

    def give_back_unused(self, name: str | bytes, rule: Rule, n: int, stamp: int, now_ns: int | None) -> None:
        """Permits of a batch (counted at ``stamp``) never used leave the count where it still weighs
        them (the counter's previous window, a sliding window's segment)."""

    async def give_back_unused_async(
        self, name: str | bytes, rule: Rule, n: int, stamp: int, now_ns: int | None
    ) -> None: ...
