"""The scalar reference (CKS Alg 1-3) against exact probabilities."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from sampling_stats import Z_CRIT, bin_counts, chi2_gof, make_bins

from gaussdp.privacy import DiscreteGaussianDistribution, DiscreteLaplaceDistribution
from gaussdp.random import ChaCha20Random
from gaussdp.sampling import bernoulli_exp, discrete_gaussian_scalar, discrete_laplace_scalar


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2)])
def test_bernoulli_exp_frequency(gamma: Fraction) -> None:
    # 20,000 draws, z-test against exp(-gamma): |z| < 4.89 at alpha = 1e-6.
    rng = ChaCha20Random(20)
    n = 20_000
    hits = sum(bernoulli_exp(gamma, rng=rng) for _ in range(n))
    p = math.exp(-float(gamma))
    if gamma == 0:
        assert hits == n
        return
    assert abs(hits - n * p) / math.sqrt(n * p * (1 - p)) < Z_CRIT


def test_bernoulli_exp_refuses_negative_gamma() -> None:
    with pytest.raises(ValueError, match="gamma must be a rational number >= 0, got"):
        bernoulli_exp(Fraction(-1, 2), rng=ChaCha20Random(0))


def _cdf_from_pmf(dist):  # type: ignore[no-untyped-def]
    def cdf(k: int) -> float:
        return float(sum(dist.pmf(j) for j in range(-80, k + 1)))

    return cdf


@pytest.mark.parametrize("sigma2", [Fraction(1, 4), 3, Fraction(50, 3)], ids=str)
def test_scalar_gaussian_matches_exact_pmf(sigma2: Fraction | int) -> None:
    n = 12_000
    edges, probs = make_bins(range(-40, 41), _cdf_from_pmf(DiscreteGaussianDistribution(sigma2)), n)
    rng = ChaCha20Random(21)
    sample = np.array([discrete_gaussian_scalar(sigma2, rng=rng) for _ in range(n)])
    stat, crit = chi2_gof(bin_counts(sample, edges), probs)
    assert stat < crit, (stat, crit)  # chi-square, alpha = 1e-6


@pytest.mark.parametrize("scale", [Fraction(1, 3), Fraction(5, 2)], ids=str)
def test_scalar_laplace_matches_exact_pmf(scale: Fraction) -> None:
    n = 12_000
    edges, probs = make_bins(range(-60, 61), _cdf_from_pmf(DiscreteLaplaceDistribution(scale)), n)
    rng = ChaCha20Random(22)
    sample = np.array([discrete_laplace_scalar(scale, rng=rng) for _ in range(n)])
    stat, crit = chi2_gof(bin_counts(sample, edges), probs)
    assert stat < crit, (stat, crit)  # chi-square, alpha = 1e-6


def test_scalar_huge_sigma_returns_python_ints() -> None:
    rng = ChaCha20Random(23)
    values = [discrete_gaussian_scalar(10**100, rng=rng) for _ in range(200)]
    assert all(isinstance(v, int) for v in values)
    assert max(abs(v) for v in values) > 10**48


@pytest.mark.parametrize("bad", [0, -2, float("nan"), "x", None])
def test_scalar_refuses_bad_parameters(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="sigma2 must be a finite positive rational"):
        discrete_gaussian_scalar(bad, rng=ChaCha20Random(0))
    with pytest.raises((TypeError, ValueError), match="scale must be a finite positive rational"):
        discrete_laplace_scalar(bad, rng=ChaCha20Random(0))
    with pytest.raises(TypeError, match=r"ChaCha20Random\(seed\)"):
        discrete_gaussian_scalar(2, rng=7)  # type: ignore[arg-type]
