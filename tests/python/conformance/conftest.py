"""The conformance suite: one set of tests that every implementation of the limiter model runs.

Every test here takes the ``make`` fixture (``make(limit, queue_limit=..., queue_order=...)``
builds a :class:`subjects.Subject`) and is generated once per implementation listed in
``IMPLEMENTATIONS`` below that has the capabilities the test asks for with ``@needs(...)``
(``subjects.CAPABILITIES`` says what each means). Implementations lacking one are not generated
for that test at all (nothing is skipped at run time). ``@known_bug("impl-id", reason=...)`` on a
test makes it a strict xfail for those implementations: a bug found, not yet fixed.

To add an implementation (a shared-memory, Redis or PostgreSQL store...): write one factory
``(clock, spec) -> Built`` that builds it with ``spec.limit`` permits (and ``spec.queue_limit``,
``spec.queue_order`` if it queues) on the ``ManualClock`` it is given, and append ONE entry to
``IMPLEMENTATIONS``: ``Implementation("store-kind", factory, caps, recovery)``, where ``caps``
holds "timed" or "releases", "plain" or "keyed", "queues" or "polls", and what else it can do, and
``recovery`` is how long after a use (at a period boundary) all its permits are back. Nothing
else changes: every test then runs against it.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

import permits
from permits import Partition, PartitionedLimiter
from permits.shm import SharedMemoryStore

from _support import OLDEST, PERIOD, TIMED_KINDS, LimiterKit
from custom import CustomConcurrency, CustomFixedWindow, CustomKeyedConcurrency
from subjects import CAPABILITIES, IDLE_TIMEOUT, KEY, Built, Factory, Implementation, Make, Spec, Subject


def _recovery(kind: str) -> float:
    return float(LimiterKit(kind, permits.ManualClock()).recovery)


def _caps(kind: str, *more: str) -> frozenset[str]:
    return frozenset({"releases" if kind == "concurrency" else "timed", *more})


# --------------------------------------------------------------------------- factories


def engine(kind: str) -> Factory:
    """The engine's limiter of that kind (``LimiterKit``'s shapes: one period refills it)."""

    def factory(clock: permits.ManualClock, spec: Spec) -> Built:
        extra: dict[str, Any] = {} if kind == "concurrency" else {"auto_replenishment": spec.auto_replenishment}
        return Built(LimiterKit(kind, clock).make(spec.limit, spec.queue_limit, spec.queue_order, **extra))

    return factory


def partition(kind: str, key: Any, spec: Spec) -> Partition:
    """A partition of the engine's kind with ``LimiterKit``'s shape."""
    queue: dict[str, Any] = {"queue_limit": spec.queue_limit, "queue_order": spec.queue_order}
    if kind == "concurrency":
        return Partition.concurrency(key, spec.limit, **queue)
    if kind == "token_bucket":
        return Partition.token_bucket(key, spec.limit, spec.limit, PERIOD, **queue)
    if kind == "fixed_window":
        return Partition.fixed_window(key, spec.limit, PERIOD, **queue)
    if kind == "sliding_window":
        return Partition.sliding_window(key, spec.limit, PERIOD, 2, **queue)
    if kind == "sliding_window_counter":
        return Partition.sliding_window_counter(key, spec.limit, PERIOD, **queue)
    if kind == "sliding_log":
        return Partition.of(key, permits.specs.SlidingLog(spec.limit, PERIOD), **queue)
    raise AssertionError(kind)


def per_key(kind: str) -> Factory:
    """One key of ``PartitionedLimiter.per_key``: every key's state in the engine's table."""

    def factory(clock: permits.ManualClock, spec: Spec) -> Built:
        limiter = PartitionedLimiter.per_key(partition(kind, None, spec), idle_timeout=IDLE_TIMEOUT, clock=clock)
        assert isinstance(limiter, permits.PerKeyLimiter)
        return Built(limiter, KEY)

    return factory


def general(kind: str) -> Factory:
    """One key of a general ``PartitionedLimiter``: a partitioner, an engine limiter per key."""

    def factory(clock: permits.ManualClock, spec: Spec) -> Built:
        limiter = PartitionedLimiter(lambda r: partition(kind, r, spec), idle_timeout=IDLE_TIMEOUT, clock=clock)
        return Built(limiter, KEY)

    return factory


def chain(kind: str) -> Factory:
    """A chain of the engine's limiter of that kind and a NoLimiter."""

    def factory(clock: permits.ManualClock, spec: Spec) -> Built:
        member = engine(kind)(clock, spec).limiter
        return Built(permits.chain(member, permits.NoLimiter()), members=(member,))

    return factory


