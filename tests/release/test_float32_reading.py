"""A float32 value is read exactly, whatever other files or values are read with it.

DuckDB and Spark read a ``FLOAT`` column through text with the shortest decimal that
rounds back to *float32* (``0.501953125`` as ``'0.50195312'``, a different double),
and read an integer column together with a ``FLOAT`` one as float32. When one unit's
Parquet file had the column as text (or as float32 next to integers), every other
unit's value moved; on a half-grid point by a whole grid step (rev28-rel: 7.8× the
stated sensitivity on DuckDB, 2.0× on Spark). The brute force here adds that one
unit's file and compares the aggregate's change with the sensitivity, in grid steps.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gaussdp.budget import Budget
from gaussdp.random import ChaCha20Random
from gaussdp.release import Release
from gaussdp.release.core import _aggregate
from gaussdp.release.values import value_text

#: Units per value: enough that the old reading moved the sum by several Δ.
COPIES = 8


def summing(
    source: object, bounds: tuple[float, float], engine: str = "duckdb", **options: Any
) -> Release:
    release = Release(
        source,
        privacy_unit="user",
        budget=Budget(epsilon=1.0, delta=1e-6),
        max_groups_per_unit=1,
        max_rows_per_group=1,
        engine=engine,
        **options,
    )
    return release.sum("minutes", bounds=bounds, by="page", keys=["a"])


def grid(bounds: tuple[float, float]) -> tuple[float, float, float]:
    """The sum's grid step, its centre and its sensitivity in grid steps."""
    plan = summing(pd.DataFrame({"user": [0], "page": "a", "minutes": [0.0]}), bounds).plan()
    value = plan.groupings[0].values[0]
    (part,) = plan.parts
    return value.gamma, value.center or 0.0, part.sensitivity


def half_grid_points(bounds: tuple[float, float], kind: type) -> list[float]:
    """Every half-grid point within ``bounds`` that ``kind`` holds exactly."""
    gamma, center, _ = grid(bounds)
    low, high = round((bounds[0] - center) / gamma), round((bounds[1] - center) / gamma)
    points = [center + (k + 0.5) * gamma for k in range(low, high)]
    return [p for p in points if float(kind(p)) == p]


def write_units(path: Path, values: list[Any], kind: pa.DataType) -> None:
    users = range(1, len(values) * COPIES + 1)
    column = pa.array([v for v in values for _ in range(COPIES)], kind)
    table = {"user": pa.array(users, pa.int64()), "page": ["a"] * len(column), "minutes": column}
    pq.write_table(pa.table(table), path)


def the_sum(
    source: object, bounds: tuple[float, float], engine: str = "duckdb", **options: Any
) -> int:
    _, results = _aggregate(summing(source, bounds, engine, **options), rng=ChaCha20Random(1))
    ((key, _, total),) = results[0]
    assert key == "a"
    return int(total)


def float32_folder(folder: Path) -> tuple[float, float]:
    """Units' float32 values on every half-grid point float32 holds, in one file."""
    bounds = (0.0, 1.0)
    folder.mkdir()
    points = half_grid_points(bounds, np.float32)
    # The premise: through float32's text, most of these points are other doubles.
    assert sum(float(np.float32(p).astype(str)) != p for p in points) > len(points) // 2
    write_units(folder / "others.parquet", points, pa.float32())
    return bounds


def integer_folder(folder: Path) -> tuple[float, float]:
    """Units' integer values one below half-grid points, which float32 rounds up onto them."""
    bounds = (0.0, 2.0**25)
    folder.mkdir()
    points = [int(p) - 1 for p in half_grid_points(bounds, float) if p > 2**24]
    assert len(points) >= 100
    assert all(float(np.float32(p)) == p + 1 for p in points)
    write_units(folder / "others.parquet", points, pa.int64())
    return bounds


#: The added unit's file: its value as text next to float32 values; as float32 next to
#: integers (DuckDB and Spark read an integer and a float32 column together as float32).
CASES = [
    (float32_folder, pa.array(["0"], pa.string())),
    (integer_folder, pa.array([0.0], pa.float32())),
]


def neighbour_change(folder: Path, setup: Any, added: pa.Array, engine: str) -> tuple[int, float]:
    bounds = setup(folder)
    # A folder's unit is read as text unless declared; BIGINT takes DuckDB's compiled path.
    declared = {"column_types": {"user": "BIGINT"}}
    before = the_sum(folder, bounds, engine, **declared)
    unit = pa.table({"user": pa.array([10**9], pa.int64()), "page": ["a"], "minutes": added})
    pq.write_table(unit, folder / "added.parquet")
    return the_sum(folder, bounds, engine, **declared) - before, grid(bounds)[2]


