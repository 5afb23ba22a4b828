"""Calibration (certified, tight) and bad input (clear errors, state unchanged)."""

from __future__ import annotations

import math

import pytest

from gaussdp.accounting import (
    PLDAccountant,
    PrivacyLossDistribution,
    Subsampled,
    calibrate_noise,
    calibrate_noise_multiplier,
)
from gaussdp.accounting.events import DiscreteGaussianVector
from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace

Q = 256 / 60000


def _eps(sigma: float, rate: float, steps: int, delta: float) -> float:
    return PLDAccountant().compose(Subsampled(Gaussian(sigma), rate), steps).epsilon(delta).upper


def test_noise_multiplier_for_epsilon_3_is_certified_and_tight() -> None:
    sigma = calibrate_noise_multiplier(3.0, 1e-5, Q, 14063)
    assert _eps(sigma, Q, 14063, 1e-5) <= 3.0  # certified
    assert _eps(sigma * (1 - 1e-3), Q, 14063, 1e-5) > 3.0  # within 1e-3 relative


# 0.005 is below the RDP floor ln(1/δ)/1023 ≈ 0.0135 of orders ≤ 1024: the PLD alone decides.
@pytest.mark.parametrize(
    ("target", "rate", "steps"), [(1.0, 0.01, 1000), (8.0, 0.1, 100), (0.005, 1e-3, 10_000)]
)
def test_noise_multiplier_other_cases(target: float, rate: float, steps: int) -> None:
    sigma = calibrate_noise_multiplier(target, 1e-6, rate, steps, rtol=1e-2)
    assert _eps(sigma, rate, steps, 1e-6) <= target
    assert _eps(sigma * (1 - 1e-2), rate, steps, 1e-6) > target


def test_calibrate_noise_gaussian_is_exact() -> None:
    g = calibrate_noise("gaussian", 1.0, 1e-5, count=10)
    assert isinstance(g, Gaussian)
    assert PLDAccountant().compose(g, 10).epsilon(1e-5).upper == pytest.approx(1.0, rel=1e-8)


@pytest.mark.parametrize("family", ["discrete_gaussian", "discrete_laplace", "laplace"])
def test_calibrate_noise_other_families(family: str) -> None:
    mech = calibrate_noise(family, 1.0, 1e-6, count=20, rtol=1e-2)  # type: ignore[arg-type]
    assert PLDAccountant().compose(mech, 20).epsilon(1e-6).upper <= 1.0


def test_calibrate_noise_rejects_unknown_family() -> None:
    with pytest.raises(ValueError, match=r"^family must be one of"):
        calibrate_noise("cauchy", 1.0, 1e-6)  # type: ignore[arg-type]


# -- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize("rate", [0.0, -0.1, 1.5, math.nan, math.inf])
def test_sampling_rate_outside_unit_interval(rate: float) -> None:
    with pytest.raises(ValueError, match=r"^sample_rate must be a real number in \(0, 1\], got "):
        Subsampled(Gaussian(1.0), rate)
    with pytest.raises(ValueError, match=r"^sample_rate must be a real number in \(0, 1\], got "):
        calibrate_noise_multiplier(1.0, 1e-5, rate, 10)
    with pytest.raises(ValueError, match=r"^sample_rate must be a real number in \(0, 1\], got "):
        PrivacyLossDistribution.from_subsampled_gaussian(1.0, rate)


def test_sampling_rate_type() -> None:
    with pytest.raises(TypeError, match=r"^sample_rate must be"):
        Subsampled(Gaussian(1.0), "0.1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^mechanism must be a Gaussian"):
        Subsampled("gaussian", 0.1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^scheme must be 'poisson'"):
        Subsampled(Gaussian(1.0), 0.1, scheme="shuffle")  # type: ignore[arg-type]


@pytest.mark.parametrize("steps", [0, -5, 1.5])
def test_steps_below_one(steps: float) -> None:
    with pytest.raises(ValueError, match=r"^steps must be an integer in \[1, 2\*\*53\], got "):
        calibrate_noise_multiplier(1.0, 1e-5, 0.01, steps)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^count must be an integer in \[1, 2\*\*53\], got "):
        PrivacyLossDistribution.from_gaussian(1.0).self_compose(steps)  # type: ignore[arg-type]


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-9, 2.0])
def test_delta_outside_unit_interval(delta: float) -> None:
    with pytest.raises(ValueError, match=r"^delta must be a real number in \(0, 1\), got "):
        calibrate_noise_multiplier(1.0, delta, 0.01, 10)
    with pytest.raises(ValueError, match=r"^delta must be a real number in \(0, 1\), got "):
        PrivacyLossDistribution.from_gaussian(1.0).epsilon(delta)


