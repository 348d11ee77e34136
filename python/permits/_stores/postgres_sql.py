"""The SQL of the PostgreSQL backend: the schema, and one statement (or function call) per step.

Placeholders: ``{table}``, ``{index}``, ``{sw_take}``, ``{cc_take}`` (and postgres_log_sql.py's
``{sl_take}``) are identifiers (schema-qualified,
quoted by ``psycopg.sql``); ``%(name)s`` are parameters. Statements with parameters use ``mod()``,
never ``%``, and no literal braces (``ARRAY[]``, never ``'{}'``).

One table holds every state: a row per state (``lease = ''``) and, for concurrency, a row per
lease (``lease`` the lease id's digest). ``key`` is the SHA-256 of the state's name, so a name of any
length or content is one short index entry. Columns by kind::

    kind                    a                   b                   c          segs/counts
    token_bucket            period index        tokens at a
    fixed_window            window index        permits used in a
    sliding_window          head segment                                       the window's
                                                                               segments and counts
    sliding_log             head segment                                       each segment's stamp
                                                                               and count
    sliding_window_counter  window index        current count       previous
    concurrency (state)     (the signature only; its leases are rows of their own)
    concurrency (lease)                         permits held

``anchor`` is the state's creation time, ``seen`` the time of its last step (which the client's
arithmetic reads back), ``ok`` whether that step granted, ``expires`` when the row may be purged
(state: one to two of the rule's lifetimes after its last step; lease: its expiry; expired rows go by the
store's background purge, postgres_purge.py, never on a step's way). Every step runs in its own
transaction (autocommit), and the row of its state is locked by it (ON CONFLICT DO UPDATE or
SELECT ... FOR UPDATE): steps on one state are serialized, steps on others never wait for it.
"""

from __future__ import annotations

from typing import LiteralString

#: The server's time in integer ns (microsecond precision): extract() gives exact numeric seconds.
SERVER_NOW: LiteralString = "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint"

#: The step's time, computed once: the parameter, else the server's clock.
_NOW: LiteralString = "coalesce(%(now)s::bigint, " + SERVER_NOW + ")"


SCHEMA: LiteralString = """
CREATE TABLE IF NOT EXISTS {table} (
    key bytea NOT NULL,
    lease bytea NOT NULL,
    sig text,
    anchor bigint NOT NULL,
    a bigint NOT NULL DEFAULT 0,
    b bigint NOT NULL DEFAULT 0,
    c bigint NOT NULL DEFAULT 0,
    segs bigint[],
    counts bigint[],
    ok boolean,
    seen bigint NOT NULL,
    expires bigint NOT NULL,
    PRIMARY KEY (key, lease)
);
CREATE INDEX IF NOT EXISTS {index} ON {table} (expires);
CREATE TABLE IF NOT EXISTS {rules} (
    name bytea PRIMARY KEY,
    gen bigint NOT NULL,
    base text NOT NULL,
    sig text NOT NULL
);
"""


def state_locked(first_segment: LiteralString) -> LiteralString:
    """The opening a segmented step's function shares (the sliding window's, the log's): the step's
    time, its state's row locked (made now, full and anchored now, with n in a first segment that
    ``segs`` holds as ``first_segment``, when there is none), and the recorded signature checked."""
    return (
        """    now := coalesce(at_ns, """
        + SERVER_NOW
        + """);
    SELECT * INTO st FROM {table} WHERE key = k AND lease = ''::bytea FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO {table} (key, lease, sig, anchor, a, segs, counts, ok, seen, expires)
        VALUES (k, ''::bytea, want, now, 0,
                CASE WHEN n > 0 THEN ARRAY["""
        + first_segment
        + """] ELSE ARRAY[]::bigint[] END,
                CASE WHEN n > 0 THEN ARRAY[n] ELSE ARRAY[]::bigint[] END, true, now, now + 2 * lifetime)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN  -- a new state: full, anchored now
            ok := true; stamp := now; available := lim - n;  -- segment 0's start: the anchor
            RETURN;
        END IF;
        SELECT * INTO st FROM {table} WHERE key = k AND lease = ''::bytea FOR UPDATE;  -- made meanwhile
    END IF;
    IF st.sig <> want THEN
        recorded := st.sig;
        RETURN;
    END IF;
"""
    )


