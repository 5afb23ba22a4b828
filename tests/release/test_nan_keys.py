"""A NaN group key is a NULL one, for every input kind and on both engines (issue 12).

Before: pandas and CSV dropped a NaN key's rows (pandas NaN is NULL; a CSV's ``nan`` is
NULL as a number), while Arrow, Polars, Parquet, DuckDB tables and Spark kept a ``nan``
group: it took one of a unit's L0 slots from its real groups and could be released by
partition selection. Now every input drops the row, as for a NaN privacy unit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from gaussdp.budget import Budget
from gaussdp.random import ChaCha20Random
from gaussdp.release import Ledger, Release
from gaussdp.release.core import _aggregate

NAN = math.nan

# Every unit has one real key; units 1, 2 and 5 also have rows with a NaN or NULL key,
# units 4 and 6 only those. With L0 = 1 a kept NaN group took the slot of a unit's real
# group for about half the salts, and partition selection saw a 'nan' candidate.
USERS = [1, 1, 2, 2, 3, 4, 5, 5, 6, 7]
KEYS: list[float | None] = [1.0, NAN, 2.0, NAN, 1.0, NAN, 2.0, None, NAN, 1.0]
X = [2.0, 5.0, 3.0, 4.0, 1.0, 8.0, 6.0, 9.0, 7.0, 7.0]

# The documented reading: rows with a NaN or NULL key dropped. Per key: units, rows, the
# sum of x (L∞ = 2 keeps every row), over the keys 1.0 and 2.0.
WANT = {1.0: (3, 3, 10.0), 2.0: (2, 2, 9.0)}


def table(key_type: pa.DataType | None = None) -> pa.Table:
    return pa.table(
        {
            "user": pa.array(USERS, pa.int64()),
            "k": pa.array(KEYS, key_type or pa.float64(), from_pandas=False),  # NaN and NULL differ
            "x": pa.array(X, pa.float64()),
        }
    )


def csv_text() -> str:
    """The table as a CSV: DuckDB, Polars and Spark write a NaN as nan/NaN, NULL as empty."""
    key = {None: ""}
    lines = ["user,k,x"]
    for i, (u, k, x) in enumerate(zip(USERS, KEYS, X, strict=True)):
        text = key.get(k, "nan" if k is not None and math.isnan(k) else repr(k))
        if text == "nan" and i % 2:
            text = "NaN"
        lines.append(f"{u},{text},{x!r}")
    return "\n".join(lines) + "\n"


def release(source: object, engine: str, *, public: bool) -> Release:
    keys = [1.0, 2.0] if public else None
    return (
        Release(
            source,
            privacy_unit="user",
            budget=Budget(epsilon=1.0, delta=1e-6),
            max_groups_per_unit=1,
            max_rows_per_group=2,
            engine=engine,
        )
        .count(by="k", keys=keys)
        .sum("x", bounds=(0, 10), by="k", keys=keys)
        .quantile("x", [0.5], bounds=(0, 10), resolution=16, by="k", keys=keys)
    )


def pre_noise(rel: Release) -> list[list[tuple[Any, ...]]]:
    """The pre-noise aggregates, keys as floats (a CSV's private keys are text)."""
    _, results = _aggregate(rel, ChaCha20Random(3))
    return [sorted((float(row[0]), *(int(v) for v in row[1:])) for row in rows) for rows in results]


def by_key(rel: Release) -> dict[float, tuple[int, int, float]]:
    """Per key: units, rows and the sum of x, from the count and sum groupings."""
    plan, results = _aggregate(rel, ChaCha20Random(3))
    gamma = plan.groupings[0].values[0].gamma
    return {float(k): (units, rows, total * gamma) for k, units, rows, total in results[0]}


def sources(tmp_path: Path, engine: str) -> dict[str, Callable[[], object]]:
    """Every input kind of ``engine``, each holding the same table."""
    pl = pytest.importorskip("polars")
    pq.write_table(table(), tmp_path / "t.parquet")
    # The NULL-key row dropped: a key column with NaN but no NULL, whose min/max (the
    # statistics DuckDB's optimizer would read) leave NaN out.
    no_null = table().filter(pa.array([k is not None for k in KEYS]))
    pq.write_table(no_null, tmp_path / "no-null.parquet")
    stats = pq.ParquetFile(tmp_path / "no-null.parquet").metadata.row_group(0).column(1)
    assert (stats.statistics.min, stats.statistics.max, stats.statistics.null_count) == (1, 2, 0)
    parts = tmp_path / "parts"
    parts.mkdir()
    pq.write_table(table().slice(0, 5), parts / "a.parquet")
    pq.write_table(table().slice(5), parts / "b.parquet")
    (tmp_path / "t.csv").write_text(csv_text(), encoding="utf-8")
    common: dict[str, Callable[[], object]] = {
        "pandas": lambda: table().to_pandas(),
        "arrow": table,
        "arrow-float32": lambda: table(pa.float32()),
        "arrow-dataset": lambda: ds.dataset(table()),
        "polars": lambda: pl.from_arrow(table()),
        "polars-lazy": lambda: pl.from_arrow(table()).lazy(),
        "parquet": lambda: tmp_path / "t.parquet",
        "parquet-no-null": lambda: tmp_path / "no-null.parquet",
        "parquet-folder": lambda: parts,
        "parquet-glob": lambda: str(parts / "*.parquet"),
        "csv": lambda: str(tmp_path / "t.csv"),
    }
    if engine == "duckdb":
        con = duckdb.connect()
        con.register("frame", table())
        con.execute("CREATE TABLE t AS SELECT * FROM frame")
        return {
            **common,
            "duckdb-table": lambda: (con, "t"),
            "duckdb-relation": lambda: con.table("t"),
        }
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    return {**common, "spark-frame": lambda: spark.read.parquet(str(tmp_path / "t.parquet"))}


def check_every_input(tmp_path: Path, engine: str) -> None:
    inputs = sources(tmp_path, engine)
    for public in (True, False):
        want = pre_noise(release(table().to_pandas(), "duckdb", public=public))
        for name, source in inputs.items():
            rel = release(source(), engine, public=public)
            assert pre_noise(rel) == want, (name, public)
            assert by_key(rel) == WANT, (name, public)


def test_a_nan_key_is_dropped_for_every_input_on_duckdb(tmp_path: Path) -> None:
    check_every_input(tmp_path, "duckdb")


@pytest.mark.spark
def test_a_nan_key_is_dropped_for_every_input_on_spark(spark: Any, tmp_path: Path) -> None:
    check_every_input(tmp_path, "spark")


def test_a_public_nan_key_is_refused_before_anything_is_spent(tmp_path: Path) -> None:
    # A NaN key names the rows that are dropped: it could only ever be noise. Refused by
    # the keys alone (a float NaN on a floating column; the text nan on a text column).
    ledger = Ledger(tmp_path / "ledger.db", total=Budget(epsilon=5.0, delta=1e-5))
    path = tmp_path / "t.csv"
    path.write_text("user,k\n1,a\n2,nan\n", encoding="utf-8")
    refused: list[tuple[object, list[Any], type[Exception], str]] = [
        (table(), [1.0, NAN], TypeError, "numbers \\(not NaN\\), got nan$"),
        (str(path), ["a", "NaN"], ValueError, "other than nan in any case .*, got 'NaN'$"),
    ]
    for source, keys, error, message in refused:
        rel = Release(source, **OPTIONS).count(by="k", keys=keys)
        with pytest.raises(error, match=message):
            rel.run(ledger=ledger)
    assert ledger.entries() == []
    # The text nan of a column that is not read as text is a key like any other.
    frame = pa.table({"user": [1, 2], "k": ["a", "nan"]})
    rel = Release(frame, **OPTIONS)
    assert by_key_text(rel.count(by="k", keys=["a", "nan"])) == {"a": 1, "nan": 1}


OPTIONS: dict[str, Any] = {
    "privacy_unit": "user",
    "budget": Budget(epsilon=1.0, delta=1e-6),
    "max_groups_per_unit": 1,
    "max_rows_per_group": 1,
}


def by_key_text(rel: Release) -> dict[str, int]:
    """Per text key: units (the pre-noise count)."""
    return {k: units for k, units, _ in _aggregate(rel, ChaCha20Random(3))[1][0]}
