"""The part of every server integration that knows no framework: one policy (a limiter, a key, how
many permits, wait or reject, what a rejection looks like), checked when it is built; the
acquisition; the ``Retry-After`` and IETF ``RateLimit`` / ``RateLimit-Policy`` headers."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from . import _core, _pausing, specs
from ._core import Clock, Lease, MonotonicClock
from ._cost import SentResponse, charge, check_cost
from ._durations import timeout_ns
from ._exempt_paths import check_exempt, environ_raw_path, has_dot_segment, is_exempt
from ._problem import MEDIA_TYPE as PROBLEM_MEDIA_TYPE
from ._problem import check_problem_details, problem_json
from ._quota_headers import (
    Quota,
    _figures,
    _quota,
    _retry_seconds,
    check_headers,
    encoded_headers,
    fewest_remaining,
    quota_of,
    rejection_text,
)
from ._rates import limiter_of
from ._shadow import SHADOW_REJECTED, ShadowLog, check_enforce
from .chain import ChainedLimiter, ChainedPartitionedLimiter
from .keyed_limiter import KeyedRateLimiter
from .keys import client_ip
from .partitioned import PartitionedLimiter
from .rate_limiter import RateLimiter
from .translated import TranslatedKeyLimiter

if TYPE_CHECKING:
    from .metrics._requests import RequestCounter

_CHAINS = (ChainedLimiter, ChainedPartitionedLimiter)
#: The reason of the failed lease of a sync server's queued request whose client left.
CLIENT_LEFT = "client_left"
#: The longest a request waits with ``wait=True`` by default: seconds, on the limiter's clock.
DEFAULT_TIMEOUT = 30.0
#: The most requests waiting with ``wait=True`` in one middleware (or route limit) at once, by default.
DEFAULT_MAX_QUEUED = 1000
logger = logging.getLogger("permits")


def counted(metrics: object, limiter: Any) -> tuple[Any, RequestCounter | None]:
    """A middleware's ``metrics=``: the limiter to use (instrumented) and the counter of its requests
    by result; with False or None, the limiter itself and no counter. permits.metrics (and its
    exporter library) is imported only when asked for."""
    limiter = limiter_of(limiter, per_key=True)  # (before it is instrumented)
    if metrics is False or metrics is None:
        return limiter, None
    from .metrics._requests import for_middleware

    return for_middleware(metrics, limiter)


def refusal(lease: Lease) -> str:
    """The result a middleware counts for a request its limiter refused: ``client_left`` when the
    client left while queued (a sync server's wait: the lease failed with that reason), else
    ``global_limiter``."""
    return "client_left" if lease.reason == CLIENT_LEFT else "global_limiter"


def route_refusal(lease: Lease) -> str:
    """The result a middleware counts for a request a route's limit refused: ``client_left`` when
    the client left while queued, else ``route_limiter``."""
    return "client_left" if lease.reason == CLIENT_LEFT else "route_limiter"


def check_metrics(metrics: object) -> None:
    """The checks of ``counted``, with nothing instrumented or registered."""
    if metrics is not False and metrics is not None:
        from .metrics._requests import check

        check(metrics)


def check_timeout(timeout: object, wait: bool) -> float | None:
    """A server's bound on a wait (``timeout=``): None (no bound) or seconds, on the limiter's
    clock. Another value than the default without ``wait=True`` is a mistake to report: nothing
    waits, so it would do nothing."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout must be seconds (int or float) or None, got {type(timeout).__name__}")
    if not math.isfinite(timeout) or timeout < 0:
        raise ValueError(f"timeout must be a finite number of seconds >= 0, got {timeout!r}")
    if not wait and timeout != DEFAULT_TIMEOUT:
        raise ValueError("timeout bounds a wait: it needs wait=True")
    return float(timeout)


