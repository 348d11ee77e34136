"""Type stubs of the extension module (private: use the names the permits package exports)."""

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping, Sequence
from types import TracebackType
from typing import Any, final, overload

from permits import specs

# permits.shm's classes (Linux only: absent elsewhere), stubbed in _core_shm.pyi.
from permits._core_shm import SharedLimiter as SharedLimiter
from permits._core_shm import ShmKeyed as ShmKeyed
from permits._core_shm import ShmKeyTable as ShmKeyTable
from permits._core_shm import ShmStore as ShmStore
from permits._core_shm import _key_bytes as _key_bytes
from permits.awaitables import LeaseWait

@final
class Lease:
    """The outcome of an acquisition: granted, or failed with a ``reason`` (and a ``retry_after``
    when time will help). ``bool(lease)`` says which; ``with lease:`` releases it on exit.
    """

    @property
    def acquired(self) -> bool:
        """True when the permits were granted; ``bool(lease)`` is the same."""
    @property
    def permit_count(self) -> int:
        """The permits requested: held, when acquired (what ``settle()`` kept, once settled); a failed
        lease carries the count asked for."""
    @property
    def retry_after(self) -> float | None:
        """Seconds until the same request would be granted if nothing else arrived, or None.

        A failed ``acquire()`` or ``"queue_full"`` rejection of a time-based limiter (token bucket,
        windows) always has one, exact: it counts the time already gone in the current period and, under
        ``OLDEST_FIRST``, the requests queued ahead. None on granted leases, on a concurrency limiter's
        failures (a release, not time, frees permits) and on failures by eviction, close, timeout or
        ``"partition_limit"``. A custom limiter sets its own (``Lease.denied(retry_after=...)``).
        """
    @property
    def reason(self) -> str | None:
        """Why the lease failed; None when it was granted.

        The engine's reasons: ``"limit_reached"`` (not enough permits now, or requests queued ahead under
        ``OLDEST_FIRST``), ``"queue_full"`` (a wait found no room in the queue), ``"evicted"`` (pushed out
        of a ``NEWEST_FIRST`` queue by a newer request), ``"closed"`` (the limiter was closed while the
        request waited), ``"timeout"`` (``wait(timeout=...)`` ran out, or ``timeout=0`` would have had to
        wait), ``"partition_limit"`` (a new key found ``max_partitions`` reached and no idle key to
        replace) and ``"process_limit"`` (a shared-memory limiter's permits are free, but as many
        processes as it can record hold them: only a release makes room). A custom limiter may use
        reasons of its own.
        """
    @property
    def metadata(self) -> Mapping[str, object]:
        """A read-only mapping of what the lease carries: ``"retry_after"`` and ``"reason"`` when set,
        ``"limiter"`` (the name of the limiter that refused) on a failed lease, ``"lost"`` (True) on a
        lease of a shared limiter whose shared state forgot it while it was held and that could not be
        taken back (its ``release()`` gives nothing back), plus what a custom limiter passed as
        ``metadata``. Empty on a granted engine lease.
        """
    def __bool__(self) -> bool:
        """``lease.acquired``."""
    def release(self) -> None:
        """Gives a granted concurrency lease's permits back (serving the limiter's queue); idempotent.

        Does nothing on a failed or zero-permit lease, on a time-based limiter's lease (time, not the
        lease, brings those permits back) or once the limiter is closed. On a lease made by
        ``Lease.granted(on_release=...)`` the first call runs ``on_release`` (its exception propagates).
        A granted concurrency lease garbage-collected without ``release()`` gives its permits back, with a
        ``ResourceWarning`` and a warning on the ``"permits"`` logger.
        """
    def settle(self, permit_count: int, /) -> None:
        """Keeps only ``permit_count`` of the lease's permits (what the work used) and gives the rest
        back: a concurrency lease's now, a time-based lease's as a refund that never lets the limiter
        grant more, in any interval, than had they never been taken (a window that has moved on
        takes nothing back; a token bucket takes back only what it could not have refilled since).
        ``permit_count`` is from 0 to the lease's ``permit_count``, which becomes it; settle again to
        give back more. Raises ``TypeError`` for a count that is not an int, ``ValueError`` for one out
        of that range or a failed or released lease (settle before ``release()``, inside ``with``).
        A lease made by ``Lease.granted`` gives back by its ``on_settle``; without one, nothing.
        """
    def _refund(self) -> None: ...
    def _with_permit_count(self, permit_count: int, /) -> Lease: ...
    def _is_lost(self) -> bool: ...
    def __enter__(self) -> Lease:
        """The lease itself: ``with lease:`` releases it on exit."""
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> bool:
        """Releases the lease, as ``release()``; returns False (an exception propagates)."""
    @classmethod
    def granted(
        cls,
        permit_count: int = 1,
        *,
        on_release: Callable[[], object] | None = None,
        on_refund: Callable[[], object] | None = None,
        metadata: Mapping[str, object] | None = None,
        lost: Callable[[], object] | None = None,
        on_settle: Callable[[int], object] | None = None,
    ) -> Lease:
        """A granted lease of ``permit_count`` permits, for a custom limiter to return.

        ``on_release()`` runs on the lease's first ``release()`` (or the end of ``with lease:``);
        ``on_refund()`` runs instead when the grant is given back unused (a chain whose later member
        refused, a cancelled ``acquire_async``), and defaults to ``on_release``. ``metadata`` (copied)
        shows in ``lease.metadata``. ``lost()`` is asked when the metadata is read and before the
        release: once it returns true, the shared state behind the lease forgot it and
        ``metadata["lost"]`` is True from then on. ``on_settle(permit_count)`` runs on
        ``lease.settle(permit_count)`` and gives back what the lease no longer keeps (an exception
        propagates, and the lease keeps its count); without it, ``settle()`` only lowers the count.
        Raises ``TypeError`` for a count that is not an int,
        a callback that is not callable or metadata that is not a mapping; ``ValueError`` for a
        negative count.
        """
    @classmethod
    def denied(
        cls,
        reason: str = "limit_reached",
        *,
        retry_after: float | None = None,
        metadata: Mapping[str, object] | None = None,
    ) -> Lease:
        """A failed lease, for a custom limiter to return.

        ``reason`` defaults to ``"limit_reached"``; ``retry_after`` is in seconds (a finite number
        >= 0) or None; ``metadata`` (copied) shows in ``lease.metadata``. Returned from a custom
        limiter, it reports the requested ``permit_count`` and the limiter's name as
        ``metadata["limiter"]``. Raises ``TypeError`` for a reason that is not a str, a ``retry_after``
        that is not a number or metadata that is not a mapping; ``ValueError`` for a negative or infinite
        ``retry_after``.
        """

