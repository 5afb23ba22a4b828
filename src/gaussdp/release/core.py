"""The :class:`Release` builder, its run, and what a run returns."""

from __future__ import annotations

import datetime
import math
import numbers
import os
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from gaussdp._validation import check_int, check_positive, check_probability
from gaussdp.accounting.events import Composed
from gaussdp.accounting.filter import PrivacyFilter, budget_accountant, refusal, spend_target
from gaussdp.budget import Budget
from gaussdp.errors import BudgetExceededError, EngineError, invalid
from gaussdp.mechanisms import DiscreteGaussian
from gaussdp.privacy.discrete import SIGMA2_MAX, SIGMA2_MIN
from gaussdp.random import RandomSource, _refuse_foreign_seed, check_rng
from gaussdp.release import _noise, tree
from gaussdp.release.engines import DECLARABLE, Engine, check_memory_limit, open_engine
from gaussdp.release.keys import typed_keys
from gaussdp.release.plan import Grouping, Measure, Plan, PlanAccounting, make_plan
from gaussdp.release.queries import KeyTuple, Query, Statistic, key_tuples
from gaussdp.release.sql import MAX_ROWS_PER_GROUP, Bounding, tree_sql

if TYPE_CHECKING:
    import pandas as pd

    from gaussdp.release.ledger import Ledger

__all__ = ["PrivacyReport", "QueryCost", "Release", "ReleaseResult", "RunProgress"]


@dataclass(frozen=True, slots=True)
class QueryCost:
    """The noise and privacy cost of one part of a query (or of one partition selection).

    ``sigma`` is the noise scale in the statistic's units (γ·√σ², σ² in grid
    units); ``sensitivity`` the L2 sensitivity in the same units (grid rounding
    included); ``mu`` = Δ/√(σ² − τ²) the part's μ-GDP by the smoothing argument
    (:class:`gaussdp.LatticeGaussian`, up to ``slack``; ``None`` if σ² ≤ τ² = 9,
    possible only with ρ accounting, or if the part is accounted by its exact
    discrete Gaussian PLD, ``"pld"`` mode); ``rho`` = Δ²/(2σ²) its exact ρ-zCDP (CKS
    Thm 4/14); ``cells`` the a-priori number of noisy coordinates (2⁶⁴ × bins
    for privately selected groups) and ``slack`` = cells·a; ``delta`` is
    nonzero only for partition selection. Which of μ and ρ is accounted is
    :attr:`PrivacyReport.mode`.
    """

    query: str
    by: tuple[str, ...]
    part: str
    sensitivity: float
    gamma: float
    sigma: float
    rho: float
    mu: float | None
    cells: int
    slack: float
    delta: float = 0.0
    threshold: int | None = None


_ACCOUNTING: dict[PlanAccounting, str] = {
    "gdp": (
        "mu-GDP: each part is exact lattice noise N_Z(0, s^2 + 9), within e^(+-c*a) of a "
        "(Delta/s)-GDP Gaussian mechanism over its c cells by the smoothing argument "
        "(gaussdp.LatticeGaussian, a < 1e-76); mu = sqrt(sum mu_i^2) (DRS Cor 3.3), "
        "slack A = sum c_i*a; partition selection's delta added; epsilon at delta = "
        "eps_mu((delta - selection delta)*e^-A) + 2A (DRS Cor 2.13), from the realised "
        "noise, by the accountant of the budget (gaussdp.accounting)"
    ),
    "pld": (
        "privacy loss distributions: each count-like part (a unit changes <= L0 cells by "
        "<= K grid units each) is exact N_Z(0, s^2), dominated by L0 shifts by K "
        "(monotone likelihood ratio) and accounted by its exact PLD; other parts by the "
        "smoothing argument (N_Z(0, s^2 + 9), slack A); partition selection's delta added; "
        "epsilon at delta from the composed PLD of the realised noise, by the accountant of "
        "the budget (gaussdp.accounting)"
    ),
    "zcdp": (
        "rho-zCDP per part (CKS Thm 4/14), added over parts (Bun & Steinke 2016 Lemma 2.3); "
        "partition selection as approximate zCDP (Bun & Steinke 2016 Lemma 8.3); epsilon at "
        "delta by CKS Cor 13"
    ),
}

#: Said first when the plan shown is the μ-GDP one a μ-budget filter or ledger is charged.
_REPLANNED = (
    "re-planned for the filter or ledger charged, whose accountant cannot account for exact "
    "discrete Gaussian PLDs (a mu budget's): "
)


@dataclass(frozen=True, slots=True)
class PrivacyReport:
    """What a release spends, known before any data are read.

    Attributes
    ----------
    costs : tuple of QueryCost
        One entry per noisy part (a mean has a sum and a count part).
    mode : {'pld', 'gdp', 'zcdp'}
        The accounting, which follows the budget: for (ε, δ) budgets privacy
        loss distributions (``'pld'``: count-like parts by their exact discrete
        Gaussian PLD, the others by the smoothing argument; ``'gdp'`` if no part
        is count-like), μ-GDP for μ budgets, ρ-zCDP for ρ budgets.
    rho : float
        Σρᵢ (Bun & Steinke 2016 Lemma 2.3): the release is ρ-zCDP with
        partition selection's δ on top — in either mode (for information in
        μ mode).
    mu : float or None
        √Σμᵢ² (DRS Cor 3.3): the release is μ-GDP up to ``slack``, with
        partition selection's δ on top; ``None`` if some part has σ² ≤ τ² or
        is accounted by its exact PLD (``'pld'`` mode).
    slack : float
        A = Σcᵢ·a over the parts accounted by the smoothing argument: the
        release's pmf is within e^{±A} of the composition's with those parts
        continuous Gaussians (a ≈ 2.8·10⁻⁷⁷ per coordinate, ≈ 5·10⁻⁵⁸ per
        privately grouped part; it enters ε as below).
    selection_delta : float
        δ spent by private partition selection (0 with public keys).
    delta : float or None
        The run's δ (the budget's).
    epsilon : float or None
        ε at ``delta`` from the realised σ²'s: in μ mode
        ε_μ((δ − ``selection_delta``)·e^{−A}) + 2A
        (DRS Cor 2.13, computed by the accountants); in PLD mode the PLD
        accountant's certified ε of the composition at
        (δ − ``selection_delta``)·e^{−A}, + 2A; in ρ
        mode CKS Cor 13 at δ − ``selection_delta``. An upper bound that holds
        for the exact discrete noise actually drawn.
    budget : Budget
        The budget the release was planned against.
    replanned : bool
        ``True`` if this is the μ-GDP plan that :meth:`Release.run` charges to a filter
        or ledger whose accountant cannot account for the exact discrete Gaussian
        parts (a μ budget's), instead of the ``'pld'`` plan of the release's own budget
        (:meth:`Release.report_for`).
    event : Composed or None
        The plan's event (:attr:`~gaussdp.release.plan.Plan.event`), what is charged and
        what the accountants certified ``epsilon`` from; not part of :meth:`to_dict`.
    """

    costs: tuple[QueryCost, ...]
    mode: PlanAccounting
    rho: float
    mu: float | None
    slack: float
    selection_delta: float
    delta: float | None
    epsilon: float | None
    budget: Budget
    mechanism: str = "discrete Gaussian (exact sampling, CKS Alg 3)"
    replanned: bool = False
    event: Composed | None = field(default=None, repr=False, compare=False)

    @property
    def accounting(self) -> str:
        """How the release is accounted, with the results cited."""
        if self.replanned:
            return _REPLANNED + _ACCOUNTING[self.mode]
        return _ACCOUNTING[self.mode]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "mechanism": self.mechanism,
            "mode": self.mode,
            "replanned": self.replanned,
            "accounting": self.accounting,
            "budget": self.budget.as_dict(),
            "rho": self.rho,
            "mu": self.mu,
            "slack": self.slack,
            "selection_delta": self.selection_delta,
            "delta": self.delta,
            "epsilon": self.epsilon,
            "costs": [
                {
                    "query": c.query,
                    "by": list(c.by),
                    "part": c.part,
                    "sensitivity": c.sensitivity,
                    "gamma": c.gamma,
                    "sigma": c.sigma,
                    "rho": c.rho,
                    "mu": c.mu,
                    "cells": c.cells,
                    "slack": c.slack,
                    "delta": c.delta,
                    "threshold": c.threshold,
                }
                for c in self.costs
            ],
        }


