r"""Privacy events: pure data that accountants compose.

An event describes what was run, never how to account for it (dp_accounting's
``DpEvent`` design): the mechanisms of :mod:`gaussdp.mechanisms` (``Gaussian``,
``DiscreteGaussian``, ``DiscreteLaplace``, ``Laplace`` and ``LatticeGaussian``,
the mechanism every real-valued release actually runs) and the classes here:

* noise: :class:`LatticeNoise` (lattice noise on a part of a table release),
  :class:`DiscreteGaussianVector`, :class:`DiscreteGaussianL2`;
* generic steps: :class:`PureDP`, :class:`ApproxDP`, :class:`ExponentialMechanism`
  (ε-bounded-range), :class:`PartitionSelection`,
  :class:`RecordedCost` (a format-2 ledger entry);
* structure: :class:`Subsampled` (Poisson, or a fixed batch without replacement,
  with the neighbouring relation stated), :class:`SelfComposed` and
  :class:`Composed`.

Events are frozen, slotted, hashable and validated; they round-trip through JSON
(:func:`event_to_json`, :func:`event_from_json`) with a format version. A field
never changes meaning: a new field or type raises :data:`EVENT_FORMAT`.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, field, fields
from fractions import Fraction
from typing import Any, Literal

from gaussdp._search import fraction_up, mul_up, sqrt_up, up
from gaussdp._validation import (
    _as_float,
    check_count,
    check_delta,
    check_epsilon,
    check_fraction,
    check_int,
)
from gaussdp.accounting.bounds import DeltaBounds, EpsilonBounds
from gaussdp.accounting.pld import (
    DEFAULT_TAIL_MASS,
    DEFAULT_VALUE_DISCRETIZATION,
    PrivacyLossDistribution,
)
from gaussdp.errors import invalid
from gaussdp.mechanisms import (
    DiscreteGaussian,
    DiscreteLaplace,
    Gaussian,
    Laplace,
    LatticeGaussian,
    smoothing_log_ratio,
)
from gaussdp.privacy import DiscreteGaussianDistribution

__all__ = [
    "EVENT_FORMAT",
    "EVENT_TYPES",
    "MAX_L2_CANDIDATES",
    "MAX_L2_SQUARED",
    "MECHANISM_TYPES",
    "ApproxDP",
    "Composed",
    "DiscreteGaussianL2",
    "DiscreteGaussianVector",
    "Event",
    "ExponentialMechanism",
    "LatticeNoise",
    "Mechanism",
    "PartitionSelection",
    "PureDP",
    "RecordedCost",
    "SelfComposed",
    "Subsampled",
    "UnknownEventError",
    "check_event",
    "check_rate",
    "describe",
    "event_from_dict",
    "event_from_json",
    "event_to_dict",
    "event_to_json",
    "l2_worst_case_vectors",
    "lattice_noise",
    "max_delta_bounds",
    "max_epsilon_bounds",
    "selection_delta",
]


@dataclass(frozen=True, slots=True)
class DiscreteGaussianVector:
    r"""Independent N_Z(0, σ²) noise on each coordinate of an integer vector query.

    ``sensitivities`` is the worst-case vector of per-coordinate changes |f(D)_j −
    f(D′)_j| (CKS Thm 14). The privacy loss is the sum of the coordinates' losses;
    it is ρ-zCDP with ρ = Σ_j Δ_j²/(2σ²).

    Parameters
    ----------
    sigma2 : Fraction, int, float or str
        The scale parameter σ² of every coordinate, exact and > 0.
    sensitivities : tuple of int
        Non-negative integers, at least one positive.

    Examples
    --------
    >>> v = DiscreteGaussianVector("25/4", (1, 1))
    >>> v.rho
    0.16
    """

    sigma2: Fraction
    sensitivities: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma2", check_fraction("sigma2", self.sigma2))
        if isinstance(self.sensitivities, (str, bytes)) or not hasattr(
            self.sensitivities, "__iter__"
        ):
            raise TypeError(invalid("sensitivities", "a sequence of integers", self.sensitivities))
        values = tuple(check_int("sensitivities", s, minimum=0) for s in self.sensitivities)
        if not any(values):
            raise ValueError(
                invalid("sensitivities", "a sequence with a positive entry", self.sensitivities)
            )
        object.__setattr__(self, "sensitivities", values)

    @property
    def rho(self) -> float:
        """Σ_j Δ_j²/(2σ²) (CKS Thm 14)."""
        return float(Fraction(sum(s * s for s in self.sensitivities)) / (2 * self.sigma2))

    def rdp(self, order: float) -> float:
        """Rényi divergence bound αρ at order α > 1 (CKS Thm 14)."""
        return float(order) * self.rho


#: Largest ⌊L²⌋ accepted by :class:`DiscreteGaussianL2`.
MAX_L2_SQUARED = 400
#: Largest number of worst-case sensitivity vectors :class:`DiscreteGaussianL2` enumerates.
MAX_L2_CANDIDATES = 256
# A float L whose square is within this relative distance below an integer m is read as
# √m: the larger (safer) bound, so that ``math.sqrt(3)`` (whose square is 2.9999999999999996)
# means ⌊L²⌋ = 3.
_SQRT_ROUNDING = Fraction(1, 2**40)


def l2_worst_case_vectors(
    squared_bound: int, dimension: int, *, limit: int | None = None
) -> tuple[tuple[int, ...], ...]:
    r"""The maximal non-increasing vectors of positive integers with Σ v_j² ≤ ``squared_bound``.

    Every integer vector v with at most ``dimension`` non-zero coordinates and
    ‖v‖₂² ≤ ``squared_bound`` is dominated (as a neighbouring pair of independent
    discrete Gaussian noise, see :class:`DiscreteGaussianL2`) by one of the returned
    vectors: a vector is returned iff no coordinate can be increased by one and, when
    it has fewer than ``dimension`` parts, no part 1 can be added.

    Parameters
    ----------
    squared_bound : int
        The bound n ≥ 1 on Σ v_j².
    dimension : int
        The largest number of non-zero coordinates, ≥ 1.
    limit : int, optional
        Stop and raise ``ValueError`` once more than ``limit`` vectors are found.

    Returns
    -------
    tuple of tuple of int
        The vectors, each sorted in non-increasing order.

    Examples
    --------
    >>> l2_worst_case_vectors(5, 2)
    ((2, 1),)
    >>> l2_worst_case_vectors(4, 4)
    ((2,), (1, 1, 1, 1))
    """
    n = check_int("squared_bound", squared_bound, minimum=1)
    d = check_int("dimension", dimension, minimum=1)
    found: list[tuple[int, ...]] = []
    prefix: list[int] = []

    def walk(largest: int, remaining: int) -> None:
        k = len(prefix)
        if k:
            total = n - remaining
            # Maximal: no part can grow by one (Σ + 2·min + 1 > n) and no part 1 can be
            # added (k = d or Σ = n).
            if (k < d and total == n) or (k == d and total + 2 * prefix[-1] + 1 > n):
                found.append(tuple(prefix))
                if limit is not None and len(found) > limit:
                    raise ValueError(
                        invalid(
                            "squared_bound",
                            f"small enough to give at most {limit} worst-case vectors "
                            f"in dimension {d}",
                            squared_bound,
                        )
                    )
        if k == d:
            return
        for part in range(min(largest, math.isqrt(remaining)), 0, -1):
            prefix.append(part)
            walk(part, remaining - part * part)
            prefix.pop()

    walk(math.isqrt(n), n)
    return tuple(found)


@dataclass(frozen=True, slots=True)
class DiscreteGaussianL2:
    r"""Independent N_Z(0, σ²) noise on d coordinates of a query with L2 sensitivity L.

    The integer-valued query's answers on neighbouring datasets differ by an integer
    vector v with ‖v‖₂ ≤ L, and nothing else is known about v. ρ-zCDP holds with
    ρ = max Σ_j v_j²/(2σ²) over such v (CKS Thm 14); the exact (ε, δ) curve is the
    worst case over all such v, computed from the few vectors that can be worst:

    * the privacy loss distribution of v depends only on the multiset of |v_j| ≠ 0
      (N_Z(0, σ²) is symmetric, the coordinates are independent);
    * adding a non-zero coordinate can only increase δ(ε) (dropping an output is
      post-processing);
    * increasing one |v_j| by one can only increase δ(ε): the discrete Gaussian shift
      family has a monotone likelihood ratio, so the optimal tests are (randomised)
      thresholds, and at every threshold N_Z(a + 1, σ²) has type-II error at most
      that of N_Z(a, σ²) (a lower trade-off curve: a dominating pair); dominance is
      preserved by taking products with the other coordinates.

    So the worst case is a maximum over the *maximal* multisets
    (:func:`l2_worst_case_vectors`) of at most d positive integers with
    Σ v_j² ≤ ⌊L²⌋.

    Parameters
    ----------
    sigma2 : Fraction, int, float or str
        The scale parameter σ² of every coordinate, exact and > 0.
    l2_sensitivity : Fraction, int, float or str
        The bound L ≥ 1 on ‖v‖₂. Only ⌊L²⌋ matters (exact for integer vectors); a
        float within a relative 2⁻⁴⁰ below √m for an integer m is read as √m (the
        safer bound), so ``math.sqrt(3)`` means ⌊L²⌋ = 3. ⌊L²⌋ must be at most
        :data:`MAX_L2_SQUARED` (400) and the worst-case vectors at most
        :data:`MAX_L2_CANDIDATES` (256).
    dimension : int
        The number d ≥ 1 of coordinates (it limits the number of non-zero v_j).

    Attributes
    ----------
    candidates : tuple of tuple of int
        The worst-case sensitivity vectors (non-increasing, positive parts).

    Raises
    ------
    ValueError
        If L < 1 (the only integer vector is 0), or ⌊L²⌋ or the number of
        worst-case vectors exceeds its limit: then give the worst vector to
        :class:`DiscreteGaussianVector`, or account by ρ-zCDP
        (:class:`~gaussdp.accounting.RDPAccountant`, ρ = ⌊L²⌋/(2σ²), CKS Thm 14).

    Notes
    -----
    For one run, :meth:`delta` and :meth:`epsilon` take the maximum over the
    candidates' PLDs (upper: max of the upper bounds; lower: max of the lower bounds).
    Under composition the vector may change from run to run (and adaptively), and a
    maximum over candidates of k-fold compositions is not a bound. The PLD
    accountant therefore composes a single *dominating pair*: a PLD whose
    hockey-stick curve lies above every candidate's certified upper curve (their
    upper envelope, interpolated by chords, see
    :meth:`~gaussdp.accounting.PrivacyLossDistribution.from_discrete_gaussian_worst_case`);
    dominating pairs compose (Zhu, Dong & Wang 2022), so its k-fold composition is a
    certified upper bound. The lower bound of a composition uses one realisable
    candidate in every run.

    Examples
    --------
    >>> e = DiscreteGaussianL2(4, 2, dimension=3)
    >>> e.candidates
    ((2,), (1, 1, 1))
    >>> e.rho
    0.5
    >>> b = e.delta(1.0)
    >>> 0.1 < b.lower <= b.upper < 0.2
    True
    """

    sigma2: Fraction
    l2_sensitivity: Fraction
    dimension: int
    candidates: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma2", check_fraction("sigma2", self.sigma2))
        bound = check_fraction("l2_sensitivity", self.l2_sensitivity)
        object.__setattr__(self, "dimension", check_int("dimension", self.dimension, minimum=1))
        if bound < 1:
            raise ValueError(
                invalid(
                    "l2_sensitivity",
                    "at least 1 (a smaller ball holds only the zero vector)",
                    self.l2_sensitivity,
                )
            )
        n = _squared_bound(bound)
        if n > MAX_L2_SQUARED:
            raise ValueError(
                invalid(
                    "l2_sensitivity",
                    f"at most √{MAX_L2_SQUARED} (⌊L²⌋ ≤ {MAX_L2_SQUARED}); give the worst "
                    "vector to DiscreteGaussianVector or use ρ-zCDP (RDPAccountant)",
                    self.l2_sensitivity,
                )
            )
        try:
            found = l2_worst_case_vectors(n, self.dimension, limit=MAX_L2_CANDIDATES)
        except ValueError:
            raise ValueError(
                invalid(
                    "l2_sensitivity",
                    f"small enough to give at most {MAX_L2_CANDIDATES} worst-case vectors "
                    f"in dimension {self.dimension}; give the worst vector to "
                    "DiscreteGaussianVector or use ρ-zCDP (RDPAccountant)",
                    self.l2_sensitivity,
                )
            ) from None
        object.__setattr__(self, "l2_sensitivity", bound)
        object.__setattr__(self, "candidates", found)

    @property
    def squared_bound(self) -> int:
        """⌊L²⌋: the bound on Σ_j v_j² for integer vectors v."""
        return _squared_bound(self.l2_sensitivity)

    @property
    def rho(self) -> float:
        """max_v Σ_j v_j²/(2σ²) over the candidates (CKS Thm 14); ⌊L²⌋/(2σ²) if d ≥ 4."""
        top = max(sum(a * a for a in v) for v in self.candidates)
        return float(Fraction(top) / (2 * self.sigma2))  # CKS Thm 14

    def rdp(self, order: float) -> float:
        """Rényi divergence bound αρ at order α > 1 (CKS Thm 14)."""
        return float(order) * self.rho

    def candidate_plds(
        self,
        *,
        value_discretization: float | None = None,
        tail_mass: float = DEFAULT_TAIL_MASS,
    ) -> list[PrivacyLossDistribution]:
        """The PLD of each worst-case vector in :attr:`candidates` (CKS Thm 14, §2.4).

        Parameters
        ----------
        value_discretization : float, optional
            Grid step h of the privacy loss, in nats. Default: the largest step ≤ 1e-4
            dividing the loss lattice 1/(2σ²), which puts every loss on the grid.
        tail_mass : float, default 1e-15
            Bound on the mass moved by each truncation or wrap-around.

        Examples
        --------
        >>> len(DiscreteGaussianL2(4, 2, dimension=3).candidate_plds())
        2
        """
        if value_discretization is None:
            # Losses Σ_j (v_j² − 2v_j y_j)/(2σ²) are multiples of 1/(2σ²) (CKS Thm 14).
            lattice = float(1 / (2 * self.sigma2))
            h = DEFAULT_VALUE_DISCRETIZATION
            value_discretization = lattice / math.ceil(lattice / h) if lattice >= h else h
        return PrivacyLossDistribution._worst_case_candidates(
            self.sigma2, self.candidates, value_discretization, tail_mass
        )

    def delta(
        self,
        epsilon: float,
        *,
        value_discretization: float | None = None,
        tail_mass: float = DEFAULT_TAIL_MASS,
    ) -> DeltaBounds:
        """Bounds on the smallest δ at ``epsilon`` for one run: the max over the candidates.

        ``upper`` is the largest candidate upper bound, ``lower`` the largest lower bound
        (each candidate is a realisable neighbouring pair). Keywords as in
        :meth:`candidate_plds`.

        Examples
        --------
        >>> b = DiscreteGaussianL2(1, 1, dimension=1).delta(0.5)
        >>> b.lower <= b.upper
        True
        """
        epsilon = check_epsilon("epsilon", epsilon)
        plds = self.candidate_plds(value_discretization=value_discretization, tail_mass=tail_mass)
        return max_delta_bounds(plds, epsilon)

    def epsilon(
        self,
        delta: float,
        *,
        value_discretization: float | None = None,
        tail_mass: float = DEFAULT_TAIL_MASS,
    ) -> EpsilonBounds:
        """Bounds on the smallest ε at ``delta`` for one run: the max over the candidates.

        Keywords as in :meth:`candidate_plds`.

        Examples
        --------
        >>> b = DiscreteGaussianL2(100, 5, dimension=2).epsilon(1e-6)
        >>> b.lower <= b.upper < 3
        True
        """
        delta = check_delta("delta", delta)
        plds = self.candidate_plds(value_discretization=value_discretization, tail_mass=tail_mass)
        return max_epsilon_bounds(plds, delta)


def max_delta_bounds(plds: list[PrivacyLossDistribution], epsilon: float) -> DeltaBounds:
    """The worst case over several PLDs at ``epsilon``: max of uppers, max of lowers."""
    bounds = [pld.delta(epsilon) for pld in plds]
    return DeltaBounds(lower=max(b.lower for b in bounds), upper=max(b.upper for b in bounds))


def max_epsilon_bounds(plds: list[PrivacyLossDistribution], delta: float) -> EpsilonBounds:
    """The worst case over several PLDs at ``delta``: max of uppers, max of lowers."""
    bounds = [pld.epsilon(delta) for pld in plds]
    return EpsilonBounds(lower=max(b.lower for b in bounds), upper=max(b.upper for b in bounds))


def _squared_bound(bound: Fraction) -> int:
    """⌊L²⌋, read as m when L² is within a relative 2⁻⁴⁰ below the integer m."""
    square = bound * bound
    n = math.floor(square)
    if square >= (n + 1) * (1 - _SQRT_ROUNDING):
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class LatticeNoise:
    r"""Independent N_Z(0, σ²) noise on ``dim`` coordinates of a lattice-valued query.

    Neighbouring answers (in lattice units) differ by a vector of L2 norm at most
    √``sensitivity2``. This is what a table release adds to one *part* (a count,
    a sum or a vector over all cells of a grouping), and what
    :class:`gaussdp.LatticeGaussian` adds to a rounded real query. Accountants
    account it two ways:

    * exactly in ρ-zCDP, ρ = Δ²/(2σ²) (CKS Thm 14);
    * by the smoothing argument of :class:`gaussdp.LatticeGaussian`: for
      σ² > τ² = 9 the output law is within e^{±A} (A = ``dim``·a,
      a = :func:`gaussdp.mechanisms.smoothing_log_ratio`) of a post-processed
      Gaussian mechanism with μ = Δ/√(σ² − τ²) (DRS Thm 2.7). The accountant adds
      the slack A once to the whole composition: ε(δ) ≤ ε_μ(δe^{−A}) + 2A.

    Parameters
    ----------
    sigma2 : Fraction, int, float or str
        σ², exact and > 0.
    sensitivity2 : Fraction, int, float or str
        Δ², the squared L2 sensitivity in lattice units, exact and > 0.
    dim : int
        The number of coordinates (an a-priori bound), ≥ 1.

    Examples
    --------
    >>> n = LatticeNoise(sigma2=109, sensitivity2=4, dim=3)
    >>> n.rho, n.mu2
    (0.01834862385321101, Fraction(1, 25))
    """

    sigma2: Fraction
    sensitivity2: Fraction
    dim: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma2", check_fraction("sigma2", self.sigma2))
        object.__setattr__(self, "sensitivity2", check_fraction("sensitivity2", self.sensitivity2))
        object.__setattr__(self, "dim", check_int("dim", self.dim, minimum=1))

    @property
    def rho(self) -> float:
        """Δ²/(2σ²) rounded up: the noise is exactly this ρ-zCDP (CKS Thm 14)."""
        return fraction_up(self.sensitivity2 / (2 * self.sigma2))

    @property
    def mu2(self) -> Fraction | None:
        """Δ²/(σ² − τ²), exact: μ² of the smoothing argument; ``None`` if σ² ≤ τ²."""
        continuous = self.sigma2 - LatticeGaussian.SMOOTHING_TAU2
        return None if continuous <= 0 else self.sensitivity2 / continuous

    @property
    def mu(self) -> float:
        """√:attr:`mu2` rounded up; ∞ when σ² ≤ τ² (no μ-GDP certificate)."""
        mu2 = self.mu2
        return math.inf if mu2 is None else sqrt_up(mu2)

    @property
    def smoothing_slack(self) -> float:
        """A = dim·a, rounded up: the output law is within e^{±A} of the μ-GDP mechanism's."""
        return mul_up(float(self.dim), smoothing_log_ratio(LatticeGaussian.SMOOTHING_TAU2))


