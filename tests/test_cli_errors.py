"""The command line's error contract: every failure tried, its one line and its exit status.

Each case runs the real ``gaussdp`` app (typer's CliRunner, or a subprocess where
the failure needs a process of its own) and checks that stderr holds exactly one
line, that no traceback is printed, and the exit status documented in the README
and ``gaussdp --help``: 2 bad input, 3 refused by the budget, 4 engine, file,
ledger, memory or missing-extra failure, 130 interrupted, 1 a bug.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from gaussdp.cli import app

EXAMPLES = Path(__file__).parents[1] / "examples"
SPEC = str(EXAMPLES / "visits.toml")
DATA = str(EXAMPLES / "visits.csv")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def assert_one_line(result: Result, code: int, message: str) -> None:
    """Exit status ``code``; stderr is one line containing ``message``; no traceback."""
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.output


def _events(tmp_path: Path, text: str) -> str:
    path = tmp_path / "events.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _spec(tmp_path: Path, head: str) -> str:
    """A one-query spec (a sum of visits' minutes) under ``head`` (top-level keys)."""
    path = tmp_path / "spec.toml"
    path.write_text(
        f"{head}\nmax_groups_per_unit = 1\nmax_rows_per_group = 1\n"
        "[budget]\nepsilon = 1.0\ndelta = 1e-6\n"
        '[[query]]\nstatistic = "sum"\ncolumn = "minutes"\nbounds = [0, 60]\n',
        encoding="utf-8",
    )
    return str(path)


def _big_csv(tmp_path: Path) -> str:
    """70,000 rows: more than DuckDB reads within a 1 KB memory limit."""
    path = tmp_path / "big.csv"
    path.write_text("user,minutes\n" + "".join(f"{i},{i % 60}\n" for i in range(70_000)))
    return str(path)


def _ledger(tmp_path: Path, epsilon: str = "3") -> Path:
    path = tmp_path / "budget.db"
    assert (
        invoke("ledger", "init", str(path), "--epsilon", epsilon, "--delta", "1e-5").exit_code == 0
    )
    return path


def _entries(ledger: Path) -> list[dict[str, Any]]:
    result = invoke("ledger", "show", str(ledger), "--json")
    assert result.exit_code == 0, result.output
    entries: list[dict[str, Any]] = json.loads(result.stdout)["entries"]
    return entries


GAUSSIAN_NO_SIGMA = """
[[event]]
mechanism = "gaussian"
sigma = 1.0

[[event]]
mechanism = "gaussian"
count = 3
"""

SPEC_MEAN_WITHOUT_COLUMN = """
privacy_unit = "user_id"
max_groups_per_unit = 3
max_rows_per_group = 2
budget = { epsilon = 1.0, delta = 1e-6 }

[[query]]
statistic = "mean"
by = "page"
keys = ["home"]
"""

# (what is tried, arguments or a builder of them from tmp_path, exit status, the line says)
CASES: list[tuple[str, Callable[[Path], list[str]], int, str]] = [
    (
        "calibrate: δ outside (0, 1)",
        lambda _: ["calibrate", "-e", "1", "-d", "1.5"],
        2,
        "error: delta must be a real number in (0, 1), got 1.5",
    ),
    (
        "calibrate: an ε so large that ρ overflows names ε, not ρ",
        lambda _: ["calibrate", "--epsilon", "1e308", "--delta", "0.5"],
        2,
        "error: epsilon must be small enough that ρ = μ²/2 is a finite float (ε ≤ 1e307 is), "
        "got 1e+308",
    ),
    (
        "calibrate: an ε beyond max/√2 (the μ search's start overflowed) names ε too",
        lambda _: ["calibrate", "--epsilon", "1.5e308", "--delta", "0.5"],
        2,
        "error: epsilon must be small enough that ρ = μ²/2 is a finite float (ε ≤ 1e307 is), "
        "got 1.5e+308",
    ),
    (
        "convert: two views at once",
        lambda _: ["convert", "--mu", "1", "--rho", "1"],
        2,
        "error: give one of --sigma, --mu, --rho",
    ),
    (
        "account: no such events file",
        lambda p: ["account", str(p / "missing.toml")],
        2,
        "events file must be a readable TOML file (No such file or directory)",
    ),
    (
        "account: not TOML",
        lambda p: ["account", _events(p, "[[event]\n")],
        2,
        "events file must be a readable TOML file",
    ),
    (
        "account: a Gaussian event without sigma",
        lambda p: ["account", _events(p, GAUSSIAN_NO_SIGMA)],
        2,
        "error: event[1] (gaussian) must be a table with the key 'sigma', got []",
    ),
    (
        "account: an invalid sigma names the event",
        lambda p: ["account", _events(p, '[[event]]\nmechanism = "gaussian"\nsigma = -1\n')],
        2,
        "error: event[0] (gaussian): sigma must be a finite positive real number, got -1",
    ),
    (
        "account: an unknown key",
        lambda p: ["account", _events(p, '[[event]]\nmechanism = "laplace"\nscale = 1\nk = 2\n')],
        2,
        "event[0] (laplace) must be keys among",
    ),
    (
        "account: a bad count",
        lambda p: [
            "account",
            _events(p, '[[event]]\nmechanism = "laplace"\nscale = 1\ncount = 0\n'),
        ],
        2,
        "event[0].count must be an integer in [1, 2**53], got 0",
    ),
    (
        "dpsgd: batch larger than the dataset",
        lambda _: ["dpsgd", "--noise-multiplier", "1", "--batch-size", "10", "--dataset-size", "5"],
        2,
        "batch_size must be an integer in [1, dataset_size=5], got 10",
    ),
    (
        "dpsgd: a zero noise multiplier names the flag, not sigma",
        lambda _: ["dpsgd", "--noise-multiplier", "0"],
        2,
        "noise_multiplier must be a finite positive real number, got 0.0",
    ),
    (
        "dpsgd: epochs beyond 2**53 steps names epochs, not a count",
        lambda _: ["dpsgd", "--noise-multiplier", "1", "--epochs", "1e300"],
        2,
        "epochs must be a finite number > 0 giving at most 2**53 steps at q = 0.00426667, "
        "got 1e+300",
    ),
    (
        "dpsgd: a flag that is not a number is one template line",
        lambda _: ["dpsgd", "--noise-multiplier", "abc"],
        2,
        "--noise-multiplier must be a number, got 'abc' (see gaussdp dpsgd --help)",
    ),
    (
        "dpsgd: a flag that is not an integer is one template line",
        lambda _: ["dpsgd", "--batch-size=1.5"],
        2,
        "--batch-size must be an integer, got '1.5'",
    ),
    (
        "dpsgd: an unknown option is one line",
        lambda _: ["dpsgd", "--nope"],
        2,
        "No such option: --nope (see gaussdp dpsgd --help)",
    ),
    (
        "calibrate: a sensitivity whose σ overflows names the sensitivity",
        lambda _: ["calibrate", "-e", "1", "-d", "1e-6", "-s", "1e308"],
        2,
        "sensitivity must be small enough for a finite σ at epsilon=1.0, delta=1e-06, got 1e+308",
    ),
    (
        "convert: a sensitivity whose σ overflows names the sensitivity",
        lambda _: ["convert", "--mu", "1e-10", "-s", "1e308"],
        2,
        "sensitivity must be small enough for a finite σ at mu=1e-10, got 1e+308",
    ),
    (
        "release: a missing privacy-unit column names privacy_unit",
        lambda p: ["release", _spec(p, 'privacy_unit = "nobody"'), "--data", DATA],
        2,
        "privacy_unit must be a column among",
    ),
    (
        "release: a memory_limit below DuckDB's minimum for a thread is refused",
        lambda p: [
            "release",
            _spec(p, 'privacy_unit = "user"\nmemory_limit = "1KB"'),
            "--data",
            _big_csv(p),
        ],
        2,
        "memory_limit must be at least 125 MB (DuckDB's documented minimum for one thread",
    ),
    (
        "release: no such spec",
        lambda p: ["release", str(p / "missing.toml"), "--data", DATA],
        2,
        "spec must be an existing TOML file",
    ),
    (
        "release: no such data file",
        lambda p: ["release", SPEC, "--data", str(p / "missing.csv")],
        2,
        "data must be an existing file",
    ),
    (
        "release: a spec that is not TOML",
        lambda p: ["release", _events(p, "not toml ["), "--data", DATA],
        2,
        "error: spec must be valid TOML",
    ),
    (
        "release: a query without its column",
        lambda p: [
            "release",
            _events(p, SPEC_MEAN_WITHOUT_COLUMN),
            "--data",
            DATA,
        ],
        2,
        "error: query[0] (mean): columns must be 1 column(s) for mean",
    ),
    (
        "ledger show: not a ledger",
        lambda p: ["ledger", "show", _events(p, "x")],
        4,
        "events.toml",
    ),
    (
        "release: an unknown engine",
        lambda _: ["release", SPEC, "--data", DATA, "--engine", "oracle"],
        2,
        "engine must be 'duckdb' or 'spark', got 'oracle'",
    ),
    (
        "release: no such ledger",
        lambda p: ["release", SPEC, "--data", DATA, "--ledger", str(p / "missing.db")],
        2,
        "(create one with `gaussdp ledger init PATH --epsilon E --delta D`), got '",
    ),
    (
        "ledger show: no such ledger",
        lambda p: ["ledger", "show", str(p / "missing.db")],
        2,
        "error: ledger must be an existing ledger file (create one with `gaussdp ledger init",
    ),
    (
        "explain: no such ledger",
        lambda p: ["explain", "--ledger", str(p / "missing.db")],
        2,
        "(create one with `gaussdp ledger init",
    ),
    (
        "release: --out in a folder that does not exist",
        lambda p: ["release", SPEC, "--data", DATA, "--out", str(p / "no" / "r.csv")],
        2,
        "--out must be in an existing folder",
    ),
    (
        "release: --out with an unknown suffix",
        lambda p: ["release", SPEC, "--data", DATA, "--out", str(p / "r.xlsx")],
        2,
        "--out must end in .csv, .parquet or .json",
    ),
    (
        "release: --out is a folder",
        lambda p: ["release", SPEC, "--data", DATA, "--out", str(p)],
        2,
        "--out must be a file path",
    ),
    (
        "ledger init: the file exists",
        lambda p: ["ledger", "init", _events(p, ""), "--epsilon", "1", "--delta", "1e-6"],
        2,
        "ledger must be a new file",
    ),
    (
        "ledger init: no budget",
        lambda p: ["ledger", "init", str(p / "b.db")],
        2,
        "error:",
    ),
]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [pytest.param(args, code, message, id=what) for what, args, code, message in CASES],
)
def test_failure_is_one_line_with_its_exit_status(
    tmp_path: Path, args: Callable[[Path], list[str]], code: int, message: str
) -> None:
    assert_one_line(invoke(*args(tmp_path)), code, message)