# The sliding window's step: the row is locked, the segments that left the window are dropped,
# and a grant adds n to the head segment. A refusal writes nothing and reports when enough of the
# oldest segments will have left (segment s frees its count when segment s + nseg begins).
# A signature mismatch writes nothing and returns the recorded signature.
SW_TAKE: LiteralString = (
    """
CREATE OR REPLACE FUNCTION {sw_take}(
    k bytea, want text, at_ns bigint, n bigint, lim bigint, seg bigint, nseg bigint, lifetime bigint,
    OUT ok boolean, OUT stamp bigint, OUT available bigint, OUT free_at bigint, OUT now bigint,
    OUT recorded text)
LANGUAGE plpgsql AS $fn$
DECLARE
    st record;
    p bigint;
    used bigint;
    need bigint := greatest(n, 1);
    ss bigint[];
    cs bigint[];
    freed bigint := 0;
    i integer;
BEGIN
"""
    + state_locked("0::bigint")
    + """    p := greatest(CASE WHEN now <= st.anchor THEN 0 ELSE (now - st.anchor) / seg END, st.a);
    SELECT coalesce(array_agg(u.s ORDER BY u.s), ARRAY[]::bigint[]),
           coalesce(array_agg(u.c ORDER BY u.s), ARRAY[]::bigint[]), coalesce(sum(u.c), 0)
        INTO ss, cs, used
        FROM unnest(st.segs, st.counts) AS u(s, c) WHERE u.s > p - nseg;
    stamp := st.anchor + p * seg;  -- the segment's start (a grant's stamp: backend.py)
    IF lim - used >= need THEN
        ok := true;
        available := lim - used - n;
        IF n > 0 THEN  -- n = 0 takes nothing and writes nothing
            IF cardinality(ss) > 0 AND ss[cardinality(ss)] = p THEN
                cs[cardinality(cs)] := cs[cardinality(cs)] + n;
            ELSE
                ss := ss || p;
                cs := cs || n;
            END IF;
            UPDATE {table} SET a = p, segs = ss, counts = cs, ok = true, seen = now,
                expires = CASE WHEN expires < now + lifetime THEN now + 2 * lifetime ELSE expires END
                WHERE key = k AND lease = ''::bytea;
        END IF;
    ELSE
        ok := false;
        available := lim - used;
        FOR i IN 1 .. cardinality(ss) LOOP
            freed := freed + cs[i];
            IF lim - used + freed >= need THEN
                free_at := st.anchor + (ss[i] + nseg) * seg;
                EXIT;
            END IF;
        END LOOP;
    END IF;
END
$fn$;
"""
)