def lattice_noise(mechanism: LatticeGaussian) -> LatticeNoise:
    """The :class:`LatticeNoise` a :class:`gaussdp.LatticeGaussian` adds (its lattice bound Δ)."""
    return LatticeNoise(mechanism.sigma2, mechanism.lattice_sensitivity**2, mechanism.dim)


@dataclass(frozen=True, slots=True)
class PureDP:
    r"""A step known only to be ε-DP (randomised response, a Laplace count from another tool).

    Accounted through its worst-case pair, randomised response with
    P = (e^ε, 1)/(1 + e^ε) against the reverse (Kairouz, Oh & Viswanath 2015 Thm
    2.1: it dominates every ε-DP mechanism), so k-fold compositions reach the
    optimal composition bound (KOV Thm 3.3).

    Examples
    --------
    >>> PureDP(0.5).rho
    0.125
    """

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon("epsilon", self.epsilon))

    @property
    def rho(self) -> float:
        """ε²/2: pure ε-DP implies ε²/2-zCDP (Bun & Steinke 2016 Prop 1.4), rounded up."""
        return mul_up(self.epsilon, self.epsilon) / 2


@dataclass(frozen=True, slots=True)
class ApproxDP:
    r"""A step known only to be (ε, δ)-DP (a third-party mechanism).

    Accounted through its worst-case pair (Kairouz, Oh & Viswanath 2015 Thm 2.1):
    P = (δ, (1 − δ)e^ε/(1 + e^ε), (1 − δ)/(1 + e^ε), 0) against Q, its mirror image;
    k-fold compositions then reach the optimal composition bound (KOV Thm 3.3,
    Murtagh & Vadhan 2016).

    Parameters
    ----------
    epsilon : float
        ε ≥ 0, finite.
    delta : float
        δ in [0, 1).

    Examples
    --------
    >>> ApproxDP(1.0, 1e-6).delta
    1e-06
    """

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon("epsilon", self.epsilon))
        allowed = "a real number in [0, 1)"  # one message for every bad delta
        delta = _as_float("delta", self.delta, allowed)
        if not 0.0 <= delta < 1.0:
            raise ValueError(invalid("delta", allowed, self.delta))
        object.__setattr__(self, "delta", delta)


