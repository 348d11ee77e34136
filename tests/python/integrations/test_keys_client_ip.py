"""permits.keys: the client's address behind trusted proxies, a header, the path; over real
uvicorn and aiohttp servers (their own request objects) and on the framework-neutral core."""

from __future__ import annotations

import ipaddress
from typing import Any

import httpx
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from permits import keys


def ip(trusted: tuple[str, ...] = (), peer: str | None = "10.0.0.1", *, fwd=None, xff=(), prefix=None) -> str:
    """The key of a request with these header lines: ``fwd`` given, a key reading ``Forwarded``;
    otherwise one reading ``X-Forwarded-For`` (each reads only its own header)."""
    header, lines = ("forwarded", fwd) if fwd is not None else ("x-forwarded-for", xff)
    key = keys.client_ip(trusted, ipv6_prefix=prefix, header=header)
    return key.from_lines(peer, list(lines))  # type: ignore[attr-defined,no-any-return]


def test_without_trusted_proxies_the_peer_is_the_client() -> None:
    assert ip(xff=["1.2.3.4"]) == "10.0.0.1"
    assert ip(fwd=["for=1.2.3.4"]) == "10.0.0.1"


def test_a_spoofed_header_from_an_untrusted_peer_is_ignored() -> None:
    assert ip(("10.0.0.0/8",), peer="203.0.113.9", xff=["1.2.3.4"]) == "203.0.113.9"
    assert ip(("10.0.0.0/8",), peer="203.0.113.9", fwd=["for=1.2.3.4"]) == "203.0.113.9"


def test_the_right_most_untrusted_hop_is_the_client() -> None:
    # The client prepended a lie; our proxies (10/8) appended what they saw.
    assert ip(("10.0.0.0/8",), xff=["6.6.6.6, 198.51.100.7, 10.0.0.2"]) == "198.51.100.7"
    assert ip(("10.0.0.0/8",), xff=["6.6.6.6", "198.51.100.7, 10.0.0.2"]) == "198.51.100.7"  # several lines
    assert ip(("10.0.0.1", "10.0.0.2"), xff=["10.0.0.2"]) == "10.0.0.2"  # every hop ours: the left-most


def test_forwarded_rfc7239_ipv4_ipv6_ports_and_quotes() -> None:
    trusted = ("10.0.0.0/8",)
    assert ip(trusted, fwd=["for=192.0.2.60;proto=http;by=203.0.113.43"]) == "192.0.2.60"
    assert ip(trusted, fwd=['for="[2001:db8:cafe::17]:4711"']) == "2001:db8:cafe::17"
    assert ip(trusted, fwd=['for="192.0.2.43:4711", for=10.0.0.9']) == "192.0.2.43"
    assert ip(trusted, fwd=['For="1.1.1.1";by="x,y", for=198.51.100.1']) == "198.51.100.1"


def test_a_forwarded_element_without_for_never_keys_the_client_as_the_proxy() -> None:
    trusted = ("10.0.0.0/8",)
    assert ip(trusted, fwd=["proto=https"]) == "unknown"
    # The client's own for= left of it is not vouched for by anyone.
    assert ip(trusted, fwd=["for=6.6.6.6, proto=https;host=example.com"]) == "unknown"
    assert ip(trusted, fwd=["for=198.51.100.7;proto=https"]) == "198.51.100.7"


def test_ipv6_peer_prefix_grouping_and_mapped_addresses() -> None:
    assert ip(peer="2001:db8:1:2:aaaa::1", prefix=64) == "2001:db8:1:2::/64"
    assert ip(peer="2001:db8:1:2:bbbb::9", prefix=64) == "2001:db8:1:2::/64"
    assert ip(peer="2001:db8:1:3::1", prefix=64) == "2001:db8:1:3::/64"
    assert ip(peer="192.0.2.1", prefix=64) == "192.0.2.1"  # IPv4 is not grouped
    assert ip(peer="::ffff:192.0.2.1") == "192.0.2.1"
    assert (
        ip(("2001:db8:ffff::/48",), peer="2001:db8:ffff::1", xff=["2001:db8:1:2::5"], prefix=64) == "2001:db8:1:2::/64"
    )


