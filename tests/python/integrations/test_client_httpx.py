"""permits.httpx: real httpx clients through the transports, against a real local server.
Pacing runs on a ManualClock (a paced wait advances it), so the clock tells how long a client
would have waited."""

from __future__ import annotations

import asyncio

import _upstream
import httpx
import pytest
from _upstream import Upstream, refused_url

import permits
from permits.httpx import AsyncRateLimitedTransport, RateLimitedTransport
from permits.specs import FixedWindow

upstream = _upstream.upstream  # the server fixture


#: No pool timeout: it bounds the Retry-After pauses (test_client_timeouts), and these wait longer.
TIMEOUT = httpx.Timeout(5.0, pool=None)


def client(limiter: object, **options: object) -> httpx.Client:
    return httpx.Client(transport=RateLimitedTransport(limiter, **options), timeout=TIMEOUT)  # type: ignore[arg-type]


def aclient(limiter: object, **options: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=AsyncRateLimitedTransport(limiter, **options), timeout=TIMEOUT)  # type: ignore[arg-type]


# ---- a permit per request ----
def test_every_request_takes_a_permit_and_waits_for_the_next(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(2, 1.0, clock=clock)
    seen = []
    with client(limiter) as http:
        for _ in range(5):
            assert http.get(upstream.url("/ok")).text == "ok"
            seen.append(clock.now())
    assert seen == [0.0, 0.0, 1.0, 1.0, 2.0]
    assert upstream.hits["/ok"] == 5
    assert limiter.statistics().total_successful_leases == 5


async def test_async_requests_take_permits(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(2, 1.0, queue_limit=0, clock=clock)
    seen = []
    async with aclient(limiter) as http:
        for _ in range(5):
            assert (await http.get(upstream.url("/ok"))).text == "ok"
            seen.append(clock.now())
    assert seen == [0.0, 0.0, 1.0, 1.0, 2.0]
    assert limiter.statistics().total_successful_leases == 5


async def test_async_waits_in_the_limiters_queue(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock, queue_limit=1)
    async with aclient(limiter) as http:
        assert (await http.get(upstream.url("/ok"))).status_code == 200
        second = asyncio.create_task(http.get(upstream.url("/ok")))
        while limiter.statistics().current_queued_count == 0:
            await asyncio.sleep(0)
        assert upstream.hits["/ok"] == 1
        clock.advance(1.0)
        assert (await second).status_code == 200
    assert upstream.hits["/ok"] == 2


def test_keys_are_hosts_by_default(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.PartitionedLimiter.per_key(FixedWindow(1, 1.0), clock=clock)
    seen = []
    with client(limiter) as http:
        for host in ("127.0.0.1", "localhost", "127.0.0.1", "localhost"):
            http.get(upstream.url("/ok", host))
            seen.append(clock.now())
    assert seen == [0.0, 0.0, 1.0, 1.0]
    assert limiter.statistics("127.0.0.1").total_successful_leases == 2
    assert limiter.statistics("localhost").total_successful_leases == 2


def test_a_key_callable_receives_the_request(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.PartitionedLimiter.per_key(FixedWindow(5, 1.0), clock=clock)
    requests = []

    def by_path(request: httpx.Request) -> str:
        requests.append(request)
        return request.url.path

    with client(limiter, key=by_path) as http:
        http.get(upstream.url("/ok"))
        http.get(upstream.url("/busy/k?times=0"))
    assert [r.url.path for r in requests] == ["/ok", "/busy/k"]
    assert all(isinstance(r, httpx.Request) for r in requests)
    assert limiter.statistics("/ok").total_successful_leases == 1
    assert limiter.statistics("/busy/k").total_successful_leases == 1


async def test_an_async_key_callable(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.PartitionedLimiter.per_key(FixedWindow(5, 1.0), clock=clock)

    async def tenant(request: httpx.Request) -> str:
        await asyncio.sleep(0)
        return request.headers["x-tenant"]

    async with aclient(limiter, key=tenant) as http:
        await http.get(upstream.url("/ok"), headers={"x-tenant": "acme"})
    assert limiter.statistics("acme").total_successful_leases == 1


# ---- Retry-After ----
@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_seconds_pauses_then_retries(upstream: Upstream, clock: permits.ManualClock, status: int):
    limiter = permits.FixedWindowLimiter(100, 1.0, clock=clock)
    with client(limiter) as http:
        response = http.get(upstream.url(f"/busy/a?times=2&after=3&status={status}"))
    assert response.status_code == 200
    assert upstream.hits["/busy/a"] == 3
    assert clock.now() == 6.0
    assert limiter.statistics().total_successful_leases == 3  # a retry takes a permit


async def test_async_retry_after_http_date(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(100, 1.0, clock=clock)
    async with aclient(limiter) as http:
        response = await http.get(upstream.url("/busy/d?times=1&after=5&form=date&status=503"))
    assert response.status_code == 200
    assert upstream.hits["/busy/d"] == 2
    assert 0.0 < clock.now() <= 5.0  # the date has whole seconds


def test_retries_run_out_and_the_last_response_is_returned(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(100, 1.0, clock=clock)
    with client(limiter, max_retries=2) as http:
        response = http.get(upstream.url("/busy/x?times=10&after=1"))
    assert response.status_code == 429 and response.text == "busy"
    assert response.headers["Retry-After"] == "1"
    assert upstream.hits["/busy/x"] == 3
    assert clock.now() == 2.0


async def test_async_retries_run_out(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(100, 1.0, clock=clock)
    async with aclient(limiter, max_retries=1) as http:
        response = await http.get(upstream.url("/busy/x?times=10&after=1"))
    assert response.status_code == 429
    assert upstream.hits["/busy/x"] == 2


@pytest.mark.parametrize(
    ("options", "path"),
    [
        ({"retry_429": False}, "/busy/n?times=1&after=1"),
        ({"max_retries": 0}, "/busy/n?times=1&after=1"),
        ({}, "/busy/n?times=1&form=none"),  # a 429 without Retry-After is final
    ],
)
def test_no_retry(upstream: Upstream, clock: permits.ManualClock, options: dict[str, object], path: str):
    limiter = permits.FixedWindowLimiter(100, 1.0, clock=clock)
    with client(limiter, **options) as http:
        assert http.get(upstream.url(path)).status_code == 429
    assert upstream.hits["/busy/n"] == 1
    assert clock.now() == 0.0


def test_a_pause_holds_only_its_key(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.PartitionedLimiter.per_key(FixedWindow(100, 1.0), clock=clock)
    transport = RateLimitedTransport(limiter, max_retries=0)
    with httpx.Client(transport=transport, timeout=TIMEOUT) as http:
        assert http.get(upstream.url("/busy/p?after=30")).status_code == 429
        transport._pacer.pause("127.0.0.1", 30.0)  # as a retry would
        assert http.get(upstream.url("/ok", "localhost")).status_code == 200
        assert clock.now() == 0.0
        assert http.get(upstream.url("/ok")).status_code == 200
        assert clock.now() == 30.0


def test_a_body_from_a_generator_is_not_sent_twice(upstream: Upstream, clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(100, 1.0, clock=clock)

    def body():
        yield b"once"

    with client(limiter) as http:
        assert http.post(upstream.url("/busy/g?times=1&after=1"), content=body()).status_code == 429
        assert http.post(upstream.url("/busy/h?times=1&after=1"), content=b"twice").status_code == 200
    assert upstream.hits["/busy/g"] == 1
    assert upstream.hits["/busy/h"] == 2


# ---- leases: held until the response closes, released on errors ----
def test_a_streamed_response_holds_its_permit_until_closed(upstream: Upstream):
    limiter = permits.ConcurrencyLimiter(1)
    with client(limiter) as http:
        with http.stream("GET", upstream.url("/stream")) as response:
            assert next(response.iter_raw()) == b"first"
            assert limiter.available_permits() == 0
        assert limiter.available_permits() == 1
        assert http.get(upstream.url("/ok")).status_code == 200
    assert limiter.available_permits() == 1


async def test_async_streamed_response_holds_its_permit_until_closed(upstream: Upstream):
    limiter = permits.ConcurrencyLimiter(1)
    async with aclient(limiter) as http:
        async with http.stream("GET", upstream.url("/stream")) as response:
            async for chunk in response.aiter_raw():
                assert chunk == b"first"
                break
            assert limiter.available_permits() == 0
        assert limiter.available_permits() == 1


def test_a_read_response_gives_its_permit_back(upstream: Upstream):
    limiter = permits.ConcurrencyLimiter(1)
    with client(limiter) as http:
        for _ in range(3):
            assert http.get(upstream.url("/ok")).status_code == 200
            assert limiter.available_permits() == 1


def test_a_refused_connection_releases(clock: permits.ManualClock):
    limiter = permits.ConcurrencyLimiter(1)
    with client(limiter) as http, pytest.raises(httpx.ConnectError):
        http.get(refused_url())
    assert limiter.available_permits() == 1


async def test_async_refused_connection_releases():
    limiter = permits.ConcurrencyLimiter(1)
    async with aclient(limiter) as http:
        with pytest.raises(httpx.ConnectError):
            await http.get(refused_url())
    assert limiter.available_permits() == 1


async def test_cancelling_a_request_releases(upstream: Upstream):
    limiter = permits.ConcurrencyLimiter(1)
    async with aclient(limiter) as http:
        task = asyncio.create_task(http.get(upstream.url("/hang")))
        await asyncio.to_thread(upstream.arrived.wait)
        assert limiter.available_permits() == 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert limiter.available_permits() == 1


async def test_a_closed_limiter_raises(upstream: Upstream):
    limiter = permits.FixedWindowLimiter(1, 1.0)
    limiter.close()
    async with aclient(limiter) as http:
        with pytest.raises(permits.LimiterClosedError):
            await http.get(upstream.url("/ok"))
    assert upstream.hits["/ok"] == 0


# ---- construction ----
@pytest.mark.parametrize("cls", [RateLimitedTransport, AsyncRateLimitedTransport])
@pytest.mark.parametrize(
    ("args", "options", "error", "words"),
    [
        ((None,), {}, TypeError, "limiter"),
        ((permits.NoLimiter(),), {"key": "host"}, TypeError, "key"),
        ((permits.NoLimiter(),), {"transport": object()}, TypeError, "transport"),
        ((permits.NoLimiter(),), {"retry_429": 1}, TypeError, "retry_429"),
        ((permits.NoLimiter(),), {"max_retries": 1.5}, TypeError, "max_retries"),
        ((permits.NoLimiter(),), {"max_retries": -1}, ValueError, "max_retries"),
    ],
)
def test_bad_arguments_fail_when_built(cls, args, options, error, words):
    with pytest.raises(error, match=words):
        cls(*args, **options)


def test_the_sync_transport_refuses_an_async_key():
    async def key(request: httpx.Request) -> str:
        return "k"

    with pytest.raises(TypeError, match="key"):
        RateLimitedTransport(permits.NoLimiter(), key=key)


def test_the_transports_refuse_each_others_inner_transport():
    with pytest.raises(TypeError, match="transport"):
        RateLimitedTransport(permits.NoLimiter(), transport=httpx.AsyncHTTPTransport())
    with pytest.raises(TypeError, match="transport"):
        AsyncRateLimitedTransport(permits.NoLimiter(), transport=httpx.HTTPTransport())


def test_a_response_read_in_full_by_the_transport_releases_at_once():
    limiter = permits.ConcurrencyLimiter(1)
    inner = httpx.MockTransport(lambda request: httpx.Response(200, text="mock"))  # responses come back read
    with client(limiter, transport=inner) as http:
        for _ in range(3):
            assert http.get("https://example.com/").text == "mock"
    assert limiter.available_permits() == 1


async def test_async_a_response_read_in_full_by_the_transport_releases_at_once():
    limiter = permits.ConcurrencyLimiter(1)
    inner = httpx.MockTransport(lambda request: httpx.Response(200, text="mock"))
    async with aclient(limiter, transport=inner) as http:
        for _ in range(3):
            assert (await http.get("https://example.com/")).text == "mock"
    assert limiter.available_permits() == 1
