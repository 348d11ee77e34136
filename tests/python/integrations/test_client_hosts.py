"""The clients' default key is the request's host written one way: a host spelt two ways (case, a
trailing dot, an IPv4 address mapped into IPv6, its scheme's default port written out) shares
one limit. Real requests to a loopback server, paced on a ManualClock: one permit a second per
key, so the clock tells how many keys the requests were counted under."""

from __future__ import annotations

import socket
from typing import Any

import _upstream
import aiohttp
import httpx
import pytest
from _upstream import Upstream

import permits
from permits import Partition
from permits._hosts import host_key
from permits.aiohttp import RateLimitedSession
from permits.httpx import AsyncRateLimitedTransport, RateLimitedTransport
from permits.specs import FixedWindow

upstream = _upstream.upstream  # the server fixture


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("example.com", "example.com"),
        ("Example.COM", "example.com"),
        ("example.com.", "example.com"),
        ("EXAMPLE.com.", "example.com"),
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("::ffff:127.0.0.1", "127.0.0.1"),
        ("::FFFF:7f00:1", "127.0.0.1"),
        ("0:0:0:0:0:0:0:1", "::1"),
        ("2001:DB8::1", "2001:db8::1"),
        ("fe80::1%25eth0", "fe80::1%eth0"),  # httpx keeps the zone percent-encoded
        ("fe80::1%eth0", "fe80::1%eth0"),  # yarl decodes it
        ("bücher.example", "bücher.example"),
        ("not:an:address", "not:an:address"),
        (".", "."),
    ],
)
def test_host_keys(host: str, key: str):
    assert host_key(host) == key


def _mapped_loopback_works() -> bool:
    """Whether an IPv6 socket reaches an IPv4 listener at ::ffff:127.0.0.1 here."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        try:
            with socket.socket(socket.AF_INET6) as client:
                client.connect(("::ffff:127.0.0.1", server.getsockname()[1]))
        except OSError:
            return False
    return True


def spellings(upstream: Upstream) -> list[str]:
    """The loopback server as 127.0.0.1 and as localhost, each spelt four ways, in turns: two keys,
    so four requests a key at one a second end at 3 s (each spelling a key of its own: sooner)."""
    port = upstream.port
    numeric = ["127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1"]
    if _mapped_loopback_works():
        numeric = ["127.0.0.1", "[::ffff:127.0.0.1]", "[::FFFF:7F00:1]", "[0:0:0:0:0:FFFF:7F00:1]"]
    names = ["localhost", "LOCALHOST", "LocalHost", "localhost"]
    return [f"http://{host}:{port}/ok" for pair in zip(numeric, names, strict=True) for host in pair]


def limiter(clock: permits.ManualClock) -> Any:
    # (no queue: an async wait on a ManualClock then sleeps, advancing the clock, rather than queue)
    return permits.PartitionedLimiter.per_key(Partition.of(None, FixedWindow(1, 1.0), queue_limit=0), clock=clock)


def test_httpx_one_host_one_key(upstream: Upstream, clock: permits.ManualClock):
    per_host = limiter(clock)
    with httpx.Client(transport=RateLimitedTransport(per_host)) as client:
        for url in spellings(upstream):
            assert client.get(url).status_code == 200
    assert upstream.hits["/ok"] == 8
    assert clock.now() == 3.0  # four requests per key, one a second: 0, 1, 2, 3
    assert per_host.statistics("127.0.0.1").total_successful_leases == 4
    assert per_host.statistics("localhost").total_successful_leases == 4


async def test_async_httpx_one_host_one_key(upstream: Upstream, clock: permits.ManualClock):
    per_host = limiter(clock)
    async with httpx.AsyncClient(transport=AsyncRateLimitedTransport(per_host)) as client:
        for url in spellings(upstream):
            assert (await client.get(url)).status_code == 200
    assert clock.now() == 3.0
    assert per_host.statistics("127.0.0.1").total_successful_leases == 4
    assert per_host.statistics("localhost").total_successful_leases == 4


class _Loopback(aiohttp.abc.AbstractResolver):
    """Every name resolves to 127.0.0.1 (``localhost.`` does not resolve everywhere)."""

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[Any]:
        return [{"hostname": host, "host": "127.0.0.1", "port": port, "family": socket.AF_INET, "proto": 0, "flags": 0}]

    async def close(self) -> None:
        pass


async def test_aiohttp_one_host_one_key(upstream: Upstream, clock: permits.ManualClock):
    per_host = limiter(clock)
    port = upstream.port
    names = ["localhost", "localhost.", "LOCALHOST.", "LocalHost"]
    urls = [url for url in spellings(upstream) if "localhost" not in url.lower()]
    urls = [url for pair in zip(urls, [f"http://{name}:{port}/ok" for name in names], strict=True) for url in pair]
    connector = aiohttp.TCPConnector(resolver=_Loopback())
    async with RateLimitedSession(per_host, connector=connector) as session:
        for url in urls:
            async with session.get(url) as response:
                assert response.status == 200
    assert upstream.hits["/ok"] == 8
    assert clock.now() == 3.0
    assert per_host.statistics("localhost").total_successful_leases == 4


def test_httpx_a_trailing_dot_and_the_default_port(clock: permits.ManualClock):
    # (not on the loopback server: "localhost." resolves on some machines only, and port 80 is not ours)
    hosts = []
    network = httpx.MockTransport(lambda request: hosts.append(request.url.host) or httpx.Response(200))
    per_host = limiter(clock)
    with httpx.Client(transport=RateLimitedTransport(per_host, transport=network)) as client:
        for url in (
            "http://example.com/",
            "http://example.com.:80/",
            "http://EXAMPLE.com:80/",
            "https://example.com./",
        ):
            client.get(url)
    assert hosts == ["example.com", "example.com.", "example.com", "example.com."]  # sent as written
    assert clock.now() == 3.0
    assert per_host.statistics("example.com").total_successful_leases == 4
