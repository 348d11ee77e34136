"""A lease the shared state behind it forgot: ``metadata["lost"]`` (docs/stores.md, Lost leases).

A store's lease says so through ``Lease.granted(lost=...)``, asked when the metadata is read and
before the release, latched once true; the leases that wrap others (a chain's, an instrumented
limiter's) show their inner leases' state, live.
"""

from __future__ import annotations

import pytest

import permits
from permits.metrics import instrument

from _support import need


class Forgetful(permits.RateLimiter):
    """Grants; each lease is lost once ``forgotten`` is set (as a store's renewal would find it)."""

    def __init__(self, name: str = "forgetful") -> None:
        super().__init__(name=name)
        self.forgotten = False
        self.released = 0

    def _acquire(self, permit_count: int) -> permits.Lease:
        def release() -> None:
            self.released += 1

        return permits.Lease.granted(permit_count, on_release=release, lost=lambda: self.forgotten)


def test_a_lease_is_lost_once_its_callable_says_so_and_from_then_on() -> None:
    limiter = Forgetful()
    lease = limiter.acquire()
    assert "lost" not in lease.metadata
    assert lease._is_lost() is False
    limiter.forgotten = True
    assert lease.metadata["lost"] is True
    limiter.forgotten = False  # latched: the lease was lost, whatever the state says later
    assert lease.metadata["lost"] is True
    lease.release()
    assert limiter.released == 1  # (the store's own release decides what it gives back)
    assert lease.metadata["lost"] is True


def test_a_lease_released_after_it_was_forgotten_stays_lost() -> None:
    limiter = Forgetful()
    lease = limiter.acquire()
    limiter.forgotten = True
    lease.release()  # asked before the release, never read before
    limiter.forgotten = False
    assert lease.metadata["lost"] is True


def test_lost_must_be_callable_and_its_error_propagates() -> None:
    with pytest.raises(TypeError, match="lost must be callable"):
        permits.Lease.granted(1, lost=True)  # type: ignore[arg-type]

    def broken() -> bool:
        raise RuntimeError("the store could not say")

    lease = permits.Lease.granted(1, lost=broken)
    with pytest.raises(RuntimeError, match="could not say"):
        lease.metadata  # noqa: B018
    assert permits.Lease.granted(1, lost=None).metadata == {}
    assert permits.ConcurrencyLimiter(1).acquire()._is_lost() is False  # in-process state is never forgotten


def test_a_chain_lease_is_lost_when_an_inner_lease_is() -> None:
    first, second = Forgetful("first"), Forgetful("second")
    lease = permits.chain(first, second).acquire()
    assert lease and "lost" not in lease.metadata
    second.forgotten = True
    assert lease.metadata["lost"] is True
    lease.release()
    assert (first.released, second.released) == (1, 1)


def test_an_instrumented_limiters_lease_shows_its_inner_lease_lost() -> None:
    registry = need("prometheus_client").CollectorRegistry()
    limiter = Forgetful()
    lease = instrument(limiter, registry=registry).acquire()
    assert "lost" not in lease.metadata
    limiter.forgotten = True
    assert lease.metadata["lost"] is True
