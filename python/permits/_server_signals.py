"""What a server's response says about its limit: throttled or not, when to come back, and the
quota it states (permits.AdaptiveLimiter reads it).

Read from the status and the headers: ``Retry-After`` (seconds, or an HTTP date, RFC 9110), the
IETF fields ``RateLimit-Policy: "p";q=100;w=60`` and ``RateLimit: "p";r=42;t=17``
(draft-ietf-httpapi-ratelimit-headers), and the older ``X-RateLimit-Limit``, ``-Remaining`` and
``-Reset`` (seconds until the reset, or the reset's time in seconds since the epoch, as GitHub
sends it). A value that cannot be read is left out, never guessed.
"""

from __future__ import annotations

import contextlib
import email.utils
import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ._pacing import parse_retry_after

#: The statuses that say "too many": a server's rate limit (429) or its overload (503).
THROTTLING = frozenset({429, 503})

#: A reset this large is a time since the epoch (2001 on), not seconds from now.
_EPOCH_FROM = 1_000_000_000

_ITEM_PARAM = re.compile(r";\s*([a-z*][a-z0-9_.*-]*)\s*(?:=\s*(\"(?:[^\"\\]|\\.)*\"|[^;,\s]*))?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Signals:
    """One response's word on the limit: ``throttled`` (429/503); ``retry_after`` (seconds from now);
    the quota it states: ``remaining`` permits until ``reset`` (seconds from now), ``quota`` per
    ``window`` (seconds). None where the response says nothing."""

    throttled: bool
    retry_after: float | None = None
    remaining: int | None = None
    reset: float | None = None
    quota: int | None = None
    window: float | None = None


def _pairs(headers: object) -> Iterable[tuple[str, str]]:
    items: Iterable[object]
    if isinstance(headers, Mapping):
        multi = getattr(headers, "multi_items", None) or getattr(headers, "items", None)
        items = multi() if callable(multi) else ()
    elif headers is None:
        items = ()
    elif isinstance(headers, Iterable) and not isinstance(headers, str | bytes):
        items = headers
    else:
        raise TypeError(f"headers must be a mapping or pairs of (name, value), not {type(headers).__name__}")
    for pair in items:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(f"headers must be pairs of (name, value), got {pair!r}")
        name, value = pair
        if isinstance(name, bytes):
            name = name.decode("latin-1")
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if isinstance(name, str) and isinstance(value, str):
            yield name.lower(), value


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.strip().strip('"'))
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _retry_after(text: str, date: str | None, wall_now: float | None) -> float | None:
    """``Retry-After``: delay-seconds, or an HTTP date counted from the response's ``Date`` when
    it has one (a skewed client clock then does not matter), else from this host's clock."""
    now = time.time() if wall_now is None else wall_now
    if date is not None:
        with contextlib.suppress(TypeError, ValueError, IndexError, OverflowError):
            now = email.utils.parsedate_to_datetime(date.strip()).timestamp()
    return parse_retry_after(text, now=now)


def _items(field: str) -> list[dict[str, str]]:
    """A structured-field list's items, each as its parameters (the item itself under "")."""
    found: list[dict[str, str]] = []
    for raw in re.split(r",(?=(?:[^\"]*\"[^\"]*\")*[^\"]*$)", field):
        text = raw.strip()
        if not text:
            continue
        head = re.match(r"(\"(?:[^\"\\]|\\.)*\"|[^;]*)", text)
        params = {"": head.group(1).strip() if head else ""}
        for match in _ITEM_PARAM.finditer(text, head.end() if head else 0):
            params[match.group(1).lower()] = (match.group(2) or "").strip('"')
        found.append(params)
    return found


def _pace(state: dict[str, str], policies: list[dict[str, str]]) -> tuple[float, int, float, int | None, float | None]:
    """(pace, remaining, reset, quota, window) of one RateLimit item, its policy found by name (or
    the only one): its remaining permits over its reset, never faster than its quota per window."""
    r, t = _number(state.get("r")), _number(state.get("t"))
    assert r is not None and t is not None
    named = [p for p in policies if p.get("") == state.get("")] or (policies if len(policies) == 1 else [])
    q = w = None
    if named:
        q, w = _number(named[0].get("q")), _number(named[0].get("w"))
    pace = r / t if t > 0 else math.inf
    if q is not None and w:
        pace = min(pace, q / w)
    return pace, int(r), t, None if q is None else int(q), w


def read(status: object, headers: object, *, wall_now: float | None = None) -> Signals:
    """The ``Signals`` of a response of ``status`` with ``headers`` (a mapping, multi-valued or not,
    or pairs; names in any case; bytes or text)."""
    if isinstance(status, bool) or not isinstance(status, int):
        raise TypeError(f"status must be an int HTTP status, not {type(status).__name__}")
    fields: dict[str, list[str]] = {}
    for name, value in _pairs(headers):
        fields.setdefault(name, []).append(value)

    def one(name: str) -> str | None:
        values = fields.get(name)
        return values[-1] if values else None

    retry_after = None
    if (text := one("retry-after")) is not None:
        retry_after = _retry_after(text, one("date"), wall_now)
    remaining = reset = quota = window = None
    states = [
        item
        for value in fields.get("ratelimit", ())
        for item in _items(value)
        if _number(item.get("r")) is not None and _number(item.get("t")) is not None
    ]
    if states:
        # Of several policies, the binding one: the slowest pace.
        policies = [item for value in fields.get("ratelimit-policy", ()) for item in _items(value)]
        _, remaining, reset, quota, window = min((_pace(state, policies) for state in states), key=lambda p: p[0])
    elif (left := _number(one("x-ratelimit-remaining"))) is not None:
        remaining = int(left)
        at = _number(one("x-ratelimit-reset"))
        if at is not None and at >= _EPOCH_FROM:
            at = max(0.0, at - (time.time() if wall_now is None else wall_now))
        reset = at
        limit = _number(one("x-ratelimit-limit"))
        quota = None if limit is None else int(limit)
    return Signals(status in THROTTLING, retry_after, remaining, reset, quota, window)
