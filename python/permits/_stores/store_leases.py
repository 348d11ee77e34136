"""A store limiter's leases: the ids of its concurrency leases (unique across processes and hosts),
a time-based grant's way back (``Grant``) and a concurrency lease's hold on the server (``_Held``)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import secrets
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._forking import in_child

if TYPE_CHECKING:
    from .store_limiter import StoreLimiter

logger = logging.getLogger("permits")

_ids = itertools.count()
_token = secrets.token_hex(8)


@in_child
def _new_token() -> None:  # a child's lease ids must differ from its parent's
    global _token
    _token = secrets.token_hex(8)


def lease_id() -> str:
    """An id unique across processes and hosts: a concurrency lease's name on the server."""
    return f"{_token}:{next(_ids)}"


class Grant:
    """A time-based grant's count and its way back (``back(n)``): a refund gives back what the
    lease holds then, after any ``settle`` gave back a part (never the first count twice)."""

    __slots__ = ("back", "lock", "n")

    def __init__(self, n: int, back: Callable[[int], None]) -> None:
        self.n, self.back = n, back
        self.lock = threading.Lock()

    def refund(self) -> None:
        with self.lock:
            n, self.n = self.n, 0
        if n:
            self.back(n)

    def settle(self, keep: int) -> None:
        with self.lock:
            n, self.n = self.n - keep, keep
        if n > 0:
            self.back(n)


class _Held:
    """A concurrency lease's hold on the server, owned by the lease's callbacks: a lease dropped
    without release() drops it too, and its permits are given back (by the renewal thread: no
    round trip in a finalizer, which may run anywhere, even inside the client's own locks)."""

    __slots__ = ("done", "lid", "limiter", "loop", "n", "pid")

    def __init__(self, limiter: StoreLimiter, lid: str, n: int) -> None:
        self.limiter, self.lid, self.n = limiter, lid, n
        self.done = False
        self.pid = os.getpid()
        # An asyncio client gives back in a task of the loop the lease was granted in (weakly held:
        # the loop may hold the task whose frame holds the lease, and a cycle would keep a dropped
        # lease alive until some later collection).
        loop = asyncio._get_running_loop() if limiter._backend.is_async is True else None
        self.loop = None if loop is None else weakref.ref(loop)

    def release(self) -> None:
        if not self.done:
            self.done = True
            if os.getpid() != self.pid:
                return  # a forked child's copy of its parent's lease: the parent's to give back
            if self.lid in self.limiter._lost:  # the server has nothing of it: nothing to give back
                self.limiter._lost.discard(self.lid)
                return
            self.limiter._give_back(self.n, 0, self.lid)

    def settle(self, keep: int) -> None:
        """``lease.settle(keep)``: the server takes back what the lease no longer holds."""
        n, self.n = self.n - keep, keep
        if self.done or n <= 0 or os.getpid() != self.pid:
            return
        if self.lid in self.limiter._lost:
            return  # the server has nothing of it
        self.limiter._give_back_part(n, self.lid, keep)

    def is_lost(self) -> bool:
        return self.lid in self.limiter._lost

    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        if _finalizing():
            return  # the interpreter is ending: its modules are being cleared, nothing renews the lease
        if not self.done and os.getpid() != self.pid:
            self.done = True  # (a forked child's copy: nothing of it is the child's)
        if not self.done and self.lid in self.limiter._lost:
            self.done = True
            self.limiter._lost.discard(self.lid)
        if not self.done:
            self.done = True
            self.limiter.held.pop(self.lid, None)
            loop = None if self.loop is None else self.loop()
            if self.limiter.store._renewal.drop(self.limiter, self.lid, self.n, loop):
                message = "a lease of %d permit(s) of %r was dropped without release(): its permits are given back now"
            else:  # (an asyncio client whose loop is gone, a closed store: nothing can ask the server)
                message = (
                    "a lease of %d permit(s) of %r was dropped without release(): its permits come back "
                    "lease_ttl after its last renewal"
                )
            warnings.warn(message % (self.n, self.limiter.name), ResourceWarning, stacklevel=1)
            # (also logged: Python ignores a ResourceWarning by default, a service's logs are read)
            logger.warning(message, self.n, self.limiter.name)


__all__ = ["Grant", "lease_id"]
