"""Shapes real services take, each in a child interpreter under a time limit (a hang or a crash
fails one test): thread-per-loop servers, daemon threads blocked at interpreter exit, loops closed
or dropped by hand with waits queued, subinterpreters, and the clock's first calibration."""

from __future__ import annotations

import sys

import pytest

from _child import run_child, run_ok
from _support import need


def test_first_queued_waits_from_many_threads_each_with_its_own_loop() -> None:
    # Each thread runs asyncio.run and queues the process's first wait_async at once: the objects
    # the engine needs from Python are made at import, not by whichever thread comes first.
    code = """
        import asyncio, threading, permits
        N = 12
        lim = permits.ConcurrencyLimiter(1, queue_limit=100)
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
            granted.append(lease.acquired)
            lease.release()

        threads = [threading.Thread(target=asyncio.run, args=(main(),)) for _ in range(N)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(sum(granted), lim.available_permits(), lim.statistics().current_queued_count)
    """
    for _ in range(5):  # the race was lost about once in ten runs
        assert run_ok(code, timeout=30).lines() == ["12 1 0"]


@pytest.mark.parametrize("call", ["lim.wait()", "lim.wait(timeout=3600)", "per_key.wait('k')"])
def test_interpreter_exit_with_daemon_threads_blocked_in_wait(call: str) -> None:
    # CPython ends such threads with a forced unwind when they wake: it must pass through the
    # engine (no abort), as it does for a thread blocked on threading.Semaphore.
    child = run_child(
        f"""
        import threading, time, permits
        lim = permits.ConcurrencyLimiter(1, queue_limit=10)
        per_key = permits.PartitionedLimiter.per_key(permits.Partition.concurrency(None, 1, queue_limit=10))
        held, held_key = lim.acquire(), per_key.acquire("k")
        threads = [threading.Thread(target=lambda: {call}, daemon=True) for _ in range(8)]
        for t in threads:
            t.start()
        while lim.statistics().current_queued_count + per_key.statistics("k").current_queued_count < 8:
            pass
        time.sleep(0.06)  # blocked waits wake every 50 ms: some do while the interpreter finalizes
        print("exiting")
        """
    )
    assert child.returncode == 0, child.stderr
    assert child.lines() == ["exiting"]
    assert "terminate called" not in child.stderr


def test_interpreter_exit_with_a_daemon_thread_waiting_while_another_releases() -> None:
    # Grants keep arriving while the interpreter finalizes: a waiter woken then is ended cleanly.
    child = run_child(
        """
        import threading, permits
        lim = permits.ConcurrencyLimiter(1, queue_limit=100)
        def churn():
            while True:
                lim.wait(timeout=1).release()
        for _ in range(4):
            threading.Thread(target=churn, daemon=True).start()
        while lim.statistics().total_successful_leases < 1000:
            pass
        print("exiting")
        """
    )
    assert child.returncode == 0, child.stderr
    assert "terminate called" not in child.stderr


_CLOSED_LOOP = """
    import asyncio, gc, sys, warnings, permits
    warnings.simplefilter("ignore")
    kind, how = {kind!r}, {how!r}
    if kind == "uvloop":
        import uvloop
        new_loop = uvloop.new_event_loop
    else:
        new_loop = asyncio.new_event_loop
    lim = permits.ConcurrencyLimiter(1, queue_limit=5)
    tb = permits.TokenBucketLimiter(1, 1, 3600.0, queue_limit=5)
    per_key = permits.PartitionedLimiter.per_key(permits.Partition.concurrency(None, 1, queue_limit=5))
    held, key_held = lim.acquire(), per_key.acquire("k")
    assert tb.acquire()

    async def waiter(wait):
        return await wait

    loop = new_loop()
    tasks = [loop.create_task(waiter(w)) for w in (lim.wait_async(), tb.wait_async(), per_key.wait_async("k"))]
    loop.run_until_complete(asyncio.sleep(0.01))
    queued = lambda: (lim.statistics().current_queued_count, tb.statistics().current_queued_count,
                      per_key.statistics("k").current_queued_count)
    print("queued", *queued())
    if how == "granted-then-closed":
        held.release()  # granted by the engine, never drained: the loop does not run again
        key_held.release()
        loop.close()
    elif how == "closed":
        loop.close()
        held.release()
        key_held.release()
    else:  # dropped unclosed
        del loop, tasks
        gc.collect()
        held.release()
        key_held.release()
    print("queued", *queued())
    print("available", lim.available_permits(), per_key.available_permits("k"))
"""


@pytest.mark.parametrize("how", ["closed", "granted-then-closed", "dropped"])
def test_a_loop_closed_or_dropped_with_waits_queued_gives_their_permits_back(how: str) -> None:
    child = run_ok(_CLOSED_LOOP.format(kind="asyncio", how=how))
    assert child.lines() == ["queued 1 1 1", "queued 0 0 0", "available 1 1"]


