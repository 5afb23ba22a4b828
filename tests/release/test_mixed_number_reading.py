"""A folder's unit and key columns are read one value at a time, whatever the other files.

A Parquet folder reads a column that is text in one file and a number in another as
text. DuckDB and Spark wrote each number as its own type's text: a BIGINT 5 as ``'5'``,
a DOUBLE 5.0 as ``'5.0'``, so the one unit's file with the column as text split every
person whose id was an integer in one file and a double in another into two units
(rev29-rel: the counts moved by 201 where one unit may move them by 1), and keys likewise.
Without that file the folder read the column as a DOUBLE, where an integer beyond 2⁵³
is rounded onto another person's. Now a folder's unit and numeric key columns are always
read through one text per number (``engines.number_text``); the brute force removes
each person's rows in turn (a file left without rows is gone) and compares every
part's pre-noise change with its sensitivity, on both engines and both DuckDB paths.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gaussdp.budget import Budget
from gaussdp.random import ChaCha20Random
from gaussdp.release import Release
from gaussdp.release.core import _aggregate
from gaussdp.release.plan import Plan

PAGES = ["a", "b", "c"]
BIG = 2**53
#: Public keys of ``k``: integers, one beyond 2⁵³ and the double it would round to.
K_KEYS = [5, 0, BIG + 1, BIG]


def person(value: object) -> str:
    """Whose row it is: a number's one text (integral values their digits), or the text."""
    if isinstance(value, str):
        return value
    assert isinstance(value, int | float)
    return str(int(value)) if value == int(value) else repr(value)


#: Each file's rows: (user, page, k, minutes). People 0-5 have rows in the integer and
#: in the double file (0 as -0.0 there); BIG + 1 (integer) and BIG (double, alone in its
#: file) are two people; 'x' alone makes the folder's user and k columns text.
INTS = [
    (u, PAGES[(u + i) % 3], [5, 0, 7][(u * i) % 3], 2.5 * i) for u in range(6) for i in range(3)
]
DOUBLES = [
    (-0.0, "c", -0.0, 9.0),
    (1.0, "c", 5.0, 3.0),
    (2.0, "b", 0.5, 8.0),
    (3.0, "a", 5.0, 1.5),
    (4.0, "b", 5.0, 6.0),
    (5.0, "a", 1e-05, 2.0),
    (2.5, "a", 5.0, 7.0),
    (2.5, "c", 0.0, 1.0),
]
FILES: dict[str, tuple[pa.DataType, pa.DataType, list[tuple[Any, str, Any, float]]]] = {
    "ints": (pa.int64(), pa.int64(), [*INTS, (BIG + 1, "a", BIG + 1, 4.0), (BIG + 1, "b", 5, 1.0)]),
    "doubles": (pa.float64(), pa.float64(), DOUBLES),
    "big": (pa.float64(), pa.float64(), [(float(BIG), "c", float(BIG), 5.0)]),
    "text": (pa.string(), pa.string(), [("x", "a", "z", 3.0), ("x", "b", "5", 2.0)]),
}


def write(folder: Path, without: str | None = None) -> Path:
    folder.mkdir()
    for name, (unit_type, key_type, rows) in FILES.items():
        kept = [r for r in rows if person(r[0]) != without]
        if not kept:  # that person's file: gone with them
            continue
        users, pages, ks, minutes = zip(*kept, strict=True)
        table = {
            "user": pa.array(users, unit_type),
            "page": pa.array(pages, pa.string()),
            "k": pa.array(ks, key_type),
            "minutes": pa.array(minutes, pa.float64()),
        }
        pq.write_table(pa.table(table), folder / f"{name}.parquet")
    return folder


def build(source: Path, engine: str, **options: Any) -> Release:
    return (
        Release(
            source,
            privacy_unit="user",
            budget=Budget(epsilon=1.0, delta=1e-6),
            max_groups_per_unit=2,
            max_rows_per_group=2,
            engine=engine,
            **options,
        )
        .count(by="page")  # private partition selection
        .count(by="k")  # private selection of keys read as text
        .count(by="k", keys=K_KEYS)
        .sum("minutes", bounds=(0, 10), by="page", keys=PAGES)
    )


def vectors(plan: Plan, results: list[list[tuple[Any, ...]]]) -> dict[int, dict[Any, float]]:
    """Per part: {(key, output): pre-noise value} (keys, units, then the outputs a row)."""
    out: dict[int, dict[Any, float]] = defaultdict(dict)
    for index, part in enumerate(plan.parts):
        grouping = plan.groupings[part.grouping]
        width = len(grouping.by)
        for row in results[part.grouping]:
            key = tuple(row[:width])
            if part.query is None:  # partition selection: the units per group
                out[index][(key, "units")] = float(row[width])
                continue
            for m in grouping.measures:
                if m.query == part.query:
                    out[index][(key, m.role)] = float(row[width + 1 + m.output] or 0)
    return out


