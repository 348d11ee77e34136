"""A store in use when the process forks (gunicorn --preload, multiprocessing's fork): the child
counts against the same limit through connections of its own, and the parent's connections go on
working after the child is gone (a child must never use, nor close, its parent's sessions).

Each scenario runs in a child interpreter under a time limit (tests/python/_child.py)."""

from __future__ import annotations

import pytest

from _child import IN_FORK, run_ok

STORES = {
    "redis-sync": "import redis\nfrom permits.redis import RedisStore\n"
    "store = RedisStore(redis.Redis.from_url(TARGET), prefix=PREFIX)\n",
    "postgres-conninfo": "from permits.postgres import PostgresStore\nstore = PostgresStore(TARGET, table=PREFIX)\n",
}


def _run_in_fork(kind: str, request: pytest.FixtureRequest, scenario: str, prefix: str, give_up: str = "30") -> None:
    """Runs ``scenario`` (IN_FORK's ``in_fork`` defined) with the store of ``kind``, in a child
    interpreter that must print "ok" last; ``prefix`` keeps its state apart from other tests'."""
    if kind.startswith("redis"):
        env = {"STORE_TARGET": request.getfixturevalue("redis_server").url, "STORE_PREFIX": f"{prefix}-{kind}:"}
    else:
        env = {"STORE_TARGET": request.getfixturevalue("postgres_server").conninfo, "STORE_PREFIX": f"{prefix}_test"}
    child = run_ok(IN_FORK + scenario.format(store=STORES[kind]), env={**env, "FORK_GIVE_UP": give_up})
    assert child.lines()[-1] == "ok"


SCENARIO = """
import asyncio, os
TARGET, PREFIX = os.environ["STORE_TARGET"], os.environ["STORE_PREFIX"]
{store}
window = store.fixed_window("api", 40, 3600.0)
jobs = store.concurrency("jobs", 2, lease_ttl=30.0)
assert sum(1 for _ in range(10) if window.acquire())  == 10  # the parent's connections are open
held = jobs.acquire()
assert held

def child():
    # its own connections: the parent's are not touched (nor closed at its exit)
    assert sum(1 for _ in range(10) if window.acquire()) == 10
    lease = jobs.acquire()
    assert lease and not jobs.acquire()  # the parent holds one, this child the other
    lease.release()
    async def in_a_loop():
        return sum([bool(await window.acquire_async()) for _ in range(5)])
    assert asyncio.run(in_a_loop()) == 5
    store.close()

in_fork(child)
in_fork(child)
# 10 + 2 * 15 = 40 of 40 taken: the limit is spent, and the parent still asks through its connections.
assert window.available_permits() == 0, window.available_permits()
assert not window.acquire()
assert jobs.available_permits() == 1
held.release()
assert jobs.available_permits() == 2
store.close()
print("ok")
"""


@pytest.mark.parametrize("kind", sorted(STORES))
def test_a_forked_child_shares_the_limit_and_leaves_the_parents_connections(
    kind: str, request: pytest.FixtureRequest
) -> None:
    _run_in_fork(kind, request, SCENARIO, "fork")


COPY_SCENARIO = """
import os
TARGET, PREFIX = os.environ["STORE_TARGET"], os.environ["STORE_PREFIX"]
{store}
jobs = store.concurrency("copies", 1, lease_ttl=30.0)
held = jobs.acquire()
assert held

def child():
    held.release()  # the parent's lease, copied by the fork: not the child's to give back
    assert jobs.available_permits() == 0
    store.close()

in_fork(child)
assert jobs.available_permits() == 0, "a forked child's copy of a lease gave the parent's permit back"
assert not jobs.acquire()
held.release()
assert jobs.available_permits() == 1
store.close()
print("ok")
"""


@pytest.mark.parametrize("kind", sorted(STORES))
def test_a_forked_childs_copy_of_a_lease_releases_nothing(kind: str, request: pytest.FixtureRequest) -> None:
    _run_in_fork(kind, request, COPY_SCENARIO, "copy")


