"""aiohttp server integration: ``rate_limit_middleware`` (the global limiter) and ``@limit`` (one
handler's limit), with the options of ``permits.asgi``'s middleware."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Generator, Iterable
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.abc import AbstractView

from ._aiohttp_leaving import disconnected
from ._aiohttp_paths import route_path
from ._core import Lease
from ._cost import SentResponse, headers_of
from ._http_policy import (
    DEFAULT_MAX_QUEUED,
    DEFAULT_TIMEOUT,
    Handoff,
    Policy,
    Quota,
    check_exempt,
    counted,
    fewest_remaining,
    is_exempt,
    refund_before_rejection,
    route_shadowed,
    settle_routes,
)
from ._rates import LimiterLike
from ._shadow import SHADOW_REJECTED

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: What ``limit`` decorates, and returns as it was typed: a handler, a view's method or a ``web.View`` class.
H = TypeVar("H")
#: The status of the response to a client that left while queued (it reads none); nginx's
#: "client closed request".
CLIENT_CLOSED_REQUEST = 499


#: Where the middleware leaves its handoff in the request, for a decorated handler to find (a
#: typed key where aiohttp has them, 3.12 on; a str before).
HANDOFF: Any = web.RequestKey("permits.handoff", Handoff) if hasattr(web, "RequestKey") else "permits.handoff"
#: Where a request's handler leases are listed (a rejection by a stacked @limit refunds them all).
GRANTED: Any = web.RequestKey("permits.granted", list) if hasattr(web, "RequestKey") else "permits.granted"


class _Global:
    """A request's lease of the middleware's limiter, which a route's queue gives back while the
    request waits there (so that queued requests hold none of the global concurrency), taken
    again when the route grants."""

    __slots__ = ("key", "lease", "policy")

    def __init__(self, policy: Policy, key: object, lease: Lease) -> None:
        self.policy = policy
        self.key = key
        self.lease = lease


#: Where the middleware leaves the request's ``_Global``.
GLOBAL: Any = web.RequestKey("permits.global", _Global) if hasattr(web, "RequestKey") else "permits.global"


async def _acquire(policy: Policy, key: object, request: web.Request) -> Lease | None:
    if policy.wait:
        lease = policy.at_once(key)
        return lease if lease is not None else await policy.wait_queued(key, lambda: disconnected(request))
    return await policy.acquire(key)


def _full(policy: Policy) -> bool:
    """Whether a request that must queue would be refused at once (``max_queued`` wait already)."""
    return policy.max_queued is not None and policy.waiting >= policy.max_queued


async def _route_lease(policy: Policy, key: object, request: web.Request) -> Lease | web.StreamResponse | None:
    """A route's lease; None when the client left while queued. A request that must queue gives
    its global permit back while it waits, and takes it again once the route grants: then the
    global limiter's refusal is the answer (a response), the route's permit given back."""
    held = request.get(GLOBAL)
    if not policy.wait or held is None:
        return await _acquire(policy, key, request)
    lease = policy.at_once(key)
    if lease is not None:
        return lease
    if _full(policy):
        return policy.refused("queue_full")
    held.lease._refund()
    lease = await policy.wait_queued(key, lambda: disconnected(request))
    if not lease:  # (a timeout, or the client left: the request holds neither)
        return lease
    again = await _acquire(held.policy, held.key, request)
    if again is not None and (again or held.policy.lets_through(again)):
        held.lease = again
        return lease
    lease._refund()
    if again is None:
        return None
    handoff = request.get(HANDOFF)
    if isinstance(handoff, Handoff):
        handoff.route_rejected = "global_limiter"
    return await _rejection(held.policy, request, again, held.policy.quota(held.key, again))


def _add_headers(response: web.StreamResponse, headers: list[tuple[str, str]]) -> None:
    if not response.prepared:  # a stream the handler has begun has sent its headers already
        for name, value in headers:
            response.headers.setdefault(name, value)


async def _sent(response: web.StreamResponse, request: web.Request) -> web.StreamResponse:
    """Sends the response now, so that the lease is held until it has been sent (aiohttp would
    send it after the middleware returns)."""
    if not response.prepared:
        try:
            await response.prepare(request)
            await response.write_eof()
        except ConnectionError:
            # The client left while it was sent: aiohttp's own sending takes that as no error
            # (no "Error handling request", no 500), and neither does this.
            return _Sent(response)
        if isinstance(response, web.FileResponse):
            return _Sent(response)
    return response


class _Sent(web.StreamResponse):
    """What aiohttp gets for a file response this module has sent (or a response its client left
    during): aiohttp prepares the response a handler returns, and a ``FileResponse``'s ``prepare``
    would send the file again (it fails on a finished response), where a sent
    ``StreamResponse``'s does nothing."""

    def __init__(self, sent: web.StreamResponse) -> None:
        super().__init__(status=sent.status, reason=sent.reason, headers=sent.headers)
        self._sent = sent

    async def prepare(self, request: web.BaseRequest) -> None:
        return None

    async def write_eof(self, data: bytes = b"") -> None:
        return None

    @property
    def keep_alive(self) -> bool | None:
        return self._sent.keep_alive

    @property
    def body_length(self) -> int:
        return self._sent.body_length


