"""What the two interfaces (RateLimiter, KeyedRateLimiter) share: the name and clock, the closed
flag and the counts a custom limiter's statistics start from, the hooks' lease check, closing
(close, aclose) and ``with`` / ``async with``, which hold one permit for the block."""

from __future__ import annotations

from types import TracebackType

from . import _holding, _pausing
from ._core import Lease, LimiterClosedError, Tally
from ._loop_check import blocks_the_loop
from .clock import resolve


class LimiterBase:
    _rl_keyed = False  # KeyedRateLimiter: True

    def __init__(self, *, name: str | None = None, clock: object = None) -> None:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        self.name = "default" if name is None else name
        """The limiter's name (``"default"`` unless given): a failed lease names its limiter in
        ``metadata["limiter"]``, and the metrics label its series with it."""
        #: The clock a chain measures this limiter's share of a wait's timeout on.
        self._rl_clock = resolve(clock)
        self._rl_closed = False
        # Granted and refused leases (statistics()), counted from any thread.
        self._rl_tally = Tally()

    def _check_open(self) -> None:
        if self._rl_closed:
            raise LimiterClosedError("the limiter is closed")

    @staticmethod
    def _spec_given(spec: object) -> object:
        """``reconfigure``'s spec: a rate such as "10/second" parsed (a bad one: ``ValueError``
        naming ``spec``), anything else as given (the limiter checks it)."""
        if not isinstance(spec, str):
            return spec
        from . import specs  # (specs imports the interfaces: not at this module's import)

        try:
            return specs.parse(spec)
        except ValueError as error:
            raise ValueError(f"spec: {error}") from None

    def _rl_checked(self, lease: object, permit_count: int, hook: str = "_acquire") -> Lease:
        """A hook's lease, checked. A failed one gets the requested permit_count and, unless it names
        one already (a chain's member, a partition's limiter), this limiter's name as
        metadata["limiter"]: on a copy, as a hook may hand out one denial it keeps."""
        if not isinstance(lease, Lease):
            raise TypeError(f"{type(self).__name__}.{hook} must return a permits.Lease, got {type(lease).__name__}")
        if lease:
            return lease
        metadata = lease.metadata
        if lease.permit_count != permit_count or "limiter" not in metadata:
            extra = {k: v for k, v in metadata.items() if k not in ("reason", "retry_after")}
            extra.setdefault("limiter", self.name)
            copy = Lease.denied(lease.reason or "limit_reached", retry_after=lease.retry_after, metadata=extra)
            return copy._with_permit_count(permit_count)
        return lease

    def _rl_mark_closed(self) -> None:
        """Closed from now on; the pauses and waits of this limiter end at once."""
        self._rl_closed = True
        _pausing.wake_all()

    def close(self) -> None:
        """Closes the limiter; idempotent. Waits in progress end with a failed lease (reason
        ``"closed"``); later calls raise ``LimiterClosedError``. ``contextlib.closing(limiter)``
        closes it at the end of a block (``with limiter:`` holds a permit instead)."""
        self._rl_mark_closed()

    async def aclose(self) -> None:
        """``close()`` for async code (a partitioned limiter awaits each partition's ``aclose()``)."""
        self.close()

    # ``with limiter:`` is threading.Semaphore's and aiolimiter's habit: one permit for the block.
    def _rl_block_wait(self) -> Lease:
        raise NotImplementedError

    async def _rl_block_wait_async(self) -> Lease:
        raise NotImplementedError

    def __enter__(self) -> Lease:
        """Waits for one permit (``wait()``) and holds it for the block; raises
        ``LeaseFailedError`` when the wait fails. Never closes the limiter."""
        if not self._rl_keyed:  # (a keyed one raises TypeError at once: nothing blocks)
            blocks_the_loop(None, "with limiter:", "async with limiter:")
        return _holding.hold(self, self._rl_block_wait())

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _holding.let_go(self)

    async def __aenter__(self) -> Lease:
        """Waits for one permit (``wait_async()``) and holds it for the block; raises
        ``LeaseFailedError`` when the wait fails. Never closes the limiter."""
        return _holding.hold(self, await self._rl_block_wait_async())

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _holding.let_go(self)
