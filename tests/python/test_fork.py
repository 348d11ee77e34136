"""os.fork() with the engine's limiters in use, and closed limiters' timers.

After a fork the child's limiters are consistent and usable: no lock held by a thread the child
does not have, no timer of the parent's in the way of its own, an engine thread when it needs one.
Requests the parent's threads and tasks had queued are dropped in the child without being granted;
leases held at the fork stay held, and their release serves the child's own waiters. Each scenario
runs in a child interpreter (``_child.run_ok``), which forks again and checks the grandchild's exit
status; a hang anywhere fails the test with what was printed.
"""

from __future__ import annotations

import textwrap

from _child import IN_FORK, run_ok

# What every scenario shares: fork, run `body` in the child, fail on a hang or a failed assertion.
PRELUDE = (
    IN_FORK
    + """
import asyncio, gc, threading
import permits
from permits import _core, Partition, PartitionedLimiter

def until(predicate, what):
    give_up = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < give_up, what
        time.sleep(0.001)

def kinds(queue_limit):
    return [
        permits.ConcurrencyLimiter(1, queue_limit=queue_limit),
        permits.TokenBucketLimiter(1, 1, 3600.0, queue_limit=queue_limit),
        permits.FixedWindowLimiter(1, 3600.0, queue_limit=queue_limit),
        permits.SlidingWindowLimiter(1, 3600.0, 2, queue_limit=queue_limit),
        permits.SlidingWindowCounterLimiter(1, 3600.0, queue_limit=queue_limit),
    ]
"""
)


def scenario(body: str) -> None:
    run_ok(PRELUDE + textwrap.dedent(body))


def test_threads_blocked_in_wait_are_dropped_and_the_child_waits_on_its_own() -> None:
    scenario(
        """
        limiters = kinds(8)
        held = [lim.acquire() for lim in limiters]
        assert all(held)
        results = []
        threads = []
        for lim in limiters:
            for timeout in (None, None, 3600.0):  # a deadline: the engine thread holds a timer for it
                t = threading.Thread(
                    target=lambda lim=lim, timeout=timeout: results.append(lim.wait(timeout=timeout)), daemon=True
                )
                t.start()
                threads.append(t)
        for lim in limiters:
            until(lambda: lim.statistics().current_queued_count == 3, "the parent's waits queue")
        timers = _core._engine_pending_timers()
        assert timers >= 5

        def child():
            assert _core._engine_pending_timers() == 0  # the parent's timers are not the child's
            for lim in limiters:
                s = lim.statistics()
                assert (s.current_queued_count, s.current_available_permits) == (0, 0), (lim, s)
                # A timed wait of the child's own: it needs a timer the parent's did not hide, and a thread.
                lease = lim.wait(timeout=0.05)
                assert not lease and lease.reason == "timeout", (lim, lease)
                assert lim.statistics().current_queued_count == 0
            # A lease held at the fork, released here, goes to the child's waiter.
            conc = limiters[0]
            got = []
            t = threading.Thread(target=lambda: got.append(conc.wait(timeout=10)), daemon=True)
            t.start()
            until(lambda: conc.statistics().current_queued_count == 1, "the child's wait queues")
            held[0].release()
            t.join(10)
            assert got and got[0].acquired
            assert results == []  # nothing reached the parent's waiters here
            got[0].release()
            assert conc.statistics().current_available_permits == 1

        in_fork(child)
        # The parent goes on as before: its waits are still queued and served by its releases.
        for lim in limiters:
            assert lim.statistics().current_queued_count == 3
        held[0].release()
        until(lambda: len(results) == 1, "the parent's first waiter is served")
        assert results[0].acquired
        for lim in limiters:
            lim.close()
        for t in threads:
            t.join(10)
        assert sorted(r.reason or "acquired" for r in results) == ["acquired"] + ["closed"] * 14
        """
    )


