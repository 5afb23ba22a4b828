"""Query specifications: what a release computes, validated at construction.

A :class:`Query` is a frozen value object; :class:`~gaussdp.release.Release`
builds them from its ``.count()``, ``.sum()``, … methods and a TOML spec builds
the same objects from its ``[[query]]`` tables, one to one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, cast

from gaussdp._validation import check_finite, check_int, check_positive, check_probability
from gaussdp.errors import invalid
from gaussdp.release.sql import MAX_ROWS_PER_GROUP

__all__ = [
    "BOUNDED",
    "MAX_RESOLUTION",
    "STATISTICS",
    "KeyTuple",
    "Query",
    "Statistic",
    "key_tuples",
]

Statistic = Literal[
    "count",
    "sum",
    "mean",
    "histogram",
    "vector_sum",
    "vector_mean",
    "variance",
    "std",
    "quantile",
    "distinct_units",
]
STATISTICS: tuple[Statistic, ...] = (
    "count",
    "sum",
    "mean",
    "histogram",
    "vector_sum",
    "vector_mean",
    "variance",
    "std",
    "quantile",
    "distinct_units",
)
#: Statistics of one value column clamped to ``bounds``.
BOUNDED: tuple[Statistic, ...] = ("sum", "mean", "variance", "std", "quantile")
#: Largest number of leaves of a quantile tree (the engine returns one row per group and leaf).
MAX_RESOLUTION = 2**16

KeyTuple = tuple[object, ...]


def _names(name: str, value: object, *, allow_empty: bool) -> tuple[str, ...]:
    """Normalise a column name or a sequence of names to a tuple of non-empty strings."""
    if value is None:
        items: tuple[object, ...] = ()
    elif isinstance(value, str):
        items = (value,)
    elif isinstance(value, Sequence):
        items = tuple(value)
    else:
        raise TypeError(invalid(name, "a column name or a list of column names", value))
    if not allow_empty and not items:
        raise ValueError(invalid(name, "at least one column name", value))
    for item in items:
        if not isinstance(item, str) or not item:
            raise TypeError(invalid(name, "non-empty column names (str)", value))
    if len(set(items)) != len(items):
        raise ValueError(invalid(name, "distinct column names", value))
    return cast(tuple[str, ...], items)


def key_tuples(keys: Iterable[object] | None) -> tuple[KeyTuple, ...] | None:
    """Public keys as tuples: a scalar ``k`` becomes ``(k,)``, lists become tuples.

    Examples
    --------
    >>> key_tuples(["mon", ("tue",), ["wed"]])
    (('mon',), ('tue',), ('wed',))
    """
    if keys is None:
        return None
    if isinstance(keys, str):
        raise TypeError(invalid("keys", "a list of group keys", keys))
    return tuple(tuple(k) if isinstance(k, list | tuple) else (k,) for k in keys)


def _keys(value: object, width: int) -> tuple[KeyTuple, ...] | None:
    """Normalise public group keys to a tuple of tuples of length ``width``."""
    if value is None:
        return None
    if width == 0:
        raise ValueError(invalid("keys", "given only together with by", value))
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise TypeError(invalid("keys", "a list of group keys", value))
    out: list[KeyTuple] = []
    for item in value:
        key: KeyTuple
        if width == 1 and not isinstance(item, list | tuple):
            key = (item,)
        elif isinstance(item, list | tuple) and len(item) == width:
            key = tuple(item)
        else:
            raise ValueError(
                invalid("keys", f"a list of {width}-tuples (one value per by column)", item)
            )
        if any(part is None for part in key):
            raise ValueError(
                invalid("keys", "free of None (rows with NULL keys are dropped)", item)
            )
        out.append(key)
    if not out:
        raise ValueError(invalid("keys", "a non-empty list of group keys", value))
    if len(set(out)) != len(out):
        raise ValueError(invalid("keys", "distinct", value))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Query:
    """One statistic, optionally per group.

    Parameters
    ----------
    statistic : str
        One of :data:`STATISTICS`. ``count`` counts rows; ``sum``, ``mean``,
        ``variance``, ``std`` and ``quantile`` use ``columns[0]`` clamped to
        ``bounds``; ``histogram`` counts rows per bin of ``columns[0]``
        (``bins`` are the edges); ``vector_sum``/``vector_mean`` use all
        ``columns`` as one vector clipped to L2 norm ``norm`` per row;
        ``distinct_units`` counts the privacy units of each group.
    columns : tuple of str
        Value columns: none for ``count`` and ``distinct_units``, one for the
        scalar statistics and ``histogram``, at least one for the vector
        statistics.
    by : tuple of str
        Group-by columns (empty: one global group).
    bounds : (float, float), optional
        Required for ``sum``, ``mean``, ``variance``, ``std``, ``quantile``:
        finite ``lo < hi``. Never taken from the data.
    bins : tuple of float, optional
        Required for ``histogram``: at least two finite, strictly increasing edges.
    norm : float, optional
        Required for the vector statistics: the L2 bound of one row's vector.
    keys : tuple of tuples, optional
        Public group keys (one value per ``by`` column). Given: exactly these
        groups are released, missing ones with noise. Omitted: groups are
        chosen by private partition selection.
    weight : float
        Relative share of the release's budget, > 0.
    quantiles : tuple of float, optional
        Required for ``quantile``: the levels q, each in [0, 1], strictly increasing.
    resolution, branching : int, optional
        ``quantile`` only: the tree has ``resolution`` equal-width leaves over
        ``bounds`` (default 1024, at most 2¹⁶), ``branching`` children per node
        (default 4; ``resolution`` must be a power of it).
    max_groups_per_unit, max_rows_per_group : int, optional
        This query's own L0 and L∞, instead of the release's; its sensitivity
        and the accounting use them. L0 only for grouped queries (``by`` or a
        histogram's bins); no L∞ for ``distinct_units`` (meaningless there).

    Examples
    --------
    >>> Query("sum", ("minutes",), by=("day",), bounds=(0.0, 120.0)).name
    'sum(minutes)'
    """

    statistic: Statistic
    columns: tuple[str, ...] = ()
    by: tuple[str, ...] = ()
    bounds: tuple[float, float] | None = None
    bins: tuple[float, ...] | None = None
    norm: float | None = None
    keys: tuple[KeyTuple, ...] | None = None
    weight: float = 1.0
    quantiles: tuple[float, ...] | None = None
    resolution: int | None = None
    branching: int | None = None
    max_groups_per_unit: int | None = None
    max_rows_per_group: int | None = None

    def __post_init__(self) -> None:
        if self.statistic not in STATISTICS:
            raise ValueError(invalid("statistic", f"one of {list(STATISTICS)}", self.statistic))
        columns = _names("columns", self.columns, allow_empty=True)
        by = _names("by", self.by, allow_empty=True)
        object.__setattr__(self, "columns", columns)
        object.__setattr__(self, "by", by)
        object.__setattr__(self, "keys", _keys(self.keys, len(by)))
        object.__setattr__(self, "weight", check_positive("weight", self.weight))
        stat = self.statistic
        expected = {"count": 0, "distinct_units": 0, "histogram": 1} | dict.fromkeys(BOUNDED, 1)
        if stat in expected and len(columns) != expected[stat]:
            raise ValueError(invalid("columns", f"{expected[stat]} column(s) for {stat}", columns))
        if stat.startswith("vector") and not columns:
            raise ValueError(invalid("columns", f"at least one column for {stat}", columns))
        if stat in BOUNDED:
            object.__setattr__(self, "bounds", _bounds(self.bounds, stat))
        elif self.bounds is not None:
            raise ValueError(invalid("bounds", f"omitted for {stat}", self.bounds))
        if stat == "histogram":
            object.__setattr__(self, "bins", _bins(self.bins))
        elif self.bins is not None:
            raise ValueError(invalid("bins", f"omitted for {stat}", self.bins))
        if stat.startswith("vector"):
            if self.norm is None:
                raise ValueError(invalid("norm", f"given for {stat} (an L2 bound per row)", None))
            norm = check_positive("norm", self.norm)
            _magnitude("norm", norm, "in [1e-100, 1e100]")
            object.__setattr__(self, "norm", norm)
        elif self.norm is not None:
            raise ValueError(invalid("norm", f"omitted for {stat}", self.norm))
        overlap = set(by) & set(columns)
        if overlap:
            raise ValueError(invalid("by", "disjoint from the value columns", sorted(overlap)))
        self._check_tree()
        self._check_bounds_per_unit()

    def _check_tree(self) -> None:
        if self.statistic != "quantile":
            for name in ("quantiles", "resolution", "branching"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        invalid(name, f"omitted for {self.statistic}", getattr(self, name))
                    )
            return
        object.__setattr__(self, "quantiles", _levels(self.quantiles))
        branching = check_int("branching", 4 if self.branching is None else self.branching)
        if not 2 <= branching <= 64:
            raise ValueError(invalid("branching", "an integer in [2, 64]", self.branching))
        resolution = check_int("resolution", 1024 if self.resolution is None else self.resolution)
        power = branching
        while power < resolution:
            power *= branching
        if power != resolution or resolution > MAX_RESOLUTION:
            raise ValueError(
                invalid(
                    "resolution",
                    f"a power of branching = {branching} (>= it, <= {MAX_RESOLUTION})",
                    self.resolution,
                )
            )
        object.__setattr__(self, "branching", branching)
        object.__setattr__(self, "resolution", resolution)

    def _check_bounds_per_unit(self) -> None:
        if self.max_groups_per_unit is not None:
            if not self.by and self.statistic != "histogram":
                raise ValueError(
                    invalid(
                        "max_groups_per_unit",
                        "given only for a grouped query (by or a histogram's bins): an "
                        "ungrouped query has one group",
                        self.max_groups_per_unit,
                    )
                )
            l0 = check_int("max_groups_per_unit", self.max_groups_per_unit, minimum=1)
            object.__setattr__(self, "max_groups_per_unit", l0)
        if self.max_rows_per_group is not None:
            if self.statistic == "distinct_units":
                raise ValueError(
                    invalid(
                        "max_rows_per_group",
                        "omitted for distinct_units (a unit counts once in each of its "
                        "groups, however many rows it has there)",
                        self.max_rows_per_group,
                    )
                )
            linf = check_int("max_rows_per_group", self.max_rows_per_group, minimum=1)
            if linf > MAX_ROWS_PER_GROUP:
                raise ValueError(
                    invalid("max_rows_per_group", f"at most {MAX_ROWS_PER_GROUP}", linf)
                )
            object.__setattr__(self, "max_rows_per_group", linf)

    @property
    def name(self) -> str:
        """A short label such as ``count``, ``mean(minutes)`` or ``vector_sum(x, y)``."""
        if not self.columns:
            return self.statistic
        return f"{self.statistic}({', '.join(self.columns)})"


#: Magnitudes allowed for bounds and norms: the noise grid γ (a power of two ≈ bound/256)
#: must be a normal double and γ·(noise) must stay finite for any σ² the sampler draws.
MAGNITUDE = (1e-100, 1e100)


def _magnitude(name: str, value: float, constraint: str) -> None:
    if not MAGNITUDE[0] <= value <= MAGNITUDE[1]:
        raise ValueError(invalid(name, constraint, value))


def _bounds(value: object, stat: str) -> tuple[float, float]:
    constraint = (
        f"a pair (lo, hi) of finite numbers with lo < hi and max(|lo|, |hi|) in "
        f"[1e-100, 1e100] for {stat} (never from the data)"
    )
    if value is None or isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(invalid("bounds", constraint, value))
    if len(value) != 2:
        raise ValueError(invalid("bounds", constraint, value))
    lo = check_finite("bounds[0]", value[0])
    hi = check_finite("bounds[1]", value[1])
    if not lo < hi:
        raise ValueError(invalid("bounds", constraint, value))
    _magnitude("bounds", max(abs(lo), abs(hi)), constraint)
    return (lo, hi)


def _levels(value: object) -> tuple[float, ...]:
    constraint = "a non-empty list of strictly increasing levels in [0, 1]"
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = (value,)
    if value is None or isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise ValueError(invalid("quantiles", constraint, value))
    levels = tuple(check_probability("quantiles", v) for v in value)
    if any(not a < b for a, b in itertools.pairwise(levels)):
        raise ValueError(invalid("quantiles", constraint, value))
    return levels


def _bins(value: object) -> tuple[float, ...]:
    constraint = "at least two finite, strictly increasing bin edges"
    if value is None or isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(invalid("bins", constraint, value))
    edges = tuple(check_finite("bins", v) for v in value)
    if len(edges) < 2 or any(not a < b for a, b in itertools.pairwise(edges)):
        raise ValueError(invalid("bins", constraint, value))
    if any(math.isinf(e) for e in edges):  # pragma: no cover - check_finite refuses
        raise ValueError(invalid("bins", constraint, value))
    return edges
