"""Helpers of the store tests (RedisStore, PostgresStore) under faults and hostile input: one
interface over a Redis or a PostgreSQL server, stores over it with a sync or an asyncio client,
and the checks every mode of ``on_error`` shares.

A :class:`Server` has a namespace (a Redis key prefix, a PostgreSQL table) of the test's own: the
stores it makes share it unless told otherwise, so a ``reader()`` store sees what the others did.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import permits
from permits.errors import BackendError

BACKENDS = ("redis", "postgres")
MODES = ("raise", "deny", "allow")
#: The timeout of the stores whose server fails, and the bound a call must answer within then.
TIMEOUT = 0.3
BOUND = TIMEOUT + 1.0
#: The timeout of the other stores: a healthy server answers well within it, even on a busy machine.
HEALTHY_TIMEOUT = 5.0
#: Long enough that no state of a store on a ManualClock expires in real time during a test.
KEY_MARGIN_MS = 600_000

_names = itertools.count()


def fresh_name(stem: str = "n") -> str:
    return f"{stem}-{next(_names)}"


class Server:
    """A Redis or PostgreSQL server of a test, seen one way: ``kill()``, ``restart()``, ``pause()``,
    ``resume()``, ``durable()``, stores with a sync (``store``) or an asyncio client
    (``async_store``), and ``hold(seconds)`` (a slow server: each step waits that long)."""

    kind: str

    def __init__(self, process: Any) -> None:
        self.process = process
        self.namespace = self._new_namespace()
        self._closing: list[Callable[[], None]] = []

    def _new_namespace(self) -> str:
        raise NotImplementedError

    # ---- faults ----
    def kill(self) -> None:
        self.process.kill()

    def restart(self) -> None:
        raise NotImplementedError

    def pause(self) -> None:
        self.process.pause()

    def resume(self) -> None:
        self.process.resume()

    def durable(self) -> None:
        """What the server acknowledged survives a kill from now on."""

    @contextlib.contextmanager
    def killed(self) -> Iterator[None]:
        self.durable()
        self.kill()
        try:
            yield
        finally:
            self.restart()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def fault(self, which: str) -> contextlib.AbstractContextManager[None]:
        return self.killed() if which == "kill" else self.paused()

    # ---- stores ----
    def store(self, *, namespace: str | None = None, **options: Any) -> Any:
        """A store with a sync client (PostgreSQL: a conninfo string, which serves both kinds)."""
        options.setdefault("timeout", HEALTHY_TIMEOUT)
        made = self._store(namespace or self.namespace, options)
        self._closing.append(made.close)
        return _loose_keys(made)

    def _store(self, namespace: str, options: dict[str, Any]) -> Any:
        raise NotImplementedError

    def reader(self, clock: permits.ManualClock | None = None) -> Any:
        """A store that reads the server's state for the test (raises when it cannot)."""
        return self.store(clock=clock)

    @contextlib.asynccontextmanager
    async def async_store(self, *, namespace: str | None = None, **options: Any) -> AsyncIterator[Any]:
        """A store with an asyncio client of the running loop: redis.asyncio.Redis, or a
        psycopg_pool.AsyncConnectionPool; closed with the block."""
        options.setdefault("timeout", HEALTHY_TIMEOUT)
        async with self._async_store(namespace or self.namespace, options) as made:
            try:
                yield _loose_keys(made)
            finally:
                made.close()

    def _async_store(self, namespace: str, options: dict[str, Any]) -> contextlib.AbstractAsyncContextManager[Any]:
        raise NotImplementedError

    async def reconnected(self) -> None:
        """Waits until the asyncio stores' clients can reach the restarted server (a given
        psycopg_pool reconnects in the background, with its own backoff of seconds)."""

    def hold(self, seconds: float) -> None:
        """The server takes no step of the stores for ``seconds`` from now, then takes them all
        (a slow server, not a hung one: the steps are answered)."""
        raise NotImplementedError

    def close(self) -> None:
        for close in reversed(self._closing):
            close()


def _loose_keys(store: Any) -> Any:
    """Redis keys expire in real time: a ManualClock's rules say nothing about it."""
    backend = store._backend
    if hasattr(backend, "key_margin_ms"):
        backend.key_margin_ms = KEY_MARGIN_MS
    return store


class RedisServer(Server):
    kind = "redis"

    def _new_namespace(self) -> str:
        return f"t-{uuid.uuid4().hex[:10]}:"

    def restart(self) -> None:
        self.process.restart()

    def _store(self, namespace: str, options: dict[str, Any]) -> Any:
        from permits.redis import RedisStore

        client = self.process.client()
        self._closing.append(client.close)
        return RedisStore(client, prefix=namespace, **options)

    @contextlib.asynccontextmanager
    async def _async_store(self, namespace: str, options: dict[str, Any]) -> AsyncIterator[Any]:
        from permits.redis import RedisStore

        client = self.process.async_client()
        try:
            yield RedisStore(client, prefix=namespace, **options)
        finally:
            await client.aclose()

    def command(self, *args: Any) -> Any:
        with self.process.client(socket_timeout=5.0) as client:
            return client.execute_command(*args)

    def hold(self, seconds: float) -> None:
        # Every client's commands wait, CLIENT UNPAUSE's too: the pause ends by itself.
        self.command("CLIENT", "PAUSE", max(1, round(seconds * 1000)), "ALL")


