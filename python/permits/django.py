"""Django integration (``pip install permits[django]``): a global limiter and views' own limits.

    # settings.py
    MIDDLEWARE = ["permits.django.RateLimitMiddleware", ...]     # first: before sessions, auth, ...
    PERMITS = {"limiter": per_ip, "exempt": ["/health"]}         # permits.wsgi's options but app

    # views.py
    @permits.django.limit(searches)          # this view's own limit, on top of the global one
    def search(request): ...

The middleware is built once, when Django loads its middleware (at startup): a bad ``PERMITS``
raises TypeError (or ValueError) then. A key function and ``on_rejected(request, lease)`` receive
Django's ``HttpRequest``; ``on_rejected`` returns an ``HttpResponse`` or None (the default
rejection). A request's leases (the global one and its views') are held until the WSGI server
closes the response (Django's ``response.close()``): a ``StreamingHttpResponse`` keeps its
permits to its last chunk. A view that raises gives its leases back at once.

The leases travel in ``request.META`` (the WSGI environ), as under ``permits.wsgi``: a view's
``limit`` also works under that middleware, or with no middleware at all.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase

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
    refund_before_rejection,
    refusal,
    route_shadowed,
    settle_routes,
)
from ._rates import LimiterLike
from ._shadow import SHADOW_REJECTED
from ._sync_limit import SyncLimit
from .wsgi import GRANTED, HANDOFF, release

View = TypeVar("View", bound=Callable[..., Any])
"""A view function or class-based view; ``limit`` returns it wrapped, typed as the view it was given."""
GetResponse = Callable[[HttpRequest], HttpResponseBase]
"""What Django hands a middleware: the rest of the middleware chain and the view."""
LEASES = "permits.django.leases"
"""The ``request.META`` key of the leases the middleware releases, for ``process_exception``."""
_RESPONSE = "django.http.HttpResponseBase"
_OPTIONS = (
    "limiter", "key", "permit_count", "wait", "timeout", "max_queued", "status_code", "on_rejected", "headers",
    "retry_after", "exempt", "metrics", "enforce", "cost", "problem_details",
)  # fmt: skip


def _is_response(found: object) -> bool:
    return isinstance(found, HttpResponseBase)


def _add_headers(response: HttpResponseBase, headers: list[tuple[str, str]]) -> None:
    for name, value in headers:
        response.setdefault(name, value)  # the view's own headers win


def _release_on_close(
    response: HttpResponseBase, leases: list[Lease], finish: Callable[[SentResponse], None] | None = None
) -> None:
    # Django's close() (called by the WSGI server once the response is sent, or the client has
    # gone) runs its resource closers: the costs are settled (``finish``), then the leases go back,
    # each once.
    def closed() -> None:
        try:
            if finish is not None:
                finish(_sent(response))
        finally:
            release(leases)

    response._resource_closers.append(closed)  # type: ignore[attr-defined,unused-ignore]


def _sent(response: HttpResponseBase) -> SentResponse:
    """What ``cost`` receives of a Django response (its body's size unless it streams)."""
    content = getattr(response, "content", None) if not getattr(response, "streaming", False) else None
    size = len(content) if isinstance(content, bytes) else None
    return SentResponse(response.status_code, headers_of(response.items()), size, response)


def _rejection(limit: SyncLimit, request: HttpRequest, lease: Lease, quota: Quota | None) -> HttpResponseBase:
    policy = limit.policy
    headers = policy.rejection_headers(lease, quota)
    response: HttpResponseBase | None = policy.rejection_sync(request, lease, _is_response, _RESPONSE)
    if response is None:
        body, media_type = policy.rejection_body(lease, quota)
        response = HttpResponse(body, status=policy.status_code, content_type=media_type)
    _add_headers(response, headers)
    return response


def _settings_options() -> dict[str, Any]:
    options = getattr(settings, "PERMITS", None)
    if not isinstance(options, Mapping):
        raise TypeError(f"settings.PERMITS must be a dict of the middleware's options, got {type(options).__name__}")
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise TypeError(f"settings.PERMITS has unknown options: {', '.join(map(str, unknown))}")
    if options.get("limiter") is None:
        raise TypeError("settings.PERMITS needs a 'limiter' (a permits.RateLimiter or KeyedRateLimiter)")
    return dict(options)


class RateLimitMiddleware:
    """The global limiter of a Django project: one acquisition per request, before the rest of
    the middleware and the view. Its options are ``settings.PERMITS`` (those of
    ``permits.wsgi.RateLimitMiddleware`` but ``app``); ``exempt`` prefixes are of
    ``request.path_info`` (the path below ``SCRIPT_NAME``). Put it first in ``MIDDLEWARE``.
    ``wait=True`` waits at most ``timeout`` seconds on the limiter's clock (default 30; None: no
    bound), with at most ``max_queued`` requests waiting at once (default 1000; None: no bound);
    past either, the rejection (its lease's reason ``"timeout"`` or ``"queue_full"``).
    ``metrics`` (True, a prometheus_client ``CollectorRegistry`` or an OpenTelemetry ``Meter``)
    instruments the limiter and counts requests by result (``permits.metrics``). ``"enforce": False``
    is shadow mode: a refused request is served, its refusal logged (at most once a second) and
    counted ``shadow_rejected``; ``"cost"`` settles a request's permits to ``cost(request, response)``
    once its response has been sent."""

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        """The rest of the middleware chain and the view, as Django handed it."""
        options = _settings_options()
        options["limiter"], self.requests = counted(options.pop("metrics", False), options["limiter"])
        self.limit = SyncLimit(**options)
        """The global limit made from ``settings.PERMITS``: its ``policy``, ``timeout`` and ``exempt``."""
        self.policy = self.limit.policy
        """The checked options: ``policy.limiter`` (the instrumented one with ``metrics``),
        ``policy.key`` (the key function; ``client_ip()`` by default for a keyed limiter, None for a
        plain one), ``permit_count``, ``wait``, ``timeout``, ``max_queued``, ``status_code``,
        ``on_rejected``, ``headers``; ``policy.waiting``, the requests waiting now."""

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        limit = self.limit
        meta = request.META
        lease: Lease | None = None
        quota: Quota | None = None
        key: object = None
        if not (limit.exempt and is_exempt(request.path_info or "/", limit.exempt, environ_raw_path(meta))):
            lease, quota, key = limit.admit_keyed(meta, lambda: request)
            if not lease and not limit.policy.lets_through(lease):
                if self.requests is not None:
                    self.requests.count(refusal(lease))
                try:
                    response = _rejection(limit, request, lease, quota)
                except BaseException:
                    lease.release()
                    raise
                return response
        found = meta.get(HANDOFF)
        if isinstance(found, Handoff):  # permits.wsgi's middleware is outside: it releases the views' leases
            handoff, leases = found, ([] if lease is None else [lease])
        else:
            handoff = meta[HANDOFF] = Handoff()
            leases = handoff.route_leases  # (a view's limit adds its own while the view runs)
            if lease is not None:
                leases.append(lease)
        meta[LEASES] = leases
        try:
            response = self.get_response(request)
        except BaseException:
            release(leases)
            raise
        if self.requests is not None and lease is not None:
            self.requests.count(handoff.route_rejected or ("acquired" if lease else SHADOW_REJECTED))
        best = fewest_remaining([quota, *handoff.quotas]) if handoff.quotas else quota
        if best is not None:
            _add_headers(response, best.headers())
        owner = handoff is not found
        own = limit.policy.cost is not None and lease is not None
        finish = None
        if own or (owner and handoff.charges):  # (the view has run: its limits' costs are known)

            def finish(sent: SentResponse) -> None:
                if owner:
                    settle_routes(handoff, sent)
                if own and lease is not None:
                    limit.policy.charge(key, lease, request, sent)

        _release_on_close(response, leases, finish)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> None:
        """The view raised: its leases go back now, not when Django's error page has been sent."""
        leases = request.META.get(LEASES)
        if isinstance(leases, list):
            release(leases)


def limit(
    limiter: LimiterLike,
    *,
    key: Callable[[HttpRequest], Any] | None = None,
    permit_count: int = 1,
    wait: bool = False,
    timeout: float | None = DEFAULT_TIMEOUT,
    max_queued: int | None = DEFAULT_MAX_QUEUED,
    status_code: int = 429,
    on_rejected: Callable[[HttpRequest, Lease], HttpResponseBase | None] | None = None,
    headers: bool | str = True,
    retry_after: float | None = None,
    enforce: bool = True,
    cost: Callable[[HttpRequest, SentResponse], int] | None = None,
    problem_details: bool = False,
) -> Callable[[View], View]:
    """One view's limit: ``@limit(limiter)`` on a view function, or on a class-based view (its
    ``dispatch``, every method). It runs after the middleware's global limit; a request it rejects
    still counts against the global limit, and the permits of the other limits stacked on the view
    are given back. ``wait=True`` waits at most ``timeout`` seconds (default 30), with at most
    ``max_queued`` requests waiting in this limit at once (default 1000; over every view it
    decorates); past either, the rejection. ``enforce=False``: shadow mode (a refused request is
    served, its refusal logged and counted ``shadow_rejected``). ``cost(request, response) -> int``
    settles the request's permits once its response has been sent (``response``: a
    ``permits.SentResponse``)."""
    checked = SyncLimit(
        limiter, key=key, permit_count=permit_count, wait=wait, timeout=timeout, max_queued=max_queued,
        status_code=status_code, on_rejected=on_rejected, headers=headers,
        retry_after=retry_after, enforce=enforce, cost=cost, problem_details=problem_details,
    )  # fmt: skip
    return functools.partial(_decorate, checked)


def _decorate(checked: SyncLimit, view: View) -> View:
    if inspect.isclass(view):
        dispatch = getattr(view, "dispatch", None)
        if dispatch is None:
            raise TypeError(f"limit() decorates a view function or a class-based view, got class {view.__name__}")
        view.dispatch = _decorate(checked, dispatch)  # type: ignore[attr-defined,unused-ignore]
        return view
    if not callable(view):
        raise TypeError(f"limit() decorates a view function or a class-based view, got {type(view).__name__}")
    if inspect.iscoroutinefunction(view):
        raise TypeError("limit() decorates sync views (the WSGI handler's); an async view would block its event loop")

    @functools.wraps(view)
    def limited(*args: Any, **kwargs: Any) -> Any:
        # A view function's request comes first; a method's (dispatch, get) after self.
        request = args[0] if args and isinstance(args[0], HttpRequest) else args[1]
        return _through(checked, request, lambda: view(*args, **kwargs))

    return limited  # type: ignore[return-value]


def _through(checked: SyncLimit, request: HttpRequest, call: Callable[[], HttpResponseBase]) -> HttpResponseBase:
    meta = request.META
    lease, quota, key = checked.admit_keyed(meta, lambda: request)
    policy = checked.policy
    granted: list[Lease] = meta.setdefault(GRANTED, [])
    if not lease and checked.policy.lets_through(lease):
        route_shadowed(meta.get(HANDOFF))
    elif not lease:
        try:
            refund_before_rejection(granted, meta.get(HANDOFF), lease)  # (metrics= counts it apart)
            return _rejection(checked, request, lease, quota)
        except BaseException:
            lease.release()
            raise
    granted.append(lease)
    handoff = meta.get(HANDOFF)
    if isinstance(handoff, Handoff):  # a middleware holds the lease and writes the headers
        handoff.route_leases.append(lease)
        handoff.quotas.append(quota)
        if policy.cost is not None:
            handoff.charges.append(functools.partial(policy.charge, key, lease, request))
        try:
            return call()
        except BaseException:
            handoff.route_leases.remove(lease)
            lease.release()
            raise
    # No middleware: the lease goes with the view's response, released when it is closed.
    try:
        response = call()
        if quota is not None:
            _add_headers(response, quota.headers())
        settle = None if policy.cost is None else functools.partial(policy.charge, key, lease, request)
        _release_on_close(response, [lease], settle)
    except BaseException:
        lease.release()
        raise
    return response


__all__ = ["RateLimitMiddleware", "limit"]
