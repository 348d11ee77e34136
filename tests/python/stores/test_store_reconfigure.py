"""limiter.reconfigure(spec) on Redis and PostgreSQL (issue 42, item 4): the new limit is recorded on
the server and every process counts with it: the one that changed it at once, the others at their
next round of following (``_rules.follow_now()`` here, a thread or task every second in a
deployment), a process started later from its first step (whatever limit its own configuration
says). What was taken stays taken; the shape (kind, window, segments) stays; a server that fails
says so and nothing changes."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import permits
from permits._stores import followed_rules
from permits.errors import BackendError

from _store_fixtures import *  # noqa: F403 (the fixtures)
from _store_support import BOUND, TIMEOUT, Server, fresh_name

S = permits.specs
#: The count-based kinds: a raised limit grants the difference at once, in the same window.
WINDOWS = {
    "fixed_window": (S.FixedWindow(10, 60.0), S.FixedWindow(15, 60.0), S.FixedWindow(5, 60.0)),
    "sliding_window": (S.SlidingWindow(10, 60.0, 4), S.SlidingWindow(15, 60.0, 4), S.SlidingWindow(5, 60.0, 4)),
    "sliding_log": (S.SlidingLog(10, 60.0), S.SlidingLog(15, 60.0), S.SlidingLog(5, 60.0)),
    "sliding_window_counter": (
        S.SlidingWindowCounter(10, 60.0),
        S.SlidingWindowCounter(15, 60.0),
        S.SlidingWindowCounter(5, 60.0),
    ),
    "concurrency": (S.Concurrency(10), S.Concurrency(15), S.Concurrency(5)),
}


def granted(limiter: Any, *key: str) -> list[permits.Lease]:
    """Every permit ``limiter`` (a keyed one: for ``key``) grants now, one at a time."""
    leases = []
    while lease := limiter.acquire(*key):
        leases.append(lease)
        assert len(leases) <= 100, "more than the limit"
    return leases


def queued_wait(limiter: Any, n: int) -> tuple[threading.Thread, list[permits.Lease]]:
    """A thread waiting for ``n`` permits of ``limiter``, once it is queued; its lease lands in the list."""
    got: list[permits.Lease] = []
    waiter = threading.Thread(target=lambda: got.append(limiter.wait(n, timeout=30.0)))
    waiter.start()
    deadline = time.monotonic() + 10
    while limiter.statistics().current_queued_count == 0:
        assert time.monotonic() < deadline, "the wait never queued"
        waiter.join(0.01)
    return waiter, got


def pair(server: Server, name: str, spec: Any, clock: permits.ManualClock, **options: Any) -> tuple[Any, Any]:
    """Two processes' limiters of one name (two stores: nothing shared but the server)."""
    return (
        server.store(clock=clock, **options).limiter(name, spec, lease_ttl=600.0),
        server.store(clock=clock, **options).limiter(name, spec, lease_ttl=600.0),
    )


@pytest.mark.parametrize("kind", list(WINDOWS))
def test_a_raised_limit_grants_the_difference_in_every_process(shared_server: Server, kind: str) -> None:
    first, raised, _ = WINDOWS[kind]
    clock = permits.ManualClock(1000.0)
    mine, theirs = pair(shared_server, fresh_name("reconf"), first, clock)
    held = granted(mine) + granted(theirs)
    assert len(held) == 10
    mine.reconfigure(raised)
    assert mine.spec == raised and mine.permit_limit == 15
    assert theirs.spec == first, "another process learns it at its next round, not before"
    theirs.store._rules.follow_now()
    assert theirs.spec == raised and theirs.permit_limit == 15
    more = granted(theirs) + granted(mine)
    assert len(more) == 5, "the new limit, counting what was taken before it"


@pytest.mark.parametrize("kind", list(WINDOWS))
def test_a_lowered_limit_holds_in_every_process_once_they_follow(shared_server: Server, kind: str) -> None:
    first, _, lowered = WINDOWS[kind]
    clock = permits.ManualClock(1000.0)
    mine, theirs = pair(shared_server, fresh_name("reconf"), first, clock)
    held = [mine.acquire() for _ in range(3)]
    assert all(held)
    theirs.reconfigure(lowered)
    mine.store._rules.follow_now()
    assert mine.spec == lowered
    more = granted(mine) + granted(theirs)
    assert len(more) == 2, "5, of which 3 were taken before"
    for lease in held + more:
        lease.release()
    clock.advance(200.0)  # every window and lease of before has gone
    assert len(granted(mine) + granted(theirs)) == 5


