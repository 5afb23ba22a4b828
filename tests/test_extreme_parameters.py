"""Extreme but finite parameters: a clear ValueError or ∞, never a raw OverflowError.

Privacy quantities (ε, δ, ρ) past the float range become ∞, the safe side; a
variance or sensitivity whose true value exceeds the float range is ∞ too.
"""

from __future__ import annotations

import math
from fractions import Fraction

from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace, LatticeGaussian

BIG = 1.7976931348623157e308  # the largest float


def test_discrete_gaussian_calibrate_at_huge_epsilon_meets_delta() -> None:
    mech = DiscreteGaussian.calibrate(epsilon=1e308, delta=1e-308)
    assert mech.sigma2 > 0
    assert mech.delta(1e308) <= 1e-308


def test_lattice_delta_with_huge_sensitivity_is_a_tiny_bound() -> None:
    lattice = Gaussian(1e308, 1e308).lattice()
    # μ = 1 at ε = 1e308: the exact δ underflows; the certified one must too, without raising.
    assert 0.0 <= lattice.delta(1e308) < 1e-300


def test_gaussian_calibrate_with_tiny_sensitivity_gives_a_positive_sigma() -> None:
    sigma = Gaussian.calibrate(epsilon=1e308, delta=1e-308, sensitivity=1e-308).sigma
    assert sigma > 0
    assert Gaussian(sigma, 1e-308).delta(1e308) <= 1e-308


def test_lattice_sensitivity_and_rho_past_the_float_range_are_inf() -> None:
    lattice = LatticeGaussian(gamma=2.0**1000, sigma2=Fraction(10), dim=1, sensitivity=BIG)
    # Δ + γ > the largest float, and ρ = L²/(2σ²) with L = ⌊Δ/γ⌋ + 1 = 2^24 is finite.
    assert lattice.effective_sensitivity == math.inf
    assert lattice.rho == float(Fraction(2**48, 20))


def test_rho_past_the_float_range_is_inf() -> None:
    assert DiscreteGaussian(1e308, 10**400).rho == math.inf  # Δ²/(2σ²) ≈ 5e491
    assert DiscreteLaplace(1e-308).rho == math.inf  # (Δ/t)²/2 ≈ 5e615
    assert Laplace(1e-308, 1e308).rho == math.inf


def test_variance_past_the_float_range_is_inf() -> None:
    assert Laplace(1e308, 1e308).variance == math.inf  # 2b² ≈ 2e616


def test_ordinary_values_are_unchanged() -> None:
    assert Laplace(2.0).variance == 8.0
    assert Laplace(0.5).rho == 2.0
    assert DiscreteLaplace(Fraction(1, 2)).rho == 2.0
    assert DiscreteGaussian(Fraction(1, 2), 3).rho == 9.0
