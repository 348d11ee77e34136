"""The part of every server integration that knows no framework: one policy (a limiter, a key, how
many permits, wait or reject, what a rejection looks like), checked when it is built; the
acquisition; the ``Retry-After`` and IETF ``RateLimit`` / ``RateLimit-Policy`` headers."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from . import specs
from ._core import Lease
from ._sync_leaving import client_socket, enqueue_of, wait_unless_left
from .chain import ChainedLimiter, ChainedPartitionedLimiter
from .keyed_limiter import KeyedRateLimiter
from .keys import _ClientIP, client_ip
from .partitioned import PartitionedLimiter
from .rate_limiter import RateLimiter

if TYPE_CHECKING:
    from .metrics._requests import RequestCounter

_CHAINS = (ChainedLimiter, ChainedPartitionedLimiter)
#: The reason of the failed lease of a sync server's queued request whose client left.
CLIENT_LEFT = "client_left"
logger = logging.getLogger("permits")


class Quota(NamedTuple):  # (a tuple: made on every request, and cheaper than a frozen dataclass)
    """What the IETF headers say about one limiter, for one request."""

    name: str
    quota: int
    window: int | None  # seconds; None for a concurrency limit (no time window)
    remaining: int
    reset: int | None  # seconds until more permits; None when time frees nothing

    def headers(self) -> list[tuple[str, str]]:
        # (made on every response of a sync server: the part that never changes is cached)
        name = _sf_string(self.name)
        state = f"{name};r={self.remaining}" if self.reset is None else f"{name};r={self.remaining};t={self.reset}"
        return [_policy_text(self.name, self.quota, self.window), ("RateLimit", state)]


def rejection_text(lease: Lease) -> str:
    """The default rejection's body: it says which limit refused (its limiter's name), so that a
    client or a log tells a per-key limit from a global one."""
    name = lease.metadata.get("limiter")
    return "Too Many Requests" if name is None else f"Too Many Requests (limiter: {name})"


def encoded_headers(quota: Quota) -> tuple[tuple[bytes, bytes], tuple[bytes, bytes]]:
    """The quota's headers as an ASGI message carries them (lowercase names, latin-1 bytes): the
    same text as ``headers()``, made on every response, so the parts that never change are cached."""
    name = _sf_bytes(quota.name)
    if quota.reset is None:
        state = b"%s;r=%d" % (name, quota.remaining)
    else:
        state = b"%s;r=%d;t=%d" % (name, quota.remaining, quota.reset)
    return _policy_header(quota.name, quota.quota, quota.window), (b"ratelimit", state)


@functools.lru_cache(maxsize=256)
def _sf_bytes(name: str) -> bytes:
    return _sf_string(name).encode("latin-1")


@functools.lru_cache(maxsize=256)
def _policy_header(name: str, quota: int, window: int | None) -> tuple[bytes, bytes]:
    policy = b"%s;q=%d" % (_sf_bytes(name), quota) + (b"" if window is None else b";w=%d" % window)
    return b"ratelimit-policy", policy


@functools.lru_cache(maxsize=256)
def _policy_text(name: str, quota: int, window: int | None) -> tuple[str, str]:
    policy = f"{_sf_string(name)};q={quota}" + ("" if window is None else f";w={window}")
    return "RateLimit-Policy", policy


@functools.lru_cache(maxsize=256)  # a few limiter names, formatted on every response
def _sf_string(text: str) -> str:
    """An RFC 8941 string: printable ASCII, with quote and backslash escaped (others dropped)."""
    kept = "".join(c for c in text if " " <= c <= "~")
    return '"' + kept.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _seconds(value: float) -> int:
    return max(0, math.ceil(value - 1e-9))  # whole seconds rounded up (float noise aside)


def _retry_seconds(value: float) -> int:
    """A rejection's wait in whole seconds: at least 1, so that a client told 0 does not come
    straight back (a nanosecond before a refill rounds to 0)."""
    return max(1, _seconds(value))


def fewest_remaining(quotas: Iterable[Quota | None]) -> Quota | None:
    """Of several limiters' quotas, the one with the fewest remaining permits (the binding one)."""
    found = [q for q in quotas if q is not None]
    return min(found, key=lambda q: q.remaining) if found else None


def check_exempt(exempt: object) -> tuple[str, ...]:
    if isinstance(exempt, str):
        exempt = (exempt,)
    if not isinstance(exempt, Iterable):
        raise TypeError(f"exempt must be path prefixes (e.g. ('/health',)), got {type(exempt).__name__}")
    prefixes = []
    for prefix in exempt:
        if not isinstance(prefix, str) or not prefix.startswith("/"):
            raise ValueError(f"exempt paths must be str starting with '/', got {prefix!r}")
        prefixes.append(prefix.rstrip("/") or "/")
    return tuple(prefixes)