def check_max_queued(max_queued: object, wait: bool) -> int | None:
    """A server's bound on the requests waiting at once (``max_queued=``): None (no bound) or an
    int >= 0; as ``timeout``, only with ``wait=True`` unless it is the default."""
    if max_queued is None:
        return None
    if isinstance(max_queued, bool) or not isinstance(max_queued, int):
        raise TypeError(f"max_queued must be an int or None, got {type(max_queued).__name__}")
    max_queued = int.__int__(max_queued)
    if max_queued < 0:
        raise ValueError(f"max_queued must be >= 0, got {max_queued}")
    if not wait and max_queued != DEFAULT_MAX_QUEUED:
        raise ValueError("max_queued bounds the waiting requests: it needs wait=True")
    return max_queued


def check_retry_after(retry_after: object) -> int | None:
    """The integrations' ``retry_after``: seconds, sent as whole seconds (rounded up, at least 1)."""
    if retry_after is None:
        return None
    if isinstance(retry_after, bool) or not isinstance(retry_after, int | float):
        raise TypeError(f"retry_after must be seconds (int or float) or None, got {type(retry_after).__name__}")
    if not math.isfinite(retry_after) or retry_after < 0:
        raise ValueError(f"retry_after must be a finite number of seconds, not negative, got {retry_after!r}")
    return _retry_seconds(retry_after)


def check_sync(name: str, function: object) -> None:
    """A sync server's callbacks are plain functions: an ``async def`` one would only return a
    coroutine that nothing can await (a WSGI request has no event loop)."""
    call = inspect.getattr_static(type(function), "__call__", None)  # (an object whose __call__ is async)
    if inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call):
        raise TypeError(f"{name} must be a plain function under WSGI (nothing awaits there), got a coroutine function")


