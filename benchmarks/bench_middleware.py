"""What the ASGI middleware costs a request, in process and end to end.

    python benchmarks/bench_middleware.py [--quick] [--no-e2e] [--requests N] [--rounds N]

(a) In process: one GET through a one-route Starlette app, called directly as an ASGI app
(no sockets, no server), bare and behind a per-IP token bucket that never rejects:
``permits.asgi.RateLimitMiddleware`` with and without the ``RateLimit`` headers (and each with
``wait=True``, every request finding a permit free; and keyed by an ``X-Api-Key`` header,
``keys.header``, in place of the client's address), and, when it is
installed, slowapi configured the same way (a per-IP ``1000000000/second`` default limit,
``SlowAPIASGIMiddleware``, headers on and off). Each case runs ``--inner`` requests in a loop on
one event loop; the table shows the best and the median of the repeats, in ns per request, and
each case's ratio to the bare app.

(b) End to end: the same trivial endpoint as a FastAPI app under uvicorn (one worker, in a
subprocess), loaded over ``--connections`` keep-alive connections by wrk for ``--duration``
seconds (one thread: the server, not the client, is what runs out of CPU first), or, when wrk is
not installed, ``--requests`` GETs from a minimal HTTP/1.1 client on asyncio streams (which on a
small host saturates before uvicorn does, hiding much of the server's cost).
Requests per second, bare / with the middleware / with slowapi, the best of ``--rounds`` rounds in
which the cases alternate. Both processes share the host's cores: the figures compare the cases
with each other, not with other hosts.
"""

import argparse
import asyncio
import gc
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

PER_IP = "1000000000/second"


# ---- the apps ----
def starlette_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/", hello)])


def fastapi_app() -> Any:
    from fastapi import FastAPI
    from fastapi.responses import PlainTextResponse
    from starlette.requests import Request

    app = FastAPI()

    @app.get("/", response_class=PlainTextResponse)
    # (slowapi wants the request in the signature; no `from __future__ import annotations` in
    # this module, so that FastAPI sees the class itself)
    async def hello(request: Request) -> str:
        return "ok"

    return app


def with_permits(app: Any, headers: bool, wait: bool = False, key: Any = None) -> Any:
    import permits
    from permits.asgi import RateLimitMiddleware
    from permits.specs import TokenBucket

    # (with a queue for wait=True, which stays empty: every request finds a permit free)
    bucket = TokenBucket(1_000_000_000, 1_000_000_000, 1.0)
    per_ip = permits.PartitionedLimiter.per_key(permits.Partition.of(None, bucket, queue_limit=100))
    options = {} if key is None else {"key": key}
    app.add_middleware(RateLimitMiddleware, limiter=per_ip, headers=headers, wait=wait, **options)
    return app


def api_key() -> Any:
    from permits import keys

    return keys.header("x-api-key")


def with_slowapi(app: Any, headers: bool) -> Any:
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.middleware import SlowAPIASGIMiddleware
    from slowapi.util import get_remote_address

    app.state.limiter = Limiter(key_func=get_remote_address, default_limits=[PER_IP], headers_enabled=headers)
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)
    app.add_middleware(SlowAPIASGIMiddleware)
    return app


def slowapi_installed() -> bool:
    try:
        import slowapi  # noqa: F401
    except ImportError:
        return False
    return True


def cases(make: Callable[[], Any]) -> list[tuple[str, Callable[[], Any]]]:
    found = [
        ("bare", make),
        ("permits RateLimitMiddleware, headers", lambda: with_permits(make(), True)),
        ("permits RateLimitMiddleware, no headers", lambda: with_permits(make(), False)),
        ("permits RateLimitMiddleware, X-Api-Key key, headers", lambda: with_permits(make(), True, key=api_key())),
        ("permits RateLimitMiddleware, wait=True, headers", lambda: with_permits(make(), True, wait=True)),
        ("permits RateLimitMiddleware, wait=True, no headers", lambda: with_permits(make(), False, wait=True)),
    ]
    if slowapi_installed():
        found += [
            ("slowapi SlowAPIASGIMiddleware, headers", lambda: with_slowapi(make(), True)),
            ("slowapi SlowAPIASGIMiddleware, no headers", lambda: with_slowapi(make(), False)),
        ]
    return found


# ---- (a) in process ----
SCOPE: dict[str, Any] = {
    "type": "http",
    "asgi": {"version": "3.0"},
    "http_version": "1.1",
    "method": "GET",
    "scheme": "http",
    "path": "/",
    "raw_path": b"/",
    "root_path": "",
    "query_string": b"",
    "headers": [(b"host", b"bench"), (b"x-api-key", b"key-7")],
    "client": ("203.0.113.7", 50000),
    "server": ("127.0.0.1", 8000),
}


_REQUEST: dict[str, Any] = {"type": "http.request", "body": b"", "more_body": False}


def _receive() -> Callable[[], Any]:
    """A request's receive(), as a server's: the (empty) body, then a wait for the disconnect
    that never comes. (One that answers at once every time is an outer middleware replaying a
    body; the middleware copes with it, but it is not what a server does.)"""
    asked = False

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if asked:
            await asyncio.get_running_loop().create_future()
        asked = True
        return _REQUEST

    return receive


async def run_in_process(app: Any, n: int) -> float:
    statuses: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await app(dict(SCOPE), _receive(), send)  # builds the middleware stack once, outside the clock
    statuses.clear()
    start = time.perf_counter_ns()
    for _ in range(n):
        await app(dict(SCOPE), _receive(), send)
    elapsed = time.perf_counter_ns() - start
    assert statuses == [200] * n, set(statuses)
    return elapsed / n