@dataclass(frozen=True, slots=True)
class ExponentialMechanism:
    r"""An ε-bounded-range step: the exponential mechanism (or any ε-BR selection).

    A mechanism M is ε-*bounded-range* (ε-BR; Durfee & Rogers 2019, "range-bounded")
    if for all neighbours D, D′ its privacy loss ln(P[M(D) = y]/P[M(D′) = y])
    ranges over an interval of width at most ε. The exponential mechanism that selects y
    with probability ∝ exp(ε·u(D, y)/(2Δ)), for a utility u of sensitivity Δ, is
    ε-BR: its loss is ε(u(D, y) − u(D′, y))/(2Δ) − ln(Z(D)/Z(D′)), and the first
    term lies in [−ε/2, ε/2] and the second does not depend on y (the argument of
    Durfee & Rogers 2019 for the exponential mechanism). So is the
    exponential mechanism with exp(ε·u/Δ) when u is monotone (every score moves in
    the same direction between neighbours), and the report-noisy-max with Gumbel
    noise (which equals the exponential mechanism).

    An ε-BR mechanism is

    * ε-DP: the loss has Q-mean E_Q[e^L] = 1, so its range contains 0 and each end
      is within ε of it;
    * ε²/8-zCDP (Cesar & Rogers 2021; the proof is in ``docs/accounting.md``:
      the cumulant generating function of a loss confined to an interval of width ε
      has curvature at most ε²/4, as in Hoeffding's lemma), a quarter of the
      pure-DP ε²/2.

    Accountants: zCDP (ρ = ε²/8), RDP (min(αε²/8, ε) at each order α), PLD (a pair
    dominating every ε-BR pair, :mod:`gaussdp.accounting._bounded_range`: exact for
    one run, tighter than the pure ε-DP worst case, not the optimal composition of
    Dong, Durfee & Rogers 2020; the RDP bound is returned, labelled, where it is
    tighter). GDP refuses it.

    Parameters
    ----------
    epsilon : float
        The range ε ≥ 0 of the privacy loss (the ε of the exponential mechanism),
        finite.

    Examples
    --------
    >>> ExponentialMechanism(1.0).rho
    0.125
    """

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon("epsilon", self.epsilon))

    @property
    def rho(self) -> float:
        """ε²/8 rounded up: ε-BR implies ε²/8-zCDP (Cesar & Rogers 2021, §3)."""
        return fraction_up(Fraction(self.epsilon) ** 2 / 8)


