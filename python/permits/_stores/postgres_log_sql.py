"""The PostgreSQL backend's sliding log (what ``permits.specs.parse`` makes): its step and refund.

The state row keeps the log as the sliding window keeps its segments (postgres_sql.py), but ``segs``
holds each segment's stamp, the time of its latest grant, rather than its number (the number is the
stamp's segment, counted from the anchor): a segment's permits come back at its stamp + the window
+ 1 ns, as in the engine (cpp/src/sliding_log.hpp). ``a`` is the head segment, as for the window.
Placeholders as postgres_sql.py's, and ``{sl_take}`` the step's function.
"""

from __future__ import annotations

from typing import LiteralString

from .postgres_sql import _INDEX_U, _STATE, _WITH_STATE, STAMP_INDEX, state_locked

# The step: the row is locked, the segments whose permits came back are dropped, and a grant adds n
# to the head segment (its stamp becomes the later of its own and now) or opens the segment of now.
# A refusal writes nothing and reports when enough of the oldest segments come back.
SL_TAKE: LiteralString = (
    """
CREATE OR REPLACE FUNCTION {sl_take}(
    k bytea, want text, at_ns bigint, n bigint, lim bigint, seg bigint, win bigint, lifetime bigint,
    OUT ok boolean, OUT stamp bigint, OUT available bigint, OUT free_at bigint, OUT now bigint,
    OUT recorded text)
LANGUAGE plpgsql AS $fn$
DECLARE
    st record;
    p bigint;
    used bigint;
    need bigint := greatest(n, 1);
    ts bigint[];
    cs bigint[];
    freed bigint := 0;
    last integer;
    i integer;
BEGIN
"""
    + state_locked("now")
    + """    p := greatest(CASE WHEN now <= st.anchor THEN 0 ELSE (now - st.anchor) / seg END, st.a);
    SELECT coalesce(array_agg(u.s ORDER BY u.s), ARRAY[]::bigint[]),
           coalesce(array_agg(u.c ORDER BY u.s), ARRAY[]::bigint[]), coalesce(sum(u.c), 0)
        INTO ts, cs, used
        FROM unnest(st.segs, st.counts) AS u(s, c) WHERE u.s + win + 1 > now;
    stamp := st.anchor + p * seg;  -- the segment's start (a grant's stamp: backend.py)
    IF lim - used >= need THEN
        ok := true;
        available := lim - used - n;
        IF n > 0 THEN  -- n = 0 takes nothing and writes nothing
            last := cardinality(ts);
            IF last > 0 AND (CASE WHEN ts[last] <= st.anchor THEN 0 ELSE (ts[last] - st.anchor) / seg END) = p THEN
                cs[last] := cs[last] + n;
                ts[last] := greatest(ts[last], now);
            ELSE
                ts := ts || now;
                cs := cs || n;
            END IF;
            UPDATE {table} SET a = p, segs = ts, counts = cs, ok = true, seen = now,
                expires = CASE WHEN expires < now + lifetime THEN now + 2 * lifetime ELSE expires END
                WHERE key = k AND lease = ''::bytea;
        END IF;
    ELSE
        ok := false;
        available := lim - used;
        FOR i IN 1 .. cardinality(ts) LOOP
            freed := freed + cs[i];
            IF lim - used + freed >= need THEN
                free_at := ts[i] + win + 1;
                EXIT;
            END IF;
        END LOOP;
    END IF;
END
$fn$;
"""
)

SL_TAKE_CALL: LiteralString = """
SELECT ok, stamp, available, free_at, now, recorded
FROM {sl_take}(%(key)s, %(sig)s, %(now)s, %(n)s, %(limit)s, %(period)s, %(window)s, %(lifetime)s)
"""

# A refund: only the head segment's count, while the clock is still in it (its stamp stays).
_LAST_SEGMENT: LiteralString = (
    "CASE WHEN t.segs[cardinality(t.segs)] <= t.anchor THEN 0 "
    "ELSE (t.segs[cardinality(t.segs)] - t.anchor) / %(period)s END"
)
SL_REFUND: LiteralString = (
    _WITH_STATE
    + """,
u AS (
    UPDATE {table} t SET counts[cardinality(t.counts)] = greatest(0, t.counts[cardinality(t.counts)] - %(n)s),
        seen = v.now
    FROM v
    WHERE """
    + _STATE
    + """ AND t.sig = %(sig)s AND t.a = """
    + STAMP_INDEX
    + """ AND cardinality(t.segs) > 0
      AND """
    + _LAST_SEGMENT
    + " = "
    + STAMP_INDEX
    + " AND "
    + _INDEX_U
    + " = "
    + STAMP_INDEX
    + """)
SELECT sig FROM s
"""
)
