"""The WSGI gate's C path (``_core.WsgiGate``): for a limit it can serve, a request's key, decision,
headers, start_response wrapper and leases' release in one call into the extension, with no
Python frame. Built from a ``permits.wsgi.Gate``; what the C path does not settle (a refusal, a
handoff from an outer middleware, a route's figures, a custom key) goes back to the gate's Python
methods, so the behaviour is the Python path's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _core
from ._quota_headers import _policy_text, _sf_string
from .keys import _ClientIP, _Header, environ_name

if TYPE_CHECKING:
    from .wsgi import Gate

_STYLES = {None: 0, "ietf": 1, "legacy": 2, "both": 3}
_NO_KEY, _CLIENT_IP, _HEADER, _PYTHON_KEY = 0, 1, 2, 3


def fast_gate(gate: Gate) -> _core.WsgiGate | None:
    """The C path of ``gate``, or None when its options need the Python path for every request
    (``wait``, ``cost``, ``metrics``' request counts, headers a limiter cannot tell in advance)."""
    policy = gate.policy
    if policy.wait or policy.cost is not None or gate.requests is not None:
        return None
    style = policy.headers if isinstance(policy.headers, str) else None
    fixed = policy._fixed_quota
    if style is not None and fixed is None:
        return None  # (a chain, a custom limiter: its figures are asked per request in Python)
    limiter: Any = policy.limiter
    key = policy.key
    key_env = key_name = None
    if key is None:
        kind = _NO_KEY
    elif isinstance(key, _ClientIP) and not key._trusted:
        kind = _CLIENT_IP
    elif isinstance(key, _Header):
        kind, key_env, key_name = _HEADER, environ_name(key._name), key._name
    else:
        kind = _PYTHON_KEY
    available = None
    policy_pair = state_prefix = limit_pair = None
    quota, period = 0, -1
    if style is not None and fixed is not None:
        (quota, window, seconds), name = fixed
        period = -1 if seconds is None else seconds
        policy_pair = _policy_text(name, quota, window)
        state_prefix = _sf_string(name)
        limit_pair = ("X-RateLimit-Limit", str(quota))
        # (a per-key table's own count, without the statistics tuple)
        available = limiter._available if isinstance(limiter, _core.PerKey) else limiter.available_permits
    return _core.WsgiGate(
        acquire=limiter.acquire,
        available=available,
        permit_count=policy.permit_count,
        keyed=policy.keyed,
        key_kind=kind,
        key_env=key_env,
        key_name=key_name,
        key_slow=gate._key_of,
        style=_STYLES[style],
        policy_pair=policy_pair,
        state_prefix=state_prefix,
        limit_pair=limit_pair,
        quota=quota,
        period=period,
        fallback=gate._gated,
        refused=gate._refused,
        merge=gate._merge,
        costs=gate._costs,
    )


__all__ = ["fast_gate"]