async def _rejection(policy: Policy, request: web.Request, lease: Lease, quota: Quota | None) -> web.StreamResponse:
    headers = policy.rejection_headers(lease, quota)
    custom = await policy.rejection(request, lease, web.StreamResponse)
    response: web.StreamResponse
    # (not `custom or ...`: a response is a mapping, false while empty)
    if custom is None:
        body, media_type = policy.rejection_body(lease, quota)
        content_type, _, params = media_type.partition(";")
        charset = params.partition("=")[2].strip() or None
        response = web.Response(status=policy.status_code, text=body, content_type=content_type, charset=charset)
    else:
        response = custom
    _add_headers(response, headers)
    return response


def _settle(
    policy: Policy | None,
    key: object,
    lease: Lease,
    request: web.Request,
    handoff: Handoff | None,
    status: int,
    headers: Any,
    sent: web.StreamResponse | None,
    response: Any,
) -> None:
    """The response is sent: the routes' costs (``handoff``) and the limit's own settle."""
    if (handoff is None or not handoff.charges) and (policy is None or policy.cost is None):
        return
    size = None
    if sent is not None:  # (not StreamResponse.body_length: that counts the status line and headers too)
        body = getattr(response, "body", None)
        size = len(body) if isinstance(body, bytes | bytearray) else response.content_length
    answer = SentResponse(status, headers_of(headers.items()), size, response)
    if handoff is not None and handoff.charges:
        settle_routes(handoff, answer)
    if policy is not None:
        policy.charge(key, lease, request, answer)


def _admitted(handoff: Handoff, lease: Lease) -> str:
    """The result counted for a request the global limiter let through (shadow mode: served though
    refused)."""
    return handoff.route_rejected or ("acquired" if lease else SHADOW_REJECTED)


def rate_limit_middleware(
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
    cost: Callable[[web.Request, SentResponse], int] | None = None,
    problem_details: bool = False,
) -> Any:
    """The global limiter of an aiohttp application: ``web.Application(middlewares=[...])``.
    Put it first (outermost): it sends the response itself, to hold the lease until then.
    ``wait=True`` waits at most ``timeout`` seconds on the limiter's clock (default 30; None: no
    bound), with at most ``max_queued`` requests of this middleware waiting at once (default
    1000; None: no bound); past either, the rejection (reason ``"timeout"`` or ``"queue_full"``).
    ``metrics``: True (Prometheus' default registry), a prometheus_client ``CollectorRegistry`` or an
    OpenTelemetry ``Meter`` instruments the limiter and counts requests by result (``permits.metrics``).
    ``enforce=False``: shadow mode (a refused request is served, with the headers enforcing would
    send; its refusal logged, at most once a second, and counted ``shadow_rejected``). ``cost(request,
    response) -> int`` settles a request's permits once its response has been sent (``response``: a
    ``permits.SentResponse``). ``problem_details=True``: a rejection's body is an RFC 9457
    ``application/problem+json`` document."""
    limiter, requests = counted(metrics, limiter)
    policy = Policy(
        limiter, key=key, permit_count=permit_count, wait=wait, timeout=timeout, max_queued=max_queued,
        status_code=status_code, on_rejected=on_rejected, headers=headers,
        retry_after=retry_after, enforce=enforce, cost=cost, problem_details=problem_details,
    )  # fmt: skip
    prefixes = check_exempt(exempt)

    @web.middleware
    async def rate_limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        if prefixes and is_exempt(route_path(request), prefixes, request.raw_path):
            return await handler(request)
        key = await policy.key_of(request)
        lease = await _acquire(policy, key, request)
        if lease is None:  # the client left while queued: nobody reads this
            if requests is not None:
                requests.count("client_left")
            return web.Response(status=CLIENT_CLOSED_REQUEST)
        handoff = Handoff()
        request[HANDOFF] = handoff
        held = request[GLOBAL] = _Global(policy, key, lease)  # (a route's queue may swap its lease)
        try:
            quota = policy.quota(key, lease)
            if not lease and not policy.lets_through(lease):
                if requests is not None:
                    requests.count("global_limiter")
                return await _sent(await _rejection(policy, request, lease, quota), request)
            try:
                response = await handler(request)
            except web.HTTPException as exc:  # aiohttp's HTTP errors are responses: they get the headers too
                if requests is not None:
                    requests.count(_admitted(handoff, held.lease))
                best = fewest_remaining([quota, *handoff.quotas])
                for name, value in [] if best is None else best.headers():
                    exc.headers.setdefault(name, value)
                _settle(policy, key, held.lease, request, handoff, exc.status, exc.headers, None, exc)
                raise
            if requests is not None:
                requests.count(_admitted(handoff, held.lease))
            best = fewest_remaining([quota, *handoff.quotas])
            if best is not None:
                _add_headers(response, best.headers())
            sent = await _sent(response, request)
            _settle(policy, key, held.lease, request, handoff, response.status, response.headers, sent, response)
            return sent
        finally:
            held.lease.release()
            for route_lease in handoff.route_leases:
                route_lease.release()

    return rate_limit


