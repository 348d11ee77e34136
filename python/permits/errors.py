"""The errors of permits beyond Python's own (``ValueError``, ``TypeError``)."""

from __future__ import annotations

from ._core import Lease, LimiterClosedError


class BackendError(ConnectionError):
    """A store's server (Redis, PostgreSQL) could not be reached, or did not answer within the
    store's ``timeout``; raised when the store's ``on_error`` is ``"raise"``."""


class LeaseFailedError(RuntimeError):
    """``with limiter:`` / ``async with limiter:`` could not get its permit (the queue was full, the
    wait timed out, the limiter was closed meanwhile...); ``lease`` is the failed lease, with its
    ``reason`` and ``retry_after``."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        limiter = lease.metadata.get("limiter", "default")
        message = f"limiter {limiter!r} granted no permit: {lease.reason or 'limit_reached'}"
        if lease.retry_after is not None:
            message += f" (retry after {lease.retry_after:g} s)"
        super().__init__(message)


__all__ = ["BackendError", "LeaseFailedError", "LimiterClosedError"]
