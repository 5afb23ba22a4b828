"""Bad input is refused in one line, before anything is reserved, and never shows data."""

from __future__ import annotations

import datetime
import math
import os
import re
import traceback
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gaussdp.budget import Budget
from gaussdp.errors import EngineError
from gaussdp.random import ChaCha20Random
from gaussdp.release import Ledger, Release
from gaussdp.release.core import _aggregate
from gaussdp.release.engines import DuckDBEngine

BUDGET = Budget(epsilon=1.0, delta=1e-6)


#: CSV texts of a number column and the values they read as (None: NULL).
CSV_VALUES = ["1_000", '"1,000"', " 12 ", "+5", "1e3", "0x10", "inf", "nan", "NaN", "Infinity"]
CSV_VALUES += [".5", "5.", "-0", "1e999", "1e-999", "1d", "٣", "0.1", "12abc", '" 7"']
CSV_READ = [None, None, 12.0, 5.0, 1000.0, None, None, None, None, None]
CSV_READ += [0.5, 5.0, 0.0, None, 0.0, None, None, 0.1, None, 7.0]
# Only ' ' is a space around a number (regression: DuckDB's trim() also removed U+00A0).
CSV_VALUES += ["\xa01", "1\u3000", "\t5", " \xa02 ", "  3  "]
CSV_READ += [None, None, None, None, 3.0]

#: CSV texts of a DATE, TIMESTAMP or BOOLEAN column and what they read as (None: NULL),
#: the same on both engines (issue 12: each engine's own cast read '2020' as a DATE on
#: Spark only, '12:00' as today's noon, and failed on a date before year 1).
D, T = datetime.date, datetime.datetime
CSV_TYPED: dict[str, list[tuple[str, object]]] = {
    "DATE": [
        ("2020-01-01", D(2020, 1, 1)),
        ("  2020-03-02 ", D(2020, 3, 2)),
        ("0001-01-01", D(1, 1, 1)),
        ("9999-12-31", D(9999, 12, 31)),
        ("2020-02-29", D(2020, 2, 29)),
        *((v, None) for v in ("2020", "2020-01", "2020-1-1", "0000-01-01", "-0001-01-01")),
        *((v, None) for v in ("2021-02-29", "1900-02-29", "2020-04-31", "2020-13-01")),
        *((v, None) for v in ("20200101", "2020/01/01", "2020-01-01 00:00", "+2020-01-01")),
        *((v, None) for v in ("\t2020-01-01", "2020-01-01\xa0", "２０２０-01-01", "today")),
    ],
    "TIMESTAMP": [
        ("2020-01-01 12:00", T(2020, 1, 1, 12)),
        ("2020-01-01T12:00:30", T(2020, 1, 1, 12, 0, 30)),
        (" 2020-01-01 12:00:30.5 ", T(2020, 1, 1, 12, 0, 30, 500000)),
        ("2020-01-01 12:00:30.123456", T(2020, 1, 1, 12, 0, 30, 123456)),
        ("2020-01-01 12:00Z", T(2020, 1, 1, 12)),
        ("2020-01-01 12:00+05", T(2020, 1, 1, 7)),
        ("2020-01-01 12:00:00-05:30", T(2020, 1, 1, 17, 30)),
        ("2020-01-01 01:00+0130", T(2019, 12, 31, 23, 30)),
        ("0001-01-01 05:00+05", T(1, 1, 1)),
        ("9999-12-31 22:00-01:59", T(9999, 12, 31, 23, 59)),
        ("2020-02-29 00:00", T(2020, 2, 29)),
        *((v, None) for v in ("12:00", "2020-01-01", "2020", "2020-01-01 12", "2020-01-01 1:00")),
        *((v, None) for v in ("0001-01-01 04:00+05", "9999-12-31 23:00-01", "0000-12-31 23:00")),
        *((v, None) for v in ("2020-01-01 24:00", "2020-01-01 12:60", "2020-01-01 12:00:60")),
        *(
            (v, None)
            for v in ("2020-01-01 12:00:00.1234567", "2020-01-01 12:00:00.", "2021-02-29 12:00")
        ),
        *((v, None) for v in ("2020-01-01 12:00 UTC", "2020-01-01 12:00+24", "2020-01-01 12:00z")),
        *((v, None) for v in ("2020-01-01 12:00+5", "2020-01-01  12:00", "2020-01-01 12:00 +05")),
    ],
    "BOOLEAN": [
        *((v, True) for v in ("true", " TRUE ", "True", "t", "T", "yes", "YeS", "y", "1")),
        *((v, False) for v in ("false", "FALSE", "f", "no", "N", "0", "  0")),
        *((v, None) for v in ("on", "off", "2", "01", "-1", "tru", "yeſ", "\ttrue", "true.")),
    ],
}


