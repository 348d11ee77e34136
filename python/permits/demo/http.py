"""``python -m permits demo --http``: the middleware in a real FastAPI app, under uvicorn, on loopback.

The app has a global limit (the middleware) and two routes with limits of their own:
``/search`` allows each client 5 requests per second (the ``X-Client`` header is the key), and
``/report`` runs at most 2 at once and queues up to 20 more (``wait=True``). Three clients drive
it with an async httpx client for the demo's duration: alice stays under her limit, bob asks twice
as fast as his and is told when to come back (429 with ``Retry-After``), carol sends bursts of
reports that wait their turn. Once a second a line shows, per client, the answers so far, the
requests in flight and the last ``Retry-After`` and ``RateLimit`` headers seen.

Needs FastAPI, uvicorn and httpx (``pip install "permits[fastapi,httpx]" uvicorn``).
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

import permits

NEEDS = ("fastapi", "uvicorn", "httpx")


@dataclass
class ClientTally:
    """What one simulated client has seen so far."""

    answers: Counter[int] = field(default_factory=Counter)
    in_flight: int = 0
    peak_in_flight: int = 0  # the most at once since the last line; ticks pass between bursts
    most_in_flight: int = 0  # the most at once over the whole run
    retry_after: str = "-"
    ratelimit: str = "-"

    def line(self, name: str, whole_run: bool = False) -> str:
        codes = " ".join(f"{code}:{count}" for code, count in sorted(self.answers.items())) or "none yet"
        peak, self.peak_in_flight = self.peak_in_flight, self.in_flight
        if whole_run:
            peak = self.most_in_flight
        return (
            f"  {name:<6} {codes:<18} at most {peak:<2} in flight  "
            f"Retry-After {self.retry_after:<3} RateLimit {self.ratelimit}"
        )


@dataclass
class Limits:
    """The app's limiters, kept so the demo can show the report queue's length."""

    global_limit: permits.RateLimiter
    per_client: permits.KeyedRateLimiter
    reports: permits.RateLimiter


def build_app(clock: Any = None) -> tuple[Any, Limits]:
    """The demo's FastAPI app with its limits: global middleware, per-client ``/search``, queued ``/report``."""
    from fastapi import Depends, FastAPI

    from permits import keys
    from permits.asgi import RateLimitMiddleware
    from permits.fastapi import RateLimit

    limits = Limits(
        global_limit=permits.TokenBucketLimiter(100, 50, 1.0, name="global", clock=clock),
        per_client=permits.PartitionedLimiter.per_key(
            permits.specs.TokenBucket(5, 5, 1.0), name="per-client", clock=clock
        ),
        reports=permits.ConcurrencyLimiter(2, queue_limit=20, name="reports", clock=clock),
    )
    app = FastAPI()

    @app.get("/search", dependencies=[Depends(RateLimit(limits.per_client, key=keys.header("X-Client")))])
    async def search() -> dict[str, str]:
        return {"result": "ok"}

    @app.get("/report", dependencies=[Depends(RateLimit(limits.reports, wait=True))])
    async def report() -> dict[str, str]:
        await asyncio.sleep(0.2)  # the work a report does while it holds its permit
        return {"report": "done"}

    app.add_middleware(RateLimitMiddleware, limiter=limits.global_limit)
    return app, limits


class _Server:
    """uvicorn serving ``app`` on a free loopback port, in a thread of its own."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the demo's server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


async def _client(
    http: Any, name: str, path: str, pattern: list[tuple[float, int]], tally: ClientTally, stop: float
) -> None:
    """Sends ``count`` requests every ``interval`` seconds (cycling through ``pattern``) until ``stop``."""
    tasks: set[asyncio.Task[None]] = set()

    async def one() -> None:
        tally.in_flight += 1
        tally.peak_in_flight = max(tally.peak_in_flight, tally.in_flight)
        tally.most_in_flight = max(tally.most_in_flight, tally.in_flight)
        try:
            response = await http.get(path, headers={"X-Client": name})
        finally:
            tally.in_flight -= 1
        tally.answers[response.status_code] += 1
        if "Retry-After" in response.headers:
            tally.retry_after = response.headers["Retry-After"] + "s"
        if "RateLimit" in response.headers:
            tally.ratelimit = response.headers["RateLimit"]

    loop = asyncio.get_running_loop()
    i = 0
    while loop.time() < stop:
        interval, count = pattern[i % len(pattern)]
        i += 1
        for _ in range(count):
            task = asyncio.create_task(one())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.sleep(interval)
    if tasks:
        await asyncio.gather(*tasks)


async def _drive(port: int, seconds: float, limits: Limits, out: TextIO) -> dict[str, ClientTally]:
    import httpx

    tallies = {name: ClientTally() for name in ("alice", "bob", "carol")}
    limits_http = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits_http, timeout=30) as http:
        loop = asyncio.get_running_loop()
        start = loop.time()
        stop = start + seconds
        clients = asyncio.gather(
            _client(http, "alice", "/search", [(0.25, 1)], tallies["alice"], stop),  # 4/s: under 5/s
            _client(http, "bob", "/search", [(0.1, 1)], tallies["bob"], stop),  # 10/s: twice his limit
            _client(http, "carol", "/report", [(1.0, 6)], tallies["carol"], stop),  # bursts of 6 reports
        )
        peak_queued = 0
        next_line = start + 1.0
        # Sampled often: carol's burst queues and drains well inside one second.
        while not clients.done():
            await asyncio.wait([clients], timeout=0.01)
            peak_queued = max(peak_queued, limits.reports.statistics().current_queued_count)
            if loop.time() >= next_line and not clients.done():
                next_line += 1.0
                print(f"t={loop.time() - start:4.1f}s  reports queued (most at once): {peak_queued}", file=out)
                peak_queued = 0
                for name, tally in tallies.items():
                    print(tally.line(name), file=out)
        await clients
    return tallies


def run_http_demo(seconds: float = 5.0, out: TextIO | None = None) -> int:
    """Runs the HTTP demo for ``seconds``; 2 when FastAPI, uvicorn or httpx is missing."""
    out = out or sys.stdout
    missing = [name for name in NEEDS if not _importable(name)]
    if missing:
        print(
            f"permits demo: --http needs {', '.join(missing)}, not installed: "
            'pip install "permits[fastapi,httpx]" uvicorn',
            file=sys.stderr,
        )
        return 2
    app, limits = build_app()
    print(
        "FastAPI under uvicorn on loopback: global 50/s (burst 100); /search 5/s per X-Client; "
        "/report 2 at a time, 20 may queue",
        file=out,
    )
    with _Server(app) as server:
        tallies = asyncio.run(_drive(server.port, seconds, limits, out))
    print("\nIn all:", file=out)
    for name, tally in tallies.items():
        print(tally.line(name, whole_run=True), file=out)
    return 0


def _importable(name: str) -> bool:
    from importlib.util import find_spec

    try:
        return find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that refuses it, a module half set up
        return False