_SEGMENTS = itertools.count()


def _store(clock: permits.ManualClock) -> SharedMemoryStore:
    """A new segment on the test's clock, its name removed at once (this process keeps it mapped)."""
    store = SharedMemoryStore(f"conformance-{os.getpid()}-{next(_SEGMENTS)}", capacity=64, clock=clock)
    store.unlink()
    return store


def shm(kind: str) -> Factory:
    """A named limiter of a shared-memory store, of ``LimiterKit``'s shape."""

    def factory(clock: permits.ManualClock, spec: Spec) -> Built:
        template = partition(kind, None, spec)
        assert template.spec is not None
        queue_limit, queue_order, _ = template._options
        return Built(_store(clock).limiter(kind, template.spec, queue_limit=queue_limit, queue_order=queue_order))

    return factory


def shm_per_key(kind: str) -> Factory:
    """One key of a shared-memory store's per-key limiter."""

    def factory(clock: permits.ManualClock, spec: Spec) -> Built:
        limiter = _store(clock).partitioned(partition(kind, None, spec), name=kind, idle_timeout=IDLE_TIMEOUT)
        return Built(limiter, KEY)

    return factory


# ---- stores in a server: one server per session, started when first asked for ----
_servers = contextlib.ExitStack()


@functools.cache
def _redis() -> Any:
    from _servers.redis import _server

    return _servers.enter_context(_server("permits-conformance-redis-"))


@functools.cache
def _postgres_pool() -> Any:
    """One PostgreSQL cluster and one sync pool for the session (a store never closes a pool it
    is given); each store's limiters have names of their own."""
    from psycopg_pool import ConnectionPool

    from _servers.postgres import PostgresServer, _need_bin_dir

    server = PostgresServer(_need_bin_dir())
    _servers.callback(server.cleanup)
    # Each connection checked as it is lent: one closed under the pool (a forked child of another
    # test ending with copies of them, which says goodbye to the server on them) is replaced, not lent.
    pool = ConnectionPool(server.conninfo, min_size=1, max_size=4, open=True, check=ConnectionPool.check_connection)
    _servers.callback(pool.close)
    return pool


@pytest.fixture(scope="session", autouse=True)
def _stop_servers() -> Iterator[None]:
    yield
    _servers.close()


#: The stores' timeout: the suite tests what they decide, not how fast a busy machine answers (a
#: PostgreSQL call of four threads contending for one row took over a second under a loaded CI run).
STORE_TIMEOUT = 10.0


def _redis_store(clock: permits.ManualClock) -> Any:
    """A Redis store of its own (a key prefix of its own) on the test's clock, with a sync client
    (its async members ask from the loop's thread, so a wait is queued before it first suspends)."""
    from permits.redis import RedisStore

    return RedisStore(_redis().client(), prefix=f"conformance:{next(_SEGMENTS)}:", clock=clock, timeout=STORE_TIMEOUT)


def _redis_reserving_store(clock: permits.ManualClock) -> Any:
    """A Redis store serving its time-based permits from batches of 3 taken ahead (reserve)."""
    from permits.redis import RedisStore

    return RedisStore(
        _redis().client(), prefix=f"conformance:{next(_SEGMENTS)}:", clock=clock, reserve=3, timeout=STORE_TIMEOUT
    )


def _postgres_store(clock: permits.ManualClock) -> Any:
    """A PostgreSQL store on the test's clock over a sync pool (asked from the loop's thread, as
    the Redis one)."""
    from permits.postgres import PostgresStore

    return PostgresStore(_postgres_pool(), clock=clock, timeout=STORE_TIMEOUT)


