"""How the Redis backend sends its steps: a plain client's on its pooled connections (not by
``execute_command``), a subclass's and an instrumented client's by ``execute_command`` (which sees
every step); a step cut off mid-reply leaves nothing for the next step to read; a sync store's own
connections, kept between steps, are checked before each step and closed with the store."""

from __future__ import annotations

import functools
import gc
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from permits import specs
from permits._stores.redis_backend import RedisBackend
from permits._stores.rules import Rule, rule_of
from permits.errors import BackendError

from _redis_support import Steps, backend

STEPS = 5


def fixed_window(limit: int) -> Rule:
    return rule_of(specs.FixedWindow(limit, 100.0), 0)


def fcalls(client: Any) -> int:
    return int(client.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0))


@pytest.fixture
def admin(redis_server: Any) -> Iterator[Any]:
    with redis_server.client(socket_timeout=5.0) as made:
        yield made


@pytest.fixture(params=["sync", "asyncio"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def made(redis_server: Any, flavour: str, client_class: type | None = None, **kwargs: Any) -> RedisBackend:
    if flavour == "sync":
        return backend(redis_server.client(), **kwargs)
    client_class = client_class or redis.asyncio.Redis
    return backend(client_class(host=redis_server.host, port=redis_server.port), **kwargs)


async def closed(store: RedisBackend) -> None:
    client = store._client
    store.close()
    if store.is_async:
        await client.aclose()
    else:
        client.close()


def recorded(monkeypatch: pytest.MonkeyPatch, flavour: str, *, wrapped: bool) -> list[str]:
    """The commands sent by ``execute_command`` of redis-py's own client class from now on;
    ``wrapped``: patched as a tracer does (``functools.wraps``: ``__wrapped__`` is set)."""
    cls: Any = redis.Redis if flavour == "sync" else redis.asyncio.Redis
    original = cls.execute_command
    seen: list[str] = []
    if flavour == "sync":

        def record(self: Any, *args: Any, **options: Any) -> Any:
            seen.append(str(args[0]))
            return original(self, *args, **options)
    else:

        async def record(self: Any, *args: Any, **options: Any) -> Any:  # type: ignore[misc]
            seen.append(str(args[0]))
            return await original(self, *args, **options)

    monkeypatch.setattr(cls, "execute_command", functools.wraps(original)(record) if wrapped else record)
    return seen


async def test_a_plain_clients_steps_are_not_sent_by_execute_command(
    redis_server: Any, admin: Any, flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await made(redis_server, flavour)
    steps, rule = Steps(store), fixed_window(100)
    await steps.take("warm", rule, 1, None, 0)  # (the library loaded, the eviction policy asked)
    seen = recorded(monkeypatch, flavour, wrapped=False)
    before = fcalls(admin)
    for _ in range(STEPS):
        assert (await steps.take("plain", rule, 1, None, 0)).granted
    assert fcalls(admin) - before == STEPS  # (each step reached the server once)
    assert "FCALL" not in seen
    await closed(store)


async def test_an_instrumented_execute_command_sees_every_step(
    redis_server: Any, admin: Any, flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await made(redis_server, flavour)
    steps, rule = Steps(store), fixed_window(100)
    await steps.take("warm", rule, 1, None, 0)
    seen = recorded(monkeypatch, flavour, wrapped=True)  # (after the store was made, as a late tracer)
    for _ in range(STEPS):
        assert (await steps.take("traced", rule, 1, None, 0)).granted
    assert seen.count("FCALL") == STEPS
    await closed(store)


async def test_a_client_subclass_sees_every_step(redis_server: Any) -> None:
    seen: list[str] = []

    class Traced(redis.asyncio.Redis):
        async def execute_command(self, *args: Any, **options: Any) -> Any:
            seen.append(str(args[0]))
            return await super().execute_command(*args, **options)

    store = await made(redis_server, "asyncio", Traced)
    steps, rule = Steps(store), fixed_window(100)
    for _ in range(STEPS):
        assert (await steps.take("subclass", rule, 1, None, 0)).granted
    assert seen.count("FCALL") == STEPS
    await closed(store)


async def test_a_step_cut_off_mid_reply_leaves_no_reply_for_the_next_step(
    redis_server: Any, admin: Any, flavour: str
) -> None:
    """The step is past its deadline while the server holds it; once the server answers, that
    answer (a grant) must not be read as the next step's (a refusal: over-admission)."""
    store = await made(redis_server, flavour, timeout=0.3)
    steps, rule = Steps(store), fixed_window(1)
    assert (await steps.take("used", rule, 1, None, 0)).granted
    admin.execute_command("CLIENT", "PAUSE", 800, "ALL")
    started = time.monotonic()
    with pytest.raises(BackendError):
        await steps.take("fresh", rule, 1, None, 0)
    time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))  # (the pause over: the server answers)
    for _ in range(3):
        assert not (await steps.take("used", rule, 1, None, 0)).granted
    await closed(store)


def named_connections(admin: Any, name: str) -> int:
    return sum(1 for entry in admin.client_list() if entry.get("name") == name)


def none_left(admin: Any, name: str, most: int = 0) -> bool:
    """At most ``most`` connections of that name on the server, within 5 s (the server sees a closed
    socket at its next turn: on a loaded machine, not at once)."""
    deadline = time.monotonic() + 5.0
    while named_connections(admin, name) > most and time.monotonic() < deadline:
        time.sleep(0.05)
    return named_connections(admin, name) <= most


def test_a_kept_connection_the_server_closed_is_replaced_before_the_next_step(redis_server: Any, admin: Any) -> None:
    """A sync store keeps the connections of its own client between steps; one the server closed
    meanwhile (a restart, a timeout, CLIENT KILL) is found closed before a step is written on it."""
    name = f"wire-{uuid.uuid4().hex[:8]}"
    given = redis_server.client(client_name=name)
    store = backend(given)
    rule = fixed_window(100)
    assert store.take("kept", rule, 1, None, 0).granted
    killed = admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    assert killed >= 1 and named_connections(admin, name) == 0
    for _ in range(STEPS):
        assert store.take("kept", rule, 1, None, 0).granted  # (no BackendError: a new connection)
    assert store.available("kept", rule, 0) == 100 - 1 - STEPS
    store.close()
    given.close()


def test_threads_share_the_kept_connections_and_close_leaves_none_open(redis_server: Any, admin: Any) -> None:
    name = f"wire-{uuid.uuid4().hex[:8]}"
    given = redis_server.client(client_name=name)
    store = backend(given)
    rule, threads, each = fixed_window(10**6), 6, 50
    errors: list[BaseException] = []
    assert store.take("threads", rule, 1, None, 0).granted  # (the library and the eviction policy: one connection)

    def steps() -> None:
        try:
            for _ in range(each):
                assert store.take("threads", rule, 1, None, 0).granted
        except BaseException as exc:  # (reported below)
            errors.append(exc)

    running = [threading.Thread(target=steps) for _ in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join(60)
    assert not errors
    assert store.available("threads", rule, 0) == 10**6 - 1 - threads * each
    # the steps' (at most one per thread at once) and the pool's one for the warm-up's other commands
    assert 1 <= named_connections(admin, name) <= threads + 1
    store.close()
    assert none_left(admin, name)
    given.close()


def test_stores_never_closed_leave_no_connection_open_once_collected(redis_server: Any, admin: Any) -> None:
    """The kept connections go with their store's own client: a weak map from pools to their
    connections kept every pool alive (its connections reach it), two descriptors per store for
    good (a test run reached 1,024 descriptors and waitress's select() failed)."""
    name = f"wire-{uuid.uuid4().hex[:8]}"
    given = redis_server.client(client_name=name)
    rule = fixed_window(100)

    def step_and_drop() -> bool:
        store = backend(given)  # (never closed)
        return store.take("gone", rule, 1, None, 0).granted

    for _ in range(30):
        assert step_and_drop()
    gc.collect()
    gc.collect()  # (a second pass: what the first one's finalizers freed)
    # The map kept all 30 stores' (60); now one store's may still wait for a later collection.
    assert none_left(admin, name, most=2)
    given.close()
