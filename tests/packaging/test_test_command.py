"""The test command asks before it installs much: ./scripts/test runs the portability step (cross
compilers, qemu and wine from the OS packages) and the versions step (the core suite on CPython 3.12 and
3.13, the extension built for each) and the ft step (the suite on a free-threaded CPython built from
source) only when CI=true or when that step is named, and CI's entry point (.ci/run) runs every step.
Checked with `--plan`, which prints the steps and stops before installing or building anything."""

from __future__ import annotations

import os

import pytest

from _dist import ROOT, run

EVERY_STEP = "cpp sanitize fuzz lint py versions ft docs package portability"
LOCAL_STEPS = "cpp sanitize fuzz lint py docs package"


def plan(command: str, *args: str, ci: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    out = run(["bash", ROOT / command, "--plan", *args], cwd=ROOT, env=env).stdout
    lines = [line for line in out.splitlines() if line.startswith("steps: ")]
    assert len(lines) == 1, out
    return lines[0].removeprefix("steps: ")


@pytest.mark.parametrize("ci", [None, "", "false", "1"])
def test_a_contributors_run_leaves_out_portability_and_versions(ci: str | None) -> None:
    assert plan("scripts/test", ci=ci) == LOCAL_STEPS


def test_ci_true_runs_every_step() -> None:
    assert plan("scripts/test", ci="true") == EVERY_STEP


@pytest.mark.parametrize("ci", [None, "true"])
def test_ci_entry_point_runs_every_step(ci: str | None) -> None:
    assert plan(".ci/run", ci=ci) == EVERY_STEP


def test_portability_and_versions_run_when_named() -> None:
    assert plan("scripts/test", "portability", ci=None) == "portability"
    assert plan("scripts/test", "versions", ci=None) == "versions"
    assert plan("scripts/test", "lint", "py", ci="true") == "lint py"


def test_the_free_threaded_run_is_one_named_step() -> None:
    # The whole suite on a free-threaded CPython: one step a contributor can run alone.
    assert plan("scripts/test", "ft", ci=None) == "ft"
    assert plan("scripts/test", "ft", ci="true") == "ft"
