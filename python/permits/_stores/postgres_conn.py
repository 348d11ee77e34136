"""Where the PostgreSQL backend gets its connections, each use bounded by the backend's timeout.

A source runs ``work(conn)`` on one connection before ``deadline`` (time.monotonic()):

* a conninfo string: connections of our own, a few kept idle (sync: one list, thread-safe;
  asyncio: one list per event loop, its connections made in that loop);
* a given ``psycopg.Connection`` / ``AsyncConnection``: used by one call at a time;
* a given ``psycopg_pool.ConnectionPool`` / ``AsyncConnectionPool``: borrowed and returned.

Failures to reach the server, and a server that does not answer by the deadline, raise
``permits.BackendError``; the connection is then discarded (closed; a pool replaces it).
An error the server reported on a healthy connection (e.g. a missing table) is re-raised as it is,
for the backend to judge. No transaction stays open: our connections are in autocommit, and a
given one that is not is committed after the work (rolled back, or discarded, on error).
"""

from __future__ import annotations

import asyncio
import math
import select
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

import psycopg
import psycopg_pool
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .._forking import AfterFork, keep_inherited
from ..errors import BackendError
from .postgres_watchdog import WATCHDOG, arm_async, disarm_async

T = TypeVar("T")
Conn = psycopg.Connection[tuple[Any, ...]]
AConn = psycopg.AsyncConnection[tuple[Any, ...]]

#: Idle connections kept per list (more callers at once make more, closed after use).
MAX_IDLE = 8

_OWN_SOURCES: AfterFork[Any] = AfterFork(lambda source: source._forget_after_fork())


_IDLE = int(pq.TransactionStatus.IDLE)


