r"""Planning a release: groupings, sensitivities, noise grids, budget split, selection threshold.

Everything here depends on the queries, the bounds and the budget only — never
on the data — so the whole privacy report is known before the data are read.

Sensitivities (add/remove one privacy unit, REFERENCE §1), with L0 =
``max_groups_per_unit`` (1 for an ungrouped query) and L∞ = ``max_rows_per_group``:

- count: a unit adds at most L∞ to each of at most L0 cells, so the L2
  sensitivity is √L0·L∞ (the Gaussian's advantage over Laplace, whose L1
  sensitivity is L0·L∞).
- sum with bounds [lo, hi]: each row's clamped value is rounded to the grid γ
  *per row* (``FLOOR(v/γ + 1/2)`` in the SQL, monotone, so the integer lies in
  [r_lo, r_hi] = [⌊lo/γ + ½⌋, ⌊hi/γ + ½⌋]); a unit's cell is the exact integer
  sum of its rows, rescaled to L∞ rows when it has more (⌊S·L∞/n + ½⌋, which
  stays in [L∞·r_lo, L∞·r_hi] since those ends are integers). So in grid units
  a unit changes a cell by at most K = L∞·max(−min(r_lo, 0), max(r_hi, 0)) and
  the L2 sensitivity is √L0·K. The rounding is thereby charged to the
  sensitivity (DESIGN decision 1); the aggregate is exact integer arithmetic,
  independent of row order, threads and engine (issue 12).
- vector sum with row norm C over d columns: each row is clipped to C and each
  coordinate rounded to γ, moving the row by ≤ √d/2 grid units (triangle
  inequality); rescaling the cell's integer sum to L∞ rows and rounding again
  adds ≤ √d/2, so K = L∞·(C·(1 + 10⁻⁶)/γ + √d/2) + √d/2 (the factor absorbs
  float error in the clipping), and the L2 sensitivity is √L0·K.

- distinct units: a unit is in at most L0 groups and counts once in each: √L0.
- variance/std: three parts — valid count (√L0·L∞), centred sum (√L0·L∞·R)
  and sum of squares (√L0·L∞·R², grid γ²) of the per-row grid integers
  y ∈ [r_lo, r_hi], R = max(|r_lo|, |r_hi|) (:func:`_variance`).
- quantile over a tree of D + 1 levels: √(L0·(D + 1))·L∞ over all its nodes
  (a unit's bounded rows in a group are a non-negative leaf vector of total
  ≤ L∞, :func:`gaussdp.release.sql.tree_sql`; per level its L2 norm is ≤ L∞).

Each query may state its own L0/L∞ (:class:`~gaussdp.release.queries.Query`);
groupings are split by them, so every part above uses its own query's.

γ is the largest power of two ≤ (per-row bound)/256 — max(|lo|, |hi|) for a
sum, C/√d per coordinate for a vector — so K·γ exceeds the continuous
sensitivity by at most ~1/512 of it (≤ 0.4 % more variance).

A *part* is one noisy vector accounted as a whole: a count or a sum over all
cells of a grouping, a vector sum's d coordinates over all cells, or a private
partition selection's noisy distinct-unit counts. A mean is a sum part and a
count part sharing the query's weight equally. The accounting follows the
budget (:attr:`gaussdp.Budget.accounting`; (ε, δ) budgets then go to PLD below):

- **μ-GDP** ((ε, δ) and μ budgets). The total μ_cap (:meth:`Budget.mu_capacity`)
  is split as μᵢ² = wᵢ·μ_cap² (weights normalised), and a part with L2
  sensitivity Δ (grid units) gets N_Z(0, σ²) per coordinate with
  σ² = Δ²/μᵢ² + τ², τ² = 9, rounded up to a multiple of 2⁻³². By the smoothing
  argument of :class:`gaussdp.LatticeGaussian` each coordinate's pmf is within
  e^{±a} (a = ``smoothing_log_ratio(9)`` < 10⁻⁷⁶, :mod:`gaussdp.mechanisms`) of a
  continuous N(0, σ² − τ²) followed by a data-independent randomised rounding,
  so the part over c coordinates is within e^{±c·a} of a
  Δ/√(σ² − τ²) ≤ μᵢ -GDP mechanism (DRS Thm 2.7). The μ's compose exactly,
  μ = √Σμᵢ² (DRS Cor 3.3), the slack is A = Σcᵢ·a, and the release is
  (ε_μ((δ − Σδ_s)e^{−A}) + 2A, δ)-DP (DRS Cor 2.13; computed by the
  accountants). The number of cells c is a-priori: public keys × bins, or, for
  private partition selection, 2⁶⁴ × bins (engines count rows in 64-bit
  integers, so there are fewer candidate groups than that; 2⁶⁴·a ≈ 5·10⁻⁵⁸).
- **ρ-zCDP** (ρ budgets). ρᵢ = wᵢ·ρ, σ² = Δ²/(2ρᵢ) rounded up to a multiple of
  2⁻³²; the part is Δ²/(2σ²) ≤ ρᵢ -zCDP exactly (CKS Thm 4; Thm 14 for the vector
  of all cells), ρ's add (Bun & Steinke 2016 Lemma 2.3), and ε at δ is CKS Cor 13.
  For a box-constrained part (below) this ρ is n·K²/(2σ²) = Δ²/(2σ²): CKS Thm 14
  needs no τ², so ρ budgets never paid it.
- **PLD** ((ε, δ) budgets, :attr:`Plan.accounting` ``"pld"``). The τ² of the
  μ-GDP accounting costs most where Δ² is small: a sensitivity-1 count at
  ε = 1, δ = 10⁻⁶ has Δ²/μ² ≈ 17.8 and σ² = 26.8. A part is *box-constrained*
  when a unit changes at most n = L0 of its coordinates, each by an integer of
  absolute value at most K (``Part.box``): counts and histograms (K = L∞), sums
  (K above), distinct units and partition selection's counts (K = 1), the
  three parts of a variance (K = L∞, L∞·R, L∞·R²). Such a part is accounted
  exactly, with no τ² and no slack, by the following argument; vector sums (an
  L2 ball) and quantile trees (L1 per level) keep the smoothing argument, and
  the two kinds compose in one PLD.

  (a) *Monotone likelihood ratio.* p_s(y) ∝ e^{−(y−s)²/(2σ²)}, y ∈ ℤ, with the
  same normaliser for every integer s, so for s′ > s the ratio
  p_{s′}(y)/p_s(y) = e^{(s′−s)(2y−s−s′)/(2σ²)} increases in y. By Neyman–Pearson
  the most powerful tests of N_Z(0, σ²) against N_Z(s, σ²), s > 0, are the
  (randomised) upper thresholds, the same family for every s > 0 (Karlin–Rubin;
  Lehmann & Romano, Testing Statistical Hypotheses, Thm 3.4.1). At a threshold
  test of level α the type-II error P_s[accept] decreases in s (the family is
  stochastically increasing), so the trade-off curve T(N_Z(0), N_Z(s)) is
  pointwise non-increasing in s ≥ 0, and s ↦ −s (the reflection y ↦ −y, and
  the translation y ↦ y − s for the reversed pair) shows it depends on |s| only
  and is symmetric. Hence (N_Z(0), N_Z(K)) *dominates* (N_Z(0), N_Z(s)) for
  every integer |s| ≤ K: T is pointwise lower, equivalently its hockey-stick
  divergences H_{e^ε} are larger for every ε ∈ ℝ (DRS 2022 Prop 2.12), and by
  Blackwell's theorem (DRS Thm 2.10) a Markov kernel maps the first pair onto
  the second (s = 0: the constant kernel onto N_Z(0)).
  (b) *Tensorisation.* For a neighbouring pair the part's outputs are
  f(D) + Z and f(D′) + Z, Z with independent N_Z(0, σ²) coordinates; after the
  public translation by −f(D) the pair is the product over coordinates j of
  (N_Z(0), N_Z(s_j)), s_j = f(D′)_j − f(D)_j, with at most n non-zero s_j and
  each |s_j| ≤ K. The product of the n kernels of (a) at the changed
  coordinates, with fresh N_Z(0) draws for the others, maps the n-fold product
  of (N_Z(0), N_Z(K)) onto this pair, so the n-fold product dominates the part
  for every neighbouring pair and both directions (the pair is symmetric).
  Its PLD is the n-fold composition of the one-dimensional discrete Gaussian's,
  i.e. :class:`~gaussdp.accounting.DiscreteGaussianVector` with sensitivities
  (K,)·n (CKS Thm 14: the loss is the sum of the coordinates' losses), which
  the PLD accountant builds exactly (``PrivacyLossDistribution.from_discrete_gaussian``)
  and certifies after discretisation. Dominating pairs compose, adaptively too
  (Zhu, Dong & Wang 2022 Thm 10), so the release's ε is that of the composed
  PLD of every part's dominating pair, with the smoothing parts' slack and
  partition selection's δ added as in μ-GDP mode.

  The split keeps the μ-GDP one's proportions: with a common capacity c, part i
  gets σᵢ² = Δᵢ²/(wᵢc²) if exact, Δᵢ²/(wᵢc²) + τ² otherwise. c is predicted by
  the GDP model (as continuous Gaussians the parts compose to μ = c exactly) and
  bracketed by the budget's own accountant's certified ε (:func:`_predicted_scale`;
  if the prediction misses, searched from the μ-GDP plan's μ_cap on a coarse PLD
  grid, then with the certified ε: :func:`_calibrate_exact`), so the plan's ε is ≤
  the budget's and within about 10⁻⁴ of it. With private partition selection the
  integer threshold makes ε jump down where it steps up, and the smallest scale
  meeting the budget sits at such a step (up to 2 % under the budget, measured):
  the scale is then lowered with the thresholds kept (:func:`_use_unspent_delta`),
  again with the certified ε, to within 2·10⁻⁴ of the budget.
  Box parts whose μ-GDP σ² exceeds :data:`_EXACT_MAX_SIGMA2` (2²⁰) keep the
  smoothing argument, where τ² changes σ² by less than 10⁻⁵, and so does every
  part of a plan whose μ_cap exceeds :data:`_EXACT_MAX_MU` (2, ε ≳ 10 at
  δ = 10⁻⁶; 0.5 for δ < 10⁻⁹), where the exact PLDs' large losses make them slow
  to certify. The plan's ``mu`` is then ``None`` (a discrete Gaussian is not
  exactly μ-GDP); ``rho`` stays exact.

Every part is an event (:class:`gaussdp.accounting.LatticeNoise`, or
:class:`gaussdp.accounting.DiscreteGaussianVector` for an exact part, or a
:class:`gaussdp.accounting.PartitionSelection` for a selection, ``exact`` as its
part) and the plan is their :class:`~gaussdp.accounting.Composed` event
(:attr:`Plan.event`): the totals (ρ, μ, slack, δ, ε) are computed from it by
the accountants — the zCDP, GDP and PLD accountants, the same ones a filter or
a ledger uses — from the realised σ²'s, and the plan is checked against the
budget by the filter's own check.

Private partition selection (Gaussian thresholding): the number of distinct
units per group after L0 bounding gets N_Z(0, σ_s²) (L2 sensitivity √L0); a
group is released iff that noisy count is ≥ τ. A group present only because of
one unit has count 1, so it passes with probability P[Z ≥ τ − 1]; with at most
L0 such groups the selection is δ_s-close to the Gaussian part that releases
every group's noisy count, δ_s = L0·P[Z ≥ τ − 1] (union bound), τ the smallest
integer meeting the δ it is given. These δ_s add to the composition's δ (Bun &
Steinke 2016 Def 8.1, Lemma 8.3 for zCDP), so ε is reported at δ − Σδ_s. The
threshold and the scale are chosen together: where the smallest τ leaves ε under
the budget (δ_s falls short of its share), the scale is lowered with τ kept, which
only shrinks δ_s (:func:`_use_unspent_delta`), until the certified ε meets the
budget — in either accounting (μ-GDP or PLD).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from gaussdp._search import fraction_up, smallest_passing_int, smallest_scale
from gaussdp.accounting.accountants import (
    Accountant,
    GDPAccountant,
    PLDAccountant,
    UnsupportedEventError,
    ZCDPAccountant,
)
from gaussdp.accounting.events import (
    Composed,
    DiscreteGaussianVector,
    Event,
    LatticeNoise,
    PartitionSelection,
)
from gaussdp.accounting.filter import budget_accountant, refusal, remember_spent
from gaussdp.budget import Accounting, Budget
from gaussdp.errors import invalid
from gaussdp.mechanisms import LatticeGaussian
from gaussdp.privacy.gdp import gdp_epsilon, gdp_mu
from gaussdp.release.queries import KeyTuple, Query
from gaussdp.release.sql import Output, ScalarValue, Tree, VectorValue

__all__ = [
    "Grouping",
    "Measure",
    "Part",
    "Plan",
    "Selection",
    "grid_step",
    "make_plan",
]

_SIGMA2_DENOMINATOR = 2**32
_FLOAT_SLACK = 1e-6
#: τ² of the smoothing argument (lattice units²), as in LatticeGaussian.
_TAU2 = LatticeGaussian.SMOOTHING_TAU2
#: A-priori bound on the candidate groups of a privately selected grouping.
_MAX_GROUPS = 2**64

PartKind = Literal["count", "sum", "sum of squares", "vector", "tree", "distinct units"]
#: How a plan is accounted: the budget's (μ-GDP, ρ-zCDP), or, for an (ε, δ) budget
#: with box-constrained parts, privacy loss distributions ("pld", see the module docs).
PlanAccounting = Literal["gdp", "zcdp", "pld"]
#: Box-constrained parts with a larger σ² (in the μ-GDP plan) keep the smoothing
#: argument: τ²/σ² < 10⁻⁵ there, and the exact PLD's support (±10σ) would grow.
_EXACT_MAX_SIGMA2 = 2**20
#: Above this total μ (ε ≳ 10 at δ = 10⁻⁶; 0.5 for δ < 10⁻⁹, ε ≳ 3.5 at δ = 10⁻¹²) plans
#: stay μ-GDP: the exact PLDs' losses (K²/(2σ²) per coordinate) grow so large, and at
#: small δ their tails matter so far out, that certifying them makes planning slow
#: (measured: minutes at ε = 10, δ = 10⁻¹²).
_EXACT_MAX_MU = {False: 2.0, True: 0.5}
_SMALL_DELTA = 1e-9
#: The PLD grid of the calibration's search, as a multiple of the accountant's own step
#: (as make_private's calibration does), and its relative tolerance on the scale.
_MEDIUM, _RTOL = 8.0, 1e-3


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


def _sigma2(
    sensitivity2: Fraction, share: Fraction, accounting: Accounting, *, smoothing: bool = True
) -> Fraction:
    """The part's σ² from its share, rounded up to a multiple of 2⁻³².

    μ-GDP: σ² = Δ²/μᵢ² + τ² (``share`` = μᵢ²), so Δ/√(σ² − τ²) ≤ μᵢ (the
    smoothing argument, :class:`gaussdp.LatticeGaussian`); without ``smoothing``
    (a part accounted by its exact PLD) σ² = Δ²/μᵢ², μᵢ then only sets the split.
    ρ-zCDP: σ² = Δ²/(2ρᵢ) (``share`` = ρᵢ), so Δ²/(2σ²) ≤ ρᵢ (CKS Thm 4).
    """
    if accounting == "gdp":
        value = sensitivity2 / share + (_TAU2 if smoothing else 0)
    else:
        value = sensitivity2 / (2 * share)
    return Fraction(math.ceil(value * _SIGMA2_DENOMINATOR), _SIGMA2_DENOMINATOR)


@dataclass(frozen=True, slots=True)
class Measure:
    """One noisy column: a count, a sum or a vector coordinate over all cells of a grouping.

    ``output`` indexes the grouping's aggregate columns (``a{output}``);
    ``gamma`` is the grid step (1 for counts) and ``sigma2`` the lattice noise
    scale σ². The privacy cost is carried by the :class:`Part` it belongs to.
    """

    query: int
    role: str
    output: int
    gamma: float
    sigma2: Fraction

    @property
    def sigma(self) -> float:
        """The noise scale in the statistic's own units, γ·√σ²."""
        return self.gamma * math.sqrt(self.sigma2)


