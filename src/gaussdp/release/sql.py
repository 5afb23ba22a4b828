"""The one portable SQL template that bounds contributions and aggregates.

Every engine runs the SQL built here unchanged (DuckDB and Spark SQL); DuckDB may
compute the same result by its compiled path (``gaussdp.release._compiled``, which
reads rows through :func:`stream_sql`, this template's own first steps). It reads
a view whose columns have fixed internal names — ``pu`` (the privacy unit),
``k0, k1, …`` (group keys), ``x0, x1, …`` (value columns) — registered by the
engine adapter, so user column names never appear in the SQL text. Bounds enter
as typed literals (``CAST(1.20000000000000000e+02 AS DOUBLE)``); integers as
integer literals.

**Exact integer arithmetic.** Every value is put on its query's noise grid γ
*per row*, before anything is added: a row's clamped value ``v`` becomes the
integer ``FLOOR(v/γ + 0.5)`` (a function of that row alone), and from there on
every sum, rescaling and clamp is integer arithmetic (BIGINT, overflow raising
an error on both engines; Spark runs the query with ANSI mode on). So the
bounded aggregate is a function of the multiset of rows: independent of row
order, thread count and engine. (A floating-point ``SUM`` followed by rounding,
as before, let the order of additions — which depends on the rest of the
table — move a unit's rounded cell by whole grid steps: issue 12.)

The query, for one grouping (:data:`TEMPLATE`):

1. ``raw``/``base``: drop rows whose privacy unit or a group key is NULL or NaN
   (:func:`_row_filter`); clamp
   each scalar value to its bounds and round it to the grid (NULL and NaN stay
   NULL: ignored by the queries that use that column); clip each vector row
   to L2 norm C and round each coordinate to the grid (a row with any NULL,
   NaN or infinite coordinate is ignored by that vector query); compute the
   histogram bin (values outside the edges go to the end bins).
2. ``ranked``, ``cells``, ``kept``: **L0** — each unit keeps at most
   ``max_groups_per_unit`` of its groups, in a uniformly random order: each
   row gets ``h = hash(hash(pu, keys…, salt))``, equal for all rows of a
   (unit, group) cell (``salt`` a random literal per query, drawn from the
   release's ``rng``; the outer ``hash`` mixes the salt in, which DuckDB's
   multi-argument ``hash`` alone does poorly). The cells kept are a unit's
   first L0 in the order ``(h, keys…)``, found in two steps: a row is kept
   (``ranked``) if its ``DENSE_RANK() - 1`` in ``ORDER BY h`` within its unit
   is ``< L0`` (a sort on one integer: sorting all rows by the keys too cost
   ~30 % of the query at 10⁷ rows); the kept rows are aggregated per
   (unit, group) (``cells``: row count, valid-value counts, exact integer
   sums, and ``h``); and a cell is kept (``kept``) if its ``ROW_NUMBER()`` in
   ``ORDER BY h, keys…`` within its unit is ``≤ L0``. Every cell in a unit's
   first L0 by ``(h, keys…)`` has an ``h`` among the unit's L0 smallest, so
   the first step loses none of them, and the second removes the extra
   cells that a collision of ``h`` (or a hash that differs for keys the
   engine groups as equal) let through: the result is exactly the first L0
   cells by ``(h, keys…)``, no unit keeps more than L0 cells whatever the
   hash, and the choice is a function of the unit's own rows and the salt
   only, not of the engine's row order. (Aggregating all cells first and
   ranking them was measured at 1.5× the CPU and 1.4× the memory at 10⁷ rows.)
3. ``cells``/``kept`` give one row per kept (unit, group) with its row count,
   valid-value counts and exact integer sums.
4. final ``GROUP BY``: **L∞** — a unit's rows in one group count at most
   ``max_rows_per_group`` (``LEAST(n, L)``), and its integer sum ``S`` there
   is rescaled to that many rows when ``n > L``: ``⌊S·L/n + ½⌋``, computed
   exactly (a floating-point quotient corrected by integer comparisons), the
   expected sum of ``L`` rows drawn without replacement, rounded; scalar
   per-cell contributions are clamped to their integer range (a no-op unless
   something is wrong). The integers are summed per group, and the groups
   come ordered by their keys (a fixed order for private partition selection,
   so a seeded ``rng`` replays it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "MAX_ROWS_PER_GROUP",
    "TEMPLATE",
    "TREE_TEMPLATE",
    "Bounding",
    "Output",
    "ScalarValue",
    "Tree",
    "VectorValue",
    "codes_sql",
    "double",
    "grouping_sql",
    "key_hashes_sql",
    "keys_sql",
    "stream_sql",
    "tree_sql",
]

#: Largest L∞ accepted: with per-row integers |r| ≤ 2⁹·√d, the exact rescaling's
#: intermediates 2·S·L stay far inside BIGINT (an overflow would raise, not wrap).
MAX_ROWS_PER_GROUP = 2**20

#: The rows both bounding paths start from: :data:`TEMPLATE`'s and :data:`STREAM_TEMPLATE`'s
#: ``raw`` and ``base`` steps (units and keys filtered; :data:`TEMPLATE`'s values clamped
#: and on the grid, the stream's as the doubles the compiled loops clamp: :func:`stream_sql`).
BASE_CTES = """\
WITH raw AS (
  SELECT *{raw_select}
  FROM {source}
  WHERE pu IS NOT NULL{key_filter}
),
base AS (
  SELECT pu{key_select}{value_select}
  FROM raw
)"""

TEMPLATE = (
    BASE_CTES
    + """,
