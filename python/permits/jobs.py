"""Pacing jobs: ``@limit`` waits for permits before each call, ``throttle`` paces an iteration.

Both wait however the limiter's queue is configured (in the queue when it has one, otherwise
sleeping for the failed lease's ``retry_after`` and asking again); a closed limiter raises
``permits.LimiterClosedError``. On a ``permits.ManualClock`` a wait advances the clock
instead of sleeping.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncIterable, AsyncIterator, Callable, Generator, Iterable, Iterator, Sequence
from typing import Any, TypeVar, overload

from . import _blocking_jobs
from ._core import Lease
from ._pacing import Pacer, check_permit_count
from ._rates import limiter_of
from .keyed_limiter import KeyedRateLimiter

__all__ = ["limit", "throttle"]

F = TypeVar("F", bound=Callable[..., Any])
"""The decorated function's type: ``limit`` returns a function of the same type."""
_NOT_ASYNC = (
    "@permits.limit: {name} is a plain function that returned a coroutine; decorate the async def "
    "itself (or, from Python 3.12, mark {name} with inspect.markcoroutinefunction) so that each call "
    "waits without blocking the event loop and holds its permits until the coroutine ends"
)
T = TypeVar("T")
"""The items of the iterable ``throttle`` paces, which it yields unchanged."""
#: What a sync job's wait on a running event loop's thread says to use instead (``_blocking_jobs``).
_ASYNC_LIMIT = "@permits.limit on an async def, awaited"
_ASYNC_THROTTLE = "async for over permits.throttle of an async iterable"


def _limiter_of(limiter: object) -> object:
    """A rate such as "2/second" (``permits.specs.parse``) or a spec stands for a new limiter of it
    (no bound on its queue); anything else is checked by the Pacer."""
    return limiter_of(limiter, per_key=False)


def _check_key(limiter: object, key: object) -> None:
    if key is None and isinstance(limiter, KeyedRateLimiter):
        raise TypeError("key is required with a KeyedRateLimiter: a resource, or a callable returning one")


