"""What the WSGI middleware and the Flask extension cost a request, in process.

    python benchmarks/bench_wsgi.py [--quick] [--inner N] [--repeats N]

One GET called directly as a WSGI application (no sockets, no server): a fresh environ, a
``start_response`` that keeps the status, the body iterated and closed as a server would. The
limit is a per-IP token bucket that never rejects.

(a) A trivial WSGI app, bare and behind ``permits.wsgi.RateLimitMiddleware`` (with and without the
``RateLimit`` headers, with ``wait=True``: every request finds a permit free, and keyed by an
``X-Api-Key`` header, ``keys.header``, in place of the client's address).

(b) A one-view Flask app, bare, with ``permits.flask.RateLimit`` (``init_app``: the global
limit), and, when it is installed, with flask-limiter configured alike (memory storage, a per-IP
``1000000000/second`` default limit, headers on and off).

The table shows the best and the median of the repeats, in ns per request, the ratio of the best
to the bare app's, and the cost each adds (best minus bare). No assertion on time: the figures
compare the cases with each other on this host.
"""

import argparse
import gc
import io
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

PER_IP = "1000000000/second"

ENVIRON: dict[str, Any] = {
    "REQUEST_METHOD": "GET",
    "SCRIPT_NAME": "",
    "PATH_INFO": "/",
    "QUERY_STRING": "",
    "SERVER_NAME": "bench",
    "SERVER_PORT": "80",
    "SERVER_PROTOCOL": "HTTP/1.1",
    "REMOTE_ADDR": "203.0.113.7",
    "HTTP_HOST": "bench",
    "HTTP_X_API_KEY": "key-1234",
    "wsgi.version": (1, 0),
    "wsgi.url_scheme": "http",
    "wsgi.errors": sys.stderr,
    "wsgi.multithread": True,
    "wsgi.multiprocess": False,
    "wsgi.run_once": False,
}


# ---- the apps ----
def trivial_app() -> Any:
    headers = [("Content-Type", "text/plain"), ("Content-Length", "2")]

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", headers)
        return [b"ok"]

    return app


def flask_app() -> Any:
    import flask

    app = flask.Flask(__name__)

    @app.get("/")
    def hello() -> str:
        return "ok"

    return app


def bucket() -> Any:
    import permits
    from permits.specs import TokenBucket

    # (with a queue for wait=True, which stays empty: every request finds a permit free)
    spec = TokenBucket(1_000_000_000, 1_000_000_000, 1.0)
    return permits.PartitionedLimiter.per_key(permits.Partition.of(None, spec, queue_limit=100))


def with_middleware(headers: bool, wait: bool = False, key: Any = None) -> Any:
    from permits.wsgi import RateLimitMiddleware

    return RateLimitMiddleware(trivial_app(), bucket(), headers=headers, wait=wait, key=key)


def api_key() -> Any:
    from permits import keys

    return keys.header("x-api-key")


def with_extension(headers: bool, wait: bool = False) -> Any:
    from permits.flask import RateLimit

    app = flask_app()
    RateLimit(bucket(), headers=headers, wait=wait).init_app(app)
    return app


def with_flask_limiter(headers: bool) -> Any:
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    app = flask_app()
    Limiter(get_remote_address, app=app, default_limits=[PER_IP], storage_uri="memory://", headers_enabled=headers)
    return app


def flask_limiter_installed() -> bool:
    try:
        import flask_limiter  # noqa: F401
    except ImportError:
        return False
    return True


def cases() -> list[tuple[str, str, Callable[[], Any]]]:
    """(group, name, make): each group's first case is its bare app."""
    found = [
        ("wsgi", "bare WSGI app", trivial_app),
        ("wsgi", "permits RateLimitMiddleware, headers", lambda: with_middleware(True)),
        ("wsgi", "permits RateLimitMiddleware, no headers", lambda: with_middleware(False)),
        ("wsgi", "permits RateLimitMiddleware, wait=True, headers", lambda: with_middleware(True, wait=True)),
        ("wsgi", "permits RateLimitMiddleware, header key, headers", lambda: with_middleware(True, key=api_key())),
        ("wsgi", "permits RateLimitMiddleware, header key, no headers", lambda: with_middleware(False, key=api_key())),
        ("flask", "bare Flask app", flask_app),
        ("flask", "permits.flask RateLimit, headers", lambda: with_extension(True)),
        ("flask", "permits.flask RateLimit, no headers", lambda: with_extension(False)),
    ]
    if flask_limiter_installed():
        found += [
            ("flask", "flask-limiter (memory), headers", lambda: with_flask_limiter(True)),
            ("flask", "flask-limiter (memory), no headers", lambda: with_flask_limiter(False)),
        ]
    return found


def run(app: Any, n: int) -> float:
    statuses: list[str] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        statuses.append(status)
        return None

    def one() -> None:
        environ = dict(ENVIRON)
        environ["wsgi.input"] = io.BytesIO(b"")
        result = app(environ, start_response)
        try:
            for _ in result:
                pass
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()

    one()  # (first calls build caches, outside the clock)
    statuses.clear()
    start = time.perf_counter_ns()
    for _ in range(n):
        one()
    elapsed = time.perf_counter_ns() - start
    assert statuses == ["200 OK"] * n, set(statuses)
    return elapsed / n


def measure(inner: int, repeats: int) -> list[tuple[str, str, float, float]]:
    built = [(group, name, make()) for group, name, make in cases()]
    timings: dict[str, list[float]] = {name: [] for _, name, _ in built}
    gc.disable()
    try:
        for _ in range(repeats):  # the cases' repeats interleaved: the host's drift hits them alike
            for _, name, app in built:
                timings[name].append(run(app, inner))
    finally:
        gc.enable()
    return [(group, name, min(timings[name]), statistics.median(timings[name])) for group, name, _ in built]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--inner", type=int, default=None, help="requests per repeat")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    inner = args.inner or (2_000 if args.quick else 10_000)
    repeats = args.repeats or (3 if args.quick else 7)
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; flask-limiter installed: {flask_limiter_installed()}"
    )
    print(f"in process: one GET called as a WSGI app ({inner} per repeat, {repeats} repeats)\n")
    print("| case | best ns/request | median ns/request | best / bare | added ns |")
    print("|---|---:|---:|---:|---:|")
    bare: dict[str, float] = {}
    for group, name, best, median in measure(inner, repeats):
        base = bare.setdefault(group, best)
        print(f"| {name} | {best:,.0f} | {median:,.0f} | {best / base:.2f} | {best - base:,.0f} |")


if __name__ == "__main__":
    main()
