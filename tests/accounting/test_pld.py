"""Known answers for the PLD accountant: closed forms, brute force, reference cases."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from gaussdp.accounting import (
    ApproxDP,
    GDPAccountant,
    PLDAccountant,
    PrivacyLossDistribution,
    PureDP,
    Subsampled,
)
from gaussdp.accounting.events import DiscreteGaussianVector
from gaussdp.accounting.pld import DEFAULT_TAIL_MASS
from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace
from gaussdp.privacy import DiscreteGaussianDistribution, gdp_delta, gdp_epsilon


# -- closed form: k Gaussians are one Gaussian with μ√k (DRS Cor 3.3) -------------------
@pytest.mark.parametrize("count", [1, 10, 1000, 100_000])
@pytest.mark.parametrize("mu_total", [0.5, 1.0, 3.0])
def test_k_fold_gaussian_brackets_the_exact_answer(count: int, mu_total: float) -> None:
    sigma = math.sqrt(count) / mu_total
    acc = PLDAccountant(exact_gaussian=False).compose(Gaussian(sigma=sigma), count)
    assert not acc.is_exact
    for delta in (1e-3, 1e-5, 1e-8):
        exact = gdp_epsilon(mu_total, delta)
        b = acc.epsilon(delta)
        assert b.lower <= exact <= b.upper
        # Upper within 0.01 % of the truth. (10⁵ runs at δ = 1e-8: the float64 round-off
        # allowance, about k·150u, is a sizeable part of δ; the accountant rebuilds the
        # PLD in extended precision, docs/accounting.md §3.)
        assert b.upper <= exact * (1 + 1e-4)
        assert not b.note
    for eps in (0.5, 1.0, 2.0):
        exact_d = gdp_delta(mu_total, eps)
        d = acc.delta(eps)
        assert d.lower <= exact_d <= d.upper


def test_plain_gaussians_are_detected_and_exact() -> None:
    acc = (
        PLDAccountant()
        .compose(Gaussian(sigma=2.0), 3)
        .compose(Gaussian(sigma=4.0, sensitivity=2.0))
    )
    assert acc.is_exact
    b = acc.epsilon(1e-5)
    assert b.upper == GDPAccountant().compose(Gaussian(2.0), 4).epsilon(1e-5).upper
    assert b.upper * (1 - 1e-9) < b.lower < b.upper


# -- CKS Thm 7: the univariate discrete Gaussian ----------------------------------------
@pytest.mark.parametrize("sigma2", [Fraction(1), Fraction(4), Fraction(25, 4), Fraction(10)])
@pytest.mark.parametrize("sensitivity", [1, 2])
@pytest.mark.parametrize("epsilon", [0.0, 0.5, 1.0, 2.0])
def test_discrete_gaussian_matches_cks_theorem_7(
    sigma2: Fraction, sensitivity: int, epsilon: float
) -> None:
    exact = DiscreteGaussianDistribution(sigma2).delta(
        epsilon, sensitivity
    )  # CKS Thm 7 closed form
    b = PrivacyLossDistribution.from_discrete_gaussian(sigma2, sensitivity).delta(epsilon)
    assert b.lower <= exact <= b.upper
    # Connect-the-dots is exact at grid points and off by O(h) in between.
    assert b.upper <= exact + 1e-4 * max(exact, 1e-6)


def _brute_force_delta(p: np.ndarray, q: np.ndarray, epsilon: float) -> float:
    """Σ_y max(0, p(y) − e^ε q(y)) (CKS Lemma 9 / §1 of REFERENCE), both orders."""
    a = float(np.sum(np.maximum(0.0, p - math.exp(epsilon) * q)))
    b = float(np.sum(np.maximum(0.0, q - math.exp(epsilon) * p)))
    return max(a, b)


@pytest.mark.parametrize("sens", [(1, 1), (1, 2), (2, 3)])
@pytest.mark.parametrize("sigma2", [Fraction(2), Fraction(9, 2)])
def test_two_dimensional_discrete_gaussian_against_brute_force(
    sens: tuple[int, int], sigma2: Fraction
) -> None:
    # Enumerate the joint output on a box holding all but ~1e-40 of the mass.
    s2 = float(sigma2)
    radius = 40
    ys = np.arange(-radius, radius + 1, dtype=np.float64)
    w = np.exp(-(ys**2) / (2 * s2))
    w /= w.sum()

    def shifted(d: int) -> np.ndarray:
        return np.exp(-((ys - d) ** 2) / (2 * s2)) / np.exp(-(ys**2) / (2 * s2)).sum()

    p = np.outer(w, w).ravel()
    q = np.outer(shifted(sens[0]), shifted(sens[1])).ravel()
    pld = PrivacyLossDistribution.from_discrete_gaussian(sigma2, list(sens))
    event_pld = PLDAccountant().compose(DiscreteGaussianVector(sigma2, sens))
    for eps in (0.0, 0.5, 1.0, 2.0, 3.0):
        exact = _brute_force_delta(p, q, eps)
        for b in (pld.delta(eps), event_pld.delta(eps)):
            assert b.lower <= exact <= b.upper
            assert b.upper <= exact + 2e-4 * max(exact, 1e-7)


# -- discrete Laplace: k-fold composition against the exact binomial formula ------------
def _discrete_laplace_k_fold_delta(scale: int, k: int, epsilon: float) -> float:
    """Sensitivity 1: the loss is +1/t w.p. 1/(1+r) and −1/t otherwise (r = e^{−1/t}).

    The k-fold loss is (2j − k)/t with j ~ Binomial(k, 1/(1+r)); δ = E[max(0, 1 − e^{ε−L})].
    Computed with exact rationals for the binomial weights and mpmath-free floats after.
    """
    r = math.exp(-1 / scale)
    a = 1 / (1 + r)
    total = 0.0
    for j in range(k + 1):
        loss = (2 * j - k) / scale
        if loss > epsilon:
            weight = math.exp(
                math.lgamma(k + 1)
                - math.lgamma(j + 1)
                - math.lgamma(k - j + 1)
                + j * math.log(a)
                + (k - j) * math.log1p(-a)
            )
            total += weight * -math.expm1(epsilon - loss)
    return total


@pytest.mark.parametrize("scale", [1, 5, 50])
@pytest.mark.parametrize("count", [1, 10, 100])
def test_discrete_laplace_k_fold_against_exact_formula(scale: int, count: int) -> None:
    acc = PLDAccountant().compose(DiscreteLaplace(scale), count)
    for eps in (0.0, 0.5, 1.0, 2.0):
        exact = _discrete_laplace_k_fold_delta(scale, count, eps)
        b = acc.delta(eps)
        assert b.lower - 1e-12 <= exact <= b.upper + 1e-12
        # Lattice on the grid: exact up to the FFT round-off allowance (docs/accounting.md).
        assert b.upper <= exact * (1 + 1e-6) + 1e-10


def test_laplace_matches_closed_form() -> None:
    mech = Laplace(scale=2.0)
    pld = PrivacyLossDistribution.from_laplace(2.0)
    for eps in (0.0, 0.1, 0.3, 0.49):
        exact = mech.delta(eps)
        b = pld.delta(eps)
        assert b.lower <= exact <= b.upper <= exact + 1e-4


def test_randomised_response_from_distributions() -> None:
    pld = PrivacyLossDistribution.from_distributions([0.75, 0.25], [0.25, 0.75])
    b = pld.epsilon(1e-9)
    assert b.lower <= math.log(3) <= b.upper <= math.log(3) + 1e-4


# -- DP-SGD reference cases -------------------------------------------------------------
# Truths: dp_accounting 0.6 PLD (connect-the-dots) at h = 2e-5 gives 2.381693 / 3.141014 /
# 0.603848 (benchmarks/accounting.py); its error shrinks like h², so Richardson
# extrapolation from h = 1e-4 and 2e-5 gives the truths below (the first is the issue's
# 2.38169). Each is below the corresponding fine-grid upper bound.
DPSGD_CASES = [
    (1.1, 256 / 60000, 14063, 2.381690),
    (0.8, 0.01, 1000, 3.141014),
    (2.0, 0.001, 100_000, 0.6037715),
]


@pytest.mark.parametrize(("sigma", "rate", "steps", "truth"), DPSGD_CASES)
def test_dpsgd_reference_cases(sigma: float, rate: float, steps: int, truth: float) -> None:
    acc = PLDAccountant().compose(Subsampled(Gaussian(sigma), rate), steps)
    b = acc.epsilon(1e-5)
    # Issue 10: the upper bound within 1e-4 relative of the truth, the lower within 1e-3
    # (the truths carry ~2e-6 relative uncertainty from the extrapolation).
    assert truth * (1 - 1e-3) <= b.lower <= truth * (1 + 2e-6)
    assert truth * (1 - 2e-6) <= b.upper <= truth * (1 + 1e-4)


def test_subsampling_with_rate_one_is_the_mechanism() -> None:
    a = PLDAccountant(exact_gaussian=False).compose(Subsampled(Gaussian(2.0), 1.0), 3)
    b = PLDAccountant(exact_gaussian=False).compose(Gaussian(2.0), 3)
    assert a.epsilon(1e-5) == b.epsilon(1e-5)


def test_both_directions_are_accounted() -> None:
    pld = PrivacyLossDistribution.from_subsampled_gaussian(1.0, 0.1).self_compose(10)
    remove = pld.upper_remove.delta(1.0)
    add = pld.upper_add.delta(1.0)
    assert remove != add
    assert pld.delta(1.0).upper == max(remove, add)


def test_subsampled_discrete_mechanisms() -> None:
    # Subsampling never hurts, and the discrete Gaussian is at least as private as the
    # continuous one with the same σ (CKS Thm 7 vs DRS Cor 2.13).
    g = PLDAccountant().compose(Subsampled(Gaussian(2.0), 0.05), 50).epsilon(1e-6).upper
    dg_event = Subsampled(DiscreteGaussian(4), 0.05)
    dg = PLDAccountant().compose(dg_event, 50).epsilon(1e-6).upper
    full = PLDAccountant().compose(DiscreteGaussian(4), 50).epsilon(1e-6).upper
    assert dg <= g * (1 + 1e-3)
    assert dg < full
    dl = PLDAccountant().compose(Subsampled(DiscreteLaplace(2), 0.05), 50).epsilon(1e-6)
    assert (
        dl.lower <= dl.upper < PLDAccountant().compose(DiscreteLaplace(2), 50).epsilon(1e-6).upper
    )


def test_heterogeneous_composition_is_bracketed() -> None:
    # Gaussian + discrete Gaussian with the same σ: bracketed by 2 Gaussians and below it.
    acc = PLDAccountant().compose(Gaussian(3.0), 2).compose(DiscreteGaussian(9), 2)
    b = acc.epsilon(1e-6)
    two_gauss = gdp_epsilon(2 / 3, 1e-6)
    assert b.lower <= b.upper <= two_gauss * (1 + 1e-4)


def test_value_discretization_is_validated() -> None:
    with pytest.raises(ValueError, match=r"^value_discretization must be"):
        PLDAccountant(value_discretization=0.0)
    with pytest.raises(ValueError, match=r"^value_discretization must be"):
        PrivacyLossDistribution.from_gaussian(1.0, value_discretization=2.0)
    with pytest.raises(ValueError, match=r"^other.value_discretization must be"):
        PrivacyLossDistribution.from_gaussian(1.0).compose(
            PrivacyLossDistribution.from_gaussian(1.0, value_discretization=1e-3)
        )


def test_cks_figure_4() -> None:
    # CKS §4 Fig 4: k = 100, variance 50², ε = 1. The discrete Laplace's δ ≈ 206e-7 is
    # confirmed exactly; the discrete Gaussian's exact δ (1.75e-8) is below the paper's ≈1e-7.
    from gaussdp.accounting import compare_discrete_mechanisms

    c = compare_discrete_mechanisms(100, 2500.0, 1.0, 1e-6)
    assert c.delta_discrete_laplace.lower == pytest.approx(2.0568e-5, rel=1e-4)
    assert c.delta_discrete_laplace.upper == pytest.approx(2.0568e-5, rel=1e-4)
    assert c.delta_discrete_gaussian.upper < 1e-7
    assert c.delta_discrete_gaussian.upper == pytest.approx(1.7546e-8, rel=1e-3)
    assert c.variance_ratio > 1.69


# Cases where an earlier round-off allowance (estimated from the FFT noise floor) let a
# bound cross the exact answer, found by a random sweep (docs/accounting.md §3): deep
# tails (δ down to 1e-12) and single- and two-stage powers.
TAIL_CASES = [
    (3000, 0.15304520845409822, "delta", 1.0),
    (3000, 0.4593125163777701, "delta", 3.0),
    (3000, 5.013967509032119, "epsilon", 1e-9),
    (3000, 2.531582180669144, "epsilon", 1e-9),
    (200, 5.686599070401666, "epsilon", 1e-9),
    (200, 3.5900957822469306, "epsilon", 1e-9),
    (30, 4.74382187863002, "epsilon", 1e-9),
    (20000, 3.8844037635515387, "epsilon", 1e-9),
    (60000, 0.11486451941738246, "epsilon", 1e-9),
]


@pytest.mark.parametrize(("count", "mu_total", "kind", "value"), TAIL_CASES)
def test_deep_tail_brackets(count: int, mu_total: float, kind: str, value: float) -> None:
    acc = PLDAccountant(exact_gaussian=False).compose(
        Gaussian(sigma=math.sqrt(count) / mu_total), count
    )
    if kind == "delta":
        exact = gdp_delta(mu_total, value)
        d = acc.delta(value)
        assert d.lower <= exact <= d.upper
    else:
        exact = gdp_epsilon(mu_total, value)
        b = acc.epsilon(value)
        assert b.lower <= exact <= b.upper
        # Within 2e-4, unless the proven round-off allowance (about k·150u, docs §3) is
        # a sizeable part of δ = 1e-9: then within 10 % and the answer says so, or, where
        # it exceeds δ, the RDP bound is returned and labelled.
        ok = b.upper <= exact * (1 + 2e-4) or (b.note and b.upper <= exact * 1.1)
        assert ok or b.method == "rdp"  # the PLD certifies nothing there: labelled RDP


def _discrete_gaussian_pmf_array(ys: np.ndarray, s2: float, shift: int = 0) -> np.ndarray:
    w = np.exp(-((ys - shift) ** 2) / (2 * s2))
    return w / np.exp(-(ys**2) / (2 * s2)).sum()


def test_subsampled_discrete_gaussian_two_fold_against_brute_force() -> None:
    # Both directions of Poisson subsampling, composed twice, enumerated on a 2-D box.
    s2, q = 2.0, 0.3
    ys = np.arange(-40, 41, dtype=np.float64)
    p0 = _discrete_gaussian_pmf_array(ys, s2)
    mix = (1 - q) * p0 + q * _discrete_gaussian_pmf_array(ys, s2, 1)
    big_p = np.outer(mix, mix).ravel()
    big_q = np.outer(p0, p0).ravel()
    acc = PLDAccountant().compose(Subsampled(DiscreteGaussian(2), q), 2)
    for eps in (0.0, 0.2, 0.5, 1.0, 2.0):
        exact = _brute_force_delta(big_p, big_q, eps)
        b = acc.delta(eps)
        assert b.lower <= exact <= b.upper
        assert b.upper <= exact + 1e-3 * max(exact, 1e-6)
        # Issue 10: subsampled discrete Gaussian lower bounds within 1e-3 of the exact values.
        assert b.lower >= exact * (1 - 1e-3)


@pytest.mark.parametrize("rate", [0.01, 0.2, 0.7])
def test_subsampled_gaussian_one_run_against_quadrature(rate: float) -> None:
    # δ(ε) = max over directions of ∫ max(0, p(y) − e^ε p'(y)) dy, by adaptive quadrature.
    from scipy import integrate
    from scipy.stats import norm

    sigma = 0.9

    def mix(y: float) -> float:
        return float((1 - rate) * norm.pdf(y, 0, sigma) + rate * norm.pdf(y, 1, sigma))

    def n0(y: float) -> float:
        return float(norm.pdf(y, 0, sigma))

    pld = PrivacyLossDistribution.from_subsampled_gaussian(sigma, rate)
    for eps in (0.0, 0.01, 0.1, 0.5):
        remove = integrate.quad(
            lambda y, e=eps: max(0.0, mix(y) - math.exp(e) * n0(y)),
            -15,
            16,
            points=[0.5],
            limit=400,
            epsabs=1e-13,
        )[0]
        add = integrate.quad(
            lambda y, e=eps: max(0.0, n0(y) - math.exp(e) * mix(y)),
            -15,
            16,
            points=[0.5],
            limit=400,
            epsabs=1e-13,
        )[0]
        exact = max(remove, add)
        b = pld.delta(eps)
        assert b.lower - 1e-11 <= exact <= b.upper + 1e-11
        assert b.upper <= exact * (1 + 1e-3) + 1e-10


def test_lower_discretisation_at_a_pile_up_is_below_the_curve_and_creates_no_q_mass() -> None:
    # The remove direction of a subsampled Gaussian piles its mass up at the bottom of its
    # support, ln(1 − q). The lower PMF's curve must lie below the exact curve
    # H(x) = P(L > ln x) − x Q(L > ln x) everywhere (on and between grid points, also at
    # ε < 0), and it must not create Q-mass: a Q-mass above 1 shifts every loss and the
    # error compounds over k runs (it used to make 10⁴ runs 2.6 % low in δ).
    from scipy.special import ndtr

    sigma, q, h = 0.8, 1e-3, 4e-5
    pld = PrivacyLossDistribution.from_subsampled_gaussian(sigma, q, value_discretization=h)
    low = pld.lower_remove
    assert float(np.sum(low.probs * np.exp(-low.losses))) <= 1.0 + 1e-12
    bottom = math.log1p(-q)
    eps = np.concatenate((bottom + h * np.linspace(-2, 30, 257), np.linspace(0.0, 3.0, 61) + h / 3))
    # L ≤ t ⇔ y ≤ σ² ln((e^t − 1 + q)/q) + 1/2 (Δ = 1).
    y = sigma**2 * (np.log(np.maximum(np.expm1(eps) + q, 1e-300)) - math.log(q)) + 0.5
    p_gt = (1 - q) * ndtr(-y / sigma) + q * ndtr((1 - y) / sigma)
    exact = p_gt - np.exp(eps) * ndtr(-y / sigma)
    got = np.array([low.delta_raw(float(e)) for e in eps])
    assert np.all(got <= exact + 1e-15)
    # And it is informative under composition: 10³ runs within 2·10⁻⁴ of the upper bound.
    b = pld.self_compose(1000).without_allowances().delta(1.0)
    assert b.lower >= b.upper * (1 - 2e-4)


# δ of one Poisson-subsampled Laplace run (b = 2, Δ = 1, q = 0.9), remove direction,
# from 30-digit mpmath quadrature of max(0, p_mix(y) − e^ε p_0(y)) split at the crossing
# point: 0.1176007162328118 at ε = 0.2 (scipy's quad is only good to ~1e-9 here).
def test_subsampled_laplace_against_mpmath() -> None:
    pld = PrivacyLossDistribution.from_laplace(2.0, 1.0, sample_rate=0.9)
    exact_remove = 0.1176007162328118
    assert pld.lower_remove.delta(0.2) <= exact_remove <= pld.upper_remove.delta(0.2)
    assert pld.upper_remove.delta(0.2) <= exact_remove * (1 + 1e-6)
    acc = PLDAccountant().compose(Subsampled(Laplace(scale=2.0), 0.9), 5)
    b = acc.epsilon(1e-6)
    assert b.lower <= b.upper <= 5 * 0.5  # never worse than basic composition of ε₀ = 1/2


# -- (ε, δ)-DP steps: the worst-case pair composes to the KOV Thm 3.3 closed form -------
def _kov_delta(eps0: float, delta0: float, k: int, i: int) -> float:
    """KOV 2017 Thm 3.3: k-fold (ε0, δ0)-DP is ((k − 2i)ε0, 1 − (1 − δ0)^k (1 − δ_i))-DP,
    δ_i = Σ_{l<i} C(k, l)(e^{(k−l)ε0} − e^{(k−2i+l)ε0}) / (1 + e^{ε0})^k, and no better."""
    import mpmath as mp

    mp.mp.dps = 40  # restored after the test (conftest.py)
    e = mp.mpf(eps0)
    di = (
        mp.fsum(
            mp.binomial(k, j) * (mp.e ** ((k - j) * e) - mp.e ** ((k - 2 * i + j) * e))
            for j in range(i)
        )
        / (1 + mp.e**e) ** k
    )
    return float(1 - (1 - mp.mpf(delta0)) ** k * (1 - di))


@pytest.mark.parametrize("eps0", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("delta0", [0.0, 1e-6])
@pytest.mark.parametrize("k", [1, 7, 40])
def test_approx_dp_k_fold_equals_the_optimal_composition(
    eps0: float, delta0: float, k: int
) -> None:
    pld = PrivacyLossDistribution.from_approx_dp(eps0, delta0).self_compose(k)
    for i in range(0, k // 2 + 1, max(1, k // 8)):
        eps = (k - 2 * i) * eps0
        exact = _kov_delta(eps0, delta0, k, i)
        b = pld.delta(eps)
        assert b.lower - 1e-12 <= exact <= b.upper
        assert b.upper <= exact * (1 + 1e-6) + 1e-9  # atoms on the grid: exact
        assert b.lower >= exact * (1 - 1e-6) - 1e-9  # the mass at +∞ counts on both sides
    if delta0 == 0.0:
        assert PrivacyLossDistribution.from_approx_dp(eps0).delta(eps0).upper <= 1e-12


def _worst_case_curve(eps0: float, delta0: float, k: int) -> tuple[list, list, object]:
    """The k-fold worst-case (ε0, δ0) pair (KOV 2015 Thm 2.1) at 40 digits: its finite
    losses (k − 2l)ε0 with P-masses (1 − δ0)^k C(k, l) a^{k−l}(1 − a)^l, a = e^{ε0}/(1 + e^{ε0}),
    and its mass 1 − (1 − δ0)^k at +∞ (Murtagh & Vadhan 2016 §3; KOV Thm 3.3 is its δ
    at the losses)."""
    import mpmath as mp

    e0 = mp.mpf(eps0)
    a = mp.e**e0 / (1 + mp.e**e0)
    clean = (1 - mp.mpf(delta0)) ** k
    losses = [(k - 2 * j) * e0 for j in range(k + 1)]
    masses = [clean * mp.binomial(k, j) * a ** (k - j) * (1 - a) ** j for j in range(k + 1)]
    return losses, masses, 1 - clean


def _exact_delta(curve: tuple[list, list, object], eps: float) -> float:
    """δ(ε) = p∞ + Σ_z p_z (1 − e^{ε − z})₊ (CKS Lemma 9), in mpmath."""
    import mpmath as mp

    losses, masses, at_inf = curve
    e = mp.mpf(eps)
    return float(
        at_inf
        + mp.fsum(m * (1 - mp.e ** (e - z)) for z, m in zip(losses, masses, strict=True) if z > e)
    )


def _exact_epsilon(curve: tuple[list, list, object], delta: float) -> float:
    """The smallest ε ≥ 0 with δ(ε) ≤ δ: on the segment between two losses δ(ε) = A − e^ε B
    (A, B the sums over the losses above), so ε = ln((A − δ)/B) there."""
    import mpmath as mp

    losses, masses, at_inf = curve
    d = mp.mpf(delta)
    if at_inf >= d:
        return math.inf
    above = sorted((z, m) for z, m in zip(losses, masses, strict=True) if z > 0)
    for i in range(len(above)):  # the segment below the i-th positive loss
        a = at_inf + mp.fsum(m for _, m in above[i:])
        b = mp.fsum(m * mp.e ** (-z) for z, m in above[i:])
        lo = above[i - 1][0] if i else mp.mpf(0)
        if a - mp.e**lo * b <= d:  # δ(lo) ≤ δ: the answer is at or below lo
            return float(lo) if i else 0.0
        if a - mp.e ** above[i][0] * b <= d:
            return float(mp.log((a - d) / b))
    return float(above[-1][0])  # pragma: no cover - δ(top loss) = p∞ < δ


@pytest.mark.parametrize(
    ("eps0", "delta0", "k"),
    [(0.3, 0.5, 3), (0.5, 1e-3, 10), (0.3, 0.0, 10), (1.5, 0.01, 7), (0.05, 1e-5, 200)],
)
def test_accountant_k_fold_approx_dp_matches_the_optimal_composition(
    eps0: float, delta0: float, k: int
) -> None:
    """k runs of ApproxDP(ε0, δ0) (PureDP for δ0 = 0) in the accountant, against the exact
    optimal composition (KOV 2015 Thm 3.3; Murtagh & Vadhan 2016), off the loss lattice too:
    upper within the tolerance (1e-4 relative in ε), lower within 1e-3. (Issue #10: the
    lower side dropped the mass at +∞: ApproxDP(0.3, 0.5) ×3 at ε = 0.89 gave δ ≥ 0.000236
    against 0.8752.) ε0 = 1.5 is built on the grid, not on its lattice."""
    import mpmath as mp

    event = ApproxDP(eps0, delta0) if delta0 else PureDP(eps0)
    acc = PLDAccountant().compose(event, k)
    with mp.workdps(40):
        curve = _worst_case_curve(eps0, delta0, k)
        # (0.3, 0.5, 3): the last ε is the 0.89 (0.8901)
        for eps in (0.37 * eps0, 0.297 * k * eps0, 0.989 * k * eps0):
            exact = _exact_delta(curve, eps)
            b = acc.delta(eps)
            assert b.lower <= exact <= b.upper
            assert b.upper - b.lower <= 1e-3 * exact
        at_inf = float(curve[2])
        for delta in (1e-3, 0.2, at_inf + 1e-3):
            exact = _exact_epsilon(curve, delta)
            e = acc.epsilon(delta)
            assert e.lower <= exact <= e.upper
            if math.isinf(exact):  # the mass at +∞ alone exceeds δ: nothing below ∞
                assert e.lower == math.inf
                continue
            assert e.upper <= exact * (1 + 1e-4)
            assert e.lower >= exact * (1 - 1e-3)


@pytest.mark.parametrize("a", [5e-324, 1e-300, 1e-17, 1e-6, 0.3, 0.5, 1 - 2**-53])
@pytest.mark.parametrize("count", [1, 2, 7, 1000, 10**6, 2**53])
def test_lower_mass_at_infinity_is_rounded_down(a: float, count: int) -> None:
    """The lower side's mass at +∞ of ``count`` runs, 1 − (1 − a)^k, against 60 digits
    (expm1(k·log1p(−a)) there: no cancellation), and of two runs against exact fractions."""
    import mpmath as mp

    from gaussdp.accounting.pld import _either_down, _power_down

    with mp.workdps(60):
        exact = -mp.expm1(count * mp.log1p(-mp.mpf(a)))
        value = _power_down(a, count)
        assert value <= exact
        assert value >= exact * (1 - 1e-14)  # within a few units of the last place
    for b in (0.0, 1e-300, 0.25, 1 - 2**-53):
        both = 1 - (1 - Fraction(a)) * (1 - Fraction(b))
        value = _either_down(a, b)
        assert Fraction(value) <= both
        assert value == math.nextafter(float(both), 0.0) or value == float(both)


def test_approx_dp_validates() -> None:
    with pytest.raises(ValueError, match="^delta must be"):
        PrivacyLossDistribution.from_approx_dp(1.0, 1.0)
    with pytest.raises(ValueError, match="^epsilon must be"):
        PrivacyLossDistribution.from_approx_dp(math.inf)


# -- internals: the lower hull and a power that would overflow ---------------------------
@pytest.mark.parametrize("seed", range(6))
def test_lower_hull_equals_the_monotone_chain(seed: int) -> None:
    from gaussdp.accounting.pld import _below, _bends_up, _hull_of, _lower_hull

    rng = np.random.default_rng(seed)
    n = 3000
    x = np.concatenate(([0.0], np.exp(np.linspace(-2, 1, n - 1))))
    y = np.exp(-x) - rng.random(n) * 10.0 ** rng.uniform(-8, -3)  # convex, dented
    if seed % 2:
        y[n // 2 :] = np.minimum(y[n // 2 :], 0.0)  # a long bridge, as after clipping
        y[-n // 4 :] = 0.0
    hull = _lower_hull(x, y)
    # Convex, through points of the set, every point on or above it: the lower hull.
    assert hull[0] == 0
    assert hull[-1] == n - 1
    assert not _bends_up(x, y, hull).any()
    assert _below(x, y, hull).size == 0
    reference = _hull_of(x, y, np.arange(n))  # Andrew's monotone chain
    line = np.interp(x, x[hull], y[hull])
    ref_line = np.interp(x, x[reference], y[reference])
    assert np.allclose(line, ref_line, rtol=0, atol=1e-14)


def test_power_of_a_super_probability_does_not_overflow() -> None:
    from gaussdp.accounting.pld import _LossPMF, _power, _power_up

    assert _power_up(1.5, 10**6) == math.inf
    assert _power_up(0.5, 3) >= 0.125
    # A measure of mass 1.001 (an envelope may exceed 1) raised to 10⁶ runs: the mass
    # bound is infinite, not an OverflowError.
    base = _LossPMF(0.1, -1, np.array([0.5005, 0.5005]), 1e-3, 1e-12, True)
    out = _power(base, 1_000_000, 1e-15)
    assert out.inf_mass == math.inf or out.slack == math.inf


def test_laplace_beyond_the_loss_cap_composed_gives_a_valid_answer() -> None:
    # ε₀ = 10⁴ nats per run: every loss is beyond the ±64-nat cap, so the PLD has no
    # finite mass on its upper side (this used to raise ZeroDivisionError). The PLD
    # certifies nothing; the RDP bound is returned, labelled, and stays ≤ k·ε₀.
    acc = PLDAccountant().compose(Laplace(scale=1e-4), 100_000)
    b = acc.epsilon(1e-5)
    assert b.method == "rdp"
    assert b.note
    assert 0.0 < b.lower <= b.upper <= 1e9
    pld = PrivacyLossDistribution.from_laplace(1e-4, value_discretization=1e-2)
    k_fold = pld.self_compose(1000)
    assert k_fold.epsilon(1e-5).upper == math.inf
    assert k_fold.delta(100.0).upper == 1.0


# -- the accountant's streamed balanced tree equals a plain sequential composition -----
def test_composition_of_distinct_events_does_not_depend_on_the_order() -> None:
    # Ten distinct events (5 subsampled Gaussians, 3 discrete Gaussians, 2 discrete
    # Laplace), 20 runs each: the accountant builds and composes them as a balanced tree
    # over a size order; composing the same PLDs left to right gives the same bounds up
    # to truncation and the FFT round-off allowance, which depend on the order (about
    # 2e-6 relative here at δ = 1e-8).
    h, count = 1e-3, 20
    tail = DEFAULT_TAIL_MASS
    events: list[tuple[object, PrivacyLossDistribution]] = []
    for k in range(5):
        sigma, q = 0.8 + 0.1 * k, 0.01 * (k + 1)
        one = PrivacyLossDistribution.from_subsampled_gaussian(
            sigma, q, value_discretization=h, tail_mass=tail / count
        )
        events.append((Subsampled(Gaussian(sigma), q), one))
    # The discrete events are composed on their loss lattices (coarser than h), then
    # moved to h.
    for k in range(3):
        s2 = Fraction(6 + 3 * k) ** 2
        one = PrivacyLossDistribution.from_discrete_gaussian(
            s2, value_discretization=float(1 / (2 * s2)), tail_mass=tail
        )
        events.append((DiscreteGaussian(s2), one))
    for k in range(2):
        t = 8 + 4 * k
        one = PrivacyLossDistribution.from_discrete_laplace(
            t, value_discretization=1 / t, tail_mass=tail
        )
        events.append((DiscreteLaplace(t), one))
    acc = PLDAccountant(value_discretization=h)
    reference: PrivacyLossDistribution | None = None
    for event, one in events:
        acc.compose(event, count)  # type: ignore[arg-type]
        part = one.self_compose(count).regridded(h)
        reference = part if reference is None else reference.compose(part)
    assert reference is not None
    built = acc.pld()
    for delta in (1e-3, 1e-5, 1e-8):
        got, want = built.epsilon(delta), reference.epsilon(delta)
        assert got.upper == pytest.approx(want.upper, rel=1e-5)
        assert got.lower == pytest.approx(want.lower, rel=1e-5)
        assert got.lower <= want.upper
        assert want.lower <= got.upper


def test_importing_the_accounting_does_not_import_scipy_optimize() -> None:
    # scipy.optimize (isotonic regression, used by the lower hull) costs about a second
    # at import: it is imported where it is used, not with the package.
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import gaussdp, gaussdp.accounting, gaussdp.accounting.calibration\n"
        "import gaussdp.accounting.pld\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('scipy.optimize'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- ε(δ) keeps its suffix sums between queries (pld._TopSums) ---------------------------
def _composed(h: float = 2e-3) -> PrivacyLossDistribution:
    one = PrivacyLossDistribution.from_subsampled_gaussian(1.0, 0.01, value_discretization=h)
    return one.self_compose(300)


def test_kept_query_sums_give_the_answers_of_a_fresh_pld() -> None:
    deltas = [1e-3, 1e-9, 1e-5, 0.3, 1e-6]
    fresh = [_composed().epsilon(d) for d in deltas]  # one query per PLD
    pld = _composed()
    again = [pld.epsilon(d) for d in deltas]  # every query after the others, sums kept
    assert again == fresh
    # The sums are kept, over the top points that the smallest ε asked for.
    sums = pld.upper_remove.tops.sums
    assert sums is not None
    offset, s1, _, d_at = sums
    assert 0 <= offset < pld.upper_remove.probs.size
    assert s1.size == d_at.size == pld.upper_remove.probs.size - offset
    # Each certified answer is where the directly summed δ meets its target.
    for d, b in zip(deltas, again, strict=True):
        assert pld.delta(b.upper).upper <= d * (1 + 1e-9)
        assert pld.delta(b.lower).lower >= d * (1 - 1e-9) or b.lower == 0.0


def test_bare_copy_shares_the_sums_and_answers_near_the_certified_closed_form() -> None:
    pld = _composed()
    bare = pld.without_allowances()
    assert bare.upper_remove.tops is pld.upper_remove.tops
    assert not bare.upper_remove.checked
    assert pld.upper_remove.checked
    for d in (1e-4, 1e-7):
        b = bare.epsilon(d)
        # The uncertified closed form, against the certified answer of the same masses.
        exact = PrivacyLossDistribution(
            pld.value_discretization,
            *(
                type(pmf)(pmf.h, pmf.start, pmf.probs, pmf.inf_mass, 0.0, pmf.upper)
                for pmf in (pld.upper_remove, pld.upper_add, pld.lower_remove, pld.lower_add)
            ),
            pld.tail_mass,
        ).epsilon(d)
        assert b.upper == pytest.approx(exact.upper, rel=1e-9)
        assert b.lower == pytest.approx(exact.lower, rel=1e-9)
    # Queries of the bare copy leave the certified answers as they were.
    assert pld.epsilon(1e-5) == _composed().epsilon(1e-5)


def test_loss_masses_cannot_change_a_pld() -> None:
    pld = _composed()
    masses = pld.loss_masses(upper=True, remove=True).masses
    with pytest.raises(ValueError, match="read-only"):
        masses[0] = 1.0
