"""examples/make_visits.py: flags mean what they say, and tracked files are not overwritten."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

SCRIPT = Path(__file__).parents[1] / "examples" / "make_visits.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )


def test_rows_in_scientific_notation_and_many_pages(tmp_path: Path) -> None:
    out = tmp_path / "v.csv"
    proc = run("--rows", "2e3", "--pages", "20_000", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    frame = pd.read_csv(out)
    assert len(frame) == 2000
    assert list(frame.columns) == ["user_id", "day", "page", "minutes"]
    # five digits for 20 000 pages: not cut to four (which would merge page-1xxxx into page-1xxx)
    assert frame["page"].str.fullmatch(r"page-\d{5}").all()
    assert frame["page"].nunique() > 1000


def test_the_default_table_is_the_demo_table(tmp_path: Path) -> None:
    out = tmp_path / "visits.csv"
    assert run("--out", str(out)).returncode == 0
    assert out.read_bytes() == (SCRIPT.parent / "visits.csv").read_bytes()


def test_refuses_to_overwrite_without_asking(tmp_path: Path) -> None:
    out = tmp_path / "v.csv"
    out.write_text("keep me", encoding="utf-8")
    proc = run("--out", str(out))
    assert proc.returncode == 2
    assert "exists; pass --overwrite" in proc.stderr
    assert out.read_text(encoding="utf-8") == "keep me"
    assert run("--rows", "10", "--out", str(out), "--overwrite").returncode == 0
    assert len(pd.read_csv(out)) == 10


def test_out_is_required_and_bad_counts_are_refused(tmp_path: Path) -> None:
    assert "required: --out" in run().stderr
    proc = run("--rows", "1.5", "--out", str(tmp_path / "v.csv"))
    assert proc.returncode == 2
    assert "--rows: must be a whole number >= 1, got '1.5'" in proc.stderr
    assert not (tmp_path / "v.csv").exists()