class LimiterClosedError(RuntimeError):
    """Raised by a limiter's calls after its ``close()``: ``acquire``,
    ``acquire_async``, ``wait``, ``wait_async``, ``available_permits``, ``statistics`` and
    ``try_replenish``. An invalid ``permit_count`` raises its ``ValueError`` first. Waits queued at the
    close are not raised into: they end with a failed lease, reason ``"closed"``.
    """

def _lease_allocations() -> int: ...

@final
class Tally:
    """Counts of granted and refused leases, added to from any thread (statistics())."""

    def grant(self) -> None: ...
    def refuse(self) -> None: ...
    @property
    def granted(self) -> int: ...
    @property
    def refused(self) -> int: ...

@final
class Handoff:
    """What a server's middleware and a route's limit share for one request."""

    started: Any
    body_size: int
    route_rejected: str | None
    rejection: tuple[Any, list[tuple[str, str]]] | None
    @property
    def charges(self) -> list[Callable[[Any], None]]: ...
    @property
    def route_leases(self) -> list[Lease]: ...
    @property
    def quotas(self) -> list[Any]: ...

class WsgiGate:
    """The WSGI middleware's path for a request, called as gate(app, environ, start_response)."""

    def __new__(
        cls,
        *,
        acquire: Callable[..., Lease],
        available: Callable[..., int] | None,
        permit_count: int,
        keyed: bool,
        key_kind: int,
        key_env: str | None,
        key_name: str | None,
        key_slow: Callable[[Any], object],
        style: int,
        policy_pair: tuple[str, str] | None,
        state_prefix: str | None,
        limit_pair: tuple[str, str] | None,
        quota: int,
        period: int,
        fallback: Callable[[Any, Any, Any], Any],
        refused: Callable[[Any, Any, Any, Lease, object], Any],
        merge: Callable[..., Any],
        costs: Callable[[Any, Handoff], Any],
    ) -> WsgiGate: ...
    def _bind(self, app: Any, source: Callable[..., Any], /) -> None: ...
    def __call__(self, *args: Any) -> Any: ...

