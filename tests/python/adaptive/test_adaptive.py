"""permits.AdaptiveLimiter: a client's rate learned from a server's answers (issue 41), on a
ManualClock: its arguments, Retry-After obeyed exactly, the stated quota paced to, and simulations
against servers whose limit the client is not told (token buckets and fixed windows, static and
changing) or is told in headers."""

from __future__ import annotations

import email.utils
from typing import Any

import pytest

import permits
from permits import AdaptiveLimiter
from permits.adaptive import BETA, SLOW_START

from _hidden import FixedWindowServer, TokenBucketServer, drive, window_stats


def limiter(rate: float = 10.0, **options: Any) -> tuple[AdaptiveLimiter, permits.ManualClock]:
    clock = permits.ManualClock(100.0)
    return AdaptiveLimiter(rate, clock=clock, **options), clock


def send(adaptive: AdaptiveLimiter, clock: permits.ManualClock, status: int) -> None:
    """A request as soon as its permit comes, answered ``status``."""
    lease = adaptive.acquire()
    if not lease:
        clock.advance(lease.retry_after)
        lease = adaptive.acquire()
    assert lease
    adaptive.on_response(status, [])


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("args", "options", "error", "match"),
    [
        ((0,), {}, ValueError, "initial_rate"),
        ((-1.0,), {}, ValueError, "initial_rate"),
        ((float("nan"),), {}, ValueError, "initial_rate"),
        ((float("inf"),), {}, ValueError, "initial_rate"),
        (("10",), {}, TypeError, "initial_rate"),
        ((True,), {}, TypeError, "initial_rate"),
        ((10,), {"min_rate": 0}, ValueError, "min_rate"),
        ((10,), {"max_rate": float("nan")}, ValueError, "max_rate"),
        ((10,), {"min_rate": 5, "max_rate": 2}, ValueError, "min_rate"),
        ((10,), {"max_rate": 5}, ValueError, "initial_rate"),
        ((10,), {"name": 5}, TypeError, "name"),
    ],
)
def test_bad_arguments_name_themselves(args: tuple[Any, ...], options: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        AdaptiveLimiter(*args, **options)


@pytest.mark.parametrize(("status", "headers"), [("429", ()), (429, 5), (429, [("a",)]), (429, "Retry-After: 1")])
def test_a_response_that_is_not_one_is_a_type_error(status: Any, headers: Any) -> None:
    adaptive, _ = limiter()
    with pytest.raises(TypeError):
        adaptive.on_response(status, headers)


# --------------------------------------------------------------------------- pacing and learning


def test_permits_are_paced_at_the_rate() -> None:
    adaptive, clock = limiter(4.0)
    assert adaptive.acquire()
    refused = adaptive.acquire()
    assert not refused and refused.reason == "limit_reached" and refused.retry_after == pytest.approx(0.25)
    clock.advance(0.25)
    assert adaptive.acquire(2)  # two permits: the next one half a second later
    clock.advance(0.5 - 1e-6)
    assert not adaptive.acquire()
    clock.advance(1e-6)
    assert adaptive.acquire()
    assert adaptive.statistics().total_successful_leases == 3


@pytest.mark.parametrize("retry_after", ["3", "3.0", "RETRY"], ids=["seconds", "fraction", "date"])
def test_retry_after_is_obeyed_exactly(retry_after: str) -> None:
    adaptive, clock = limiter(100.0)
    headers = [("retry-after", retry_after)]
    if retry_after == "RETRY":
        # An HTTP date, counted from the response's own Date (the client's clock may be off).
        headers = [
            ("Date", email.utils.formatdate(1_000_000, usegmt=True)),
            ("Retry-After", email.utils.formatdate(1_000_003, usegmt=True)),
        ]
    assert adaptive.acquire()
    adaptive.on_response(429, headers)
    refused = adaptive.acquire()
    assert not refused and refused.retry_after == pytest.approx(3.0)
    clock.advance(3.0 - 1e-3)
    assert not adaptive.acquire()
    clock.advance(1e-3)
    assert adaptive.acquire()


def test_throttling_lowers_the_rate_once_per_send_and_successes_raise_it() -> None:
    adaptive, clock = limiter(10.0, max_rate=1000.0)
    for _ in range(SLOW_START):  # slow start: the rate doubles every SLOW_START successes (at most)
        send(adaptive, clock, 200)
    throttled_at = adaptive.rate
    assert 15.0 < throttled_at <= 20.0 + 1e-9  # (twice what was recently sent, at most)
    send(adaptive, clock, 429)
    assert adaptive.rate == pytest.approx(throttled_at * BETA)
    adaptive.on_response(503, {"Retry-After": "0"})  # an answer to the same send: no second decrease
    assert adaptive.rate == pytest.approx(throttled_at * BETA)
    rates = []
    for _ in range(4000):
        send(adaptive, clock, 200)
        rates.append(adaptive.rate)
    assert rates == sorted(rates)  # back up the cubic: to the rate it was throttled at, then above
    assert rates[0] < throttled_at < rates[-1] <= 1000.0


def test_the_rate_stays_within_its_bounds() -> None:
    adaptive, clock = limiter(10.0, min_rate=8.0, max_rate=12.0)
    for _ in range(50):
        send(adaptive, clock, 429)
    assert adaptive.rate == 8.0
    for _ in range(5000):
        send(adaptive, clock, 200)
    assert adaptive.rate == 12.0


def test_a_client_that_sends_little_does_not_grow_a_rate_it_never_tried() -> None:
    adaptive, clock = limiter(10.0)
    for _ in range(1000):
        clock.advance(1.0)  # one a second, where ten are allowed
        assert adaptive.acquire()
        adaptive.on_response(200, [])
    assert adaptive.rate <= 10.0 * 2 ** (1 / SLOW_START)  # one step up before it knew: no more


def test_a_stated_quota_is_paced_evenly_until_its_reset() -> None:
    adaptive, clock = limiter(1000.0)
    assert adaptive.acquire()
    adaptive.on_response(200, {"RateLimit-Policy": '"api";q=100;w=10', "RateLimit": '"api";r=10;t=5'})
    assert adaptive.rate == pytest.approx(2.0)  # 10 left over 5 s
    times = []
    while clock.now() < 120:
        if adaptive.acquire():
            times.append(clock.now())
        clock.advance(0.01)
    # The 10 spaced by 0.5 s from the last grant (at 100 s), the last at the reset; the next after it.
    assert len([t for t in times if t <= 105.0]) == 10
    assert times[9] - times[0] == pytest.approx(4.5, abs=0.02)
    assert times[10] > 105.0


def test_used_up_means_wait_for_the_reset() -> None:
    adaptive, _ = limiter(1000.0)
    assert adaptive.acquire()
    headers = [(b"X-RateLimit-Limit", b"60"), (b"x-ratelimit-remaining", b"0"), (b"x-ratelimit-reset", b"7")]
    adaptive.on_response(200, headers)
    refused = adaptive.acquire()
    assert not refused and refused.retry_after == pytest.approx(7.0)


def test_the_binding_policy_of_several_is_the_slowest() -> None:
    adaptive, _ = limiter(1000.0)
    adaptive.acquire()
    adaptive.on_response(
        200,
        {
            "ratelimit-policy": '"burst";q=10;w=1, "day";q=1000;w=86400',
            "ratelimit": '"burst";r=9;t=1, "day";r=100;t=3600',
        },
    )
    assert adaptive.rate == pytest.approx(1000 / 86400)  # the day's: 100 left in an hour, never above its average


def test_unreadable_values_are_ignored() -> None:
    adaptive, clock = limiter(4.0)
    adaptive.acquire()
    adaptive.on_response(429, {"Retry-After": "soon", "RateLimit": "garbage;;=", "X-RateLimit-Remaining": "-3"})
    assert adaptive.rate == pytest.approx(4.0 * BETA)  # a throttling answer still lowers the rate
    clock.advance(1.0)
    assert adaptive.acquire()


def test_it_is_a_rate_limiter_that_chains() -> None:
    adaptive, clock = limiter(2.0)
    window = permits.FixedWindowLimiter(100, 60.0, clock=clock)
    both = permits.chain(window, adaptive)
    assert both.acquire()
    refused = both.acquire()
    assert not refused and refused.retry_after == pytest.approx(0.5)
    assert window.available_permits() == 99  # the window's grant went back when the pace refused
    clock.advance(0.5)
    assert both.acquire()


# --------------------------------------------------------------------------- simulations

# (server, the limit's rate, when it has converged, when the measure ends: clock seconds)
SIMULATIONS = {
    "token bucket 10/s": (lambda headers: TokenBucketServer(10, 10, headers), 10.0, 300.0, 900.0),
    "token bucket 100/s, bursts of 20": (lambda headers: TokenBucketServer(100, 20, headers), 100.0, 200.0, 500.0),
    "token bucket 2/s, bursts of 5": (lambda headers: TokenBucketServer(2, 5, headers), 2.0, 300.0, 1200.0),
    "fixed window 100 per 10 s": (lambda headers: FixedWindowServer(100, 10.0, headers), 10.0, 300.0, 900.0),
}


@pytest.mark.parametrize("guess", [0.2, 5.0], ids=["guessed a fifth", "guessed five times"])
@pytest.mark.parametrize("server", SIMULATIONS)
def test_a_hidden_limit_is_found(server: str, guess: float) -> None:
    """A wrong first guess converges: at least 95 % of the limit's rate, at most 1 % answered 429."""
    make, rate, converged, end = SIMULATIONS[server]
    clock = permits.ManualClock()
    adaptive = AdaptiveLimiter(rate * guess, clock=clock)
    run = drive(adaptive, clock, make(False), end)
    throughput, throttled = window_stats(run, converged, end)
    assert throughput >= 0.95 * rate, (throughput, rate)
    assert throttled <= 0.01
    assert run.times[-1] - run.times[0] > 0.9 * end  # (the client kept sending)


def test_a_fixed_window_that_changes_is_followed() -> None:
    def change(now: float, server: FixedWindowServer) -> None:
        server.limit = 100 if now < 900 else 40  # per 10 s: 10 a second, then 4

    clock = permits.ManualClock()
    adaptive = AdaptiveLimiter(30.0, clock=clock)
    run = drive(adaptive, clock, FixedWindowServer(100, 10.0), 1800.0, change=change)
    for start, end, rate in [(300, 900, 10.0), (1200, 1800, 4.0)]:
        throughput, throttled = window_stats(run, start, end)
        assert throughput >= 0.95 * rate, (start, throughput)
        assert throttled <= 0.01, (start, throttled)


def test_one_per_key_in_a_partitioned_limiter() -> None:
    clock = permits.ManualClock()
    per_host = permits.PartitionedLimiter(
        lambda host: permits.Partition.custom(host, lambda _: AdaptiveLimiter(4.0, clock=clock)), clock=clock
    )
    assert per_host.acquire("a.test") and per_host.acquire("b.test")  # a pace each
    refused = per_host.acquire("a.test")
    assert not refused and refused.retry_after == pytest.approx(0.25)


def test_a_limit_that_changes_is_followed() -> None:
    def change(now: float, server: TokenBucketServer) -> None:
        server.rate = 10.0 if now < 900 else 20.0 if now < 1800 else 5.0

    clock = permits.ManualClock()
    adaptive = AdaptiveLimiter(5.0, clock=clock)
    run = drive(adaptive, clock, TokenBucketServer(10, 10), 2700.0, change=change)
    for start, end, rate in [(600, 900, 10.0), (1500, 1800, 20.0), (2400, 2700, 5.0)]:
        throughput, throttled = window_stats(run, start, end)
        assert throughput >= 0.95 * rate, (start, throughput)
        assert throttled <= 0.01, (start, throttled)


@pytest.mark.parametrize("guess", [0.2, 5.0], ids=["guessed a fifth", "guessed five times"])
@pytest.mark.parametrize("server", ["token bucket 10/s", "fixed window 100 per 10 s"])
def test_a_stated_limit_is_never_exceeded(server: str, guess: float) -> None:
    """With the RateLimit headers no request is answered 429, from the first response on."""
    make, rate, _, end = SIMULATIONS[server]
    clock = permits.ManualClock()
    adaptive = AdaptiveLimiter(rate * guess, clock=clock)
    run = drive(adaptive, clock, make(True), end)
    assert run.throttled == 0
    throughput, _ = window_stats(run, 60.0, end)
    assert throughput >= 0.85 * rate  # (the headers' whole seconds round the pace down)


@pytest.mark.parametrize(
    "headers",
    [
        {"RateLimit-Policy": '"p";q=0;w=60', "RateLimit": '"p";r=5;t=10'},  # a quota of none
        {"RateLimit": '"p";r=0;t=10'},  # none left
    ],
)
def test_a_quota_of_nothing_waits_for_its_reset(headers: dict[str, str]) -> None:
    adaptive, clock = limiter(100.0)
    assert adaptive.acquire()
    adaptive.on_response(200, headers)
    refused = adaptive.acquire()
    assert not refused and refused.retry_after == pytest.approx(10.0)
    clock.advance(10.0)
    assert adaptive.acquire()


def test_a_reset_beyond_belief_is_cut_to_a_day() -> None:
    adaptive, _ = limiter(100.0)
    assert adaptive.acquire()
    adaptive.on_response(200, {"RateLimit": '"p";r=0;t=99999999999'})
    refused = adaptive.acquire()
    assert not refused and refused.retry_after == pytest.approx(86_400.0)
