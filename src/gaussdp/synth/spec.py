"""TOML synthesis specs, mapped one to one onto :class:`~gaussdp.synth.Synthesizer`.

A spec::

    privacy_unit = "person"
    max_groups_per_unit = 3       # L0: cells of each marginal a person counts in
    max_rows_per_group = 1        # L∞: times a person counts in one cell
    rows = 10000                  # optional: synthetic rows (default: the estimated total)
    iters = 1000                  # optional: model-fit iterations
    round_iters = 100             # optional, AIM: re-fit iterations after each round
    max_sigma = 1e4               # optional: refuse budgets noisier than this per 1-way cell
    method = "aim"                # optional: "mst" (default) or "aim"
    workload = 2                  # optional, AIM: an order, or [["age", "sex"], ...]
    rounds = 48                   # optional, AIM: T (default 16 × columns)
    max_model_size = 80           # optional, AIM: model size limit in MB
    compress = true               # optional: merge rare cells (noisy 1-way count < 3σ)
    compress_threshold = 3.0      # optional: that threshold, in σ

    [budget]                      # epsilon + delta, or rho
    epsilon = 1.0
    delta = 1e-6

    [[column]]
    name = "sex"
    categories = ["F", "M"]
    other = "other"               # optional: counts values outside the categories

    [[column]]
    name = "age"
    bounds = [0, 100]             # public; values outside go to the end bins
    bins = 10                     # or the edges [0, 18, 30, 50, 65, 100]
    integer = true                # optional: synthetic ages are integers

Unknown keys anywhere are an error; a column needs ``categories`` or
``bounds`` + ``bins`` (its domain is never taken from the data).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gaussdp.budget import Budget
from gaussdp.errors import invalid
from gaussdp.release.spec import _required, _unknown
from gaussdp.synth.core import Synthesizer
from gaussdp.synth.domain import Categorical, Column, Numeric

__all__ = ["synthesizer_from_spec"]

_TOP = {
    "privacy_unit",
    "budget",
    "max_groups_per_unit",
    "max_rows_per_group",
    "rows",
    "iters",
    "round_iters",
    "max_sigma",
    "method",
    "workload",
    "rounds",
    "max_model_size",
    "compress",
    "compress_threshold",
    "column",
}
_CATEGORICAL = {"name", "categories", "other"}
_NUMERIC = {"name", "bounds", "bins", "integer", "other"}
_BUDGET = {"epsilon", "delta", "rho"}


def _column(where: str, table: object) -> Column:
    if not isinstance(table, Mapping):
        raise ValueError(invalid(where, "a table", table))
    name = _required(where, table, "name")
    if "categories" in table:
        _unknown(where, table, _CATEGORICAL)
        return Categorical(name, table["categories"], other=table.get("other"))
    if "bounds" in table or "bins" in table:
        _unknown(where, table, _NUMERIC)
        return Numeric(
            name,
            _required(where, table, "bounds"),
            _required(where, table, "bins"),
            integer=table.get("integer", False),
            other=table.get("other"),
        )
    raise ValueError(
        invalid(
            f"{where} ({name!r})",
            "a public domain: `categories`, or `bounds` and `bins` (never taken from the data)",
            sorted(table),
        )
    )


def synthesizer_from_spec(spec: Mapping[str, Any], source: object) -> Synthesizer:
    """Build a :class:`Synthesizer` from a parsed spec (``rows`` is read by the caller).

    Examples
    --------
    >>> spec = {"privacy_unit": "id", "max_groups_per_unit": 1, "max_rows_per_group": 1,
    ...         "budget": {"rho": 0.5},
    ...         "column": [{"name": "a", "categories": ["x", "y"]},
    ...                    {"name": "b", "bounds": [0, 1], "bins": 4}]}
    >>> synthesizer_from_spec(spec, None).sizes
    {'a': 2, 'b': 4}
    >>> try:
    ...     synthesizer_from_spec({**spec, "column": [{"name": "a"}]}, None)
    ... except ValueError as error:
    ...     print(error)  # doctest: +ELLIPSIS
    spec.column[0] ('a') must be a public domain: `categories`, or `bounds` and `bins` ...
    """
    if not isinstance(spec, Mapping):
        raise TypeError(invalid("spec", "a table (mapping)", spec))
    _unknown("spec", spec, _TOP)
    budget_table = _required("spec", spec, "budget")
    if not isinstance(budget_table, Mapping):
        raise ValueError(invalid("spec.budget", "a table", budget_table))
    _unknown("spec.budget", budget_table, _BUDGET)
    columns = _required("spec", spec, "column")
    if not isinstance(columns, list) or not columns:
        raise ValueError(invalid("spec.column", "a non-empty array of [[column]] tables", columns))
    return Synthesizer(
        source,
        columns=[_column(f"spec.column[{i}]", t) for i, t in enumerate(columns)],
        privacy_unit=_required("spec", spec, "privacy_unit"),
        budget=Budget(**budget_table),
        max_groups_per_unit=_required("spec", spec, "max_groups_per_unit"),
        max_rows_per_group=_required("spec", spec, "max_rows_per_group"),
        iters=spec.get("iters", 1000),
        round_iters=spec.get("round_iters", 100),
        max_sigma=spec.get("max_sigma", 1e4),
        method=spec.get("method", "mst"),
        workload=spec.get("workload"),
        rounds=spec.get("rounds"),
        max_model_size=spec.get("max_model_size", 80.0),
        compress=spec.get("compress", True),
        compress_threshold=spec.get("compress_threshold", 3.0),
    )