@dataclass(frozen=True, slots=True)
class Part:
    r"""One accounted noisy vector: N_Z(0, σ²) on each of ``cells`` coordinates.

    ``query`` is ``None`` for a partition selection; ``grouping`` indexes
    :attr:`Plan.groupings`. ``sensitivity2`` is the squared L2 sensitivity Δ²
    in grid units (exact), ``cells`` an a-priori bound on the coordinates
    released (cells of the grouping times the vector's dimension). Its privacy
    is that of :attr:`noise`; a selection's part adds the selection's δ
    (:class:`Selection`, :attr:`Plan.event`).
    """

    query: int | None
    grouping: int
    kind: PartKind
    gamma: float
    sensitivity2: Fraction
    sigma2: Fraction
    cells: int
    #: (n, K) for a box-constrained part: a unit changes at most n coordinates, each
    #: by an integer of absolute value ≤ K (then Δ² = n·K²); ``None`` otherwise.
    box: tuple[int, int] | None = None
    #: Accounted by its exact discrete Gaussian PLD (needs ``box``), not by smoothing.
    exact: bool = False

    @property
    def sensitivity(self) -> float:
        """Δ in grid units."""
        return math.sqrt(self.sensitivity2)

    @property
    def sigma(self) -> float:
        """The noise scale in the statistic's own units, γ·√σ²."""
        return self.gamma * math.sqrt(self.sigma2)

    @property
    def noise(self) -> LatticeNoise | DiscreteGaussianVector:
        """The part's noise as an event: N_Z(0, σ²) on ``cells`` coordinates, L2 sensitivity
        Δ; if ``exact``, the dominating pair: n coordinates shifted by K each (module docs)."""
        if self.exact and self.box is not None:
            n, k = self.box
            return DiscreteGaussianVector(self.sigma2, (k,) * n)
        return LatticeNoise(self.sigma2, self.sensitivity2, self.cells)

    @property
    def rho(self) -> float:
        """Δ²/(2σ²), rounded up: the part is exactly this ρ-zCDP (CKS Thm 4/14)."""
        return fraction_up(self.sensitivity2 / (2 * self.sigma2))

    @property
    def mu(self) -> float | None:
        """Δ/√(σ² − τ²), rounded up (smoothing argument); ``None`` if σ² ≤ τ² or the part is
        accounted exactly (a discrete Gaussian is not exactly μ-GDP)."""
        if self.exact:
            return None
        mu = LatticeNoise(self.sigma2, self.sensitivity2, self.cells).mu
        return None if math.isinf(mu) else mu

    @property
    def slack(self) -> float:
        """cells·a: the part's pmf is within e^{±slack} of a μ-GDP mechanism's (0 if exact)."""
        if self.exact:
            return 0.0
        return LatticeNoise(self.sigma2, self.sensitivity2, self.cells).smoothing_slack


