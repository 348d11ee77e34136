"""The servers the store tests run against (tests/python/_servers)."""

from _servers.postgres import *  # noqa: F403
