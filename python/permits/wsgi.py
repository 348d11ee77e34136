"""RateLimitMiddleware: a global limiter for any WSGI application (Flask, Django, Falcon, Bottle, ...).

Pure WSGI (PEP 3333), no framework imported. One acquisition per request, before the application
runs, on the request's own thread: ``wait=True`` blocks that thread in the limiter's ``wait`` for
at most ``timeout`` seconds (the engine's waits release the GIL, the server's other threads go
on), with at most ``max_queued`` requests waiting at once; a wait that times out, or finds
``max_queued`` waiting already, is a rejection. A waiting request reads nothing of its body.

The lease is held until the server calls ``close()`` on the response iterable, which PEP 3333 has
it do once the response has been sent or the client has gone: a streamed response keeps its
permit to its last chunk. An application that raises releases it at once. The leases of a route's
own limit (``permits.flask``'s ``limit``) are handed to this middleware through the environ
and released with its own.
"""

from __future__ import annotations

import functools
import http
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from . import _core
from ._core import Lease
from ._cost import SentResponse, headers_of
from ._http_policy import (
    DEFAULT_MAX_QUEUED,
    DEFAULT_TIMEOUT,
    Handoff,
    Quota,
    counted,
    environ_raw_path,
    fewest_remaining,
    is_exempt,
    refusal,
    settle_routes,
)
from ._rates import LimiterLike
from ._shadow import SHADOW_REJECTED
from ._sync_limit import SyncLimit
from ._wsgi_gate import fast_gate

if TYPE_CHECKING:
    from .metrics._requests import RequestCounter

Environ = dict[str, Any]
"""A WSGI environ: the request's CGI variables and the ``wsgi.*`` entries (PEP 3333)."""
Headers = list[tuple[str, str]]
"""A response's headers: ``(name, value)`` pairs."""
ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]
"""What ``sys.exc_info()`` returns, as ``start_response`` takes it."""


class StartResponse(Protocol):
    """The server's ``start_response(status, headers, exc_info=None)`` (PEP 3333), which returns a
    ``write(bytes)`` callable."""

    def __call__(
        self, status: str, headers: Headers, exc_info: ExcInfo | None = ..., /
    ) -> Callable[[bytes], object]: ...


WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]
"""A WSGI application: ``app(environ, start_response)`` returns the response body's chunks."""

HANDOFF = "permits.handoff"
"""The environ key of the request's handoff, where the middleware and a route's limit (Flask's,
Django's) meet: the route's leases, released with the middleware's, and its headers."""
GRANTED = "permits.granted"
"""The environ key of the list of a request's route leases (a rejection by a stacked limit gives
them all back)."""

logger = logging.getLogger("permits")
"""The ``permits`` logger: here, an error when an ``on_rejected`` response raises (the default
rejection is sent in its place)."""


def status_line(code: int) -> str:
    """The status line of ``code`` for ``start_response``: ``"429 Too Many Requests"``, or
    ``"<code> Error"`` for a code with no registered phrase."""
    try:
        return f"{code} {http.HTTPStatus(code).phrase}"
    except ValueError:
        return f"{code} Error"  # a status without a registered phrase (430, 499, ...)


OURS = frozenset({"ratelimit", "ratelimit-policy", "retry-after"})
"""The names of the headers the middleware adds, lowercase; a response that sets one itself keeps
its own."""


def with_headers(headers: Headers, ours: list[tuple[str, str]]) -> Headers:
    """The response's headers and those of ours (named in ``OURS``) it does not set itself:
    an application's own win."""
    for name, _ in headers:
        if name.lower() in OURS:
            break
    else:
        return headers + ours  # (the common case: one pass, no set)
    names = {name.lower() for name, _ in headers}
    return headers + [(name, value) for name, value in ours if name.lower() not in names]


def default_rejection(status_code: int, text: str, media_type: str) -> WSGIApp:
    """The default rejection: ``status_code`` and its body (the text naming the limiter, or the
    problem document)."""
    body = text.encode()
    status = status_line(status_code)
    headers = [("Content-Type", media_type), ("Content-Length", str(len(body)))]

    def reject(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        start_response(status, headers)
        return [body]

    return reject


class _Released:
    """The application's response iterable, whose ``close()`` also releases the request's leases
    (after ``finish``, the costs' settlement, when there is one). Iterating it iterates the
    application's own iterator: no cost per chunk."""

    __slots__ = ("_finish", "_leases", "_result")

    def __init__(self, result: Iterable[bytes], leases: list[Lease], finish: Callable[[], None] | None = None) -> None:
        self._result = result
        self._leases = leases
        self._finish = finish

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._result)

    def close(self) -> None:
        try:
            close = getattr(self._result, "close", None)
            if close is not None:
                close()
        finally:
            try:
                finish, self._finish = self._finish, None
                if finish is not None:
                    finish()
            finally:
                release(self._leases)