@dataclass(frozen=True, slots=True)
class PartitionSelection:
    r"""Private partition selection by Gaussian thresholding, with its noise and its δ.

    The number of distinct privacy units per group (L2 sensitivity √L0 after L0
    bounding) gets N_Z(0, σ²) noise; a group is released iff its noisy count is at
    least ``threshold``. A group present only because of one unit has count 1, so it
    passes with probability P[Z ≥ τ − 1]; with at most L0 such groups the selection
    is δ-close to the mechanism that releases every group's noisy count,
    δ = L0·P[Z ≥ τ − 1] (union bound; Bun & Steinke 2016 Def 8.1 and Lemma 8.3 for
    zCDP). Accountants compose its :attr:`noise` and add :attr:`delta`.

    The released counts' noise is accounted one of two ways (``exact``): by the
    smoothing argument, as :class:`LatticeNoise` with L2 sensitivity √L0 over
    ``cells`` coordinates (μ-GDP up to a slack; the default), or exactly, as
    :class:`DiscreteGaussianVector` with sensitivities (1,)·L0: a unit changes at
    most L0 counts, each by at most 1, and that product of one-dimensional pairs
    dominates every such change (the shift family N_Z(s, σ²) has a monotone
    likelihood ratio; proof in :mod:`gaussdp.release.plan`).

    Parameters
    ----------
    sigma2 : Fraction, int, float or str
        σ² of the noise on the distinct-unit counts, exact and > 0.
    threshold : int
        τ ≥ 1: the smallest noisy count released. At τ = 1 a group of one unit
        passes with probability P[Z ≥ 0] ≥ 1/2, so δ ≥ 1/2: a valid event with no
        useful guarantee (the release planner starts at τ = 2; τ = 1 is accepted so
        that ledgers written when the planner could choose it still load).
    max_groups_per_unit : int
        L0 ≥ 1.
    cells : int
        An a-priori bound on the candidate groups (times bins), ≥ 1.
    exact : bool, default False
        Account the noise exactly (:class:`DiscreteGaussianVector`) instead of by
        the smoothing argument (:class:`LatticeNoise`).

    Examples
    --------
    >>> s = PartitionSelection(sigma2=100, threshold=60, max_groups_per_unit=1, cells=2**64)
    >>> 0 < s.delta < 1e-6
    True
    >>> PartitionSelection(100, 60, 2, 2**64, exact=True).noise
    DiscreteGaussianVector(sigma2=Fraction(100, 1), sensitivities=(1, 1))
    """

    sigma2: Fraction
    threshold: int
    max_groups_per_unit: int
    cells: int
    exact: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma2", check_fraction("sigma2", self.sigma2))
        object.__setattr__(self, "threshold", check_int("threshold", self.threshold, minimum=1))
        l0 = check_int("max_groups_per_unit", self.max_groups_per_unit, minimum=1)
        object.__setattr__(self, "max_groups_per_unit", l0)
        object.__setattr__(self, "cells", check_int("cells", self.cells, minimum=1))
        if not isinstance(self.exact, bool):
            raise TypeError(invalid("exact", "True or False", self.exact))

    @property
    def delta(self) -> float:
        """L0·P[Z ≥ τ − 1] = L0·sf(τ − 2), rounded up (the selection's δ)."""
        return selection_delta(self.sigma2, self.threshold, self.max_groups_per_unit)

    @property
    def noise(self) -> LatticeNoise | DiscreteGaussianVector:
        """The noise on the distinct-unit counts: L2 sensitivity √L0 over :attr:`cells`,
        or (``exact``) at most L0 counts changed by at most 1 each."""
        l0 = self.max_groups_per_unit
        if self.exact:
            return DiscreteGaussianVector(self.sigma2, (1,) * l0)
        return LatticeNoise(self.sigma2, Fraction(l0), self.cells)