def limit(limiter: object, permit_count: int = 1, *, key: object = None) -> Callable[[F], F]:
    """Decorates a function so that each call first waits for ``permit_count`` permits.

    Works on plain and ``async`` functions, and on (async) generator functions, whose permits
    are taken when iteration starts. The lease is held for the call (or the iteration) and
    released when it ends, however it ends: a concurrency limit bounds the calls running at once.
    With a ``KeyedRateLimiter``, ``key`` is a resource, or a callable given the call's arguments
    that returns one (it may be a coroutine function for an async function). ``limiter`` may
    also be a spec, or a rate such as ``"2/second"`` (``permits.specs.parse``): the decorator
    then makes a limiter of it, its own. Either is one process's limit: worker processes each
    count apart, unless the limiter is a shared one (``permits.shm``, ``permits.redis``).
    """
    limiter = _limiter_of(limiter)
    pacer = Pacer(limiter)
    n = check_permit_count(permit_count)
    _check_key(limiter, key)
    key_of: Callable[..., Any] = key if callable(key) else (lambda *args, **kwargs: key)

    def decorate(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"@limit decorates a function, got {type(fn).__name__}")
        what = f"@permits.limit: {getattr(fn, '__qualname__', repr(fn))}"  # (the job, as an error names it)
        wrapper: Callable[..., Any]
        if inspect.isasyncgenfunction(fn):

            async def agen_wrapper(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
                with await pacer.wait_async(await _resolve(key_of(*args, **kwargs)), n):
                    async with contextlib.aclosing(fn(*args, **kwargs)) as inner:
                        async for item in inner:
                            yield item

            wrapper = agen_wrapper
        elif inspect.iscoroutinefunction(fn):

            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with await pacer.wait_async(await _resolve(key_of(*args, **kwargs)), n):
                    return await fn(*args, **kwargs)

            wrapper = async_wrapper
        elif inspect.isgeneratorfunction(fn):

            def gen_wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
                with _blocking_jobs.wait(pacer, _plain(key_of(*args, **kwargs)), n, what, _ASYNC_LIMIT):
                    return (yield from fn(*args, **kwargs))

            wrapper = gen_wrapper
        else:

            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                lease = _blocking_jobs.wait(pacer, _plain(key_of(*args, **kwargs)), n, what, _ASYNC_LIMIT)
                with lease:
                    result = fn(*args, **kwargs)
                    if inspect.iscoroutine(result):
                        # Its work runs later, after the lease is released (and the wait above
                        # blocked the event loop): refuse it, as if the call never happened.
                        result.close()
                        lease._refund()
                        raise TypeError(_NOT_ASYNC.format(name=getattr(fn, "__qualname__", repr(fn))))
                    return result

            wrapper = sync_wrapper
        return functools.wraps(fn)(wrapper)  # type: ignore[return-value]

    return decorate


async def _resolve(key: object) -> object:
    return await key if inspect.isawaitable(key) else key


def _plain(key: object) -> object:
    if inspect.isawaitable(key):
        if inspect.iscoroutine(key):
            key.close()  # never awaited: say so without a "never awaited" warning
        raise TypeError("key returned an awaitable for a synchronous function")
    return key


@overload
def throttle(
    iterable: AsyncIterable[T], limiter: object, permit_count: int = 1, *, key: object = None
) -> AsyncIterator[T]: ...
@overload
def throttle(iterable: Iterable[T], limiter: object, permit_count: int = 1, *, key: object = None) -> Iterator[T]: ...
def throttle(
    iterable: Iterable[T] | AsyncIterable[T], limiter: object, permit_count: int = 1, *, key: object = None
) -> Iterator[T] | AsyncIterator[T]:
    """Yields the items of ``iterable`` no faster than ``limiter`` allows, ``permit_count``
    permits per item: a plain iterable gives a generator, an async iterable an async iterator.

    It waits for an item's permits before it takes the item from the source, so a source whose
    every step is a call (a paginating API client) makes no call ahead of its permit; the step that
    finds the source exhausted takes its permits too (it may have been a call: the last, empty
    page). A sequence (list, tuple, range, str: its items are there already) is read first, and its
    end costs no wait. Each item's lease is held while the consumer has it, until it asks for the
    next one (so a concurrency limit of 1 holds one item at a time). With a ``KeyedRateLimiter``,
    ``key`` is a resource or a callable given the item that returns one (the item must then be
    taken before its wait). ``limiter`` may also be a spec or a rate such as ``"2/second"``, as for
    ``limit``.
    """
    limiter = _limiter_of(limiter)
    pacer = Pacer(limiter)
    n = check_permit_count(permit_count)
    _check_key(limiter, key)
    if isinstance(iterable, AsyncIterable):
        if callable(key):
            return _athrottle_keyed(iterable, pacer, n, key)
        return _athrottle(iterable, pacer, n, key)
    if isinstance(iterable, Iterable):
        if callable(key):
            return _throttle_keyed(iterable, pacer, n, key)
        if isinstance(iterable, Sequence):
            return _throttle_keyed(iterable, pacer, n, lambda item: key)
        return _throttle(iterable, pacer, n, key)
    raise TypeError(f"throttle needs an iterable or an async iterable, got {type(iterable).__name__}")


def _throttle(iterable: Iterable[T], pacer: Pacer, n: int, key: object) -> Iterator[T]:
    """Waits, then takes the item (the source's step is paced too)."""
    items = iter(iterable)
    while True:
        with _blocking_jobs.wait(pacer, key, n, "permits.throttle", _ASYNC_THROTTLE):
            try:
                item = next(items)
            except StopIteration:
                return
            yield item


def _throttle_keyed(iterable: Iterable[T], pacer: Pacer, n: int, key_of: Callable[[Any], Any]) -> Iterator[T]:
    """Takes the item, then waits: its key, or the source's items there already."""
    for item in iterable:
        lease: Lease = _blocking_jobs.wait(pacer, _plain(key_of(item)), n, "permits.throttle", _ASYNC_THROTTLE)
        with lease:
            yield item


async def _athrottle(iterable: AsyncIterable[T], pacer: Pacer, n: int, key: object) -> AsyncIterator[T]:
    items = aiter(iterable)
    while True:
        with await pacer.wait_async(key, n):
            try:
                item = await anext(items)
            except StopAsyncIteration:
                return
            yield item


async def _athrottle_keyed(
    iterable: AsyncIterable[T], pacer: Pacer, n: int, key_of: Callable[[Any], Any]
) -> AsyncIterator[T]:
    async for item in iterable:
        lease = await pacer.wait_async(await _resolve(key_of(item)), n)
        with lease:
            yield item
