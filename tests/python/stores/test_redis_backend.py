"""The Redis backend on one server: names, prefixes, signatures, key lifetimes, leases,
the server's clock, the clients it accepts, and its exact integers."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
import redis

from permits import specs
from permits._stores import redis_backend, redis_scripts
from permits._stores.redis_backend import RedisBackend
from permits._stores.rules import Rule, rule_of

from _redis_support import KINDS, backend, fresh_prefix

S = 10**9


def rule(kind: str, limit: int = 3, period_ns: int = 100 * S, lease_ttl_ns: int = 10 * S) -> Rule:
    made = {
        "token_bucket": specs.TokenBucket(limit, 1, period_ns / 1e9),
        "fixed_window": specs.FixedWindow(limit, period_ns / 1e9),
        "sliding_window": specs.SlidingWindow(limit, period_ns / 1e9, 4),
        "sliding_window_counter": specs.SlidingWindowCounter(limit, period_ns / 1e9),
        "sliding_log": specs.SlidingLog(limit, period_ns / 1e9),
        "concurrency": specs.Concurrency(limit),
    }[kind]
    return rule_of(made, lease_ttl_ns)


@pytest.fixture
def client(redis_server: Any) -> Any:
    with redis_server.client() as made:
        yield made


@pytest.fixture
def store(client: Any) -> Any:
    made = backend(client)
    yield made
    made.close()


# ---- names ----

HOSTILE_NAMES: list[str | bytes] = [
    "{",
    "}",
    "{}",
    "{a}b",
    "}{",
    "a name with spaces",
    "",
    "x" * 10_000,
    "') redis.call('FLUSHALL') --",
    "]] redis.call('FLUSHALL') --[[",
    "\x00\n\r\t",
    "caf\u00e9 \U0001f600",
    "\ud800 lone surrogate",
    b"\x00\xff\xfe{}",
    bytes(range(256)),
]


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_names_are_states_of_their_own(store: RedisBackend, client: Any, kind: str) -> None:
    """Braces, spaces, 10 kB, Lua, NUL and any bytes: each name is one state, its keys hold the name
    as it is, and nothing else on the server is touched."""
    client.set(b"bystander", b"still here")
    the_rule = rule(kind, limit=2)
    for index, name in enumerate(HOSTILE_NAMES):
        outcome = store.take(name, the_rule, 2, f"lease-{index}", 0)
        assert outcome.granted, name
        assert store.available(name, the_rule, 0) == 0
    # Every name's state is full and separate: one more permit is refused for each.
    for index, name in enumerate(HOSTILE_NAMES):
        assert not store.take(name, the_rule, 1, f"more-{index}", 0).granted
    for name in HOSTILE_NAMES:
        raw = name.encode("utf-8", "surrogatepass") if isinstance(name, str) else name
        state_key, _ = store.keys_of(name)
        assert state_key.endswith(b":" + raw)
        assert client.exists(state_key) == 1
    assert client.get(b"bystander") == b"still here"


def test_a_str_name_and_its_utf8_bytes_are_one_state(store: RedisBackend) -> None:
    the_rule = rule("fixed_window", limit=2)
    assert store.take("caf\u00e9", the_rule, 2, None, 0).granted
    assert store.available("caf\u00e9".encode(), the_rule, 0) == 0


def test_names_of_other_types_are_refused(store: RedisBackend) -> None:
    with pytest.raises(TypeError, match="name"):
        store.take(42, rule("fixed_window"), 1, None, 0)


def test_keys_share_one_slot_and_names_spread(store: RedisBackend) -> None:
    slots = set()
    for i in range(50):
        state_key, second_key = store.keys_of(f"name-{i}")
        assert redis.crc.key_slot(state_key) == redis.crc.key_slot(second_key)
        slots.add(redis.crc.key_slot(state_key))
    assert len(slots) > 40  # 50 names over 16384 slots: nearly all distinct


# ---- prefixes and signatures ----


@pytest.mark.parametrize("prefix", ["{", "}", "a{b}:", "permits}"])
def test_a_prefix_with_braces_is_refused(client: Any, prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        RedisBackend(client, prefix=prefix)


def test_keys_start_with_the_prefix(client: Any) -> None:
    store = RedisBackend(client, prefix="my-app:")
    assert all(key.startswith(b"my-app:{") for key in store.keys_of("x"))


@pytest.mark.parametrize("kind", KINDS)
def test_another_rule_for_a_name_raises_naming_both_signatures(client: Any, kind: str) -> None:
    prefix = fresh_prefix()
    first, second = RedisBackend(client, prefix=prefix), RedisBackend(client, prefix=prefix)
    mine, other = rule(kind, limit=3), rule(kind, limit=4)
    assert first.take("shared", mine, 1, "a", 0).granted
    for step in (
        lambda: second.take("shared", other, 1, "b", 0),
        lambda: second.available("shared", other, 0),
        lambda: second.refund("shared", other, 1, 0, "a", 0),
        lambda: second.renew("shared", other, ["a"], 0),
    ):
        with pytest.raises(ValueError) as raised:
            step()
        assert mine.signature in str(raised.value) and other.signature in str(raised.value)
    # Another kind under the same name is another rule too.
    with pytest.raises(ValueError, match=mine.signature):
        second.take("shared", rule("token_bucket" if kind != "token_bucket" else "fixed_window"), 1, "c", 0)
    # The first rule's state is untouched.
    assert first.available("shared", mine, 0) == 2


def test_different_prefixes_keep_different_states(client: Any) -> None:
    one, two = backend(client), backend(client)
    the_rule = rule("fixed_window", limit=1)
    assert one.take("x", the_rule, 1, None, 0).granted
    assert two.take("x", the_rule, 1, None, 0).granted
    assert not one.take("x", the_rule, 1, None, 0).granted
    # and under its own prefix a name may have another rule
    assert backend(client).take("x", rule("token_bucket"), 1, None, 0).granted


@pytest.mark.parametrize("kind", KINDS)
def test_keys_expire_after_the_rules_lifetime(client: Any, kind: str) -> None:
    store = RedisBackend(client, prefix=fresh_prefix())
    the_rule = rule(kind, limit=3, period_ns=20 * S, lease_ttl_ns=30 * S)
    assert store.take("lived", the_rule, 2, "lease", 0).granted
    keys = [key for key in store.keys_of("lived") if client.exists(key)]
    assert len(keys) == (2 if kind in ("sliding_window", "sliding_log", "concurrency") else 1)
    # A fixed window's take sets the expiry when the window changes only: one window more keeps the
    # key a lifetime past its last change in that window.
    lifetime_ms = (the_rule.lifetime_ns + (the_rule.period_ns if kind == "fixed_window" else 0)) // 10**6
    for key in keys:
        assert lifetime_ms - 5_000 < client.pttl(key) <= lifetime_ms + store.key_margin_ms


def test_a_fixed_window_key_lives_a_lifetime_past_its_last_grant(store: RedisBackend, client: Any) -> None:
    """Grants within a window leave the expiry as the window's first set it; it lasts a lifetime
    past the window's end, and the next window's first grant sets it again."""
    the_rule = rule("fixed_window", limit=10, period_ns=20 * S)
    key = store.keys_of("late")[0]
    assert store.take("late", the_rule, 1, None, 0).granted  # window 0: expiry set
    first = client.pttl(key)
    assert store.take("late", the_rule, 1, None, 20 * S - 1).granted  # its last ns: the count goes up
    assert client.hget(key, "b") == b"2"
    # a lifetime (two windows) past the last grant still lies before the expiry
    assert first > the_rule.lifetime_ns // 10**6 + 20_000 - 5_000
    assert client.pttl(key) <= first
    assert store.take("late", the_rule, 1, None, 20 * S).granted  # window 1: set again, count anew
    assert client.hget(key, "b") == b"1" and client.hget(key, "a") == b"1"


def test_a_lifetime_past_what_pexpire_takes_is_capped(store: RedisBackend, client: Any) -> None:
    """2**31 - 1 tokens, one every 2**61 ns: a lifetime of ~2**92 ns, past any key expiry Redis
    takes; the keys live ~31,700 years instead (the step used to fail)."""
    the_rule = Rule("token_bucket", 2**31 - 1, 2**61, 1)
    assert store.take("long-lived", the_rule, 1, None, 0).granted
    assert 10**15 - 10**6 < client.pttl(store.keys_of("long-lived")[0]) <= 10**15


def test_a_changed_key_margin_applies_to_the_next_step(client: Any) -> None:
    store = RedisBackend(client, prefix=fresh_prefix())
    the_rule = rule("fixed_window", limit=3, period_ns=20 * S)
    assert store.take("margin", the_rule, 1, None, 0).granted
    key = store.keys_of("margin")[0]
    ttl_ms = (the_rule.lifetime_ns + the_rule.period_ns) // 10**6  # (a fixed window's: see above)
    assert client.pttl(key) <= ttl_ms + store.key_margin_ms
    store.key_margin_ms = 500_000
    assert store.take("margin", the_rule, 1, None, 20 * S).granted  # (the next window sets the expiry)
    assert client.pttl(key) > ttl_ms + 400_000


def test_names_past_the_kept_keys_are_states_of_their_own(store: RedisBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend keeps a bounded number of names' keys; past it, they are made again."""
    monkeypatch.setattr(redis_backend, "_KEPT", 3)
    the_rule = rule("fixed_window", limit=20)
    names: list[Any] = [f"kept-{i}" for i in range(8)] + [b"kept-bytes", bytearray(b"kept-bytearray")]
    for i, name in enumerate(names):
        assert store.take(name, the_rule, i + 1, None, 0).granted
    for i, name in enumerate(names):
        assert store.available(name, the_rule, 0) == 20 - (i + 1)
        raw = name.encode() if isinstance(name, str) else bytes(name)
        assert store.keys_of(name)[0].endswith(b":" + raw)
    assert len(store._keys_made) <= 3
    long_name = "y" * (redis_backend._KEPT_NAME + 1)
    assert store.keys_of(long_name)[0].endswith(long_name.encode())
    assert long_name not in store._keys_made