def test_forks_while_threads_hammer_the_limiters() -> None:
    # The engine thread serves a fast bucket's queue all the time (it holds the limiter's lock
    # while it does): forks land in the middle of that, and of the threads' acquires and releases.
    scenario(
        """
        bucket = permits.TokenBucketLimiter(4, 4, 0.001, queue_limit=64)
        conc = permits.ConcurrencyLimiter(2, queue_limit=64)
        keyed = PartitionedLimiter.per_key(Partition.concurrency(None, 2, queue_limit=64))
        stop = threading.Event()

        def hammer(i):
            while not stop.is_set():
                bucket.wait(timeout=0.01)
                with conc.wait(timeout=0.01):
                    pass
                with keyed.wait(f"k{i % 3}", timeout=0.01):
                    pass

        threads = [threading.Thread(target=hammer, args=(i,), daemon=True) for i in range(4)]
        for t in threads:
            t.start()

        def child():
            for lim in (bucket, conc):
                assert lim.statistics().current_queued_count == 0
            # Every lock is free and the bucket refills: these complete, and acquire.
            for _ in range(20):
                lease = bucket.wait(timeout=5)
                assert lease.acquired, lease
            # Permits the parent's threads held at the fork stay held (nobody here releases them):
            # the rest can be waited for, and a timed wait returns on time.
            lease = conc.wait(timeout=0.02)
            assert lease.acquired or lease.reason == "timeout", lease
            lease.release()
            assert keyed.statistics("k0").current_queued_count == 0
            keyed.wait("k0", timeout=0.02).release()

        for _ in range(20):
            in_fork(child)
        stop.set()
        for t in threads:
            t.join(10)
        """
    )


def test_asyncio_parent_with_thousands_of_queued_waits() -> None:
    scenario(
        """
        conc = permits.ConcurrencyLimiter(1, queue_limit=5000)
        bucket = permits.TokenBucketLimiter(1, 1, 3600.0, queue_limit=5000)
        keyed = PartitionedLimiter.per_key(Partition.concurrency(None, 2, queue_limit=5000))
        held = conc.acquire()
        assert held and bucket.acquire()
        keyed_held = [keyed.acquire("k"), keyed.acquire("k")]
        assert all(keyed_held)

        loop = asyncio.new_event_loop()
        queued = threading.Event()
        finished = []

        async def parent_waits():
            tasks = [asyncio.ensure_future(conc.wait_async()) for _ in range(3000)]
            tasks += [asyncio.ensure_future(bucket.wait_async()) for _ in range(1000)]
            tasks += [asyncio.ensure_future(keyed.wait_async("k")) for _ in range(2000)]
            while conc.statistics().current_queued_count < 3000 or keyed.statistics("k").current_queued_count < 2000:
                await asyncio.sleep(0.001)
            queued.set()
            finished.extend(await asyncio.gather(*tasks))

        loop_thread = threading.Thread(target=lambda: loop.run_until_complete(parent_waits()), daemon=True)
        loop_thread.start()
        queued.wait(30)
        assert bucket.statistics().current_queued_count == 1000

        def child():
            for lim in (conc, bucket):
                assert lim.statistics().current_queued_count == 0
            assert keyed.statistics("k").current_queued_count == 0

            async def main():
                # The child's own waits queue behind the leases held at the fork, and those leases'
                # release serves them, one after another.
                async def use(lim, *key):
                    async with lim.wait_async(*key) as lease:
                        assert lease.acquired
                        await asyncio.sleep(0)

                tasks = [asyncio.ensure_future(use(conc)) for _ in range(100)]
                tasks += [asyncio.ensure_future(use(keyed, "k")) for _ in range(100)]
                while conc.statistics().current_queued_count < 100 or keyed.statistics("k").current_queued_count < 100:
                    await asyncio.sleep(0.001)
                held.release()
                for lease in keyed_held:
                    lease.release()
                await asyncio.wait_for(asyncio.gather(*tasks), 20)
                assert conc.statistics().current_available_permits == 1
                assert keyed.statistics("k").current_available_permits == 2
                # A wait that cannot be served (the bucket refills in an hour) queues and is cancelled.
                pending = asyncio.ensure_future(bucket.wait_async())
                while bucket.statistics().current_queued_count < 1:
                    await asyncio.sleep(0.001)
                pending.cancel()
                try:
                    await pending
                except asyncio.CancelledError:
                    pass
                assert bucket.statistics().current_queued_count == 0

            asyncio.run(main())

        in_fork(child)
        # The parent's waits are untouched: its release serves the first of them.
        assert conc.statistics().current_queued_count == 3000
        held.release()
        until(lambda: conc.statistics().current_queued_count == 2999, "the parent's first wait is served")
        for lim in (conc, bucket, keyed):
            lim.close()
        loop_thread.join(30)
        assert len(finished) == 6000
        assert sum(1 for lease in finished if lease.acquired) == 1  # keyed's leases were released only in the child
        assert {lease.reason for lease in finished if not lease.acquired} == {"closed"}
        """
    )


