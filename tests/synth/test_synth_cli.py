"""``gaussdp synth`` on a small Bayesian-network table, with a ledger."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from gaussdp.accounting import ZCDPAccountant
from gaussdp.budget import Budget
from gaussdp.cli.synth import register
from gaussdp.random import ChaCha20Random
from gaussdp.release import Ledger
from gaussdp.synth.data import BayesNet

SPEC = """
privacy_unit = "unit"
max_groups_per_unit = 2
max_rows_per_group = 1
rows = 250
iters = 100
[budget]
epsilon = 4.0
delta = 1e-6
[[column]]
name = "a"
categories = [0, 1, 2]
[[column]]
name = "b"
categories = [0, 1, 2]
[[column]]
name = "x"
bounds = [0, 10]
bins = 5
integer = true
"""


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """gaussdp (test app)."""

    register(app)
    return app


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    data = BayesNet.example().sample(400, rng=ChaCha20Random(2), rows_per_unit=2)
    data["x"] = data["d"] * 3
    csv = tmp_path / "data.csv"
    data[["unit", "a", "b", "x"]].to_csv(csv, index=False)
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC, encoding="utf-8")
    ledger = tmp_path / "b.db"
    Ledger(ledger, total=Budget(epsilon=5.0, delta=1e-6))
    return csv, spec, ledger


@pytest.mark.slow
def test_synth_writes_rows_and_charges_the_ledger(
    app: typer.Typer, files: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    csv, spec, ledger = files
    out = tmp_path / "synth.csv"
    result = CliRunner().invoke(
        app,
        [
            *("synth", str(spec), "--data", str(csv), "--out", str(out)),
            *("--ledger", str(ledger), "--json", "--evaluate"),
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["a", "b", "x"]
    assert len(frame) == payload["rows"] == 250
    assert set(frame["a"]) <= {0, 1, 2}
    assert frame["x"].between(0, 10).all()
    (entry,) = Ledger(ledger).entries()
    rho = ZCDPAccountant().compose(entry.event).rho  # MST is charged its events
    assert rho == pytest.approx(payload["report"]["rho"], rel=1e-12)
    assert payload["report"]["epsilon"] <= 4.0
    assert len(payload["tree"]) == 2
    assert len(payload["quality"]) == 3 + 3 + 1
    # The second run does not fit in what is left (ε 5 total): refused, exit 3, nothing spent.
    again = CliRunner().invoke(
        app, ["synth", str(spec), "--data", str(csv), "--out", str(out), "--ledger", str(ledger)]
    )
    assert again.exit_code == 3
    assert len(Ledger(ledger).entries()) == 1


def test_a_column_without_a_domain_is_a_clean_error(
    app: typer.Typer, files: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    csv, spec, ledger = files
    spec.write_text(SPEC + '[[column]]\nname = "d"\n', encoding="utf-8")
    result = CliRunner().invoke(
        app,
        [
            *("synth", str(spec), "--data", str(csv)),
            *("--out", str(tmp_path / "o.csv"), "--ledger", str(ledger)),
        ],
    )
    assert result.exit_code == 2
    assert "never taken from the data" in result.output
    assert Ledger(ledger).entries() == []


def test_an_unwritable_out_is_refused_before_the_spend(
    app: typer.Typer, files: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    csv, spec, ledger = files
    out = tmp_path / "missing" / "o.csv"
    result = CliRunner().invoke(
        app, ["synth", str(spec), "--data", str(csv), "--out", str(out), "--ledger", str(ledger)]
    )
    assert result.exit_code == 2
    assert "--out must be in an existing folder" in result.output
    assert Ledger(ledger).entries() == []


def test_an_out_on_an_input_file_is_refused_before_the_spend(
    app: typer.Typer, files: tuple[Path, Path, Path]
) -> None:
    # Regression: --out on the ledger passed check_writable and erased its history.
    csv, spec, ledger = files
    before = ledger.read_bytes(), csv.read_bytes()
    for out, option in ((ledger, "--ledger"), (csv, "--data"), (spec, "spec")):
        args = ["synth", str(spec), "--data", str(csv), "--out", str(out), "--ledger", str(ledger)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2
        assert f"--out must be a different file from {option}" in result.output
    assert (ledger.read_bytes(), csv.read_bytes()) == before
    assert Ledger(ledger).entries() == []


def test_a_late_string_is_outside_the_domain_not_an_error(
    app: typer.Typer, files: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    # Regression: a value past DuckDB's type-detection sample (20480 rows) failed the
    # read (a refusal that depends on one row; DuckDB's error quoted it). The CSV is
    # read as text: the value is outside its numeric domain and its row is dropped.
    # (Slow at load: 20,500 rows are needed to pass the sample, and the run is whole.)
    _, spec, ledger = files
    csv = tmp_path / "late.csv"
    rows = "".join(f"{i},{i % 3},{i % 2},{i % 10}\n" for i in range(20500))
    csv.write_text(f"unit,a,b,x\n{rows}20500,1,1,SECRET-Jane\n", encoding="utf-8")
    out = tmp_path / "o.csv"
    args = ["synth", str(spec), "--data", str(csv), "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--ledger", str(ledger)])
    assert result.exit_code == 0, result.output
    assert "SECRET" not in result.output
    assert "SECRET" not in out.read_text(encoding="utf-8")
    assert [e.status for e in Ledger(ledger).entries()] == ["committed"]


def test_a_write_failure_after_the_spend_leaves_a_recovery_file(
    app: typer.Typer,
    files: tuple[Path, Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    csv, spec, ledger = files
    spec.write_text(SPEC.replace("iters = 100", "iters = 5"), encoding="utf-8")
    out = tmp_path / "synth.csv"
    to_csv = pd.DataFrame.to_csv

    def disk_full(frame: pd.DataFrame, path: object = None, **kwargs: object) -> object:
        if path == out:
            raise OSError(28, "No space left on device")
        return to_csv(frame, path, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(pd.DataFrame, "to_csv", disk_full)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        app, ["synth", str(spec), "--data", str(csv), "--out", str(out), "--ledger", str(ledger)]
    )
    assert result.exit_code == 4, result.output
    assert f"could not write {out} (No space left on device)" in result.output
    assert "the spend is committed in the ledger; the synthetic rows are saved in" in result.output
    (recovered,) = tmp_path.glob("gaussdp-recovered-*.csv")
    assert len(pd.read_csv(recovered)) == 250
    assert [e.status for e in Ledger(ledger).entries()] == ["committed"]
