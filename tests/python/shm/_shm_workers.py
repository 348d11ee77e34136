"""Worker functions for the multi-process tests (importable by spawned interpreters)."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from typing import Any

import permits
from permits import Partition
from permits.shm import SharedMemoryStore

LONG = 3600.0  # a window no test outlives: only the permits taken count

SPECS: dict[str, Any] = {
    "token_bucket": lambda s, n: s.token_bucket("lim", n, 1, LONG),
    "fixed_window": lambda s, n: s.fixed_window("lim", n, LONG),
    "sliding_window": lambda s, n: s.sliding_window("lim", n, LONG, 4),
    "sliding_window_counter": lambda s, n: s.sliding_window_counter("lim", n, LONG),
    "concurrency": lambda s, n: s.concurrency("lim", n),
}


def hammer(segment: str, kind: str, limit: int, attempts: int, start: Any, finish: Any, results: Any) -> None:
    """Tries `attempts` acquisitions as fast as it can once `start` is set and reports its grants;
    holds its leases until `finish` (so that concurrency permits count as taken), then releases them."""
    store = SharedMemoryStore(segment)
    limiter = SPECS[kind](store, limit)
    start.wait()
    held = []
    for _ in range(attempts):
        lease = limiter.acquire()
        if lease:
            held.append(lease)
    results.put(len(held))
    finish.wait()
    for lease in held:
        lease.release()


def hammer_keys(segment: str, keys: int, attempts: int, start: Any, results: Any) -> None:
    store = SharedMemoryStore(segment)
    keyed = store.partitioned("100/hour", name="per-key")
    start.wait()
    granted = [0] * keys
    for i in range(attempts):
        k = i % keys
        if keyed.acquire(f"key-{k}"):
            granted[k] += 1
    results.put(granted)


def create_and_take(segment: str, start: Any, results: Any) -> None:
    start.wait()  # every process opens the segment at once: one of them makes it
    store = SharedMemoryStore(segment)
    limiter = store.fixed_window("race", 50, LONG)
    results.put(sum(1 for _ in range(40) if limiter.acquire()))


def hold(segment: str, permits: int, keyed: bool, ready: Any) -> None:
    """Takes permits and sleeps holding them until killed."""
    store = SharedMemoryStore(segment)
    if keyed:
        limiter = store.partitioned(Partition.concurrency(None, 2), name="pk-conc", lease_ttl=LONG, idle_timeout=0)
        leases = [limiter.acquire("k", permits)]
    else:
        leases = [store.concurrency("conc", 2, lease_ttl=LONG).acquire(permits)]
    assert all(leases)
    ready.set()
    time.sleep(LONG)


def churn(segment: str, index: int, flags: Any, stop: Any) -> None:
    """Takes and releases permits of a limit of 3 in a loop, its flag set only while it holds one.
    `stop` is a lock-free shared byte: a worker killed inside a lock (an Event's) would hang the rest."""
    store = SharedMemoryStore(segment)
    limiter = store.concurrency("churn", 3, lease_ttl=LONG)
    while not stop.value:
        lease = limiter.wait(timeout=5)
        if not lease:
            continue
        flags[index] = 1
        time.sleep(0.002)  # held long enough for the checker to see the permits in use
        flags[index] = 0
        lease.release()


def release_later(segment: str, ready: Any, go: Any) -> None:
    """Holds the only permit until told, then releases it and exits."""
    store = SharedMemoryStore(segment)
    lease = store.concurrency("handoff", 1).acquire()
    assert lease
    ready.set()
    go.wait()
    time.sleep(0.05)
    lease.release()
    os._exit(0)


def take_and_give_back(segment: str, results: Any, release: Any) -> None:
    """Takes and gives back one permit of a concurrency limit of 4, reports how that went, then
    lives on, holding nothing, until told (a recycled pool's worker between requests)."""
    try:
        lease = SharedMemoryStore(segment).concurrency("recycled", 4, lease_ttl=LONG).acquire()
        results.put("ok" if lease else f"refused: {lease.reason}")
        lease.release()
    except Exception as error:  # what must never happen is the thing reported
        results.put(f"raised {type(error).__name__}: {error}")
    release.wait()


def start_each_from_here(target: Any, segment: str, n: int, results: Any, release: Any) -> None:
    """Forks n workers of target(segment, reports, go) one after another, each once the one before
    reported, and hands their reports on to `results`; once `release` is set, lets them go and waits
    for them. Run in a spawned interpreter: forked from a small process, not from the test's own (its
    threads and its memory make each fork slow: hundreds of them took minutes in a loaded
    free-threaded run)."""
    ctx = multiprocessing.get_context("fork")
    reports = ctx.Queue()
    go = ctx.Event()
    procs = []
    for _ in range(n):
        p = ctx.Process(target=target, args=(segment, reports, go), daemon=True)  # (ended with this one)
        p.start()
        procs.append(p)
        results.put(reports.get(timeout=60.0))
    release.wait()
    go.set()
    for p in procs:
        p.join(60.0)
        assert p.exitcode == 0, f"a worker exited with {p.exitcode}"


def hold_one_of_key(segment: str, results: Any, release: Any) -> None:
    """Holds one permit of key "k" of a per-key concurrency limit of 100 until told, then releases it
    and exits."""
    keyed = SharedMemoryStore(segment).partitioned(Partition.concurrency(None, 100), name="many")
    try:
        lease = keyed.acquire("k")
        results.put("ok" if lease else f"refused: {lease.reason}")
    except Exception as error:
        results.put(f"raised {type(error).__name__}: {error}")
        return
    release.wait()
    lease.release()


def hold_one_of_small_key(segment: str, results: Any, release: Any) -> None:
    """The same for a per-key concurrency limit made at 2 (its keys' records: room for two holders)."""
    keyed = SharedMemoryStore(segment).partitioned(Partition.concurrency(None, 2), name="small")
    lease = keyed.acquire("k")
    results.put("ok" if lease else f"refused: {lease.reason}")
    release.wait()
    lease.release()


def reset_key(segment: str, spec: str, key: str, results: Any) -> None:
    """Another process (support staff's tool) resets a key it never used."""
    keyed = SharedMemoryStore(segment).partitioned(spec, name="logins")
    keyed.reset(key)
    results.put(keyed.available_permits(key))


def reconfigure_named(segment: str, spec: str, new_spec: str, results: Any) -> None:
    """Another process (an operator's tool) opens a named limiter with the configuration it knows,
    sets a new limit for every process, and reports what it then sees."""
    limiter = SharedMemoryStore(segment).limiter("api", spec)
    limiter.reconfigure(new_spec)
    results.put((limiter.spec, limiter.available_permits()))


def reconfigure_concurrency(segment: str, limit: int, new_limit: int, results: Any) -> None:
    """The same for a named concurrency limiter."""
    limiter = SharedMemoryStore(segment).limiter("api", permits.specs.Concurrency(limit))
    limiter.reconfigure(permits.specs.Concurrency(new_limit))
    results.put((limiter.spec, limiter.available_permits()))


def reconfigure_keyed(segment: str, spec: str, new_spec: str, results: Any) -> None:
    """The same for every key of a per-key table: what it then sees of key "a"."""
    keyed = SharedMemoryStore(segment).partitioned(spec, name="keys")
    keyed.reconfigure(new_spec)
    results.put((keyed.spec, keyed.available_permits("a")))


def in_spawned_process(target: Callable[..., None], *args: object) -> Any:
    """Runs ``target(*args, results)`` in a spawned interpreter (another process, as a worker or an
    operator's tool is), checks that it exited cleanly within a minute, and returns what it put in
    ``results``."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    child = ctx.Process(target=target, args=(*args, results))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    return results.get(timeout=5)
