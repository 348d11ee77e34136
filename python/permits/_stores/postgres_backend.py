"""The PostgreSQL backend of the store limiters (``PostgresBackend``).

Each step is one round trip on a connection in autocommit: the token bucket, fixed window and
sliding window counter one ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``, the sliding window
and concurrency one call of a PL/pgSQL function; refunds, renewals and reads one statement each
(postgres_sql.py). The schema is made on first use, under an advisory lock.

The table is one identifier in the connection's current schema (the first of ``search_path`` that
exists): a ``.`` is part of the name, not a schema separator (set ``search_path``, e.g. with
``options=-csearch_path=...`` in the conninfo, to use another schema). PostgreSQL truncates names
longer than 63 bytes, so longer ones are refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import struct
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import psycopg
import psycopg_pool
from psycopg import sql
from psycopg.types.numeric import Int8

from .._forking import AfterFork
from ..errors import BackendError
from . import postgres_arith as arith
from . import postgres_direct, soon
from . import postgres_log_sql as log_q
from . import postgres_sql as q
from .backend import Outcome
from .postgres_conn import (
    AConn,
    AsyncSource,
    Conn,
    GivenAsyncConnection,
    GivenAsyncPool,
    GivenConnection,
    GivenPool,
    OwnAsyncPools,
    OwnSyncPool,
    SyncSource,
)
from .rules import KINDS, Record, Rule, made_from_another_base

T = TypeVar("T")
Row = tuple[Any, ...]
#: A step as a generator: it yields (statement, parameters) and is sent each statement's first row
#: (None: no row), and returns its answer; sync and asyncio drivers run the same steps.
Plan = Generator[tuple[bytes, dict[str, Any]], Row | None, T]

_MAX_IDENTIFIER = 63  # PostgreSQL's NAMEDATALEN - 1, in bytes
#: Lifetimes and lease ttls beyond 2**60 ns (36 years) count as that: now + 2 * it stays a bigint.
_MAX_LIFETIME = 2**60
#: The kinds whose take is one INSERT ... ON CONFLICT DO UPDATE ... RETURNING.
#: A one-statement take's row: (ok, anchor, a, b, c, seen) packed into one bytea (postgres_sql._RETURNING).
RESULT = struct.Struct(">?5q")
_ONE_STATEMENT = frozenset(("token_bucket", "fixed_window", "sliding_window_counter"))
#: Names and rules whose take parameters are kept (past it the cache starts again).
_MADE_PARAMS = 1024


def _forked(backend: PostgresBackend) -> None:
    backend._statements_lock = threading.Lock()  # (a store's renewal or purge thread may have held it)


_BACKENDS: AfterFork[PostgresBackend] = AfterFork(_forked)


def _rule_name(name: str) -> bytes:
    return name.encode("utf-8", "surrogatepass")


def _digest(text: str | bytes) -> bytes:
    """The key of a name (or lease id) of any length or content (lone surrogates too; a per-key
    limiter's names are bytes)."""
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogatepass")
    return hashlib.sha256(text).digest()


def _shown(name: str | bytes) -> str:
    return repr(name) if len(name) <= 80 else repr(name[:80]) + "..."


@dataclass(frozen=True)
class _Statements:
    """The statements of one table, composed once (the table is known only at first use: its schema)."""

    tb_take: bytes
    fw_take: bytes
    swc_take: bytes
    sw_take: bytes
    sl_take: bytes
    cc_take: bytes
    tb_refund: bytes
    window_refund: bytes
    sw_refund: bytes
    sl_refund: bytes
    cc_refund: bytes
    cc_renew: bytes
    read: bytes
    cc_held: bytes
    signature: bytes
    purge: bytes
    reset: bytes
    read_rules: bytes
    publish_rule: bytes
    rule_base: bytes


def _compose(template: str, ids: dict[str, sql.Composable]) -> bytes:
    return sql.SQL(template).format(**ids).as_bytes(None)


class PostgresBackend:
    """``Backend`` over PostgreSQL.

    ``conninfo_or_pool``: a libpq conninfo string (serves the sync and the asyncio members:
    ``is_async`` is ``None``), a ``psycopg.Connection`` or ``psycopg_pool.ConnectionPool`` (sync:
    ``is_async`` is ``False``), or a ``psycopg.AsyncConnection`` or
    ``psycopg_pool.AsyncConnectionPool`` (asyncio: ``True``). ``table``: the table's exact name.
    ``timeout``: no call waits longer (seconds); past it, or when the server cannot be reached,
    ``permits.BackendError``.
    """

    is_async: bool | None

    def __init__(self, conninfo_or_pool: object, *, table: str = "permits_state", timeout: float = 1.0) -> None:
        if not isinstance(table, str):
            raise TypeError(f"table must be a str, not {type(table).__name__}")
        if not table or "\x00" in table or len(table.encode("utf-8", "surrogatepass")) > _MAX_IDENTIFIER:
            raise ValueError(f"table must be a name of 1 to {_MAX_IDENTIFIER} bytes without NUL, got {_shown(table)}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
        self._table = table
        self._timeout = float(timeout)
        self._sync: SyncSource | None = None
        self._async: AsyncSource | None = None
        source = conninfo_or_pool
        if isinstance(source, str):
            self._sync = OwnSyncPool(source, self._timeout)
            self._async = OwnAsyncPools(source, self._timeout)
            self.is_async = None
        elif isinstance(source, psycopg.Connection):
            self._sync, self.is_async = GivenConnection(source, self._timeout), False
        elif isinstance(source, psycopg_pool.ConnectionPool):
            self._sync, self.is_async = GivenPool(source, self._timeout), False
        elif isinstance(source, psycopg.AsyncConnection):
            self._async, self.is_async = GivenAsyncConnection(source, self._timeout), True
        elif isinstance(source, psycopg_pool.AsyncConnectionPool):
            self._async, self.is_async = GivenAsyncPool(source, self._timeout), True
        else:
            raise TypeError(
                "conninfo_or_pool must be a conninfo str, a psycopg Connection or AsyncConnection, or a "
                f"psycopg_pool ConnectionPool or AsyncConnectionPool, not {type(source).__name__}"
            )
        self._statements: _Statements | None = None
        self._statements_lock = threading.Lock()
        #: The statement and parameters of a name and rule's one-statement takes that never change (_bound).
        self._made_params: dict[tuple[str | bytes, Rule], postgres_direct.Bound] = {}
        _BACKENDS.add(self)

    # -- the schema ----------------------------------------------------------------------------

    def _ensure(self) -> Plan[_Statements]:
        """The table's statements, making the schema first if this backend has not yet (every
        statement IF NOT EXISTS / OR REPLACE, under an advisory lock: processes racing to make it
        take turns)."""
        statements = self._statements
        if statements is not None:
            return statements
        row = yield b"SELECT current_schema()", {}
        schema = row[0] if row else None
        if schema is None:
            raise BackendError("PostgreSQL has no current schema to make the table in (search_path)")
        # Names of our own beside the table, from a digest of it: within 63 bytes whatever its name.
        tag = hashlib.sha256(f"{schema}\x00{self._table}".encode("utf-8", "surrogatepass")).hexdigest()[:16]
        ids: dict[str, sql.Composable] = {
            "table": sql.Identifier(schema, self._table),
            "index": sql.Identifier(f"permits_{tag}_expires"),
            "sw_take": sql.Identifier(schema, f"permits_{tag}_sw_take"),
            "sl_take": sql.Identifier(schema, f"permits_{tag}_sl_take"),
            "cc_take": sql.Identifier(schema, f"permits_{tag}_cc_take"),
            "rules": sql.Identifier(schema, f"permits_{tag}_rules"),
        }
        lock = int.from_bytes(bytes.fromhex(tag), "big", signed=True)
        yield b"BEGIN", {}
        yield b"SELECT pg_advisory_xact_lock(%(lock)s)", {"lock": Int8(lock)}
        for statement in q.SCHEMA.split(";"):
            if statement.strip():
                yield _compose(statement, ids), {}
        for function in (q.SW_TAKE, log_q.SL_TAKE, q.CC_TAKE):
            yield _function(function, ids), {}
        yield b"COMMIT", {}
        statements = _Statements(
            tb_take=_compose(q.TB_TAKE, ids),
            fw_take=_compose(q.FW_TAKE, ids),
            swc_take=_compose(q.SWC_TAKE, ids),
            sw_take=_compose(q.SW_TAKE_CALL, ids),
            sl_take=_compose(log_q.SL_TAKE_CALL, ids),
            cc_take=_compose(q.CC_TAKE_CALL, ids),
            tb_refund=_compose(q.TB_REFUND, ids),
            window_refund=_compose(q.WINDOW_REFUND, ids),
            sw_refund=_compose(q.SW_REFUND, ids),
            sl_refund=_compose(log_q.SL_REFUND, ids),
            cc_refund=_compose(q.CC_REFUND, ids),
            cc_renew=_compose(q.CC_RENEW, ids),
            read=_compose(q.READ_STATE, ids),
            cc_held=_compose(q.CC_HELD, ids),
            signature=_compose(q.SIGNATURE, ids),
            purge=_compose(q.PURGE, ids),
            reset=_compose(q.RESET_STATE, ids),
            read_rules=_compose(q.READ_RULES, ids),
            publish_rule=_compose(q.PUBLISH_RULE, ids),
            rule_base=_compose(q.RULE_BASE, ids),
        )
        with self._statements_lock:
            self._statements = statements
        return statements

    # -- the steps, as plans ---------------------------------------------------------------------

    @staticmethod
    def _params(name: str | bytes, rule: Rule, now_ns: int | None, **extra: Any) -> dict[str, Any]:
        if rule.kind not in KINDS:
            raise ValueError(f"unknown rule kind {rule.kind!r}")
        if now_ns is not None and not isinstance(now_ns, int):
            raise TypeError(f"now_ns must be an int or None, not {type(now_ns).__name__}")
        period = rule.period_ns
        if rule.kind == "sliding_window":
            period = rule.period_ns // rule.amount  # a segment
        elif rule.kind == "sliding_log":
            period = -(-rule.period_ns // rule.amount)  # a segment: window / k, rounded up
        params: dict[str, Any] = {
            "key": _digest(name),
            "sig": rule.signature,
            "now": None if now_ns is None else Int8(now_ns),
            "limit": Int8(rule.limit),
            "period": Int8(max(period, 1)),  # concurrency has none: never divided by
            "amount": Int8(rule.amount),
            "window": Int8(rule.period_ns),
            "lifetime": Int8(min(rule.lifetime_ns, _MAX_LIFETIME)),
        }
        params.update({k: Int8(v) if isinstance(v, int) else v for k, v in extra.items()})
        if "ttl" in params:
            params["ttl"] = Int8(min(params["ttl"], _MAX_LIFETIME))
        return params

    def _bound(
        self, name: str | bytes, rule: Rule, n: int, now_ns: int | None, statement: bytes
    ) -> postgres_direct.Bound:
        """A one-statement take's statement and the parameters of its name and rule, made once (a
        bounded cache); the count and the time checked."""
        if not 0 <= n <= rule.limit:
            raise ValueError(f"permit count {n} is not between 0 and the limit {rule.limit}")
        if now_ns is not None and not isinstance(now_ns, int):
            raise TypeError(f"now_ns must be an int or None, not {type(now_ns).__name__}")
        bound = self._made_params.get((name, rule))
        if bound is None or bound.direct.statement is not statement:
            bound = postgres_direct.Bound(postgres_direct.direct(statement), self._params(name, rule, None))
            if len(self._made_params) >= _MADE_PARAMS:
                self._made_params.clear()
            self._made_params[(name, rule)] = bound
        return bound

    def _take_params(
        self, name: str | bytes, rule: Rule, n: int, now_ns: int | None, statement: bytes
    ) -> dict[str, Any]:
        """A one-statement take's parameters as psycopg takes them: its name's and rule's made once
        (_bound), the count and the time added."""
        params = self._bound(name, rule, n, now_ns, statement).params.copy()
        params["n"] = Int8(n)
        params["need"] = Int8(max(n, 1))
        if now_ns is not None:
            params["now"] = Int8(now_ns)
        return params

    @staticmethod
    def _mismatch(name: str | bytes, rule: Rule, recorded: object) -> ValueError:
        return ValueError(
            f"the state {_shown(name)} was made with the rule {recorded!s} and is used with {rule.signature}"
        )

    def _take(self, name: str | bytes, rule: Rule, n: int, lease_id: str | None, now_ns: int | None) -> Plan[Outcome]:
        if not 0 <= n <= rule.limit:
            raise ValueError(f"permit count {n} is not between 0 and the limit {rule.limit}")
        st = yield from self._ensure()
        params = self._params(name, rule, now_ns, n=n, need=max(n, 1))
        if rule.kind == "concurrency":
            if lease_id is None and n > 0:
                raise ValueError("a concurrency take needs a lease_id")
            params["lease"] = None if lease_id is None else _digest(lease_id)
            params["ttl"] = Int8(min(rule.lease_ttl_ns, _MAX_LIFETIME))
            row = yield st.cc_take, params
            assert row is not None
            ok, available, _, recorded = row
            if recorded is not None:
                raise self._mismatch(name, rule, recorded)
            return Outcome(ok, available, -1, 0)
        if rule.kind in ("sliding_window", "sliding_log"):
            row = yield (st.sw_take if rule.kind == "sliding_window" else st.sl_take), params
            assert row is not None
            ok, stamp, available, free_at, now, recorded = row
            if recorded is not None:
                raise self._mismatch(name, rule, recorded)
            return Outcome(ok, available, -1 if ok else max(0, free_at - now), stamp)
        statement = _one_statement(st, rule)
        for _ in range(3):
            row = yield statement, params
            if row is not None:
                return _one_statement_outcome(rule, n, row)
            # No row: the state has another signature (or was purged just now: step again).
            row = yield st.signature, params
            if row is not None and row[0] != rule.signature:
                raise self._mismatch(name, rule, row[0])
        raise BackendError(f"the state {_shown(name)} changed under three steps in a row")

    def _refund(
        self, name: str | bytes, rule: Rule, n: int, stamp: int, lease_id: str | None, now_ns: int | None
    ) -> Plan[None]:
        st = yield from self._ensure()
        params = self._params(name, rule, now_ns, n=n, stamp=stamp)
        if rule.kind == "concurrency":
            if lease_id is None:
                return None  # nothing was recorded (n == 0)
            params["lease"] = _digest(lease_id)
            statement = st.cc_refund
        else:
            statement = {"token_bucket": st.tb_refund, "sliding_window": st.sw_refund, "sliding_log": st.sl_refund}.get(
                rule.kind, st.window_refund
            )
        row = yield statement, params
        if row is not None and row[0] is not None and row[0] != rule.signature:
            raise self._mismatch(name, rule, row[0])
        return None

    def _renew(self, name: str | bytes, rule: Rule, lease_ids: list[str], now_ns: int | None) -> Plan[list[str]]:
        if rule.kind != "concurrency":
            raise ValueError(f"only concurrency leases are renewed, not {rule.kind}")
        st = yield from self._ensure()
        params = self._params(name, rule, now_ns, ttl=rule.lease_ttl_ns)
        digests = [_digest(lease) for lease in lease_ids]
        params["leases"] = digests
        row = yield st.cc_renew, params
        if row is not None and row[0] is not None and row[0] != rule.signature:
            raise self._mismatch(name, rule, row[0])
        renewed = {bytes(lease) for lease in (row[1] if row is not None else None) or ()}
        return [lease for lease, digest in zip(lease_ids, digests, strict=True) if digest not in renewed]

    def _purge(self, now_ns: int | None, most: int) -> Plan[int]:
        st = yield from self._ensure()
        row = yield st.purge, {"now": None if now_ns is None else Int8(now_ns), "most": Int8(most)}
        return int(row[0]) if row is not None else 0

    def purge(self, now_ns: int | None, most: int) -> int:
        """Deletes up to ``most`` expired rows (housekeeping); how many."""
        return self._run(lambda: self._purge(now_ns, most))

    async def purge_async(self, now_ns: int | None, most: int) -> int:
        return await self._run_async(lambda: self._purge(now_ns, most))

    def _available(self, name: str | bytes, rule: Rule, now_ns: int | None) -> Plan[int]:
        st = yield from self._ensure()
        params = self._params(name, rule, now_ns)
        if rule.kind == "concurrency":
            row = yield st.cc_held, params
            assert row is not None
            if row[0] is not None and row[0] != rule.signature:
                raise self._mismatch(name, rule, row[0])
            return max(0, rule.limit - int(row[1]))
        row = yield st.read, params
        assert row is not None
        if row[1] is not None and row[1] != rule.signature:
            raise self._mismatch(name, rule, row[1])
        return arith.available(rule, row)

    def _reset(self, name: str | bytes, rule: Rule) -> Plan[None]:
        st = yield from self._ensure()
        yield st.reset, {"key": _digest(name)}
        return None

    def _read_rules(self, names: Sequence[str]) -> Plan[dict[str, Record | None]]:
        st = yield from self._ensure()
        row = yield st.read_rules, {"names": [_rule_name(name) for name in names]}
        found: dict[str, Record | None] = dict.fromkeys(names)
        if row is not None and row[0] is not None:
            for name, gen, base, sig in zip(*row, strict=True):
                found[bytes(name).decode("utf-8", "surrogatepass")] = Record(int(gen), base, sig)
        return found

    def _publish_rule(self, name: str, base: str, sig: str) -> Plan[Record]:
        st = yield from self._ensure()
        params = {"name": _rule_name(name), "base": base, "sig": sig}
        row = yield st.publish_rule, params
        if row is not None:
            return Record(int(row[0]), base, sig)
        row = yield st.rule_base, params
        raise made_from_another_base(name, row[0] if row else None, base, "a table")

    # -- drivers ---------------------------------------------------------------------------------

    def _sync_source(self) -> SyncSource:
        if self._sync is None:
            raise TypeError(
                "this PostgreSQL backend serves asyncio (an async connection or pool): use the *_async members"
            )
        return self._sync

    def _async_source(self) -> AsyncSource:
        if self._async is None:
            raise TypeError(
                "this PostgreSQL backend serves sync callers (a sync connection or pool): use take(), not take_async()"
            )
        return self._async

    def _run(self, plan: Callable[[], Plan[T]]) -> T:
        source = self._sync_source()
        for attempt in range(2):
            gen = plan()
            try:
                return _settle(source.run(partial(_drive, gen), time.monotonic() + self._timeout))
            except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction) as e:
                self._forget_schema(e, attempt)
            except psycopg.Error as e:
                raise BackendError(f"PostgreSQL failed: {e}") from e
        raise AssertionError("unreachable")

    async def _run_async(self, plan: Callable[[], Plan[T]]) -> T:
        source = self._async_source()
        for attempt in range(2):
            gen = plan()
            try:
                return _settle(await source.run(partial(_drive_async, gen), time.monotonic() + self._timeout))
            except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction) as e:
                self._forget_schema(e, attempt)
            except psycopg.Error as e:
                raise BackendError(f"PostgreSQL failed: {e}") from e
        raise AssertionError("unreachable")

    def _forget_schema(self, error: psycopg.Error, attempt: int) -> None:
        """The table or its functions are gone (dropped since we made them): make them again, once."""
        if attempt > 0:
            raise BackendError(f"PostgreSQL failed: {error}") from error
        with self._statements_lock:
            self._statements = None

    # -- the Backend members ---------------------------------------------------------------------

    def take(self, name: str | bytes, rule: Rule, n: int, lease_id: str | None, now_ns: int | None) -> Outcome:
        statements = self._statements
        if statements is not None and rule.kind in _ONE_STATEMENT:
            # The short way of the kinds whose take is one statement: its parameters mostly made
            # once, no plan; a row-less answer (another signature) goes the plan's way, which
            # steps again and tells why (the row-less step wrote nothing).
            bound = self._bound(name, rule, n, now_ns, _one_statement(statements, rule))
            work = partial(postgres_direct.first_row, bound, n, now_ns)
            try:
                row = self._sync_source().run(work, time.monotonic() + self._timeout)
            except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction) as e:
                self._forget_schema(e, 0)
                row = None
            except psycopg.Error as e:
                raise BackendError(f"PostgreSQL failed: {e}") from e
            if row is not None:
                return _one_statement_outcome(rule, n, row)
        return self._run(lambda: self._take(name, rule, n, lease_id, now_ns))

    def refund(
        self, name: str | bytes, rule: Rule, n: int, stamp: int, lease_id: str | None, now_ns: int | None
    ) -> None:
        self._run(lambda: self._refund(name, rule, n, stamp, lease_id, now_ns))

    def renew(self, name: str | bytes, rule: Rule, lease_ids: list[str], now_ns: int | None) -> list[str]:
        return self._run(lambda: self._renew(name, rule, lease_ids, now_ns))

    def available(self, name: str | bytes, rule: Rule, now_ns: int | None) -> int:
        return self._run(lambda: self._available(name, rule, now_ns))

    def reset(self, name: str | bytes, rule: Rule) -> None:
        self._run(lambda: self._reset(name, rule))

    def take_soon(
        self, name: str | bytes, rule: Rule, n: int, lease_id: str | None, now_ns: int | None, undo: soon.Undo
    ) -> asyncio.Future[Outcome]:
        return soon.by_task(self.take_async(name, rule, n, lease_id, now_ns), n, lease_id, undo)

    async def take_async(
        self, name: str | bytes, rule: Rule, n: int, lease_id: str | None, now_ns: int | None
    ) -> Outcome:
        statements = self._statements
        if statements is not None and rule.kind in _ONE_STATEMENT:  # (as take)
            statement = _one_statement(statements, rule)
            work = partial(_first_row_async, statement, self._take_params(name, rule, n, now_ns, statement))
            try:
                row = await self._async_source().run(work, time.monotonic() + self._timeout)
            except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction) as e:
                self._forget_schema(e, 0)
                row = None
            except psycopg.Error as e:
                raise BackendError(f"PostgreSQL failed: {e}") from e
            if row is not None:
                return _one_statement_outcome(rule, n, row)
        return await self._run_async(lambda: self._take(name, rule, n, lease_id, now_ns))

    async def refund_async(
        self, name: str | bytes, rule: Rule, n: int, stamp: int, lease_id: str | None, now_ns: int | None
    ) -> None:
        await self._run_async(lambda: self._refund(name, rule, n, stamp, lease_id, now_ns))

    async def renew_async(self, name: str | bytes, rule: Rule, lease_ids: list[str], now_ns: int | None) -> list[str]:
        return await self._run_async(lambda: self._renew(name, rule, lease_ids, now_ns))

    async def available_async(self, name: str | bytes, rule: Rule, now_ns: int | None) -> int:
        return await self._run_async(lambda: self._available(name, rule, now_ns))

    async def reset_async(self, name: str | bytes, rule: Rule) -> None:
        await self._run_async(lambda: self._reset(name, rule))

    def read_rules(self, names: Sequence[str]) -> dict[str, Record | None]:
        """The changed limits of ``names`` (None: never changed), in one statement."""
        return self._run(lambda: self._read_rules(names))

    async def read_rules_async(self, names: Sequence[str]) -> dict[str, Record | None]:
        return await self._run_async(lambda: self._read_rules(names))

    def publish_rule(self, name: str, base: str, sig: str) -> Record:
        """Records ``sig`` as the rule of ``name``, whose states were made with ``base``."""
        return self._run(lambda: self._publish_rule(name, base, sig))

    async def publish_rule_async(self, name: str, base: str, sig: str) -> Record:
        return await self._run_async(lambda: self._publish_rule(name, base, sig))

    def close(self) -> None:
        """Closes the connections the backend made (not a connection or pool it was given)."""
        for source in (self._sync, self._async):
            if source is not None:
                source.close()


