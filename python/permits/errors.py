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

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # A lease does not pickle (it may hold permits); the error crosses processes with what it says.
        lease = self.lease
        return _failed_again, (lease.reason, lease.retry_after, lease.metadata.get("limiter"), lease.permit_count)


def _failed_again(
    reason: str | None, retry_after: float | None, limiter: object, permit_count: int
) -> LeaseFailedError:
    metadata = {} if limiter is None else {"limiter": limiter}
    lease = Lease.denied(reason or "limit_reached", retry_after=retry_after, metadata=metadata)
    return LeaseFailedError(lease._with_permit_count(permit_count))


__all__ = ["BackendError", "LeaseFailedError", "LimiterClosedError"]
