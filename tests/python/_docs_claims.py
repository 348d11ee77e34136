"""What the pages claim that can be checked: the checker behind test_docs_claims.py.

- Roadmap phrases ("is coming", "not yet supported", "in a future release", ...): a page says what
  is, so such a phrase is false the day the thing lands, and nothing would tell.
- Performance figures (a time per call in ns or µs, a ratio like ``2.00x`` or ``45x``, a rate per
  second, bytes per key): each must be a figure measured in benchmarks/RESULTS.md, as written there
  or rounded from it (``FIGURE_MATCH`` below says exactly how).
- Names that must exist: the extras of ``permits[xyz]`` (pyproject.toml), the steps of
  ``./scripts/test <step>``, the environment variables ``PERMITS_*`` (read somewhere in the code).

Only prose counts: fenced code blocks are programs, run by test_docs_examples.py, and their numbers
are parameters, not measurements."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "examples" / "README.md", *(ROOT / "docs").rglob("*.md")]
)

#: A phrase that promises what is not there yet. "as soon as" is about time, and "not yet released"
#: (a lease) or "not yet used" (a permit) are states, not plans: neither matches.
ROADMAP = re.compile(
    r"\b(?:is|are) coming\b|\bcoming soon\b|(?<!as )\bsoon\b(?! as)|\bplanned\b|\bupcoming\b|\broadmap\b"
    r"|\bnot (?:yet )?(?:supported|implemented|available) yet\b|\bnot yet (?:supported|implemented|available)\b"
    r"|\b(?:isn't|is not|aren't|are not)\b[^.;:]{0,40}\byet\b"
    r"|\bin a (?:future|later|coming|next) (?:release|version)\b|\bwill be (?:added|supported|implemented)\b"
    r"|\bTODO\b|\bFIXME\b|\bTBD\b",
    re.IGNORECASE,
)

#: A number as pages and RESULTS.md write it: 58, 2.12, 1,270,000 (not the 62 of 2**62, nor a version's parts).
_NUMBER = r"(?<![\w.*^/,])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d,]\d)"
#: One figure or several of one unit: 56-59 (a hyphen or an en dash), 0.75-0.90, 26.6 / 174 / 332.
_FIGURES = rf"{_NUMBER}(?:\s?(?:[-\u2013]|/)\s?{_NUMBER})*"
#: What makes a number a measurement, on a page: its unit right after it. The rates of a table
#: (checks per second in its header) are big numbers with separators on a line whose table is about rates.
TIME = re.compile(rf"{_FIGURES}\s?(?:ns|µs|us)\b")
RATIO = re.compile(rf"{_FIGURES}\s?[x\u00d7](?!\w)")
RATE = re.compile(rf"{_FIGURES}\s?(?:ops|acquires|checks|grants|waiters)(?:/s\b| a second| per second)")
BIG = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?:[-\u2013]\d{1,3}(?:,\d{3})+)?(?![\d,]\d)")
MEMORY = re.compile(rf"{_FIGURES}\s?(?:bytes|B) (?:per|a) (?:live )?key\b")
#: The words that give a line (or its table's header) a unit, on a page or in RESULTS.md.
RATE_WORDS = re.compile(r"per second|a second|/s\b|waiters/s|requests/s|checks/s")
TIME_WORDS = re.compile(r"\bns\b|µs|\bus\b|ns/")
MEMORY_WORDS = re.compile(r"\bbytes\b|\bB\b")
#: A column of ratios in RESULTS.md: "x dict.get", "x floor", "best / bare", "/ bare", "ratio".
RATIO_WORDS = re.compile(r"^\s*(?:x |/ )|\S / \S|\bratio\b", re.IGNORECASE)
FIGURE_KINDS = ("time", "ratio", "rate", "memory")
#: A number of RESULTS.md with its unit written after it.
WITH_UNIT = {
    "time": TIME,
    "ratio": RATIO,
    "rate": re.compile(rf"{_FIGURES}\s?(?:[a-z]+)?/s\b|{_FIGURES} (?:[a-z]+ )?(?:a|per) second\b"),
    "memory": re.compile(rf"{_FIGURES}\s?(?:bytes|B)\b"),
}


def _kinds(title: str) -> list[str]:
    """The units a column title (or a line of them) names."""
    words = {"time": TIME_WORDS, "ratio": RATIO_WORDS, "rate": RATE_WORDS, "memory": MEMORY_WORDS}
    return [kind for kind, pattern in words.items() if pattern.search(title)]


@dataclass(frozen=True)
class Claim:
    page: str
    line: int
    kind: str  # "roadmap", one of FIGURE_KINDS, "extra", "step", "env"
    text: str  # what the page says
    sentence: str  # the line it is on, for the allowlist and the message

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.kind} {self.text!r} in: {self.sentence.strip()}"


def prose(text: str) -> Iterator[tuple[int, str, str]]:
    """The page's lines outside fenced code blocks, numbered from 1, each with its table's header
    row when it is a row of a table (else "")."""
    fence = header = ""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence:
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = ""
            continue
        opening = re.match(r"(`{3,}|~{3,})", stripped)
        if opening:
            fence = opening[1]
            continue
        header = (header or line) if stripped.startswith("|") else ""
        yield number, line, header if header != line else ""


def claims(page: str, text: str) -> Iterator[Claim]:
    for number, line, header in prose(text):

        def claim(kind: str, what: str, line: str = line, number: int = number) -> Claim:
            return Claim(page, number, kind, what, line)

        for found in ROADMAP.finditer(line):
            yield claim("roadmap", found[0])
        for kind, pattern in (("time", TIME), ("ratio", RATIO), ("rate", RATE), ("memory", MEMORY)):
            yield from (claim(kind, found[0]) for found in pattern.finditer(line))
        if (header and RATE_WORDS.search(header)) or (RATE_WORDS.search(line) and not RATE.search(line)):
            yield from (claim("rate", found[0]) for found in BIG.finditer(line) if not _has_unit(line, found.end()))
        for found in re.finditer(r"permits\[([\w,-]+)\]", line):
            yield from (claim("extra", extra) for extra in found[1].split(","))
        for found in re.finditer(r"`(?:\./)?scripts/test ([^`]*)`", line):
            yield from (claim("step", word) for word in found[1].split() if re.fullmatch(r"[a-z]+", word))
        for found in re.finditer(r"\bPERMITS_[A-Z0-9_]+\b", line):
            yield claim("env", found[0])


def _has_unit(line: str, end: int) -> bool:
    """Whether the number ending at ``end`` has a unit of its own (then its own pattern has it)."""
    return bool(re.match(r"\s?(?:ns|µs|us|[x\u00d7]|bytes|B)\b", line[end:]))


# ---- figures --------------------------------------------------------------------------------------


def _value(number: str) -> Decimal:
    return Decimal(number.replace(",", ""))


def _decimals(number: str) -> int:
    return len(number.split(".")[1]) if "." in number else 0


def figure_matches(written: str, measured: str) -> bool:
    """FIGURE_MATCH: a page's number ``written`` stands for RESULTS.md's ``measured`` when they are
    the same number (thousands separators aside), or ``measured`` rounded half up to the decimals
    ``written`` shows (58 for 57.7, 2.1 for 2.12; never 2.12 for 2.1: a page adds no precision), or
    for a number written with separators and trailing zeros, to those zeros (1,270,000 for 1,272,064).
    A time in µs on a page may be a RESULTS.md time in ns (2.6 µs for 2,595 ns): ``measured`` is
    then divided by 1000 first, by the caller."""
    places = _decimals(written)
    if "," in written and not places:  # 1,270,000: to as many significant digits as it shows
        places = -(len(written.replace(",", "")) - len(written.replace(",", "").rstrip("0")))
    if _decimals(measured) < places:
        return False
    step = Decimal(1).scaleb(-places)
    rounded = (_value(measured) / step).quantize(Decimal(1), rounding=ROUND_HALF_UP) * step
    return rounded == _value(written)


@dataclass(frozen=True)
class Measured:
    """The numbers of RESULTS.md by their unit: the unit written right after a number (``58.3 ns``,
    ``2.12x``, ``14,000/s``), else its table column's title (``ns/call``, ``x dict.get``, ``checks/s``)
    or, in printed output, the column titles above it (``best/s   median/s``). Other numbers of the
    prose (dates, counts, commits) have no unit and stand for nothing."""

    numbers: dict[str, set[str]]

    @classmethod
    def read(cls, text: str) -> Measured:
        numbers: dict[str, set[str]] = {kind: set() for kind in FIGURE_KINDS}
        fenced = False
        titles: list[str] = []  # the kinds of the printed output's column titles, until a blank line
        header: list[str] = []  # the cells of the table's header row
        for line in text.splitlines():
            for kind, pattern in WITH_UNIT.items():
                for found in pattern.finditer(line):
                    numbers[kind].update(re.findall(_NUMBER, found[0]))
            if line.startswith("```"):
                fenced, titles = not fenced, []
            elif fenced:
                if not line.strip():
                    titles = []
                elif kinds := _kinds(line):
                    titles = kinds
                else:
                    for kind in titles:
                        numbers[kind].update(re.findall(_NUMBER, line))
            elif line.startswith("|"):
                cells = line.strip().strip("|").split("|")
                if not header:
                    header = cells
                for title, cell in zip(header, cells, strict=False):
                    for kind in _kinds(title):
                        numbers[kind].update(re.findall(_NUMBER, cell))
            else:
                header = []
        return cls(numbers)

    def holds(self, claim: Claim) -> bool:
        """Whether every number of the claim is one of RESULTS.md's of its kind (FIGURE_MATCH)."""
        written = re.findall(_NUMBER, claim.text)
        candidates = self.numbers[claim.kind]
        if claim.kind == "time" and re.search(r"µs|us\b", claim.text):  # RESULTS.md's ns, in µs
            candidates = candidates | {f"{_value(n) / 1000}" for n in candidates if "." not in n}
        return all(any(figure_matches(number, measured) for measured in candidates) for number in written)