def test_non_mechanism_event_leaves_accountant_unchanged() -> None:
    acc = PLDAccountant().compose(Subsampled(Gaussian(1.0), 0.01), 10)
    before = acc.epsilon(1e-5)
    for bad in ("gaussian", None, 3, Subsampled):
        with pytest.raises(TypeError, match=r"^event must be a mechanism"):
            acc.compose(bad)  # type: ignore[arg-type]
    assert acc.count == 10
    assert acc.epsilon(1e-5) == before


def test_discrete_gaussian_vector_validation() -> None:
    with pytest.raises(ValueError, match=r"^sensitivities must be a sequence with a positive"):
        DiscreteGaussianVector(4, (0, 0))
    with pytest.raises(ValueError, match=r"^sensitivities must be an integer >= 0"):
        DiscreteGaussianVector(4, (1, -1))
    with pytest.raises(TypeError, match=r"^sensitivities must be a sequence of integers"):
        DiscreteGaussianVector(4, 3)  # type: ignore[arg-type]
    assert DiscreteGaussianVector(4, [1, 2]).sensitivities == (1, 2)  # type: ignore[arg-type]


def test_edge_values() -> None:
    acc = PLDAccountant().compose(Laplace(scale=1.0))
    # Pure ε-DP: δ = 0 at ε ≥ Δ/b, up to the grid step.
    assert acc.delta(1.0 + 1e-3).upper == pytest.approx(0.0, abs=1e-12)
    assert acc.epsilon(0.999999).upper == 0.0  # δ(0) = 1 − e^{−1/2} ≈ 0.39 ≤ 0.999999
    dl = PLDAccountant().compose(DiscreteLaplace(1), 3)
    assert dl.delta(3.0 + 1e-3).upper == pytest.approx(0.0, abs=1e-9)  # FFT allowance
    assert PLDAccountant().compose(DiscreteGaussian(1)).delta(0.0).upper <= 1.0


def test_losses_beyond_the_cap_fall_back_to_the_labelled_rdp_bound() -> None:
    # Laplace with ε₀ = 100 nats: losses beyond 64 nats are not resolved on the grid, so
    # the PLD alone certifies nothing; the accountant returns the RDP bound, labelled.
    acc = PLDAccountant().compose(Laplace(scale=0.01))
    assert acc.pld().epsilon(1e-6).upper == math.inf
    b = acc.epsilon(1e-6)
    assert b.method == "rdp"
    assert "cannot certify" in b.note
    assert 100.0 <= b.upper < 100.1  # pure 100-DP; RDP (Mironov 2017 Prop 6) is near it
    assert 63.0 < b.lower <= 100.0


@pytest.mark.parametrize(
    ("p", "q"),
    [([0.5, 0.6], [0.5, 0.5]), ([0.5, -0.1], [0.5, 0.5]), ([0.5], [0.5, 0.5]), ([], [])],
)
def test_from_distributions_validates(p: list[float], q: list[float]) -> None:
    with pytest.raises(ValueError, match=r"^(p|q) must be"):
        PrivacyLossDistribution.from_distributions(p, q)


def test_huge_target_epsilon_is_refused_at_once() -> None:
    # It used to search for minutes toward σ → 0 (audit21 cal_hang.py).
    with pytest.raises(
        ValueError, match=r"^target_epsilon must be a real number in \(0, 100\] .*, got 1e\+308$"
    ):
        calibrate_noise_multiplier(1e308, 1e-5, 0.01, 100)


@pytest.mark.parametrize("rate", [5e-324, 1e-12, 1e-8])
def test_sample_rate_needing_no_noise_is_refused(rate: float) -> None:
    # 1 - (1 - q)^100 <= δ: (0, δ)-DP without noise, no smallest σ (it used to hang or
    # blame value_discretization, which the caller never set).
    with pytest.raises(ValueError, match=r"^sample_rate must be large enough that 1 - \(1 - "):
        calibrate_noise_multiplier(1.0, 1e-5, rate, 100)


def test_search_grid_too_fine_falls_back_to_the_accountants_grid() -> None:
    from gaussdp.accounting.calibration import _pld_epsilon

    event = Subsampled(Gaussian(0.3), 1e-5)
    with pytest.raises(ValueError, match=r"^value_discretization must be at least"):
        PLDAccountant(value_discretization=1e-9).compose(event, 100).epsilon(1e-5)
    assert _pld_epsilon(event, 100, 1e-5, 1e-9) == _pld_epsilon(event, 100, 1e-5)