def test_a_state_whose_keys_expired_is_as_good_as_new(client: Any) -> None:
    store = RedisBackend(client, prefix=fresh_prefix())
    the_rule = rule("fixed_window", limit=2)
    assert store.take("gone", the_rule, 2, None, 0).granted
    for key in store.keys_of("gone"):
        client.delete(key)  # what expiry does
    assert store.available("gone", the_rule, 5 * S) == 2
    assert store.take("gone", the_rule, 2, None, 5 * S).granted


# ---- concurrency leases ----


def test_an_expired_lease_gives_its_permits_back(store: RedisBackend) -> None:
    the_rule = rule("concurrency", limit=3, lease_ttl_ns=5 * S)
    assert store.take("leases", the_rule, 2, "a", 0).granted
    assert store.take("leases", the_rule, 1, "b", 2 * S).granted
    assert not store.take("leases", the_rule, 1, "c", 4 * S).granted
    assert store.available("leases", the_rule, 5 * S - 1) == 0
    assert store.available("leases", the_rule, 5 * S) == 2  # "a" expired: its expiry is now
    assert store.take("leases", the_rule, 2, "d", 5 * S).granted
    assert store.available("leases", the_rule, 7 * S) == 1  # "b" expired too
    assert store.take("leases", the_rule, 1, "e", 7 * S).granted
    assert not store.take("leases", the_rule, 1, "f", 7 * S).granted