# ---- what the project has -------------------------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    """What a page's names and figures are checked against."""

    measured: Measured
    extras: frozenset[str]
    steps: frozenset[str]
    #: The text of the files that read environment variables (source, build files, scripts).
    sources: str
    #: Roadmap phrases still true: the phrase, and why (the test checks the why where it can).
    still_true: dict[str, str]

    @classmethod
    def of(cls, root: Path, still_true: dict[str, str]) -> Facts:
        pyproject = tomllib.loads((root / "pyproject.toml").read_text())
        steps = re.search(r"^ALL_STEPS=\(([^)]*)\)", (root / "scripts" / "test").read_text(), re.M)
        assert steps, "scripts/test names its steps in ALL_STEPS=(...)"
        files = [root / "CMakeLists.txt", *(root / "scripts").iterdir(), *(root / "cmake").rglob("*")]
        files += [*(root / "cpp").rglob("*"), *(root / "python").rglob("*.py")]
        return cls(
            measured=Measured.read((root / "benchmarks" / "RESULTS.md").read_text()),
            extras=frozenset(pyproject["project"]["optional-dependencies"]),
            steps=frozenset(steps[1].split()),
            sources="\n".join(path.read_text(errors="replace") for path in files if path.is_file()),
            still_true=still_true,
        )


def problems(claims_found: Iterator[Claim] | list[Claim], facts: Facts) -> list[str]:
    """What is wrong with the claims, one line each (empty: the page holds)."""
    wrong = []
    for claim in claims_found:
        if claim.kind == "roadmap":
            if not any(phrase in claim.sentence for phrase in facts.still_true):
                wrong.append(f"{claim}: say what is, or allowlist the phrase with why it is still true")
        elif claim.kind in FIGURE_KINDS:
            if not facts.measured.holds(claim):
                wrong.append(f"{claim}: not a figure of benchmarks/RESULTS.md (nor one rounded from it)")
        elif claim.kind == "extra" and claim.text not in facts.extras:
            wrong.append(f"{claim}: no such extra in pyproject.toml ({', '.join(sorted(facts.extras))})")
        elif claim.kind == "step" and claim.text not in facts.steps:
            wrong.append(f"{claim}: no such step of scripts/test ({' '.join(sorted(facts.steps))})")
        elif claim.kind == "env" and not re.search(rf"\b{claim.text}\b", facts.sources):
            wrong.append(f"{claim}: nothing in cpp/, python/, cmake/, scripts/ or CMakeLists.txt reads it")
    return wrong
