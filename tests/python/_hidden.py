"""Servers with a limit the client is not told (or is, in headers), on a ManualClock, and a client
that sends as fast as its AdaptiveLimiter lets it: what the simulations of test_adaptive.py run."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import permits


class Server(Protocol):
    def answer(self, now: float) -> tuple[int, list[tuple[str, str]]]: ...


@dataclass
class TokenBucketServer:
    """``rate`` a second, bursts up to ``burst``; a refusal says ``Retry-After`` in whole seconds
    (as HTTP's delay-seconds), rounded up. ``headers``: also the IETF RateLimit fields."""

    rate: float
    burst: float
    headers: bool = False
    tokens: float = field(default=-1.0)
    last: float = 0.0

    def answer(self, now: float) -> tuple[int, list[tuple[str, str]]]:
        if self.tokens < 0:
            self.tokens, self.last = self.burst, now
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 200, self._state()
        wait = math.ceil((1 - self.tokens) / self.rate)
        return 429, [("Retry-After", str(wait)), *self._state()]

    def _state(self) -> list[tuple[str, str]]:
        if not self.headers:
            return []
        until_full = math.ceil((self.burst - self.tokens) / self.rate)
        return [
            ("RateLimit-Policy", f'"api";q={round(self.burst)};w={max(1, round(self.burst / self.rate))}'),
            ("RateLimit", f'"api";r={math.floor(self.tokens)};t={until_full}'),
        ]


@dataclass
class FixedWindowServer:
    """``limit`` per ``window`` seconds, windows from 0; a refusal's Retry-After is the rest of the
    window, rounded up. ``headers``: also the IETF RateLimit fields."""

    limit: int
    window: float
    headers: bool = False
    current: int = -1
    used: int = 0

    def answer(self, now: float) -> tuple[int, list[tuple[str, str]]]:
        index = math.floor(now / self.window)
        if index != self.current:
            self.current, self.used = index, 0
        left = (index + 1) * self.window - now
        state = (
            [
                ("RateLimit-Policy", f'"api";q={self.limit};w={math.ceil(self.window)}'),
                ("RateLimit", f'"api";r={max(0, self.limit - self.used - 1)};t={math.ceil(left)}'),
            ]
            if self.headers
            else []
        )
        if self.used < self.limit:
            self.used += 1
            return 200, state
        return 429, [("Retry-After", str(math.ceil(left))), *state]


@dataclass
class Run:
    sent: int = 0
    throttled: int = 0
    times: list[float] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    rates: list[tuple[float, float]] = field(default_factory=list)


def drive(
    limiter: permits.AdaptiveLimiter,
    clock: permits.ManualClock,
    server: Any,
    until: float,
    *,
    service: float = 0.001,
    change: Any = None,
) -> Run:
    """A client sending as fast as ``limiter`` allows until ``until`` (clock seconds), each request
    taking ``service`` seconds to answer; ``change(now, server)`` may change the server's limit."""
    run = Run()
    while clock.now() < until:
        lease = limiter.acquire()
        if not lease:
            clock.advance(max(lease.retry_after or 0.0, 1e-6))
            continue
        if change is not None:
            change(clock.now(), server)
        status, headers = server.answer(clock.now())
        run.sent += 1
        run.times.append(clock.now())
        run.statuses.append(status)
        run.throttled += status == 429
        clock.advance(service)
        limiter.on_response(status, headers)
        run.rates.append((clock.now(), limiter.rate))
    return run


def window_stats(run: Run, start: float, end: float) -> tuple[float, float]:
    """(successes per second, share of requests answered 429) of the requests sent in [start, end)."""
    ok = bad = 0
    for t, status in zip(run.times, run.statuses, strict=True):
        if start <= t < end:
            ok += status != 429
            bad += status == 429
    return ok / (end - start), bad / max(1, ok + bad)
