"""What the rate-limit headers say (draft-ietf-httpapi-ratelimit-headers-11's ``RateLimit`` and
``RateLimit-Policy``, or the legacy ``X-RateLimit-*``), worked out from a limit and a lease, and the
default rejection's text."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Any, NamedTuple

from . import specs
from ._core import Lease

#: The integrations' ``headers=``: the fields each style sends.
HEADER_STYLES = ("ietf", "legacy", "both")


def check_headers(headers: object) -> str | None:
    """``headers=``: True or "ietf" (the IETF ``RateLimit`` and ``RateLimit-Policy`` fields),
    "legacy" (``X-RateLimit-Limit``, ``-Remaining``, ``-Reset``), "both", or False (none)."""
    if headers is True:
        return "ietf"
    if headers is False:
        return None
    if isinstance(headers, str) and headers in HEADER_STYLES:
        return headers
    raise TypeError(f"headers must be True, False, 'ietf', 'legacy' or 'both', got {headers!r}")


class Quota(NamedTuple):  # (a tuple: made on every request, and cheaper than a frozen dataclass)
    """What the rate-limit headers say about one limiter, for one request."""

    name: str
    quota: int
    window: int | None  # seconds; None for a concurrency limit (no time window)
    remaining: int
    reset: int | None  # seconds until more permits; None when time frees nothing
    style: str = "ietf"  # which fields: HEADER_STYLES

    def headers(self) -> list[tuple[str, str]]:
        # (made on every response of a sync server: the part that never changes is cached)
        found: list[tuple[str, str]] = []
        if self.style != "legacy":
            name = _sf_string(self.name)
            state = f"{name};r={self.remaining}" if self.reset is None else f"{name};r={self.remaining};t={self.reset}"
            found = [_policy_text(self.name, self.quota, self.window), ("RateLimit", state)]
            if self.style == "ietf":  # (the default: no more fields)
                return found
        if self.style != "ietf":
            found += [("X-RateLimit-Limit", str(self.quota)), ("X-RateLimit-Remaining", str(self.remaining))]
            if self.reset is not None:
                found.append(("X-RateLimit-Reset", str(self.reset)))
        return found


def rejection_text(lease: Lease) -> str:
    """The default rejection's body: it says which limit refused (its limiter's name), so that a
    client or a log tells a per-key limit from a global one."""
    name = lease.metadata.get("limiter")
    return "Too Many Requests" if name is None else f"Too Many Requests (limiter: {name})"


def encoded_headers(quota: Quota) -> tuple[tuple[bytes, bytes], ...]:
    """The quota's headers as an ASGI message carries them (lowercase names, latin-1 bytes): the
    same text as ``headers()``, made on every response, so the parts that never change are cached."""
    if quota.style != "ietf":
        return tuple((name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in quota.headers())
    name = _sf_bytes(quota.name)
    if quota.reset is None:
        state = b"%s;r=%d" % (name, quota.remaining)
    else:
        state = b"%s;r=%d;t=%d" % (name, quota.remaining, quota.reset)
    return _policy_header(quota.name, quota.quota, quota.window), (b"ratelimit", state)


@functools.lru_cache(maxsize=256)
def _sf_bytes(name: str) -> bytes:
    return _sf_string(name).encode("latin-1")


# A limit with no window is a concurrency limit: its quota unit says so (the draft's "qu").
@functools.lru_cache(maxsize=256)
def _policy_header(name: str, quota: int, window: int | None) -> tuple[bytes, bytes]:
    policy = b"%s;q=%d" % (_sf_bytes(name), quota) + (
        b';qu="concurrent-requests"' if window is None else b";w=%d" % window
    )
    return b"ratelimit-policy", policy


@functools.lru_cache(maxsize=256)
def _policy_text(name: str, quota: int, window: int | None) -> tuple[str, str]:
    policy = f"{_sf_string(name)};q={quota}" + (';qu="concurrent-requests"' if window is None else f";w={window}")
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


#: (quota, window in whole seconds or None, replenishment period in whole seconds or None)
Figures = tuple[int, int | None, int | None]


@functools.lru_cache(maxsize=256)  # specs are values: the figures of each are worked out once
def _figures(spec: specs.Spec[Any]) -> Figures:
    """A limit's figures, its period rounded up to whole seconds (what ``t`` says of it)."""
    quota, window, period = _exact_figures(spec)
    return quota, window, None if period is None else _seconds(period)


def _exact_figures(spec: specs.Spec[Any]) -> tuple[int, int | None, float | None]:
    """(quota, window in whole seconds, replenishment period) of a limit."""
    if isinstance(spec, specs.Concurrency):
        return spec.permit_limit, None, None
    if isinstance(spec, specs.TokenBucket):
        # The bucket's quota is its size, over the time it takes to fill from empty: q/w is the rate.
        periods = math.ceil(spec.token_limit / spec.tokens_per_period)
        return spec.token_limit, max(1, _seconds(spec.replenishment_period * periods)), spec.replenishment_period
    if isinstance(spec, specs.FixedWindow | specs.SlidingWindow | specs.SlidingWindowCounter):
        return spec.permit_limit, max(1, _seconds(spec.window)), spec.replenishment_period
    if isinstance(spec, specs.SlidingLog):
        # Every permit is back one window after it was taken: more comes within the window.
        return spec.permit_limit, max(1, _seconds(spec.window)), spec.window
    return 0, None, None  # a spec this module does not know yet: no time figures


def quota_of(spec: specs.Spec[Any], name: str, remaining: int, lease: Lease) -> Quota:
    """``t`` (seconds until more): a failed lease's own ``retry_after``; otherwise at most one
    replenishment period (the limiter does not say where in its period it is), 0 when full."""
    return _quota(_figures(spec), name, remaining, lease)


def _quota(figures: Figures, name: str, remaining: int, lease: Lease) -> Quota:
    if remaining < 0:
        remaining = 0
    quota, window, period = figures
    if period is None:
        return Quota(name, quota, window, remaining, None)
    if lease or lease.retry_after is None:
        return Quota(name, quota, window, remaining, 0 if remaining >= quota else period)
    return Quota(name, quota, window, remaining, _retry_seconds(lease.retry_after))


__all__ = [
    "HEADER_STYLES",
    "Quota",
    "check_headers",
    "encoded_headers",
    "fewest_remaining",
    "quota_of",
    "rejection_text",
]
