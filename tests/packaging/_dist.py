"""Helpers for the packaging checks (./scripts/test package): the repository's paths, its metadata,
subprocesses whose failure fails the test with their output, and the tools the checks need."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
NAME: str = PYPROJECT["project"]["name"]
VERSION: str = PYPROJECT["project"]["version"]
WORKFLOW = ROOT / ".github" / "workflows" / "wheels.yml"


def need(module: str) -> ModuleType:
    """Imports a tool the packaging step installs: in CI (CI=true) a missing one fails, elsewhere the
    test skips, saying how to install it."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed: ./scripts/test package installs it")


def run(
    args: list[str | Path], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Runs a command that must succeed; a failure or a hang fails the test with what it printed."""
    try:
        done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{args} hung (killed after {timeout} s)\n{exc.stdout!s}\n{exc.stderr!s}") from None
    assert done.returncode == 0, f"{args} exited with {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done


def tracked(*dirs: str) -> set[str]:
    """The files git tracks under the given directories (paths relative to the repository)."""
    out = run(["git", "ls-files", "-z", "--", *dirs], cwd=ROOT).stdout
    return {path for path in out.split("\0") if path}


def python_in(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