def worst_ratio(tmp_path: Path, engine: str, **options: Any) -> float:
    """The largest change of a part over its sensitivity, each person removed in turn."""
    people = {person(r[0]) for _, _, rows in FILES.values() for r in rows}
    assert {"0", "5", "2.5", str(BIG), str(BIG + 1), "x"} <= people
    release = build(write(tmp_path / "all"), engine, **options)
    plan, results = _aggregate(release, rng=ChaCha20Random(3))
    full = vectors(plan, results)
    worst = 0.0
    for i, who in enumerate(sorted(people)):
        source = write(tmp_path / f"without{i}", without=who)
        _, moved_results = _aggregate(build(source, engine, **options), rng=ChaCha20Random(3))
        moved = vectors(plan, moved_results)
        for index, part in enumerate(plan.parts):
            a, b = full[index], moved[index]
            change = math.sqrt(sum((a.get(c, 0.0) - b.get(c, 0.0)) ** 2 for c in set(a) | set(b)))
            assert change <= part.sensitivity * (1 + 1e-12), (who, part, change)
            worst = max(worst, change / part.sensitivity)
    return worst


#: The unit read as text (every person a unit), and declared BIGINT (the compiled path's
#: type: 'x' and 2.5 are NULL, dropped, and the rest the same people).
DECLARED = [{}, {"column_types": {"user": "BIGINT"}}]


@pytest.mark.parametrize("options", DECLARED, ids=["text", "bigint"])
def test_each_persons_rows_move_every_part_by_at_most_its_sensitivity(
    options: dict[str, Any], bounding: list[str], tmp_path: Path
) -> None:
    assert worst_ratio(tmp_path, "duckdb", **options) == pytest.approx(1.0)
    compiled = os.environ["GAUSSDP_BOUNDING"] == "auto" and options
    assert ("compiled" in bounding) == bool(compiled)


@pytest.mark.spark
@pytest.mark.parametrize("options", DECLARED, ids=["text", "bigint"])
def test_each_persons_rows_move_every_part_by_at_most_its_sensitivity_on_spark(
    options: dict[str, Any], spark: Any, tmp_path: Path
) -> None:
    assert worst_ratio(tmp_path, "spark", **options) == pytest.approx(1.0)


def keys_and_units(source: Path, engine: str) -> list[tuple[Any, int]]:
    release = Release(
        source,
        privacy_unit="user",
        budget=Budget(epsilon=1.0, delta=1e-6),
        max_groups_per_unit=1,
        max_rows_per_group=1,
        engine=engine,
    ).count(by="k")
    return sorted(
        (key, units) for key, units, _ in _aggregate(release, rng=ChaCha20Random(1))[1][0]
    )


@pytest.mark.parametrize("engine", ["duckdb", pytest.param("spark", marks=pytest.mark.spark)])
def test_a_number_is_one_text_whatever_its_files_type(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # Integral values are their digits (-0.0 is 0), others the shortest text of their
    # double as Python writes it, decimals exactly in that form; NaN is dropped. A text
    # file's '5' is the number 5's key; its '5.0' is another.
    if engine == "spark":
        request.getfixturevalue("spark")
    from decimal import Decimal

    columns = {
        "ints": pa.array([5, 0, -7, BIG + 1, 2**62], pa.int64()),
        "doubles": pa.array([5.0, -0.0, 0.1, 1e-05, 1.5e20, float("nan"), float("inf"), 2.0**63]),
        "floats": pa.array([5.0, 0.1, -2.5, 1e-05, 3.0, 0.0, 7.0, 8.0], pa.float32()),
        "decimals": pa.array(
            [Decimal(v) for v in ["5.00", "-0.50", "0.00001", "7"]], pa.decimal128(9, 5)
        ),
        "text": pa.array(["5", "5.0", "nan"]),
    }
    folder = tmp_path / "parts"
    folder.mkdir()
    for at, (name, keys) in enumerate(columns.items()):
        users = pa.array(range(100 * at, 100 * at + len(keys)), pa.int64())
        pq.write_table(pa.table({"user": users, "k": keys}), folder / f"{name}.parquet")
    assert keys_and_units(folder, engine) == [
        ("-0.5", 1),
        ("-2.5", 1),
        ("-7", 1),
        ("0", 3),  # 0, -0.0 and float32's 0.0
        ("0.1", 1),  # the double 0.1; float32's 0.1 is another double
        ("0.10000000149011612", 1),
        ("150000000000000000000", 1),
        ("1e-05", 2),  # the double and the decimal; float32's is another double
        ("3", 1),
        ("4611686018427387904", 1),
        ("5", 5),  # BIGINT, DOUBLE, FLOAT, DECIMAL and the text '5'
        ("5.0", 1),  # the text '5.0'
        ("7", 2),
        ("8", 1),
        ("9.999999747378752e-06", 1),
        ("9007199254740993", 1),
        ("9223372036854776000", 1),  # 2⁶³ as a double: its shortest digits, then zeros
        ("inf", 1),
    ]  # NaN and the text 'nan': dropped
