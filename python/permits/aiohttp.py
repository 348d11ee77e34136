"""aiohttp integrations (``pip install permits[aiohttp]``): the server's middleware and handler
decorator; the client side lives here too."""

from __future__ import annotations

from ._aiohttp_server import limit, rate_limit_middleware

__all__ = ["limit", "rate_limit_middleware"]