@dataclass(frozen=True, slots=True)
class ReleaseResult:
    """A finished release: the noisy table, the privacy report and the SQL that bounded the data.

    ``frame`` has one row per released value: the group columns (user names,
    empty for groups a query does not use), ``bin`` for histograms,
    ``statistic``, ``value``, ``std`` (noise standard deviation; for means a
    delta-method approximation), ``ci_low``/``ci_high`` (an interval that holds
    the noise-free value of the *bounded* query with probability ≥ the
    release's ``confidence``).
    """

    frame: pd.DataFrame
    report: PrivacyReport
    sql: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RunProgress:
    """Where a :meth:`Release.run` is, for a progress display (``run(progress=...)``).

    A run reads the table ``passes`` times: once to validate it, then once
    per grouping. ``done`` is the engine's estimate of the fraction of the
    current pass done (``None`` where the engine cannot tell, e.g. Spark);
    ``rows`` the number of rows with a privacy unit, known after the
    validation pass. These describe the input, not the release: they reach
    the operator's own callback only and are never part of the result.
    """

    stage: str
    step: int
    passes: int
    done: float | None = None
    rows: int | None = None


def _bin_label(edges: tuple[float, ...], j: int) -> str:
    close = "]" if j == len(edges) - 2 else ")"
    return f"[{edges[j]:g}, {edges[j + 1]:g}{close}"


