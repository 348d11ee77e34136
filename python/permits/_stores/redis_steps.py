"""The Redis backend's steps as the server runs them: each operation's Lua (redis_scripts.py) as a
function of the library and as a script, and what the server's error replies say about them."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, NamedTuple

import redis.exceptions

from . import redis_scripts

Keys = tuple[bytes, ...]  # a state's hash and its second key (only the hash: the fixed window's take)


class Script(NamedTuple):
    source: str
    sha: str
    function: str  # its name in the library


def script(op: str, source: str) -> Script:
    return Script(source, hashlib.sha1(source.encode()).hexdigest(), redis_scripts.FUNCTIONS[op])


TAKE = script("take", redis_scripts.TAKE)
TAKE_BATCH = script("take_batch", redis_scripts.TAKE_BATCH)
REFUND = script("refund", redis_scripts.REFUND)
RENEW = script("renew", redis_scripts.RENEW)
AVAILABLE = script("available", redis_scripts.AVAILABLE)
UNUSED = script("unused", redis_scripts.UNUSED)
#: The fixed window's take on its own (one key, six arguments): redis_fw_lua.FW_TAKE_LUA.
FW_TAKE = script("fw_take", redis_scripts.FW_TAKE)


def no_functions(exc: redis.exceptions.ResponseError) -> bool:
    """The server has no FUNCTION/FCALL (Redis < 7), or this user may not use them."""
    text = str(exc)
    return isinstance(exc, redis.exceptions.NoPermissionError) or text.startswith("unknown command")


def function_missing(exc: redis.exceptions.ResponseError) -> bool:
    """FCALL of a function the server does not have (never loaded, FUNCTION FLUSH, a restart)."""
    return str(exc).startswith("Function not found")


def already_loaded(exc: redis.exceptions.ResponseError) -> bool:
    """FUNCTION LOAD of the library another client loaded first (its name is its code's hash)."""
    return str(exc).endswith("already exists")


#: Seconds between two attempts of a step whose Cluster slot is moving (TRYAGAIN).
TRY_AGAIN_PAUSE = 0.02


def moving(exc: BaseException) -> bool:
    """A Cluster slot on the move: TRYAGAIN, or redis-py's retries of it run out ("TTL exhausted")."""
    return isinstance(exc, redis.exceptions.TryAgainError) or str(exc).startswith("TTL exhausted")


def deleting(client: Any, script: Script, keys: Keys, args: Sequence[bytes | str]) -> Any:
    """How reset() sends its step: a DEL of the state's keys (one slot: they share a hash tag)."""
    return client.delete(*keys)


async def deleting_async(client: Any, script: Script, keys: Keys, args: Sequence[bytes | str]) -> Any:
    return await client.delete(*keys)


def shown(name: object) -> str:
    text = repr(name)
    return text if len(text) <= 80 else text[:77] + "..."


def text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
