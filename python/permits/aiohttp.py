"""aiohttp integrations (``pip install permits[aiohttp]``): the server's middleware and handler
decorator, and a client session that waits for permits."""

from __future__ import annotations

from ._aiohttp_client import RateLimitedSession
from ._aiohttp_server import limit, rate_limit_middleware

__all__ = ["RateLimitedSession", "limit", "rate_limit_middleware"]