HELD_SCENARIO = """
import os, threading, gc, time
from permits import _lost_leases, _pausing
TARGET, PREFIX = os.environ["STORE_TARGET"], os.environ["STORE_PREFIX"]
{store}
window = store.fixed_window("api", 10, 3600.0)
jobs = store.concurrency("jobs", 2, lease_ttl=30.0)
assert window.acquire()
held = jobs.acquire()
assert held
# The store's threads (the lease renewal's, the eviction check's, the purge's, a waiter's pause) are
# inside a lock of the store, of its connection pool or of an Event when the process forks: the
# child's copies of those locks are held by threads the child does not have.
locks = [store._renewal._lock, store._renewal._kick._cond, store._renewal._stop._cond, store._renewal._settled,
         _pausing._changed, _lost_leases._lock]
postgres = not hasattr(store._backend, "_bounded")
if postgres:
    locks += [store._purger._lock, store._purger._stop._cond, store._backend._statements_lock]
else:
    locks.append(store._backend._bounded.client.connection_pool._lock)
    locks.append(store._backend._lock)
inside, leave = threading.Event(), threading.Event()
def busy():
    for lock in locks:
        lock.acquire()
    inside.set()
    leave.wait()
    for lock in reversed(locks):
        lock.release()
threading.Thread(target=busy, daemon=True).start()
assert inside.wait(10)

def child():
    _lost_leases.report("child", 1)  # a loss the child's renewal found: logged under the lock
    if postgres:
        store._backend._statements = None  # (as after a failure: the schema is looked for again)
    assert window.acquire()  # through connections of its own, not the copied pool
    assert window.available_permits() == 8
    lease = jobs.acquire()
    assert lease and not jobs.acquire()
    lease.release()
    dropped = jobs.acquire()
    assert dropped
    del dropped  # given back by a renewal thread of the child's own
    gc.collect()
    assert store._renewal.flush(time.monotonic() + 10)
    assert jobs.available_permits() == 1
    store.close()

in_fork(child)
leave.set()
assert window.available_permits() == 8
assert jobs.available_permits() == 1
held.release()
store.close()
print("ok")
"""


@pytest.mark.parametrize("kind", sorted(STORES))
def test_a_fork_while_the_stores_threads_hold_its_locks_leaves_the_child_a_working_store(
    kind: str, request: pytest.FixtureRequest
) -> None:
    # (Found on the free-threaded build: a fork right after a store's first calls, while its eviction
    # check was taking a connection or its new renewal thread was entering its wait, left the child
    # hung in redis-py's after-fork reset of the pool, or in the store's close.)
    _run_in_fork(kind, request, HELD_SCENARIO, "held", give_up="15")


QUEUED_SCENARIO = """
import os, threading, time
TARGET, PREFIX = os.environ["STORE_TARGET"], os.environ["STORE_PREFIX"]
{store}
jobs = store.concurrency("queued", 2, lease_ttl=30.0, queue_limit=4)
held = jobs.acquire()
assert held
# A thread of the parent waits for 2 permits (1 is free): it heads the process's queue when the
# process forks. The child has no such thread: its copy of the queue must not keep its requests
# behind it.
outcome = []
waiter = threading.Thread(target=lambda: outcome.append(jobs.wait(2, timeout=30)), daemon=True)
waiter.start()
deadline = time.monotonic() + 10
while jobs.statistics().current_queued_count != 2:
    assert time.monotonic() < deadline, "the parent's waiter never queued"
    time.sleep(0.01)

def child():
    started = time.monotonic()
    lease = jobs.wait(1, timeout=5)
    assert lease, lease.reason  # the free permit, at once: no waiter of the child's is before it
    assert time.monotonic() - started < 4
    assert jobs.statistics().current_queued_count == 0
    lease.release()
    store.close()

in_fork(child)
held.release()  # the parent's waiter gets its 2
waiter.join(10)
assert outcome and outcome[0], outcome
outcome[0].release()
store.close()
print("ok")
"""


@pytest.mark.parametrize("kind", sorted(STORES))
def test_a_forked_childs_queue_holds_none_of_its_parents_waiters(kind: str, request: pytest.FixtureRequest) -> None:
    _run_in_fork(kind, request, QUEUED_SCENARIO, "queued")


FOLLOW_SCENARIO = """
import os, time
TARGET, PREFIX = os.environ["STORE_TARGET"], os.environ["STORE_PREFIX"]
from permits import specs
from permits._stores import followed_rules
followed_rules.FOLLOW_S = 0.05
{store}

def another():  # a store of another process
    if PREFIX.endswith("_test"):
        from permits.postgres import PostgresStore
        return PostgresStore(TARGET, table=PREFIX)
    import redis
    from permits.redis import RedisStore
    return RedisStore(redis.Redis.from_url(TARGET), prefix=PREFIX)

def until(check):
    give_up = time.monotonic() + 10
    while not check():
        assert time.monotonic() < give_up, "the change never reached this process"
        time.sleep(0.01)

window = store.fixed_window("api", 10, 3600.0)
assert window.acquire()  # the parent follows the name from now on (a thread of its own)

def child():
    assert window.acquire()  # the parent's thread is not here: the child follows with one of its own
    another().fixed_window("api", 10, 3600.0).reconfigure(specs.FixedWindow(12, 3600.0))
    until(lambda: window.permit_limit == 12)
    store.close()

in_fork(child)
until(lambda: window.permit_limit == 12)
assert sum(1 for _ in range(20) if window.acquire()) == 10  # 12, of which 2 were taken
store.close()
print("ok")
"""


@pytest.mark.parametrize("kind", sorted(STORES))
def test_a_forked_child_follows_a_changed_limit_with_a_thread_of_its_own(
    kind: str, request: pytest.FixtureRequest
) -> None:
    _run_in_fork(kind, request, FOLLOW_SCENARIO, "follow")
