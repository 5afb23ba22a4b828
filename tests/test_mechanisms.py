"""Mechanism value objects: validation, privacy views against independent answers."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import integrate, stats

from gaussdp import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace


def _discrete_gaussian_weights(sigma2: Fraction, radius: int) -> dict[int, mpmath.mpf]:
    """Exact-to-50-digits pmf of N_Z(0, σ²) on [-radius, radius] (tail below 1e-60 for our σ²)."""
    with mpmath.workdps(50):
        s2 = mpmath.mpf(sigma2.numerator) / sigma2.denominator
        weights = {
            y: mpmath.exp(-(mpmath.mpf(y) ** 2) / (2 * s2)) for y in range(-radius, radius + 1)
        }
        total = mpmath.fsum(weights.values())
        return {y: w / total for y, w in weights.items()}


def _brute_force_tradeoff(pmf: dict[int, mpmath.mpf], shift: int, alpha: float) -> float:
    """Neyman–Pearson trade-off of (P, P shifted by ``shift``) by walking the outputs.

    Rejects the outputs with the largest likelihood ratio first (the largest y, since the
    ratio q/p grows with y), randomising on the last one.
    """
    with mpmath.workdps(50):
        size, power = mpmath.mpf(0), mpmath.mpf(0)
        for y in sorted(pmf, reverse=True):
            p = pmf[y]
            q = pmf.get(y - shift, mpmath.mpf(0))
            if size + p >= alpha:
                fraction = (alpha - size) / p
                return float(1 - power - fraction * q)
            size += p
            power += q
        return float(1 - power)


class TestGaussian:
    def test_views_are_the_closed_forms(self) -> None:
        g = Gaussian(sigma=2.0, sensitivity=3.0)
        assert g.mu == 1.5
        assert g.rho == pytest.approx(1.125, rel=1e-15)
        assert g.rdp(4) == pytest.approx(4.5, rel=1e-15)
        assert g.variance == 4.0

    def test_calibrate_meets_the_target_exactly(self) -> None:
        g = Gaussian.calibrate(epsilon=1.0, delta=1e-6)
        assert g.delta(1.0) <= 1e-6
        assert g.epsilon(1e-6) == pytest.approx(1.0, rel=1e-8)
        # 1e-8 less noise misses the target: the calibration is the smallest σ.
        assert Gaussian(sigma=g.sigma * (1 - 1e-8)).delta(1.0) > 1e-6

    def test_classic_is_larger_than_analytic(self) -> None:
        analytic = Gaussian.calibrate(epsilon=0.5, delta=1e-5)
        classic = Gaussian.calibrate(epsilon=0.5, delta=1e-5, method="classic")
        # Dwork & Roth Thm A.1: σ = √(2 ln(1.25/δ))/ε, computed here independently.
        assert classic.sigma == pytest.approx(math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5)
        assert classic.sigma > analytic.sigma

    def test_from_mu_and_from_rho(self) -> None:
        assert Gaussian.from_mu(0.5, sensitivity=2.0).sigma == 4.0
        assert Gaussian.from_rho(0.125).mu == pytest.approx(0.5, rel=1e-15)

    def test_known_answers_from_the_gdp_paper(self) -> None:
        # REFERENCE §2 (seed 000): μ = 0.5 gives δ(1) = 0.00683 and ε(1e-5) ≈ 1.99.
        g = Gaussian.from_mu(0.5)
        assert g.delta(1.0) == pytest.approx(0.00683, abs=5e-6)
        assert g.epsilon(1e-5) == pytest.approx(1.993, abs=5e-4)
        assert Gaussian.from_mu(1.0).tradeoff(0.05) == pytest.approx(0.7405, abs=5e-5)

    def test_confidence_interval_matches_scipy(self) -> None:
        ci = Gaussian(sigma=3.0).confidence_interval(0.9, value=10.0)
        low, high = stats.norm.interval(0.9, loc=10.0, scale=3.0)
        assert ci.low == pytest.approx(low, rel=1e-12)
        assert ci.high == pytest.approx(high, rel=1e-12)
        assert ci.half_width == pytest.approx((high - low) / 2, rel=1e-12)

    @pytest.mark.parametrize("level", [1 - 2**-52, 1 - 2**-53])
    def test_confidence_interval_near_one_is_finite(self, level: float) -> None:
        # 0.5 + level/2 rounds to 1.0 here: its quantile was infinite. The half-width
        # is x with P[Z > x] = (1 - level)/2, by mpmath's erfc.
        half = Gaussian(sigma=2.0).confidence_interval(level).half_width
        tail = mpmath.mpf(1 - level) / 2
        assert mpmath.erfc(half / 2 / mpmath.sqrt(2)) / 2 == pytest.approx(tail, rel=1e-9)

    def test_frozen(self) -> None:
        g = Gaussian(sigma=1.0)
        with pytest.raises(dataclasses.FrozenInstanceError):
            g.sigma = 2.0  # type: ignore[misc]

    @pytest.mark.parametrize(
        ("kwargs", "error", "message"),
        [
            (
                {"sigma": float("nan")},
                ValueError,
                "sigma must be a finite positive real number, got nan",
            ),
            (
                {"sigma": float("inf")},
                ValueError,
                "sigma must be a finite positive real number, got inf",
            ),
            ({"sigma": 0.0}, ValueError, "sigma must be a finite positive real number, got 0.0"),
            ({"sigma": -1.0}, ValueError, "sigma must be a finite positive real number, got -1.0"),
            ({"sigma": True}, TypeError, "sigma must be a finite positive real number, got True"),
            ({"sigma": "1"}, TypeError, "sigma must be a finite positive real number, got '1'"),
            ({"sigma": 1.0, "sensitivity": 0}, ValueError, "sensitivity must be a finite positive"),
        ],
    )
    def test_bad_construction(
        self, kwargs: dict[str, object], error: type[Exception], message: str
    ) -> None:
        with pytest.raises(error, match=f"^{message}"):
            Gaussian(**kwargs)  # type: ignore[arg-type]

    def test_bad_arguments(self) -> None:
        g = Gaussian(sigma=1.0)
        with pytest.raises(ValueError, match=r"^order must be a real number > 1, got 1$"):
            g.rdp(1)
        with pytest.raises(ValueError, match=r"^level must be a real number in \(0, 1\), got 1.0$"):
            g.confidence_interval(1.0)
        with pytest.raises(ValueError, match=r"^method must be 'analytic' or 'classic', got 'x'$"):
            Gaussian.calibrate(epsilon=1.0, delta=1e-6, method="x")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^mu must be a finite positive real number, got 0$"):
            Gaussian.from_mu(0)
        with pytest.raises(
            ValueError, match=r"^rho must be a finite positive real number, got -1$"
        ):
            Gaussian.from_rho(-1)
        with pytest.raises(ValueError, match="delta must be"):
            g.epsilon(0.0)


class TestDiscreteGaussian:
    def test_sigma2_is_held_exactly(self) -> None:
        assert DiscreteGaussian(4).sigma2 == Fraction(4)
        assert DiscreteGaussian("25/4").sigma2 == Fraction(25, 4)
        assert DiscreteGaussian(0.1).sigma2 == Fraction(0.1)  # the float's exact value
        assert DiscreteGaussian(Fraction(1, 3)).sigma2 == Fraction(1, 3)

    def test_rho_is_cks_theorem_4(self) -> None:
        dg = DiscreteGaussian("9/2", sensitivity=3)
        assert dg.rho == 1.0  # Δ²/(2σ²) = 9/9
        assert dg.rdp(3) == 3.0

    @pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(1), Fraction(10)])
    def test_variance_and_pmf_against_exact_sums(self, sigma2: Fraction) -> None:
        weights = _discrete_gaussian_weights(sigma2, 60)
        variance = float(mpmath.fsum(y * y * w for y, w in weights.items()))
        dg = DiscreteGaussian(sigma2)
        assert dg.variance == pytest.approx(variance, rel=1e-12)
        # CKS Prop 21: strictly below σ²; the gap is ~1e-85 at σ² = 10, below float resolution.
        assert dg.variance <= sigma2
        if sigma2 <= 1:
            assert dg.variance < sigma2
        for k in (0, 1, 3):
            assert dg.pmf(k) == pytest.approx(float(weights[k]), rel=1e-12)

    @pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(2), Fraction(25, 4)])
    @pytest.mark.parametrize("alpha", [0.0, 1e-6, 0.01, 0.3, 0.5, 0.9, 1.0])
    def test_tradeoff_against_neyman_pearson_by_enumeration(
        self, sigma2: Fraction, alpha: float
    ) -> None:
        pmf = _discrete_gaussian_weights(sigma2, 60)
        expected = _brute_force_tradeoff(pmf, 1, alpha)
        assert DiscreteGaussian(sigma2).tradeoff(alpha) == pytest.approx(expected, abs=1e-12)

    def test_epsilon_inverts_delta_without_under_reporting(self) -> None:
        dg = DiscreteGaussian(16)
        eps = dg.epsilon(1e-6)
        assert dg.delta(eps) <= 1e-6
        assert dg.delta(eps * (1 - 1e-9)) > 1e-6

    def test_calibrate_meets_the_target(self) -> None:
        dg = DiscreteGaussian.calibrate(epsilon=1.0, delta=1e-6)
        assert dg.delta(1.0) <= 1e-6
        assert isinstance(dg.sigma2, Fraction)

    def test_confidence_interval_coverage_is_exact(self) -> None:
        sigma2 = Fraction(10)
        pmf = _discrete_gaussian_weights(sigma2, 60)
        ci = DiscreteGaussian(sigma2).confidence_interval(0.95, value=100)
        h = ci.high - 100
        assert ci.low == 100 - h
        inside = float(mpmath.fsum(pmf[y] for y in range(-h, h + 1)))
        smaller = float(mpmath.fsum(pmf[y] for y in range(-h + 1, h)))
        assert inside >= 0.95 > smaller

    @pytest.mark.parametrize("sigma2", [Fraction(1, 10**6), Fraction(1, 3), 2, 37, 10**4, 10**9])
    @pytest.mark.parametrize(
        "level", [1e-9, 0.3, 0.9, 0.95, 0.999, 1 - 1e-9, 1 - 2**-52, 1 - 2**-53]
    )
    def test_confidence_interval_is_the_smallest_by_a_linear_scan(
        self, sigma2: Fraction | int, level: float
    ) -> None:
        """The search that starts at the continuous quantile returns the smallest half-width
        whose tail passes, as a scan from 0 (over the same exact tail) finds it."""
        dg = DiscreteGaussian(sigma2)
        h = dg.confidence_interval(level).high
        tail = (1 - level) / 2
        assert dg._sf(h) <= tail
        assert h == 0 or dg._sf(h - 1) > tail
        if h < 2000:  # the scan itself, where it is short
            assert h == next(k for k in range(h + 1) if dg._sf(k) <= tail)

    @pytest.mark.parametrize(
        ("kwargs", "error", "message"),
        [
            ({"sigma2": 0}, ValueError, "sigma2 must be a finite positive rational number"),
            ({"sigma2": float("nan")}, ValueError, "sigma2 must be a finite positive rational"),
            ({"sigma2": "x/2"}, ValueError, "sigma2 must be a finite positive rational"),
            (
                {"sigma2": 1, "sensitivity": 1.5},
                ValueError,
                "sensitivity must be an integer >= 1, got 1.5",
            ),
            (
                {"sigma2": 1, "sensitivity": 0},
                ValueError,
                "sensitivity must be an integer >= 1, got 0",
            ),
        ],
    )
    def test_bad_construction(
        self, kwargs: dict[str, object], error: type[Exception], message: str
    ) -> None:
        with pytest.raises(error, match=f"^{message}"):
            DiscreteGaussian(**kwargs)  # type: ignore[arg-type]


class TestDiscreteLaplace:
    def test_pure_and_approximate_privacy(self) -> None:
        dl = DiscreteLaplace(Fraction(5, 2), sensitivity=2)
        assert dl.pure_epsilon == 0.8
        assert dl.rho == pytest.approx(0.32, rel=1e-15)
        assert dl.delta(0.8) == 0.0
        assert dl.delta(0.5) > 0
        eps = dl.epsilon(1e-3)
        assert eps <= 0.8
        assert dl.delta(eps) <= 1e-3

    def test_variance_and_pmf_against_exact_sums(self) -> None:
        t = mpmath.mpf(3)
        with mpmath.workdps(40):
            weights = {k: mpmath.exp(-abs(k) / t) for k in range(-400, 401)}
            total = mpmath.fsum(weights.values())
            variance = mpmath.fsum(k * k * w for k, w in weights.items()) / total
            dl = DiscreteLaplace(3)
            assert dl.variance == pytest.approx(float(variance), rel=1e-12)
            assert dl.pmf(2) == pytest.approx(float(weights[2] / total), rel=1e-12)

    def test_bad_construction(self) -> None:
        with pytest.raises(ValueError, match=r"^scale must be a finite positive rational number"):
            DiscreteLaplace(-1)


class TestLaplace:
    @pytest.mark.parametrize("epsilon", [0.0, 0.3, 0.9])
    def test_delta_against_numerical_integration(self, epsilon: float) -> None:
        b, shift = 1.0, 1.0

        def excess(y: float) -> float:
            p = stats.laplace.pdf(y, scale=b)
            q = stats.laplace.pdf(y, loc=shift, scale=b)
            return float(max(0.0, p - math.exp(epsilon) * q))

        expected, _ = integrate.quad(
            excess, -50, 50, points=[0.0, (shift - epsilon * b) / 2, shift], limit=200
        )
        assert Laplace(scale=b).delta(epsilon) == pytest.approx(expected, abs=1e-10)

    def test_epsilon_inverts_delta(self) -> None:
        lap = Laplace(scale=0.5)
        for delta in (1e-6, 0.1, 0.5):
            assert lap.delta(lap.epsilon(delta)) == pytest.approx(delta, rel=1e-12)
        assert lap.delta(2.0) == 0.0
        assert lap.variance == 0.5


def test_all_mechanisms_expose_the_same_views() -> None:
    mechanisms = [Gaussian(1.0), DiscreteGaussian(1), DiscreteLaplace(1), Laplace(1.0)]
    for mechanism in mechanisms:
        assert mechanism.rho > 0
        assert 0 <= mechanism.delta(0.5) < 1
        assert mechanism.epsilon(1e-6) >= 0
        assert np.isfinite(mechanism.variance)
