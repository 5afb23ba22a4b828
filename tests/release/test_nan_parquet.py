"""NaN in a Parquet column on DuckDB: missing, as on every other input (issue 12, audit 25).

A Parquet file's min/max statistics leave NaN out. With no NULL in the column, DuckDB's
statistics propagation took ``isnan(x)`` to be false for every row and dropped the test:
every NaN unit was one unit (adding one such person moved a pre-noise sum by 1.8× its
sensitivity), a NaN value was clamped and counted, and a NaN coordinate failed the query
after the ledger had reserved. Each test failed before the fix (the files with a NULL,
the control, passed).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gaussdp.budget import Budget
from gaussdp.random import ChaCha20Random
from gaussdp.release import Ledger, Release
from gaussdp.release.core import _aggregate

BUDGET = Budget(epsilon=1.0, delta=1e-6)
NAN = math.nan

# Units 1-3 are real; the NaN unit's rows must vanish, and NaN values must be missing.
UNITS = [1.0, NAN, 2.0, NAN, 3.0, 1.0, NAN, 2.0]
KEYS = [1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0, 1.0]
X = [1.0, 9.0, NAN, 9.0, 4.0, 2.0, 9.0, NAN]
Y = [NAN, 9.0, 3.0, 9.0, 1.0, 2.0, 9.0, 5.0]


def columns(null: bool) -> dict[str, list[float | None]]:
    """The table, with (``null``) one more row whose unit, key and values are NULL."""
    data: dict[str, list[float | None]] = {"user": [*UNITS], "k": [*KEYS], "x": [*X], "y": [*Y]}
    if null:
        for c in data.values():
            c.append(None)
    return data


def write(path: Path, writer: str, data: dict[str, list[float | None]]) -> Path:
    if writer == "pyarrow":
        pq.write_table(pa.table({c: pa.array(v, pa.float64()) for c, v in data.items()}), path)
    else:
        pl.DataFrame(data, schema=dict.fromkeys(data, pl.Float64)).write_parquet(path)
    stats = pq.ParquetFile(path).metadata.row_group(0).column(0).statistics
    # The case DuckDB misread: the unit's min/max leave its NaN out.
    assert (stats.min, stats.max) == (1.0, 3.0)
    assert stats.null_count == data["user"].count(None)
    return path


def queries(source: object, **options: Any) -> Release:
    release = Release(
        source,
        privacy_unit="user",
        budget=BUDGET,
        max_groups_per_unit=2,
        max_rows_per_group=3,
        **options,
    )
    return (
        release.count()
        .distinct_units()
        .sum("x", bounds=(0, 10))
        .mean("x", bounds=(0, 10))
        .variance("y", bounds=(0, 10))
        .histogram("x", bins=[0, 5, 10])
        .vector_sum(["x", "y"], norm=20.0)
        .quantile("y", [0.5], bounds=(0, 10), resolution=16)
        .count(by="k", keys=[1.0, 2.0])
        .sum("x", bounds=(0, 10), by="k")
    )


def without_nan_units(data: dict[str, list[float | None]]) -> pa.Table:
    """The table less the NaN unit's rows, NaN values as NULL: the documented reading."""
    keep = [i for i, u in enumerate(data["user"]) if u is None or not math.isnan(u)]
    return pa.table(
        {
            c: pa.array([None if v is None or math.isnan(v) else v for v in (vs[i] for i in keep)])
            for c, vs in data.items()
        }
    )


def pre_noise(release: Release) -> list[list[tuple[Any, ...]]]:
    return _aggregate(release, ChaCha20Random(5))[1]


@pytest.mark.parametrize("null", [False, True], ids=["no-null", "with-null"])
@pytest.mark.parametrize("writer", ["pyarrow", "polars"])
def test_nan_in_a_parquet_file_is_missing_on_duckdb(
    tmp_path: Path, writer: str, null: bool
) -> None:
    data = columns(null)
    path = write(tmp_path / "t.parquet", writer, data)
    got = pre_noise(queries(path))
    # The same rows in memory (no Parquet statistics), as pandas (NaN is NULL), and
    # without the NaN unit's rows and with NaN values as NULL: one answer.
    assert got == pre_noise(queries(pq.read_table(path)))
    assert got == pre_noise(queries(pq.read_table(path).to_pandas()))
    assert got == pre_noise(queries(without_nan_units(data)))
    # The pre-noise aggregates themselves: units 1-3, x's valid values 1, 4, 2 (L∞ = 3 keeps
    # them all): sum 7, count 3. Before the fix (no NULL) a NaN was clamped to 10 and
    # counted, and the NaN rows were one more unit.
    release = Release(
        path, privacy_unit="user", budget=BUDGET, max_groups_per_unit=2, max_rows_per_group=3
    ).mean("x", bounds=(0, 10))
    gamma = release.plan().groupings[0].values[0].gamma
    ((units, total, valid),) = pre_noise(release)[0]
    assert (units, total * gamma, valid) == (3, 7.0, 3)


