"""The pages say only what holds (README.md, CONTRIBUTING.md, examples/README.md, docs/): no promise of
what is "coming", no performance figure that benchmarks/RESULTS.md does not hold, no extra, test step
or environment variable that does not exist (_docs_claims.py says what is checked and how).

A figure is checked against every run RESULTS.md records: this catches a figure no run produced and a
page left behind when its entry is rewritten, not which run a figure came from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from _docs_claims import PAGES, ROOT, Claim, Facts, Measured, claims, figure_matches, problems

CHANGELOG = ROOT / "CHANGELOG.md"


def _nothing_released() -> bool:
    versions = re.findall(r"^## \[(\d[^\]]*)\] - (.*)$", CHANGELOG.read_text(), re.M)
    return bool(versions) and all(when.strip() == "not released" for _, when in versions)


#: Roadmap phrases that are still true: each with why, and the check that it still is.
STILL_TRUE = {
    "is not on PyPI yet": (
        "no version is released: every version of CHANGELOG.md says 'not released'",
        _nothing_released,
    ),
}
FACTS = Facts.of(ROOT, {phrase: why for phrase, (why, _) in STILL_TRUE.items()})


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_the_page_claims_only_what_holds(page: Path) -> None:
    found = problems(list(claims(str(page.relative_to(ROOT)), page.read_text())), FACTS)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("phrase", STILL_TRUE)
def test_an_allowed_roadmap_phrase_is_still_true_and_still_used(phrase: str) -> None:
    why, holds = STILL_TRUE[phrase]
    assert holds(), f"{phrase!r} no longer holds ({why}): update the pages that say it"
    used = [c for page in PAGES for c in claims(page.name, page.read_text()) if c.kind == "roadmap"]
    assert any(phrase in claim.sentence for claim in used), f"no page says {phrase!r}: drop it from STILL_TRUE"


# ---- the checker itself, on pages written for it ---------------------------------------------------

RESULTS = """\
# Results

| case | ns/call (best) | x dict.get |
|---|---:|---:|
| dict.get | 27.5 | 1.0 |
| token bucket acquire() | 57.7 | 2.1 |
| limits hit() | 2,605 | 94.7 |

| goal | measured |
|---|---:|
| peer / permits | 44.67x |

```
case                         best/s   median/s
waiters released          1,272,064  1,218,626
```
"""
SYNTHETIC = Facts(
    measured=Measured.read(RESULTS),
    extras=frozenset({"redis", "postgres"}),
    steps=frozenset({"lint", "py", "docs"}),
    sources="os.environ.get('PERMITS_CLOCK')",
    still_true={},
)


def check(page: str) -> list[str]:
    return problems(list(claims("page.md", page)), SYNTHETIC)


def test_a_true_page_passes() -> None:
    page = (
        "An `acquire()` takes 58 ns (57.7 ns), 2.1x a `dict.get`; limits' `hit()` 2.6 µs, 45x slower.\n"
        "Waiters released: 1,270,000 waiters/s. A lease granted but not yet released, released as soon as\n"
        'it ends. `pip install "permits[redis]"`; `./scripts/test lint py`; `PERMITS_CLOCK=monotonic`.\n'
        "```python\nlimiter = TokenBucketLimiter(10, 1, 0.000_1)  # 1 token per 100 µs, 7x nothing\n```\n"
        "| what | checks per second |\n|---|---:|\n| waiters | 1,218,626 |\n"
    )
    assert check(page) == []


@pytest.mark.parametrize(
    ("planted", "kind"),
    [
        ("A store shared across hosts is coming.", "roadmap"),
        ("Sentinel support is planned.", "roadmap"),
        ("Cluster is not supported yet.", "roadmap"),
        ("Sharding will be added.", "roadmap"),
        ("Sharding comes in a future release.", "roadmap"),
        ("An `acquire()` takes 40 ns.", "time"),
        ("An `acquire()` takes 57.74 ns.", "time"),  # more precise than any run
        ("limits' `hit()` takes 3.1 µs.", "time"),
        ("It is 3.5x a `dict.get`.", "ratio"),
        ("It is 2.0\u20132.9\u00d7 a `dict.get`.", "ratio"),  # one end of a range (en dash, times sign)
        ("It is 50\u00d7 faster than limits.", "ratio"),
        ("1,500,000 waiters/s.", "rate"),
        ("| what | checks per second |\n|---|---:|\n| waiters | 2,000,000 |", "rate"),
        ('`pip install "permits[mongo]"`', "extra"),
        ("`./scripts/test lint typecheck`", "step"),
        ("`PERMITS_NO_SUCH_SETTING=1`", "env"),
    ],
)
def test_a_planted_false_claim_fails(planted: str, kind: str) -> None:
    found = check(f"# A page\n\nSome true text.\n\n{planted}\n")
    assert len(found) == 1 and f": {kind} " in found[0], found
    assert found[0].startswith("page.md:5: ") or kind == "rate", found


def test_the_allowlist_lets_a_true_roadmap_phrase_through() -> None:
    page = "permits is not on PyPI yet.\nIt is coming.\n"
    facts = Facts(SYNTHETIC.measured, SYNTHETIC.extras, SYNTHETIC.steps, "", {"is not on PyPI yet": "why"})
    assert [p.split(":")[1] for p in problems(list(claims("page.md", page)), facts)] == ["2"]


def test_roadmap_phrases_and_states_are_told_apart() -> None:
    states = (
        "a permit granted to one of them but not yet handed over; granted leases not yet released; permits"
        " not yet used; it leaves as soon as the client goes; .NET completes it as soon as the queue empties."
    )
    assert [c for c in claims("page.md", states) if c.kind == "roadmap"] == []


@pytest.mark.parametrize(
    ("written", "measured", "matches"),
    [
        ("58", "57.7", True),
        ("58", "57.5", True),  # half up
        ("58", "58.49", True),
        ("58", "58.5", False),
        ("2.1", "2.12", True),
        ("2.12", "2.1", False),  # a page adds no precision
        ("2,605", "2605", True),
        ("1,270,000", "1,272,064", True),
        ("1,270,000", "1,276,000", False),
        ("2.6", "2.605", True),
    ],
)
def test_figure_match(written: str, measured: str, matches: bool) -> None:
    assert figure_matches(written, measured) is matches


def test_a_claim_names_its_page_and_line() -> None:
    (claim,) = [c for c in claims("docs/web.md", "one\n\nsoon, a store\n") if c.kind == "roadmap"]
    assert claim == Claim("docs/web.md", 3, "roadmap", "soon", "soon, a store")
