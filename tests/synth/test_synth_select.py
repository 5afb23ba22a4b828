"""The exponential mechanism sampled with exact coins: its distribution and its validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from gaussdp.random import ChaCha20Random
from gaussdp.synth import exponential_mechanism


def _exact_pmf(scores: list[int], epsilon: float, sensitivity: int) -> np.ndarray:
    # exp(ε q / (2Δ)) normalised, computed directly (not by the sampler under test).
    w = np.array([math.exp(epsilon * q / (2 * sensitivity)) for q in scores])
    return w / w.sum()


@pytest.mark.parametrize(
    ("scores", "epsilon", "sensitivity"),
    [([0, 1, 2, 3, 5], 1.0, 1), ([10, 10, 4, 0], 0.7, 2), ([3, 7], 2.5, 3)],
)
def test_distribution_matches_the_exact_pmf(
    scores: list[int], epsilon: float, sensitivity: int
) -> None:
    rng = ChaCha20Random(2024)
    n = 3000
    draws = [
        exponential_mechanism(scores, epsilon=epsilon, sensitivity=sensitivity, rng=rng)
        for _ in range(n)
    ]
    observed = np.bincount(draws, minlength=len(scores))
    expected = n * _exact_pmf(scores, epsilon, sensitivity)
    assert expected.min() >= 10
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    # α = 1e-6 false-alarm rate per test: chi-square critical value, len − 1 dof.
    assert chi2 < stats.chi2.isf(1e-6, len(scores) - 1)


def test_epsilon_zero_is_uniform_and_a_single_candidate_is_chosen() -> None:
    rng = ChaCha20Random(5)
    n = 3000
    draws = [
        exponential_mechanism([0, 1000, 5], epsilon=0.0, sensitivity=1, rng=rng) for _ in range(n)
    ]
    observed = np.bincount(draws, minlength=3)
    chi2 = float(((observed - n / 3) ** 2 / (n / 3)).sum())
    assert chi2 < stats.chi2.isf(1e-6, 2)  # α = 1e-6
    assert exponential_mechanism([7], epsilon=1.0, sensitivity=1, rng=rng) == 0


def test_a_huge_gap_makes_the_best_certain_and_stays_exact() -> None:
    # γ = 1e6 for the worse candidate: P = e^{-1e6}, which a float would round to 0 anyway;
    # the sampler gets there with exact coins and returns in a few rounds.
    rng = ChaCha20Random(9)
    assert all(
        exponential_mechanism([0, 2_000_000], epsilon=1.0, sensitivity=1, rng=rng) == 1
        for _ in range(50)
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"scores": [], "epsilon": 1.0, "sensitivity": 1}, ValueError, "scores must be"),
        ({"scores": [1, 2.5], "epsilon": 1.0, "sensitivity": 1}, ValueError, "score must be"),
        ({"scores": [1], "epsilon": -1.0, "sensitivity": 1}, ValueError, "epsilon must be"),
        ({"scores": [1], "epsilon": 1.0, "sensitivity": 0}, ValueError, "sensitivity must be"),
        ({"scores": "ab", "epsilon": 1.0, "sensitivity": 1}, ValueError, "scores must be"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        exponential_mechanism(**kwargs, rng=ChaCha20Random(1))


def test_a_seed_is_not_a_random_source() -> None:
    with pytest.raises(TypeError):
        exponential_mechanism([1, 2], epsilon=1.0, sensitivity=1, rng=3)  # type: ignore[arg-type]