class Policy:
    """One limiter applied to requests, as the middlewares, the dependency and the decorator use it."""

    __slots__ = (
        "_fixed_quota",
        "_lock",
        "_shadow",
        "_waiting",
        "cost",
        "enforce",
        "headers",
        "key",
        "keyed",
        "limiter",
        "max_queued",
        "on_rejected",
        "permit_count",
        "problem_details",
        "retry_after",
        "status_code",
        "timeout",
        "wait",
    )

    def __init__(
        self,
        limiter: object,
        *,
        key: object,
        permit_count: object,
        wait: object,
        timeout: object,
        max_queued: object,
        status_code: object,
        on_rejected: object,
        headers: object,
        retry_after: object = None,
        enforce: object = True,
        cost: object = None,
        problem_details: object = False,
    ) -> None:
        # A rate ("100/minute") or a spec limits each client: a per-key limiter keyed by `key`.
        limiter = limiter_of(limiter, per_key=True)
        if not isinstance(limiter, RateLimiter | KeyedRateLimiter):
            raise TypeError(
                "limiter must be a permits.RateLimiter or KeyedRateLimiter, a spec or a rate such as "
                f"'100/minute', got {type(limiter).__name__}"
            )
        if key is not None and not callable(key):
            raise TypeError(f"key must be callable (key(request) -> key) or None, got {type(key).__name__}")
        if isinstance(permit_count, bool) or not isinstance(permit_count, int):
            raise TypeError(f"permit_count must be an int, got {type(permit_count).__name__}")
        if permit_count < 1:
            raise ValueError(f"permit_count must be at least 1, got {permit_count}")
        if not isinstance(wait, bool):
            raise TypeError(f"wait must be a bool, got {type(wait).__name__}")
        style = check_headers(headers)
        if isinstance(status_code, bool) or not isinstance(status_code, int):
            raise TypeError(f"status_code must be an int, got {type(status_code).__name__}")
        if not 400 <= status_code <= 599:
            raise ValueError(f"status_code must be an HTTP error status (400-599), got {status_code}")
        if on_rejected is not None and not callable(on_rejected):
            raise TypeError(
                f"on_rejected must be callable (on_rejected(request, lease)) or None, got {type(on_rejected).__name__}"
            )
        spec = getattr(limiter, "spec", None)
        most = getattr(spec, "token_limit", getattr(spec, "permit_limit", None))
        if isinstance(most, int) and permit_count > most:  # every request would fail with a ValueError
            raise ValueError(f"permit_count {permit_count} exceeds the limiter's limit of {most}")
        self.limiter = limiter
        self.keyed = isinstance(limiter, KeyedRateLimiter)
        # A plain RateLimiter ignores the key: no key function runs for it.
        self.key: Callable[[Any], Any] | None = (key or client_ip()) if self.keyed else None
        self.permit_count = permit_count
        self.wait = wait
        self.timeout = check_timeout(timeout, bool(wait))
        """Seconds (on the limiter's clock) a request may wait with ``wait=True``, then it is
        rejected with reason ``"timeout"``; None for no bound."""
        self.max_queued = check_max_queued(max_queued, bool(wait))
        """The most requests waiting here at once with ``wait=True``: one more is rejected at once,
        reason ``"queue_full"``; None for no bound."""
        # Requests waiting here now. A lock: a sync server's requests come on threads of their own
        # (taken only by a request that must queue, never on the path of one served at once).
        self._waiting = 0
        self._lock = threading.Lock()
        self.status_code = status_code
        self.on_rejected: Callable[[Any, Lease], Any] | None = on_rejected
        self.headers: str | bool = style or False
        """Which rate-limit fields responses carry (HEADER_STYLES), or False for none."""
        self.retry_after = check_retry_after(retry_after)
        """The ``Retry-After`` (whole seconds, at least 1) of a rejection whose lease knows none (a
        concurrency limit), or None to send none then."""
        # A limiter with one limit for every request (not a chain, not a partitioned limiter whose
        # partitions differ): its figures are worked out here, once, not on every response.
        spec = getattr(limiter, "spec", None)
        fixed = bool(style) and isinstance(spec, specs.Spec) and not isinstance(limiter, _CHAINS)
        self._fixed_quota = (_figures(spec), limiter.name) if fixed else None
        self.enforce = check_enforce(enforce)
        """False: shadow mode. A request the limit refuses is served anyway (headers as enforcing
        would send them), its refusal logged and counted as ``shadow_rejected``."""
        self._shadow = ShadowLog()
        self.problem_details = check_problem_details(problem_details)
        """True: a default rejection's body is an RFC 9457 ``application/problem+json`` document."""
        self.cost = check_cost(cost)
        """``cost(request, response) -> int``: the permits a served request really used, settled once
        its response has been sent; None: ``permit_count``, as taken."""

    def charge(self, key: object, lease: Lease, request: Any, sent: SentResponse) -> None:
        """A served request's response has been sent: its lease settles to ``cost`` (when given)."""
        if self.cost is not None:
            charge(self.cost, self.limiter, key, lease, request, sent)

    def lets_through(self, lease: Lease) -> bool:
        """Whether a refused request is served anyway (shadow mode): then its refusal is logged
        (at most once a second)."""
        if self.enforce:
            return False
        self._shadow.note(self.limiter.name, lease)
        return True

    async def key_of(self, request: Any) -> object:
        if self.key is None:
            return None
        found = self.key(request)
        return await found if inspect.isawaitable(found) else found

    def acquire(self, key: object) -> Awaitable[Lease]:
        """The attempt of a request without ``wait`` (never a blocking call: the limiter's own
        awaitable). With ``wait``: ``at_once``, then ``wait_queued``."""
        limiter = self.limiter
        n = self.permit_count
        if isinstance(limiter, KeyedRateLimiter):
            return limiter.acquire_async(key, n)
        return limiter.acquire_async(n)

    def at_once(self, key: object) -> Lease | None:
        """A wait's immediate outcome, as its first step would give it (a grant, or a failure no
        wait can cure), without a task or an event loop round trip; None when the request must
        queue."""
        limiter = self.limiter
        if isinstance(limiter, KeyedRateLimiter):
            return limiter._try_now(key, self.permit_count)
        return limiter._try_now(self.permit_count)

    @property
    def waiting(self) -> int:
        """How many requests wait here now (``wait=True``, queued in the limiter)."""
        return self._waiting

    def _enter(self) -> bool:
        """A place among the requests waiting here; False when ``max_queued`` of them wait already."""
        with self._lock:
            if self.max_queued is not None and self._waiting >= self.max_queued:
                return False
            self._waiting += 1
            return True

    def _leave(self) -> None:
        with self._lock:
            self._waiting -= 1

    def refused(self, reason: str) -> Lease:
        """A failed lease of this policy's own (``"queue_full"``, ``"timeout"``), as the limiter's
        would be: its permit count, and the limiter's name in its metadata (the rejection's body
        names it)."""
        lease = Lease.denied(reason, metadata={"limiter": self.limiter.name})
        return lease._with_permit_count(self.permit_count)

    async def wait_queued(self, key: object, gone: Callable[[], Awaitable[object]]) -> Lease | None:
        """The wait of a request that must queue (``at_once`` gave None): its lease; a failed one,
        reason ``"queue_full"`` (``max_queued`` requests wait here already: refused at once, not
        queued) or ``"timeout"`` (no permit within ``timeout`` seconds on the limiter's clock);
        or None when ``gone()`` completed first (the client left). A wait that ends without its
        lease leaves the limiter's queue, and a permit granted in that very moment is given back."""
        if not self._enter():
            return self.refused("queue_full")
        try:
            limiter: Any = self.limiter
            # An instrumented limiter (permits.metrics) is handed the wait on the limiter it wraps,
            # to see its outcome ("timeout" too, not a cancellation) as it sees its own waits'.
            observe = getattr(type(limiter), "_observe_wait_async", None)
            inner = limiter if observe is None else limiter.__wrapped__
            n = self.permit_count

            def waiting() -> Awaitable[Lease | None]:
                lease_wait = inner.wait_async(key, n) if self.keyed else inner.wait_async(n)
                expiry = None if self.timeout is None else _expiry(inner._rl_clock, self.timeout, self)
                return wait_or_leave(lease_wait, gone(), expiry)

            found: Lease | None = await (waiting() if observe is None else observe(limiter, waiting, n))
            return found
        finally:
            self._leave()

    async def rejection(self, request: Any, lease: Lease, response_type: type) -> Any:
        """on_rejected's response, or None for the default one. An on_rejected that raises or
        returns no ``response_type`` is logged and gets the default one: a broken callback must
        not turn a rejection into a 500 (nor lose its ``Retry-After``)."""
        if self.on_rejected is None:
            return None
        try:
            found = self.on_rejected(request, lease)
            if inspect.isawaitable(found):
                found = await found
        except Exception:
            logger.exception("on_rejected %r raised; the default rejection is sent", self.on_rejected)
            return None
        expected = f"{response_type.__module__}.{response_type.__qualname__}"
        return self._checked(found, lambda found: isinstance(found, response_type), expected)

    def rejection_sync(self, request: Any, lease: Lease, accepts: Callable[[object], bool], expected: str) -> Any:
        """As ``rejection``, for a sync server: on_rejected is called (never awaited) and its
        answer kept when ``accepts(answer)``; ``expected`` names what it should have returned."""
        if self.on_rejected is None:
            return None
        try:
            found = self.on_rejected(request, lease)
        except Exception:
            logger.exception("on_rejected %r raised; the default rejection is sent", self.on_rejected)
            return None
        if inspect.iscoroutine(found):
            found.close()  # (never awaited: closed, so that it does not warn when collected)
        return self._checked(found, accepts, expected)

    def _checked(self, found: object, accepts: Callable[[object], bool], expected: str) -> Any:
        if found is not None and not accepts(found):
            logger.error(
                "on_rejected %r returned %s, not a %s or None; the default rejection is sent",
                self.on_rejected, type(found).__name__, expected,
            )  # fmt: skip
            return None
        return found

    def key_of_sync(self, request: Any) -> object:
        """The key of a request to a sync server; a key function's awaitable is an error there."""
        if self.key is None:
            return None
        found = self.key(request)
        if inspect.isawaitable(found):
            if inspect.iscoroutine(found):
                found.close()
            raise TypeError(f"key {self.key!r} returned an awaitable: a WSGI server cannot await it")
        return found

    def quota(self, key: object, lease: Lease) -> Quota | None:
        """The IETF headers' figures, when the limiter can tell them; None when it cannot."""
        fixed, style = self._fixed_quota, self.headers
        if not isinstance(style, str):
            return None
        if fixed is not None:
            limiter = self.limiter
            remaining = limiter.available_permits(key) if self.keyed else limiter.available_permits()  # type: ignore[call-arg]
            found: Quota | None = _quota(fixed[0], fixed[1], remaining, lease)
        else:
            found = limiter_quota(self.limiter, key, lease)
        return found if style == "ietf" or found is None else found._replace(style=style)

    def fixed_quota(self, remaining: int, lease: Lease) -> Quota | None:
        """The headers' figures from ``remaining`` permits (read by the extension's WSGI gate),
        for a limit whose figures are fixed (``_fixed_quota``); None without headers."""
        fixed, style = self._fixed_quota, self.headers
        if fixed is None or not isinstance(style, str) or remaining < 0:
            return None
        found = _quota(fixed[0], fixed[1], remaining, lease)
        return found if style == "ietf" else found._replace(style=style)

    def quota_or_release(self, key: object, lease: Lease) -> Quota | None:
        """``quota``, with the lease released should it raise (a limiter's ``available_permits``
        may): a request that never gets its answer never keeps its permit."""
        try:
            return self.quota(key, lease)
        except BaseException:
            lease.release()
            raise

    def rejection_headers(self, lease: Lease, quota: Quota | None) -> list[tuple[str, str]]:
        found = [] if quota is None else quota.headers()
        retry = self.retry_seconds(lease)
        if retry is not None:
            found.append(("Retry-After", str(retry)))
        return found

    def retry_seconds(self, lease: Lease) -> int | None:
        """A rejection's ``Retry-After``: the lease's own, else ``retry_after=``'s, else None."""
        if lease.retry_after is not None:
            return _retry_seconds(lease.retry_after)
        return self.retry_after

    def rejection_body(self, lease: Lease, quota: Quota | None) -> tuple[str, str]:
        """The default rejection's body and its media type: the text naming the limit, or with
        ``problem_details`` the problem document."""
        if not self.problem_details:
            return rejection_text(lease), "text/plain; charset=utf-8"
        name = None if quota is None else quota.name
        return problem_json(lease, name, self.status_code, self.retry_seconds(lease)), PROBLEM_MEDIA_TYPE