def test_per_key_table_in_the_child_serves_its_own_waiters_and_evicts() -> None:
    scenario(
        """
        keyed = PartitionedLimiter.per_key(Partition.concurrency(None, 2, queue_limit=8), idle_timeout=0.05)
        held = [keyed.acquire("a"), keyed.acquire("a")]
        assert all(held)
        b = keyed.acquire("b")  # never released: "b" is in use for good
        assert b.acquired
        results = []
        threads = [threading.Thread(target=lambda: results.append(keyed.wait("a")), daemon=True) for _ in range(3)]
        for t in threads:
            t.start()
        until(lambda: keyed.statistics("a").current_queued_count == 3, "the parent's waits queue")

        def child():
            s = keyed.statistics("a")
            assert (s.current_queued_count, s.current_available_permits) == (0, 0), s
            got = []
            t = threading.Thread(target=lambda: got.append(keyed.wait("a", timeout=10)), daemon=True)
            t.start()
            until(lambda: keyed.statistics("a").current_queued_count == 1, "the child's wait queues")
            held[0].release()
            t.join(10)
            assert got and got[0].acquired and results == []
            got[0].release()
            held[1].release()
            assert keyed.statistics("a").current_available_permits == 2
            # "a" is idle now: the engine thread evicts it after the idle timeout; "b" stays.
            until(lambda: keyed.partition_count == 1, "the idle key is evicted")
            assert keyed.statistics("b").current_available_permits == 1

        in_fork(child)
        assert keyed.statistics("a").current_queued_count == 3
        keyed.close()
        for t in threads:
            t.join(10)
        assert [r.reason for r in results] == ["closed"] * 3
        """
    )


def test_multiprocessing_fork_start_method() -> None:
    scenario(
        """
        import multiprocessing

        conc = permits.ConcurrencyLimiter(1, queue_limit=8)
        window = permits.FixedWindowLimiter(1, 3600.0, queue_limit=8)
        held = conc.acquire()
        assert held and window.acquire()
        threads = [
            threading.Thread(target=lim.wait, args=(1, 3600.0), daemon=True) for lim in (conc, window) for _ in range(2)
        ]
        for t in threads:
            t.start()
        until(lambda: conc.statistics().current_queued_count == 2, "the parent's waits queue")
        until(lambda: window.statistics().current_queued_count == 2, "the parent's waits queue")

        def work(out):
            stats = [lim.statistics().current_queued_count for lim in (conc, window)]
            timed_out = [lim.wait(timeout=0.05).reason for lim in (conc, window)]
            held.release()
            lease = conc.wait(timeout=5)
            out.put((stats, timed_out, lease.acquired))

        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        p = ctx.Process(target=work, args=(out,))
        p.start()
        assert out.get(timeout=30) == ([0, 0], ["timeout", "timeout"], True)
        p.join(30)
        assert p.exitcode == 0
        assert conc.statistics().current_queued_count == 2  # the parent's are still there
        for lim in (conc, window):
            lim.close()
        for t in threads:
            t.join(10)
        """
    )


def test_closed_or_cancelled_limiters_leave_the_engines_timers() -> None:
    # Each limiter has a waiter the engine holds a timer for, an hour away; closing the limiter, or
    # cancelling its last wait, must drop that timer (it pinned the limiter's memory until due).
    scenario(
        """
        import weakref

        base = _core._engine_pending_timers()

        async def main():
            limiters = [permits.FixedWindowLimiter(1, 3600.0, queue_limit=1) for _ in range(10_000)]
            tasks = []
            for lim in limiters:
                assert lim.acquire()
                tasks.append(asyncio.ensure_future(lim.wait_async()))
            await asyncio.sleep(0)
            assert all(lim.statistics().current_queued_count == 1 for lim in limiters)
            assert _core._engine_pending_timers() == base + 10_000
            for lim in limiters[::2]:
                lim.close()
            for task in tasks[1::2]:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            assert [r.reason for r in results[::2]] == ["closed"] * 5000
            assert all(isinstance(r, asyncio.CancelledError) for r in results[1::2])
            assert _core._engine_pending_timers() == base
            return weakref.ref(limiters[0])

        ref = asyncio.run(main())
        gc.collect()
        assert ref() is None
        assert _core._engine_pending_timers() == base
        """
    )
