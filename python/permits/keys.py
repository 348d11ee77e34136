"""Key functions for the server integrations: which partition a request counts against.

A key function receives the framework's own request object (a Starlette ``Request`` or
``HTTPConnection``, an aiohttp ``web.Request``, an ``httpx.Request``, a Flask ``Request``, a Django
``HttpRequest``, read through its ``META``, the WSGI environ) or,
under ``permits.wsgi``, the WSGI environ itself, and returns a hashable key. These helpers read
a request through a small duck-typed reader (the peer's address, a header's values, the path), so
one helper serves every framework and none is imported here.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
"""An IPv4 or IPv6 address (``ipaddress``)."""
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
"""An IPv4 or IPv6 network (``ipaddress``), e.g. a range of trusted proxies."""
KeyFunction = Callable[[Any], Any]
"""A key function: ``key(request)`` returns the key the request counts against."""

MAX_HOPS = 64
"""``client_ip`` walks at most this many hops of a forwarding header, from the right (the nearest
proxy first)."""
MAX_HOP_LENGTH = 1024
"""A hop (an ``X-Forwarded-For`` entry, a ``Forwarded`` element) longer than this many characters is
no address: the walk ends there. Hops are read from the header's right end, so however long the
rest of the header (padding a client wrote to the left of what the proxies appended), only the few
hops the walk needs are read: at most ``MAX_HOPS`` of at most this length."""
_UNKNOWN = "unknown"


# ---- readers: the few things a key needs from any framework's request ----
def environ_of(request: Any) -> dict[str, Any] | None:
    """The WSGI environ a request is: the environ itself, or a Django ``HttpRequest``'s ``META``
    (its environ, with ``REMOTE_ADDR`` and the ``HTTP_*`` headers); None for other requests."""
    if isinstance(request, dict):
        return request
    meta = getattr(request, "META", None)
    return meta if isinstance(meta, dict) else None


def peer_of(request: Any) -> str | None:
    """The direct peer's address: Starlette's ``request.client.host``, aiohttp's ``request.remote``,
    a WSGI environ's ``REMOTE_ADDR`` (Flask's ``request.remote_addr``, Django's ``META``)."""
    environ = environ_of(request)
    if environ is not None:
        return environ_peer(environ)
    client = getattr(request, "client", None)
    if client is not None:
        host = getattr(client, "host", None)
        return host if isinstance(host, str) else None
    remote = getattr(request, "remote", None)
    if remote is None:
        remote = getattr(request, "remote_addr", None)  # werkzeug (Flask)
    return remote if isinstance(remote, str) else None


def header_values(request: Any, name: str) -> list[str]:
    """Every value of header ``name`` (each line once), in the order received."""
    environ = environ_of(request)
    if environ is not None:
        return environ_header_values(environ, environ_name(name))
    headers = getattr(request, "headers", None)
    if headers is None:
        return []
    for method in ("getlist", "getall", "get_list"):  # Starlette, aiohttp (multidict), httpx
        get = getattr(headers, method, None)
        if get is not None:
            values = get(name, []) if method == "getall" else get(name)
            return [v for v in values if isinstance(v, str)]
    value = headers.get(name) if hasattr(headers, "get") else None
    return [value] if isinstance(value, str) else []


def path_of(request: Any) -> str:
    """The request's path: ``request.path`` (aiohttp, Flask, Django), ``request.url.path``
    (Starlette, httpx), a WSGI environ's ``SCRIPT_NAME`` and ``PATH_INFO``, or
    ``request.scope["path"]``; ``""`` when none is found."""
    if isinstance(request, dict):  # a WSGI environ: the URL's path, as Starlette's url.path
        return str(request.get("SCRIPT_NAME", "")) + str(request.get("PATH_INFO", ""))
    path = getattr(request, "path", None)  # aiohttp, werkzeug
    if isinstance(path, str):
        return path
    url = getattr(request, "url", None)  # Starlette, httpx
    path = getattr(url, "path", None)
    if isinstance(path, str):
        return path
    scope = getattr(request, "scope", None)
    return str(scope.get("path", "")) if isinstance(scope, dict) else ""


def scope_header_values(scope: Any, name: bytes) -> list[str]:
    """Every value of header ``name`` (lowercase bytes) in an ASGI scope, decoded as Starlette
    decodes them (latin-1), in the order received."""
    return [value.decode("latin-1") for key, value in scope.get("headers") or () if key == name]


def scope_peer(scope: Any) -> str | None:
    """The direct peer's address in an ASGI scope (what Starlette's ``request.client.host`` reads)."""
    client = scope.get("client")
    host = client[0] if client else None
    return host if isinstance(host, str) else None


