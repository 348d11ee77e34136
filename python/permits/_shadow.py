"""Shadow mode (``enforce=False`` on every server integration): a request its limit refuses is
decided, counted and sent the headers exactly as enforcing would, then served anyway; the refusal
is logged on the ``permits`` logger at INFO, at most once per limiter per second (a flood of
refusals is one line a second, not one per request)."""

from __future__ import annotations

import logging
import threading
import time

from ._core import Lease

logger = logging.getLogger("permits")

#: What a middleware's metrics count for a request its limiter refused and shadow mode served.
SHADOW_REJECTED = "shadow_rejected"
_EVERY_NS = 1_000_000_000


def check_enforce(enforce: object) -> bool:
    if not isinstance(enforce, bool):
        raise TypeError(f"enforce must be a bool, got {type(enforce).__name__}")
    return enforce


class ShadowLog:
    """The refusals shadow mode let through, logged at most once a second per limiter (with how
    many were let through since the last line)."""

    __slots__ = ("_last_ns", "_lock", "_since")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ns: int | None = None
        self._since = 0

    def note(self, limiter_name: str, lease: Lease) -> None:
        now = time.monotonic_ns()
        with self._lock:
            self._since += 1
            if self._last_ns is not None and now - self._last_ns < _EVERY_NS:
                return
            self._last_ns, count, self._since = now, self._since, 0
        logger.info(
            "shadow mode: the limiter %r would have rejected %d request(s) (reason %r, retry_after %s); served",
            lease.metadata.get("limiter", limiter_name),
            count,
            lease.reason,
            lease.retry_after,
        )