def test_ipv6_clients_are_keyed_by_their_64_by_default() -> None:
    # A client rotating through the addresses of its own /64 keeps one key.
    key: Any = keys.client_ip()
    assert "ipv6_prefix=64" in repr(key)
    assert key.from_lines("2001:db8:1:2:aaaa::1", []) == "2001:db8:1:2::/64"
    assert key.from_lines("2001:db8:1:2:bbbb:cccc:dddd:9", []) == "2001:db8:1:2::/64"
    assert key.from_environ({"REMOTE_ADDR": "2001:db8:1:2::77"}) == "2001:db8:1:2::/64"
    assert key.from_scope({"client": ("2001:db8:1:2::78", 5000)}) == "2001:db8:1:2::/64"
    assert key.from_lines("2001:db8:1:3::1", []) == "2001:db8:1:3::/64"  # the next /64: another client
    assert keys.header("x-api-key")({"REMOTE_ADDR": "2001:db8:1:2::9"}) == "2001:db8:1:2::/64"  # its fallback
    behind: Any = keys.client_ip(trusted_proxies=["10.0.0.0/8"])
    assert behind.from_lines("10.0.0.1", ["2001:db8:1:2::5"]) == "2001:db8:1:2::/64"
    assert behind.from_lines("10.0.0.1", ["2001:db8:1:2::6"]) == "2001:db8:1:2::/64"
    # None: each address alone, as before.
    assert keys.client_ip(ipv6_prefix=None).from_lines("2001:db8:1:2::5", []) == "2001:db8:1:2::5"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "mapped", ["::ffff:192.0.2.1", "::FFFF:192.0.2.1", "[::ffff:192.0.2.1]:4711", "::ffff:c000:201"]
)
def test_ipv4_mapped_ipv6_addresses_key_as_their_ipv4_address(mapped: str) -> None:
    key: Any = keys.client_ip()
    assert key.from_lines(mapped, []) == "192.0.2.1"
    assert key.from_environ({"REMOTE_ADDR": mapped}) == "192.0.2.1"
    behind: Any = keys.client_ip(trusted_proxies=["10.0.0.0/8"])
    assert behind.from_lines("10.0.0.1", [mapped]) == "192.0.2.1"
    assert behind.from_lines("::ffff:10.0.0.1", ["192.0.2.1"]) == "192.0.2.1"  # a proxy seen mapped: trusted
    forwarded: Any = keys.client_ip(trusted_proxies=["10.0.0.0/8"], header="forwarded")
    assert forwarded.from_lines("10.0.0.1", [f'for="{mapped}"']) == "192.0.2.1"


@pytest.mark.parametrize(
    "header",
    [
        "",
        ",,,",
        "unknown",
        "for=unknown",
        'for="_hidden"',
        "for=",
        'for="[2001:db8::1',
        "not an address, 1.2.3",
        "\x00\x01\x02",
        "999.1.1.1",
        '"""""',
        "for=" + "1" * 10_000,
        '"' + " " * 200 + '192.0.2.9"',  # a hop longer than any address: refused before parsing
        ", ".join(["192.0.2.1"] * 5000),
    ],
)
def test_malformed_or_huge_headers_fall_back_to_the_peer(header: str) -> None:
    trusted = ("10.0.0.0/8",)
    assert ip(trusted, fwd=[header]) in ("10.0.0.1", "unknown")  # an element naming nobody: "unknown"
    assert ip(trusted, xff=[header]) in ("10.0.0.1", "192.0.2.1")  # a long list of one client may name it


PADDING = ", ".join(f"6.6.6.{i % 250}" for i in range(2000))  # a client's own hops: 20 KB