@final
class AsgiGate:
    """The ASGI middleware's key, decision and headers for a request."""

    def __new__(
        cls,
        *,
        acquire: Callable[..., Lease],
        available: Callable[..., int] | None,
        permit_count: int,
        keyed: bool,
        key_kind: int,
        key_raw: bytes | None,
        key_name: str | None,
        key_slow: Callable[[Any], object] | None,
        style: int,
        policy_pair: tuple[bytes, bytes] | None,
        state_prefix: bytes | None,
        limit_pair: tuple[bytes, bytes] | None,
        quota: int,
        period: int,
    ) -> AsgiGate: ...
    def admit(self, scope: Any, /) -> tuple[Lease, object, tuple[tuple[bytes, bytes], ...] | None, int] | None: ...
    def bind(
        self,
        app: Callable[[Any, Any, Any], Awaitable[None]],
        fallback: Callable[[Any, Any, Any], Awaitable[None]],
        decided: Callable[[Any, Any, Any, Lease, object, int], Awaitable[None]],
        slow: Callable[[AsgiSend, Any], Awaitable[None]],
        sent: object,
        settle: Callable[[Handoff], None],
        /,
    ) -> None: ...
    def __call__(self, scope: Any, receive: Any, send: Any, /) -> AsgiCall: ...

@final
class AsgiCall:
    """One ASGI request served by the middleware's gate: an awaitable, as its coroutine would be."""

    def __await__(self) -> Generator[Any]: ...
    def __next__(self) -> Any: ...
    def send(self, value: Any, /) -> Any: ...
    def throw(self, exc: Any, value: Any = ..., traceback: Any = ..., /) -> Any: ...
    def close(self) -> None: ...

@final
class AsgiSend:
    """The send a gated ASGI application is given: the RateLimit headers added to the response's start."""

    def __new__(
        cls,
        send: Callable[[Any], Awaitable[None]],
        handoff: Handoff,
        ours: tuple[tuple[bytes, bytes], ...] | None,
        slow: Callable[[AsgiSend, Any], Awaitable[None]],
        sent: Awaitable[None],
        lease: Lease,
        scope: Any,
        receive: Callable[[], Awaitable[Any]],
        remaining: int,
        /,
    ) -> AsgiSend: ...
    def __call__(self, message: Any, /) -> Awaitable[None]: ...
    @property
    def send(self) -> Callable[[Any], Awaitable[None]]: ...
    @property
    def handoff(self) -> Handoff: ...
    @property
    def lease(self) -> Lease: ...
    @property
    def scope(self) -> Any: ...
    @property
    def receive(self) -> Callable[[], Awaitable[Any]]: ...
    @property
    def remaining(self) -> int: ...
    replaced: bool

@final
class Meter:
    """An instrumented limiter's lease counts, active leases and lease durations (buckets with
    these upper bounds, in seconds), kept as atomics; ``record(seconds)``, when given, is called
    with each used lease's duration as it ends, or by ``flush()`` for up to ``pending_limit``
    durations held until then."""

    def __new__(
        cls,
        clock: Clock,
        bounds: Sequence[float],
        *,
        record: Callable[[float], object] | None = None,
        pending_limit: int = 0,
    ) -> Meter: ...
    def flush(self) -> int: ...
    def stamp(self, lease: Lease, /) -> bool: ...
    def count(self, result: str, /) -> bool: ...
    def add_active(self, delta: int, /) -> None: ...
    def observe(self, seconds: float, /) -> None: ...
    def results(self) -> dict[str, int]: ...
    def durations(self) -> tuple[list[int], float]: ...
    @property
    def active(self) -> int: ...
    @property
    def pending(self) -> int: ...

def _engine_pending_timers() -> int: ...

class Clock:
    """What every clock is: the time in integer nanoseconds (a limiter's ``clock=`` takes one)."""
    def now_ns(self) -> int:
        """The clock's time in integer nanoseconds since its origin."""

class MonotonicClock(Clock):
    @overload
    def __init__(self) -> None: ...
    @overload  # "monotonic": CLOCK_MONOTONIC itself
    def __init__(self, source: str) -> None: ...
    @property
    def source(self) -> str:
        """What the clock reads: ``"tsc"`` (the CPU's time-stamp counter, scaled to nanoseconds) or
        ``"monotonic"`` (``CLOCK_MONOTONIC``).
        """

class ManualClock(Clock):
    def __init__(self, start_ns: int = 0) -> None: ...
    def advance_ns(self, delta_ns: int) -> None:
        """Moves time forward by ``delta_ns`` nanoseconds and does, in this thread, the engine work
        that came due (replenishment, waking waiters, timeouts). ``advance(seconds)`` does the same and
        also evicts the idle partitions of the ``PartitionedLimiter`` instances on this clock and wakes
        custom limiters' pauses: prefer it. Raises ``ValueError`` for a negative delta or one that would take
        the clock past ``2**63 - 2**60`` ns.
        """
    def pending_timers(self) -> int:
        """How many engine timers wait on this clock (wake-ups of queued requests, wait timeouts,
        per-key evictions); ``advance()`` runs those that come due.
        """

