"""A reverse proxy for the tests, on loopback: it forwards every request to an upstream server and
appends the peer's address to ``X-Forwarded-For`` as nginx's ``$proxy_add_x_forwarded_for`` does,
passing every other header (a client's own ``Forwarded`` included) through unchanged, as nginx
does by default."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from aiohttp import web

#: Headers about one connection, not the request: a proxy does not pass them on.
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host"}
)
_NOT_RETURNED = _HOP_BY_HOP | {"content-length", "content-encoding"}
#: The longest header field the proxy accepts (and the servers behind it, where a test says so).
LONG_HEADERS = 65536


@asynccontextmanager
async def reverse_proxy(upstream: str, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """``async with reverse_proxy(upstream_url) as url``: a proxy listening on ``host``."""
    session = aiohttp.ClientSession(auto_decompress=False)

    async def forward(request: web.Request) -> web.Response:
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP]
        headers = [(k, v) for k, v in headers if k.lower() != "x-forwarded-for"]
        appended = ", ".join([*request.headers.getall("X-Forwarded-For", []), str(request.remote)])
        headers.append(("X-Forwarded-For", appended))
        async with session.request(
            request.method, upstream + request.path_qs, headers=headers, data=await request.read()
        ) as answer:
            body = await answer.read()
            returned = [(k, v) for k, v in answer.headers.items() if k.lower() not in _NOT_RETURNED]
            return web.Response(status=answer.status, body=body, headers=returned)

    app = web.Application()
    app.router.add_route("*", "/{path:.*}", forward)
    # (a header field of up to 64 KiB: the tests' clients pad X-Forwarded-For past aiohttp's 8 KiB)
    runner = web.AppRunner(app, access_log=None, max_field_size=LONG_HEADERS)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
        await session.close()
