"""An aiohttp service with two limits: one per user and one for the whole service.

- Every user may make ``--per-user`` requests (default ``10/minute``) to ``/items``. The user is
  the ``X-User`` header, else the ``user`` query parameter, else the client's IP address. This
  limit is the handler's own (``@permits.aiohttp.limit``).
- The whole service answers at most ``--global`` requests (default ``100/minute``), whoever asks:
  a middleware in front of every route but ``/health``.

A request over either limit gets ``429 Too Many Requests`` with ``Retry-After``. A request the
global limit admits and the per-user limit refuses still counts against the global limit.

Run it (``pip install "permits[aiohttp]"``)::

    python examples/aiohttp_service.py --port 8080 --per-user 3/minute --global 100/minute
    curl -i -H "X-User: alice" http://127.0.0.1:8080/items
    curl -i "http://127.0.0.1:8080/items?user=bob"

The settings can also come from the environment: ``HOST``, ``PORT``, ``PER_USER_LIMIT``,
``GLOBAL_LIMIT``.
"""

from __future__ import annotations

import argparse
import os

# aiohttp is an optional extra: --help works without it, and a run says what to install.
try:
    from aiohttp import web

    import permits
    from permits.aiohttp import limit, rate_limit_middleware
except ModuleNotFoundError as error:
    MISSING: ModuleNotFoundError | None = error
else:
    MISSING = None


def user_of(request: web.Request) -> str:
    """Who a request counts against: the X-User header, the ``user`` query parameter, or the
    client's address. (Trust a header like this only behind your own authentication.)"""
    user = request.headers.get("x-user") or request.query.get("user")
    return f"user:{user}" if user else f"ip:{request.remote or 'unknown'}"


def create_app(per_user_rate: str, global_rate: str) -> web.Application:
    per_user = permits.PartitionedLimiter.per_key(per_user_rate, name="per-user")
    everyone = permits.specs.parse(global_rate).limiter(name="global")

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    @limit(per_user, key=user_of)
    async def items(request: web.Request) -> web.Response:
        return web.json_response({"user": user_of(request), "items": ["apple", "pear"]})

    # The middleware goes first (outermost): it holds each request's permit until the response is sent.
    app = web.Application(middlewares=[rate_limit_middleware(everyone, exempt=["/health"])])
    app.router.add_get("/health", health)
    app.router.add_get("/items", items)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8080")))
    parser.add_argument("--per-user", default=os.environ.get("PER_USER_LIMIT", "10/minute"), help="e.g. 10/minute")
    parser.add_argument("--global", dest="global_rate", default=os.environ.get("GLOBAL_LIMIT", "100/minute"))
    args = parser.parse_args()
    if MISSING is not None:
        parser.exit(1, f'{parser.prog}: {MISSING.name} is not installed: pip install "permits[aiohttp]"\n')
    web.run_app(create_app(args.per_user, args.global_rate), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
