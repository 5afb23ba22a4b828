"""Empirical audits: Clopper–Pearson, ε lower bounds, and audits that never exceed the certificate.

Known answers: the Clopper–Pearson interval is checked against the exact binomial
tail it inverts (scipy.stats.binom); the ε lower bound against a closed-form
Gaussian pair. Audits of gaussdp's release and DP-SGD are small (seconds) and check
0 ≤ audited ε ≤ certified ε; docs/audit.md reports larger runs.
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom

from gaussdp.audit.empirical import audit_dpsgd, audit_outputs, audit_table_release
from gaussdp.audit.stats import clopper_pearson, epsilon_lower_bound
from gaussdp.privacy import gdp_epsilon
from gaussdp.random import ChaCha20Random
from gaussdp.release import Budget, Release


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (50, 100), (99, 100), (100, 100)])
def test_clopper_pearson_inverts_the_binomial_tail(k: int, n: int) -> None:
    lo, hi = clopper_pearson(k, n, 0.05)
    # At the bounds the one-sided tail probability is exactly α/2.
    if k > 0:
        assert binom.sf(k - 1, n, lo) == pytest.approx(0.025, rel=1e-6)
    else:
        assert lo == 0.0
    if k < n:
        assert binom.cdf(k, n, hi) == pytest.approx(0.025, rel=1e-6)
    else:
        assert hi == 1.0


def test_epsilon_lower_bound_is_below_the_truth_for_a_gaussian_pair() -> None:
    # N(1, 1) vs N(0, 1) is exactly 1-GDP; a threshold test at 0.5 has
    # TPR = Φ(0.5), FPR = Φ(−0.5). With many runs the bound approaches ln(TPR/FPR)
    # but stays below ε(δ) of 1-GDP.
    rng = np.random.default_rng(0)
    inside, outside = rng.normal(1.0, 1.0, 20000), rng.normal(0.0, 1.0, 20000)
    result = audit_outputs(inside, outside, epsilon_certified=gdp_epsilon(1.0, 1e-5), delta=1e-5)
    assert 0.5 < result.epsilon_lower < result.epsilon_certified
    assert "audited ε ≥" in str(result)
    assert epsilon_lower_bound(10, 20, 10, 20) == 0.0
    assert math.isclose(epsilon_lower_bound(5, 10, 0, 10, delta=0.9), 0.0)


def test_audit_outputs_refuses_too_few_runs() -> None:
    with pytest.raises(ValueError, match="at least 4 runs"):
        audit_outputs([1.0, 2.0], [0.0, 1.0], epsilon_certified=1.0, delta=1e-6)


def test_table_release_audit_stays_below_the_certificate() -> None:
    # One unit holds the whole sum: the signal is the full sensitivity (1000).
    data = pd.DataFrame({"user": list(range(20)), "x": [1000.0] + [0.0] * 19})

    def build(frame: pd.DataFrame) -> Release:
        return Release(
            frame,
            privacy_unit="user",
            budget=Budget(epsilon=4.0, delta=1e-6),
            max_groups_per_unit=1,
            max_rows_per_group=1,
        ).sum("x", bounds=(0, 1000))

    result = audit_table_release(
        data, build, privacy_unit="user", unit=0, runs=12, rng=ChaCha20Random(1)
    )
    assert 0.0 <= result.epsilon_lower <= result.epsilon_certified
    assert result.epsilon_certified == pytest.approx(4.0, rel=1e-6)
    with pytest.raises(ValueError, match="unit must be"):
        audit_table_release(data, build, privacy_unit="user", unit=99, runs=12)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs the torch extra")
def test_dpsgd_audit_steps_must_be_a_count() -> None:
    with pytest.raises(ValueError, match=r"^steps must be an integer in \[1, 2\*\*53\], got 1.0$"):
        audit_dpsgd(runs=8, noise_multiplier=1.0, steps=1.0)  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs the torch extra")
@pytest.mark.usefixtures("one_torch_thread")
def test_dpsgd_canary_audit_is_positive_and_below_the_certificate() -> None:
    # Weak noise and one step: the canary is visible, so 10 held-out runs per world
    # give a positive bound; it must stay below the PLD-certified ε.
    result = audit_dpsgd(
        runs=20, noise_multiplier=0.1, steps=1, examples=9, batch_size=9, rng=ChaCha20Random(0)
    )
    assert 0.0 < result.epsilon_lower <= result.epsilon_certified
