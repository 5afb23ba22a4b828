"""``gaussdp explain`` as a user runs it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy.stats import norm
from typer.testing import CliRunner

from gaussdp.cli import app
from gaussdp.mechanisms import Gaussian
from gaussdp.privacy import gdp_tradeoff
from gaussdp.privacy.tradeoff import TradeoffCurve
from gaussdp.release import Budget, Ledger

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


def test_explain_a_mu_ledger_is_the_composed_gaussian(tmp_path: Path) -> None:
    # Three Gaussians with σ = 2 compose to exactly √3/2-GDP (DRS Cor 3.3).
    db = tmp_path / "mu.db"
    ledger = Ledger(db, total=Budget(mu=2.0))
    for i in range(3):
        ledger.charge(Gaussian(sigma=2.0), label=f"query {i}")
    out = _json("--ledger", str(db), "--fpr", "0.01")
    mu = math.sqrt(3) / 2
    assert out["max_tpr"] == pytest.approx(1 - gdp_tradeoff(mu, 0.01), rel=1e-12)
    assert out["advantage"] == pytest.approx(2 * norm.cdf(mu / 2) - 1, rel=1e-12)
    book = out["ledger"]
    assert isinstance(book, dict)
    assert book["unit"] == "mu"
    assert book["spent"] == pytest.approx(mu, rel=1e-12)
    assert book["remaining"] == pytest.approx(math.sqrt(4 - mu**2), rel=1e-12)
    assert [e["what"] for e in book["entries"]] == ["query 0", "query 1", "query 2"]
    assert all(e["cost"] == pytest.approx(0.5) for e in book["entries"])  # μ = 1/σ each
    assert "ledger" in str(out["guarantee"])
    assert "3 entries" in str(out["guarantee"])


def test_explain_an_epsilon_ledger_table(tmp_path: Path) -> None:
    db = tmp_path / "eps.db"
    ledger = Ledger(db, total=Budget(epsilon=3.0, delta=1e-5))
    ledger.charge(Gaussian(sigma=4.0), label="counts")
    ledger.charge(Gaussian(sigma=4.0), label="sums")
    shown = runner.invoke(app, ["explain", "--ledger", str(db)])
    assert shown.exit_code == 0, shown.output
    for text in ("counts", "sums", "certified upper bound", "no attack exceeds TPR"):
        assert text in shown.output
    out = _json("--ledger", str(db))
    book = out["ledger"]
    assert isinstance(book, dict)
    assert book["spent"] == pytest.approx(ledger.spent, rel=1e-12)
    assert book["spent_lower"] <= book["spent"]
    # The ε-budget ledger's PLD accountant holds two Gaussians with σ = 4: exactly
    # √2/4-GDP (DRS Cor 3.3), so the bound is G_μ's.
    exact = 1 - gdp_tradeoff(math.sqrt(2) / 4, 1e-3)
    assert float(out["max_tpr"]) == pytest.approx(exact, rel=1e-9)
    assert "2 entries" in str(out["guarantee"])


def test_explain_an_empty_ledger_and_bad_usage(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    Ledger(db, total=Budget(epsilon=1.0, delta=1e-6))
    out = _json("--ledger", str(db), "--fpr", "0.05")
    assert out["max_tpr"] == pytest.approx(0.05)
    assert out["advantage"] == 0.0
    assert out["ledger"]["entries"] == []  # type: ignore[index]
    both = runner.invoke(app, ["explain", "--ledger", str(db), "--mu", "1"])
    assert both.exit_code == 2
    missing = runner.invoke(app, ["explain", "--ledger", str(tmp_path / "nope.db")])
    assert missing.exit_code == 2