def in_process(inner: int, repeats: int) -> list[tuple[str, float, float]]:
    built = [(name, make()) for name, make in cases(starlette_app)]
    timings: dict[str, list[float]] = {name: [] for name, _ in built}
    loop = asyncio.new_event_loop()
    gc.disable()
    try:
        for _ in range(repeats):  # the cases' repeats interleaved: the host's drift hits them alike
            for name, app in built:
                timings[name].append(loop.run_until_complete(run_in_process(app, inner)))
    finally:
        gc.enable()
        loop.close()
    return [(name, min(t), statistics.median(t)) for name, t in timings.items()]


# ---- (b) end to end ----
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(case: str, port: int, http: str = "auto") -> None:
    """The server process: one case's FastAPI app under uvicorn (``http``: its HTTP/1.1 parser)."""
    import uvicorn

    make = dict(cases(fastapi_app))[case]
    uvicorn.run(make(), host="127.0.0.1", port=port, http=http, log_level="error", access_log=False, lifespan="off")


async def _one_connection(port: int, count: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = b"GET / HTTP/1.1\r\nHost: bench\r\nX-Api-Key: key-7\r\n\r\n"
    for _ in range(count):
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head[:40])
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await reader.readexactly(length)
    writer.close()
    await writer.wait_closed()


async def _load(port: int, requests: int, connections: int) -> float:
    per = requests // connections
    start = time.perf_counter()
    await asyncio.gather(*(_one_connection(port, per) for _ in range(connections)))
    return per * connections / (time.perf_counter() - start)


def client(port: int, requests: int, connections: int) -> None:
    """The client process: prints requests per second."""
    print(asyncio.run(_load(port, requests, connections)))


def wrk(port: int, connections: int, seconds: int) -> float:
    """Requests per second wrk gets from the server at ``port`` (every answer a 200)."""
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-H", "X-Api-Key: key-7", f"http://127.0.0.1:{port}/"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError("wrk saw failed requests: " + out[-300:])
    found = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    if found is None:
        raise RuntimeError("no result from wrk: " + out[-300:])
    return float(found.group(1))


def serve_and_load(name: str, requests: int, connections: int, seconds: int) -> float:
    """One case's server started, warmed up and loaded: its requests per second."""
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", name, "--port", str(port)])
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"the {name} server did not start") from None
                time.sleep(0.05)
        if shutil.which("wrk") is not None:
            wrk(port, connections, 1)  # (warm-up)
            return wrk(port, connections, seconds)
        load = [sys.executable, __file__, "--client", "--port", str(port), "--connections", str(connections)]
        warm_up = max(connections, requests // 10)
        subprocess.run([*load, "--requests", str(warm_up)], check=True, capture_output=True)
        out = subprocess.run([*load, "--requests", str(requests)], check=True, capture_output=True, text=True)
        return float(out.stdout)
    finally:
        server.terminate()
        server.wait()


def end_to_end(requests: int, connections: int, rounds: int, seconds: int) -> list[tuple[str, float]]:
    """The best of ``rounds`` for each case, the cases alternating within each round (the host's
    drift hits them alike)."""
    names = [name for name, _ in cases(fastapi_app)]
    best = dict.fromkeys(names, 0.0)
    for _ in range(rounds):
        for name in names:
            best[name] = max(best[name], serve_and_load(name, requests, connections, seconds))
    return list(best.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-e2e", action="store_true", help="only the in-process table")
    parser.add_argument("--inner", type=int, default=None, help="requests per in-process repeat")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--requests", type=int, default=None, help="end-to-end requests per case")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--duration", type=int, default=None, help="seconds of wrk's load per case and round")
    parser.add_argument("--rounds", type=int, default=None, help="end-to-end rounds (the best of each case)")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--http", default="auto", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.http)
        return
    if args.client:
        client(args.port, args.requests, args.connections)
        return
    inner = args.inner or (2_000 if args.quick else 10_000)
    repeats = args.repeats or (3 if args.quick else 7)
    requests = args.requests or (4_000 if args.quick else 20_000)
    rounds = args.rounds or (1 if args.quick else 3)
    seconds = args.duration or (2 if args.quick else 5)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; slowapi installed: {slowapi_installed()}\n")
    print(f"(a) in process: one GET through a one-route Starlette app ({inner} per repeat, {repeats} repeats)\n")
    rows = in_process(inner, repeats)
    bare = rows[0][1]
    print("| case | best ns/request | median ns/request | best / bare |")
    print("|---|---:|---:|---:|")
    for name, best, median in rows:
        print(f"| {name} | {best:,.0f} | {median:,.0f} | {best / bare:.2f} |")
    if args.no_e2e:
        return
    load = (
        f"wrk -t1 -c{args.connections} -d{seconds}s"
        if shutil.which("wrk")
        else f"{requests} GETs over {args.connections} connections from a Python client"
    )
    print(f"\n(b) end to end: FastAPI under uvicorn, {load}, best of {rounds} rounds\n")
    e2e = end_to_end(requests, args.connections, rounds, seconds)
    base = e2e[0][1]
    print("| case | requests/s | / bare |")
    print("|---|---:|---:|")
    for name, rate in e2e:
        print(f"| {name} | {rate:,.0f} | {rate / base:.2f} |")


if __name__ == "__main__":
    main()
