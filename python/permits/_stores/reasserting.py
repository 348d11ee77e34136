"""Leases the server forgot (a restart without persistence, a FLUSHALL, a holder paused past its
``lease_ttl``), as the renewal finds them: each is taken again under its own id, as a new grant
would take it (never beyond the limit); one the limit no longer allows is lost, logged and counted
(``permits._lost_leases``). A failure to reach the server leaves the rest for the renewal's next
round."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _lost_leases
from .backend import Outcome

if TYPE_CHECKING:
    from .store_limiter import StoreLimiter

#: What a lease of more than a lowered limit gets: it is never taken again.
_REFUSED = Outcome(False, 0, -1, 0)


def reassert(limiter: StoreLimiter, forgotten: list[str]) -> None:
    lost = 0
    for lid in forgotten:
        n = limiter.held.get(lid)
        if n is None:
            continue  # released meanwhile
        rule = limiter._rule
        out = _REFUSED if n > rule.limit else limiter._backend.take(limiter._state, rule, n, lid, limiter._now())
        lost += _reasserted(limiter, lid, n, out)
    _lost_leases.report(limiter.name, lost)


async def reassert_async(limiter: StoreLimiter, forgotten: list[str]) -> None:
    lost = 0
    for lid in forgotten:
        n = limiter.held.get(lid)
        if n is None:
            continue
        rule = limiter._rule
        if n > rule.limit:
            out = _REFUSED
        else:
            out = await limiter._backend.take_async(limiter._state, rule, n, lid, limiter._now())
        lost += _reasserted(limiter, lid, n, out)
    _lost_leases.report(limiter.name, lost)


def _reasserted(limiter: StoreLimiter, lid: str, n: int, out: Outcome) -> int:
    """1 if the lease is lost now, else 0 (taken back; given back at once if released meanwhile)."""
    if out.granted:
        if lid not in limiter.held:
            limiter.store._give_back(limiter, n, 0, lid)  # released while it was taken back
        return 0
    if limiter.held.pop(lid, None) is None:
        return 0
    limiter._lost.add(lid)
    return 1
