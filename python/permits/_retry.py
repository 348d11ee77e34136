"""What the client integrations share: their options, checked when they are built, and the
decision to retry a response (429 or 503 with a readable ``Retry-After``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ._pacing import parse_retry_after

#: The statuses whose ``Retry-After`` pauses the key and retries the request.
RETRY_STATUSES = frozenset({429, 503})


def check_key(key: object, *, allow_async: bool) -> Callable[[Any], Any] | None:
    if key is None:
        return None
    if not callable(key):
        raise TypeError(f"key must be a callable taking the request, or None, got {type(key).__name__}")
    if not allow_async and inspect.iscoroutinefunction(key):
        raise TypeError("key must be a plain function here: the synchronous transport cannot await it")
    return key


def check_retries(retry_429: object, max_retries: object) -> int:
    """The number of retries allowed (0 when ``retry_429`` is False)."""
    if not isinstance(retry_429, bool):
        raise TypeError(f"retry_429 must be a bool, got {type(retry_429).__name__}")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int):
        raise TypeError(f"max_retries must be an int, got {type(max_retries).__name__}")
    if max_retries < 0:
        raise ValueError(f"max_retries must not be negative, got {max_retries}")
    return int(max_retries) if retry_429 else 0


def retry_delay(status: int, retry_after: str | None) -> float | None:
    """Seconds to pause before retrying, or None when the response is final."""
    if status not in RETRY_STATUSES:
        return None
    return parse_retry_after(retry_after)