ranked AS (
  {ranked}
),
cells AS (
  SELECT pu{keys}{cell_hash}, COUNT(*) AS n{cell_aggs}
  FROM ranked
  GROUP BY pu{keys}
),
kept AS (
  {kept}
)
SELECT {final_keys}COUNT(*) AS units{final_aggs}
FROM kept{group_by}"""
)

RANKED_L0 = """\
SELECT * FROM (
    SELECT *, DENSE_RANK() OVER (PARTITION BY pu ORDER BY h{order}) - 1 AS rn
    FROM (SELECT *, {cell_hash} AS h FROM base{bin_filter}) AS hashed
  ) AS peers
  WHERE rn < {l0}"""

RANKED_ALL = "SELECT * FROM base{bin_filter}"

#: The L0 order's hash of a row's (unit, group) cell; the outer ``hash`` mixes the salt in.
CELL_HASH = "hash(hash(pu{keys}, {salt}))"

KEPT_L0 = """\
SELECT * FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY pu ORDER BY h{keys}) AS slot FROM cells
  ) AS slots
  WHERE slot <= {l0}"""

KEPT_ALL = "SELECT * FROM cells"

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
    """A value column clamped to ``[lo, hi]``, each row rounded to the grid ``gamma``.

    With ``center`` the row's integer is that of ``clamped − center`` (for
    variances, which also sum the squares of these integers).
    """

    column: str
    lo: float
    hi: float
    gamma: float
    center: float | None = None


@dataclass(frozen=True, slots=True)
class VectorValue:
    """Value columns forming one vector, each row clipped to L2 norm ``norm``, then each
    coordinate rounded to the grid ``gamma``."""

    columns: tuple[str, ...]
    norm: float
    gamma: float


@dataclass(frozen=True, slots=True)
class Output:
    """One aggregate column of the final SELECT.

    ``kind``: ``'rows'`` (rows per cell, capped at L∞), ``'valid'`` (rows with a
    valid value ``value``, capped), ``'sum'`` (scalar value ``value``'s grid
    integers, per-cell contribution clamped to ``[total_lo, total_hi]`` grid
    steps), ``'sumsq'`` (the squares of those integers, rescaled and clamped
    alike), ``'coord'`` (coordinate ``coord`` of vector value ``value``) or
    ``'units'`` (distinct units per group after L0 bounding).
    """

    kind: str
    value: int = -1
    coord: int = -1
    total_lo: int = 0
    total_hi: int = 0


def _is_nan(expr: str) -> str:
    """The one NaN test of gaussdp's SQL (privacy units, values, vectors, quantile trees).

    DuckDB runs it with statistics propagation off (engines.py ``_NO_STATISTICS``): a
    Parquet file's min/max leave NaN out, and from them DuckDB would take the test to be
    false for every row.
    """
    return f"isnan(CAST({expr} AS DOUBLE))"


def _row_filter(keys: tuple[str, ...], nan: Mapping[str, str]) -> str:
    """The conditions (after ``pu IS NOT NULL``) that drop a row whose privacy unit is NaN
    or whose group key is NULL or NaN: one rule for the unit and every key column.

    ``nan`` gives, per internal column, how NaN is written there: ``"float"`` (a
    floating-point column: :func:`_is_nan`), ``"text"`` (a column read as text: the text
    ``nan`` in any ASCII case); a column not in it holds no NaN.
    """
    out = ""
    for column in ("pu", *keys):
        if column != "pu":  # the template tests the unit's NULL itself
            out += f" AND {column} IS NOT NULL"
        kind = nan.get(column)
        if kind == "float":
            out += f" AND NOT {_is_nan(column)}"
        elif kind == "text":
            out += f" AND lower({column}) <> 'nan'"
    return out


def _check_salt_linf(salt: int, linf: int) -> None:
    """The L0 salt and L∞ every bounding query takes (:func:`grouping_sql`, :func:`tree_sql`)."""
    if not 0 <= salt < 2**62:
        raise ValueError(f"salt must be in [0, 2**62), got {salt!r}")
    if not 1 <= linf <= MAX_ROWS_PER_GROUP:
        raise ValueError(f"linf must be in [1, {MAX_ROWS_PER_GROUP}], got {linf!r}")


def _on_grid(expr: str, gamma: float) -> str:
    """The grid integer ⌊x/γ + ½⌋ of one row's (clamped) double ``expr``."""
    return f"CAST(FLOOR({expr} / {double(gamma)} + {_HALF}) AS BIGINT)"


