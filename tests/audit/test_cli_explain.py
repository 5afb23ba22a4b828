"""``gaussdp explain`` as a user runs it."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from gaussdp.cli import app
from gaussdp.privacy import gdp_tradeoff
from gaussdp.privacy.tradeoff import TradeoffCurve

runner = CliRunner()


def _json(*args: str) -> dict[str, object]:
    result = runner.invoke(app, ["explain", *args, "--json"])
    assert result.exit_code == 0, result.output
    parsed: dict[str, object] = json.loads(result.output)
    return parsed


def test_explain_epsilon_delta() -> None:
    out = _json("--epsilon", "1", "--delta", "1e-6")
    # 1 − f_{1,1e-6}(1e-3) = δ + e·1e-3 (DRS Prop 2.4, steep side)
    assert out["max_tpr"] == pytest.approx(1e-6 + math.e * 1e-3, rel=1e-12)
    assert out["advantage"] == pytest.approx((math.e - 1 + 2e-6) / (math.e + 1), rel=1e-12)
    assert "whatever the attack" in str(out["text"])


def test_explain_mu_and_rho_and_table() -> None:
    out = _json("--mu", "1", "--fpr", "0.05")
    assert out["max_tpr"] == pytest.approx(1 - gdp_tradeoff(1.0, 0.05), rel=1e-12)
    rho = _json("--rho", "0.5")
    assert float(rho["max_tpr"]) >= float(_json("--mu", "1")["max_tpr"])  # zCDP is looser
    table = runner.invoke(app, ["explain", "--mu", "1"])
    assert table.exit_code == 0
    assert "no attack exceeds TPR" in table.output


def test_explain_dpsgd_run() -> None:
    out = _json("--noise-multiplier", "1.1", "--sample-rate", "0.01", "--steps", "50")
    curve = TradeoffCurve.from_dpsgd(1.1, 0.01, 50)
    assert out["max_tpr"] == pytest.approx(float(curve.max_tpr(1e-3)))
    assert set(out["max_tpr_at"]) == {"0.0001", "0.001", "0.01", "0.1"}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--mu", "1", "--rho", "1"],
        ["--epsilon", "1"],
        ["--noise-multiplier", "1.0"],
        ["--mu", "-1"],
        ["--mu", "1", "--fpr", "0"],
    ],
)
def test_explain_bad_usage_exits_2(args: list[str]) -> None:
    result = runner.invoke(app, ["explain", *args])
    assert result.exit_code == 2
