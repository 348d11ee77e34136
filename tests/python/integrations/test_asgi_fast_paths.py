"""The middleware's fast paths give what the general ones give: the built-in keys read straight
from the ASGI scope (no request object) and the RateLimit headers formatted as bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.requests import Request

from permits import asgi, keys
from permits._http_policy import Quota, encoded_headers
from permits._quota_headers import HEADER_STYLES

_hops = st.sampled_from(
    ["10.0.0.2", "198.51.100.7", "2001:db8::1", "[2001:db8::2]:443", "unknown", "_hidden", '"for"', "", " 6.6.6.6 "]
)
_peers = st.one_of(st.none(), st.sampled_from(["10.0.0.1", "203.0.113.9", "2001:db8:1::5", "::ffff:10.0.0.3", "", "x"]))


def _scope(peer: str | None, xff: list[str], fwd: list[str], extra: list[tuple[bytes, bytes]]) -> dict[str, object]:
    headers = [(b"x-forwarded-for", v.encode("latin-1")) for v in xff]
    headers += [(b"forwarded", v.encode("latin-1")) for v in fwd]
    return {
        "type": "http",
        "path": "/",
        "headers": headers + extra,
        "client": None if peer is None else (peer, 1234),
    }


@settings(max_examples=300, deadline=None)
@given(
    trusted=st.sampled_from([(), ("10.0.0.0/8",), ("10.0.0.0/8", "2001:db8:1::/48"), ("0.0.0.0/0", "::/0")]),
    prefix=st.sampled_from([None, 64, 48]),
    peer=_peers,
    xff=st.lists(st.lists(_hops, max_size=3).map(", ".join), max_size=2),
    fwd=st.lists(
        st.lists(_hops.map(lambda h: f"for={h}") | st.just("proto=https"), max_size=3).map(", ".join), max_size=2
    ),
    header=st.sampled_from(["x-forwarded-for", "Forwarded"]),
)
def test_client_ip_from_the_scope_is_client_ip_of_the_request(trusted, prefix, peer, xff, fwd, header) -> None:
    key = keys.client_ip(trusted, ipv6_prefix=prefix, header=header)
    scope = _scope(peer, xff, fwd, [])
    assert key.from_scope(scope) == key(Request(scope))  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None)
@given(
    value=st.one_of(st.none(), st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255), max_size=8)),
    fallback=st.sampled_from(["ip", "none", "path"]),
    peer=_peers,
)
def test_header_from_the_scope_is_header_of_the_request(value, fallback, peer) -> None:
    chosen = {"ip": keys.client_ip(), "none": None, "path": keys.path()}[fallback]
    key = keys.header("X-Api-Key", fallback=chosen)
    extra = [] if value is None else [(b"x-api-key", value.encode("latin-1"))]
    scope = _scope(peer, [], [], extra)
    made: list[Request] = []

    def request() -> Request:
        made.append(Request(scope))
        return made[-1]

    assert key.from_scope(scope, request) == key(Request(scope))  # type: ignore[attr-defined]
    # A request object is made only for a fallback that is no built-in key.
    assert bool(made) == (fallback == "path" and not (value or "").strip())  # blank: absent


@given(
    name=st.text(max_size=6),
    quota=st.integers(0, 10**9),
    window=st.one_of(st.none(), st.integers(1, 10**6)),
    remaining=st.integers(0, 10**9),
    reset=st.one_of(st.none(), st.integers(0, 10**6)),
)
def test_encoded_headers_are_the_headers_as_bytes(name, quota, window, remaining, reset) -> None:
    q = Quota(name, quota, window, remaining, reset)
    assert encoded_headers(q) == tuple((n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in q.headers())


@given(
    style=st.sampled_from(HEADER_STYLES),
    reset=st.one_of(st.none(), st.integers(0, 10**6)),
    app_sets=st.lists(st.sampled_from([b"ratelimit", b"RateLimit", b"x-ratelimit-reset", b"retry-after", b"etag"])),
)
def test_the_headers_an_application_sets_itself_win(style: str, reset: int | None, app_sets: list[bytes]) -> None:
    """Every name the middleware adds is one it looks for among the application's own (which win):
    a response setting none of them takes ours whole, without a set of its names."""
    quota = Quota("api", 10, 60, 3, reset, style)
    ours = [*encoded_headers(quota), (b"retry-after", b"5")]
    assert {name for name, _ in ours} <= asgi._OURS
    existing = [(name, b"app") for name in app_sets]
    sent = asgi._with_raw_headers({"type": "http.response.start", "headers": existing}, ours)
    own = {name.lower() for name in app_sets}
    assert list(sent["headers"]) == existing + [(name, value) for name, value in ours if name not in own]
