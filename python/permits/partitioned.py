"""Per-key limits: a limiter per partition key, created on first use and evicted once idle.

This is the general path: any partition kind, including custom limiters written in Python.
Every partition's own limiter is an engine limiter (or the custom one), so waiting in one
partition never blocks another. Eviction costs O(evicted keys), never a scan of every key: a
heap holds when each partition is next worth looking at, and each call pops only what is due;
``ManualClock.advance`` runs the due evictions at once for limiters on that clock.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, overload

from . import _core, _partitioned_fork, _pausing
from ._core import Lease, LimiterClosedError
from ._durations import duration_ns
from ._loop_check import blocks_the_loop
from ._partition_wait import ENGINE_TYPES, PartitionWait
from ._unraisable import report_unraisable
from .awaitables import LeaseWait
from .chain import ChainedLimiter, ChainedPartitionedLimiter, chain
from .clock import ManualClock
from .engine_limiters import NoLimiter
from .keyed_limiter import KeyedRateLimiter
from .partition import Partition, _check_options, _members, _SpecFactory, _template_of
from .per_key import PerKeyLimiter
from .rate_limiter import RateLimiter, Statistics, _check_permit_count, _no_copies
from .specs import Spec, SpecList

#: The engine's limiter over shared memory (absent where there is none): its state is not this process's alone.
_SHARED: Any = getattr(_core, "SharedLimiter", ())


def _nothing() -> None:
    pass


def _reset_limiter(limiter: RateLimiter) -> None:
    """A partition's limiter forgets what it granted: the engine's in-process limiters, and chains of them."""
    if isinstance(limiter, NoLimiter):
        return
    if isinstance(limiter, ChainedLimiter):
        for member in limiter.limiters:
            _reset_limiter(member)
        return
    if not isinstance(limiter, _core.Limiter) or isinstance(limiter, _SHARED):
        raise NotImplementedError(
            f"a partition's {type(limiter).__name__} cannot be reset: only the engine's in-process limiters can"
        )
    with contextlib.suppress(LimiterClosedError):  # evicted meanwhile: the next one starts full
        if not limiter.closed:
            limiter._reset()


#: How deep a tuple key may nest (deeper keys are a sign of a bug, or of an attack).
_MAX_KEY_DEPTH = 16
#: At most this many least-recently-used partitions are examined for a free place at the bound.
_BOUND_SCAN = 32
#: At most this many partitions are evicted by one call (the rest by the next calls).
_EVICT_BATCH = 64


def _plain_key(key: object, depth: int = 0) -> Hashable:
    """The key as plain str, bytes, int or tuples of them ("7" and 7 are different keys). A
    subclass counts for the value it holds: its own __hash__ or __eq__ (which could change
    between calls and lose the partition) is never used."""
    kind = type(key)
    if kind is str or kind is int or kind is bytes:
        return key
    if isinstance(key, bool) or not isinstance(key, (str, bytes, int, tuple)):
        raise TypeError(f"a partition key must be a str, bytes, int or a tuple of them, got {type(key).__name__}")
    if isinstance(key, str):
        return str.__str__(key)
    if isinstance(key, bytes):
        return bytes(memoryview(key))
    if isinstance(key, int):
        return int.__int__(key)
    if depth >= _MAX_KEY_DEPTH:
        raise ValueError(f"a partition key may nest tuples at most {_MAX_KEY_DEPTH} deep")
    return tuple(_plain_key(item, depth + 1) for item in tuple.__iter__(key))


class _Entry:
    """One partition: its limiter once built; concurrent first callers wait for the builder."""

    __slots__ = ("builder", "error", "limiter", "ready", "touched")

    def __init__(self, now: int) -> None:
        self.limiter: RateLimiter | None = None
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.touched = now
        self.builder = threading.get_ident()  # the thread that builds it (see _after_fork_in_child)


def _report_unraisable(errors: Sequence[BaseException], limiters: Sequence[object]) -> None:
    """Errors of closes nobody called directly (the evictions on the way): sys.unraisablehook,
    as for an error in __del__."""
    for exc, limiter in zip(errors, limiters, strict=True):
        report_unraisable(exc, limiter, "Exception ignored while closing an evicted partition")


def _totals(stats: Statistics) -> tuple[int, int]:
    return stats.total_successful_leases, stats.total_failed_leases


def _close_all(
    limiters: Sequence[RateLimiter], *, report: bool, message: str = "errors while closing evicted partitions"
) -> None:
    """Closes every limiter, whatever the others raise; then raises an ExceptionGroup of the
    errors, or with ``report`` hands them to sys.unraisablehook. An evicted partition whose limiter
    has ``_close_evicted`` (a store's: its server work goes to the background) is closed by it."""
    errors: list[Exception] = []
    failed: list[RateLimiter] = []
    evicting = message.startswith("errors while closing evicted")
    for limiter in limiters:
        try:
            close = getattr(limiter, "_close_evicted", None) if evicting else None
            (close or limiter.close)()
        except Exception as exc:  # a custom limiter's close
            errors.append(exc)
            failed.append(limiter)
    if errors and report:
        _report_unraisable(errors, failed)
    elif errors:
        raise ExceptionGroup(message, errors)


class PartitionedLimiter(KeyedRateLimiter):
    """A limiter per key: ``partitioner(resource) -> Partition`` runs on every call. A partition's
    limiter is named by the partition's ``name``, else by this limiter's (``metadata["limiter"]``
    of its failed leases, the headers)."""

    def __init__(
        self,
        partitioner: Callable[[Any], Partition],
        *,
        idle_timeout: float = 10.0,
        max_partitions: int | None = None,
        clock: Any = None,
        name: str | None = None,
    ) -> None:
        if not callable(partitioner):
            raise TypeError("partitioner must be callable: partitioner(resource) -> Partition")
        _check_options(max_partitions, name)
        super().__init__(name=name, clock=clock)
        self._partitioner = partitioner
        self._idle_ns = duration_ns(idle_timeout, "idle_timeout", allow_zero=True)
        self.idle_timeout = self._idle_ns / 1e9
        """Seconds a partition stays fully idle (all permits back, nothing queued) before it is
        evicted and its limiter closed."""
        self.max_partitions = max_partitions
        """The most partitions held at once, or None for no bound; a new key beyond it takes the
        place of a fully idle partition, else gets a failed lease, reason ``"partition_limit"``."""
        self._clock = self._rl_clock
        # Guards the map's structure only; never held while a factory or a limiter runs.
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()  # least recently used first
        # (when to look at a partition again, seq, key, its entry): one item per live partition.
        self._due: list[tuple[int, int, Hashable, _Entry]] = []
        self._seq = itertools.count()
        self._evicted_successful = 0
        self._evicted_failed = 0
        self._troubles: list[tuple[Exception, object, str]] = []
        if isinstance(self._clock, ManualClock):
            self._clock._on_advance(self)
        _partitioned_fork.track(self)

    __reduce_ex__ = _no_copies

    # ---- partitions ----
    def _partition(self, resource: object) -> Partition:
        partition = self._partitioner(resource)
        if not isinstance(partition, Partition):
            raise TypeError(f"the partitioner must return a permits.Partition, got {type(partition).__name__}")
        key = _plain_key(partition.key)
        return partition if key is partition.key else partition.with_key(key)

    def _superseded(self, key: Hashable, entry: _Entry) -> bool:
        """True when the entry was evicted (and its limiter closed) while a caller used it: the
        caller asks the key's new limiter. Not once this limiter is closed: then it is closed."""
        return not self._rl_closed and self._entries.get(key) is not entry

    def _on_limiter(self, resource: object, use: Callable[[RateLimiter], Any], none: Any) -> Any:
        """use(the resource's limiter), asking the key's new limiter if the one found was
        evicted and closed meanwhile; `none` when max_partitions leaves no room."""
        while True:
            found = self._entry(resource)
            if found is None:
                return none
            key, entry = found
            assert entry.limiter is not None
            try:
                return use(entry.limiter)
            except LimiterClosedError:
                if not self._superseded(key, entry):
                    raise

    def _entry(self, resource: object) -> tuple[Hashable, _Entry] | None:
        if self._rl_closed:
            raise LimiterClosedError("the limiter is closed")
        partition = self._partition(resource)
        now = self._clock.now_ns()
        dropped: list[RateLimiter] = []
        with self._lock:
            entry = self._entries.get(partition.key)
            build = entry is None
            if entry is None:
                full = self.max_partitions is not None and len(self._entries) >= self.max_partitions
                if full and not self._free_a_place_locked(now, dropped):
                    return None
                entry = self._entries[partition.key] = _Entry(now)
                heapq.heappush(self._due, (now + self._idle_ns + 1, next(self._seq), partition.key, entry))
                if len(self._due) > 2 * len(self._entries) + 64:
                    self._compact_due_locked()
            else:
                self._entries.move_to_end(partition.key)
                entry.touched = now
        self._report_troubles()
        if dropped:
            _close_all(dropped, report=True)
        if build:
            self._build(partition, entry)
        elif not entry.ready.is_set():
            if entry.builder == threading.get_ident():
                raise RuntimeError(
                    f"the partition of key {partition.key!r} is being built by this thread: its factory must not "
                    "use the partitioned limiter for its own key"
                )
            entry.ready.wait()  # another caller builds it: only this key waits
        if entry.limiter is None:
            assert entry.error is not None
            raise entry.error
        self._evict_due(now, _EVICT_BATCH, report=True)
        return partition.key, entry

    def _build(self, partition: Partition, entry: _Entry) -> None:
        factory = partition.factory
        try:
            if isinstance(factory, _SpecFactory):  # an unnamed partition's limiter is named as this one
                entry.limiter = factory.build(self._clock, self.name)
            else:
                entry.limiter = factory(partition.key, self._clock)
        except BaseException as exc:
            entry.error = exc
            with self._lock:  # the next call for this key tries again
                if self._entries.get(partition.key) is entry:
                    del self._entries[partition.key]
            raise
        finally:
            entry.ready.set()

    def _idle_ns_of(self, entry: _Entry, now: int) -> int | None:
        limiter = entry.limiter
        if limiter is None:
            return None
        try:
            idle = limiter.idle_duration
        except Exception as exc:  # a custom limiter's: taken as in use, reported once the lock is free
            self._troubles.append((exc, limiter, "Exception ignored while asking an idle partition"))
            return None
        return None if idle is None else round(idle * 1e9)

    def _evict(self, key: Hashable, entry: _Entry, dropped: list[RateLimiter]) -> None:
        # Closed by the caller once the lock is released (as .NET disposes it). A caller that
        # found it just before may still be using it: it then asks the key's new limiter.
        del self._entries[key]
        assert entry.limiter is not None
        dropped.append(entry.limiter)
        counts = getattr(entry.limiter, "_counts", None)  # (a store's: no server round trip under the lock)
        try:
            successful, failed = counts() if counts is not None else _totals(entry.limiter.statistics())
        except Exception as exc:  # a custom limiter's: it is closed all the same
            self._troubles.append((exc, entry.limiter, "Exception ignored while counting an evicted partition"))
            return
        self._evicted_successful += successful
        self._evicted_failed += failed

    def _report_troubles(self) -> None:
        """What custom limiters raised while the lock was held: to sys.unraisablehook."""
        if not self._troubles:
            return
        with self._lock:
            troubles, self._troubles = self._troubles, []
        for exc, limiter, message in troubles:
            report_unraisable(exc, limiter, message)

    def _evict_due(self, now: int, budget: int | None, *, report: bool) -> int:
        """Evicts the partitions fully idle for longer than idle_timeout (at most `budget`)."""
        dropped: list[RateLimiter] = []
        with self._lock:
            self._evict_due_locked(now, budget, dropped)
        self._report_troubles()
        if dropped:
            _close_all(dropped, report=report)
        return len(dropped)

    def _evict_due_locked(self, now: int, budget: int | None, dropped: list[RateLimiter]) -> None:
        while self._due and self._due[0][0] <= now and (budget is None or len(dropped) < budget):
            _, _, key, entry = heapq.heappop(self._due)
            if self._entries.get(key) is not entry:
                continue  # gone already (evicted to make room), perhaps built again since
            idle = self._idle_ns_of(entry, now)
            if idle is not None and idle > self._idle_ns:
                self._evict(key, entry, dropped)
                continue
            # Idle, but not for long enough: exactly when it will have been; in use: later
            # (evict_idle(), which ManualClock.advance calls, looks at every partition).
            look_again = now + (self._idle_ns - idle + 1 if idle is not None else self._idle_ns + 1)
            heapq.heappush(self._due, (look_again, next(self._seq), key, entry))

    def _compact_due_locked(self) -> None:
        """Drops the looks pending for partitions gone to make room: amortized O(1) per new key,
        and the heap stays within twice the live partitions, whatever keys arrive."""
        self._due = [item for item in self._due if self._entries.get(item[2]) is item[3]]
        heapq.heapify(self._due)

    def _free_a_place_locked(self, now: int, dropped: list[RateLimiter]) -> bool:
        """At the bound: a fully idle partition (however briefly) gives its place to a new key."""
        for i, (key, entry) in enumerate(self._entries.items()):
            if i >= _BOUND_SCAN:
                break
            if entry.limiter is not None and self._idle_ns_of(entry, now) is not None:
                self._evict(key, entry, dropped)
                return True
        return False

    def evict_idle(self) -> int:
        """Evicts every partition idle for longer than idle_timeout now, closing its limiter;
        returns how many. (A look at every partition: the timely evictions on the way need no
        call.) Closes that raise do not stop the others: an ExceptionGroup of their errors follows."""
        return self._evict_idle(report=False)

    def _evict_idle(self, *, report: bool) -> int:
        now = self._clock.now_ns()
        dropped: list[RateLimiter] = []
        with self._lock:
            for key, entry in list(self._entries.items()):
                idle = self._idle_ns_of(entry, now)
                if idle is not None and idle > self._idle_ns:
                    self._evict(key, entry, dropped)
            self._evict_due_locked(now, None, dropped)
        self._report_troubles()
        if dropped:
            _close_all(dropped, report=report)
        return len(dropped)

    @property
    def partition_count(self) -> int:
        """Live partitions (after the evictions that are due)."""
        self._evict_due(self._clock.now_ns(), None, report=True)
        return len(self._entries)

    def _partition_limit(self, permit_count: int) -> Lease:
        """No room for another partition: this limiter refused, not a partition's."""
        return Lease.denied("partition_limit", metadata={"limiter": self.name})._with_permit_count(permit_count)

    # ---- the KeyedRateLimiter hooks (the public members validate, then call these) ----
    def _acquire(self, resource: object, permit_count: int) -> Lease:
        while True:
            found = self._entry(resource)
            if found is None:
                return self._partition_limit(permit_count)
            key, entry = found
            assert entry.limiter is not None
            try:
                lease = entry.limiter.acquire(permit_count)
            except LimiterClosedError:
                if self._superseded(key, entry):
                    continue  # evicted and closed meanwhile: ask the key's new limiter
                raise
            # Evicted while we used it (it was idle)? A grant from the dropped limiter would not
            # count in the key's new one: give it back and ask the new one.
            if not lease or self._entries.get(key) is entry:
                return lease
            lease._refund()

    async def _acquire_async(self, resource: object, permit_count: int) -> Lease:
        # As _acquire, awaiting the partition's own attempt (a custom limiter may ask a server).
        while True:
            found = self._entry(resource)
            if found is None:
                return self._partition_limit(permit_count)
            key, entry = found
            assert entry.limiter is not None
            try:
                lease = await entry.limiter.acquire_async(permit_count)
            except LimiterClosedError:
                if self._superseded(key, entry):
                    continue
                raise
            if not lease or self._entries.get(key) is entry:
                return lease
            lease._refund()

    def _try_now(self, resource: object, permit_count: int) -> Lease | None:
        found = self._entry(resource)
        if found is None:
            return self._partition_limit(permit_count)
        key, entry = found
        assert entry.limiter is not None
        try:
            lease = entry.limiter._try_now(permit_count)
        except LimiterClosedError:
            if self._superseded(key, entry):
                return None  # _wait_async asks the key's new limiter
            raise
        if lease is None or not lease or self._entries.get(key) is entry:
            return lease
        lease._refund()
        return None  # _wait_async asks the key's new limiter

    async def _wait_async(self, resource: object, permit_count: int) -> Lease:
        # _try_now has made (and checked) the immediate attempt: this request waits, and a waiting
        # request keeps its partition, so a later eviction says nothing about its grant; one that
        # got in just as its partition was evicted is refused by the close: it asks again.
        while True:
            found = self._entry(resource)
            if found is None:
                return self._partition_limit(permit_count)
            key, entry = found
            assert entry.limiter is not None
            try:
                lease = await entry.limiter.wait_async(permit_count)
            except LimiterClosedError:
                if self._superseded(key, entry):
                    continue
                raise
            if lease or lease.reason != "closed" or not self._superseded(key, entry):
                return lease

    def wait_async(self, resource: object, permit_count: int = 1) -> LeaseWait:
        """Waits for ``resource``'s partition to grant ``permit_count`` permits (asyncio or trio): await
        it for the lease, or ``async with`` it to have the lease released on exit. Only this key waits;
        the wait ends as the partition's limiter ends it, or with ``"partition_limit"``, or with
        ``"closed"`` at once when this limiter is closed. Raises ``ValueError`` for a bad
        ``permit_count``, ``LimiterClosedError`` after ``close()``."""
        cls = type(self)
        if cls._try_now is not PartitionedLimiter._try_now or cls._wait_async is not PartitionedLimiter._wait_async:
            return super().wait_async(resource, permit_count)  # a subclass's own hooks wait
        n = _check_permit_count(permit_count)
        self._check_open()
        return PartitionWait(self, resource, n)

    def wait(self, resource: object, permit_count: int = 1, timeout: float | None = None) -> Lease:
        """Blocks the calling thread until ``resource``'s partition grants ``permit_count`` permits,
        and returns the lease; granted at once when it can be. Only this key waits.

        ``timeout`` is in seconds (None: as long as it takes; 0: never waits), on the partition
        limiter's clock. The wait ends with a failed lease as the partition's limiter ends it
        (``"timeout"``, ``"queue_full"``, ``"closed"``...), or ``"partition_limit"`` when
        ``max_partitions`` leaves no room for a new key. Raises ``ValueError`` for a bad
        ``permit_count`` (or a negative timeout, once the request has to wait), ``TypeError`` for a
        partition key that is not a ``str``, ``bytes``, ``int`` or a tuple of them,
        ``LimiterClosedError`` after ``close()``.
        """
        blocks_the_loop(timeout)
        n = _check_permit_count(permit_count)
        while True:
            found = self._entry(resource)
            if found is None:
                return self._partition_limit(n)
            key, entry = found
            assert entry.limiter is not None
            # As in acquire: an immediate grant by a limiter evicted meanwhile is given back and
            # the key's new limiter asked. A request that waits keeps its partition (not idle), so
            # a later eviction says nothing about its grant; but one that got in just as its
            # partition was evicted is refused by the close ("closed"): it asks the new limiter.
            try:
                lease = entry.limiter._try_now(n)
                waited = lease is None
                if lease is None:
                    lease = entry.limiter.wait(n, timeout)
            except LimiterClosedError:
                if self._superseded(key, entry):
                    continue
                raise
            if waited:
                if lease or lease.reason != "closed" or not self._superseded(key, entry):
                    return lease
            elif not lease or self._entries.get(key) is entry:
                return lease
            else:
                lease._refund()

    def available_permits(self, resource: object) -> int:
        """The permits a request for ``resource`` could take now, from its partition's limiter (a new
        key's partition is made, as by ``acquire``; 0 when ``max_partitions`` leaves no room for it).
        Raises ``LimiterClosedError`` after ``close()``."""
        return int(self._on_limiter(resource, lambda limiter: limiter.available_permits(), 0))

    def _reset(self, resource: object) -> None:
        partition = self._partition(resource)
        with self._lock:
            entry = self._entries.get(partition.key)
            limiter = None if entry is None else entry.limiter
        on_server = getattr(self, "_reset_on_server", None)
        if on_server is not None:  # a store's: the key's state is on its server, for every process
            forget = getattr(limiter, "_rl_forget", None) or _nothing  # what this process keeps of it
            forget()  # (before: a reserving limiter's stock is the old state's)
            on_server(partition.key, forget)  # (and after: its queue asks the new state)
            return
        if limiter is not None:  # (none, or one being made: it starts full)
            _reset_limiter(limiter)

    def _statistics(self, resource: object) -> Statistics:
        """One partition's statistics, or with no resource the totals over every partition
        (successes and failures of evicted partitions included)."""
        if resource is not None:
            stats = self._on_limiter(resource, lambda limiter: limiter.statistics(), None)
            return Statistics(0, 0, 0, 0) if stats is None else stats
        with self._lock:
            limiters = [e.limiter for e in self._entries.values() if e.limiter is not None]
        stats = []
        for limiter in limiters:
            try:
                stats.append(limiter.statistics())
            except LimiterClosedError:  # evicted meanwhile: its counts are among the evicted ones
                if self._rl_closed:
                    raise
        return Statistics(
            current_available_permits=sum(s.current_available_permits for s in stats),
            current_queued_count=sum(s.current_queued_count for s in stats),
            total_successful_leases=self._evicted_successful + sum(s.total_successful_leases for s in stats),
            total_failed_leases=self._evicted_failed + sum(s.total_failed_leases for s in stats),
        )

    def _close_entries(self) -> list[RateLimiter]:
        """Marks this limiter closed; the partitions' limiters to close (none the second time)."""
        with self._lock:
            if self._rl_closed:
                return []
            self._rl_closed = True
            entries = list(self._entries.values())
            self._entries.clear()
            self._due.clear()
        return [entry.limiter for entry in entries if entry.limiter is not None]

    def close(self) -> None:
        """Closes every partition's limiter (their queued requests fail with "closed"); closes
        that raise do not stop the others: an ExceptionGroup of their errors follows."""
        limiters = self._close_entries()
        _pausing.wake_all()
        _close_all(limiters, report=False, message="errors while closing partitions")

    async def aclose(self) -> None:
        """As close(), awaiting each partition's aclose()."""
        errors: list[Exception] = []
        limiters = self._close_entries()
        _pausing.wake_all()
        # The engine's limiters close at once (their aclose never suspends): first, so that their
        # queued waits end before a custom partition's aclose is awaited.
        limiters.sort(key=lambda limiter: type(limiter) not in ENGINE_TYPES)
        for limiter in limiters:
            try:
                await limiter.aclose()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise ExceptionGroup("errors while closing partitions", errors)

    def __repr__(self) -> str:
        return f"<PartitionedLimiter name={self.name!r} partitions={len(self._entries)}>"

    # A spec or a rate always makes the engine's table: typed as that one class. A partition template
    # makes it too when it holds a spec, else (Partition.custom) a PartitionedLimiter.
    @overload
    @classmethod
    def per_key(
        cls,
        template: Spec[RateLimiter],
        *,
        idle_timeout: float = ...,
        max_partitions: int | None = ...,
        clock: Any = ...,
        name: str | None = ...,
    ) -> PerKeyLimiter: ...

    @overload
    @classmethod
    def per_key(
        cls,
        template: SpecList | str,
        *,
        idle_timeout: float = ...,
        max_partitions: int | None = ...,
        clock: Any = ...,
        name: str | None = ...,
    ) -> PerKeyLimiter | ChainedPartitionedLimiter: ...

    @overload
    @classmethod
    def per_key(
        cls,
        template: Partition,
        *,
        idle_timeout: float = ...,
        max_partitions: int | None = ...,
        clock: Any = ...,
        name: str | None = ...,
    ) -> PerKeyLimiter | PartitionedLimiter | ChainedPartitionedLimiter: ...

    @classmethod
    def per_key(
        cls,
        template: Partition | Spec[RateLimiter] | SpecList | str,
        *,
        idle_timeout: float = 10.0,
        max_partitions: int | None = None,
        clock: Any = None,
        name: str | None = None,
    ) -> PerKeyLimiter | PartitionedLimiter | ChainedPartitionedLimiter:
        """A limit per key: the resource itself is the key, every key gets ``template``'s limiter.
        ``template`` is a spec (its limiter with the default queue options), a rate such as
        ``"10/minute"`` (``permits.specs.parse``), or a partition made with key None, e.g.
        ``Partition.of(None, spec, queue_limit=10)``. The limiter's ``name`` (a failed lease's
        ``metadata["limiter"]``, the headers, the metrics) is ``name``, else the template's, else
        ``"default"``. Several limits (a ``SpecList``, ``"10/second;1000/day"``) make a chain of
        one per-key limiter each, every one with these options."""
        template = _template_of(template)
        if isinstance(template.spec, SpecList):
            members = [
                cls.per_key(member, idle_timeout=idle_timeout, max_partitions=max_partitions, clock=clock, name=name)
                for member in _members(template)
            ]
            return chain(*members, name=name if name is not None else template._options[2])
        if template.spec is not None:
            return PerKeyLimiter(
                template, idle_timeout=idle_timeout, max_partitions=max_partitions, clock=clock, name=name
            )

        def partitioner(resource: object) -> Partition:
            return template.with_key(resource)

        return cls(partitioner, idle_timeout=idle_timeout, max_partitions=max_partitions, clock=clock, name=name)


__all__ = ["PartitionedLimiter"]
