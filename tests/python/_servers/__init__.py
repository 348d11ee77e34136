"""Real servers for the store tests, as pytest fixtures (import them into a conftest.py)."""

from .redis import own_redis, redis_cluster, redis_sentinel, redis_server

__all__ = ["own_redis", "redis_cluster", "redis_sentinel", "redis_server"]