def read_typed(engine: Any, path: Path, kind: str) -> list[object]:
    """The values ``engine`` reads from column ``v`` of ``path`` declared as ``kind``, in
    the file's order (``write_typed``)."""
    try:
        engine.declare({"v": kind})
        view = engine.register({"i": "user", "v": "v"})
        rows = engine.query(f"SELECT CAST(i AS INT), v FROM {view}")
    finally:
        engine.close()
    return [v for _, v in sorted(rows)]


def write_typed(path: Path, kind: str) -> Path:
    """A CSV of ``CSV_TYPED[kind]``'s texts, each a quoted field (spaces kept)."""
    texts = "".join(f'{i},"{text}"\n' for i, (text, _) in enumerate(CSV_TYPED[kind]))
    path.write_text("user,v\n" + texts, encoding="utf-8")
    return path


def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "b.db", total=Budget(epsilon=5.0, delta=1e-5))


def summing(source: object, budget: Budget = BUDGET, **options: Any) -> Release:
    return Release(
        source,
        privacy_unit="user",
        budget=budget,
        max_groups_per_unit=1,
        max_rows_per_group=1,
        **options,
    ).sum("minutes", bounds=(0, 60))


def write_csv(path: Path, rows: int, last: str) -> Path:
    lines = ["user,minutes"] + [f"{i},{i % 60}" for i in range(rows)] + [last]
    path.write_text("\n".join(lines) + "\n")
    return path


def refused(release: Release, tmp_path: Path, match: str) -> str:
    book = ledger(tmp_path)
    with pytest.raises(ValueError, match=match) as caught:
        release.run(ledger=book)
    assert book.entries() == []  # nothing reserved
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_empty_binary_and_corrupt_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    refused(summing(empty), tmp_path, "non-empty file")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(np.random.default_rng(1).bytes(4000))
    refused(summing(binary), tmp_path, "a CSV whose first line is a UTF-8 header")
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1" + os.urandom(300) + b"PAR1")
    refused(summing(corrupt), tmp_path, "duckdb failed opening corrupt.parquet")


def chained(error: BaseException | None) -> str:
    """Every text of an exception's chain: each exception reached through __cause__ or
    __context__ (suppressed or not), its repr, str, args and notes."""
    seen: list[str] = []
    todo, done = [error], set()
    while todo:
        current = todo.pop()
        if current is None or id(current) in done:
            continue
        done.add(id(current))
        seen += [repr(current), str(current), *map(repr, current.args)]
        seen += getattr(current, "__notes__", [])
        todo += [current.__cause__, current.__context__]
    return "\n".join(seen)


def reachable(error: BaseException) -> str:
    """Every text reachable from an exception: its chain (:func:`chained`), the locals of
    every frame of its traceback (an exception among them, with its chain and frames, in
    turn) and the traceback as ``traceback`` prints it with ``capture_locals=True`` (a
    debugger's view)."""
    seen = list(traceback.TracebackException.from_exception(error, capture_locals=True).format())
    todo, done = [error], set()
    while todo:
        current = todo.pop()
        if id(current) in done:
            continue
        done.add(id(current))
        seen.append(chained(current))
        trace = current.__traceback__
        while trace is not None:
            for value in trace.tb_frame.f_locals.values():
                if isinstance(value, BaseException):
                    todo.append(value)
                    continue
                try:
                    seen.append(repr(value))
                except Exception:  # a closed connection's relation cannot say what it is
                    seen.append(type(value).__name__)
            trace = trace.tb_next
    return "\n".join(seen)


