"""Flask integration (``pip install permits[flask]``): a global limiter and views' own limits.

    rate_limit = RateLimit(per_ip)           # the global limiter (or RateLimit() for none)
    rate_limit.init_app(app)

    @app.get("/search")
    @rate_limit.limit(searches)              # this view's own limit, on top of the global one
    def search(): ...

``init_app`` wraps ``app.wsgi_app`` with ``permits.wsgi``'s middleware: a request's leases (the
global one and its view's) are held until the server closes the response, so a streamed response
keeps its permits to its end; headers are written on every response. The global limit runs before
Flask's request context exists: its ``key(request)`` receives a ``flask.Request`` made from the
environ (a shallow one: it cannot read the body), and its ``on_rejected(request, lease)`` runs in a
request context of its own (``jsonify``, ``url_for`` work) and returns a Flask response or None.
A view's ``limit`` runs inside the view's context.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import flask
from werkzeug.wrappers import Response as _Response

from ._core import Lease
from ._cost import SentResponse, headers_of
from ._http_policy import (
    DEFAULT_MAX_QUEUED,
    DEFAULT_TIMEOUT,
    Handoff,
    Policy,
    Quota,
    check_metrics,
    refund_before_rejection,
    route_shadowed,
)
from ._rates import LimiterLike
from ._sync_limit import SyncLimit
from .wsgi import GRANTED, HANDOFF, Environ, Gate, StartResponse, WSGIApp, run

View = TypeVar("View", bound=Callable[..., Any])
"""A view function; ``limit`` returns it wrapped, typed as the view it was given."""
EXTENSION = "permits"
"""The key of the ``RateLimit`` in ``app.extensions`` once ``init_app(app)`` has run."""
_RESPONSE = "flask.Response (a werkzeug Response)"


def _is_response(found: object) -> bool:
    return isinstance(found, _Response)


class _FlaskGate(Gate):
    """The global limit of one Flask application: Flask's request for the key, on_rejected in a
    request context."""

    app: flask.Flask | None = None

    def request(self, environ: Environ) -> Any:
        request_class = flask.Request if self.app is None else self.app.request_class
        return request_class(environ, populate_request=False, shallow=True)

    def rejection(self, environ: Environ, lease: Lease) -> WSGIApp | None:
        if self.policy.on_rejected is None or self.app is None:
            return None
        with self.app.request_context(environ) as context:
            found = self.policy.rejection_sync(context.request, lease, _is_response, _RESPONSE)
        return found  # type: ignore[no-any-return]

    def admit_keyed(self, environ: Environ, request: Callable[[], Any]) -> tuple[Lease, Any, object]:
        try:
            return super().admit_keyed(environ, request)
        except Exception as error:  # the key function's: the application answers it (below)
            raise _KeyFailed(error) from error

    def _key_of(self, environ: Environ) -> object:
        try:
            return super()._key_of(environ)
        except Exception as error:  # (the C path's key, read in Python): answered as below
            raise _KeyFailed(error) from error

    def __call__(self, app: WSGIApp, environ: Environ, start_response: StartResponse) -> Any:
        try:
            return super().__call__(app, environ, start_response)
        except _KeyFailed as failed:
            return self.key_failed(failed, environ, start_response)

    def key_failed(self, failed: _KeyFailed, environ: Environ, start_response: StartResponse) -> Any:
        """The answer to a request whose key function raised: as an error in a view, Flask logs it
        and answers with its errorhandler(500) page."""
        if self.app is None:
            raise failed.error from None
        with self.app.request_context(environ):
            response = self.app.handle_exception(failed.error)
        return response(environ, start_response)


class _KeyFailed(Exception):
    """A global limit's key function raised: what the extension answers through the application."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


class _Middleware:
    """What ``init_app`` puts in place of ``app.wsgi_app``."""

    def __init__(self, wsgi_app: WSGIApp, gate: _FlaskGate | None) -> None:
        self.wsgi_app = wsgi_app
        self.gate = gate
        # The gate's C path, called from here (one Python frame a request) when it has one and no
        # exempt paths.
        self._fast = None if gate is None or gate.exempt else gate._fast

    def __call__(self, environ: Environ, start_response: StartResponse) -> Any:
        fast = self._fast
        if fast is not None:
            try:
                return fast(self.wsgi_app, environ, start_response)
            except _KeyFailed as failed:
                return self.gate.key_failed(failed, environ, start_response)  # type: ignore[union-attr]
        if self.gate is None:  # no global limit: the views' leases and headers only
            return run(self.wsgi_app, environ, start_response, None, None)
        return self.gate(self.wsgi_app, environ, start_response)


