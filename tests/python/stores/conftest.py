"""The store tests: their servers are fixtures of tests/python/conftest.py (tests/python/_servers)."""

import importlib.util
import os

# Without a client library (pip install "redis>=5", "psycopg[binary]>=3.2") its tests cannot even be
# imported: outside CI they are not collected; under CI they are, and fail.
collect_ignore_glob = []
if os.environ.get("CI") != "true":
    if importlib.util.find_spec("redis") is None:
        collect_ignore_glob.append("test_redis_*.py")
    if importlib.util.find_spec("psycopg") is None:
        collect_ignore_glob.append("test_postgres_*.py")
