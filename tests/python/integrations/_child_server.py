"""A server in a child process, for the tests that measure its memory or must survive it
freezing: ``python _child_server.py <app>`` prints its port, then serves until killed.

Every app limits ``/upload`` with ``wait=True`` (no ``timeout``: a queued request stays queued
however slow the machine) on a limiter of one permit an hour (the first request takes it, the
next ones queue); ``/_probe/...`` is not limited: ``rss`` (the process's
resident memory in KiB: its current size on Linux, its peak elsewhere), ``queued`` (the
limiter's queue), ``receives`` (the receive() calls of the replaying middleware, ``*-replay``)."""

import asyncio
import socket
import sys
from typing import Any

import permits

LIMITER = permits.FixedWindowLimiter(1, 3600, queue_limit=8)
RECEIVES = [0]


def rss_kib() -> int:
    if sys.platform == "linux":
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    if sys.platform == "win32":
        import ctypes
        from ctypes import wintypes

        class Counters(ctypes.Structure):
            _fields_ = [("cb", wintypes.DWORD), ("faults", wintypes.DWORD)] + [
                (name, ctypes.c_size_t)
                for name in ("peak_ws", "ws", "qpp", "qp", "qnpp", "qnp", "pagefile", "peak_pagefile")
            ]

        counters = Counters()
        counters.cb = ctypes.sizeof(counters)
        process = ctypes.windll.kernel32.GetCurrentProcess()  # type: ignore[attr-defined]
        ctypes.windll.psapi.GetProcessMemoryInfo(process, ctypes.byref(counters), counters.cb)  # type: ignore[attr-defined]
        return int(counters.peak_ws) // 1024
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes on macOS, KiB elsewhere


def probe(what: str) -> int:
    if what == "rss":
        return rss_kib()
    if what == "queued":
        return LIMITER.statistics().current_queued_count
    return RECEIVES[0]


def replaying_middleware(app: Any, *, suspends: bool) -> Any:
    """The common recipe: read the body once, then answer every receive() with it again, at once
    (``suspends=False``) or after a yield to the loop."""

    async def replay_app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break

        async def replay() -> Any:
            RECEIVES[0] += 1
            if suspends:
                await asyncio.sleep(0)
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return replay_app


def asgi_app(kind: str) -> Any:
    from starlette.responses import PlainTextResponse

    if kind.startswith("fastapi"):
        from fastapi import Depends, FastAPI, Request

        from permits.fastapi import RateLimit

        limited: Any = FastAPI()

        waiting = RateLimit(LIMITER, wait=True, timeout=None)

        @limited.api_route("/upload", methods=["GET", "POST"], dependencies=[Depends(waiting)])
        async def upload(request: Request) -> PlainTextResponse:
            return PlainTextResponse(str(len(await request.body())))
    else:
        from starlette.applications import Starlette
        from starlette.requests import Request as StarletteRequest
        from starlette.routing import Route

        from permits.asgi import RateLimitMiddleware

        async def upload_(request: StarletteRequest) -> PlainTextResponse:
            return PlainTextResponse(str(len(await request.body())))

        limited = RateLimitMiddleware(
            Starlette(routes=[Route("/upload", upload_, methods=["GET", "POST"])]), LIMITER, wait=True, timeout=None
        )
    if kind.endswith("-replay"):
        limited = replaying_middleware(limited, suspends=False)
    elif kind.endswith("-replay-yielding"):
        limited = replaying_middleware(limited, suspends=True)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path.startswith("/_probe/"):
            await PlainTextResponse(str(probe(path.rsplit("/", 1)[1])))(scope, receive, send)
        else:
            await limited(scope, receive, send)

    return app


async def serve_aiohttp(sock: socket.socket) -> None:
    from aiohttp import web

    from permits.aiohttp import rate_limit_middleware

    async def upload(request: web.Request) -> web.Response:
        return web.Response(text=str(len(await request.read())))

    async def probe_(request: web.Request) -> web.Response:
        return web.Response(text=str(probe(request.match_info["what"])))

    app = web.Application(middlewares=[rate_limit_middleware(LIMITER, wait=True, timeout=None, exempt=("/_probe",))])
    app.router.add_route("*", "/upload", upload)
    app.router.add_get("/_probe/{what}", probe_)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    await asyncio.Event().wait()


def bounded() -> None:
    """A spinning server is stopped by the kernel, not by the machine running out."""
    if sys.platform != "win32":
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (60, 60))
        resource.setrlimit(resource.RLIMIT_DATA, (2 << 30, 2 << 30))


def main() -> None:
    kind = sys.argv[1]
    bounded()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(sock.getsockname()[1], flush=True)
    if kind == "aiohttp":
        asyncio.run(serve_aiohttp(sock))
        return
    import uvicorn

    config = uvicorn.Config(asgi_app(kind), log_level="critical", lifespan="off")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