def _floor_div(num: str, den: str) -> str:
    """⌊num/den⌋ of BIGINT expressions (den > 0), exactly, in both engines' SQL.

    A DOUBLE quotient q₀ is within one of it while |num/den| ≪ 2⁵⁰ (relative
    error ≤ 3·2⁻⁵³), and two integer comparisons correct q₀ to the exact floor.
    """
    q0 = f"CAST(FLOOR(CAST({num} AS DOUBLE) / CAST({den} AS DOUBLE)) AS BIGINT)"
    return (
        f"{q0} - CASE WHEN {q0} * {den} > {num} THEN 1 ELSE 0 END"
        f" + CASE WHEN ({q0} + 1) * {den} <= {num} THEN 1 ELSE 0 END"
    )


def _rescaled(n: str, s: str, linf: int) -> str:
    """⌊S·L/n + ½⌋ when n > L (else S), in exact integer arithmetic.

    With num = 2·S·L + n and den = 2n the value is ⌊num/den⌋ (:func:`_floor_div`;
    |num/den| ≤ L·2¹⁸ + 1 ≪ 2⁵⁰ for sums and sums of squares of grid integers).
    """
    exact = _floor_div(f"(2 * {s} * {linf} + {n})", f"(2 * {n})")
    return f"CASE WHEN {n} > {linf} THEN {exact} ELSE {s} END"


@dataclass(frozen=True, slots=True)
class _Base:
    """The pieces of :data:`TEMPLATE`'s ``raw``, ``base`` and ``cells`` steps for one grouping."""

    raw_select: str
    key_select: str
    key_filter: str
    value_select: str
    cell_aggs: str
    bin_filter: str