def counted(metrics: object, limiter: Any) -> tuple[Any, RequestCounter | None]:
    """A middleware's ``metrics=``: the limiter to use (instrumented) and the counter of its requests
    by result; with False or None, the limiter itself and no counter. permits.metrics (and its
    exporter library) is imported only when asked for."""
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
    """A sync integration's bound on a wait: None (no bound) or seconds, only with ``wait=True``
    (without it nothing waits, and a timeout that does nothing is a mistake to report)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout must be seconds (int or float) or None, got {type(timeout).__name__}")
    if not math.isfinite(timeout) or timeout < 0:
        raise ValueError(f"timeout must be a finite number of seconds >= 0, got {timeout!r}")
    if not wait:
        raise ValueError("timeout bounds a wait: it needs wait=True")
    return float(timeout)


def check_sync(name: str, function: object) -> None:
    """A sync server's callbacks are plain functions: an ``async def`` one would only return a
    coroutine that nothing can await (a WSGI request has no event loop)."""
    call = inspect.getattr_static(type(function), "__call__", None)  # (an object whose __call__ is async)
    if inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call):
        raise TypeError(f"{name} must be a plain function under WSGI (nothing awaits there), got a coroutine function")


def is_exempt(path: str, prefixes: tuple[str, ...]) -> bool:
    """A path is exempt when it equals a prefix or continues it after a '/', and has no dot segment
    (``/health/../admin`` would leave the prefix in an app, or a proxy, that resolves it)."""
    if "/." in path and any(segment in (".", "..") for segment in path.split("/")):
        return False
    return any(prefix == "/" or path == prefix or path.startswith(prefix + "/") for prefix in prefixes)


class Policy:
    """One limiter applied to requests, as the middlewares, the dependency and the decorator use it."""

    __slots__ = (
        "_fixed_quota",
        "headers",
        "key",
        "keyed",
        "limiter",
        "on_rejected",
        "permit_count",
        "status_code",
        "wait",
    )

    def __init__(
        self,
        limiter: object,
        *,
        key: object,
        permit_count: object,
        wait: object,
        status_code: object,
        on_rejected: object,
        headers: object,
    ) -> None:
        if not isinstance(limiter, RateLimiter | KeyedRateLimiter):
            raise TypeError(f"limiter must be a permits.RateLimiter or KeyedRateLimiter, got {type(limiter).__name__}")
        if key is not None and not callable(key):
            raise TypeError(f"key must be callable (key(request) -> key) or None, got {type(key).__name__}")
        if isinstance(permit_count, bool) or not isinstance(permit_count, int):
            raise TypeError(f"permit_count must be an int, got {type(permit_count).__name__}")
        if permit_count < 1:
            raise ValueError(f"permit_count must be at least 1, got {permit_count}")
        for flag, value in (("wait", wait), ("headers", headers)):
            if not isinstance(value, bool):
                raise TypeError(f"{flag} must be a bool, got {type(value).__name__}")
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
        self.status_code = status_code
        self.on_rejected: Callable[[Any, Lease], Any] | None = on_rejected
        self.headers = headers
        # A limiter with one limit for every request (not a chain, not a partitioned limiter whose
        # partitions differ): its figures are worked out here, once, not on every response.
        spec = getattr(limiter, "spec", None)
        fixed = headers and isinstance(spec, specs.Spec) and not isinstance(limiter, _CHAINS)
        self._fixed_quota = (_figures(spec), limiter.name) if fixed else None

    async def key_of(self, request: Any) -> object:
        if self.key is None:
            return None
        found = self.key(request)
        return await found if inspect.isawaitable(found) else found

    def acquire(self, key: object) -> Awaitable[Lease]:
        """The one acquisition of a request: an attempt, or with ``wait`` a place in the queue.
        Never a blocking call: the limiter's own awaitables."""
        limiter = self.limiter
        n = self.permit_count
        if isinstance(limiter, KeyedRateLimiter):
            return limiter.wait_async(key, n) if self.wait else limiter.acquire_async(key, n)
        return limiter.wait_async(n) if self.wait else limiter.acquire_async(n)

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

    def acquire_sync(self, key: object, timeout: float | None) -> Lease:
        """The one acquisition of a request to a sync server: an attempt, or with ``wait`` a
        blocking wait of at most ``timeout`` seconds on the limiter's clock (the engine's waits
        release the GIL: the server's other threads go on). A wait whose outcome is known at
        once (a free permit) takes the attempt's fast path, as the asyncio integrations do."""
        limiter = self.limiter
        n = self.permit_count
        if isinstance(limiter, KeyedRateLimiter):
            if not self.wait:
                return limiter.acquire(key, n)
            now = limiter._try_now(key, n)
            return limiter.wait(key, n, timeout) if now is None else now
        if not self.wait:
            return limiter.acquire(n)
        now = limiter._try_now(n)
        return limiter.wait(n, timeout) if now is None else now

    def quota(self, key: object, lease: Lease) -> Quota | None:
        """The IETF headers' figures, when the limiter can tell them; None when it cannot."""
        fixed = self._fixed_quota
        if fixed is None:
            return limiter_quota(self.limiter, key, lease) if self.headers else None
        limiter = self.limiter
        remaining = limiter.available_permits(key) if self.keyed else limiter.available_permits()  # type: ignore[call-arg]
        return _quota(fixed[0], fixed[1], remaining, lease)

    def rejection_headers(self, lease: Lease, quota: Quota | None) -> list[tuple[str, str]]:
        found = [] if quota is None else quota.headers()
        if lease.retry_after is not None:
            found.append(("Retry-After", str(_retry_seconds(lease.retry_after))))
        return found