def test_a_string_after_the_sample_rows_is_null_not_a_refusal(tmp_path: Path) -> None:
    # Regression: one row's string made the CSV column VARCHAR and the sum was refused,
    # a refusal that told neighbouring tables apart. A CSV's types come from the rows,
    # so the summed column is converted (TRY_CAST): the string is NULL, like a missing
    # value, and the release equals the one without that value.
    path = write_csv(tmp_path / "late.csv", 70_000, "70000,abc")
    plain = write_csv(tmp_path / "plain.csv", 70_000, "70000,")
    got = summing(path).run(rng=ChaCha20Random(3)).frame
    want = summing(plain).run(rng=ChaCha20Random(3)).frame
    pd.testing.assert_frame_equal(got, want)


def test_one_rows_key_or_unit_never_changes_a_csvs_key_types(tmp_path: Path) -> None:
    # Regression: DuckDB's types come from a CSV's rows, so one user keyed 'zz' turned
    # column k from BIGINT into VARCHAR: public integer keys were refused (and string
    # keys accepted), and privately selected keys were released as text instead of
    # integers — neighbouring tables told apart. Keys take their public keys' type
    # (text without public keys), the unit is text.
    base = "user,k\n" + "".join(f"{i},{i % 2}\n" for i in range(400))
    tables = {"base": base, "odd": base + "999,zz\n", "unit": base + "u-1,0\n"}
    for name, text in tables.items():
        (tmp_path / f"{name}.csv").write_text(text)

    def run(name: str, **keys: Any) -> pd.DataFrame:
        release = Release(
            str(tmp_path / f"{name}.csv"),
            privacy_unit="user",
            budget=Budget(epsilon=1.0, delta=1e-6),
            max_groups_per_unit=1,
            max_rows_per_group=1,
        )
        return release.count(by="k", **keys).run(rng=ChaCha20Random(0)).frame

    for keys in ({"keys": [0, 1]}, {"keys": ["0", "1"]}, {}):
        frames = [run(name, **keys) for name in tables]
        for frame in frames[1:]:
            assert frame["k"].tolist() == frames[0]["k"].tolist()
            assert frame["k"].dtype == frames[0]["k"].dtype


def aggregates(release: Release) -> list[list[tuple[Any, ...]]]:
    return _aggregate(release, ChaCha20Random(0))[1]


@pytest.mark.parametrize(
    ("bad", "like"),
    [
        (b"7,8,9", None),  # one field too many (regression: refused the run at row 60,002)
        (b"7", None),  # one too few
        (b'7,"8', None),  # a quote that never closes: its own line only (one record a line)
        (b'7,"8,9', None),
        (b'7,8"', None),  # a quote inside an unquoted field
        (b'7,"8"9', None),  # text after a closing quote
        (b"\xff7,8", None),  # invalid UTF-8 (DuckDB drops it; Spark would read U+FFFD)
        ("7\ufffd,8".encode(), None),  # U+FFFD: dropped on both engines alike
        (b'7,"8\n9"', None),  # a quoted newline is not read: both halves are malformed
        (b'7,"8"', b"7,8"),  # quotes around a value are not part of it
        (b'"7","1""2"', b"7,"),  # "" in quotes is one " (here: not a number)
        (b"7,8\r", b"7,8"),  # \r\n ends a line as \n does
        (b"7," + b"1" * 3_000_000, b"7,"),  # an over-long field (DuckDB's default max: 2 MB)
        (b"7,1_000", b"7,"),  # numbers that are not numbers: NULL, like an empty field
        (b"7,0x10", b"7,"),
        (b"7,inf", b"7,"),
        (b"7, 12 ", b"7,12"),  # spaces around a number are ignored
    ],
)
def test_a_malformed_line_is_dropped_not_refused(
    tmp_path: Path, bad: bytes, like: bytes | None
) -> None:
    # A refusal that depends on one line tells neighbouring tables apart ("refused" vs
    # "released"). Each malformed line is dropped (its unit's other rows stay), each
    # unparsable value is NULL, the same rule on both engines (docs/release.md).
    # The line is in the middle of 60,000 rows: the rows after it are read as before.
    rows = [b"%d,%d\n" % (i, i % 60) for i in range(60_000)]
    head, tail = b"user,minutes\n" + b"".join(rows[:30_000]), b"".join(rows[30_000:])
    with_bad = tmp_path / "with_bad.csv"
    with_bad.write_bytes(head + bad + b"\n" + tail)
    without = tmp_path / "without.csv"
    without.write_bytes(head + (b"" if like is None else like + b"\n") + tail)
    assert aggregates(summing(with_bad)) == aggregates(summing(without))
    book = ledger(tmp_path)
    summing(with_bad).run(ledger=book)  # released, not refused
    assert [e.status for e in book.entries()] == ["committed"]


