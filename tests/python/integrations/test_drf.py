"""Django REST framework views throttled by ``permits.drf.Throttle`` (issue 43, item 4): DRF's own
dispatch, its ``Throttled`` response and its ``Retry-After``, the limit holding exactly under
concurrency (DRF's own throttles read and then write a cache entry: #5181, #8127)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _django_site import django  # noqa: F401  (Django's settings, configured once per process)

import permits

from _integration import require

require("rest_framework")
from django.test.utils import override_settings  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.test import APIRequestFactory  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from permits.drf import Throttle  # noqa: E402

FACTORY = APIRequestFactory()


@pytest.fixture(autouse=True)
def no_auth_apps() -> Iterator[None]:
    # (no django.contrib.auth in the test project: DRF's anonymous user is None here)
    with override_settings(REST_FRAMEWORK={"UNAUTHENTICATED_USER": None}):
        yield


def view_with(*throttles: type[Throttle]) -> Any:
    class Hello(APIView):
        authentication_classes: list[Any] = []
        permission_classes: list[Any] = []
        throttle_classes = list(throttles)

        def get(self, request: Any) -> Response:
            return Response({"hello": "world"})

    return Hello.as_view()


def get(view: Any, **headers: str) -> Any:
    return view(FACTORY.get("/hello", **headers))


def test_a_rate_per_client_and_drfs_own_rejection() -> None:
    class PerClient(Throttle):
        limiter = permits.specs.FixedWindow(2, 60.0)

    view = view_with(PerClient)
    codes = [get(view, REMOTE_ADDR="10.0.0.1").status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    refused = get(view, REMOTE_ADDR="10.0.0.1")
    assert 1 <= int(refused["Retry-After"]) <= 60  # DRF's Throttled, from wait(): the lease's retry_after
    assert "throttled" in str(refused.data["detail"]).lower()
    assert get(view, REMOTE_ADDR="10.0.0.2").status_code == 200  # another client, its own limit


def test_a_key_and_a_rate_string() -> None:
    class PerTenant(Throttle):
        limiter = "1/minute"
        key = staticmethod(lambda request, view: request.headers.get("x-tenant"))

    view = view_with(PerTenant)
    assert get(view, HTTP_X_TENANT="a").status_code == 200
    assert get(view, HTTP_X_TENANT="a").status_code == 429
    assert get(view, HTTP_X_TENANT="b").status_code == 200
    assert isinstance(PerTenant.made_limiter(), permits.KeyedRateLimiter)
    assert PerTenant.made_limiter() is PerTenant.made_limiter()  # made once for the class


def test_a_shared_limiter_for_every_client() -> None:
    everyone = permits.TokenBucketLimiter(3, 1, 60.0, name="api")

    class Global(Throttle):
        limiter = everyone
        permit_count = 2

    view = view_with(Global)
    assert get(view, REMOTE_ADDR="10.0.0.1").status_code == 200
    assert get(view, REMOTE_ADDR="10.0.0.2").status_code == 429  # 1 left, 2 asked
    assert everyone.available_permits() == 1


def test_the_limit_holds_exactly_under_concurrency() -> None:
    class PerClient(Throttle):
        limiter = permits.specs.FixedWindow(10, 60.0)

    view = view_with(PerClient)
    codes: list[int] = []
    start = threading.Barrier(40)

    def hit() -> None:
        start.wait(10)
        codes.append(get(view, REMOTE_ADDR="10.0.0.9").status_code)

    threads = [threading.Thread(target=hit) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(codes) == [200] * 10 + [429] * 30


def test_bad_throttles_say_what_is_wrong() -> None:
    class Nothing(Throttle):
        pass

    with pytest.raises(TypeError, match="Nothing needs a limiter"):
        get(view_with(Nothing))

    class Pool(Throttle):
        limiter = permits.ConcurrencyLimiter(2)

    with pytest.raises(TypeError, match="concurrency limit"):
        get(view_with(Pool))

    class Zero(Throttle):
        limiter = "5/second"
        permit_count = 0

    with pytest.raises(ValueError, match="permit_count must be an int of at least 1"):
        get(view_with(Zero))
