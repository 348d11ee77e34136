"""Instructions per call of permits' fast paths, for one or more installs: load-independent.

Timings on a shared machine move with its load; instruction counts do not. For each case this runs
a child under ``valgrind --tool=callgrind`` twice, making SMALL and then LARGE calls, and divides the
difference of the totals by LARGE - SMALL (so the import and set-up cancel out; the loop's own
bytecode is included). ``PYTHONHASHSEED=0`` keeps the import's own count the same between runs.

    python benchmarks/count_instructions.py /path/to/old/venv/bin/python .venv/bin/python

The ``wsgi_*`` and ``asgi_*`` cases are whole requests (a per-IP limit, as ``bench_wsgi.py`` and
``bench_middleware.py`` configure it): the middleware's own cost is a case's count less its bare
app's; the ``flask_*`` cases the same for a one-view Flask app (flask-limiter's when it is installed:
its figure beside permits.flask's is the ratio of what each adds). Needs valgrind (Debian:
``apt-get install valgrind``); the ASGI cases need starlette, the Flask ones flask.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

SMALL, LARGE = 20_000, 120_000

CHILD = r"""
import asyncio, sys
import permits

case, calls = sys.argv[1], int(sys.argv[2])
bucket = permits.TokenBucketLimiter(10**9, 10**9, 1.0)
conc = permits.ConcurrencyLimiter(10**6)
per_key = permits.PartitionedLimiter.per_key(permits.Partition.token_bucket(None, 10**9, 10**9, 1.0))
parsed = permits.PartitionedLimiter.per_key("10/second")

if case == "acquire":
    for _ in range(calls):
        bucket.acquire()
elif case == "acquire_release":
    for _ in range(calls):
        conc.acquire().release()
elif case == "per_key":
    for _ in range(calls):
        per_key.acquire("user-42")
elif case == "per_key_new_parsed":
    for key in range(calls):
        parsed.acquire(key)
elif case == "wait_async":
    async def main():
        for _ in range(calls):
            await bucket.wait_async()
    asyncio.run(main())
elif case == "acquire_async":
    async def main():
        for _ in range(calls):
            await bucket.acquire_async()
    asyncio.run(main())
elif case == "trivial_await":
    async def trivial():
        return 1
    async def main():
        for _ in range(calls):
            await trivial()
    asyncio.run(main())
elif case == "async_with":
    async def main():
        for _ in range(calls):
            async with conc.wait_async():
                pass
    asyncio.run(main())
elif case == "chain_wait":
    chained = permits.chain(bucket, conc)
    async def main():
        for _ in range(calls):
            (await chained.wait_async()).release()
    asyncio.run(main())
elif case.startswith("wsgi_"):
    from permits.wsgi import RateLimitMiddleware

    def hello(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]
    from permits import keys
    key = keys.header("x-api-key") if case == "wsgi_header_key" else None
    headers = case in ("wsgi_headers", "wsgi_header_key")
    app = hello if case == "wsgi_bare" else RateLimitMiddleware(hello, per_key, headers=headers, key=key)
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "SCRIPT_NAME": "", "QUERY_STRING": "",
               "REMOTE_ADDR": "10.0.0.1", "HTTP_X_API_KEY": "key-1234", "SERVER_NAME": "x", "SERVER_PORT": "80",
               "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "http"}
    def start_response(status, headers, exc_info=None):
        return None
    for _ in range(calls):
        result = app(dict(environ), start_response)
        for chunk in result:
            pass
        close = getattr(result, "close", None)
        if close is not None:
            close()
elif case.startswith("asgi_"):
    from permits.asgi import RateLimitMiddleware
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def hello(request):
        return PlainTextResponse("ok")
    app = Starlette(routes=[Route("/", hello)])
    if case != "asgi_bare":
        app.add_middleware(RateLimitMiddleware, limiter=per_key, headers=case == "asgi_headers")
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": "/", "raw_path": b"/", "query_string": b"", "root_path": "",
             "headers": [(b"host", b"x")], "client": ("10.0.0.1", 1234), "server": ("127.0.0.1", 80)}
    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}
    async def send(message):
        pass
    async def main():
        for _ in range(calls):
            await app(dict(scope), receive, send)
    asyncio.run(main())
