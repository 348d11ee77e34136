"""The PostgreSQL backend's token bucket step against the plainest upsert on the same table shape.

    python benchmarks/bench_postgres.py "host=127.0.0.1 port=5432 user=postgres" [--steps 5000] [--keys 1000]

Both run sync on one connection (autocommit, the server's clock), cycling over ``--keys`` names:
``PostgresBackend.take`` (an INSERT ... ON CONFLICT DO UPDATE that refills, decides and purges,
plus the client's arithmetic) and a bare ``INSERT ... ON CONFLICT DO UPDATE SET b = b + 1 ...
RETURNING`` on a table of the same columns and indexes. Rounds alternate; the best is shown.
"""

from __future__ import annotations

import argparse
import hashlib
import time
import uuid

import psycopg
from psycopg import sql

from permits._stores.postgres_backend import PostgresBackend
from permits._stores.rules import Rule

PLAIN = """
INSERT INTO {table} AS t (key, lease, sig, anchor, a, b, ok, seen, expires)
VALUES (%(key)s, ''::bytea, 'plain', 0, 0, 1, true, 0, 0)
ON CONFLICT (key, lease) DO UPDATE SET b = t.b + 1, seen = excluded.seen, expires = excluded.expires
RETURNING t.b
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("conninfo")
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ours, plain = f"bench_{uuid.uuid4().hex[:8]}", f"bench_{uuid.uuid4().hex[:8]}"
    rule = Rule("token_bucket", 10**9, 10**9, 10**9)  # every step a grant
    names = [f"key-{i}" for i in range(args.keys)]
    keys = [hashlib.sha256(name.encode()).digest() for name in names]
    with psycopg.connect(args.conninfo, autocommit=True) as conn:
        backend = PostgresBackend(conn, table=ours, timeout=10.0)
        backend.take("warm", rule, 1, None, None)  # makes the schema
        conn.execute(
            sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(sql.Identifier(plain), sql.Identifier(ours))
        )
        plain_q = sql.SQL(PLAIN).format(table=sql.Identifier(plain))
        best_ours = best_plain = 0.0
        for _ in range(args.rounds):
            start = time.perf_counter()
            for i in range(args.steps):
                backend.take(names[i % args.keys], rule, 1, None, None)
            best_ours = max(best_ours, args.steps / (time.perf_counter() - start))
            start = time.perf_counter()
            for i in range(args.steps):
                conn.execute(plain_q, {"key": keys[i % args.keys]}).fetchone()
            best_plain = max(best_plain, args.steps / (time.perf_counter() - start))
        for table in (ours, plain):
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
    print(f"token bucket take: {best_ours:,.0f} steps/s")
    print(f"plain upsert:      {best_plain:,.0f} steps/s")
    print(f"ratio:             {best_ours / best_plain:.2f}")


if __name__ == "__main__":
    main()