def selection_delta(sigma2: Fraction, threshold: int, max_groups_per_unit: int) -> float:
    """L0·P[Z ≥ τ − 1], Z ~ N_Z(0, σ²), rounded up: the δ of a partition selection.

    ``DiscreteGaussianDistribution.sf`` is relatively accurate to a few ulps; the factor
    (1 + 1e-9) covers that and the product's rounding.
    """
    # P[Z ≥ τ − 1] = P[Z > τ − 2] = sf(τ − 2); union bound over ≤ L0 new groups.
    tail = float(DiscreteGaussianDistribution(sigma2).sf(threshold - 2))
    return min(1.0, up(max_groups_per_unit * tail * (1 + 1e-9)))


@dataclass(frozen=True, slots=True)
class RecordedCost:
    """A cost certified elsewhere: a format-1/2 ledger entry, or a step known by its ρ-zCDP.

    The step is ρ-zCDP (``rho``), μ-GDP up to a smoothing slack (``mu`` and
    ``slack``; ``mu`` is ``None`` when it is not certified in μ), with ``delta``
    on top (partition selection). Accountants compose it as a Gaussian with this
    μ plus the slack and δ (PLD, GDP), or as ρ plus δ (RDP, zCDP).
    """

    rho: float
    mu: float | None
    slack: float
    delta: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", check_epsilon("rho", self.rho))
        if self.mu is not None:
            object.__setattr__(self, "mu", check_epsilon("mu", self.mu))
        object.__setattr__(self, "slack", check_epsilon("slack", self.slack))
        object.__setattr__(self, "delta", check_epsilon("delta", self.delta))


