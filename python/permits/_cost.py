"""``cost=`` on every server integration: a request's permits decided after its response.

Admission is decided by ``permit_count`` before the handler runs; once the response has been sent,
``cost(request, response)`` says how many permits the request really used, and its lease settles
to that (``lease.settle``: a concurrency lease gives the rest back, a time-based one by the refund
rule). A cost above ``permit_count`` takes the rest from the limiter without waiting; a refusal then
is not retroactive (the response is gone). ``response`` is a ``SentResponse``, the same in every
framework."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, cast

from ._core import Lease
from .keyed_limiter import KeyedRateLimiter

logger = logging.getLogger("permits")


class SentResponse(NamedTuple):
    """What ``cost(request, response)`` receives as the response: the same in every framework."""

    status_code: int
    """The status sent (for a WebSocket: 101 once accepted, else the close or denial's status)."""
    headers: Mapping[str, str]
    """The headers sent, names in lowercase (a repeated header's values joined by ", ")."""
    body_size: int | None
    """The bytes of body sent, or None where the framework does not say."""
    response: Any = None
    """The framework's own response object where it has one (aiohttp's, Django's, Flask's), else None."""


def headers_of(pairs: Iterable[tuple[Any, Any]]) -> dict[str, str]:
    """The headers as ``SentResponse.headers``: lowercase names (bytes decoded as latin-1)."""
    found: dict[str, str] = {}
    for name, value in pairs:
        n = (name.decode("latin-1") if isinstance(name, bytes | bytearray) else str(name)).lower()
        v = value.decode("latin-1") if isinstance(value, bytes | bytearray) else str(value)
        found[n] = f"{found[n]}, {v}" if n in found else v
    return found


def check_cost(cost: Any) -> Callable[[Any, SentResponse], int] | None:
    if cost is not None and not callable(cost):
        raise TypeError(f"cost must be callable (cost(request, response) -> int) or None, got {type(cost).__name__}")
    call = inspect.getattr_static(type(cost), "__call__", None)
    if inspect.iscoroutinefunction(cost) or inspect.iscoroutinefunction(call):
        raise TypeError("cost must be a plain function (it runs once the response has been sent), not async")
    return cast("Callable[[Any, SentResponse], int] | None", cost)


def charge(
    cost: Callable[[Any, SentResponse], int], limiter: Any, key: object, lease: Lease, request: Any, sent: SentResponse
) -> None:
    """Settles a served request's lease to ``cost(request, sent)``: called once its response has
    been sent, before the lease's release. A cost that raises or is no count is logged, and the
    request keeps what it took (never a looser limit)."""
    if not lease:
        return  # (shadow mode served a refused request: nothing was taken)
    try:
        n = cost(request, sent)
    except Exception:
        logger.exception("cost(request, response) raised: the request keeps its %d permit(s)", lease.permit_count)
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        logger.error("cost(request, response) returned %r, not a count >= 0: the request keeps its permits", n)
        return
    held = lease.permit_count
    if n < held:
        lease.settle(n)
    elif n > held:
        # The rest, without waiting; refused: too late to refuse the request (it is served).
        try:
            keyed = isinstance(limiter, KeyedRateLimiter)
            more = limiter.acquire(key, n - held) if keyed else limiter.acquire(n - held)
        except ValueError:  # more than the limiter's whole limit: it takes none of it
            return
        more.release()  # (a time-based grant stays counted; a concurrency one had no request to hold it)
