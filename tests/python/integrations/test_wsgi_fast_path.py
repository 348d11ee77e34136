"""The WSGI middleware's C path (``permits._wsgi_gate``): the same answers as its Python path, for
every header style, built-in key and limit kind; its leases released once, whatever the
application does; what it hands back to Python (refusals, an outer middleware, a route's figures,
the application's own headers). Time on a ManualClock; the application called in process."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import permits
from permits import keys, specs
from permits.wsgi import HANDOFF, RateLimitMiddleware

Started = list[tuple[str, list[tuple[str, str]]]]


def environ_of(remote: str | None = "203.0.113.7", **extra: Any) -> dict[str, Any]:
    environ: dict[str, Any] = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "SCRIPT_NAME": "", "QUERY_STRING": ""}
    if remote is not None:
        environ["REMOTE_ADDR"] = remote
    environ.update(extra)
    return environ


def hello(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


def call(app: Any, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    """One request as a server makes it: the body iterated, then closed."""
    started: Started = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        started.append((status, headers))

    result = app(environ, start_response)
    try:
        body = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    status, headers = started[-1]
    return status, headers, body


def python_path(app: Any, limiter: Any, **options: Any) -> RateLimitMiddleware:
    """The middleware with its C path turned off: every request through the gate's Python."""
    middleware = RateLimitMiddleware(app, limiter, **options)
    middleware.gate._fast = None
    return PythonOnly(middleware)  # type: ignore[return-value]


class PythonOnly:
    def __init__(self, middleware: RateLimitMiddleware) -> None:
        self.middleware = middleware

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        return self.middleware.gate(self.middleware.app, environ, start_response)


LIMITS: dict[str, Callable[[permits.ManualClock], Any]] = {
    "per-key token bucket": lambda c: permits.PartitionedLimiter.per_key(
        specs.TokenBucket(3, 1, 2.0), clock=c, name="tb"
    ),
    "per-key fixed window": lambda c: permits.PartitionedLimiter.per_key(specs.FixedWindow(3, 5), clock=c, name="fw"),
    "per-key sliding window": lambda c: permits.PartitionedLimiter.per_key(
        specs.SlidingWindow(3, 4, 2), clock=c, name="sw"
    ),
    "per-key concurrency": lambda c: permits.PartitionedLimiter.per_key(specs.Concurrency(2), clock=c, name="cc"),
    "plain token bucket": lambda c: permits.TokenBucketLimiter(3, 1, 2.0, clock=c, name="plain"),
    "plain fixed window": lambda c: permits.FixedWindowLimiter(3, 5, clock=c, name='a "quoted" name'),
}


@pytest.mark.parametrize("headers", [True, "legacy", "both", False])
@pytest.mark.parametrize("limit", sorted(LIMITS))
def test_the_c_path_answers_as_the_python_path(limit: str, headers: bool | str) -> None:
    """Two middlewares on two identical limits and clocks, one with its C path: every request's
    status, headers and body the same, refusals (Retry-After) and time passing included."""
    answers = []
    for fast in (True, False):
        clock = permits.ManualClock()
        limiter = LIMITS[limit](clock)
        build = RateLimitMiddleware if fast else python_path
        app = build(hello, limiter, headers=headers)
        if fast:
            assert app.gate._fast is not None
        seen = []
        for step in range(12):
            remote = ["203.0.113.7", "198.51.100.2", "2001:db8::1", None][step % 4]
            seen.append(call(app, environ_of(remote)))
            clock.advance(0.7)
        answers.append(seen)
    assert answers[0] == answers[1]
    statuses = [status for status, _, _ in answers[0]]
    assert "200 OK" in statuses


@pytest.mark.parametrize(
    "remote",
    ["203.0.113.7", "0.0.0.0", "255.255.255.255", "010.0.0.1", "1.2.3", "1.2.3.4.", "256.1.1.1", "::1",
     "2001:db8:0:0:1::1", "unix-socket", "", " 1.2.3.4", "\u0661.\u0662.\u0663.\u0664"],  # (the last: other digits)
)  # fmt: skip
def test_the_client_address_key_is_the_python_key(remote: str) -> None:
    """REMOTE_ADDR read in C gives the key client_ip() gives (IPv6 networks, names that are no
    address, an unknown peer): the partition the request counts against is the same."""
    clock = permits.ManualClock()
    limiter = permits.PartitionedLimiter.per_key(specs.FixedWindow(1, 60), clock=clock)
    app = RateLimitMiddleware(hello, limiter, headers=False)
    assert call(app, environ_of(remote))[0] == "200 OK"
    expected = keys.client_ip()(environ_of(remote))
    assert limiter.available_permits(expected) == 0  # (the C path counted that very key)
    assert call(app, environ_of(remote))[0].startswith("429")


