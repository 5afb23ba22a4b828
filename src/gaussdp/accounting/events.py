r"""Privacy events that accountants compose.

An event is a mechanism object from :mod:`gaussdp.mechanisms` (``Gaussian``,
``DiscreteGaussian``, ``DiscreteLaplace``, ``Laplace``) or one of the wrappers
here: :class:`Subsampled` (Poisson subsampling of a mechanism),
:class:`DiscreteGaussianVector` (independent discrete Gaussian noise on each
coordinate of an integer vector query with a given sensitivity vector, CKS Thm 14)
and :class:`DiscreteGaussianL2` (the same noise with only an L2 bound on the
sensitivity vector). Events are frozen, validated value objects; a field never
changes meaning (dp_accounting's ``DpEvent`` rule).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from gaussdp._validation import check_delta, check_epsilon, check_fraction, check_int
from gaussdp.accounting.bounds import DeltaBounds, EpsilonBounds
from gaussdp.accounting.pld import (
    DEFAULT_TAIL_MASS,
    DEFAULT_VALUE_DISCRETIZATION,
    PrivacyLossDistribution,
)
from gaussdp.errors import invalid
from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace

__all__ = [
    "MAX_L2_CANDIDATES",
    "MAX_L2_SQUARED",
    "MECHANISM_TYPES",
    "DiscreteGaussianL2",
    "DiscreteGaussianVector",
    "Event",
    "Mechanism",
    "Subsampled",
    "check_event",
    "check_rate",
    "l2_worst_case_vectors",
    "max_delta_bounds",
    "max_epsilon_bounds",
]

Mechanism = Gaussian | DiscreteGaussian | DiscreteLaplace | Laplace
#: The mechanism classes an event may be built from.
MECHANISM_TYPES: tuple[type, ...] = (Gaussian, DiscreteGaussian, DiscreteLaplace, Laplace)


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

    @property
    def mu(self) -> float:
        """‖Δ‖₂/σ: the vector mechanism is at least as private as μ-GDP with this μ."""
        return float((2 * self.rho) ** 0.5)

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

    @property
    def mu(self) -> float:
        """max ‖v‖₂/σ: the mechanism is at least as private as μ-GDP with this μ."""
        return float((2 * self.rho) ** 0.5)

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
class Subsampled:
    r"""A mechanism run on a Poisson subsample: each unit is kept independently with ``rate``.

    Under add/remove neighbours the pair of output distributions is
    ((1 − q)M(0) + qM(Δ), M(0)) in the remove direction and the reverse in the add
    direction; accountants bound both (Koskela et al. 2021).

    Parameters
    ----------
    mechanism : Gaussian, DiscreteGaussian, DiscreteLaplace or Laplace
        The mechanism applied to the subsample.
    rate : float
        Sampling probability q, in (0, 1].
    scheme : {"poisson"}
        The sampling scheme; only Poisson sampling is supported.

    Examples
    --------
    >>> from gaussdp.mechanisms import Gaussian
    >>> Subsampled(Gaussian(sigma=1.1), rate=256 / 60000).rate
    0.004266666666666667
    """

    mechanism: Mechanism
    rate: float
    scheme: Literal["poisson"] = "poisson"

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, MECHANISM_TYPES):
            raise TypeError(
                invalid(
                    "mechanism",
                    "a Gaussian, DiscreteGaussian, DiscreteLaplace or Laplace mechanism",
                    self.mechanism,
                )
            )
        object.__setattr__(self, "rate", check_rate("rate", self.rate))
        if self.scheme != "poisson":
            raise ValueError(invalid("scheme", "'poisson'", self.scheme))


Event = Mechanism | Subsampled | DiscreteGaussianVector | DiscreteGaussianL2


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
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(invalid(name, constraint, value))
    rate = float(value)
    if not 0.0 < rate <= 1.0:  # also rejects NaN
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
    if isinstance(
        event, (*MECHANISM_TYPES, Subsampled, DiscreteGaussianVector, DiscreteGaussianL2)
    ):
        return event  # type: ignore[return-value]
    raise TypeError(
        invalid(
            "event",
            "a mechanism (Gaussian, DiscreteGaussian, DiscreteLaplace, Laplace), "
            "Subsampled, DiscreteGaussianVector or DiscreteGaussianL2",
            event,
        )
    )
