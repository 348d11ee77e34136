"""Limiters whose state is in PostgreSQL, shared by every process and host that reaches it:
``PostgresStore(conninfo)``.

Each acquisition is one round trip (an upsert or a function of the schema, made on first use, row
locks only); time is the server's. Needs psycopg 3 (``pip install permits[postgres]``)::

    import permits.postgres
    store = permits.postgres.PostgresStore("postgresql://app@db/app")
    api = store.fixed_window("api", 100, 60.0)
    if store_lease := api.acquire():
        ...
"""

from __future__ import annotations

from typing import Any

from ._stores.postgres_backend import PostgresBackend
from ._stores.postgres_purge import Purger
from ._stores.server_store import ServerStore, check_timeout


class PostgresStore(ServerStore):
    """Limiters in the table ``table`` of a PostgreSQL database. ``conninfo_or_pool``: a conninfo
    string (serves both the sync and the asyncio members), or a psycopg connection or pool (serves
    its own kind). ``timeout``, ``on_error`` and ``clock`` as for ``permits.redis.RedisStore``.
    """

    def __init__(
        self,
        conninfo_or_pool: Any,
        *,
        table: str = "permits_state",
        on_error: str = "raise",
        timeout: float = 1.0,
        clock: Any = None,
    ) -> None:
        self.timeout = check_timeout(timeout)
        """Seconds each call to the server may take (more than 0, at most 3600); past it, the
        acquisition ends as ``on_error`` says."""
        self.table = table
        """The name of the table that holds the limiters' state, in the connection's current schema
        (created, with its index and functions, on first use)."""
        self._backend = PostgresBackend(conninfo_or_pool, table=table, timeout=self.timeout)
        self._setup(on_error, clock)
        self._purger = Purger(self._backend, self._renewal._now, manual=clock is not None)

    def _housekeep(self) -> None:
        super()._housekeep()
        self._purger.poke()

    def close(self) -> None:
        self._purger.stop()
        super().close()

    def __repr__(self) -> str:
        return f"<PostgresStore table={self.table!r} on_error={self.on_error!r}>"


__all__ = ["PostgresStore"]