@pytest.mark.parametrize(
    "value, key",
    [("k1", ("x-api-key", "k1")), ("  k1 ", ("x-api-key", "k1")), ("", None), ("   ", None), (None, None),
     ("ключ", ("x-api-key", "ключ"))],
)  # fmt: skip
def test_the_header_key_is_the_python_key(value: str | None, key: tuple[str, str] | None) -> None:
    """A header's value (stripped) keys the request; a blank or absent one falls back to the client's address."""
    clock = permits.ManualClock()
    limiter = permits.PartitionedLimiter.per_key(specs.FixedWindow(1, 60), clock=clock)
    app = RateLimitMiddleware(hello, limiter, key=keys.header("X-Api-Key"), headers=False)
    extra = {} if value is None else {"HTTP_X_API_KEY": value}
    assert call(app, environ_of(**extra))[0] == "200 OK"
    used = key if key is not None else "203.0.113.7"
    assert limiter.available_permits(used) == 0
    assert call(app, environ_of(**extra))[0].startswith("429")


def test_a_key_function_and_a_plain_limiter_take_the_c_path() -> None:
    clock = permits.ManualClock()
    seen: list[str] = []

    def tenant(environ: dict[str, Any]) -> str:
        seen.append(environ["PATH_INFO"])
        return "t-" + environ["PATH_INFO"]

    keyed = RateLimitMiddleware(
        hello, permits.PartitionedLimiter.per_key(specs.FixedWindow(1, 60), clock=clock), key=tenant
    )
    assert keyed.gate._fast is not None
    assert [call(keyed, environ_of(PATH_INFO=p))[0][:3] for p in ("/a", "/a", "/b")] == ["200", "429", "200"]
    assert seen == ["/a", "/a", "/b"]
    plain = RateLimitMiddleware(hello, permits.FixedWindowLimiter(1, 60, clock=clock))
    assert plain.gate._fast is not None
    assert [call(plain, environ_of())[0][:3] for _ in range(2)] == ["200", "429"]


def test_options_the_c_path_cannot_serve_keep_the_python_path() -> None:
    clock = permits.ManualClock()

    def limiter() -> Any:
        return permits.PartitionedLimiter.per_key(specs.FixedWindow(5, 60), clock=clock)

    prometheus = pytest.importorskip("prometheus_client")
    for options in ({"wait": True}, {"cost": lambda environ, sent: 1}, {"metrics": prometheus.CollectorRegistry()}):
        assert RateLimitMiddleware(hello, limiter(), **options).gate._fast is None
    chain = permits.chain(limiter(), limiter())
    assert RateLimitMiddleware(hello, chain).gate._fast is None  # (a chain's figures: per request)
    assert RateLimitMiddleware(hello, chain, headers=False).gate._fast is not None


class Tracked:
    """A response iterable that records its close() and can raise there."""

    def __init__(self, raise_on_close: bool = False) -> None:
        self.closed = 0
        self.raise_on_close = raise_on_close

    def __iter__(self) -> Iterator[bytes]:
        yield b"a"
        yield b"b"

    def close(self) -> None:
        self.closed += 1
        if self.raise_on_close:
            raise OSError("close failed")


def test_the_lease_is_held_until_close_and_released_once() -> None:
    clock = permits.ManualClock()
    limiter = permits.PartitionedLimiter.per_key(specs.Concurrency(1), clock=clock)
    body = Tracked()

    def app(environ: dict[str, Any], start_response: Any) -> Tracked:
        start_response("200 OK", [])
        return body

    middleware = RateLimitMiddleware(app, limiter)
    result = middleware(environ_of(), lambda *a: None)
    assert not hasattr(result, "__len__")
    assert list(result) == [b"a", b"b"]
    assert limiter.available_permits("203.0.113.7") == 0  # held while the response is out
    result.close()
    result.close()
    assert body.closed == 2
    assert limiter.available_permits("203.0.113.7") == 1  # given back once
    # A close() of the application's that raises still gives the permit back, and is raised.
    body.raise_on_close = True
    result = middleware(environ_of(), lambda *a: None)
    with pytest.raises(OSError, match="close failed"):
        result.close()
    assert limiter.available_permits("203.0.113.7") == 1


