"""The ``gaussdp`` command as a user runs it."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from gaussdp import DiscreteGaussian, Gaussian
from gaussdp.cli import app

runner = CliRunner()


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
