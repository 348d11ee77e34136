"""The package's types as a user's type checker sees them (py.typed): mypy --strict on a snippet."""

from __future__ import annotations

import textwrap

from mypy import api

SNIPPET = textwrap.dedent(
    """
    import contextlib

    import permits
    from permits import Partition, PartitionedLimiter

    rate = permits.TokenBucketLimiter(100, 10, 1.0)
    per_user = PartitionedLimiter.per_key(Partition.token_bucket(None, 5, 5, 1.0))
    both = permits.chain(rate, per_user)
    plain = permits.chain(rate, permits.ConcurrencyLimiter(4))
    reveal_type(both)
    reveal_type(plain)
    lease: permits.Lease = both.acquire("alice")
    lease = plain.acquire(2)

    import asyncio

    async def tasks() -> None:
        # Every limiter's wait is a coroutine to the checker, as at runtime.
        waits = [rate.wait_async(), plain.wait_async(), both.wait_async("bob"), per_user.wait_async("bob")]
        for wait in waits:
            got: permits.Lease = await asyncio.create_task(wait)
        async with asyncio.TaskGroup() as group:
            group.create_task(permits.NoLimiter().wait_async())
            # acquire_async too, of a plain and of a keyed limiter
            group.create_task(rate.acquire_async())
            group.create_task(both.acquire_async("carol"))

    class Remote(permits.RateLimiter):
        def _acquire(self, permit_count: int) -> permits.Lease:
            return permits.Lease.granted(permit_count, on_refund=lambda: None)

        async def _acquire_async(self, permit_count: int) -> permits.Lease:
            return self._acquire(permit_count)

    class PerUser(permits.KeyedRateLimiter):
        def _acquire(self, resource: object, permit_count: int) -> permits.Lease:
            return permits.Lease.denied("user_limit")

    keyed: permits.KeyedRateLimiter = permits.chain(Remote(), PerUser())
    with contextlib.closing(PerUser()) as users:
        reveal_type(users)
    with permits.ConcurrencyLimiter(1) as held:  # holds one permit for the block
        reveal_type(held)
    reveal_type(PartitionedLimiter.per_key("10/second"))
    reveal_type(PartitionedLimiter.per_key(permits.specs.Concurrency(2)))
    """
)


def test_chain_of_a_partitioned_limiter_takes_a_resource(tmp_path):
    source = tmp_path / "snippet.py"
    source.write_text(SNIPPET)
    out, err, status = api.run(["--strict", "--cache-dir", str(tmp_path / "cache"), str(source)])
    assert status == 0, out + err
    assert 'Revealed type is "permits.chain.ChainedPartitionedLimiter"' in out
    assert 'Revealed type is "permits.chain.ChainedLimiter"' in out
    assert 'Revealed type is "snippet.PerUser"' in out
    assert 'Revealed type is "permits._core.Lease"' in out  # `with limiter as held:`
    assert out.count('Revealed type is "permits.per_key.PerKeyLimiter"') == 1  # per_key() of a spec
    # a rate may be several ("10/second;1000/day"): a chain of per-key limiters
    assert 'Revealed type is "permits.per_key.PerKeyLimiter | permits.chain.ChainedPartitionedLimiter"' in out
