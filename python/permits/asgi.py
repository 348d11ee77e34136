"""RateLimitMiddleware: a global limiter for any ASGI application (Starlette, FastAPI, ...).

Pure ASGI: it wraps ``send`` to add headers and holds a request's lease until the application
returns, which is when the response has been sent in full (a streaming one included) or, for a
WebSocket, when the connection has closed; an exception, a cancellation or a client that went
away releases it too.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Iterable, MutableMapping
from typing import Any

from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.websockets import WebSocket

from . import _core
from ._asgi_gate import asgi_gate
from ._core import Lease
from ._cost import SentResponse, headers_of
from ._http_policy import (
    DEFAULT_MAX_QUEUED,
    DEFAULT_TIMEOUT,
    DISCONNECTS,
    Handoff,
    Policy,
    Quota,
    check_exempt,
    counted,
    encoded_headers,
    fewest_remaining,
    is_exempt,
    settle_routes,
)
from ._queued import acquire_or_leave, replaying
from ._rates import LimiterLike
from ._shadow import SHADOW_REJECTED
from .keys import _ClientIP, _Header

Scope = MutableMapping[str, Any]
"""An ASGI connection scope."""
Message = MutableMapping[str, Any]
"""An ASGI event, received or sent."""
Receive = Callable[[], Awaitable[Message]]
"""An ASGI ``receive`` callable."""
Send = Callable[[Message], Awaitable[None]]
"""An ASGI ``send`` callable."""
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
"""An ASGI application: ``await app(scope, receive, send)``."""

HANDOFF = "permits.handoff"
"""The scope key of the request's ``Handoff``, where the middleware and a route's
``permits.fastapi.RateLimit`` meet."""
WEBSOCKET_CLOSE_CODE = 1013
"""The close code of a rejected WebSocket when the server cannot send an HTTP denial response:
1013 "Try Again Later" (RFC 6455's registry), the code meant for a temporary refusal."""


def _with_headers(message: Message, headers: list[tuple[str, str]]) -> Message:
    """The message with the headers it does not already carry (an app's own win)."""
    return _with_raw_headers(message, [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in headers])


#: Every header name the middleware may add (lowercase): a response that sets none of them
#: itself (the common case) takes all of ours without a set of its names being made.
_OURS = frozenset(
    {b"ratelimit", b"ratelimit-policy", b"retry-after", b"x-ratelimit-limit", b"x-ratelimit-remaining"}
    | {b"x-ratelimit-reset"}
)


def _with_raw_headers(message: Message, ours: Iterable[tuple[bytes, bytes]]) -> Message:
    existing = message.get("headers") or []
    for name, _ in existing:
        if bytes(name).lower() in _OURS:  # the application set one itself: its own wins
            names = {bytes(n).lower() for n, _ in existing}
            ours = [(n, v) for n, v in ours if n not in names]
            break
    if not ours:
        return message
    return {**message, "headers": [*existing, *ours]}


def _connection_of(scope: Scope, receive: Receive) -> Callable[[], HTTPConnection]:
    """The request's Starlette object (a ``Request``, a WebSocket's ``HTTPConnection``), made at
    the first call."""
    made: list[HTTPConnection] = []

    def connection() -> HTTPConnection:
        if not made:
            made.append(Request(scope, receive) if scope["type"] == "http" else HTTPConnection(scope))
        return made[0]

    return connection


def route_path(scope: Scope) -> str:
    """The path the application routes on: the scope's path without its ``root_path`` (that of a
    mounted sub-application, or a server's ``--root-path``), as Starlette's router takes it."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root) :] or "/"
    return path


async def send_response(
    response: Any, scope: Scope, receive: Receive, send: Send, headers: list[tuple[str, str]]
) -> None:
    """Sends an on_rejected response (any ASGI response) with the headers it does not set itself."""

    async def send_with(message: Message) -> None:
        if message["type"] in ("http.response.start", "websocket.http.response.start"):
            message = _with_headers(message, headers)
        await send(message)

    await response(scope, receive, send_with)


class RateLimitMiddleware:
    """The global limiter of an ASGI application: one acquisition per HTTP request or WebSocket
    connection, before the application runs.

    ``limiter``: a ``RateLimiter`` (one limit for everyone) or a ``KeyedRateLimiter`` (a limit per
    ``key(request)``, by default the client's IP address, see ``permits.keys``). A rejected
    request gets ``status_code`` with ``Retry-After`` and the ``RateLimit`` headers, or what
    ``on_rejected(request, lease)`` returns. ``wait=True`` queues instead (``wait_async``), at most
    ``timeout`` seconds on the limiter's clock (default 30; None: no bound) and at most
    ``max_queued`` requests of this middleware at once (default 1000; None: no bound): past
    either, the request gets the rejection, its lease's reason ``"timeout"`` or ``"queue_full"``.
    A client that disconnects while queued leaves the queue and gets nothing. ``exempt`` path
    prefixes skip this limiter. ``enforce=False`` is shadow mode: a request the limiter refuses is
    served anyway, with the headers enforcing would send, its refusal logged (at most once a second,
    INFO, logger ``permits``) and counted ``shadow_rejected`` (``metrics``). ``cost(request,
    response) -> int``: the permits the request really used, asked once its response has been sent
    (``response`` a ``permits.SentResponse``: status, headers, body size); its lease settles to it.
    ``problem_details=True``: a rejection's body is an RFC 9457 ``application/problem+json`` document
    (the IETF draft's quota-exceeded problem type).
    """

    def __init__(
        self,
        app: ASGIApp,
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
        exempt: Iterable[str] = (),
        metrics: object = False,
        enforce: bool = True,
        cost: Callable[[Any, SentResponse], int] | None = None,
        problem_details: bool = False,
    ) -> None:
        if not callable(app):
            raise TypeError(f"app must be an ASGI application, got {type(app).__name__}")
        self.app = app
        """The wrapped ASGI application."""
        limiter, self._requests = counted(metrics, limiter)
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
        """The checked options: ``policy.limiter`` (the instrumented one with ``metrics``),
        ``policy.key`` (the key function; ``client_ip()`` by default for a keyed limiter, None for a
        plain one), ``permit_count``, ``wait``, ``timeout``, ``max_queued``, ``status_code``,
        ``on_rejected``, ``headers``; ``policy.waiting``, the requests waiting now."""
        self.exempt = check_exempt(exempt)
        """The exempt path prefixes, as a tuple (a trailing ``/`` dropped): a path equal to one, or
        below it, skips this limiter."""
        # The built-in keys read the scope itself: no request object is made for them.
        self._key = self.policy.key
        # A request's key, decision and headers in one call into the extension, when the options allow it.
        gate = asgi_gate(self.policy)
        self._admit = None if gate is None else gate.admit
        # The whole request in the extension (its awaitable in C) when nothing of it needs Python
        # on every request; else this class's coroutine.
        self._enter: ASGIApp = self._call
        if gate is not None and not self.exempt and self._requests is None and self.policy.cost is None:
            gate.bind(app, self._call, self._admitted, self._started, _SENT, _settle)
            self._enter = gate

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # (a plain function: what it returns is awaited as a coroutine; marked as one below, for
        # the servers that ask, such as uvicorn choosing between ASGI 2 and 3)
        return self._enter(scope, receive, send)

    if hasattr(inspect, "markcoroutinefunction"):  # 3.12+: inspect.iscoroutinefunction
        __call__ = inspect.markcoroutinefunction(__call__)
    __call__._is_coroutine = getattr(asyncio.coroutines, "_is_coroutine", None)  # type: ignore[attr-defined]  # 3.11's asyncio.iscoroutinefunction

    async def _call(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            await self.app(scope, receive, send)
            return
        if self.exempt and is_exempt(route_path(scope), self.exempt, scope.get("raw_path")):
            await _run(self.app, scope, receive, send, None)  # no global limit; a route's own still applies
            return
        policy = self.policy
        key: object
        admit = self._admit
        admitted = None if admit is None else admit(scope)
        if admitted is not None:
            lease, key, ours, remaining = admitted
            if lease and policy.cost is None:
                try:
                    handoff = await self._gated(scope, receive, send, lease, ours, remaining)
                    if self._requests is not None:
                        self._requests.count(handoff.route_rejected or "acquired")
                finally:
                    lease.release()
                return
            await self._admitted(scope, receive, send, lease, key, remaining)
            return
        # The request object a key function, on_rejected or cost receives: made once, when needed.
        connection: Callable[[], HTTPConnection] | None = None
        key_function = self._key
        if key_function is None:
            key = None
        elif isinstance(key_function, _ClientIP):
            key = key_function.from_scope(scope)
        elif isinstance(key_function, _Header):
            connection = _connection_of(scope, receive)
            key = key_function.from_scope(scope, connection)
            if inspect.isawaitable(key):  # an async fallback
                key = await key
        else:
            connection = _connection_of(scope, receive)
            key = await policy.key_of(connection())
        if policy.wait:
            held: deque[Message] = deque()
            found = await acquire_or_leave(policy, key, receive, held)
            if found is None:
                if self._requests is not None:
                    self._requests.count("client_left")
                return  # the client left while queued: nothing to send
            lease = found
            receive = replaying(held, receive)
        else:
            limiter, n = policy.limiter, policy.permit_count  # (policy.acquire(key), inline)
            lease = await (limiter.acquire_async(key, n) if policy.keyed else limiter.acquire_async(n))  # type: ignore[call-arg,arg-type]
        await self._decided(scope, receive, send, connection, key, lease, None, asked=False)

    async def _admitted(
        self, scope: Scope, receive: Receive, send: Send, lease: Lease, key: object, remaining: int
    ) -> None:
        """A request the extension decided that Python serves: a refusal, or a cost to settle."""
        policy = self.policy
        quota = policy.fixed_quota(remaining, lease) if lease else policy.quota_or_release(key, lease)
        await self._decided(scope, receive, send, None, key, lease, quota)

    async def _decided(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        connection: Callable[[], HTTPConnection] | None,
        key: object,
        lease: Lease,
        quota: Quota | None,
        asked: bool = True,
    ) -> None:
        """The rest of a request once its lease is known: the rejection, or the application run
        with the headers (``quota``, asked here unless ``asked``); the lease released at the end."""
        policy = self.policy
        try:
            if not asked:
                quota = policy.quota(key, lease)
            if not lease and not policy.lets_through(lease):
                if self._requests is not None:
                    self._requests.count("global_limiter")
                await self._reject(scope, receive, send, (connection or _connection_of(scope, receive))(), lease, quota)
                return
            handoff = await _run(self.app, scope, receive, send, quota)
            if self._requests is not None:
                self._requests.count(handoff.route_rejected or ("acquired" if lease else SHADOW_REJECTED))
            if policy.cost is not None:
                policy.charge(key, lease, (connection or _connection_of(scope, receive))(), sent_response(handoff))
        finally:
            lease.release()

    async def _gated(
        self, scope: Scope, receive: Receive, send: Send, lease: Lease, ours: Any, remaining: int
    ) -> Handoff:
        """The application run behind the extension's send (the headers added in C); the route's
        leases released once it has returned."""
        handoff = scope[HANDOFF] = Handoff()
        sender = _core.AsgiSend(send, handoff, ours, self._started, _SENT, lease, scope, receive, remaining)
        try:
            await self.app(scope, receive, sender)
            if handoff.charges:  # (an application that raised: its requests keep what they took)
                _settle(handoff)
        finally:
            for route_lease in handoff.route_leases:
                route_lease.release()
        return handoff

    def _started(self, sender: _core.AsgiSend, message: Message) -> Awaitable[None]:
        """A message the extension's send hands back: a route's rejection or figures, an
        application's own header of ours, a message that is no dict."""
        handoff = sender.handoff
        kind = message["type"]
        if kind == "http.response.body":
            handoff.body_size += len(message.get("body", b""))
        elif kind == "http.response.start":
            if handoff.rejection is not None:
                (response, headers), handoff.rejection = handoff.rejection, None
                sender.replaced = True
                return send_response(response, sender.scope, sender.receive, sender.send, headers)
            quota = self.policy.fixed_quota(sender.remaining, sender.lease)
            best = fewest_remaining([quota, *handoff.quotas]) if handoff.quotas else quota
            if best is not None:
                message = _with_raw_headers(message, encoded_headers(best))
            handoff.started = message
        elif handoff.started is None:
            handoff.started = message
        return sender.send(message)

    async def _reject(
        self, scope: Scope, receive: Receive, send: Send, connection: HTTPConnection, lease: Lease, quota: Quota | None
    ) -> None:
        policy = self.policy
        headers = policy.rejection_headers(lease, quota)
        response = await policy.rejection(connection, lease, Response)
        if scope["type"] == "http":
            if response is None:
                body, media_type = policy.rejection_body(lease, quota)
                response = Response(body, policy.status_code, media_type=media_type)
            await send_response(response, scope, receive, send, headers)
            return
        message = await receive()  # websocket.connect, before any answer
        if message["type"] in DISCONNECTS:
            return
        if "websocket.http.response" in scope.get("extensions", {}):
            if response is None:
                response = Response(b"", policy.status_code)
            await send_response(response, scope, receive, send, headers)
        else:
            await WebSocket(scope, receive, send).close(WEBSOCKET_CLOSE_CODE, "rate limited")


class _Sent:
    """An awaitable that is done at once: what a message the middleware drops is sent with."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value]


_SENT = _Sent()


def _settle(handoff: Handoff) -> None:
    """The routes' cost settlements, once the response has been sent."""
    settle_routes(handoff, sent_response(handoff))


async def _run(app: ASGIApp, scope: Scope, receive: Receive, send: Send, quota: Quota | None) -> Handoff:
    """Runs the application with the handoff a route's limit finds in the scope: the route's
    leases are released once the application has returned (the response sent), its headers are
    written (those of the limit with fewer permits left), and its on_rejected response is sent in
    place of the framework's answer to its rejection."""
    handoff = scope.get(HANDOFF)
    owner = handoff is None  # (an outer RateLimitMiddleware made it, and releases the leases)
    if handoff is None:
        handoff = scope[HANDOFF] = Handoff()
    replaced = False

    # (a plain function returning what the application awaits: no coroutine of its own per message)
    def send_with_headers(message: Message) -> Awaitable[None]:
        nonlocal replaced
        if replaced:
            return _SENT  # the framework's answer to a route's rejection, replaced by on_rejected's
        kind = message["type"]
        if kind == "http.response.body":
            handoff.body_size += len(message.get("body", b""))
        elif kind == "http.response.start":
            if handoff.rejection is not None:
                (response, headers), handoff.rejection = handoff.rejection, None
                replaced = True
                return send_response(response, scope, receive, send, headers)
            best = fewest_remaining([quota, *handoff.quotas]) if handoff.quotas else quota
            if best is not None:
                message = _with_raw_headers(message, encoded_headers(best))
            handoff.started = message
        elif handoff.started is None:  # a WebSocket's answer: accepted, denied or closed
            handoff.started = message
        return send(message)

    try:
        await app(scope, receive, send_with_headers)
        if owner and handoff.charges:  # (an application that raised: its requests keep what they took)
            settle_routes(handoff, sent_response(handoff))
    finally:
        if owner:
            for route_lease in handoff.route_leases:
                route_lease.release()
    return handoff


def sent_response(handoff: Handoff) -> SentResponse:
    """What the application sent, as ``cost`` receives it."""
    started = handoff.started or {}
    kind = started.get("type")
    if kind == "websocket.accept":
        status = 101
    elif kind == "websocket.close":
        status = 403  # closed before it was accepted: the server answers the handshake 403
    else:
        status = int(started.get("status", 500))  # (nothing started: the application failed)
    return SentResponse(status, headers_of(started.get("headers") or ()), handoff.body_size)


__all__ = ["HANDOFF", "WEBSOCKET_CLOSE_CODE", "Handoff", "RateLimitMiddleware"]