def limiter_quota(limiter: RateLimiter | KeyedRateLimiter, key: object, lease: Lease) -> Quota | None:
    """A limiter's figures: those of its limit (a ``permits.specs`` value: engine limiters,
    per-key limiters, a partitioned limiter's partition); for a chain, its member with the fewest
    permits left; None for a limiter that cannot tell (a custom one)."""
    limiter = getattr(limiter, "__wrapped__", limiter)  # (an instrumented limiter: permits.metrics)
    if isinstance(limiter, TranslatedKeyLimiter):  # the figures of the key it stands for
        return limiter_quota(limiter.limiter, limiter.translate(key), lease)
    members = getattr(limiter, "limiters", None)
    if isinstance(limiter, _CHAINS) and members:
        return fewest_remaining(limiter_quota(member, key, lease) for member in members)
    spec, name = getattr(limiter, "spec", None), limiter.name
    if not isinstance(spec, specs.Spec) and isinstance(limiter, PartitionedLimiter):
        # The partition's limit and its name (a partition's own, else this limiter's): the name a
        # failed lease's metadata["limiter"] gives too.
        spec, name = limiter._on_limiter(key, lambda inner: (getattr(inner, "spec", None), inner.name), (None, name))
    if not isinstance(spec, specs.Spec):
        return None
    remaining = limiter.available_permits(key) if isinstance(limiter, KeyedRateLimiter) else limiter.available_permits()
    return quota_of(spec, name, remaining, lease)


