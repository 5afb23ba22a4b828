"""The one-run audit (Steinke, Nasr, Jagielski 2023): its bound, and audits below the certificate.

Known answers:
- the δ = 0 p-value is the binomial tail with p = e^ε/(1 + e^ε), summed exactly
  with mpmath;
- the δ > 0 p-value against a direct mpmath transcription of SNJ Cor 5.4 (the
  maximum over every i = 1..m, not the cumulative loop of the implementation);
- the two ε lower bounds the paper prints (Appendix D and §7);
- validity: on randomized response, which is exactly ε₀-DP, the audited ε exceeds ε₀
  in at most an α fraction of runs.
"""

from __future__ import annotations

import importlib.util
import itertools
import math

import mpmath
import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom

from gaussdp.audit.one_run import (
    OneRunAuditResult,
    audit_dpsgd_one_run,
    audit_scores,
    audit_table_release_one_run,
    count_correct,
    one_run_epsilon_lower_bound,
    one_run_p_value,
)
from gaussdp.random import ChaCha20Random
from gaussdp.release import Budget, Release

MPMATH_DPS = 40  # the mpmath precision of every test here (conftest.py)


def _mp_tail(r: int, u: int, p: mpmath.mpf) -> mpmath.mpf:
    """P[Binomial(r, p) ≥ u], summed exactly (1 for u ≤ 0)."""
    return mpmath.fsum(
        mpmath.binomial(r, j) * p**j * (1 - p) ** (r - j) for j in range(max(u, 0), r + 1)
    )


def _mp_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """SNJ Cor 5.4 transcribed: f(v) + 2mδ max_{i=1..m} (f(v − i) − f(v))/i, at most 1."""
    p = mpmath.e ** mpmath.mpf(eps) / (1 + mpmath.e ** mpmath.mpf(eps))
    f_v = _mp_tail(r, v, p)
    slope = max((_mp_tail(r, v - i, p) - f_v) / i for i in range(1, m + 1))
    return float(min(f_v + 2 * m * mpmath.mpf(delta) * slope, 1))


@pytest.mark.parametrize(
    ("r", "v", "eps"), [(10, 10, 1.0), (10, 7, 0.5), (50, 40, 1.5), (200, 150, 0.8), (7, 0, 2.0)]
)
def test_pure_dp_p_value_is_the_binomial_tail(r: int, v: int, eps: float) -> None:
    p = mpmath.e**eps / (1 + mpmath.e**eps)
    expected = float(_mp_tail(r, v, p))
    assert one_run_p_value(1000, r, v, eps, 0.0) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize(
    ("m", "r", "v", "eps", "delta"),
    [
        (20, 10, 9, 1.0, 1e-3),
        (30, 30, 25, 0.7, 1e-2),
        (40, 12, 12, 2.0, 1e-4),
        (25, 20, 4, 0.3, 0.05),
        (60, 50, 45, 1.2, 1e-5),
    ],
)
def test_approximate_dp_p_value_against_mpmath(
    m: int, r: int, v: int, eps: float, delta: float
) -> None:
    expected = _mp_p_value(m, r, v, eps, delta)
    assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(expected, rel=1e-9)


def test_the_papers_printed_lower_bounds() -> None:
    # SNJ (arXiv:2305.08846v1) Appendix D: m = 1000, r = 100, v = 75, δ = 1e-4 -> 0.673;
    # §7 (Fig. 11's setting): m = 1e5, r = 1510, v = 1439, δ = 1e-5 -> 2.675 (truncated).
    assert one_run_epsilon_lower_bound(1000, 100, 75, delta=1e-4) == pytest.approx(0.673, abs=5e-4)
    eps = one_run_epsilon_lower_bound(100_000, 1510, 1439, delta=1e-5)
    assert 2.675 <= eps < 2.676


