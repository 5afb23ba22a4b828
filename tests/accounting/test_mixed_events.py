"""Compositions of several distinct events: lattices first, the pooled grid, loose pairs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import ndtr

from gaussdp.accounting import ExponentialMechanism, PLDAccountant, PureDP, Subsampled
from gaussdp.accounting.pld import PrivacyLossDistribution
from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian


def _gaussian_curve(mu: float, eps: np.ndarray) -> np.ndarray:
    """δ(ε) of the Gaussian pair with μ, for every real ε (DRS Cor 2.13)."""
    return np.asarray(ndtr(-eps / mu + mu / 2) - np.exp(eps) * ndtr(-eps / mu - mu / 2))


def _exact_dg_then_gaussian(s2: int, k: int, sigma: float, eps: float) -> float:
    """δ(ε) of k runs of N_Z(0, s2) (Δ = 1) and one Gaussian N(0, σ²), summed exactly.

    The k-fold loss is (k − 2S)/(2σ²) for S the sum of k discrete Gaussians (CKS Thm 7
    proof), whose law is a k-fold convolution; the Gaussian's curve is then averaged over
    it: δ(ε) = Σ_S P(S) δ_G(ε − L(S)).
    """
    ys = np.arange(-60, 61)
    p = np.exp(-(ys**2) / (2 * s2))
    p /= p.sum()
    law = p
    for _ in range(k - 1):
        law = np.convolve(law, p)
    sums = np.arange(-60 * k, 60 * k + 1)
    losses = (k - 2 * sums) / (2 * s2)
    return float(np.sum(law * _gaussian_curve(1 / sigma, eps - losses)))


def test_lattice_first_brackets_the_exact_composition_and_narrows_it() -> None:
    # Five runs of a discrete Gaussian (losses on the lattice 1/18) and one Gaussian, on
    # h = 1e-3: composed on the lattice and moved to h once, both bounds hold against
    # the exact sum and the bracket is narrower than composing every run on h.
    s2, k, sigma, h = 9, 5, 2.0, 1e-3
    acc = PLDAccountant(value_discretization=h)
    acc.compose(DiscreteGaussian(s2), k).compose(Gaussian(sigma))
    naive = (
        PrivacyLossDistribution.from_discrete_gaussian(s2, value_discretization=h)
        .self_compose(k)
        .compose(PrivacyLossDistribution.from_gaussian(sigma, value_discretization=h))
    )
    for eps in (0.0, 0.5, 1.0, 2.0, 3.0):
        exact = _exact_dg_then_gaussian(s2, k, sigma, eps)
        b, n = acc.delta(eps), naive.delta(eps)
        assert b.lower <= exact <= b.upper
        assert b.upper - b.lower < (n.upper - n.lower) / 3
        assert b.upper - exact < 1e-5 * exact


@pytest.mark.parametrize("h", [0.01, 0.003, 1e-3])
def test_regridded_keeps_both_sides(h: float) -> None:
    # Discrete Laplace t = 2 and the (ε, δ) worst case (mass at +∞) on their lattices,
    # self-composed: the regridded upper never falls below the lattice's upper, the
    # regridded lower never rises above the lattice's lower.
    cases = [
        PrivacyLossDistribution.from_discrete_laplace(2, value_discretization=0.5),
        PrivacyLossDistribution.from_approx_dp(0.5, 1e-3),
    ]
    for lattice in cases:
        composed = lattice.self_compose(4)
        moved = composed.regridded(h)
        assert moved.value_discretization == h
        for eps in np.linspace(0.0, 2.5, 26):
            on, off = composed.delta(float(eps)), moved.delta(float(eps))
            assert off.upper >= on.upper
            assert off.lower <= on.lower
    same = cases[0].regridded(0.5)
    assert same is cases[0]


def test_the_mix_bracket_meets_the_tolerance_on_a_coarse_pooled_grid() -> None:
    # 5 subsampled Gaussians, 3 discrete Gaussians, 2 discrete Laplace, 5 runs each: the
    # first grid comes from the pooled spread, where the bracket is within 1.1·tolerance
    # (the regridded lattices' O(h) part), and the bracket returned meets the tolerance:
    # the upper bound is proven within 1e-4 relative of the truth.
    acc = PLDAccountant()
    for k in range(5):
        acc.compose(Subsampled(Gaussian(0.8 + 0.1 * k), 0.01 * (k + 1)), 5)
    for k in range(3):
        acc.compose(DiscreteGaussian((6 + 3 * k) ** 2), 5)
    for k in range(2):
        acc.compose(DiscreteLaplace(8 + 4 * k), 5)
    h0 = acc.value_discretization
    b = acc.epsilon(1e-5)
    assert b.method == "pld"
    assert b.note == ""
    assert b.upper - b.lower <= 1e-4 * b.upper
    assert h0 / 4 <= acc.value_discretization < h0  # refined, but not far
    # A tiny-spread event with few runs takes only its share of the grid.
    assert acc.copy().compose(Subsampled(Gaussian(5.0), 1e-3), 5).value_discretization > h0 / 2


def test_a_bounded_range_mix_does_not_refine_for_nothing() -> None:
    # The bracket of ε-BR steps is wide because the dominating pair is not tight under
    # composition: a finer grid cannot narrow it, so the first grid is kept, and its
    # upper bound is within the tolerance of one on a grid four times finer.
    events = [(ExponentialMechanism(1.0), 5), (Subsampled(Gaussian(5.0), 1e-3), 10)]
    acc = PLDAccountant()
    for event, count in events:
        acc.compose(event, count)  # type: ignore[arg-type]
    h0 = acc.value_discretization
    b = acc.epsilon(1e-5)
    assert acc.value_discretization == h0
    assert b.method == "pld"
    assert "not tight" in b.note
    fine = PLDAccountant(value_discretization=h0 / 4)
    for event, count in events:
        fine.compose(event, count)  # type: ignore[arg-type]
    f = fine.epsilon(1e-5)
    assert b.upper >= f.upper * (1 - 1e-9)
    assert b.upper <= f.upper * (1 + 1e-4)
    assert math.isclose(b.lower, f.lower, rel_tol=1e-3)


def test_lemma_7_an_l1_error_moves_every_curve_value_by_at_most_itself() -> None:
    # |H_μ̃(x) − H_μ(x)| ≤ ‖μ̃ − μ‖₁ for every x ≥ 0 (each term (1 − x e^{−z})₊ is in
    # [0, 1]); regridded() turns a PMF's ℓ1 round-off bound into an additive δ term.
    rng = np.random.default_rng(7)
    losses = np.arange(-40, 41) * 0.05
    for _ in range(20):
        mu = rng.random(losses.size)
        mu /= mu.sum()
        noisy = np.maximum(mu + rng.normal(0.0, 1e-3, losses.size), 0.0)
        err = float(np.sum(np.abs(noisy - mu)))
        for x in np.exp(np.linspace(-3.0, 3.0, 61)):
            h_mu = np.sum(mu * np.maximum(1.0 - x * np.exp(-losses), 0.0))
            h_noisy = np.sum(noisy * np.maximum(1.0 - x * np.exp(-losses), 0.0))
            assert abs(h_noisy - h_mu) <= err * (1 + 1e-12)
    # The allowance of a lattice composition survives the move, on both sides.
    composed = PrivacyLossDistribution.from_discrete_laplace(
        2, value_discretization=0.5
    ).self_compose(50)
    moved = composed.regridded(0.01)
    for old, new in (
        (composed.upper_remove, moved.upper_remove),
        (composed.lower_remove, moved.lower_remove),
    ):
        assert old.fft_l1 > 0.0
        assert new.fft_l1 == 0.0
        assert new.slack >= old.slack + old.fft_l1


def test_pure_dp_runs_compose_on_their_lattice() -> None:
    # k runs of PureDP(ε₀): the loss is (k − 2i)ε₀ with binomial P-mass (randomised
    # response, KOV 2015 Thm 2.1 / 3.3); alone and with a Gaussian, against exact sums.
    eps0, k, sigma = 0.3, 10, 2.0
    a = 1 / (1 + math.exp(-eps0))
    i = np.arange(k + 1)
    law = np.array([math.comb(k, j) for j in i]) * a ** (k - i) * (1 - a) ** i
    losses = (k - 2 * i) * eps0
    alone = PLDAccountant().compose(PureDP(eps0), k)
    mixed = PLDAccountant().compose(PureDP(eps0), k).compose(Gaussian(sigma))
    for eps in (0.0, 0.5, 1.5, 2.5):
        exact = float(np.sum(law * np.maximum(1 - np.exp(eps - losses), 0.0)))
        b = alone.delta(eps)
        assert b.lower <= exact <= b.upper
        assert b.upper - b.lower <= 1e-9
        exact = float(np.sum(law * _gaussian_curve(1 / sigma, eps - losses)))
        m = mixed.delta(eps)
        assert m.lower <= exact <= m.upper
        assert m.upper - m.lower <= 1e-4 * exact
