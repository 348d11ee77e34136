"""The Django project of test_django_gunicorn, served by gunicorn's gevent workers.

The global limit (settings.PERMITS) is a fixed window of 40 requests per hour named ``api`` in the
``permits.shm.SharedMemoryStore`` segment ``PERMITS_TEST_SHM`` (from the environment), opened at
import: in gunicorn's master with ``--preload``, before the workers are forked. Every response
carries the answering process's pid in ``x-pid``.

Routes: ``/work`` (the global limit) answers ``ok``; ``/pid`` answers the pid. Exempt from the
global limit, on one concurrency permit of the process (``GATE``): ``/hold`` holds it for 0.5 s of
``gevent.sleep`` (which yields to the other greenlets), ``/wait`` waits up to 3 s for it
(``wait=True``), ``/free`` answers how many of its permits are free.
"""

import os
from typing import Any

import django
import gevent
from django.conf import settings

import permits
from permits.shm import SharedMemoryStore

STORE = SharedMemoryStore(os.environ["PERMITS_TEST_SHM"])
GATE = permits.ConcurrencyLimiter(1, name="gate")

settings.configure(
    DEBUG=False,
    ALLOWED_HOSTS=["*"],
    SECRET_KEY="permits-tests",
    ROOT_URLCONF=__name__,
    MIDDLEWARE=["permits.django.RateLimitMiddleware"],
    PERMITS={"limiter": STORE.fixed_window("api", 40, 3600), "exempt": ["/pid", "/hold", "/wait", "/free"]},
    INSTALLED_APPS=[],
)
django.setup()

from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.urls import path  # noqa: E402

from permits.django import limit  # noqa: E402


def work(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def pid(request: HttpRequest) -> HttpResponse:
    return HttpResponse(str(os.getpid()))


@limit(GATE)
def hold(request: HttpRequest) -> HttpResponse:
    gevent.sleep(0.5)
    return HttpResponse("held")


@limit(GATE, wait=True, timeout=3)
def wait(request: HttpRequest) -> HttpResponse:
    return HttpResponse("waited")


def free(request: HttpRequest) -> HttpResponse:
    return HttpResponse(str(GATE.available_permits()))


urlpatterns = [path("work", work), path("pid", pid), path("hold", hold), path("wait", wait), path("free", free)]
django_app = get_wsgi_application()


def app(environ: dict[str, Any], start_response: Any) -> Any:
    def with_pid(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        # (read per request: with --preload the module was imported in the master)
        return start_response(status, [*headers, ("x-pid", str(os.getpid()))], exc_info)

    return django_app(environ, with_pid)
