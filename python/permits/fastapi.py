"""RateLimit: a route's own limit, as a FastAPI dependency.

    @app.get("/search", dependencies=[Depends(RateLimit(limiter))])

It runs after the global ``permits.asgi.RateLimitMiddleware`` (when one is installed). A
rejection raises ``RateLimitExceeded`` (an ``HTTPException`` with the status and headers); the
request still counts against the middleware's global limit.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import HTTPException, Request, Response, WebSocket, WebSocketException
from starlette.requests import HTTPConnection

from ._core import Lease
from ._cost import SentResponse
from ._fastapi_openapi import document_limits, install
from ._http_policy import (
    DEFAULT_MAX_QUEUED,
    DEFAULT_TIMEOUT,
    Policy,
    refund_before_rejection,
    route_shadowed,
)
from ._queued import Message, acquire_or_leave, replaying
from ._quota_headers import rejection_text
from ._rates import LimiterLike
from .asgi import HANDOFF, WEBSOCKET_CLOSE_CODE, Handoff

logger = logging.getLogger("permits")
"""The ``permits`` logger: here, a warning (once per ``RateLimit``) when an ``on_rejected`` response
is dropped because nothing sends it (see ``rejection_handler``)."""

CLIENT_CLOSED_REQUEST = 499
"""The status of the response to a client that disconnected while its request was queued (it
reads none: the connection is gone); nginx's "client closed request"."""
GRANTED = "permits.granted"
"""The scope key of the list of a request's route leases (a rejection by a stacked limit gives
them all back)."""


class RateLimitExceeded(HTTPException):
    """A route's rejection: status, ``Retry-After`` and ``RateLimit`` headers; ``response`` holds
    what ``on_rejected`` returned (sent by ``rejection_handler``), else None."""

    def __init__(self, status_code: int, headers: dict[str, str], lease: Lease, response: Response | None) -> None:
        # The same text as every integration's rejection: it names the limiter that refused.
        super().__init__(status_code, rejection_text(lease), headers)
        self.lease = lease
        """The failed lease: its ``reason`` and ``retry_after``."""
        self.response = response
        """The response ``on_rejected`` returned, or None: no ``on_rejected``, or it gave no response
        (returned None; returned something else, or raised: then logged)."""


async def rejection_handler(request: Request, exc: Exception) -> Response:
    """An exception handler sending ``on_rejected``'s own response:
    ``app.add_exception_handler(RateLimitExceeded, rejection_handler)``. Without it, FastAPI's
    handler of ``HTTPException`` answers (JSON ``detail``, the same status and headers)."""
    assert isinstance(exc, RateLimitExceeded)
    handoff = request.scope.get(HANDOFF)
    if isinstance(handoff, Handoff):
        handoff.rejection = None  # sent here: the middleware need not replace anything
    if exc.response is not None:
        for name, value in (exc.headers or {}).items():
            exc.response.headers.setdefault(name, value)
        return exc.response
    return Response(rejection_text(exc.lease), exc.status_code, exc.headers, media_type="text/plain")