def _slack(cells: int) -> float:
    """c·a, rounded up: the a-priori smoothing slack of ``cells`` coordinates."""
    return 0.0 if cells == 0 else LatticeNoise(Fraction(1), Fraction(1), cells).smoothing_slack


@dataclass(frozen=True, slots=True)
class Selection:
    """Private partition selection for one grouping: noisy distinct units ≥ ``threshold``.

    ``delta`` is the δ it spends (its accounting part is in :attr:`Plan.parts`).
    """

    sigma2: Fraction
    threshold: int
    delta: float


@dataclass(slots=True)
class Grouping:
    """Queries that share group keys (and bins or a tree) and L0, L∞: one SQL pass.

    ``tree`` is set for quantile queries, whose SQL returns leaf counts
    (:func:`gaussdp.release.sql.tree_sql`); the others use
    :func:`gaussdp.release.sql.grouping_sql`.
    """

    by: tuple[str, ...]
    keys: tuple[KeyTuple, ...] | None
    histogram: tuple[str, tuple[float, ...]] | None
    l0: int
    linf: int
    tree: Tree | None = None
    queries: list[int] = field(default_factory=list)
    values: list[ScalarValue | VectorValue] = field(default_factory=list)
    outputs: list[Output] = field(default_factory=list)
    measures: list[Measure] = field(default_factory=list)
    selection: Selection | None = None

    @property
    def private_keys(self) -> bool:
        """Whether groups are chosen by private partition selection."""
        return self.keys is None and (bool(self.by))

    @property
    def cells(self) -> int:
        """An a-priori bound on the cells released: keys × bins (2⁶⁴ × bins for private keys)."""
        bins = len(self.histogram[1]) - 1 if self.histogram is not None else 1
        if self.keys is not None:
            groups = len(self.keys)
        elif self.by:
            groups = _MAX_GROUPS
        else:
            groups = 1
        return groups * bins

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
    """The data-independent part of a release: groupings with their noise, parts and totals.

    Attributes
    ----------
    accounting : {'pld', 'gdp', 'zcdp'}
        How the release is accounted: ``'pld'`` for an (ε, δ) budget with an
        exact (box-constrained) part, else the budget's.
    rho : float
        Σρᵢ over the parts (rounded up): a ρ-zCDP guarantee in either accounting.
    mu : float or None
        √Σμᵢ² (rounded up; DRS Cor 3.3), μ-GDP up to ``slack``; ``None`` if some
        part has σ² ≤ τ² (possible only with ρ accounting) or is exact.
    slack : float
        A = Σcᵢ·a over the parts accounted by the smoothing argument.
    selection_delta : float
        Σδ_s spent by private partition selection.
    epsilon : float or None
        ε at the budget's δ of this accounting, from the realised σ²'s:
        ε_μ((δ − Σδ_s)e^{−A}) + 2A (μ-GDP), the PLD accountant's certified
        ε((δ − Σδ_s)e^{−A}) + 2A (PLD) or CKS Cor 13 at δ − Σδ_s (ρ-zCDP);
        ``None`` without a δ.
    """

    groupings: tuple[Grouping, ...]
    internal: dict[str, str]
    parts: tuple[Part, ...]
    accounting: PlanAccounting
    rho: float
    mu: float | None
    slack: float
    selection_delta: float
    epsilon: float | None
    budget: Budget

    @property
    def event(self) -> Composed:
        """The release as one event: every part's noise, and each partition selection."""
        return _plan_event(self.groupings, self.parts)


