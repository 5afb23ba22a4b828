"""``gaussdp release --data -`` (CSV on standard input) and the progress line of long runs."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from gaussdp.budget import Budget
from gaussdp.cli import _output
from gaussdp.cli import release as cli_release
from gaussdp.random import ChaCha20Random
from gaussdp.release import Release
from gaussdp.release.core import RunProgress

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """gaussdp (test app)."""

    cli_release.register(app)
    return app


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder the CLI copies standard input to (to see what it leaves)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_release_reads_csv_from_stdin(app: typer.Typer, private_tmp: Path) -> None:
    text = (EXAMPLES / "visits.csv").read_text()
    spec = str(EXAMPLES / "visits.toml")
    r = CliRunner().invoke(app, ["release", spec, "--data", "-", "--json"], input=text)
    assert r.exit_code == 0, r.output
    piped = pd.DataFrame(json.loads(r.stdout)["results"])
    r = CliRunner().invoke(app, ["release", spec, "--data", str(EXAMPLES / "visits.csv"), "--json"])
    assert r.exit_code == 0, r.output
    direct = pd.DataFrame(json.loads(r.stdout)["results"])
    # The same cells (public keys, bins and the ungrouped parts; noise differs).
    public = direct["day"].isna()
    assert direct.loc[public, ["page", "bin", "statistic"]].fillna("").values.tolist() == (
        piped.loc[piped["day"].isna(), ["page", "bin", "statistic"]].fillna("").values.tolist()
    )
    # The copy of standard input is removed after the run.
    assert list(private_tmp.glob("gaussdp-stdin-*")) == []


def test_stdin_bad_input_and_spark(
    app: typer.Typer, private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = str(EXAMPLES / "visits.toml")
    r = CliRunner().invoke(app, ["release", spec, "--data", "-"], input="")
    assert r.exit_code == 2
    # Named as what the user gave, not as the temporary copy.
    assert "standard input (--data -) must be a CSV with at least its header line" in r.output
    assert "gaussdp-stdin" not in r.output
    assert list(private_tmp.glob("gaussdp-stdin-*")) == []
    # A malformed table: the engine's line names stdin.csv, not a temporary path.
    r = CliRunner().invoke(app, ["release", spec, "--data", "-"], input="\x00\x01binary")
    assert r.exit_code == 2
    assert "gaussdp-stdin" not in r.output
    # Spark is refused before standard input is read (nothing copied).

    def never() -> None:
        raise AssertionError("standard input was read")

    monkeypatch.setattr(cli_release, "stdin_csv", never)
    r = CliRunner().invoke(
        app, ["release", spec, "--data", "-", "--engine", "spark"], input="user_id\n1\n"
    )
    assert r.exit_code == 2
    assert (
        "--engine must be 'duckdb' with --data - (CSV on standard input), got 'spark'" in r.output
    )
    # An unknown engine is named as such, not as a stdin limitation.
    r = CliRunner().invoke(
        app, ["release", spec, "--data", "-", "--engine", "bogus"], input="user_id\n1\n"
    )
    assert r.exit_code == 2
    assert "engine must be 'duckdb' or 'spark', got 'bogus'" in r.output
    assert "standard input" not in r.output
    assert list(private_tmp.glob("gaussdp-stdin-*")) == []


def test_run_reports_its_passes() -> None:
    frame = pd.DataFrame(
        {"u": [1, 1, 2, 3, None], "p": ["a", "b", "a", "a", "a"], "m": [1.0, 2, 3, 4, 5]}
    )
    seen: list[RunProgress] = []
    release = (
        Release(
            frame,
            privacy_unit="u",
            budget=Budget(epsilon=1.0, delta=1e-6),
            max_groups_per_unit=1,
            max_rows_per_group=1,
        )
        .count(by="p", keys=["a", "b"])
        .mean("m", bounds=(0, 10))
    )
    release.run(rng=ChaCha20Random(1), progress=seen.append)
    stages = [(s.stage, s.step, s.passes) for s in seen if s.done is None]
    assert stages == [
        ("reading the data", 1, 3),
        ("bounding and aggregating", 2, 3),
        ("bounding and aggregating", 3, 3),
        ("adding noise", 3, 3),
    ]
    # Rows with a privacy unit, known after the validation pass.
    assert [s.rows for s in seen if s.done is None] == [None, 4, 4, 4]
    assert all(0.0 <= s.done <= 1.0 for s in seen if s.done is not None)


def test_a_failing_progress_callback_never_ends_a_paid_release() -> None:
    """Most callbacks come after the charge: one that raises is dropped with a warning."""
    frame = pd.DataFrame({"u": [1, 2, 3], "p": ["a", "b", "a"]})
    release = Release(
        frame,
        privacy_unit="u",
        budget=Budget(epsilon=1.0, delta=1e-6),
        max_groups_per_unit=1,
        max_rows_per_group=1,
    ).count(by="p", keys=["a", "b"])
    calls: list[RunProgress] = []

    def broken(state: RunProgress) -> None:
        calls.append(state)
        if len(calls) > 1:  # fails once the budget has been charged
            raise OSError("display gone")

    with pytest.warns(RuntimeWarning, match="progress callback failed .OSError: display gone"):
        result = release.run(rng=ChaCha20Random(1), progress=broken)
    assert list(result.frame["p"]) == ["a", "b"]
    assert len(calls) == 2  # not called again after it failed


def _terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    buffer = io.StringIO()
    screen = Console(file=buffer, force_terminal=True, width=120)
    monkeypatch.setattr(cli_release, "error_console", lambda: screen)
    return buffer


def test_progress_line_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = _terminal(monkeypatch)
    with cli_release.run_progress("duckdb", as_json=False) as update:
        assert update is not None
        update(RunProgress("bounding and aggregating", 2, 3, 0.25, 4_000_000))
    shown = buffer.getvalue()
    assert (
        "bounding and aggregating on duckdb (pass 2 of 3): ~1,000,000 of 4,000,000 rows read"
        in (shown)
    )
    assert "0:00:0" in shown  # elapsed time
    assert cli_release._describe(RunProgress("adding noise", 3, 3), "spark") == (
        "adding noise (after 3 passes on spark)"
    )


@pytest.mark.parametrize("quiet", [False, True])
def test_progress_shown_only_on_a_terminal_without_quiet_or_json(
    app: typer.Typer, monkeypatch: pytest.MonkeyPatch, quiet: bool
) -> None:
    args = ["release", str(EXAMPLES / "visits.toml"), "--data", str(EXAMPLES / "visits.csv")]
    buffer = _terminal(monkeypatch)
    monkeypatch.setitem(_output.OPTIONS, "quiet", quiet)
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert ("adding noise" in buffer.getvalue()) is not quiet
    # --json: nothing on the terminal either.
    buffer.truncate(0)
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    assert buffer.getvalue() == ""
    # Not a terminal (the test runner's stderr): no progress text at all.
    monkeypatch.setattr(cli_release, "error_console", _output.error_console)
    r = CliRunner().invoke(app, args)
    assert "pass 1 of" not in r.output
    assert "adding noise" not in r.output
