"""A PostgresStore made from a conninfo string serves sync and asyncio code alike; inside an event
loop it never makes a blocking call on the loop's thread: a release() from a coroutine asks in a
task. On first use, acquisitions and releases racing the table's creation all succeed (a blocking
release on the loop's thread deadlocked with it until the timeout), and with a stalled server a
release returns at once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from permits.postgres import PostgresStore

from _store_support import fresh_name

TIMEOUT = 2.0


def test_first_use_from_many_tasks_with_releases_in_the_loop(postgres_server: Any) -> None:
    async def main() -> None:
        store = PostgresStore(postgres_server.conninfo, table=fresh_name("loop_first"), timeout=TIMEOUT)
        jobs = store.concurrency("jobs", 4, lease_ttl=30.0)

        async def one() -> bool:
            lease = await jobs.acquire_async()
            granted = bool(lease)
            lease.release()  # from the loop's thread, while other tasks still make the table
            return granted

        assert await asyncio.gather(*(one() for _ in range(4))) == [True] * 4
        await store.aclose()

    asyncio.run(main())


def test_a_release_in_the_loop_never_waits_for_a_stalled_server(postgres_server: Any) -> None:
    async def main() -> None:
        store = PostgresStore(postgres_server.conninfo, table=fresh_name("loop_stalled"), timeout=TIMEOUT)
        jobs = store.concurrency("jobs", 2, lease_ttl=30.0)
        lease = await jobs.acquire_async()
        assert lease
        postgres_server.pause()
        try:
            started = time.monotonic()
            lease.release()
            took = time.monotonic() - started
        finally:
            postgres_server.resume()
        assert took < TIMEOUT / 2, f"release() held the loop {took:.2f} s"
        await store.aclose()  # the release lands once the server answers
        reader = PostgresStore(postgres_server.conninfo, table=store._backend._table, timeout=TIMEOUT)
        assert reader.concurrency("jobs", 2, lease_ttl=30.0).available_permits() == 2
        reader.close()

    asyncio.run(main())