def test_a_csv_header_of_two_lines_is_refused(tmp_path: Path) -> None:
    # Lines are read one by one: a quoted newline in a column name is a schema fact
    # refused up front, not a half-header read as a row.
    path = tmp_path / "t.csv"
    path.write_text('user,"min\nutes"\n1,2\n')
    with pytest.raises(ValueError, match="a CSV whose header is one line"):
        DuckDBEngine(str(path))


@pytest.mark.parametrize(
    "bad",
    [b"caf\xe9,8", b"\xff\xfe,2", b'"7,8', b"7,8\xe9" * 5000],  # Latin-1; quotes; long
)
def test_a_bad_line_right_after_the_header_is_dropped_not_refused(
    tmp_path: Path, bad: bytes
) -> None:
    # Regression: the header was read by decoding the file's first 8 KiB, so an invalid
    # UTF-8 byte in any row there refused the run ("first line is a UTF-8 header"): a
    # refusal that told neighbouring tables apart. Only the first line is decoded.
    rows = b"".join(b"%d,%d\n" % (i, i % 60) for i in range(200))
    with_bad = tmp_path / "with_bad.csv"
    with_bad.write_bytes(b"user,minutes\n" + bad + b"\n" + rows)
    without = tmp_path / "without.csv"
    without.write_bytes(b"user,minutes\n" + rows)
    assert aggregates(summing(with_bad)) == aggregates(summing(without))


@pytest.mark.parametrize("rows", [b"", b"1,1\n", b"1,1\n" * 40_000, b"1,1\n\xff,2\n"])
def test_a_bad_header_is_refused_by_the_header_alone(tmp_path: Path, rows: bytes) -> None:
    # The refusal and its message are the same whatever rows follow the header.
    path = tmp_path / "t.csv"
    for header, why in [
        (b'"user,minutes', "header is one line"),
        (b"us\xe9r,minutes", "first line is a UTF-8 header"),
        (b'us"e"r,minutes', "first line is a UTF-8 header"),
        (b"", "first line is a UTF-8 header"),
    ]:
        path.write_bytes(header + b"\n" + rows)
        with pytest.raises(ValueError, match=why):
            DuckDBEngine(str(path))


def write_excel_csv(path: Path, rows: list[str]) -> Path:
    """An Excel "CSV UTF-8" file: a byte-order mark, CRLF line ends."""
    path.write_bytes(b"\xef\xbb\xbf" + "".join(r + "\r\n" for r in rows).encode())
    return path


def test_an_excel_csv_with_a_byte_order_mark_reads_as_without(tmp_path: Path) -> None:
    # Regression: the first column was named '\ufeffuser' (and refused as unknown).
    # A repeated header mid-file (with or without a mark) is dropped, as documented.
    rows = ["user,minutes", *(f"{i},{i % 60}" for i in range(100))]
    excel = write_excel_csv(tmp_path / "excel.csv", [*rows, "user,minutes", "\ufeffuser,minutes"])
    plain = tmp_path / "plain.csv"
    plain.write_text("\n".join(rows) + "\n")
    assert aggregates(summing(excel)) == aggregates(summing(plain))


def test_a_malformed_line_drops_itself_only(tmp_path: Path) -> None:
    # Its neighbours stay: a ragged line between two rows of the same unit.
    path = tmp_path / "t.csv"
    path.write_text("user,minutes\n1,10\n1,2,3\n1,20\n2,30\n")
    plain = tmp_path / "plain.csv"
    plain.write_text("user,minutes\n1,10\n1,20\n2,30\n")
    release = Release(
        str(path), privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=2
    ).sum("minutes", bounds=(0, 60))
    again = Release(
        str(plain), privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=2
    ).sum("minutes", bounds=(0, 60))
    assert aggregates(release) == aggregates(again)


