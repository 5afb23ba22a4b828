"""The engine's result, column by column: the same values as row by row, and the tree's sparse
leaves."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from gaussdp.budget import Budget
from gaussdp.random import ChaCha20Random
from gaussdp.release import Release
from gaussdp.release.core import _Leaves
from gaussdp.release.engines import DuckDBEngine

# One column per type a group key or an aggregate can have, NULLs and extremes included.
TYPES = """
SELECT * FROM (VALUES
  (1::TINYINT, 2::HUGEINT, 18446744073709551615::UBIGINT, 1.5::FLOAT, 2.25::DOUBLE,
   1.10::DECIMAL(5,2), 'x', DATE '2026-03-02', TIMESTAMP '2026-03-02 01:02:03', true,
   INTERVAL 1 DAY, CAST('-9223372036854775808' AS BIGINT), 7::BIGINT, 'é'),
  (NULL, NULL, 0::UBIGINT, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
   9223372036854775807::BIGINT, NULL, 'b')
) AS t(a, b, c, d, e, f, g, h, i, j, k, l, m, n)
"""


def _rows(columns: list[np.ndarray]) -> list[tuple[object, ...]]:
    return list(zip(*(c.tolist() for c in columns), strict=True))


@pytest.mark.parametrize("select", ["a, c, d, e, f, g, h, i, j, l, m, n", "*", "b, l"])
def test_columns_hold_the_values_query_returns(select: str) -> None:
    # The Arrow path (first), the fallback for HUGEINT/INTERVAL (then); every value of the
    # same type and equal to fetchall's, UBIGINT beyond 2⁶³ and BIGINT extremes unwrapped.
    engine = DuckDBEngine(pd.DataFrame({"x": [1]}))
    try:
        sql = f"SELECT {select} FROM ({TYPES}) AS s"
        want = engine.query(sql)
        got = _rows(engine.columns(sql))
        assert got == want
        assert [[type(v) for v in row] for row in got] == [[type(v) for v in r] for r in want]
        empty = engine.columns(f"{sql} WHERE false")
        assert [len(c) for c in empty] == [0] * len(want[0])
    finally:
        engine.close()


def test_columns_without_pyarrow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    engine = DuckDBEngine(pd.DataFrame({"x": [1]}))
    try:
        sql = f"SELECT a, c, g, h, l FROM ({TYPES}) AS s"
        assert _rows(engine.columns(sql)) == engine.query(sql)
    finally:
        engine.close()


def test_integer_columns_come_as_int64() -> None:
    engine = DuckDBEngine(pd.DataFrame({"x": [1]}))
    try:
        ints, strings, with_null = engine.columns(
            "SELECT range AS a, 'k' || range AS b, NULLIF(range, 1) AS c FROM range(3)"
        )
    finally:
        engine.close()
    assert ints.dtype == np.int64
    assert ints.tolist() == [0, 1, 2]
    assert strings.dtype == object
    assert strings.tolist() == ["k0", "k1", "k2"]
    assert with_null.dtype == object
    assert with_null.tolist() == [0, None, 2]


def test_sparse_leaves_keep_and_fill() -> None:
    # Groups 0, 1, 2 (row 4 belongs to no released group); keep groups 0 and 2.
    leaves = _Leaves(
        group=np.array([0, 0, 1, 2, -1]),
        leaf=np.array([0, 3, 1, 2, 0]),
        count=np.array([5, 1, 7, 2, 9]),
    )
    assert leaves.dense(3, 4).tolist() == [[5, 0, 0, 1], [0, 7, 0, 0], [0, 0, 2, 0]]
    kept = leaves.kept(np.array([True, False, True]))
    assert kept.dense(2, 4).tolist() == [[5, 0, 0, 1], [0, 0, 2, 0]]


def test_quantiles_with_selection_match_public_keys(no_noise: None) -> None:
    # Without noise every group with enough units is selected; its quantile must be the one
    # the same group gets with public keys (the sparse leaves and the dense ones agree).
    rng = np.random.default_rng(5)
    frame = pd.DataFrame(
        {
            "user": rng.integers(0, 3000, 6000),
            "page": rng.choice(
                [f"p{i}" for i in range(12)], 6000, p=[0.619] + [0.075] * 5 + [0.001] * 6
            ),
            "minutes": rng.uniform(0, 60, 6000),
        }
    )

    def run(keys: list[str] | None) -> pd.DataFrame:
        release = Release(
            frame,
            privacy_unit="user",
            budget=Budget(epsilon=1.0, delta=1e-6),
            max_groups_per_unit=3,
            max_rows_per_group=2,
        ).quantile("minutes", [0.25, 0.5], bounds=(0, 60), by="page", keys=keys, resolution=64)
        return release.run(rng=ChaCha20Random(1)).frame.sort_values(["page", "statistic"])

    selected = run(None)
    pages = sorted(set(selected["page"]))
    assert 0 < len(pages) < 12  # some groups selected, not all
    public = run([*pages, "absent"])
    public = public[public["page"].isin(pages)]
    # (The intervals differ: with selection part of the budget goes to it, so σ differs.)
    assert selected["value"].tolist() == public["value"].tolist()


def test_mean_interval_with_a_count_at_minus_its_half_width() -> None:
    # A noisy count of exactly −h (h the count's interval half-width) made the interval's
    # upper count 0: a division by zero, which filterwarnings=error turns into a failure.
    from types import SimpleNamespace

    from gaussdp.release.core import _ratio

    noise = SimpleNamespace(std=1.0, half_bonferroni=3.0)
    value, std, low, high = _ratio(
        np.array([5.0, 40.0]), np.array([-3.0, 10.0]), noise, noise, 1.0, 0.0, 60.0
    )  # type: ignore[arg-type]
    assert (low[0], high[0]) == (0.0, 60.0)  # unusable count: the bounds
    assert 0.0 < low[1] <= value[1] <= high[1] < 60.0
    assert np.all(np.isfinite(std))


def test_duckdb_prints_no_progress_bar_of_its_own() -> None:
    engine = DuckDBEngine(pd.DataFrame({"x": [1]}))
    try:
        (row,) = engine.query("SELECT current_setting('enable_progress_bar_print')")
    finally:
        engine.close()
    assert row == (False,)


def test_dates_beyond_python_fall_back_to_fetchall() -> None:
    # Arrow's to_pylist raises OverflowError on DuckDB's 'infinity'::DATE (after the budget
    # was charged, the release failed); fetchall clamps it: the columns give fetchall's values.
    engine = DuckDBEngine(pd.DataFrame({"x": [1]}))
    try:
        sql = (
            "SELECT i, CASE WHEN i = 0 THEN 'infinity'::DATE ELSE DATE '2020-01-01' END AS d,"
            " CASE WHEN i = 1 THEN '-infinity'::TIMESTAMP ELSE TIMESTAMP '2020-01-01' END AS t"
            " FROM range(3) r(i) ORDER BY i"
        )
        assert _rows(engine.columns(sql)) == engine.query(sql)
    finally:
        engine.close()


def test_release_grouped_by_an_infinite_date_runs() -> None:
    import duckdb

    con = duckdb.connect()
    try:
        con.execute(
            "create table t as select i as u, case when i%10=0 then 'infinity'::DATE"
            " else DATE '2020-01-01' end as d from range(200) r(i)"
        )
        release = Release(
            (con, "t"),
            privacy_unit="u",
            budget=Budget(epsilon=1, delta=1e-6),
            max_groups_per_unit=1,
            max_rows_per_group=1,
        )
        result = release.count(by="d").run(rng=ChaCha20Random(3))
    finally:
        con.close()
    assert "d" in result.frame.columns


def test_tree_units_do_not_depend_on_row_order() -> None:
    # Each group's distinct units are summed by group, whether or not its rows are contiguous.
    from gaussdp.release.core import _tree_cells
    from gaussdp.release.plan import Grouping

    keys = np.array(["a", "b", "a", "c", "b", "a"], dtype=object)
    leaf = np.array([0, 1, 2, 0, 3, 1], dtype=np.int64)
    units = np.array([1, 2, 3, 4, 5, 6], dtype=np.int64)
    count = np.array([1, 1, 1, 1, 1, 1], dtype=np.int64)
    g = Grouping(by=("k",), keys=None, histogram=None, l0=1, linf=1)
    found, leaves, per_group = _tree_cells(g, None, [keys, leaf, units, count])
    assert found[0].tolist() == ["a", "b", "c"]
    assert per_group.tolist() == [1 + 3 + 6, 2 + 5, 4]
    order = np.argsort(keys, kind="stable")  # the same rows, contiguous
    _, _, contiguous = _tree_cells(g, None, [c[order] for c in (keys, leaf, units, count)])
    assert contiguous.tolist() == per_group.tolist()
    assert leaves.dense(3, 4).tolist() == [[1, 1, 1, 0], [0, 1, 0, 1], [1, 0, 0, 0]]


def test_result_frame_types_across_queries() -> None:
    # The result is built from numpy columns in one go (no frame per query): a key column a
    # query lacks is NaN in its rows, object key columns take their values' type (public int
    # keys beside NaN: float64; strings: object; dates stay objects), numbers are float64.
    day = pd.Timestamp("2026-03-02").date()
    data = pd.DataFrame(
        {"u": [1, 2, 3], "k": [1, 2, 2], "s": ["a", "b", "b"], "d": [day] * 3, "m": [1.0] * 3}
    )
    bounds = {"max_groups_per_unit": 3, "max_rows_per_group": 1}
    budget = Budget(epsilon=1.0, delta=1e-6)
    release = Release(data, privacy_unit="u", budget=budget, **bounds)
    release.count(by="k", keys=[1, 2]).sum("m", bounds=(0, 1), by="s", keys=["a", "b"])
    release.histogram("m", bins=[0, 1, 2], by="d", keys=[day]).count()
    frame = release.run(rng=ChaCha20Random(1)).frame
    assert list(frame.columns) == [
        "k",
        "s",
        "d",
        "bin",
        "statistic",
        "value",
        "std",
        "ci_low",
        "ci_high",
    ]
    assert frame["k"].dtype == np.float64
    assert frame["k"].tolist()[:2] == [1.0, 2.0]
    assert frame["k"][2:].isna().all()
    assert frame["s"][:2].isna().all()
    assert frame["s"].dtype == object
    assert frame["s"].tolist()[2:4] == ["a", "b"]
    assert frame["d"].tolist()[4:6] == [day, day]
    assert frame["bin"][4:6].notna().all()
    assert frame["statistic"].tolist() == ["count"] * 2 + ["sum(m)"] * 2 + ["histogram(m)"] * 2 + [
        "count"
    ]
    for c in ("value", "std", "ci_low", "ci_high"):
        assert frame[c].dtype == np.float64
    assert frame["std"].notna().all()
    only = Release(data, privacy_unit="u", budget=budget, **bounds)
    assert only.count(by="k", keys=[1, 2]).run().frame["k"].dtype == np.int64
