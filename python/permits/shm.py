"""One limit for several processes on one host: limiters whose state lives in a named shared-memory
segment (``/dev/shm/permits.<name>``), updated by every process with the engine's own lock-free code.

``SharedMemoryStore(name)`` opens the segment, creating it if absent; every process that opens the
same name and asks for a limiter of the same name shares its state. The limiters are the engine's
own (``permits.TokenBucketLimiter`` and the others, on state in the segment), with the same
members, leases, waits and async support. Queues are per process. Linux only.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from typing import Any

from . import _core, specs
from ._core import Lease, LimiterClosedError
from ._durations import Duration, duration_ns, timeout_ns
from ._loop_check import blocks_the_loop
from ._shm_lost_watch import LostWatch
from ._stores.factories import StoreFactories, member_name, spec_of
from .awaitables import LeaseWait
from .chain import ChainedPartitionedLimiter, chain
from .clock import ManualClock, MonotonicClock
from .engine_limiters import (
    _RECONFIGURING,
    _check_reconfigured,
    _EngineLimiter,
    _queue_limit,
    _queue_order,
    _reconfigured_queue,
)
from .keyed_limiter import KeyedRateLimiter
from .partition import Partition, _check_options, _members, _template_of
from .rate_limiter import QueueOrder, RateLimiter, Statistics, _check_permit_count

_shared_clock: MonotonicClock | None = None

# The engine's shared limiter class and this process's side of a per-key table: absent where the
# extension has no shared memory (not Linux), where this module still imports and
# SharedMemoryStore() says why it cannot be.
_SharedLimiter: Any = getattr(_core, "SharedLimiter", object)
_ShmKeyed: Any = getattr(_core, "ShmKeyed", object)


def _monotonic() -> MonotonicClock:
    """The real clock of store limiters: CLOCK_MONOTONIC itself, which every process reads alike
    (the default clock may read the CPU's counter, calibrated per process)."""
    global _shared_clock
    if _shared_clock is None:
        clock = MonotonicClock.__new__(MonotonicClock)
        _core.MonotonicClock.__init__(clock, "monotonic")
        _shared_clock = clock
    return _shared_clock


def _count(value: object, name: str, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{name} must be between {minimum} and {maximum}, got {value}")
    return int(value)


def _limiter_name(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"name must be a str, got {type(value).__name__}")
    if not 1 <= len(value.encode()) <= 63 or "\0" in value:
        raise ValueError(f"name must be 1 to 63 bytes (UTF-8) with no NUL character, got {value!r}")
    return value


class _Following:
    """A named limiter of a store: its ``spec`` and limits as the segment holds them now (any process
    may reconfigure them; this one takes them on at its next decision)."""

    _amounts: tuple[int, int]

    @property
    def spec(self) -> specs.Spec[Any]:
        """The limit, as a value, with the amounts the segment holds now."""
        made: specs.Spec[Any] = self.__dict__["_made_spec"]
        return made._with_amounts(self._amounts)

    @spec.setter
    def spec(self, value: specs.Spec[Any]) -> None:
        self.__dict__["_made_spec"] = value


class SharedConcurrencyLimiter(_Following, _SharedLimiter, _EngineLimiter):  # type: ignore[misc]
    """A concurrency limiter whose permits every process of the store shares; a process that dies
    holding permits has them back at once when its pid can be checked, else ``lease_ttl`` later.
    Its limit is the segment's: any process may reconfigure it (what is held stays held)."""

    @property
    def permit_limit(self) -> int:
        """The most permits held at once, every process of the store together (as the segment holds
        it now)."""
        return int(self._amounts[0])

    lease_ttl: float
    """Seconds after its holder's last heartbeat that a lease of a process that died, and whose
    pid cannot be checked, gives its permits back."""


_FOLLOWING: dict[type, type] = {}


def _spec_attribute(name: str) -> Callable[[Any], Any]:
    def read(limiter: Any) -> Any:
        return getattr(limiter.spec, name)

    return read


def _following(spec_type: type[specs.Spec[Any]]) -> type[_EngineLimiter]:
    """The spec's limiter class (``permits.TokenBucketLimiter``...) for a store's slot: its spec and
    its amounts' attributes (``permit_limit``, ``token_limit``, ``tokens_per_period``) read from the
    segment."""
    made = _FOLLOWING.get(spec_type)
    if made is None:
        cls = spec_type._limiter_type
        members: dict[str, Any] = {"__doc__": cls.__doc__, "__module__": cls.__module__}
        for name in spec_type._amounts:
            members[name] = property(_spec_attribute(name), doc=f"The spec's {name} now.")
        made = _FOLLOWING[spec_type] = type(cls.__name__, (_Following, cls), members)
    return made


class _KeyLimiter(_SharedLimiter, _EngineLimiter):  # type: ignore[misc]
    """This process's limiter for one key of a shared per-key table: where its requests queue."""

    def _reconfigure(self, spec: object, queue_limit: object, queue_order: object) -> None:
        raise NotImplementedError("a key's limit changes with every key's: reconfigure the per-key limiter")


class SharedKeyedLimiter(_ShmKeyed, KeyedRateLimiter):  # type: ignore[misc]
    """A limit per key whose every key's state lives in the store's segment (a table bounded by
    ``max_partitions``; a key idle for ``idle_timeout`` makes room for a new one).

    ``acquire(key)`` takes a time-based key's permits from its record in the segment directly,
    with no Python call and no limiter object per key; a key gets a limiter of this process (its
    queue) when one of its requests waits, and a concurrency key at its first request (it keeps
    track of the process's leases). This process keeps the 4,096 keys it used last, with its
    counts for each (``statistics``)."""

    def __init__(self, table: Any, template: Partition, name: str, clock: Any, idle_timeout: float) -> None:
        KeyedRateLimiter.__init__(self, name=name, clock=clock)
        _core.ShmKeyed.__init__(self, table)
        self._table = table
        spec = template.spec
        assert isinstance(spec, specs.Spec)  # (one limit: partitioned() chains a SpecList's)
        self._made_spec: specs.Spec[Any] = spec
        self.idle_timeout = idle_timeout
        """Seconds a key stays fully idle (all permits back, nothing queued) before it may make room
        for a new key."""
        self.max_partitions: int = table.max_partitions
        """The most keys in the segment at once (by default the store's capacity); a new key beyond it
        takes the place of an idle one, else gets a failed lease, reason ``"partition_limit"``."""
        self._wrappers: dict[tuple[type, object], _KeyLimiter] = {}

    @property
    def _lost_leases(self) -> int:
        """Leases of this limiter's keys found lost in this process so far."""
        return int(self._table._lost_leases)

    @property
    def spec(self) -> specs.Spec[Any]:
        """Every key's limit, as a value (``permits.specs.TokenBucket(...)`` and the like), with the
        amounts the segment holds now (any process may reconfigure them)."""
        spec: specs.Spec[Any] = self._made_spec._with_amounts(self._amounts)
        return spec

    def _reconfigure(self, spec: object, queue_limit: object, queue_order: object) -> None:
        """Every key's limit, present and future, in every process of the store (the segment holds
        it); the queue options are this process's keys'."""
        self._check_open()
        _check_reconfigured(self.spec, spec)
        limit, newest = _reconfigured_queue(self._queue, queue_limit, queue_order)
        with _RECONFIGURING:
            self._reconfigure_engine(spec, limit, newest)

    #: Python objects of key limiters kept (the waits' path), the oldest made first out. Each holds
    #: its engine limiter, which the engine therefore keeps as the key's own (never dropped while
    #: anything else holds it): the one acquire(key) sends a request to while requests are queued
    #: in it.
    _WRAPPERS = 4096

    def _limiter(self, resource: object) -> _KeyLimiter:
        """The key's limiter of this process (made on first need, kept with the key): its requests
        queue there."""
        self._check_open()
        # A str, bytes or int is a key of its own type; a tuple is checked as the engine encodes it
        # (("a", True) is refused there, though equal to ("a", 1)).
        cache_key = (tuple, _core._key_bytes(resource)) if type(resource) is tuple else (type(resource), resource)
        wrappers = self._wrappers
        try:
            cached: _KeyLimiter = wrappers[cache_key]
            return cached
        except KeyError:
            pass
        except TypeError:  # unhashable: the engine's own message for a key of that type
            _core._key_bytes(resource)
            raise
        limiter = _KeyLimiter.__new__(_KeyLimiter)
        RateLimiter.__init__(limiter, name=self.name, clock=self._rl_clock)
        _core.SharedLimiter.__init__(limiter, self, resource)
        if len(wrappers) >= self._WRAPPERS:
            del wrappers[next(iter(wrappers))]
        wrappers[cache_key] = limiter
        return limiter

    # ---- the seam's hooks (chains and custom code reach a key through them; _try_now is the
    # engine's own) ----
    def _acquire(self, resource: object, permit_count: int) -> Lease:
        lease: Lease = self.acquire(resource, permit_count)
        return lease

    async def _wait_async(self, resource: object, permit_count: int) -> Lease:
        lease: Lease = await self._limiter(resource).wait_async(permit_count)
        return lease

    # ---- the public members: acquire is the engine's (the key's record, or its limiter while
    # requests are queued in it); the others go to the key's limiter ----
    def acquire_async(self, resource: object, permit_count: int = 1) -> LeaseWait:
        """``acquire(resource, permit_count)`` as an awaitable of its lease: it never queues. Also an
        async context manager that releases the lease on exit. Raises as ``acquire()``."""
        return self._limiter(resource).acquire_async(permit_count)

    def wait(self, resource: object, permit_count: int = 1, timeout: float | None = None) -> Lease:
        """Blocks the calling thread until ``resource``'s permits are granted, and returns the lease;
        the request queues in this process.

        ``timeout`` is in seconds (None: as long as it takes; 0: never waits), on the store's clock.
        The wait ends with a failed lease on ``"timeout"``, ``"queue_full"``, ``"evicted"``,
        ``"closed"`` or ``"partition_limit"``. Raises as ``acquire()``, and ``ValueError`` for a
        negative timeout.
        """
        blocks_the_loop(timeout)
        lease: Lease = self._limiter(resource)._wait(_check_permit_count(permit_count), timeout_ns(timeout))
        return lease

    def wait_async(self, resource: object, permit_count: int = 1) -> LeaseWait:
        """Waits for ``resource``'s permits without blocking the event loop (asyncio or trio), queued
        in this process; awaited, it gives the lease. Also an async context manager that releases
        the lease on exit. Raises as ``acquire()``."""
        return self._limiter(resource).wait_async(permit_count)

    def available_permits(self, resource: object) -> int:
        """The permits a request for ``resource`` could take now, every process's grants counted (0
        for a new key when there is no room for it). Raises as ``acquire()``."""
        self._check_open()
        return int(self._statistics_of(resource)[0])

    def _statistics_of(self, resource: object) -> tuple[int, int, int, int]:
        stats: tuple[int, int, int, int] = _core.ShmKeyed._statistics(self, resource)
        return stats

    def statistics(self, resource: object = None) -> Statistics:
        """``resource``'s counters, or with no resource the totals over the keys this process has
        used (other processes' keys are not known here). Permits available count every process's
        grants; queued requests and the lease totals are this process's. Raises as ``acquire()``."""
        self._check_open()
        if resource is not None:
            return Statistics(*self._statistics_of(resource))
        # The keys this process keeps (another's are not known here), with the counts of keys dropped.
        return Statistics(*_core.ShmKeyed._totals(self))

    @property
    def partition_count(self) -> int:
        """The keys in the segment now, every process's."""
        return int(self._table.size)

    def evict_idle(self) -> int:
        """Drops every key of the segment fully idle for longer than ``idle_timeout``; returns how many."""
        return int(self._table.evict_idle())

    def close(self) -> None:
        """Closes this limiter in this process: its queued waits end with reason ``"closed"`` and
        later calls raise ``LimiterClosedError``. The keys' state in the segment and other
        processes are not affected."""
        if self._rl_closed:
            return
        self._rl_closed = True
        _core.ShmKeyed._close(self)
        self._wrappers.clear()

    async def aclose(self) -> None:
        """``close()`` for async code; ``async with limiter:`` calls it on exit."""
        self.close()

    def __repr__(self) -> str:
        return f"<SharedKeyedLimiter name={self.name!r} partitions={self.partition_count}>"


class SharedMemoryStore(StoreFactories):
    """Limiters shared by the processes of one host, in the segment ``/dev/shm/permits.<name>``.

    ``capacity`` is the room for keys of the per-key limiters (``partitioned``); ``mode`` who may
    open the segment (``0o600``: this user only); ``clock`` a ``permits.ManualClock`` for tests,
    else the real monotonic clock. Opening a name that exists attaches to it (its capacity and clock
    must be the same). The segment outlives the processes: ``unlink`` removes it.
    """

    def __init__(self, name: str, *, capacity: int = 10_000, mode: int = 0o600, clock: Any = None) -> None:
        if sys.platform != "linux" or not hasattr(_core, "ShmStore"):
            raise NotImplementedError("permits.shm needs Linux (shared memory with futexes and /proc)")
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        _core.ShmStore.check_name(name)
        capacity = _count(capacity, "capacity", 1, 2**28)
        mode = _count(mode, "mode", 0, 0o777)
        if clock is None:
            clock = _monotonic()
        elif not isinstance(clock, ManualClock):
            raise TypeError(f"clock must be a permits.ManualClock or None, got {type(clock).__name__}")
        self.name = name
        """The segment's name: it is ``/dev/shm/permits.<name>``."""
        self.capacity = capacity
        """The room for keys of the per-key limiters (``partitioned``), all of them together."""
        self.mode = mode
        """The file mode the segment is created with (``0o600``: its user only)."""
        self.clock = clock
        """The store limiters' clock: a ``permits.ManualClock`` given for tests, else the host's
        ``CLOCK_MONOTONIC``, which every process reads alike."""
        self._core: Any = _core.ShmStore(name, capacity, mode, clock)
        self._limiters: weakref.WeakSet[Any] = weakref.WeakSet()
        self._closed = False
        self._lost = LostWatch(self, self._core)

    # ---- limiters (token_bucket... from StoreFactories: each a limiter() of its spec) ----
    def limiter(
        self,
        name: str,
        spec: specs.Spec[Any] | specs.SpecList | str,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        lease_ttl: Duration = 60.0,
    ) -> RateLimiter:
        """The limiter named ``name`` in the segment, of ``spec`` (or a rate such as "10/second").
        Several limits (a ``SpecList``, "10/second;1000/day") make a chain of one limiter each,
        named ``name#0``, ``name#1``..."""
        self._check_open()
        name = _limiter_name(name)
        spec = spec_of(spec)
        if isinstance(spec, specs.SpecList):
            options = {"queue_limit": queue_limit, "queue_order": queue_order, "lease_ttl": lease_ttl}
            members = [self.limiter(member_name(name, i), one, **options) for i, one in enumerate(spec)]  # type: ignore[arg-type]
            return chain(*members, name=name)
        ql, newest = _queue_limit(queue_limit), _queue_order(queue_order)
        ttl = duration_ns(lease_ttl, "lease_ttl")
        limiter: Any
        if isinstance(spec, specs.Concurrency):
            limiter = SharedConcurrencyLimiter.__new__(SharedConcurrencyLimiter)
            RateLimiter.__init__(limiter, name=name, clock=self.clock)
            _core.SharedLimiter.__init__(limiter, self._core, name, spec, ql, newest, ttl)
            limiter.lease_ttl = ttl / 1e9
            self._lost.add(limiter)
        else:
            cls = _following(type(spec))
            limiter = cls.__new__(cls)
            RateLimiter.__init__(limiter, name=name, clock=self.clock)
            engine: Any = spec._engine  # each engine class also builds on a store slot
            engine.__init__(limiter, self._core, name, spec, ql, newest)
            limiter.auto_replenishment = True
        limiter._take_spec(spec)
        limiter.store = self
        self._limiters.add(limiter)
        return limiter  # type: ignore[no-any-return]

    def partitioned(
        self,
        template: Partition | specs.Spec[Any] | specs.SpecList | str,
        *,
        name: str,
        max_partitions: int | None = None,
        idle_timeout: Duration = 10.0,
        lease_ttl: Duration = 60.0,
    ) -> SharedKeyedLimiter | ChainedPartitionedLimiter:
        """A limit per key (a ``permits.KeyedRateLimiter``) whose keys' state is in the segment:
        at most ``max_partitions`` keys (default: the store's capacity) and a key idle for
        ``idle_timeout`` seconds makes room for a new one. Several limits (a ``SpecList``) make a
        chain of one such limiter each, named ``name#0``, ``name#1``..., which by default share the
        capacity: room for ``capacity // len(spec_list)`` keys each."""
        self._check_open()
        _check_options(max_partitions, name)
        name = _limiter_name(name)
        partition = _template_of(template)
        if isinstance(partition.spec, specs.SpecList):
            # Each limit has its table of keys: by default they share the store's room for keys.
            bound = max(1, self.capacity // len(partition.spec)) if max_partitions is None else max_partitions
            options = {"max_partitions": bound, "idle_timeout": idle_timeout, "lease_ttl": lease_ttl}
            each = [
                self.partitioned(member, name=member_name(name, i), **options)  # type: ignore[arg-type]
                for i, member in enumerate(_members(partition))
            ]
            return chain(*each, name=name)
        if partition.spec is None:
            raise TypeError(f"a shared per-key limiter keeps state for specs only, not for {partition!r}")
        queue_limit, queue_order, _ = partition._options
        idle_ns = duration_ns(idle_timeout, "idle_timeout", allow_zero=True)
        ttl = duration_ns(lease_ttl, "lease_ttl")
        bound = self.capacity if max_partitions is None else int(max_partitions)
        table = _core.ShmKeyTable(
            self._core,
            name,
            partition.spec,
            _queue_limit(queue_limit),
            _queue_order(queue_order),
            bound,
            idle_ns,
            ttl,
        )
        keyed = SharedKeyedLimiter(table, partition, name, self.clock, idle_ns / 1e9)
        keyed.store = self
        self._limiters.add(keyed)
        if isinstance(partition.spec, specs.Concurrency):
            self._lost.add(keyed)
        return keyed

    # ---- the store ----
    @property
    def size(self) -> int:
        """Bytes the segment maps (untouched pages take no memory)."""
        return int(self._core.size)

    def _check_open(self) -> None:
        if self._closed:
            raise LimiterClosedError(f"the store {self.name!r} is closed")

    def close(self) -> None:
        """Closes the limiters this store made in this process (their waits end with reason
        "closed"); the segment and other processes are not affected."""
        if self._closed:
            return
        self._closed = True
        for limiter in list(self._limiters):
            limiter.close()

    def unlink(self) -> bool:
        """Removes the segment's name: processes that have it mapped keep it; the next
        ``SharedMemoryStore(name)`` makes a new one. False if it was already gone."""
        return bool(_core.ShmStore.unlink(self.name))

    def __enter__(self) -> SharedMemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        # Another process (multiprocessing's spawn) opens the same segment by name.
        if isinstance(self.clock, ManualClock):
            raise TypeError("a SharedMemoryStore on a ManualClock cannot be sent to another process")
        return (_reopen, (self.name, self.capacity, self.mode))

    def __repr__(self) -> str:
        return f"<SharedMemoryStore name={self.name!r} capacity={self.capacity}>"


def _reopen(name: str, capacity: int, mode: int) -> SharedMemoryStore:
    return SharedMemoryStore(name, capacity=capacity, mode=mode)


__all__ = ["SharedConcurrencyLimiter", "SharedKeyedLimiter", "SharedMemoryStore"]