def _plan_event(groupings: Sequence[Grouping], parts: Sequence[Part]) -> Composed:
    events: list[Event] = []
    for p in parts:
        g = groupings[p.grouping]
        if p.query is None and g.selection is not None:
            threshold = g.selection.threshold
            events.append(PartitionSelection(p.sigma2, threshold, g.l0, p.cells, exact=p.exact))
        else:
            events.append(p.noise)
    return Composed(tuple(events))


def _composed(accountant: Accountant, event: Event) -> Accountant | None:
    """``accountant`` with ``event`` composed, or None if it cannot account for it."""
    try:
        return accountant.compose(event)
    except UnsupportedEventError:  # some part has σ² ≤ τ²: no μ certificate
        return None


def _threshold(
    sigma2: Fraction, l0: int, delta: float, cells: int, floor: int = 2
) -> tuple[int, float]:
    """Smallest τ ≥ ``floor`` with L0·P[Z ≥ τ − 1] ≤ δ, Z ~ N_Z(0, σ²); returns (τ, the δ
    it spends). ``floor`` ≥ 2 (:class:`~gaussdp.accounting.PartitionSelection`)."""

    def spent(tau: int) -> float:
        return PartitionSelection(sigma2, tau, l0, cells).delta

    tau = smallest_passing_int(lambda t: spent(t) <= delta, floor)
    return tau, spent(tau)


def _coordinates(q: Query) -> int:
    """Noisy coordinates per cell of a query: 1, 2 for a mean, 3 for a variance, d (+1) for
    vectors, the nodes of a quantile tree."""
    if q.statistic in ("vector_sum", "vector_mean"):
        return len(q.columns) + (1 if q.statistic == "vector_mean" else 0)
    if q.statistic == "quantile":
        return tree_nodes(q.resolution or 1, q.branching or 2)
    return {"mean": 2, "variance": 3, "std": 3}.get(q.statistic, 1)


def tree_levels(resolution: int, branching: int) -> int:
    """Levels of a complete tree with ``resolution`` leaves, the root included.

    Examples
    --------
    >>> tree_levels(1024, 4)
    6
    """
    levels, width = 1, 1
    while width < resolution:
        width *= branching
        levels += 1
    return levels


def tree_nodes(resolution: int, branching: int) -> int:
    """Nodes of a complete tree with ``resolution`` leaves: 1 + b + b² + … + resolution.

    Examples
    --------
    >>> tree_nodes(16, 4)
    21
    """
    return sum(branching**level for level in range(tree_levels(resolution, branching)))