class Notifier:
    def __init__(self) -> None: ...
    @property
    def fd(self) -> int: ...
    def drain(self) -> None: ...

class CancelScope:
    """A scope whose ``cancel()`` ends the blocking waits made in it (on the thread that entered
    it): a chain's wait runs its members' waits in one, and the chain's close cancels it."""

    def __init__(self) -> None: ...
    def cancel(self) -> None: ...
    @property
    def cancelled(self) -> bool: ...
    def __enter__(self) -> CancelScope: ...
    def __exit__(self, *exc_info: object) -> None: ...

def _cancelled_here() -> bool: ...

class WaitHandle:
    def done(self) -> bool: ...
    def cancel(self) -> bool: ...
    def lease(self) -> Lease: ...
    def block(self) -> Lease: ...

@final
class EngineLeaseWait(LeaseWait):
    """What an engine limiter's ``wait_async`` and ``acquire_async`` return: ``await`` it for the
    lease, or ``async with`` it to have the lease released on exit. ``asyncio.create_task`` and the
    like take it as a coroutine.
    """

    def __await__(self) -> Generator[Any, None, Lease]:
        """Waits for the lease. A ``wait_async()`` waits once (awaiting it again raises ``RuntimeError``);
        an ``acquire_async()`` gives its lease again.
        """
    def __iter__(self) -> EngineLeaseWait:
        """The wait itself (it is its own iterator, as a coroutine's awaitable is)."""
    def __next__(self) -> Any:
        """One step of the wait, as ``send(None)``."""
    def send(self, value: object, /) -> Any:
        """Resumes the wait; the task awaiting it calls this, as on a coroutine."""
    def throw(self, typ: object, val: object = ..., tb: object = ..., /) -> Any:
        """Ends the wait with the exception (a task's cancellation): a queued request leaves the queue,
        and a grant not yet handed over goes back.
        """
    def close(self) -> None:
        """Ends the wait without a lease; a queued request leaves the queue."""
    def __aenter__(self) -> EngineLeaseWait:
        """``async with``: the wait itself, which the statement awaits for the lease (bound by ``as``)."""
    def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> Awaitable[None]:
        """``async with``: releases the lease on exit."""
    # Queued, it is the future its task waits on (asyncio's duck-typed future protocol).
    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop a queued wait waits in; ``RuntimeError`` while it is not waiting in one."""
    def add_done_callback(
        self, fn: Callable[[EngineLeaseWait], object], /, *, context: contextvars.Context | None = None
    ) -> None:
        """As ``asyncio.Future``'s: ``fn(wait)`` is called in its loop once the wait is resolved.
        ``RuntimeError`` while it is not waiting in an event loop.
        """
    def remove_done_callback(self, fn: Callable[[EngineLeaseWait], object], /) -> int:
        """As ``asyncio.Future``'s: removes ``fn``; returns how many were removed."""
    def cancel(self, msg: object = None) -> bool:
        """As ``asyncio.Future``'s: a queued request leaves the queue and the awaiting task gets
        ``CancelledError``. Returns False when the wait is not queued (granted, ended or cancelled).
        """
    def result(self) -> None:
        """As ``asyncio.Future``'s, for the awaiting task: None once resolved (the lease is the value of
        the ``await``), the wait's exception after ``cancel()``, ``InvalidStateError`` before.
        """
    def done(self) -> bool:
        """True once the wait is resolved, cancelled or awaited."""
    def cancelled(self) -> bool:
        """True once ``cancel()`` cancelled the wait."""

class LoopBridge:
    def __init__(self, socket: bool = False) -> None: ...
    @property
    def fd(self) -> int: ...
    @property
    def wakeups(self) -> int: ...
    @property
    def pending(self) -> int: ...
    def take_reader(self) -> int: ...
    def drain(self) -> None: ...
    def resume(self, unused: object = None) -> None: ...
    def abandon(self) -> None: ...

def _set_foreign_wait(wait: Callable[[Any, object, int], Coroutine[Any, Any, Lease]], /) -> None: ...
def _set_bridge_factory(factory: Callable[[asyncio.AbstractEventLoop], LoopBridge], /) -> None: ...

