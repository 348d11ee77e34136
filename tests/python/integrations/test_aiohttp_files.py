"""aiohttp's file responses (``web.FileResponse``, static routes) through the integration, under
a real aiohttp server and client: sent whole, nothing logged, the connection reused."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

import permits
from permits.aiohttp import limit, rate_limit_middleware


def file_app(
    tmp_path: Path, clock: permits.ManualClock, *, decorated: bool
) -> tuple[web.Application, permits.ConcurrencyLimiter, list[object]]:
    """/page (a FileResponse) and /static/ behind a limiter; the client address of each response."""
    (tmp_path / "page.txt").write_bytes(b"x" * 100_000)
    limiter = permits.ConcurrencyLimiter(2, clock=clock)
    middlewares = [] if decorated else [rate_limit_middleware(limiter)]
    app = web.Application(middlewares=middlewares)

    async def page(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(tmp_path / "page.txt")

    app.router.add_get("/page", limit(limiter)(page) if decorated else page)
    if not decorated:
        app.router.add_static("/static", tmp_path)
    peers: list[object] = []

    async def record_peer(request: web.Request, response: web.StreamResponse) -> None:
        assert request.transport is not None
        peers.append(request.transport.get_extra_info("peername"))

    app.on_response_prepare.append(record_peer)
    return app, limiter, peers


@pytest.mark.parametrize("decorated", [False, True], ids=["middleware", "limit"])
async def test_file_responses_keep_the_connection(
    serve_aiohttp, clock: permits.ManualClock, tmp_path: Path, caplog: pytest.LogCaptureFixture, decorated: bool
) -> None:
    app, limiter, peers = file_app(tmp_path, clock, decorated=decorated)
    paths = ["/page", "/page"] if decorated else ["/page", "/static/page.txt", "/page"]
    connector = aiohttp.TCPConnector(limit=1)  # one connection: every request after the first reuses it
    with caplog.at_level(logging.ERROR):
        async with serve_aiohttp(app) as url, aiohttp.ClientSession(url, connector=connector) as session:
            for path in paths:
                async with session.get(path) as response:
                    assert response.status == 200
                    assert await response.read() == b"x" * 100_000
                    assert "ratelimit" in response.headers or path.startswith("/static")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert limiter.available_permits() == 2
    assert len(peers) == len(paths) and len(set(peers)) == 1  # one connection served them all
