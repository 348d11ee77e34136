"""Fixtures of the integration tests: real servers (uvicorn, aiohttp) on a free loopback port,
in the test's own event loop, so that a test drives them with real clients and reads the
limiters' statistics between requests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
import uvicorn
from aiohttp import web

import permits

ServeASGI = Callable[..., AbstractAsyncContextManager[str]]
ServeAiohttp = Callable[..., AbstractAsyncContextManager[str]]


@pytest.fixture
def clock() -> permits.ManualClock:
    return permits.ManualClock()


@asynccontextmanager
async def _uvicorn(app: Any, **options: Any) -> AsyncIterator[str]:
    # Server.serve() would tick every 0.1 s and pause 0.1 s on shutdown; the tests start many
    # servers, so they run startup() and close the listening socket and connections themselves.
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="critical", lifespan="off", **options)
    config.load()
    server = uvicorn.Server(config)
    server.lifespan = config.lifespan_class(config)
    await server.startup()
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for listening in server.servers:
            listening.close()
        for connection in list(server.server_state.connections):
            connection.shutdown()
        for listening in server.servers:
            await listening.wait_closed()


@pytest.fixture
def serve_asgi() -> ServeASGI:
    """``async with serve_asgi(app) as base_url``: the app under uvicorn on 127.0.0.1."""
    return _uvicorn


@asynccontextmanager
async def _aiohttp(app: web.Application, **options: Any) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None, **options)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
def serve_aiohttp() -> ServeAiohttp:
    """``async with serve_aiohttp(app) as base_url``: the app under aiohttp's server on 127.0.0.1."""
    return _aiohttp
