"""The interface a server implements for the store limiters (``Backend``), and its answer.

Every operation is one atomic step on the server (a Lua script, one SQL statement or function
call) on the state named ``name`` (the backend adds its own prefix). ``now_ns`` is the time of
the step: ``None`` means the server's own clock (``TIME``, ``clock_timestamp()``), which is what a
deployment uses; an integer (a ``permits.ManualClock``'s reading) is used instead by tests.
All times are integer nanoseconds.

The state of a name is created by its first step, with ``anchor = now`` (the time anchor of
the algorithm) and the rule's ``Rule.signature``; a later step with another signature raises
``ValueError`` naming both. A state untouched for longer than ``Rule.lifetime_ns`` may expire
on the server (it would be as good as new then).

The rules, as the engine's limiters (``n`` the request, ``limit`` the rule's limit):

* ``n > limit`` never reaches a backend (the limiter raises ``ValueError``). ``n == 0`` is granted
  iff at least one permit is available and takes nothing; when refused, its ``retry_after`` is that
  of ``n == 1``.
* token_bucket: ``tokens`` start at ``limit``; before each step, for the whole periods elapsed
  since ``anchor`` (``k = (now - anchor) // period``): ``tokens = min(limit, tokens + k * amount)``,
  ``anchor += k * period``. Granted iff ``tokens >= n`` (then ``tokens -= n``). Refused:
  ``retry_after = anchor + ceil((n - tokens) / amount) * period - now``.
* fixed_window: window ``w = (now - anchor) // period``; the count resets when ``w`` changes.
  Granted iff ``count + n <= limit``. Refused: ``retry_after = anchor + (w + 1) * period - now``.
* sliding_window: ``amount`` segments of ``seg = period // amount`` ns; segment ``s = (now - anchor)
  // seg``; the window holds the counts of segments ``s - amount + 1 .. s``. Granted iff the sum
  ``+ n <= limit`` (counted in segment ``s``). Refused: the time until enough of the oldest
  segments leave the window: the smallest ``j >= 1`` such that the counts of segments
  ``s - amount + 1 .. s - amount + j`` free enough (``sum - freed + n <= limit``), and
  ``retry_after = anchor + (s + j) * seg - now``.
* sliding_window_counter: windows ``w = (now - anchor) // period`` with counts ``current`` (of
  ``w``) and ``previous`` (of ``w - 1``; 0 if older); ``f = (now - anchor - w * period) / period``.
  Granted iff ``previous * (1 - f) + current + n <= limit`` (``current += n``). Refused:
  the exact time until the estimate admits ``n`` with nothing else arriving (possibly in the
  next window, where ``previous`` is today's ``current``), rounded up to a whole nanosecond.
  ``available = floor(limit - previous * (1 - f) - current)`` (at least 0). The arithmetic is
  exact (integers: ``previous * (period - elapsed)`` against ``(limit - current - n) * period``).
* concurrency: holders are leases (``lease_id``, its ``n``, an expiry ``now + lease_ttl_ns``);
  expired ones are dropped first. Granted iff ``sum(held) + n <= limit``; a grant records the
  lease (a ``take`` with a ``lease_id`` already recorded is granted again without counting twice:
  a retried step is harmless). Refused: no ``retry_after`` (``-1``).

``available`` in an ``Outcome`` is the permits available after the step (for the counter:
the formula above). ``stamp`` identifies where a grant was counted, so that ``Backend.refund`` can
undo it: the start, in the clock's nanoseconds, of the grant's period (token bucket), window (fixed
window, counter) or segment (sliding window and log), ``anchor + index * length``. Not the index
itself: a state whose keys expired (or were evicted, flushed, purged) is made again anchored later,
and a refund of its predecessor's grant, whose stamp is before its anchor, changes nothing in it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import NamedTuple, Protocol

from .rules import Rule


class Outcome(NamedTuple):
    granted: bool
    available: int
    #: Nanoseconds until the request would be granted; -1 when there is none (a grant, concurrency).
    retry_after_ns: int
    stamp: int


class Backend(Protocol):
    """One server's steps. The sync members are used with a sync client, the ``*_async`` ones
    with an asyncio client (``is_async``); the other kind raises ``TypeError`` saying which to use.
    ``is_async`` is ``None`` for a backend that serves both (one made from a conninfo string).

    Failures: a server that cannot be reached, or does not answer within the store's timeout,
    raises ``permits.BackendError`` (the backend never waits longer than its timeout); a
    signature mismatch raises ``ValueError``.
    """

    is_async: bool | None

    def take(self, name: str | bytes, rule: Rule, n: int, lease_id: str | None, now_ns: int | None) -> Outcome: ...

    def refund(
        self, name: str | bytes, rule: Rule, n: int, stamp: int, lease_id: str | None, now_ns: int | None
    ) -> None:
        """Undoes a grant, as the engine's give_back: tokens go back, less those the refills since
        the grant's period would have brought anyway (``(p - stamp) * amount``; at most up to
        ``limit``); a window's or the head segment's count goes down by ``n`` if ``stamp`` is still
        the current window or segment; a concurrency lease is removed (its release)."""

    def renew(self, name: str | bytes, rule: Rule, lease_ids: list[str], now_ns: int | None) -> list[str]:
        """Concurrency: the leases' expiry becomes ``now + lease_ttl_ns`` (those still recorded);
        returns the ids the server no longer records (expired, flushed, lost with a restart)."""

    def available(self, name: str | bytes, rule: Rule, now_ns: int | None) -> int:
        """The permits a request would find now (for the counter: its ``available``); reads only."""

    def reset(self, name: str | bytes, rule: Rule) -> None:
        """A time-based state forgotten: the next step makes it anew, full and anchored then (a
        refund of an earlier grant, stamped before that anchor, changes nothing in it). Concurrency
        leases are never passed here."""

    async def take_async(
        self, name: str | bytes, rule: Rule, n: int, lease_id: str | None, now_ns: int | None
    ) -> Outcome: ...

    def take_soon(
        self,
        name: str | bytes,
        rule: Rule,
        n: int,
        lease_id: str | None,
        now_ns: int | None,
        undo: Callable[[Outcome, int, str | None], None],
    ) -> asyncio.Future[Outcome]:
        """``take_async``'s outcome as a future (called on the running loop): cancelling it never
        loses a grant, which the server may make all the same; such a grant is handed to ``undo``
        (with ``n`` and ``lease_id``), which gives it back."""

    async def refund_async(
        self, name: str | bytes, rule: Rule, n: int, stamp: int, lease_id: str | None, now_ns: int | None
    ) -> None: ...

    async def renew_async(
        self, name: str | bytes, rule: Rule, lease_ids: list[str], now_ns: int | None
    ) -> list[str]: ...

    async def available_async(self, name: str | bytes, rule: Rule, now_ns: int | None) -> int: ...

    async def reset_async(self, name: str | bytes, rule: Rule) -> None: ...

    def close(self) -> None:
        """Releases what the backend opened itself (not a client or pool it was given)."""
