"""``gaussdp release`` and ``gaussdp ledger`` on the bundled example."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from gaussdp.cli.release import register

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """gaussdp (test app)."""

    register(app)
    return app


def test_release_with_ledger_json_and_csv(app: typer.Typer, tmp_path: Path) -> None:
    runner = CliRunner()
    ledger = tmp_path / "budget.db"
    out = tmp_path / "results.csv"
    r = runner.invoke(app, ["ledger", "init", str(ledger), "--epsilon", "1.2", "--delta", "2e-6"])
    assert r.exit_code == 0, r.output
    args = [
        "release",
        str(EXAMPLES / "visits.toml"),
        "--data",
        str(EXAMPLES / "visits.csv"),
        "--ledger",
        str(ledger),
    ]
    r = runner.invoke(app, [*args, "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    payload = json.loads(r.output)
    assert payload["report"]["epsilon"] <= 1.0
    assert payload["report"]["mode"] == "pld"
    assert {"statistic", "value", "std", "ci_low", "ci_high"} <= set(payload["results"][0])
    assert len(pd.read_csv(out)) == len(payload["results"])
    # Dates are ISO strings, not pandas' default epoch milliseconds.
    days = [row["day"] for row in payload["results"] if row.get("day") is not None]
    assert days
    assert all(isinstance(d, str) and d[:4] == "2026" and d[4] == "-" for d in days)
    # A second run would exceed the ledger's total: refused with exit code 3.
    r = runner.invoke(app, args)
    assert r.exit_code == 3
    r = runner.invoke(app, ["ledger", "show", str(ledger), "--json"])
    assert r.exit_code == 0, r.output
    shown = json.loads(r.output)
    assert [e["status"] for e in shown["entries"]] == ["committed"]
    assert shown["unit"] == "epsilon"
    assert shown["delta"] == 2e-6
    # One entry: its cost alone is the total, within the ledger's ε.
    assert shown["entries"][0]["cost"] == shown["spent"] <= 1.2
    # visits.toml selects some keys privately: partition selection gives no lower bound.
    assert shown["selection_delta"] > 0
    assert shown["spent_lower"] is None
    assert shown["remaining"] is None  # ε at a fixed δ does not add: no ε "left"
    assert 0.0 <= shown["selection_delta"] < shown["delta"]
    r = runner.invoke(app, ["ledger", "show", str(ledger)])
    assert r.exit_code == 0
    assert "no ε amount" in r.output
    assert "remaining ε" not in r.output


def test_release_table_output_and_errors(app: typer.Typer, tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(
        app, ["release", str(EXAMPLES / "visits.toml"), "--data", str(EXAMPLES / "visits.csv")]
    )
    assert r.exit_code == 0, r.output
    assert "privacy report" in r.output
    r = runner.invoke(
        app, ["release", str(EXAMPLES / "visits.toml"), "--data", str(tmp_path / "no.csv")]
    )
    assert r.exit_code == 2
    bad = tmp_path / "bad.toml"
    bad.write_text((EXAMPLES / "visits.toml").read_text().replace("bounds = [0, 60]", ""))
    r = runner.invoke(app, ["release", str(bad), "--data", str(EXAMPLES / "visits.csv")])
    assert r.exit_code == 2
    r = runner.invoke(app, ["ledger", "show", str(tmp_path / "none.db")])
    assert r.exit_code == 2


def test_the_printed_report_is_the_plan_charged_to_a_mu_ledger(
    app: typer.Typer, tmp_path: Path
) -> None:
    """The spec's (ε, δ) budget plans exact PLD parts, which a μ ledger cannot account for:
    the release is re-planned in μ-GDP, and that plan is what is printed and charged."""
    from gaussdp.release import Ledger, load_spec, release_from_spec

    runner = CliRunner()
    ledger = tmp_path / "mu.db"
    r = runner.invoke(app, ["ledger", "init", str(ledger), "--mu", "5"])
    assert r.exit_code == 0, r.output
    spec, data = tmp_path / "public_keys.toml", EXAMPLES / "visits.csv"
    # Public keys only: a μ budget cannot pay partition selection's δ.
    text = (EXAMPLES / "visits.toml").read_text(encoding="utf-8")
    spec.write_text(text[: text.index("[[query]]                 # visits per day")], "utf-8")
    release = release_from_spec(load_spec(spec), data)
    assert release.report.mode == "pld"  # its own budget's plan
    assert not release.report.replanned
    charged = release.report_for(ledger=Ledger(ledger))
    assert charged.mode == "gdp"
    assert charged.replanned
    assert charged.accounting.startswith("re-planned for the filter or ledger charged")
    args = ["release", str(spec), "--data", str(data), "--ledger", str(ledger)]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    printed = json.loads(r.output)["report"]
    assert printed == charged.to_dict()
    (entry,) = Ledger(ledger).entries()
    assert entry.detail == printed  # the ledger's record of what was charged
    assert charged.mu is not None
    assert Ledger(ledger).spent == pytest.approx(charged.mu, rel=1e-12)
    r = runner.invoke(app, args, env={"COLUMNS": "100"})  # the table says so too
    assert r.exit_code == 0, r.output
    # COLUMNS reached the table (the console was made once a process: an earlier
    # invocation's width was kept).
    assert 80 < max(len(line) for line in r.output.splitlines()) <= 100
    assert "accounted in μ" in r.output
    assert "re-planned for the filter or ledger" in " ".join(r.output.split())


def test_a_mu_ledger_refuses_partition_selection_before_reading(
    app: typer.Typer, tmp_path: Path
) -> None:
    """The example spec selects days privately (δ); a μ ledger cannot pay δ: one line,
    exit 3, the message report_for gives, nothing reserved."""
    from gaussdp.errors import BudgetExceededError
    from gaussdp.release import Ledger, load_spec, release_from_spec

    runner = CliRunner()
    ledger = tmp_path / "mu.db"
    assert runner.invoke(app, ["ledger", "init", str(ledger), "--mu", "5"]).exit_code == 0
    spec, data = EXAMPLES / "visits.toml", EXAMPLES / "visits.csv"
    release = release_from_spec(load_spec(spec), data)
    with pytest.raises(BudgetExceededError) as refused:
        release.report_for(ledger=Ledger(ledger))
    r = runner.invoke(app, ["release", str(spec), "--data", str(data), "--ledger", str(ledger)])
    assert r.exit_code == 3
    (line,) = r.output.strip().splitlines()
    assert str(refused.value) in line
    assert Ledger(ledger).entries() == []


def test_more_bad_inputs_one_line_exit_2_nothing_reserved(app: typer.Typer, tmp_path: Path) -> None:
    # Issue 12 item 3's rule on inputs the issue did not list: a glob or a directory that
    # does not exist, a spec naming a column the table lacks (a value or a key), a line
    # with an extra field. Each is one line on stderr, exit 2, and the ledger stays empty.
    # (A ρ budget and one query: planning is instant, the test is about the input.)
    from gaussdp.release import Ledger

    runner = CliRunner()
    ledger = tmp_path / "b.db"
    r = runner.invoke(app, ["ledger", "init", str(ledger), "--rho", "1"])
    assert r.exit_code == 0, r.output
    spec = (
        'privacy_unit = "user_id"\nmax_groups_per_unit = 1\nmax_rows_per_group = 1\n'
        "[budget]\nrho = 0.5\n"
        '[[query]]\nstatistic = "sum"\ncolumn = "minutes"\nbounds = [0, 60]\n'
        'by = "page"\nkeys = ["home"]\n'
    )
    # (A directory or glob that matches no file is an empty table, released as one:
    # test_inputs.py. A glob's leading folder must exist.)
    good = tmp_path / "good.csv"
    good.write_text("user_id,page,minutes\n1,home,3\n")
    cases = [
        (spec, tmp_path / "missing" / "*.parquet", "an existing file, directory or glob"),
        (spec, tmp_path / "missing", "an existing file, directory or glob"),
        (spec.replace('column = "minutes"', 'column = "secs"'), good, "'secs'"),
        (spec.replace('by = "page"', 'by = "pages"'), good, "'pages'"),
    ]
    for i, (text, data, match) in enumerate(cases):
        path = tmp_path / f"s{i}.toml"
        path.write_text(text)
        args = ["release", str(path), "--data", str(data), "--ledger", str(ledger)]
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (i, r.output)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert match in lines[0], lines[0]
        assert "secret9" not in r.output
        assert Ledger(ledger).entries() == []
    r = runner.invoke(app, ["release", str(tmp_path / "s0.toml"), "--data", str(good)])
    assert r.exit_code == 0, r.output  # the spec itself is fine
    # A malformed line is not bad input: it is dropped (docs/release.md), not refused.
    extra = tmp_path / "extra.csv"
    extra.write_text("user_id,page,minutes\n1,home,3\n2,home,5,secret9\n")
    r = runner.invoke(app, ["release", str(tmp_path / "s0.toml"), "--data", str(extra)])
    assert r.exit_code == 0, r.output
    assert "secret9" not in r.output