def make_plan(
    queries: list[Query],
    *,
    privacy_unit: str,
    budget: Budget,
    max_groups_per_unit: int,
    max_rows_per_group: int,
    selection_delta: float | None,
    selection_weight: float,
    exact: bool = True,
) -> Plan:
    """Group the queries, derive sensitivities and grids, split the budget, set thresholds.

    ``exact=False`` keeps every part on the μ-GDP (smoothing) plan under an (ε, δ)
    budget, for a filter or ledger whose accountant cannot account for exact parts.
    """
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

    groupings: list[Grouping] = []
    for qi, q in enumerate(queries):
        keys_internal = tuple(name("k", c) for c in q.by)
        histogram = (name("x", q.columns[0]), q.bins or ()) if q.statistic == "histogram" else None
        tree = None
        if q.statistic == "quantile":
            lo, hi = q.bounds or (0.0, 0.0)
            tree = Tree(name("x", q.columns[0]), lo, hi, q.resolution or 1)
        grouped = bool(q.by) or histogram is not None
        # Each query's own L0 and L∞ if it states them (its sensitivity uses them).
        l0 = (q.max_groups_per_unit or max_groups_per_unit) if grouped else 1
        linf = q.max_rows_per_group or max_rows_per_group
        shape = (keys_internal, q.keys, histogram, l0, linf, tree)
        found = None
        for g in groupings:
            if (g.by, g.keys, g.histogram, g.l0, g.linf, g.tree) == shape:
                found = g
        if found is None:
            found = Grouping(*shape)
            groupings.append(found)
        found.queries.append(qi)

    selection_count = sum(1 for g in groupings if g.private_keys)
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

    accounting = budget.accounting
    if accounting == "gdp":
        # A-priori slack: every coordinate of every part (the realised one is equal).
        cells = sum(
            g.cells * (sum(_coordinates(queries[qi]) for qi in g.queries) + g.private_keys)
            for g in groupings
        )
        capacity = budget.mu_capacity(sel_delta, _slack(cells))
    else:
        capacity = budget.rho_capacity(sel_delta)
    if capacity <= 0:
        raise ValueError(
            invalid("budget", f"large enough to leave a positive {_UNIT[accounting]}", budget)
        )

    def split(
        at: float,
        exact: frozenset[int] = frozenset(),
        totals: bool = True,
        floors: tuple[int, ...] = (),
    ) -> Plan:
        return _split(
            groupings,
            queries,
            internal,
            name,
            budget=budget,
            capacity=at,
            sel_delta=sel_delta,
            selection_count=selection_count,
            selection_weight=selection_weight,
            exact=exact,
            totals=totals,
            floors=floors,
        )

    def plan_at(k: int) -> Plan:
        # k steps of 10⁻¹² below the capacity, for the float roundings of the totals.
        return split(capacity * (1 - k * 1e-12))

    def smoothed() -> Plan:
        # The μ-GDP plan: the filter's own check decides (the capacity itself passes unless
        # rounding disagrees); then its scale lowered into the δ its thresholds leave unspent.
        k = 0
        plan = plan_at(0)
        if not _within(plan):  # pragma: no cover - only if the totals' rounding disagrees
            try:
                k = smallest_passing_int(lambda k: _within(plan_at(k)), 1, _MAX_SHRINK)
            except ValueError:  # the capacity is computed from the budget
                raise ValueError(invalid("budget", "met by the planned noise", budget)) from None
            plan = plan_at(k)
        plan, _, _ = _use_unspent_delta(
            lambda scale, floors: split(1 / scale, floors=floors),
            plan,
            1 / (capacity * (1 - k * 1e-12)),
        )
        return plan

    small_delta = budget.delta is not None and budget.delta < _SMALL_DELTA
    if not exact or budget.kind != "approx_dp" or capacity > _EXACT_MAX_MU[small_delta]:
        return smoothed()
    # An (ε, δ) budget: box-constrained parts are accounted by their exact PLD (module
    # docs), those whose σ² is small enough for τ² to matter. The μ-GDP plan's parts decide
    # which; its totals (compositions by the budget's accountant) are computed only if it
    # is the plan returned.
    draft = split(capacity, totals=False)
    exact_parts = frozenset(
        i for i, p in enumerate(draft.parts) if p.box is not None and p.sigma2 <= _EXACT_MAX_SIGMA2
    )
    if not exact_parts:
        return smoothed()
    # The calibrated scale depends on these only (a release plans more than once).
    key: tuple[object, ...] = (tuple(queries), budget, max_groups_per_unit, max_rows_per_group)
    key += (sel_delta, selection_weight)
    calibrated = _calibrate_exact(
        lambda at, totals, floors: split(at, exact_parts, totals, floors),
        capacity,
        budget,
        _EXACT_SCALES.get(key),
    )
    if calibrated is None:  # pragma: no cover - the search found no finite scale
        return smoothed()
    exact_plan, calibration = calibrated
    with _EXACT_SCALES_LOCK:  # releases may be planned from several threads
        if len(_EXACT_SCALES) >= _MAX_CACHED:
            _EXACT_SCALES.pop(next(iter(_EXACT_SCALES)), None)
        _EXACT_SCALES[key] = calibration
    pairs = zip(exact_plan.parts, draft.parts, strict=True)
    if any(e.exact and e.sigma2 > g.sigma2 for e, g in pairs):
        # Not an improvement for the exact parts (a tiny ε, where τ² is negligible and
        # the search's coarse grid costs more): the μ-GDP plan, split again.
        return smoothed()
    return exact_plan


#: Calibrated scales of recent plans (by their inputs) with their selections' threshold
#: floors, so that planning a release again (its report, then its run) costs one
#: certification instead of a search.
_EXACT_SCALES: dict[tuple[object, ...], tuple[float, tuple[int, ...]]] = {}
_EXACT_SCALES_LOCK = threading.Lock()
_MAX_CACHED = 64


def _calibrate_exact(
    split: Callable[[float, bool, tuple[int, ...]], Plan],
    capacity: float,
    budget: Budget,
    known: tuple[float, tuple[int, ...]] | None = None,
) -> tuple[Plan, tuple[float, tuple[int, ...]]] | None:
    """The plan with exact parts at the largest common capacity that meets the budget.

    Every part keeps its share μᵢ² = wᵢ·c² of a capacity c (σᵢ² = Δᵢ²/μᵢ² for an exact
    part, + τ² for the others). The scale s = 1/c is first predicted by the GDP model and
    bracketed by the certified ε (:func:`_predicted_scale`: three PLD evaluations at the
    benchmark's spec), with the thresholds of the μ-GDP plan's scale as floors. If the
    prediction misses, it is searched twice, as
    :func:`~gaussdp.accounting.calibration.calibrate_noise` does: first on a PLD grid 8
    times coarser than the accountant's (:func:`_search_scale`, from the μ-GDP plan's
    capacity, to 10⁻³), then from there with the *certified* ε itself — the budget's
    accountant at the plan's realised σ²'s, i.e. the filter's check — to a relative
    :data:`_CERTIFY_RTOL` (:func:`~gaussdp._search.smallest_scale`: the
    safe-side bracket of :mod:`gaussdp._search`, whose answer was evaluated to pass), with
    the coarse answer's private partition selection thresholds kept as floors (as
    :func:`_use_unspent_delta` keeps them: without floors the certified ε steps where a
    threshold changes, and a search without them, then one with them, cost 14 PLD
    evaluations where this one costs 5). Either way the plan returned has a certified ε ≤
    the budget's, and uses it to about 10⁻⁴ (the coarse grid alone left 0.1–0.3 %,
    docs/release.md). A ``known`` scale and threshold floors (an earlier calibration's)
    skip the searches if they still certify. ``split(capacity, totals, floors)`` splits
    the plan. Returns the plan with its scale and floors, or ``None`` if no finite scale
    meets the budget (the caller keeps the μ-GDP plan).
    """
    delta, target = budget.delta, budget.epsilon
    if delta is None or target is None:  # pragma: no cover - an (ε, δ) budget
        return None
    # Every split rewrites the groupings' measures and selections: the plan kept is the
    # last one split, and the answer is split again if another was split after it.
    last: list[tuple[float, Plan]] = []

    if known is not None:
        plan = split(1 / known[0], True, known[1])
        if plan.epsilon is not None and plan.epsilon <= target:
            return plan, known
    # First the scale the GDP model predicts, bracketed by two certified evaluations
    # (:func:`_predicted_scale`), with the thresholds at the μ-GDP plan's scale as floors.
    floors = _thresholds(split(capacity, False, ()))

    def certified(scale: float) -> float:
        # plan.epsilon is the budget's accountant's certified ε of plan.event: exactly
        # the filter's check (:func:`_within`) on an empty history, computed once.
        plan = split(1 / scale, True, floors)
        last[:] = [(scale, plan)]
        return math.inf if plan.epsilon is None else plan.epsilon

    def selection_delta(scale: float) -> float:
        plan = split(1 / scale, False, floors)
        return math.fsum(g.selection.delta for g in plan.groupings if g.selection is not None)

    predicted = _predicted_scale(certified, selection_delta, 1.0 / capacity, delta, target)
    if predicted is not None:
        if last[0][0] != predicted and certified(predicted) > target:  # pragma: no cover
            return None  # deterministic: the answer was evaluated to pass
        return last[0][1], (predicted, floors)
    start = _search_scale(split, 1.0 / capacity, delta, target)
    if start is None:  # pragma: no cover - no finite scale found
        return None
    # Private partition selections keep the thresholds of the coarse answer as floors
    # (computed without a PLD), so the certified ε has no threshold steps to search
    # across: one certified search sets scale and thresholds together
    # (:func:`_use_unspent_delta` explains the floors).
    floors = _thresholds(split(1 / start, False, ()))
    try:
        scale = smallest_scale(certified, target, start, _CERTIFY_RTOL, step=1 + _CERTIFY_STEP)
    except ValueError:  # pragma: no cover - no finite scale meets the budget
        return None
    if last[0][0] != scale and certified(scale) > target:  # pragma: no cover - deterministic
        return None
    return last[0][1], (scale, floors)


