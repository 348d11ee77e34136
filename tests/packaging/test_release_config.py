"""The release configuration, checked without building anything: [tool.cibuildwheel] selects CPython
3.11 to 3.15 and the free-threaded 3.14t and 3.15t on every platform and architecture the project ships
wheels for, each wheel's test environment has what the suite needs that has a build for its CPython (and
tests/python/_support.py's NO_BUILD names the rest), and .github/workflows/wheels.yml builds exactly
those wheels (cibuildwheel itself prints what each of the workflow's runners would build) and publishes
them on a tag."""

from __future__ import annotations

import ast
import fnmatch
import importlib.metadata
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from _dist import PYPROJECT, ROOT, WORKFLOW, need, run

PYTHONS = ["cp311", "cp312", "cp313", "cp314", "cp315", "cp314t", "cp315t"]
#: The platform tags of the wheels, by cibuildwheel platform and architecture.
PLATFORMS = {
    "linux": {
        "x86_64": ["manylinux_x86_64", "musllinux_x86_64"],
        "aarch64": ["manylinux_aarch64", "musllinux_aarch64"],
    },
    "macos": {"x86_64": ["macosx_x86_64"], "arm64": ["macosx_arm64"]},
    "windows": {"AMD64": ["win_amd64"]},
}
EXPECTED = {f"{py}-{tag}" for py in PYTHONS for archs in PLATFORMS.values() for tags in archs.values() for tag in tags}

#: Identifiers of other Pythons: older and newer CPythons, the free-threaded 3.13t (which cibuildwheel 4.x
#: does not build), PyPy. (Other architectures are left out by `archs`, not by the build selectors.)
OTHERS = [
    f"{py}-{tag}"
    for py in ["cp38", "cp39", "cp310", "cp313t", "cp316", "cp316t", "pp311"]
    for tag in ["manylinux_x86_64", "musllinux_aarch64", "macosx_arm64", "win_amd64"]
]

CIBW: dict[str, Any] = PYPROJECT["tool"]["cibuildwheel"]


def as_list(value: str | list[str]) -> list[str]:
    return value.split() if isinstance(value, str) else value


def selected(identifier: str) -> bool:
    """cibuildwheel's build/skip rule: selected by a `build` pattern and by no `skip` pattern."""
    return any(fnmatch.fnmatch(identifier, p) for p in as_list(CIBW["build"])) and not any(
        fnmatch.fnmatch(identifier, p) for p in as_list(CIBW.get("skip", []))
    )


def requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_build_selectors_take_cpython_311_to_315_and_the_free_threaded_314t_and_315t_only() -> None:
    assert {i for i in EXPECTED if selected(i)} == EXPECTED
    assert not [i for i in OTHERS if selected(i)]


def test_every_platform_names_the_architectures_shipped() -> None:
    for name, archs in PLATFORMS.items():
        assert sorted(as_list(CIBW[name]["archs"])) == sorted(archs), name


def test_macos_targets_a_release_with_cpp20s_library() -> None:
    target = CIBW["macos"]["environment"]["MACOSX_DEPLOYMENT_TARGET"]
    assert tuple(int(p) for p in target.split(".")) >= (10, 15)


def wheel_test_requirements(identifier: str, *, names: bool = True) -> set[str]:
    """What cibuildwheel installs to test that wheel (the requirements' names, else as written):
    test-requires and the test-extras, then each override selecting it, appended to them (inherit) or
    in their place."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    requirements = list(as_list(CIBW.get("test-requires", [])))
    requirements += [r for extra in CIBW.get("test-extras", []) for r in extras[extra]]
    for override in CIBW.get("overrides", []):
        if "test-requires" in override and any(fnmatch.fnmatch(identifier, p) for p in override["select"].split()):
            more = as_list(override["test-requires"])
            append = override.get("inherit", {}).get("test-requires") == "append"
            requirements = [*requirements, *more] if append else more
    return {requirement_name(r) for r in requirements} if names else set(requirements)


def no_build() -> dict[str, set[str]]:
    """tests/python/_support.py's NO_BUILD: the test dependencies with no build for some interpreters."""
    tree = ast.parse((ROOT / "tests" / "python" / "_support.py").read_text())
    (value,) = [
        n.value
        for n in tree.body
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and "NO_BUILD" in ast.unparse(n).split("=")[0]
    ]
    assert value is not None
    table: dict[str, set[str]] = ast.literal_eval(value)
    return table


