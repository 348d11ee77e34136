"""A Redis store's changed limits (``reconfigure``): one hash ``<prefix>rules`` whose field per
limiter name is its record, ``"<gen> <base> <sig>"`` (rules.Record). One key, hence one Cluster slot:
a process reads the records of all its names in one round trip (followed_rules.py). No expiry: a
changed limit holds until changed again. Never part of a step (a per-key state is in another slot).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import redis.exceptions

from .rules import Record, made_from_another_base, parse_record

# KEYS[1] the records' hash; ARGV: the name, the base its states were made with, the new signature.
# A record made from another base is not this limiter's to change: {0, its base}. Else {gen, base}.
PUBLISH = """
local v = redis.call('HGET', KEYS[1], ARGV[1])
local gen = 0
if v then
  local g, b = string.match(v, '^(%d+) (%S+) ')
  if b ~= ARGV[2] then return {0, b or v} end
  gen = tonumber(g)
end
gen = gen + 1
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d %s %s', gen, ARGV[2], ARGV[3]))
return {gen, ARGV[2]}
"""
PUBLISH_SHA = hashlib.sha1(PUBLISH.encode()).hexdigest()


def field(name: str) -> bytes:
    return name.encode("utf-8", "surrogatepass")


def reading(client: Any, script: object, keys: Sequence[bytes], args: Sequence[bytes | str]) -> Any:
    return client.hmget(keys[0], list(args))


async def reading_async(client: Any, script: object, keys: Sequence[bytes], args: Sequence[bytes | str]) -> Any:
    return await client.hmget(keys[0], list(args))


def publishing(client: Any, script: object, keys: Sequence[bytes], args: Sequence[bytes | str]) -> Any:
    try:
        return client.evalsha(PUBLISH_SHA, 1, keys[0], *args)
    except redis.exceptions.NoScriptError:
        return client.eval(PUBLISH, 1, keys[0], *args)


async def publishing_async(client: Any, script: object, keys: Sequence[bytes], args: Sequence[bytes | str]) -> Any:
    try:
        return await client.evalsha(PUBLISH_SHA, 1, keys[0], *args)
    except redis.exceptions.NoScriptError:
        return await client.eval(PUBLISH, 1, keys[0], *args)


def records(names: Sequence[str], reply: Sequence[Any]) -> dict[str, Record | None]:
    return {name: parse_record(value) for name, value in zip(names, reply, strict=True)}


def published(name: str, base: str, sig: str, reply: Sequence[Any]) -> Record:
    gen = int(reply[0])
    if gen == 0:
        stored = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
        raise made_from_another_base(name, stored, base, "a prefix")
    return Record(gen, base, sig)
