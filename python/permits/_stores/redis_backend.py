"""The store limiters' backend on Redis: each step one Lua function (redis_scripts.py). A single
server or Sentinel-managed master runs the steps as Redis Functions (FCALL; the library is loaded by
FUNCTION LOAD where the server answers "Function not found": a restart, FUNCTION FLUSH, a new server).
Servers without FUNCTION (Redis < 7, or a user not allowed it) and Cluster clients run them as
scripts by EVALSHA, loaded again (EVAL) where the server answers NOSCRIPT: redis-py asks a Cluster node
for an FCALL's keys (COMMAND GETKEYS) before every call, a second round trip, while it reads an
EVALSHA's keys itself.

Keys: a name's state is a hash ``<prefix>{<tag>}:<name>`` and, for the sliding window and
concurrency, a second key ``<prefix>{<tag>}~<name>``. ``<tag>`` is 16 hex digits of a hash of the
name: both keys share one Cluster slot, different names spread over the slots, and the name itself
(any bytes) is never part of the tag, so braces in it change nothing. Names and lease ids are
passed in KEYS and ARGV, never into Lua source.

Stamps are the engine's tags: where a grant was counted, so that a refund does what the engine's
does. A plain client's steps are written onto its pooled connections by redis_wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import threading
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import redis.asyncio.cluster
import redis.exceptions

from .._forking import AfterFork, keep_inherited
from ..errors import BackendError
from . import redis_eviction, redis_replicas, redis_rules, redis_scripts, redis_soon
from .backend import Backend, Outcome
from .batch import Batch, Batching
from .deadlines import Deadlines
from .redis_clients import (
    UNAVAILABLE,
    Bounded,
    bounded_sync_client,
    discover_slots,
    is_async_client,
    unavailable_reason,
)
from .redis_steps import (
    AVAILABLE,
    FW_TAKE,
    REFUND,
    RENEW,
    TAKE,
    TAKE_BATCH,
    TRY_AGAIN_PAUSE,
    UNUSED,
    Keys,
    Script,
    already_loaded,
    deleting,
    deleting_async,
    function_missing,
    moving,
    no_functions,
    shown,
    text,
)
from .redis_wire import execute, execute_async
from .rules import KINDS, Record, Rule
from .soon import Undo

Name = str | bytes

#: How many names' keys, and rules' arguments, a backend keeps made (a limiter steps on one name
#: and rule again and again; a per-key store's names come and go: past this many, the kept ones
#: are dropped all at once). Only names up to _KEPT_NAME long are kept (a few MB at most).
_KEPT = 10_000
_KEPT_NAME = 256
#: A key lives at most this long (~31,700 years): a rule's lifetime may pass what PEXPIRE takes
#: (2**31 - 1 tokens, one every 2**61 ns), and a Lua number stays exact below 2**53.
_MAX_TTL_MS = 10**15


def _name_bytes(name: object) -> bytes:
    if isinstance(name, str):
        return name.encode("utf-8", "surrogatepass")  # any str, lone surrogates included
    if isinstance(name, bytes | bytearray | memoryview):
        return bytes(name)
    raise TypeError(f"name must be str or bytes, got {type(name).__name__}")


def _forked(backend: RedisBackend) -> None:
    """A thread of the parent (the renewal's, the eviction check's) may have been inside the
    bounded client's pool at the fork: the child's copy of its lock stays held, and redis-py's
    after-fork reset of the pool takes that lock (the child's first command would hang). The child
    builds clients of its own instead (the copy is kept unused), and a lock of its own to build them under."""
    backend._lock = threading.Lock()
    backend._pipelines = redis_soon.pipelines()  # (the parent's loops' steps are not the child's)
    if backend._bounded is not None:
        keep_inherited(backend._bounded)
        backend._bounded = None


_BACKENDS: AfterFork[RedisBackend] = AfterFork(_forked)


class _Made(NamedTuple):
    """A rule's constant arguments, made once (with the key_margin_ms they were made with)."""

    margin: int
    head: list[bytes]  # ARGV[1..6]
    lease_ttl: bytes
    fw_head: bytes  # the fixed window's take: "<signature> <key ttl>[ <changed limit>]"


class RedisBackend:
    """The ``Backend`` of a Redis server, Cluster or Sentinel-managed
    master. ``client`` is a redis-py client, sync or asyncio (``is_async``); ``prefix`` starts every
    key (no braces: they would change the Cluster slot); no call waits longer than ``timeout``
    seconds, whatever the client's own timeouts (``permits.BackendError`` instead)."""

    #: How long a key outlives its rule's lifetime (rounding to ms, slack). Tests whose clock is a
    #: ManualClock raise it: there a rule's lifetime says nothing about the real time between steps.
    key_margin_ms: int = 1000

    def __init__(
        self, client: Any, *, prefix: str = "permits:", timeout: float = 1.0, wait_replicas: int | None = None
    ) -> None:
        self.is_async: bool | None = is_async_client(client)
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
        if "{" in prefix or "}" in prefix:
            raise ValueError(f"prefix must not contain '{{' or '}}' (a Cluster hash tag), got {prefix!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise TypeError(f"timeout must be a number of seconds, got {type(timeout).__name__}")
        if not (timeout > 0 and math.isfinite(timeout)):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self._client = client
        self._prefix = prefix.encode()
        self._rules_key = self._prefix + b"rules"  # (no brace: never a state's key)
        self._timeout = float(timeout)
        self._bounded: Bounded | None = None  # built at the first sync step (a Cluster's connects)
        self._lock = threading.Lock()
        #: asyncio Cluster clients: the lock under which one task per loop makes it learn the slots.
        self._discovery: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        # What each step would otherwise make again: a name's keys, a rule's constant arguments
        # (with the key_margin_ms they were made with).
        self._keys_made: dict[Name, Keys] = {}
        self._rules_made: dict[Rule, _Made] = {}
        self._eviction_asked = False  # (the server's maxmemory-policy, asked once: redis_eviction)
        #: Whether steps run as Redis Functions (FCALL) rather than scripts (EVALSHA): not for a
        #: Cluster client (see the module's doc), nor once the server has refused FUNCTION/FCALL.
        self._functions = not isinstance(client, redis.cluster.RedisCluster | redis.asyncio.cluster.RedisCluster)
        self._eviction_task: asyncio.Task[None] | None = None
        self._deadlines = Deadlines(self._timeout)  # (asyncio steps)
        #: Grants wait for this many replicas (redis_replicas), WAIT waiting at most _wait_ms.
        self._replicas = redis_replicas.check_wait_replicas(wait_replicas)
        self._wait_ms = redis_replicas.wait_ms(self._timeout)
        self._waiting_ready: set[str] = set()  # the scripts whose function or script was loaded
        self._pipelines = redis_soon.pipelines()  # (asyncio takes of a plain client, per loop)
        _BACKENDS.add(self)

    # ---- the steps ----

    def take(self, name: Name, rule: Rule, n: int, lease_id: str | None, now_ns: int | None) -> Outcome:
        self._sync_only("take")
        if rule.kind == "fixed_window" and not self._replicas:
            keys, args = self._fw_args(name, rule, n, now_ns)
            return self._outcome(name, rule, self._run(FW_TAKE, keys, args))
        keys, args = self._take_args(name, rule, n, lease_id, now_ns)
        if not self._replicas:
            return self._outcome(name, rule, self._run(TAKE, keys, args))
        reply, acked = self._run(TAKE, keys, args, self._call_waiting)
        out = self._outcome(name, rule, reply)
        if out.granted and acked < self._replicas:
            if n:
                with contextlib.suppress(BackendError):  # (then the master keeps it: never counted twice)
                    self.refund(name, rule, n, out.stamp, lease_id, now_ns)
            raise redis_replicas.unreplicated(acked, self._replicas, self._wait_ms)
        return out

    def take_batch(self, name: Name, rule: Rule, n: int, most: int, now_ns: int | None) -> Batch:
        """A batch of ``n`` to ``most`` permits (``permits._stores.batch``): time-based kinds."""
        self._sync_only("take_batch")
        keys, args = self._batch_args(name, rule, n, most, now_ns)
        if not self._replicas:
            return self._batch(name, rule, self._run(TAKE_BATCH, keys, args))
        reply, acked = self._run(TAKE_BATCH, keys, args, self._call_waiting)
        batch = self._batch(name, rule, reply)
        if batch.granted and acked < self._replicas:
            if batch.taken:
                with contextlib.suppress(BackendError):
                    self.refund(name, rule, batch.taken, batch.stamp, None, now_ns)
            raise redis_replicas.unreplicated(acked, self._replicas, self._wait_ms)
        return batch

    def refund(self, name: Name, rule: Rule, n: int, stamp: int, lease_id: str | None, now_ns: int | None) -> None:
        self._sync_only("refund")
        keys, args = self._refund_args(name, rule, n, stamp, lease_id, now_ns)
        self._check(name, rule, self._run(REFUND, keys, args))

    def give_back_unused(self, name: Name, rule: Rule, n: int, stamp: int, now_ns: int | None) -> None:
        """Permits of a batch never used (``permits._stores.batch``) leave the count where it still
        weighs them: a refund for the token bucket and the fixed window; the counter's window or,
        once it has passed, the previous window; the sliding window's segment while in the window."""
        if rule.kind not in ("sliding_window_counter", "sliding_window", "sliding_log"):
            return self.refund(name, rule, n, stamp, None, now_ns)
        self._sync_only("give_back_unused")
        keys, args = self._refund_args(name, rule, n, stamp, None, now_ns)
        self._check(name, rule, self._run(UNUSED, keys, args))
        return None

    async def give_back_unused_async(self, name: Name, rule: Rule, n: int, stamp: int, now_ns: int | None) -> None:
        if rule.kind not in ("sliding_window_counter", "sliding_window", "sliding_log"):
            return await self.refund_async(name, rule, n, stamp, None, now_ns)
        self._async_only("give_back_unused_async")
        keys, args = self._refund_args(name, rule, n, stamp, None, now_ns)
        self._check(name, rule, await self._run_async(UNUSED, keys, args))
        return None

    def renew(self, name: Name, rule: Rule, lease_ids: list[str], now_ns: int | None) -> list[str]:
        self._sync_only("renew")
        keys, args = self._renew_args(name, rule, lease_ids, now_ns)
        return [text(lid) for lid in self._check(name, rule, self._run(RENEW, keys, args))[1:]]

    def available(self, name: Name, rule: Rule, now_ns: int | None) -> int:
        self._sync_only("available")
        keys, args = self.keys_of(name), self._rule_args(rule, now_ns)
        return int(self._check(name, rule, self._run(AVAILABLE, keys, args))[1])

    def reset(self, name: Name, rule: Rule) -> None:
        self._sync_only("reset")
        self._run(AVAILABLE, self.keys_of(name), (), deleting)

    async def reset_async(self, name: Name, rule: Rule) -> None:
        self._async_only("reset_async")
        await self._run_async(AVAILABLE, self.keys_of(name), (), deleting_async)

    async def take_async(self, name: Name, rule: Rule, n: int, lease_id: str | None, now_ns: int | None) -> Outcome:
        self._async_only("take_async")
        if rule.kind == "fixed_window" and not self._replicas:
            keys, args = self._fw_args(name, rule, n, now_ns)
            return self._outcome(name, rule, await self._run_async(FW_TAKE, keys, args))
        keys, args = self._take_args(name, rule, n, lease_id, now_ns)
        if not self._replicas:
            return self._outcome(name, rule, await self._run_async(TAKE, keys, args))
        reply, acked = await self._run_async(TAKE, keys, args, self._call_waiting_async)
        out = self._outcome(name, rule, reply)
        if out.granted and acked < self._replicas:
            if n:
                with contextlib.suppress(BackendError):
                    await self.refund_async(name, rule, n, out.stamp, lease_id, now_ns)
            raise redis_replicas.unreplicated(acked, self._replicas, self._wait_ms)
        return out

    def take_soon(
        self, name: Name, rule: Rule, n: int, lease_id: str | None, now_ns: int | None, undo: Undo
    ) -> asyncio.Future[Outcome]:
        self._async_only("take_soon")
        return redis_soon.take_soon(self, name, rule, n, lease_id, now_ns, undo)

    async def take_batch_async(self, name: Name, rule: Rule, n: int, most: int, now_ns: int | None) -> Batch:
        self._async_only("take_batch_async")
        keys, args = self._batch_args(name, rule, n, most, now_ns)
        if not self._replicas:
            return self._batch(name, rule, await self._run_async(TAKE_BATCH, keys, args))
        reply, acked = await self._run_async(TAKE_BATCH, keys, args, self._call_waiting_async)
        batch = self._batch(name, rule, reply)
        if batch.granted and acked < self._replicas:
            if batch.taken:
                with contextlib.suppress(BackendError):
                    await self.refund_async(name, rule, batch.taken, batch.stamp, None, now_ns)
            raise redis_replicas.unreplicated(acked, self._replicas, self._wait_ms)
        return batch

    async def refund_async(
        self, name: Name, rule: Rule, n: int, stamp: int, lease_id: str | None, now_ns: int | None
    ) -> None:
        self._async_only("refund_async")
        keys, args = self._refund_args(name, rule, n, stamp, lease_id, now_ns)
        self._check(name, rule, await self._run_async(REFUND, keys, args))

    async def renew_async(self, name: Name, rule: Rule, lease_ids: list[str], now_ns: int | None) -> list[str]:
        self._async_only("renew_async")
        keys, args = self._renew_args(name, rule, lease_ids, now_ns)
        return [text(lid) for lid in self._check(name, rule, await self._run_async(RENEW, keys, args))[1:]]

    async def available_async(self, name: Name, rule: Rule, now_ns: int | None) -> int:
        self._async_only("available_async")
        keys, args = self.keys_of(name), self._rule_args(rule, now_ns)
        return int(self._check(name, rule, await self._run_async(AVAILABLE, keys, args))[1])

    # ---- changed limits (redis_rules) ----

    def read_rules(self, names: Sequence[str]) -> dict[str, Record | None]:
        """The records of ``names`` (None: never changed), in one round trip."""
        self._sync_only("read_rules")
        fields = [redis_rules.field(name) for name in names]
        return redis_rules.records(names, self._run(TAKE, (self._rules_key,), fields, redis_rules.reading))

    async def read_rules_async(self, names: Sequence[str]) -> dict[str, Record | None]:
        self._async_only("read_rules_async")
        fields = [redis_rules.field(name) for name in names]
        reply = await self._run_async(TAKE, (self._rules_key,), fields, redis_rules.reading_async)
        return redis_rules.records(names, reply)

    def publish_rule(self, name: str, base: str, sig: str) -> Record:
        """Records ``sig`` as the rule of ``name``, whose states were made with ``base``."""
        self._sync_only("publish_rule")
        args: list[bytes | str] = [redis_rules.field(name), base, sig]
        reply = self._run(TAKE, (self._rules_key,), args, redis_rules.publishing)
        return redis_rules.published(name, base, sig, reply)

    async def publish_rule_async(self, name: str, base: str, sig: str) -> Record:
        self._async_only("publish_rule_async")
        args: list[bytes | str] = [redis_rules.field(name), base, sig]
        reply = await self._run_async(TAKE, (self._rules_key,), args, redis_rules.publishing_async)
        return redis_rules.published(name, base, sig, reply)

    def close(self) -> None:
        """Closes the connections of the sync client the backend built (not the given client)."""
        with self._lock:
            bounded, self._bounded = self._bounded, None
        if bounded is not None:
            bounded.close()

    # ---- keys and arguments ----

    def keys_of(self, name: Name) -> Keys:
        """The state's hash and its second key (the sliding window's list, the leases' zset)."""
        # a str or bytes is hashable, and equal only to itself
        kept = (type(name) is str or type(name) is bytes) and len(name) <= _KEPT_NAME
        keys = self._keys_made.get(name) if kept else None
        if keys is None:
            raw = _name_bytes(name)
            base = self._prefix + b"{" + hashlib.blake2b(raw, digest_size=8).hexdigest().encode() + b"}"
            keys = base + b":" + raw, base + b"~" + raw
            if kept:
                if len(self._keys_made) >= _KEPT:
                    self._keys_made.clear()
                self._keys_made[name] = keys
        return keys

    def _made(self, rule: Rule) -> _Made:
        made = self._rules_made.get(rule)
        if made is None or made.margin != self.key_margin_ms:
            made = self._rule_made(rule)
        return made

    @staticmethod
    def _now_arg(now_ns: int | None) -> bytes:
        if now_ns is None:
            return b""  # the server's TIME
        if isinstance(now_ns, int) and not isinstance(now_ns, bool) and now_ns >= 0:
            return b"%d" % now_ns
        raise ValueError(f"now_ns must be None or a non-negative int, got {now_ns!r}")

    def _rule_args(self, rule: Rule, now_ns: int | None) -> list[bytes]:
        """ARGV[1..8]: the rule's constants (made once per rule and key_margin_ms), the time among them."""
        made = self._made(rule)
        return [*made.head, self._now_arg(now_ns), made.lease_ttl]

    def _fw_args(self, name: Name, rule: Rule, n: int, now_ns: int | None) -> tuple[Keys, list[bytes | str]]:
        """The fixed window's take: KEYS[1] the state's hash; ARGV "<signature> <key ttl>", n, and
        the time unless it is the server's."""
        if n.__class__ is not int or not 0 <= n <= rule.limit:
            self._check_count(rule, n)
        head = self._made(rule).fw_head
        keys = (self.keys_of(name)[0],)
        if now_ns is None:
            return keys, [head, b"%d" % n]
        return keys, [head, b"%d" % n, self._now_arg(now_ns)]

    def _rule_made(self, rule: Rule) -> _Made:
        if rule.kind not in KINDS:
            raise ValueError(f"rule.kind must be one of {', '.join(KINDS)}, got {rule.kind!r}")
        if rule.kind == "concurrency" and rule.lease_ttl_ns <= 0:
            raise ValueError("a concurrency rule needs lease_ttl_ns > 0 (its leases' lifetime)")
        margin = self.key_margin_ms
        lifetime = rule.lifetime_ns
        if rule.kind == "fixed_window":
            # A fixed window's take sets the expiry when the window changes, not at every grant:
            # one window more keeps the key a lifetime past its last change (redis_fw_lua.FW_TAKE_LUA).
            lifetime += rule.period_ns
        ttl_ms = min(-(-lifetime // 1_000_000) + margin, _MAX_TTL_MS)
        head = [rule.signature, rule.kind, str(rule.limit), str(rule.period_ns), str(rule.amount), str(ttl_ms)]
        encoded = [arg.encode() for arg in head]
        fw_head = encoded[0] + b" " + encoded[5]
        if rule.base:  # a changed limit: the states' signature is the first one, the limit this one
            fw_head += b" " + encoded[2]
        made = _Made(margin, encoded, str(rule.lease_ttl_ns).encode(), fw_head)
        if len(self._rules_made) >= _KEPT:
            self._rules_made.clear()
        self._rules_made[rule] = made
        return made

    def _take_args(
        self, name: Name, rule: Rule, n: int, lease_id: str | None, now_ns: int | None
    ) -> tuple[Keys, list[bytes | str]]:
        self._check_count(rule, n)
        args: list[bytes | str] = [*self._rule_args(rule, now_ns), b"%d" % n]
        if rule.kind == "concurrency":
            if lease_id is not None:
                args.append(lease_id)
            elif n > 0:
                raise ValueError("a concurrency take needs a lease_id (its lease is recorded under it)")
        return self.keys_of(name), args

    def _batch_args(
        self, name: Name, rule: Rule, n: int, most: int, now_ns: int | None
    ) -> tuple[Keys, list[bytes | str]]:
        if not rule.timed:
            raise ValueError("take_batch takes time-based permits only: a concurrency lease is its holder's")
        self._check_count(rule, n)
        if isinstance(most, bool) or not isinstance(most, int) or not max(n, 1) <= most <= rule.limit:
            raise ValueError(f"most must be an int from max(n, 1) to the rule's limit {rule.limit}, got {most!r}")
        return self.keys_of(name), [*self._rule_args(rule, now_ns), b"%d" % n, b"%d" % most]

    def _refund_args(
        self, name: Name, rule: Rule, n: int, stamp: int, lease_id: str | None, now_ns: int | None
    ) -> tuple[Keys, list[bytes | str]]:
        # (not bounded by the limit: a lease granted under a higher limit gives all it holds back)
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < 2**62:
            raise ValueError(f"n must be a non-negative int, got {n!r}")
        if not isinstance(stamp, int) or stamp < 0:
            raise ValueError(f"stamp must be a non-negative int (a take's Outcome.stamp), got {stamp!r}")
        args: list[bytes | str] = [*self._rule_args(rule, now_ns), b"%d" % n, b"%d" % stamp]
        if lease_id is not None:
            args.append(lease_id)
        return self.keys_of(name), args

    def _renew_args(
        self, name: Name, rule: Rule, lease_ids: Sequence[str], now_ns: int | None
    ) -> tuple[Keys, list[bytes | str]]:
        return self.keys_of(name), [*self._rule_args(rule, now_ns), *lease_ids]

    @staticmethod
    def _check_count(rule: Rule, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= rule.limit:
            raise ValueError(f"n must be an int from 0 to the rule's limit {rule.limit}, got {n!r}")

    # ---- answers ----

    @staticmethod
    def _check(name: Name, rule: Rule, reply: Any) -> Any:
        if int(reply[0]) == 0:
            stored = text(reply[1])
            raise ValueError(
                f"the state of {shown(name)} was made by the rule {stored}, not {rule.signature}: "
                "stores sharing a prefix must give a name the same limit"
            )
        return reply

    def _outcome(self, name: Name, rule: Rule, reply: Any) -> Outcome:
        if isinstance(reply, bytes | str):  # TAKE's one string (a mismatch is the prelude's list)
            _, granted, available, retry, stamp = reply.split()
            return Outcome(granted == b"1" or granted == "1", int(available), int(retry), int(stamp))
        self._check(name, rule, reply)
        return Outcome(bool(int(reply[1])), int(reply[2]), int(reply[3]), int(reply[4]))

    def _batch(self, name: Name, rule: Rule, reply: Any) -> Batch:
        self._check(name, rule, reply)
        available, retry, stamp, taken, valid = (int(value) for value in reply[2:7])
        return Batch(bool(int(reply[1])), available, retry, stamp, taken, valid)

    # ---- running a script ----

    def _sync_only(self, member: str) -> None:
        if self.is_async:
            raise TypeError(f"this RedisBackend has an asyncio client: use {member}_async, not {member}")

    def _async_only(self, member: str) -> None:
        if not self.is_async:
            sync = member.removesuffix("_async")
            raise TypeError(f"this RedisBackend has a sync client: use {sync}, not {member}")

    def _unavailable(self, exc: BaseException) -> BackendError:
        return BackendError(unavailable_reason(exc, self._timeout))

    def _sync_client(self) -> Any:
        with self._lock:
            if self._bounded is None:
                self._bounded = bounded_sync_client(self._client, self._timeout)
            return self._bounded.client

    def _run(self, script: Script, keys: Keys, args: Sequence[bytes | str], call: Any = None) -> Any:
        """The step's reply (``call``: how it is sent, by default ``_call``), within the timeout."""
        call = call or self._call
        deadline = time.monotonic() + self._timeout
        try:
            client = self._bounded.client if self._bounded is not None else self._sync_client()
            if not self._eviction_asked:
                self._eviction_asked = True
                redis_eviction.check(client)
            while True:
                try:
                    return call(client, script, keys, args)
                except (redis.exceptions.TryAgainError, redis.exceptions.ClusterError) as exc:
                    # The keys' Cluster slot is moving between nodes (TRYAGAIN; redis-py's own
                    # retries of it end as "TTL exhausted"): asked again until the move is done,
                    # within the call's timeout.
                    if not moving(exc) or deadline - time.monotonic() <= TRY_AGAIN_PAUSE:
                        raise
                    time.sleep(TRY_AGAIN_PAUSE)
        except UNAVAILABLE as exc:
            raise self._unavailable(exc) from exc

    def _call(self, client: Any, script: Script, keys: Keys, args: Sequence[bytes | str]) -> Any:
        if self._functions:
            try:
                return execute(client, "FCALL", script.function, len(keys), *keys, *args)
            except redis.exceptions.ResponseError as exc:
                if not (function_missing(exc) or self._refused(exc)):
                    raise
            self._load_library(client)
            if self._functions:
                return execute(client, "FCALL", script.function, len(keys), *keys, *args)
        try:
            return execute(client, "EVALSHA", script.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return execute(client, "EVAL", script.source, len(keys), *keys, *args)

    def _refused(self, exc: redis.exceptions.ResponseError) -> bool:
        """FUNCTION/FCALL unsupported or not allowed: the steps run as scripts from now on."""
        if no_functions(exc):
            self._functions = False
            return True
        return False

    async def _run_async(self, script: Script, keys: Keys, args: Sequence[bytes | str], call: Any = None) -> Any:
        call = call or self._call_async
        client = self._client
        if not self._eviction_asked:
            self._eviction_asked = True
            self._eviction_task = asyncio.ensure_future(redis_eviction.check_async(client, self._timeout))
        try:
            with self._deadlines.start():
                if getattr(client, "_initialize", False) and isinstance(client, redis.asyncio.cluster.RedisCluster):
                    await discover_slots(client, self._discovery, self._lock)
                while True:
                    try:
                        return await call(client, script, keys, args)
                    except (redis.exceptions.TryAgainError, redis.exceptions.ClusterError) as exc:
                        if not moving(exc):
                            raise
                        await asyncio.sleep(TRY_AGAIN_PAUSE)  # (as _run; the deadline above ends it)
        except UNAVAILABLE as exc:
            raise self._unavailable(exc) from exc

    async def _call_async(self, client: Any, script: Script, keys: Keys, args: Sequence[bytes | str]) -> Any:
        """As _call, awaited."""
        if self._functions:
            try:
                return await execute_async(client, "FCALL", script.function, len(keys), *keys, *args)
            except redis.exceptions.ResponseError as exc:
                if not (function_missing(exc) or self._refused(exc)):
                    raise
            await self._load_library_async(client)
            if self._functions:
                return await execute_async(client, "FCALL", script.function, len(keys), *keys, *args)
        try:
            return await execute_async(client, "EVALSHA", script.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return await execute_async(client, "EVAL", script.source, len(keys), *keys, *args)

    # ---- grants that wait for replicas (wait_replicas) ----

    def _waiting_command(self, script: Script, keys: Keys, args: Sequence[bytes | str]) -> tuple[Any, ...]:
        if self._functions:
            return ("FCALL", script.function, len(keys), *keys, *args)
        return ("EVALSHA", script.sha, len(keys), *keys, *args)

    def _call_waiting(self, client: Any, script: Script, keys: Keys, args: Sequence[bytes | str]) -> tuple[Any, int]:
        """As _call, followed by WAIT on the same connection: (the reply, the replicas that have it).
        The function or script is loaded first (once): a WAIT after a step the server did not run
        would wait for nothing, as long as a replica missing."""
        for _ in range(3):
            if script.sha not in self._waiting_ready:
                self._load(client, script)
            command = self._waiting_command(script, keys, args)
            reply, acked = redis_replicas.send(client, command, keys[0], self._replicas, self._wait_ms)
            if not self._missing(reply, script):
                return reply, acked
        raise BackendError("Redis kept answering that the step's function or script is missing")

    async def _call_waiting_async(
        self, client: Any, script: Script, keys: Keys, args: Sequence[bytes | str]
    ) -> tuple[Any, int]:
        for _ in range(3):
            if script.sha not in self._waiting_ready:
                await self._load_async(client, script)
            command = self._waiting_command(script, keys, args)
            reply, acked = await redis_replicas.send_async(client, command, keys[0], self._replicas, self._wait_ms)
            if not self._missing(reply, script):
                return reply, acked
        raise BackendError("Redis kept answering that the step's function or script is missing")

    def _load_library(self, client: Any) -> None:
        """Loads the steps' function library (once more is harmless); a server without FUNCTION,
        or a user refused it, turns the steps into scripts from now on."""
        if self._functions:
            try:
                client.function_load(redis_scripts.LIBRARY)
            except redis.exceptions.ResponseError as exc:
                if not (already_loaded(exc) or self._refused(exc)):
                    raise

    async def _load_library_async(self, client: Any) -> None:
        if self._functions:
            try:
                await client.function_load(redis_scripts.LIBRARY)
            except redis.exceptions.ResponseError as exc:
                if not (already_loaded(exc) or self._refused(exc)):
                    raise

    def _load(self, client: Any, script: Script) -> None:
        self._load_library(client)
        if not self._functions:
            client.script_load(script.source)
        self._waiting_ready.add(script.sha)

    async def _load_async(self, client: Any, script: Script) -> None:
        await self._load_library_async(client)
        if not self._functions:
            await client.script_load(script.source)
        self._waiting_ready.add(script.sha)

    def _missing(self, reply: Any, script: Script) -> bool:
        """Whether the server did not have the step's function or script (then loaded again);
        any other error reply is raised."""
        if not isinstance(reply, BaseException):
            return False
        if isinstance(reply, redis.exceptions.ResponseError) and (
            isinstance(reply, redis.exceptions.NoScriptError) or function_missing(reply) or self._refused(reply)
        ):
            self._waiting_ready.discard(script.sha)
            return True
        raise reply


if TYPE_CHECKING:  # mypy checks that the class is a Backend

    def _is_backend(backend: RedisBackend) -> Backend:
        return backend

    def _batches(backend: RedisBackend) -> Batching:
        return backend