# acquire, _try_now and wait_async are each concrete class's own (a fast call per class).
class Limiter:
    """The engine's limiter: the members every engine limiter (``TokenBucketLimiter`` and the others) shares."""
    @property
    def _clock(self) -> Clock: ...
    def _enqueue(self, permit_count: int, timeout_ns: int, notifier: Notifier | None) -> Lease | WaitHandle: ...
    def _wait(self, permit_count: int, timeout_ns: int) -> Lease: ...
    def available_permits(self) -> int:
        """The permits a request could take now (a snapshot: other threads may take them at once).

        For the sliding window counter, the largest request granted now; with
        ``auto_replenishment=False``, as of the last ``try_replenish()``. Raises ``LimiterClosedError``
        after ``close()``.
        """
    def _statistics(self) -> tuple[int, int, int, int]: ...
    def _idle_duration_ns(self) -> int | None: ...
    def _reset(self) -> bool:
        """Forgets what a time-based limiter granted (full from now, its queue served); False when it cannot
        (concurrency, closed)."""
    def try_replenish(self) -> bool:
        """With ``auto_replenishment=False``: applies all the replenishment the time since the last
        call allows (by the automatic mode's rules), serves the queue and returns True. In automatic mode,
        and for a concurrency limiter (no replenishment), it does nothing and returns False. Raises
        ``LimiterClosedError`` after ``close()``, in either mode.
        """
    def close(self) -> None:
        """Closes the limiter; idempotent. Queued waits end at once with a failed lease, reason
        ``"closed"``, in the order they would have been served (not counted as failures); later calls
        raise ``LimiterClosedError``. Leases granted before stay valid and may still be released.
        """
    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
    @property
    def _max_permits(self) -> int: ...
    @property
    def _amounts(self) -> tuple[int, int]: ...
    @property
    def _queue(self) -> tuple[int | None, bool]: ...

# The engine's limiters are made from their permits.specs value (the one the class is named after).
class TokenBucket(Limiter):
    def _reconfigure_engine(self, spec: specs.TokenBucket, queue_limit: int | None, newest_first: bool) -> None: ...
    @overload
    def __init__(
        self, clock: Clock, spec: specs.TokenBucket, queue_limit: int | None, newest_first: bool, manual: bool
    ) -> None: ...
    @overload  # on a shared-memory store's slot
    def __init__(
        self, store: ShmStore, name: str, spec: specs.TokenBucket, queue_limit: int | None, newest_first: bool
    ) -> None: ...
    def acquire(self, permit_count: int = 1) -> Lease:
        """Takes ``permit_count`` permits now, or returns a failed lease; never blocks or queues.

        A failure has reason ``"limit_reached"`` and ``retry_after`` (seconds until the same request would
        succeed). ``acquire(0)`` takes nothing and succeeds when at least one permit is available. Raises
        ``TypeError`` for a count that is not an int, ``ValueError`` for a negative one or one above the
        limit, ``LimiterClosedError`` after ``close()``.
        """
    def _try_now(self, permit_count: int = 1) -> Lease | None: ...
    def acquire_async(self, permit_count: int = 1) -> EngineLeaseWait:
        """The attempt of ``acquire()`` as an awaitable of its lease, made when it is first awaited: it
        never queues, and any event loop (or none) may await it; awaited again, it returns the same lease.
        One never awaited (dropped, closed, its task cancelled before it ran) takes nothing. Also an
        async context manager that releases the lease on exit. Raises ``ValueError`` for a bad
        ``permit_count`` and ``LimiterClosedError`` when called on a closed limiter (a close between the
        call and the await raises at the await).
        """
    def wait_async(self, permit_count: int = 1) -> EngineLeaseWait:
        """Waits in the limiter's queue for ``permit_count`` permits: ``await`` it for the lease, or
        ``async with limiter.wait_async() as lease:`` to have the lease released on exit.

        Granted at once when it can be (no event loop round trip). Otherwise it queues and ends with the
        lease, or with a failed one: ``"queue_full"`` (no room in the queue), ``"evicted"`` (pushed out
        under ``NEWEST_FIRST``) or ``"closed"`` (the limiter was closed). A zero-permit wait completes
        when at least one permit is available, taking none. Cancelling the awaiting task takes the request
        out of the queue (a grant not yet handed over goes back); for a time limit use
        ``asyncio.timeout()``. Works under asyncio and trio. Raises ``TypeError`` or ``ValueError`` for a
        bad ``permit_count``, ``LimiterClosedError`` if the limiter is closed already.
        """

