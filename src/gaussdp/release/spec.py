"""TOML release specs, mapped one to one onto :class:`~gaussdp.release.Release`.

A spec::

    privacy_unit = "user_id"
    max_groups_per_unit = 3
    max_rows_per_group = 2
    confidence = 0.95            # optional
    engine = "duckdb"            # optional
    memory_limit = "1GB"         # optional, DuckDB (ignored on Spark): spills beyond it
    temp_directory = "/scratch"  # optional, DuckDB: where it spills
    threads = 4                  # optional, DuckDB

    [column_types]               # optional: declared instead of inferred types
    minutes = "DOUBLE"

    [budget]                     # exactly one of: epsilon+delta, rho, mu
    epsilon = 1.0
    delta = 1e-6

    [[query]]
    statistic = "mean"           # count, distinct_units, sum, mean, variance, std, quantile,
                                 # histogram, vector_sum, vector_mean
    column = "minutes"           # `columns = [...]` for vector statistics
    bounds = [0, 120]            # sum, mean, variance, std, quantile; `bins = [...]` for
                                 # histogram; `norm` for vectors
    by = ["page"]                # optional
    keys = ["home", "search"]    # optional public keys; else private partition selection
    weight = 1.0                 # optional
    max_groups_per_unit = 2      # optional: this query's own L0 (grouped queries)
    max_rows_per_group = 1       # optional: this query's own L∞

    [[query]]
    statistic = "quantile"
    column = "minutes"
    bounds = [0, 120]
    quantiles = [0.25, 0.5, 0.75]
    resolution = 1024            # optional: leaves of the tree (a power of branching)
    branching = 4                # optional

Unknown keys anywhere are an error (a typo never silently changes a release).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gaussdp.budget import Budget
from gaussdp.errors import invalid
from gaussdp.release.core import Release
from gaussdp.release.queries import Query, key_tuples

__all__ = ["load_spec", "release_from_spec"]

_TOP = {
    "privacy_unit",
    "budget",
    "max_groups_per_unit",
    "max_rows_per_group",
    "confidence",
    "engine",
    "selection_delta",
    "selection_weight",
    "memory_limit",
    "temp_directory",
    "threads",
    "column_types",
    "query",
}
_QUERY = {
    "statistic",
    "column",
    "columns",
    "by",
    "bounds",
    "bins",
    "norm",
    "keys",
    "weight",
    "quantiles",
    "resolution",
    "branching",
    "max_groups_per_unit",
    "max_rows_per_group",
}
_BUDGET = {"epsilon", "delta", "rho", "mu"}


def load_spec(path: str | Path) -> dict[str, Any]:
    """Read a TOML spec file (validated when turned into a release).

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        If it is not valid TOML.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(invalid("spec", "an existing TOML file", str(path)))
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise ValueError(invalid("spec", "valid TOML", f"{path}: {error}")) from error


def _unknown(where: str, table: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise ValueError(invalid(f"{where} keys", f"among {sorted(allowed)}", extra))


def _required(where: str, table: Mapping[str, Any], key: str) -> Any:
    if key not in table:
        raise ValueError(invalid(f"{where}.{key}", "given", None))
    return table[key]


def release_from_spec(
    spec: Mapping[str, Any], source: object, *, engine: str | None = None
) -> Release:
    """Build a :class:`Release` from a parsed spec; ``engine`` overrides the spec's.

    Examples
    --------
    >>> import pandas as pd
    >>> spec = {"privacy_unit": "user", "max_groups_per_unit": 1, "max_rows_per_group": 1,
    ...         "budget": {"rho": 0.5}, "query": [{"statistic": "count"}]}
    >>> release_from_spec(spec, pd.DataFrame({"user": [1]})).queries[0].name
    'count'
    >>> try:
    ...     release_from_spec({**spec, "budgt": {}}, None)
    ... except ValueError as error:
    ...     print(error)  # doctest: +ELLIPSIS
    spec keys must be among [...], got ['budgt']
    """
    if not isinstance(spec, Mapping):
        raise TypeError(invalid("spec", "a table (mapping)", spec))
    _unknown("spec", spec, _TOP)
    budget_table = _required("spec", spec, "budget")
    if not isinstance(budget_table, Mapping):
        raise ValueError(invalid("spec.budget", "a table", budget_table))
    _unknown("spec.budget", budget_table, _BUDGET)
    budget = Budget(**budget_table)
    queries = _required("spec", spec, "query")
    if not isinstance(queries, list) or not queries:
        raise ValueError(invalid("spec.query", "a non-empty array of [[query]] tables", queries))
    engine = engine or spec.get("engine", "duckdb")
    duckdb_options = {
        key: spec.get(key)
        for key in ("memory_limit", "temp_directory", "threads")
        if engine == "duckdb"
    }
    release = Release(
        source,
        privacy_unit=_required("spec", spec, "privacy_unit"),
        budget=budget,
        max_groups_per_unit=_required("spec", spec, "max_groups_per_unit"),
        max_rows_per_group=_required("spec", spec, "max_rows_per_group"),
        engine=engine,
        confidence=spec.get("confidence", 0.95),
        selection_delta=spec.get("selection_delta"),
        selection_weight=spec.get("selection_weight", 1.0),
        column_types=spec.get("column_types"),
        **duckdb_options,
    )
    for i, table in enumerate(queries):
        where = f"spec.query[{i}]"
        if not isinstance(table, Mapping):
            raise ValueError(invalid(where, "a table", table))
        _unknown(where, table, _QUERY)
        statistic = _required(where, table, "statistic")
        if "column" in table and "columns" in table:
            raise ValueError(invalid(where, "given column or columns, not both", sorted(table)))
        try:
            release.add(_query(table, statistic))
        except (ValueError, TypeError) as error:
            # Name the query, as the events file's errors name the event.
            message = f"query[{i}] ({statistic}): {error}"
            raise (TypeError if isinstance(error, TypeError) else ValueError)(message) from error
    return release


def _query(table: Mapping[str, Any], statistic: Any) -> Query:
    columns = table.get("columns", [table["column"]] if "column" in table else [])
    by = table.get("by", [])
    levels = table.get("quantiles")
    return Query(
        statistic,
        tuple(columns) if isinstance(columns, list) else columns,
        (by,) if isinstance(by, str) else tuple(by),
        bounds=table.get("bounds"),
        bins=tuple(table["bins"]) if "bins" in table else None,
        norm=table.get("norm"),
        keys=key_tuples(table.get("keys")),
        weight=table.get("weight", 1.0),
        quantiles=tuple(levels) if isinstance(levels, list) else levels,
        resolution=table.get("resolution"),
        branching=table.get("branching"),
        max_groups_per_unit=table.get("max_groups_per_unit"),
        max_rows_per_group=table.get("max_rows_per_group"),
    )
