"""Exact integer bounding: the pre-noise aggregate is a function of the multiset of rows.

The adversarial table of issue 12: every unit has the rows 3.5, 0.6 and −0.6 in
one group. Summed in floating point, a unit's cell is 3.5 or 3.4999999999999996
depending on the order of additions — an order that depends on the rest of the
table — and rounding the cell to a grid of 1 afterwards makes that 4 or 3, so
one unit's presence could move the sum by many grid steps. gaussdp puts each
row on the grid first and adds integers, so the aggregate cannot depend on the
order, the thread count or the engine.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gaussdp.budget import Budget
from gaussdp.random import ChaCha20Random
from gaussdp.release import Release
from gaussdp.release.core import _aggregate

UNITS = 200_000  # as in the issue
BUDGET = Budget(epsilon=1.0, delta=1e-6)


def adversarial(units: int, order_seed: int | None) -> pd.DataFrame:
    """``units`` units with rows 3.5, 0.6, −0.6 on page "a"; rows shuffled if a seed is given."""
    frame = pd.DataFrame(
        {
            "user": np.repeat(np.arange(units), 3),
            "page": "a",
            "minutes": np.tile([3.5, 0.6, -0.6], units),
            "x": np.tile([3.5, 0.6, -0.6], units),
            "y": np.tile([-0.6, 3.5, 0.6], units),
        }
    )
    if order_seed is not None:
        frame = frame.sample(frac=1.0, random_state=order_seed).reset_index(drop=True)
    return frame


def release(source: object, *, engine: str = "duckdb", threads: int | None = None) -> Release:
    """Sum, mean and (on the SQL bounding, ``GAUSSDP_BOUNDING=sql``) a vector sum by page;
    without the vector sum the grouping takes DuckDB's compiled path by default."""
    built = (
        Release(
            source,
            privacy_unit="user",
            budget=BUDGET,
            max_groups_per_unit=1,
            max_rows_per_group=3,
            engine=engine,
            threads=threads,
        )
        .sum("minutes", bounds=(-100, 100), by="page", keys=["a"])
        .mean("minutes", bounds=(-100, 100), by="page", keys=["a"])
    )
    if os.environ.get("GAUSSDP_BOUNDING") == "auto":
        return built
    return built.vector_sum(["x", "y"], norm=5.0, by="page", keys=["a"])


def pre_noise(r: Release) -> list[tuple[Any, ...]]:
    _, (rows,) = _aggregate(r, rng=ChaCha20Random(3))
    return sorted(tuple(row) for row in rows)


def test_the_table_is_adversarial_for_a_float_sum() -> None:
    # The premise: summing a unit's rows in floats, then rounding to a grid of 1, depends
    # on the order of the additions.
    def cell(values: list[float]) -> int:
        return math.floor(sum(values, 0.0) + 0.5)

    assert cell([3.5, 0.6, -0.6]) == 3
    assert cell([0.6, -0.6, 3.5]) == 4


def test_aggregate_is_bit_identical_under_shuffling_and_threads(bounding: list[str]) -> None:
    reference = pre_noise(release(adversarial(UNITS, None), threads=1))
    # Each row on the grid γ = 2^⌊log2(100/256)⌋ = 1/4: 3.5 → 14, 0.6 → 2, −0.6 → −2.
    # The mean shares the sum's column (a0) and adds the valid-row count (a1).
    (key, units, s, valid, *coords) = reference[0]
    assert (key, units, valid) == ("a", UNITS, 3 * UNITS)
    assert s == 14 * UNITS
    for seed, threads in [(1, 1), (2, 2), (3, 4), (4, None)]:
        assert pre_noise(release(adversarial(UNITS, seed), threads=threads)) == reference
    compiled = os.environ["GAUSSDP_BOUNDING"] == "auto"
    assert len(coords) == (0 if compiled else 2)
    assert set(bounding) == {"compiled" if compiled else "sql"}


