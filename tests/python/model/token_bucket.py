"""Token bucket: ``tokens_per_period`` tokens are added for every whole period elapsed since the
anchor (construction), capped at ``token_limit``; the bucket starts full."""

from __future__ import annotations


class TokenBucketModel:
    timed = True

    def __init__(self, token_limit: int, tokens_per_period: int, period_ns: int, anchor_ns: int) -> None:
        self.limit = token_limit
        self.per_period = tokens_per_period
        self.period = period_ns
        self.anchor = anchor_ns
        # The tokens in the bucket as of the start of period `period_index` (after its refill).
        self.period_index = 0
        self.tokens = token_limit

    def _index(self, t: int) -> int:
        return (t - self.anchor) // self.period

    def available(self, t: int) -> int:
        elapsed_periods = self._index(t) - self.period_index
        assert elapsed_periods >= 0, "time went backwards"
        return min(self.limit, self.tokens + elapsed_periods * self.per_period)

    def take(self, n: int, t: int) -> None:
        tokens = self.available(t)
        assert 0 <= n <= tokens
        self.tokens = tokens - n
        self.period_index = self._index(t)

    def refund(self, n: int, taken_at: int, t: int) -> None:
        """Tokens go back to the bucket, up to its limit: only those the refills since the grant
        could not have brought (had the grant never happened, each refill would have found them
        there already)."""
        refilled = (self._index(t) - self._index(taken_at)) * self.per_period
        back = max(0, n - refilled)
        if back:
            self.tokens = min(self.limit, self.available(t) + back)
            self.period_index = self._index(t)
