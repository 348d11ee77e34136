"""RedisStore and PostgresStore when their server fails mid-test: killed (SIGKILL) and restarted on
the same port, hung (SIGSTOP) and continued, and (Redis) its scripts flushed. In each on_error
mode, every acquisition (acquire, wait, acquire_async, wait_async; sync and asyncio clients)
answers within the timeout as the mode says; a wait queued when the server fails ends by its own
timeout or the mode's answer; once the server is back the same store objects enforce the limits
again; and no concurrency permit leaks: one whose release could not reach the server comes back
lease_ttl later (on the stores' ManualClock)."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from typing import Any

import pytest

import permits
from permits._stores.redis_scripts import LIBRARY_NAME, TAKE
from permits.errors import BackendError

from _store_fixtures import *  # noqa: F403 (the fixtures)
from _store_support import (
    BOUND,
    MODES,
    TIMEOUT,
    Server,
    check_failed,
    drain,
    fails_in_time,
    fails_in_time_async,
    fresh_name,
    settled,
)

FAULTS = ("kill", "hang")
LIMIT, WINDOW = 4, 100.0
CC_LIMIT, TTL = 3, 30.0


def _reads_in_time(mode: str, limiter: Any, seen: int) -> None:
    """available_permits() and statistics() while the server fails: BackendError ("raise"), else
    the permits the server reported last, within the bound."""
    for read in (limiter.available_permits, lambda: limiter.statistics().current_available_permits):
        started = time.monotonic()
        if mode == "raise":
            with pytest.raises(BackendError):
                read()
        else:
            assert read() == seen
        assert time.monotonic() - started < BOUND


def _settles_by_lease_ttl(reader: Any, clock: permits.ManualClock, names: list[str]) -> None:
    """Every lease of ``names`` released (some while the server could not hear it): lease_ttl
    later all their permits are back on the server."""
    clock.advance(TTL)
    for name in names:
        assert reader.concurrency(name, CC_LIMIT, lease_ttl=TTL).available_permits() == CC_LIMIT, name


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("mode", MODES)
async def test_a_failing_server_is_answered_as_the_mode_says_and_nothing_leaks(
    own_server: Server, mode: str, fault: str
) -> None:
    clock = permits.ManualClock()
    sync = own_server.store(on_error=mode, clock=clock, timeout=TIMEOUT)
    reader = own_server.reader(clock)
    async with own_server.async_store(on_error=mode, clock=clock, timeout=TIMEOUT) as asy:
        fw, cc = sync.fixed_window("fw", LIMIT, WINDOW), sync.concurrency("cc", CC_LIMIT, lease_ttl=TTL)
        afw, acc = asy.fixed_window("afw", LIMIT, WINDOW), asy.concurrency("acc", CC_LIMIT, lease_ttl=TTL)
        assert fw.acquire() and await afw.acquire_async()
        kept, lost = cc.acquire(), cc.acquire()
        akept, alost = await acc.acquire_async(), await acc.acquire_async()
        assert kept and lost and akept and alost
        clock.advance(1.0)
        answers: list[permits.Lease | None] = []
        with own_server.fault(fault):
            for call in (fw.acquire, lambda: fw.wait(1, timeout=60), cc.acquire, lambda: cc.wait(1, timeout=60)):
                answers.append(fails_in_time(mode, call))
            for acall in (afw.acquire_async, afw.wait_async, acc.acquire_async, acc.wait_async):
                answers.append(await fails_in_time_async(mode, acall))
            _reads_in_time(mode, fw, LIMIT - 1)
            _reads_in_time(mode, cc, CC_LIMIT - 2)
            assert afw.available_permits() == LIMIT - 1  # an asyncio client's: the last seen, never asked
            started = time.monotonic()
            lost.release()  # the server cannot hear it: the lease expires there instead
            alost.release()
            assert time.monotonic() - started < BOUND
            await settled(asy)
        for degraded in answers:
            if degraded is not None:
                degraded.release()  # "allow": a lease the server never recorded; its release is a no-op

        # Back: the same store objects enforce the limits again. A killed server kept every step
        # it answered (and none it did not); a hung one may have taken the steps that timed out
        # once it went on (a BackendError means "not known to be done").
        if fault == "kill":
            await own_server.reconnected()
        granted = drain(fw, LIMIT)
        agranted = [lease for lease in [await afw.acquire_async() for _ in range(LIMIT)] if lease]
        in_flight = 0 if fault == "kill" else 2
        assert LIMIT - 1 - in_flight <= len(granted) <= LIMIT - 1
        assert LIMIT - 1 - in_flight <= len(agranted) <= LIMIT - 1
        refused = fw.acquire()
        assert not refused and refused.retry_after == pytest.approx(WINDOW - 1.0, abs=1e-9)
        if fault == "kill":
            # The releases the server never heard: their leases are still held there.
            assert reader.concurrency("cc", CC_LIMIT, lease_ttl=TTL).available_permits() == CC_LIMIT - 2
            assert reader.concurrency("acc", CC_LIMIT, lease_ttl=TTL).available_permits() == CC_LIMIT - 2
        more = drain(cc, CC_LIMIT)
        assert len(more) <= CC_LIMIT - 2
        kept.release()
        akept.release()
        for lease in more:
            lease.release()
        await settled(asy)
        await settled(sync)  # (a PostgreSQL conninfo store's releases in a loop are tasks of it too)
        _settles_by_lease_ttl(reader, clock, ["cc", "acc"])
        # ...and the limits hold from there: all, then none; a release gives one back at once.
        held = drain(cc, CC_LIMIT)
        aheld = [await acc.acquire_async() for _ in range(CC_LIMIT)]
        assert len(held) == CC_LIMIT and all(aheld)
        assert not await acc.acquire_async()
        held.pop().release()
        await asyncio.sleep(0)
        await settled(sync)
        assert cc.acquire()


#: Real time: leases that short come back soon when nobody renews them.
SHORT_TTL = 1.0
#: The take script's SHA1, as EVALSHA names it.
TAKE_SHA = hashlib.sha1(TAKE.encode()).hexdigest()


async def _outcome(wait: Any) -> Any:
    try:
        return await wait
    except BackendError as error:
        return error


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("mode", MODES)
async def test_a_queued_wait_ends_in_time_when_the_server_fails(own_server: Server, mode: str, fault: str) -> None:
    """Real time (the server's clock): a wait queued before the fault ends within its timeout
    and the store's. A concurrency head polls and meets the fault: the mode's answer (sync and
    asyncio); a window's head sleeps until its retry_after, past the wait's timeout: "timeout".
    Once the server is back the same limiters serve their waits again."""
    sync = own_server.store(on_error=mode, timeout=TIMEOUT)
    cc, fw = sync.concurrency(fresh_name(), 1, lease_ttl=SHORT_TTL), sync.fixed_window(fresh_name(), 1, WINDOW)
    held, used = cc.acquire(), fw.acquire()
    assert held and used
    results: dict[str, Any] = {}

    def wait(label: str, limiter: Any, timeout: float) -> None:
        started = time.monotonic()
        try:
            results[label] = limiter.wait(1, timeout=timeout)
        except BackendError as error:
            results[label] = error
        results[label + " took"] = time.monotonic() - started

    waits = [threading.Thread(target=wait, args=("cc", cc, 3.0)), threading.Thread(target=wait, args=("fw", fw, 1.0))]
    async with own_server.async_store(on_error=mode, timeout=TIMEOUT) as asy:
        acc = asy.concurrency(cc.name, 1, lease_ttl=SHORT_TTL)
        queued = asyncio.ensure_future(_outcome(acc.wait_async()))
        for thread in waits:
            thread.start()
        async with asyncio.timeout(BOUND):
            while sum(limiter.statistics().current_queued_count for limiter in (cc, fw, acc)) < 3:
                await asyncio.sleep(0.005)
        with own_server.fault(fault):
            for thread in waits:
                thread.join(3.0 + BOUND)
                assert not thread.is_alive()
            async with asyncio.timeout(BOUND + 1.0):  # its head polls at most 0.5 s apart
                answer = await queued
        if fault == "kill":
            await own_server.reconnected()
        assert results["cc took"] < 3.0 + BOUND and results["fw took"] < 1.0 + BOUND
        if mode == "raise":
            assert isinstance(results["cc"], BackendError), results["cc"]
            assert isinstance(answer, BackendError), answer
        else:
            check_failed(mode, results["cc"])
            check_failed(mode, answer)
        assert results["fw"].reason == "timeout"
        # Back: the held permit comes back (released, or expired if the release or the
        # renewals were lost; a step a hung server took late expires too): waits are served.
        held.release()
        async with asyncio.timeout(SHORT_TTL + BOUND):
            first = await _served_again(acc)
        assert first and not first.metadata.get("degraded")
        first.release()
        await settled(asy)
        assert cc.wait(1, timeout=SHORT_TTL + BOUND)


async def _served_again(limiter: Any) -> Any:
    """The first lease the server itself grants: a step a loaded machine delays past the store's
    timeout right after a fault (the mode's answer: an error, a refusal or a degraded grant) is
    asked again; the caller bounds how long that may go on."""
    while True:
        try:
            lease = await limiter.wait_async()
        except BackendError:
            lease = None
        if lease is not None and (lease.reason != "backend_unavailable" and not lease.metadata.get("degraded")):
            return lease
        if lease is not None:
            lease.release()
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("own_server", ["redis"], indirect=True)
async def test_flushed_scripts_are_loaded_again(own_server: Any, mode: str) -> None:
    """SCRIPT FLUSH and FUNCTION FLUSH before every step: each kind decides as the engine's limiter
    of its spec on the same clock, never as a failure (sync and asyncio clients), and the library
    of functions is loaded again."""
    clock = permits.ManualClock()
    engines: dict[str, Any] = {}
    specs = {
        "token_bucket": permits.specs.TokenBucket(3, 1, 1.0),
        "fixed_window": permits.specs.FixedWindow(3, 1.0),
        "sliding_window": permits.specs.SlidingWindow(3, 1.0, 2),
        "sliding_window_counter": permits.specs.SlidingWindowCounter(3, 1.0),
        "concurrency": permits.specs.Concurrency(3),
    }
    sync = own_server.store(on_error=mode, clock=clock)
    async with own_server.async_store(on_error=mode, clock=clock) as asy:
        for kind, spec in specs.items():
            for client, store in (("sync", sync), ("asyncio", asy)):
                engines[client + kind] = (spec.limiter(clock=clock), store.limiter(f"{client}-{kind}", spec), [])
        for step in range(5):
            for key, (engine, limiter, leases) in engines.items():
                own_server.command("SCRIPT", "FLUSH")
                own_server.command("FUNCTION", "FLUSH")
                assert own_server.command("SCRIPT", "EXISTS", TAKE_SHA) == [0]
                assert own_server.command("FUNCTION", "LIST", "LIBRARYNAME", LIBRARY_NAME) == []
                expected = engine.acquire(1)
                got = limiter.acquire(1) if key.startswith("sync") else await limiter.acquire_async(1)
                assert bool(got) == bool(expected), (key, step, got, expected)
                assert got.reason == expected.reason and not got.metadata.get("degraded"), (key, step, got)
                if expected.retry_after is None:
                    assert got.retry_after is None, (key, step, got)
                else:
                    assert got.retry_after == pytest.approx(expected.retry_after, abs=1e-9), (key, step)
                assert len(own_server.command("FUNCTION", "LIST", "LIBRARYNAME", LIBRARY_NAME)) == 1  # loaded again
                leases.append((got, expected))  # (a dropped engine lease would be released)
            clock.advance(0.4)
        for key, (_, _, leases) in engines.items():
            own_server.command("SCRIPT", "FLUSH")
            own_server.command("FUNCTION", "FLUSH")
            if key.endswith("concurrency"):
                for lease, _ in leases:
                    lease.release()
        await settled(asy)
        reader = own_server.reader(clock)
        for client in ("sync", "asyncio"):
            assert reader.concurrency(f"{client}-concurrency", 3).available_permits() == 3
