r"""Trade-off functions (f-DP curves) of any guarantee, and what they bound.

Reading a guarantee as hypothesis testing (DRS §2): an attacker who sees the output
and must decide between two neighbouring datasets D (null) and D' runs a test with
type I error α (false positives) and type II error β (false negatives). The
trade-off function T(P, Q)(α) is the smallest β any test reaches at level α; a
mechanism is f-DP when T ≥ f for every pair of neighbours in both orders
(DRS Def 2.1–2.3). So a membership-inference attacker's true-positive rate is at
most ``1 − f(FPR)`` at every false-positive rate, and its advantage TPR − FPR is at
most ``sup_α (1 − α − f(α))``.

:class:`TradeoffCurve` holds f for a guarantee as two curves: :meth:`~TradeoffCurve.lower`
is certified (every test has β ≥ lower(α): this is what gaussdp promises) and
:meth:`~TradeoffCurve.upper` says how tight that is (some pair of neighbours is at
least this easy to tell apart; equal to ``lower`` where the curve is exact).
Constructors:

* :meth:`~TradeoffCurve.from_gdp`: μ-GDP, G_μ(α) = Φ(Φ⁻¹(1 − α) − μ) (DRS Def 2.6), exact.
* :meth:`~TradeoffCurve.from_epsilon_delta`: (ε, δ)-DP,
  f(α) = max(0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α)) (DRS Prop 2.4; Kairouz et al. 2015).
* :meth:`~TradeoffCurve.from_discrete_gaussian`: N_Z(0, σ²) against N_Z(Δ, σ²),
  exact (Neyman–Pearson on the monotone likelihood ratio, CKS Def 1).
* :meth:`~TradeoffCurve.from_pld`: the trade-off of the dominating pair of a
  privacy loss distribution, from its probability masses (see below).
* :meth:`~TradeoffCurve.from_profile` and :meth:`~TradeoffCurve.from_rho`: any
  privacy profile δ(ε), e.g. an RDP or zCDP conversion, through
  f = sup_ε f_{ε,δ(ε)} (DRS Prop 2.12).
* :meth:`~TradeoffCurve.from_delta_profile`: the same over an accountant's certified
  (ε(δ), δ) pairs on a grid of δ.
* :meth:`~TradeoffCurve.from_accountant` and :meth:`~TradeoffCurve.from_dpsgd`.

The PLD curve
-------------
A PLD stores the masses p_j of the loss L = ln(dP/dQ) at grid points z_j under P
(plus mass at +∞). The pair it stands for is P with mass p_j at "point j" and Q
with mass q_j = p_j e^{−z_j} there (Q's remaining mass sits where P has none). By
Neyman–Pearson the best test at each level rejects the points of smallest loss
first, so T is the piecewise-linear curve through (Σ_{i≤j} p_i, Σ_{i>j} q_i). For
the pessimistic (upper-bound) PLD, whose pair dominates the true one for every
ε ∈ ℝ (chord interpolation of the hockey-stick curve, Doroshenko et al. 2022),
this curve lies *below* the true trade-off: the safe side. Its numerical allowance
s (wrap-around, FFT round-off, final-sum margin) bounds every hockey-stick error,
and T(α) = sup_ε (1 − H_{e^ε} − e^ε α) (DRS Prop 2.12) moves by at most s, so
``lower = max(0, T_upper_pld − s)``; ``upper`` is the same from the optimistic PLD,
``+ s`` (an estimate of the accuracy of the PLD's lower bounds, not certified). Both
neighbouring directions are kept and the curve is their pointwise minimum.

References
----------
.. [DRS] J. Dong, A. Roth, W. J. Su, "Gaussian Differential Privacy", JRSS B 2022.
   Def 2.1–2.6, Prop 2.4, Prop 2.12, Cor 2.13.
.. [KOV] P. Kairouz, S. Oh, P. Viswanath, "The Composition Theorem for Differential
   Privacy", ICML 2015 (the (ε, δ) region).
.. [CKS] C. Canonne, G. Kamath, T. Steinke, "The Discrete Gaussian for Differential
   Privacy", NeurIPS 2020. Def 1, Thm 7.
.. [DGKKM] V. Doroshenko et al., "Connect the Dots", PETS 2022.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gaussdp._search import largest_passing
from gaussdp._validation import (
    check_count,
    check_delta,
    check_epsilon,
    check_fraction,
    check_int,
    check_positive,
    check_probability,
    format_bound,
)
from gaussdp.errors import invalid
from gaussdp.privacy.discrete import DiscreteGaussianDistribution
from gaussdp.privacy.gdp import gdp_tradeoff, mia_advantage
from gaussdp.privacy.zcdp import zcdp_delta

if TYPE_CHECKING:
    from gaussdp.accounting import Accountant, LossMasses, PrivacyLossDistribution

__all__ = ["PrivacyExplanation", "TradeoffCurve", "explain", "tradeoff_epsilon_delta"]

FloatArray = npt.NDArray[np.float64]
Curve = Callable[[FloatArray], FloatArray]

# The PLD's relative margin on its final sum (CKS Lemma 9), taken as absolute (δ ≤ 1).
_PLD_SUM_MARGIN = 1e-10
# Default ε grid of :meth:`TradeoffCurve.from_profile`: 0 to 30 nats.
_PROFILE_EPSILONS = np.concatenate([np.linspace(0.0, 2.0, 201), np.geomspace(2.0, 30.0, 300)[1:]])
#: Default δ grid of :meth:`TradeoffCurve.from_delta_profile` (64 values, 1e-12 to 0.5).
PROFILE_DELTAS = np.geomspace(1e-12, 0.5, 64)


def _alpha_array(alpha: object) -> tuple[FloatArray, bool]:
    """``alpha`` as a float array with every value in [0, 1], and whether it was a scalar."""
    constraint = "a real number or array of real numbers in [0, 1]"
    if isinstance(alpha, bool | str | bytes):
        raise TypeError(invalid("alpha", constraint, alpha))
    try:
        a = np.asarray(alpha)
    except (TypeError, ValueError):
        raise TypeError(invalid("alpha", constraint, alpha)) from None
    if a.dtype == np.bool_ or not (
        np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)
    ):
        raise TypeError(invalid("alpha", constraint, alpha))
    a = a.astype(np.float64)
    bad = ~((a >= 0.0) & (a <= 1.0))
    if np.any(bad):
        first = a if a.ndim == 0 else a[bad].flat[0]
        raise ValueError(invalid("alpha", constraint, float(first)))
    return a, a.ndim == 0


def _out(values: FloatArray, scalar: bool) -> Any:
    values = np.clip(values, 0.0, 1.0)
    return float(values) if scalar else values


def tradeoff_epsilon_delta(epsilon: float, delta: float, alpha: npt.ArrayLike) -> Any:
    r"""The trade-off function of (ε, δ)-DP: max(0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α)).

    Parameters
    ----------
    epsilon : float
        ε, finite and ``>= 0``.
    delta : float
        δ in [0, 1].
    alpha : float or array_like
        Type I error(s) in [0, 1].

    Returns
    -------
    float or numpy.ndarray
        f_{ε,δ}(α) (DRS Prop 2.4, after Kairouz, Oh, Viswanath 2015 Thm 2.1).

    Examples
    --------
    >>> round(tradeoff_epsilon_delta(1.0, 1e-6, 0.01), 6)
    0.972816
    >>> tradeoff_epsilon_delta(0.0, 0.0, [0.25, 1.0])
    array([0.75, 0.  ])
    """
    epsilon = check_epsilon("epsilon", epsilon)
    delta = check_probability("delta", delta)
    a, scalar = _alpha_array(alpha)
    # DRS Prop 2.4: f_{ε,δ}(α) = max{0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α)}
    f = np.maximum(
        0.0,
        np.maximum(1.0 - delta - math.exp(epsilon) * a, math.exp(-epsilon) * (1.0 - delta - a)),
    )
    return _out(f, scalar)


def _interp_curve(cum_alpha: FloatArray, beta: FloatArray) -> Curve:
    """The piecewise-linear trade-off through (cum_alpha[i], beta[i]), 0 beyond the end."""

    def curve(a: FloatArray) -> FloatArray:
        out = np.interp(a, cum_alpha, beta, right=0.0)
        return np.asarray(out, dtype=np.float64)

    return curve


def _pmf_curve(side: LossMasses) -> tuple[Curve, float]:
    """The trade-off of one discretised PLD direction and its δ allowance."""
    p = np.clip(side.masses, 0.0, None)
    z = side.losses
    q = p * np.exp(-z)  # Q's mass at each loss point: q = p e^{−z}
    # Reject the smallest losses first (Neyman–Pearson): α = Σ_{i≤j} p_i, β = Σ_{i>j} q_i.
    cum_p = np.concatenate([[0.0], np.cumsum(p)])
    suffix_q = np.concatenate([np.cumsum(q[::-1])[::-1], [0.0]])
    beta = np.minimum(suffix_q, 1.0)
    slack = side.allowance + _PLD_SUM_MARGIN
    deficit = max(0.0, 1.0 - float(p.sum()) - side.inf_mass)
    return _interp_curve(cum_p, beta), slack + (0.0 if side.upper else deficit)


def _up(value: float, digits: int = 4) -> str:
    """A privacy parameter in a curve's description, rounded up: the displayed guarantee
    must never be stronger than the true one."""
    return format_bound(value, up=True, digits=digits)


@dataclass(frozen=True, slots=True)
class TradeoffCurve:
    r"""The f-DP curve of a guarantee: certified :meth:`lower`, and :meth:`upper`.

    Build one with a ``from_*`` constructor. Calling the curve is :meth:`lower`.

    Attributes
    ----------
    description : str
        What the curve is the trade-off of, in words.
    exact : bool
        Whether ``lower`` and ``upper`` coincide (a closed form).
    advantage : float
        Certified upper bound on the membership-inference advantage
        sup (TPR − FPR) = sup_α (1 − α − f(α)), which is the total variation
        distance δ(0) (DRS Prop 2.12 at ε = 0).

    Examples
    --------
    >>> g = TradeoffCurve.from_gdp(1.0)
    >>> round(g(0.05), 4)
    0.7405
    >>> round(g.advantage, 4)
    0.3829
    >>> round(g.max_tpr(1e-3), 4)
    0.0183
    """

    description: str
    exact: bool
    advantage: float
    _lower: Curve = field(repr=False)
    _upper: Curve = field(repr=False)

    # -- evaluation --------------------------------------------------------------------
    def lower(self, alpha: npt.ArrayLike) -> Any:
        """Certified trade-off: every test at type I error α has type II error ≥ this."""
        a, scalar = _alpha_array(alpha)
        return _out(self._lower(np.atleast_1d(a)).reshape(a.shape), scalar)

    def upper(self, alpha: npt.ArrayLike) -> Any:
        """How tight :meth:`lower` is: the true trade-off is at most this (an estimate for PLDs)."""
        a, scalar = _alpha_array(alpha)
        return _out(self._upper(np.atleast_1d(a)).reshape(a.shape), scalar)

    def __call__(self, alpha: npt.ArrayLike) -> Any:
        return self.lower(alpha)

    def max_tpr(self, fpr: npt.ArrayLike) -> Any:
        """The largest true-positive rate of any membership-inference attack at ``fpr``.

        TPR ≤ 1 − f(FPR) (DRS §2: an attack is a test, its power is 1 − β).
        """
        a, scalar = _alpha_array(fpr)
        return _out(1.0 - self._lower(np.atleast_1d(a)).reshape(a.shape), scalar)

    def equal_error_rate(self) -> float:
        """The α with f(α) = α on the certified curve: no test has both errors below it."""
        # f(α) − α decreases, so f(α) > α holds below the crossing; the point returned
        # was checked to hold (the safe side).
        return largest_passing(
            lambda a: float(self._lower(np.array([a]))[0]) > a, 0.0, 0.5, abs_tol=1e-16
        )

    # -- constructors ------------------------------------------------------------------
    @classmethod
    def from_gdp(cls, mu: float) -> TradeoffCurve:
        """μ-GDP: G_μ(α) = Φ(Φ⁻¹(1 − α) − μ) (DRS Def 2.6), exact."""
        mu = check_epsilon("mu", mu)

        def g(a: FloatArray) -> FloatArray:
            return gdp_tradeoff(mu, a)

        return cls(f"{_up(mu)}-GDP", True, mia_advantage(mu), g, g)

    @classmethod
    def from_epsilon_delta(cls, epsilon: float, delta: float) -> TradeoffCurve:
        r"""(ε, δ)-DP: f_{ε,δ} (DRS Prop 2.4), exact for the guarantee as stated.

        The advantage bound is (e^ε − 1 + 2δ)/(e^ε + 1), the value of 1 − α − f at
        the kink α = (1 − δ)/(1 + e^ε).
        """
        epsilon = check_epsilon("epsilon", epsilon)
        delta = check_probability("delta", delta)

        def f(a: FloatArray) -> FloatArray:
            return np.asarray(tradeoff_epsilon_delta(epsilon, delta, a), dtype=np.float64)

        # DRS Prop 2.4 at its kink.
        adv = min(1.0, (math.expm1(epsilon) + 2.0 * delta) / (math.exp(epsilon) + 1.0))
        return cls(f"({_up(epsilon)}, {_up(delta, 3)})-DP", True, adv, f, f)

    @classmethod
    def from_discrete_gaussian(cls, sigma2: object, sensitivity: int = 1) -> TradeoffCurve:
        r"""Exact trade-off of N_Z(0, σ²) against N_Z(Δ, σ²) (CKS Def 1; Neyman–Pearson).

        The likelihood ratio of N_Z(Δ, σ²) to N_Z(0, σ²) increases in the output y,
        so the best level-α test rejects y ≥ c, randomising at c − 1. By the
        symmetry of N_Z(0, σ²) both orders of the pair give the same curve.
        """
        s2 = check_fraction("sigma2", sigma2)
        delta_int = check_int("sensitivity", sensitivity, minimum=1)
        half = math.ceil(40.0 * math.sqrt(s2)) + delta_int + 2
        ks = np.arange(half + delta_int, -half - 1, -1)  # thresholds, α increasing
        # Reject {y ≥ k}: α_k = P_0[Y ≥ k] = sf(k − 1); β_k = P_Δ[Y < k] = P_0[Y ≤ k − Δ − 1]
        # = sf(Δ − k) by the symmetry of N_Z(0, σ²).
        noise = DiscreteGaussianDistribution(s2)
        alphas = np.asarray(noise.sf(ks - 1), dtype=np.float64)
        betas = np.asarray(noise.sf(delta_int - ks), dtype=np.float64)
        alphas = np.concatenate([[0.0], alphas, [1.0]])
        betas = np.concatenate([[1.0], betas, [0.0]])

        def f(a: FloatArray) -> FloatArray:
            return np.asarray(np.interp(a, alphas, betas), dtype=np.float64)

        adv = noise.delta(0.0, delta_int)  # CKS Thm 7 at ε = 0: TV distance
        return cls(f"discrete Gaussian σ²={s2}, Δ={delta_int}", True, adv, f, f)

    @classmethod
    def from_profile(
        cls,
        delta_of: Callable[[float], float],
        *,
        epsilons: npt.ArrayLike | None = None,
        description: str = "privacy profile",
    ) -> TradeoffCurve:
        r"""The curve implied by a privacy profile: f = sup_ε f_{ε,δ(ε)} (DRS Prop 2.12).

        ``delta_of(ε)`` must be a valid (upper) δ for every ε on the grid
        (both orders of neighbours); the supremum over a finite grid is a lower
        bound on the supremum over all ε, so the curve stays on the safe side.
        ``upper`` equals ``lower`` here: a profile from RDP or zCDP is itself an
        upper bound and says nothing about tightness.
        """
        grid = _PROFILE_EPSILONS if epsilons is None else np.asarray(epsilons, dtype=np.float64)
        if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid < 0):
            constraint = "a non-empty 1-d array of finite reals >= 0"
            raise ValueError(invalid("epsilons", constraint, epsilons))
        deltas = np.array([min(1.0, max(0.0, float(delta_of(float(e))))) for e in grid])
        exp_e = np.exp(grid)

        def f(a: FloatArray) -> FloatArray:
            col = a.reshape(-1, 1)
            # DRS Prop 2.4 for each ε on the grid, then the pointwise maximum (Prop 2.12).
            vals = np.maximum(1.0 - deltas - exp_e * col, (1.0 - deltas - col) / exp_e)
            return np.asarray(np.maximum(vals.max(axis=1), 0.0), dtype=np.float64)

        adv = float(delta_of(0.0))  # sup_α (1 − α − f) ≤ δ(0)
        return cls(description, False, min(1.0, adv), f, f)

    @classmethod
    def from_delta_profile(
        cls,
        accountant: Accountant,
        *,
        deltas: npt.ArrayLike | None = None,
        description: str | None = None,
    ) -> TradeoffCurve:
        r"""DRS Prop 2.12 over an accountant's certified (ε(δ), δ) pairs, and δ(0).

        For each δ of ``deltas`` (default: 64 values from 10⁻¹² to 0.5, geometric)
        the accountant's ``epsilon(δ).upper`` gives a certified pair; with
        (0, ``delta(0).upper``) they go to :meth:`from_profile`, so the curve is
        max over the pairs of f_{ε,δ}(α) = max(0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α))
        (DRS Prop 2.4). Every pair is valid, so the curve is on the safe side; the
        finite grid only makes it lower (looser) than sup over all δ. One ε(δ)
        query per δ: for a numerical PLD with lattice slack or partition selection's
        δ, far fewer and cheaper than :meth:`from_profile`'s δ(ε) on its 500 ε
        (each δ(ε) refines the PLD's grid).
        """
        grid = PROFILE_DELTAS if deltas is None else np.asarray(deltas, dtype=np.float64)
        if grid.ndim != 1 or grid.size == 0:
            raise ValueError(invalid("deltas", "a non-empty 1-d array of reals in (0, 1)", deltas))
        for d in grid:
            check_delta("deltas", float(d))
        pairs: dict[float, float] = {0.0: accountant.delta(0.0).upper}
        for d in sorted({float(x) for x in grid}):
            e = accountant.epsilon(d).upper
            if math.isfinite(e) and e not in pairs:  # the smallest δ certified at that ε
                pairs[e] = d
        name = type(accountant).__name__ if description is None else description
        return cls.from_profile(pairs.__getitem__, epsilons=sorted(pairs), description=name)

    @classmethod
    def from_rho(cls, rho: float) -> TradeoffCurve:
        """ρ-zCDP through its (ε, δ(ε)) profile (CKS Cor 13) and DRS Prop 2.12."""
        rho = check_epsilon("rho", rho)
        return cls.from_profile(lambda e: zcdp_delta(rho, e), description=f"{_up(rho)}-zCDP")

    @classmethod
    def from_pld(cls, pld: PrivacyLossDistribution) -> TradeoffCurve:
        """The trade-off of a PLD's dominating pair, from its masses (module docstring).

        ``lower`` (from the pessimistic PLD, minus its allowance) is certified;
        ``upper`` (from the optimistic PLD, plus its allowance) is how tight it is.
        """
        from gaussdp.accounting import PrivacyLossDistribution

        if not isinstance(pld, PrivacyLossDistribution):
            raise TypeError(invalid("pld", "a PrivacyLossDistribution", pld))
        lows = [_pmf_curve(pld.loss_masses(upper=True, remove=r)) for r in (True, False)]
        highs = [_pmf_curve(pld.loss_masses(upper=False, remove=r)) for r in (True, False)]

        def lower(a: FloatArray) -> FloatArray:
            return np.asarray(
                np.maximum(0.0, np.minimum(*(c(a) - s for c, s in lows))), dtype=np.float64
            )

        def upper(a: FloatArray) -> FloatArray:
            return np.asarray(
                np.minimum(1.0, np.minimum(*(c(a) + s for c, s in highs))), dtype=np.float64
            )

        adv = pld.delta(0.0).upper  # sup (TPR − FPR) = total variation = δ(0)
        return cls("privacy loss distribution", False, adv, lower, upper)

    @classmethod
    def from_accountant(cls, accountant: Accountant) -> TradeoffCurve:
        """The curve of an accountant's composition.

        A :class:`~gaussdp.accounting.GDPAccountant`: G_μ (DRS Cor 3.3). A numerical
        :class:`~gaussdp.accounting.PLDAccountant`: :meth:`from_pld`. In both cases
        only when the accountant's δ(ε) is that of its μ or PLD alone (checked at a
        few ε). Otherwise the accountant's own certified bounds, which include lattice
        slack and partition selection's δ: for a numerical PLD accountant,
        :meth:`from_delta_profile` (its ε(δ) at 64 δ; δ(ε) would refine the PLD's
        grid at each of 500 ε); for the rest (slack or selection δ on GDP, an exact
        Gaussian PLD accountant, RDP, zCDP), :meth:`from_profile` on its δ(ε). A
        :class:`~gaussdp.accounting.FallbackAccountant` (a ledger's) is
        read through the member that answers its queries.
        """
        from gaussdp.accounting import (
            Accountant,
            FallbackAccountant,
            GDPAccountant,
            PLDAccountant,
        )

        if not isinstance(accountant, Accountant):
            raise TypeError(invalid("accountant", "an Accountant", accountant))
        if isinstance(accountant, FallbackAccountant):
            # The member that answers accounts for the whole history (a ledger's accountant).
            return cls.from_accountant(accountant.active)
        # Lattice noise's smoothing slack and partition selection's δ apply to the whole
        # composition: only the accountant's own δ(ε) includes them (the profile below).
        plain = accountant.slack == 0.0 and accountant.extra_delta == 0.0
        if isinstance(accountant, GDPAccountant) and plain:
            return cls.from_gdp(accountant.mu)
        if isinstance(accountant, PLDAccountant) and plain:
            if accountant.is_exact:
                # DRS Cor 3.3: Gaussians compose to √Σ μᵢ²-GDP exactly.
                return cls.from_gdp(GDPAccountant().compose(accountant.history).mu)
            return cls.from_pld(accountant.pld())
        if isinstance(accountant, PLDAccountant) and not accountant.is_exact:
            return cls.from_delta_profile(accountant)
        return cls.from_profile(
            lambda e: accountant.delta(e).upper, description=type(accountant).__name__
        )

    @classmethod
    def from_dpsgd(cls, noise_multiplier: float, sample_rate: float, steps: int) -> TradeoffCurve:
        """DP-SGD: ``steps`` Poisson-subsampled Gaussian steps, through the PLD accountant."""
        from gaussdp.accounting import PLDAccountant, Subsampled
        from gaussdp.mechanisms import Gaussian

        noise_multiplier = check_positive("noise_multiplier", noise_multiplier)
        steps = check_count("steps", steps)
        event = Subsampled(Gaussian(sigma=noise_multiplier), sample_rate=sample_rate)
        curve = cls.from_accountant(PLDAccountant().compose(event, count=steps))
        # Less noise and a larger rate than shown would be less privacy: σ down, q up.
        sigma, rate = format_bound(noise_multiplier, up=False), format_bound(sample_rate, up=True)
        desc = f"DP-SGD σ={sigma}, q={rate}, {steps} steps"
        return cls(desc, curve.exact, curve.advantage, curve._lower, curve._upper)


@dataclass(frozen=True, slots=True)
class PrivacyExplanation:
    """What a guarantee means for an attacker, in numbers and in words (see :func:`explain`)."""

    guarantee: str
    fpr: float
    max_tpr: float
    advantage: float
    equal_error_rate: float
    curve: TradeoffCurve = field(repr=False)

    def text(self) -> str:
        """The explanation in plain words (bounds rounded outward to 4 digits)."""

        def up(value: float) -> str:
            return format_bound(value, up=True, digits=4)

        def down(value: float) -> str:
            return format_bound(value, up=False, digits=4)

        return (
            f"Guarantee: {self.guarantee}.\n"
            f"An attacker who sees the output and guesses whether one person's data was used "
            f"(membership inference) and wrongly accuses at most {self.fpr:.3g} of non-members "
            f"(false-positive rate) catches at most {up(self.max_tpr)} of members "
            f"(true-positive rate), whatever the attack.\n"
            f"No attack's true-positive rate exceeds its false-positive rate by more than "
            f"{up(self.advantage)} (maximal advantage).\n"
            f"No attack has both error rates below {down(self.equal_error_rate)} "
            f"(equal-error point)."
        )

    def as_dict(self) -> dict[str, object]:
        """JSON-ready fields."""
        return {
            "guarantee": self.guarantee,
            "fpr": self.fpr,
            "max_tpr": self.max_tpr,
            "advantage": self.advantage,
            "equal_error_rate": self.equal_error_rate,
        }


def explain(curve: TradeoffCurve, fpr: float = 1e-3) -> PrivacyExplanation:
    """At ``fpr``, no membership-inference attack exceeds TPR = 1 − f(FPR); and more.

    Parameters
    ----------
    curve : TradeoffCurve
        The guarantee, from one of the ``TradeoffCurve.from_*`` constructors.
    fpr : float, default 1e-3
        The false-positive rate to read the curve at, in (0, 1).

    Returns
    -------
    PrivacyExplanation

    Examples
    --------
    >>> e = explain(TradeoffCurve.from_epsilon_delta(1.0, 1e-6))
    >>> round(e.max_tpr, 6)
    0.002719
    >>> round(e.advantage, 4)
    0.4621
    """
    if not isinstance(curve, TradeoffCurve):
        raise TypeError(invalid("curve", "a TradeoffCurve", curve))
    fpr = check_delta("fpr", fpr)
    return PrivacyExplanation(
        guarantee=curve.description,
        fpr=fpr,
        max_tpr=float(curve.max_tpr(fpr)),
        advantage=curve.advantage,
        equal_error_rate=curve.equal_error_rate(),
        curve=curve,
    )