class RateLimit:
    """The Flask extension: ``RateLimit(limiter, ...)`` then ``init_app(app)``; the options are
    those of ``permits.wsgi.RateLimitMiddleware`` (``key`` and ``on_rejected`` receive the
    ``flask.Request``; ``on_rejected`` returns a Flask response or None; ``wait=True`` waits at
    most ``timeout`` seconds, default 30, with at most ``max_queued`` requests waiting at once,
    default 1000: past either, the rejection; ``enforce=False``: shadow mode, a refused request served
    with its refusal logged and counted ``shadow_rejected``; ``cost(request, response) -> int``
    settles a request's permits once its response has been sent). ``RateLimit()`` without a
    limiter sets no global limit: ``init_app`` then only makes the views' limits hold their
    leases until their responses are sent."""

    def __init__(
        self,
        limiter: LimiterLike | None = None,
        *,
        key: Callable[[flask.Request], Any] | None = None,
        permit_count: int = 1,
        wait: bool = False,
        timeout: float | None = DEFAULT_TIMEOUT,
        max_queued: int | None = DEFAULT_MAX_QUEUED,
        status_code: int = 429,
        on_rejected: Callable[[flask.Request, Lease], _Response | None] | None = None,
        headers: bool | str = True,
        retry_after: float | None = None,
        exempt: Iterable[str] = (),
        metrics: object = False,
        enforce: bool = True,
        cost: Callable[[flask.Request, SentResponse], int] | None = None,
        problem_details: bool = False,
    ) -> None:
        options: dict[str, Any] = {
            "key": key, "permit_count": permit_count, "wait": wait, "timeout": timeout, "max_queued": max_queued,
            "status_code": status_code, "on_rejected": on_rejected, "headers": headers,
            "retry_after": retry_after, "exempt": exempt, "metrics": metrics, "enforce": enforce, "cost": cost,
            "problem_details": problem_details,
        }  # fmt: skip
        if limiter is None:
            defaults = inspect.signature(RateLimit.__init__).parameters
            given = [name for name, value in options.items() if not _default(value, defaults[name].default)]
            if given:
                raise TypeError(f"RateLimit() without a limiter has no global limit to configure: {', '.join(given)}")
            self._options = None
        else:
            # Checked now, not at the first request; metrics= on its own: a gate built with it
            # would instrument the limiter and register its series for nothing.
            _FlaskGate(limiter, **{**options, "metrics": False})
            check_metrics(metrics)
            self._options = {"limiter": limiter, **options}

    def init_app(self, app: flask.Flask) -> None:
        """Installs the global limit (when there is one) on ``app``, once."""
        if not isinstance(app, flask.Flask):
            raise TypeError(f"init_app() takes a Flask application, got {type(app).__name__}")
        if EXTENSION in app.extensions:
            raise RuntimeError("this Flask application has a RateLimit already (one per application)")
        gate = None
        if self._options is not None:
            gate = _FlaskGate(**self._options)
            gate.app = app
        app.extensions[EXTENSION] = self
        app.wsgi_app = _Middleware(app.wsgi_app, gate)  # type: ignore[method-assign,assignment]

    def limit(
        self,
        limiter: LimiterLike,
        *,
        key: Callable[[flask.Request], Any] | None = None,
        permit_count: int = 1,
        wait: bool = False,
        timeout: float | None = DEFAULT_TIMEOUT,
        max_queued: int | None = DEFAULT_MAX_QUEUED,
        status_code: int = 429,
        on_rejected: Callable[[flask.Request, Lease], _Response | None] | None = None,
        headers: bool | str = True,
        retry_after: float | None = None,
        enforce: bool = True,
        cost: Callable[[flask.Request, SentResponse], int] | None = None,
        problem_details: bool = False,
    ) -> Callable[[View], View]:
        """One view's limit: ``@rate_limit.limit(limiter)`` under ``@app.route``. It runs after the
        global limit; a request it rejects still counts against the global limit, and the permits
        of the other limits stacked on the view are given back. ``max_queued`` counts the requests
        waiting in this limit (over every view it decorates). ``enforce=False``: shadow mode;
        ``cost``: as the extension's."""
        limit = SyncLimit(
            limiter, key=key, permit_count=permit_count, wait=wait, timeout=timeout, max_queued=max_queued,
            status_code=status_code, on_rejected=on_rejected, headers=headers,
            retry_after=retry_after, enforce=enforce, cost=cost, problem_details=problem_details,
        )  # fmt: skip
        return functools.partial(_decorate, limit)


