"""A rate string ("10/second", ``permits.specs.parse``) or a spec where a limiter is expected: the
decorators and the server integrations make the limiter it stands for."""

from __future__ import annotations

from typing import Any, TypeAlias

from . import specs
from .keyed_limiter import KeyedRateLimiter
from .partitioned import PartitionedLimiter
from .rate_limiter import RateLimiter

#: What the integrations and the decorators accept: a limiter, or a rate or a spec to make one of.
LimiterLike: TypeAlias = "RateLimiter | KeyedRateLimiter | specs.Spec[Any] | specs.SpecList | str"


def limiter_of(limiter: object, *, per_key: bool) -> object:
    """``limiter`` itself, or for a rate or a spec a new limiter of it (no bound on its queue): one
    per key with ``per_key`` (a server limits each client, keyed by the integration's ``key``), else
    one for every call (a decorator). Anything else is left for the caller to check."""
    if isinstance(limiter, str):
        try:
            limiter = specs.parse(limiter)
        except ValueError as exc:
            raise ValueError(f"limiter: {exc}") from None
    if isinstance(limiter, specs.Spec | specs.SpecList):
        return PartitionedLimiter.per_key(limiter) if per_key else limiter.limiter()
    return limiter