def in_server(make_store: Callable[[permits.ManualClock], Any]) -> Callable[[str], Factory]:
    """A named limiter of a store in a server (a concurrency lease outlives any test: its
    holder's renewals run in real time, the test's clock is manual)."""

    def of_kind(kind: str) -> Factory:
        def factory(clock: permits.ManualClock, spec: Spec) -> Built:
            template = partition(kind, None, spec)
            queue_limit, queue_order, _ = template._options
            queue = {"queue_limit": queue_limit, "queue_order": queue_order}
            name = f"{kind}-{next(_SEGMENTS)}"  # (stores may share their server's keys or table)
            return Built(make_store(clock).limiter(name, template.spec, **queue, lease_ttl=1e6))

        return factory

    return of_kind


def in_server_per_key(make_store: Callable[[permits.ManualClock], Any]) -> Callable[[str], Factory]:
    """One key of a store's per-key limiter."""

    def of_kind(kind: str) -> Factory:
        def factory(clock: permits.ManualClock, spec: Spec) -> Built:
            limiter = make_store(clock).partitioned(
                partition(kind, None, spec), name=f"{kind}-{next(_SEGMENTS)}", idle_timeout=IDLE_TIMEOUT, lease_ttl=1e6
            )
            return Built(limiter, KEY)

        return factory

    return of_kind


def custom_fixed_window(clock: permits.ManualClock, spec: Spec) -> Built:
    return Built(CustomFixedWindow(spec.limit, PERIOD, clock=clock))


def custom_concurrency(clock: permits.ManualClock, spec: Spec) -> Built:
    return Built(CustomConcurrency(spec.limit))


def custom_keyed_concurrency(clock: permits.ManualClock, spec: Spec) -> Built:
    return Built(CustomKeyedConcurrency(spec.limit), KEY)


# --------------------------------------------------------------------------- the implementations


def _kinds(name: str, factory: Callable[[str], Factory], kinds: Iterable[str], *caps: str) -> list[Implementation]:
    """One implementation per limiter kind: releases or timed by kind, plus ``caps``."""
    return [Implementation(f"{name}-{kind}", factory(kind), _caps(kind, *caps), _recovery(kind)) for kind in kinds]


SERVES = "clock_serves_queue"
ENGINE = ("plain", "queues", "close_fails_waiters", "refunds", "settles", SERVES)
KEYED = ("keyed", "queues", "close_fails_waiters", "refunds", "settles", SERVES)
RESETS = "resets"
RECONFIGURES = "reconfigures"
COLLECTED = "releases_dropped_leases"
# The stores in a server: their queues are per process, asked on a waiter's wake (no clock_serves_queue).
STORE = ("plain", "queues", "close_fails_waiters", "refunds", "settles")
STORE_KEYED = ("keyed", "queues", "close_fails_waiters", "refunds", "settles")

#: The sliding log (what specs.parse makes) runs the suite as the other time-based kinds do.
LOGGED = [*TIMED_KINDS, "sliding_log"]

