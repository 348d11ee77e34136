"""The Python examples in the README and docs run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [
    pytest.param(code, id=f"{page.name}:{i}")
    for page in PAGES
    for i, code in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S))
]


@pytest.mark.parametrize("code", BLOCKS)
def test_example_runs(code: str) -> None:
    exec(compile(code, "<docs>", "exec"), {"__name__": "__docs__"})