def test_lower_bound_is_where_the_p_value_crosses_alpha() -> None:
    for m, r, v, delta in [(1000, 100, 90, 1e-5), (500, 60, 60, 0.0), (200, 200, 140, 1e-4)]:
        eps = one_run_epsilon_lower_bound(m, r, v, delta=delta, alpha=0.05)
        assert eps > 0
        assert one_run_p_value(m, r, v, eps, delta) <= 0.05
        assert one_run_p_value(m, r, v, eps + 1e-6, delta) > 0.05
        # The scan relies on the first crossing only; the p-value is in fact monotone here.
        grid = np.linspace(0, eps + 2, 300)
        values = [one_run_p_value(m, r, v, float(e), delta) for e in grid]
        assert all(a <= b + 1e-15 for a, b in itertools.pairwise(values))
    # Nothing to reject: half the guesses right, or no guesses at all.
    assert one_run_epsilon_lower_bound(1000, 100, 50, delta=1e-5) == 0.0
    assert one_run_epsilon_lower_bound(1000, 0, 0, delta=1e-5) == 0.0
    # More δ can only lower the audited ε.
    assert one_run_epsilon_lower_bound(1000, 100, 90, delta=1e-3) < one_run_epsilon_lower_bound(
        1000, 100, 90, delta=0.0
    )


def test_audit_is_valid_on_randomized_response() -> None:
    # Randomized response (each canary's output is S_i with probability e^ε₀/(1 + e^ε₀))
    # is exactly ε₀-DP in every canary, and the number of right guesses is
    # Binomial(r, e^ε₀/(1 + e^ε₀)): the worst case of the bound. Over 400 one-run
    # audits at α = 0.05 the audited ε may exceed ε₀ in at most ~5 % of them; the
    # count is checked against the Binomial(400, 0.05) quantile at 1 − 1e-6.
    eps0, m, runs, alpha = 1.0, 200, 400, 0.05
    rng = np.random.default_rng(2026)  # test data only, not a privacy mechanism
    keep = math.exp(eps0) / (1 + math.exp(eps0))
    above = 0
    for _ in range(runs):
        included = rng.random(m) < 0.5
        sign = np.where(included, 1.0, -1.0) * np.where(rng.random(m) < keep, 1.0, -1.0)
        scores = sign + 1e-3 * rng.random(m)  # break ties independently of the truth
        result = audit_scores(
            scores, included, k_plus=m // 2, k_minus=m // 2, epsilon_certified=eps0, delta=0.0
        )
        above += result.epsilon_lower > eps0
    assert above <= binom.ppf(1 - 1e-6, runs, alpha)
    assert above < runs * 0.2  # and the bound is not vacuous: most runs stay below


def test_count_correct_and_bad_input() -> None:
    scores = [0.5, 0.1, 0.9, 0.3, 0.7]
    included = np.array([True, False, True, False, False])
    # In: 0.9 (idx 2, in), 0.7 (idx 4, out); out: 0.1 (idx 1, out) -> 2 of 3 right.
    assert count_correct(scores, included, k_plus=2, k_minus=1) == (3, 2)
    with pytest.raises(ValueError, match="k_plus \\+ k_minus must be at most 5"):
        count_correct(scores, included, k_plus=3, k_minus=3)
    with pytest.raises(ValueError, match="bool array"):
        count_correct(scores, [1, 0, 1, 0, 0], k_plus=1, k_minus=1)
    with pytest.raises(ValueError, match="scores must be finite"):
        count_correct([0.0, math.nan], np.array([True, False]), k_plus=1, k_minus=0)
    with pytest.raises(ValueError, match="guesses must be at most canaries = 10"):
        one_run_p_value(10, 11, 5, 1.0, 0.0)
    with pytest.raises(ValueError, match="correct must be at most guesses = 5"):
        one_run_epsilon_lower_bound(10, 5, 6, delta=0.0)
    with pytest.raises(ValueError, match="alpha must be"):
        one_run_epsilon_lower_bound(10, 5, 5, delta=0.0, alpha=1.0)
    with pytest.raises(ValueError, match="epsilon must be"):
        one_run_p_value(10, 5, 5, -1.0, 0.0)


