"""A minimal Django project for the Django tests, served in the test's process (werkzeug's or
waitress's threads): Django's settings are global, so they are configured once per process and each
site overrides ``PERMITS``, ``MIDDLEWARE`` and ``ROOT_URLCONF`` while it is served. Django builds its
middleware when its WSGI handler is made: each site makes its own, under its own settings.

Views: /hello (records its path), /boom (raises; /boom's 500 page records the permits left when
Django renders it), /stream (yields what the test feeds), /health, /items (a class-based view)."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from _integration import require, serve_wsgi

django = require("django")
from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure(
        DEBUG=False,
        ALLOWED_HOSTS=["*"],
        SECRET_KEY="permits-tests",
        ROOT_URLCONF=__name__,
        MIDDLEWARE=[],
        INSTALLED_APPS=[],
        USE_TZ=True,
        LOGGING_CONFIG=None,  # (the 500s of /boom are expected: Django's console logging stays off)
    )
    django.setup()

from django.core.handlers.wsgi import WSGIHandler  # noqa: E402
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse  # noqa: E402
from django.test.utils import override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from django.views import View  # noqa: E402

MIDDLEWARE = "permits.django.RateLimitMiddleware"
urlpatterns: list[Any] = []


class Site:
    """The views of one test; ``decorate`` (a view's limits) wraps each, the class-based one too."""

    def __init__(self, decorate: Callable[[Any], Any] = lambda view: view) -> None:
        self.calls: list[str] = []
        self.feed: queue.Queue[bytes | None] = queue.Queue()
        self.closed = threading.Event()
        #: What ``error_permits()`` read when Django rendered /boom's 500 page.
        self.on_error: list[object] = []
        self.error_permits: Callable[[], object] = lambda: None
        site = self

        def hello(request: HttpRequest) -> HttpResponse:
            site.calls.append(request.headers.get("x-order", request.path))
            return HttpResponse("hello")

        def boom(request: HttpRequest) -> HttpResponse:
            raise RuntimeError("boom")

        def stream(request: HttpRequest) -> StreamingHttpResponse:
            def chunks() -> Iterator[bytes]:
                try:
                    while (chunk := site.feed.get(timeout=20)) is not None:
                        yield chunk
                finally:
                    site.closed.set()

            return StreamingHttpResponse(chunks(), content_type="text/plain")

        class Items(View):
            def get(self, request: HttpRequest) -> HttpResponse:
                site.calls.append("GET /items")
                return HttpResponse("items")

            def post(self, request: HttpRequest) -> HttpResponse:
                site.calls.append("POST /items")
                return HttpResponse("posted", status=201)

        self.urlpatterns = [
            path("hello", decorate(hello)),
            path("boom", decorate(boom)),
            path("stream", decorate(stream)),
            path("health", decorate(hello)),
            path("items", decorate(Items).as_view()),
        ]

        def handler500(request: HttpRequest) -> HttpResponse:
            site.on_error.append(site.error_permits())
            return HttpResponse("server error", status=500)

        self.handler500 = handler500


@contextlib.contextmanager
def serve_django(
    site: Site, permits: dict[str, Any] | None, server: str = "werkzeug", script_name: str = ""
) -> Iterator[str]:
    """``site`` under Django's WSGI handler, with the permits middleware configured by ``permits``
    (None: no middleware), served on loopback; ``script_name``: mounted below that prefix."""
    middleware = [] if permits is None else [MIDDLEWARE]
    options = {} if permits is None else {"PERMITS": permits}
    with override_settings(ROOT_URLCONF=site, MIDDLEWARE=middleware, **options):
        handler = WSGIHandler()
        app: Any = handler
        if script_name:

            def app(environ: dict[str, Any], start_response: Any) -> Any:
                path_info = environ["PATH_INFO"]
                assert path_info.startswith(script_name)
                environ["SCRIPT_NAME"], environ["PATH_INFO"] = script_name, path_info[len(script_name) :]
                return handler(environ, start_response)

        with serve_wsgi(app, server) as url:
            yield url


#: ``build(UNSET)``: no PERMITS setting at all.
UNSET = object()


def build(permits: Any) -> WSGIHandler:
    """Django's handler under ``PERMITS = permits``: it builds the middleware (raising if bad)."""
    options = {} if permits is UNSET else {"PERMITS": permits}
    with override_settings(ROOT_URLCONF=Site(), MIDDLEWARE=[MIDDLEWARE], **options):
        return WSGIHandler()
