"""An aiohttp client session whose requests wait for a permit.

``RateLimitedSession`` returns a plain ``aiohttp.ClientSession`` with a client middleware
in front of any given in ``middlewares``. A middleware is aiohttp's own hook for this (since
3.12): it sees each request once per attempt (redirects included) and may send it again, which
is what a retry after ``Retry-After`` needs; aiohttp discourages subclassing ClientSession (it
warns), and a wrapper would have to mirror the session's whole API. What the caller gets is
thus a real ``ClientSession``, with every option and method aiohttp gives it.

A request's lease is held until its connection is released: when the body has been read, or
the response released or closed (a websocket: until it closes). A ``middlewares=`` argument
given to one request replaces the session's middlewares, this one included, for that request.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp

from ._core import Lease
from ._hosts import host_key
from ._pacing import Pacer
from ._retry import check_key, check_retries, retry_delay

__all__ = ["RateLimitedSession"]


def RateLimitedSession(  # the contract's name: it makes a session, as a class would
    limiter: object,
    *,
    key: Callable[[aiohttp.ClientRequest], Any] | None = None,
    retry_429: bool = True,
    max_retries: int = 3,
    **session_kwargs: Any,
) -> aiohttp.ClientSession:
    """An ``aiohttp.ClientSession(**session_kwargs)`` whose every request first waits for a
    permit of ``limiter`` (keyed by ``key(request)``, sync or async, which receives the
    ``aiohttp.ClientRequest``; by default the request's host). A 429 or 503 with a
    ``Retry-After`` pauses that key until then and retries, up to ``max_retries`` times, when its
    body can be sent again (not a stream: an async iterator, another request's ``content``)."""
    if not hasattr(aiohttp, "ClientMiddlewareType"):
        raise RuntimeError("permits.aiohttp.RateLimitedSession needs aiohttp 3.12 or later (client middlewares)")
    middleware = _RateLimit(Pacer(limiter), check_key(key, allow_async=True), check_retries(retry_429, max_retries))
    given = session_kwargs.pop("middlewares", ())
    if not isinstance(given, Sequence):
        raise TypeError(f"middlewares must be a sequence, got {type(given).__name__}")
    return aiohttp.ClientSession(middlewares=(middleware, *given), **session_kwargs)


class _RateLimit:
    """The client middleware: a permit per attempt, retries after ``Retry-After``."""

    __slots__ = ("_key", "_pacer", "_retries")

    def __init__(self, pacer: Pacer, key: Callable[[aiohttp.ClientRequest], Any] | None, retries: int) -> None:
        self._pacer = pacer
        self._key = key
        self._retries = retries

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        if self._key is None:
            host = request.url.host
            key: object = None if host is None else host_key(host)
        else:
            key = self._key(request)
            if inspect.isawaitable(key):
                key = await key
        attempt = 0
        while True:
            lease = await self._pacer.wait_async(key)
            try:
                response = await handler(request)
            except BaseException:
                lease.release()
                raise
            delay = retry_delay(response.status, response.headers.get("Retry-After"))
            if delay is not None:  # every request for the key waits it out, whether this one retries or not
                self._pacer.pause(key, delay)
            if delay is None or attempt >= self._retries or not _replayable(request):
                _hold_until_released(response, lease)
                return response
            try:  # closed unread: a refusal's body may be large (the connection is not reused)
                response.close()
            finally:
                lease.release()
            attempt += 1


def _replayable(request: aiohttp.ClientRequest) -> bool:
    """Whether the request's body can be sent again. Bytes, form data and seekable files can; an
    async iterator or a stream (another request's ``content``) is consumed by the first attempt,
    which would send 0 bytes the second time (aiohttp refuses to follow a redirect then, too)."""
    body = request.body
    if isinstance(body, bytes):  # b"": no body at all
        return True
    consumed = getattr(body, "consumed", None)
    if consumed is None:  # an aiohttp whose payloads do not say: only bytes are sure
        return isinstance(body, aiohttp.payload.BytesPayload)
    return not consumed


def _hold_until_released(response: aiohttp.ClientResponse, lease: Lease) -> None:
    """Releases ``lease`` when the response's connection is released or closed (at once if
    aiohttp has already released it: the whole body had arrived)."""
    connection = response.connection
    if connection is None:
        lease.release()
    else:
        connection.add_callback(lease.release)
