"""Real servers for the store tests, each started on a free loopback port in a temporary directory
(import the fixtures into a conftest.py)."""

from .redis import own_redis, redis_cluster, redis_sentinel, redis_server

__all__ = ["own_redis", "redis_cluster", "redis_sentinel", "redis_server"]