# The concurrency limiter's take: the state row is locked (so takes on one state are serialized
# and each sees the leases committed before it), expired leases are deleted (they no longer
# count), and a grant records the lease as a row of its own. A lease already recorded is granted
# again without counting twice (a retried take), its expiry extended.
CC_TAKE: LiteralString = (
    """
CREATE OR REPLACE FUNCTION {cc_take}(
    k bytea, want text, at_ns bigint, n bigint, lim bigint, lid bytea, ttl bigint,
    OUT ok boolean, OUT available bigint, OUT now bigint, OUT recorded text)
LANGUAGE plpgsql AS $fn$
DECLARE
    st record;
    held bigint;
    need bigint := greatest(n, 1);
BEGIN
    now := coalesce(at_ns, """
    + SERVER_NOW
    + """);
    SELECT * INTO st FROM {table} WHERE key = k AND lease = ''::bytea FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO {table} (key, lease, sig, anchor, seen, expires)
        VALUES (k, ''::bytea, want, now, now, now + 2 * ttl)
        ON CONFLICT DO NOTHING;
        SELECT * INTO st FROM {table} WHERE key = k AND lease = ''::bytea FOR UPDATE;
    END IF;
    IF st.sig <> want THEN
        recorded := st.sig;
        RETURN;
    END IF;
    DELETE FROM {table} WHERE key = k AND lease <> ''::bytea AND expires <= now;
    SELECT coalesce(sum(b), 0) INTO held FROM {table} WHERE key = k AND lease <> ''::bytea;
    IF lid IS NOT NULL AND EXISTS (SELECT 1 FROM {table} WHERE key = k AND lease = lid) THEN
        ok := true;
        available := lim - held;
        UPDATE {table} SET expires = greatest(expires, now + ttl) WHERE key = k AND lease = lid;
    ELSIF lim - held >= need THEN
        ok := true;
        available := lim - held - n;
        IF n > 0 THEN
            INSERT INTO {table} (key, lease, anchor, b, seen, expires) VALUES (k, lid, now, n, now, now + ttl);
        END IF;
    ELSE
        ok := false;
        available := lim - held;
    END IF;
    IF ok AND n > 0 THEN  -- the state lives as long as its leases
        UPDATE {table} SET seen = now, expires = CASE WHEN expires < now + ttl THEN now + 2 * ttl ELSE expires END
            WHERE key = k AND lease = ''::bytea;
    END IF;
END
$fn$;
"""
)

# -- the steps -----------------------------------------------------------------------------
# Each timed kind's take is one INSERT ... ON CONFLICT DO UPDATE: a new state is inserted already
# granted (a full state grants any n <= limit); an existing one is brought to the step's period or
# window, decided and updated, all under the row lock of the upsert. A refusal writes the same
# state, brought forward (equivalent: the arithmetic reads it the same from then on). The excluded
# row carries the step's time in seen. A mismatched signature updates nothing and returns no row.
# RETURNING gives the state after the step; the client derives available and retry_after from it.

_WITH_NOW: LiteralString = (
    """
WITH v AS (SELECT """
    + _NOW
    + """ AS now)
"""
)

# The step's index of period or window from the anchor (0 before it), never behind the state's.
_INDEX: LiteralString = (
    "greatest(CASE WHEN excluded.seen <= t.anchor THEN 0 ELSE (excluded.seen - t.anchor) / %(period)s END, t.a)"
)

# (ok, anchor, a, b, c, seen) as one bytea of 41 bytes, a boolean and five big-endian bigints (what
# postgres_backend.RESULT unpacks): one value to read is cheaper for the client than six.
_RETURNING: LiteralString = (
    "RETURNING boolsend(t.ok) || int8send(t.anchor) || int8send(t.a) || int8send(t.b) || int8send(t.c)"
    " || int8send(t.seen)"
)

# A state row's expiry moves only when it is within a lifetime of the step, and then to two
# lifetimes ahead: it is purged between one and two lifetimes after its last step, and most steps
# leave the indexed column as it is (a HOT update: no new index entries, which the purge's index
# scan would otherwise wade through).
_EXPIRES: LiteralString = "CASE WHEN t.expires < excluded.seen + %(lifetime)s THEN excluded.expires ELSE t.expires END"

# The SET clauses are plain expressions (each reads the row as it was), not a sub-select: PostgreSQL
# runs a sub-select there as a sub-plan of its own, which cost a take about 15 us on the server.
_TOKENS: LiteralString = "least(%(limit)s, t.b + least(" + _INDEX + " - t.a, %(limit)s) * %(amount)s)"