class _SizedReleased(_Released):
    """For a list or tuple: a server may use its length (one item: the Content-Length)."""

    __slots__ = ()

    def __len__(self) -> int:
        return len(self._result)  # type: ignore[arg-type]


class _CountedReleased(_Released):
    """A response whose costs are settled when it closes: it counts the body's bytes as they go."""

    __slots__ = ("size",)

    def __init__(self, result: Iterable[bytes], leases: list[Lease], finish: Callable[[], None]) -> None:
        super().__init__(result, leases, finish)
        self.size = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._result:
            self.size += len(chunk)
            yield chunk


#: Responses a server may take the length of (a tuple of types: ``list | tuple`` is made anew each time).
_SIZED = (list, tuple)


def release(leases: list[Lease]) -> None:
    """Releases each lease of ``leases`` once, emptying the list (a second call releases nothing)."""
    while leases:  # each once, even when close() is called again
        leases.pop().release()


def run(
    app: WSGIApp,
    environ: Environ,
    start_response: StartResponse,
    quota: Quota | None,
    lease: Lease | None,
    settle: Callable[[SentResponse], None] | None = None,
) -> Any:
    """Runs the application with the handoff a route's limit finds in the environ: the headers of
    the limit with the fewest permits left are added to its response, and the leases (``lease``
    and the route's) are released when the server closes the response, or at once if the
    application raises. Before that release, the routes' costs and ``settle`` (the caller's own
    cost) are given what was sent."""
    found = environ.get(HANDOFF)
    if isinstance(found, Handoff):  # an outer middleware made it, and releases its leases
        handoff, owner = found, False
        leases = [] if lease is None else [lease]
    else:
        handoff, owner = Handoff(), True
        environ[HANDOFF] = handoff
        leases = handoff.route_leases  # (a route's limit adds its own while the application runs)
        if lease is not None:
            leases.append(lease)

    def start_with_headers(status: str, headers: Headers, exc_info: ExcInfo | None = None) -> Callable[[bytes], object]:
        best = fewest_remaining([quota, *handoff.quotas]) if handoff.quotas else quota
        if best is not None:
            headers = with_headers(headers, best.headers())
        handoff.started = (status, headers)
        return start_response(status, headers, exc_info)

    try:
        result = app(environ, start_with_headers)
    except BaseException:
        release(leases)
        raise
    if settle is not None or (owner and handoff.charges):  # (the views have run: their costs are known)
        return settled_on_close(result, leases, handoff, owner, settle)
    if not leases and not owner:
        return result  # nothing of ours to release: the application's own iterable
    return (_SizedReleased if isinstance(result, _SIZED) else _Released)(result, leases)


def settled_on_close(
    result: Iterable[bytes],
    leases: list[Lease],
    handoff: Handoff,
    owner: bool,
    settle: Callable[[SentResponse], None] | None,
) -> _CountedReleased:
    """The response whose close() gives what was sent to the routes' costs (when ``owner``) and to
    ``settle``, then releases ``leases``."""
    counted: _CountedReleased

    def finish() -> None:
        status, headers = handoff.started or ("500 Internal Server Error", [])
        sent = SentResponse(int(status.split(None, 1)[0]), headers_of(headers), counted.size)
        if owner:
            settle_routes(handoff, sent)
        if settle is not None:
            settle(sent)

    counted = _CountedReleased(result, leases, finish)
    return counted


