"""What bench_acquire.py times and how: a Case, its Result, and the timing of the cases.

The sync cases' repeats are interleaved (see collect_phase); ``single_threaded`` is shared with
bench_per_key.py, which also says whether a run had started a second thread.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import statistics
import sys
import threading
import timeit
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Case:
    name: str
    group: str
    """``floor``, ``permits``, ``peer``, ``async-floor``, ``permits-async``, ``peer-async``."""
    stmt: str = ""
    namespace: dict[str, Any] = field(default_factory=dict)
    setup: str = "pass"
    probe: Callable[[], bool] | None = None
    """Runs the statement once and says whether the check succeeded."""
    expect: bool | None = None
    max_number: int | None = None
    """Upper bound on loop iterations per repeat (for peers whose cost grows with use)."""
    note: str = ""
    async_factory: Callable[[], Callable[[int], Awaitable[float]]] | None = None
    """Called inside the event loop; returns ``run(n) -> seconds for n iterations``."""
    key: str = ""
    """Stable identifier used for the ratios and the JSON output."""
    alternates: list[dict[str, Any]] = field(default_factory=list)
    """More namespaces like ``namespace``, built independently (other objects at other addresses):
    every repeat times each, and keeps the fastest, since the same statement can run 1.5x slower
    on one object than on another (memory layout) for reasons that have nothing to do with it."""


@dataclass
class Result:
    name: str
    group: str
    key: str
    status: str = "ok"
    best_ns: float | None = None
    median_ns: float | None = None
    number: int = 0
    repeats: int = 0
    note: str = ""
    single_threaded: bool | None = None
    """The process had never started a second thread while the case was timed (None: unknown,
    or it changed during the timing)."""


class NotInstalled(Exception):
    pass


@dataclass
class Settings:
    target: float
    """Seconds one repeat should take."""
    repeats: int


def _number_for(time_n: Callable[[int], float], target: float, cap: int | None) -> int:
    """Iterations per repeat so that one repeat takes about ``target`` seconds."""
    n = 1
    while True:
        if cap is not None and n >= cap:
            return cap
        elapsed = time_n(n)
        if elapsed >= target / 5:
            break
        n *= 10
    n = max(1, int(n * target / elapsed))
    return n if cap is None else min(n, cap)


@dataclass
class PendingSync:
    """A sync case, calibrated; its repeats are interleaved with the other cases' (see collect)."""

    case: Case
    timers: list[timeit.Timer]
    number: int
    runs: list[float] = field(default_factory=list)
    error: str = ""

    def repeat(self) -> None:
        """One repeat: the fastest of the case's instances."""
        self.runs.append(min(timer.timeit(self.number) for timer in self.timers))


def calibrate_sync(case: Case, s: Settings) -> PendingSync:
    timers = [timeit.Timer(case.stmt, setup=case.setup, globals=ns) for ns in (case.namespace, *case.alternates)]
    return PendingSync(case, timers, _number_for(timers[0].timeit, s.target, case.max_number))


def finish_sync(p: PendingSync) -> Result:
    case = p.case
    if p.error or not p.runs:
        return Result(case.name, case.group, case.key, status=p.error or "error: no run")
    per_call = [r / p.number * 1e9 for r in p.runs]
    result = Result(
        case.name,
        case.group,
        case.key,
        best_ns=min(per_call),
        median_ns=statistics.median(per_call),
        number=p.number,
        repeats=len(p.runs),
        note=case.note,
    )
    return _check_after(case, result)


def time_async(case: Case, s: Settings) -> Result:
    assert case.async_factory is not None
    factory = case.async_factory

    async def main() -> tuple[int, list[float]]:
        run = factory()
        await run(10)  # warm-up

        gc_was = gc.isenabled()
        gc.disable()
        try:
            n = 1
            while True:
                elapsed = await run(n)
                if elapsed >= s.target / 5:
                    break
                n *= 10
            number = max(1, int(n * s.target / elapsed))
            return number, [await run(number) for _ in range(s.repeats)]
        finally:
            if gc_was:
                gc.enable()

    number, runs = asyncio.run(main())
    per_call = [r / number * 1e9 for r in runs]
    return Result(
        case.name,
        case.group,
        case.key,
        best_ns=min(per_call),
        median_ns=statistics.median(per_call),
        number=number,
        repeats=s.repeats,
        note=case.note,
    )


