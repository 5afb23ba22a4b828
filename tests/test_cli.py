"""The ``gaussdp`` command as a user runs it."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gaussdp import DiscreteGaussian, Gaussian
from gaussdp.cli import app

runner = CliRunner()
EXAMPLES = Path(__file__).parents[1] / "examples"


def _json(*args: str) -> dict[str, object]:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    parsed: dict[str, object] = json.loads(result.output)
    return parsed


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "calibrate" in result.output
    assert "convert" in result.output


def test_calibrate_table() -> None:
    result = runner.invoke(app, ["calibrate", "--epsilon", "1", "--delta", "1e-6"])
    assert result.exit_code == 0, result.output
    assert "analytic Gaussian σ" in result.output
    assert "4.22468" in result.output  # the analytic σ, 4.22468...
    assert "not valid" in result.output  # classic calibration refuses ε ≥ 1


def test_calibrate_json_matches_the_library() -> None:
    out = _json("calibrate", "--epsilon", "0.5", "--delta", "1e-5", "--sensitivity", "2")
    gaussian = Gaussian.calibrate(epsilon=0.5, delta=1e-5, sensitivity=2.0)
    assert out["sigma_analytic"] == gaussian.sigma
    assert out["mu"] == gaussian.mu
    assert out["sigma_classic"] == pytest.approx(2 * math.sqrt(2 * math.log(1.25e5)) / 0.5)
    assert isinstance(out["classic_over_analytic"], float)
    assert out["classic_over_analytic"] > 1
    discrete = DiscreteGaussian.calibrate(epsilon=0.5, delta=1e-5, sensitivity=2)
    assert out["sigma2_discrete"] == float(discrete.sigma2)
    assert out["sigma2_discrete_numerator"] == discrete.sigma2.numerator
    assert out["sigma2_discrete_denominator"] == discrete.sigma2.denominator
    assert out["epsilon_exact"] == pytest.approx(0.5, rel=1e-8)
    assert isinstance(out["epsilon_zcdp_cks"], float)
    assert isinstance(out["epsilon_zcdp_standard"], float)
    assert 0.5 < out["epsilon_zcdp_cks"] < out["epsilon_zcdp_standard"]
    assert out["equal_error_rate"] == pytest.approx(0.5 - out["mia_advantage"] / 2)  # type: ignore[operator]


def test_calibrate_non_integer_sensitivity_explains_the_discrete_row() -> None:
    out = _json("calibrate", "--epsilon", "1", "--delta", "1e-6", "--sensitivity", "0.5")
    assert out["sigma2_discrete"] is None  # the table says "needs an integer sensitivity"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epsilon", "1", "--delta", "1.5"], "delta must be a real number in (0, 1), got 1.5"),
        (["--epsilon", "-1", "--delta", "1e-6"], "epsilon must be a finite real number >= 0"),
        (["--epsilon", "nan", "--delta", "1e-6"], "epsilon must be"),
        (["--epsilon", "1", "--delta", "1e-6", "-s", "0"], "sensitivity must be a finite positive"),
    ],
)
def test_calibrate_bad_input(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["calibrate", *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


@pytest.mark.parametrize(
    "args",
    [
        ["--sigma", "2"],
        ["--mu", "0.5"],
        ["--rho", "0.125"],
        ["--epsilon", "1.0", "--delta", "0.006830"],
    ],
)
def test_convert_each_view_gives_the_same_mechanism(args: list[str]) -> None:
    out = _json("convert", *args)
    assert out["mu"] == pytest.approx(0.5, rel=2e-3)
    assert out["sigma"] == pytest.approx(2.0, rel=2e-3)
    assert out["rho"] == pytest.approx(0.125, rel=4e-3)


def test_convert_reports_epsilon_at_delta_and_delta_at_epsilon() -> None:
    at_delta = _json("convert", "--mu", "0.5", "--delta", "1e-5")
    assert at_delta["epsilon"] == Gaussian.from_mu(0.5).epsilon(1e-5)
    at_epsilon = _json("convert", "--mu", "0.5", "--epsilon", "1")
    assert at_epsilon["delta"] == Gaussian.from_mu(0.5).delta(1.0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mu", "1", "--rho", "1"], "give one of --sigma, --mu, --rho"),
        ([], "give one of --sigma, --mu, --rho, or both --epsilon and --delta"),
        (["--epsilon", "1"], "give one of --sigma, --mu, --rho, or both --epsilon and --delta"),
        (["--sigma", "-1"], "sigma must be a finite positive real number, got -1.0"),
    ],
)
def test_convert_bad_input(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["convert", *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_version() -> None:
    from gaussdp import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"gaussdp {__version__}"


def test_json_is_a_plain_flag_and_help_documents_exit_codes() -> None:
    result = runner.invoke(app, ["--help"])
    assert "Exit status:" in result.output
    for code in ("2    bad input", "3    refused", "4    the engine", "130  interrupted"):
        assert code in result.output
    for command in (["calibrate"], ["account"], ["ledger", "init"], ["ledger", "show"]):
        help_text = runner.invoke(app, [*command, "--help"]).output
        assert "--json" in help_text
        assert "<bool>" not in help_text


def test_every_command_takes_json(tmp_path: Path) -> None:
    ledger = tmp_path / "b.db"
    assert _json("ledger", "init", str(ledger), "--epsilon", "1", "--delta", "1e-6") == {
        "path": str(ledger),
        "total": {"epsilon": 1.0, "delta": 1e-6},
    }
    assert _json("ledger", "show", str(ledger))["entries"] == []
    out = _json("dpsgd", "--noise-multiplier", "1.1", "--epochs", "1")
    assert isinstance(out["epsilon_upper"], float)


def test_account_json_holds_numbers_or_null(tmp_path: Path) -> None:
    events = tmp_path / "events.toml"
    events.write_text('[[event]]\nmechanism = "laplace"\nscale = 2.0\n', encoding="utf-8")
    out = _json("account", str(events), "--compare")
    assert out["epsilon_gdp"] is None  # GDP accounts for Gaussians only; the table says so
    assert all(v is None or isinstance(v, int | float) for v in out.values())
    table = runner.invoke(app, ["account", str(events), "--compare"]).output
    assert "Gaussians only" in table


def test_account_past_the_float_range_claims_neither_zero_nor_exact(tmp_path: Path) -> None:
    # σ = 1e-160: the exact ε ≈ 5e319 is past the float range. Not "[0, ∞], exact".
    events = tmp_path / "events.toml"
    events.write_text('[[event]]\nmechanism = "gaussian"\nsigma = 1e-160\n', encoding="utf-8")
    out = _json("account", str(events))
    assert out["epsilon_upper"] is None  # ∞
    assert out["epsilon_lower"] == sys.float_info.max
    assert out["exact"] is False
    events.write_text('[[event]]\nmechanism = "gaussian"\nsigma = 2.0\n', encoding="utf-8")
    assert _json("account", str(events))["exact"] is True


def test_quiet_prints_results_only(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = ["release", str(EXAMPLES / "visits.toml"), "--data", str(EXAMPLES / "visits.csv")]
    loud = runner.invoke(app, [*args, "--out", str(out)])
    assert loud.exit_code == 0, loud.output
    assert f"results written to {out}" in loud.stderr
    quiet = runner.invoke(app, ["--quiet", *args, "--out", str(out)])
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == ""
    assert {"results", "report"} == set(json.loads(out.read_text(encoding="utf-8")))


def test_out_parquet_writes_parquet(tmp_path: Path) -> None:
    import pandas as pd

    out = tmp_path / "r.parquet"
    args = ["release", str(EXAMPLES / "visits.toml"), "--data", str(EXAMPLES / "visits.csv")]
    result = runner.invoke(app, [*args, "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"PAR1"
    assert len(pd.read_parquet(out)) == len(json.loads(result.stdout)["results"])


HEAVY = ("scipy", "duckdb", "pandas", "numpy", "torch", "pyspark", "matplotlib")


def _imported(*args: str) -> set[str]:
    """Top-level packages imported by ``python -m gaussdp ARGS`` (from ``-X importtime``)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gaussdp", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["release", "--help"]])
