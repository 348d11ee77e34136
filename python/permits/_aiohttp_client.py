"""An aiohttp client session whose requests wait for a permit.

``RateLimitedSession`` returns a plain ``aiohttp.ClientSession`` with a client middleware
in front of any given in ``middlewares``. A middleware is aiohttp's own hook for this (since
3.12): it sees each request once per attempt (redirects included) and may send it again, which
is what a retry after ``Retry-After`` needs; aiohttp discourages subclassing ClientSession (it
warns), and a wrapper would have to mirror the session's whole API. What the caller gets is
thus a real ``ClientSession``, with every option and method aiohttp gives it.

The middleware runs before aiohttp asks its connector for a connection; the session's trace
signals tell the attempt when a new connection is opened for its request
(``on_connection_create_start``) and when it is written (``on_request_headers_sent``, which
aiohttp awaits just before it writes the headers), so that the limiter counts the request once it
has its connection (see ``_sending``). A context variable carries the attempt from the
middleware to the signal: both run in the request's task.

A request's lease is held until its connection is released: when the body has been read, or
the response released or closed (a websocket: until it closes). A ``middlewares=`` argument
given to one request replaces the session's middlewares, this one included, for that request.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp

from ._adaptive_keys import AdaptiveKeys, adaptive_keys
from ._core import Lease
from ._hosts import host_key
from ._retry import check_key, check_retries, retry_delay
from ._sending import Attempt, Repaused, Sender

__all__ = ["RateLimitedSession"]

#: The attempt whose request the running task is sending.
_sending: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar("permits_aiohttp_sending", default=None)


def RateLimitedSession(  # the contract's name: it makes a session, as a class would
    limiter: object,
    *,
    key: Callable[[aiohttp.ClientRequest], Any] | None = None,
    retry_429: bool = True,
    max_retries: int = 3,
    adaptive: bool = False,
    **session_kwargs: Any,
) -> aiohttp.ClientSession:
    """An ``aiohttp.ClientSession(**session_kwargs)`` whose every request first waits for a
    permit of ``limiter`` (keyed by ``key(request)``, sync or async, which receives the
    ``aiohttp.ClientRequest``; by default the request's host). A 429 or 503 with a
    ``Retry-After`` pauses that key until then and retries, up to ``max_retries`` times, when its
    body can be sent again (not a stream: an async iterator, another request's ``content``).
    ``adaptive=True``: first a permit of the key's own ``permits.AdaptiveLimiter``, which every
    response teaches the server's pace."""
    if not hasattr(aiohttp, "ClientMiddlewareType"):
        raise RuntimeError("permits.aiohttp.RateLimitedSession needs aiohttp 3.12 or later (client middlewares)")
    learner = adaptive_keys(limiter, adaptive)
    middleware = _RateLimit(
        Sender(limiter, learner), check_key(key, allow_async=True), check_retries(retry_429, max_retries)
    )
    middleware.adaptive = learner
    given = session_kwargs.pop("middlewares", ())
    if not isinstance(given, Sequence):
        raise TypeError(f"middlewares must be a sequence, got {type(given).__name__}")
    traces = session_kwargs.pop("trace_configs", None) or []
    if not isinstance(traces, Sequence):
        raise TypeError(f"trace_configs must be a sequence or None, got {type(traces).__name__}")
    hooks = aiohttp.TraceConfig()
    hooks.on_connection_create_start.append(middleware.connecting)
    hooks.on_request_headers_sent.append(middleware.writing)
    # (last: the caller's own traces of the headers run before the permit, not between it and the write)
    return aiohttp.ClientSession(middlewares=(middleware, *given), trace_configs=[*traces, hooks], **session_kwargs)


class _RateLimit:
    """The client middleware: a permit per attempt, retries after ``Retry-After``."""

    __slots__ = ("_key", "_retries", "_sender", "adaptive")

    def __init__(self, sender: Sender, key: Callable[[aiohttp.ClientRequest], Any] | None, retries: int) -> None:
        self._sender = sender
        self._key = key
        self._retries = retries
        self.adaptive: AdaptiveKeys | None = None  # adaptive=True's limiters, shown every response

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
        pacer = self._sender.pacer
        attempt = 0
        while True:
            try:
                response, lease = await self._send(request, handler, key)
            except Repaused:  # paused while it waited for its connection: it waits the pause out
                continue
            if self.adaptive is not None:
                self.adaptive.learn(key, response.status, response.headers)
            delay = retry_delay(response.status, response.headers.get("Retry-After"))
            if delay is not None:  # every request for the key waits it out, whether this one retries or not
                pacer.pause(key, delay)
            if delay is None or attempt >= self._retries or not _replayable(request):
                _hold_until_released(response, lease)
                return response
            try:  # closed unread: a refusal's body may be large (the connection is not reused)
                response.close()
            finally:
                lease.release()
            attempt += 1

    async def _send(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType, key: object
    ) -> tuple[aiohttp.ClientResponse, Lease]:
        attempt = self._sender.attempt(key, at_write=True)
        await attempt.begin_async(None)  # (aiohttp's ClientTimeout bounds the pauses: it cancels)
        token = _sending.set(attempt)
        try:
            response = await handler(request)
        except BaseException:
            attempt.abandon()
            raise
        finally:
            _sending.reset(token)
        return response, attempt.finish()

    async def connecting(self, session: object, context: object, params: object) -> None:
        """The trace signal: a new connection is being opened for the task's attempt."""
        attempt = _sending.get()
        if attempt is not None and attempt.sender is self._sender:
            attempt.connecting()

    async def writing(self, session: object, context: object, params: object) -> None:
        """The trace signal: the request of the task's attempt is about to be written."""
        attempt = _sending.get()
        if attempt is not None and attempt.sender is self._sender:
            await attempt.writing_async()


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
