"""The store tests' servers (tests/python/_servers)."""

import importlib.util
import os

from _servers.postgres import *  # noqa: F403

if importlib.util.find_spec("redis") is None and os.environ.get("CI") != "true":
    # redis-py (pip install "redis>=5") is missing: the Redis tests cannot even be imported.
    # Under CI they are collected anyway, and fail.
    collect_ignore_glob = ["test_redis_*.py"]
else:
    from _servers.redis import *  # noqa: F403
