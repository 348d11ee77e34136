"""A client's limit that learns the server's: ``permits.AdaptiveLimiter``.

A scraper or an API client rarely knows the rate it is allowed; the server tells it, in 429s and
``Retry-After``, and more and more in the ``RateLimit`` headers. ``AdaptiveLimiter`` paces permits
at a rate it changes with every response it is shown (``on_response(status, headers)``):

* **A stated quota is paced to directly.** ``RateLimit``/``RateLimit-Policy`` (or
  ``X-RateLimit-Remaining``/``-Reset``/``-Limit``) say how many requests are left until when: the
  remaining ones are spread evenly over the time until the reset, never faster than the quota per
  window. Nothing is probed, so a server that states its quota answers no 429.
* **Otherwise the rate is found as TCP's CUBIC finds a link's** (what botocore's adaptive retry mode
  does for AWS's throttling): a throttling answer (429, 503) lowers the rate to ``BETA`` (0.9) of
  where it was; each success after it raises it along a cubic that comes back to that rate, stays
  near it for a while and then probes above it. The rate a server throttled at is remembered, and
  the curve spends most of its time close under it: a sawtooth of 10 % keeps about 97 % of the
  server's rate where AIMD's halving keeps 75 %. The curve is clocked by successes, not time (a
  client that sends little never grows a rate it has not tried), and the rate never goes above
  twice what was recently sent nor outside ``[min_rate, max_rate]``. Before the first throttling
  answer the rate doubles every ``SLOW_START`` successes, so that a low first guess climbs fast.
* **``Retry-After`` is obeyed exactly**: no permit is granted before it has passed.

It is a ``permits.RateLimiter`` (it chains, partitions, and waits with ``wait``/``wait_async``); a
request takes a permit, and the response goes to ``on_response``.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from ._core import Lease
from ._server_signals import Signals, read
from .rate_limiter import RateLimiter, Statistics

#: The rate kept after a throttling answer, as a fraction of the rate throttled.
BETA = 0.9
#: Successes (at least) in which the cubic comes back to the rate last throttled.
PLATEAU_SUCCESSES = 300
#: ... and at least this many seconds' worth of them at that rate (a 429's Retry-After, often a
#: whole second, then costs a few percent at most).
PLATEAU_SECONDS = 60.0
#: Before the first throttling answer, the rate doubles every this many successes.
SLOW_START = 10
#: The longest reset a server's stated quota is believed for, in seconds, unless its window is
#: longer (a typo or a hostile server must not stop the client for good).
MAX_RESET = 86_400.0
#: How the rate recently sent is measured: counted per bucket of this many seconds, smoothed.
_BUCKET = 0.5
_SMOOTHING = 0.8


def _rate(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of permits per second, got {type(value).__name__}")
    rate = float(value)
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"{name} must be a finite number of permits per second above 0, got {value!r}")
    return rate


class AdaptiveLimiter(RateLimiter):
    """Permits paced at ``rate`` per second, learned from the responses given to ``on_response``.

    ``initial_rate`` is the first guess; ``min_rate`` (default ``initial_rate / 100``) and
    ``max_rate`` (default unbounded) bound what it learns. A refusal is ``"limit_reached"`` with the
    ``retry_after`` of the next permit. ``clock``: a ``permits.ManualClock`` for tests.
    """

    def __init__(
        self,
        initial_rate: float,
        *,
        min_rate: float | None = None,
        max_rate: float | None = None,
        name: str | None = None,
        clock: Any = None,
    ) -> None:
        rate = _rate(initial_rate, "initial_rate")
        low = rate / 100 if min_rate is None else _rate(min_rate, "min_rate")
        high = math.inf if max_rate is None else _rate(max_rate, "max_rate")
        if low > high:
            raise ValueError(f"min_rate ({low}) must not be above max_rate ({high})")
        if not low <= rate <= high:
            raise ValueError(f"initial_rate ({rate}) must be between min_rate ({low}) and max_rate ({high})")
        super().__init__(name=name, clock=clock)
        self.min_rate = low
        """The lowest rate it learns, permits per second."""
        self.max_rate = high
        """The highest rate it learns, permits per second (``inf``: unbounded)."""
        self._lock = threading.Lock()
        self._learned = rate  # the rate learned from throttling and successes
        self._ceiling = rate  # the rate last throttled at (CUBIC's W_max)
        self._successes = 0  # since the last decrease
        self._slow_start = True
        self._fresh = True  # a permit granted since the last decrease
        self._next_ns = 0  # the earliest time of the next permit (pacing)
        self._last = (0, 0)  # (time, permits) of the last grant: a slower pace spaces the next from it
        self._blocked_ns = 0  # no permit before (Retry-After, or a stated quota used up)
        self._stated: tuple[int, int, float] | None = None  # (until ns, permits left, rate) of a stated quota
        self._sent_rate = 0.0  # the rate recently sent, smoothed
        self._bucket_start = self._rl_clock.now_ns()
        self._bucket_count = 0

    # ---- what it allows ----
    @property
    def rate(self) -> float:
        """The permits per second it allows now (a stated quota's pace while it lasts)."""
        with self._lock:
            return self._pace_locked(self._rl_clock.now_ns())

    def _pace_locked(self, now: int) -> float:
        if self._stated is not None:
            until, left, rate = self._stated
            if now < until and left > 0:
                return rate
            self._stated = None
        return self._learned

    def _acquire(self, permit_count: int) -> Lease:
        now = self._rl_clock.now_ns()
        with self._lock:
            start = max(self._next_ns, self._blocked_ns)
            if now < start:
                return Lease.denied("limit_reached", retry_after=(start - now) / 1e9)
            if permit_count == 0:
                return Lease.granted(0)
            rate = self._pace_locked(now)
            self._next_ns = max(self._next_ns, now) + round(permit_count * 1e9 / rate)
            self._last = (now, permit_count)
            if self._stated is not None:
                until, left, stated_rate = self._stated
                self._stated = (until, left - permit_count, stated_rate)
                if left - permit_count <= 0:
                    self._blocked_ns = max(self._blocked_ns, until)  # used up until its reset
            self._fresh = True
            self._count_sent_locked(now, permit_count)
            return Lease.granted(permit_count)

    def _count_sent_locked(self, now: int, permit_count: int) -> None:
        elapsed = (now - self._bucket_start) / 1e9
        if elapsed >= _BUCKET:
            measured = self._bucket_count / elapsed
            self._sent_rate = _SMOOTHING * measured + (1 - _SMOOTHING) * self._sent_rate
            self._bucket_start, self._bucket_count = now, 0
        self._bucket_count += permit_count

    # ---- what it learns ----
    def on_response(self, status: int, headers: object = ()) -> None:
        """Learns from one response: its ``status`` (429 and 503 throttle) and ``headers`` (a
        mapping or pairs, names in any case: ``Retry-After``, ``RateLimit``, ``RateLimit-Policy``,
        ``X-RateLimit-*``). Raises ``TypeError`` for a status that is not an int or headers that are
        neither; values it cannot read are ignored."""
        signals = read(status, headers)
        now = self._rl_clock.now_ns()
        with self._lock:
            self._learn_locked(signals, now)
            # A slower pace from now on: the next permit is spaced from the last at that pace.
            at, count = self._last
            if count:
                self._next_ns = max(self._next_ns, at + round(count * 1e9 / self._pace_locked(now)))

    def _learn_locked(self, s: Signals, now: int) -> None:
        if s.retry_after is not None and (s.throttled or s.remaining == 0):
            self._blocked_ns = max(self._blocked_ns, now + round(s.retry_after * 1e9))
        if s.remaining is not None and s.reset is not None:
            self._state_quota_locked(s, now)
        elif s.throttled:
            self._decrease_locked()
        else:
            self._increase_locked()

    def _state_quota_locked(self, s: Signals, now: int) -> None:
        """The server said how many are left until when: pace them evenly, never faster than its quota."""
        assert s.remaining is not None and s.reset is not None
        reset = min(s.reset, max(MAX_RESET, s.window or 0.0))
        until = now + round(reset * 1e9)
        if s.remaining <= 0:
            self._blocked_ns = max(self._blocked_ns, until)
            self._stated = None
            return
        rate = s.remaining / reset if reset > 0 else math.inf
        if s.quota is not None and s.window is not None and s.window > 0:
            rate = min(rate, s.quota / s.window)
        rate = min(rate, self.max_rate)  # (below min_rate too: what the server states holds)
        if rate <= 0:  # a quota of 0: nothing until the reset
            self._blocked_ns = max(self._blocked_ns, until)
            self._stated = None
            return
        if not math.isfinite(rate):
            self._stated = None
            return
        self._stated = (until, s.remaining, rate)
        # What is learned goes on from the stated pace once the server stops stating it.
        self._learned = self._ceiling = rate
        self._slow_start = False
        self._successes = 0

    def _decrease_locked(self) -> None:
        if not self._fresh:
            return  # answers to what was sent before the last decrease: one decrease for them
        self._ceiling = self._learned
        self._learned = max(self.min_rate, BETA * self._learned)
        self._successes = 0
        self._slow_start = False
        self._fresh = False

    def _increase_locked(self) -> None:
        self._successes += 1
        if self._slow_start:
            rate = self._learned * 2 ** (1 / SLOW_START)
        else:
            # CUBIC, clocked by successes: back to the ceiling after `plateau` successes, flat
            # around it, then probing above it ever faster.
            plateau = max(PLATEAU_SUCCESSES, PLATEAU_SECONDS * self._ceiling)
            rate = self._ceiling * (1 + (1 - BETA) * (self._successes / plateau - 1) ** 3)
        if self._sent_rate > 0:
            rate = min(rate, max(2 * self._sent_rate, self._learned))  # never far above what was tried
        self._learned = min(max(rate, self.min_rate), self.max_rate)

    # ---- the rest of the limiter ----
    def _statistics(self) -> Statistics:
        now = self._rl_clock.now_ns()
        with self._lock:
            free = 1 if now >= max(self._next_ns, self._blocked_ns) else 0
        return Statistics(free, 0, self._rl_tally.granted, self._rl_tally.refused)

    def __repr__(self) -> str:
        return f"AdaptiveLimiter(rate={self.rate:.4g}/s, name={self.name!r})"
