"""The redis-py clients the Redis backend accepts, and the sync client it runs its steps with.

A sync client's own ``socket_timeout`` may be ``None`` (redis-py 5's default: a hung server
blocks forever) and it may retry with backoff, so the backend never uses it for a step: it builds
a client of its own over the same servers and connection options, whose connections give up
after the backend's timeout (connecting, and each read) and which never retries. A connection
that timed out is closed by redis-py, so no stale reply is read from it later. Asyncio clients
are used as given, each step under ``asyncio.timeout`` (a cancelled read closes its connection).
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import redis.exceptions
import redis.sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry

from .redis_wire import keep_connections

# redis-py leaves these untyped: called through Any (mypy's strict mode refuses untyped calls).
_SentinelConnectionPool: Any = redis.sentinel.SentinelConnectionPool
_Sentinel: Any = redis.sentinel.Sentinel
_ClusterNode: Any = redis.cluster.ClusterNode

SYNC_CLIENTS: tuple[type, ...] = (redis.Redis, redis.cluster.RedisCluster)
ASYNC_CLIENTS: tuple[type, ...] = (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)

#: What a step raises when the server cannot be reached or used now (a step's BackendError).
UNAVAILABLE: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,  # refused, reset, loading, no master (sentinel), auth
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterError,  # cluster down, slot not served
    redis.exceptions.RedisClusterException,  # no reachable node
    redis.exceptions.TryAgainError,  # a slot moving between nodes
    redis.exceptions.ReadOnlyError,  # a master turned replica (failover)
    redis.exceptions.OutOfMemoryError,
    OSError,  # includes TimeoutError, which asyncio.timeout raises
)


#: What the server said, for the errors that are answers rather than silence (most specific first).
_SAID: tuple[tuple[type[BaseException], str], ...] = (
    (redis.exceptions.AuthenticationError, "refused the client's credentials (authentication failed)"),
    (redis.exceptions.AuthenticationWrongNumberOfArgsError, "refused the client's credentials (authentication failed)"),
    (redis.exceptions.ReadOnlyError, "is a read-only replica (READONLY: the client reaches a replica, or a "
     "failover made this server one)"),
    (redis.exceptions.OutOfMemoryError, "is out of memory (OOM: maxmemory reached, and its policy evicts nothing)"),
    (redis.exceptions.TryAgainError, "asked to try again (TRYAGAIN: the key's slot is moving between nodes)"),
    (redis.exceptions.BusyLoadingError, "is loading its data set into memory"),
)  # fmt: skip


def unavailable_reason(exc: BaseException, timeout: float) -> str:
    """Why a step could not be done, in words: what the server answered (credentials refused,
    a read-only replica, out of memory, TRYAGAIN...), a TLS failure, a database it refused, or
    silence: unreachable, or no answer within ``timeout``."""
    for kind, said in _SAID:
        if isinstance(exc, kind):
            return f"Redis {said}: {exc}"
    text = str(exc)
    if isinstance(exc, ssl.SSLError) or "SSL" in text or "certificate" in text.lower():
        return f"Redis could not be reached over TLS: {exc}"
    if "Invalid Database" in text or "DB index is out of range" in text:
        return f"Redis refused the database the client asked for: {exc}"
    if isinstance(exc, redis.exceptions.TimeoutError | TimeoutError):
        return f"Redis did not answer within {timeout} s: {exc!r}"
    return f"Redis could not be reached, or did not answer within {timeout} s: {exc!r}"


def is_async_client(client: object) -> bool:
    """True for an asyncio client, False for a sync one; TypeError naming ``client`` otherwise."""
    if isinstance(client, SYNC_CLIENTS):
        return False
    if isinstance(client, ASYNC_CLIENTS):
        return True
    raise TypeError(
        "client must be a redis-py client (redis.Redis, redis.asyncio.Redis, redis.cluster.RedisCluster, redis."
        f"asyncio.cluster.RedisCluster, or one from redis.sentinel.Sentinel.master_for), got {type(client).__name__}"
    )


class Bounded(NamedTuple):
    """A sync client whose calls end within the timeout, and what closes what it opened."""

    client: Any
    close: Callable[[], None]


def _no_retry() -> Retry:
    return Retry(NoBackoff(), 0)


def _bounded_kwargs(kwargs: dict[str, Any], timeout: float) -> dict[str, Any]:
    out = dict(kwargs)
    out.update(socket_timeout=timeout, socket_connect_timeout=timeout, retry=_no_retry())
    return out


def bounded_sync_client(client: Any, timeout: float) -> Bounded:
    """A client over ``client``'s servers and connection options whose every call ends (answered
    or raising) within about ``timeout``: connecting and each read give up after it, and nothing
    is retried. For Cluster and Sentinel the discovery of nodes or of the master is bounded too."""
    if isinstance(client, redis.cluster.RedisCluster):
        return _bounded_cluster(client, timeout)
    pool = client.connection_pool
    kwargs = _bounded_kwargs(pool.connection_kwargs, timeout)
    if isinstance(pool, redis.sentinel.SentinelConnectionPool):
        kwargs.pop("connection_pool", None)  # the given pool's proxy; the new pool makes its own
        manager = _bounded_sentinel(pool.sentinel_manager, timeout)
        new_pool: redis.ConnectionPool = _SentinelConnectionPool(
            pool.service_name,
            manager,
            connection_class=pool.connection_class,
            is_master=pool.is_master,
            check_connection=pool.check_connection,
            **kwargs,
        )

        def close() -> None:
            new_pool.disconnect()
            for sentinel in manager.sentinels:
                sentinel.connection_pool.disconnect()

        return Bounded(redis.Redis(connection_pool=new_pool), close)
    plain_pool = redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    keep_connections(plain_pool)
    return Bounded(redis.Redis(connection_pool=plain_pool), plain_pool.disconnect)


def _bounded_sentinel(manager: redis.sentinel.Sentinel, timeout: float) -> redis.sentinel.Sentinel:
    addresses = []
    for sentinel in manager.sentinels:
        kwargs = sentinel.connection_pool.connection_kwargs
        addresses.append((kwargs["host"], kwargs["port"]))
    copy: redis.sentinel.Sentinel = _Sentinel(
        addresses,
        min_other_sentinels=manager.min_other_sentinels,
        sentinel_kwargs=_bounded_kwargs(manager.sentinel_kwargs, timeout),
        **manager.connection_kwargs,
    )
    if hasattr(manager, "_force_master_ip"):  # redis-py >= 5.1: an address override the copy keeps
        copy._force_master_ip = manager._force_master_ip
    return copy


def _bounded_cluster(client: redis.cluster.RedisCluster, timeout: float) -> Bounded:
    manager = client.nodes_manager
    # The cluster sets its own connect hook and connection retry (none) on the nodes' connections.
    kwargs = {k: v for k, v in manager.connection_kwargs.items() if k not in ("redis_connect_func", "retry")}
    kwargs.update(socket_timeout=timeout, socket_connect_timeout=timeout)
    given: Any = client
    nodes = [_ClusterNode(node.host, node.port) for node in given.get_nodes()]
    copy = redis.cluster.RedisCluster(
        startup_nodes=nodes, retry=_no_retry(), address_remap=manager.address_remap, **kwargs
    )
    return Bounded(copy, copy.close)


async def discover_slots(
    client: Any, locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock], lock: threading.Lock
) -> None:
    """An asyncio Cluster client that has not learnt the slots yet learns them in one task
    first: when many tasks' first commands start it at once, redis-py (8.1) sends them to one
    node and, at the MOVED replies, closes connections other tasks are writing on
    (AttributeError: 'NoneType' object has no attribute 'writelines'). ``locks``: one per loop,
    made under ``lock``."""
    loop = asyncio.get_running_loop()
    with lock:
        found = locks.setdefault(loop, asyncio.Lock())
    async with found:
        await client.initialize()  # a no-op once it knows the slots
