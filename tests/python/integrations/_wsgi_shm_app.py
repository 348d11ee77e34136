"""The WSGI app of test_wsgi_gunicorn, served by gunicorn with several worker processes (sync or
gthread) that share one limiter through a ``permits.shm.SharedMemoryStore``: a fixed window of 40
requests per hour, named ``api``, in the segment ``PERMITS_TEST_SHM`` (read from the environment:
gunicorn imports this module by name).

The store is opened at import: in gunicorn's master with ``--preload``, before the workers are
forked. Every response carries the answering process's pid in ``x-pid`` (a rejection too).
Routes: ``/pid`` (exempt) answers the pid; any other path is limited and answers ``ok``.
"""

import os
from typing import Any

from permits.shm import SharedMemoryStore
from permits.wsgi import RateLimitMiddleware

STORE = SharedMemoryStore(os.environ["PERMITS_TEST_SHM"])
LIMITER = STORE.fixed_window("api", 40, 3600)


def answer(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    body = str(os.getpid()).encode() if environ["PATH_INFO"] == "/pid" else b"ok"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


limited = RateLimitMiddleware(answer, LIMITER, exempt=("/pid",))


def app(environ: dict[str, Any], start_response: Any) -> Any:
    def with_pid(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        # (read per request: with --preload the module was imported in the master)
        return start_response(status, [*headers, ("x-pid", str(os.getpid()))], exc_info)

    return limited(environ, with_pid)