@pytest.mark.parametrize(
    "lines",
    [
        [PADDING + ", 198.51.100.7"],  # what nginx's $proxy_add_x_forwarded_for makes of it
        [PADDING, "198.51.100.7"],  # the proxy's hop on a line of its own
        ["x" * 100_000 + ", 198.51.100.7, 10.0.0.2"],  # one huge hop, then two of our proxies
    ],
)
def test_a_padded_x_forwarded_for_is_read_from_its_right_end(lines: list[str]) -> None:
    # Past any length the client pads it to, the hops our proxies appended still name the client.
    assert sum(len(line) for line in lines) > 8192
    assert ip(("10.0.0.0/8",), xff=lines) == "198.51.100.7"


@pytest.mark.parametrize(
    "lines",
    [
        [", ".join(f"for=6.6.6.{i % 250}" for i in range(2000)) + ", for=198.51.100.7"],
        ['for="' + "x" * 20_000 + '", for=198.51.100.7;proto=https'],  # a long quoted string
        ['for="' + "a, " * 5000 + ", for=198.51.100.7"],  # an unterminated quote left of ours
        ['for="' + "a, " * 5000, 'for="198.51.100.7:4711"'],
    ],
)
def test_a_padded_forwarded_is_read_from_its_right_end(lines: list[str]) -> None:
    assert sum(len(line) for line in lines) > 8192
    assert ip(("10.0.0.0/8",), fwd=lines) == "198.51.100.7"


def test_a_hop_too_long_to_be_an_address_ends_the_walk_at_our_proxy() -> None:
    # Only as much of the header is read as the walk needs: the hop left of our proxy's is
    # longer than any address, so the walk stops at what that proxy saw.
    assert ip(("10.0.0.0/8",), xff=["1" * (keys.MAX_HOP_LENGTH + 1) + ", 10.0.0.2"]) == "10.0.0.2"
    assert ip(("10.0.0.0/8",), fwd=["for=" + "1" * (keys.MAX_HOP_LENGTH + 1) + ", for=10.0.0.2"]) == "10.0.0.2"
    # Every hop a proxy of ours, past MAX_HOPS of them: the walk stops at the last one it read.
    chain = [", ".join(f"10.0.{i // 250}.{i % 250}" for i in range(200))]
    assert ip(("10.0.0.0/8",), xff=chain) == f"10.0.{(200 - keys.MAX_HOPS) // 250}.{(200 - keys.MAX_HOPS) % 250}"


def test_a_bad_hop_stops_the_walk_at_what_our_proxy_saw() -> None:
    # "unknown" right of a real address: nothing further left can be trusted.
    assert ip(("10.0.0.0/8",), xff=["198.51.100.7, unknown, 10.0.0.2"]) == "10.0.0.2"


def test_no_peer_and_a_peer_that_is_no_address() -> None:
    assert ip(peer=None) == "unknown"
    assert ip(peer="testclient") == "testclient"


def test_construction_errors() -> None:
    with pytest.raises(ValueError, match="trusted_proxies"):
        keys.client_ip(["10.0.0.0/33"])
    with pytest.raises(TypeError, match="trusted_proxies"):
        keys.client_ip([object()])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="trusted_proxies"):
        keys.client_ip(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ipv6_prefix"):
        keys.client_ip(ipv6_prefix=0)
    with pytest.raises(TypeError, match="ipv6_prefix"):
        keys.client_ip(ipv6_prefix="64")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="header"):
        keys.client_ip(header="x-real-ip")
    with pytest.raises(TypeError, match="header"):
        keys.client_ip(header=b"forwarded")  # type: ignore[arg-type]
    assert "header='forwarded'" in repr(keys.client_ip(header="Forwarded"))
    with pytest.raises(TypeError, match="name"):
        keys.header("")
    with pytest.raises(TypeError, match="fallback"):
        keys.header("x-api-key", fallback="ip")  # type: ignore[arg-type]
    assert keys.client_ip("10.0.0.1")  # one address alone is accepted as such


