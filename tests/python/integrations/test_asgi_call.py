"""The ASGI middleware's request as the extension's awaitable (``_core.AsgiCall``): it behaves as the
coroutine an ``async def __call__`` would return. Servers and libraries see a coroutine function and
a coroutine; nothing is acquired until it is awaited; every way a request can end (returned, raised,
cancelled, closed, abandoned mid-flight) gives its lease back; whatever the application returns is
awaited as ``await`` would. Time on a ManualClock; the application called in process."""

from __future__ import annotations

import asyncio
import gc
import inspect
import sys
from collections.abc import Generator
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from test_asgi_gate import call, scope_of

import permits
from permits import specs
from permits.asgi import RateLimitMiddleware

CLIENT = "203.0.113.7"


def one_at_a_time() -> Any:
    return permits.PartitionedLimiter.per_key(specs.Concurrency(1), clock=permits.ManualClock())


async def receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def discard(message: dict[str, Any]) -> None:
    pass


class Pending:
    """An application that waits for its caller to let it finish, then answers."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.go = asyncio.Event()
        self.cleaned_up = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.entered.set()
        try:
            await self.go.wait()
        finally:
            self.cleaned_up = True
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})


def test_the_middleware_is_a_coroutine_function_and_its_call_a_coroutine() -> None:
    app = RateLimitMiddleware(Pending(), one_at_a_time())
    assert app._enter is not app._call  # (the extension serves its requests)
    assert asyncio.iscoroutinefunction(app.__call__)
    if sys.version_info >= (3, 12):
        assert inspect.iscoroutinefunction(app.__call__)
    request = app(scope_of(), receive, discard)
    assert asyncio.iscoroutine(request)
    assert inspect.isawaitable(request)
    request.close()


def test_uvicorn_serves_the_bare_middleware_as_asgi3() -> None:
    config = uvicorn.Config(RateLimitMiddleware(Pending(), one_at_a_time()), lifespan="off")
    config.load()
    assert config.interface == "asgi3"


def test_nothing_is_acquired_until_it_is_awaited() -> None:
    limiter = one_at_a_time()
    app = RateLimitMiddleware(Pending(), limiter)
    request = app(scope_of(), receive, discard)
    assert limiter.available_permits(CLIENT) == 1
    del request
    gc.collect()
    assert limiter.available_permits(CLIENT) == 1
    thrown = app(scope_of(), receive, discard)
    with pytest.raises(KeyError, match="thrown"):
        thrown.throw(KeyError("thrown"))
    with pytest.raises(RuntimeError, match="cannot reuse"):
        thrown.send(None)
    assert limiter.available_permits(CLIENT) == 1
    with pytest.raises(TypeError, match="non-None"):
        app(scope_of(), receive, discard).send(1)


def test_create_task_and_asyncio_run_take_it() -> None:
    limiter = one_at_a_time()
    pending = Pending()
    app = RateLimitMiddleware(pending, limiter)

    async def main() -> None:
        task = asyncio.create_task(app(scope_of(), receive, discard))
        await pending.entered.wait()
        assert limiter.available_permits(CLIENT) == 0
        pending.go.set()
        await task
        assert limiter.available_permits(CLIENT) == 1

    asyncio.run(main())
    pending.go.set()
    asyncio.run(app(scope_of(), receive, discard))  # type: ignore[arg-type]
    assert limiter.available_permits(CLIENT) == 1


def test_a_request_closed_or_abandoned_mid_flight_gives_its_lease_back() -> None:
    limiter = one_at_a_time()
    pending = Pending()
    app = RateLimitMiddleware(pending, limiter)

    async def main() -> None:
        # closed: the application's coroutine is closed too (its finally runs), the lease goes back
        request = app(scope_of(), receive, discard)
        step = request.send(None)  # (the application's wait yields its future)
        assert isinstance(step, asyncio.Future)
        assert limiter.available_permits(CLIENT) == 0
        request.close()
        assert pending.cleaned_up
        assert limiter.available_permits(CLIENT) == 1
        request.close()  # (again: nothing more)
        # abandoned: collected while waiting, as a task dropped with its loop
        pending.cleaned_up = False
        request = app(scope_of(), receive, discard)
        request.send(None)
        assert limiter.available_permits(CLIENT) == 0
        del request
        gc.collect()
        assert pending.cleaned_up
        assert limiter.available_permits(CLIENT) == 1

    asyncio.run(main())


def test_an_exception_thrown_in_reaches_the_application_and_the_lease_goes_back() -> None:
    limiter = one_at_a_time()
    pending = Pending()
    app = RateLimitMiddleware(pending, limiter)

    async def main() -> None:
        request = app(scope_of(), receive, discard)
        request.send(None)
        with pytest.raises(ValueError, match="in flight"):
            request.throw(ValueError("in flight"))
        assert pending.cleaned_up
        assert limiter.available_permits(CLIENT) == 1
        # the application catching it and answering: the request ends normally
        answered: list[dict[str, Any]] = []

        async def catching(scope: Any, receive: Any, send: Any) -> None:
            try:
                await asyncio.get_running_loop().create_future()
            except ValueError:
                await send({"type": "http.response.start", "status": 503, "headers": []})
                await send({"type": "http.response.body", "body": b""})

        async def keep(message: dict[str, Any]) -> None:
            answered.append(message)

        request = RateLimitMiddleware(catching, limiter)(scope_of(), receive, keep)
        request.send(None)
        with pytest.raises(StopIteration):
            request.throw(ValueError, ValueError("caught"), None)
        assert answered[0]["status"] == 503
        assert limiter.available_permits(CLIENT) == 1

    asyncio.run(main())


class Done:
    """An awaitable that is not a coroutine (``__await__`` a generator)."""

    def __await__(self) -> Generator[Any, None, str]:
        yield from ()
        return "value"


def test_any_awaitable_the_application_returns_is_awaited() -> None:
    limiter = one_at_a_time()
    held: list[int] = []

    def plain(scope: Any, receive: Any, send: Any) -> Done:
        held.append(limiter.available_permits(CLIENT))
        return Done()

    def broken(scope: Any, receive: Any, send: Any) -> int:
        return 42

    def raising(scope: Any, receive: Any, send: Any) -> None:
        raise LookupError("before any await")

    async def main() -> None:
        assert await RateLimitMiddleware(plain, limiter)(scope_of(), receive, discard) == "value"
        assert held == [0]
        assert limiter.available_permits(CLIENT) == 1
        with pytest.raises(TypeError, match="await"):
            await RateLimitMiddleware(broken, limiter)(scope_of(), receive, discard)  # type: ignore[arg-type]
        assert limiter.available_permits(CLIENT) == 1
        with pytest.raises(LookupError):
            await RateLimitMiddleware(raising, limiter)(scope_of(), receive, discard)  # type: ignore[arg-type]
        assert limiter.available_permits(CLIENT) == 1

    asyncio.run(main())


def test_a_refusal_and_other_scopes_take_the_python_path() -> None:
    limiter = permits.PartitionedLimiter.per_key(specs.FixedWindow(1, 60), clock=permits.ManualClock())

    async def hello(request: Request) -> Response:
        return PlainTextResponse("hello")

    app = RateLimitMiddleware(Starlette(routes=[Route("/", hello)]), limiter)
    assert asyncio.run(call(app, scope_of()))[0] == 200
    assert asyncio.run(call(app, scope_of()))[0] == 429
    lifespan: list[str] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        lifespan.append(scope["type"])

    asyncio.run(RateLimitMiddleware(inner, limiter)({"type": "lifespan"}, receive, discard))  # type: ignore[arg-type]
    assert lifespan == ["lifespan"]
    assert limiter.available_permits(CLIENT) == 0  # (the window's one permit: the first request's)


def test_a_route_cost_settles_after_the_response() -> None:
    from fastapi import Depends, FastAPI

    from permits.fastapi import RateLimit

    clock = permits.ManualClock()
    route_limit = RateLimit(
        permits.TokenBucketLimiter(10, 1, 60.0, clock=clock), cost=lambda request, sent: sent.body_size
    )
    api = FastAPI()

    @api.get("/", dependencies=[Depends(route_limit)], response_class=PlainTextResponse)
    async def root() -> str:
        return "four"

    app = RateLimitMiddleware(api, one_at_a_time())
    assert app._enter is not app._call
    status, _, body = asyncio.run(call(app, scope_of()))
    assert (status, body) == (200, b"four")
    assert route_limit.policy.limiter.available_permits() == 6  # (one taken, settled to the body's 4 bytes)


def test_a_request_sent_to_while_it_runs_refuses_as_a_coroutine_does() -> None:
    limiter = one_at_a_time()
    holder: list[Any] = []
    errors: list[BaseException] = []

    async def reentering(scope: Any, receive: Any, send: Any) -> None:
        for again in (lambda: holder[0].send(None), lambda: holder[0].throw(KeyError("x")), holder[0].close):
            try:
                again()
            except ValueError as exc:
                errors.append(exc)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    holder.append(RateLimitMiddleware(reentering, limiter)(scope_of(), receive, discard))
    with pytest.raises(StopIteration):
        holder[0].send(None)
    assert [str(e) for e in errors] == ["coroutine already executing"] * 3
    assert limiter.available_permits(CLIENT) == 1