#: Rounds of :func:`_predicted_scale` before the searches take over.
_PREDICTIONS = 3
#: The model's secant steps and relative tolerance (:func:`_predicted_scale`).
_MODEL_STEPS, _MODEL_RTOL = 20, 1e-9


def _predicted_scale(
    certified: Callable[[float], float],
    selection_delta: Callable[[float], float],
    start: float,
    delta: float,
    target: float,
) -> float | None:
    """The smallest scale (to :data:`_CERTIFY_RTOL`) whose certified ε meets ``target``, found
    from the GDP model's prediction; ``None`` if the prediction misses :data:`_PREDICTIONS`
    times (the caller searches then).

    Every part's σ² is Δᵢ²/(wᵢc²) (+ τ² for a smoothing part), so as continuous Gaussians
    the parts compose to μ = c = 1/scale exactly (DRS Cor 3.3): the *model* ε is
    ε_μ(δ − Σδ_s) at μ = 1/scale (:func:`~gaussdp.privacy.gdp.gdp_epsilon`), δ_s the
    selections' at that scale (``selection_delta``). The certified ε (``certified``, the
    budget's accountant: what the plan is checked by) differs from it by the discrete
    Gaussians' and the PLD discretisation's small offset, nearly constant over the 10⁻⁴
    the scale is searched to (measured at the benchmark's spec: 1.8·10⁻⁵ ± 1.2·10⁻⁶ in ε
    over scales 2 % apart). So the scale where model + offset meets the target (offset 0,
    then the certified ε's at the last evaluation) is bracketed by two certified
    evaluations, ``hi`` = that scale·(1 + rtol/2) passing and hi/(1 + rtol) failing:
    three certified evaluations in all where the searches cost thirteen (eight of
    them on a coarser PLD grid). Only a prediction: the answer is a scale at which
    the certified ε was *evaluated* to pass, and one that failed lies within
    :data:`_CERTIFY_RTOL` below it, as :func:`~gaussdp._search.smallest_scale` returns.
    Where ε is steep in the scale (a tiny ε on a coarse PLD grid: ×22 at ε = 10⁻³,
    δ = 10⁻²) and the passing end leaves more than :data:`_SELECTION_GAP` of the budget
    unspent, the bracket is searched on to :data:`_CERTIFY_RTOL`/64.
    """

    def model_epsilon(scale: float) -> float:
        return gdp_epsilon(1.0 / scale, delta - selection_delta(scale))

    def model_scale(epsilon: float) -> float:
        # Secant steps on the model (δ_s moves with the scale: ×0.6 over 2 % here).
        a, f_a = start, model_epsilon(start) - epsilon
        b = 1.0 / gdp_mu(epsilon, delta - selection_delta(start))
        for _ in range(_MODEL_STEPS):
            f_b = model_epsilon(b) - epsilon
            if f_b == f_a or abs(b - a) <= _MODEL_RTOL * b:
                break
            a, f_a, b = b, f_b, b - f_b * (b - a) / (f_b - f_a)
        return b

    known: dict[float, float] = {}

    def evaluated(scale: float) -> float:
        if scale not in known:
            known[scale] = certified(scale)
        return known[scale]

    offset = 0.0
    try:
        for _ in range(_PREDICTIONS):
            hi = model_scale(target - offset) * (1 + _CERTIFY_RTOL / 2)
            if not 0.0 < hi < math.inf:  # the secant left the model's domain
                return None
            at = hi
            epsilon = evaluated(hi)
            if epsilon <= target:
                at = hi / (1 + _CERTIFY_RTOL)
                epsilon = evaluated(at)
                if epsilon > target and known[hi] >= target * (1 - _SELECTION_GAP):
                    return hi
                if epsilon > target:  # ε steep in the scale (a coarse PLD grid): finer
                    return smallest_scale(
                        evaluated, target, hi, _CERTIFY_RTOL / 64, step=1 + _CERTIFY_RTOL
                    )
            if not math.isfinite(epsilon):
                return None
            offset = epsilon - model_epsilon(at)
    except (ValueError, ArithmeticError):  # the model has no answer (e.g. δ_s ≥ δ)
        return None
    return None


def _thresholds(plan: Plan) -> tuple[int, ...]:
    """The thresholds of ``plan``'s private partition selections, in grouping order."""
    return tuple(g.selection.threshold for g in plan.groupings if g.selection is not None)


def _use_unspent_delta(
    split: Callable[[float, tuple[int, ...]], Plan], plan: Plan, scale: float
) -> tuple[Plan, float, tuple[int, ...]]:
    """``plan`` (the last split, at ``scale``) with its noise lowered into the δ its private
    partition selections leave unspent; the plan, its scale and its thresholds.

    Each threshold τ is the smallest integer whose δ_s meets the selection's share of δ
    (:func:`_threshold`), so δ_s falls short of it, by up to the ratio of two consecutive
    tails. ε is certified at δ − Σδ_s, so the δ left is the noise's already, but as the
    scale grows τ steps up and δ_s drops: ε jumps down, and the smallest scale whose ε
    meets the budget sits at such a step, up to 2 % under the budget (measured, ε ∈
    [0.5, 12]). Here the thresholds are kept as floors (``split(scale, floors)`` gives
    each selection the smallest τ ≥ its floor meeting its share) and the scale is lowered:
    δ_s only shrinks (P[Z ≥ τ − 1] grows with σ), so the share stays met with τ = the
    floor, and ε rises with no jump until the certified ε meets the budget
    (:func:`~gaussdp._search.smallest_scale`, whose answer was evaluated to pass: the
    plan never exceeds the budget). Skipped without a selection or when ε is within
    :data:`_SELECTION_GAP` of the budget.
    """
    floors = _thresholds(plan)
    target = plan.budget.epsilon
    if (
        not floors
        or target is None
        or plan.epsilon is None
        or plan.epsilon >= target * (1 - _SELECTION_GAP)
    ):
        return plan, scale, ()
    last: list[tuple[float, Plan]] = []

    def certified(s: float) -> float:
        p = split(s, floors)
        last[:] = [(s, p)]
        return math.inf if p.epsilon is None else p.epsilon

    try:
        lowered = smallest_scale(certified, target, scale, _CERTIFY_RTOL, step=1 + _CERTIFY_STEP)
    except ValueError:  # pragma: no cover - ε ≤ target at every scale down to 10⁻¹² of it
        lowered = scale
    if last[0][0] != lowered and certified(lowered) > target:  # pragma: no cover
        lowered = scale  # deterministic: the search's answer was evaluated to pass
        certified(scale)
    return last[0][1], lowered, floors