def test_duckdb_out_of_memory_exits_4(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As --help says memory failures do. A limit this small is refused (above); DuckDB
    # runs out of memory with the floor lowered.
    from gaussdp.release import engines

    monkeypatch.setattr(engines, "THREAD_MEMORY", 1)
    spec = _spec(tmp_path, 'privacy_unit = "user"\nmemory_limit = "1KB"')
    result = invoke("release", spec, "--data", _big_csv(tmp_path))
    assert_one_line(result, 4, "duckdb failed reading the data: it ran out of memory")


def test_bad_out_path_spends_nothing(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    result = invoke(
        "release", SPEC, "--data", DATA, "--ledger", str(ledger), "--out", "/nonexistent/r.csv"
    )
    assert_one_line(result, 2, "--out must be in an existing folder, got '/nonexistent/r.csv'")
    assert _entries(ledger) == []


def test_budget_refusal_exits_3(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, epsilon="0.1")
    result = invoke("release", SPEC, "--data", DATA, "--ledger", str(ledger))
    assert_one_line(result, 3, "refused:")
    assert _entries(ledger) == []


def test_missing_extra_names_the_checkout_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # as if the spark extra were absent
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    result = invoke("release", SPEC, "--data", "visits", "--engine", "spark")
    assert_one_line(result, 4, "pip install '.[spark]'")
    assert result.stderr.count("from a gaussdp checkout") == 1  # phrased once, in gaussdp.errors


@pytest.mark.parametrize(
    "how", ["KeyboardInterrupt", "duckdb.InterruptException", "RuntimeError: Query interrupted"]
)
def test_interrupt_during_release_keeps_the_reservation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Ctrl-C after the ledger reserved the cost, while noise is drawn: exit 130, one line."""
    import duckdb

    from gaussdp.release import _noise

    def interrupt(*args: object, **kwargs: object) -> None:
        if how == "KeyboardInterrupt":
            raise KeyboardInterrupt
        if how == "RuntimeError: Query interrupted":  # what DuckDB's fetchall raises on Ctrl-C
            raise RuntimeError("Query interrupted")
        raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")

    ledger = _ledger(tmp_path)
    monkeypatch.setattr(_noise, "draw", interrupt)
    result = invoke("release", SPEC, "--data", DATA, "--ledger", str(ledger))
    assert_one_line(
        result, 130, f"interrupted; nothing released; the reservation stays counted in {ledger}"
    )
    assert [e["status"] for e in _entries(ledger)] == ["reserved"]


def test_write_failure_after_commit_leaves_a_recovery_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gaussdp.cli import release as release_cli

    def disk_full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    ledger = _ledger(tmp_path)
    monkeypatch.setattr(release_cli, "write_output", disk_full)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "r.csv"
    result = invoke("release", SPEC, "--data", DATA, "--ledger", str(ledger), "--out", str(out))
    assert_one_line(result, 4, f"could not write {out} (No space left on device)")
    assert "the spend is committed in the ledger; the results are saved in" in result.stderr
    recovered = sorted(tmp_path.glob("gaussdp-recovered-*.json"))
    assert len(recovered) == 1
    assert str(recovered[0]) in result.stderr
    payload = json.loads(recovered[0].read_text(encoding="utf-8"))
    assert {"results", "report"} == set(payload)
    assert len(payload["results"]) > 0
    assert [e["status"] for e in _entries(ledger)] == ["committed"]


def test_an_unwritable_report_is_refused_before_the_spend(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    report = tmp_path / "missing" / "r.html"
    result = invoke(
        "release", SPEC, "--data", DATA, "--ledger", str(ledger), "--report", str(report)
    )
    assert_one_line(result, 2, "--report must be in an existing folder")
    assert _entries(ledger) == []


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["ledger", "show", "{ledger}", "--report", "{tmp}/missing/r.html"], "--report must be in"),
        (["ledger", "show", "{ledger}", "--report", "{tmp}"], "--report must be a file path"),
        (["ledger", "show", "{ledger}", "--report", "{ledger}"], "--report must be a different"),
        (["plot", "cks-fig1", "--out", "{tmp}/missing/f.png"], "--out must be in"),
        (["plot", "cks-fig1", "--out", "{tmp}/f.png", "--table", "{tmp}/no/t.csv"], "--table must"),
        (["plot", "cks-fig1", "--out", "{tmp}/f.png", "--table", "{tmp}/f.png"], "--table must"),
    ],
)
def test_an_unwritable_output_path_is_one_template_line(
    tmp_path: Path, command: list[str], message: str
) -> None:
    # Regression: `ledger show --report /nonexistent/x.html` printed a raw [Errno 2] line.
    ledger = _ledger(tmp_path)
    args = [a.format(ledger=ledger, tmp=tmp_path) for a in command]
    result = invoke(*args)
    assert_one_line(result, 2, message)
    assert "Errno" not in result.output
    assert _entries(ledger) == []  # and the ledger is untouched


def test_a_failing_output_write_is_one_template_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The checks pass, then the disk fails: still the one line (exit 2), not [Errno 28].
    def full(self: Path, *args: object, **kwargs: object) -> int:
        raise OSError(28, "No space left on device", str(self))

    ledger = _ledger(tmp_path)
    monkeypatch.setattr(Path, "write_text", full)
    result = invoke("ledger", "show", str(ledger), "--report", str(tmp_path / "r.html"))
    assert_one_line(result, 2, "--report must be writable, got")
    assert "No space left on device" in result.stderr
    assert "Errno" not in result.stderr


def test_an_output_on_an_input_or_on_the_other_output_is_refused_before_the_spend(
    tmp_path: Path,
) -> None:
    # Regression: --report on the ledger passed check_writable, and the HTML then erased
    # the ledger's history (re-initialised, its whole budget back).
    ledger = _ledger(tmp_path)
    before = ledger.read_bytes()
    alias = tmp_path / "sub" / ".." / ledger.name
    (tmp_path / "sub").mkdir()
    same = str(tmp_path / "same.json")
    for extra, message in (
        (["--report", str(alias)], "--report must be a different file from --ledger"),
        (["--out", same, "--report", same], "--report must be a different file from --out"),
        (["--report", DATA], "--report must be a different file from --data"),
        (["--report", SPEC], "--report must be a different file from spec"),
    ):
        result = invoke("release", SPEC, "--data", DATA, "--ledger", str(ledger), *extra)
        assert_one_line(result, 2, message)
    assert ledger.read_bytes() == before
    assert _entries(ledger) == []
    assert not (tmp_path / "same.json").exists()


def test_an_output_among_the_files_a_data_glob_or_folder_reads_is_refused(
    tmp_path: Path,
) -> None:
    # Regression: --data was compared as a plain path, so a glob or a folder never matched
    # an output, and --out could overwrite one of the data files (or a file the next run
    # reads as data).
    data = tmp_path / "data"
    (data / "2026").mkdir(parents=True)
    part = data / "2026" / "part-0.csv"
    part.write_bytes(Path(DATA).read_bytes())
    pattern = str(data / "*" / "part-*.csv")
    for source, out, message in (
        (pattern, part, "--out must be a different file from --data"),
        (str(data), data / "new.parquet", "the next run would read it as data"),
    ):
        result = invoke("release", SPEC, "--data", source, "--out", str(out))
        assert_one_line(result, 2, message)
    assert part.read_bytes() == Path(DATA).read_bytes()
    assert not (data / "new.parquet").exists()


def test_check_distinct_reads_data_as_the_engines_do(tmp_path: Path) -> None:
    from gaussdp.cli._output import CliError
    from gaussdp.cli.release import check_distinct

    (tmp_path / "a.csv").write_text("x\n1\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    # Outputs the data argument neither names nor would match pass.
    for data, out in (
        (str(tmp_path / "*.csv"), tmp_path / "report.html"),
        (str(tmp_path / "*.csv"), tmp_path / "sub" / "b.csv"),  # `*` stays in one folder
        (str(tmp_path), tmp_path / "report.html"),  # not a data suffix
        ("s3a://bucket/a.csv", tmp_path / "a.csv"),  # no local file
        ("hdfs://host/" + str(tmp_path / "a.csv"), tmp_path / "a.csv"),
        ("-", tmp_path / "a.csv"),  # standard input
    ):
        check_distinct({"--out": out}, {"--data": data})
    for data, out in (
        (str(tmp_path), tmp_path / "a.csv"),
        (str(tmp_path / "**" / "*.csv"), tmp_path / "a.csv"),
        (f"file://{tmp_path / 'a.csv'}", tmp_path / "a.csv"),
        (str(tmp_path / "?.csv"), tmp_path / "a.csv"),
        (str(tmp_path / "[ab].csv"), tmp_path / "b.csv"),
        (str(tmp_path / "**" / "*.csv"), tmp_path / "sub" / "b.csv"),
        (str(tmp_path), tmp_path / "sub" / "b.parquet"),
        (f"file://{tmp_path / '*.csv'}", tmp_path / "b.csv"),
        (str(tmp_path / "sub" / ".." / "a.csv"), tmp_path / "a.csv"),
    ):
        with pytest.raises(CliError, match="--out must be"):
            check_distinct({"--out": out}, {"--data": data})


def test_check_distinct_follows_symlinks_as_the_glob_does(tmp_path: Path) -> None:
    from gaussdp.cli._output import CliError
    from gaussdp.cli.release import check_distinct

    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (real / "a.csv").write_text("x\n1\n", encoding="utf-8")
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "s").symlink_to(real / "sub")
    (real / "dangling.csv").symlink_to(tmp_path / "elsewhere.csv")
    # Each output would be read as data by the next run (the engines' glob walks the
    # symlink; a dangling symlink in the folder is written through and then read).
    for data, out in (
        (str(tmp_path / "link" / "*.csv"), real / "new.csv"),
        (str(tmp_path / "s" / ".." / "*.csv"), real / "new.csv"),
        (str(real), real / "dangling.csv"),
    ):
        with pytest.raises(CliError, match="--out must be"):
            check_distinct({"--out": out}, {"--data": data})


def test_a_report_failure_after_the_spend_says_the_spend_is_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = _ledger(tmp_path)
    report = tmp_path / "r.html"
    write_text = Path.write_text

    def disk_full(path: Path, *args: Any, **kwargs: Any) -> int:
        if path == report:
            raise OSError(28, "No space left on device")
        return write_text(path, *args, **kwargs)

    from gaussdp.audit import report as report_module

    monkeypatch.setattr(Path, "write_text", disk_full)
    monkeypatch.setattr(report_module, "html_report", lambda *args, **kwargs: "<html></html>")
    monkeypatch.chdir(tmp_path)
    result = invoke(
        "release", SPEC, "--data", DATA, "--ledger", str(ledger), "--report", str(report)
    )
    assert_one_line(result, 4, f"could not write {report} (No space left on device)")
    assert "the spend is committed in the ledger; the results are saved in" in result.stderr
    (recovered,) = tmp_path.glob("gaussdp-recovered-*.json")
    assert len(json.loads(recovered.read_text(encoding="utf-8"))["results"]) > 0
    assert [e["status"] for e in _entries(ledger)] == ["committed"]


def test_out_memory_in_the_release_says_what_to_change(monkeypatch: pytest.MonkeyPatch) -> None:
    from gaussdp.release import _noise

    def no_memory(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(_noise, "draw", no_memory)
    result = invoke("release", SPEC, "--data", DATA)
    assert_one_line(
        result,
        4,
        "out of memory: an allocation failed; the engine or the per-group result did not fit",
    )


def test_a_bug_is_one_line_and_verbose_shows_the_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gaussdp.cli import calibrate

    def broken(*args: object) -> None:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(calibrate, "calibrate_rows", broken)
    result = invoke("calibrate", "-e", "1", "-d", "1e-6")
    assert_one_line(result, 1, "internal error: ZeroDivisionError: float division by zero")
    assert "--verbose" in result.stderr
    verbose = invoke("--verbose", "calibrate", "-e", "1", "-d", "1e-6")
    assert verbose.exit_code == 1
    assert "Traceback" in verbose.stderr
    assert verbose.stderr.strip().splitlines()[-1].startswith("internal error:")


def test_usage_errors_exit_2_without_traceback() -> None:
    for args in (["calibrate", "-e", "1", "-d", "1e-6", "--json", "true"], ["nonsense"]):
        result = invoke(*args)
        assert result.exit_code == 2
        assert "Traceback" not in result.output


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mechanism", "scale", "count", "pure_bound"),
    [("laplace", "0.0001", 100000, 1e9), ("discrete_laplace", '"0.01"', 1000, 1e5)],
)
def test_an_extreme_laplace_composition_gets_an_answer(
    tmp_path: Path, mechanism: str, scale: str, count: int, pure_bound: float
) -> None:
    """Losses far past the PLD's float range once raised; now a bracketed ε comes back.

    Each step is (Δ/b)-DP, so k steps are (k·Δ/b)-DP: the certified upper bound
    may not be looser than that by more than round-off.
    """
    text = f'[[event]]\nmechanism = "{mechanism}"\nscale = {scale}\ncount = {count}\n'
    result = invoke("account", _events(tmp_path, text), "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert 0 < answer["epsilon_lower"] <= answer["epsilon_upper"] <= pure_bound * (1 + 1e-6)


def test_a_large_composition_fits_a_1_gib_address_space(tmp_path: Path) -> None:
    """The composition that used to die with MemoryError now fits (bounded PLD grid)."""
    events = _events(
        tmp_path,
        '[[event]]\nmechanism = "gaussian"\nsigma = 0.5\nsample_rate = 0.5\ncount = 100000\n',
    )

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))

    proc = subprocess.run(
        [sys.executable, "-m", "gaussdp", "account", events, "--json"],
        capture_output=True,
        text=True,
        preexec_fn=limit_memory,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert isinstance(payload["epsilon_upper"], float)
    assert payload["epsilon_lower"] <= payload["epsilon_upper"]


def test_a_grid_too_fine_for_memory_is_bad_input(tmp_path: Path) -> None:
    events = _events(
        tmp_path,
        '[[event]]\nmechanism = "gaussian"\nsigma = 0.5\nsample_rate = 0.5\ncount = 100000\n',
    )
    result = invoke("account", events, "--value-discretization", "1e-9")
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "value_discretization" in lines[0]
    assert "memory" in lines[0]


def test_out_of_memory_in_the_accountant_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gaussdp.accounting import PLDAccountant

    def no_memory(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(PLDAccountant, "_build", no_memory)
    events = _events(
        tmp_path,
        '[[event]]\nmechanism = "gaussian"\nsigma = 0.5\nsample_rate = 0.5\ncount = 1000\n',
    )
    result = invoke("account", events)
    assert result.exit_code == 4, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("out of memory:")
    assert "--value-discretization" in lines[0]


# -- Bad input that used to spend budget (issue 12, item 3) ------------------------------
_BASE = 'privacy_unit = "user"\nmax_groups_per_unit = 1\nmax_rows_per_group = 1\n'
_EPS = "[budget]\nepsilon = 1.0\ndelta = 1e-6\n"
_SUM = '[[query]]\nstatistic = "sum"\ncolumn = "minutes"\nbounds = [0, 60]\n'


def _csv(rows: int, last: str) -> str:
    return "user,minutes\n" + "".join(f"{i},{i % 60}\n" for i in range(rows)) + last + "\n"


#: (case, spec, data file contents, text that must not appear on stderr)
BAD_RELEASES: list[tuple[str, str, str | bytes, str | None]] = [
    # (A string far beyond DuckDB's sample rows is no refusal: a CSV's summed column is
    # converted with TRY_CAST, tests/release/test_bad_input.py.)
    # (A ragged line, such as line 60,002 with three fields, is no refusal either: it is
    # dropped, tests/release/test_bad_input.py.)
    ("0-byte file", _BASE + _EPS + _SUM, b"", None),
    ("binary file", _BASE + _EPS + _SUM, bytes(range(256)) * 16, None),
    ("corrupt parquet", _BASE + _EPS + _SUM, b"PAR1" + bytes(range(7, 250)) + b"PAR1", None),
    ("rho 1e-299", _BASE + "[budget]\nrho = 1e-299\n" + _SUM, _csv(2, "9,5"), None),
    ("mu 1e-150", _BASE + "[budget]\nmu = 1e-150\n" + _SUM, _csv(2, "9,5"), None),
    (
        "bounds 1e308",
        _BASE + _EPS + _SUM.replace("[0, 60]", "[0, 1e308]"),
        _csv(2, "9,5"),
        None,
    ),
    (
        "mixed-type keys",
        _BASE + _EPS + '[[query]]\nstatistic = "count"\nby = "minutes"\nkeys = [1, "1"]\n',
        _csv(2, "9,5"),
        None,
    ),
]


@pytest.mark.parametrize(
    ("spec", "data", "secret"),
    [case[1:] for case in BAD_RELEASES],
    ids=[case[0] for case in BAD_RELEASES],
)
def test_bad_release_input_is_refused_before_the_ledger_is_charged(
    spec: str, data: str | bytes, secret: str | None, tmp_path: Path
) -> None:
    ledger = _ledger(tmp_path)
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(spec, encoding="utf-8")
    suffix = ".parquet" if isinstance(data, bytes) and data.startswith(b"PAR1") else ".csv"
    data_path = tmp_path / f"data{suffix}"
    if isinstance(data, bytes):
        data_path.write_bytes(data)
    else:
        data_path.write_text(data, encoding="utf-8")
    result = invoke("release", str(spec_path), "--data", str(data_path), "--ledger", str(ledger))
    assert_one_line(result, 2, "error: ")
    assert "Original Line" not in result.stderr
    if secret is not None:
        assert secret not in result.stderr
    assert _entries(ledger) == []
