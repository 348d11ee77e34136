"""A limit as a server keeps it: the algorithm and its parameters in integers (nanoseconds).

Both stores run the same arithmetic as the engine (``design``: time is computed from an anchor
at the state's creation; see ``permits._stores.backend`` for each kind's rules), so a store
limiter grants exactly what an engine limiter of the same spec would on the same clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import specs

KINDS = ("token_bucket", "fixed_window", "sliding_window", "sliding_window_counter", "sliding_log", "concurrency")


@dataclass(frozen=True, slots=True)
class Rule:
    """``kind``; ``limit`` (token_limit or permit_limit); ``period_ns`` (replenishment_period,
    window; 0 for concurrency); ``amount`` (tokens_per_period, segments_per_window, the log's
    segments; else 0);
    ``lease_ttl_ns`` (concurrency; else 0)."""

    kind: str
    limit: int
    period_ns: int = 0
    amount: int = 0
    lease_ttl_ns: int = 0

    @property
    def signature(self) -> str:
        """What the server records with the state: opening it with another rule is an error.
        (lease_ttl is not part of it: holders may choose their own.)"""
        return f"{self.kind}:{self.limit}:{self.period_ns}:{self.amount}"

    @property
    def timed(self) -> bool:
        return self.kind != "concurrency"

    @property
    def lifetime_ns(self) -> int:
        """How long an untouched state must live for its next use to need it: past this, a state
        left alone is as good as new, so the server may drop it (a key that expires on its own)."""
        if self.kind == "token_bucket":
            periods = -(-self.limit // self.amount)  # periods to refill an empty bucket
            return periods * self.period_ns
        if self.kind == "concurrency":
            return self.lease_ttl_ns
        return 2 * self.period_ns  # the current window and the one before it


def rule_of(spec: specs.Spec[Any], lease_ttl_ns: int = 0) -> Rule:
    if isinstance(spec, specs.TokenBucket):
        return Rule("token_bucket", spec.token_limit, spec._period_ns, spec.tokens_per_period)
    if isinstance(spec, specs.FixedWindow):
        return Rule("fixed_window", spec.permit_limit, spec._window_ns)
    if isinstance(spec, specs.SlidingWindow):
        return Rule("sliding_window", spec.permit_limit, spec._window_ns, spec.segments_per_window)
    if isinstance(spec, specs.SlidingLog):
        return Rule("sliding_log", spec.permit_limit, spec._window_ns, -spec._engine_segments)
    if isinstance(spec, specs.SlidingWindowCounter):
        return Rule("sliding_window_counter", spec.permit_limit, spec._window_ns)
    if isinstance(spec, specs.Concurrency):
        return Rule("concurrency", spec.permit_limit, lease_ttl_ns=lease_ttl_ns)
    raise TypeError(f"a store keeps limits of the permits.specs kinds, not {type(spec).__name__}")
