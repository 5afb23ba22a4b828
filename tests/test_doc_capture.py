"""docs/release.md's capture of ``make demo`` at 80×24 is what an 80-column terminal shows."""

from __future__ import annotations

from pathlib import Path

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
