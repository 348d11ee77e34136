"""Shared-memory limiters in the shapes services take, each in a child interpreter under a time
limit: threads each running asyncio.run, fork() with a wait in flight and a lease held, exit with
threads blocked in a wait, uvloop and trio."""

from __future__ import annotations

import pytest

from _child import IN_FORK, run_child, run_ok
from _support import need

PRELUDE = """
import os, threading, time, asyncio, permits
from permits.shm import SharedMemoryStore
store = SharedMemoryStore(f"deploy-{os.getpid()}")
store.unlink()  # this process (and its forks) keep it mapped; nothing is left behind
"""


def test_threads_each_running_asyncio_run_share_one_limit() -> None:
    code = (
        PRELUDE
        + """
N = 8
lim = store.concurrency("c", 1)
held = lim.acquire()
barrier = threading.Barrier(N)
granted = []

async def main():
    barrier.wait()
    task = asyncio.ensure_future(lim.wait_async())
    if threading.current_thread() is threads[0]:
        while lim.statistics().current_queued_count < N:
            await asyncio.sleep(0.001)
        held.release()
    lease = await task
    granted.append(bool(lease))
    lease.release()

threads = [threading.Thread(target=asyncio.run, args=(main(),)) for _ in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(sum(granted), lim.available_permits(), lim.statistics().current_queued_count)
"""
    )
    assert run_ok(code).lines() == ["8 1 0"]


def test_fork_with_a_wait_in_flight_and_a_lease_held() -> None:
    code = (
        PRELUDE
        + IN_FORK
        + """
lim = store.concurrency("c", 2, queue_limit=10)
held = lim.acquire(2)
waiter = threading.Thread(target=lambda: results.append(lim.wait(timeout=30)))
results = []
waiter.start()
while lim.statistics().current_queued_count < 1:
    time.sleep(0.001)

def child():
    # The parent's queued wait is not the child's; its lease copy releases nothing; the child's
    # own leases work, and a wait of its own is served by a release.
    assert lim.statistics().current_queued_count == 0
    held.release()
    assert lim.available_permits() == 0, lim.available_permits()
    assert not lim.acquire()
    other = store.concurrency("other", 1)
    lease = other.acquire()
    assert lease and not other.acquire()
    threading.Timer(0.05, lease.release).start()
    assert other.wait(timeout=30)

in_fork(child)
assert lim.available_permits() == 0
held.release()
waiter.join(30)
print(bool(results[0]), lim.statistics().current_queued_count)
"""
    )
    assert run_ok(code).lines() == ["True 0"]


@pytest.mark.parametrize("call", ["lim.wait()", "lim.wait(timeout=3600)", "keyed.wait('k')"])
def test_interpreter_exit_with_daemon_threads_blocked_in_a_shared_wait(call: str) -> None:
    child = run_child(
        PRELUDE
        + f"""
lim = store.concurrency("c", 1, queue_limit=10)
keyed = store.partitioned(permits.Partition.concurrency(None, 1, queue_limit=10), name="k")
held, held_key = lim.acquire(), keyed.acquire("k")
threads = [threading.Thread(target=lambda: {call}, daemon=True) for _ in range(6)]
for t in threads:
    t.start()
while lim.statistics().current_queued_count + keyed.statistics("k").current_queued_count < 6:
    time.sleep(0.001)
print("exiting")
"""
    )
    assert child.returncode == 0, child.stderr
    assert child.lines() == ["exiting"]


@pytest.mark.parametrize("runner", ["uvloop", "trio"])
def test_waits_under_uvloop_and_trio(runner: str) -> None:
    need(runner)
    body = {
        "uvloop": "import uvloop\nrun = lambda main: uvloop.run(main())",
        "trio": "import trio\nrun = trio.run",
    }[runner]
    code = (
        PRELUDE
        + body
        + """
lim = store.concurrency("c", 1)
keyed = store.partitioned("1/hour", name="k")

async def main():
    held = lim.acquire()
    threading.Timer(0.05, held.release).start()
    async with lim.wait_async() as lease:
        assert lease
    assert keyed.acquire("a")
    async with keyed.acquire_async("b") as lease:
        assert lease
    print("ok")

run(main)
"""
    )
    assert run_ok(code).lines() == ["ok"]