Mechanism = Gaussian | DiscreteGaussian | DiscreteLaplace | Laplace
#: The mechanism classes an event may be built from.
MECHANISM_TYPES: tuple[type, ...] = (Gaussian, DiscreteGaussian, DiscreteLaplace, Laplace)
SubsampledMechanism = Mechanism | LatticeGaussian | LatticeNoise
_SUBSAMPLED_TYPES: tuple[type, ...] = (*MECHANISM_TYPES, LatticeGaussian, LatticeNoise)
Scheme = Literal["poisson", "without_replacement"]
_NEIGHBOURS: dict[str, str] = {
    "poisson": "add/remove one",
    "without_replacement": "replace one",
}


@dataclass(frozen=True, slots=True)
class Subsampled:
    r"""A mechanism run on a random subsample.

    ``scheme="poisson"``: each unit is kept independently with probability
    ``sample_rate``; neighbouring datasets are add/remove-one, and the pair of output
    distributions is ((1 − q)M(0) + qM(Δ), M(0)) in the remove direction and the
    reverse in the add direction; accountants bound both (Koskela et al. 2021).

    ``scheme="without_replacement"``: a batch of fixed size m is drawn uniformly
    without replacement from n units, ``sample_rate`` = m/n; neighbouring datasets are
    replace-one (the dataset size is public), and the mechanism's
    ``sensitivity`` must be its replace-one sensitivity. This event can be
    recorded and saved; no accountant of this version composes it yet (they
    refuse it by name).

    Parameters
    ----------
    mechanism : Gaussian, DiscreteGaussian, DiscreteLaplace, Laplace or lattice noise
        The mechanism applied to the subsample.
    sample_rate : float
        Sampling probability q (or m/n), in (0, 1]. (Format-1 JSON calls it ``rate``.)
    scheme : {"poisson", "without_replacement"}
        The sampling scheme.

    Examples
    --------
    >>> from gaussdp.mechanisms import Gaussian
    >>> s = Subsampled(Gaussian(sigma=1.1), sample_rate=256 / 60000)
    >>> s.sample_rate, s.neighbours
    (0.004266666666666667, 'add/remove one')
    """

    mechanism: SubsampledMechanism
    sample_rate: float
    scheme: Scheme = "poisson"

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, _SUBSAMPLED_TYPES):
            raise TypeError(
                invalid(
                    "mechanism",
                    "a Gaussian, DiscreteGaussian, DiscreteLaplace, Laplace, LatticeGaussian "
                    "or LatticeNoise",
                    self.mechanism,
                )
            )
        object.__setattr__(self, "sample_rate", check_rate("sample_rate", self.sample_rate))
        if not isinstance(self.scheme, str):  # a list is unhashable: refuse it before lookup
            raise TypeError(invalid("scheme", "'poisson' or 'without_replacement'", self.scheme))
        if self.scheme not in _NEIGHBOURS:
            raise ValueError(invalid("scheme", "'poisson' or 'without_replacement'", self.scheme))

    @property
    def neighbours(self) -> str:
        """The neighbouring relation the guarantee is stated for."""
        return _NEIGHBOURS[self.scheme]