elif case.startswith("flask_"):
    import io
    import flask

    app = flask.Flask("bench")

    @app.get("/")
    def hello():
        return "ok"
    if case == "flask_permits":
        from permits.flask import RateLimit
        RateLimit(per_key).init_app(app)
    elif case == "flask_limiter":
        from flask_limiter import Limiter
        from flask_limiter.util import get_remote_address
        Limiter(get_remote_address, app=app, default_limits=["1000000000/second"], storage_uri="memory://",
                headers_enabled=True)
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "SCRIPT_NAME": "", "QUERY_STRING": "",
               "REMOTE_ADDR": "10.0.0.1", "SERVER_NAME": "x", "SERVER_PORT": "80", "HTTP_HOST": "x",
               "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr}
    def start_response(status, headers, exc_info=None):
        return None
    for _ in range(calls):
        request = dict(environ)
        request["wsgi.input"] = io.BytesIO(b"")
        result = app(request, start_response)
        for chunk in result:
            pass
        close = getattr(result, "close", None)
        if close is not None:
            close()
elif case == "custom_wait":
    class Custom(permits.RateLimiter):
        def _acquire(self, n):
            return permits.Lease.granted(n)
    custom = Custom()
    async def main():
        for _ in range(calls):
            (await custom.wait_async()).release()
    asyncio.run(main())
"""

CASES = {
    "acquire": "TokenBucketLimiter.acquire()",
    "acquire_release": "ConcurrencyLimiter.acquire().release()",
    "per_key": 'per_key acquire("user-42")',
    "per_key_new_parsed": 'per_key("10/second") acquire(new key)',
    "wait_async": "await wait_async() granted (token bucket)",
    "async_with": "async with wait_async() (concurrency)",
    "acquire_async": "await acquire_async() (token bucket)",
    "trivial_await": "await of a trivial coroutine (the floor)",
    "chain_wait": "await chain(bucket, conc).wait_async() granted, released",
    "custom_wait": "await custom limiter wait_async() granted, released",
    "wsgi_bare": "a WSGI request to a bare app",
    "wsgi_headers": "... behind RateLimitMiddleware (per IP, headers)",
    "wsgi_no_headers": "... behind RateLimitMiddleware (per IP, headers=False)",
    "wsgi_header_key": "... behind RateLimitMiddleware (per X-Api-Key header, headers)",
    "asgi_bare": "an ASGI request to a one-route Starlette app",
    "asgi_headers": "... behind RateLimitMiddleware (per IP, headers)",
    "asgi_no_headers": "... behind RateLimitMiddleware (per IP, headers=False)",
    "flask_bare": "a request to a one-view Flask app",
    "flask_permits": "... with permits.flask's RateLimit (per IP, headers)",
    "flask_limiter": "... with flask-limiter (memory, per IP, headers; when installed)",
}
#: Cases whose calls are whole requests: that many times fewer of them (callgrind is ~50x slower).
FEWER = {"wsgi_": 4, "asgi_": 20, "flask_": 80}


def total(python: str, case: str, calls: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", python, "-c", CHILD, case, str(calls)],
            check=True,
            capture_output=True,
            env=env,
            cwd="/",
        )
        with open(out) as f:
            match = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M)
        if match is None:
            raise RuntimeError("no total in callgrind's output")
        return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pythons", nargs="+", help="interpreters, each with permits installed")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="only these cases (repeatable)")
    args = parser.parse_args()
    rows = []
    for case, label in CASES.items():
        if args.case and case not in args.case:
            continue
        per_call = []
        fewer = next((n for prefix, n in FEWER.items() if case.startswith(prefix)), 1)
        small, large = SMALL // fewer, LARGE // fewer
        for python in args.pythons:
            per_call.append((total(python, case, large) - total(python, case, small)) / (large - small))
            print(f"{label}: {python}: {per_call[-1]:,.0f}", file=sys.stderr)
        rows.append((label, per_call))
    print("| case | " + " | ".join(args.pythons) + " |")
    print("|---|" + "---:|" * len(args.pythons))
    for label, per_call in rows:
        print(f"| {label} | " + " | ".join(f"{n:,.0f}" for n in per_call) + " |")


if __name__ == "__main__":
    main()