def _function(template: str, ids: dict[str, sql.Composable]) -> bytes:
    """CREATE FUNCTION with its body as a quoted literal, never dollar-quoted: a table name with
    ``$fn$`` in it cannot end the body early."""
    head, body, tail = template.split("$fn$")
    composed_body = sql.SQL(body).format(**ids).as_string(None)
    return (sql.SQL(head).format(**ids) + sql.Literal(composed_body) + sql.SQL(tail)).as_bytes(None)


class _Failed:
    """What a plan raised (not a psycopg error): raised again outside the source, whose
    connection is healthy (the work itself must not raise for that)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def _settle(result: T | _Failed) -> T:
    if isinstance(result, _Failed):
        raise result.error
    return result


def _drive(gen: Plan[T], conn: Conn) -> T | _Failed:
    try:
        request = next(gen)
        while True:
            statement, params = request
            row = conn.execute(statement, params).fetchone() if params else _execute_plain(conn, statement)
            request = gen.send(row)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    except (ValueError, TypeError, BackendError) as e:
        return _Failed(e)


def _one_statement(statements: _Statements, rule: Rule) -> bytes:
    """The take of a kind whose step is one statement (_ONE_STATEMENT)."""
    if rule.kind == "token_bucket":
        return statements.tb_take
    return statements.fw_take if rule.kind == "fixed_window" else statements.swc_take


def _one_statement_outcome(rule: Rule, n: int, row: Row) -> Outcome:
    ok, anchor, a, b, c, now = RESULT.unpack(row[0])  # (the one-statement takes' RETURNING)
    if rule.kind == "token_bucket":
        return arith.token_bucket(rule, n, ok, anchor, a, b, now)
    if rule.kind == "fixed_window":
        return arith.fixed_window(rule, ok, anchor, a, b, now)
    return arith.counter(rule, n, ok, anchor, a, b, c, now)


async def _first_row_async(statement: bytes, params: dict[str, Any], conn: AConn) -> Row | None:
    return await (await conn.execute(statement, params)).fetchone()


def _execute_plain(conn: Conn, statement: bytes) -> Row | None:
    cur = conn.execute(statement, prepare=False)
    return cur.fetchone() if cur.description else None


async def _drive_async(gen: Plan[T], conn: AConn) -> T | _Failed:
    try:
        request = next(gen)
        while True:
            statement, params = request
            if params:
                row = await (await conn.execute(statement, params)).fetchone()
            else:
                cur = await conn.execute(statement, prepare=False)
                row = await cur.fetchone() if cur.description else None
            request = gen.send(row)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    except (ValueError, TypeError, BackendError) as e:
        return _Failed(e)
