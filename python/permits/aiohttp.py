"""aiohttp integration: ``import permits.aiohttp`` (needs the ``aiohttp`` extra)."""

from ._aiohttp_client import RateLimitedSession

__all__ = ["RateLimitedSession"]
