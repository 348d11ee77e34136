"""The Python examples in the README and docs run as written, and clean up after themselves: each
runs in a child interpreter in development mode (``-X dev``) where a ResourceWarning is an error,
and what it prints must show no unreleased lease, no task destroyed while pending, no coroutine
never awaited. The files the docs name exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [
    pytest.param(code, id=f"{page.name}:{i}")
    for page in PAGES
    for i, code in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S))
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


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_the_files_a_page_names_exist(page: Path) -> None:
    text = page.read_text()
    missing = sorted(path for path in named_paths(text) if not (ROOT / path).exists())
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    missing += sorted(link for link in links if "://" not in link and not (page.parent / link).exists())
    assert not missing, f"{page.name} names files that do not exist: {missing}"
