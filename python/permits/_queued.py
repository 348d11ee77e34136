"""A request that waits for its permit (``wait=True``): a free permit is taken at once, with no
task and no watcher; only a request that must queue pays for them."""

from __future__ import annotations

from ._core import Lease
from ._http_policy import Policy
from .keyed_limiter import KeyedRateLimiter


def at_once(policy: Policy, key: object) -> Lease | None:
    """The wait's immediate outcome, as its first step would give it (a grant, or a failure no
    wait can cure), without a task or an event loop round trip; None when the request must queue."""
    limiter = policy.limiter
    if isinstance(limiter, KeyedRateLimiter):
        return limiter._try_now(key, policy.permit_count)
    return limiter._try_now(policy.permit_count)


__all__ = ["at_once"]
