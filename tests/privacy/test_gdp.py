"""Tests for gaussdp.privacy.gdp: known answers, mpmath references, round trips, properties.

Multi-precision references are computed here with mpmath at 80+ significant
digits straight from the formulas in REFERENCE.md §2 (not from the code under
test). Measured worst relative errors (this machine, the grids below) are noted
next to each tolerance.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gaussdp.privacy import (
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    equal_error_rate,
    gdp_compose,
    gdp_delta,
    gdp_epsilon,
    gdp_log_delta,
    gdp_mu,
    gdp_tradeoff,
    mia_advantage,
)
from gaussdp.privacy.gdp import gdp_epsilon_lower

MUS = [1e-4, 1e-2, 0.5, 1.0, 3.0, 10.0, 100.0]
EPSILONS = [0.0, 1e-3, 0.5, 1.0, 10.0, 50.0, 200.0]
DELTAS = [0.5, 1e-2, 1e-5, 1e-10, 1e-50, 1e-100, 1e-300]

# Tolerances: the measured worst relative error times about 20.
TOL_DELTA = 1e-11  # measured 5.1e-13 (μ = 2.05, ε = 81.6, ln δ ≈ −750; 3000 random points)
TOL_INVERSE = 1e-9  # measured 2.0e-10: the deliberate 1e-10 safety margin on δ


# ---------------------------------------------------------------------------
# mpmath references
# ---------------------------------------------------------------------------


def _phi(x: mp.mpf) -> mp.mpf:
    return mp.erfc(-x / mp.sqrt(2)) / 2


def mp_delta(mu: float | mp.mpf, eps: float | mp.mpf) -> mp.mpf:
    """δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (DRS Cor 2.13).

    At 80 digits plus the log10(1/μ) digits lost to the subtraction (δ ≈ 0.4 μ at ε = 0).
    """
    extra = max(0, int(-mp.log10(mp.mpf(mu)))) if mu > 0 else 0
    with mp.workdps(80 + extra):
        m, e = mp.mpf(mu), mp.mpf(eps)
        return +(_phi(-e / m + m / 2) - mp.exp(e) * _phi(-e / m - m / 2))


def mp_rel(got: float, ref: mp.mpf) -> float:
    with mp.workdps(40):
        return float(abs(mp.mpf(got) - ref) / abs(ref))


def mp_root(f: Callable[[mp.mpf], mp.mpf], lo: float, hi: float) -> mp.mpf:
    """Root of an increasing-or-decreasing f on [lo, hi] by bisection at 60 digits."""
    with mp.workdps(60):
        a, b = mp.mpf(lo), mp.mpf(hi)
        fa = f(a)
        assert fa * f(b) <= 0, (lo, hi)
        for _ in range(200):
            c = (a + b) / 2
            fc = f(c)
            if fc == 0:
                return c
            if (fc > 0) == (fa > 0):
                a, fa = c, fc
            else:
                b = c
            if b - a <= mp.mpf(10) ** -40 * abs(b):
                break
        return (a + b) / 2


def mp_epsilon(mu: float, delta: float) -> mp.mpf:
    """Exact ε(δ) for μ-GDP by bisection on the mpmath profile (0 if δ(0) <= δ)."""
    with mp.workdps(80):
        target = mp.log(mp.mpf(delta))
        if mp.log(mp_delta(mu, 0)) <= target:
            return mp.mpf(0)
        hi = mu * mu / 2 + mu * math.sqrt(-2 * math.log(delta)) + 1.0
        return mp_root(lambda e: mp.log(mp_delta(mu, e)) - target, 0.0, hi)


def mp_mu(eps: float, delta: float, hi: float) -> mp.mpf:
    with mp.workdps(80):
        target = mp.log(mp.mpf(delta))
        return mp_root(lambda m: mp.log(mp_delta(m, eps)) - target, hi * 1e-3, hi)


# ---------------------------------------------------------------------------
# Known answers (REFERENCE.md §2, seed 000: Dong, Roth, Su 2022)
# ---------------------------------------------------------------------------


def test_known_answers_seed_000() -> None:
    assert round(gdp_tradeoff(1.0, 0.05), 4) == 0.7405
    assert round(gdp_delta(0.5, 1.0), 5) == 0.00683
    assert gdp_epsilon(0.5, 1e-5) == pytest.approx(1.993, abs=5e-4)
    expected = {0.5: 0.401, 1.0: 0.309, 3.0: 0.067, 6.0: 0.00135}
    for mu, value in expected.items():
        assert equal_error_rate(mu) == pytest.approx(value, abs=5e-4 if mu < 6 else 5e-6)


def test_balle_wang_known_sigma() -> None:
    # Balle & Wang 2018 Fig. 1 region: ε = 1, δ = 1e-5 needs σ ≈ 3.73 (analytic)
    # against 4.84·(1/0.99…) for the classic bound evaluated at ε just below 1.
    assert analytic_gaussian_sigma(1.0, 1e-5) == pytest.approx(3.7306, abs=1e-4)
    assert classic_gaussian_sigma(0.5, 1e-5) == pytest.approx(
        math.sqrt(2 * math.log(1.25e5)) / 0.5, rel=1e-15
    )


# ---------------------------------------------------------------------------
# gdp_delta / gdp_log_delta against mpmath
# ---------------------------------------------------------------------------


def test_delta_matches_mpmath_on_edge_grid() -> None:
    worst = 0.0
    for mu in MUS:
        for eps in EPSILONS:
            ref = mp_delta(mu, eps)
            assert ref > 0
            log_ref = mp.log(ref)
            got = gdp_delta(mu, eps)
            got_log = gdp_log_delta(mu, eps)
            if log_ref > math.log(2.3e-308):  # normal float range
                worst = max(worst, mp_rel(got, ref))
                assert mp_rel(got, ref) <= TOL_DELTA, (mu, eps, got, ref)
                with mp.workdps(40):
                    assert abs(mp.expm1(mp.mpf(got_log) - log_ref)) <= TOL_DELTA
            else:
                # Underflow: the smallest positive subnormal (or a subnormal >= truth).
                assert 0.0 < got <= 2.3e-308
                assert got >= float(ref) or got == 5e-324
                # ln δ (down to -2e12 here) keeps a small *relative* error; δ itself
                # cannot be more accurate than |ln δ|·2^-53 from its logarithm.
                worst_log = mp_rel(got_log, log_ref)
                assert worst_log <= 1e-14, (mu, eps, got_log, log_ref)  # measured 3.6e-16
    assert worst <= TOL_DELTA, worst


def test_delta_matches_mpmath_random_points() -> None:
    # Seeded: μ log-uniform in [1e-4, 100], a = −ε/μ + μ/2 uniform in [−40, 8]
    # (δ from 1 down to e^{−800}), crossing every evaluation branch.
    rng = np.random.default_rng(20260101)
    worst = 0.0
    for _ in range(300):
        mu = float(10 ** rng.uniform(-4, 2))
        a = float(rng.uniform(-40, 8))
        eps = mu * (mu / 2 - a)
        if eps < 0:
            continue
        with mp.workdps(40):
            rel = float(abs(mp.expm1(mp.mpf(gdp_log_delta(mu, eps)) - mp.log(mp_delta(mu, eps)))))
        worst = max(worst, rel)
    assert worst <= TOL_DELTA, worst


def test_delta_is_an_upper_bound_on_random_points() -> None:
    # Regression: gdp_delta, the certified `upper` of GDPAccountant.delta and of
    # Gaussian/LatticeGaussian.delta, was the nearest value, below the exact δ at
    # 1358 of 3000 points (worst 3.3e-14 relative). It is now rounded up.
    rng = np.random.default_rng(5)
    for _ in range(400):
        mu = float(10 ** rng.uniform(-4, 2))
        eps = 0.0 if rng.random() < 0.1 else float(10 ** rng.uniform(-6, 2.3))
        ref = mp_delta(mu, eps)
        if ref < mp.mpf(10) ** -300:
            continue
        got = gdp_delta(mu, eps)
        assert got >= ref, (mu, eps, got, ref)
        assert mp_rel(got, ref) <= TOL_DELTA, (mu, eps, got, ref)
        # The inverse still lands on the safe side of the rounded-up δ.
        if 1e-300 < got < 1.0:
            assert gdp_delta(mu, gdp_epsilon(mu, got)) <= got


@pytest.mark.parametrize("u", [-3.0, 8.0])
@pytest.mark.parametrize("mu", [1e-4, 0.5, math.sqrt(2.0), 3.0])
def test_delta_continuous_across_branches(u: float, mu: float) -> None:
    # u = −a/√2 = −3 and 8 are where the evaluation switches method; h = μ/√2 = 1 too.
    for shift in (-1e-9, 0.0, 1e-9):
        a = -(u + shift) * math.sqrt(2.0)
        eps = mu * (mu / 2 - a)
        if eps < 0:
            continue
        assert mp_rel(gdp_delta(mu, eps), mp_delta(mu, eps)) <= TOL_DELTA


def test_delta_edges() -> None:
    assert gdp_delta(0.0, 0.0) == 0.0
    assert gdp_delta(0.0, 5.0) == 0.0
    assert gdp_log_delta(0.0, 1.0) == -math.inf
    # δ(0) = 2Φ(μ/2) − 1 = erf(μ/(2√2)), also for tiny μ
    for mu in (1e-12, 1e-4, 1.0):
        assert gdp_delta(mu, 0.0) == pytest.approx(math.erf(mu / (2 * math.sqrt(2))), rel=TOL_DELTA)
    assert gdp_delta(100.0, 0.0) == 1.0
    assert gdp_delta(1e-4, 200.0) == 5e-324  # true δ ≈ exp(−2e12): rounded up, never 0


# ---------------------------------------------------------------------------
# gdp_tradeoff, mia_advantage, equal_error_rate, gdp_compose
# ---------------------------------------------------------------------------


def mp_tradeoff(mu: float, alpha: float) -> mp.mpf:
    with mp.workdps(400):
        a = mp.mpf(alpha)
        if a == 0:
            return mp.mpf(1)
        if a == 1:
            return mp.mpf(0)
        q = mp.sqrt(2) * mp.erfinv(1 - 2 * a)  # Φ⁻¹(1 − α)
        return +_phi(q - mu)


def test_tradeoff_matches_mpmath() -> None:
    alphas = [0.0, 1e-300, 1e-10, 0.05, 0.5, 0.95, 1 - 1e-10, 1.0]
    worst = 0.0
    for mu in [0.0, *MUS[:-1]]:
        got = gdp_tradeoff(mu, np.array(alphas))
        assert isinstance(got, np.ndarray)
        assert got.shape == (len(alphas),)
        for alpha, value in zip(alphas, got, strict=True):
            ref = mp_tradeoff(mu, alpha)
            assert gdp_tradeoff(mu, alpha) == value
            if ref == 0:
                assert value == 0.0
                continue
            if ref < 1e-300:
                continue  # below the normal float range
            rel = mp_rel(float(value), ref)
            worst = max(worst, rel)
    assert worst <= 1e-12, worst  # measured 5.4e-14 (μ = 10, α = 1 − 1e-10)


def test_tradeoff_shapes_and_kinds() -> None:
    assert isinstance(gdp_tradeoff(1.0, 0.5), float)
    assert isinstance(gdp_tradeoff(1.0, 1), float)
    out = gdp_tradeoff(1.0, [[0.1, 0.2], [0.3, 0.4]])
    assert isinstance(out, np.ndarray)
    assert out.shape == (2, 2)
    assert gdp_tradeoff(0.0, [0.25]).tolist() == [0.75]  # G_0(α) = 1 − α
    # G_μ(α) is decreasing in α and in μ
    grid = np.linspace(0, 1, 101)
    assert np.all(np.diff(gdp_tradeoff(1.0, grid)) <= 0)
    assert np.all(gdp_tradeoff(2.0, grid) <= gdp_tradeoff(1.0, grid))


def test_mia_and_equal_error_match_mpmath() -> None:
    worst = 0.0
    for mu in MUS:
        with mp.workdps(60):
            adv = 2 * _phi(mp.mpf(mu) / 2) - 1
            eer = _phi(-mp.mpf(mu) / 2)
        worst = max(worst, mp_rel(mia_advantage(mu), adv))
        if eer > 1e-300:
            worst = max(worst, mp_rel(equal_error_rate(mu), eer))
        else:
            assert equal_error_rate(mu) == 0.0  # Φ(−50) ≈ 2e-545 underflows
        # the equal-error point is a fixed point of the trade-off curve
        if mu < 30:  # Φ(−μ/2) underflows beyond
            assert gdp_tradeoff(mu, equal_error_rate(mu)) == pytest.approx(equal_error_rate(mu))
    assert worst <= 1e-13, worst  # measured 2.2e-15 (equal_error_rate, μ = 10)
    assert mia_advantage(0.0) == 0.0
    assert equal_error_rate(0.0) == 0.5


def test_compose() -> None:
    assert gdp_compose([0.3, 0.4]) == pytest.approx(0.5, rel=1e-15)
    assert gdp_compose([]) == 0.0
    assert gdp_compose([0.0, 0.0]) == 0.0
    assert gdp_compose(iter([1.0] * 100)) == pytest.approx(10.0, rel=1e-14)
    assert gdp_compose(np.array([1e200, 1e200])) == pytest.approx(math.sqrt(2) * 1e200)
    assert gdp_compose([1e-200, 1e-200]) == pytest.approx(math.sqrt(2) * 1e-200)
    # k Gaussians of equal μ = one with μ√k, and δ agrees exactly (DRS Cor 3.3)
    assert gdp_delta(gdp_compose([0.5] * 16), 1.0) == pytest.approx(gdp_delta(2.0, 1.0), rel=1e-14)


# ---------------------------------------------------------------------------
# Inverses against mpmath, and round trips
# ---------------------------------------------------------------------------


def test_epsilon_matches_mpmath() -> None:
    # gdp_epsilon_lower is the lower side of GDPAccountant's bracket (it was the
    # rounded-up ε, above the exact value): below the exact ε, within 1e-9 of it.
    worst = 0.0
    for mu in MUS:
        for delta in DELTAS:
            got = gdp_epsilon(mu, delta)
            lower = gdp_epsilon_lower(mu, delta)
            ref = mp_epsilon(mu, delta)
            assert lower <= ref, (mu, delta, lower, ref)  # never above the exact ε
            if ref == 0:
                assert got == 0.0
                continue
            assert got >= ref, (mu, delta)  # never below the exact ε
            worst = max(worst, mp_rel(got, ref), mp_rel(lower, ref))
    assert worst <= TOL_INVERSE, worst


def test_log_delta_is_an_upper_bound() -> None:
    # gdp_log_delta is rounded up like gdp_delta: never below the exact ln δ, at 50
    # digits, in every branch (δ near 1, the quadrature, the asymptotic series, and
    # far below the float range), and within its stated margin.
    rng = np.random.default_rng(23)
    points = [(mu, eps) for mu in MUS for eps in EPSILONS]
    for _ in range(150):
        mu = float(10 ** rng.uniform(-4, 2))
        a = float(rng.uniform(-60, 8))
        points.append((mu, max(0.0, mu * (mu / 2 - a))))
    points += [(1e-3, 1e3), (0.01, 1e4)]  # ln δ ≈ −5e11, −5e11: one float ≫ 5e-12
    for mu, eps in points:
        got = gdp_log_delta(mu, eps)
        with mp.workdps(50):
            ref = mp.log(mp_delta(mu, eps))
            assert got >= ref, (mu, eps, got, ref)
            assert got - ref <= 1e-11 + 1e-14 * abs(ref), (mu, eps, got, ref)


def test_mu_matches_mpmath() -> None:
    worst = 0.0
    for eps in EPSILONS:
        for delta in DELTAS:
            got = gdp_mu(eps, delta)
            ref = mp_mu(eps, delta, got * 1.01)
            assert got <= ref, (eps, delta)  # never above the exact μ
            worst = max(worst, mp_rel(got, ref))
    assert worst <= TOL_INVERSE, worst


def test_analytic_sigma_matches_mpmath_and_is_minimal() -> None:
    for eps in EPSILONS:
        for delta in (0.5, 1e-5, 1e-10, 1e-100):
            for sens in (1.0, 3.5):
                sigma = analytic_gaussian_sigma(eps, delta, sensitivity=sens)
                # meets the target, checked in exact arithmetic
                assert mp_delta(sens / sigma, eps) <= delta
                # and is minimal to relative 1e-9
                assert mp_delta(sens / (sigma * (1 - 1e-9)), eps) > delta


def test_analytic_sigma_scales_with_sensitivity() -> None:
    base = analytic_gaussian_sigma(1.0, 1e-6)
    assert analytic_gaussian_sigma(1.0, 1e-6, sensitivity=7.0) == pytest.approx(7 * base, rel=1e-9)
    # the analytic σ is below the classic one wherever the classic formula applies
    for eps in (0.01, 0.1, 0.5, 0.99):
        for delta in (1e-3, 1e-6, 1e-12):
            assert analytic_gaussian_sigma(eps, delta) < classic_gaussian_sigma(eps, delta)


def test_round_trips_on_grid() -> None:
    for mu in MUS:
        for eps in EPSILONS:
            delta = gdp_delta(mu, eps)
            if not 1e-300 < delta < 0.9:
                continue  # outside (0, 1) as a float, or too flat to invert
            back = gdp_epsilon(mu, delta)
            assert back >= eps or eps == 0.0 or back == pytest.approx(eps, rel=1e-9)
            # ε = 0 comes back as a tiny positive ε: the 1e-10 margin on δ
            # divided by |d ln δ/dε| = 0.077 at μ = 3.
            assert back == pytest.approx(eps, rel=1e-8, abs=1e-8)
            mu_back = gdp_mu(eps, delta)
            assert mu_back == pytest.approx(mu, rel=1e-8)


def test_inverse_edges() -> None:
    assert gdp_epsilon(0.0, 1e-5) == 0.0
    assert gdp_epsilon(1.0, 0.99) == 0.0  # δ(0) = 0.383 already meets the target
    # smallest subnormal δ is a valid target
    eps = gdp_epsilon(1.0, 5e-324)
    assert gdp_log_delta(1.0, eps) <= math.log(5e-324)
    # ε = 0: δ(0) = erf(μ/(2√2)) inverts in closed form
    mu = gdp_mu(0.0, 1e-5)
    assert mu == pytest.approx(2 * math.sqrt(2) * float(mp.erfinv(1e-5)), rel=1e-9)
    assert gdp_delta(mu, 0.0) <= 1e-5


# ---------------------------------------------------------------------------
# Hypothesis properties
# ---------------------------------------------------------------------------

log_mu = st.floats(min_value=-4.0, max_value=2.0)
eps_st = st.floats(min_value=0.0, max_value=200.0)
log_delta_st = st.floats(min_value=-100.0, max_value=-0.31)


@settings(max_examples=60, deadline=None)
@given(log_mu, eps_st, st.floats(min_value=1e-6, max_value=1.0))
def test_delta_decreasing_in_epsilon(lm: float, eps: float, step: float) -> None:
    mu = 10.0**lm
    assert gdp_log_delta(mu, eps + step) <= gdp_log_delta(mu, eps)


@settings(max_examples=60, deadline=None)
@given(log_mu, eps_st, st.floats(min_value=1e-6, max_value=1.0))
def test_delta_increasing_in_mu(lm: float, eps: float, step: float) -> None:
    mu = 10.0**lm
    assert gdp_log_delta(mu * (1 + step), eps) >= gdp_log_delta(mu, eps)


@settings(max_examples=40, deadline=None)
@given(
    st.floats(min_value=0.0, max_value=50.0),
    log_delta_st,
    st.floats(min_value=1e-3, max_value=1e3),
)
def test_calibrated_sigma_never_exceeds_target(eps: float, ld: float, sens: float) -> None:
    delta = 10.0**ld
    sigma = analytic_gaussian_sigma(eps, delta, sensitivity=sens)
    assert gdp_delta(sens / sigma, eps) <= delta
    assert gdp_delta(sens / (sigma * (1 - 1e-9)), eps) > delta


@settings(max_examples=40, deadline=None)
@given(log_mu, log_delta_st)
def test_epsilon_is_safe_and_tight(lm: float, ld: float) -> None:
    mu, delta = 10.0**lm, 10.0**ld
    eps = gdp_epsilon(mu, delta)
    assert gdp_delta(mu, eps) <= delta
    if eps > 0:
        assert gdp_delta(mu, eps * (1 - 1e-8)) > delta


# ---------------------------------------------------------------------------
# Bad inputs: each message follows the one template
# ---------------------------------------------------------------------------

MU_MSG = r"mu must be a finite real number >= 0, got "
EPS_MSG = r"epsilon must be a finite real number >= 0, got "
DELTA_MSG = r"delta must be a real number in \(0, 1\), got "


@pytest.mark.parametrize("bad", [-1.0, -1e-300, math.nan, math.inf, -math.inf])
def test_bad_mu(bad: float) -> None:
    for call in (
        lambda: gdp_delta(bad, 1.0),
        lambda: gdp_log_delta(bad, 1.0),
        lambda: gdp_epsilon(bad, 1e-5),
        lambda: gdp_tradeoff(bad, 0.5),
        lambda: mia_advantage(bad),
        lambda: equal_error_rate(bad),
    ):
        with pytest.raises(ValueError, match=MU_MSG):
            call()


@pytest.mark.parametrize("bad", ["1", None, True, [1.0]])
def test_mu_wrong_type(bad: object) -> None:
    with pytest.raises(TypeError, match=MU_MSG):
        gdp_delta(bad, 1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=MU_MSG):
        equal_error_rate(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-0.5, math.nan, math.inf])
def test_bad_epsilon(bad: float) -> None:
    for call in (
        lambda: gdp_delta(1.0, bad),
        lambda: gdp_log_delta(1.0, bad),
        lambda: gdp_mu(bad, 1e-5),
        lambda: analytic_gaussian_sigma(bad, 1e-5),
    ):
        with pytest.raises(ValueError, match=EPS_MSG):
            call()


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5, math.nan, math.inf])
def test_bad_delta(bad: float) -> None:
    for call in (
        lambda: gdp_epsilon(1.0, bad),
        lambda: gdp_mu(1.0, bad),
        lambda: analytic_gaussian_sigma(1.0, bad),
        lambda: classic_gaussian_sigma(0.5, bad),
    ):
        with pytest.raises(ValueError, match=DELTA_MSG):
            call()


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_bad_sensitivity(bad: float) -> None:
    msg = r"sensitivity must be a finite positive real number, got "
    with pytest.raises(ValueError, match=msg):
        analytic_gaussian_sigma(1.0, 1e-5, sensitivity=bad)
    with pytest.raises(ValueError, match=msg):
        classic_gaussian_sigma(0.5, 1e-5, sensitivity=bad)


@pytest.mark.parametrize("eps", [1.0, 2.0, 100.0])
def test_classic_refuses_epsilon_at_least_one(eps: float) -> None:
    with pytest.raises(
        ValueError,
        match=r"epsilon must be < 1 for the classic calibration .*only valid for "
        r"epsilon < 1; use analytic_gaussian_sigma.*, got ",
    ):
        classic_gaussian_sigma(eps, 1e-5)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_classic_bad_epsilon(bad: float) -> None:
    with pytest.raises(ValueError, match=r"epsilon must be a finite positive real number, got "):
        classic_gaussian_sigma(bad, 1e-5)


@pytest.mark.parametrize("bad", [-0.1, 1.1, math.nan, math.inf])
def test_bad_alpha(bad: float) -> None:
    with pytest.raises(ValueError, match=r"alpha must be a real number in \[0, 1\], got "):
        gdp_tradeoff(1.0, bad)
    with pytest.raises(ValueError, match=r"alpha must be a real number in \[0, 1\], got "):
        gdp_tradeoff(1.0, [0.5, bad])


@pytest.mark.parametrize("bad", ["0.5", True, None, ["a"], [True, False]])
def test_alpha_wrong_type(bad: object) -> None:
    with pytest.raises(TypeError, match=r"alpha must be a real number or array of reals"):
        gdp_tradeoff(1.0, bad)  # type: ignore[call-overload]


def test_compose_bad_inputs() -> None:
    with pytest.raises(TypeError, match=r"mus must be an iterable of real numbers >= 0, got 1.0"):
        gdp_compose(1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"mus must be an iterable"):
        gdp_compose("12")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"mus\[1\] must be a finite real number >= 0, got -1.0"):
        gdp_compose([1.0, -1.0])
    with pytest.raises(ValueError, match=r"mus\[0\] must be a finite real number >= 0, got nan"):
        gdp_compose([math.nan])
    with pytest.raises(TypeError, match=r"mus\[0\] must be a finite real number >= 0, got 'a'"):
        gdp_compose(["a"])  # type: ignore[list-item]


def test_extreme_inputs_terminate_safely() -> None:
    # Far outside the documented accuracy range, but valid: no hang, no crash,
    # and every answer on the safe side.
    assert gdp_delta(1e200, 1.0) == 1.0
    assert gdp_delta(1e-300, 0.0) == pytest.approx(1e-300 / math.sqrt(2 * math.pi), rel=1e-9)
    assert gdp_epsilon(1e200, 1e-5) == math.inf  # true ε ≈ 5e399 exceeds the float range
    assert gdp_mu(1e300, 0.5) > 1e150
    # subnormal brackets, where Brent's method gives up and bisection takes over
    mu = gdp_mu(5e-324, 5e-324)
    assert 0.0 < mu < 1e-322
    assert analytic_gaussian_sigma(0.0, 1e-310) == math.inf  # σ ≈ 4e309 overflows


def test_calibrating_does_not_import_scipy_optimize() -> None:
    # gaussdp calibrate's path: scipy.optimize would cost a large part of its start-up.
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from gaussdp.cli.calibrate import calibrate_rows\n"
        "calibrate_rows(1.0, 1e-6, 1.0)\n"
        "assert 'scipy.optimize' not in sys.modules, 'scipy.optimize imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(("epsilon", "delta"), [(1e-6, 0.5), (1.0, 1e-6), (50.0, 1e-300)])
def test_root_finder_meets_delta_and_is_tight(epsilon: float, delta: float) -> None:
    # The root (Illinois regula falsi) is nudged to the safe side; it must land within a few
    # ulps of the exact threshold: one step up from the returned μ already exceeds δ.
    mu = gdp_mu(epsilon, delta)
    assert gdp_delta(mu, epsilon) <= delta
    assert gdp_delta(mu * (1 + 1e-12), epsilon) > delta * (1 - 2e-10)


@pytest.mark.parametrize("epsilon", [1.5e308, sys.float_info.max])
def test_mu_for_an_epsilon_near_the_largest_float(epsilon: float) -> None:
    # Regression: √2·ε overflowed in the search's start above max/√2 ("bracket must be
    # finite"). The μ returned still meets the target.
    mu = gdp_mu(epsilon, 0.5)
    assert 0 < mu < math.inf
    assert gdp_delta(mu, epsilon) <= 0.5
