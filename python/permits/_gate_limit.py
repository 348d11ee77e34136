"""What the extension's request gates (``_wsgi_gate``, ``_asgi_gate``) read of a middleware's limit:
the limiter's own ``acquire``, how its available permits are asked, and the ``RateLimit`` headers'
figures worked out once (a header style and a limit known in advance), or None when the headers'
figures must be asked per request in Python (a chain, a custom limiter)."""

from __future__ import annotations

from typing import Any, NamedTuple

from . import _core
from ._http_policy import Policy

STYLES = {None: 0, "ietf": 1, "legacy": 2, "both": 3}


class GateLimit(NamedTuple):
    acquire: Any
    available: Any
    permit_count: int
    keyed: bool
    style: int
    name: str
    quota: int
    window: int | None
    period: int  # whole seconds until more permits; -1 when time frees nothing


def gate_limit(policy: Policy) -> GateLimit | None:
    """The limit as a gate reads it, or None when its headers need Python per request."""
    style = policy.headers if isinstance(policy.headers, str) else None
    fixed = policy._fixed_quota
    if style is not None and fixed is None:
        return None
    limiter: Any = policy.limiter
    available = None
    name, quota, window, period = "", 0, None, -1
    if style is not None and fixed is not None:
        (quota, window, seconds), name = fixed
        period = -1 if seconds is None else seconds
        # (a per-key table's own count, without the statistics tuple)
        available = limiter._available if isinstance(limiter, _core.PerKey) else limiter.available_permits
    return GateLimit(
        limiter.acquire, available, policy.permit_count, policy.keyed, STYLES[style], name, quota, window, period
    )


__all__ = ["STYLES", "GateLimit", "gate_limit"]