def _upsert_take(inserted_b: LiteralString, b: LiteralString, ok: LiteralString) -> LiteralString:
    """A timed kind's take whose state is a period or window index (``a``) and a count (``b``): a new
    state inserted with ``inserted_b``, an existing one brought to the step's index with ``b`` and
    ``ok`` computed from the row as it was."""
    return (
        _WITH_NOW
        + """
INSERT INTO {table} AS t (key, lease, sig, anchor, a, b, ok, seen, expires)
SELECT %(key)s, ''::bytea, %(sig)s, v.now, 0, """
        + inserted_b
        + """, true, v.now, v.now + 2 * %(lifetime)s FROM v
ON CONFLICT (key, lease) DO UPDATE SET
    a = """
        + _INDEX
        + """,
    b = """
        + b
        + """,
    ok = """
        + ok
        + """,
    seen = excluded.seen,
    expires = """
        + _EXPIRES
        + """
WHERE t.sig = excluded.sig
"""
        + _RETURNING
    )


TB_TAKE: LiteralString = _upsert_take(
    "%(limit)s - %(n)s",
    _TOKENS + " - CASE WHEN " + _TOKENS + " >= %(need)s THEN %(n)s ELSE 0 END",
    _TOKENS + " >= %(need)s",
)

# The permits used in the step's window: the state's when it is that window, else none.
_USED: LiteralString = "(CASE WHEN " + _INDEX + " = t.a THEN t.b ELSE 0 END)"

FW_TAKE: LiteralString = _upsert_take(
    "%(n)s",
    _USED + " + CASE WHEN %(limit)s - " + _USED + " >= %(need)s THEN %(n)s ELSE 0 END",
    "%(limit)s - " + _USED + " >= %(need)s",
)

# The counter: counts as seen from window wi (previous and current; 0 after a gap), e the time
# into wi (0 when the stored window is ahead of the clock). Granted iff
# (limit - current - need) * W >= previous * (W - e), in numeric (limit * W exceeds bigint).
SWC_TAKE: LiteralString = (
    _WITH_NOW
    + """
INSERT INTO {table} AS t (key, lease, sig, anchor, a, b, c, ok, seen, expires)
SELECT %(key)s, ''::bytea, %(sig)s, v.now, 0, %(n)s, 0, true, v.now, v.now + 2 * %(lifetime)s FROM v
ON CONFLICT (key, lease) DO UPDATE SET (a, b, c, ok, seen, expires) = (
    SELECT r.wi, r.cur + CASE WHEN r.fits THEN %(n)s ELSE 0 END, r.prev, r.fits,
           excluded.seen, """
    + _EXPIRES
    + """
    FROM (SELECT greatest(0, excluded.seen - t.anchor) AS since) s1,
         LATERAL (SELECT s1.since / %(period)s AS cw) s2,
         LATERAL (SELECT greatest(s2.cw, t.a) AS wi) s3,
         LATERAL (SELECT s3.wi,
                         CASE WHEN s3.wi = t.a THEN t.c WHEN s3.wi = t.a + 1 THEN t.b ELSE 0 END AS prev,
                         CASE WHEN s3.wi = t.a THEN t.b ELSE 0 END AS cur,
                         CASE WHEN s3.wi = s2.cw THEN mod(s1.since, %(period)s) ELSE 0 END AS e) s4,
         LATERAL (SELECT s4.wi, s4.prev, s4.cur,
                         (%(limit)s - s4.cur - %(need)s)::numeric * %(period)s
                             >= s4.prev::numeric * (%(period)s - s4.e) AS fits) r)
WHERE t.sig = excluded.sig
"""
    + _RETURNING
)

SW_TAKE_CALL: LiteralString = """
SELECT ok, stamp, available, free_at, now, recorded
FROM {sw_take}(%(key)s, %(sig)s, %(now)s, %(n)s, %(limit)s, %(period)s, %(amount)s, %(lifetime)s)
"""

CC_TAKE_CALL: LiteralString = """
SELECT ok, available, now, recorded FROM {cc_take}(%(key)s, %(sig)s, %(now)s, %(n)s, %(limit)s, %(lease)s, %(ttl)s)
"""

