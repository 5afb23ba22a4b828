"""``gaussdp release`` output a person can read: 80 columns, no value cut, a short summary."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from gaussdp.cli import release as cli_release
from gaussdp.cli._output import format_value
from gaussdp.release import load_spec, release_from_spec

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """gaussdp (test app)."""

    cli_release.register(app)
    return app


def narrow(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """Route the tables to an 80-column console; return what it prints."""
    text = io.StringIO()
    screen = Console(width=80, file=text, force_terminal=False, color_system=None)
    monkeypatch.setattr(cli_release, "console", lambda: screen)
    return text


def whole(token: str, output: str) -> bool:
    """Whether ``token`` appears in ``output`` not as part of a longer number or word."""
    return re.search(r"(?<![\w.+\-])" + re.escape(token) + r"(?![\w.])", output) is not None


def release(app: typer.Typer, tmp_path: Path, *extra: str) -> list[dict[str, object]]:
    """Run the demo release, its results written to a CSV file; return those rows."""
    out = tmp_path / "results.csv"
    args = ["release", str(EXAMPLES / "visits.toml"), "--data", str(EXAMPLES / "visits.csv")]
    r = CliRunner().invoke(app, [*args, "--out", str(out), *extra])
    assert r.exit_code == 0, r.output
    rows: list[dict[str, object]] = pd.read_csv(out).to_dict(orient="records")
    return [{k: v for k, v in row.items() if v == v} for row in rows]  # NaN: an empty cell


def test_show_all_fits_80_columns_with_every_value_whole(
    app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    screen = narrow(monkeypatch)
    results = release(app, tmp_path, "--show", "all")
    output = screen.getvalue()
    assert max(len(line) for line in output.splitlines()) <= 80
    assert "…" not in output  # rich's mark of a cut cell
    # The report depends on the spec only (not on the data or the noise).
    report = release_from_spec(load_spec(EXAMPLES / "visits.toml"), "-").report.to_dict()
    assert len(results) > 20
    for row in results:
        for key, value in row.items():
            for token in cli_release._cell(value, key).split():  # may wrap between words
                assert whole(token, output), (key, token)
    for cost in report["costs"]:
        for key in ("sensitivity", "gamma", "sigma", "mu", "rho", "delta", "threshold"):
            if cost[key]:
                assert whole(format_value(cost[key]), output), (key, cost[key])


def test_default_shows_head_and_summary(
    app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    screen = narrow(monkeypatch)
    results = release(app, tmp_path)
    output = screen.getvalue()
    more = len(results) - cli_release.HEAD_ROWS
    assert f"… {more} more rows (--show all prints them; all in " in output
    days = [str(r["day"]) for r in results if "day" in r]
    # Day counts come last in the demo: beyond the head, so not printed.
    assert days
    assert not any(whole(day, output) for day in days)
    queries = f"released 4 queries on duckdb: {len(results)} values"
    assert queries in output
    spent = re.search(
        r"budget: spent ε = (\S+) at δ = 1e-06; left no ε amount .* partition selection\s+has"
        r"\s+used\s+δ\s+=\s+(\S+)\s+of\s+1e-06",
        output,
        re.DOTALL,
    )
    assert spent is not None, output
    assert float(spent.group(1)) <= 1.0
    assert 0.0 <= float(spent.group(2)) < 1e-06


def test_show_refuses_unknown_value(app: typer.Typer, tmp_path: Path) -> None:
    args = ["release", str(EXAMPLES / "visits.toml"), "--data", str(EXAMPLES / "visits.csv")]
    r = CliRunner().invoke(app, [*args, "--show", "some"])
    assert r.exit_code == 2
    assert "--show must be 'head' or 'all', got 'some'" in r.output


def test_results_round_to_nearest_and_intervals_outward() -> None:
    # Regression (audit26): every number was rounded up, so values and stds were off by
    # one in the last digit (17.7905 shown as 17.7906) and ci_low was rounded inward
    # (0.302925... shown as 0.302926: the shown interval narrower than the released one).
    frame = pd.DataFrame(
        {
            "page": ["product", "search"],
            "statistic": ["mean(minutes)", "mean(minutes)"],
            "value": [17.790521978021978, 38.70724907063197],
            "std": [3.7471431165681603, 33.30004463696604],
            "ci_low": [0.30292553191489363, -2.546978021978022],
            "ci_high": [10.415972222222223, -0.30292553191489363],
        }
    )
    table = cli_release._frame_table(frame, 200)
    text = io.StringIO()
    Console(width=200, file=text, color_system=None).print(table)
    rows = [line.split("│")[3:7] for line in text.getvalue().splitlines() if "mean(" in line]
    shown = [[cell.strip() for cell in row] for row in rows]
    assert shown == [
        ["17.7905", "3.74714", "0.302925", "10.416"],
        ["38.7072", "33.3", "-2.54698", "-0.302925"],
    ]
    for row, low, high in zip(shown, frame["ci_low"], frame["ci_high"], strict=True):
        assert float(row[2]) <= low
        assert float(row[3]) >= high


@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_fit_table_never_cuts_numbers(width: int) -> None:
    header = [("group", False), ("label", False), *((f"number{i}", True) for i in range(6))]
    numbers = ["-1.23457e+300", "3.80484e-07", "0.00520709", "207.846", "1", "-9"]
    rows = [["a very long group name with words", "2026-03-02", *numbers]] * 3
    table = cli_release.fit_table("t", header, rows, width)
    text = io.StringIO()
    Console(width=width, file=text, color_system=None).print(table)
    output = text.getvalue()
    assert max(len(line) for line in output.splitlines()) <= width
    for token in [*numbers, "2026-03-02"]:
        assert whole(token, output), token


def test_ledger_show_fits_80_columns_with_every_value_whole(
    app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "budget.db"
    runner = CliRunner()
    r = runner.invoke(app, ["ledger", "init", str(ledger), "--epsilon", "3", "--delta", "1e-5"])
    assert r.exit_code == 0, r.output
    args = ["release", str(EXAMPLES / "visits.toml"), "--data", str(EXAMPLES / "visits.csv")]
    for _ in range(2):
        r = runner.invoke(app, [*args, "--ledger", str(ledger), "--json"])
        assert r.exit_code == 0, r.output
    entries = json.loads(runner.invoke(app, ["ledger", "show", str(ledger), "--json"]).stdout)
    screen = narrow(monkeypatch)
    r = runner.invoke(app, ["ledger", "show", str(ledger)])
    assert r.exit_code == 0, r.output
    output = screen.getvalue()
    assert max(len(line) for line in output.splitlines()) <= 80
    rows = entries["entries"]
    assert len(rows) == 2
    for row in rows:
        # The long event description is wrapped between its words, never cut.
        assert len(row["event"]) > 200
        for key in ("id", "status", "what", "event", "who", "reserved_at", "committed_at"):
            for token in str(row[key]).split():
                assert token in output, (key, token)
        assert whole(format_value(row["cost"]), output)


def test_explain_ledger_prints_ledger_shows_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One table for both commands (cli.release.ledger_table): the same rows, whole at 80
    # columns, and the same caption with the certified upper and the lower bound.
    from gaussdp.cli import app as full_app
    from gaussdp.cli import explain as cli_explain
    from gaussdp.mechanisms import Gaussian
    from gaussdp.release import Budget, Ledger

    db = tmp_path / "eps.db"
    book = Ledger(db, total=Budget(epsilon=3.0, delta=1e-5))
    for label in ("counts of visits per page and day", "sums"):
        book.charge(Gaussian(sigma=4.0), label=label)
    screen = narrow(monkeypatch)
    monkeypatch.setattr(cli_explain, "console", cli_release.console)  # the same 80 columns
    runner = CliRunner()
    assert runner.invoke(full_app, ["ledger", "show", str(db)]).exit_code == 0
    shown = screen.getvalue()
    screen.seek(0)
    screen.truncate()
    result = runner.invoke(full_app, ["explain", "--ledger", str(db)])
    assert result.exit_code == 0, (result.output, result.exception)
    explained = screen.getvalue()
    assert max(len(line) for line in explained.splitlines()) <= 80
    assert shown[shown.index("┏") :] in explained  # the table and caption, the title aside
    assert "What ledger" in explained
    for row in book.summary().rows:
        assert whole(format_value(row.cost), explained)
        for token in row.event.split():
            assert token in explained
    assert "certified upper" in explained


def test_ledger_json_is_one_shape_with_nan_and_inf_as_null(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `ledger show --json` and `explain --ledger --json` print the same object
    # (cli.release.ledger_json); a non-finite value is null (strict JSON), never NaN/Infinity.
    import dataclasses
    import math

    from gaussdp.cli import app as full_app
    from gaussdp.mechanisms import Gaussian
    from gaussdp.release import Budget, Ledger

    db = tmp_path / "eps.db"
    book = Ledger(db, total=Budget(epsilon=3.0, delta=1e-5))
    book.charge(Gaussian(sigma=4.0), label="counts")
    summary = Ledger.summary

    def odd(self: Ledger) -> object:
        s = summary(self)
        rows = tuple(dataclasses.replace(r, cost=math.nan) for r in s.rows)
        return dataclasses.replace(s, remaining=-math.inf, slack=math.nan, rows=rows)

    monkeypatch.setattr(Ledger, "summary", odd)
    runner = CliRunner()
    shown = runner.invoke(full_app, ["ledger", "show", str(db), "--json"])
    assert shown.exit_code == 0, shown.output
    explained = runner.invoke(full_app, ["explain", "--ledger", str(db), "--json"])
    assert explained.exit_code == 0, (explained.output, explained.exception)
    for text in (shown.stdout, explained.stdout):
        assert "NaN" not in text
        assert "Infinity" not in text
    ledger = json.loads(shown.stdout)
    assert json.loads(explained.stdout)["ledger"] == ledger
    assert (ledger["remaining"], ledger["slack"]) == (None, None)
    (entry,) = ledger["entries"]
    assert entry["cost"] is None
    assert entry["what"] == "counts"
    assert ledger["spent"] == pytest.approx(book.spent)


@pytest.mark.parametrize("width", [40, 80])
def test_ledger_table_folds_a_word_wider_than_the_screen(tmp_path: Path, width: int) -> None:
    # An event holding a 150-digit fraction: the table and its caption stay within the
    # width; the fraction continues on the next lines, whole, and nothing is cut.
    from fractions import Fraction

    from gaussdp.mechanisms import DiscreteGaussian
    from gaussdp.release import Budget, Ledger

    book = Ledger(tmp_path / "long.db", total=Budget(epsilon=3.0, delta=1e-5))
    book.charge(DiscreteGaussian(sigma2=Fraction(10**90 + 1, 3**120)), label="long")
    summary = book.summary()
    table = cli_release.ledger_table("ledger", summary, width)
    text = io.StringIO()
    Console(width=width, file=text, color_system=None).print(table)
    output = text.getvalue()
    assert max(len(line) for line in output.splitlines()) <= width
    inside = "".join(
        line.split("│")[1].strip() for line in output.splitlines() if line.count("│") >= 2
    )
    assert str(Fraction(10**90 + 1, 3**120)) in inside
    flat = " ".join(output.split())
    assert " ".join(str(table.caption).split()) in flat


@pytest.mark.parametrize("columns", [20, 80])
def test_ledger_show_on_a_narrow_terminal_stacks_labels_and_values(
    tmp_path: Path, columns: int
) -> None:
    # At 20 columns the stacked text column was folded to one character a line (the
    # number column took the rest). Now every field is a `name: value` line of one
    # column at least MIN_FOLD wide; each value whole, a number on one line.
    from gaussdp.mechanisms import Gaussian
    from gaussdp.release import Budget, Ledger

    db = tmp_path / "eps.db"
    book = Ledger(db, total=Budget(epsilon=3.0, delta=1e-5))
    for label in ("counts of visits per page and day", "sums"):
        book.charge(Gaussian(sigma=4.0), label=label)
    # A process of its own, as a user runs it.
    r = subprocess.run(
        [sys.executable, "-m", "gaussdp", "ledger", "show", str(db)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": str(columns)},
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns, r.stdout
    body = [line for line in lines if line.startswith("│")]
    cells = [line.split("│")[1] for line in body]
    assert min(len(cell) for cell in cells) >= cli_release.MIN_FOLD
    flat = "".join("".join(cells).split())
    summary = book.summary()
    for row in summary.rows:
        for value in (row.what, row.event, row.who, row.when, row.committed_at):
            assert "".join(str(value).split()) in flat, value
        assert whole(format_value(row.cost), r.stdout)  # a number is never wrapped
    caption = cli_release.ledger_table("t", summary, columns).caption
    assert "".join(str(caption).split()) in "".join(r.stdout.split())
    if columns == 20:
        assert sum(cell.strip() == "id: 1" for cell in cells) == 1  # one field a line


def test_each_invocation_in_a_process_takes_its_own_columns(
    app: typer.Typer, tmp_path: Path
) -> None:
    # The stdout console was made once a process (functools.cache) and rich reads
    # COLUMNS when a console is made: every CliRunner invocation after the first got
    # the first one's width (146 columns at COLUMNS=60 here). Now the environment's.
    from gaussdp.mechanisms import Gaussian
    from gaussdp.release import Budget, Ledger

    db = tmp_path / "eps.db"
    book = Ledger(db, total=Budget(epsilon=3.0, delta=1e-5))
    for label in ("counts of visits per page and day", "sums"):
        book.charge(Gaussian(sigma=4.0), label=label)
    runner = CliRunner()
    widths = []
    for columns in ("200", "60", None, "200"):  # None: not a terminal, 80 columns
        r = runner.invoke(app, ["ledger", "show", str(db)], env={"COLUMNS": columns})
        assert r.exit_code == 0, r.output
        widths.append(max(len(line) for line in r.output.splitlines()))
    wide, narrow, plain, again = widths
    assert 80 < wide <= 200
    assert narrow <= 60
    assert plain <= 80
    assert again == wide