class RateLimit:
    """A route's limit: ``Depends(RateLimit(limiter, ...))`` on a path operation, or in a router's
    ``dependencies=[...]``. The options are those of the middleware (see ``permits.asgi``):
    ``wait=True`` waits at most ``timeout`` seconds (default 30) with at most ``max_queued``
    requests of this ``RateLimit`` waiting at once (default 1000); past either, the rejection
    (reason ``"timeout"`` or ``"queue_full"``). ``enforce=False``: shadow mode (a refused request
    is served, its refusal logged and counted ``shadow_rejected``). ``cost(request, response)``
    settles the request's permits once its response has been sent: it needs
    ``permits.asgi.RateLimitMiddleware`` installed, which sees the response (without it, the
    request keeps ``permit_count``, and a warning says so once). ``problem_details=True``: the
    rejection's body is the problem document, sent as ``on_rejected``'s response would be (through the
    middleware or ``rejection_handler``)."""

    def __init__(
        self,
        limiter: LimiterLike,
        *,
        key: Callable[[Any], Any] | None = None,
        permit_count: int = 1,
        wait: bool = False,
        timeout: float | None = DEFAULT_TIMEOUT,
        max_queued: int | None = DEFAULT_MAX_QUEUED,
        status_code: int = 429,
        on_rejected: Callable[[Any, Lease], Any] | None = None,
        headers: bool | str = True,
        retry_after: float | None = None,
        enforce: bool = True,
        cost: Callable[[Any, SentResponse], int] | None = None,
        problem_details: bool = False,
    ) -> None:
        self.policy = Policy(
            limiter,
            key=key,
            permit_count=permit_count,
            wait=wait,
            timeout=timeout,
            max_queued=max_queued,
            status_code=status_code,
            on_rejected=on_rejected,
            headers=headers,
            retry_after=retry_after,
            enforce=enforce,
            cost=cost,
            problem_details=problem_details,
        )
        """The checked options: ``policy.limiter``, ``policy.key`` (the key function;
        ``client_ip()`` by default for a keyed limiter, None for a plain one), ``permit_count``,
        ``wait``, ``timeout``, ``max_queued``, ``status_code``, ``on_rejected``, ``headers``;
        ``policy.waiting``, the requests waiting now."""
        self._warned = False  # about a dropped on_rejected response: once
        self._warned_cost = False  # about a cost with no middleware to see the response: once

    async def __call__(self, request: HTTPConnection, response: Response) -> AsyncIterator[Lease]:
        policy = self.policy
        key = await policy.key_of(request)
        if policy.wait:
            # The connection's own receive (Starlette keeps it in _receive): what the watcher reads
            # while the request is queued is given back to the endpoint through it. (FastAPI hands
            # a Request or a WebSocket; another connection's wait is bounded, but not watched.)
            receive = request._receive if isinstance(request, Request | WebSocket) else None
            held: deque[Message] = deque()
            found = await acquire_or_leave(policy, key, receive, held)
            if found is None:
                if isinstance(left := request.scope.get(HANDOFF), Handoff):
                    left.route_rejected = "client_left"
                if isinstance(request, WebSocket):  # FastAPI closes it (a no-op: nobody is there)
                    raise WebSocketException(WEBSOCKET_CLOSE_CODE, "client left while queued")
                raise HTTPException(CLIENT_CLOSED_REQUEST, "client closed request")
            if receive is not None:
                request._receive = replaying(held, receive)  # type: ignore[attr-defined]
            lease = found
        else:
            lease = await policy.acquire(key)
        handoff = request.scope.get(HANDOFF)
        granted: list[Lease] = request.scope.setdefault(GRANTED, [])
        quota = policy.quota_or_release(key, lease)
        if not lease and policy.lets_through(lease):
            route_shadowed(handoff)
        elif not lease:
            refund_before_rejection(granted, handoff, lease)
            if request.scope["type"] == "websocket":  # FastAPI closes the connection, unaccepted
                raise WebSocketException(WEBSOCKET_CLOSE_CODE, "rate limited")
            headers = policy.rejection_headers(lease, quota)
            custom = await policy.rejection(request, lease, Response)
            if custom is None and policy.problem_details:  # sent as on_rejected's would be
                body, media_type = policy.rejection_body(lease, quota)
                custom = Response(body, policy.status_code, media_type=media_type)
            if custom is not None:
                if isinstance(handoff, Handoff):  # the middleware sends it in place of FastAPI's answer
                    handoff.rejection = (custom, headers)
                elif not self._warned and not _handles_rejections(request):
                    self._warned = True
                    logger.warning(
                        "on_rejected's response for %s was dropped (FastAPI answered the rejection "
                        "itself): install permits.asgi.RateLimitMiddleware, or "
                        "app.add_exception_handler(RateLimitExceeded, rejection_handler)",
                        request.url.path,
                    )
            raise RateLimitExceeded(policy.status_code, dict(headers), lease, custom)
        granted.append(lease)
        if isinstance(handoff, Handoff):
            # The middleware holds the lease until the response is sent and writes the headers
            # (those of the limiter with fewer permits left).
            handoff.route_leases.append(lease)
            handoff.quotas.append(quota)
            if policy.cost is not None:
                handoff.charges.append(functools.partial(policy.charge, key, lease, request))
            yield lease
            return
        if policy.cost is not None and not self._warned_cost:
            self._warned_cost = True
            logger.warning(
                "cost= of a RateLimit dependency needs permits.asgi.RateLimitMiddleware to see the response: "
                "the requests of %s keep their permit_count",
                request.url.path,
            )
        if quota is not None:
            for name, value in quota.headers():
                response.headers[name] = value
        try:
            yield lease  # FastAPI ends a yield dependency after the response has been sent
        finally:
            lease.release()


def _handles_rejections(request: HTTPConnection) -> bool:
    """Whether the application has a handler of its own for RateLimitExceeded (which sends, or
    knowingly drops, on_rejected's response)."""
    handlers = getattr(request.scope.get("app"), "exception_handlers", None)
    return isinstance(handlers, dict) and RateLimitExceeded in handlers


install()  # every FastAPI schema documents the limits of its operations (_fastapi_openapi.py)

__all__ = ["CLIENT_CLOSED_REQUEST", "RateLimit", "RateLimitExceeded", "document_limits", "rejection_handler"]