# -- refunds, renewals, reads --------------------------------------------------------------
# Each is one statement that also returns the recorded signature (NULL: no state): a mismatch
# changes nothing (the update's condition) and the client raises.

_STATE: LiteralString = "t.key = %(key)s AND t.lease = ''::bytea"
_WITH_STATE: LiteralString = (
    "WITH v AS (SELECT " + _NOW + " AS now), s AS (SELECT t.sig FROM {table} t WHERE " + _STATE + ")"
)
# The index of the step's period / window / segment, in an UPDATE (the state row is t).
_INDEX_U: LiteralString = "CASE WHEN v.now <= t.anchor THEN 0 ELSE (v.now - t.anchor) / %(period)s END"
# A refund's stamp (the start of the grant's period, window or segment in clock time) as that
# period's index in the state's timeline; NULL, and nothing changes, for a stamp this state never
# made: one of a state purged and made again since (anchored after it).
STAMP_INDEX: LiteralString = (
    "(CASE WHEN %(stamp)s >= t.anchor AND mod(%(stamp)s - t.anchor, %(period)s) = 0 "
    "THEN (%(stamp)s - t.anchor) / %(period)s END)"
)

# Only what the bucket could not have refilled since the grant (period stamp) comes back (as the
# engine): had the grant never happened, each refill since would have found those tokens there.
TB_REFUND: LiteralString = (
    _WITH_STATE
    + """,
u AS (
    UPDATE {table} t SET (a, b, seen, expires) = (
        SELECT q.p, least(%(limit)s, q.tokens + %(n)s - q.refilled), v.now,
               CASE WHEN t.expires < v.now + %(lifetime)s THEN v.now + 2 * %(lifetime)s ELSE t.expires END
        FROM (SELECT r.p, least(%(limit)s, t.b + least(r.p - t.a, %(limit)s) * %(amount)s) AS tokens,
                     least(greatest(0, r.p - """
    + STAMP_INDEX
    + """), %(n)s) * %(amount)s AS refilled
              FROM (SELECT greatest("""
    + _INDEX_U
    + """, t.a) AS p) r) q)
    FROM v
    WHERE """
    + _STATE
    + """ AND t.sig = %(sig)s AND """
    + STAMP_INDEX
    + """ IS NOT NULL  -- (greatest() and least() ignore a NULL)
      AND least(greatest(0, greatest("""
    + _INDEX_U
    + """, t.a) - """
    + STAMP_INDEX
    + """), %(n)s) * %(amount)s < %(n)s)
SELECT sig FROM s
"""
)

# Fixed window and counter: only the count of the current window (the stamp's, still the
# clock's) goes down.
WINDOW_REFUND: LiteralString = (
    _WITH_STATE
    + """,
u AS (
    UPDATE {table} t SET b = greatest(0, t.b - %(n)s), seen = v.now
    FROM v
    WHERE """
    + _STATE
    + """ AND t.sig = %(sig)s AND t.a = """
    + STAMP_INDEX
    + """ AND """
    + _INDEX_U
    + " = "
    + STAMP_INDEX
    + """)
SELECT sig FROM s
"""
)

# Sliding window: only the head segment's count, while the clock is still in it.
SW_REFUND: LiteralString = (
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
      AND t.segs[cardinality(t.segs)] = """
    + STAMP_INDEX
    + """ AND """
    + _INDEX_U
    + " = "
    + STAMP_INDEX
    + """)
SELECT sig FROM s
"""
)

# Concurrency: a refund of all the lease's permits is its release; of fewer (a settle), the lease
# goes on holding the rest.
CC_REFUND: LiteralString = (
    _WITH_STATE
    + """,
u AS (
    DELETE FROM {table} t
    WHERE t.key = %(key)s AND t.lease = %(lease)s AND t.b <= %(n)s
      AND NOT EXISTS (SELECT 1 FROM s WHERE s.sig <> %(sig)s)),