def test_adding_a_nan_unit_person_moves_nothing(tmp_path: Path) -> None:
    # The audit's case: one NaN-unit row of -100, then one NaN-unit person with 10 rows of
    # +100; sum(bounds=(-100, 100)), L0 = L∞ = 1. Before the fix the pre-noise sum moved
    # by 181.75 (charged sensitivity 100); a NaN unit is nobody, so it must not move.
    base = {"user": [1.0, 2.0, NAN], "v": [5.0, 7.0, -100.0]}
    more = {"user": [*base["user"], *[NAN] * 10], "v": [*base["v"], *[100.0] * 10]}
    sums = []
    for name, data in (("d", base), ("d1", more)):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({c: pa.array(v, pa.float64()) for c, v in data.items()}), path)
        release = Release(
            path, privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
        ).sum("v", bounds=(-100, 100))
        sums.append(pre_noise(release))
    assert sums[0] == sums[1]
    assert sums[0][0][0][0] > 0  # 5 + 7 on the grid, not pulled down by the NaN unit's -100


def test_a_nan_coordinate_is_ignored_and_reserves_nothing_extra(tmp_path: Path) -> None:
    # Before the fix: EngineError (a ConversionException) after the ledger reserved, so
    # one person's NaN decided refusal vs release and the failed run kept its reservation.
    path = tmp_path / "v.parquet"
    units, x = [1, 2, 3, 4], [1.0, 2.0, 3.0, NAN]
    pq.write_table(pa.table({"user": units, "x": pa.array(x), "y": [1.0] * 4}), path)
    ledger = Ledger(tmp_path / "ledger.db", total=Budget(epsilon=3.0, delta=1e-5))
    release = Release(
        path, privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
    ).vector_sum(["x", "y"], norm=5.0)
    got = pre_noise(release)
    assert got == pre_noise(
        Release(
            pq.read_table(path),  # the same rows in memory: no Parquet statistics
            privacy_unit="user",
            budget=BUDGET,
            max_groups_per_unit=1,
            max_rows_per_group=1,
        ).vector_sum(["x", "y"], norm=5.0)
    )
    # Unit 4 counts as a unit; its vector adds nothing: the sums of (1, 1), (2, 1), (3, 1).
    ((units, *sums),) = got[0]
    gamma = release.plan().groupings[0].values[0].gamma
    assert (units, [s * gamma for s in sums]) == (4, [6.0, 3.0])
    release.run(ledger=ledger, rng=ChaCha20Random(1))
    assert [e.status for e in ledger.entries()] == ["committed"]


def test_a_callers_connection_gets_its_optimizer_setting_back(tmp_path: Path) -> None:
    path = write(tmp_path / "t.parquet", "pyarrow", columns(False))
    con = duckdb.connect()
    con.execute("SET disabled_optimizers = 'filter_pushdown'")
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{path}')")
    got = pre_noise(queries((con, "t")))
    assert got == pre_noise(queries(without_nan_units(columns(False))))
    setting = con.execute("SELECT current_setting('disabled_optimizers')").fetchall()
    assert setting == [("filter_pushdown",)]


@pytest.mark.spark
def test_spark_reads_nan_in_parquet_as_duckdb(spark: Any, tmp_path: Path) -> None:
    path = write(tmp_path / "t.parquet", "pyarrow", columns(False))
    assert pre_noise(queries(path, engine="spark")) == pre_noise(queries(path))


def test_a_callers_setting_comes_back_exactly_however_the_query_ends() -> None:
    # disabled_optimizers is global in DuckDB (it cannot be set for one connection). It
    # was set back on the caller's connection, where, in the caller's transaction after
    # a failed query, DuckDB runs no statement: the setting stayed changed for the whole
    # database. It is now set, and set back to its exact text, on a cursor of gaussdp's.
    from gaussdp.errors import EngineError
    from gaussdp.release.engines import DuckDBEngine

    con = duckdb.connect()
    con.execute("SET disabled_optimizers = 'filter_pushdown,join_order'")
    con.execute("CREATE TABLE t AS SELECT 1 AS user")
    setting = "SELECT current_setting('disabled_optimizers')"
    ((before,),) = con.execute(setting).fetchall()
    engine = DuckDBEngine((con, "t"))
    try:
        assert engine.query(setting) == [(f"{before},statistics_propagation",)]
        assert con.execute(setting).fetchall() == [(before,)]
        con.execute("BEGIN")
        with pytest.raises(EngineError, match="does not convert"):
            engine.query("SELECT CAST('a' AS INTEGER)")
        con.execute("ROLLBACK")
        assert con.execute(setting).fetchall() == [(before,)]
    finally:
        engine.close()
    assert con.execute(setting).fetchall() == [(before,)]


def test_gaussdp_queries_on_one_database_do_not_overlap() -> None:
    # Two releases on two cursors of one database: the second found the optimizer off
    # (the first's setting) and ran; the first then set it back while the second was
    # still to plan, so the second's query ran with it on (NaN units kept). Now a
    # gaussdp query on a caller's connection waits for the other to end.
    import threading

    from gaussdp.release.engines import DuckDBEngine

    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT 1 AS user")
    first_running, second_ran = threading.Event(), threading.Event()

    def first_waits() -> int:
        first_running.set()
        return int(second_ran.wait(timeout=1.0))  # 1: the second ran meanwhile

    def second_runs() -> int:
        second_ran.set()
        return 0

    con.create_function("gdp_first", first_waits, [], "BIGINT", side_effects=True)
    con.create_function("gdp_second", second_runs, [], "BIGINT", side_effects=True)
    first, second = DuckDBEngine((con.cursor(), "t")), DuckDBEngine((con.cursor(), "t"))
    try:
        later = threading.Thread(
            target=lambda: first_running.wait(5.0) and second.query("SELECT gdp_second()")
        )
        later.start()
        assert first.query("SELECT gdp_first()") == [(0,)]
        later.join()
        assert second_ran.is_set()
    finally:
        first.close()
        second.close()