def _search_scale(
    split: Callable[[float, bool, tuple[int, ...]], Plan], start: float, delta: float, target: float
) -> float | None:
    """The smallest scale (to 10⁻³) whose plan's ε, on the search's PLD grid, is ≤ target.

    Only a starting point for the certified search (:func:`_calibrate_exact`): the coarse
    grid's ε is not the budget accountant's.
    """
    try:
        grid = PLDAccountant().compose(split(1 / start, False, ()).event).value_discretization
        h = min(1.0, _MEDIUM * grid)

        def eps(scale: float) -> float:
            acc = PLDAccountant(value_discretization=h).compose(split(1 / scale, False, ()).event)
            return acc.epsilon(delta).upper

        return smallest_scale(eps, target, start, _RTOL, step=1.05)
    except (ValueError, UnsupportedEventError):  # pragma: no cover - no finite scale found
        return None


_UNIT: dict[Accounting, str] = {"gdp": "mu", "zcdp": "rho"}
#: The most steps of 10⁻¹² the capacity is lowered by to meet the budget (10 %).
_MAX_SHRINK = 10**11
#: The certified search's relative tolerance on the scale, and its bracketing step.
_CERTIFY_RTOL, _CERTIFY_STEP = 1e-4, 1e-2
#: A plan with private partition selection whose ε is further than this (relative) under
#: the budget has its scale lowered with its thresholds kept (:func:`_use_unspent_delta`).
_SELECTION_GAP = 2e-4


def _within(plan: Plan) -> bool:
    """The plan's event fits its budget by the filter's check (:func:`refusal`)."""
    budget = plan.budget
    try:
        message, _ = refusal(budget, budget_accountant(budget), plan.event)
    except UnsupportedEventError:
        return False
    return message is None


def _split(
    groupings: list[Grouping],
    queries: list[Query],
    internal: dict[str, str],
    name: Callable[[str, str], str],
    *,
    budget: Budget,
    capacity: float,
    sel_delta: float,
    selection_count: int,
    selection_weight: float,
    exact: frozenset[int] = frozenset(),
    totals: bool = True,
    floors: tuple[int, ...] = (),
) -> Plan:
    """Give every part its share of ``capacity`` (μ or ρ), its σ², and total the costs.

    The parts numbered in ``exact`` (box-constrained ones) are accounted by their
    exact PLD, with σ² = Δ²/μᵢ² (no τ²). Without ``totals`` the plan's ρ, μ, slack
    and ε are left at 0/None (for the calibration's searches, which evaluate ε
    themselves). ``floors``, if given, holds one lower bound per private partition
    selection (in grouping order) on its threshold (:func:`_use_unspent_delta`).
    """
    accounting = budget.accounting
    # μ-GDP splits μ² (μᵢ² = wᵢμ², so DRS Cor 3.3 gives back μ); zCDP splits ρ (Lemma 2.3).
    total = Fraction(capacity) ** 2 if accounting == "gdp" else Fraction(capacity)
    weights = sum((Fraction(q.weight) for q in queries), Fraction(0))
    weights += Fraction(selection_weight) * selection_count
    parts: list[Part] = []
    for gi, g in enumerate(groupings):
        g.measures = []
        g.selection = None
        noise = _Noise(g, gi, accounting, parts, exact)
        l0, linf = g.l0, g.linf
        for qi in g.queries:
            q = queries[qi]
            share = total * Fraction(q.weight) / weights
            if q.statistic in ("mean", "vector_mean"):
                share /= 2  # a sum part and a count part share the query's weight
            elif q.statistic in ("variance", "std"):
                share /= 3  # a count, a sum and a sum of squares share it
            if q.statistic in ("count", "histogram"):
                noise.count(qi, g.output_index(Output("rows")), linf, share)
            elif q.statistic == "distinct_units":
                # A unit is in at most L0 groups and counts once in each: Δ² = L0.
                out = g.output_index(Output("units"))
                noise.add(qi, "distinct units", 1.0, Fraction(l0), share, [("count", out)], bound=1)
            elif q.statistic in ("variance", "std"):
                _variance(noise, qi, q, name("x", q.columns[0]), linf, share)
            elif q.statistic == "quantile":
                # Every row is in one node per level; a unit's bounded rows in one group are
                # a non-negative leaf vector of total ≤ L∞ (sql.tree_sql), so its node
                # counts at each level have L2 norm ≤ L1 ≤ L∞: Δ² = L0·levels·L∞².
                resolution, branching = q.resolution or 1, q.branching or 2
                levels = tree_levels(resolution, branching)
                noise.add(
                    qi,
                    "tree",
                    1.0,
                    Fraction(l0 * levels * linf * linf),
                    share,
                    [("tree", 0)],
                    coordinates=tree_nodes(resolution, branching),
                )
            elif q.statistic in ("sum", "mean"):
                lo, hi = q.bounds or (0.0, 0.0)
                # Rows are put on the grid one by one (FLOOR(v/γ + ½) of the clamped
                # value, monotone): each row's integer lies in [r_lo, r_hi], so a unit's
                # per-cell contribution, exact integers rescaled to ≤ L∞ rows, lies in
                # [L∞·min(r_lo, 0), L∞·max(r_hi, 0)] (module docstring).
                gamma = grid_step(max(abs(lo), abs(hi)))
                total_lo = linf * min(_round_half_up(lo / gamma), 0)
                total_hi = linf * max(_round_half_up(hi / gamma), 0)
                k = max(-total_lo, total_hi)
                i = g.value_index(ScalarValue(name("x", q.columns[0]), lo, hi, gamma))
                out = g.output_index(Output("sum", i, -1, total_lo, total_hi))
                noise.add(qi, "sum", gamma, Fraction(l0 * k * k), share, [("sum", out)], bound=k)
                if q.statistic == "mean":
                    noise.count(qi, g.output_index(Output("valid", i)), linf, share)
            else:
                norm = q.norm or 0.0
                cols = tuple(name("x", c) for c in q.columns)
                # Per row: clipped to norm C, each coordinate rounded to the grid (moves the
                # row by ≤ √d/2 grid steps); the cell's exact integer sum rescaled to ≤ L∞
                # rows and rounded again (≤ √d/2 more): K = L∞·(C(1+10⁻⁶)/γ + √d/2) + √d/2.
                gamma = grid_step(norm / math.sqrt(len(cols)))
                i = g.value_index(VectorValue(cols, norm, gamma))
                half_d = Fraction(math.nextafter(math.sqrt(len(cols)), math.inf)) / 2
                row = Fraction(norm) * (1 + Fraction(_FLOAT_SLACK)) / Fraction(gamma) + half_d
                k_vec = linf * row + half_d
                # The d coordinates are one part with L2 sensitivity √L0·K (CKS Thm 14; one
                # continuous Gaussian vector in the smoothing argument).
                roles = [
                    (f"coord{a}", g.output_index(Output("coord", i, a))) for a in range(len(cols))
                ]
                noise.add(qi, "vector", gamma, Fraction(l0) * k_vec**2, share, roles)
                if q.statistic == "vector_mean":
                    noise.count(qi, g.output_index(Output("valid", i)), linf, share)
        if g.private_keys:
            share = total * Fraction(selection_weight) / weights
            exact_part = len(parts) in exact
            s2 = _sigma2(Fraction(l0), share, accounting, smoothing=not exact_part)
            floor = floors[len([h for h in groupings[:gi] if h.private_keys])] if floors else 2
            tau, spent = _threshold(s2, l0, sel_delta / selection_count, g.cells, floor)
            g.selection = Selection(s2, tau, spent)
            # A unit changes at most L0 distinct-unit counts, each by 1: box (L0, 1).
            parts.append(
                Part(
                    None, gi, "distinct units", 1.0, Fraction(l0), s2, g.cells, (l0, 1), exact_part
                )
            )

    mode: PlanAccounting = "pld" if any(p.exact for p in parts) else accounting
    if not totals:
        return Plan(
            tuple(groupings), internal, tuple(parts), mode, 0.0, None, 0.0, 0.0, None, budget
        )
    # The totals, by the accountants (ρ-zCDP; μ-GDP with the smoothing slack, or the
    # budget's PLD accountant for exact parts; ε at δ).
    event = _plan_event(groupings, parts)
    zcdp = ZCDPAccountant().compose(event)
    gdp = _composed(GDPAccountant(), event)  # None with exact parts: no μ certificate
    acc = zcdp if accounting == "zcdp" else _composed(budget_accountant(budget), event)
    epsilon = None
    if budget.delta is not None and acc is not None:
        # budget_accountant's (not zCDP's): what the budget check measures. One query,
        # kept for that check (remember_spent), so the plan's ε is the check's.
        if accounting == "zcdp":
            epsilon = acc.epsilon(budget.delta).upper
        else:
            epsilon = remember_spent(budget, acc).value
    # The smoothing slack of the parts that use it (all of them unless some are exact).
    slack = gdp.slack if gdp is not None else acc.slack if acc is not None else 0.0
    return Plan(
        tuple(groupings),
        internal,
        tuple(parts),
        mode,
        zcdp.rho,
        gdp.mu if isinstance(gdp, GDPAccountant) else None,
        slack,
        zcdp.extra_delta,
        epsilon,
        budget,
    )