def test_csv_numbers_have_one_reading(tmp_path: Path) -> None:
    # The rule both engines apply (tests/release/test_spark.py checks Spark reads alike).
    path = tmp_path / "t.csv"
    path.write_text("user,minutes\n" + "".join(f"{i},{v}\n" for i, v in enumerate(CSV_VALUES)))
    engine = DuckDBEngine(str(path))
    try:
        engine.declare({"minutes": "DOUBLE"})
        view = engine.register({"v": "minutes"})
        got = [row[0] for row in engine.query(f"SELECT v FROM {view}")]
    finally:
        engine.close()
    assert got == CSV_READ


@pytest.mark.parametrize("kind", sorted(CSV_TYPED))
def test_csv_dates_timestamps_and_booleans_have_one_reading(tmp_path: Path, kind: str) -> None:
    # One rule per type, a pattern before the cast (test_spark.py: Spark reads alike).
    path = write_typed(tmp_path / "t.csv", kind)
    assert read_typed(DuckDBEngine(str(path)), path, kind) == [v for _, v in CSV_TYPED[kind]]


def test_a_csv_timestamp_reads_whatever_the_columns_are_named(tmp_path: Path) -> None:
    # DuckDB binds a column before a lambda parameter of the same name (the rule's
    # one match a value is bound by a lambda): a column 'm' once failed every release.
    path = tmp_path / "t.csv"
    path.write_text("user,m,gdp_m0,v\n1,2020-01-01 12:00+05,2020-01-01 12:00,x\n")
    engine = DuckDBEngine(str(path))
    try:
        engine.declare(dict.fromkeys(["m", "gdp_m0", "v"], "TIMESTAMP"))
        view = engine.register({"a": "m", "b": "gdp_m0", "c": "v"})
        got = engine.query(f"SELECT a, b, c FROM {view}")
    finally:
        engine.close()
    assert got == [(T(2020, 1, 1, 7), T(2020, 1, 1, 12), None)]


def test_a_declared_type_that_does_not_convert_is_null(tmp_path: Path) -> None:
    # Regression: a value that did not convert to a declared type refused the release
    # (a function of one row, and the refusal's cause quoted the row).
    path = tmp_path / "t.csv"
    path.write_text("user,minutes\n1,3\n7,abc\n")
    plain = tmp_path / "plain.csv"
    plain.write_text("user,minutes\n1,3\n7,\n")
    got = summing(path, column_types={"minutes": "double"}).run(rng=ChaCha20Random(3))
    want = summing(plain, column_types={"minutes": "double"}).run(rng=ChaCha20Random(3))
    pd.testing.assert_frame_equal(got.frame, want.frame)
    with pytest.raises(ValueError, match="column_types"):
        summing(path, column_types={"minutes": "float128"})


def test_engine_error_after_reservation_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Simulate a failure of the release query itself (after the checks passed): an
    # engine error quoting a record. It becomes EngineError, the record nowhere in its
    # chain (regression: it was kept as __cause__, shown by every traceback), and the
    # reservation stays counted.
    columns = DuckDBEngine.columns

    def failing(
        self: DuckDBEngine, sql: str, *, action: str = "running", bounding: object = None
    ) -> Any:
        return columns(self, "SELECT CAST('7,a,abc' AS INTEGER)", action=action)

    monkeypatch.setattr(DuckDBEngine, "columns", failing)
    book = ledger(tmp_path)
    frame = pd.DataFrame({"user": [1, 2], "minutes": [1.0, 2.0]})
    with pytest.raises(EngineError) as caught:
        summing(frame).run(ledger=book)
    message = str(caught.value)
    assert "\n" not in message
    assert "abc" not in message
    assert "ConversionException" in message
    assert caught.value.__cause__ is None
    assert "abc" not in chained(caught.value)
    assert "ConversionException" in chained(caught.value)  # the stand-in names the class
    (entry,) = book.entries()
    assert entry.status == "reserved"


