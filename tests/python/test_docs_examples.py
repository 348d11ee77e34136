"""The Python examples in the README and docs run as written, and clean up after themselves: each
runs in a child interpreter in development mode (``-X dev``) where a ResourceWarning is an error,
and what it prints must show no unreleased lease, no task destroyed while pending, no coroutine
never awaited. The files the docs name exist, and every page of docs/ is in the site's nav.

Every Python block is fenced ```` ```python ````, and is run unless the line before its fence is the
marker ``<!-- not run: why -->`` (a server to start, a fragment of a larger program): a marked block
must still compile. A block fenced ```` ```py ```` (or another Python name) fails, so none escapes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: The line that marks the next ```python block as not run.
NOT_RUN = re.compile(r"^<!-- not run: .+ -->$")
#: Fence languages that are Python under another name: a block so fenced would be neither run nor marked.
OTHER_PYTHON_NAMES = {"py", "py3", "python3", "pycon", "pyi", "ipython", "ipython3"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    code: str
    run: bool


def python_blocks(text: str) -> tuple[list[Block], list[str]]:
    """The page's Python blocks, and what is wrong with its fences (other names for Python, a marker
    on something else than a Python block)."""
    blocks: list[Block] = []
    problems: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            if NOT_RUN.match(lines[i].strip()) and not (
                i + 1 < len(lines) and (m := FENCE.match(lines[i + 1])) and m["info"].split()[:1] == ["python"]
            ):
                problems.append(f"line {i + 1}: the not-run marker must come right before a ```python fence")
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        language = (opening["info"].split() or [""])[0].lstrip("{.").rstrip("}").lower()
        end = i + 1
        while end < len(lines) and not re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[end]):
            end += 1
        body = [line[len(indent) :] if line.startswith(indent) else line.lstrip() for line in lines[i + 1 : end]]
        code = "\n".join(body) + "\n"
        if language == "python":
            marked = i > 0 and bool(NOT_RUN.match(lines[i - 1].strip()))
            blocks.append(Block(i + 1, code, run=not marked))
        elif language in OTHER_PYTHON_NAMES:
            problems.append(f"line {i + 1}: fence Python as ```python (run, or marked not run), not ```{language}")
        i = end + 1
    return blocks, problems


def _blocks_of(page: Path) -> list[tuple[Path, Block]]:
    return [(page, block) for block in python_blocks(page.read_text())[0]]


ALL_BLOCKS = [found for page in PAGES for found in _blocks_of(page)]
BLOCKS = [
    pytest.param(block.code, id=f"{page.relative_to(ROOT)}:{block.line}") for page, block in ALL_BLOCKS if block.run
]
MARKED = [
    pytest.param(block.code, id=f"{page.relative_to(ROOT)}:{block.line}") for page, block in ALL_BLOCKS if not block.run
]
#: What the interpreter prints for a leak that is not an exception: a lease or a socket collected
#: unreleased (ResourceWarning, reported as "Exception ignored" from a finaliser), a task
#: destroyed while pending, a coroutine never awaited.
LEAKS = ("ResourceWarning", "Task was destroyed", "was never awaited", "Exception ignored")
#: The child runs the example as a module that is not __main__ (a "serve it" block stays out).
CHILD = "import sys; exec(compile(sys.stdin.read(), '<docs>', 'exec'), {'__name__': '__docs__'})"


def run_example(code: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", CHILD],
        input=code,
        capture_output=True,
        text=True,
        timeout=110,
        cwd=cwd,
        env=None if env is None else {**os.environ, **env},
    )


def check(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr
    leaks = [line for line in done.stderr.splitlines() if any(marker in line for marker in LEAKS)]
    assert not leaks, done.stderr


@pytest.mark.parametrize("code", BLOCKS)
def test_example_runs(code: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # The stores' examples find their servers as a deployment would, in the environment: the
    # test's own servers (REDIS_URL, DATABASE_URL).
    env = {}
    if "REDIS_URL" in code:
        env["REDIS_URL"] = request.getfixturevalue("redis_server").url
    if "DATABASE_URL" in code:
        env["DATABASE_URL"] = request.getfixturevalue("postgres_server").conninfo
    check(run_example(code, tmp_path, env))


@pytest.mark.parametrize(
    "code",
    [
        "import permits\nlease = permits.ConcurrencyLimiter(1).acquire()\ndel lease\n",
        "import asyncio\n\nasync def main():\n    asyncio.get_running_loop().create_task(asyncio.sleep(10))\n\n"
        "loop = asyncio.new_event_loop()\nloop.run_until_complete(main())\nloop.close()\ndel loop\n"
        "import gc; gc.collect()\n",
        "import asyncio\n\nasync def f():\n    pass\n\nf()\n",
        "raise SystemExit('an example that fails')\n",
    ],
    ids=["unreleased lease", "task destroyed", "never awaited", "failure"],
)
def test_the_run_catches_what_an_example_leaves_behind(code: str, tmp_path: Path) -> None:
    with pytest.raises(AssertionError):
        check(run_example(code, tmp_path))


def named_paths(text: str) -> set[str]:
    """The repository paths a page names in code spans (``cpp/src/limiter.cpp``, ``scripts/test``)."""
    found = set()
    for span in re.findall(r"`([^`\s]+)`", text):
        path = span.split("#")[0].rstrip(",.:;")
        if "*" in path or "<" in path or "://" in path:
            continue
        top = path.split("/")[0]
        if "/" in path and top in {"cpp", "python", "tests", "scripts", "benchmarks", "docs", "cmake", ".github"}:
            found.add(path)
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_the_files_a_page_names_exist(page: Path) -> None:
    text = page.read_text()
    missing = sorted(path for path in named_paths(text) if not (ROOT / path).exists())
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    missing += sorted(link for link in links if "://" not in link and not (page.parent / link).exists())
    assert not missing, f"{page.name} names files that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_every_python_block_is_run_or_marked(page: Path) -> None:
    _, problems = python_blocks(page.read_text())
    assert not problems, f"{page.name}: {problems}"


@pytest.mark.parametrize("code", MARKED)
def test_a_block_marked_not_run_still_compiles(code: str) -> None:
    compile(code, "<docs>", "exec")


def test_the_fence_rules_catch_what_would_escape() -> None:
    page = (
        "```python\nrun = 1\n```\n\n"
        "<!-- not run: starts a server -->\n```python\nserve()\n```\n\n"
        "```py\nescaped = 1\n```\n\n"
        "<!-- not run: nothing follows -->\ntext\n\n"
        "```bash\necho fine\n```\n"
        "- a list item:\n\n    ```python\n    indented = 1\n    ```\n"
    )
    blocks, problems = python_blocks(page)
    assert [(b.line, b.code, b.run) for b in blocks] == [
        (1, "run = 1\n", True),
        (6, "serve()\n", False),
        (22, "indented = 1\n", True),
    ]
    assert len(problems) == 2 and "```py" in problems[0] and "marker" in problems[1]


def test_every_docs_page_is_in_the_site_nav() -> None:
    # mkdocs.yml's nav names each page by its path under docs/ (mkdocs build --strict fails on an
    # omitted one too; this says which, without mkdocs installed).
    nav = (ROOT / "mkdocs.yml").read_text()
    named = set(re.findall(r"^\s*-\s*(?:[^:\n]+:\s*)?([\w./-]+\.md)\s*$", nav, re.M))
    pages = {str(page.relative_to(ROOT / "docs")) for page in (ROOT / "docs").rglob("*.md")}
    assert not pages - named, f"pages missing from mkdocs.yml's nav: {sorted(pages - named)}"
    assert not named - pages, f"mkdocs.yml's nav names pages that do not exist: {sorted(named - pages)}"
