"""Fixtures of the integration tests: real servers (uvicorn, aiohttp) on a free loopback port,
in the test's own event loop, so that a test drives them with real clients and reads the
limiters' statistics between requests."""

from __future__ import annotations

import asyncio
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
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="critical", lifespan="off", **options)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # it failed to start: say why
        await asyncio.sleep(0.005)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        server.force_exit = True
        await task


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
