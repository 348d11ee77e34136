"""The scripts' exact integers (redis_wide.py) at the edges of their forms, against Python's ints:
plain numbers below P = 9 * 10**15, pairs (hi * 10**9 + lo) below 10**24, limbs beyond; sums,
differences, products and quotients that just cross those edges or 2**53; operands in every form
(a small limb table too, as the script bodies pass ``{1}``). A result below P must be a plain
number and one at or past it must not be (a double there would not be exact)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from permits._stores import redis_scripts

P = 9 * 10**15
G = 10**9

# Each operand as "<form><decimal>": w = as wstr reads it (number, pair or limbs), l = as limbs.
HARNESS = (
    redis_scripts._WIDE
    + r"""
local function operand(arg)
  local v = wstr(string.sub(arg, 2))
  if string.sub(arg, 1, 1) == 'l' then v = limbs().of(v) end
  return v
end
local function shown(v) return wfmt(v) .. '/' .. type(v) end
local out = {}
for i = 1, #ARGV, 2 do
  local a, b = operand(ARGV[i]), operand(ARGV[i + 1])
  local c = wcmp(a, b)
  local big, small = a, b
  if c < 0 then big, small = b, a end
  local q, r = wdivmod(a, b)
  out[#out + 1] = table.concat({shown(a), c, shown(wmax(a, b)), shown(wadd(a, b)), shown(wsub(big, small)),
    shown(wmul(a, b)), shown(q), shown(r)}, ' ')
end
return out
"""
)

EDGES = [
    0,
    1,
    2,
    7,
    G - 1,
    G,
    G + 1,
    10**14 - 1,
    10**14,
    10**15,
    P // 2,
    P - G,
    P - 1,
    P,
    P + 1,
    P + G - 1,
    2**52,
    2**53 - 1,
    2**53,
    2**53 + 1,
    2**53 + 2,
    94906265,  # its square is between P and 2**53
    94906266,  # its square just passes 2**53
    3 * 10**15,
    1_700_000_000_123_456_789,  # a time in ns
    1_700_000_000_000_000_000,
    1_700_000_000_999_999_999,
    10**24 - 1,
    10**24,
    10**24 + 1,
    2**61,
    2**93,
]


def check(client: Any, pairs: list[tuple[str, int, str, int]]) -> None:
    flat: list[str] = []
    for fa, a, fb, b in pairs:
        flat += [f"{fa}{a}", f"{fb}{b}"]
    answers = client.eval(HARNESS, 0, *flat)
    for (fa, a, fb, b), answer in zip(pairs, answers, strict=True):
        big, small = max(a, b), min(a, b)
        expected = [a, (a > b) - (a < b), big, a + b, big - small, a * b, a // b, a % b]
        got = answer.decode().split()
        context = f"{fa}{a} {fb}{b}: {got}"
        assert int(got[1]) == expected[1], context
        for i in (0, 2, 3, 4, 5, 6, 7):
            text, form = got[i].split("/")
            assert int(text) == expected[i], f"field {i}: {context}"
            assert text == str(expected[i]), f"field {i} not canonical: {context}"
            if i >= 3:  # a result made (a and wmax's answer are operands as given)
                assert (form == "number") == (expected[i] < P), f"field {i} in the wrong form: {context}"


def test_edges_in_every_form(redis_server: Any) -> None:
    with redis_server.client() as client:
        pairs = [(fa, a, fb, b) for a in EDGES for b in EDGES if b > 0 for fa in "wl" for fb in "wl"]
        for start in range(0, len(pairs), 500):
            check(client, pairs[start : start + 500])


def near(rng: random.Random) -> int:
    """A value near an edge: P, 2**53, 10**24, a ns time, a product's factors near sqrt(P), or
    whole seconds (a multiple of 10**9, which a pair divides and multiplies in doubles)."""
    pick = rng.randrange(7)
    if pick == 0:
        return max(0, P + rng.randint(-(10**10), 10**10))
    if pick == 1:
        return 2**53 + rng.randint(-(10**6), 10**6)
    if pick == 2:
        return 10**24 + rng.randint(-(10**12), 10**12)
    if pick == 3:
        return 1_700_000_000 * G + rng.randrange(10**15)
    if pick == 4:
        return 94_868_329 + rng.randint(-(10**5), 10**5)  # sqrt(P) ~ 94868329.8
    if pick == 5:
        return G * rng.randrange(1, 10 ** rng.randint(1, 7))  # whole seconds: the pairs' own paths
    return rng.randrange(1, 10 ** rng.randint(1, 30))


@pytest.mark.parametrize("seed", range(3))
def test_random_values_near_the_edges(redis_server: Any, seed: int) -> None:
    rng = random.Random(seed)
    pairs = [(rng.choice("wl"), near(rng), rng.choice("wl"), max(1, near(rng))) for _ in range(1000)]
    with redis_server.client() as client:
        for start in range(0, len(pairs), 500):
            check(client, pairs[start : start + 500])


def test_plain_helpers_up_to_2_53(redis_server: Any) -> None:
    """idiv (the plain floor division every path relies on) and iceil, for operands up to 2**53,
    where the double quotient may be one off; wnum and wval from and to plain numbers."""
    harness = (
        redis_scripts._WIDE
        + r"""
local out = {}
for i = 1, #ARGV, 2 do
  local a, b = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  out[#out + 1] = string.format('%d %d %s %d', idiv(a, b), iceil(a, b), wfmt(wnum(a)), wval(wstr(ARGV[i])))
end
return out
"""
    )
    rng = random.Random(11)
    cases = [(2**53 - 1, 3), (2**53 - 1, 2**53 - 1), (2**53 - 2, 2**52), (P - 1, 7), (P - 1, P - 2)]
    for _ in range(400):
        b = rng.choice([1, 3, 10**9 + 7, rng.randrange(1, 2**26), rng.randrange(1, 2**52)])
        q = rng.randrange(0, (2**53 - b) // b + 1)
        a = min(2**53 - b, q * b + rng.choice([0, 1, b - 1, rng.randrange(b)]))
        cases.append((a, b))
    with redis_server.client() as client:
        answers = client.eval(harness, 0, *[str(x) for case in cases for x in case])
    for (a, b), answer in zip(cases, answers, strict=True):
        assert [int(x) for x in answer.split()] == [a // b, -(-a // b), a, a], (a, b, answer)
