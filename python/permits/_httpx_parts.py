"""What the httpx transports are made of: the default key, which bodies can be sent twice, the
deadline of a request's pauses, the hook at the moment a request is written, and response
bodies that release their request's lease when closed."""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from ._core import Lease
from ._hosts import host_key
from ._pacing import Pacer, PauseOutlasts
from ._sending import Attempt

#: The end of httpcore's trace event as it is about to write a request's headers, after the pool
#: gave it a connection and the connection is set up (HTTP/1.1: "http11.", HTTP/2: "http2.").
_WRITING = ".send_request_headers.started"
#: httpcore's events as it opens a new connection the pool gave the request (TCP, a Unix socket).
_CONNECTING = ("connection.connect_tcp.started", "connection.connect_unix_socket.started")


def host(request: httpx.Request) -> str:
    return host_key(request.url.host)


def replayable(request: httpx.Request) -> bool:
    """A body in memory (bytes, text, JSON, form data); not a stream, read by the first attempt."""
    return isinstance(request.stream, httpx.ByteStream)


# ---- timeouts ----
def deadline_ns(request: httpx.Request, pacer: Pacer) -> int | None:
    """When this request's pauses must be over, on the limiter's clock: its pool timeout from now.
    (httpx has no timeout for a whole request. A pause is a wait before the request can be sent,
    as the wait for a free connection is: the pool timeout bounds both, and raising it lets a
    client wait out a long Retry-After without waiting longer on a silent network.)"""
    timeouts = request.extensions.get("timeout")
    pool = timeouts.get("pool") if isinstance(timeouts, dict) else None
    if not isinstance(pool, int | float):
        return None
    return pacer.now_ns() + math.ceil(pool * 1e9)


def outlasts(pacer: Pacer, seconds: float, deadline: int | None) -> bool:
    """Whether a pause of ``seconds`` from now would end past ``deadline``."""
    return deadline is not None and pacer.now_ns() + math.ceil(seconds * 1e9) > deadline


def timed_out(request: httpx.Request, paused: PauseOutlasts) -> httpx.PoolTimeout:
    return httpx.PoolTimeout(f"{paused}, longer than what is left of the request's pool timeout", request=request)


# ---- the moment a request is written ----
@contextlib.contextmanager
def tracing(request: httpx.Request, attempt: Attempt) -> Iterator[None]:
    """While ``request`` goes through httpx's own transport, ``attempt`` hears when httpcore opens
    a connection for it and when it is about to write it (after any ``trace`` extension the caller
    gave, which still sees every event)."""
    extensions = request.extensions
    theirs = extensions.get("trace")

    def trace(name: str, info: dict[str, Any]) -> None:
        if theirs is not None:
            theirs(name, info)
        if name.endswith(_WRITING):
            attempt.writing()
        elif name in _CONNECTING:
            attempt.connecting()

    request.extensions = {**extensions, "trace": trace}
    try:
        yield
    finally:
        request.extensions = extensions


@contextlib.contextmanager
def tracing_async(request: httpx.Request, attempt: Attempt) -> Iterator[None]:
    """As ``tracing``, for the async transport (httpcore awaits an async trace)."""
    extensions = request.extensions
    theirs = extensions.get("trace")

    async def trace(name: str, info: dict[str, Any]) -> None:
        if theirs is not None:
            await theirs(name, info)
        if name.endswith(_WRITING):
            await attempt.writing_async()
        elif name in _CONNECTING:
            attempt.connecting()

    request.extensions = {**extensions, "trace": trace}
    try:
        yield
    finally:
        request.extensions = extensions


# ---- the lease held until the response is closed ----
class _LeasedStream(httpx.SyncByteStream):
    """A response body that releases its request's lease when the response is closed."""

    def __init__(self, stream: httpx.SyncByteStream, lease: Lease) -> None:
        self._stream = stream
        self._lease = lease

    def __iter__(self) -> Iterator[bytes]:
        yield from self._stream

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._lease.release()


class _AsyncLeasedStream(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, lease: Lease) -> None:
        self._stream = stream
        self._lease = lease

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            self._lease.release()


def hold(response: httpx.Response, lease: Lease) -> httpx.Response:
    """The response, releasing ``lease`` when it is closed (at once if it already is: a
    transport may hand back a response read in full, such as httpx.MockTransport's)."""
    if response.is_closed:
        lease.release()
    else:
        assert isinstance(response.stream, httpx.SyncByteStream)
        response.stream = _LeasedStream(response.stream, lease)
    return response


def hold_async(response: httpx.Response, lease: Lease) -> httpx.Response:
    if response.is_closed:
        lease.release()
    else:
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _AsyncLeasedStream(response.stream, lease)
    return response
