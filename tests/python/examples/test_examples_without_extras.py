"""An example whose optional extra is not installed still prints its ``--help``, and a run says which
extra to install, in one line, instead of a traceback. The child interpreter finds the module
missing as it would be: ``sys.modules[name] = None`` makes every import of it raise
ModuleNotFoundError (the example's own and permits' integration modules' alike)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from _programs import EXAMPLES, LIMIT

#: Runs argv[2:] as the program, with the modules named in argv[1] (comma-separated) unimportable.
WITHOUT = (
    "import runpy, sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    sys.modules[name] = None\n"
    "sys.argv = sys.argv[2:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)
FASTAPI = '"permits[fastapi]" uvicorn'
CASES = [
    ("redis_across_processes.py", "redis", '"permits[redis]"'),
    ("fastapi_service.py", "fastapi", FASTAPI),
    ("fastapi_service.py", "uvicorn", FASTAPI),
    ("multiworker_shm.py", "fastapi", FASTAPI),
    ("multiworker_shm.py", "uvicorn", FASTAPI),
    ("aiohttp_service.py", "aiohttp", '"permits[aiohttp]"'),
    ("sample_site.py", "aiohttp", '"permits[aiohttp]"'),
    ("async_scraper.py", "httpx", '"permits[httpx]"'),
]
IDS = [f"{example}-without-{module}" for example, module, _ in CASES]


def without(module: str, example: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, module, str(EXAMPLES / example), *args],
        capture_output=True,
        text=True,
        timeout=LIMIT,
    )


@pytest.mark.parametrize(("example", "module", "install"), CASES, ids=IDS)
def test_help_needs_no_extra(example: str, module: str, install: str) -> None:
    done = without(module, example, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {example}"), done.stdout
    assert "pip install" in done.stdout  # the docstring, which says how to run it


@pytest.mark.parametrize(("example", "module", "install"), CASES, ids=IDS)
def test_a_run_without_the_extra_names_it(example: str, module: str, install: str) -> None:
    done = without(module, example)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"{example}: {module} is not installed: pip install {install}\n"


def test_the_extras_named_exist() -> None:
    pyproject = tomllib.loads((Path(EXAMPLES).parent / "pyproject.toml").read_text())
    extras = set(pyproject["project"]["optional-dependencies"])
    named = {install.split('"')[1].removeprefix("permits[").removesuffix("]") for _, _, install in CASES}
    assert named <= extras, named - extras


def test_the_cases_cover_every_example_with_an_extra() -> None:
    # Each example that imports a module of an extra at its top is among the cases.
    with_extras = {
        path.name
        for path in EXAMPLES.glob("*.py")
        if re.search(r"^\s*(?:import|from) (?:redis|fastapi|aiohttp|httpx|uvicorn)\b", path.read_text(), re.M)
    }
    assert with_extras == {example for example, _, _ in CASES}