def test_a_token_bucket_refills_to_its_new_limit_at_its_new_rate(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    mine, theirs = pair(shared_server, fresh_name("reconf"), S.TokenBucket(10, 2, 10.0), clock)
    assert len(granted(mine)) == 10
    mine.reconfigure(S.TokenBucket(20, 5, 10.0))
    theirs.store._rules.follow_now()
    assert theirs.token_limit == 20 and theirs.tokens_per_period == 5
    assert not theirs.acquire(), "a raise adds no tokens: the bucket refills to it"
    clock.advance(10.0)
    assert len(granted(theirs)) == 5, "one period at the new rate"
    clock.advance(100.0)
    assert len(granted(mine) + granted(theirs)) == 20, "full at the new limit"
    theirs.reconfigure(S.TokenBucket(4, 5, 10.0))
    clock.advance(100.0)
    mine.store._rules.follow_now()
    assert len(granted(mine) + granted(theirs)) == 4, "a lowered bucket holds at most its new limit"


@pytest.mark.parametrize("later_spec", ["as_first", "as_changed", "another"])
def test_a_process_started_later_counts_with_the_changed_limit_from_its_first_step(
    shared_server: Server, later_spec: str
) -> None:
    """Whatever its own configuration says (the old limit, the new one, or another of the same
    shape): a name whose limit was changed is the server's to decide."""
    clock = permits.ManualClock(1000.0)
    name = fresh_name("reconf")
    first = shared_server.store(clock=clock).limiter(name, S.FixedWindow(10, 60.0))
    assert len([first.acquire() for _ in range(4)]) == 4
    first.reconfigure(S.FixedWindow(6, 60.0))
    spec = {
        "as_first": S.FixedWindow(10, 60.0),
        "as_changed": S.FixedWindow(6, 60.0),
        "another": S.FixedWindow(99, 60.0),
    }
    later = shared_server.store(clock=clock).limiter(name, spec[later_spec])
    assert len(granted(later)) == 2
    assert later.spec == S.FixedWindow(6, 60.0)
    assert not first.acquire()


def test_a_name_never_changed_refuses_another_limit_as_before(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    name = fresh_name("reconf")
    assert shared_server.store(clock=clock).limiter(name, S.FixedWindow(10, 60.0)).acquire()
    other = shared_server.store(clock=clock).limiter(name, S.FixedWindow(11, 60.0))
    with pytest.raises(ValueError):
        other.acquire()


def test_a_first_change_from_a_process_of_another_limit_is_refused_and_changes_nothing(shared_server: Server) -> None:
    """The first change records the limit the states were made with: a process configured with
    another limit than the processes holding them cannot record its own (every other process would
    then be refused)."""
    clock = permits.ManualClock(1000.0)
    name = fresh_name("reconf")
    holder = shared_server.store(clock=clock).limiter(name, S.FixedWindow(10, 60.0))
    assert len(granted(holder)) == 10
    stray = shared_server.store(clock=clock).limiter(name, S.FixedWindow(11, 60.0))
    with pytest.raises(ValueError, match="made"):  # (the server's words: another rule)
        stray.reconfigure(S.FixedWindow(20, 60.0))
    holder.store._rules.follow_now()
    assert holder.spec == S.FixedWindow(10, 60.0)
    assert not holder.acquire(), "the holder counts on, unchanged"
    later = shared_server.store(clock=clock).limiter(name, S.FixedWindow(10, 60.0))
    assert not later.acquire() and later.spec == S.FixedWindow(10, 60.0)
    holder.reconfigure(S.FixedWindow(12, 60.0))  # a process of the states' limit changes it
    later.store._rules.follow_now()
    assert len(granted(later)) == 2


def test_a_first_keyed_change_from_a_process_of_another_limit_is_refused(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    name = fresh_name("reconf")
    holder = shared_server.store(clock=clock).partitioned("3/minute", name=name)
    assert len(granted(holder, "a")) == 3
    stray = shared_server.store(clock=clock).partitioned("4/minute", name=name)
    with pytest.raises(ValueError):
        stray.acquire("a")  # its keys' steps are refused, as before
    with pytest.raises(ValueError):
        stray.reconfigure("5/minute")
    holder.store._rules.follow_now()
    assert holder.spec == permits.specs.parse("3/minute") and not holder.acquire("a")


async def test_a_first_change_of_an_asyncio_client_from_another_limit_changes_nothing(
    shared_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    clock = permits.ManualClock(1000.0)
    name = fresh_name("reconf")
    holder = shared_server.store(clock=clock).limiter(name, S.FixedWindow(10, 60.0))
    assert holder.acquire()
    async with shared_server.async_store(clock=clock) as store:
        stray = store.limiter(name, S.FixedWindow(11, 60.0))
        stray.reconfigure(S.FixedWindow(20, 60.0))
        await store.aclose()  # the task on its way has landed
    assert "did not reach the server" in caplog.text
    holder.store._rules.follow_now()
    assert holder.spec == S.FixedWindow(10, 60.0) and len(granted(holder)) == 9


def test_another_window_or_kind_is_refused_and_changes_nothing(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    mine, theirs = pair(shared_server, fresh_name("reconf"), S.SlidingWindow(10, 60.0, 4), clock)
    assert mine.acquire()
    with pytest.raises(ValueError, match="window"):
        mine.reconfigure(S.SlidingWindow(10, 30.0, 4))
    with pytest.raises(ValueError, match="segments"):
        mine.reconfigure(S.SlidingWindow(10, 60.0, 6))
    with pytest.raises(TypeError, match="SlidingWindow"):
        mine.reconfigure(S.FixedWindow(10, 60.0))
    with pytest.raises(ValueError, match="spec"):
        mine.reconfigure("ten per fortnight")
    theirs.store._rules.follow_now()
    assert mine.spec == theirs.spec == S.SlidingWindow(10, 60.0, 4)
    assert len(granted(theirs)) == 9


def test_a_rate_string_and_changing_back_to_the_first_limit(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    mine, theirs = pair(shared_server, fresh_name("reconf"), "10/minute", clock)
    mine.reconfigure("3/minute")
    assert len(granted(theirs)) == 3, "a process's first step reads the change"
    mine.reconfigure("10/minute")
    theirs.store._rules.follow_now()
    assert theirs.spec == permits.specs.parse("10/minute")
    assert len(granted(mine)) == 7


def test_every_key_present_and_future_follows_a_keyed_change(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    name = fresh_name("reconf")
    mine = shared_server.store(clock=clock).partitioned("3/minute", name=name)
    theirs = shared_server.store(clock=clock).partitioned("3/minute", name=name)
    assert len([mine.acquire("a") for _ in range(3)]) == 3 and theirs.acquire("b")
    mine.reconfigure("5/minute")
    theirs.store._rules.follow_now()
    for keyed in (mine, theirs):
        assert keyed.acquire("a") and keyed.acquire("c")  # a key held, one new to both
    assert not mine.acquire("a"), "5 for a key"
    assert len(granted(theirs, "b")) == 4
    assert len(granted(theirs, "new")) == 5


def test_a_raise_serves_a_waiting_thread_in_another_process(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    name = fresh_name("reconf")
    mine = shared_server.store(clock=clock).limiter(name, S.FixedWindow(2, 60.0))
    theirs = shared_server.store(clock=clock).limiter(name, S.FixedWindow(2, 60.0), queue_limit=1)
    assert len(granted(mine)) == 2
    waiter, got = queued_wait(theirs, 1)
    mine.reconfigure(S.FixedWindow(3, 60.0))  # the clock never moves: only the raise can grant it
    theirs.store._rules.follow_now()
    waiter.join(10)
    assert not waiter.is_alive() and got and got[0], got
    assert not mine.acquire() and not theirs.acquire()


def test_a_lowered_limit_fails_a_queued_request_it_can_never_serve(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    limiter = shared_server.store(clock=clock).limiter(fresh_name("reconf"), S.FixedWindow(10, 60.0), queue_limit=20)
    assert len(granted(limiter)) == 10
    waiter, got = queued_wait(limiter, 8)
    limiter.reconfigure(S.FixedWindow(5, 60.0))
    waiter.join(10)
    assert not waiter.is_alive() and got and got[0].reason == "limit_reached", got


def test_the_background_round_follows_without_being_asked(
    shared_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(followed_rules, "FOLLOW_S", 0.05)
    clock = permits.ManualClock(1000.0)
    mine, theirs = pair(shared_server, fresh_name("reconf"), S.FixedWindow(10, 60.0), clock)
    assert theirs.acquire()  # its first step: it follows from now on
    mine.reconfigure(S.FixedWindow(12, 60.0))
    deadline = time.monotonic() + 10
    while theirs.permit_limit != 12:
        assert time.monotonic() < deadline, "the change never reached the other process"
        time.sleep(0.02)
    assert len(granted(theirs)) == 11


def test_a_change_against_a_server_that_fails_raises_in_time_and_changes_nothing(own_server: Server) -> None:
    limiter = own_server.store(timeout=TIMEOUT).limiter(fresh_name("reconf"), S.FixedWindow(10, 60.0))
    assert limiter.acquire()
    with own_server.paused():
        started = time.monotonic()
        with pytest.raises(BackendError):
            limiter.reconfigure(S.FixedWindow(20, 60.0))
        assert time.monotonic() - started < BOUND
    assert limiter.spec == S.FixedWindow(10, 60.0)
    limiter.reconfigure(S.FixedWindow(20, 60.0))  # the server back: it changes
    assert limiter.permit_limit == 20


@pytest.mark.parametrize("shared_server", ["redis"], indirect=True)  # reserve= is RedisStore's
def test_a_reserving_store_counts_with_the_new_limit(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    mine, theirs = pair(shared_server, fresh_name("reconf"), S.FixedWindow(10, 60.0), clock, reserve=4)
    assert mine.acquire() and theirs.acquire()  # a batch each
    mine.reconfigure(S.FixedWindow(20, 60.0))
    theirs.store._rules.follow_now()
    assert len(granted(mine) + granted(theirs)) == 18


async def test_an_asyncio_clients_change_lands_in_a_task_of_the_loop(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    name = fresh_name("reconf")
    async with shared_server.async_store(clock=clock) as store:
        limiter = store.limiter(name, S.FixedWindow(10, 60.0))
        for _ in range(10):
            assert await limiter.acquire_async()
        limiter.reconfigure(S.FixedWindow(12, 60.0))  # never a blocking call on the loop's thread
        await store.aclose()  # the tasks on their way have landed
    assert limiter.permit_limit == 12
    other = shared_server.store(clock=clock).limiter(name, S.FixedWindow(10, 60.0))
    assert len(granted(other)) == 2


async def test_an_asyncio_clients_change_outside_a_loop_says_where_it_works(shared_server: Server) -> None:
    async with shared_server.async_store() as store:
        limiter = store.limiter(fresh_name("reconf"), S.FixedWindow(10, 60.0))
        with pytest.raises(TypeError, match="running event loop"):
            await asyncio.to_thread(limiter.reconfigure, S.FixedWindow(12, 60.0))


async def test_an_asyncio_clients_limiters_follow_in_a_task_of_the_loop(
    shared_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(followed_rules, "FOLLOW_S", 0.05)
    clock = permits.ManualClock(1000.0)
    name = fresh_name("reconf")
    async with shared_server.async_store(clock=clock) as store:
        limiter = store.limiter(name, S.FixedWindow(10, 60.0))
        assert await limiter.acquire_async()  # its first step: the loop follows from now on
        shared_server.store(clock=clock).limiter(name, S.FixedWindow(10, 60.0)).reconfigure(S.FixedWindow(3, 60.0))
        deadline = time.monotonic() + 10
        while limiter.permit_limit != 3:
            assert time.monotonic() < deadline, "the change never reached the loop's limiters"
            await asyncio.sleep(0.02)
        assert [bool(await limiter.acquire_async()) for _ in range(3)] == [True, True, False]


@pytest.mark.parametrize("name", ["a b c", "é/ü:{x}", "\udc80 lone surrogate", "x" * 2000, "rules"])
def test_any_name_changes_its_own_limit_and_no_other(shared_server: Server, name: str) -> None:
    clock = permits.ManualClock(1000.0)
    namespace = fresh_name("hostile")
    mine, theirs = (
        shared_server.store(clock=clock, namespace=namespace).limiter(name, S.FixedWindow(4, 60.0)) for _ in range(2)
    )
    neighbour = shared_server.store(clock=clock, namespace=namespace).limiter(name + "!", S.FixedWindow(4, 60.0))
    assert mine.acquire() and neighbour.acquire()
    mine.reconfigure(S.FixedWindow(2, 60.0))
    theirs.store._rules.follow_now()
    neighbour.store._rules.follow_now()
    assert theirs.permit_limit == 2 and neighbour.permit_limit == 4
    assert len(granted(theirs)) == 1 and len(granted(neighbour)) == 3


def test_a_forgotten_lease_larger_than_a_lowered_limit_is_lost_not_retried(shared_server: Server) -> None:
    """The server forgot a held lease of 3 after its limit went down to 2: it cannot be taken
    back (it would be refused whatever the others hold): lost, and told, at the first round."""
    from test_store_lost_leases import forget

    clock = permits.ManualClock(1000.0)
    store = shared_server.store(clock=clock)
    jobs = store.concurrency(fresh_name("reconf"), 4, lease_ttl=600.0)
    big = jobs.acquire(3)
    assert big
    jobs.reconfigure(S.Concurrency(2))
    forget(shared_server)
    store._renewal.renew_now()
    assert big.metadata.get("lost") is True
    assert len(granted(jobs)) == 2, "the lost lease holds nothing on the server"