def test_adding_a_unit_moves_the_aggregate_by_at_most_the_sensitivity(
    bounding: list[str],
) -> None:
    base = adversarial(20_000, 7)
    r = release(base)
    (cost,) = [c for c in r.report.costs if c.query == "sum(minutes)"]
    k = round(cost.sensitivity / cost.gamma)  # L0 = 1: Δ = K grid steps
    assert k == 3 * 400  # L∞ · (100 / γ)
    before = pre_noise(r)[0][2]
    # A unit whose rows are all below half a grid step contributes exactly 0 …
    zero = pd.DataFrame(
        {"user": [-1] * 3, "page": "a", "minutes": [0.1, -0.1, 0.12], "x": 0.0, "y": 0.0}
    )
    after = pre_noise(release(pd.concat([base, zero]).sample(frac=1.0, random_state=8)))[0][2]
    assert after == before
    # … and the largest unit moves it by exactly K (more rows than L∞: rescaled to L∞).
    big = pd.DataFrame({"user": [-1] * 5, "page": "a", "minutes": 1e9, "x": 0.0, "y": 0.0})
    after = pre_noise(release(pd.concat([base, big]).sample(frac=1.0, random_state=9)))[0][2]
    assert after - before == k
    small = pd.DataFrame({"user": [-1] * 7, "page": "a", "minutes": -1e9, "x": 0.0, "y": 0.0})
    after = pre_noise(release(pd.concat([base, small])))[0][2]
    assert before - after == k


def test_rescaling_to_linf_rows_is_exact_rounding(bounding: list[str]) -> None:
    # One unit, 7 rows on the grid γ = 1/4 summing to S = 14+2+2+2+2+2+2 = 26 steps; with
    # L∞ = 3 the cell is ⌊26·3/7 + ½⌋ = ⌊11.64⌋ = 11 (exact rational, no float drift).
    frame = pd.DataFrame(
        {"user": [0] * 7, "page": "a", "minutes": [3.5] + [0.6] * 6, "x": 0.0, "y": 0.0}
    )
    assert pre_noise(release(frame))[0][2] == math.floor(26 * 3 / 7 + 0.5)
    frame["minutes"] = [-3.5] + [-0.6] * 6  # −0.6 → ⌊−2.4 + ½⌋ = −2: S = −26
    assert pre_noise(release(frame))[0][2] == math.floor(-26 * 3 / 7 + 0.5)


@pytest.mark.spark
def test_spark_gives_the_same_aggregate(spark: Any, tmp_path: Path) -> None:
    units = 20_000
    reference = pre_noise(release(adversarial(units, None)))
    path = tmp_path / "adversarial.parquet"
    adversarial(units, 5).to_parquet(path)
    assert pre_noise(release(path, engine="spark")) == reference


@pytest.mark.parametrize("modulus", [1, 2, 3])
def test_l0_choice_is_exact_under_hash_collisions(
    monkeypatch: pytest.MonkeyPatch, modulus: int
) -> None:
    """A hash with only ``modulus`` values: ties everywhere, and still each unit keeps its
    first L0 cells in the order (h, key) — exactly those, and never more than L0.

    The L0 step ranks rows by ``h`` alone, then re-ranks the aggregated cells by
    ``(h, keys…)``; the reference here computes the same ``h`` in DuckDB and
    picks each unit's cells in Python.
    """
    import duckdb

    from gaussdp.release import sql

    weak = f"(hash(hash(pu{{keys}}, {{salt}})) % {modulus})"
    monkeypatch.setattr(sql, "CELL_HASH", weak)
    rng = np.random.default_rng(4)
    n, l0 = 3000, 2
    frame = pd.DataFrame(
        {
            "user": rng.integers(0, 300, n),
            "page": rng.choice([f"p{i}" for i in range(7)], n),
        }
    )
    release = Release(
        frame, privacy_unit="user", budget=BUDGET, max_groups_per_unit=l0, max_rows_per_group=5
    ).count(by="page")
    _, (rows,) = _aggregate(release, rng=ChaCha20Random(11))
    got = {row[0]: (row[1], row[2]) for row in rows}  # page -> (units, rows capped)
    salt = ChaCha20Random(11).randbits(62)  # the first draw of the run: the L0 salt
    cells = frame.groupby(["user", "page"]).size().rename("n").reset_index()
    with duckdb.connect() as con:
        cells["h"] = (
            con.execute(
                f"SELECT (hash(hash(u, p, {salt})) % {modulus})::UBIGINT AS h "
                "FROM (SELECT UNNEST(?) AS u, UNNEST(?) AS p)",
                [cells["user"].tolist(), cells["page"].tolist()],
            )
            .df()["h"]
            .to_numpy()
        )
    first = cells.sort_values(["user", "h", "page"]).groupby("user").head(l0)
    want = first.groupby("page").agg(
        units=("user", "size"), rows=("n", lambda s: s.clip(upper=5).sum())
    )
    assert got == {p: (int(r.units), int(r.rows)) for p, r in want.iterrows()}
    assert sum(u for u, _ in got.values()) == sum(min(l0, k) for k in cells.groupby("user").size())
