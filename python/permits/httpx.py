"""httpx transports that wait for a permit before each request.

``httpx.Client(transport=RateLimitedTransport(limiter))`` and
``httpx.AsyncClient(transport=AsyncRateLimitedTransport(limiter))``: a transport is httpx's own
extension point, it sees every request once per attempt (redirects included), whatever client
options are used.

Each request waits for a permit (the key is the request's host unless ``key(request)`` says
otherwise). With httpx's own transport (the default) the limiter counts the request once it has
its connection, not before its wait for one (see ``_sending``). A 429 or 503 answered with a
``Retry-After`` pauses that key until then, for every request (whether this one is retried or
not), and retries, up to ``max_retries`` times (a retry takes a permit like any request); once the
retries are used up, the last response is returned. Only requests whose body is in memory are
retried (a body read from a generator or a file cannot be sent twice). Pauses are bounded by the
request's pool timeout (httpx's wait before sending): a retry that would have to wait past it
returns the 429 at once, and a request for a key paused past it raises ``httpx.PoolTimeout`` at
once. The lease is held until the response is closed, streamed responses included, and released
if sending fails or is cancelled.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import TracebackType
from typing import Any

import httpx

from ._adaptive_keys import adaptive_keys
from ._core import Lease
from ._httpx_parts import (
    deadline_ns,
    hold,
    hold_async,
    host,
    outlasts,
    replayable,
    timed_out,
    tracing,
    tracing_async,
)
from ._pacing import PauseOutlasts
from ._retry import check_key, check_retries, retry_delay
from ._sending import Repaused, Sender

__all__ = ["AsyncRateLimitedTransport", "RateLimitedTransport"]


class RateLimitedTransport(httpx.BaseTransport):
    """Wraps ``transport`` (default ``httpx.HTTPTransport()``) so that each request waits for a
    permit of ``limiter`` (a ``RateLimiter``, or a ``KeyedRateLimiter`` keyed by ``key(request)``,
    by default the request's host). ``adaptive=True``: first a permit of the key's own
    ``permits.AdaptiveLimiter``, which every response teaches the server's pace."""

    def __init__(
        self,
        limiter: object,
        *,
        key: Callable[[httpx.Request], object] | None = None,
        transport: httpx.BaseTransport | None = None,
        retry_429: bool = True,
        max_retries: int = 3,
        adaptive: bool = False,
    ) -> None:
        self._adaptive = adaptive_keys(limiter, adaptive)
        self._sender = Sender(limiter, self._adaptive)
        self._pacer = self._sender.pacer
        self._key = check_key(key, allow_async=False) or host
        if transport is not None and not isinstance(transport, httpx.BaseTransport):
            raise TypeError(f"transport must be an httpx.BaseTransport or None, got {type(transport).__name__}")
        self._retries = check_retries(retry_429, max_retries)
        self._transport = transport if transport is not None else httpx.HTTPTransport()
        # httpx's own transport says when it writes a request (httpcore's trace); another (a
        # MockTransport, your own) is handed the request with its permit already taken.
        self._at_write = isinstance(self._transport, httpx.HTTPTransport)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Blocks until ``request``'s key has a permit (and is not paused), then sends the request
        through the wrapped transport. A 429 or 503 with a ``Retry-After`` pauses the key that long
        and sends the request again, up to ``max_retries`` times when its body is in memory and the
        pause ends within the request's pool timeout. Returns the last response; its permit is held
        until it is closed. Raises ``TypeError`` when ``key`` returns an awaitable,
        ``LimiterClosedError`` when the limiter is closed, ``httpx.PoolTimeout`` when the key is
        paused past the pool timeout, and what the wrapped transport raises (the permit is released
        then)."""
        key = self._key(request)
        if inspect.isawaitable(key):
            if inspect.iscoroutine(key):
                key.close()  # never awaited: no "never awaited" warning on top of the error
            raise TypeError("key returned an awaitable: use AsyncRateLimitedTransport for an async key")
        retries = self._retries if replayable(request) else 0
        deadline = deadline_ns(request, self._pacer)
        attempt = 0
        while True:
            try:
                response, lease = self._send(request, key, deadline)
            except Repaused:  # paused while it waited for its connection: it waits the pause out
                continue
            except PauseOutlasts as paused:
                raise timed_out(request, paused) from None
            if self._adaptive is not None:
                self._adaptive.learn(key, response.status_code, response.headers)
            delay = retry_delay(response.status_code, response.headers.get("Retry-After"))
            if delay is not None:  # every request for the key waits it out, whether this one retries or not
                self._pacer.pause(key, delay)
            if delay is None or attempt >= retries or outlasts(self._pacer, delay, deadline):
                return hold(response, lease)
            try:  # closed unread: a refusal's body may be large (the connection is not reused)
                response.close()
            finally:
                lease.release()
            attempt += 1

    def _send(self, request: httpx.Request, key: object, deadline: int | None) -> tuple[httpx.Response, Lease]:
        attempt = self._sender.attempt(key, at_write=self._at_write)
        attempt.begin(deadline)
        try:
            if self._at_write:
                with tracing(request, attempt):
                    response = self._transport.handle_request(request)
            else:
                response = self._transport.handle_request(request)
        except BaseException:
            attempt.abandon()
            raise
        return response, attempt.finish()

    def close(self) -> None:
        """Closes the wrapped transport; the limiter stays open (it may be shared)."""
        self._transport.close()

    # httpx's clients enter and exit their transport: the wrapped one is entered and exited with it.
    def __enter__(self) -> RateLimitedTransport:
        self._transport.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        self._transport.__exit__(exc_type, exc, tb)


class AsyncRateLimitedTransport(httpx.AsyncBaseTransport):
    """The asyncio (or trio) transport: as ``RateLimitedTransport``, waiting with
    ``wait_async`` so that the event loop is never blocked; ``key`` may be a coroutine function."""

    def __init__(
        self,
        limiter: object,
        *,
        key: Callable[[httpx.Request], Any] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_429: bool = True,
        max_retries: int = 3,
        adaptive: bool = False,
    ) -> None:
        self._adaptive = adaptive_keys(limiter, adaptive)
        self._sender = Sender(limiter, self._adaptive)
        self._pacer = self._sender.pacer
        self._key = check_key(key, allow_async=True) or host
        if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
            raise TypeError(f"transport must be an httpx.AsyncBaseTransport or None, got {type(transport).__name__}")
        self._retries = check_retries(retry_429, max_retries)
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()
        self._at_write = isinstance(self._transport, httpx.AsyncHTTPTransport)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """As ``RateLimitedTransport.handle_request``, waiting with ``wait_async`` and async sleeps
        so that the event loop is never blocked; ``key`` may return an awaitable. A cancellation
        while waiting or sending releases what was taken."""
        key = self._key(request)
        if inspect.isawaitable(key):
            key = await key
        retries = self._retries if replayable(request) else 0
        deadline = deadline_ns(request, self._pacer)
        attempt = 0
        while True:
            try:
                response, lease = await self._send(request, key, deadline)
            except Repaused:
                continue
            except PauseOutlasts as paused:
                raise timed_out(request, paused) from None
            if self._adaptive is not None:
                self._adaptive.learn(key, response.status_code, response.headers)
            delay = retry_delay(response.status_code, response.headers.get("Retry-After"))
            if delay is not None:
                self._pacer.pause(key, delay)
            if delay is None or attempt >= retries or outlasts(self._pacer, delay, deadline):
                return hold_async(response, lease)
            try:  # closed unread, as above
                await response.aclose()
            finally:
                lease.release()
            attempt += 1

    async def _send(self, request: httpx.Request, key: object, deadline: int | None) -> tuple[httpx.Response, Lease]:
        attempt = self._sender.attempt(key, at_write=self._at_write)
        await attempt.begin_async(deadline)
        try:
            if self._at_write:
                with tracing_async(request, attempt):
                    response = await self._transport.handle_async_request(request)
            else:
                response = await self._transport.handle_async_request(request)
        except BaseException:
            attempt.abandon()
            raise
        return response, attempt.finish()

    async def aclose(self) -> None:
        """Closes the wrapped transport; the limiter stays open (it may be shared)."""
        await self._transport.aclose()

    async def __aenter__(self) -> AsyncRateLimitedTransport:
        await self._transport.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        await self._transport.__aexit__(exc_type, exc, tb)