def _check_before(case: Case) -> str:
    """An error status when the case's check does not succeed (or fail) as intended."""
    if case.probe is not None and case.expect is not None and case.probe() != case.expect:
        return "error: did not " + ("succeed" if case.expect else "fail")
    return ""


def _check_after(case: Case, result: Result) -> Result:
    if case.probe is not None and case.expect is not None and case.probe() != case.expect:
        result.note = (result.note + "; " if result.note else "") + ("WARNING: outcome changed during the run")
    return result


def start_case(case: Case, s: Settings) -> Result | PendingSync:
    """Async cases are timed at once; sync cases are calibrated and timed later, interleaved."""
    try:
        error = _check_before(case)
        if error:
            return Result(case.name, case.group, case.key, status=error)
        if case.async_factory is None:
            return calibrate_sync(case, s)
        return _check_after(case, time_async(case, s))
    except Exception as exc:  # a broken peer must not stop the run
        return Result(case.name, case.group, case.key, status=f"error: {type(exc).__name__}: {exc}")


Source = tuple[str, str, Callable[[], Iterator[Case]]]


def single_threaded() -> bool | None:
    """glibc's ``__libc_single_threaded``: true until the process first starts a second thread
    (any thread, even one that has ended), false from then on. libstdc++ makes shared_ptr
    reference counts atomic only once it is false. None when it cannot be read."""
    try:
        return bool(ctypes.c_char.in_dll(ctypes.CDLL(None), "__libc_single_threaded").value[0])
    except (OSError, ValueError, IndexError):
        return None


def collect_phase(sources: list[Source], s: Settings, verbose: bool) -> list[Result]:
    """Runs the sources' cases. The sync cases' repeats go round-robin (repeat 1 of every case,
    then repeat 2...), so that a change of load on the machine hits the floor and the cases it
    is compared with alike; the best of the repeats is kept."""
    slots: list[Result | PendingSync] = []
    for label, group, source in sources:
        try:
            cases = list(source())
        except NotInstalled as exc:
            slots.append(Result(label, group, "", status="not installed", note=str(exc)))
            continue
        except Exception as exc:
            slots.append(Result(label, group, "", status=f"error: {type(exc).__name__}: {exc}"))
            continue
        slots += [start_case(case, s) for case in cases]
    pending = [p for p in slots if isinstance(p, PendingSync)]
    single_before = single_threaded()
    for i in range(s.repeats):
        if verbose and pending:
            print(f"  sync cases: repeat {i + 1} of {s.repeats}", file=sys.stderr, flush=True)
        for p in pending:
            if p.error:
                continue
            try:
                p.repeat()
            except Exception as exc:  # a broken peer must not stop the run
                p.error = f"error: {type(exc).__name__}: {exc}"
    results = [finish_sync(slot) if isinstance(slot, PendingSync) else slot for slot in slots]
    single = single_before if single_threaded() == single_before else None
    for r in results:
        r.single_threaded = single
        if verbose:
            shown = f"{r.best_ns:8.1f} ns" if r.best_ns is not None else r.status
            print(f"  {r.name:<60} {shown}", file=sys.stderr, flush=True)
    return results


def collect(phases: list[list[Source]], s: Settings, verbose: bool) -> list[Result]:
    """Runs the phases in order. Before the second phase an idle thread is started and kept: once
    a process has started a second thread, C++ shared_ptr reference counts become atomic
    operations (see single_threaded), so the first phase must not start any thread (limits'
    MemoryStorage and pyrate-limiter do: they come later) and the second shows what a program
    that has threads pays."""
    results: list[Result] = []
    for i, phase in enumerate(phases):
        if i == 1:
            threading.Thread(target=threading.Event().wait, daemon=True, name="idle").start()
        results += collect_phase(phase, s, verbose)
    return results
