"""docs/release.md's capture of ``make demo`` at 80×24 is what an 80-column terminal shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gaussdp

ROOT = Path(__file__).parents[1]
DOC = Path(__file__).parents[1] / "docs" / "release.md"


def _capture_blocks() -> list[list[str]]:
    """The two fenced blocks after the paragraph announcing the 80×24 capture."""
    text = DOC.read_text(encoding="utf-8")
    after = text[text.index("at 80×24 (`COLUMNS=80 LINES=24`)") :]
    parts = after.split("```")
    return [parts[1].strip("\n").split("\n"), parts[3].strip("\n").split("\n")]


def test_every_line_of_the_80_column_capture_fits_80_columns() -> None:
    # An audit found a 204-character line here: a real terminal wraps it into three.
    # Every character of the capture is one column wide (box drawing, Greek, "…").
    top, bottom = _capture_blocks()
    assert top[0].strip() == "release"
    assert bottom[-1].endswith("of 1e-06")  # the last line of the screen as it is left
    assert len(bottom) == 24
    for line in top + bottom:
        assert len(line) <= 80, (len(line), line)


def _outside_table(lines: list[str]) -> list[str]:
    """The lines of the top that are not the release table: the table's layout (column
    widths, wrapped or stacked cells) follows the widths of its noisy values."""
    return [line.rstrip() for line in lines if not line.startswith(tuple("┏┃┡│└╭╰├"))]


def _count_stds(lines: list[str]) -> set[str]:
    """The std cells of the table's count rows: the std of a count follows from σ alone.

    Whatever the layout the noisy values' widths choose (one column a label, or the
    labels stacked in one cell), the std is the fourth cell from the right.
    """
    cells = [[c.strip() for c in line.split("│")] for line in lines if line.startswith("│")]
    stds = {
        row[-4]
        for row in cells
        if len(row) >= 7 and any(c == "count" or c.endswith("statistic: count") for c in row)
    }
    assert stds, "the table has no count rows"
    return stds


def test_the_80_column_capture_is_todays_output() -> None:
    # The capture went stale once (σ=33.3 printed as σ=33.3001 since, δ=3.06e-07): what
    # the release computes without noise (sensitivity, σ, ρ, selection δ, τ, the
    # report's layout, the rows left out) must be as printed; of the table of noisy
    # values (its layout follows their widths) only the counts' std, which no noise moves
    # (the audit found 33.3001 printed as 33.3 since).
    env = {**os.environ, "COLUMNS": "80", "LINES": "24"}
    env["PYTHONPATH"] = str(Path(gaussdp.__file__).parents[1])
    demo = ["release", "examples/visits.toml", "--data", "examples/visits.csv"]
    run = subprocess.run(
        [sys.executable, "-m", "gaussdp", *demo],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=True,
    )
    now = [line.rstrip() for line in run.stdout.rstrip("\n").split("\n")]
    top, bottom = _capture_blocks()
    head = now[: now.index(next(x for x in now if x.startswith("…"))) + 1]
    assert _outside_table(head) == _outside_table(top)
    assert _count_stds(head) == _count_stds(top)
    assert now[-len(bottom) :] == [x.rstrip() for x in bottom]