def _remaining(deadline: float, timeout: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise BackendError(f"PostgreSQL did not answer within the timeout of {timeout} s")
    return left


def _stale(conn: Conn | AConn) -> bool:
    """An idle connection with something to read has been closed by the server (a restart, an
    idle timeout): poll, don't ask (no round trip)."""
    if conn.closed or conn.info.transaction_status != pq.TransactionStatus.IDLE:
        return True
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _failure(error: BaseException, fired: bool, timeout: float) -> BackendError:
    if fired:
        failure = BackendError(f"PostgreSQL did not answer within the timeout of {timeout} s")
    else:
        failure = BackendError(f"PostgreSQL failed: {error}")
    failure.__cause__ = error  # raised later, away from the except clause
    return failure


def our_conninfo(conninfo: str, timeout: float) -> str:
    """The conninfo with libpq's connect timeout (whole seconds, at least 2: our own bound is the
    caller's deadline) and a server-side statement timeout (a query whose client gave up ends)."""
    params = conninfo_to_dict(conninfo)
    params.setdefault("connect_timeout", str(max(2, math.ceil(timeout))))
    ms = max(1, math.ceil(timeout * 1000))
    options = str(params.get("options") or "")
    params["options"] = f"{options} -c statement_timeout={ms} -c idle_in_transaction_session_timeout={ms}".strip()
    return make_conninfo("", **params)


def _healthy_after(conn: Conn | AConn, error: BaseException | None) -> bool:
    """Whether a connection can be used again after an error the server reported."""
    if error is None:
        return True
    if conn.closed or conn.broken:
        return False
    return isinstance(error, psycopg.Error) and error.sqlstate is not None


# -- sync ------------------------------------------------------------------------------------


def _use(
    conn: Conn, work: Callable[[Conn], T], deadline: float, timeout: float
) -> tuple[T | None, bool, BaseException | None]:
    """Runs work under the watchdog: (result, whether conn may be kept, the error if any)."""
    alarm = WATCHDOG.arm(deadline, conn.fileno())
    try:
        result = work(conn)
        if not conn.autocommit and conn.pgconn.transaction_status != _IDLE:  # (else commit() has nothing to do)
            conn.commit()
    except BaseException as e:  # the caller re-raises it
        fired = WATCHDOG.disarm(alarm)
        if fired or not _healthy_after(conn, e):
            return None, False, _failure(e, fired, timeout) if isinstance(e, psycopg.Error) or fired else e
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:  # e.g. the schema's transaction
            try:
                conn.rollback()
            except psycopg.Error:
                return None, False, e
        return None, True, e
    fired = WATCHDOG.disarm(alarm)
    return result, not fired, None


class SyncSource:
    def run(self, work: Callable[[Conn], T], deadline: float) -> T:
        raise NotImplementedError

    def close(self) -> None:
        pass


class OwnSyncPool(SyncSource):
    """Connections of our own, made on demand (no background threads, so a server that comes back
    is used at once); a connect waits at most until the caller's deadline."""

    def __init__(self, conninfo: str, timeout: float) -> None:
        self._conninfo = our_conninfo(conninfo, timeout)
        self._timeout = timeout
        self._lock = threading.Lock()
        self._idle: list[Conn] = []
        self._closed = False
        # libpq's connect timeout is whole seconds (2 at least): connects run on these threads so
        # that the caller waits no longer than its deadline; an abandoned one ends on its own.
        self._connector = ThreadPoolExecutor(max_workers=2, thread_name_prefix="permits-postgres-connect")
        _OWN_SOURCES.add(self)

    def _forget_after_fork(self) -> None:
        """In a forked child: the parent's connections and threads are not this process's."""
        keep_inherited(self._idle)  # (closing one would end the parent's session on the shared socket)
        self._idle = []
        self._lock = threading.Lock()
        self._connector = ThreadPoolExecutor(max_workers=2, thread_name_prefix="permits-postgres-connect")

    def _connect(self) -> Conn:
        return psycopg.Connection.connect(self._conninfo, autocommit=True)

    def _get(self, deadline: float) -> Conn:
        while True:
            with self._lock:
                if self._closed:
                    raise BackendError("the PostgreSQL backend is closed")
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            if not _stale(conn):
                return conn
            conn.close()
        future = self._connector.submit(self._connect)
        try:
            return future.result(timeout=_remaining(deadline, self._timeout))
        except FutureTimeout:
            if not future.cancel():
                future.add_done_callback(_close_late)
            raise BackendError(f"could not connect to PostgreSQL within the timeout of {self._timeout} s") from None
        except psycopg.Error as e:
            raise BackendError(f"could not connect to PostgreSQL: {e}") from e

    def _put(self, conn: Conn) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def run(self, work: Callable[[Conn], T], deadline: float) -> T:
        conn = self._get(deadline)
        result, keep, error = _use(conn, work, deadline, self._timeout)
        if keep:
            self._put(conn)
        else:
            conn.close()
        if error is not None:
            raise error
        return result  # type: ignore[return-value]  # no error: work's result

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        self._connector.shutdown(wait=False, cancel_futures=True)


def _close_late(future: Future[Conn]) -> None:
    """A connection made after its caller gave up."""
    if not future.cancelled() and future.exception() is None:
        future.result().close()


class GivenConnection(SyncSource):
    """A connection we were given: one call at a time uses it (waiting no longer than the deadline).
    One that timed out is closed: the backend fails from then on (a conninfo or a pool recovers)."""

    def __init__(self, conn: Conn, timeout: float) -> None:
        self._conn = conn
        self._timeout = timeout
        self._lock = threading.Lock()

    def run(self, work: Callable[[Conn], T], deadline: float) -> T:
        if not self._lock.acquire(timeout=_remaining(deadline, self._timeout)):
            raise BackendError(f"the PostgreSQL connection was busy for the timeout of {self._timeout} s")
        try:
            if self._conn.closed:
                raise BackendError("the PostgreSQL connection given to the backend is closed")
            result, keep, error = _use(self._conn, work, deadline, self._timeout)
            if not keep:
                self._conn.close()
        finally:
            self._lock.release()
        if error is not None:
            raise error
        return result  # type: ignore[return-value]


class GivenPool(SyncSource):
    def __init__(self, pool: psycopg_pool.ConnectionPool[Any], timeout: float) -> None:
        self._pool = pool
        self._timeout = timeout

    def run(self, work: Callable[[Conn], T], deadline: float) -> T:
        try:
            conn = self._pool.getconn(timeout=_remaining(deadline, self._timeout))
        except psycopg.Error as e:  # PoolTimeout, PoolClosed
            raise BackendError(f"no PostgreSQL connection from the pool: {e}") from e
        try:
            result, keep, error = _use(conn, work, deadline, self._timeout)
            if not keep:
                conn.close()  # the pool sees it closed and replaces it
        finally:
            self._pool.putconn(conn)
        if error is not None:
            raise error
        return result  # type: ignore[return-value]


# -- asyncio ---------------------------------------------------------------------------------


async def _use_async(
    conn: AConn, work: Callable[[AConn], Awaitable[T]], deadline: float, timeout: float
) -> tuple[T | None, bool, BaseException | None]:
    alarm = arm_async(asyncio.get_running_loop(), deadline, conn.fileno())
    try:
        result = await work(conn)
        if not conn.autocommit:
            await conn.commit()
    except BaseException as e:  # the caller re-raises it
        fired = disarm_async(alarm)
        if fired or not _healthy_after(conn, e):
            return None, False, _failure(e, fired, timeout) if isinstance(e, psycopg.Error) or fired else e
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:  # e.g. the schema's transaction
            try:
                await conn.rollback()
            except psycopg.Error:
                return None, False, e
        return None, True, e
    fired = disarm_async(alarm)
    return result, not fired, None


def _finish(conn: AConn) -> None:
    """Closes an asyncio connection from anywhere (its loop may be gone): the socket, at once."""
    conn.pgconn.finish()


def _finish_all(idle: list[AConn]) -> None:
    for conn in idle:
        _finish(conn)
    idle.clear()


class AsyncSource:
    async def run(self, work: Callable[[AConn], Awaitable[T]], deadline: float) -> T:
        raise NotImplementedError

    def close(self) -> None:
        pass


class OwnAsyncPools(AsyncSource):
    """Connections of our own for each event loop (a connection belongs to the loop it was made
    in): several threads each running asyncio.run share the backend. A loop's idle connections
    are closed when the loop is collected."""

    def __init__(self, conninfo: str, timeout: float) -> None:
        self._conninfo = our_conninfo(conninfo, timeout)
        self._timeout = timeout
        self._lock = threading.Lock()
        self._idle: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[AConn]] = weakref.WeakKeyDictionary()
        self._closed = False
        _OWN_SOURCES.add(self)

    def _forget_after_fork(self) -> None:
        """In a forked child: the parent's connections (and loops) are not this process's."""
        for idle in self._idle.values():
            keep_inherited(list(idle))
            idle.clear()
        self._idle = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def _idle_of(self, loop: asyncio.AbstractEventLoop) -> list[AConn]:
        with self._lock:
            if self._closed:
                raise BackendError("the PostgreSQL backend is closed")
            idle = self._idle.get(loop)
            if idle is None:
                idle = self._idle[loop] = []
                weakref.finalize(loop, _finish_all, idle)
            return idle

    async def _get(self, idle: list[AConn], deadline: float) -> AConn:
        while idle:
            conn = idle.pop()
            if not _stale(conn):
                return conn
            _finish(conn)
        try:
            async with asyncio.timeout(_remaining(deadline, self._timeout)):
                return await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        except TimeoutError:
            raise BackendError(f"could not connect to PostgreSQL within the timeout of {self._timeout} s") from None
        except psycopg.Error as e:
            raise BackendError(f"could not connect to PostgreSQL: {e}") from e

    async def run(self, work: Callable[[AConn], Awaitable[T]], deadline: float) -> T:
        idle = self._idle_of(asyncio.get_running_loop())
        conn = await self._get(idle, deadline)
        result, keep, error = await _use_async(conn, work, deadline, self._timeout)
        if keep and not self._closed and len(idle) < MAX_IDLE:
            idle.append(conn)
        else:
            _finish(conn)
        if error is not None:
            raise error
        return result  # type: ignore[return-value]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            lists = list(self._idle.values())
        for idle in lists:
            _finish_all(idle)