def test_each_wheel_is_tested_by_the_python_suite_with_what_has_a_build_for_it() -> None:
    command = CIBW["test-command"]
    assert "pytest" in command and "{project}/tests/python" in command
    assert "-c {project}/pyproject.toml" in command  # the suite's pytest settings (asyncio mode, timeouts)
    # What ./scripts/test installs for its checks, less the build and lint tools.
    script = (ROOT / "scripts" / "test").read_text()
    block = re.search(r'^"\$PY" -m pip install -q --disable-pip-version-check \\\n(.*?)\n(?=\S)', script, re.S | re.M)
    assert block, "scripts/test: the dependency install line moved; update this test"
    wanted = {requirement_name(t.strip('"')) for t in block.group(1).split() if t != "\\"}
    wanted -= {"scikit-build-core", "pybind11", "cmake", "ninja", "ruff"}
    assert {"pytest", "hypothesis", "fastapi", "uvloop", "mypy", "psycopg", "gevent", "matplotlib"} <= wanted
    table = no_build()
    for python in [*PYTHONS, "cp313t"]:  # (cp313t: the workflow's cibuildwheel 3.x step, same configuration)
        free_threaded = python.endswith("t")
        provided = wheel_test_requirements(f"{python}-manylinux_x86_64")
        lacking = {m.replace("_", "-") for m, where in table.items() if free_threaded and "free-threaded" in where}
        # All but what has no build for it, which could not be installed, and whose tests skip there.
        assert wanted - provided == lacking, python
        # psycopg-binary has no free-threaded wheel (and no sdist): psycopg alone there, on the OS's libpq.
        binary = any(r.startswith("psycopg[binary]") for r in wheel_test_requirements(f"{python}-x", names=False))
        assert binary != free_threaded, python
    # uvloop has no Windows build: there the suite skips its uvloop tests.
    everywhere = [r for o in [CIBW, *CIBW.get("overrides", [])] for r in as_list(o.get("test-requires", []))]
    uvloop = [r for r in everywhere if requirement_name(r) == "uvloop"]
    assert uvloop and all("sys_platform!='win32'" in r.replace(" ", "") for r in uvloop)
    assert "win32" in table["uvloop"]


def workflow() -> dict[Any, Any]:
    yaml = need("yaml")
    data = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(data, dict)
    return data


def cibuildwheel_steps() -> tuple[dict[str, Any], dict[str, Any]]:
    """The workflow's two cibuildwheel steps: the release's, which builds what [tool.cibuildwheel]
    selects, and the 3.x one that builds the free-threaded 3.13t wheels (4.x builds none)."""
    steps = workflow()["jobs"]["wheels"]["steps"]
    release, threaded = [s for s in steps if s.get("uses", "").startswith("pypa/cibuildwheel@")]
    return release, threaded


def cibuildwheel_action() -> str:
    return str(cibuildwheel_steps()[0]["uses"])


def test_the_workflow_builds_on_a_native_runner_per_platform_and_architecture() -> None:
    job = workflow()["jobs"]["wheels"]
    runners = {(e["os"], e["archs"]) for e in job["strategy"]["matrix"]["include"]}
    assert runners == {
        ("ubuntu-latest", "x86_64"),
        ("ubuntu-24.04-arm", "aarch64"),
        ("macos-15-intel", "x86_64"),
        ("macos-14", "arm64"),
        ("windows-latest", "AMD64"),
    }
    assert job["runs-on"] == "${{ matrix.os }}"
    build, threaded = cibuildwheel_steps()
    assert build["env"] == {"CIBW_ARCHS": "${{ matrix.archs }}"}
    assert re.fullmatch(r"pypa/cibuildwheel@v4\.\d+\.\d+", build["uses"])
    # The 3.13t wheels: the same configuration and architectures, only their build selector, by 3.x.
    assert threaded["env"] == {
        "CIBW_ARCHS": "${{ matrix.archs }}",
        "CIBW_BUILD": "cp313t-*",
        "CIBW_ENABLE": "cpython-freethreading",
    }
    assert re.fullmatch(r"pypa/cibuildwheel@v3\.\d+\.\d+", threaded["uses"])
    assert any(s.get("uses", "").startswith("actions/upload-artifact@") for s in job["steps"])