def test_a_chain_waiting_in_a_closed_loop_gives_everything_back_once_collected() -> None:
    # The chain holds its first member's permit while it waits on the second: the member's queued
    # wait leaves at close; the chain's coroutine gives the first permit back when it is collected.
    child = run_ok(
        """
        import asyncio, gc, warnings, permits
        warnings.simplefilter("ignore")
        a = permits.ConcurrencyLimiter(1, queue_limit=5)
        b = permits.ConcurrencyLimiter(1, queue_limit=5)
        held_b = b.acquire()
        loop = asyncio.new_event_loop()
        task = loop.create_task(permits.chain(a, b).wait_async().__aenter__())
        loop.run_until_complete(asyncio.sleep(0.01))
        print(a.available_permits(), b.statistics().current_queued_count)
        loop.close()
        print(a.available_permits(), b.statistics().current_queued_count)
        del task, loop
        gc.collect()
        print(a.available_permits(), b.statistics().current_queued_count)
        """
    )
    assert child.lines() == ["0 1", "0 0", "1 0"]


@pytest.mark.parametrize("how", ["closed", "granted-then-closed"])
def test_a_uvloop_loop_closed_with_waits_queued_gives_their_permits_back(how: str) -> None:
    need("uvloop")
    child = run_ok(_CLOSED_LOOP.format(kind="uvloop", how=how))
    assert child.lines() == ["queued 1 1 1", "queued 0 0 0", "available 1 1"]


def test_waits_queued_from_a_uvloop_loop_are_granted() -> None:
    need("uvloop")
    child = run_ok(
        """
        import asyncio, uvloop, permits
        lim = permits.ConcurrencyLimiter(2, queue_limit=1000)
        async def one():
            async with lim.wait_async() as lease:
                await asyncio.sleep(0)
                return lease.acquired
        async def main():
            return sum(await asyncio.gather(*(one() for _ in range(500))))
        print(uvloop.run(main()), lim.available_permits())
        """
    )
    assert child.lines() == ["500 2"]


_IN_SUBINTERPRETER = """
try:
    import permits
except ImportError as exc:
    assert "main interpreter" in str(exc), exc
else:
    raise AssertionError("permits imported in a subinterpreter")
"""


def test_a_subinterpreter_cannot_import_it_and_the_main_interpreter_is_unaffected() -> None:
    # mod_wsgi's application groups are subinterpreters sharing the GIL.
    child = run_ok(
        f"""
        import asyncio
        try:
            import _xxsubinterpreters as interpreters
        except ImportError:
            import _interpreters as interpreters
        import permits
        for _ in range(2):
            sub = interpreters.create()
            interpreters.run_string(sub, {_IN_SUBINTERPRETER!r})
            interpreters.destroy(sub)
        lim = permits.ConcurrencyLimiter(1, queue_limit=1)
        async def main():
            held = lim.acquire()
            task = asyncio.ensure_future(lim.wait_async())
            await asyncio.sleep(0)
            held.release()
            return (await task).acquired
        print(asyncio.run(main()))
        """
    )
    assert child.lines() == ["True"]


@pytest.mark.skipif(sys.platform != "linux", reason="the TSC calibration runs on Linux only")
def test_the_first_clock_does_not_hold_the_gil_while_it_calibrates() -> None:
    # The TSC's calibration sleeps at least 10 ms. It starts on a thread of its own when the
    # extension is imported, and a limiter made before it is done waits for it without the GIL. Held
    # anywhere, the GIL would stop a ticking thread for those 10 ms; released, the thread keeps
    # ticking through the import and the first limiter (a short switch interval keeps the import's
    # own Python code from holding it for more than a millisecond or two at a time).
    code = """
        import sys, threading, time
        # What permits imports, imported untimed: loading OpenSSL and the like holds the GIL for
        # milliseconds, which is not what this measures.
        import asyncio, concurrent.futures, dataclasses, datetime, email.utils, inspect, ipaddress
        import logging, random, subprocess, typing
        sys.setswitchinterval(0.001)
        ticks = []
        stop = threading.Event()
        def tick():
            while not stop.is_set():
                ticks.append(time.perf_counter())
                time.sleep(0.0002)
        t = threading.Thread(target=tick)
        t.start()
        while len(ticks) < 5:
            time.sleep(0.001)
        began = time.perf_counter()
        import permits
        permits.TokenBucketLimiter(1, 1, 1.0)  # the first clock: waits for the calibration
        ended = time.perf_counter()
        time.sleep(0.002)
        stop.set()
        t.join()
        # The ticks that span the import and the call: the last before them to the first after.
        first = max(i for i, x in enumerate(ticks) if x <= began)
        last = next((i for i, x in enumerate(ticks) if x >= ended), len(ticks) - 1)
        span = ticks[first : last + 1]
        print(permits.MonotonicClock().source, max(b - a for a, b in zip(span, span[1:])) * 1000)
    """
    # (Where the TSC is not trusted nothing is calibrated, and this holds trivially.) A host that
    # stalls this process for 9 ms can still make one child look held: up to ten are tried (a
    # calibration holding the GIL never shows less than 10 ms however many are).
    results = []
    for _ in range(10):
        source, gap = run_ok(code).lines()[0].split()
        results.append((source, float(gap)))
        if source != "tsc" or float(gap) < 9.0:
            break
    assert any(source != "tsc" or gap < 9.0 for source, gap in results), results