class SyncLimit:
    """A limit of a sync (WSGI) server, checked when it is built: the policy, the bound on a wait,
    the exempt paths. What the WSGI middleware and the Flask and Django integrations share; its
    defaults are theirs."""

    __slots__ = ("_client_ip", "exempt", "policy", "timeout")

    def __init__(
        self,
        limiter: object,
        *,
        key: object = None,
        permit_count: object = 1,
        wait: object = False,
        timeout: object = None,
        status_code: object = 429,
        on_rejected: object = None,
        headers: object = True,
        exempt: object = (),
    ) -> None:
        self.policy = Policy(
            limiter, key=key, permit_count=permit_count, wait=wait, status_code=status_code,
            on_rejected=on_rejected, headers=headers,
        )  # fmt: skip
        """The checked options: ``policy.limiter`` (the instrumented one when the middleware has
        ``metrics``), ``policy.key`` (the key function; ``client_ip()`` by default for a keyed limiter, None for a
        plain one), ``permit_count``, ``wait``, ``status_code``, ``on_rejected``, ``headers``."""
        check_sync("key", key)
        check_sync("on_rejected", on_rejected)
        self.timeout = check_timeout(timeout, bool(self.policy.wait))
        """Seconds a request may wait for its permits with ``wait=True`` (then it is rejected), or
        None for no bound."""
        self.exempt = check_exempt(exempt)
        """The exempt path prefixes, as a tuple (a trailing ``/`` dropped): a path equal to one, or
        below it, skips this limit."""
        # The built-in client_ip reads the environ itself: no request object is made for it.
        self._client_ip = self.policy.key if isinstance(self.policy.key, _ClientIP) else None

    def admit(self, environ: dict[str, Any], request: Callable[[], Any]) -> tuple[Lease, Quota | None]:
        """The request's lease (granted or not) and its headers' figures; ``request()`` makes what
        a key function receives (only called when one runs)."""
        policy = self.policy
        key: object
        if policy.key is None:
            key = None
        elif self._client_ip is not None:
            key = self._client_ip.from_environ(environ)
        else:
            key = policy.key_of_sync(request())
        sock = client_socket(environ) if policy.wait else None
        lease = policy.acquire_sync(key, self.timeout) if sock is None else self._wait_unless_left(key, sock)
        try:
            return lease, policy.quota(key, lease)
        except BaseException:
            lease.release()
            raise

    def _wait_unless_left(self, key: object, sock: Any) -> Lease:
        """``acquire_sync`` with ``wait``, whose queued wait ends when the client leaves: then a
        failed lease, reason ``"client_left"`` (the response goes nowhere)."""
        policy = self.policy
        limiter: Any = policy.limiter
        n = policy.permit_count
        keyed = isinstance(limiter, KeyedRateLimiter)
        now = limiter._try_now(key, n) if keyed else limiter._try_now(n)
        if now is not None:
            return now  # type: ignore[no-any-return]
        # An instrumented limiter (permits.metrics) queues in the engine of the limiter it wraps:
        # its observer is handed that wait, to see it as it sees the waits of its own members.
        observe = getattr(type(limiter), "_observe_wait", None)
        enqueue = enqueue_of(limiter if observe is None else limiter.__wrapped__)
        if enqueue is None:  # (a limiter that does not queue in the engine: its own blocking wait)
            return limiter.wait(key, n, self.timeout) if keyed else limiter.wait(n, self.timeout)  # type: ignore[no-any-return]

        def waiting() -> Lease | None:
            return wait_unless_left(enqueue, key, keyed, n, self.timeout, sock)

        lease = waiting() if observe is None else observe(limiter, waiting)
        if lease is None:
            return Lease.denied(reason=CLIENT_LEFT, metadata={"limiter": limiter.name})
        return lease


