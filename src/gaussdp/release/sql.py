"""The one portable SQL template that bounds contributions and aggregates.

Every engine runs the SQL built here unchanged (DuckDB and Spark SQL). It reads
a view whose columns have fixed internal names — ``pu`` (the privacy unit),
``k0, k1, …`` (group keys), ``x0, x1, …`` (value columns) — registered by the
engine adapter, so user column names never appear in the SQL text. Bounds enter
as typed literals (``CAST(1.20000000000000000e+02 AS DOUBLE)``); integers as
integer literals.

The query, for one grouping (:data:`TEMPLATE`):

1. ``base``: drop rows whose privacy unit or a group key is NULL; clamp each
   scalar value to its bounds, NULL and NaN staying NULL (a NULL value is
   ignored by the queries that use that column and counted by none of them);
   compute each vector row's L2 clip factor (a row with any NULL, NaN or
   infinite coordinate is ignored by that vector query); compute the
   histogram bin (values outside the edges go to the end bins).
2. ``ranked``: **L0** — each unit keeps the rows of at most
   ``max_groups_per_unit`` of its groups, chosen in a uniformly random order:
   every row gets ``h = hash(hash(pu, keys…, salt))`` (equal for all rows of a
   (unit, group) cell; ``salt`` a fresh random literal per query, so the order
   is new each run; the outer ``hash`` mixes the salt in, which DuckDB's
   multi-argument ``hash`` alone does poorly), and a row is kept if ``h`` is
   among its unit's ``L0`` smallest distinct values (``DENSE_RANK() - 1 < L0``)
   and its keys equal those of the first row with the same ``h``
   (``FIRST_VALUE`` over the peer rows). A hash collision between two cells of
   a unit thus keeps only one of them, so no unit keeps more than ``L0``
   groups, whatever the engine's hash. The choice depends only on the unit's
   own rows. Ranking rows rather than cells avoids aggregating every
   (unit, group) cell before the choice, and ordering by one integer is cheap.
3. ``kept``: one row per kept (unit, group) with its row counts and sums.
4. final ``GROUP BY``: **L∞** — a unit's rows in one group count at most
   ``max_rows_per_group`` (``LEAST(n, L)``), and its sum in a group is rescaled
   to that many rows (``s·L/n`` when ``n > L``, the expected sum of ``L`` rows
   drawn at random without replacement, deterministic and cheap) and clamped
   against float error; sums are rounded per cell to the noise grid γ
   (``FLOOR(c/γ + 0.5)``) and added as exact 64-bit integers, so every engine
   returns bit-identical aggregates.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

__all__ = [
    "TEMPLATE",
    "Output",
    "ScalarValue",
    "VectorValue",
    "double",
    "grouping_sql",
]

TEMPLATE = """\
WITH base AS (
  SELECT pu{key_select}{value_select}
  FROM {source}
  WHERE pu IS NOT NULL{key_filter}
),
ranked AS (
  {ranked}
),
kept AS (
  SELECT pu{keys}, COUNT(*) AS n{cell_aggs}
  FROM ranked
  GROUP BY pu{keys}
)
SELECT {final_keys}COUNT(*) AS units{final_aggs}
FROM kept{group_by}"""

RANKED_RANDOM = """\
SELECT * FROM (
    SELECT *, DENSE_RANK() OVER (PARTITION BY pu ORDER BY h) - 1 AS rn{firsts}
    FROM (SELECT *, hash(hash(pu{keys}, {salt})) AS h FROM base{bin_filter}) AS hashed
  ) AS peers
  WHERE rn < {l0}{first_match}"""

RANKED_ALL = "SELECT * FROM base{bin_filter}"

_MAX_DOUBLE = "CAST(1.7976931348623157e+308 AS DOUBLE)"  # repr(sys.float_info.max)
_HALF = "CAST(5.00000000000000000e-01 AS DOUBLE)"


def double(value: float) -> str:
    """A DOUBLE literal both engines parse to exactly ``value`` (17 significant digits).

    Examples
    --------
    >>> double(0.5)
    'CAST(5.00000000000000000e-01 AS DOUBLE)'
    """
    return f"CAST({float(value):.17e} AS DOUBLE)"


@dataclass(frozen=True, slots=True)
class ScalarValue:
    """A value column clamped to ``[lo, hi]`` (internal column name ``column``)."""

    column: str
    lo: float
    hi: float


@dataclass(frozen=True, slots=True)
class VectorValue:
    """Value columns forming one vector, each row clipped to L2 norm ``norm``."""

    columns: tuple[str, ...]
    norm: float


@dataclass(frozen=True, slots=True)
class Output:
    """One aggregate column of the final SELECT.

    ``kind``: ``'rows'`` (rows per cell, capped at L∞), ``'valid'`` (rows with a
    valid value ``value``, capped), ``'sum'`` (scalar value ``value`` summed on
    grid ``gamma``, per-cell total clamped to ``[total_lo, total_hi]``) or
    ``'coord'`` (coordinate ``coord`` of vector value ``value`` on grid ``gamma``).
    """

    kind: str
    value: int = -1
    coord: int = -1
    gamma: float = 1.0
    total_lo: float = 0.0
    total_hi: float = 0.0


def _is_nan(expr: str) -> str:
    return f"isnan(CAST({expr} AS DOUBLE))"


def _rescaled(n: str, s: str, linf: int) -> str:
    # s·L/n when n > L: the unit's sum rescaled to L rows (L∞ bound, see module docstring).
    return f"CASE WHEN {n} > {linf} THEN {s} * CAST({linf} AS DOUBLE) / {n} ELSE {s} END"


def grouping_sql(
    *,
    source: str,
    keys: tuple[str, ...],
    histogram: tuple[str, tuple[float, ...]] | None,
    values: tuple[ScalarValue | VectorValue, ...],
    outputs: tuple[Output, ...],
    l0: int,
    linf: int,
    salt: int | None = None,
) -> str:
    """Fill :data:`TEMPLATE` for one grouping.

    Parameters
    ----------
    source : str
        The internal view name (an identifier gaussdp generated).
    keys : tuple of str
        Internal key columns (``k0``, …).
    histogram : (str, tuple of float), optional
        Internal value column and bin edges; adds the bin key ``kb``.
    values, outputs
        What to aggregate; see :class:`ScalarValue`, :class:`VectorValue`, :class:`Output`.
    l0, linf : int
        Max groups per unit, max rows per unit and group.

    Returns
    -------
    str
        The SQL; its result columns are the keys, ``units`` (distinct units per
        group after bounding) and ``a0, a1, …`` (one per output, BIGINT).

    Examples
    --------
    >>> sql = grouping_sql(source="v", keys=("k0",), histogram=None, values=(),
    ...                    outputs=(Output("rows"),), l0=2, linf=3)
    >>> "ORDER BY h" in sql and "rn < 2" in sql and "LEAST(n, 3)" in sql
    True
    """
    all_keys = keys + (("kb",) if histogram is not None else ())
    key_select = "".join(f", {k}" for k in keys)
    key_filter = "".join(f" AND {k} IS NOT NULL" for k in keys)
    value_select = ""
    cell_aggs = ""
    for i, value in enumerate(values):
        if isinstance(value, ScalarValue):
            x = value.column
            value_select += (
                f",\n    CASE WHEN {x} IS NULL OR {_is_nan(x)} THEN NULL"
                f" ELSE LEAST(GREATEST(CAST({x} AS DOUBLE), {double(value.lo)}),"
                f" {double(value.hi)}) END AS v{i}"
            )
            cell_aggs += f", COUNT(v{i}) AS n{i}, SUM(v{i}) AS s{i}"
        else:
            valid = " AND ".join(
                f"{x} IS NOT NULL AND NOT {_is_nan(x)}"
                f" AND ABS(CAST({x} AS DOUBLE)) <= {_MAX_DOUBLE}"
                for x in value.columns
            )
            norm = (
                "SQRT("
                + " + ".join(f"CAST({x} AS DOUBLE) * CAST({x} AS DOUBLE)" for x in value.columns)
                + ")"
            )
            c = double(value.norm)
            value_select += (
                f",\n    CASE WHEN {valid} THEN CASE WHEN {norm} > {c} THEN {c} / {norm}"
                f" ELSE CAST(1 AS DOUBLE) END END AS f{i}"
            )
            for a, x in enumerate(value.columns):
                value_select += f", CAST({x} AS DOUBLE) AS d{i}_{a}"
                cell_aggs += f", SUM(d{i}_{a} * f{i}) AS s{i}_{a}"
            cell_aggs += f", COUNT(f{i}) AS n{i}"
    bin_filter = ""
    if histogram is not None:
        x, edges = histogram
        xd = f"CAST({x} AS DOUBLE)"
        cases = "".join(
            f" WHEN {xd} < {double(edge)} THEN {j}" for j, edge in enumerate(edges[1:-1])
        )
        value_select += (
            f",\n    CASE WHEN {x} IS NULL OR {_is_nan(x)} THEN NULL{cases}"
            f" ELSE {len(edges) - 2} END AS kb"
        )
        bin_filter = " WHERE kb IS NOT NULL"
    final_aggs = ""
    for j, out in enumerate(outputs):
        if out.kind == "rows":
            expr = f"SUM(LEAST(n, {linf}))"
        elif out.kind == "valid":
            expr = f"SUM(LEAST(n{out.value}, {linf}))"
        elif out.kind == "sum":
            i = out.value
            contribution = (
                f"LEAST(GREATEST({_rescaled(f'n{i}', f's{i}', linf)}, {double(out.total_lo)}),"
                f" {double(out.total_hi)})"
            )
            expr = f"SUM(CAST(FLOOR({contribution} / {double(out.gamma)} + {_HALF}) AS BIGINT))"
        elif out.kind == "coord":
            i, a = out.value, out.coord
            contribution = _rescaled(f"n{i}", f"s{i}_{a}", linf)
            expr = f"SUM(CAST(FLOOR({contribution} / {double(out.gamma)} + {_HALF}) AS BIGINT))"
        else:  # pragma: no cover - outputs are built by gaussdp itself
            raise ValueError(f"unknown output kind {out.kind!r}")
        final_aggs += f",\n       CAST({expr} AS BIGINT) AS a{j}"
    keys_csv = "".join(f", {k}" for k in all_keys)
    if all_keys:
        window = "OVER (PARTITION BY pu ORDER BY h RANGE BETWEEN CURRENT ROW AND CURRENT ROW)"
        ranked = RANKED_RANDOM.format(
            firsts="".join(f",\n      FIRST_VALUE({k}) {window} AS q{k}" for k in all_keys),
            keys=keys_csv,
            salt=secrets.randbits(62) if salt is None else int(salt),
            bin_filter=bin_filter,
            l0=l0,
            first_match="".join(f" AND {k} = q{k}" for k in all_keys),
        )
    else:
        ranked = RANKED_ALL.format(bin_filter=bin_filter)
    return TEMPLATE.format(
        source=source,
        key_select=key_select,
        key_filter=key_filter,
        value_select=value_select,
        keys=keys_csv,
        cell_aggs=cell_aggs,
        ranked=ranked,
        final_keys="".join(f"{k}, " for k in all_keys),
        final_aggs=final_aggs,
        group_by=f"\nGROUP BY {', '.join(all_keys)}" if all_keys else "",
    )