def test_table_release_one_run_audit_is_positive_and_below_the_certificate() -> None:
    def build(frame: pd.DataFrame, keys: list[int]) -> Release:
        return Release(
            frame,
            privacy_unit="user",
            budget=Budget(epsilon=8.0, delta=1e-6),
            max_groups_per_unit=1,
            max_rows_per_group=1,
        ).sum("x", by="g", keys=keys, bounds=(0, 1000))

    result = audit_table_release_one_run(
        build, canaries=300, value=1000.0, k_plus=30, k_minus=30, rng=ChaCha20Random(5)
    )
    assert 0.0 < result.epsilon_lower <= result.epsilon_certified
    assert result.epsilon_certified == pytest.approx(8.0, rel=1e-6)
    assert (result.canaries, result.guesses) == (300, 60)
    assert "one run" in str(result)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs the torch extra")
@pytest.mark.usefixtures("one_torch_thread")
def test_dpsgd_one_run_audit_is_positive_and_below_the_certificate() -> None:
    result = audit_dpsgd_one_run(
        canaries=200,
        k_plus=20,
        k_minus=20,
        noise_multiplier=1.0,
        steps=10,
        examples=20,
        batch_size=110,
        rng=ChaCha20Random(3),
    )
    assert 0.0 < result.epsilon_lower <= result.epsilon_certified
    assert "gradient canaries" in result.method


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"k_plus": 200, "k_minus": 1}, "k_plus \\+ k_minus must be at most 10"),
        ({"k_minus": -1}, "k_minus must be"),
        ({"value": math.nan}, "value must be a finite real number"),
        ({"value": "big"}, "value must be a finite real number"),
        ({"alpha": 0.0}, "alpha must be"),
    ],
)
def test_table_release_audit_checks_everything_before_the_release(
    changes: dict[str, object], message: str
) -> None:
    calls: list[int] = []

    def build(frame: pd.DataFrame, keys: list[int]) -> Release:
        calls.append(len(keys))
        raise AssertionError("the release must not be built")

    rng = ChaCha20Random(7)
    args: dict[str, object] = {"canaries": 10, "value": 1.0, "k_plus": 2, "k_minus": 2}
    args.update(changes)
    with pytest.raises((ValueError, TypeError), match=message):
        audit_table_release_one_run(build, rng=rng, **args)  # type: ignore[arg-type]
    assert calls == []
    assert rng.words(1)[0] == ChaCha20Random(7).words(1)[0]  # nothing drawn


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs the torch extra")
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"k_plus": 20, "k_minus": 1}, "k_plus \\+ k_minus must be at most 20"),
        ({"alpha": 1.5}, "alpha must be"),
        ({"max_grad_norm": math.nan}, "max_grad_norm must be"),
        ({"steps": 2.0}, r"^steps must be an integer in \[1, 2\*\*53\], got 2.0$"),
    ],
)
def test_dpsgd_audit_checks_everything_before_training(
    changes: dict[str, object], message: str
) -> None:
    rng = ChaCha20Random(8)
    args: dict[str, object] = {
        "canaries": 20,
        "k_plus": 2,
        "k_minus": 2,
        "noise_multiplier": 1.0,
        "steps": 1,
    }
    args.update(changes)
    with pytest.raises(ValueError, match=message):
        audit_dpsgd_one_run(rng=rng, **args)  # type: ignore[arg-type]
    assert rng.words(1)[0] == ChaCha20Random(8).words(1)[0]  # nothing drawn


def test_printed_bounds_are_rounded_outward() -> None:
    """A certified ε of 1.004 never prints as "≤ 1.00", an audited 0.996 never as "≥ 1.00"."""
    from gaussdp.audit.stats import AuditResult

    one = OneRunAuditResult(
        epsilon_lower=0.9996,
        epsilon_certified=1.004,
        delta=1e-5,
        confidence=0.95,
        canaries=1000,
        guesses=100,
        correct=90,
        method="test",
    )
    many = AuditResult(
        epsilon_lower=0.9996,
        epsilon_certified=1.004,
        delta=1e-5,
        confidence=0.95,
        runs=10,
        true_positives=5,
        false_positives=1,
        method="test",
    )
    for text in (str(one), str(many)):
        lower = float(text.split("audited ε ≥ ")[1].split(",")[0])
        upper = float(text.split("certified ε ≤ ")[1].split(" ")[0])
        assert lower <= 0.9996
        assert upper >= 1.004
