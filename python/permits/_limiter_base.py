"""What the two interfaces (RateLimiter, KeyedRateLimiter) share: the name and clock, the closed
flag and the counts a custom limiter's statistics start from, the hooks' lease check, and closing
(close, aclose, with, async with)."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from ._core import Lease, LimiterClosedError
from .clock import resolve


class LimiterBase:
    def __init__(self, *, name: str | None = None, clock: object = None) -> None:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        self.name = "default" if name is None else name
        #: The clock a chain measures this limiter's share of a wait's timeout on.
        self._rl_clock = resolve(clock)
        self._rl_closed = False
        self._rl_successful = 0
        self._rl_failed = 0

    def _check_open(self) -> None:
        if self._rl_closed:
            raise LimiterClosedError("the limiter is closed")

    def _rl_checked(self, lease: object, permit_count: int) -> Lease:
        """A hook's lease, checked (a failed one gets the requested permit_count)."""
        if not isinstance(lease, Lease):
            raise TypeError(f"{type(self).__name__}._acquire must return a permits.Lease, got {type(lease).__name__}")
        if not lease:
            lease._with_permit_count(permit_count)
        return lease

    def close(self) -> None:
        self._rl_closed = True

    async def aclose(self) -> None:
        self.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
