"""A worker process of the Prometheus multiprocess test, run with PROMETHEUS_MULTIPROC_DIR set (as
gunicorn's and uvicorn's workers are): a WSGI middleware with ``metrics=True`` and its limiter
(name "api", one permit, on a ManualClock) serve one request and refuse one; the test's own code
holds the permit and queues two waits, then prints ``ready`` and waits for a line on stdin; then
it lets the queue drain (1.5 s later on its clock), prints ``done`` and waits for another line,
alive (``livesum`` gauges count live processes), before it exits."""

from __future__ import annotations

import asyncio
import sys
import wsgiref.util
from typing import Any

import permits
from permits.wsgi import RateLimitMiddleware


def hello(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


def get(app: Any) -> str:
    environ: dict[str, Any] = {}
    wsgiref.util.setup_testing_defaults(environ)
    statuses: list[str] = []
    body = app(environ, lambda status, headers, exc_info=None: statuses.append(status))
    b"".join(body)
    getattr(body, "close", lambda: None)()
    return statuses[0]


async def main() -> None:
    loop = asyncio.get_running_loop()
    clock = permits.ManualClock()
    app = RateLimitMiddleware(
        hello, permits.ConcurrencyLimiter(1, queue_limit=5, clock=clock, name="api"), metrics=True
    )
    limiter: Any = app.policy.limiter  # (the instrumented one)
    assert get(app).startswith("200")
    held = limiter.acquire()
    assert get(app).startswith("429")
    waiting = [asyncio.ensure_future(limiter.wait_async()) for _ in range(2)]
    await asyncio.sleep(0)  # (both tasks run up to their wait in the queue)
    print("ready", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)
    clock.advance(1.5)
    held.release()
    for wait in waiting:
        lease = await wait
        assert lease
        lease.release()  # (the next waiter's turn)
    print("done", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)


if __name__ == "__main__":
    asyncio.run(main())
