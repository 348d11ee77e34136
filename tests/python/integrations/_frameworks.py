"""Every server integration around one ``/hello`` endpoint, on a loopback server: what the tests
that hold for all of them (rate strings, translated keys, shadow mode) run against."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import flask
from _django_site import Site, serve_django
from aiohttp import web
from fastapi import Depends, FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from permits import keys
from permits.aiohttp import limit as aiohttp_limit
from permits.aiohttp import rate_limit_middleware
from permits.asgi import RateLimitMiddleware
from permits.django import limit as django_limit
from permits.fastapi import RateLimit, RateLimitExceeded, rejection_handler
from permits.flask import RateLimit as FlaskRateLimit
from permits.wsgi import RateLimitMiddleware as WSGIMiddleware

from _integration import serve_wsgi

CLIENT = keys.header("x-client")
FRAMEWORKS = ["asgi", "fastapi", "aiohttp", "aiohttp-view", "wsgi", "flask", "flask-view", "django", "django-view"]


@contextlib.asynccontextmanager
async def serving(
    framework: str, limiter: Any, serve_asgi: Any, serve_aiohttp: Any, **options: Any
) -> AsyncIterator[str]:
    """``/hello`` limited by ``limiter`` (and ``options``) in ``framework``, on a loopback server."""
    if framework == "asgi":

        async def hello(request: Request) -> PlainTextResponse:
            return PlainTextResponse("hello")

        app = Starlette(routes=[Route("/hello", hello)])
        app.add_middleware(RateLimitMiddleware, limiter=limiter, **options)
        async with serve_asgi(app) as url:
            yield url
    elif framework == "fastapi":
        api = FastAPI()
        api.add_exception_handler(RateLimitExceeded, rejection_handler)

        @api.get("/hello", dependencies=[Depends(RateLimit(limiter, **options))])
        async def fastapi_hello() -> PlainTextResponse:
            return PlainTextResponse("hello")

        async with serve_asgi(api) as url:
            yield url
    elif framework.startswith("aiohttp"):

        async def aiohttp_hello(request: web.Request) -> web.Response:
            return web.Response(text="hello")

        if framework == "aiohttp":
            aiohttp_app = web.Application(middlewares=[rate_limit_middleware(limiter, **options)])
            aiohttp_app.router.add_get("/hello", aiohttp_hello)
        else:
            aiohttp_app = web.Application()
            aiohttp_app.router.add_get("/hello", aiohttp_limit(limiter, **options)(aiohttp_hello))
        async with serve_aiohttp(aiohttp_app) as url:
            yield url
    elif framework == "wsgi":

        def wsgi_hello(environ: Any, start_response: Callable[..., Any]) -> list[bytes]:
            if environ.get("PATH_INFO") != "/hello":
                start_response("404 Not Found", [("Content-Type", "text/plain")])
                return [b"not found"]
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"hello"]

        with serve_wsgi(WSGIMiddleware(wsgi_hello, limiter, **options)) as url:
            yield url
    elif framework.startswith("flask"):
        flask_app = flask.Flask(__name__)
        if framework == "flask":
            FlaskRateLimit(limiter, **options).init_app(flask_app)
            view = lambda: "hello"  # noqa: E731
        else:
            extension = FlaskRateLimit()
            extension.init_app(flask_app)
            view = extension.limit(limiter, **options)(lambda: "hello")
        flask_app.add_url_rule("/hello", "hello", view)
        with serve_wsgi(flask_app) as url:
            yield url
    elif framework == "django":
        with serve_django(Site(), {"limiter": limiter, **options}) as url:
            yield url
    else:
        with serve_django(Site(django_limit(limiter, **options)), None) as url:
            yield url
