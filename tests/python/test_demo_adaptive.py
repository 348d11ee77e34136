"""``python -m permits demo --adaptive``: the AdaptiveLimiter learning a hidden limit that moves, on a
ManualClock: what it prints, that it converges in each phase, the picture, and the command line."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from permits.__main__ import main
from permits.demo.adaptive import PHASES, SECONDS, run_adaptive_demo, simulate_adaptive

from _child import run_child


def test_each_phase_finds_its_hidden_limit() -> None:
    run = simulate_adaptive()
    ends = [start for start, _ in PHASES[1:]] + [SECONDS]
    for (start, rate), end in zip(PHASES, ends, strict=True):
        settled = (start + end) / 2
        within = [status for t, status in run.answers if settled <= t < end]
        assert within.count(200) / (end - settled) >= 0.95 * rate, (start, rate)
        assert within.count(429) <= 0.01 * len(within), (start, rate)


def test_it_prints_each_phase_and_is_the_same_every_run() -> None:
    first, second = io.StringIO(), io.StringIO()
    assert run_adaptive_demo(stream=first) == 0
    assert run_adaptive_demo(stream=second) == 0
    assert first.getvalue() == second.getvalue()
    rows = [line for line in first.getvalue().splitlines() if "of the limit" in line]
    assert len(rows) == len(PHASES)
    for row in rows:
        share = int(re.search(r"\(\s*(\d+)% of the limit\)", row).group(1))  # type: ignore[union-attr]
        assert share >= 95, row


def test_the_picture_is_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the demo's --plot needs matplotlib (pip install matplotlib)")
    out = tmp_path / "adaptive.png"
    assert main(["demo", "--adaptive", "--plot", str(out)]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("other", ["--simulate", "--concurrency", "--http"])
def test_it_runs_on_its_own(other: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["demo", "--adaptive", other])
    assert stop.value.code == 2
    assert "--adaptive" in capsys.readouterr().err


def test_as_a_user_runs_it() -> None:
    child = run_child("import sys; from permits.__main__ import main; sys.exit(main(['demo', '--adaptive']))")
    assert child.returncode == 0, child.stderr
    assert "hidden limit" in child.stdout
