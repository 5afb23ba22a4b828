"""``gaussdp account`` and ``gaussdp dpsgd``, registered on a fresh typer app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gaussdp.cli import account


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    account.register(app)
    return app


def test_dpsgd_reference_case(app: typer.Typer) -> None:
    args = ["dpsgd", "--noise-multiplier", "1.1", "--batch-size", "256"]
    args += ["--dataset-size", "60000", "--epochs", "60", "--delta", "1e-5", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["steps"] == 14063
    assert out["epsilon_lower"] <= 2.38169 <= out["epsilon_upper"] <= 2.38169 * 1.0005
    assert out["epsilon_rdp"] > out["epsilon_upper"]


def test_dpsgd_calibrates(app: typer.Typer) -> None:
    args = ["dpsgd", "--target-epsilon", "8", "--epochs", "1", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["epsilon_upper"] <= 8.0


def test_dpsgd_rejects_both_and_bad_values(app: typer.Typer) -> None:
    both = ["dpsgd", "--noise-multiplier", "1", "--target-epsilon", "3"]
    assert CliRunner().invoke(app, both).exit_code == 2
    bad = CliRunner().invoke(app, ["dpsgd", "--noise-multiplier", "1", "--delta", "2"])
    assert bad.exit_code == 2
    assert "delta must be a real number in (0, 1), got 2.0" in bad.output


def test_account_file(app: typer.Typer, tmp_path: Path) -> None:
    path = tmp_path / "events.toml"
    path.write_text(
        'delta = 1e-6\n[[event]]\nmechanism = "gaussian"\nsigma = 2.0\ncount = 4\n'
        '[[event]]\nmechanism = "gaussian"\nsigma = 4.0\nsensitivity = 2.0\n',
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["account", str(path), "--compare", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["exact"] is True
    assert out["epsilon_upper"] == out["epsilon_gdp"]
    # The exact ε bracketed within 1e-10 (the lower side is a true lower bound).
    assert out["epsilon_upper"] * (1 - 1e-9) < out["epsilon_lower"] < out["epsilon_upper"]
    assert out["epsilon_rdp"] > out["epsilon_upper"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[event]]\nmechanism = "cauchy"\n', "event[0].mechanism must be one of"),
        ('[[event]]\nmechanism = "gaussian"\nsigma = 1.0\ncount = 0\n', "count must be"),
        (
            '[[event]]\nmechanism = "gaussian"\nsigma = 1.0\ncount = 9007199254740993\n',
            "event[0].count must be an integer in [1, 2**53], got 9007199254740993",
        ),
        ('[[event]]\nmechanism = "gaussian"\nsigma = 1.0\nsigmaa = 2\n', "keys among"),
        ("delta = 1e-5\n", "events file must be a non-empty list"),
        ("not toml [", "events file must be a readable TOML file"),
    ],
)
def test_account_bad_files(app: typer.Typer, tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "events.toml"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["account", str(path)])
    assert result.exit_code == 2
    assert message in result.output.replace("\n", "")