class FixedWindow(Limiter):
    def _reconfigure_engine(self, spec: specs.FixedWindow, queue_limit: int | None, newest_first: bool) -> None: ...
    @overload
    def __init__(
        self, clock: Clock, spec: specs.FixedWindow, queue_limit: int | None, newest_first: bool, manual: bool
    ) -> None: ...
    @overload  # on a shared-memory store's slot
    def __init__(
        self, store: ShmStore, name: str, spec: specs.FixedWindow, queue_limit: int | None, newest_first: bool
    ) -> None: ...
    def acquire(self, permit_count: int = 1) -> Lease:
        """Takes ``permit_count`` permits now, or returns a failed lease; never blocks or queues.

        A failure has reason ``"limit_reached"`` and ``retry_after`` (seconds until the same request would
        succeed). ``acquire(0)`` takes nothing and succeeds when at least one permit is available. Raises
        ``TypeError`` for a count that is not an int, ``ValueError`` for a negative one or one above the
        limit, ``LimiterClosedError`` after ``close()``.
        """
    def _try_now(self, permit_count: int = 1) -> Lease | None: ...
    def acquire_async(self, permit_count: int = 1) -> EngineLeaseWait:
        """The attempt of ``acquire()`` as an awaitable of its lease, made when it is first awaited: it
        never queues, and any event loop (or none) may await it; awaited again, it returns the same lease.
        One never awaited (dropped, closed, its task cancelled before it ran) takes nothing. Also an
        async context manager that releases the lease on exit. Raises ``ValueError`` for a bad
        ``permit_count`` and ``LimiterClosedError`` when called on a closed limiter (a close between the
        call and the await raises at the await).
        """
    def wait_async(self, permit_count: int = 1) -> EngineLeaseWait:
        """Waits in the limiter's queue for ``permit_count`` permits: ``await`` it for the lease, or
        ``async with limiter.wait_async() as lease:`` to have the lease released on exit.

        Granted at once when it can be (no event loop round trip). Otherwise it queues and ends with the
        lease, or with a failed one: ``"queue_full"`` (no room in the queue), ``"evicted"`` (pushed out
        under ``NEWEST_FIRST``) or ``"closed"`` (the limiter was closed). A zero-permit wait completes
        when at least one permit is available, taking none. Cancelling the awaiting task takes the request
        out of the queue (a grant not yet handed over goes back); for a time limit use
        ``asyncio.timeout()``. Works under asyncio and trio. Raises ``TypeError`` or ``ValueError`` for a
        bad ``permit_count``, ``LimiterClosedError`` if the limiter is closed already.
        """

class SlidingWindow(Limiter):
    def _reconfigure_engine(
        self, spec: specs.SlidingWindow | specs.SlidingLog, queue_limit: int | None, newest_first: bool
    ) -> None: ...
    @overload
    def __init__(
        self,
        clock: Clock,
        spec: specs.SlidingWindow | specs.SlidingLog,
        queue_limit: int | None,
        newest_first: bool,
        manual: bool,
    ) -> None: ...
    @overload  # on a shared-memory store's slot
    def __init__(
        self,
        store: ShmStore,
        name: str,
        spec: specs.SlidingWindow | specs.SlidingLog,
        queue_limit: int | None,
        newest_first: bool,
    ) -> None: ...
    def acquire(self, permit_count: int = 1) -> Lease:
        """Takes ``permit_count`` permits now, or returns a failed lease; never blocks or queues.

        A failure has reason ``"limit_reached"`` and ``retry_after`` (seconds until the same request would
        succeed). ``acquire(0)`` takes nothing and succeeds when at least one permit is available. Raises
        ``TypeError`` for a count that is not an int, ``ValueError`` for a negative one or one above the
        limit, ``LimiterClosedError`` after ``close()``.
        """
    def _try_now(self, permit_count: int = 1) -> Lease | None: ...
    def acquire_async(self, permit_count: int = 1) -> EngineLeaseWait:
        """The attempt of ``acquire()`` as an awaitable of its lease, made when it is first awaited: it
        never queues, and any event loop (or none) may await it; awaited again, it returns the same lease.
        One never awaited (dropped, closed, its task cancelled before it ran) takes nothing. Also an
        async context manager that releases the lease on exit. Raises ``ValueError`` for a bad
        ``permit_count`` and ``LimiterClosedError`` when called on a closed limiter (a close between the
        call and the await raises at the await).
        """
    def wait_async(self, permit_count: int = 1) -> EngineLeaseWait:
        """Waits in the limiter's queue for ``permit_count`` permits: ``await`` it for the lease, or
        ``async with limiter.wait_async() as lease:`` to have the lease released on exit.

        Granted at once when it can be (no event loop round trip). Otherwise it queues and ends with the
        lease, or with a failed one: ``"queue_full"`` (no room in the queue), ``"evicted"`` (pushed out
        under ``NEWEST_FIRST``) or ``"closed"`` (the limiter was closed). A zero-permit wait completes
        when at least one permit is available, taking none. Cancelling the awaiting task takes the request
        out of the queue (a grant not yet handed over goes back); for a time limit use
        ``asyncio.timeout()``. Works under asyncio and trio. Raises ``TypeError`` or ``ValueError`` for a
        bad ``permit_count``, ``LimiterClosedError`` if the limiter is closed already.
        """

