"""The complete programs of docs/ml.md run as written."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

DOC = Path(__file__).resolve().parents[2] / "docs" / "ml.md"
PROGRAMS = [
    block
    for block in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    if block.startswith("import torch")
]


def test_the_page_has_programs() -> None:
    assert len(PROGRAMS) >= 2


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.splitlines()[-1][:40])
def test_program_runs(program: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(program, str(DOC), "exec"), {"__name__": "__docs__"})
    assert out.getvalue().strip()
