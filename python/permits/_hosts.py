"""The clients' default key: a request's host, written one way whatever way the URL wrote it.

``Example.COM``, ``example.com`` and ``example.com.`` (the fully qualified form) name one host;
``::ffff:127.0.0.1`` (an IPv4 address mapped into IPv6) is ``127.0.0.1``; an IPv6 address is
written compressed and in lower case, as ``ipaddress`` writes it. The port is not part of the key,
so a scheme's default port written out (``http://host:80/``) or left out is the same key. Without
this, each spelling would get a limit of its own and a server would see the sum of them.
"""

from __future__ import annotations

import ipaddress


def host_key(host: str) -> str:
    """The key of ``host`` (as ``httpx.URL.host`` or ``yarl.URL.host`` gives it: no brackets)."""
    name = host.lower()
    if name.endswith(".") and name != ".":
        name = name[:-1]
    if ":" not in name:  # a name or an IPv4 address: nothing else to rewrite
        return name
    # (httpx leaves a zone identifier percent-encoded, yarl decodes it)
    try:
        address = ipaddress.IPv6Address(name.replace("%25", "%"))
    except ValueError:
        return name
    mapped = address.ipv4_mapped
    return str(mapped) if mapped is not None else str(address)