@pytest.mark.parametrize(("setup", "added"), CASES, ids=["text", "float32"])
def test_one_units_parquet_file_moves_the_sum_by_at_most_its_sensitivity(
    setup: Any, added: pa.Array, bounding: list[str], tmp_path: Path
) -> None:
    change, sensitivity = neighbour_change(tmp_path / "parts", setup, added, "duckdb")
    assert abs(change) <= sensitivity
    compiled = os.environ["GAUSSDP_BOUNDING"] == "auto"
    assert set(bounding) == {"compiled" if compiled else "sql"}  # both paths read exactly


@pytest.mark.spark
@pytest.mark.parametrize(("setup", "added"), CASES, ids=["text", "float32"])
def test_one_units_parquet_file_moves_the_sum_by_at_most_its_sensitivity_on_spark(
    setup: Any, added: pa.Array, spark: Any, tmp_path: Path
) -> None:
    change, sensitivity = neighbour_change(tmp_path / "parts", setup, added, "spark")
    assert abs(change) <= sensitivity


def test_a_folders_float32_column_reads_as_one_files(tmp_path: Path) -> None:
    # Each value's reading is its own file's: the folder's sum is the sum of each file's
    # (a float32 file alone is read as float32 widened to a double, exactly).
    bounds = float32_folder(tmp_path / "parts")
    alone = the_sum(tmp_path / "parts" / "others.parquet", bounds)
    unit = pa.table({"user": pa.array([10**9], pa.int64()), "page": ["a"], "minutes": ["x"]})
    pq.write_table(unit, tmp_path / "parts" / "added.parquet")  # text: NULL, adds nothing
    assert the_sum(tmp_path / "parts", bounds) == alone


def test_a_pandas_object_columns_float32_values_are_read_exactly() -> None:
    # An object column is read through value_text: a float32 value's text is its double's.
    bounds = (0.0, 1.0)
    points = half_grid_points(bounds, np.float32)
    assert all(float(value_text(np.float32(p)) or "nan") == p for p in points)
    users = list(range(len(points)))
    floats = pd.Series(map(np.float32, points), dtype=object)
    objects = pd.DataFrame({"user": users, "page": "a", "minutes": floats})
    doubles = pd.DataFrame({"user": users, "page": "a", "minutes": points})
    typed = summing(objects, bounds, column_types={"minutes": "DOUBLE"})
    got = _aggregate(typed, rng=ChaCha20Random(1))[1]
    want = _aggregate(summing(doubles, bounds), rng=ChaCha20Random(1))[1]
    assert got == want


@pytest.mark.parametrize("engine", ["duckdb", pytest.param("spark", marks=pytest.mark.spark)])
def test_a_float32_key_read_as_text_is_its_doubles_text(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # A key column whose type does not take its text public keys is read as text. Its
    # float32 values were written as float32's shortest text ('0.1') in a folder of float32
    # files, and as the double's ('0.10000000149011612') once one unit's file had the
    # column as a double: that one file moved every other unit to another key.
    if engine == "spark":
        request.getfixturevalue("spark")
    parts = tmp_path / "parts"
    parts.mkdir()
    units = pa.array(range(1, 51), pa.int64())
    keys = pa.array([0.1] * 50, pa.float32())
    pq.write_table(pa.table({"user": units, "k": keys}), parts / "a.parquet")
    pq.write_table(pa.table({"user": units, "k": keys}), parts / "b.parquet")
    text = ["0.1", repr(float(np.float32(0.1)))]

    def counts() -> list[float]:
        release = Release(
            parts,
            privacy_unit="user",
            budget=Budget(rho=1.0),
            max_groups_per_unit=1,
            max_rows_per_group=1,
            engine=engine,
        )
        _, results = _aggregate(release.count(by="k", keys=text), rng=ChaCha20Random(1))
        return [(key, units) for key, units, _ in results[0]]

    before = counts()
    assert before == [(text[1], 50)]  # the double's text
    added = {"user": pa.array([10**9], pa.int64()), "k": pa.array([0.1], pa.float64())}
    pq.write_table(pa.table(added), parts / "added.parquet")
    assert counts() == [("0.1", 1), *before]  # the added unit alone moves
