"""The HTTP clients' ``adaptive=True``: an ``AdaptiveLimiter`` per key (the request's host, unless
the client's ``key`` says otherwise), whose pace a request takes before its permit of the client's
own limiter (``Pacer``'s ``front``), and which is shown every response. What a host taught stays
as long as the client, for the ``MAX_KEYS`` hosts used last.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from ._pacing import check_limiter
from .adaptive import AdaptiveLimiter

#: The first guess for a key, permits per second: the slow start doubles it every 10 successes
#: until the server first throttles, or its stated quota sets the pace at once.
INITIAL_RATE = 10.0
#: The keys kept at most: past it, the one used longest ago is forgotten (a crawler meets
#: millions of hosts; one met again learns anew).
MAX_KEYS = 10_000


class AdaptiveKeys:
    """One ``AdaptiveLimiter`` per key, made on first use, on the client limiter's clock."""

    __slots__ = ("_clock", "_limiters", "_lock", "max_keys")

    def __init__(self, clock: Any, max_keys: int = MAX_KEYS) -> None:
        self._clock = clock
        self._limiters: OrderedDict[Hashable, AdaptiveLimiter] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()
        self.max_keys = max_keys

    def __len__(self) -> int:
        return len(self._limiters)

    def of(self, key: Hashable) -> AdaptiveLimiter:
        with self._lock:
            found = self._limiters.get(key)
            if found is None:
                found = self._limiters[key] = AdaptiveLimiter(INITIAL_RATE, clock=self._clock, name="adaptive")
                if len(self._limiters) > self.max_keys:
                    self._limiters.popitem(last=False)
            else:
                self._limiters.move_to_end(key)
            return found

    def learn(self, key: Hashable, status: int, headers: object) -> None:
        self.of(key).on_response(status, headers)


def adaptive_keys(limiter: object, adaptive: object) -> AdaptiveKeys | None:
    """The adaptive limiters of a client of ``limiter`` (on its clock), or None unless ``adaptive``."""
    if not isinstance(adaptive, bool):
        raise TypeError(f"adaptive must be a bool, got {type(adaptive).__name__}")
    return AdaptiveKeys(check_limiter(limiter)._rl_clock) if adaptive else None