def test_renewed_leases_are_kept(store: RedisBackend) -> None:
    the_rule = rule("concurrency", limit=3, lease_ttl_ns=5 * S)
    assert store.take("renewed", the_rule, 2, "a", 0).granted
    assert store.take("renewed", the_rule, 1, "b", 0).granted
    store.renew("renewed", the_rule, ["a", "never-taken"], 4 * S)
    assert store.available("renewed", the_rule, 6 * S) == 1  # "b" expired, "a" lives until 9 s
    assert not store.take("renewed", the_rule, 2, "c", 6 * S).granted
    store.renew("renewed", the_rule, ["a"], 8 * S)
    assert store.available("renewed", the_rule, 12 * S) == 1
    assert store.available("renewed", the_rule, 13 * S) == 3
    store.renew("renewed", the_rule, ["a"], 13 * S)  # too late: "a" is gone
    assert store.take("renewed", the_rule, 3, "d", 13 * S).granted


def test_a_retried_take_counts_once_and_a_refund_releases(store: RedisBackend) -> None:
    the_rule = rule("concurrency", limit=3)
    assert store.take("retried", the_rule, 2, "a", 0).granted
    again = store.take("retried", the_rule, 2, "a", 0)
    assert again.granted and again.available == 1
    assert store.available("retried", the_rule, 0) == 1
    store.refund("retried", the_rule, 2, 0, "a", 0)
    assert store.available("retried", the_rule, 0) == 3
    store.refund("retried", the_rule, 2, 0, "a", 0)  # released twice: nothing more comes back
    assert store.available("retried", the_rule, 0) == 3


def test_a_concurrency_take_needs_a_lease_id(store: RedisBackend) -> None:
    with pytest.raises(ValueError, match="lease_id"):
        store.take("no-id", rule("concurrency"), 1, None, 0)
    assert store.take("no-id", rule("concurrency"), 0, None, 0).granted


# ---- the server's clock ----


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "concurrency"])
def test_server_time(store: RedisBackend, client: Any, kind: str) -> None:
    """``now_ns=None``: the server's TIME, in ns since the epoch (past 2**53)."""
    the_rule = rule(kind, limit=3, period_ns=100 * S)
    before = time.time_ns()
    for _ in range(3):
        assert store.take("server-time", the_rule, 1, None, None).granted
    refused = store.take("server-time", the_rule, 1, None, None)
    after = time.time_ns()
    assert not refused.granted and refused.available == 0
    # the counter's estimate may admit the request only inside the next window
    assert 0 < refused.retry_after_ns <= (200 if kind == "sliding_window_counter" else 100) * S
    assert store.available("server-time", the_rule, None) == 0
    anchor = int(client.hget(store.keys_of("server-time")[0], "anchor"))
    assert before - 2 * S <= anchor <= after + 2 * S  # the server's clock, on this machine