@dataclass(slots=True)
class _Noise:
    """Adds a part and its measures to one grouping."""

    grouping: Grouping
    index: int
    accounting: Accounting
    parts: list[Part]
    exact: frozenset[int]

    def add(
        self,
        qi: int,
        kind: PartKind,
        gamma: float,
        sensitivity2: Fraction,
        share: Fraction,
        roles: list[tuple[str, int]],
        *,
        coordinates: int = 1,
        bound: int | None = None,
    ) -> None:
        """Add a part; ``bound`` K for a box-constrained one (≤ L0 cells, each by ≤ K)."""
        box = None if bound is None else (self.grouping.l0, bound)
        exact = box is not None and len(self.parts) in self.exact
        sigma2 = _sigma2(sensitivity2, share, self.accounting, smoothing=not exact)
        for role, out in roles:
            self.grouping.measures.append(Measure(qi, role, out, gamma, sigma2))
        cells = self.grouping.cells * len(roles) * coordinates
        part = Part(qi, self.index, kind, gamma, sensitivity2, sigma2, cells, box, exact)
        self.parts.append(part)

    def count(self, qi: int, out: int, linf: int, share: Fraction) -> None:
        l0 = self.grouping.l0
        self.add(qi, "count", 1.0, Fraction(l0 * linf * linf), share, [("count", out)], bound=linf)


def _variance(noise: _Noise, qi: int, q: Query, column: str, linf: int, share: Fraction) -> None:
    r"""A variance's three parts: valid rows N, sum S and sum of squares Q of centred values.

    Each row's clamped value minus the centre m = (lo + hi)/2 is put on the grid
    γ = :func:`grid_step`\ ((hi − lo)/2) per row: an integer y in [r_lo, r_hi]
    (monotone rounding, as for sums), |y| ≤ R = max(|r_lo|, |r_hi|) ≤ 512. A
    unit's cell adds ≤ L∞ to N, [L∞·r_lo, L∞·r_hi] to S and [0, L∞·R²] to Q
    (rescaled to L∞ rows like sums; the SQL clamps each cell to these ranges),
    so the parts' L2 sensitivities are √L0·L∞, √L0·L∞·R and √L0·L∞·R² grid units.
    One unit with all its rows at a bound attains all three at once, so the
    three parts' composition (μ² and ρ add) is exactly the joint Gaussian
    vector's guarantee with its coordinates' own σ's: nothing is lost by
    accounting them as parts.
    """
    g, l0 = noise.grouping, noise.grouping.l0
    lo, hi = q.bounds or (0.0, 0.0)
    center, radius = lo / 2 + hi / 2, hi / 2 - lo / 2
    gamma = grid_step(radius)
    # The SQL computes FLOOR((clamped − m)/γ + ½) per row in doubles; the same operations.
    r_lo = _round_half_up((lo - center) / gamma)
    r_hi = _round_half_up((hi - center) / gamma)
    total_lo, total_hi = linf * min(r_lo, 0), linf * max(r_hi, 0)
    k_sum = max(-total_lo, total_hi)
    k_sq = linf * max(r_lo * r_lo, r_hi * r_hi)
    i = g.value_index(ScalarValue(column, lo, hi, gamma, center))
    out_sum = g.output_index(Output("sum", i, -1, total_lo, total_hi))
    out_sq = g.output_index(Output("sumsq", i, -1, 0, k_sq))
    sum2, sq2 = Fraction(l0 * k_sum * k_sum), Fraction(l0 * k_sq * k_sq)
    noise.add(qi, "sum", gamma, sum2, share, [("sum", out_sum)], bound=k_sum)
    noise.add(qi, "sum of squares", gamma * gamma, sq2, share, [("sumsq", out_sq)], bound=k_sq)
    noise.count(qi, g.output_index(Output("valid", i)), linf, share)