def settle_routes(handoff: Handoff, sent: SentResponse) -> None:
    """The routes' costs, once the response has been sent (each logs what goes wrong itself)."""
    for settle in handoff.charges:
        settle(sent)
    handoff.charges.clear()


def route_shadowed(handoff: object) -> None:
    """A route's limit refused a request that shadow mode serves: the middleware's metrics count it
    ``shadow_rejected`` (unless a route refused it for good)."""
    if isinstance(handoff, Handoff) and handoff.route_rejected is None:
        handoff.route_rejected = SHADOW_REJECTED


Handoff = _core.Handoff
"""What a server's middleware and a route's limit share for one request: the route's leases
(``route_leases``, released by the middleware once the response is sent), the route's quotas
(``quotas``, for the headers), its ``on_rejected`` response (``rejection``), its costs
(``charges``), what ``metrics=`` counts for a route's refusal (``route_rejected``), and what the
middleware saw of the response (``started``, ``body_size``). A type of the extension: the WSGI
middleware makes one per request."""


def refund_before_rejection(granted: list[Lease], handoff: object, lease: Lease) -> None:
    """A route's limit rejected the request (its failed ``lease``): the permits its other limits
    (stacked on the same route) granted are given back, as a chain's are, and the middleware's
    ``handoff`` (if any) learns what to count (``route_refusal``). The middleware's global permits
    are not given back: a route's rejection counts against the global limit (its concurrency
    permits come back when the response has been sent, as always)."""
    for earlier in granted:
        earlier._refund()
    if isinstance(handoff, Handoff):
        handoff.route_rejected = route_refusal(lease)