def _starlette_echo(*key_functions: object) -> Starlette:
    async def echo(request: Request) -> PlainTextResponse:
        return PlainTextResponse("|".join(str(f(request)) for f in key_functions))  # type: ignore[operator]

    return Starlette(routes=[Route("/{rest:path}", echo)])


def _aiohttp_echo(*key_functions: object) -> web.Application:
    async def echo(request: web.Request) -> web.Response:
        return web.Response(text="|".join(str(f(request)) for f in key_functions))  # type: ignore[operator]

    app = web.Application()
    app.router.add_get("/{rest:.*}", echo)
    return app


KEY_FUNCTIONS = (
    keys.client_ip(),
    keys.client_ip(["127.0.0.0/8"]),
    keys.header("X-Api-Key"),
    keys.header("X-Api-Key", fallback=None),
    keys.path(),
)


@pytest.mark.parametrize("framework", ["starlette", "aiohttp"])
async def test_the_helpers_read_each_frameworks_request(framework: str, serve_asgi, serve_aiohttp) -> None:
    # (uvicorn's own proxy_headers would rewrite the peer from X-Forwarded-For: off, to see ours)
    if framework == "starlette":
        serve = serve_asgi(_starlette_echo(*KEY_FUNCTIONS), proxy_headers=False)
    else:
        serve = serve_aiohttp(_aiohttp_echo(*KEY_FUNCTIONS))
    async with serve as url, httpx.AsyncClient(base_url=url) as client:
        plain = (await client.get("/items/7")).text
        assert plain == "127.0.0.1|127.0.0.1|127.0.0.1|None|/items/7"
        # (Forwarded is the client's own word to a key reading X-Forwarded-For: ignored)
        headers = {"X-Forwarded-For": "6.6.6.6, 198.51.100.7", "Forwarded": "for=1.2.3.4", "X-Api-Key": "k1"}
        tagged = ("x-api-key", "k1")
        assert (await client.get("/x", headers=headers)).text == f"127.0.0.1|198.51.100.7|{tagged}|{tagged}|/x"
        odd = {"X-Forwarded-For": "é" * 3000, "Forwarded": 'for="[::1', "X-Api-Key": "ß"}
        odd_bytes = {k: v.encode("utf-8") for k, v in odd.items()}
        response = await client.get("/y", headers=odd_bytes)
        assert response.status_code == 200
        assert response.text.split("|")[:2] == ["127.0.0.1", "127.0.0.1"]


@settings(max_examples=300, deadline=None)
@given(
    forwarded=st.lists(st.text(max_size=80), max_size=3),
    forwarded_for=st.lists(st.text(alphabet='0123456789abcdef.:[]%, ;="_-unkow', max_size=80), max_size=3),
    peer=st.sampled_from(["10.0.0.1", "10.9.9.9", "203.0.113.5", "::1", "fd00::1", "garbage", None]),
)
def test_client_ip_never_raises_and_returns_an_address_or_the_peer(
    forwarded: list[str], forwarded_for: list[str], peer: str | None
) -> None:
    for found in (
        ip(("10.0.0.0/8", "fd00::/8"), peer, fwd=forwarded, prefix=64),
        ip(("10.0.0.0/8", "fd00::/8"), peer, xff=forwarded_for, prefix=64),
    ):
        assert isinstance(found, str)
        if peer is None or peer == "garbage":
            assert found == (peer or "unknown")
        elif peer in ("203.0.113.5", "::1"):  # not a trusted proxy: the headers are ignored
            assert found == {"::1": "::/64"}.get(peer, peer)
        elif found != "unknown":  # (a Forwarded element naming nobody)
            ipaddress.ip_network(found, strict=False)  # an address (or a /64) from the headers or the peer