def test_no_engine_text_in_an_engine_errors_traceback() -> None:
    # Regression: the engine's exception (its text quotes the value) was a local of
    # contextlib's __exit__ frame, in EngineError's traceback (a debugger, or traceback
    # with capture_locals=True, showed it). tests/release/test_spark.py checks Spark.
    engine = DuckDBEngine(pd.DataFrame({"user": ["1"], "x": ["7-secret-unit"]}))
    try:
        view = engine.register({"x": "x"})
        with pytest.raises(EngineError) as caught:  # the secret is in the data, not the SQL
            engine.query(f"SELECT CAST(x AS INTEGER) FROM {view}")
        text = reachable(caught.value)  # while the engine is open (its objects' repr)
    finally:
        engine.close()
    assert "ConversionException" in text
    assert "secret" not in text
    # DuckDB's own text is its args (scrubbed): the exception must not be there at all.
    trace, held = caught.value.__traceback__, []
    while trace is not None:
        held += [v for v in trace.tb_frame.f_locals.values() if isinstance(v, duckdb.Error)]
        trace = trace.tb_next
    assert held == []


@pytest.mark.parametrize(
    "build",
    [
        lambda f: summing(f, Budget(rho=1e-299)),
        lambda f: summing(f, Budget(mu=1e-150)),
        lambda f: (
            Release(
                f,
                privacy_unit="user",
                budget=Budget(mu=1.0),
                max_groups_per_unit=1,
                max_rows_per_group=1,
            )
            .count(weight=1e-302)  # σ² ≈ 1e302: beyond the sampler's range
            .count()
        ),
        # Regression: a σ² beyond the largest double raised OverflowError in the report.
        lambda f: weighted(f, BUDGET).sum("minutes", bounds=(0, 60), weight=1e-302).count(),
        *(
            lambda f, b=b: weighted(f, b).count(weight=1e-310).count()
            for b in (BUDGET, Budget(mu=1.0), Budget(rho=0.5))
        ),
    ],
)
def test_noise_the_sampler_cannot_draw_is_refused_first(build: Any, tmp_path: Path) -> None:
    frame = pd.DataFrame({"user": [1], "minutes": [1.0]})
    release = build(frame)
    refused(release, tmp_path, "noise the sampler draws")
    with pytest.raises(ValueError, match="noise the sampler draws"):
        release.report  # noqa: B018 - the property plans, and refuses as run does


def weighted(frame: pd.DataFrame, budget: Budget) -> Release:
    """A release of ``frame`` with no query yet (the test adds weighted ones)."""
    return Release(
        frame, privacy_unit="user", budget=budget, max_groups_per_unit=1, max_rows_per_group=1
    )


def test_grid_overflow_is_refused_at_construction() -> None:
    frame = pd.DataFrame({"user": [1], "minutes": [1.0]})
    release = Release(
        frame, privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=2
    )
    with pytest.raises(ValueError, match="1e100"):
        release.sum("minutes", bounds=(0, 1e308))
    with pytest.raises(ValueError, match="1e-100"):
        release.vector_sum(["minutes"], norm=1e-300)


