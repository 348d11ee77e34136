"""A small site for the scraper (``async_scraper.py``) to run against, on your own machine.

It serves ``/page/1``, ``/page/2``, ... (any positive number) and keeps a limit of its own: each
client (by its address) may fetch ``--limit`` pages (default ``5/second``); beyond that it answers
``429 Too Many Requests`` with ``Retry-After``, as a real site would. ``/health`` is not limited.
The limit is permits' aiohttp middleware over a per-client limiter: the server side of the scraper's
pacing. It logs each request with the status it got.

Run it (``pip install "permits[aiohttp]"``), then the scraper against it in another shell::

    python examples/sample_site.py --port 8001 --limit 5/second
    python examples/async_scraper.py --base-url http://127.0.0.1:8001 --pages 20 --rate 5/second

The settings can also come from the environment: ``HOST``, ``PORT``, ``SITE_LIMIT``.
"""

from __future__ import annotations

import argparse
import logging
import os

# The web framework is an optional extra: --help works without it, and a run says what to install.
try:
    from aiohttp import web

    import permits
    from permits.aiohttp import rate_limit_middleware
except ModuleNotFoundError as error:
    MISSING: ModuleNotFoundError | None = error
else:
    MISSING = None


def create_app(limit: str) -> web.Application:
    per_client = permits.PartitionedLimiter.per_key(limit, name="site")

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "pid": os.getpid()})

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=f"page {request.match_info['n']}")

    def client_of(request: web.Request) -> str:
        return request.remote or "unknown"

    app = web.Application(middlewares=[rate_limit_middleware(per_client, key=client_of, exempt=["/health"])])
    app.router.add_get("/health", health)
    app.router.add_get(r"/page/{n:[1-9][0-9]*}", page)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8001")))
    parser.add_argument("--limit", default=os.environ.get("SITE_LIMIT", "5/second"), help="per client, e.g. 5/second")
    args = parser.parse_args()
    if MISSING is not None:
        parser.exit(1, f'{parser.prog}: {MISSING.name} is not installed: pip install "permits[aiohttp]"\n')
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # aiohttp's access log: one line a request
    web.run_app(create_app(args.limit), host=args.host, port=args.port, access_log_format='%a "%r" %s')


if __name__ == "__main__":
    main()