def _base(
    *,
    keys: tuple[str, ...],
    histogram: tuple[str, tuple[float, ...]] | None,
    values: tuple[ScalarValue | VectorValue, ...],
    nan: Mapping[str, str] | None,
) -> _Base:
    """Rows filtered, values clamped and put on the grid: the one text of both bounding paths."""
    key_select = "".join(f", {k}" for k in keys)
    key_filter = _row_filter(keys, nan or {})
    raw_select = ""
    value_select = ""
    cell_aggs = ""
    for i, value in enumerate(values):
        if isinstance(value, ScalarValue):
            x = value.column
            clamped = (
                f"LEAST(GREATEST(CAST({x} AS DOUBLE), {double(value.lo)}), {double(value.hi)})"
            )
            if value.center is not None:
                clamped = f"({clamped} - {double(value.center)})"
            value_select += (
                f",\n    CASE WHEN {x} IS NULL OR {_is_nan(x)} THEN NULL"
                f" ELSE {_on_grid(clamped, value.gamma)} END AS v{i}"
            )
            cell_aggs += f", COUNT(v{i}) AS n{i}, COALESCE(CAST(SUM(v{i}) AS BIGINT), 0) AS s{i}"
            if value.center is not None:
                cell_aggs += f", COALESCE(CAST(SUM(v{i} * v{i}) AS BIGINT), 0) AS q{i}"
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
            raw_select += (
                f",\n    CASE WHEN {valid} THEN CASE WHEN {norm} > {c} THEN {c} / {norm}"
                f" ELSE CAST(1 AS DOUBLE) END END AS f{i}"
            )
            for a, x in enumerate(value.columns):
                value_select += (
                    f",\n    CASE WHEN f{i} IS NULL THEN NULL"
                    f" ELSE {_on_grid(f'CAST({x} AS DOUBLE) * f{i}', value.gamma)} END AS r{i}_{a}"
                )
                cell_aggs += f", COALESCE(CAST(SUM(r{i}_{a}) AS BIGINT), 0) AS s{i}_{a}"
            cell_aggs += f", COUNT(r{i}_0) AS n{i}"
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
    return _Base(raw_select, key_select, key_filter, value_select, cell_aggs, bin_filter)


