"""A step's command written straight onto a pooled connection of a plain Redis client.

A step is one FCALL, EVALSHA or EVAL whose reply redis-py hands back as read (no response callback).
Sent by ``execute_command``, each costs some 15-20 us of the client's CPU beyond the socket's own work
(redis-py 8: its observability hooks, the retry wrapper, the arguments' encoding one by one): as
much as the whole step costs the server. Here the command is packed at once (RESP: an array of bulk
strings) and sent on a connection of the client's own pool, whose reader parses the reply and raises
the server's errors (``ResponseError``, ``NoScriptError``, ...) as ``execute_command`` would; a
connection that fails or is interrupted mid-reply is disconnected before it goes back to the pool,
and the client's own retry policy still applies to connection errors.

Only a client of redis-py's own ``Redis`` class (sync or asyncio) without a single connection is
driven so; a Cluster client, a subclass and a client whose ``execute_command`` was wrapped (a
tracer's instrumentation) get ``execute_command``, which sees every step as before.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import redis
import redis.asyncio
import redis.exceptions


def _needs_command_name(pool_class: Any) -> bool:
    """redis-py before 5.3 asks ``get_connection`` for a command name; later ones warn when given one."""
    found = inspect.signature(pool_class.get_connection).parameters.get("command_name")
    return found is not None and found.default is inspect.Parameter.empty


_NAMED: dict[type, bool] = {}


def get_connection(pool: Any) -> Any:
    """A connection of ``pool`` (a coroutine's for an asyncio pool), asked as its redis-py wants."""
    named = _NAMED.get(type(pool))
    if named is None:
        named = _NAMED[type(pool)] = _needs_command_name(type(pool))
    return pool.get_connection("FCALL") if named else pool.get_connection()


def packed(command: tuple[Any, ...], encoder: Any) -> list[bytes]:
    """``command`` as RESP (one bytes): bytes as given, anything else by the connection's encoder."""
    parts = [b"*%d\r\n" % len(command)]
    for arg in command:
        if arg.__class__ is not bytes:
            arg = _NAMES.get(arg) or encoder.encode(arg)
        parts.append(b"$%d\r\n%b\r\n" % (len(arg), arg))
    return [b"".join(parts)]


#: The commands' names and key counts as the wire has them (plain ASCII in any encoding).
_NAMES: dict[object, bytes] = {"FCALL": b"FCALL", "EVALSHA": b"EVALSHA", "EVAL": b"EVAL", 1: b"1", 2: b"2"}


def execute(client: Any, *command: Any) -> Any:
    """``client.execute_command(*command)`` for a step (its reply unparsed), on a pooled connection
    when ``client`` is redis-py's plain sync client."""
    if (
        client.__class__ is not redis.Redis
        or client.connection is not None
        or hasattr(redis.Redis.execute_command, "__wrapped__")  # (instrumented, maybe after this import)
    ):
        return client.execute_command(*command)
    pool = client.connection_pool
    kept = getattr(pool, _KEPT, None)
    conn = _kept_connection(kept) if kept else None
    if conn is None:
        conn = get_connection(pool)
    try:
        conn.send_packed_command(packed(command, conn.encoder))
        return conn.read_response()
    except redis.exceptions.ResponseError:
        raise  # (the whole reply was read: the connection is fine)
    except BaseException:
        conn.disconnect()  # (a reply may be left half read)
        raise
    finally:
        if kept is not None:
            kept.append(conn)
        else:
            pool.release(conn)


#: The attribute of the plain pools of the stores' own sync clients (redis_clients.bounded_sync_client),
#: which no one else uses: the connections their steps used, kept for the next step rather than given
#: back to the pool and taken from it again (redis-py 8's pool costs some 13-19 us a round on this
#: machine, its observability's bookkeeping; the check that the connection is still sound is kept).
#: On the pool itself, so that the connections go with it (a weak map from pool to connections would
#: keep the pool alive: redis-py 8's connections reach their pool).
_KEPT = "_permits_kept_connections"


def keep_connections(pool: Any) -> None:
    """The steps on ``pool`` (a store's own, used by no one else) keep their connections."""
    if type(pool) is redis.ConnectionPool:
        setattr(pool, _KEPT, [])


def _kept_connection(kept: list[Any]) -> Any:
    try:
        conn = kept.pop()
    except IndexError:  # (another thread took the last one)
        return None
    if getattr(conn, "_sock", True) is None:
        return conn  # (disconnected by a failed step: connected as the step is sent, not twice)
    try:
        if conn.can_read():  # (data no step asked for, or closed by the server: as the pool checks)
            conn.disconnect()
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
        conn.disconnect()  # (connected again as the step is sent)
    return conn


def pipelined(client: Any) -> bool:
    """Whether steps are written straight onto the pooled connections of ``client``, an asyncio
    client: redis-py's plain one, not instrumented, not on a single connection."""
    return (
        client.__class__ is redis.asyncio.Redis
        and not client.single_connection_client
        and not hasattr(redis.asyncio.Redis.execute_command, "__wrapped__")
    )


async def execute_async(client: Any, *command: Any) -> Any:
    """As ``execute``, for redis-py's plain asyncio client (its retry policy kept)."""
    if not pipelined(client):
        return await client.execute_command(*command)
    pool = client.connection_pool
    conn = await get_connection(pool)
    try:
        return await conn.retry.call_with_retry(lambda: _send_read(conn, command), lambda _error: conn.disconnect())
    except redis.exceptions.ResponseError:
        raise
    except BaseException:
        await conn.disconnect(nowait=True)  # (cancelled mid-reply: the rest must not be read as another's)
        raise
    finally:
        await pool.release(conn)


async def _send_read(conn: Any, command: tuple[Any, ...]) -> Any:
    await write(conn, packed(command, conn.encoder))
    # Read without a timer of its own (the socket timeout's asyncio.timeout per read): the step's
    # deadline bounds it.
    return await conn.read_response(timeout=math.inf)


async def write(conn: Any, data: list[bytes]) -> None:
    """Writes packed commands onto an asyncio connection."""
    writer = getattr(conn, "_writer", None)
    if writer is None or conn.health_check_interval:
        await conn.send_packed_command(data)
    else:
        # Written as send_packed_command does, without its asyncio.wait_for (a task per write on
        # Python 3.11 when the client has a socket timeout, as redis-py 8's have by default): the
        # step's own deadline bounds the write (redis_backend._run_async).
        try:
            writer.writelines(data)
            await writer.drain()
        except OSError as exc:
            await conn.disconnect(nowait=True)
            raise redis.exceptions.ConnectionError(f"Error while writing to the socket: {exc}") from exc
