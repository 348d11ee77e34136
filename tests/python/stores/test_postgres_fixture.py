"""The PostgreSQL fixtures without server binaries: CI fails, a developer's run skips saying how to install."""

from __future__ import annotations

import pytest

from _servers import postgres


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_missing_binaries(monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]) -> None:
    monkeypatch.setattr(postgres, "_bin_dir", lambda: None)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="apt-get install postgresql"):
        postgres._need_bin_dir()