def environ_name(name: str) -> str:
    """The key of header ``name`` in a WSGI environ (PEP 3333: CGI's names)."""
    upper = name.upper().replace("-", "_")
    return upper if upper in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + upper


def environ_header_values(environ: Any, key: str) -> list[str]:
    """The value of a header in a WSGI environ (``key`` from ``environ_name``), as a list: the
    server has joined the header's lines with commas already."""
    value = environ.get(key)
    return [value] if isinstance(value, str) else []


def environ_peer(environ: Any) -> str | None:
    """The direct peer's address in a WSGI environ (``REMOTE_ADDR``; empty when the server knows
    none, as over a UNIX socket)."""
    peer = environ.get("REMOTE_ADDR")
    return peer if isinstance(peer, str) and peer else None


# ---- address parsing ----
def _address(text: str) -> IPAddress | None:
    # No address is this long (bracketed IPv6 with a port and a zone included); refusing longer
    # text first also keeps an attacker's long hops out of the cache below.
    return None if len(text) > 100 else _parse_address(text)


@functools.lru_cache(maxsize=4096)  # the same few peers and proxies come back: ipaddress parses slowly
def _parse_address(text: str) -> IPAddress | None:
    """An address from a peer string or a forwarding hop: brackets, a port and an IPv6 zone are
    dropped; an IPv4-mapped IPv6 address is its IPv4 address. None when it is no address
    ("unknown", an obfuscated ``_name``, garbage)."""
    text = text.strip().strip('"').strip()
    if text.startswith("["):  # "[2001:db8::1]:4711"
        end = text.find("]")
        if end < 0:
            return None
        text = text[1:end]
    elif text.count(":") == 1:  # "192.0.2.1:4711"
        text = text.split(":", 1)[0]
    text = text.split("%", 1)[0]  # a zone (fe80::1%eth0) says nothing about the client
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@functools.lru_cache(maxsize=4096)
def _peer_key(peer: str, ipv6_prefix: int | None) -> str:
    """The key of a peer whose forwarding headers are not trusted: its address, or what the server
    calls it when that is no address (a unix socket, a test client)."""
    address = _address(peer)
    return peer if address is None else _key_text(address, ipv6_prefix)


@functools.lru_cache(maxsize=4096)
def _key_text(address: IPAddress, ipv6_prefix: int | None) -> str:
    if ipv6_prefix is not None and address.version == 6:
        return str(ipaddress.ip_network((address, ipv6_prefix), strict=False))
    return str(address)


