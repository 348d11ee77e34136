"""Waiting for a permit however the limiter's queue is configured, for the client and job
integrations (no framework imported here).

With a queue, a wait queues in it (``wait`` / ``wait_async``). Without one, the engine's wait
fails at once; waiting then means sleeping for the failed lease's ``retry_after`` and asking again.
A closed limiter ends every wait with ``permits.LimiterClosedError``.

A server's ``Retry-After`` pauses one key: requests for it wait until the pause is over before
they ask for a permit (so a paused key holds no permits while it waits). A wait given a deadline
(the httpx transports' timeouts) raises ``PauseOutlasts`` at once when the pause ends after it;
``take`` gives up, holding nothing, as soon as the key is paused (the clients then wait the pause
out away from their connection pool).

Sleeping goes through a function given to ``Pacer``. By default it is the real sleep, except
for a limiter on a ``permits.ManualClock``: time there moves only when someone advances it,
so a paced wait advances the clock by what it would have slept (tests then run at once, in exact
steps). For the same reason a blocking paced wait on a ManualClock never queues (its thread is
the one that would have to advance the clock to serve it): it asks with ``acquire`` and advances
by the failed lease's ``retry_after``. An asynchronous one waits in the queue as on a real clock
(another task may advance the clock), unless the limiter has ``queue_limit=0``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Awaitable, Callable
from datetime import UTC
from email.utils import parsedate_to_datetime

from . import _foreign
from ._core import Lease, LimiterClosedError
from ._pause_table import PauseTable
from .clock import ManualClock
from .keyed_limiter import KeyedRateLimiter
from .rate_limiter import RateLimiter

Sleep = Callable[[float], None]
AsyncSleep = Callable[[float], Awaitable[None]]

#: The longest pause a ``Retry-After`` can ask for: a larger value (a date far ahead, a typo)
#: pauses one hour. A client that should give up instead sets ``max_retries=0`` or
#: ``retry_429=False``.
MAX_RETRY_AFTER = 3600.0
#: The pause between attempts when a failed lease does not say when to come back (a
#: concurrency limiter without a queue, a full queue).
PAUSE = 0.01
#: delta-seconds (RFC 9110 says digits; a fraction or a minus sign is read too, not worse).
_DELTA = re.compile(r"-?[0-9]+(?:\.[0-9]*)?")


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value: delta-seconds or an HTTP date.

    Returns None for a missing or unreadable value (never raises); a negative delay or a date in
    the past gives 0; anything above ``MAX_RETRY_AFTER`` gives that. ``now`` is the wall-clock
    time (``time.time()``) a date is measured from.
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    if _DELTA.fullmatch(text):
        seconds: float | None = float(text)  # very many digits: inf, capped below
    else:
        seconds = _seconds_until(text, time.time() if now is None else now)
    if seconds is None or math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _seconds_until(text: str, now: float) -> float | None:
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT; "-0000" parses as naive
        when = when.replace(tzinfo=UTC)
    try:
        return when.timestamp() - now
    except (OverflowError, OSError, ValueError):
        return None


def check_limiter(limiter: object) -> RateLimiter | KeyedRateLimiter:
    if not isinstance(limiter, RateLimiter | KeyedRateLimiter):
        raise TypeError(f"limiter must be a permits.RateLimiter or KeyedRateLimiter, got {type(limiter).__name__}")
    return limiter


def check_permit_count(permit_count: object) -> int:
    if isinstance(permit_count, bool) or not isinstance(permit_count, int):
        raise TypeError(f"permit_count must be an int, got {type(permit_count).__name__}")
    if permit_count < 0:
        raise ValueError(f"permit_count must not be negative, got {permit_count}")
    return int(permit_count)


class PauseOutlasts(Exception):
    """A key's pause ends after the caller's deadline: waiting it out is pointless."""

    def __init__(self, left: float) -> None:
        super().__init__(f"paused by a Retry-After for another {left:g} s")
        self.left = left


class Pacer:
    """Waits for one limiter's permits, per key, and keeps the keys' pauses."""

    __slots__ = ("_clock", "_front", "_limiter", "_manual", "_paused", "_sleep", "_sleep_async")

    def __init__(
        self,
        limiter: object,
        *,
        sleep: Sleep | None = None,
        sleep_async: AsyncSleep | None = None,
        front: Callable[[object], RateLimiter] | None = None,
    ) -> None:
        self._limiter = check_limiter(limiter)
        # A pace taken before the limiter's permit (the clients' adaptive=True): front(key)'s
        # permits, asked without waiting, slept for by their retry_after.
        self._front = front
        self._clock = self._limiter._rl_clock
        self._paused = PauseTable()
        clock = self._clock
        self._manual = isinstance(clock, ManualClock)
        if isinstance(clock, ManualClock):
            self._sleep: Sleep = sleep or _advance(clock)
            self._sleep_async: AsyncSleep = sleep_async or _advance_async(clock)
        else:
            self._sleep = sleep or time.sleep
            self._sleep_async = sleep_async or _foreign.sleep

    @property
    def limiter(self) -> RateLimiter | KeyedRateLimiter:
        return self._limiter

    def now_ns(self) -> int:
        """The limiter's clock (what pauses and deadlines are measured on)."""
        return self._clock.now_ns()

    def pause(self, key: object, seconds: float) -> None:
        """No permit is asked for ``key`` for the next ``seconds`` (a longer pause already set stays)."""
        # In the clock's integer nanoseconds, rounded up: a sleep of what is left then ends the
        # pause exactly (on a ManualClock too), with no rounding left over to sleep again for.
        now = self._clock.now_ns()
        self._paused.extend(key, now + math.ceil(seconds * 1e9), now)

    def paused_for(self, key: object) -> float:
        """Seconds left of ``key``'s pause (0 when it is not paused)."""
        now = self._clock.now_ns()
        until = self._paused.until_ns(key, now)
        return 0.0 if until is None else (until - now) / 1e9

    def _pause_left(self, key: object, deadline_ns: int | None) -> float:
        """As ``paused_for``; raises ``PauseOutlasts`` when the pause ends after ``deadline_ns``."""
        now = self._clock.now_ns()
        until = self._paused.until_ns(key, now)
        if until is None:
            return 0.0
        if deadline_ns is not None and until > deadline_ns:
            raise PauseOutlasts((until - now) / 1e9)
        return (until - now) / 1e9

    def acquire_now(self, key: object, permit_count: int = 1) -> Lease:
        """The limiter's answer now, never waiting (its ``acquire``)."""
        limiter = self._limiter
        if isinstance(limiter, KeyedRateLimiter):
            return limiter.acquire(key, permit_count)
        return limiter.acquire(permit_count)

    def _ask(self, key: object, permit_count: int) -> Lease:
        if self._manual:
            return self.acquire_now(key, permit_count)
        limiter = self._limiter
        if isinstance(limiter, KeyedRateLimiter):
            return limiter.wait(key, permit_count)
        return limiter.wait(permit_count)

    def sleep_out_pause(self, key: object, deadline_ns: int | None = None) -> None:
        """Blocks until ``key`` is not paused; ``PauseOutlasts`` at once when its pause ends after
        ``deadline_ns`` (on the limiter's clock)."""
        while (left := self._pause_left(key, deadline_ns)) > 0:
            self._sleep(left)

    async def sleep_out_pause_async(self, key: object, deadline_ns: int | None = None) -> None:
        """As ``sleep_out_pause``, sleeping in the event loop."""
        while (left := self._pause_left(key, deadline_ns)) > 0:
            await self._sleep_async(left)

    def take(self, key: object, permit_count: int = 1) -> Lease | None:
        """Waits for ``permit_count`` permits as ``wait`` does, but gives up (holding nothing) and
        returns None as soon as ``key`` is paused, before or after the limiter grants them."""
        paced = self._front is None  # the front's pace taken (once: a refusal below keeps it)
        while True:
            if self.paused_for(key) > 0:
                return None
            if not paced:
                front = self._front(key).acquire(permit_count)  # type: ignore[misc]
                if not front:
                    self._sleep(_pause(front))
                    continue
                paced = True
            lease = self._ask(key, permit_count)
            if lease:
                if self.paused_for(key) > 0:  # paused while this request was queued
                    lease._refund()
                    return None
                return lease
            self._sleep(_pause(lease))

    async def take_async(self, key: object, permit_count: int = 1) -> Lease | None:
        """As ``take``, never blocking the event loop (``wait_async`` and async sleeps only)."""
        limiter = self._limiter
        paced = self._front is None
        while True:
            if self.paused_for(key) > 0:
                return None
            if not paced:
                front = self._front(key).acquire(permit_count)  # type: ignore[misc]
                if not front:
                    await self._sleep_async(_pause(front))
                    continue
                paced = True
            if isinstance(limiter, KeyedRateLimiter):
                lease = await limiter.wait_async(key, permit_count)
            else:
                lease = await limiter.wait_async(permit_count)
            if lease:
                if self.paused_for(key) > 0:
                    lease._refund()
                    return None
                return lease
            await self._sleep_async(_pause(lease))

    def wait(self, key: object, permit_count: int = 1, *, deadline_ns: int | None = None) -> Lease:
        """Blocks until ``key`` is not paused and the limiter grants ``permit_count`` permits.
        A pause that ends after ``deadline_ns`` raises ``PauseOutlasts`` at once."""
        while True:
            self.sleep_out_pause(key, deadline_ns)
            lease = self.take(key, permit_count)
            if lease is not None:
                return lease

    async def wait_async(self, key: object, permit_count: int = 1, *, deadline_ns: int | None = None) -> Lease:
        """As ``wait``, never blocking the event loop (``wait_async`` and async sleeps only)."""
        while True:
            await self.sleep_out_pause_async(key, deadline_ns)
            lease = await self.take_async(key, permit_count)
            if lease is not None:
                return lease


def _pause(lease: Lease) -> float:
    """How long to sleep after a failed lease; a close ends the wait."""
    if lease.reason == "closed":
        raise LimiterClosedError("the limiter is closed")
    return lease.retry_after if lease.retry_after else PAUSE


def _advance(clock: ManualClock) -> Sleep:
    def sleep(seconds: float) -> None:
        clock.advance(max(seconds, 1e-9))  # at least a nanosecond: time must move for the wait to end

    return sleep


def _advance_async(clock: ManualClock) -> AsyncSleep:
    advance = _advance(clock)

    async def sleep(seconds: float) -> None:
        advance(seconds)
        await _foreign.sleep(0)  # still a suspension point, as a real sleep is

    return sleep


__all__ = ["MAX_RETRY_AFTER", "Pacer", "PauseOutlasts", "parse_retry_after"]