@dataclass(frozen=True, slots=True)
class SelfComposed:
    """``count`` independent runs of ``event`` (adaptively chosen data, fixed parameters).

    Examples
    --------
    >>> from gaussdp.mechanisms import Gaussian
    >>> SelfComposed(Gaussian(2.0), 4).count
    4
    """

    event: Event
    count: int

    def __post_init__(self) -> None:
        check_event(self.event)
        object.__setattr__(self, "count", check_count("count", self.count))


@dataclass(frozen=True, slots=True)
class Composed:
    """The composition of ``events``, in order (any of them may itself be composed).

    Examples
    --------
    >>> from gaussdp.mechanisms import Gaussian, Laplace
    >>> len(Composed((Gaussian(2.0), Laplace(1.0))).events)
    2
    """

    events: tuple[Event, ...]

    def __post_init__(self) -> None:
        if isinstance(self.events, (str, bytes)) or not hasattr(self.events, "__iter__"):
            raise TypeError(invalid("events", "a sequence of events", self.events))
        object.__setattr__(self, "events", tuple(check_event(e) for e in self.events))


Event = (
    Mechanism
    | LatticeGaussian
    | LatticeNoise
    | Subsampled
    | DiscreteGaussianVector
    | DiscreteGaussianL2
    | PureDP
    | ApproxDP
    | ExponentialMechanism
    | PartitionSelection
    | RecordedCost
    | SelfComposed
    | Composed
)
#: Every event class, by the name used in the JSON form.
EVENT_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        Gaussian,
        DiscreteGaussian,
        DiscreteLaplace,
        Laplace,
        LatticeGaussian,
        LatticeNoise,
        Subsampled,
        DiscreteGaussianVector,
        DiscreteGaussianL2,
        PureDP,
        ApproxDP,
        ExponentialMechanism,
        PartitionSelection,
        RecordedCost,
        SelfComposed,
        Composed,
    )
}
_EVENT_CLASSES: tuple[type, ...] = tuple(EVENT_TYPES.values())


