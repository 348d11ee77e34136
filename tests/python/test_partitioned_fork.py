"""os.fork() and the general PartitionedLimiter: a child never inherits its lock held, nor waits for
a partition that another thread of the parent was building (that thread is not in the child)."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

from _child import IN_FORK, run_ok

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs os.fork")


def test_a_child_forked_mid_build_and_mid_acquire_uses_the_same_keys() -> None:
    child = run_ok(
        IN_FORK
        + textwrap.dedent(
            """
        import os, threading, time
        import permits
        from permits import Partition, PartitionedLimiter

        entered, stuck = threading.Event(), threading.Event()

        def factory(key):
            if key == "slow" and threading.current_thread() is not threading.main_thread():
                entered.set()
                stuck.wait()  # a build in progress in the parent at every fork
            return permits.NoLimiter()

        limiter = PartitionedLimiter(lambda r: Partition.custom(r, factory))
        builder = threading.Thread(target=limiter.acquire, args=("slow",), daemon=True)
        builder.start()
        assert entered.wait(10)

        stop, hammered = threading.Event(), threading.Event()

        def hammer():
            i = 0
            while not stop.is_set():
                limiter.acquire(f"k{i % 64}").release()  # takes and drops the lock all the time
                i += 1
                if i == 1000:
                    hammered.set()

        hammerer = threading.Thread(target=hammer, daemon=True)
        hammerer.start()
        assert hammered.wait(10)

        def child():  # only this thread exists here
            assert limiter.acquire("slow")
            for i in range(64):
                assert limiter.acquire(f"k{i}")

        for _ in range(20):
            in_fork(child)
        stop.set()
        hammerer.join(10)
        # The parent is unaffected: its own builder still owns "slow".
        stuck.set()
        builder.join(10)
        assert limiter.acquire("slow")
        print("ok")
        """
        )
    )
    assert child.lines() == ["ok"]