IMPLEMENTATIONS: list[Implementation] = [
    *_kinds("engine", engine, ["concurrency"], *ENGINE, COLLECTED, RECONFIGURES),
    *_kinds("engine", engine, LOGGED, *ENGINE, "replenishes_manually", RECONFIGURES),
    *_kinds("per_key", per_key, ["concurrency"], *KEYED, COLLECTED, RESETS, RECONFIGURES),
    *_kinds("per_key", per_key, LOGGED, *KEYED, RESETS, RECONFIGURES),
    *_kinds("general", general, ["fixed_window"], *KEYED, RESETS),
    *_kinds("general", general, ["concurrency"], *KEYED, COLLECTED, RESETS),
    # close() closes the chain only (its members may be shared), and ends the waits in its members.
    *_kinds(
        "chain",
        chain,
        ["token_bucket"],
        "plain",
        "queues",
        "close_fails_waiters",
        "refunds",
        "settles",
        "replenishes_manually",
        SERVES,
    ),
    *_kinds("chain", chain, ["concurrency"], "plain", "queues", "close_fails_waiters", "refunds", "settles", COLLECTED),
    Implementation(
        "custom-fixed_window", custom_fixed_window, frozenset({"timed", "plain", "polls", "refunds"}), PERIOD
    ),
    Implementation("custom-concurrency", custom_concurrency, frozenset({"releases", "plain", "polls", "refunds"})),
    Implementation(
        "custom_keyed-concurrency", custom_keyed_concurrency, frozenset({"releases", "keyed", "polls", "refunds"})
    ),
    # The shared-memory store: its named limiters and its per-key limiters (auto-replenishing only).
    *_kinds("shm", shm, ["concurrency"], *ENGINE, COLLECTED, RECONFIGURES),
    *_kinds("shm", shm, LOGGED, *ENGINE, RECONFIGURES),
    *_kinds("shm_per_key", shm_per_key, ["concurrency"], *KEYED, COLLECTED, RESETS, RECONFIGURES),
    *_kinds("shm_per_key", shm_per_key, LOGGED, *KEYED, RESETS, RECONFIGURES),
    # The stores in a server (Redis, PostgreSQL): every kind, named and per key.
    *_kinds("redis", in_server(_redis_store), ["concurrency"], *STORE, COLLECTED, RECONFIGURES),
    *_kinds("redis", in_server(_redis_store), LOGGED, *STORE, RECONFIGURES),
    *_kinds(
        "redis_per_key", in_server_per_key(_redis_store), ["concurrency"], *STORE_KEYED, COLLECTED, RESETS, RECONFIGURES
    ),
    *_kinds("redis_per_key", in_server_per_key(_redis_store), LOGGED, *STORE_KEYED, RESETS, RECONFIGURES),
    *_kinds("redis_reserve", in_server(_redis_reserving_store), LOGGED, *STORE, RECONFIGURES),
    *_kinds("postgres", in_server(_postgres_store), ["concurrency"], *STORE, COLLECTED, RECONFIGURES),
    *_kinds("postgres", in_server(_postgres_store), LOGGED, *STORE, RECONFIGURES),
    *_kinds(
        "postgres_per_key",
        in_server_per_key(_postgres_store),
        ["concurrency"],
        *STORE_KEYED,
        COLLECTED,
        RESETS,
        RECONFIGURES,
    ),
    *_kinds("postgres_per_key", in_server_per_key(_postgres_store), LOGGED, *STORE_KEYED, RESETS, RECONFIGURES),
]


# --------------------------------------------------------------------------- generation


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs(*capabilities): generate the test only for implementations having them all"
    )
    config.addinivalue_line(
        "markers",
        "known_bug(*implementation_ids, reason): a bug in those implementations, expected to fail (strict xfail)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "implementation" not in metafunc.fixturenames:
        return
    wanted: set[str] = set()
    for mark in metafunc.definition.iter_markers("needs"):
        wanted.update(mark.args)
    unknown = wanted - CAPABILITIES.keys()
    assert not unknown, f"{metafunc.definition.nodeid}: unknown capabilities {sorted(unknown)}"
    chosen = [impl for impl in IMPLEMENTATIONS if wanted <= impl.caps]
    assert chosen, f"{metafunc.definition.nodeid}: no implementation has {sorted(wanted)}"
    bugs: dict[str, str] = {}
    for mark in metafunc.definition.iter_markers("known_bug"):
        for impl_id in mark.args:
            assert impl_id in {impl.id for impl in chosen}, f"known_bug: {impl_id} does not run this test"
            bugs[impl_id] = mark.kwargs["reason"]
    params = [
        pytest.param(impl, id=impl.id, marks=[pytest.mark.xfail(strict=True, reason=bugs[impl.id])])
        if impl.id in bugs
        else pytest.param(impl, id=impl.id)
        for impl in chosen
    ]
    metafunc.parametrize("implementation", params)


@pytest.fixture
def make(implementation: Implementation, clock: permits.ManualClock) -> Iterator[Make]:
    """``make(limit, queue_limit=0, queue_order=OLDEST, auto_replenishment=True)``: a new subject
    of this test's implementation on the test's clock; closed when the test ends."""
    made: list[Subject] = []

    def build(
        limit: int,
        queue_limit: int = 0,
        queue_order: permits.QueueOrder = OLDEST,
        auto_replenishment: bool = True,
    ) -> Subject:
        subject = implementation.make(clock, Spec(limit, queue_limit, queue_order, auto_replenishment))
        made.append(subject)
        return subject

    yield build
    for subject in made:
        subject.close_all()
