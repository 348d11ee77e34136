"""The speed goals, each a ratio of two numbers measured in the same run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

TIME_BASED = (
    ("token_bucket", "TokenBucketLimiter"),
    ("fixed_window", "FixedWindowLimiter"),
    ("sliding_window", "SlidingWindowLimiter"),
    ("sliding_window_counter", "SlidingWindowCounterLimiter"),
)


@dataclass(frozen=True)
class Goal:
    name: str
    value: float | None
    """The measured ratio; None when a side is missing."""
    target: float
    at_most: bool
    """True: the ratio must be <= target; False: >= target."""
    detail: str = ""
    unit: str = "x"
    """How value and target are shown: "x" for a ratio, " B" for bytes."""

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        return self.value <= self.target if self.at_most else self.value >= self.target

    @property
    def target_text(self) -> str:
        return f"{'<=' if self.at_most else '>='} {self.target:g}{self.unit}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or not b else a / b


def sync_ns(data: dict[str, Any]) -> dict[str, float]:
    """bench_acquire results by key: best ns per call."""
    return {r["key"]: r["best_ns"] for r in data.get("results", []) if r.get("key") and r.get("best_ns") is not None}


def sync_goals(data: dict[str, Any]) -> Iterator[Goal]:
    ns = sync_ns(data)
    floor = ns.get("dict_get")
    for key, label in TIME_BASED:
        yield Goal(f"`{label}.acquire()` / `dict.get`", _ratio(ns.get(f"permits_{key}_ok"), floor), 3, True)
    conc = ns.get("permits_concurrency_acquire_release")
    yield Goal("`ConcurrencyLimiter` `acquire().release()` / `dict.get`", _ratio(conc, floor), 6, True)
    # The same after the process started a second thread (C++ reference counts become atomic).
    floor_t = ns.get("dict_get_threaded")
    tb_t = ns.get("permits_token_bucket_ok_threaded")
    yield Goal("`TokenBucketLimiter.acquire()` / `dict.get`, 2nd thread alive", _ratio(tb_t, floor_t), 3, True)
    conc_t = ns.get("permits_concurrency_acquire_release_threaded")
    yield Goal(
        "`ConcurrencyLimiter` `acquire().release()` / `dict.get`, 2nd thread alive", _ratio(conc_t, floor_t), 6, True
    )
    peers = {r["name"]: r["best_ns"] for r in data.get("results", []) if r.get("group") == "peer" and r.get("best_ns")}
    peers = {name: v for name, v in peers.items() if " fail" not in name}
    if peers:
        name = min(peers, key=peers.__getitem__)
        value = _ratio(peers[name], ns.get("permits_token_bucket_ok"))
        yield Goal("fastest in-memory peer / permits token bucket `acquire()`", value, 30, False, name)
    else:
        yield Goal("fastest in-memory peer / permits token bucket `acquire()`", None, 30, False, "no peer ran")


def per_key_goals(data: dict[str, Any]) -> Iterator[Goal]:
    sizes = [row for row in data.get("sizes", []) if row["n"] >= 100_000]
    if not sizes:
        yield Goal("per-key `acquire(key)` / `dict.get` over the same keys", None, 6, True, "no size >= 100k keys")
    for row in sizes:
        value = _ratio(row.get("per_key_ns"), row.get("dict_ns"))
        yield Goal(f"per-key `acquire(key)` / `dict.get` over the same {row['n']:,} keys", value, 6, True)
    for row in sizes:
        mem = row.get("memory") or {}
        if "engine_state_bytes" in mem:
            yield Goal(
                f"engine state per live key, {row['n']:,} keys (the table's accounting)",
                mem["engine_state_bytes"],
                64,
                True,
                f"plus the key's own {mem['key_bytes']:.1f} B",
                unit=" B",
            )


def cpp_goals(data: dict[str, Any]) -> Iterator[Goal]:
    limiters = data.get("summary", {}).get("limiters", {})
    why = "" if limiters else data.get("status", "not run")
    for lim in ("TokenBucket", "FixedWindow", "SlidingWindow", "SlidingWindowCounter"):
        e = limiters.get(lim, {})
        yield Goal(f"C++ {lim} check / (clock read + CAS)", e.get("x_floor"), 2, True, why)
    for lim in ("TokenBucket", "FixedWindow", "SlidingWindow", "SlidingWindowCounter"):
        e = limiters.get(lim, {})
        cores = f"the 2 threads got {e['two_thread_cores']:.2f} cores of CPU time" if "two_thread_cores" in e else why
        yield Goal(
            f"C++ {lim}: 2 threads on separate limiters / 1 thread", e.get("two_thread_scaling"), 1.7, False, cores
        )


def async_goals(data: dict[str, Any]) -> Iterator[Goal]:
    rate = {r["key"]: r["best_per_s"] for r in data.get("results", []) if r.get("status") == "ok"}
    why = "" if rate else data.get("status", "not run")
    for key, label in (("permits_concurrency", "ConcurrencyLimiter"), ("permits_token_bucket", "TokenBucketLimiter")):
        yield Goal(
            f"`wait_async` releases ({label}) / floor", _ratio(rate.get(key), rate.get("floor")), 0.5, False, why
        )
    for key, label in (("permits_concurrency", "ConcurrencyLimiter"), ("permits_token_bucket", "TokenBucketLimiter")):
        value = _ratio(rate.get(key), rate.get("aiolimiter"))
        yield Goal(f"`wait_async` releases ({label}) / aiolimiter", value, 5, False, why)


def all_goals(collected: dict[str, dict[str, Any]]) -> list[Goal]:
    goals: list[Goal] = []
    for key, make in (("sync", sync_goals), ("per_key", per_key_goals), ("cpp", cpp_goals), ("async", async_goals)):
        if key in collected:
            goals.extend(make(collected[key]))
    return goals