def _split_outside_quotes(text: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def _xff_hops(lines: list[str]) -> Iterator[str | None]:
    """The hops of ``X-Forwarded-For``, from the right (its last line first). Each step searches
    at most ``MAX_HOP_LENGTH`` characters: a longer hop is given as ``""`` (no address) and ends
    the hops, so the work is bounded whatever the header's length."""
    for line in reversed(lines):
        end = len(line)
        while True:
            low = max(0, end - MAX_HOP_LENGTH)
            comma = line.rfind(",", low, end)
            if comma < 0 and low > 0:
                yield ""
                return
            yield line[comma + 1 : end].strip()
            if comma < 0:
                break
            end = comma


def _forwarded_element_start(line: str, end: int) -> int:
    """Where the RFC 7239 element ending at ``end`` starts (the index after its ``,``, 0 for the
    line's first), read backwards with quoted strings kept whole; -1 when it is longer than
    ``MAX_HOP_LENGTH``. Read from the right, a quote opens a quoted string, and closes it unless
    an odd number of backslashes escapes it."""
    low = max(0, end - MAX_HOP_LENGTH)
    quoted = False
    i = end - 1
    while i >= low:
        char = line[i]
        if char == '"':
            if not quoted:
                quoted = True
            else:
                j = i - 1
                while j >= low and line[j] == "\\":
                    j -= 1
                if (i - 1 - j) % 2 == 0:
                    quoted = False
        elif char == "," and not quoted:
            return i + 1
        i -= 1
    return 0 if low == 0 else -1


def _for_node(element: str) -> str | None:
    """The ``for=`` node of one ``Forwarded`` element (None when it has none)."""
    node = None
    for pair in _split_outside_quotes(element, ";"):
        name, sep, value = pair.partition("=")
        if sep and name.strip().lower() == "for":
            node = value.strip()
    return node


def _forwarded_hops(lines: list[str]) -> Iterator[str | None]:
    """The ``for=`` node of each element of RFC 7239 ``Forwarded``, from the right (None for an
    element without one; ``""``, no address, for one too long, which ends the hops)."""
    for line in reversed(lines):
        end = len(line)
        while True:
            start = _forwarded_element_start(line, end)
            if start < 0:
                yield ""
                return
            yield _for_node(line[start:end])
            if start == 0:
                break
            end = start - 1


def _networks(trusted_proxies: object) -> tuple[IPNetwork, ...]:
    if isinstance(
        trusted_proxies,
        str | ipaddress.IPv4Address | ipaddress.IPv6Address | ipaddress.IPv4Network | ipaddress.IPv6Network,
    ):
        trusted_proxies = (trusted_proxies,)
    if not isinstance(trusted_proxies, Iterable):
        raise TypeError(f"trusted_proxies must be addresses or networks, got {type(trusted_proxies).__name__}")
    networks: list[IPNetwork] = []
    for item in trusted_proxies:
        if not isinstance(
            item, str | ipaddress.IPv4Address | ipaddress.IPv6Address | ipaddress.IPv4Network | ipaddress.IPv6Network
        ):
            raise TypeError(f"trusted_proxies holds {type(item).__name__}, not an address or network")
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError as exc:
            raise ValueError(f"trusted_proxies: {item!r} is not an IP address or network ({exc})") from None
    return tuple(networks)


FORWARDING_HEADERS = ("x-forwarded-for", "forwarded")
"""The forwarding headers ``client_ip`` can read (its ``header``), by their lowercase names."""


def _forwarding_header(header: object) -> str:
    if not isinstance(header, str):
        raise TypeError(f"header must be a str ('x-forwarded-for' or 'forwarded'), got {type(header).__name__}")
    name = header.strip().lower()
    if name not in FORWARDING_HEADERS:
        raise ValueError(f"header must be 'x-forwarded-for' or 'forwarded', got {header!r}")
    return name


class _ClientIP:
    """The callable ``client_ip`` returns (a class so that its options show in its repr)."""

    __slots__ = ("_environ_header", "_forwarded", "_header", "_ipv6_prefix", "_raw_header", "_trusted")

    def __init__(self, trusted_proxies: object, ipv6_prefix: object, header: object) -> None:
        self._trusted = _networks(trusted_proxies)
        if ipv6_prefix is not None:
            if isinstance(ipv6_prefix, bool) or not isinstance(ipv6_prefix, int):
                raise TypeError(f"ipv6_prefix must be an int or None, got {type(ipv6_prefix).__name__}")
            if not 1 <= ipv6_prefix <= 128:
                raise ValueError(f"ipv6_prefix must be between 1 and 128, got {ipv6_prefix}")
        self._ipv6_prefix = ipv6_prefix
        self._header = _forwarding_header(header)
        self._raw_header = self._header.encode("ascii")
        self._environ_header = environ_name(self._header)
        self._forwarded = self._header == "forwarded"

    def _is_trusted(self, address: IPAddress) -> bool:
        return any(address.version == net.version and address in net for net in self._trusted)

    def _key(self, address: IPAddress) -> str:
        return _key_text(address, self._ipv6_prefix)

    def from_lines(self, peer: str | None, lines: list[str]) -> str:
        """The key from the peer and the lines of the one forwarding header this key reads: the
        framework-neutral core."""
        address = _address(peer) if peer is not None else None
        if address is None:
            return peer or _UNKNOWN  # a unix socket, a test client: whatever the server calls its peer
        if not self._trusted or not self._is_trusted(address):
            return self._key(address)  # headers from an untrusted peer are the client's own words
        if not lines:
            return self._key(address)
        # From the right: each trusted proxy vouches for the hop before it; the first hop that is
        # not a trusted proxy is the client. A hop that is no address ends the walk at the last
        # address that a trusted proxy reported (never a spoofable one further left). The hops are
        # read lazily from the right end: a client padding the header's left part, however long,
        # cannot push what our proxies appended out of reach.
        hops = _forwarded_hops(lines) if self._forwarded else _xff_hops(lines)
        for hop in itertools.islice(hops, MAX_HOPS):
            if hop is None:
                # An element without for= (`proto=https` alone) names nobody: the proxy that wrote
                # it did not say who connected, and whatever lies further left is the client's own
                # word. Not the proxy's key either, which would put every such client in one.
                return _UNKNOWN
            hop_address = _address(hop)
            if hop_address is None:
                return self._key(address)
            address = hop_address
            if not self._is_trusted(address):
                return self._key(address)
        return self._key(address)  # every hop a proxy of ours: the left-most one

    def from_scope(self, scope: Any) -> str:
        """The same key read straight from an ASGI scope: the middleware's path, which builds no
        request object for it."""
        client = scope.get("client")  # (scope_peer's reading, inline: on every request)
        peer = client[0] if client else None
        if not (peer and isinstance(peer, str)):
            peer = None
        if not self._trusted:
            return _UNKNOWN if peer is None else _peer_key(peer, self._ipv6_prefix)
        return self.from_lines(peer, scope_header_values(scope, self._raw_header))

    def from_environ(self, environ: Any) -> str:
        """The same key read straight from a WSGI environ (what ``permits.wsgi`` passes)."""
        peer = environ.get("REMOTE_ADDR")  # (environ_peer's reading, inline: on every request)
        if not (peer and isinstance(peer, str)):
            peer = None
        if not self._trusted:
            return _UNKNOWN if peer is None else _peer_key(peer, self._ipv6_prefix)
        return self.from_lines(peer, environ_header_values(environ, self._environ_header))

    def __call__(self, request: Any) -> str:
        environ = environ_of(request)
        if environ is not None:
            return self.from_environ(environ)
        try:
            lines = header_values(request, self._header) if self._trusted else []
        except (UnicodeError, ValueError):  # undecodable header bytes: ignore them, as malformed
            lines = []
        return self.from_lines(peer_of(request), lines)

    def __repr__(self) -> str:
        proxies = tuple(str(n) for n in self._trusted)
        return f"client_ip(trusted_proxies={proxies!r}, ipv6_prefix={self._ipv6_prefix!r}, header={self._header!r})"


def client_ip(
    trusted_proxies: Iterable[str | IPAddress | IPNetwork] | str = (),
    ipv6_prefix: int | None = 64,
    *,
    header: str = "x-forwarded-for",
) -> KeyFunction:
    """A key function: the client's IP address, as a string.

    Without ``trusted_proxies`` it is the direct peer's address. With them (addresses or CIDR
    networks), when the peer is one of them, the client is read from ``header``, the one header
    your proxy writes: ``"x-forwarded-for"`` (the default; nginx's ``$proxy_add_x_forwarded_for``,
    most load balancers) or ``"forwarded"`` (RFC 7239), case-insensitive. The other header is
    ignored: a proxy passes it through from the client, who can write anything in it. The client
    is the right-most hop that is not a trusted proxy. Headers sent by any other peer are ignored;
    malformed headers never raise, the peer is used instead; a header of any length is read from
    its right end, only as far as the walk needs. IPv6 clients are keyed by their
    ``ipv6_prefix`` network, a /64 by default (one subscriber usually holds a whole /64 and could
    otherwise take a new address, and a new key, for every request); ``None`` keys each IPv6
    address alone. An IPv4-mapped IPv6 address (``::ffff:192.0.2.1``) is its IPv4 address.
    """
    return _ClientIP(trusted_proxies, ipv6_prefix, header)


class _Header:
    __slots__ = ("_fallback", "_name", "_raw_name")

    def __init__(self, name: object, fallback: object) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str, got {name!r}")
        if fallback is not None and not callable(fallback):
            raise TypeError(f"fallback must be callable or None, got {type(fallback).__name__}")
        self._name = name.lower()
        self._raw_name = self._name.encode("latin-1", "replace")
        self._fallback: KeyFunction | None = fallback

    def _key(self, values: list[str]) -> tuple[str, str] | None:
        # The value is tagged with the header's name: a client writing a victim's address (or
        # any other key the fallback makes) in the header gets a key of its own, not the victim's.
        value = values[0].strip() if values else ""
        return (self._name, value) if value else None  # empty or blank: as if absent

    def from_scope(self, scope: Any, request: Callable[[], Any]) -> Any:
        """The same key read straight from an ASGI scope; ``request()`` makes the framework's
        request for a fallback that needs one. An async fallback's awaitable is returned as is."""
        found = self._key(scope_header_values(scope, self._raw_name))
        if found is not None:
            return found
        fallback = self._fallback
        if fallback is None:
            return None
        if isinstance(fallback, _ClientIP):
            return fallback.from_scope(scope)
        return fallback(request())

    def __call__(self, request: Any) -> Any:
        try:
            values = header_values(request, self._name)
        except (UnicodeError, ValueError):
            values = []
        found = self._key(values)
        if found is not None:
            return found
        return None if self._fallback is None else self._fallback(request)

    def __repr__(self) -> str:
        return f"header({self._name!r}, fallback={self._fallback!r})"


_DEFAULT = client_ip()


def header(name: str, fallback: KeyFunction | None = _DEFAULT) -> KeyFunction:
    """A key function: the value of header ``name`` (an API key, a tenant id) as the key
    ``(name, value)``, ``name`` in lowercase; without the header, or with an empty or blank value,
    ``fallback(request)`` (by default the client's IP address; None keys such requests None; an
    async fallback is awaited). The name in the key keeps the kinds apart: a header's value is
    never the same key as a client's address, or another header's value."""
    return _Header(name, fallback)


def _path(request: Any) -> str:
    return path_of(request)


def path() -> KeyFunction:
    """A key function: the request's path (one limit per endpoint URL, shared by every client)."""
    return _path


__all__ = ["client_ip", "header", "path"]
