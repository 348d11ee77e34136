"""A one-statement take sent straight through libpq (psycopg's ``pq`` layer) on a sync connection.

Why: a take is one short prepared statement, and psycopg's cursor machinery around it (the cursor,
the query's conversion, the adaptation of each parameter and value, the generators that drive the
protocol) costs more client CPU than the server spends on the step: on loopback a prepared upsert
through ``conn.execute()`` took about 100 us of client CPU, the same through ``PGconn.exec_prepared``
about 32 us. So the statement is prepared once per connection under a name of its own and run with
binary parameters and results, under the connection's own lock (as psycopg runs its calls), with
the GIL released while libpq waits for the answer.

Only where it is plain to do: a connection outside a transaction and a pipeline (there the statement
is a transaction of its own, as the caller's execute-then-commit would make it). Anything else (a
transaction the caller opened, a pipeline) goes through ``conn.execute()`` as before. A
connection whose ``prepare_threshold`` is None (PgBouncer in transaction mode, where a prepared
statement may be on another server connection) runs the statement unprepared. A prepared statement
the session lost (``DISCARD ALL``, a pool's reset) is prepared again.
"""

from __future__ import annotations

import hashlib
import re
import struct
from typing import Any, cast

import psycopg
from psycopg import pq
from psycopg.types.numeric import Int8

Row = tuple[Any, ...]

_INT8, _BYTEA, _TEXT = 20, 17, 25
#: Parameters that are not bigint, by name (postgres_sql.py's statements).
_TYPES = {"key": _BYTEA, "sig": _TEXT}
_PLACEHOLDER = re.compile(rb"%\((\w+)\)s")
_BINARY = 1
_NO_SUCH_STATEMENT = b"26000"
_ALREADY_PREPARED = b"42P05"
_pack = struct.Struct(">q").pack
# (ints: compared on every take, where an enum's lookup costs more)
_IDLE = int(pq.TransactionStatus.IDLE)
_PIPELINE_OFF = int(pq.PipelineStatus.OFF)
_FATAL = int(pq.ExecStatus.FATAL_ERROR)
_TUPLES_OK = int(pq.ExecStatus.TUPLES_OK)
_COMMAND_OK = int(pq.ExecStatus.COMMAND_OK)
_SQLSTATE = int(pq.DiagnosticField.SQLSTATE)


class Direct:
    """A take's statement with ``%(name)s`` placeholders rewritten for libpq (``$1``...), and its
    name; ``n``, ``need`` and ``now`` are the parameters that change from one take to the next."""

    __slots__ = ("at_n", "at_need", "at_now", "formats", "name", "order", "sql", "statement", "types")

    def __init__(self, statement: bytes) -> None:
        order = list(dict.fromkeys(m.decode() for m in _PLACEHOLDER.findall(statement)))
        self.statement = statement
        self.order = tuple(order)
        self.sql = _PLACEHOLDER.sub(lambda m: b"$%d" % (order.index(m[1].decode()) + 1), statement).replace(b"%%", b"%")
        self.types = [_TYPES.get(name, _INT8) for name in order]
        self.formats = [_BINARY] * len(order)
        self.name = b"permits_" + hashlib.sha256(self.sql + repr(self.types).encode()).hexdigest()[:24].encode()
        self.at_n, self.at_need, self.at_now = order.index("n"), order.index("need"), order.index("now")


_made: dict[bytes, Direct] = {}


def direct(statement: bytes) -> Direct:
    """The statement's Direct, made once (a few statements per table)."""
    made = _made.get(statement)
    if made is None:
        made = _made[statement] = Direct(statement)
    return made


class Bound:
    """A take's statement with the parameters of one name and rule, made once: as psycopg takes
    them (``params``) and as libpq does (``values``, binary)."""

    __slots__ = ("direct", "params", "values")

    def __init__(self, d: Direct, params: dict[str, Any]) -> None:
        self.direct = d
        self.params = params
        values: list[bytes | None] = []
        for name in d.order:
            value = params.get(name)
            if value is None or value.__class__ is bytes:
                values.append(value)
            elif isinstance(value, str):
                values.append(value.encode())
            else:
                values.append(_pack(value))
        self.values = values


def first_row(bound: Bound, n: int, now_ns: int | None, conn: psycopg.Connection[Any]) -> Row | None:
    """The take's first row (``n`` permits, at ``now_ns`` or the server's time), or None when it
    returned none."""
    d = bound.direct
    pgconn = conn.pgconn
    lock = getattr(conn, "lock", None)
    # Outside a transaction the statement is one of its own, committed as it ends: what the caller's
    # execute-then-commit makes of it on a connection that is not in autocommit, too.
    if lock is None or pgconn.transaction_status != _IDLE or pgconn.pipeline_status != _PIPELINE_OFF:
        params = bound.params.copy()
        params["n"] = Int8(n)
        params["need"] = Int8(max(n, 1))
        params["now"] = None if now_ns is None else Int8(now_ns)
        return conn.execute(d.statement, params).fetchone()
    values = bound.values.copy()
    values[d.at_n] = _pack(n)
    values[d.at_need] = _pack(max(n, 1))
    if now_ns is not None:
        values[d.at_now] = _pack(now_ns)
    sent = cast("list[bytes]", values)  # (None is NULL to libpq, as psycopg sends it; its hints omit it)
    with lock:
        if conn.prepare_threshold is None:
            result = pgconn.exec_params(d.sql, sent, d.types, d.formats, _BINARY)
        else:
            result = pgconn.exec_prepared(d.name, sent, d.formats, _BINARY)
            if result.status == _FATAL and result.error_field(_SQLSTATE) == _NO_SUCH_STATEMENT:
                # The first take on this session, or the session lost it (DISCARD ALL, a pool's reset).
                prepared = pgconn.prepare(d.name, d.sql, d.types)
                if prepared.status != _COMMAND_OK and prepared.error_field(_SQLSTATE) != _ALREADY_PREPARED:
                    raise psycopg.errors.error_from_result(prepared, encoding=conn.info.encoding)
                result = pgconn.exec_prepared(d.name, sent, d.formats, _BINARY)
    if result.status != _TUPLES_OK:
        raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
    if result.ntuples == 0:
        return None
    return (result.get_value(0, 0),)  # (the takes' RETURNING: one bytea)
