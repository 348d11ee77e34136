"""RedisStore and PostgresStore given hostile input: per-key limiters whose keys are braces,
spaces, 10 kB strings, bytes, unicode (each its own limit, no error); names that could pass for
another limiter's key (refused); two stores on one prefix or table giving one name different
limits (the second raises ValueError naming both, whatever its on_error, and nothing is mixed);
and bad arguments (TypeError or ValueError naming the argument)."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

import permits
from permits._stores.rules import rule_of

from _store_fixtures import *  # noqa: F403 (the fixtures)
from _store_support import Server, fresh_name

KEYS: list[Any] = [
    "{",
    "}",
    "{}",
    "{a}",
    "a",
    "a}",
    "{a",
    " ",
    "a b",
    " a",
    "a ",
    "x" * 10_000,
    "x" * 10_001,
    b"a",
    b"{a}",
    b"\x00\xff{",
    b"",
    "",
    "\x00",
    "a\x00b",
    "ключ 🙂",
    "\udc80",  # a lone surrogate
    "\n\r\t",
    "*?[]",
    "%(key)s",
    "'; DROP TABLE x; --",
    1,
    ("a", "b"),
    ("a b",),
]


@pytest.mark.parametrize("client", ["sync", "asyncio"])
async def test_every_key_is_its_own_limit(shared_server: Server, client: str) -> None:
    clock = permits.ManualClock()
    name = fresh_name()
    reader = shared_server.reader(clock).partitioned(permits.specs.FixedWindow(2, 100.0), name=name)
    async with shared_server.async_store(clock=clock) as async_store:
        store = async_store if client == "asyncio" else shared_server.store(clock=clock)
        keyed = store.partitioned(permits.specs.FixedWindow(2, 100.0), name=name)

        async def acquire(key: Any, n: int) -> permits.Lease:
            lease: permits.Lease = await keyed.acquire_async(key, n) if client == "asyncio" else keyed.acquire(key, n)
            return lease

        for i, key in enumerate(KEYS):
            assert await acquire(key, 1 + i % 2), key  # one or both permits of its own
        for i, key in enumerate(KEYS):
            assert reader.available_permits(key) == 1 - i % 2, key
            refused = await acquire(key, 2)
            assert not refused and refused.retry_after == pytest.approx(100.0), key
        assert reader.available_permits("never used") == 2


def test_a_name_that_could_pass_for_a_key_is_refused(shared_server: Server) -> None:
    """A per-key state is the name, NUL, then the key: a name with a NUL could be another
    limiter's key ("a\\x00sb" is key "b" of "a")."""
    store = shared_server.store()
    for make in (
        lambda: store.limiter("a\x00sb", "1/second"),
        lambda: store.fixed_window("\x00", 1, 1.0),
        lambda: store.partitioned("1/second", name="a\x00"),
    ):
        with pytest.raises(ValueError, match="name must not contain NUL"):
            make()
    # Names of any other content are names of their own.
    names = ["{", "}", "{a}", "a", " a", "a b", "y" * 10_000, "имя 🙂", "\udc80", "a:b", "a~b"]
    for name in names:
        assert store.fixed_window(name + shared_server.namespace, 1, 100.0).acquire(), name
    keyed = store.partitioned(permits.specs.FixedWindow(1, 100.0), name="a" + shared_server.namespace)
    for key in names:
        assert keyed.acquire(key), key


#: Pairs of specs one name cannot have in two stores on one prefix or table.
CLASHES: list[tuple[Any, Any]] = [
    (permits.specs.FixedWindow(3, 10.0), permits.specs.FixedWindow(4, 10.0)),
    (permits.specs.FixedWindow(3, 10.0), permits.specs.FixedWindow(3, 20.0)),
    (permits.specs.FixedWindow(3, 10.0), permits.specs.TokenBucket(3, 1, 10.0)),
    (permits.specs.TokenBucket(3, 1, 10.0), permits.specs.TokenBucket(3, 2, 10.0)),
    (permits.specs.SlidingWindow(3, 10.0, 2), permits.specs.SlidingWindow(3, 10.0, 5)),
    (permits.specs.SlidingWindowCounter(3, 10.0), permits.specs.FixedWindow(3, 10.0)),
    (permits.specs.Concurrency(3), permits.specs.Concurrency(4)),
    (permits.specs.Concurrency(3), permits.specs.FixedWindow(3, 10.0)),
]