def _default(value: object, default: object) -> bool:
    if isinstance(value, list | tuple) and isinstance(default, tuple):
        return not value  # exempt=[]
    return type(value) is type(default) and value == default


def _decorate(limit: SyncLimit, view: View) -> View:
    if not callable(view):
        raise TypeError(f"limit() decorates a view function, got {type(view).__name__}")
    call: Callable[..., Any] = view
    if inspect.iscoroutinefunction(view):  # an async view (flask[async]): Flask's way of running it

        def call(*args: Any, **kwargs: Any) -> Any:
            return flask.current_app.ensure_sync(view)(*args, **kwargs)

    policy = limit.policy

    @functools.wraps(view)
    def limited(*args: Any, **kwargs: Any) -> Any:
        request = _unproxied(flask.request)  # (not the proxy: unbound once the request has ended)
        environ = request.environ
        lease, quota, key = limit.admit_keyed(environ, lambda: request)
        granted: list[Lease] = environ.setdefault(GRANTED, [])
        if not lease and policy.lets_through(lease):
            route_shadowed(environ.get(HANDOFF))
        elif not lease:
            try:
                refund_before_rejection(granted, environ.get(HANDOFF), lease)
                return _rejection(policy, lease, quota)
            except BaseException:
                lease.release()
                raise
        granted.append(lease)
        handoff = environ.get(HANDOFF)
        if isinstance(handoff, Handoff):  # the middleware holds the lease and writes the headers
            handoff.route_leases.append(lease)
            handoff.quotas.append(quota)
            if policy.cost is not None:  # (the request itself: the proxy is unbound once it has been sent)
                handoff.charges.append(functools.partial(policy.charge, key, lease, request))
            return call(*args, **kwargs)
        # Without init_app: the lease goes with the view's response, released when it is closed.
        try:
            response = flask.current_app.make_response(call(*args, **kwargs))
            if quota is not None:
                _add_headers(response, quota.headers())
            if policy.cost is not None:
                response.call_on_close(functools.partial(_charged, policy, key, lease, _unproxied(request), response))
            response.call_on_close(lease.release)
        except BaseException:
            lease.release()
            raise
        return response

    return limited  # type: ignore[return-value]


def _unproxied(request: flask.Request) -> flask.Request:
    """The request behind ``flask.request`` (a proxy, unbound once the request has ended)."""
    found: flask.Request = getattr(request, "_get_current_object", lambda: request)()
    return found


def _charged(policy: Policy, key: object, lease: Lease, request: flask.Request, response: _Response) -> None:
    """A view's response closed (sent): its lease settles to ``cost``, before its release."""
    size = response.calculate_content_length()
    sent = SentResponse(response.status_code, headers_of(response.headers.items()), size, response)
    policy.charge(key, lease, request, sent)


def _add_headers(response: _Response, headers: list[tuple[str, str]]) -> None:
    for name, value in headers:
        response.headers.setdefault(name, value)


def _rejection(policy: Policy, lease: Lease, quota: Quota | None) -> _Response:
    headers = policy.rejection_headers(lease, quota)
    response: _Response | None = policy.rejection_sync(_unproxied(flask.request), lease, _is_response, _RESPONSE)
    if response is None:
        body, media_type = policy.rejection_body(lease, quota)
        response = flask.current_app.response_class(body, policy.status_code, content_type=media_type)
    _add_headers(response, headers)
    return response


__all__ = ["EXTENSION", "RateLimit"]