class SlidingWindowCounter(Limiter):
    def _reconfigure_engine(
        self, spec: specs.SlidingWindowCounter, queue_limit: int | None, newest_first: bool
    ) -> None: ...
    @overload
    def __init__(
        self, clock: Clock, spec: specs.SlidingWindowCounter, queue_limit: int | None, newest_first: bool, manual: bool
    ) -> None: ...
    @overload  # on a shared-memory store's slot
    def __init__(
        self, store: ShmStore, name: str, spec: specs.SlidingWindowCounter, queue_limit: int | None, newest_first: bool
    ) -> None: ...
    def acquire(self, permit_count: int = 1) -> Lease:
        """Takes ``permit_count`` permits now, or returns a failed lease; never blocks or queues.

        A failure has reason ``"limit_reached"`` and ``retry_after`` (seconds until the same request would
        succeed). ``acquire(0)`` takes nothing and succeeds when at least one permit is available. Raises
        ``TypeError`` for a count that is not an int, ``ValueError`` for a negative one or one above the
        limit, ``LimiterClosedError`` after ``close()``.
        """
    def _try_now(self, permit_count: int = 1) -> Lease | None: ...
    def acquire_async(self, permit_count: int = 1) -> EngineLeaseWait:
        """The attempt of ``acquire()`` as an awaitable of its lease, made when it is first awaited: it
        never queues, and any event loop (or none) may await it; awaited again, it returns the same lease.
        One never awaited (dropped, closed, its task cancelled before it ran) takes nothing. Also an
        async context manager that releases the lease on exit. Raises ``ValueError`` for a bad
        ``permit_count`` and ``LimiterClosedError`` when called on a closed limiter (a close between the
        call and the await raises at the await).
        """
    def wait_async(self, permit_count: int = 1) -> EngineLeaseWait:
        """Waits in the limiter's queue for ``permit_count`` permits: ``await`` it for the lease, or
        ``async with limiter.wait_async() as lease:`` to have the lease released on exit.

        Granted at once when it can be (no event loop round trip). Otherwise it queues and ends with the
        lease, or with a failed one: ``"queue_full"`` (no room in the queue), ``"evicted"`` (pushed out
        under ``NEWEST_FIRST``) or ``"closed"`` (the limiter was closed). A zero-permit wait completes
        when at least one permit is available, taking none. Cancelling the awaiting task takes the request
        out of the queue (a grant not yet handed over goes back); for a time limit use
        ``asyncio.timeout()``. Works under asyncio and trio. Raises ``TypeError`` or ``ValueError`` for a
        bad ``permit_count``, ``LimiterClosedError`` if the limiter is closed already.
        """

class Concurrency(Limiter):
    def _reconfigure_engine(self, spec: specs.Concurrency, queue_limit: int | None, newest_first: bool) -> None: ...
    def __init__(
        self, clock: Clock, spec: specs.Concurrency, queue_limit: int | None, newest_first: bool, manual: bool
    ) -> None: ...
    def acquire(self, permit_count: int = 1) -> Lease:
        """Takes ``permit_count`` permits now, or returns a failed lease; never blocks or queues.

        A failure has reason ``"limit_reached"`` and no ``retry_after`` (a release, not time, frees
        permits). The lease holds its permits until ``release()`` (or the end of ``with lease:``).
        ``acquire(0)`` takes nothing and succeeds when at least one permit is available. Raises
        ``TypeError`` for a count that is not an int, ``ValueError`` for a negative one or one above
        ``permit_limit``, ``LimiterClosedError`` after ``close()``.
        """
    def _try_now(self, permit_count: int = 1) -> Lease | None: ...
    def acquire_async(self, permit_count: int = 1) -> EngineLeaseWait:
        """The attempt of ``acquire()`` as an awaitable of its lease, made when it is first awaited: it
        never queues, and any event loop (or none) may await it; awaited again, it returns the same lease.
        One never awaited (dropped, closed, its task cancelled before it ran) takes nothing. Also an
        async context manager that releases the lease on exit. Raises ``ValueError`` for a bad
        ``permit_count`` and ``LimiterClosedError`` when called on a closed limiter (a close between the
        call and the await raises at the await).
        """
    def wait_async(self, permit_count: int = 1) -> EngineLeaseWait:
        """Waits in the limiter's queue for ``permit_count`` permits: ``await`` it for the lease, or
        ``async with limiter.wait_async() as lease:`` to have the lease released on exit.

        Granted at once when it can be (no event loop round trip). Otherwise it queues and ends with the
        lease, or with a failed one: ``"queue_full"`` (no room in the queue), ``"evicted"`` (pushed out
        under ``NEWEST_FIRST``) or ``"closed"`` (the limiter was closed). A zero-permit wait completes
        when at least one permit is available, taking none. Cancelling the awaiting task takes the request
        out of the queue (a grant not yet handed over goes back); for a time limit use
        ``asyncio.timeout()``. Works under asyncio and trio. Raises ``TypeError`` or ``ValueError`` for a
        bad ``permit_count``, ``LimiterClosedError`` if the limiter is closed already.
        """