def test_help_and_version_import_nothing_heavy(args: list[str]) -> None:
    imported = _imported(*args)
    assert "typer" in imported  # the parse worked
    assert not imported & set(HEAVY), imported & set(HEAVY)


def test_calibrate_imports_only_what_it_needs() -> None:
    imported = _imported("calibrate", "--epsilon", "1", "--delta", "1e-6", "--json")
    assert "scipy" in imported
    assert not imported & {"duckdb", "pandas", "torch", "pyspark", "matplotlib"}


def test_every_command_has_a_json_flag() -> None:
    import typer

    def leaves(command: object, path: str) -> list[tuple[str, object]]:
        subcommands = getattr(command, "commands", None)
        if subcommands is None:
            return [(path, command)]
        return [leaf for name, sub in subcommands.items() for leaf in leaves(sub, f"{path} {name}")]

    commands = leaves(typer.main.get_command(app), "gaussdp")
    assert len(commands) >= 10
    for path, command in commands:
        flags = {opt for param in command.params for opt in param.opts}  # type: ignore[attr-defined]
        assert "--json" in flags, path
        json_param = next(p for p in command.params if "--json" in p.opts)  # type: ignore[attr-defined]
        assert json_param.is_flag, path  # --json, not --json <bool>


def test_ledger_show_says_when_no_lower_bound_is_computed(tmp_path: Path) -> None:
    from fractions import Fraction

    from gaussdp import Budget
    from gaussdp.accounting import PartitionSelection
    from gaussdp.release import Ledger

    # After private partition selection the accountant has no lower bound (it gives
    # 0): the ledger must not print "lower bound 0" against a positive spend.
    path = tmp_path / "b.db"
    book = Ledger(path, total=Budget(epsilon=10.0, delta=1e-3))
    selection = PartitionSelection(Fraction(100), 60, 1, 2**64, exact=True)
    book.charge(selection, label="selection")
    assert book.summary().spent_lower == 0.0 < book.summary().spent
    shown = _json("ledger", "show", str(path))
    assert shown["spent_lower"] is None
    assert isinstance(shown["spent"], float)
    assert shown["spent"] > 0
    result = runner.invoke(app, ["ledger", "show", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # COLUMNS reached the table (the console was made once a process: an earlier
    # invocation's width was kept); at 80 columns the table is stacked.
    assert 80 < max(len(line) for line in result.output.splitlines()) <= 200
    assert "no lower bound computed" in result.output
    assert "lower bound 0" not in result.output
    # Without partition selection the lower bound is informative and still shown.
    plain = tmp_path / "c.db"
    Ledger(plain, total=Budget(epsilon=10.0, delta=1e-3)).charge(Gaussian(2.0), label="g")
    shown = _json("ledger", "show", str(plain))
    assert isinstance(shown["spent_lower"], float)
    assert 0 < shown["spent_lower"] <= shown["spent"]
