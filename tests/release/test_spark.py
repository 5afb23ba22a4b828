"""Spark runs the same SQL as DuckDB and returns identical pre-noise aggregates."""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from release_reference import arrow_table, make_rows

from gaussdp.budget import Budget
from gaussdp.release import Release
from gaussdp.release.core import _aggregate

pytestmark = pytest.mark.spark


def build(source: object, engine: str) -> Release:
    # L0 = 3 groups of "page" and 4 bins: no unit exceeds L0 in the page groupings, so
    # bounding is deterministic there; the histogram and vector use L0 = 3 too,
    # so they are compared on a table where units have at most 3 of them.
    return (
        Release(
            source,
            privacy_unit="user",
            budget=Budget(epsilon=1.0, delta=1e-6),
            max_groups_per_unit=3,
            max_rows_per_group=2,
            engine=engine,
        )
        .count(by="page")
        .mean("minutes", bounds=(0, 100), by="page")
        .sum("minutes", bounds=(-5, 50))
        .vector_mean(["minutes", "score"], norm=40.0, by="page", keys=["a", "b"])
        .histogram("minutes", bins=[0, 50, 100])
    )


def one_row_per_unit(path: Path, engine: str) -> Release:
    """A release of the CSV ``path`` on ``engine``, bounded to one row of one group a unit."""
    return Release(
        str(path),
        privacy_unit="user",
        budget=Budget(epsilon=1.0, delta=1e-6),
        max_groups_per_unit=1,
        max_rows_per_group=1,
        engine=engine,
    )


def normalise(results: list[list[tuple[Any, ...]]]) -> list[list[tuple[Any, ...]]]:
    return [
        sorted(tuple(int(v) if isinstance(v, int) else v for v in row) for row in rows)
        for rows in results
    ]


def test_duckdb_and_spark_agree(spark: Any, tmp_path: Path) -> None:
    rows = make_rows()
    table = arrow_table(rows)
    # NaN/NULL: keep only NULLs so that every input route sees the same values.
    rows = [r for r in rows if r["minutes"] is None or r["minutes"] == r["minutes"]]
    table = arrow_table(rows)
    _, duck = _aggregate(build(table, "duckdb"))
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    _, from_file = _aggregate(build(path, "spark"))
    assert normalise(from_file) == normalise(duck)
    frame = spark.read.parquet(str(path))
    frame.createOrReplaceTempView("visits_for_gaussdp_test")
    _, from_table = _aggregate(build("visits_for_gaussdp_test", "spark"))
    assert normalise(from_table) == normalise(duck)


def test_spark_run_end_to_end(spark: Any, no_noise: None, tmp_path: Path) -> None:
    rows = make_rows(n=200)
    table = arrow_table([r for r in rows if r["minutes"] is None or r["minutes"] == r["minutes"]])
    duck = build(table, "duckdb").run().frame
    got = build(spark.createDataFrame(table.to_pandas()), "spark").run().frame
    key = ["statistic", "page", "bin"]
    assert (
        got.sort_values(key, na_position="first")
        .reset_index(drop=True)
        .equals(duck.sort_values(key, na_position="first").reset_index(drop=True))
    )


def test_spark_missing_table(spark: Any) -> None:
    release = Release(
        "no_such_table_xyz",
        privacy_unit="u",
        budget=Budget(rho=1.0),
        max_groups_per_unit=1,
        max_rows_per_group=1,
        engine="spark",
    ).count()
    with pytest.raises(FileNotFoundError, match="Spark table"):
        release.run()