def test_the_workflow_publishes_the_wheels_and_the_sdist_on_a_version_tag() -> None:
    data = workflow()
    on = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` as true
    assert on["push"]["tags"] == ["v*"]
    jobs = data["jobs"]
    assert any("build --sdist" in s.get("run", "") for s in jobs["sdist"]["steps"])
    publish = jobs["publish"]
    assert set(publish["needs"]) == {"wheels", "sdist"}
    assert "startsWith(github.ref, 'refs/tags/v')" in publish["if"]
    assert publish["permissions"] == {"id-token": "write"}  # trusted publishing, no token
    assert publish["steps"][-1]["uses"] == "pypa/gh-action-pypi-publish@release/v1"
    (download,) = [s for s in publish["steps"] if s.get("uses", "").startswith("actions/download-artifact@")]
    assert download["with"] == {"path": "dist", "merge-multiple": True}


def print_identifiers(platform: str, archs: str | None, step: dict[str, Any] | None = None) -> set[str]:
    """What cibuildwheel would build for a platform (it prints that for any platform, on any host); with
    a workflow step, that step's cibuildwheel (its folder under build/) with that step's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}
    if step is not None:
        env.update(step["env"])
        env["PYTHONPATH"] = str(step_cibuildwheel(step))
    if archs is not None:
        env["CIBW_ARCHS"] = archs
    out = run(
        [sys.executable, "-m", "cibuildwheel", "--print-build-identifiers", "--platform", platform],
        cwd=ROOT,
        env=env,
        timeout=120,
    ).stdout
    return set(out.split())


def test_cibuildwheel_would_build_the_expected_wheels_on_the_workflows_runners() -> None:
    need("cibuildwheel")
    # The cibuildwheel checked here is the release's (./scripts/test installs the workflow's version).
    assert cibuildwheel_action() == f"pypa/cibuildwheel@v{importlib.metadata.version('cibuildwheel')}"
    platform_of = {"ubuntu": "linux", "macos": "macos", "windows": "windows"}
    built: set[str] = set()
    for entry in workflow()["jobs"]["wheels"]["strategy"]["matrix"]["include"]:
        platform = platform_of[entry["os"].split("-")[0]]
        ids = print_identifiers(platform, entry["archs"])
        assert ids, entry
        assert all(i.endswith(entry["archs"].lower()) or i.endswith("amd64") for i in ids), (entry, ids)
        built |= ids
    assert built == EXPECTED


def step_cibuildwheel(step: dict[str, Any]) -> Path:
    """The folder ./scripts/test package installs a step's cibuildwheel in (its own, beside .venv's)."""
    version = str(step["uses"]).split("@v")[1]
    folder = ROOT / "build" / f"cibuildwheel-{version}"
    if not (folder / "cibuildwheel").is_dir():
        message = f"cibuildwheel {version} is not in {folder}: ./scripts/test package installs it"
        if os.environ.get("CI") == "true":
            raise AssertionError(message)
        pytest.skip(message)
    return folder


def test_the_313t_step_would_build_the_313t_wheels_on_the_workflows_runners() -> None:
    threaded = cibuildwheel_steps()[1]
    version = run(
        [sys.executable, "-c", "import cibuildwheel; print(cibuildwheel.__version__)"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(step_cibuildwheel(threaded))},
    ).stdout.strip()
    assert threaded["uses"] == f"pypa/cibuildwheel@v{version}"
    platform_of = {"ubuntu": "linux", "macos": "macos", "windows": "windows"}
    built: set[str] = set()
    for entry in workflow()["jobs"]["wheels"]["strategy"]["matrix"]["include"]:
        built |= print_identifiers(platform_of[entry["os"].split("-")[0]], entry["archs"], threaded)
    assert built == {f"cp313t-{tag}" for archs in PLATFORMS.values() for tags in archs.values() for tag in tags}


def test_cibuildwheel_reads_the_configuration_as_written() -> None:
    need("cibuildwheel")
    # Without the workflow's CIBW_ARCHS each platform builds the archs pyproject.toml names for it (and
    # cibuildwheel rejects a misspelt option).
    assert set().union(*(print_identifiers(platform, None) for platform in PLATFORMS)) == EXPECTED
