"""permits._server_signals.read: what a response says of a server's limit, in each form servers
send it (the IETF fields, X-RateLimit-* with a delta or an epoch reset, Retry-After as seconds or
a date), from every shape of headers (a dict, a multi-valued mapping, pairs of text or bytes)."""

from __future__ import annotations

import email.utils

import httpx
import pytest

from permits._server_signals import Signals, read


def test_nothing_said_is_nothing_known() -> None:
    assert read(200, {}) == Signals(False)
    assert read(503, None) == Signals(True)


def test_the_ietf_fields_name_their_policy() -> None:
    got = read(200, {"RateLimit-Policy": '"a,b";q=100;w=60', "RateLimit": '"a,b";r=42;t=17'})
    assert got == Signals(False, None, 42, 17.0, 100, 60.0)


def test_a_multi_valued_mapping_and_byte_pairs_are_read_alike() -> None:
    headers = httpx.Headers([("ratelimit", '"hour";r=50;t=1800'), ("RateLimit", '"minute";r=1;t=60')])
    headers["ratelimit-policy"] = '"hour";q=100;w=3600, "minute";q=10;w=60'
    got = read(200, headers)
    assert (got.remaining, got.reset, got.quota, got.window) == (1, 60.0, 10, 60.0)  # the slower pace binds
    pairs = [(b"RATELIMIT", b'"minute";r=1;t=60'), (b"ratelimit-policy", b'"minute";q=10;w=60')]
    assert read(200, pairs) == got


@pytest.mark.parametrize(("reset", "seconds"), [("30", 30.0), ("1700000030", 30.0)], ids=["delta", "epoch"])
def test_x_ratelimit_reset_is_a_delta_or_an_epoch_time(reset: str, seconds: float) -> None:
    got = read(
        200,
        {"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "5", "X-RateLimit-Reset": reset},
        wall_now=1_700_000_000.0,
    )
    assert got == Signals(False, None, 5, seconds, 60, None)


def test_retry_after_as_a_date_counts_from_the_response_s_own_date() -> None:
    headers = {
        "Date": email.utils.formatdate(2_000_000_000, usegmt=True),
        "Retry-After": email.utils.formatdate(2_000_000_090, usegmt=True),
    }
    assert read(429, headers).retry_after == 90.0
    assert read(429, {"Retry-After": "12"}).retry_after == 12.0


@pytest.mark.parametrize(
    "headers",
    [{"Retry-After": "later"}, {"RateLimit": '"a";r=x;t=1'}, {"RateLimit": "r=1"}, {"X-RateLimit-Remaining": "nan"}],
)
def test_values_that_cannot_be_read_are_left_out(headers: dict[str, str]) -> None:
    assert read(429, headers) == Signals(True)