def test_cli_release_on_spark(spark: Any, tmp_path: Path) -> None:
    import json

    import typer
    from typer.testing import CliRunner

    from gaussdp.cli.release import register

    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """gaussdp (test app)."""

    register(app)
    examples = Path(__file__).parents[2] / "examples"
    r = CliRunner().invoke(
        app,
        [
            "release",
            str(examples / "visits.toml"),
            "--data",
            str(examples / "visits.csv"),
            "--engine",
            "spark",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["report"]["epsilon"] <= 1.0


def test_new_statistics_agree_on_duckdb_and_spark(spark: Any, tmp_path: Path) -> None:
    """Variance, quantile trees, distinct units and per-query L0/L∞: the same pre-noise rows.

    Every L0 is at least the 3 pages, and the trees' L∞ exceeds every unit's rows (the
    engines' hashes differ, so the L0 choice and a tree's systematic sample would
    differ when a unit has more groups than L0 or more rows than L∞; see ``build``)."""
    rows = make_rows(n=300)
    table = arrow_table([r for r in rows if r["minutes"] is None or r["minutes"] == r["minutes"]])
    path = tmp_path / "stats.parquet"
    pq.write_table(table, path)

    def stats(source: object, engine: str) -> Release:
        return (
            Release(
                source,
                privacy_unit="user",
                budget=Budget(epsilon=1.0, delta=1e-6),
                max_groups_per_unit=3,
                max_rows_per_group=2,
                engine=engine,
            )
            .variance("minutes", bounds=(-5, 100), by="page", max_rows_per_group=3)
            .distinct_units(by="page", keys=["a", "b", "c"], max_groups_per_unit=4)
            .quantile(
                "minutes",
                [0.5],
                bounds=(0, 100),
                by="page",
                resolution=16,
                branching=2,
                max_rows_per_group=50,
            )
            .median("minutes", bounds=(0, 100), max_rows_per_group=50)
        )

    from gaussdp.random import ChaCha20Random

    _, duck = _aggregate(stats(table, "duckdb"), rng=ChaCha20Random(2))
    _, on_spark = _aggregate(stats(path, "spark"), rng=ChaCha20Random(2))
    assert normalise(on_spark) == normalise(duck)
    assert len(duck) == 4  # four SQL passes …
    assert all(duck)  # … none empty


def test_no_part_of_a_row_in_a_spark_errors_chain(spark: Any, tmp_path: Path) -> None:
    # Regression: PySpark's exception kept the JVM's message (which quotes the value) as
    # the __context__ of EngineError, and its own __context__ was the Py4JJavaError.
    from test_bad_input import chained, reachable

    from gaussdp.errors import EngineError
    from gaussdp.release.engines import SparkEngine

    path = tmp_path / "t.csv"
    path.write_text("user,minutes\n1,7-secret-unit\n")
    engine = SparkEngine(str(path))
    try:
        view = engine.register({"x": "minutes"})
        with pytest.raises(EngineError) as caught:  # ANSI mode: the cast raises, quoting it
            engine.query(f"SELECT CAST(x AS INT) AS x FROM {view}")
        # While the session is open (its objects' repr); the secret is in the data only.
        everything = reachable(caught.value)
    finally:
        engine.close()
    text = chained(caught.value)
    assert "secret" not in text
    assert "\n" not in str(caught.value)
    assert "message withheld" in text
    # Regression: PySpark's exception (its text from the JVM) was a local of contextlib's
    # __exit__ frame, in EngineError's traceback.
    assert "secret" not in everything


def write_messy_csv(path: Path) -> Path:
    """make_rows as a CSV, plus numbers the engines' own casts read differently and
    malformed lines (each for a unit of its own, one row: bounding stays deterministic)."""
    lines = ["user,page,minutes,score"]
    for r in make_rows():
        cells = [r["user"], r["page"], r["minutes"], r["score"]]
        lines.append(",".join("" if c is None else str(c) for c in cells))
    odd = ["1_000", '"1,000"', " 12 ", "+5", "1e3", "0x10", "inf", "nan", "Infinity", "1e999"]
    odd += [".5", "5.", "1d", "1f", "٣", "12abc", '" 7"', "-0", "1e-999", '"3\n4"']
    lines += [f"{1000 + i},a,{v},{v}" for i, v in enumerate(odd)]
    lines += ["2000,a,1,2,3", "2001,a", "2002,\ufffd,1,1"]  # ragged lines; U+FFFD
    lines += ['2006,"a,1,1', "2007,b,1,1", '2008,a"b,1,1', '"2009","a",1,"1"']  # quotes'
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with path.open("ab") as handle:
        handle.write(b"2003,\xff,1,1\n")  # invalid UTF-8
        handle.write(b'2004,"a,1,1\n2005,b,1,1\r\n2010,b,1,1\r')  # an unclosed quote; \r
    return path


def test_duckdb_and_spark_read_a_messy_csv_alike(spark: Any, tmp_path: Path) -> None:
    # One reading of a CSV on both engines: the same dialect, malformed lines dropped
    # (not refused), one rule for numbers (docs/release.md, "Reading a CSV").
    path = write_messy_csv(tmp_path / "messy.csv")
    _, duck = _aggregate(build(str(path), "duckdb"))
    _, spark_rows = _aggregate(build(str(path), "spark"))
    assert normalise(spark_rows) == normalise(duck)
    assert any(rows for rows in duck)


def test_an_unclosed_quote_drops_its_own_line_on_spark(spark: Any, tmp_path: Path) -> None:
    # Neighbouring tables: 60,000 rows with and without one line whose quote never
    # closes, in the middle: the same pre-noise aggregates (one record a line).
    rows = ["user,page,minutes,score"] + [f"{i},a,{i % 60},1" for i in range(60_000)]
    without = tmp_path / "without.csv"
    without.write_text("\n".join(rows) + "\n")
    with_bad = tmp_path / "with_bad.csv"
    with_bad.write_text("\n".join([*rows[:30_001], '7,"a,1,1', *rows[30_001:]]) + "\n")
    _, plain = _aggregate(build(str(without), "spark"))
    _, bad = _aggregate(build(str(with_bad), "spark"))
    assert normalise(bad) == normalise(plain)


def test_spark_reads_csv_numbers_as_duckdb(spark: Any, tmp_path: Path) -> None:
    from test_bad_input import CSV_READ, CSV_VALUES

    from gaussdp.release.engines import SparkEngine

    path = tmp_path / "t.csv"
    path.write_text("user,minutes\n" + "".join(f"{i},{v}\n" for i, v in enumerate(CSV_VALUES)))
    engine = SparkEngine(str(path))
    try:
        engine.declare({"minutes": "DOUBLE"})
        view = engine.register({"i": "user", "v": "minutes"})
        got = [row[1] for row in sorted(engine.query(f"SELECT CAST(i AS INT), v FROM {view}"))]
    finally:
        engine.close()
    assert got == CSV_READ


def test_spark_reads_parquet_files_that_disagree_as_duckdb(
    spark: Any, tmp_path: Path, no_noise: None
) -> None:
    from test_inputs import mixed_parquet, mixed_sums

    parts = mixed_parquet(tmp_path / "parts")
    assert mixed_sums(parts, "spark") == mixed_sums(parts, "duckdb") == [84.5, 7.0]
    glob = str(parts / "[ac].parquet")
    assert mixed_sums(glob, "spark") == mixed_sums(glob, "duckdb") == [77.5, 4.0]


def test_spark_reads_object_and_category_columns_as_duckdb(spark: Any, no_noise: None) -> None:
    # One rule for a pandas object value's text on both engines (7 and 7.0 one unit; a
    # value with no text NULL, never a refusal), and a category column as its values.
    from decimal import Decimal

    from test_inputs import SEVEN, counts

    odd = [[7], Decimal("sNaN"), b"\xff", "\udcff"]
    users = pd.Series([*SEVEN, "x", *odd], dtype=object)
    frame = pd.DataFrame({"user": users, "page": ["a"] * 6 + ["b"] * 3 + ["b"] * len(odd)})
    assert counts(frame, "spark") == counts(frame, "duckdb") == [1.0, 2.0]
    categories = frame.iloc[:9].astype({"page": "category"})
    categories["n"] = pd.Series(range(9), dtype="category")
    assert counts(categories, "spark") == counts(categories, "duckdb") == [1.0, 2.0]


def test_spark_reads_a_column_only_one_file_has_as_duckdb(
    spark: Any, tmp_path: Path, no_noise: None
) -> None:
    from test_inputs import per_unit_files, sums_by_k

    for with_ten, want in ((False, [0.0]), (True, [0.75])):
        parts = per_unit_files(tmp_path / str(with_ten), with_ten=with_ten)
        assert sums_by_k(parts, "spark") == sums_by_k(parts, "duckdb") == want


def test_spark_reads_csv_files_whose_headers_differ_as_duckdb(
    spark: Any, tmp_path: Path, no_noise: None
) -> None:
    from test_inputs import FRAME, bad_headers, counts

    parts = tmp_path / "parts"
    parts.mkdir()
    FRAME.to_csv(parts / "a.csv", index=False)
    pd.DataFrame({"page": ["b", "a"], "note": ["x", "y"], "user": [9, 10]}).to_csv(
        parts / "b.csv", index=False
    )
    pd.DataFrame({"user": [11]}).to_csv(parts / "c.csv", index=False)
    (parts / "d.csv").write_bytes(b"")
    (parts / "e.tsv").write_text("page\tuser\nb\t12\na,b\t13\n")  # its own separator
    for name, data in bad_headers().items():  # each file's own header invalid: no rows
        (parts / name).write_bytes(data)
    assert counts(parts, "spark") == counts(parts) == [5.0, 4.0]


def release_on_spark(data: Path, cwd: Path) -> tuple[int, list[str]]:
    """``gaussdp release examples/visits.toml --data data --engine spark`` in a process of
    its own (a Spark session gaussdp starts): its exit status and stderr lines, less the
    JVM's incubator warning (Java's module system prints it before any logging starts)."""
    import os
    import subprocess
    import sys

    import gaussdp

    examples = Path(__file__).parents[2] / "examples"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    env["PYTHONPATH"] = str(Path(gaussdp.__file__).parents[1])
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    command = [sys.executable, "-m", "gaussdp", "--quiet", "release"]
    command += [str(examples / "visits.toml"), "--data", str(data)]
    run = subprocess.run(
        [*command, "--engine", "spark", "--json"],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )
    lines = [x for x in run.stderr.splitlines() if "Using incubator modules" not in x]
    return run.returncode, lines


def test_cli_on_spark_prints_no_spark_log_lines(tmp_path: Path) -> None:
    # Issue 12 item 9: without --verbose the CLI's session keeps Spark's own log lines
    # (log4j warnings, "Setting default log level ...") off the terminal.
    examples = Path(__file__).parents[2] / "examples"
    code, lines = release_on_spark(examples / "visits.csv", tmp_path)
    assert code == 0, lines
    assert lines == []
    # Regression: a failed read printed Spark's ERROR lines and a Java stack trace
    # (43 lines for a truncated .csv.gz, now refused before Spark reads it) before
    # gaussdp's one line. A Parquet page Spark cannot decompress (its footer is whole):
    corrupt = tmp_path / "visits.parquet"
    pq.write_table(pa.Table.from_pandas(pd.read_csv(examples / "visits.csv")), corrupt)
    page = pq.ParquetFile(corrupt).metadata.row_group(0).column(3).data_page_offset
    data = bytearray(corrupt.read_bytes())
    data[page + 30 : page + 200] = bytes(b ^ 0x5A for b in data[page + 30 : page + 200])
    corrupt.write_bytes(bytes(data))
    code, lines = release_on_spark(corrupt, tmp_path)
    assert code == 2
    assert len(lines) == 1
    assert lines[0].startswith("error: spark failed reading the data"), lines[0]


def test_spark_reads_an_excel_csv_and_a_bad_second_line_as_duckdb(
    spark: Any, tmp_path: Path
) -> None:
    # A byte-order mark and CRLF (Excel's "CSV UTF-8"), a repeated header with and
    # without a mark, a Latin-1 line right after the header, lines ending in 0x01: each
    # engine reads the table as the one without them (neighbouring tables alike).
    from test_bad_input import write_excel_csv

    rows = ["user,page,minutes,score", *(f"{i},a,{i % 60},1" for i in range(100))]
    plain = tmp_path / "plain.csv"
    plain.write_text("\n".join(rows) + "\n")
    extra = ["user,page,minutes,score", "\ufeffuser,page,minutes,score"]
    excel = write_excel_csv(tmp_path / "excel.csv", [*rows, *extra])
    latin = tmp_path / "latin.csv"
    odd = b"caf\xe9,a,1,1\n7,a,1,1\x01\n8,a,2,2\x01\x01\n"
    latin.write_bytes(b"user,page,minutes,score\n" + odd + plain.read_bytes().split(b"\n", 1)[1])
    _, want = _aggregate(build(str(plain), "duckdb"))
    for path in (excel, latin):
        for engine in ("duckdb", "spark"):
            _, got = _aggregate(build(str(path), engine))
            assert normalise(got) == normalise(want), (path.name, engine)


def test_spark_drops_empty_lines_of_a_one_column_csv(spark: Any, tmp_path: Path) -> None:
    from test_bad_input import csv_users

    from gaussdp.release.engines import SparkEngine

    one = tmp_path / "one.csv"
    one.write_bytes(b"user\n1\n\n2\n\r\n3\x01\n")
    assert csv_users(SparkEngine(str(one))) == ["1", "2"]


def test_spark_reads_a_csv_at_the_column_cap_with_quoted_rows(spark: Any, tmp_path: Path) -> None:
    # A line of CSV_MAX_COLUMNS quoted fields splits on Spark (2,000 overflowed Java's
    # regex stack): one unit's quoted row never turns a release into a failure.
    from gaussdp.release.engines import CSV_MAX_COLUMNS

    names = ["user", "minutes", *(f"c{i}" for i in range(CSV_MAX_COLUMNS - 2))]
    head = ",".join(names) + "\n" + "1,5" + ",x" * (CSV_MAX_COLUMNS - 2) + "\n"
    quoted = tmp_path / "quoted.csv"
    quoted.write_text(head + ",".join(['"2"', '"7"'] + ['"q""q"'] * (CSV_MAX_COLUMNS - 2)) + "\n")
    plain = tmp_path / "plain.csv"
    plain.write_text(head + "2,7" + ",q" * (CSV_MAX_COLUMNS - 2) + "\n")

    def sums(path: Path, engine: str) -> list[list[tuple[Any, ...]]]:
        release = one_row_per_unit(path, engine).sum("minutes", bounds=(0, 60))
        return normalise(_aggregate(release)[1])

    assert sums(quoted, "spark") == sums(quoted, "duckdb") == sums(plain, "duckdb")


@pytest.mark.parametrize("kind", ["DATE", "TIMESTAMP", "BOOLEAN"])
def test_spark_reads_csv_dates_timestamps_and_booleans_as_duckdb(
    spark: Any, tmp_path: Path, kind: str
) -> None:
    # Value by value, the same CSV on both engines and the stated answer; the session's
    # time zone (UTC here) never shifts a timestamp.
    from test_bad_input import CSV_TYPED, read_typed, write_typed

    from gaussdp.release.engines import DuckDBEngine, SparkEngine

    path = write_typed(tmp_path / "t.csv", kind)
    want = [v for _, v in CSV_TYPED[kind]]
    assert read_typed(DuckDBEngine(str(path)), path, kind) == want
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kathmandu")  # +05:45
    try:
        assert read_typed(SparkEngine(str(path)), path, kind) == want
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)


def test_typed_csv_keys_agree_on_duckdb_and_spark(
    spark: Any, tmp_path: Path, no_noise: None
) -> None:
    # Public DATE, TIMESTAMP and BOOLEAN keys of a CSV: the rows that read as a key by the
    # one rule are counted in it on both engines, the others (NULL) in none.
    import datetime

    lines = ["user,day,at,flag"]
    days = ["2020-01-01", "2020", " 2020-01-01", "0000-01-01", "2020-01-02", "20200101"]
    ats = ["2020-01-01 12:00", "12:00", "2020-01-01 17:00+05", "2020-01-01T12:00Z", "x", ""]
    flags = ["true", " TRUE ", "yes", "on", "0", "no"]
    for i in range(60):
        lines.append(f"{i},{days[i % 6]},{ats[i % 6]},{flags[i % 6]}")
    path = tmp_path / "typed.csv"
    path.write_text("\n".join(lines) + "\n")

    def counts(engine: str) -> list[list[tuple[Any, ...]]]:
        release = one_row_per_unit(path, engine)
        day, noon = datetime.date(2020, 1, 1), datetime.datetime(2020, 1, 1, 12)
        release.count(by="day", keys=[day, datetime.date(2020, 1, 2)])
        release.count(by="at", keys=[noon])
        release.count(by="flag", keys=[True, False])
        return _aggregate(release)[1]

    duck = counts("duckdb")
    assert normalise(counts("spark")) == normalise(duck)
    assert [sorted(r[1] for r in rows) for rows in duck] == [[10, 20], [30], [20, 30]]


def test_a_files_header_drops_no_other_files_line_on_spark(
    spark: Any, tmp_path: Path, no_noise: None
) -> None:
    from test_inputs import counts, header_is_a_data_line

    parts = header_is_a_data_line(tmp_path / "parts")
    assert counts(parts, "spark") == counts(parts) == [4.0, 2.0]


def test_spark_drops_a_gzipped_csvs_over_long_line_as_duckdb(spark: Any, tmp_path: Path) -> None:
    # A line over 1 MiB of a .csv.gz is dropped on DuckDB (its buffers); Spark drops it too.
    from test_bad_input import csv_users, write_long_lines

    from gaussdp.release.engines import DuckDBEngine, SparkEngine

    for name in ("long.csv.gz", "long.csv"):
        path = write_long_lines(tmp_path / name, b"\r\n")
        assert csv_users(SparkEngine(str(path))) == csv_users(DuckDBEngine(str(path))), name


def test_a_corrupt_parquet_file_is_refused_in_one_line_on_spark(spark: Any, tmp_path: Path) -> None:
    # Regression: DuckDB reads the footers (parquet_layout) outside Spark's error
    # handling, so a corrupt, truncated or binary file raised DuckDB's own error
    # ("internal error" in the CLI), alone or in a folder.
    from test_bad_input import refused, summing, write_corrupt_parquet

    folder = write_corrupt_parquet(tmp_path / "parts")
    binary = tmp_path / "binary.parquet"
    binary.write_bytes(b"\x00\x01" * 500)
    for source, shown in ((folder, str(folder)), (folder / "b.parquet", "b.parquet")):
        match = re.escape(f"spark failed opening {shown}:")
        refused(summing(str(source), engine="spark"), tmp_path, match)
    refused(summing(str(binary), engine="spark"), tmp_path, "spark failed opening binary.parquet")


def test_folders_of_no_rows_and_gzip_files_not_whole_on_spark(
    spark: Any, tmp_path: Path, no_noise: None
) -> None:
    # As on DuckDB (test_inputs): a folder none of whose files adds rows is an empty
    # table; a gzipped CSV that is not whole holds no rows; a column no CSV file has is
    # NULL. Spark failed the whole read of a truncated .gz.
    from test_inputs import FRAME, count_and_sum, folders_of_no_rows, gzip_not_whole, unit_rows

    for what, source in folders_of_no_rows(tmp_path / "folders").items():
        assert count_and_sum(source, "spark") == [0.0, 0.0, 0.0], what
    parts = tmp_path / "parts"
    parts.mkdir()
    FRAME.drop(columns="minutes").to_csv(parts / "a.csv", index=False)
    assert count_and_sum(parts, "spark") == count_and_sum(parts) == [4.0, 2.0, 0.0]
    data = unit_rows(100, 1000)
    for what, spoilt in gzip_not_whole(data).items():
        (parts / "u.csv.gz").write_bytes(spoilt)
        assert count_and_sum(parts, "spark") == [4.0, 2.0, 0.0], what
    (parts / "u.csv.gz").write_bytes(gzip.compress(data[:500]) + gzip.compress(data[500:]))
    assert count_and_sum(parts, "spark") == count_and_sum(parts) == [4.0, 1002.0, 0.0]