class PostgresServer(Server):
    kind = "postgres"

    def __init__(self, process: Any) -> None:
        super().__init__(process)
        self._pools: list[AsyncConnectionPool[Any]] = []

    def _new_namespace(self) -> str:
        return f"t_{uuid.uuid4().hex[:10]}"

    def restart(self) -> None:
        self.process.start()

    def durable(self) -> None:
        # The test servers commit asynchronously (their WAL is written up to 200 ms later): a
        # SIGKILL could lose the last commits. A checkpoint writes out everything committed.
        with self.process.connect() as conn:
            conn.execute("CHECKPOINT")

    def _store(self, namespace: str, options: dict[str, Any]) -> Any:
        from permits.postgres import PostgresStore

        return PostgresStore(self.process.conninfo, table=namespace, **options)

    @contextlib.asynccontextmanager
    async def _async_store(self, namespace: str, options: dict[str, Any]) -> AsyncIterator[Any]:
        from permits.postgres import PostgresStore

        pool = AsyncConnectionPool(self.process.conninfo, min_size=1, max_size=4, open=False)
        await pool.open()
        self._pools.append(pool)
        try:
            yield PostgresStore(pool, table=namespace, **options)
        finally:
            self._pools.remove(pool)
            await pool.close()

    async def reconnected(self) -> None:
        for pool in self._pools:
            await pool.check()  # drops the connections the restart broke
            async with pool.connection(timeout=30):
                pass

    def hold(self, seconds: float) -> None:
        # A transaction holding the table (made by the test's first step) in EXCLUSIVE mode for
        # that long: every step that writes waits for it (plain reads do not).
        locked = threading.Event()

        def holder() -> None:
            with psycopg.connect(self.process.conninfo) as conn:
                conn.execute(f'LOCK TABLE "{self.namespace}" IN EXCLUSIVE MODE')
                locked.set()
                time.sleep(seconds)
                conn.commit()

        threading.Thread(target=holder, daemon=True).start()
        assert locked.wait(10), "the table lock was not taken"


@contextlib.contextmanager
def make_server(kind: str, process: Any) -> Iterator[Server]:
    server: Server = RedisServer(process) if kind == "redis" else PostgresServer(process)
    try:
        yield server
    finally:
        server.close()


# ---- what each mode of on_error answers when the server cannot ----


def check_failed(mode: str, lease: permits.Lease) -> None:
    """The lease of an acquisition the server could not answer, as ``mode`` says."""
    if mode == "deny":
        assert not lease and lease.reason == "backend_unavailable", lease
        assert lease.metadata["error"], lease.metadata
    else:
        assert mode == "allow", mode
        assert lease and lease.metadata["degraded"] is True, lease


def fails_in_time(mode: str, call: Callable[[], permits.Lease]) -> permits.Lease | None:
    """Calls ``call`` (an acquisition while the server fails): within BOUND, ``mode``'s answer."""
    started = time.monotonic()
    lease = None
    if mode == "raise":
        with pytest.raises(BackendError):
            call()
    else:
        lease = call()
        check_failed(mode, lease)
    assert time.monotonic() - started < BOUND
    return lease


async def fails_in_time_async(mode: str, call: Callable[[], Awaitable[permits.Lease]]) -> permits.Lease | None:
    started = time.monotonic()
    lease = None
    if mode == "raise":
        with pytest.raises(BackendError):
            await call()
    else:
        lease = await call()
        check_failed(mode, lease)
    assert time.monotonic() - started < BOUND
    return lease


async def settled(store: Any) -> None:
    """Waits (at most BOUND) for the permits an asyncio store gives back in tasks of the loop."""
    async with asyncio.timeout(BOUND):
        while store._background:
            await asyncio.gather(*store._background)
            # (a task done but still in the set, its discard callback not run yet: gather then ends
            # at once without yielding, and without this the loop would never run that callback)
            await asyncio.sleep(0)


def drain(limiter: Any, limit: int) -> list[permits.Lease]:
    """Takes what is left one permit at a time until refused; returns the grants (at most limit)."""
    leases = []
    for _ in range(limit + 1):
        lease = limiter.acquire()
        if not lease:
            assert lease.reason == "limit_reached", lease
            return leases
        leases.append(lease)
    raise AssertionError(f"{limiter!r} granted more than its limit of {limit}")
