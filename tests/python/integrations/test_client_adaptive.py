"""The HTTP clients' ``adaptive=True``: an AdaptiveLimiter per host in front of the client's
limiter, shown every response (issue 41, item 3). On a ManualClock (the clients advance it
instead of sleeping): httpx through a MockTransport answering as a server with a hidden limit,
aiohttp against a loopback server with one."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from aiohttp import web

import permits
from permits.aiohttp import RateLimitedSession
from permits.httpx import AsyncRateLimitedTransport, RateLimitedTransport

from _hidden import FixedWindowServer, TokenBucketServer

LONG_POOL = httpx.Timeout(5.0, pool=120.0)  # (pauses up to the pool timeout: a hidden limit's Retry-After)


class Network:
    """Hosts with hidden limits, answering at the clock's time; counts what each host answered."""

    def __init__(self, clock: permits.ManualClock, hosts: dict[str, Any]) -> None:
        self.clock = clock
        self.hosts = hosts
        self.answers: dict[str, list[tuple[float, int]]] = {host: [] for host in hosts}

    def answer(self, host: str) -> tuple[int, list[tuple[str, str]]]:
        status, headers = self.hosts[host].answer(self.clock.now())
        self.answers[host].append((self.clock.now(), status))
        return status, headers

    def handle(self, request: httpx.Request) -> httpx.Response:
        status, headers = self.answer(request.url.host)
        return httpx.Response(status, headers=headers)

    def share(self, host: str, start: float, end: float) -> tuple[float, float]:
        """(200s per second, share of 429s) that ``host`` answered in [start, end)."""
        within = [status for t, status in self.answers[host] if start <= t < end]
        ok = sum(status == 200 for status in within)
        return ok / (end - start), (len(within) - ok) / max(1, len(within))


def test_each_host_is_paced_to_its_own_hidden_limit() -> None:
    clock = permits.ManualClock()
    net = Network(clock, {"slow.test": TokenBucketServer(3, 3), "fast.test": TokenBucketServer(30, 10)})
    limiter = permits.FixedWindowLimiter(10**6, 1.0, clock=clock)  # the client's own limit: far above
    transport = RateLimitedTransport(limiter, adaptive=True, transport=httpx.MockTransport(net.handle))
    with httpx.Client(transport=transport, timeout=LONG_POOL) as client:
        for host, rate in (("slow.test", 3.0), ("fast.test", 30.0), ("slow.test", 3.0)):
            start = clock.now()
            while clock.now() < start + 400:
                assert client.get(f"https://{host}/").status_code in (200, 429)
            throughput, throttled = net.share(host, start + 200, start + 400)
            assert throughput >= 0.95 * rate, (host, throughput)  # each host at its own pace,
            assert throttled <= 0.01, (host, throttled)  # the slow one's kept while the fast one ran


def test_a_host_that_states_its_quota_answers_no_429() -> None:
    clock = permits.ManualClock()
    net = Network(clock, {"api.test": FixedWindowServer(20, 10.0, headers=True)})
    limiter = permits.FixedWindowLimiter(10**6, 1.0, clock=clock)
    transport = RateLimitedTransport(limiter, adaptive=True, transport=httpx.MockTransport(net.handle))
    with httpx.Client(transport=transport, timeout=LONG_POOL) as client:
        while clock.now() < 300:
            client.get("https://api.test/")
    assert [status for _, status in net.answers["api.test"]].count(429) == 0
    assert len(net.answers["api.test"]) >= 0.85 * 20 * 300 / 10


async def test_the_async_transport_learns_too() -> None:
    clock = permits.ManualClock()
    net = Network(clock, {"api.test": TokenBucketServer(5, 5)})
    limiter = permits.FixedWindowLimiter(10**6, 1.0, clock=clock)

    async def handle(request: httpx.Request) -> httpx.Response:
        return net.handle(request)

    transport = AsyncRateLimitedTransport(limiter, adaptive=True, transport=httpx.MockTransport(handle))
    async with httpx.AsyncClient(transport=transport, timeout=LONG_POOL) as client:
        while clock.now() < 400:
            await client.get("https://api.test/")
    throughput, throttled = net.share("api.test", 200, 400)
    assert throughput >= 0.95 * 5 and throttled <= 0.01


async def test_an_aiohttp_session_learns_from_a_loopback_server(serve_aiohttp: Any) -> None:
    clock = permits.ManualClock()
    net = Network(clock, {"127.0.0.1": FixedWindowServer(10, 5.0, headers=True)})

    async def hidden(request: web.Request) -> web.Response:
        status, headers = net.answer("127.0.0.1")
        return web.Response(status=status, headers=headers, text="x")

    app = web.Application()
    app.router.add_get("/", hidden)
    limiter = permits.FixedWindowLimiter(10**6, 1.0, clock=clock)
    async with serve_aiohttp(app) as url, RateLimitedSession(limiter, adaptive=True) as session:
        while clock.now() < 60:
            async with session.get(url) as response:
                assert response.status in (200, 429)
    statuses = [status for _, status in net.answers["127.0.0.1"]]
    # (the quota's whole seconds until the reset, rounded up, slow the pace: 8 of 10 a window here)
    assert statuses.count(429) == 0 and len(statuses) >= 0.75 * 10 * 60 / 5


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_adaptive_is_a_bool(value: object) -> None:
    limiter = permits.FixedWindowLimiter(10, 1.0)
    with pytest.raises(TypeError, match="adaptive"):
        RateLimitedTransport(limiter, adaptive=value)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="adaptive"):
        AsyncRateLimitedTransport(limiter, adaptive=value)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="adaptive"):
        RateLimitedSession(limiter, adaptive=value)  # type: ignore[arg-type]


def test_the_hosts_kept_are_bounded_and_the_least_recently_used_go() -> None:
    from permits._adaptive_keys import AdaptiveKeys

    keys = AdaptiveKeys(permits.ManualClock(), max_keys=3)
    kept = {key: keys.of(key) for key in "abc"}
    keys.of("a")  # used again: "b" is now the one used longest ago
    keys.of("d")
    assert len(keys) == 3
    assert keys.of("a") is kept["a"] and keys.of("c") is kept["c"]  # kept, what they learned with them
    assert keys.of("b") is not kept["b"]  # forgotten: met again, it learns anew
