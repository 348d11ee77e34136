"""permits.wsgi.RateLimitMiddleware under real WSGI servers (werkzeug's threaded server, waitress)
on loopback, driven by httpx; time on a ManualClock."""

from __future__ import annotations

import json
import queue
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

import permits
from permits import keys
from permits.wsgi import RateLimitMiddleware

from _integration import DOT_SEGMENT_PATHS, raw_request, raw_status, require, serve_wsgi, until

SERVERS = ["werkzeug", "waitress"]
CLIENT = keys.header("x-client")


class App:
    """A small WSGI app: /hello, /boom (raises), /boom-late (raises after its first chunk),
    /silent (never calls start_response), /stream (yields what the test feeds), /echo (the body)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.feed: queue.Queue[bytes | None] = queue.Queue()
        self.closed = threading.Event()  # the server closed /stream's iterable

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        path = environ["PATH_INFO"]
        if path == "/boom":
            raise RuntimeError("boom")
        if path == "/silent":
            return []
        if path in ("/stream", "/boom-late"):
            start_response("200 OK", [("Content-Type", "text/plain")])
            return self._stream() if path == "/stream" else self._boom_late()
        if path == "/echo":
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            start_response("200 OK", [("Content-Type", "application/octet-stream")])
            return [body]
        self.calls.append(environ.get("HTTP_X_ORDER", path))
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
        return [b"hello"]

    def _stream(self) -> Iterator[bytes]:
        try:
            while (chunk := self.feed.get(timeout=20)) is not None:
                yield chunk
        finally:
            self.closed.set()

    def _boom_late(self) -> Iterator[bytes]:
        yield b"first"
        raise RuntimeError("boom, late")


def rate_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k in ("ratelimit", "ratelimit-policy", "retry-after")}


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_exact_200_429_sequence_per_key(server: str, clock: permits.ManualClock) -> None:
    limiter = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(2, 10), clock=clock, name="per-client")
    app = RateLimitMiddleware(App(), limiter, key=CLIENT)
    with serve_wsgi(app, server) as url, httpx.Client(base_url=url) as client:

        def statuses(*who: str) -> list[int]:
            return [client.get("/hello", headers={"x-client": w}).status_code for w in who]

        assert statuses("a", "a", "a", "b", "b", "b", "a") == [200, 200, 429, 200, 200, 429, 429]
        clock.advance_ns(10 * 10**9)
        assert statuses("a", "b", "a", "a") == [200, 200, 200, 429]
    # A rejected request is counted once.
    assert limiter.statistics(("x-client", "a")).total_failed_leases == 3
    assert limiter.statistics(("x-client", "a")).total_successful_leases == 4


def test_retry_after_and_ratelimit_headers(server: str, clock: permits.ManualClock) -> None:
    limiter = permits.TokenBucketLimiter(2, 1, 2.5, clock=clock, name="api")
    with serve_wsgi(RateLimitMiddleware(App(), limiter), server) as url, httpx.Client(base_url=url) as client:
        first, second, third = [client.get("/hello") for _ in range(3)]
        assert rate_headers(first) == {"ratelimit-policy": '"api";q=2;w=5', "ratelimit": '"api";r=1;t=3'}
        assert rate_headers(second) == {"ratelimit-policy": '"api";q=2;w=5', "ratelimit": '"api";r=0;t=3'}
        assert (third.status_code, third.text) == (429, "Too Many Requests (limiter: api)")
        assert rate_headers(third) == {
            "ratelimit-policy": '"api";q=2;w=5',
            "ratelimit": '"api";r=0;t=3',
            "retry-after": "3",
        }
        clock.advance_ns(2 * 10**9)  # 0.5 s left of the period: Retry-After rounds up to 1
        assert rate_headers(client.get("/hello"))["retry-after"] == "1"


def test_headers_off_and_a_limiter_that_cannot_tell(clock: permits.ManualClock) -> None:
    class Custom(permits.RateLimiter):
        def _acquire(self, permit_count: int) -> permits.Lease:
            return permits.Lease.denied(retry_after=0.2)

    off = permits.FixedWindowLimiter(1, 10, clock=clock)
    with serve_wsgi(RateLimitMiddleware(App(), off, headers=False)) as url, httpx.Client(base_url=url) as client:
        assert rate_headers(client.get("/hello")) == {}
        assert rate_headers(client.get("/hello")) == {"retry-after": "10"}
    with serve_wsgi(RateLimitMiddleware(App(), Custom())) as url, httpx.Client(base_url=url) as client:
        response = client.get("/hello")
        assert (response.status_code, rate_headers(response)) == (429, {"retry-after": "1"})


def test_an_apps_own_headers_win(clock: permits.ManualClock) -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("RateLimit", "mine")])
        return [b"x"]

    limiter = permits.FixedWindowLimiter(2, 10, clock=clock)
    with serve_wsgi(RateLimitMiddleware(app, limiter)) as url, httpx.Client(base_url=url) as client:
        response = client.get("/")
    assert response.headers.get_list("ratelimit") == ["mine"]
    assert response.headers["ratelimit-policy"] == '"default";q=2;w=10'


def test_exempt_paths_skip_the_limiter(clock: permits.ManualClock) -> None:
    limiter = permits.FixedWindowLimiter(1, 10, clock=clock)
    app = RateLimitMiddleware(App(), limiter, exempt=["/health/"])
    with serve_wsgi(app) as url, httpx.Client(base_url=url) as client:
        codes = [client.get(p).status_code for p in ("/health", "/health/live", "/health", "/hello", "/healthz")]
        # A dot segment could climb out of the prefix where the app or a proxy resolves it: limited.
        climbing = [client.get(p).status_code for p in ("/health/%2e%2e/hello", "/health/%2e", "/health/live")]
    assert codes == [200, 200, 200, 200, 429]
    assert climbing == [429, 429, 200]


@pytest.mark.parametrize("path", DOT_SEGMENT_PATHS)
def test_a_dot_segment_in_any_spelling_is_never_exempt(path: str, server: str, clock: permits.ManualClock) -> None:
    limiter = permits.FixedWindowLimiter(1, 10, clock=clock)
    with serve_wsgi(RateLimitMiddleware(App(), limiter, exempt=["/health"]), server) as url:
        statuses = [raw_status(url, p) for p in ("/hello", "/health", path, "/health/live")]
    assert statuses == [200, 200, 429, 200]  # limited: not the exempt /health's way past the limit


def test_exempt_paths_are_relative_to_the_script_name(clock: permits.ManualClock) -> None:
    dispatcher = require("werkzeug.middleware.dispatcher", "werkzeug")
    limiter = permits.FixedWindowLimiter(1, 60, clock=clock)
    mounted = dispatcher.DispatcherMiddleware(App(), {"/api": RateLimitMiddleware(App(), limiter, exempt=["/health"])})
    with serve_wsgi(mounted) as url, httpx.Client(base_url=url) as client:
        assert [client.get("/api/health/live").status_code for _ in range(3)] == [200, 200, 200]
        assert [client.get("/api/hello").status_code for _ in range(2)] == [200, 429]
        assert client.get("/api/healthz").status_code == 429
        assert client.get("/api").status_code == 429  # (PATH_INFO empty: the mount's root, "/")


def test_on_rejected_returns_a_wsgi_app_and_status_code(server: str, clock: permits.ManualClock) -> None:
    seen: list[tuple[str, float | None]] = []

    def too_many(environ: dict[str, Any], lease: permits.Lease) -> Any:
        seen.append((environ["PATH_INFO"], lease.retry_after))
        body = json.dumps({"error": "slow down", "limiter": lease.metadata["limiter"]}).encode()

        def answer(environ: dict[str, Any], start_response: Any) -> list[bytes]:
            start_response("503 Service Unavailable", [("Content-Type", "application/json"), ("Retry-After", "99")])
            return [body]

        return answer

    def default(environ: dict[str, Any], lease: permits.Lease) -> None:
        seen.append(("default", lease.retry_after))

    for on_rejected, status_code, expected in (
        (too_many, 429, (503, {"error": "slow down", "limiter": "g"}, "99")),
        (default, 418, (418, "Too Many Requests (limiter: g)", "4")),
    ):
        limiter = permits.FixedWindowLimiter(1, 4, clock=clock, name="g")
        app = RateLimitMiddleware(App(), limiter, status_code=status_code, on_rejected=on_rejected)
        with serve_wsgi(app, server) as url, httpx.Client(base_url=url) as client:
            client.get("/hello")
            response = client.get("/hello")
        body = response.json() if response.status_code == 503 else response.text
        assert (response.status_code, body, response.headers["retry-after"]) == expected
        assert response.headers["ratelimit"] == '"g";r=0;t=4'  # added to on_rejected's response too
    assert seen == [("/hello", 4.0), ("default", 4.0)]


def _returns_a_dict(environ: Any, lease: permits.Lease) -> Any:
    return {"error": "slow down"}


def _raises(environ: Any, lease: permits.Lease) -> Any:
    raise RuntimeError("broken callback")


def _app_that_raises(environ: Any, lease: permits.Lease) -> Any:
    def answer(environ: Any, start_response: Any) -> Any:
        raise RuntimeError("broken response")

    return answer


def _app_that_raises_after_starting(environ: Any, lease: permits.Lease) -> Any:
    def answer(environ: Any, start_response: Any) -> Any:
        start_response("200 OK", [("X-Half", "done")])
        raise RuntimeError("broken response, half sent")

    return answer


@pytest.mark.parametrize("broken", [_returns_a_dict, _raises, _app_that_raises, _app_that_raises_after_starting])
def test_a_broken_on_rejected_gives_the_default_rejection_logged(
    broken: Any, server: str, clock: permits.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = permits.FixedWindowLimiter(1, 60, clock=clock)
    with serve_wsgi(RateLimitMiddleware(App(), limiter, on_rejected=broken), server) as url:
        with httpx.Client(base_url=url) as client:
            client.get("/hello")
            rejected = client.get("/hello")
    assert (rejected.status_code, rejected.text) == (429, "Too Many Requests (limiter: default)")
    assert rejected.headers["retry-after"] == "60"
    assert rejected.headers["ratelimit"] == '"default";r=0;t=60'
    assert "x-half" not in rejected.headers
    logged = [r for r in caplog.records if r.name == "permits" and r.levelname in ("ERROR", "WARNING")]
    assert len(logged) == 1


def test_a_streaming_response_holds_its_concurrency_permit_until_the_server_closes_it(
    server: str, clock: permits.ManualClock
) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    app = App()
    with serve_wsgi(RateLimitMiddleware(app, limiter), server) as url, httpx.Client(base_url=url) as client:
        app.feed.put(b"one")  # (a WSGI server sends the headers with the first chunk)
        with client.stream("GET", "/stream") as streaming:
            assert streaming.headers["ratelimit"] == '"default";r=0'
            assert streaming.headers["ratelimit-policy"] == '"default";q=1;qu="concurrent-requests"'
            chunks = streaming.iter_raw()
            assert next(chunks) == b"one"
            assert limiter.available_permits() == 0
            assert client.get("/hello").status_code == 429
            app.feed.put(None)
            assert list(chunks) == []
        until(app.closed.is_set)
        until(lambda: limiter.available_permits() == 1)
        assert client.get("/hello").status_code == 200
        until(lambda: limiter.available_permits() == 1)  # (the server closes the response after sending it)


def test_a_client_that_leaves_mid_stream_gives_the_permit_back(server: str, clock: permits.ManualClock) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    app = App()
    with serve_wsgi(RateLimitMiddleware(app, limiter), server) as url:
        app.feed.put(b"one")
        with httpx.Client(base_url=url) as client, client.stream("GET", "/stream") as streaming:
            assert next(streaming.iter_raw()) == b"one"
            assert limiter.available_permits() == 0
        # The client hung up mid-stream: a write fails (a later one: the first may reach the
        # socket's buffer), the server closes the iterable and the permit comes back.
        for _ in range(200):
            if limiter.available_permits() == 1:
                break
            app.feed.put(b"more")
            # (drained, or the stream ended on the write before: nothing drains the feed then)
            until(lambda: app.feed.empty() or limiter.available_permits() == 1)
        until(lambda: limiter.available_permits() == 1)
        assert app.closed.is_set()


@pytest.mark.parametrize("path", ["/boom", "/boom-late", "/silent"])
def test_an_app_that_fails_gives_its_permit_back(path: str, server: str, clock: permits.ManualClock) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    with serve_wsgi(RateLimitMiddleware(App(), limiter), server) as url, httpx.Client(base_url=url) as client:
        try:
            failed: int | None = client.get(path).status_code
        except httpx.RemoteProtocolError:  # a response cut after its first chunk
            failed = None
        assert failed in ({200, None} if path == "/boom-late" else {500})  # (200: its status was sent)
        until(lambda: limiter.available_permits() == 1)
        assert client.get("/hello").status_code == 200


def test_a_key_function_that_raises_takes_nothing(clock: permits.ManualClock) -> None:
    limiter = permits.PartitionedLimiter.per_key(permits.specs.Concurrency(1), clock=clock)

    def bad_key(environ: dict[str, Any]) -> str:
        if environ.get("HTTP_X_BAD"):
            raise ValueError("no key")
        return "k"

    app = RateLimitMiddleware(App(), limiter, key=bad_key)
    with serve_wsgi(app) as url, httpx.Client(base_url=url) as client:
        assert client.get("/hello", headers={"x-bad": "1"}).status_code == 500
        assert limiter.statistics() == permits.Statistics(0, 0, 0, 0)
        assert client.get("/hello").status_code == 200
        until(lambda: limiter.available_permits("k") == 1)


def test_a_plain_limiter_ignores_the_key(clock: permits.ManualClock) -> None:
    called: list[object] = []
    limiter = permits.FixedWindowLimiter(1, 10, clock=clock)
    app = RateLimitMiddleware(App(), limiter, key=called.append)
    with serve_wsgi(app) as url, httpx.Client(base_url=url) as client:
        assert [client.get("/hello").status_code for _ in "ab"] == [200, 429]
    assert called == []


def test_a_chain_reports_its_member_with_fewest_left(clock: permits.ManualClock) -> None:
    per_second = permits.FixedWindowLimiter(3, 1, clock=clock, name="second")
    per_minute = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(5, 60), clock=clock, name="minute")
    app = RateLimitMiddleware(App(), permits.chain(per_second, per_minute), key=CLIENT)
    seen = []
    with serve_wsgi(app) as url, httpx.Client(base_url=url, headers={"x-client": "a"}) as client:
        for _ in range(4):
            response = client.get("/hello")
            seen.append((response.status_code, response.headers["ratelimit"]))
        clock.advance_ns(10**9)
        response = client.get("/hello")
        seen.append((response.status_code, response.headers["ratelimit"]))
    assert seen == [
        (200, '"second";r=2;t=1'),
        (200, '"second";r=1;t=1'),
        (200, '"second";r=0;t=1'),
        (429, '"second";r=0;t=1'),
        (200, '"minute";r=1;t=60'),
    ]


def test_per_ip_keys_behind_a_trusted_proxy(server: str, clock: permits.ManualClock) -> None:
    behind_proxy = keys.client_ip(trusted_proxies=["127.0.0.0/8"])  # reads X-Forwarded-For only
    behind_rfc7239_proxy = keys.client_ip(trusted_proxies=["127.0.0.0/8"], header="forwarded")
    direct = keys.client_ip()  # the peer only: forwarding headers are anyone's words
    sent = [
        {"X-Forwarded-For": "203.0.113.1"},
        {"X-Forwarded-For": "203.0.113.2"},
        {"Forwarded": "for=203.0.113.2"},
        {"Forwarded": 'for="[2001:db8::1]:80"'},
        {"X-Forwarded-For": "not-an-address"},  # malformed: the peer (127.0.0.1) is the key
    ]
    for key, expected in (
        (behind_proxy, [200, 200, 200, 429, 429]),  # Forwarded ignored: the peer's key
        (behind_rfc7239_proxy, [200, 429, 200, 200, 429]),  # X-Forwarded-For ignored
        (direct, [200, 429, 429, 429, 429]),
    ):
        limiter = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(1, 10), clock=clock)
        with serve_wsgi(RateLimitMiddleware(App(), limiter, key=key), server) as url:
            with httpx.Client(base_url=url) as client:
                assert [client.get("/hello", headers=h).status_code for h in sent] == expected


# ---- wait=True: the request's thread waits ----
def test_a_queued_request_is_served_when_a_permit_comes_back(server: str, clock: permits.ManualClock) -> None:
    limiter = permits.ConcurrencyLimiter(1, queue_limit=2, clock=clock)
    app = App()
    middleware = RateLimitMiddleware(app, limiter, wait=True, timeout=30)
    with serve_wsgi(middleware, server) as url, httpx.Client(base_url=url) as client:
        held = limiter.acquire()
        with ThreadPoolExecutor(3) as pool:
            queued = [pool.submit(client.get, "/hello", headers={"x-order": str(i)}) for i in (1, 2)]
            until(lambda: limiter.statistics().current_queued_count == 2)
            assert client.get("/hello").status_code == 429  # the queue is full: rejected at once
            assert app.calls == []
            held.release()
            assert [q.result(timeout=20).status_code for q in queued] == [200, 200]
    assert sorted(app.calls) == ["1", "2"]
    until(lambda: limiter.available_permits() == 1)


def test_a_queued_request_that_times_out_is_rejected(server: str, clock: permits.ManualClock) -> None:
    limiter = permits.FixedWindowLimiter(1, 60, queue_limit=1, clock=clock, name="w")
    app = App()
    with serve_wsgi(RateLimitMiddleware(app, limiter, wait=True, timeout=5), server) as url:
        with httpx.Client(base_url=url, timeout=20) as client, ThreadPoolExecutor(1) as pool:
            assert client.get("/hello").status_code == 200
            queued = pool.submit(client.get, "/hello")
            until(lambda: limiter.statistics().current_queued_count == 1)
            clock.advance_ns(4 * 10**9)
            with pytest.raises(TimeoutError):
                queued.result(timeout=0.2)  # (4 s of 5 on the limiter's clock: still waiting)
            clock.advance_ns(10**9)
            timed_out = queued.result(timeout=20)
    assert (timed_out.status_code, timed_out.text) == (429, "Too Many Requests (limiter: w)")
    assert timed_out.headers["ratelimit"] == '"w";r=0;t=60'
    assert app.calls == ["/hello"]
    assert limiter.statistics().current_queued_count == 0


def test_a_waiting_request_reads_none_of_its_body(server: str, clock: permits.ManualClock) -> None:
    events: list[str] = []
    limiter = permits.ConcurrencyLimiter(1, queue_limit=1, clock=clock)
    inner = RateLimitMiddleware(App(), limiter, wait=True)

    class Recorded:
        def __init__(self, stream: Any) -> None:
            self.stream = stream

        def read(self, *size: int) -> bytes:
            events.append("read")
            return bytes(self.stream.read(*size))

    def recording(environ: dict[str, Any], start_response: Any) -> Any:
        environ["wsgi.input"] = Recorded(environ["wsgi.input"])
        return inner(environ, start_response)

    body = b"x" * 300_000
    with serve_wsgi(recording, server) as url, httpx.Client(base_url=url) as client, ThreadPoolExecutor(1) as pool:
        held = limiter.acquire()
        queued = pool.submit(client.post, "/echo", content=body)
        until(lambda: limiter.statistics().current_queued_count == 1)
        assert events == []
        events.append("granted")
        held.release()
        assert queued.result(timeout=20).content == body
    assert events[0] == "granted" and events[1:] and set(events[1:]) == {"read"}


@pytest.mark.timeout(30)
def test_a_rejection_answers_a_slow_upload_before_its_body(clock: permits.ManualClock) -> None:
    # werkzeug calls the app once the headers are in (waitress buffers whole bodies first): the
    # 429 must not wait for a body the client sends slowly, or never.
    app = App()
    limiter = permits.FixedWindowLimiter(1, 60, clock=clock)
    assert limiter.acquire()
    with serve_wsgi(RateLimitMiddleware(app, limiter), "werkzeug") as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n" + b"x" * 100)
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = sock.recv(4096)
                assert chunk, f"closed before a response: {answer!r}"
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 429 ")
    assert app.calls == []
    assert limiter.statistics().total_failed_leases == 1


@pytest.mark.timeout(30)
@pytest.mark.parametrize("body", [b"", b"x" * 1000], ids=["get", "post with its body unread"])
def test_a_queued_request_whose_client_leaves_leaves_the_queue(body: bytes, clock: permits.ManualClock) -> None:
    # werkzeug's server (as gunicorn's) exposes the connection's socket: the wait watches it.
    app = App()
    limiter = permits.ConcurrencyLimiter(1, queue_limit=2, clock=clock)
    with serve_wsgi(RateLimitMiddleware(app, limiter, wait=True), "werkzeug") as url:
        held = limiter.acquire()
        staying = raw_request(url, "/hello")
        until(lambda: limiter.statistics().current_queued_count == 1)
        leaving = raw_request(url, "/echo" if body else "/hello", body)
        until(lambda: limiter.statistics().current_queued_count == 2)
        leaving.close()  # (the request is queued behind `staying`: its own close is what ends it)
        until(lambda: limiter.statistics().current_queued_count == 1)
        held.release()  # to the client that stayed
        answer = staying.recv(4096)
        staying.close()
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert app.calls == ["/hello"]
    until(lambda: limiter.available_permits() == 1)
    assert limiter.statistics().total_successful_leases == 2  # the test's and the one that stayed


@pytest.mark.timeout(30)
def test_a_client_that_leaves_as_its_permit_comes_gives_it_back(clock: permits.ManualClock) -> None:
    limiter = permits.TokenBucketLimiter(1, 1, 60, queue_limit=1, clock=clock)
    app = App()
    with serve_wsgi(RateLimitMiddleware(app, limiter, wait=True), "werkzeug") as url:
        assert limiter.acquire()
        leaving = raw_request(url, "/hello")
        until(lambda: limiter.statistics().current_queued_count == 1)
        leaving.close()
        until(lambda: limiter.statistics().current_queued_count == 0)
        clock.advance(60)  # the token the departed request would have had stays in the bucket
        assert limiter.available_permits() == 1
    assert app.calls == []