@pytest.mark.parametrize("mode", ["raise", "deny", "allow"])
@pytest.mark.parametrize(("spec", "other"), CLASHES, ids=lambda s: repr(s).replace(" ", ""))
async def test_two_stores_giving_a_name_different_limits(
    shared_server: Server, spec: Any, other: Any, mode: str
) -> None:
    clock = permits.ManualClock()
    name = fresh_name()
    first = shared_server.store(clock=clock).limiter(name, spec, lease_ttl=60.0)
    held = first.acquire()
    assert held
    differences = (rule_of(spec).signature, rule_of(other).signature)
    async with shared_server.async_store(clock=clock, on_error=mode) as async_store:
        second = shared_server.store(clock=clock, on_error=mode).limiter(name, other, lease_ttl=60.0)
        asecond = async_store.limiter(name, other, lease_ttl=60.0)
        for call in (second.acquire, lambda: second.wait(1, timeout=1.0), second.available_permits):
            with pytest.raises(ValueError) as raised:
                call()
            assert all(signature in str(raised.value) for signature in differences), raised.value
        for acall in (asecond.acquire_async, asecond.wait_async):
            with pytest.raises(ValueError) as raised:
                await acall()
            assert all(signature in str(raised.value) for signature in differences), raised.value
    # Nothing mixed: the first store's limit is as it was, and still enforced.
    limit = first.spec.permit_limit if hasattr(first.spec, "permit_limit") else first.spec.token_limit
    assert first.available_permits() == limit - 1
    rest = first.acquire(limit - 1)
    assert rest and not first.acquire()


async def test_two_stores_giving_a_key_different_limits(shared_server: Server) -> None:
    name = fresh_name()
    first = shared_server.store().partitioned(permits.specs.FixedWindow(3, 10.0), name=name)
    second = shared_server.store(on_error="allow").partitioned(permits.specs.FixedWindow(5, 10.0), name=name)
    assert first.acquire("k")
    with pytest.raises(ValueError, match="fixed_window:5:"):
        second.acquire("k")
    assert second.acquire("another key")  # only the key both use clashes
    assert first.available_permits("k") == 2


def test_a_lease_ttl_of_its_own_is_no_clash(shared_server: Server) -> None:
    """Holders may choose their leases' lifetime: it is not part of a limit."""
    name = fresh_name()
    short = shared_server.store().concurrency(name, 2, lease_ttl=5.0)
    long = shared_server.store().concurrency(name, 2, lease_ttl=500.0)
    one, two = short.acquire(), long.acquire()
    assert one and two and not short.acquire() and not long.acquire()
    one.release()
    assert long.available_permits() == 1


# ---- bad arguments ----

BAD_OPTIONS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"on_error": "x"}, ValueError, "on_error"),
    ({"on_error": None}, ValueError, "on_error"),
    ({"on_error": 1}, ValueError, "on_error"),
    ({"timeout": 0}, ValueError, "timeout"),
    ({"timeout": -1}, ValueError, "timeout"),
    ({"timeout": math.nan}, ValueError, "timeout"),
    ({"timeout": math.inf}, ValueError, "timeout"),
    ({"timeout": "1"}, TypeError, "timeout"),
    ({"timeout": None}, TypeError, "timeout"),
    ({"timeout": True}, TypeError, "timeout"),
    ({"clock": object()}, TypeError, "clock"),
    ({"clock": time.monotonic}, TypeError, "clock"),
]
BAD_REDIS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"prefix": 1}, TypeError, "prefix"),
    ({"prefix": b"x"}, TypeError, "prefix"),
    ({"prefix": "{x"}, ValueError, "prefix"),
    ({"prefix": "x}"}, ValueError, "prefix"),
    ({"prefix": "{x}:"}, ValueError, "prefix"),
]
BAD_POSTGRES: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"table": 1}, TypeError, "table"),
    ({"table": ""}, ValueError, "table"),
    ({"table": "t" * 64}, ValueError, "table"),
    ({"table": "é" * 32}, ValueError, "table"),  # 64 bytes
    ({"table": "a\x00"}, ValueError, "table"),
]


def _store_class(server: Server) -> tuple[Any, Any]:
    """The store class and a good first argument for it."""
    process: Any = server.process
    if server.kind == "redis":
        from permits.redis import RedisStore

        return RedisStore, process.client()
    from permits.postgres import PostgresStore

    return PostgresStore, process.conninfo


def test_bad_store_arguments_are_named(shared_server: Server) -> None:
    cls, good = _store_class(shared_server)
    cases = BAD_OPTIONS + (BAD_REDIS if shared_server.kind == "redis" else BAD_POSTGRES)
    for options, error, argument in cases:
        with pytest.raises(error, match=argument):
            cls(good, **options)
    first_argument = "client" if shared_server.kind == "redis" else "conninfo_or_pool"
    for bad in (None, 1, object(), b"host=x"):
        with pytest.raises(TypeError, match=first_argument):
            cls(bad)
    if shared_server.kind == "redis":
        with pytest.raises(TypeError, match="client"):
            cls("redis://127.0.0.1")
    store = cls(good, timeout=0.001) if shared_server.kind == "redis" else cls(good, timeout=3600)
    store.close()  # the bounds themselves are allowed


