"""The errors of permits beyond Python's own (``ValueError``, ``TypeError``)."""

from __future__ import annotations

from ._core import LimiterClosedError


class BackendError(ConnectionError):
    """A store's server (Redis, PostgreSQL) could not be reached, or did not answer within the
    store's ``timeout``; raised when the store's ``on_error`` is ``"raise"``."""


__all__ = ["BackendError", "LimiterClosedError"]
