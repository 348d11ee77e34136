"""Django REST framework: ``permits.drf.Throttle``, a throttle class whose limit is a permits limiter
(extra ``[drf]``).

Subclass it with the limiter (or a rate such as ``"100/hour"``, or a spec) and, optionally, the key::

    class PerUser(Throttle):
        limiter = "100/hour"                           # a limit per key, made once for the class
        key = staticmethod(lambda request, view: request.user.pk)

    class SearchView(APIView):
        throttle_classes = [PerUser]

DRF asks ``allow_request(request, view)`` and, when it is refused, ``wait()``, which is the lease's
``retry_after``: DRF's ``Throttled`` response says ``Retry-After`` from it. The limit is the
limiter's, so it holds under concurrency (DRF's own throttles read, then write a cache entry: two
requests at once may both pass), and with a shared-memory, Redis or PostgreSQL limiter across
processes and hosts; an instrumented limiter (``permits.metrics``) is counted as any other.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any, ClassVar, cast

from rest_framework.throttling import BaseThrottle

from ._core import Lease
from ._rates import LimiterLike, limiter_of
from .keyed_limiter import KeyedRateLimiter
from .rate_limiter import RateLimiter
from .specs import Concurrency

_made_lock = threading.Lock()


class Throttle(BaseThrottle):  # type: ignore[misc]
    """A DRF throttle of a permits limiter: ``limiter`` (a limiter, a spec or a rate; a rate or a
    spec makes a per-key limiter, once per class), ``key(request, view)`` (the key of a keyed
    limiter; by default the authenticated user's pk, else DRF's client identity, as DRF's
    ``UserRateThrottle``) and ``permit_count`` (the permits a request takes)."""

    limiter: ClassVar[LimiterLike | None] = None
    key: ClassVar[Callable[[Any, Any], object] | None] = None
    permit_count: ClassVar[int] = 1

    def __init__(self) -> None:
        self.lease: Lease | None = None
        """The request's lease, once ``allow_request`` has run."""

    @classmethod
    def made_limiter(cls) -> RateLimiter | KeyedRateLimiter:
        """The class's limiter: ``limiter`` itself, or the per-key limiter its rate or spec makes
        (made once, on first use, and kept by the class)."""
        made: Any = cls.__dict__.get("_permits_limiter")
        if made is not None:
            return cast("RateLimiter | KeyedRateLimiter", made)
        with _made_lock:
            made = cls.__dict__.get("_permits_limiter")
            if made is None:
                given = inspect.getattr_static(cls, "limiter", None)
                if given is None:
                    raise TypeError(f"{cls.__name__} needs a limiter: a permits limiter, a spec or a rate")
                made = limiter_of(given, per_key=True)
                if not isinstance(made, RateLimiter | KeyedRateLimiter):
                    raise TypeError(
                        f"{cls.__name__}.limiter must be a permits limiter, a spec or a rate such as '100/hour', "
                        f"got {type(given).__name__}"
                    )
                if _releases(made):
                    raise TypeError(
                        f"{cls.__name__}.limiter is a concurrency limit: a DRF throttle cannot hold a permit "
                        "until the response is sent (use the Django middleware or @limit for that)"
                    )
                count = cls.permit_count
                if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                    raise ValueError(f"{cls.__name__}.permit_count must be an int of at least 1, got {count!r}")
                cls._permits_limiter = made
        return cast("RateLimiter | KeyedRateLimiter", made)

    def key_of(self, request: Any, view: Any) -> object:
        """The request's key: ``key(request, view)`` when given, else the user's pk when
        authenticated, else DRF's identity of the client (``get_ident``)."""
        key = inspect.getattr_static(type(self), "key", None)
        if isinstance(key, staticmethod | classmethod):
            key = key.__get__(None, type(self))
        if key is not None:
            return key(request, view)
        user = getattr(request, "user", None)
        if user is not None and getattr(user, "is_authenticated", False):
            return ("user", user.pk)
        return ("ident", self.get_ident(request))

    def allow_request(self, request: Any, view: Any) -> bool:
        limiter = self.made_limiter()
        n = type(self).permit_count
        if isinstance(limiter, KeyedRateLimiter):
            self.lease = limiter.acquire(self.key_of(request, view), n)
        else:
            self.lease = limiter.acquire(n)
        return bool(self.lease)

    def wait(self) -> float | None:
        """Seconds until the refused request could pass (the lease's ``retry_after``), or None."""
        return None if self.lease is None else self.lease.retry_after


def _releases(limiter: object) -> bool:
    """Whether a limiter's permits come back on release (a concurrency limit), as far as it says."""
    return isinstance(getattr(limiter, "spec", None), Concurrency)


__all__ = ["Throttle"]
