"""permits.asgi.RateLimitMiddleware under a real uvicorn server, driven by real httpx and
websockets clients; time on a ManualClock."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import websockets
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.websockets import WebSocket

import permits
from permits import keys
from permits.asgi import RateLimitMiddleware

from _integration import DOT_SEGMENT_PATHS, eventually, raw_status

CLIENT = keys.header("x-client")


def app_with(limiter: Any, **options: Any) -> Starlette:
    """A small app: /hello, /boom (raises), /stream (yields what the test feeds), /ws (echo)."""
    feed: asyncio.Queue[bytes | None] = asyncio.Queue()
    calls: list[str] = []

    async def hello(request: Request) -> Response:
        calls.append(request.headers.get("x-order", request.url.path))
        return PlainTextResponse("hello")

    async def boom(request: Request) -> Response:
        raise RuntimeError("boom")

    async def stream(request: Request) -> Response:
        async def chunks():  # type: ignore[no-untyped-def]
            while (chunk := await feed.get()) is not None:
                yield chunk

        return StreamingResponse(chunks())

    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        async for text in websocket.iter_text():
            await websocket.send_text(text)

    routes = [
        Route("/hello", hello),
        Route("/health", hello),
        Route("/health/{rest:path}", hello),
        Route("/healthz", hello),
        Route("/boom", boom),
        Route("/stream", stream),
        WebSocketRoute("/ws", echo),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(RateLimitMiddleware, limiter=limiter, **options)
    app.state.feed = feed
    app.state.calls = calls
    return app


def rate_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k in ("ratelimit", "ratelimit-policy", "retry-after")}


async def test_exact_200_429_sequence_per_key(serve_asgi, clock: permits.ManualClock) -> None:
    limiter = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(2, 10), clock=clock, name="per-client")
    async with serve_asgi(app_with(limiter, key=CLIENT)) as url, httpx.AsyncClient(base_url=url) as client:

        async def statuses(*who: str) -> list[int]:
            return [(await client.get("/hello", headers={"x-client": w})).status_code for w in who]

        assert await statuses("a", "a", "a", "b", "b", "b", "a") == [200, 200, 429, 200, 200, 429, 429]
        clock.advance_ns(10 * 10**9)
        assert await statuses("a", "b", "a", "a") == [200, 200, 200, 429]
    # A rejected request is counted once (no fast-path-then-slow-path double acquire).
    assert limiter.statistics(("x-client", "a")).total_failed_leases == 3
    assert limiter.statistics(("x-client", "a")).total_successful_leases == 4


async def test_retry_after_and_ratelimit_headers(serve_asgi, clock: permits.ManualClock) -> None:
    limiter = permits.TokenBucketLimiter(2, 1, 2.5, clock=clock, name="api")
    async with serve_asgi(app_with(limiter)) as url, httpx.AsyncClient(base_url=url) as client:
        first, second, third = [await client.get("/hello") for _ in range(3)]
        assert rate_headers(first) == {"ratelimit-policy": '"api";q=2;w=5', "ratelimit": '"api";r=1;t=3'}
        assert rate_headers(second) == {"ratelimit-policy": '"api";q=2;w=5', "ratelimit": '"api";r=0;t=3'}
        assert third.status_code == 429
        assert rate_headers(third) == {
            "ratelimit-policy": '"api";q=2;w=5',
            "ratelimit": '"api";r=0;t=3',
            "retry-after": "3",
        }
        clock.advance_ns(2 * 10**9)  # 0.5 s left of the period: Retry-After rounds up to 1
        assert rate_headers(await client.get("/hello"))["retry-after"] == "1"


async def test_the_headers_and_the_rejection_name_the_per_key_limit(serve_asgi, clock: permits.ManualClock) -> None:
    # A per-key limiter named by its template; a partitioned one by the partition that refused.
    template = permits.Partition.fixed_window(None, 1, 5.0, name="per-user")
    per_user = permits.PartitionedLimiter.per_key(template, clock=clock)
    tiers = permits.PartitionedLimiter(
        lambda key: permits.Partition.fixed_window(key, 1, 5.0, name="free-tier"), clock=clock, name="api"
    )
    for limiter, named in ((per_user, "per-user"), (tiers, "free-tier")):
        async with serve_asgi(app_with(limiter, key=CLIENT)) as url, httpx.AsyncClient(base_url=url) as client:
            first, second = [await client.get("/hello", headers={"x-client": "ann"}) for _ in range(2)]
        assert first.headers["ratelimit-policy"] == f'"{named}";q=1;w=5'
        assert second.status_code == 429
        assert second.headers["ratelimit"].startswith(f'"{named}";r=0')
        assert second.text == f"Too Many Requests (limiter: {named})"


async def test_headers_off_and_a_limiter_that_cannot_tell(serve_asgi, clock: permits.ManualClock) -> None:
    class Custom(permits.RateLimiter):
        def _acquire(self, permit_count: int) -> permits.Lease:
            return permits.Lease.denied(retry_after=0.2)

    off = permits.FixedWindowLimiter(1, 10, clock=clock)
    async with serve_asgi(app_with(off, headers=False)) as url, httpx.AsyncClient(base_url=url) as client:
        assert rate_headers(await client.get("/hello")) == {}
        assert rate_headers(await client.get("/hello")) == {"retry-after": "10"}
    async with serve_asgi(app_with(Custom())) as url, httpx.AsyncClient(base_url=url) as client:
        response = await client.get("/hello")
        assert (response.status_code, rate_headers(response)) == (429, {"retry-after": "1"})


async def test_status_code_and_on_rejected_sync_and_async(serve_asgi, clock: permits.ManualClock) -> None:
    seen: list[tuple[str, float | None]] = []

    def sync(request: Request, lease: permits.Lease) -> Response:
        seen.append((request.url.path, lease.retry_after))
        return JSONResponse({"error": "slow down"}, status_code=503)

    async def async_(request: Request, lease: permits.Lease) -> None:
        seen.append(("async", lease.retry_after))
        return None  # the default response

    for on_rejected, expected in (
        (sync, (503, '{"error":"slow down"}')),
        (async_, (418, "Too Many Requests (limiter: default)")),
    ):
        limiter = permits.FixedWindowLimiter(1, 4, clock=clock)
        app = app_with(limiter, status_code=418, on_rejected=on_rejected)
        async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
            await client.get("/hello")
            response = await client.get("/hello")
            assert (response.status_code, response.text) == expected
            assert response.headers["retry-after"] == "4"  # added to on_rejected's response too
    assert seen == [("/hello", 4.0), ("async", 4.0)]


async def test_exempt_paths_skip_the_limiter(serve_asgi, clock: permits.ManualClock) -> None:
    limiter = permits.FixedWindowLimiter(1, 10, clock=clock)
    async with serve_asgi(app_with(limiter, exempt=["/health/"])) as url, httpx.AsyncClient(base_url=url) as client:
        codes = [
            (await client.get(p)).status_code for p in ("/health", "/health/live", "/health", "/hello", "/healthz")
        ]
        assert codes == [200, 200, 200, 200, 429]
        # A dot segment could climb out of the prefix where the app or a proxy resolves it: limited.
        climbing = [(await client.get(p)).status_code for p in ("/health/%2e%2e/hello", "/health/%2e")]
        assert climbing == [429, 429]


@pytest.mark.parametrize("path", DOT_SEGMENT_PATHS)
async def test_a_dot_segment_in_any_spelling_is_never_exempt(path: str, serve_asgi, clock: permits.ManualClock) -> None:
    limiter = permits.FixedWindowLimiter(1, 10, clock=clock)
    async with serve_asgi(app_with(limiter, exempt=["/health"])) as url:
        loop = asyncio.get_running_loop()
        statuses = [
            await loop.run_in_executor(None, raw_status, url, p) for p in ("/hello", "/health", path, "/health/live")
        ]
    assert statuses == [200, 200, 429, 200]  # limited: not the exempt /health's way past the limit


async def test_queued_requests_are_granted_in_order(serve_asgi, clock: permits.ManualClock) -> None:
    limiter = permits.FixedWindowLimiter(1, 1, queue_limit=3, clock=clock)
    app = app_with(limiter, wait=True)
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/hello", headers={"x-order": "0"})).status_code == 200
        tasks = []
        for i in (1, 2, 3):
            tasks.append(asyncio.create_task(client.get("/hello", headers={"x-order": str(i)})))
            await eventually(lambda i=i: limiter.statistics().current_queued_count == i)
        full = await client.get("/hello", headers={"x-order": "4"})  # the queue is full: rejected now
        assert full.status_code == 429
        for n in (1, 2, 3):
            clock.advance_ns(10**9)
            await eventually(lambda n=n: len(app.state.calls) == n + 1)
        assert [t.status_code for t in await asyncio.gather(*tasks)] == [200, 200, 200]
    assert app.state.calls == ["0", "1", "2", "3"]


async def test_a_client_that_disconnects_while_queued_leaves_the_queue(serve_asgi, clock: permits.ManualClock) -> None:
    limiter = permits.FixedWindowLimiter(1, 1, queue_limit=2, clock=clock)
    inner = app_with(limiter, wait=True)
    sent: list[str] = []
    errors: list[BaseException] = []

    async def recording(scope: Any, receive: Any, send: Any) -> None:  # sees what the middleware does
        async def send_(message: Any) -> None:
            sent.append(message["type"])
            await send(message)

        try:
            await inner(scope, receive, send_)
        except BaseException as exc:
            errors.append(exc)
            raise

    async with serve_asgi(recording) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            await client.get("/hello")
        sent.clear()
        async with httpx.AsyncClient(base_url=url) as client:
            queued = asyncio.create_task(client.get("/hello"))
            await eventually(lambda: limiter.statistics().current_queued_count == 1)
        queued.cancel()  # closing the client closed the connection under it
        await eventually(lambda: limiter.statistics().current_queued_count == 0)
        clock.advance_ns(10**9)
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/hello")).status_code == 200  # the permit went to nobody else
    assert sent == ["http.response.start", "http.response.body"]  # the last request's; none for the one that left
    assert errors == []
    assert app_calls(inner) == ["/hello", "/hello"]


def app_calls(app: Starlette) -> list[str]:
    return list(app.state.calls)


async def test_a_streaming_response_holds_its_concurrency_permit_until_sent(
    serve_asgi, clock: permits.ManualClock
) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    app = app_with(limiter)
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        async with client.stream("GET", "/stream") as streaming:
            assert streaming.headers["ratelimit"] == '"default";r=0'
            assert streaming.headers["ratelimit-policy"] == '"default";q=1;qu="concurrent-requests"'
            app.state.feed.put_nowait(b"one")
            chunks = streaming.aiter_bytes()
            assert await anext(chunks) == b"one"
            assert limiter.available_permits() == 0
            assert (await client.get("/hello")).status_code == 429
            app.state.feed.put_nowait(None)
            assert [c async for c in chunks] == []
        await eventually(lambda: limiter.available_permits() == 1)
        assert (await client.get("/hello")).status_code == 200
        assert limiter.available_permits() == 1


async def test_a_client_abort_mid_stream_releases_the_permit(serve_asgi, clock: permits.ManualClock) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    app = app_with(limiter)
    async with serve_asgi(app) as url:
        async with httpx.AsyncClient(base_url=url) as client, client.stream("GET", "/stream") as streaming:
            app.state.feed.put_nowait(b"one")
            assert await anext(streaming.aiter_bytes()) == b"one"
            assert limiter.available_permits() == 0
        # The client hung up mid-stream; the server's next write fails and the app ends.
        app.state.feed.put_nowait(b"two")
        await eventually(lambda: limiter.available_permits() == 1)


async def test_a_handler_exception_gives_a_500_and_the_permit_back(serve_asgi, clock: permits.ManualClock) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    async with serve_asgi(app_with(limiter)) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/boom")).status_code == 500
        assert limiter.available_permits() == 1
        assert (await client.get("/hello")).status_code == 200


async def test_a_key_function_that_raises_is_the_apps_500_and_takes_nothing(
    serve_asgi, clock: permits.ManualClock
) -> None:
    limiter = permits.PartitionedLimiter.per_key(permits.specs.Concurrency(1), clock=clock)

    def bad_key(request: Request) -> str:
        if request.headers.get("x-bad"):
            raise ValueError("no key")
        return "k"

    async with serve_asgi(app_with(limiter, key=bad_key)) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/hello", headers={"x-bad": "1"})).status_code == 500
        assert limiter.statistics() == permits.Statistics(0, 0, 0, 0)
        assert (await client.get("/hello")).status_code == 200
        assert limiter.available_permits("k") == 1


async def test_async_key_functions(serve_asgi, clock: permits.ManualClock) -> None:
    limiter = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(1, 10), clock=clock)

    async def key(request: Request) -> str:
        await asyncio.sleep(0)
        return request.headers["x-client"]

    async with serve_asgi(app_with(limiter, key=key)) as url, httpx.AsyncClient(base_url=url) as client:
        codes = [(await client.get("/hello", headers={"x-client": c})).status_code for c in "aab"]
        assert codes == [200, 429, 200]


async def test_a_websocket_holds_its_permit_until_it_closes(serve_asgi, clock: permits.ManualClock) -> None:
    limiter = permits.ConcurrencyLimiter(1, clock=clock)
    async with serve_asgi(app_with(limiter)) as url:
        ws_url = url.replace("http", "ws") + "/ws"
        async with websockets.connect(ws_url) as ws:
            await ws.send("ping")
            assert await ws.recv() == "ping"
            assert limiter.available_permits() == 0
            # A second connection is denied with an HTTP 429 (uvicorn has the denial extension).
            with pytest.raises(websockets.InvalidStatus) as denied:
                await websockets.connect(ws_url)
            assert denied.value.response.status_code == 429
            assert denied.value.response.headers["ratelimit"] == '"default";r=0'
        await eventually(lambda: limiter.available_permits() == 1)


async def test_a_websocket_rejected_without_the_denial_extension_is_closed_1013(
    serve_asgi, clock: permits.ManualClock
) -> None:
    limiter = permits.FixedWindowLimiter(1, 10, clock=clock)
    inner = app_with(limiter)
    closes: list[Any] = []

    async def without_extension(scope: Any, receive: Any, send: Any) -> None:
        scope = {**scope, "extensions": {}}

        async def send_(message: Any) -> None:
            if message["type"] == "websocket.close":
                closes.append((message["code"], message.get("reason")))
            await send(message)

        await inner(scope, receive, send_)

    async with serve_asgi(without_extension) as url:
        ws_url = url.replace("http", "ws") + "/ws"
        async with websockets.connect(ws_url) as ws:
            await ws.send("x")
            assert await ws.recv() == "x"
        with pytest.raises(websockets.InvalidStatus):  # a close before accept: the server answers 403
            await websockets.connect(ws_url)
    assert closes == [(1013, "rate limited")]


async def test_a_plain_limiter_ignores_the_key(serve_asgi, clock: permits.ManualClock) -> None:
    called: list[object] = []
    limiter = permits.FixedWindowLimiter(1, 10, clock=clock)
    app = app_with(limiter, key=lambda request: called.append(request))
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert [(await client.get("/hello")).status_code for _ in "ab"] == [200, 429]
    assert called == []


async def test_lifespan_and_other_scopes_pass_through(clock: permits.ManualClock) -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    limiter = permits.FixedWindowLimiter(1, 10, clock=clock)
    middleware = RateLimitMiddleware(app, limiter)
    for _ in range(3):
        await middleware({"type": "lifespan"}, None, None)  # type: ignore[arg-type]
    assert seen == ["lifespan"] * 3
    assert limiter.statistics().total_successful_leases == 0


async def test_per_ip_keys_behind_a_trusted_proxy(serve_asgi, clock: permits.ManualClock) -> None:
    behind_proxy = keys.client_ip(trusted_proxies=["127.0.0.0/8"])  # reads X-Forwarded-For only
    behind_rfc7239_proxy = keys.client_ip(trusted_proxies=["127.0.0.0/8"], header="forwarded")
    direct = keys.client_ip()  # the peer only: forwarding headers are anyone's words
    for key, expected in (
        (behind_proxy, [200, 200, 200, 429, 429]),  # Forwarded ignored: the peer's key
        (behind_rfc7239_proxy, [200, 429, 200, 200, 429]),  # X-Forwarded-For ignored
        (direct, [200, 429, 429, 429, 429]),
    ):
        limiter = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(1, 10), clock=clock)
        app = app_with(limiter, key=key)
        async with serve_asgi(app, proxy_headers=False) as url, httpx.AsyncClient(base_url=url) as client:
            sent = [
                {"X-Forwarded-For": "203.0.113.1"},
                {"X-Forwarded-For": "203.0.113.2"},
                {"Forwarded": "for=203.0.113.2"},
                {"Forwarded": 'for="[2001:db8::1]:80"'},
                {"X-Forwarded-For": "not-an-address"},  # malformed: the peer (127.0.0.1) is the key
            ]
            assert [(await client.get("/hello", headers=h)).status_code for h in sent] == expected


async def test_a_chain_reports_its_member_with_fewest_left(serve_asgi, clock: permits.ManualClock) -> None:
    per_second = permits.FixedWindowLimiter(3, 1, clock=clock, name="second")
    per_minute = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(5, 60), clock=clock, name="minute")
    limiter = permits.chain(per_second, per_minute)
    async with serve_asgi(app_with(limiter, key=CLIENT)) as url, httpx.AsyncClient(base_url=url) as client:
        seen = []
        for _ in range(4):
            response = await client.get("/hello", headers={"x-client": "a"})
            seen.append((response.status_code, response.headers["ratelimit"]))
        clock.advance_ns(10**9)
        response = await client.get("/hello", headers={"x-client": "a"})
        seen.append((response.status_code, response.headers["ratelimit"]))
    assert seen == [
        (200, '"second";r=2;t=1'),
        (200, '"second";r=1;t=1'),
        (200, '"second";r=0;t=1'),
        (429, '"second";r=0;t=1'),
        (200, '"minute";r=1;t=60'),
    ]


async def test_a_queued_request_keeps_its_body(serve_asgi, clock: permits.ManualClock) -> None:
    async def echo(request: Request) -> Response:
        return Response(await request.body())

    app = Starlette(routes=[Route("/echo", echo, methods=["POST"])])
    limiter = permits.FixedWindowLimiter(1, 1, queue_limit=1, clock=clock)
    app.add_middleware(RateLimitMiddleware, limiter=limiter, wait=True)
    body = b"x" * 300_000  # several receive() messages, read by the middleware while queued
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.post("/echo", content=b"first")).content == b"first"
        queued = asyncio.create_task(client.post("/echo", content=body))
        await eventually(lambda: limiter.statistics().current_queued_count == 1)
        clock.advance_ns(10**9)
        assert (await queued).content == body


async def test_exempt_paths_are_those_the_app_routes_on_under_a_root_path(
    serve_asgi, clock: permits.ManualClock
) -> None:
    limiter = permits.FixedWindowLimiter(1, 60, clock=clock)
    # uvicorn --root-path /api: the scope's path carries the prefix, the app routes without it.
    async with serve_asgi(app_with(limiter, exempt=["/health"]), root_path="/api") as url:
        async with httpx.AsyncClient(base_url=url) as client:
            assert [(await client.get("/health")).status_code for _ in range(3)] == [200, 200, 200]
            assert [(await client.get("/hello")).status_code for _ in range(2)] == [200, 429]


async def test_exempt_paths_of_a_mounted_sub_app_are_relative_to_its_mount(
    serve_asgi, clock: permits.ManualClock
) -> None:
    limiter = permits.FixedWindowLimiter(1, 60, clock=clock)
    outer = Starlette(routes=[Mount("/api", app=app_with(limiter, exempt=["/health"]))])
    async with serve_asgi(outer) as url, httpx.AsyncClient(base_url=url) as client:
        assert [(await client.get("/api/health/live")).status_code for _ in range(3)] == [200, 200, 200]
        assert [(await client.get("/api/hello")).status_code for _ in range(2)] == [200, 429]
        assert (await client.get("/api/healthz")).status_code == 429


async def test_a_background_task_holds_its_concurrency_permit_until_it_finishes(serve_asgi) -> None:
    limiter = permits.ConcurrencyLimiter(1)
    finish = asyncio.Event()

    async def slow_task() -> None:
        await finish.wait()

    async def with_task(request: Request) -> Response:
        return PlainTextResponse("sent", background=BackgroundTask(slow_task))

    app = Starlette(routes=[Route("/task", with_task)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/task")).text == "sent"
        assert limiter.available_permits() == 0  # the response is sent, the task still runs
        finish.set()
        await eventually(lambda: limiter.available_permits() == 1)
