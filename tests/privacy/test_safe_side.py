"""The GDP and zCDP inversions go through the one safe-side search: never on the unsafe side.

Each result is checked against the forward map it inverts (evaluated independently with
mpmath at 50 digits) and against the next float on the other side (tightness).
"""

from __future__ import annotations

import math

import mpmath
import pytest

from gaussdp._search import ULP_TOL, bracketed_root, smallest_passing_score
from gaussdp.privacy import analytic_gaussian_sigma, gdp_epsilon, gdp_mu, zcdp_epsilon, zcdp_rho

MPMATH_DPS = 50  # the mpmath precision of every test here (conftest.py)
CASES = [(mu, d) for mu in (0.05, 0.5, 1.0, 3.0, 20.0) for d in (1e-12, 1e-6, 1e-2)]


def _gdp_delta_exact(mu: float, eps: float) -> mpmath.mpf:
    """DRS Cor 2.13: δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), at 50 digits."""
    m, e = mpmath.mpf(mu), mpmath.mpf(eps)
    return mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2)


@pytest.mark.parametrize(("mu", "delta"), CASES)
def test_gdp_epsilon_is_on_the_safe_side(mu: float, delta: float) -> None:
    eps = gdp_epsilon(mu, delta)
    if eps == 0.0:
        assert _gdp_delta_exact(mu, 0.0) <= delta
        return
    assert _gdp_delta_exact(mu, eps) <= delta  # never under-reported
    # ... and tight: a slightly smaller ε misses δ (the margin is 1e-10 relative in δ).
    assert _gdp_delta_exact(mu, eps * (1 - 1e-8)) > delta * (1 - 1e-9)


@pytest.mark.parametrize(
    ("eps", "delta"), [(e, d) for e in (0.0, 0.1, 1.0, 8.0) for d in (1e-9, 1e-3)]
)
def test_gdp_mu_and_sigma_are_on_the_safe_side(eps: float, delta: float) -> None:
    mu = gdp_mu(eps, delta)
    assert _gdp_delta_exact(mu, eps) <= delta
    assert _gdp_delta_exact(mu * (1 + 1e-8), eps) > delta * (1 - 1e-9)
    sigma = analytic_gaussian_sigma(eps, delta, 2.0)
    assert _gdp_delta_exact(2.0 / sigma, eps) <= delta
    assert sigma <= 2.0 / mu * (1 + 1e-12)


@pytest.mark.parametrize(("eps", "delta"), [(e, d) for e in (0.1, 1.0, 8.0) for d in (1e-9, 1e-3)])
def test_zcdp_rho_is_on_the_safe_side(eps: float, delta: float) -> None:
    rho = zcdp_rho(eps, delta)
    assert zcdp_epsilon(rho, delta) <= eps
    assert zcdp_epsilon(rho * (1 + 1e-8), delta) > eps


def test_bracketed_root_finds_the_zero() -> None:
    root = bracketed_root(lambda x: x**3 - 2.0, 0.0, 2.0)
    assert abs(root - 2.0 ** (1 / 3)) <= 2 * ULP_TOL * root
    assert bracketed_root(lambda x: math.expm1(x), -1.0, 1.0) == 0.0


@pytest.mark.parametrize("threshold", [1e-3, 0.37, 2.0, 1e5])
def test_secant_search_returns_an_evaluated_passing_point(threshold: float) -> None:
    seen: dict[float, float] = {}

    def score(x: float) -> float:
        # Non-increasing and kinked (the secant is a poor model), passing from ``threshold``.
        value = threshold - x if x < threshold else -math.sqrt(x - threshold)
        seen[x] = value
        return value

    x = smallest_passing_score(score, 0.0, 2 * threshold + 1, rel_tol=1e-9)
    assert x in seen
    assert seen[x] <= 0.0
    assert threshold <= x <= threshold * (1 + 1e-9) + 1e-300
    assert len(seen) < 200
    with pytest.raises(ValueError, match="^bracket must be one whose upper end passes"):
        smallest_passing_score(score, 0.0, threshold / 2)
