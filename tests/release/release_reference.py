"""A pure-Python implementation of the bounding and aggregation of gaussdp.release.sql.

Used with tables where no unit has more groups than L0 (so the random L0 choice
keeps everything and the result is deterministic). Written independently of the
SQL: each row's clamped value is put on the grid, a unit's cell sums those
integers, and the rescaling to L∞ rows is exact rational arithmetic.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa


def bounded_aggregates(
    rows: Sequence[dict[str, Any]],
    *,
    unit: str,
    by: Sequence[str],
    value: str,
    bounds: tuple[float, float],
    linf: int,
    gamma: float,
) -> dict[tuple[Any, ...], dict[str, int]]:
    """Per group: distinct units, capped rows, capped valid rows, sum on the grid (integers)."""
    lo, hi = bounds
    cells: dict[tuple[Any, tuple[Any, ...]], list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in rows:
        if r[unit] is None or any(r[b] is None for b in by):
            continue  # NULL privacy unit or NULL group key: the row is dropped
        cell = cells[(r[unit], tuple(r[b] for b in by))]
        cell[0] += 1
        v = r[value]
        if v is not None and not math.isnan(v):  # NULL/NaN: ignored by the value queries
            cell[1] += 1
            cell[2] += math.floor(Fraction(min(max(v, lo), hi)) / Fraction(gamma) + Fraction(1, 2))
    out: dict[tuple[Any, ...], dict[str, int]] = defaultdict(
        lambda: {"units": 0, "rows": 0, "valid": 0, "sum": 0}
    )
    for (_, key), (n, nv, s) in cells.items():
        g = out[key]
        g["units"] += 1
        g["rows"] += min(int(n), linf)
        g["valid"] += min(int(nv), linf)
        if nv:
            # The unit's exact integer sum, rescaled to L∞ rows and rounded half up.
            g["sum"] += math.floor(Fraction(s * linf, nv) + Fraction(1, 2)) if nv > linf else s
    return dict(out)


def make_rows(seed: int = 5, n: int = 600) -> list[dict[str, Any]]:
    """A small table with over-long units, out-of-bounds values, NaN, NULL values/keys/units."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for _ in range(n):
        u = int(rng.integers(0, 60))
        rows.append(
            {
                "user": u,
                "page": ["a", "b", "c"][int(rng.integers(0, 3))],
                "minutes": float(rng.integers(-40, 520)) / 4,  # -10 … 130 in quarters
                "score": float(rng.integers(-20, 20)) / 4,
            }
        )
    rows[0]["minutes"] = math.nan
    rows[1]["minutes"] = None
    rows[2]["page"] = None
    rows[3]["user"] = None
    rows[4]["minutes"] = math.inf
    return rows


def arrow_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.table(
        {
            "user": pa.array([r["user"] for r in rows], pa.int64()),
            "page": pa.array([r["page"] for r in rows], pa.string()),
            "minutes": pa.array([r["minutes"] for r in rows], pa.float64()),
            "score": pa.array([r["score"] for r in rows], pa.float64()),
        }
    )