class Gate(SyncLimit):
    """What the WSGI middleware and the Flask extension share: the key, the acquisition, the
    rejection, the run. ``request(environ)`` is what a key function and ``on_rejected`` receive.
    A request admitted at once takes the extension's C path (``_wsgi_gate``) when the options
    allow it; it calls back here for everything else."""

    __slots__ = ("_fast", "requests")

    def __init__(self, limiter: object, *, metrics: object = False, **options: Any) -> None:
        limiter, requests = counted(metrics, limiter)
        super().__init__(limiter, **options)
        self.requests: RequestCounter | None = requests
        """The counter of requests by result when ``metrics`` is given, else None."""
        self._fast = fast_gate(self)

    def request(self, environ: Environ) -> Any:
        """What a key function and ``on_rejected`` receive for a request: here the environ itself."""
        return environ

    def rejection(self, environ: Environ, lease: Lease) -> WSGIApp | None:
        """on_rejected's answer as a WSGI application, or None for the default rejection."""
        found = self.policy.rejection_sync(self.request(environ), lease, callable, "WSGI application")
        return found  # type: ignore[no-any-return]

    def __call__(self, app: WSGIApp, environ: Environ, start_response: StartResponse) -> Any:
        if self.exempt and is_exempt(environ.get("PATH_INFO") or "/", self.exempt, environ_raw_path(environ)):
            return run(app, environ, start_response, None, None)  # a route's own limit still applies
        fast = self._fast
        if fast is not None:
            return fast(app, environ, start_response)
        return self._gated(app, environ, start_response)

    def _key_of(self, environ: Environ) -> object:
        """The request's key, read in Python (the C path's reading of the built-in keys aside)."""
        return self.key_of(environ, lambda: self.request(environ))

    def _gated(self, app: WSGIApp, environ: Environ, start_response: StartResponse) -> Any:
        """The Python path of a request: its key, decision, headers and run."""
        lease, quota, key = self.admit_keyed(environ, lambda: self.request(environ))
        return self._decided(app, environ, start_response, lease, quota, key)

    def _refused(self, app: WSGIApp, environ: Environ, start_response: StartResponse, lease: Lease, key: object) -> Any:
        """The C path's lease was refused: the rejection (or shadow mode's run), here."""
        quota = self.policy.quota_or_release(key, lease) if self.policy.headers else None
        return self._decided(app, environ, start_response, lease, quota, key)

    def _merge(
        self,
        handoff: Handoff,
        ours: list[tuple[str, str]] | None,
        remaining: int,
        lease: Lease,
        status: str,
        headers: Headers,
        exc_info: ExcInfo | None,
        start_response: StartResponse,
    ) -> Callable[[bytes], object]:
        """The C path's start_response when a route's limit left its figures, or the application
        set a header of ours: the headers of the limit with the fewest permits left, an
        application's own winning."""
        if handoff.quotas:
            best = fewest_remaining([self.policy.fixed_quota(remaining, lease), *handoff.quotas])
            ours = None if best is None else best.headers()
        if ours:
            headers = with_headers(list(headers), ours)
        handoff.started = (status, headers)
        return start_response(status, headers, exc_info)

    def _costs(self, result: Iterable[bytes], handoff: Handoff) -> Any:
        """The C path's response when the views left costs: settled when the server closes it."""
        return settled_on_close(result, handoff.route_leases, handoff, True, None)

    def _decided(
        self,
        app: WSGIApp,
        environ: Environ,
        start_response: StartResponse,
        lease: Lease,
        quota: Quota | None,
        key: object,
    ) -> Any:
        if not lease and not self.policy.lets_through(lease):
            if self.requests is not None:
                self.requests.count(refusal(lease))
            try:
                return self._reject(environ, start_response, lease, quota)
            except BaseException:
                lease.release()
                raise
        policy = self.policy
        settle = None
        if policy.cost is not None:
            request = self.request(environ)
            settle = functools.partial(policy.charge, key, lease, request)
        result = run(app, environ, start_response, quota, lease, settle)
        if self.requests is not None:
            handoff = environ.get(HANDOFF)
            routed = isinstance(handoff, Handoff) and handoff.route_rejected
            self.requests.count(routed or ("acquired" if lease else SHADOW_REJECTED))
        return result

    def _reject(self, environ: Environ, start_response: StartResponse, lease: Lease, quota: Quota | None) -> Any:
        policy = self.policy
        headers = policy.rejection_headers(lease, quota)
        started: list[bool] = []

        def start_with_headers(status: str, response_headers: Headers, exc_info: ExcInfo | None = None) -> Any:
            started.append(True)
            return start_response(status, with_headers(response_headers, headers), exc_info)

        default = default_rejection(policy.status_code, *policy.rejection_body(lease, quota))
        custom = self.rejection(environ, lease)
        if custom is None:
            return default(environ, start_with_headers)
        try:
            return custom(environ, start_with_headers)
        except Exception:  # an answer that fails: the default rejection instead, never a 500
            logger.exception("on_rejected's response %r raised; the default rejection is sent", custom)
            if not started:
                return default(environ, start_with_headers)
            error = sys.exc_info()

            def start_again(status: str, response_headers: Headers, exc_info: ExcInfo | None = None) -> Any:
                # PEP 3333: a second start_response, with exc_info, replaces the first (nothing is sent yet)
                return start_with_headers(status, response_headers, error)

            return default(environ, start_again)