class GivenAsyncConnection(AsyncSource):
    def __init__(self, conn: AConn, timeout: float) -> None:
        self._conn = conn
        self._timeout = timeout
        self._lock: asyncio.Lock | None = None

    async def run(self, work: Callable[[AConn], Awaitable[T]], deadline: float) -> T:
        if self._lock is None:
            self._lock = asyncio.Lock()
        try:
            async with asyncio.timeout(_remaining(deadline, self._timeout)):
                await self._lock.acquire()
        except TimeoutError:
            raise BackendError(f"the PostgreSQL connection was busy for the timeout of {self._timeout} s") from None
        try:
            if self._conn.closed:
                raise BackendError("the PostgreSQL connection given to the backend is closed")
            result, keep, error = await _use_async(self._conn, work, deadline, self._timeout)
            if not keep:
                _finish(self._conn)
        finally:
            self._lock.release()
        if error is not None:
            raise error
        return result  # type: ignore[return-value]


class GivenAsyncPool(AsyncSource):
    def __init__(self, pool: psycopg_pool.AsyncConnectionPool[Any], timeout: float) -> None:
        self._pool = pool
        self._timeout = timeout

    async def run(self, work: Callable[[AConn], Awaitable[T]], deadline: float) -> T:
        try:
            conn = await self._pool.getconn(timeout=_remaining(deadline, self._timeout))
        except psycopg.Error as e:
            raise BackendError(f"no PostgreSQL connection from the pool: {e}") from e
        try:
            result, keep, error = await _use_async(conn, work, deadline, self._timeout)
            if not keep:
                await conn.close()
        finally:
            await self._pool.putconn(conn)
        if error is not None:
            raise error
        return result  # type: ignore[return-value]