DISCONNECTS = frozenset({"http.disconnect", "websocket.disconnect"})


async def _awaited(waiting: Awaitable[Lease]) -> Lease:
    return await waiting


async def _expiry(clock: Clock, seconds: float, policy: Policy) -> Lease:
    """After ``seconds`` on ``clock``, the failed lease of a wait that timed out. The process's
    monotonic clock is the event loop's own time (one timer); another clock (a ManualClock) is
    followed as a custom limiter's pauses follow it: its ``advance`` ends the pause at once."""
    if isinstance(clock, MonotonicClock):
        await asyncio.sleep(seconds)
    else:
        until = clock.now_ns() + timeout_ns(seconds)
        await _pausing.pause_async(clock, until, None, _never)
    return policy.refused("timeout")


def _never() -> bool:
    return False


async def wait_or_leave(
    waiting: Awaitable[Lease], gone: Awaitable[object], expiry: Awaitable[Lease] | None = None
) -> Lease | None:
    """The lease of a queued wait; None when ``gone`` completes first (the client left); the
    failed lease ``expiry`` returns when it completes first (the wait's timeout). A wait that ends
    without its lease is cancelled, so the request leaves the queue at once; a lease granted in
    that very moment is given back (``_refund``), as if never taken."""
    wait_task = asyncio.ensure_future(_awaited(waiting))
    gone_task = asyncio.ensure_future(gone)
    tasks = [wait_task, gone_task]
    expiry_task = None if expiry is None else asyncio.ensure_future(expiry)
    if expiry_task is not None:
        tasks.append(expiry_task)
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ended = not wait_task.done()
        left = gone_task.done()  # (before the cancellations below: the client's leaving comes first)
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if ended and not wait_task.cancelled() and wait_task.exception() is None:
            wait_task.result()._refund()
    if not ended:
        return wait_task.result()
    if left or expiry_task is None:
        return None
    return expiry_task.result()


__all__ = [
    "DEFAULT_MAX_QUEUED",
    "DEFAULT_TIMEOUT",
    "DISCONNECTS",
    "Handoff",
    "Policy",
    "Quota",
    "check_exempt",
    "check_max_queued",
    "check_metrics",
    "check_sync",
    "check_timeout",
    "counted",
    "encoded_headers",
    "environ_raw_path",
    "fewest_remaining",
    "has_dot_segment",
    "is_exempt",
    "limiter_quota",
    "quota_of",
    "refund_before_rejection",
    "refusal",
    "route_shadowed",
    "settle_routes",
    "wait_or_leave",
]