class PerKey:
    """The engine's per-key table: what ``PerKeyLimiter`` runs on."""
    def __init__(
        self,
        clock: Clock,
        spec: specs.Spec[Any],
        queue_limit: int | None,
        newest_first: bool,
        idle_timeout_ns: int,
        max_partitions: int,
    ) -> None: ...
    def acquire(self, resource: object, /, permit_count: int = 1) -> Lease:
        """Takes ``permit_count`` permits from ``resource``'s limit now, or returns a failed lease;
        never blocks or queues.

        ``resource`` is the key: a ``str``, ``bytes``, ``int`` or a tuple of them (``TypeError``
        otherwise). A new key starts with a full limit; at ``max_partitions`` it fails with reason
        ``"partition_limit"`` unless an idle key can make room. Other failures are as for a single
        limiter's ``acquire()`` (``"limit_reached"``, with ``retry_after`` for time-based limits).
        Raises ``ValueError`` for a negative ``permit_count`` or one above the limit,
        ``LimiterClosedError`` after ``close()``.
        """
    def _try_now(self, resource: object, /, permit_count: int = 1) -> Lease | None: ...
    def acquire_async(self, resource: object, /, permit_count: int = 1) -> EngineLeaseWait:
        """The attempt of ``acquire(resource, permit_count)`` as an awaitable of its lease, made when
        it is first awaited (it never queues; one never awaited takes nothing); awaited again, it returns
        the same lease. Also an async context manager that releases the lease on exit. Raises
        ``TypeError`` for a key of the wrong type and ``LimiterClosedError`` when called on a closed
        limiter; a ``permit_count`` above the limit raises ``ValueError`` at the await.
        """
    def wait_async(self, resource: object, /, permit_count: int = 1) -> EngineLeaseWait:
        """Waits in ``resource``'s queue for ``permit_count`` permits: ``await`` it for the lease, or
        ``async with`` it to have the lease released on exit. Keys, failures and cancellation are as for
        ``acquire()`` and a single limiter's ``wait_async()``. Raises ``LimiterClosedError`` if the
        limiter is closed already.
        """
    def _enqueue(
        self, resource: object, permit_count: int, timeout_ns: int, notifier: Notifier | None
    ) -> Lease | WaitHandle: ...
    def _reset(self, resource: object, /) -> bool:
        """Forgets the key's time-based usage; False when there was nothing to forget."""
    def _reconfigure_engine(self, spec: specs.Spec[Any], queue_limit: int | None, newest_first: bool) -> None: ...
    @property
    def _queue(self) -> tuple[int | None, bool]: ...
    def _statistics(self, resource: object, /) -> tuple[int, int, int, int] | None: ...
    def _available(self, resource: object, /) -> int: ...
    @property
    def partition_count(self) -> int:
        """Keys that have state in the table now (evicted keys are not counted)."""
    def _totals(self) -> tuple[int, int, int, int]: ...
    def _memory(self) -> tuple[int, int]: ...
    def evict_idle(self) -> int:
        """Evicts every key idle (all permits back, nothing queued) for longer than ``idle_timeout``;
        returns how many. The engine evicts on its own when each key comes due: this only makes it
        happen now.
        """
    def close(self) -> None:
        """Closes the limiter; idempotent. Every key's queued waits end at once with a failed lease,
        reason ``"closed"``; later calls raise ``LimiterClosedError``.
        """
    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