def test_server_time_for_leases(store: RedisBackend, client: Any) -> None:
    the_rule = rule("concurrency", limit=2, lease_ttl_ns=60 * S)
    assert store.take("server-leases", the_rule, 2, "a", None).granted
    assert not store.take("server-leases", the_rule, 1, "b", None).granted
    store.renew("server-leases", the_rule, ["a"], None)
    expiry = int(client.zscore(store.keys_of("server-leases")[1], "a"))
    assert abs(expiry - (time.time_ns() + 60 * S)) < 5 * S
    store.refund("server-leases", the_rule, 2, 0, "a", None)
    assert store.available("server-leases", the_rule, None) == 2


# ---- clients ----


@pytest.mark.parametrize("given", [object(), "redis://localhost", None, redis.ConnectionPool()])
def test_anything_but_a_redis_client_is_refused(given: object) -> None:
    with pytest.raises(TypeError, match="client"):
        RedisBackend(given)


def test_timeout_must_be_positive(client: Any) -> None:
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout"):
            RedisBackend(client, timeout=bad)


async def test_each_kind_of_client_says_which_members_to_use(redis_server: Any, client: Any) -> None:
    sync_store = RedisBackend(client)
    assert sync_store.is_async is False
    the_rule = rule("fixed_window")
    with pytest.raises(TypeError, match=r"use take\b"):
        await sync_store.take_async("x", the_rule, 1, None, 0)
    with pytest.raises(TypeError, match=r"use available\b"):
        await sync_store.available_async("x", the_rule, 0)
    async_client = redis_server.async_client()
    try:
        async_store = RedisBackend(async_client)
        assert async_store.is_async is True
        with pytest.raises(TypeError, match="use take_async"):
            async_store.take("x", the_rule, 1, None, 0)
        with pytest.raises(TypeError, match="use refund_async"):
            async_store.refund("x", the_rule, 1, 0, None, 0)
        with pytest.raises(TypeError, match="use renew_async"):
            async_store.renew("x", the_rule, [], 0)
        with pytest.raises(TypeError, match="use available_async"):
            async_store.available("x", the_rule, 0)
    finally:
        await async_client.aclose()


def test_decoded_responses_are_read_alike(redis_server: Any) -> None:
    with redis_server.client(decode_responses=True) as decoding:
        store = backend(decoding)
        the_rule = rule("sliding_window", limit=2)
        assert store.take("decoded", the_rule, 2, None, 0).granted
        refused = store.take("decoded", the_rule, 1, None, 0)
        assert not refused.granted and refused.retry_after_ns == 100 * S
        with pytest.raises(ValueError, match=the_rule.signature):
            store.take("decoded", rule("fixed_window"), 1, None, 0)
        store.close()


def test_close_leaves_the_given_client_open(client: Any) -> None:
    store = backend(client)
    assert store.take("closing", rule("fixed_window"), 1, None, 0).granted
    store.close()
    assert client.ping()
    assert store.available("closing", rule("fixed_window"), 0) == 2  # usable again: a new connection


# ---- exact integers ----


def test_wide_integers_match_pythons(client: Any) -> None:
    """The scripts' integers (limbs of base 10**7) against Python's, on random operands of up to
    30 digits: parse, format, compare, add, subtract, multiply, divide."""
    harness = (
        redis_scripts._WIDE
        + r"""
local out = {}
for i = 1, #ARGV, 2 do
  local a, b = wstr(ARGV[i]), wstr(ARGV[i + 1])
  local q, r = wdivmod(a, b)
  local big, small = wmax(a, b), (wcmp(a, b) >= 0) and b or a
  out[#out + 1] = table.concat({wfmt(a), wcmp(a, b), wfmt(wadd(a, b)), wfmt(wsub(big, small)),
    wfmt(wmul(a, b)), wfmt(q), wfmt(r)}, ' ')
end
return out
"""
    )
    rng = random.Random(7)
    pairs = []
    for _ in range(400):
        a = rng.choice([0, 1, rng.randrange(10**7), rng.randrange(10**14), rng.randrange(10**30), 10**21])
        b = rng.choice([1, 7, 10**7 - 1, 10**7, rng.randrange(1, 10**9), rng.randrange(1, 10**20), 2**61])
        pairs.append((a, b))
    answers = client.eval(harness, 0, *[str(x) for pair in pairs for x in pair])
    for (a, b), answer in zip(pairs, answers, strict=True):
        expected = [a, (a > b) - (a < b), a + b, abs(a - b), a * b, a // b, a % b]
        assert [int(x) for x in answer.split()] == expected, (a, b)