def check_rate(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a sampling rate in (0, 1].

    Examples
    --------
    >>> check_rate("rate", 0)
    Traceback (most recent call last):
    ...
    ValueError: rate must be a real number in (0, 1], got 0
    """
    constraint = "a real number in (0, 1]"
    rate = _as_float(name, value, constraint)  # refuses non-reals, NaN and 10**400
    if not 0.0 < rate <= 1.0:
        raise ValueError(invalid(name, constraint, value))
    return rate


def check_event(event: object) -> Event:
    """Return ``event`` if it is a privacy event, else raise ``TypeError``.

    Examples
    --------
    >>> check_event("gaussian")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: event must be a mechanism (Gaussian, DiscreteGaussian, ...
    """
    if isinstance(event, _EVENT_CLASSES):
        return event  # type: ignore[return-value]
    raise TypeError(
        invalid(
            "event",
            "a mechanism (Gaussian, DiscreteGaussian, DiscreteLaplace, Laplace, "
            "LatticeGaussian) or an event of gaussdp.accounting (Subsampled, Composed, "
            "SelfComposed, PureDP, ApproxDP, ExponentialMechanism, ...)",
            event,
        )
    )


# --------------------------------------------------------------------------------------
# JSON form
# --------------------------------------------------------------------------------------
#: Version of the JSON form written by :func:`event_to_json`. A field never changes
#: meaning; a new field or event type raises the version, and readers refuse versions
#: they do not know (and types they do not know: :class:`UnknownEventError`).
#: Format 2: ``Subsampled.rate`` became ``sample_rate`` (the parameter glossary) and
#: ``ExponentialMechanism`` was added; format-1 text is still read. Format 3:
#: ``PartitionSelection.exact`` (absent in earlier formats: False).
EVENT_FORMAT = 3
_READABLE_FORMATS = (1, 2, 3)


def _upgrade_format_1(value: object) -> object:
    """Format-1 JSON in format 2's terms: a ``Subsampled``'s ``rate`` is its ``sample_rate``."""
    if isinstance(value, list):
        return [_upgrade_format_1(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _upgrade_format_1(v) for k, v in value.items()}
    if out.get("type") == "Subsampled" and "rate" in out and "sample_rate" not in out:
        out["sample_rate"] = out.pop("rate")
    return out


class UnknownEventError(ValueError):
    """A JSON event names a type (or format version) this version of gaussdp does not know."""


def _encode(value: object) -> object:
    if isinstance(value, _EVENT_CLASSES):
        return event_to_dict(value)  # type: ignore[arg-type]
    if isinstance(value, Fraction):
        return {"fraction": f"{value.numerator}/{value.denominator}"}
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(invalid("event field", "JSON-encodable", value))  # pragma: no cover


def _decode(value: object) -> object:
    if isinstance(value, dict):
        if set(value) == {"fraction"}:
            return Fraction(str(value["fraction"]))
        return event_from_dict(value)
    if isinstance(value, list):
        return tuple(_decode(v) for v in value)
    return value


def event_to_dict(event: Event) -> dict[str, Any]:
    """The JSON-ready form of one event: ``{"type": name, field: value, ...}``.

    Fractions are written as ``{"fraction": "n/d"}`` (exact), floats as JSON
    numbers (Python writes the shortest repr that reads back to the same float),
    nested events as nested objects.
    """
    check_event(event)
    out: dict[str, Any] = {"type": type(event).__name__}
    for f in fields(event):
        if f.init:
            out[f.name] = _encode(getattr(event, f.name))
    return out


def event_from_dict(data: object) -> Event:
    """The event of :func:`event_to_dict`'s form (validated by its constructor).

    Raises
    ------
    UnknownEventError
        If the type is not an event type of this version.
    ValueError, TypeError
        If a field is missing or invalid.
    """
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ValueError(invalid("event", "a JSON object with a 'type'", data))
    name = data["type"]
    cls = EVENT_TYPES.get(name)
    if cls is None:
        raise UnknownEventError(
            invalid("event type", f"one of {', '.join(sorted(EVENT_TYPES))}", name)
        )
    kwargs = {k: _decode(v) for k, v in data.items() if k != "type"}
    try:
        event = cls(**kwargs)
    except TypeError as error:
        raise ValueError(invalid(f"{name} fields", "those of the event type", kwargs)) from error
    return event  # type: ignore[no-any-return]


def event_to_json(event: Event) -> str:
    """The event as a JSON string with its format version.

    Examples
    --------
    >>> from gaussdp.mechanisms import Gaussian
    >>> text = event_to_json(SelfComposed(Subsampled(Gaussian(1.1), 0.01), 1000))
    >>> event_from_json(text) == SelfComposed(Subsampled(Gaussian(1.1), 0.01), 1000)
    True
    """
    return json.dumps(
        {"format": EVENT_FORMAT, "event": event_to_dict(event)}, separators=(",", ":")
    )


def event_from_json(text: str | bytes) -> Event:
    """The event written by :func:`event_to_json`.

    Raises
    ------
    UnknownEventError
        If the format version or an event type is unknown to this version.
    ValueError
        If the text is not such JSON.
    TypeError
        If ``text`` is not a str or bytes.
    """
    if not isinstance(text, str | bytes | bytearray):
        raise TypeError(invalid("event JSON", "a str or bytes", text))
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(invalid("event JSON", "valid JSON", str(text)[:80])) from error
    if not isinstance(data, dict) or "event" not in data:
        raise ValueError(invalid("event JSON", "an object with 'format' and 'event'", data))
    version = data.get("format")
    if isinstance(version, bool) or version not in _READABLE_FORMATS:
        raise UnknownEventError(
            invalid("event format", f"1, 2 or {EVENT_FORMAT} (upgrade gaussdp)", version)
        )
    tree = _upgrade_format_1(data["event"]) if version == 1 else data["event"]
    return event_from_dict(tree)


def describe(event: Event) -> str:
    """A short one-line description, e.g. ``Subsampled(Gaussian(sigma=1.1), sample_rate=0.01)``.

    Examples
    --------
    >>> from gaussdp.mechanisms import DiscreteLaplace
    >>> describe(SelfComposed(Subsampled(DiscreteLaplace(2), 0.05), 300))
    'SelfComposed(Subsampled(DiscreteLaplace(scale=2), sample_rate=0.05), count=300)'
    """
    if isinstance(event, Composed):
        inner = ", ".join(describe(e) for e in event.events[:3])
        more = f", … {len(event.events) - 3} more" if len(event.events) > 3 else ""
        return f"Composed({inner}{more})"
    parts: list[str] = []
    for f in fields(event):
        if not f.init:
            continue
        value = getattr(event, f.name)
        if f.default is not MISSING and value == f.default:
            continue
        if isinstance(value, _EVENT_CLASSES):
            parts.append(describe(value))  # type: ignore[arg-type]
        else:
            text = str(value) if isinstance(value, Fraction) else repr(value)
            parts.append(f"{f.name}={text}")
    return f"{type(event).__name__}({', '.join(parts)})"