class RateLimitMiddleware(_core.WsgiGate):
    """The global limiter of a WSGI application: one acquisition per request, before the
    application runs.

    ``limiter``: a ``RateLimiter`` (one limit for everyone) or a ``KeyedRateLimiter`` (a limit per
    ``key(environ)``, a plain function receiving the WSGI environ; by default the client's IP
    address, see ``permits.keys``). A rejected request gets ``status_code`` with
    ``Retry-After`` and the ``RateLimit`` headers, or the WSGI application that
    ``on_rejected(environ, lease)`` returns (None: the default). ``wait=True`` blocks the
    request's thread until a permit comes, at most ``timeout`` seconds on the limiter's clock
    (default 30; None: no bound), with at most ``max_queued`` requests of this middleware waiting
    at once (default 1000; None: no bound); past either, the request is rejected (its lease's
    reason ``"timeout"`` or ``"queue_full"``).
    ``exempt`` path prefixes (of ``PATH_INFO``, the path below ``SCRIPT_NAME``) skip this limiter.
    ``metrics``: True (Prometheus' default registry), a prometheus_client ``CollectorRegistry`` or an
    OpenTelemetry ``Meter`` instruments the limiter and counts requests by result (``permits.metrics``).
    ``enforce=False`` is shadow mode: a request the limiter refuses is served anyway, with the headers
    enforcing would send, its refusal logged (at most once a second, INFO, logger ``permits``) and
    counted ``shadow_rejected``. ``cost(environ, response) -> int`` settles a request's permits when
    the server closes its response (``response``: a ``permits.SentResponse``, its body's size counted).
    ``problem_details=True``: a rejection's body is an RFC 9457 ``application/problem+json`` document.
    """

    def __init__(
        self,
        app: WSGIApp,
        limiter: LimiterLike,
        *,
        key: Callable[[Environ], Any] | None = None,
        permit_count: int = 1,
        wait: bool = False,
        timeout: float | None = DEFAULT_TIMEOUT,
        max_queued: int | None = DEFAULT_MAX_QUEUED,
        status_code: int = 429,
        on_rejected: Callable[[Environ, Lease], WSGIApp | None] | None = None,
        headers: bool | str = True,
        retry_after: float | None = None,
        exempt: Iterable[str] = (),
        metrics: object = False,
        enforce: bool = True,
        cost: Callable[[Environ, SentResponse], int] | None = None,
        problem_details: bool = False,
    ) -> None:
        if not callable(app):
            raise TypeError(f"app must be a WSGI application, got {type(app).__name__}")
        self.app = app
        """The wrapped WSGI application."""
        self.gate = Gate(
            limiter, key=key, permit_count=permit_count, wait=wait, timeout=timeout, max_queued=max_queued,
            status_code=status_code, on_rejected=on_rejected, headers=headers, retry_after=retry_after,
            exempt=exempt, metrics=metrics, enforce=enforce, cost=cost, problem_details=problem_details,
        )  # fmt: skip
        """What runs each request: the key, the acquisition, the rejection, the headers."""
        self.policy = self.gate.policy
        """The checked options: ``policy.limiter`` (the instrumented one with ``metrics``),
        ``policy.key`` (the key function; ``client_ip()`` by default for a keyed limiter, None for a
        plain one), ``permit_count``, ``wait``, ``timeout``, ``max_queued``, ``status_code``,
        ``on_rejected``, ``headers``; ``policy.waiting``, the requests waiting now."""
        # Called by the server, a request runs in the extension (no Python frame of ours) when the
        # gate has a C path and no exempt paths; else it goes through the gate's Python __call__.
        fast = self.gate._fast
        self._bind(app, fast if fast is not None and not self.gate.exempt else self.gate)

    if TYPE_CHECKING:

        def __call__(self, environ: Environ, start_response: StartResponse, /) -> Iterable[bytes]: ...


__all__ = ["GRANTED", "HANDOFF", "RateLimitMiddleware"]
