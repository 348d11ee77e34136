"""A real HTTP server for the client integrations' tests: aiohttp.web on a free loopback port,
in a thread of its own (so that both blocking and asyncio clients can talk to it).

Paths:
- ``/ok``: 200 "ok".
- ``/busy/<id>?times=N&status=429&after=S&form=seconds|date|none&wait=W``: the first N requests
  for ``<id>`` get ``status`` with ``Retry-After`` (S seconds, or that many seconds ahead as an
  HTTP date, or no header), W seconds after they arrive (default 0); later ones get 200. Each
  reads the request's body: ``bodies[<id>]`` lists the bytes each request for ``<id>`` sent.
- ``/stream``: sends a first chunk, then the rest once :meth:`Upstream.finish_streams` is called.
- ``/hang``: answers once :meth:`Upstream.finish_streams` is called.
- ``/paced?wait=S``: notes when it arrived (``arrivals``, ``time.monotonic()``), then answers
  200 after S seconds (default 0).

Every request is counted per path (``hits``) and its Host header kept (``hosts``).
"""

from __future__ import annotations

import asyncio
import collections
import socket
import threading
import time
from collections.abc import Iterator
from email.utils import formatdate

import pytest
from aiohttp import web


class Upstream:
    def __init__(self) -> None:
        self.hits: collections.Counter[str] = collections.Counter()
        self.hosts: list[str] = []
        self.bodies: collections.defaultdict[str, list[int]] = collections.defaultdict(list)
        self.arrived = threading.Event()  # set by every request to /stream, /hang or /paced
        self.arrivals: list[float] = []
        self._busy: collections.Counter[str] = collections.Counter()
        self._loop = asyncio.new_event_loop()
        self._finish = asyncio.Event()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port = 0

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def finish_streams(self) -> None:
        self._loop.call_soon_threadsafe(self._finish.set)

    # ---- the handlers ----
    def _count(self, request: web.Request) -> None:
        self.hits[request.path] += 1
        self.hosts.append(request.host.rsplit(":", 1)[0])

    async def _ok(self, request: web.Request) -> web.Response:
        self._count(request)
        return web.Response(text="ok")

    async def _busy_handler(self, request: web.Request) -> web.Response:
        self._count(request)
        ident = request.match_info["id"]
        self.bodies[ident].append(len(await request.read()))
        self._busy[ident] += 1
        if self._busy[ident] > int(request.query.get("times", "1")):
            return web.Response(text="ok")
        await asyncio.sleep(float(request.query.get("wait", "0")))
        after = int(request.query.get("after", "1"))
        form = request.query.get("form", "seconds")
        headers = {}
        if form == "seconds":
            headers["Retry-After"] = str(after)
        elif form == "date":
            headers["Retry-After"] = formatdate(time.time() + after, usegmt=True)
        return web.Response(status=int(request.query.get("status", "429")), headers=headers, text="busy")

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        self._count(request)
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"first")
        self.arrived.set()
        await self._finish.wait()
        await response.write(b"last")
        await response.write_eof()
        return response

    async def _paced(self, request: web.Request) -> web.Response:
        self.arrivals.append(time.monotonic())  # first: as near its arrival as the handler gets
        self._count(request)
        self.arrived.set()
        await asyncio.sleep(float(request.query.get("wait", "0")))
        return web.Response(text="ok")

    async def _hang(self, request: web.Request) -> web.Response:
        self._count(request)
        self.arrived.set()
        await self._finish.wait()
        return web.Response(text="late")

    # ---- running ----
    async def _start(self) -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/ok", self._ok)
        app.router.add_route("*", "/busy/{id}", self._busy_handler)
        app.router.add_get("/stream", self._stream)
        app.router.add_get("/hang", self._hang)
        app.router.add_get("/paced", self._paced)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = runner.addresses[0][1]
        return runner

    def start(self) -> None:
        self._thread.start()
        self._runner = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        self.finish_streams()
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def refused_url() -> str:
    """A loopback URL nobody listens on (a port just bound and closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/"
