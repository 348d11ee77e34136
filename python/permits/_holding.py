"""The leases that ``with limiter:`` / ``async with limiter:`` blocks hold: a stack per thread and per
task (a context variable), so nested and concurrent blocks of one limiter each release their own."""

from __future__ import annotations

from contextvars import ContextVar

from ._core import Lease
from .errors import LeaseFailedError

# Immutable tuples: a task started inside a block copies the context, and whatever it pushes or pops
# stays its own.
_held: ContextVar[tuple[tuple[object, Lease], ...]] = ContextVar("permits_held", default=())


def hold(limiter: object, lease: Lease) -> Lease:
    """Keeps an acquired lease for the block, or raises LeaseFailedError for a failed one."""
    if not lease:
        raise LeaseFailedError(lease)
    _held.set((*_held.get(), (limiter, lease)))
    return lease


def let_go(limiter: object) -> None:
    """Releases the innermost lease this thread or task holds from ``limiter``."""
    stack = _held.get()
    for i in range(len(stack) - 1, -1, -1):
        if stack[i][0] is limiter:
            lease = stack[i][1]
            _held.set(stack[:i] + stack[i + 1 :])
            lease.release()
            return
    raise RuntimeError("this limiter's block exits in another thread or task than the one it entered")