class Release:
    """A declarative differentially private release over one table.

    Build it with :meth:`count`, :meth:`distinct_units`, :meth:`sum`,
    :meth:`mean`, :meth:`variance`, :meth:`std`, :meth:`quantile`,
    :meth:`median`, :meth:`histogram`, :meth:`vector_sum`, :meth:`vector_mean`
    (each returns the release, so calls chain), inspect :attr:`report` (known
    before the data are read), then :meth:`run`.

    Parameters
    ----------
    source : str, path, DataFrame or table
        A CSV or Parquet path, a pandas/polars/Arrow frame, or (engine
        ``'spark'``) a Spark DataFrame or table name.
    privacy_unit : str
        The column identifying a person (all their rows are protected together).
        Rows whose privacy unit is NULL are dropped.
    budget : Budget
        What this release may spend.
    max_groups_per_unit : int
        L0 ≥ 1: a unit contributes to at most this many groups of each grouped
        query (chosen uniformly at random among its groups).
    max_rows_per_group : int
        L∞ ≥ 1: a unit's rows in one group count at most this many times
        (counts capped, sums rescaled to this many rows).
    engine : {'duckdb', 'spark'}
        Where the bounding and aggregation run. Default DuckDB.
    confidence : float
        Level of the reported intervals, in (0, 1). Default 0.95.
    selection_delta : float, optional
        δ for private partition selection (default: half the budget's δ).
    selection_weight : float
        Budget weight of each private partition selection relative to a query's
        (default 1).
    memory_limit : int or str, optional
        DuckDB only: the memory DuckDB may use, in bytes or as a size string
        (``"2GB"``, ``"512MiB"``), at least 125 MB (DuckDB's documented minimum
        for a thread). Default a quarter of the machine's memory, at most 1 GiB;
        beyond it DuckDB spills to ``temp_directory``.
    temp_directory : str or path, optional
        DuckDB only: where it spills (default a fresh directory under the
        system's temporary directory, removed after the run).
    threads : int, optional
        DuckDB only: worker threads (default all cores), at most one per 125 MB
        of ``memory_limit`` (DuckDB's documented minimum a thread; more ran out of
        memory). Results do not depend on it: the bounding is exact integer
        arithmetic.
    column_types : mapping, optional
        Declared types of some columns, ``{column: type}`` with types among
        ``BIGINT``, ``DOUBLE``, ``VARCHAR``, ``DATE``, ``TIMESTAMP``, ``BOOLEAN``;
        the engine casts them (a value that does not convert is refused before
        anything is spent). Use it when the types must not depend on the data,
        e.g. a CSV whose columns are inferred.

    Examples
    --------
    >>> import pandas as pd
    >>> from gaussdp.random import ChaCha20Random
    >>> visits = pd.DataFrame({"user": [1, 1, 2, 3], "day": ["mon", "tue", "mon", "mon"],
    ...                        "minutes": [10.0, 30.0, 5.0, 50.0]})
    >>> release = (Release(visits, privacy_unit="user", budget=Budget(epsilon=1.0, delta=1e-6),
    ...                    max_groups_per_unit=2, max_rows_per_group=1)
    ...            .count(by="day", keys=["mon", "tue", "wed"])
    ...            .mean("minutes", bounds=(0, 60)))
    >>> round(release.report.epsilon, 6) <= 1.0
    True
    >>> result = release.run(rng=ChaCha20Random(7))
    >>> list(result.frame.columns)
    ['day', 'statistic', 'value', 'std', 'ci_low', 'ci_high']
    >>> list(result.frame["statistic"])
    ['count', 'count', 'count', 'mean(minutes)']
    """

    def __init__(
        self,
        source: object,
        *,
        privacy_unit: str,
        budget: Budget,
        max_groups_per_unit: int,
        max_rows_per_group: int,
        engine: str = "duckdb",
        confidence: float = 0.95,
        selection_delta: float | None = None,
        selection_weight: float = 1.0,
        memory_limit: int | str | None = None,
        temp_directory: str | os.PathLike[str] | None = None,
        threads: int | None = None,
        column_types: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(privacy_unit, str) or not privacy_unit:
            raise TypeError(invalid("privacy_unit", "a column name (str)", privacy_unit))
        if not isinstance(budget, Budget):
            raise TypeError(invalid("budget", "a gaussdp.Budget", budget))
        if engine not in ("duckdb", "spark"):
            raise ValueError(invalid("engine", "'duckdb' or 'spark'", engine))
        self.source = source
        self.privacy_unit = privacy_unit
        self.budget = budget
        self.max_groups_per_unit = check_int("max_groups_per_unit", max_groups_per_unit, minimum=1)
        self.max_rows_per_group = check_int("max_rows_per_group", max_rows_per_group, minimum=1)
        if self.max_rows_per_group > MAX_ROWS_PER_GROUP:
            raise ValueError(
                invalid("max_rows_per_group", f"at most {MAX_ROWS_PER_GROUP}", max_rows_per_group)
            )
        self.engine = engine
        self.confidence = check_probability("confidence", confidence, open_interval=True)
        self.selection_delta = (
            None
            if selection_delta is None
            else check_probability("selection_delta", selection_delta, open_interval=True)
        )
        self.selection_weight = check_positive("selection_weight", selection_weight)
        self.memory_limit = _memory_limit(memory_limit)
        if temp_directory is not None and not isinstance(temp_directory, str | os.PathLike):
            raise TypeError(invalid("temp_directory", "a directory path", temp_directory))
        self.temp_directory = temp_directory
        self.threads = None if threads is None else check_int("threads", threads, minimum=1)
        self.column_types = _column_types(column_types)
        if engine != "duckdb" and (memory_limit, temp_directory, threads) != (None, None, None):
            raise ValueError(
                invalid(
                    "memory_limit, temp_directory and threads",
                    "given only for engine 'duckdb' (configure Spark through its session)",
                    engine,
                )
            )
        self._queries: list[Query] = []
        #: The last plan of each kind (``exact``) made for :meth:`_charged_plan`, with the
        #: objects it was made from (see :meth:`_cached_plan`).
        self._plans: dict[bool, tuple[tuple[object, ...], Plan]] = {}
        #: The in-memory filter every run without a ledger is charged to (see :meth:`run`).
        self.filter = PrivacyFilter(budget)

    # -- building ---------------------------------------------------------------------
    @property
    def queries(self) -> tuple[Query, ...]:
        """The queries added so far."""
        return tuple(self._queries)

    def add(self, query: Query) -> Release:
        """Add a :class:`Query`; returns the release."""
        if not isinstance(query, Query):
            raise TypeError(invalid("query", "a gaussdp.release.Query", query))
        self._queries.append(query)
        return self

    @staticmethod
    def _by(by: str | Sequence[str] | None) -> tuple[str, ...]:
        if by is None:
            return ()
        if isinstance(by, str):
            return (by,)
        return tuple(by)

    def count(
        self,
        by: str | Sequence[str] | None = None,
        *,
        keys: Sequence[object] | None = None,
        weight: float = 1.0,
        max_groups_per_unit: int | None = None,
        max_rows_per_group: int | None = None,
    ) -> Release:
        """Count rows (each unit's rows per group capped at ``max_rows_per_group``).

        Every statistic takes ``max_groups_per_unit``/``max_rows_per_group`` to
        state its own L0/L∞ instead of the release's (see :class:`Query`).
        """
        return self._query("count", (), by, keys, weight, max_groups_per_unit, max_rows_per_group)

    def distinct_units(
        self,
        by: str | Sequence[str] | None = None,
        *,
        keys: Sequence[object] | None = None,
        weight: float = 1.0,
        max_groups_per_unit: int | None = None,
    ) -> Release:
        """Count the distinct privacy units per group (each unit in at most L0 groups)."""
        return self._query("distinct_units", (), by, keys, weight, max_groups_per_unit, None)

    def sum(
        self,
        column: str,
        *,
        bounds: tuple[float, float],
        by: str | Sequence[str] | None = None,
        keys: Sequence[object] | None = None,
        weight: float = 1.0,
        max_groups_per_unit: int | None = None,
        max_rows_per_group: int | None = None,
    ) -> Release:
        """Sum ``column`` with each value clamped to ``bounds`` (required, never from the data)."""
        return self._query(
            "sum",
            (column,),
            by,
            keys,
            weight,
            max_groups_per_unit,
            max_rows_per_group,
            bounds=bounds,
        )

    def mean(
        self,
        column: str,
        *,
        bounds: tuple[float, float],
        by: str | Sequence[str] | None = None,
        keys: Sequence[object] | None = None,
        weight: float = 1.0,
        max_groups_per_unit: int | None = None,
        max_rows_per_group: int | None = None,
    ) -> Release:
        """Mean of ``column`` clamped to ``bounds``: a noisy sum over a noisy count."""
        return self._query(
            "mean",
            (column,),
            by,
            keys,
            weight,
            max_groups_per_unit,
            max_rows_per_group,
            bounds=bounds,
        )

    def variance(
        self,
        column: str,
        *,
        bounds: tuple[float, float],
        by: str | Sequence[str] | None = None,
        keys: Sequence[object] | None = None,
        weight: float = 1.0,
        max_groups_per_unit: int | None = None,
        max_rows_per_group: int | None = None,
    ) -> Release:
        """Variance (÷ N) of ``column`` clamped to ``bounds``, from a noisy count, sum and sum
        of squares of the centred values (docs/release.md states the estimator and its bias)."""
        return self._query(
            "variance",
            (column,),
            by,
            keys,
            weight,
            max_groups_per_unit,
            max_rows_per_group,
            bounds=bounds,
        )

    def std(
        self,
        column: str,
        *,
        bounds: tuple[float, float],
        by: str | Sequence[str] | None = None,
        keys: Sequence[object] | None = None,
        weight: float = 1.0,
        max_groups_per_unit: int | None = None,
        max_rows_per_group: int | None = None,
    ) -> Release:
        """Standard deviation of ``column`` clamped to ``bounds``: √ of :meth:`variance`'s value."""
        return self._query(
            "std",
            (column,),
            by,
            keys,
            weight,
            max_groups_per_unit,
            max_rows_per_group,
            bounds=bounds,
        )

    def quantile(
        self,
        column: str,
        q: float | Sequence[float],
        *,
        bounds: tuple[float, float],
        by: str | Sequence[str] | None = None,
        keys: Sequence[object] | None = None,
        resolution: int = 1024,
        branching: int = 4,
        weight: float = 1.0,
        max_groups_per_unit: int | None = None,
        max_rows_per_group: int | None = None,
    ) -> Release:
        """Quantiles at levels ``q`` of ``column`` clamped to ``bounds``, from one noisy
        hierarchical histogram (``resolution`` leaves, ``branching`` children per node) with
        consistent post-processing (:mod:`gaussdp.release.tree`)."""
        # Any iterable of levels (a list, a numpy array, a pandas Series), not a string.
        if isinstance(q, str | bytes) or not isinstance(q, numbers.Real | Iterable):
            raise ValueError(invalid("q", "a level in [0, 1] or a sequence of levels", q))
        levels = (q,) if isinstance(q, numbers.Real) else tuple(q)
        return self._query(
            "quantile",
            (column,),
            by,
            keys,
            weight,
            max_groups_per_unit,
            max_rows_per_group,
            bounds=bounds,
            quantiles=levels,
            resolution=resolution,
            branching=branching,
        )

    def median(
        self,
        column: str,
        *,
        bounds: tuple[float, float],
        by: str | Sequence[str] | None = None,
        keys: Sequence[object] | None = None,
        weight: float = 1.0,
        max_groups_per_unit: int | None = None,
        max_rows_per_group: int | None = None,
    ) -> Release:
        """The median: :meth:`quantile` at 0.5 with the default tree."""
        return self.quantile(
            column,
            0.5,
            bounds=bounds,
            by=by,
            keys=keys,
            weight=weight,
            max_groups_per_unit=max_groups_per_unit,
            max_rows_per_group=max_rows_per_group,
        )

    def histogram(
        self,
        column: str,
        *,
        bins: Sequence[float],
        by: str | Sequence[str] | None = None,
        keys: Sequence[object] | None = None,
        weight: float = 1.0,
        max_groups_per_unit: int | None = None,
        max_rows_per_group: int | None = None,
    ) -> Release:
        """Rows per bin of ``column`` (edges ``bins``; values outside go to the end bins)."""
        return self._query(
            "histogram",
            (column,),
            by,
            keys,
            weight,
            max_groups_per_unit,
            max_rows_per_group,
            bins=tuple(bins),
        )

    def vector_sum(
        self,
        columns: Sequence[str],
        *,
        norm: float,
        by: str | Sequence[str] | None = None,
        keys: Sequence[object] | None = None,
        weight: float = 1.0,
        max_groups_per_unit: int | None = None,
        max_rows_per_group: int | None = None,
    ) -> Release:
        """Sum of the vectors ``columns`` with each row clipped to L2 norm ``norm``."""
        return self._query(
            "vector_sum",
            tuple(columns),
            by,
            keys,
            weight,
            max_groups_per_unit,
            max_rows_per_group,
            norm=norm,
        )

    def vector_mean(
        self,
        columns: Sequence[str],
        *,
        norm: float,
        by: str | Sequence[str] | None = None,
        keys: Sequence[object] | None = None,
        weight: float = 1.0,
        max_groups_per_unit: int | None = None,
        max_rows_per_group: int | None = None,
    ) -> Release:
        """Mean of the vectors ``columns`` (rows clipped to ``norm``): noisy sum / noisy count."""
        return self._query(
            "vector_mean",
            tuple(columns),
            by,
            keys,
            weight,
            max_groups_per_unit,
            max_rows_per_group,
            norm=norm,
        )

    def _query(
        self,
        statistic: Statistic,
        columns: tuple[str, ...],
        by: str | Sequence[str] | None,
        keys: Sequence[object] | None,
        weight: float,
        l0: int | None,
        linf: int | None,
        **options: Any,
    ) -> Release:
        return self.add(
            Query(
                statistic,
                columns,
                self._by(by),
                keys=key_tuples(keys),
                weight=weight,
                max_groups_per_unit=l0,
                max_rows_per_group=linf,
                **options,
            )
        )

    # -- planning ---------------------------------------------------------------------
    def plan(self, *, exact: bool = True) -> Plan:
        """The data-independent plan (groupings, noise, costs).

        ``exact=False``: under an (ε, δ) budget, every part on the μ-GDP (smoothing)
        plan, as :meth:`run` uses for a filter or ledger whose accountant cannot
        account for the exact discrete Gaussian parts (a μ budget's).
        """
        return make_plan(
            list(self._queries),
            privacy_unit=self.privacy_unit,
            budget=self.budget,
            max_groups_per_unit=self.max_groups_per_unit,
            max_rows_per_group=self.max_rows_per_group,
            selection_delta=self.selection_delta,
            selection_weight=self.selection_weight,
            exact=exact,
        )

    @property
    def report(self) -> PrivacyReport:
        """The privacy report of this release as :meth:`run` charges it to its own
        :attr:`filter` (no data read): for an (ε, δ) budget the ``'pld'`` plan where it
        applies. Charged to another filter or ledger, see :meth:`report_for`."""
        return self.report_for()

    def report_for(
        self, *, ledger: Ledger | None = None, filter: PrivacyFilter | None = None
    ) -> PrivacyReport:
        """The privacy report of the plan :meth:`run` with these arguments charges.

        A filter or ledger whose accountant cannot account for the exact discrete
        Gaussian parts of a ``'pld'`` plan (one with a μ budget) is charged the μ-GDP
        plan instead (:meth:`plan` with ``exact=False``); its report says so
        (``replanned``). Nothing is charged and no data are read.

        Raises
        ------
        BudgetExceededError
            The filter or ledger can never pay for the release, whatever it has
            spent: a μ or ρ budget cannot spend the δ of private partition
            selection. The message is :meth:`run`'s; nothing is reserved.
        ValueError
            Noise the sampler cannot draw (a σ² outside [1e-12, 1e300] grid units²: a
            tiny budget, or weights such as 1e-302 : 1), :meth:`run`'s refusal.
        """
        plan, replanned = self._charged_plan(ledger, filter)
        return _report(plan, self._queries, replanned=replanned)

    def _charged_plan(
        self, ledger: Ledger | None, filter: PrivacyFilter | None
    ) -> tuple[Plan, bool]:
        """The plan charged to ``ledger``, else ``filter``, else :attr:`filter`, and whether
        it is the μ-GDP re-plan of a ``'pld'`` plan.

        Refuses (:class:`BudgetExceededError`, the message :meth:`run`'s check gives) a
        plan the target could never pay for, so that no report is given for it."""
        spend_to = spend_target(ledger, filter, self.filter)
        budget = spend_to.budget if ledger is None else ledger.total
        plan, replanned = self._cached_plan(exact=True), False
        if plan.accounting == "pld" and not budget_accountant(budget).supports(plan.event):
            plan, replanned = self._cached_plan(exact=False), True  # e.g. a μ budget: μ-GDP plan
        _refuse_unpayable(plan, budget, ledger, spend_to)
        _refuse_undrawable(plan)
        return plan, replanned

    def _cached_plan(self, *, exact: bool) -> Plan:
        """:meth:`plan`, made once for :attr:`report` and :meth:`run` alike (the noise
        calibration is ≈ 0.2 s of CPU). Reused only while every input of the plan is the
        very object it was made from (immutable: ``str``, numbers, a frozen
        :class:`~gaussdp.Budget`, frozen queries); anything replaced or added plans
        again. The plan never leaves the release (:meth:`plan` makes a fresh one), so
        no caller can change what a later run bounds and charges."""
        inputs = (
            self.privacy_unit,
            self.budget,
            self.max_groups_per_unit,
            self.max_rows_per_group,
            self.selection_delta,
            self.selection_weight,
            *self._queries,
        )
        cached = self._plans.get(exact)
        if (
            cached is not None
            and len(cached[0]) == len(inputs)
            and all(a is b for a, b in zip(cached[0], inputs, strict=True))
        ):
            return cached[1]
        plan = self.plan(exact=exact)
        self._plans[exact] = (inputs, plan)
        return plan

    # -- running ----------------------------------------------------------------------
    def run(
        self,
        *,
        rng: RandomSource | None = None,
        ledger: Ledger | None = None,
        label: str | None = None,
        filter: PrivacyFilter | None = None,
        raw: bool = False,
        progress: Callable[[RunProgress], None] | None = None,
    ) -> ReleaseResult:
        """Bound, aggregate, add noise, post-process; every run is charged to a filter.

        The release's event (:attr:`~gaussdp.release.plan.Plan.event`) is charged
        to ``ledger`` if given (the persistent filter), else to ``filter`` if
        given, else to :attr:`filter`, the in-memory
        :class:`~gaussdp.accounting.PrivacyFilter` created from the release's
        budget: running the same release twice, or more queries against the same
        filter, is charged each time and refused once over.

        Order: plan, check that the sampler can draw every planned noise;
        refuse if the filter cannot afford the release (before the source is
        opened: nothing is read); open the input, check its schema and read
        every needed column once (:meth:`Engine.validate`: a malformed line, a
        value that does not convert, a corrupt file fail here), convert public
        keys to the columns' types — nothing is spent on any of these failures
        — then charge (the ledger reserves), run the SQL, draw the noise, commit
        the reservation.

        All randomness comes from ``rng`` — the L0 salts (drawn first, one per
        grouping), then the noise — so ``ChaCha20Random(seed)`` replays a
        release exactly; the default is a fresh :class:`~gaussdp.random.SystemRandom`.

        ``raw=True`` skips the clamping of counts at 0: count and histogram
        values (and their interval ends) are the noisy integers as drawn —
        bounded count + N_Z(0, σ²), unbiased and possibly negative. For
        estimators that combine measurements (e.g. least squares over noisy
        marginals in :mod:`gaussdp.synth`), which clamping would bias. Either
        way the values are post-processing of the same noisy integers: the
        privacy guarantee and the charge are the same.

        ``progress``, if given, is called with a :class:`RunProgress` as each
        pass over the data starts and, on DuckDB, a few times a second during
        it (from another thread); it cannot change the run: a callback that
        raises is dropped with a ``RuntimeWarning`` and the release goes on.

        Raises
        ------
        ValueError, TypeError
            Bad queries, missing or non-numeric columns, keys that do not fit
            their column's type, unreadable or malformed data (one line that
            never shows data values), noise the sampler cannot draw, a bad
            ``rng``, both ``ledger`` and ``filter``, ``GAUSSDP_BOUNDING=compiled``
            for a grouping the compiled path cannot take (decided while the data
            are read). Nothing was charged.
        RuntimeError
            A seeded ``rng`` (:class:`~gaussdp.random.ChaCha20Random`) in a process
            other than the one that made it (a forked child repeats the parent's noise,
            which the budget would pay for as independent), or a filter used outside
            the process that made it or copied (a forked child, a pickled or copied
            release: see :class:`~gaussdp.accounting.PrivacyFilter`). Nothing was
            read or charged.
        FileNotFoundError
            A path that does not exist.
        BudgetExceededError
            The filter or ledger cannot afford the release (nothing was read or drawn).
        EngineError
            The engine failed after the charge (e.g. out of memory, an integer
            overflow); one line, no data-bearing cause (the engine's message quotes rows); the
            charge stays counted.
        """
        source = check_rng(rng)
        _refuse_foreign_seed(source, "release")  # every run is charged (a ledger or filter)
        if not isinstance(raw, bool):
            raise TypeError(invalid("raw", "a bool", raw))
        plan, replanned = self._charged_plan(ledger, filter)
        spend_to = self.filter if filter is None else filter
        report = _report(plan, self._queries, replanned=replanned)
        noise = _noise_facts(plan, self.confidence)
        event = plan.event
        # Refuse before the data source is even opened.
        if ledger is not None:
            ledger.check(event, what="this release")
        elif not spend_to.can_accept(event):
            spend_to.accept(event, what="this release")  # raises BudgetExceededError
        try:
            engine = _open(self)
        except EngineError as error:  # an unreadable input is bad input: nothing reserved
            raise ValueError(str(error)) from None  # the engine's message quotes rows
        try:
            tracker = _Tracker(progress, engine, len(plan.groupings) + 1)
            tracker.stage("reading the data")
            typed, queries = _prepare(self, plan, engine, source, tracker)
            reservation = None
            if ledger is not None:
                reservation = ledger.reserve(
                    event,
                    label=label or ", ".join(q.name for q in self._queries),
                    detail=report.to_dict(),
                    what="this release",
                )
            else:
                spend_to.accept(event, what="this release")
            aggregates = []
            for sql, bounding in queries:
                tracker.stage("bounding and aggregating")
                aggregates.append(engine.columns(sql, bounding=bounding))
        finally:
            engine.close()
        tracker.stage("adding noise")
        frame = _results(self, plan, typed, aggregates, source, noise, raw=raw)
        if ledger is not None and reservation is not None:
            ledger.commit(reservation)
        return ReleaseResult(frame, report, tuple(sql for sql, _ in queries))

    # -- spec -------------------------------------------------------------------------
    @classmethod
    def from_spec(
        cls,
        spec: Mapping[str, Any],
        source: object,
        *,
        engine: str | None = None,
    ) -> Release:
        """Build a release from a parsed spec (see :func:`gaussdp.release.load_spec`)."""
        from gaussdp.release.spec import release_from_spec

        return release_from_spec(spec, source, engine=engine)


def _refuse_unpayable(
    plan: Plan, budget: Budget, ledger: Ledger | None, spend_to: PrivacyFilter
) -> None:
    """Raise the refusal of :meth:`Release.run`'s check if ``budget`` can never pay ``plan``.

    Only a μ or ρ budget can: the δ of private partition selection costs it ∞
    (:func:`~gaussdp.accounting.filter.spent`) whatever its history. The check is the one
    :meth:`Release.run` makes (the ledger's :meth:`~gaussdp.release.Ledger.check`, the
    filter's :func:`~gaussdp.accounting.filter.refusal`), so is its message; nothing is
    recorded.
    """
    if budget.kind == "approx_dp" or plan.selection_delta == 0:
        return
    if ledger is not None:
        ledger.check(plan.event, what="this release")
        return
    message, _ = refusal(budget, spend_to.accountant, plan.event, what="this release")
    if message is not None:
        raise BudgetExceededError(message)


def _sigma2s(plan: Plan) -> dict[Fraction, None]:
    """Every planned σ² (grid units²) once, in plan order."""
    out: dict[Fraction, None] = {}
    for g in plan.groupings:
        out.update(dict.fromkeys(m.sigma2 for m in g.measures))
        if g.selection is not None:
            out[g.selection.sigma2] = None
    return out


def _refuse_undrawable(plan: Plan) -> None:
    """Refuse a plan with a σ² the sampler cannot draw, outside [1e-12, 1e300] (a tiny
    budget, or weights such as 1e-302 : 1), before any report or float of it is made:
    σ of a σ² beyond the largest double raised ``OverflowError`` in the report."""
    for sigma2 in _sigma2s(plan):
        if not SIGMA2_MIN <= sigma2 <= SIGMA2_MAX:
            shown = Decimal(sigma2.numerator) / Decimal(sigma2.denominator)
            raise ValueError(
                invalid(
                    "budget",
                    "large enough (and weights balanced enough) for noise the sampler "
                    f"draws: sigma^2 = {shown:.3g} grid units^2 is outside [1e-12, 1e300]",
                    plan.budget,
                )
            )


def _noise_facts(plan: Plan, level: float) -> dict[Fraction, _Noise]:
    """Std and interval half-widths per planned σ² (in the sampler's range:
    :func:`_refuse_undrawable` has checked the plan)."""
    return {sigma2: _Noise(sigma2, level) for sigma2 in _sigma2s(plan)}


class _Tracker:
    """Feeds :class:`RunProgress` to a callback: stages from the run, fractions from the engine."""

    def __init__(
        self, callback: Callable[[RunProgress], None] | None, engine: Engine, passes: int
    ) -> None:
        self.callback = callback
        self.state = RunProgress("", 0, passes)
        if callback is not None:
            engine.on_progress = self.done

    def stage(self, name: str) -> None:
        """A new pass over the data starts (or, for ``'adding noise'``, the passes are over)."""
        s = self.state
        step = s.step if name == "adding noise" else s.step + 1
        self.state = replace(s, stage=name, step=step, done=None)
        self._report(self.state)

    def done(self, fraction: float) -> None:
        self._report(replace(self.state, done=fraction))

    def _report(self, state: RunProgress) -> None:
        """Call the display; one that fails is dropped with a warning, never ending the run.

        Most calls come after the budget is charged: a display's error must not
        abort a release that has already been paid for.
        """
        callback = self.callback
        if callback is None:
            return
        try:
            callback(state)
        except Exception as error:
            self.callback = None
            warnings.warn(
                f"progress callback failed ({type(error).__name__}: {error}); "
                "the release goes on without it",
                RuntimeWarning,
                stacklevel=2,
            )


def _prepare(
    release: Release,
    plan: Plan,
    engine: Engine,
    rng: RandomSource,
    tracker: _Tracker | None = None,
) -> tuple[list[tuple[KeyTuple, ...] | None], tuple[tuple[str, Bounding | None], ...]]:
    """Every check that reads the input, before anything is reserved; the SQL to run.

    Engine failures here (a malformed line, a value that does not convert, a
    corrupt file) are bad input: a one-line ``ValueError`` that shows no data.
    """
    try:
        needs: dict[str, bool] = {release.privacy_unit: False}
        for q in release.queries:
            for c in q.by:
                needs.setdefault(c, False)
            for c in q.columns:
                needs[c] = True
        inferred = engine.schema
        if engine.several_files:
            # Parquet files of a folder or glob: a column no file has is NULL, of the type
            # declared or else implied by the spec (which files exist decides nothing).
            engine.absent(
                {
                    c: release.column_types.get(c)
                    or ("DOUBLE" if needs.get(c) else _csv_key_type(c, plan))
                    for c in [*needs, *release.column_types]
                    if c not in inferred
                }
            )
            inferred = engine.schema
            # Likewise a summed column whose type in the files read together is not a
            # number (text in the one file that has it, say): read as text and converted
            # per value, as a mixed column is; refusing it would let one file decide.
            engine.mixed_columns |= {
                c
                for c, numeric in needs.items()
                if numeric
                and c in inferred
                and c not in release.column_types
                and not engine.is_numeric(c)
            }
            # The unit and key columns that are numbers there are read as a CSV's are, as
            # text (one text per number: engines.number_text), then the unit as text and a
            # key as its public keys' type (or as declared): the same reading, value by
            # value, whether or not another file has the column as text or as another
            # number type (which made an integer a double, 2⁵³ + 1 as 2⁵³). So one unit's
            # file changes neither another unit's cells nor the text its cell hash reads.
            engine.mixed_columns |= {
                c
                for c, numeric in needs.items()
                if not numeric and c in inferred and engine.is_numeric(c)
            }
            # And a key column whose type there does not take its public keys (a number
            # in the one file that has it, keys 'a'): read as the keys' type, per value.
            engine.mixed_columns |= _keys_not_typed(
                release,
                plan,
                {c: t for c, t in inferred.items() if c not in engine.mixed_columns},
            )
        # A CSV's names are its first line: in a file without a header line, a row of
        # data, which an error message must not print.
        names = (
            f"the {len(inferred)} names of the CSV header line (not shown: in a file "
            "without a header line they are its first row)"
            if engine.text_columns
            else str(sorted(inferred))
        )
        for column in release.column_types:
            if column not in inferred:
                raise ValueError(invalid("column_types", f"keyed by columns among {names}", column))
        for key, column in _named_columns(release):
            if column not in inferred:
                raise ValueError(invalid(key, f"a column among {names}", column))
        converted: dict[str, str] = {}
        # A CSV's columns are text (a type inferred from the rows would tell neighbouring
        # tables apart), and so is a Parquet directory's column whose files disagree
        # (text in one, a number in another): a needed numeric column is read as a
        # number by the engines' one rule; a value that does not convert is NULL.
        text = [c for c in needs if engine.text_columns or c in engine.mixed_columns]
        for c in text:
            if c in release.column_types:
                continue
            if needs[c] and c in engine.object_columns:
                continue  # a pandas object column is summed only with a declared type
            # Likewise the unit's and the keys' types: the unit is text, a key column
            # takes the type of its public keys (text without them).
            converted[c] = "DOUBLE" if needs[c] else _csv_key_type(c, plan)
        engine.declare({**converted, **release.column_types})
        view = engine.register(plan.internal)
        schema = engine.schema
        nan = _nan_kinds(plan, schema, converted)
        # The groupings to bound, their salts not drawn yet (nothing is drawn before the
        # checks): the engine may choose their path while it reads, or refuse one.
        drafts = [b for b in _boundings(plan, view, [0] * len(plan.groupings), nan) if b]
        counts = engine.validate(view, list(plan.internal), drafts)
        if tracker is not None:
            tracker.state = replace(tracker.state, rows=counts.get("pu"))
        # By the schema alone: whether a column holds a value must not change a refusal.
        engine.check_columns(needs)
        typed: list[tuple[KeyTuple, ...] | None] = []
        for g in plan.groupings:
            columns = [plan.internal[k] for k in g.by]
            types = [schema[c] for c in columns]
            typed.append(None if g.keys is None else typed_keys(g.keys, columns, types))
        _refuse_text_nan_keys(plan, nan)
        return typed, _sqls(plan, view, rng, nan=nan)
    except EngineError as error:
        if "(OutOfMemoryException;" in str(error):
            raise  # not the input's fault: an engine failure (exit status 4), as is memory
        raise ValueError(str(error)) from None  # the engine's message quotes rows


def _nan_kinds(
    plan: Plan, schema: Mapping[str, str], converted: Mapping[str, str]
) -> dict[str, str]:
    """How NaN is written in each internal column (:func:`gaussdp.release.sql._row_filter`):
    ``"float"`` in a floating-point column, ``"text"`` in a unit or key column read as
    text (a CSV's, a pandas ``object`` one, a folder's mixed one: :func:`_csv_key_type`),
    where the text ``nan`` in any case is NaN. A NaN unit or key is dropped as a NULL one
    is, whatever the input kind (docs/release.md)."""
    nan = {}
    for internal, column in plan.internal.items():
        kind = schema[column].lower()
        if kind in ("float", "double", "real"):
            nan[internal] = "float"
        elif converted.get(column) == "VARCHAR":
            nan[internal] = "text"
    return nan


def _refuse_text_nan_keys(plan: Plan, nan: Mapping[str, str]) -> None:
    """Refuse a public key ``nan`` (any case) of a column read as text: its rows are dropped
    as NaN (:func:`_nan_kinds`), so the key could only ever be noise. By the keys alone."""
    for g in plan.groupings:
        for at, column in enumerate(g.by):
            if g.keys is None or nan.get(column) != "text":
                continue
            for key in g.keys:
                value = key[at]
                if isinstance(value, str) and value.lower() == "nan":
                    raise ValueError(
                        invalid(
                            f"keys for column {plan.internal[column]!r} (read as text)",
                            "text other than nan in any case (nan is NaN there: its rows "
                            "are dropped, as NULL ones are)",
                            value,
                        )
                    )


def _named_columns(release: Release) -> list[tuple[str, str]]:
    """Each column the release reads, with the spec key that names it (for messages)."""
    named = [("privacy_unit", release.privacy_unit)]
    for i, q in enumerate(release.queries):
        named += [(f"query[{i}].by", c) for c in q.by]
        named += [(f"query[{i}].columns", c) for c in q.columns]
    return named


def _keys_not_typed(release: Release, plan: Plan, inferred: Mapping[str, str]) -> set[str]:
    """The key columns (user names; none declared in ``column_types``) whose type in
    ``inferred`` does not take their public keys (:func:`typed_keys` refuses them)."""
    refused = set()
    for g in plan.groupings:
        for at, column in enumerate(plan.internal[b] for b in g.by):
            if g.keys is None or column in release.column_types or column not in inferred:
                continue
            try:
                typed_keys([(key[at],) for key in g.keys], [column], [inferred[column]])
            except TypeError:
                refused.add(column)
    return refused


def _csv_key_type(column: str, plan: Plan) -> str:
    """The type a CSV's unit or key ``column`` (user name) is read as: that of its public
    keys where every grouping that has them agrees (integers, floats, booleans, dates,
    timestamps), else text. Never a type inferred from the rows, which one row could
    change."""
    kinds = set()
    for g in plan.groupings:
        by = [plan.internal[b] for b in g.by]
        if column in by and g.keys is not None:
            at = by.index(column)
            kinds |= {_key_kind(key[at]) for key in g.keys}
    return kinds.pop() if len(kinds) == 1 else "VARCHAR"


def _key_kind(value: object) -> str:
    if isinstance(value, bool | np.bool_):
        return "BOOLEAN"
    if isinstance(value, numbers.Integral):
        return "BIGINT"
    if isinstance(value, numbers.Real):
        return "DOUBLE"
    if isinstance(value, datetime.datetime):
        return "TIMESTAMP"
    if isinstance(value, datetime.date):
        return "DATE"
    return "VARCHAR"


def _boundings(
    plan: Plan, view: str, salts: Sequence[int], nan: Mapping[str, str] | None
) -> list[Bounding | None]:
    """Each grouping's :class:`Bounding` with its L0 salt (``None`` for a quantile tree's)."""
    return [
        None
        if g.tree is not None
        else Bounding(
            source=view,
            keys=g.by,
            histogram=g.histogram,
            values=tuple(g.values),
            outputs=tuple(g.outputs),
            l0=g.l0,
            linf=g.linf,
            salt=salt,
            nan=nan,
        )
        for g, salt in zip(plan.groupings, salts, strict=True)
    ]


def _sqls(
    plan: Plan, view: str, rng: RandomSource, *, nan: Mapping[str, str] | None = None
) -> tuple[tuple[str, Bounding | None], ...]:
    """One query per grouping, with its own L0 and L∞; each L0 salt is 62 bits drawn from
    ``rng`` (issue 11 item 5). A grouping without a quantile tree also gets its
    :class:`Bounding`, which lets DuckDB compute the same result by its compiled path."""
    salts = [rng.randbits(62) for _ in plan.groupings]
    queries: list[tuple[str, Bounding | None]] = []
    for g, salt, bounding in zip(
        plan.groupings, salts, _boundings(plan, view, salts, nan), strict=True
    ):
        if bounding is None:
            assert g.tree is not None
            sql = tree_sql(
                source=view, keys=g.by, tree=g.tree, l0=g.l0, linf=g.linf, salt=salt, nan=nan
            )
            queries.append((sql, None))
        else:
            queries.append((bounding.sql(), bounding))
    return tuple(queries)


_SIZE = re.compile(r"\s*\d+(\.\d+)?\s*([KMGT]i?B|B)?\s*", re.IGNORECASE)


def _memory_limit(value: object) -> int | str | None:
    """A memory limit: bytes (an int) or a size string like ``"2GB"``/``"512MiB"``, at
    least 125 MB (:func:`~gaussdp.release.engines.check_memory_limit`)."""
    if value is None:
        return None
    if (isinstance(value, str) and _SIZE.fullmatch(value)) or (
        isinstance(value, int) and not isinstance(value, bool)
    ):
        check_memory_limit(value)
        return value
    raise ValueError(
        invalid("memory_limit", "bytes (an int >= 125 MB) or a size such as '2GB'", value)
    )


def _column_types(value: object) -> dict[str, str]:
    if value is None:
        return {}
    constraint = f"a mapping of column names to types among {sorted(DECLARABLE)}"
    if not isinstance(value, Mapping):
        raise TypeError(invalid("column_types", constraint, value))
    out = {}
    for column, kind in value.items():
        if not isinstance(column, str) or not isinstance(kind, str):
            raise TypeError(invalid("column_types", constraint, value))
        if kind.upper() not in DECLARABLE:
            raise ValueError(
                invalid(f"column_types[{column!r}]", f"one of {sorted(DECLARABLE)}", kind)
            )
        out[column] = kind.upper()
    return out


def _open(release: Release) -> Engine:
    return open_engine(
        release.engine,
        release.source,
        memory_limit=release.memory_limit,
        temp_directory=release.temp_directory,
        threads=release.threads,
    )


def _aggregate(
    release: Release, rng: RandomSource | None = None
) -> tuple[Plan, list[list[tuple[Any, ...]]]]:
    """Run only the engine part (bounding and aggregation); for tests and audits.

    The rows are those of :meth:`Engine.columns`, the fetch a release uses.
    """
    plan = release.plan()
    engine = _open(release)
    try:
        _, queries = _prepare(release, plan, engine, check_rng(rng))
        results = [engine.columns(sql, bounding=bounding) for sql, bounding in queries]
    finally:
        engine.close()
    return plan, [list(zip(*(c.tolist() for c in columns), strict=True)) for columns in results]


def _report(plan: Plan, queries: Sequence[Query], *, replanned: bool = False) -> PrivacyReport:
    costs: list[QueryCost] = []
    for p in plan.parts:
        g = plan.groupings[p.grouping]
        selection = g.selection if p.query is None else None
        if selection is not None:
            name, by = "partition selection", tuple(plan.internal[k] for k in g.by)
        else:
            q = queries[p.query or 0]
            name, by = q.name, q.by
        costs.append(
            QueryCost(
                name,
                by,
                p.kind,
                p.sensitivity * p.gamma,
                p.gamma,
                p.sigma,
                p.rho,
                p.mu,
                p.cells,
                p.slack,
                selection.delta if selection is not None else 0.0,
                selection.threshold if selection is not None else None,
            )
        )
    return PrivacyReport(
        tuple(costs),
        plan.accounting,
        plan.rho,
        plan.mu,
        plan.slack,
        plan.selection_delta,
        plan.budget.delta,
        plan.epsilon,
        plan.budget,
        replanned=replanned,
        event=plan.event,
    )


class _Noise:
    """Per-measure noise facts: std and the half-widths of intervals at three levels
    (``confidence``, and Bonferroni's over two and three parts). From the tails: the
    level (1 + confidence)/2 rounds to 1.0 for a confidence of 1 − 2⁻⁵³."""

    def __init__(self, sigma2: Fraction, confidence: float) -> None:
        dg = DiscreteGaussian(sigma2)
        self.std = math.sqrt(dg.variance)
        miss = 1 - confidence
        self.half = dg._half_width(miss / 2)
        self.half_bonferroni = dg._half_width(miss / 4)
        self.half_third = dg._half_width(miss / 6)


_Ints = np.ndarray[Any, Any]  # int64, or object (Python ints) beyond int64
_Columns = dict[str, np.ndarray[Any, Any]]  # one query's result, column by column


def _ints(column: np.ndarray[Any, Any]) -> _Ints:
    """An engine result column as int64 (NULL, e.g. the SUM of an empty table, is 0)."""
    try:
        return column.astype(np.int64, copy=False)
    except TypeError:  # a NULL
        return np.array([0 if v is None else int(v) for v in column], dtype=np.int64)


def _cells(
    g: Grouping, typed: tuple[KeyTuple, ...] | None, columns: list[np.ndarray[Any, Any]]
) -> tuple[list[_Ints], list[_Ints], _Ints]:
    """Key columns (user values), aggregate columns and distinct-unit counts, one entry per cell.

    Engine rows are matched to the public keys by the keys' typed values
    (``typed``, :func:`gaussdp.release.keys.typed_keys`), in the column's type.
    Privately selected groups keep the engine's order, which the SQL fixes
    (``ORDER BY`` the keys), so a seeded ``rng`` replays the selection.
    """
    width = len(g.by) + (1 if g.histogram is not None else 0)
    n_out = len(g.outputs)
    rows = len(columns[0])
    keys = columns[:width]
    units = _ints(columns[width])
    aggs = [_ints(c) for c in columns[width + 1 : width + 1 + n_out]]
    if not g.by and g.histogram is None:
        if not rows:
            return [], [np.zeros(1, np.int64) for _ in range(n_out)], np.zeros(1, np.int64)
        return [], aggs, units
    if g.keys is None and g.by:  # private partition selection happens later
        return keys, aggs, units
    # Public keys (given, or only bins): every cell appears, missing ones with zeros.
    bins: list[int | None] = (
        list(range(len(g.histogram[1]) - 1)) if g.histogram is not None else [None]
    )
    public = g.keys if g.keys is not None else ((),)
    values = typed if typed is not None else public
    index = {key: i for i, key in enumerate(zip(*keys, strict=True))} if rows else {}
    wanted: list[KeyTuple] = []
    hits: list[int] = []
    for base, value in zip(public, values, strict=True):
        for b in bins:
            tail = (b,) if b is not None else ()
            wanted.append(base + tail)
            hits.append(index.get(value + tail, -1))
    at = np.array(hits, dtype=np.intp)
    found = at >= 0
    take = np.where(found, at, 0)

    def pick(column: _Ints) -> _Ints:
        if not rows:
            return np.zeros(len(at), np.int64)
        return np.where(found, column[take], 0)

    key_columns = [np.array([k[j] for k in wanted], dtype=object) for j in range(width)]
    return key_columns, [pick(a) for a in aggs], pick(units)


@dataclass(frozen=True, slots=True)
class _Leaves:
    """A quantile tree's nonzero leaf counts, sparse: engine row i adds ``count[i]`` to leaf
    ``leaf[i]`` of group ``group[i]`` (−1: a group that is not released). Each (group, leaf)
    appears once (the SQL groups by keys and leaf)."""

    group: np.ndarray[Any, Any]
    leaf: np.ndarray[Any, Any]
    count: np.ndarray[Any, Any]

    def kept(self, keep: np.ndarray[Any, Any]) -> _Leaves:
        """Only the groups where ``keep`` (bool per group) holds, renumbered in order."""
        number = np.where(keep, np.cumsum(keep) - 1, -1)
        group = np.where(self.group >= 0, number[np.maximum(self.group, 0)], -1)
        return _Leaves(group, self.leaf, self.count)

    def dense(self, groups: int, resolution: int) -> _Ints:
        """The groups × leaves array of counts."""
        out = np.zeros((groups, resolution), dtype=np.int64)
        at = self.group >= 0
        out[self.group[at], self.leaf[at]] = self.count[at]
        return out


def _tree_cells(
    g: Grouping, typed: tuple[KeyTuple, ...] | None, columns: list[np.ndarray[Any, Any]]
) -> tuple[list[_Ints], _Leaves, _Ints]:
    """Key columns, the leaf counts (sparse, :class:`_Leaves`) and distinct units per group.

    The engine's rows are (keys…, leaf, units, count), ordered by keys and leaf
    (:func:`gaussdp.release.sql.tree_sql`); a group's units are the sum of its
    rows' ``units``. Public keys (or the one group of an ungrouped query) all
    appear, missing ones with zero counts. The counts stay sparse until private
    partition selection has dropped most candidate groups: 10⁶ candidates ×
    256 leaves would be 2 GB of zeros.
    """
    import pandas as pd

    width = len(g.by)
    rows = len(columns[0])
    keys = columns[:width]
    # Each row's group: the keys factorised column by column, in order of first appearance
    # (the engine's order, which the SQL fixes), the codes combined after each column so
    # they stay below the number of rows.
    code = np.zeros(rows, dtype=np.int64)
    for column in keys:
        part, uniques = pd.factorize(column, use_na_sentinel=False)
        code = pd.factorize(code * len(uniques) + part)[0]
    # A group's first row is where the code exceeds every earlier one (codes count up). Its
    # units are summed by code, whatever the order of its rows (exact int64 sums).
    first = np.flatnonzero(code > np.maximum.accumulate(np.r_[-1, code[:-1]]))
    units = np.zeros(len(first), dtype=np.int64)
    np.add.at(units, code, _ints(columns[width + 1]))
    leaf, count = _ints(columns[width]), _ints(columns[width + 2])
    if g.by and g.keys is None:  # private partition selection happens later
        return [column[first] for column in keys], _Leaves(code, leaf, count), units
    public = g.keys if g.keys is not None else ((),)
    values = typed if typed is not None else public
    found = zip(*(column[first] for column in keys), strict=True) if width else [()] * len(first)
    index = {key: i for i, key in enumerate(found)}
    at = np.array([index.get(v, -1) for v in values], dtype=np.intp)
    hit = at >= 0
    position = np.full(len(first), -1, dtype=np.int64)  # engine's group → public key's index
    position[at[hit]] = np.flatnonzero(hit)
    key_columns = [np.array([k[j] for k in public], dtype=object) for j in range(width)]
    units = np.where(hit, units[at], 0) if len(first) else np.zeros(len(at), np.int64)
    return key_columns, _Leaves(position[code], leaf, count), units


def _tree_frame(
    q: Query,
    base: dict[str, Any],
    leaves: _Ints,
    m: Measure,
    confidence: float,
    rng: RandomSource,
) -> _Columns:
    """One quantile query's columns: noisy tree, consistent leaves, monotone inversion,
    intervals.

    Noise is drawn level by level, root first (:mod:`gaussdp.release.tree`). The
    ``std`` column is NaN: a quantile's error is stated by its interval.
    """
    lo, hi = q.bounds or (0.0, 0.0)
    levels_q = q.quantiles or ()
    branching, resolution = q.branching or 2, q.resolution or 1
    groups = leaves.shape[0]
    noisy = []
    for level in tree.node_counts(leaves, branching):
        z = np.asarray(_noise.draw(m.sigma2, level.size, rng))
        noisy.append(np.asarray(_add(level.reshape(-1), z), dtype=np.float64).reshape(level.shape))
    consistent = tree.consistent_leaves(noisy, branching)
    values = tree.invert(consistent, levels_q, lo, hi)
    h = tree.rank_halfwidth(math.sqrt(m.sigma2), resolution, branching, 1 - confidence)
    low, high = tree.quantile_intervals(consistent, levels_q, lo, hi, h)
    d = len(levels_q)
    data: _Columns = {c: np.repeat(v, d) for c, v in base.items()}
    labels = np.array([f"quantile({q.columns[0]}, {level:g})" for level in levels_q], object)
    data["statistic"] = np.tile(labels, groups)
    data["value"] = values.reshape(-1)
    data["std"] = np.full(groups * d, np.nan)
    data["ci_low"] = low.reshape(-1)
    data["ci_high"] = high.reshape(-1)
    return data


def _add(exact: _Ints, z: np.ndarray[Any, Any]) -> _Ints:
    """exact + z, in int64 when it cannot overflow, else in Python ints."""
    small = 2**62
    if (
        z.dtype == np.int64
        and (len(z) == 0 or int(np.abs(z).max()) < small)
        and (len(exact) == 0 or int(np.abs(exact).max()) < small)
    ):
        return np.asarray(exact + z)
    return np.asarray(exact.astype(object) + z.astype(object), dtype=object)


def _results(
    release: Release,
    plan: Plan,
    typed: list[tuple[KeyTuple, ...] | None],
    aggregates: list[list[np.ndarray[Any, Any]]],
    rng: RandomSource,
    noise: dict[Fraction, _Noise],
    *,
    raw: bool = False,
) -> pd.DataFrame:
    """Noise and post-processing, vectorised over cells (no per-cell Python loop).

    Each query's result stays numpy columns until one frame is built from their
    concatenation: a frame per query, reindexed, concatenated and re-typed copied
    the whole result four times (most of the post-processing's time at 10⁶ groups).
    """
    import pandas as pd

    queries = release.queries
    group_columns: list[str] = []
    for q in queries:
        for c in q.by:
            if c not in group_columns:
                group_columns.append(c)
    has_bins = any(q.statistic == "histogram" for q in queries)
    per_query: dict[int, _Columns] = {}
    for g, g_typed, result in zip(plan.groupings, typed, aggregates, strict=True):
        leaves: _Leaves | None = None
        aggs: list[_Ints] = []
        if g.tree is not None:
            keys, leaves, units = _tree_cells(g, g_typed, result)
        else:
            keys, aggs, units = _cells(g, g_typed, result)
        if g.selection is not None:
            s = g.selection
            z = _noise.draw(s.sigma2, len(units), rng)
            keep = np.asarray(_add(units, np.asarray(z)) >= s.threshold, dtype=bool)
            keys = [k[keep] for k in keys]
            aggs = [a[keep] for a in aggs]
            leaves = None if leaves is None else leaves.kept(keep)
            units = units[keep]
        n = len(units)
        base: dict[str, Any] = {
            plan.internal[k]: column for k, column in zip(g.by, keys, strict=False)
        }
        if leaves is not None and g.tree is not None:
            counts = leaves.dense(n, g.tree.resolution)
            for m in g.measures:  # one noisy tree per quantile query
                per_query[m.query] = _tree_frame(
                    queries[m.query], base, counts, m, release.confidence, rng
                )
            continue
        noisy: dict[tuple[int, str], tuple[_Ints, Measure, _Noise]] = {}
        for m in g.measures:
            z = _noise.draw(m.sigma2, n, rng)
            noisy[(m.query, m.role)] = (_add(aggs[m.output], np.asarray(z)), m, noise[m.sigma2])
        if g.histogram is not None:
            labels = np.array(
                [_bin_label(g.histogram[1], j) for j in range(len(g.histogram[1]) - 1)],
                dtype=object,
            )
            base["bin"] = labels[keys[-1].astype(np.intp)] if n else labels[:0]
        for qi in g.queries:
            per_query[qi] = _frame_for(queries[qi], qi, n, base, noisy, raw=raw)
    columns = [
        *group_columns,
        *(["bin"] if has_bins else []),
        "statistic",
        "value",
        "std",
        "ci_low",
        "ci_high",
    ]
    if not queries:
        return pd.DataFrame(columns=columns).astype(dict.fromkeys(columns[-4:], float))
    parts = [per_query[qi] for qi in range(len(queries))]
    data: dict[str, Any] = {}
    for c in columns:
        # A column a query lacks (another query's key, "bin") is NaN in its rows, as
        # pandas' reindex and concat made it; object columns get their values' type
        # (ints, floats, timestamps), as ``infer_objects`` gives a frame.
        column = np.concatenate(
            [p[c] if c in p else np.full(len(p["statistic"]), np.nan) for p in parts]
        )
        inferred = column.dtype == object and c != "statistic"  # labels: str already
        data[c] = pd.Series(column, copy=False).infer_objects() if inferred else column
    frame = pd.DataFrame(data, copy=False)
    for c in columns[-4:]:  # value, std, ci_low, ci_high
        if frame[c].dtype != np.float64:
            frame[c] = frame[c].astype(float)
    return frame


def _frame_for(
    q: Query,
    qi: int,
    n: int,
    base: dict[str, Any],
    noisy: dict[tuple[int, str], tuple[_Ints, Measure, _Noise]],
    *,
    raw: bool = False,
) -> _Columns:
    """One query's columns: a row per cell (per cell and coordinate for vectors, cell-major).

    ``raw``: counts are not clamped at 0 (see :meth:`Release.run`).
    """

    def floats(raw: _Ints) -> np.ndarray[Any, Any]:
        return np.asarray(raw.astype(np.float64), dtype=np.float64)

    def frame(stats: list[tuple[Any, ...]]) -> _Columns:
        # stats: (label, value, std, ci_low, ci_high) per coordinate; rows cell-major.
        d = len(stats)
        data: _Columns = {c: np.repeat(v, d) if d > 1 else v for c, v in base.items()}
        data["statistic"] = np.tile(np.array([label for label, *_ in stats], dtype=object), n)
        for j, name in enumerate(("value", "std", "ci_low", "ci_high"), start=1):
            # Views (a scalar std broadcast, read-only): _results' concatenation copies them.
            columns = [np.broadcast_to(np.asarray(st[j], dtype=np.float64), (n,)) for st in stats]
            data[name] = columns[0] if d == 1 else np.stack(columns, axis=1).reshape(-1)
        return data

    stat = q.statistic
    if stat in ("count", "histogram", "distinct_units"):
        v, _, nz = noisy[(qi, "count")]
        counts = floats(v)
        # Post-processing: a count is ≥ 0; so is its interval (unless raw values are asked for).
        floor = -np.inf if raw else 0.0
        return frame(
            [
                (
                    q.name,
                    np.maximum(counts, floor),
                    nz.std,
                    np.maximum(counts - nz.half, floor),
                    np.maximum(counts + nz.half, floor),
                )
            ]
        )
    if stat == "sum":
        v, m, nz = noisy[(qi, "sum")]
        total = floats(v) * m.gamma
        h = nz.half * m.gamma
        return frame([(q.name, total, nz.std * m.gamma, total - h, total + h)])
    if stat == "mean":
        lo, hi = q.bounds or (0.0, 0.0)
        vs, ms, nzs = noisy[(qi, "sum")]
        vc, _, nzc = noisy[(qi, "count")]
        s = floats(vs) * ms.gamma
        return frame([(q.name, *_ratio(s, floats(vc), nzs, nzc, ms.gamma, lo, hi))])
    if stat in ("variance", "std"):
        lo, hi = q.bounds or (0.0, 0.0)
        vs, ms, nzs = noisy[(qi, "sum")]
        vq, mq, nzq = noisy[(qi, "sumsq")]
        vc, _, nzc = noisy[(qi, "count")]
        value, std, low, high = _variance(
            floats(vs) * ms.gamma,
            floats(vq) * mq.gamma,
            floats(vc),
            (nzs.std * ms.gamma, nzq.std * mq.gamma, nzc.std),
            (nzs.half_third * ms.gamma, nzq.half_third * mq.gamma, nzc.half_third),
            (hi - lo) / 2,
        )
        if stat == "std":
            # sd = √var; its std by the delta method, capped at the largest possible sd.
            sd = np.sqrt(value)
            radius = (hi - lo) / 2
            safe = np.where(sd > 0, sd, 1.0)
            std = np.where(sd > 0, np.minimum(std / (2 * safe), radius), radius)
            value, low, high = sd, np.sqrt(low), np.sqrt(high)
        return frame([(q.name, value, std, low, high)])
    stats: list[tuple[Any, ...]] = []
    norm = q.norm or 0.0
    for a, column in enumerate(q.columns):
        v, m, nz = noisy[(qi, f"coord{a}")]
        label = f"{q.name}[{column}]"
        total = floats(v) * m.gamma
        if stat == "vector_sum":
            h = nz.half * m.gamma
            stats.append((label, total, nz.std * m.gamma, total - h, total + h))
        else:
            vc, _, nzc = noisy[(qi, "count")]
            stats.append((label, *_ratio(total, floats(vc), nz, nzc, m.gamma, -norm, norm)))
    return frame(stats)


def _ratio(
    s: np.ndarray[Any, Any],
    c: np.ndarray[Any, Any],
    nzs: _Noise,
    nzc: _Noise,
    gamma: float,
    lo: float,
    hi: float,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Means from noisy sums and counts: value, delta-method std, Bonferroni interval."""
    denom = np.maximum(c, 1.0)
    value = np.clip(s / denom, lo, hi)
    std = np.sqrt((nzs.std * gamma) ** 2 + (value * nzc.std) ** 2) / denom
    hs, hc = nzs.half_bonferroni * gamma, nzc.half_bonferroni
    c_lo, c_hi = c - hc, c + hc
    usable = c_lo >= 1  # else the count's interval reaches 0: fall back to the bounds
    # Both ends replaced where unusable: a noisy count of exactly −hc made c_hi = 0 and
    # numpy warn of a division by zero (an error under -W error, after the charge).
    safe_lo, safe_hi = np.where(usable, c_lo, 1.0), np.where(usable, c_hi, 1.0)
    ratios = np.stack(
        [(s - hs) / safe_lo, (s - hs) / safe_hi, (s + hs) / safe_lo, (s + hs) / safe_hi]
    )
    low = np.where(usable, np.clip(ratios.min(axis=0), lo, hi), lo)
    high = np.where(usable, np.clip(ratios.max(axis=0), lo, hi), hi)
    return value, std, low, high


def _variance(
    s: np.ndarray[Any, Any],
    q: np.ndarray[Any, Any],
    c: np.ndarray[Any, Any],
    stds: tuple[float, float, float],
    halves: tuple[float, float, float],
    radius: float,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    r"""The variance of the bounded values from noisy centred sum S, sum of squares Q, count N.

    Estimate: (Q − (S² − Var S)/N)/N with N = max(noisy count, 1) (values in
    the statistic's units; Var S the sum's exact noise variance, subtracted so
    that S²'s noise does not bias it), clamped to [0, r²], r = (hi − lo)/2 (the
    largest variance of values in [lo, hi]). The noise-free value it estimates
    is the population variance (÷ N) of the bounded, grid-rounded values:
    Q₀/N₀ − (S₀/N₀)². std: delta method. Interval: each of S, Q, N in its exact
    discrete interval at level 1 − α/3 (Bonferroni), the variance's extreme
    values over that box (for fixed N it grows with Q and falls with |S|; in N,
    f(N) = Q/N − S²/N² has one maximum at N = 2S²/Q), clamped to [0, r²];
    [0, r²] when N's interval reaches below 1.
    """
    std_s, std_q, std_c = stds
    hs, hq, hc = halves
    n = np.maximum(c, 1.0)
    top = radius * radius
    value = np.clip((q - (s * s - std_s * std_s) / n) / n, 0.0, top)
    mean = s / n
    grad_n = (-q + 2 * s * mean) / (n * n)
    std = np.sqrt((std_q / n) ** 2 + (2 * mean * std_s / n) ** 2 + (grad_n * std_c) ** 2)
    s_lo, s_hi = s - hs, s + hs
    s_small = np.where((s_lo <= 0) & (s_hi >= 0), 0.0, np.minimum(np.abs(s_lo), np.abs(s_hi)))
    s_big = np.maximum(np.abs(s_lo), np.abs(s_hi))
    q_lo, q_hi = np.maximum(q - hq, 0.0), q + hq
    n_lo, n_hi = c - hc, c + hc
    usable = n_lo >= 1
    n_lo = np.where(usable, n_lo, 1.0)

    def f(qq: np.ndarray[Any, Any], ss: np.ndarray[Any, Any], nn: np.ndarray[Any, Any]) -> Any:
        return qq / nn - (ss / nn) ** 2

    low = np.minimum(f(q_lo, s_big, n_lo), f(q_lo, s_big, n_hi))
    peak = np.clip(2 * s_small**2 / np.maximum(q_hi, 1e-300), n_lo, n_hi)
    high = np.maximum.reduce(
        [f(q_hi, s_small, n_lo), f(q_hi, s_small, n_hi), f(q_hi, s_small, peak)]
    )
    low = np.where(usable, np.clip(low, 0.0, top), 0.0)
    high = np.where(usable, np.clip(high, 0.0, top), top)
    return value, std, low, high