def test_a_list_response_has_its_length_and_an_application_that_raises_gives_back() -> None:
    clock = permits.ManualClock()
    limiter = permits.PartitionedLimiter.per_key(specs.Concurrency(1), clock=clock)
    result = RateLimitMiddleware(hello, limiter)(environ_of(), lambda *a: None)
    assert len(result) == 1
    result.close()

    def boom(environ: dict[str, Any], start_response: Any) -> Any:
        start_response("200 OK", [])
        raise RuntimeError("boom")

    middleware = RateLimitMiddleware(boom, limiter)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="boom"):
            middleware(environ_of(), lambda *a: None)
    assert limiter.available_permits("203.0.113.7") == 1


def test_start_response_takes_exc_info_by_keyword_and_an_applications_own_header_wins() -> None:
    limiter = permits.PartitionedLimiter.per_key(specs.FixedWindow(5, 60), clock=permits.ManualClock(), name="n")
    calls: list[tuple[Any, ...]] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("ratelimit", "mine")], exc_info=None)
        return [b""]

    def start_response(*args: Any) -> None:
        calls.append(args)

    RateLimitMiddleware(app, limiter)(environ_of(), start_response).close()
    _, headers, exc_info = calls[0]
    assert headers == [("ratelimit", "mine"), ("RateLimit-Policy", '"n";q=5;w=60')]
    assert exc_info is None


def test_an_outer_middleware_and_a_non_dict_environ_take_the_python_path() -> None:
    clock = permits.ManualClock()
    inner_limit = permits.PartitionedLimiter.per_key(specs.Concurrency(1), clock=clock, name="inner")
    outer_limit = permits.PartitionedLimiter.per_key(specs.Concurrency(1), clock=clock, name="outer")
    stacked = RateLimitMiddleware(RateLimitMiddleware(hello, inner_limit), outer_limit)
    answer = call(stacked, environ_of())
    assert answer[0] == "200 OK"
    assert [v for n, v in answer[1] if n == "RateLimit"] == ['"inner";r=0']  # (one set: the inner one's)
    assert inner_limit.available_permits("203.0.113.7") == outer_limit.available_permits("203.0.113.7") == 1
    python = python_path(python_path(hello, inner_limit), outer_limit)
    assert call(python, environ_of()) == answer

    class Environ(dict):  # type: ignore[type-arg]
        pass

    assert call(RateLimitMiddleware(hello, inner_limit), Environ(environ_of()))[0] == "200 OK"
    assert inner_limit.available_permits("203.0.113.7") == 1


def test_a_handoff_left_in_the_environ_is_the_extensions_type() -> None:
    environ = environ_of()
    result = RateLimitMiddleware(hello, permits.FixedWindowLimiter(5, 60))(environ, lambda *a: None)
    handoff = environ[HANDOFF]
    assert type(handoff) is permits._core.Handoff
    status, headers = handoff.started
    assert status == "200 OK"
    assert [name for name, _ in headers] == ["Content-Type", "RateLimit-Policy", "RateLimit"]
    assert len(handoff.route_leases) == 1
    result.close()
    assert handoff.route_leases == []


def test_threads_share_one_exact_limit_through_the_c_path() -> None:
    clock = permits.ManualClock()
    limiter = permits.PartitionedLimiter.per_key(specs.FixedWindow(1000, 60), clock=clock)
    middleware = RateLimitMiddleware(hello, limiter)
    counts: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        ok = sum(call(middleware, environ_of())[0] == "200 OK" for _ in range(300))
        with lock:
            counts.append(ok)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 1000
    gc.collect()


def test_a_failure_settling_the_views_costs_gives_the_leases_back() -> None:
    """A view left a cost (its handoff's charges) and the response that settles it cannot be made:
    the request's lease and the view's go back at once, and the error is raised."""
    from permits.wsgi import Gate

    class Failing(Gate):
        __slots__ = ()

        def _costs(self, result: Any, handoff: Any) -> Any:
            raise RuntimeError("settling failed")

    clock = permits.ManualClock()
    limiter = permits.PartitionedLimiter.per_key(specs.Concurrency(1), clock=clock)
    route = permits.ConcurrencyLimiter(1, clock=clock)

    def view(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        handoff = environ[HANDOFF]
        handoff.route_leases.append(route.acquire())
        handoff.charges.append(lambda sent: None)
        start_response("200 OK", [])
        return [b"ok"]

    gate = Failing(limiter)
    assert gate._fast is not None
    environ = environ_of()  # (kept: a lease only collected would come back as a forgotten one)
    with pytest.raises(RuntimeError, match="settling failed"):
        gate(view, environ, lambda *a: None)
    assert environ[HANDOFF].route_leases == []
    assert limiter.available_permits("203.0.113.7") == 1
    assert route.available_permits() == 1