def limit(
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
    cost: Callable[[web.Request, SentResponse], int] | None = None,
    problem_details: bool = False,
) -> Callable[[H], H]:
    """One handler's limit: ``@limit(limiter)`` on ``async def handler(request)``, on a
    ``web.View`` class (every method) or on a view's method. Runs after the middleware's global
    limiter; a request it rejects at once still counts against the global limit. ``timeout`` and
    ``max_queued`` bound its ``wait=True`` as the middleware's (``max_queued``: the requests
    waiting in this decorator's limit, over every handler it decorates); a request queued here
    gives its global permit back while it waits, and takes it again when this limit grants.
    ``enforce=False``: shadow mode, and ``cost``, as the middleware's."""
    policy = Policy(
        limiter, key=key, permit_count=permit_count, wait=wait, timeout=timeout, max_queued=max_queued,
        status_code=status_code, on_rejected=on_rejected, headers=headers,
        retry_after=retry_after, enforce=enforce, cost=cost, problem_details=problem_details,
    )  # fmt: skip

    def decorate(handler: Any) -> Any:
        if inspect.isclass(handler):
            if not issubclass(handler, AbstractView):
                raise TypeError(f"limit() decorates a handler or a web.View class, got class {handler.__name__}")
            dispatch = handler.__await__

            def limited_view(view: AbstractView) -> Generator[Any, None, web.StreamResponse]:
                return _limited(policy, view.request, lambda: _Awaiting(dispatch(view))).__await__()

            handler.__await__ = limited_view  # type: ignore[method-assign,assignment]
            return handler
        if not callable(handler):
            raise TypeError(f"limit() decorates a handler or a web.View class, got {type(handler).__name__}")

        @functools.wraps(handler)
        async def limited(first: Any) -> web.StreamResponse:
            # A handler's request; a view's method (``async def get(self)``) gets the view.
            request = first.request if isinstance(first, AbstractView) else first
            return await _limited(policy, request, lambda: handler(first))

        return limited

    return decorate


class _Awaiting:
    """An awaitable of an ``__await__`` iterator (a view's own dispatch)."""

    __slots__ = ("_steps",)

    def __init__(self, steps: Generator[Any, None, web.StreamResponse]) -> None:
        self._steps = steps

    def __await__(self) -> Generator[Any, None, web.StreamResponse]:
        return self._steps


async def _limited(
    policy: Policy, request: web.Request, call: Callable[[], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """A handler's call under a route's limit."""
    key = await policy.key_of(request)
    lease = await _route_lease(policy, key, request)
    if lease is None:
        if isinstance(handoff := request.get(HANDOFF), Handoff):
            handoff.route_rejected = "client_left"
        return web.Response(status=CLIENT_CLOSED_REQUEST)
    if isinstance(lease, web.StreamResponse):  # the global limiter refused once the route granted
        return lease
    handoff = request.get(HANDOFF)
    granted: list[Lease] = request.setdefault(GRANTED, [])
    quota = policy.quota_or_release(key, lease)
    if not lease and policy.lets_through(lease):
        route_shadowed(handoff)
    elif not lease:
        refund_before_rejection(granted, handoff, lease)
        return await _rejection(policy, request, lease, quota)
    granted.append(lease)
    if isinstance(handoff, Handoff):  # the middleware holds the lease and writes the headers
        handoff.route_leases.append(lease)
        handoff.quotas.append(quota)
        if policy.cost is not None:
            handoff.charges.append(functools.partial(policy.charge, key, lease, request))
        return await call()
    try:
        try:
            response = await call()
        except web.HTTPException as exc:
            _settle(policy, key, lease, request, None, exc.status, exc.headers, None, exc)
            raise
        if quota is not None:
            _add_headers(response, quota.headers())
        sent = await _sent(response, request)
        _settle(policy, key, lease, request, None, response.status, response.headers, sent, response)
        return sent
    finally:
        lease.release()


__all__ = ["limit", "rate_limit_middleware"]
