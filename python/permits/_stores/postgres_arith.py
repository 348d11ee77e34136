"""The client's half of the PostgreSQL backend's arithmetic: what a step reports (available,
retry_after) from the state the server returned after it, and what a read finds. Exact (Python
integers), the engine's formulas (cpp/src/*.cpp) over the same state."""

from __future__ import annotations

from collections.abc import Sequence

from .backend import Outcome
from .rules import Rule


def index(now: int, anchor: int, period: int) -> int:
    """The period, window or segment of ``now`` counted from the anchor (0 before it)."""
    return 0 if now <= anchor else (now - anchor) // period


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def token_bucket(rule: Rule, n: int, ok: bool, anchor: int, a: int, b: int, now: int) -> Outcome:
    # State after the step: period a, tokens b.
    if ok:
        return Outcome(True, b, -1, anchor + a * rule.period_ns)  # the stamp: the period's start
    at = anchor + (a + _ceil_div(max(n, 1) - b, rule.amount)) * rule.period_ns
    return Outcome(False, b, max(0, at - now), a)


def fixed_window(rule: Rule, ok: bool, anchor: int, a: int, b: int, now: int) -> Outcome:
    # State after the step: window a, b used in it; a refusal waits for the next window.
    if ok:
        return Outcome(True, rule.limit - b, -1, anchor + a * rule.period_ns)  # the stamp: the window's start
    return Outcome(False, rule.limit - b, max(0, anchor + (a + 1) * rule.period_ns - now), a)


def _counter_room(rule: Rule, anchor: int, w: int, previous: int, current: int, now: int) -> int:
    """limit * W - previous * (W - elapsed) - current * W, in permit-nanoseconds."""
    period = rule.period_ns
    elapsed = min(max(now - (anchor + w * period), 0), period)
    return rule.limit * period - previous * (period - elapsed) - current * period


def _counter_available(rule: Rule, anchor: int, w: int, previous: int, current: int, now: int) -> int:
    room = _counter_room(rule, anchor, w, previous, current, now)
    return room // rule.period_ns if room > 0 else 0


def counter(rule: Rule, n: int, ok: bool, anchor: int, a: int, b: int, c: int, now: int) -> Outcome:
    # State after the step: window a, current b, previous c.
    available = _counter_available(rule, anchor, a, c, b, now)
    if ok:
        return Outcome(True, available, -1, anchor + a * rule.period_ns)  # the stamp: the window's start
    period, need = rule.period_ns, max(n, 1)

    def earliest(w: int, previous: int, current: int) -> int | None:
        # The earliest time in window w with previous * (W - e) <= (limit - current - need) * W.
        spare = rule.limit - current - need
        if spare < 0:
            return None
        start = anchor + w * period
        if previous == 0:
            return start
        slack = spare * period // previous
        return start + (0 if slack >= period else period - slack)

    at = earliest(a, c, b)
    if at is None:  # not in this window: in the next, where this window's count is the previous
        at = earliest(a + 1, b, 0)
    assert at is not None  # need <= limit: the next window admits it
    return Outcome(False, available, max(0, at - now), a)


def available(rule: Rule, row: Sequence[object]) -> int:
    """What a read finds: row is (now, sig, anchor, a, b, c, segs, counts) of READ_STATE (sig None:
    no state, which is full)."""
    now, sig, anchor, a, b, c, segs, counts = row
    if sig is None:
        return rule.limit
    assert isinstance(now, int) and isinstance(anchor, int) and isinstance(a, int)
    assert isinstance(b, int) and isinstance(c, int)
    if rule.kind == "token_bucket":
        p = max(index(now, anchor, rule.period_ns), a)
        return min(rule.limit, b + (p - a) * rule.amount)
    if rule.kind == "fixed_window":
        return rule.limit if index(now, anchor, rule.period_ns) > a else rule.limit - b
    if rule.kind == "sliding_window_counter":
        w = max(index(now, anchor, rule.period_ns), a)
        previous, current = (c, b) if w == a else (b, 0) if w == a + 1 else (0, 0)
        return _counter_available(rule, anchor, w, previous, current, now)
    assert isinstance(segs, list) and isinstance(counts, list)
    if rule.kind == "sliding_log":  # segs: each segment's stamp, held until it + the window + 1 ns
        return rule.limit - sum(int(k) for t, k in zip(segs, counts, strict=True) if t + rule.period_ns + 1 > now)
    # sliding_window: the counts of the segments still in the window ending with segment p
    segment = rule.period_ns // rule.amount
    p = max(index(now, anchor, segment), a)
    assert isinstance(segs, list) and isinstance(counts, list)
    return rule.limit - sum(int(k) for s, k in zip(segs, counts, strict=True) if s > p - rule.amount)