p AS (
    UPDATE {table} t SET b = t.b - %(n)s
    WHERE t.key = %(key)s AND t.lease = %(lease)s AND t.b > %(n)s
      AND NOT EXISTS (SELECT 1 FROM s WHERE s.sig <> %(sig)s))
SELECT sig FROM s
"""
)

# The leases still recorded and not expired get now + ttl; the state lives as long as they do.
CC_RENEW: LiteralString = (
    _WITH_STATE
    + """,
ok AS (SELECT NOT EXISTS (SELECT 1 FROM s WHERE s.sig <> %(sig)s) AS ok),
u AS (
    UPDATE {table} t SET expires = v.now + %(ttl)s
    FROM v, ok
    WHERE ok.ok AND t.key = %(key)s AND t.lease = ANY(%(leases)s::bytea[]) AND t.expires > v.now
    RETURNING t.lease),
w AS (
    UPDATE {table} t
    SET expires = CASE WHEN t.expires < v.now + %(ttl)s THEN v.now + 2 * %(ttl)s ELSE t.expires END
    FROM v, ok
    WHERE ok.ok AND """
    + _STATE
    + """)
SELECT (SELECT sig FROM s), ARRAY(SELECT lease FROM u)
"""
)

# The purge of housekeeping (postgres_purge.py): up to %(most)s expired rows of any state, oldest
# first, never waiting for a row another step holds; answers how many went.
PURGE: LiteralString = (
    """
WITH v AS (SELECT """
    + _NOW
    + """ AS now),
d AS (
    DELETE FROM {table} WHERE (key, lease) IN (
        SELECT x.key, x.lease FROM {table} x WHERE x.expires < (SELECT v.now FROM v)
        ORDER BY x.expires LIMIT %(most)s FOR UPDATE OF x SKIP LOCKED)
    RETURNING 1)
SELECT count(*) FROM d
"""
)

# Reads: the state's row (if any) and the step's time; the client computes available.
READ_STATE: LiteralString = (
    "WITH v AS (SELECT "
    + _NOW
    + """ AS now)
SELECT v.now, t.sig, t.anchor, t.a, t.b, t.c, t.segs, t.counts
FROM v LEFT JOIN {table} t ON """
    + _STATE
)

CC_HELD: LiteralString = (
    "WITH v AS (SELECT "
    + _NOW
    + """ AS now)
SELECT (SELECT t.sig FROM {table} t WHERE """
    + _STATE
    + """),
       (SELECT coalesce(sum(t.b), 0) FROM {table} t, v
        WHERE t.key = %(key)s AND t.lease <> ''::bytea AND t.expires > v.now)
"""
)

SIGNATURE: LiteralString = "SELECT t.sig FROM {table} t WHERE " + _STATE
# reset(): the state row goes; the next step makes it anew (concurrency's lease rows are never asked).
RESET_STATE: LiteralString = "DELETE FROM {table} t WHERE " + _STATE + " RETURNING 1"

# Changed limits (reconfigure; followed_rules.py): a row per limiter name whose limit was changed,
# ``gen`` counting the changes, ``base`` the signature its states were made with, ``sig`` the rule
# now. Read for all of a process's names in one statement; a change made from another base
# changes nothing (and returns no row).
READ_RULES: LiteralString = (
    "SELECT array_agg(r.name), array_agg(r.gen), array_agg(r.base), array_agg(r.sig) "
    "FROM {rules} r WHERE r.name = ANY(%(names)s)"
)
PUBLISH_RULE: LiteralString = """
INSERT INTO {rules} AS r (name, gen, base, sig) VALUES (%(name)s, 1, %(base)s, %(sig)s)
ON CONFLICT (name) DO UPDATE SET gen = r.gen + 1, sig = excluded.sig WHERE r.base = excluded.base
RETURNING r.gen
"""
RULE_BASE: LiteralString = "SELECT r.base FROM {rules} r WHERE r.name = %(name)s"
