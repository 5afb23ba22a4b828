r"""Planning a release: groupings, sensitivities, noise grids, budget split, selection threshold.

Everything here depends on the queries, the bounds and the budget only — never
on the data — so the whole privacy report is known before the data are read.

Sensitivities (add/remove one privacy unit, REFERENCE §1), with L0 =
``max_groups_per_unit`` (1 for an ungrouped query) and L∞ = ``max_rows_per_group``:

- count: a unit adds at most L∞ to each of at most L0 cells, so the L2
  sensitivity is √L0·L∞ (the Gaussian's advantage over Laplace, whose L1
  sensitivity is L0·L∞).
- sum with bounds [lo, hi]: a unit's per-cell total lies in
  [L∞·min(lo, 0), L∞·max(hi, 0)]; it is rounded to the grid γ *per cell*
  (``FLOOR(c/γ + 1/2)`` in the SQL) and the integers are summed exactly, so in
  grid units a unit changes a cell by at most K = max(|⌊L∞·min(lo,0)/γ + ½⌋|,
  |⌊L∞·max(hi,0)/γ + ½⌋|) ≤ L∞·max(|lo|, |hi|)/γ + ½ and the L2 sensitivity is
  √L0·K. The rounding is thereby charged to the sensitivity (DESIGN decision 1).
- vector sum with row norm C: a unit's per-cell vector has norm ≤ L∞·C;
  rounding each of the d coordinates moves it by at most √d/2 grid units
  (triangle inequality), so K = L∞·C·(1 + 10⁻⁶)/γ + √d/2 (the factor absorbs
  float error in the clipping), and the L2 sensitivity is √L0·K.

γ is the largest power of two ≤ (per-cell bound)/256, so K·γ exceeds the
continuous sensitivity by at most 1/512 of it (≤ 0.4 % more variance).

Noise: N_Z(0, σ²) on the grid with σ² = Δ²/(2ρ) (Δ in grid units), rounded up
to a multiple of 2⁻³²; the released mechanism is Δ²/(2σ²) ≤ ρ -zCDP (CKS Thm 4;
Thm 14 for the vector of all cells of a measure). A mean spends half its share
on a sum and half on a count.

Private partition selection (Gaussian thresholding): the number of distinct
units per group after L0 bounding gets N_Z(0, σ_s²) (L2 sensitivity √L0); a
group is released iff that noisy count is ≥ τ. A group present only because of
one unit has count 1, so it passes with probability P[Z ≥ τ − 1]; with at most
L0 such groups the selection is δ_s-close to a ρ_s-zCDP mechanism, δ_s = L0·P[Z ≥
τ − 1] (union bound), τ the smallest integer meeting the δ it is given.
Approximate zCDP composes by adding ρ's and δ's (Bun & Steinke 2016 Def 8.1,
Lemma 8.3), and the release is (ε, δ)-DP with ε from CKS Cor 13 at δ − Σδ_s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from gaussdp.budget import Budget
from gaussdp.errors import invalid
from gaussdp.privacy import discrete_gaussian_sf
from gaussdp.release.queries import KeyTuple, Query
from gaussdp.release.sql import Output, ScalarValue, VectorValue

__all__ = [
    "Grouping",
    "Measure",
    "Plan",
    "Selection",
    "grid_step",
    "make_plan",
]

_SIGMA2_DENOMINATOR = 2**32
_FLOAT_SLACK = 1e-6


def grid_step(bound: float) -> float:
    """The noise grid γ for a per-cell bound: the largest power of two ≤ bound/256.

    Examples
    --------
    >>> grid_step(360.0)
    1.0
    >>> grid_step(1.0)
    0.00390625
    """
    return 2.0 ** math.floor(math.log2(bound / 256.0))


def _round_half_up(x: float) -> int:
    # The SQL computes FLOOR(x + 0.5) in IEEE doubles; the same operations here.
    return math.floor(x + 0.5)


def _sigma2(delta2: Fraction, rho: float) -> Fraction:
    """σ² = Δ²/(2ρ), rounded up to a multiple of 2⁻³² (so the mechanism's ρ ≤ planned ρ)."""
    exact = delta2 / (2 * Fraction(rho))
    return Fraction(math.ceil(exact * _SIGMA2_DENOMINATOR), _SIGMA2_DENOMINATOR)


@dataclass(frozen=True, slots=True)
class Measure:
    """One noisy vector: a count or a sum (or a vector coordinate) over all cells of a grouping.

    ``output`` indexes the grouping's aggregate columns (``a{output}``);
    ``sensitivity`` is the L2 sensitivity in grid units; ``gamma`` the grid step
    (1 for counts); ``rho`` the zCDP cost Δ²/(2σ²) of this measure alone.
    """

    query: int
    role: str
    output: int
    gamma: float
    sensitivity: float
    sigma2: Fraction
    rho: float

    @property
    def sigma(self) -> float:
        """The noise scale in the statistic's own units, γ·√σ²."""
        return self.gamma * math.sqrt(self.sigma2)


@dataclass(frozen=True, slots=True)
class Selection:
    """Private partition selection for one grouping: noisy distinct units ≥ ``threshold``."""

    sigma2: Fraction
    threshold: int
    delta: float
    rho: float


@dataclass(slots=True)
class Grouping:
    """Queries that share group keys (and bins): one SQL pass, one L0 bounding."""

    by: tuple[str, ...]
    keys: tuple[KeyTuple, ...] | None
    histogram: tuple[str, tuple[float, ...]] | None
    l0: int
    queries: list[int] = field(default_factory=list)
    values: list[ScalarValue | VectorValue] = field(default_factory=list)
    outputs: list[Output] = field(default_factory=list)
    measures: list[Measure] = field(default_factory=list)
    selection: Selection | None = None

    @property
    def private_keys(self) -> bool:
        """Whether groups are chosen by private partition selection."""
        return self.keys is None and (bool(self.by))

    def value_index(self, value: ScalarValue | VectorValue) -> int:
        """Index of ``value`` among this grouping's values (added if new)."""
        if value not in self.values:
            self.values.append(value)
        return self.values.index(value)

    def output_index(self, output: Output) -> int:
        """Index of ``output`` among this grouping's outputs (added if new)."""
        if output not in self.outputs:
            self.outputs.append(output)
        return self.outputs.index(output)


@dataclass(frozen=True, slots=True)
class Plan:
    """The data-independent part of a release: groupings with their noise, and the costs."""

    groupings: tuple[Grouping, ...]
    internal: dict[str, str]
    rho: float
    selection_delta: float
    budget: Budget


def _threshold(sigma2: Fraction, l0: int, delta: float) -> tuple[int, float]:
    """Smallest τ with L0·P[Z ≥ τ − 1] ≤ δ, Z ~ N_Z(0, σ²); returns (τ, the δ it spends)."""

    def spent(tau: int) -> float:
        # P[Z ≥ τ − 1] = P[Z > τ − 2] = sf(τ − 2); union bound over ≤ L0 new groups.
        return l0 * float(discrete_gaussian_sf(tau - 2, sigma2)) * (1 + 1e-9)

    hi = 2
    while spent(hi) > delta:
        hi *= 2
    lo = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if spent(mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi, spent(hi)


def make_plan(
    queries: list[Query],
    *,
    privacy_unit: str,
    budget: Budget,
    max_groups_per_unit: int,
    max_rows_per_group: int,
    selection_delta: float | None,
    selection_weight: float,
) -> Plan:
    """Group the queries, derive sensitivities and grids, split the budget, set thresholds."""
    if not queries:
        raise ValueError(invalid("queries", "at least one query (call .count(), .sum(), …)", []))
    internal: dict[str, str] = {"pu": privacy_unit}
    user_to_internal: dict[str, str] = {}

    def name(prefix: str, column: str) -> str:
        if column == privacy_unit:
            raise ValueError(invalid("column", "different from the privacy unit", column))
        if column not in user_to_internal:
            key = f"{prefix}{sum(1 for v in internal if v.startswith(prefix))}"
            user_to_internal[column] = key
            internal[key] = column
        return user_to_internal[column]

    linf = max_rows_per_group
    groupings: list[Grouping] = []
    for qi, q in enumerate(queries):
        keys_internal = tuple(name("k", c) for c in q.by)
        histogram = (name("x", q.columns[0]), q.bins or ()) if q.statistic == "histogram" else None
        grouped = bool(q.by) or histogram is not None
        found = None
        for g in groupings:
            if g.by == keys_internal and g.keys == q.keys and g.histogram == histogram:
                found = g
        if found is None:
            found = Grouping(
                keys_internal, q.keys, histogram, max_groups_per_unit if grouped else 1
            )
            groupings.append(found)
        found.queries.append(qi)

    selection_count = sum(1 for g in groupings if g.private_keys)
    weights = sum(q.weight for q in queries) + selection_weight * selection_count
    if selection_count:
        if budget.delta is None or budget.kind != "approx_dp":
            raise ValueError(
                invalid(
                    "budget",
                    "an (epsilon, delta) budget for groups chosen privately (or give public keys=)",
                    budget,
                )
            )
        sel_delta = budget.delta / 2 if selection_delta is None else selection_delta
        if not 0 < sel_delta < budget.delta:
            raise ValueError(invalid("selection_delta", f"in (0, {budget.delta})", sel_delta))
    else:
        sel_delta = 0.0
    capacity = budget.rho_capacity(sel_delta) * (1 - 1e-12)
    if capacity <= 0:
        raise ValueError(invalid("budget", "large enough to leave a positive rho", budget))

    measures_rho = Fraction(0)
    spent_delta = 0.0
    for g in groupings:
        l0 = g.l0
        for qi in g.queries:
            q = queries[qi]
            share = capacity * q.weight / weights
            halves = q.statistic in ("mean", "vector_mean")
            rho = share / 2 if halves else share
            if q.statistic in ("count", "histogram"):
                out = g.output_index(Output("rows"))
                g.measures.append(_count_measure(qi, "count", out, l0, linf, rho))
            elif q.statistic in ("sum", "mean"):
                lo, hi = q.bounds or (0.0, 0.0)
                i = g.value_index(ScalarValue(name("x", q.columns[0]), lo, hi))
                total_lo, total_hi = linf * min(lo, 0.0), linf * max(hi, 0.0)
                gamma = grid_step(max(abs(total_lo), abs(total_hi)))
                k = max(
                    abs(_round_half_up(total_lo / gamma)), abs(_round_half_up(total_hi / gamma))
                )
                out = g.output_index(Output("sum", i, -1, gamma, total_lo, total_hi))
                delta2 = Fraction(l0 * k * k)
                s2 = _sigma2(delta2, rho)
                g.measures.append(
                    Measure(qi, "sum", out, gamma, math.sqrt(delta2), s2, float(delta2 / (2 * s2)))
                )
                if halves:
                    out = g.output_index(Output("valid", i))
                    g.measures.append(_count_measure(qi, "count", out, l0, linf, rho))
            else:
                norm = q.norm or 0.0
                cols = tuple(name("x", c) for c in q.columns)
                i = g.value_index(VectorValue(cols, norm))
                gamma = grid_step(linf * norm)
                k_vec = linf * norm * (1 + _FLOAT_SLACK) / gamma + math.sqrt(len(cols)) / 2
                delta2 = Fraction(l0) * Fraction(k_vec) ** 2
                s2 = _sigma2(delta2, rho)
                vec_rho = float(delta2 / (2 * s2))
                for a in range(len(cols)):
                    out = g.output_index(Output("coord", i, a, gamma))
                    # The d coordinates form one vector with L2 sensitivity √Δ² (CKS Thm 14):
                    # the cost is charged once, on the first coordinate.
                    g.measures.append(
                        Measure(
                            qi,
                            f"coord{a}",
                            out,
                            gamma,
                            math.sqrt(delta2),
                            s2,
                            vec_rho if a == 0 else 0.0,
                        )
                    )
                if halves:
                    out = g.output_index(Output("valid", i))
                    g.measures.append(_count_measure(qi, "count", out, l0, linf, rho))
        for m in g.measures:
            measures_rho += Fraction(m.rho)
        if g.private_keys:
            rho_s = capacity * selection_weight / weights
            s2 = _sigma2(Fraction(l0), rho_s)
            tau, spent = _threshold(s2, l0, sel_delta / selection_count)
            g.selection = Selection(s2, tau, spent, float(Fraction(l0) / (2 * s2)))
            measures_rho += Fraction(g.selection.rho)
            spent_delta += spent
    total_rho = math.nextafter(float(measures_rho), math.inf)
    return Plan(tuple(groupings), internal, total_rho, spent_delta, budget)


def _count_measure(qi: int, role: str, out: int, l0: int, linf: int, rho: float) -> Measure:
    delta2 = Fraction(l0 * linf * linf)
    s2 = _sigma2(delta2, rho)
    return Measure(qi, role, out, 1.0, math.sqrt(delta2), s2, float(delta2 / (2 * s2)))