BAD_LIMITERS: list[tuple[tuple[Any, ...], dict[str, Any], type[Exception], str]] = [
    (("", "5/second"), {}, ValueError, "name"),
    ((1, "5/second"), {}, TypeError, "name"),
    ((b"x", "5/second"), {}, TypeError, "name"),
    ((None, "5/second"), {}, TypeError, "name"),
    (("ok", 1), {}, TypeError, "spec"),
    (("ok", "ten per second"), {}, ValueError, "spec"),
    (("ok", permits.specs.FixedWindow), {}, TypeError, "spec"),
    (("ok", "5/second"), {"queue_limit": -1}, ValueError, "queue_limit"),
    (("ok", "5/second"), {"queue_limit": "1"}, TypeError, "queue_limit"),
    (("ok", "5/second"), {"queue_order": "x"}, TypeError, "queue_order"),
    (("ok", "5/second"), {"lease_ttl": 0}, ValueError, "lease_ttl"),
    (("ok", "5/second"), {"lease_ttl": -1}, ValueError, "lease_ttl"),
    (("ok", "5/second"), {"lease_ttl": math.nan}, ValueError, "lease_ttl"),
    (("ok", "5/second"), {"lease_ttl": "1"}, TypeError, "lease_ttl"),
]
BAD_PARTITIONED: list[tuple[tuple[Any, ...], dict[str, Any], type[Exception], str]] = [
    (("5/second",), {"name": ""}, ValueError, "name"),
    (("5/second",), {"name": 1}, TypeError, "name"),
    (("5/second",), {"name": None}, TypeError, "name"),
    (("5/second",), {}, TypeError, "name"),
    ((1,), {"name": "ok"}, TypeError, "template"),
    (("nonsense",), {"name": "ok"}, ValueError, "template"),
    (("5/second",), {"name": "ok", "idle_timeout": -1}, ValueError, "idle_timeout"),
    (("5/second",), {"name": "ok", "idle_timeout": math.nan}, ValueError, "idle_timeout"),
    (("5/second",), {"name": "ok", "max_partitions": 0}, ValueError, "max_partitions"),
    (("5/second",), {"name": "ok", "max_partitions": "x"}, TypeError, "max_partitions"),
    (("5/second",), {"name": "ok", "lease_ttl": 0}, ValueError, "lease_ttl"),
    ((permits.Partition.custom(None, lambda key: permits.NoLimiter()),), {"name": "ok"}, TypeError, "spec"),
]


def test_bad_limiter_arguments_are_named(shared_server: Server) -> None:
    store = shared_server.store()
    for args, options, error, argument in BAD_LIMITERS:
        with pytest.raises(error, match=argument):
            store.limiter(*args, **options)
    for args, options, error, argument in BAD_PARTITIONED:
        with pytest.raises(error, match=argument):
            store.partitioned(*args, **options)
    for make, argument in (
        (lambda: store.token_bucket("ok", 0, 1, 1.0), "token_limit"),
        (lambda: store.token_bucket("ok", 1, 0, 1.0), "tokens_per_period"),
        (lambda: store.fixed_window("ok", 1, -1), "window"),
        (lambda: store.sliding_window("ok", 1, 1.0, 0), "segments_per_window"),
        (lambda: store.sliding_window_counter("ok", 0, 1.0), "permit_limit"),
        (lambda: store.concurrency("ok", 1, lease_ttl=math.nan), "lease_ttl"),
    ):
        with pytest.raises(ValueError, match=argument):
            make()
    fw = store.fixed_window(fresh_name(), 2, 100.0)
    for call, error, argument in (
        (lambda: fw.acquire(-1), ValueError, "permit_count"),
        (lambda: fw.acquire(3), ValueError, "permit_count"),
        (lambda: fw.acquire("1"), TypeError, "permit_count"),
        (lambda: fw.acquire(1.5), TypeError, "permit_count"),
        (lambda: fw.wait(1, timeout=-2), ValueError, "timeout"),
        (lambda: fw.wait(1, timeout=math.nan), ValueError, "timeout"),
        (lambda: fw.wait(1, timeout="1"), TypeError, "timeout"),
        (lambda: fw.wait_async(3), ValueError, "permit_count"),
    ):
        with pytest.raises(error, match=argument):
            call()
    # Nothing was made or counted by the refusals: the store works as before.
    assert fw.acquire(2) and not fw.acquire()
    assert fw.statistics().total_failed_leases == 1
