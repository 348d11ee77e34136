"""The WSGI app of test_wsgi_gunicorn, served by gunicorn with several worker processes (sync or
gthread) that share limiters through a ``permits.shm.SharedMemoryStore`` in the segment
``PERMITS_TEST_SHM`` (read from the environment: gunicorn imports this module by name):

- ``api``: a fixed window of 40 requests per hour, over every path but ``/pid`` and ``/hold``;
- ``one``: ``concurrency("one", 1, lease_ttl=60)`` over ``/hold``, which streams a first line and then
  holds its permit for a minute (until the client leaves, or its worker is killed).

The store is opened at import: in gunicorn's master with ``--preload``, before the workers are
forked. Every response carries the answering process's pid in ``x-pid`` (a rejection too).
``/pid`` (exempt) answers the pid; ``/hold`` answers ``held``, then waits; any other path ``ok``.
"""

import os
import time
from collections.abc import Iterator
from typing import Any

from permits.shm import SharedMemoryStore
from permits.wsgi import RateLimitMiddleware

STORE = SharedMemoryStore(os.environ["PERMITS_TEST_SHM"])
LIMITER = STORE.fixed_window("api", 40, 3600)
HOLDER = STORE.concurrency("one", 1, lease_ttl=60)


def answer(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    body = str(os.getpid()).encode() if environ["PATH_INFO"] == "/pid" else b"ok"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def hold(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    yield b"held\n"  # the client knows it holds the permit (and who does: x-pid)
    time.sleep(60)


limited = RateLimitMiddleware(answer, LIMITER, exempt=("/pid",))
held = RateLimitMiddleware(hold, HOLDER)


def app(environ: dict[str, Any], start_response: Any) -> Any:
    def with_pid(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        # (read per request: with --preload the module was imported in the master)
        return start_response(status, [*headers, ("x-pid", str(os.getpid()))], exc_info)

    return (held if environ["PATH_INFO"] == "/hold" else limited)(environ, with_pid)