def limiter_quota(limiter: RateLimiter | KeyedRateLimiter, key: object, lease: Lease) -> Quota | None:
    """A limiter's figures: those of its limit (a ``permits.specs`` value: engine limiters,
    per-key limiters, a partitioned limiter's partition); for a chain, its member with the fewest
    permits left; None for a limiter that cannot tell (a custom one)."""
    limiter = getattr(limiter, "__wrapped__", limiter)  # (an instrumented limiter: permits.metrics)
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


@functools.lru_cache(maxsize=256)  # specs are values: the figures of each are worked out once
def _figures(spec: specs.Spec[Any]) -> tuple[int, int | None, float | None]:
    """(quota, window in whole seconds, replenishment period) of a limit."""
    if isinstance(spec, specs.Concurrency):
        return spec.permit_limit, None, None
    if isinstance(spec, specs.TokenBucket):
        # The bucket's quota is its size, over the time it takes to fill from empty: q/w is the rate.
        periods = math.ceil(spec.token_limit / spec.tokens_per_period)
        return spec.token_limit, max(1, _seconds(spec.replenishment_period * periods)), spec.replenishment_period
    if isinstance(spec, specs.FixedWindow | specs.SlidingWindow | specs.SlidingWindowCounter):
        return spec.permit_limit, max(1, _seconds(spec.window)), spec.replenishment_period
    return 0, None, None  # a spec this module does not know yet: no time figures


def quota_of(spec: specs.Spec[Any], name: str, remaining: int, lease: Lease) -> Quota:
    """``t`` (seconds until more): a failed lease's own ``retry_after``; otherwise at most one
    replenishment period (the limiter does not say where in its period it is), 0 when full."""
    return _quota(_figures(spec), name, remaining, lease)


def _quota(figures: tuple[int, int | None, float | None], name: str, remaining: int, lease: Lease) -> Quota:
    remaining = max(0, remaining)
    quota, window, period = figures
    if period is None:
        return Quota(name, quota, window, remaining, None)
    if not lease and lease.retry_after is not None:
        reset = _retry_seconds(lease.retry_after)
    else:
        reset = 0 if remaining >= quota else _seconds(period)
    return Quota(name, quota, window, remaining, reset)


class Handoff:
    """What a server's middleware and a route's limit share for one request: the route's leases
    (released by the middleware once the response is sent), the route's quotas (for the
    headers) and its on_rejected response."""

    __slots__ = ("quotas", "rejection", "route_leases", "route_rejected")

    def __init__(self) -> None:
        self.route_leases: list[Lease] = []
        """The leases the route's limits granted, released by the middleware once the response has
        been sent."""
        self.route_rejected: str | None = None
        """What ``metrics=`` counts for a request a route's limit did not admit: ``"route_limiter"``
        (refused) or ``"client_left"`` (its client left while queued); None while admitted."""
        self.quotas: list[Quota | None] = []
        """The route's limits' figures for the ``RateLimit`` headers: the response carries those of
        the limit with the fewest permits left."""
        self.rejection: tuple[Any, list[tuple[str, str]]] | None = None
        """A route's ``on_rejected`` response and its headers, which the middleware sends in place of
        the framework's answer to the route's rejection; None when there is none."""


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


async def wait_or_leave(waiting: Awaitable[Lease], gone: Awaitable[object]) -> Lease | None:
    """The lease of a queued wait, or None when ``gone`` completes first (the client left): the
    wait is cancelled, so the request leaves the queue at once; a lease granted in that very
    moment is given back (``_refund``), as if never taken."""
    wait_task = asyncio.ensure_future(_awaited(waiting))
    gone_task = asyncio.ensure_future(gone)
    try:
        await asyncio.wait({wait_task, gone_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        left = not wait_task.done()
        for task in (wait_task, gone_task):
            if not task.done():
                task.cancel()
        await asyncio.gather(wait_task, gone_task, return_exceptions=True)
        if left and not wait_task.cancelled() and wait_task.exception() is None:
            wait_task.result()._refund()
    if left:
        return None
    return wait_task.result()


__all__ = [
    "DISCONNECTS",
    "Handoff",
    "Policy",
    "Quota",
    "SyncLimit",
    "check_exempt",
    "check_metrics",
    "check_sync",
    "check_timeout",
    "counted",
    "encoded_headers",
    "fewest_remaining",
    "is_exempt",
    "limiter_quota",
    "quota_of",
    "refund_before_rejection",
    "refusal",
    "wait_or_leave",
]