def grouping_sql(
    *,
    source: str,
    keys: tuple[str, ...],
    histogram: tuple[str, tuple[float, ...]] | None,
    values: tuple[ScalarValue | VectorValue, ...],
    outputs: tuple[Output, ...],
    l0: int,
    linf: int,
    salt: int,
    nan: Mapping[str, str] | None = None,
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
    salt : int
        The L0 hash salt, a non-negative integer below 2⁶² (drawn from the
        release's ``rng``).
    nan : mapping of str to str, optional
        The unit's and key columns' NaN (internal name → ``"float"``: a floating-point
        column, ``"text"``: one read as text, where the text ``nan`` in any ASCII case is
        NaN). A NaN unit or key, like a NULL one, identifies no one and no group: its
        rows are dropped (the same rule for every input kind, :func:`_row_filter`).

    Returns
    -------
    str
        The SQL; its result columns are the keys, ``units`` (distinct units per
        group after bounding) and ``a0, a1, …`` (one per output, BIGINT).

    Examples
    --------
    >>> sql = grouping_sql(source="v", keys=("k0",), histogram=None, values=(),
    ...                    outputs=(Output("rows"),), l0=2, linf=3, salt=5)
    >>> "ORDER BY h, k0" in sql and "rn < 2" in sql and "slot <= 2" in sql
    True
    """
    _check_salt_linf(salt, linf)
    all_keys = keys + (("kb",) if histogram is not None else ())
    base = _base(keys=keys, histogram=histogram, values=values, nan=nan)
    raw_select, key_select, key_filter = base.raw_select, base.key_select, base.key_filter
    value_select, cell_aggs, bin_filter = base.value_select, base.cell_aggs, base.bin_filter
    final_aggs = ""
    for j, out in enumerate(outputs):
        if out.kind == "rows":
            expr = f"SUM(LEAST(n, {linf}))"
        elif out.kind == "valid":
            expr = f"SUM(LEAST(n{out.value}, {linf}))"
        elif out.kind == "sum":
            i = out.value
            contribution = _rescaled(f"n{i}", f"s{i}", linf)
            expr = f"SUM(LEAST(GREATEST({contribution}, {out.total_lo}), {out.total_hi}))"
        elif out.kind == "sumsq":
            i = out.value
            contribution = _rescaled(f"n{i}", f"q{i}", linf)
            expr = f"SUM(LEAST(GREATEST({contribution}, {out.total_lo}), {out.total_hi}))"
        elif out.kind == "units":
            expr = "COUNT(*)"
        elif out.kind == "coord":
            i, a = out.value, out.coord
            expr = f"SUM({_rescaled(f'n{i}', f's{i}_{a}', linf)})"
        else:  # pragma: no cover - outputs are built by gaussdp itself
            raise ValueError(f"unknown output kind {out.kind!r}")
        final_aggs += f",\n       CAST({expr} AS BIGINT) AS a{j}"
    keys_csv = "".join(f", {k}" for k in all_keys)
    if all_keys:
        cell = CELL_HASH.format(keys=keys_csv, salt=int(salt))
        ranked = RANKED_L0.format(cell_hash=cell, order="", l0=l0, bin_filter=bin_filter)
        kept = KEPT_L0.format(keys=keys_csv, l0=l0)
        cell_hash = ", MIN(h) AS h"
    else:
        ranked, kept, cell_hash = RANKED_ALL.format(bin_filter=bin_filter), KEPT_ALL, ""
    return TEMPLATE.format(
        source=source,
        raw_select=raw_select,
        key_select=key_select,
        key_filter=key_filter,
        value_select=value_select,
        keys=keys_csv,
        cell_aggs=cell_aggs,
        cell_hash=cell_hash,
        ranked=ranked,
        kept=kept,
        final_keys="".join(f"{k}, " for k in all_keys),
        final_aggs=final_aggs,
        group_by=(
            f"\nGROUP BY {', '.join(all_keys)}\nORDER BY {', '.join(all_keys)}" if all_keys else ""
        ),
    )


STREAM_TEMPLATE = (
    BASE_CTES
    + """
SELECT CAST(pu AS BIGINT) AS pu, gdp_codes.kc{values}
FROM base JOIN {codes} AS gdp_codes USING ({keys})"""
)

KEYS_TEMPLATE = """\
SELECT {keys}{counts}, {kept} AS kept
FROM {source}
GROUP BY {keys}"""

CODES_TEMPLATE = """\
SELECT {keys}, CAST(ROW_NUMBER() OVER (ORDER BY {keys}) - 1 AS INTEGER) AS kc
FROM {keys_table}
WHERE kept > 0"""


@dataclass(frozen=True, slots=True)
class Bounding:
    """One grouping's bounding and aggregation: :func:`grouping_sql`'s arguments.

    The SQL path runs :meth:`sql`; the compiled path (``gaussdp.release._compiled``,
    DuckDB) reads the same rows through :func:`keys_sql`, :func:`codes_sql` and
    :func:`stream_sql` and computes the same result.
    """

    source: str
    keys: tuple[str, ...]
    histogram: tuple[str, tuple[float, ...]] | None
    values: tuple[ScalarValue | VectorValue, ...]
    outputs: tuple[Output, ...]
    l0: int
    linf: int
    salt: int
    nan: Mapping[str, str] | None = None

    def sql(self) -> str:
        """The grouping's query (:func:`grouping_sql`)."""
        return grouping_sql(
            source=self.source,
            keys=self.keys,
            histogram=self.histogram,
            values=self.values,
            outputs=self.outputs,
            l0=self.l0,
            linf=self.linf,
            salt=self.salt,
            nan=self.nan,
        )


def keys_sql(b: Bounding, columns: Sequence[str] = ()) -> str:
    """Every row of ``b``'s source read once, grouped by its keys: per distinct key tuple
    (NULL included), the non-NULL values of each of ``columns`` (``c0``, ``c1``, …) and
    ``kept``, its rows that :data:`TEMPLATE`'s ``raw`` step keeps (a unit, no NULL or NaN
    unit or key: :func:`_row_filter`). Summed, the counts are an engine's validation read;
    the key tuples with ``kept > 0`` are :func:`codes_sql`'s.

    A group's rows share its key values, so what depends on the keys alone is decided
    once a group (a key column's count is the group's rows or 0, ``kept`` is 0 in a group
    the key filter drops): the same numbers as counting row by row, at less cost.

    Examples
    --------
    >>> b = Bounding("v", ("k0",), None, (), (Output("rows"),), 2, 3, 5)
    >>> sql = keys_sql(b, ["pu", "k0", "x0"])
    >>> "COUNT(x0) AS c2" in sql and "CASE WHEN k0 IS NULL THEN 0 ELSE COUNT(*) END AS c1" in sql
    True
    >>> "CASE WHEN TRUE AND k0 IS NOT NULL THEN COUNT(pu) ELSE 0 END AS kept" in sql
    True
    """
    nan = b.nan or {}
    counts = "".join(
        f", CASE WHEN {c} IS NULL THEN 0 ELSE COUNT(*) END AS c{i}"
        if c in b.keys
        else f", COUNT({c}) AS c{i}"
        for i, c in enumerate(columns)
    )
    unit_filter = _row_filter((), nan)  # a float unit's NaN test: row by row
    key_filter = _row_filter(b.keys, {k: v for k, v in nan.items() if k != "pu"})
    units = f"COUNT(*) FILTER (WHERE pu IS NOT NULL{unit_filter})" if unit_filter else "COUNT(pu)"
    return KEYS_TEMPLATE.format(
        source=b.source,
        keys=", ".join(b.keys),
        counts=counts,
        kept=f"CASE WHEN TRUE{key_filter} THEN {units} ELSE 0 END",
    )


def codes_sql(b: Bounding, keys_table: str) -> str:
    """The distinct group keys of the rows :data:`TEMPLATE` keeps (from ``keys_table``, a
    table of :func:`keys_sql`'s rows), each with its exact integer code ``kc``: its rank
    in ``ORDER BY keys…`` from 0, so that codes sort as the keys do in
    ``ORDER BY h, keys…`` (the engine's own order; never a hash of the keys).

    Examples
    --------
    >>> b = Bounding("v", ("k0", "k1"), None, (), (Output("rows"),), 2, 3, 5)
    >>> print(codes_sql(b, "t").splitlines()[0])
    SELECT k0, k1, CAST(ROW_NUMBER() OVER (ORDER BY k0, k1) - 1 AS INTEGER) AS kc
    """
    return CODES_TEMPLATE.format(keys=", ".join(b.keys), keys_table=keys_table)


def stream_sql(b: Bounding, codes: str) -> str:
    """One row per input row that :data:`TEMPLATE`'s ``raw`` step keeps: the unit (an
    integer column, as BIGINT), the key code ``kc`` (from ``codes``, a table of
    :func:`codes_sql`'s rows) and each scalar value as the DOUBLE that :data:`TEMPLATE`
    clamps, ``v0, v1, …`` (``CAST(x AS DOUBLE)``: NULL where the value is NULL).

    The filters are :data:`TEMPLATE`'s own text. The cell hash (:data:`CELL_HASH`) and
    each value's NULL and NaN test, clamp and grid integer are computed by
    ``gaussdp.release._compiled``: the hash from DuckDB's own hashes of the key values
    and of the salt, as DuckDB combines them (checked against DuckDB before the path is
    taken), the grid integers with the same IEEE double operations (``LEAST``,
    ``GREATEST``, a subtraction, a division by the power of two γ, ``+ ½``, ``FLOOR``;
    none rounds differently in another order or engine). In DuckDB they cost the
    stream two fifths of its time (a text hash of every row's keys, a ``CASE``).

    Examples
    --------
    >>> b = Bounding("v", ("k0",), None, (ScalarValue("x0", 0.0, 1.0, 0.5),),
    ...              (Output("sum", 0),), 2, 3, 5)
    >>> sql = stream_sql(b, "c")
    >>> "CAST(pu AS BIGINT) AS pu, gdp_codes.kc, v0" in sql and "CAST(x0 AS DOUBLE) AS v0" in sql
    True
    """
    base = _base(keys=b.keys, histogram=b.histogram, values=(), nan=b.nan)
    doubles = ""
    for i, value in enumerate(b.values):
        if not isinstance(value, ScalarValue):  # pragma: no cover - engines.py checks
            raise ValueError("the compiled stream takes scalar values only")
        doubles += f", CAST({value.column} AS DOUBLE) AS v{i}"
    return STREAM_TEMPLATE.format(
        source=b.source,
        raw_select=base.raw_select,
        key_filter=base.key_filter,
        key_select=base.key_select,
        value_select=doubles,
        values="".join(f", v{i}" for i in range(len(b.values))),
        codes=codes,
        keys=", ".join(b.keys),
    )


def key_hashes_sql(b: Bounding, codes: str) -> str:
    """DuckDB's ``hash`` of each key value of ``codes`` (a table of :func:`codes_sql`'s
    rows), by key code, and of the salt (as :data:`CELL_HASH` writes it), in a list of
    one value per key column, then the salt's: what :data:`CELL_HASH` combines with the
    unit's hash (the compiled path combines them, ``gaussdp.release._compiled``).

    Examples
    --------
    >>> b = Bounding("v", ("k0", "k1"), None, (), (Output("rows"),), 2, 3, 5)
    >>> key_hashes_sql(b, "c")
    'SELECT (SELECT list([hash(k0), hash(k1)] ORDER BY kc) FROM c), hash(5)'
    """
    hashes = ", ".join(f"hash({k})" for k in b.keys)
    return f"SELECT (SELECT list([{hashes}] ORDER BY kc) FROM {codes}), hash({int(b.salt)})"


@dataclass(frozen=True, slots=True)
class Tree:
    """The leaves of a quantile tree: ``column`` clamped to ``[lo, hi]``, cut into
    ``resolution`` equal-width leaves (leaf ⌊(v − lo)/w⌋, w = (hi − lo)/resolution,
    the last leaf closed)."""

    column: str
    lo: float
    hi: float
    resolution: int


TREE_TEMPLATE = """\
WITH raw AS (
  SELECT *
  FROM {source}
  WHERE pu IS NOT NULL{key_filter} AND {x} IS NOT NULL AND NOT {x_nan}
),
base AS (
  SELECT pu{key_select},
    CAST(LEAST(GREATEST(FLOOR((LEAST(GREATEST(CAST({x} AS DOUBLE), {lo}), {hi}) - {lo}) / {width}),
         0), {last}) AS BIGINT) AS lf
  FROM raw
),
ranked AS (
  {ranked}
),
leaves AS (
  SELECT pu{keys}, lf, COUNT(*) AS c
  FROM ranked
  GROUP BY pu{keys}, lf
),
prefixed AS (
  SELECT *,
    SUM(c) OVER (PARTITION BY pu{keys} ORDER BY lf ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
      AS p,
    SUM(c) OVER (PARTITION BY pu{keys}) AS n,
    ROW_NUMBER() OVER (PARTITION BY pu{keys} ORDER BY lf) AS rk
  FROM leaves
),
shifted AS (
  SELECT *, (CAST(hash(pu{keys}, {salt}) % n AS BIGINT) + n) % n AS u
  FROM prefixed
)
SELECT {final_keys}lf, CAST(SUM(CASE WHEN rk = 1 THEN 1 ELSE 0 END) AS BIGINT) AS units,
       CAST(SUM(CASE WHEN n > {linf} THEN {upto} - {before} ELSE c END) AS BIGINT) AS cnt
FROM shifted
GROUP BY {final_keys}lf
ORDER BY {final_keys}lf"""


def tree_sql(
    *,
    source: str,
    keys: tuple[str, ...],
    tree: Tree,
    l0: int,
    linf: int,
    salt: int,
    nan: Mapping[str, str] | None = None,
) -> str:
    """The leaf counts of a quantile tree per group, each unit bounded to L0 groups, L∞ rows.

    Rows with a NULL or NaN value are ignored; rows are dropped as in :func:`grouping_sql`
    (``nan``: :func:`_row_filter`). L0 is applied to the groups as in
    :data:`TEMPLATE` (the leaf is not a group). A unit with ``n > L∞`` rows in a
    group keeps L∞ of them by systematic sampling over its leaves: with its
    prefix counts P_j (leaves in order) and an offset U in [0, n) from
    ``hash(pu, keys…, salt + 1)``, leaf j keeps
    ``⌊(P_j·L∞ + U)/n⌋ − ⌊(P_{j−1}·L∞ + U)/n⌋`` rows — the floor or the ceiling
    of its share c_j·L∞/n (≤ c_j), L∞ in all, and c_j·L∞/n on average over U
    (Hermite's identity), so no leaf is favoured. Integers, a function of the
    unit's own rows and the salt. So a unit adds a non-negative integer vector
    of total ≤ L∞ to the leaves of each of its ≤ L0 groups.

    Returns
    -------
    str
        The SQL; its result columns are the keys, ``lf`` (leaf), ``units`` (per
        group, the sum over its leaves is the distinct units after bounding) and
        ``cnt`` (the bounded rows in the leaf), ordered by keys and leaf.

    Examples
    --------
    >>> sql = tree_sql(source="v", keys=("k0",), tree=Tree("x0", 0.0, 1.0, 16), l0=2,
    ...                linf=3, salt=5)
    >>> "ORDER BY h, k0" in sql and "rn < 2" in sql and "hash(pu, k0, 6)" in sql
    True
    """
    _check_salt_linf(salt, linf)
    keys_csv = "".join(f", {k}" for k in keys)
    key_filter = _row_filter(keys, nan or {})
    # The tree's leaves are not cells, so the L0 step is the exact one-step ranking of the
    # rows by (h, keys…) (no re-ranking of cells after it, as in TEMPLATE).
    ranked = (
        RANKED_L0.format(
            cell_hash=CELL_HASH.format(keys=keys_csv, salt=int(salt)),
            order=keys_csv,
            l0=l0,
            bin_filter="",
        )
        if keys
        else RANKED_ALL.format(bin_filter="")
    )
    return TREE_TEMPLATE.format(
        source=source,
        key_filter=key_filter,
        x=tree.column,
        x_nan=_is_nan(tree.column),
        key_select=keys_csv,
        lo=double(tree.lo),
        hi=double(tree.hi),
        width=double((tree.hi - tree.lo) / tree.resolution),
        last=tree.resolution - 1,
        ranked=ranked,
        keys=keys_csv,
        linf=linf,
        salt=int(salt) + 1,
        upto=_floor_div(f"(p * {linf} + u)", "n"),
        before=_floor_div(f"((p - c) * {linf} + u)", "n"),
        final_keys="".join(f"{k}, " for k in keys),
    )
