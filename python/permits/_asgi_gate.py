"""The ASGI middleware's C path (``_core.AsgiGate``): a request's key (the built-in ones, read from
the scope), decision and ``RateLimit`` headers (as the encoded bytes a message carries) in one call
into the extension. Only for limiters whose ``acquire`` never blocks (the engine's): a store's
acquisition is awaited in Python."""

from __future__ import annotations

from . import _core
from ._gate_limit import gate_limit
from ._http_policy import Policy
from ._quota_headers import _policy_header, _sf_bytes
from .keys import _ClientIP, _Header

_NO_KEY, _CLIENT_IP, _HEADER = 0, 1, 2
#: Limiters whose acquire decides in process without waiting for anything.
_IN_PROCESS = (_core.PerKey, _core.Limiter)


def asgi_gate(policy: Policy) -> _core.AsgiGate | None:
    """The C admission of ``policy``'s requests, or None when every request needs Python's
    (``wait``, a limiter that is no engine limiter, a key function of the application's)."""
    if policy.wait or not isinstance(policy.limiter, _IN_PROCESS):
        return None
    limit = gate_limit(policy)
    if limit is None:
        return None
    key = policy.key
    key_raw = key_name = None
    if key is None:
        kind = _NO_KEY
    elif isinstance(key, _ClientIP) and not key._trusted:
        kind = _CLIENT_IP
    elif isinstance(key, _Header):
        kind, key_raw, key_name = _HEADER, key._raw_name, key._name
    else:
        return None
    headers = limit.style != 0
    return _core.AsgiGate(
        acquire=limit.acquire,
        available=limit.available,
        permit_count=limit.permit_count,
        keyed=limit.keyed,
        key_kind=kind,
        key_raw=key_raw,
        key_name=key_name,
        key_slow=key.from_scope if isinstance(key, _ClientIP) else None,
        style=limit.style,
        policy_pair=_policy_header(limit.name, limit.quota, limit.window) if headers else None,
        state_prefix=_sf_bytes(limit.name) if headers else None,
        limit_pair=(b"x-ratelimit-limit", b"%d" % limit.quota) if headers else None,
        quota=limit.quota,
        period=limit.period,
    )


__all__ = ["asgi_gate"]
