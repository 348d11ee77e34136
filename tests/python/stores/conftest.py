"""The store tests' servers (tests/python/_servers)."""

from _servers.redis import *  # noqa: F403