def test_header_only_csv_is_released_like_any_empty_table(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("user,page,minutes\n")
    result = (
        Release(
            path, privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
        )
        .sum("minutes", bounds=(0, 60), by="page", keys=["a", "1"])  # text: the CSV key type
        .mean("minutes", bounds=(0, 60))
        .run(rng=ChaCha20Random(2))
    )
    assert list(result.frame["statistic"]) == ["sum(minutes)", "sum(minutes)", "mean(minutes)"]
    assert result.frame["value"].notna().all()
    # Declared types make the schema independent of the data.
    result = (
        Release(
            path,
            privacy_unit="user",
            budget=BUDGET,
            max_groups_per_unit=1,
            max_rows_per_group=1,
            column_types={"page": "BIGINT", "minutes": "DOUBLE"},
        )
        .count(by="page", keys=[1, 2])
        .run(rng=ChaCha20Random(3))
    )
    assert list(result.frame["page"]) == [1, 2]


def test_null_and_nan_privacy_units_are_dropped_for_every_input(
    tmp_path: Path, no_noise: None
) -> None:
    # One rule: a NULL or NaN privacy unit identifies no one; its rows are dropped.
    units = [1.0, 2.0, math.nan, None, math.nan, 2.0]
    table = pa.table(
        {
            "user": pa.array(units, pa.float64()),  # NaN and NULL are distinct in Arrow
            "minutes": pa.array([1.0] * len(units)),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    pd.DataFrame({"user": units, "minutes": 1.0}).to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "nan.csv").write_text("user,minutes\n1,1\n2,1\nnan,1\n,1\nNaN,1\n2,1\n")
    sources: list[object] = [
        table,
        table.to_pandas(),
        tmp_path / "t.parquet",
        tmp_path / "t.csv",
        tmp_path / "nan.csv",
    ]
    for source in sources:
        frame = (
            Release(
                source,
                privacy_unit="user",
                budget=BUDGET,
                max_groups_per_unit=1,
                max_rows_per_group=5,
            )
            .count()
            .run()
            .frame
        )
        assert frame["value"].tolist() == [3], source


def test_lines_ending_in_0x01_and_empty_lines_are_dropped(tmp_path: Path) -> None:
    # Regression: DuckDB kept '7,8\x01' (the raw reader's empty second field read as
    # NULL, like a line without 0x01) where Spark dropped it. One column: an empty line
    # is dropped, not a NULL row (tests/release/test_spark.py checks Spark alike).
    rows = b"".join(b"%d,%d\n" % (i, i % 60) for i in range(100))
    with_bad = tmp_path / "with_bad.csv"
    with_bad.write_bytes(b"user,minutes\n" + rows + b"7,8\x01\n9,9\x01\x01\n\x01\n\n")
    without = tmp_path / "without.csv"
    without.write_bytes(b"user,minutes\n" + rows)
    assert aggregates(summing(with_bad)) == aggregates(summing(without))
    one = tmp_path / "one.csv"
    one.write_bytes(b"user\n1\n\n2\n\r\n3\x01\n")
    assert csv_users(DuckDBEngine(str(one))) == ["1", "2"]


def csv_users(engine: Any) -> list[str]:
    """The ``user`` column an engine reads, sorted."""
    try:
        view = engine.register({"u": "user"})
        return sorted(str(row[0]) for row in engine.query(f"SELECT u FROM {view}"))
    finally:
        engine.close()


def test_a_csv_of_more_columns_than_the_cap_is_refused_by_its_header(tmp_path: Path) -> None:
    # A schema fact: Spark's split of a line of ~2,000 quoted fields overflowed the Java
    # regex stack, so one unit's quoted row flipped a release into a failure.
    from gaussdp.release.engines import CSV_MAX_COLUMNS

    path = tmp_path / "wide.csv"
    names = ["user", "minutes", *(f"c{i}" for i in range(CSV_MAX_COLUMNS - 1))]
    path.write_text(",".join(names) + "\n")
    with pytest.raises(ValueError, match=f"at most {CSV_MAX_COLUMNS} columns"):
        DuckDBEngine(str(path))
    path.write_text(",".join(names[:CSV_MAX_COLUMNS]) + "\n")
    DuckDBEngine(str(path)).close()


def test_a_columns_type_is_refused_by_the_schema_whether_or_not_it_holds_values(
    tmp_path: Path,
) -> None:
    # Regression: a column without a non-NULL value passed as numeric and its keys took
    # no type, so a Parquet string column was summed while all NULL and refused once one
    # unit had a value (and a BIGINT column took text keys): the schema alone decides.
    def parquet(name: str, minutes: list[Any], pages: list[Any]) -> str:
        schema = pa.schema([("user", pa.string()), ("minutes", pa.string()), ("page", pa.int64())])
        users = [str(i) for i in range(len(minutes))]
        table = pa.table({"user": users, "minutes": minutes, "page": pages}, schema=schema)
        pq.write_table(table, tmp_path / name)
        return str(tmp_path / name)

    tables = [parquet("d.parquet", [None, None], [None, None])]
    tables.append(parquet("d1.parquet", [None, None, "5"], [None, None, 3]))
    for build, why in [
        (lambda p: summing(p), "column 'minutes' must be numeric to be summed, got 'VARCHAR'"),
        (
            lambda p: Release(
                p, privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
            ).count(by="page", keys=["a"]),
            "must be integers",
        ),
    ]:
        messages = []
        for path in tables:
            book = ledger(tmp_path)
            with pytest.raises((ValueError, TypeError), match=why) as caught:
                build(path).run(ledger=book)
            assert book.entries() == []
            messages.append(str(caught.value))
        assert messages[0] == messages[1]


def write_long_lines(path: Path, ending: bytes = b"\n") -> Path:
    """A CSV (gzipped if ``path`` ends in .gz) whose units ``0``-``3`` have lines of
    1 MiB - 1 to 1 MiB + 2 bytes (its line end not counted), among short lines."""
    import gzip

    limit = 2**20  # docs/release.md, "Reading a CSV"
    lines = [b"user,note", b"a,1"]
    for i, size in enumerate(range(limit - 1, limit + 3)):
        lines.append(b"%d," % i + b"x" * (size - 2))
    lines.append(b"b,2")
    data = ending.join(lines) + ending
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


@pytest.mark.parametrize("ending", [b"\n", b"\r\n"])
def test_a_gzipped_csv_is_read_and_its_over_long_line_dropped(
    tmp_path: Path, ending: bytes
) -> None:
    # Regression: every .csv.gz failed "ran out of memory" (read_csv's max_line_size of
    # 1 GiB made DuckDB allocate a 16 GiB buffer), even of two lines at memory_limit 4GB.
    # A line over 1 MiB is one unit's malformed line: dropped, never a refusal.
    gz = write_long_lines(tmp_path / "long.csv.gz", ending)
    assert csv_users(DuckDBEngine(str(gz), memory_limit="128MB")) == ["0", "1", "a", "b"]
    plain = write_long_lines(tmp_path / "long.csv", ending)  # 1 GiB there
    assert csv_users(DuckDBEngine(str(plain))) == ["0", "1", "2", "3", "a", "b"]
    # A folder of both: each file read by its own limit.
    both = tmp_path / "both"
    both.mkdir()
    write_long_lines(both / "p.csv", ending)
    write_long_lines(both / "z.csv.gz", ending)
    got = csv_users(DuckDBEngine(str(both), memory_limit="128MB"))
    assert got == sorted([*"0123ab", *"01ab"])
    release = Release(
        str(gz), privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
    )
    assert len(release.count().run(ledger=ledger(tmp_path)).frame) == 1


def write_corrupt_parquet(folder: Path) -> Path:
    """A folder of a good ``a.parquet`` and a corrupt ``b.parquet`` (a truncated copy)."""
    folder.mkdir()
    table = pa.table({"user": ["1", "2"], "minutes": [3.0, 4.0]})
    pq.write_table(table, folder / "a.parquet")
    (folder / "b.parquet").write_bytes((folder / "a.parquet").read_bytes()[:-30])
    return folder


def test_a_corrupt_parquet_file_of_a_folder_is_not_blamed_on_another(tmp_path: Path) -> None:
    # Regression: the message named the first file (a.parquet), whichever was corrupt;
    # the engine's own text, which names it, is withheld: the folder or glob is named.
    folder = write_corrupt_parquet(tmp_path / "parts")
    for source in (folder, f"{folder}/*.parquet"):
        shown = re.escape(f"duckdb failed opening {source}:")
        message = refused(summing(str(source)), tmp_path, shown)
        assert "a.parquet" not in message
    refused(summing(folder / "b.parquet"), tmp_path, "duckdb failed opening b.parquet:")


@pytest.mark.parametrize(
    "column",
    [
        pa.array(np.arange(6, dtype=np.float16)),
        pa.array([10**75] * 6, pa.decimal256(76, 0)),
    ],
    ids=["float16", "decimal256"],
)
def test_an_arrow_column_duckdb_cannot_read_is_refused_in_one_line(
    tmp_path: Path, column: Any
) -> None:
    # Regression: DuckDB's NotImplementedException came out raw (opening the table ran
    # outside the engine's error handling); as the summed column or an unused one.
    users = pa.array([str(i % 3) for i in range(6)])
    for table in (
        pa.table({"user": users, "minutes": column}),
        pa.table({"user": users, "minutes": np.ones(6), "other": column}),
    ):
        message = refused(summing(table), tmp_path, "duckdb failed opening the table")
        assert "a column of a type it cannot read" in message
