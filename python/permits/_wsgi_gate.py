"""The WSGI gate's C path (``_core.WsgiGate``): for a limit it can serve, a request's key, decision,
headers, start_response wrapper and leases' release in one call into the extension, with no
Python frame. Built from a ``permits.wsgi.Gate``; what the C path does not settle (a refusal, a
handoff from an outer middleware, a route's figures, a custom key) goes back to the gate's Python
methods, so the behaviour is the Python path's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _core
from ._gate_limit import gate_limit
from ._quota_headers import _policy_text, _sf_string
from .keys import _ClientIP, _Header, environ_name

if TYPE_CHECKING:
    from .wsgi import Gate

_NO_KEY, _CLIENT_IP, _HEADER, _PYTHON_KEY = 0, 1, 2, 3


def fast_gate(gate: Gate) -> _core.WsgiGate | None:
    """The C path of ``gate``, or None when its options need the Python path for every request
    (``wait``, ``cost``, ``metrics``' request counts, headers a limiter cannot tell in advance)."""
    policy = gate.policy
    if policy.wait or policy.cost is not None or gate.requests is not None:
        return None
    limit = gate_limit(policy)
    if limit is None:
        return None  # (a chain, a custom limiter: its figures are asked per request in Python)
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
    headers = limit.style != 0
    return _core.WsgiGate(
        acquire=limit.acquire,
        available=limit.available,
        permit_count=limit.permit_count,
        keyed=limit.keyed,
        key_kind=kind,
        key_env=key_env,
        key_name=key_name,
        key_slow=gate._key_of,
        style=limit.style,
        policy_pair=_policy_text(limit.name, limit.quota, limit.window) if headers else None,
        state_prefix=_sf_string(limit.name) if headers else None,
        limit_pair=("X-RateLimit-Limit", str(limit.quota)) if headers else None,
        quota=limit.quota,
        period=limit.period,
        fallback=gate._gated,
        refused=gate._refused,
        merge=gate._merge,
        costs=gate._costs,
    )


__all__ = ["fast_gate"]
