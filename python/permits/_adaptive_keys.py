"""The HTTP clients' ``adaptive=True``: an ``AdaptiveLimiter`` per key (the request's host, unless
the client's ``key`` says otherwise), whose pace a request takes before its permit of the client's
own limiter (``Pacer``'s ``front``), and which is shown every response. What a host taught stays:
its limiter is kept as long as the client.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

from ._pacing import check_limiter
from .adaptive import AdaptiveLimiter

#: The first guess for a key, permits per second: the slow start doubles it every 10 successes
#: until the server first throttles, or its stated quota sets the pace at once.
INITIAL_RATE = 10.0


class AdaptiveKeys:
    """One ``AdaptiveLimiter`` per key, made on first use, on the client limiter's clock."""

    __slots__ = ("_clock", "_limiters", "_lock")

    def __init__(self, clock: Any) -> None:
        self._clock = clock
        self._limiters: dict[Hashable, AdaptiveLimiter] = {}
        self._lock = threading.Lock()

    def of(self, key: Hashable) -> AdaptiveLimiter:
        with self._lock:
            found = self._limiters.get(key)
            if found is None:
                found = self._limiters[key] = AdaptiveLimiter(INITIAL_RATE, clock=self._clock, name="adaptive")
            return found

    def learn(self, key: Hashable, status: int, headers: object) -> None:
        self.of(key).on_response(status, headers)


def adaptive_keys(limiter: object, adaptive: object) -> AdaptiveKeys | None:
    """The adaptive limiters of a client of ``limiter`` (on its clock), or None unless ``adaptive``."""
    if not isinstance(adaptive, bool):
        raise TypeError(f"adaptive must be a bool, got {type(adaptive).__name__}")
    return AdaptiveKeys(check_limiter(limiter)._rl_clock) if adaptive else None
