"""Tests for gaussdp.privacy.zcdp: CKS Prop 12 / Cor 13 and the standard conversion.

References are computed with mpmath at 60 digits from the formulas in
REFERENCE.md §3, minimising over α by bisection on the derivative written out
independently of the code under test.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gaussdp.privacy import (
    RdpEpsilon,
    gdp_epsilon,
    rdp_epsilon,
    rdp_epsilon_order,
    zcdp_delta,
    zcdp_epsilon,
    zcdp_rho,
)

RHOS = [1e-12, 1e-6, 1e-3, 0.125, 0.5, 1.0, 10.0, 1e4]
DELTAS = [0.5, 1e-2, 1e-5, 1e-10, 1e-50, 1e-100, 1e-300]
EPSILONS = [0.0, 1e-3, 0.5, 1.0, 10.0, 50.0, 200.0]

# ε: measured worst relative error 8.7e-14 (CKS, ρ = 0.5, δ = 0.5), 6.7e-14 (RDP),
# 3.7e-15 (standard).
TOL = 1e-12
# δ is deliberately rounded up by 16 ulps of the terms of ln δ: measured
# 8.7e-12 (CKS, ρ = 1, ε = 50, δ ≈ 3e-263) and 2.2e-12 (standard).
TOL_DELTA = 5e-11


# ---------------------------------------------------------------------------
# mpmath references
# ---------------------------------------------------------------------------


def _bisect_increasing(f: Callable[[mp.mpf], mp.mpf], lo: mp.mpf, hi: mp.mpf) -> mp.mpf:
    """Root of an increasing function by bisection in log scale (lo, hi > 0)."""
    assert f(lo) <= 0 <= f(hi), (lo, hi)
    for _ in range(400):
        mid = mp.sqrt(lo * hi)
        if f(mid) > 0:
            hi = mid
        else:
            lo = mid
        if hi / lo - 1 < mp.mpf(10) ** -45:
            break
    return lo


def mp_prop12_eps(alpha: mp.mpf, tau: mp.mpf, log_inv_delta: mp.mpf) -> mp.mpf:
    # CKS Prop 12
    return tau + (log_inv_delta - mp.log(alpha)) / (alpha - 1) + mp.log(1 - 1 / alpha)


def mp_cks_eps_raw(rho: float | mp.mpf, delta: float) -> mp.mpf:
    """inf over α > 1 of CKS Prop 12 with τ = αρ (CKS Cor 13), not clamped at 0."""
    with mp.workdps(60):
        r, big_l = mp.mpf(rho), -mp.log(mp.mpf(delta))
        # derivative ρ − (L − ln α)/(α − 1)² is increasing; its zero in x = α − 1:
        x = _bisect_increasing(
            lambda x: r * x * x + mp.log(1 + x) - big_l, mp.mpf(10) ** -30, mp.sqrt(big_l / r) + 1
        )
        return +mp_prop12_eps(1 + x, (1 + x) * r, big_l)


def mp_cks_delta(rho: float, eps: float) -> mp.mpf:
    """inf over α > 1 of CKS Prop 12 in δ form with τ = αρ."""
    with mp.workdps(60):
        r, e = mp.mpf(rho), mp.mpf(eps)

        def log_delta(x: mp.mpf) -> mp.mpf:
            a = 1 + x
            return x * (a * r - e) - mp.log(a) + x * mp.log(x / a)  # ln(1 − 1/α) = ln(x/α)

        x = _bisect_increasing(
            lambda x: (2 * x + 1) * r + mp.log(x / (1 + x)) - e,
            mp.mpf(10) ** -10000,  # the optimum is near e^{-ρ} when ρ >> ε
            mp.mpf(10) ** 30,
        )
        return min(mp.mpf(1), mp.exp(log_delta(x)))


def mp_rel(got: float, ref: mp.mpf) -> float:
    with mp.workdps(40):
        return float(abs(mp.mpf(got) - ref) / abs(ref))


# ---------------------------------------------------------------------------
# Known answers and relations
# ---------------------------------------------------------------------------


def test_known_values() -> None:
    # standard: ρ + 2√(ρ ln(1/δ)) at ρ = 0.5, δ = 1e-5
    assert zcdp_epsilon(0.5, 1e-5, method="standard") == pytest.approx(
        0.5 + 2 * math.sqrt(0.5 * math.log(1e5)), rel=1e-14
    )
    # CKS Cor 13 at the same point (mpmath: 4.72838698494...)
    assert zcdp_epsilon(0.5, 1e-5) == pytest.approx(4.728386984943, rel=1e-11)


def test_zero_rho() -> None:
    for delta in (0.5, 1e-300):
        assert zcdp_epsilon(0.0, delta) == 0.0
        assert zcdp_epsilon(0.0, delta, method="standard") == 0.0
    for eps in (0.0, 1.0):
        assert zcdp_delta(0.0, eps) == 0.0
        assert zcdp_delta(0.0, eps, method="standard") == 0.0


def test_zero_epsilon() -> None:
    # ε = 0 is meaningful: (0, δ)-DP
    d = zcdp_delta(1e-6, 0.0)
    assert 0.0 < d < 1.0
    assert d >= mp_cks_delta(1e-6, 0.0)
    assert zcdp_delta(0.5, 0.0, method="standard") == 1.0
    # zcdp_rho at ε = 0 is about (e/2)·δ² (the α ≈ 1/δ regime of CKS Cor 13)
    rho = zcdp_rho(0.0, 1e-5)
    assert rho == pytest.approx(math.e / 2 * 1e-10, rel=1e-4)
    assert mp_cks_eps_raw(rho, 1e-5) <= 0 < mp_cks_eps_raw(rho * (1 + 1e-9), 1e-5)
    assert zcdp_epsilon(rho, 1e-5) == 0.0
    assert zcdp_rho(0.0, 1e-200) == 0.0  # (e/2)·1e-400 underflows: 0 is safe


def test_tiny_rho_clamps_epsilon_to_zero() -> None:
    # the unclamped CKS bound is negative; (0, δ)-DP follows.
    assert mp_cks_eps_raw(1e-12, 0.5) < 0
    assert zcdp_epsilon(1e-12, 0.5) == 0.0


# ---------------------------------------------------------------------------
# Against mpmath
# ---------------------------------------------------------------------------


def test_cks_epsilon_matches_mpmath() -> None:
    worst = 0.0
    for rho in RHOS:
        for delta in DELTAS:
            got = zcdp_epsilon(rho, delta)
            ref = mp_cks_eps_raw(rho, delta)
            if ref <= 0:
                assert got == 0.0
                continue
            assert got >= ref  # an upper bound, rounded up
            worst = max(worst, mp_rel(got, ref))
    assert worst <= TOL, worst


def test_standard_epsilon_matches_mpmath() -> None:
    worst = 0.0
    for rho in RHOS:
        for delta in DELTAS:
            with mp.workdps(40):
                ref = rho + 2 * mp.sqrt(rho * mp.log(1 / mp.mpf(delta)))
            got = zcdp_epsilon(rho, delta, method="standard")
            assert got >= ref
            worst = max(worst, mp_rel(got, ref))
    assert worst <= TOL, worst


def test_cks_delta_matches_mpmath() -> None:
    worst = 0.0
    for rho in RHOS:
        for eps in EPSILONS:
            got = zcdp_delta(rho, eps)
            ref = mp_cks_delta(rho, eps)
            if ref < 1e-300:
                assert 0.0 < got <= 2.3e-308  # underflow: a positive subnormal
                continue
            assert got >= ref
            worst = max(worst, mp_rel(got, ref))
    assert worst <= TOL_DELTA, worst


def test_standard_delta_matches_mpmath() -> None:
    worst = 0.0
    for rho in RHOS:
        for eps in EPSILONS:
            got = zcdp_delta(rho, eps, method="standard")
            if eps <= rho:
                assert got == 1.0
                continue
            with mp.workdps(40):
                ref = mp.exp(-((mp.mpf(eps) - rho) ** 2) / (4 * mp.mpf(rho)))
            if ref < 1e-300:
                assert 0.0 < got <= 2.3e-308
                continue
            assert got >= ref
            worst = max(worst, mp_rel(got, ref))
    assert worst <= TOL_DELTA, worst


def test_rho_is_largest_feasible() -> None:
    for eps in EPSILONS[1:]:
        for delta in (0.5, 1e-5, 1e-50, 1e-300):
            rho = zcdp_rho(eps, delta)
            assert rho > 0
            # feasible in exact arithmetic, and maximal to relative 1e-9
            assert mp_cks_eps_raw(rho, delta) <= eps
            assert mp_cks_eps_raw(rho * (1 + 1e-9), delta) > eps
            assert zcdp_epsilon(rho, delta) <= eps


def test_rdp_epsilon_matches_mpmath() -> None:
    orders = [1.01, 1.5, 2, 3, 4, 8, 16, 32, 64, 256, 1e4]
    worst = 0.0
    for rho in RHOS:
        rdp = [rho * a for a in orders]
        for delta in DELTAS:
            with mp.workdps(60):
                big_l = -mp.log(mp.mpf(delta))
                refs = [
                    mp_prop12_eps(mp.mpf(a), mp.mpf(t), big_l)
                    for a, t in zip(orders, rdp, strict=True)
                ]
                ref = max(mp.mpf(0), min(refs))
            got = rdp_epsilon_order(orders, rdp, delta)
            assert got.epsilon >= ref
            if ref == 0:
                assert got.epsilon == 0.0
                continue
            assert got.order == orders[refs.index(min(refs))]
            worst = max(worst, mp_rel(got.epsilon, ref))
            # the grid minimum is never below the infimum over all orders
            assert got.epsilon >= zcdp_epsilon(rho, delta) * (1 - 1e-12)
    assert worst <= TOL, worst


# ---------------------------------------------------------------------------
# Round trips and comparisons
# ---------------------------------------------------------------------------


def test_round_trips() -> None:
    for rho in RHOS[1:]:
        for delta in DELTAS:
            eps = zcdp_epsilon(rho, delta)
            if eps == 0.0:
                continue
            assert zcdp_rho(eps, delta) == pytest.approx(rho, rel=1e-9)
            assert zcdp_delta(rho, eps) == pytest.approx(delta, rel=1e-9)
            eps_std = zcdp_epsilon(rho, delta, method="standard")
            back = zcdp_delta(rho, eps_std, method="standard")
            assert back == pytest.approx(delta, rel=1e-9)


def test_cks_never_worse_than_standard_on_grid() -> None:
    for rho in RHOS:
        for delta in DELTAS:
            assert zcdp_epsilon(rho, delta) <= zcdp_epsilon(rho, delta, method="standard")
        for eps in EPSILONS:
            assert zcdp_delta(rho, eps) <= zcdp_delta(rho, eps, method="standard")


def test_exact_gaussian_profile_is_tighter() -> None:
    # REFERENCE §3: for a pure Gaussian, μ-GDP (ρ = μ²/2) beats any RDP conversion.
    for mu in (0.1, 0.5, 1.0, 3.0, 10.0):
        for delta in (1e-3, 1e-5, 1e-10, 1e-100):
            assert gdp_epsilon(mu, delta) < zcdp_epsilon(mu * mu / 2, delta)


def test_rdp_epsilon_order_result() -> None:
    result = rdp_epsilon_order(np.array([2.0, 4.0, 8.0]), np.array([1.0, 2.0, 4.0]), 1e-5)
    assert isinstance(result, RdpEpsilon)
    assert result.epsilon == rdp_epsilon([2.0, 4.0, 8.0], [1.0, 2.0, 4.0], 1e-5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.epsilon = 0.0  # type: ignore[misc]
    # infinite RDP at an order means no bound there
    assert rdp_epsilon([2, 4], [math.inf, 2.0], 1e-5) == rdp_epsilon([4], [2.0], 1e-5)
    assert rdp_epsilon_order([2, 4], [math.inf, math.inf], 1e-5) == RdpEpsilon(math.inf, math.inf)
    assert rdp_epsilon([2], [0.0], 0.5) == 0.0


# ---------------------------------------------------------------------------
# Hypothesis properties
# ---------------------------------------------------------------------------

log_rho = st.floats(min_value=-10.0, max_value=4.0)
log_delta = st.floats(min_value=-300.0, max_value=-0.31)


@settings(max_examples=60, deadline=None)
@given(log_rho, log_delta)
def test_cks_below_standard(lr: float, ld: float) -> None:
    rho, delta = 10.0**lr, 10.0**ld
    assert zcdp_epsilon(rho, delta) <= zcdp_epsilon(rho, delta, method="standard")


@settings(max_examples=60, deadline=None)
@given(log_rho, log_delta, st.floats(min_value=1e-6, max_value=1.0))
def test_epsilon_monotone(lr: float, ld: float, step: float) -> None:
    rho, delta = 10.0**lr, 10.0**ld
    eps = zcdp_epsilon(rho, delta)
    assert zcdp_epsilon(rho * (1 + step), delta) >= eps
    assert zcdp_epsilon(rho, delta * (1 - step / 2)) >= eps


@settings(max_examples=40, deadline=None)
@given(st.floats(min_value=1e-3, max_value=100.0), log_delta)
def test_rho_meets_target(eps: float, ld: float) -> None:
    delta = 10.0**ld
    rho = zcdp_rho(eps, delta)
    assert zcdp_epsilon(rho, delta) <= eps
    assert zcdp_epsilon(rho * (1 + 1e-8), delta) > eps


@settings(max_examples=40, deadline=None)
@given(log_rho, st.floats(min_value=0.0, max_value=200.0), st.floats(1e-6, 1.0))
def test_delta_decreasing_in_epsilon(lr: float, eps: float, step: float) -> None:
    rho = 10.0**lr
    assert zcdp_delta(rho, eps + step) <= zcdp_delta(rho, eps)


# ---------------------------------------------------------------------------
# Bad inputs
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_bad_rho(bad: float) -> None:
    msg = r"rho must be a finite real number >= 0, got "
    with pytest.raises(ValueError, match=msg):
        zcdp_epsilon(bad, 1e-5)
    with pytest.raises(ValueError, match=msg):
        zcdp_delta(bad, 1.0, method="standard")
    with pytest.raises(TypeError, match=msg):
        zcdp_epsilon("0.5", 1e-5)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0.0, 1.0, -1e-5, 2.0, math.nan, math.inf])
def test_bad_delta(bad: float) -> None:
    msg = r"delta must be a real number in \(0, 1\), got "
    for call in (
        lambda: zcdp_epsilon(0.5, bad),
        lambda: zcdp_epsilon(0.5, bad, method="standard"),
        lambda: zcdp_rho(1.0, bad),
        lambda: rdp_epsilon([2.0], [1.0], bad),
    ):
        with pytest.raises(ValueError, match=msg):
            call()


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_bad_epsilon(bad: float) -> None:
    msg = r"epsilon must be a finite real number >= 0, got "
    with pytest.raises(ValueError, match=msg):
        zcdp_delta(0.5, bad)
    with pytest.raises(ValueError, match=msg):
        zcdp_rho(bad, 1e-5)


@pytest.mark.parametrize("bad", ["CKS", "rdp", None, 1])
def test_bad_method(bad: object) -> None:
    msg = r"method must be 'cks' or 'standard', got "
    with pytest.raises(ValueError, match=msg):
        zcdp_epsilon(0.5, 1e-5, method=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=msg):
        zcdp_delta(0.5, 1.0, method=bad)  # type: ignore[arg-type]


def test_bad_rdp_inputs() -> None:
    with pytest.raises(ValueError, match=r"orders\[1\] must be a finite real number > 1, got 1.0"):
        rdp_epsilon([2.0, 1.0], [1.0, 1.0], 1e-5)
    with pytest.raises(ValueError, match=r"orders\[0\] must be a finite real number, got inf"):
        rdp_epsilon([math.inf], [1.0], 1e-5)
    with pytest.raises(ValueError, match=r"orders\[0\] must be a finite real number, got nan"):
        rdp_epsilon([math.nan], [1.0], 1e-5)
    with pytest.raises(ValueError, match=r"rdp\[0\] must be a non-negative real number, got -1"):
        rdp_epsilon([2.0], [-1.0], 1e-5)
    with pytest.raises(ValueError, match=r"rdp\[0\] must be a non-negative real number, got nan"):
        rdp_epsilon([2.0], [math.nan], 1e-5)
    with pytest.raises(ValueError, match=r"rdp must be a sequence of the same length as orders"):
        rdp_epsilon([2.0, 3.0], [1.0], 1e-5)
    with pytest.raises(ValueError, match=r"orders must be a non-empty 1-D sequence"):
        rdp_epsilon([], [], 1e-5)
    with pytest.raises(ValueError, match=r"orders must be a non-empty 1-D sequence"):
        rdp_epsilon([[2.0, 3.0]], [[1.0, 1.0]], 1e-5)
    with pytest.raises(TypeError, match=r"orders must be a non-empty sequence of real numbers"):
        rdp_epsilon("23", [1.0, 1.0], 1e-5)
    with pytest.raises(TypeError, match=r"orders\[0\] must be a finite real number, got 'a'"):
        rdp_epsilon(["a"], [1.0], 1e-5)
    with pytest.raises(TypeError, match=r"rdp\[0\] must be a non-negative real number, got True"):
        rdp_epsilon([2.0], [True], 1e-5)


def test_extreme_inputs_terminate_safely() -> None:
    # Valid but extreme: no hang, no crash, answers on the safe side.
    assert zcdp_delta(1e4, 0.0) == 1.0  # the optimal order tends to 1
    assert zcdp_delta(5e-324, 1e300) == 5e-324  # underflow is reported as 5e-324, never 0
    assert zcdp_delta(1e-300, 1e300, method="standard") == 5e-324
    assert 0.0 < zcdp_epsilon(5e-324, 5e-324) < 1e-150
    assert zcdp_epsilon(1e300, 1e-5) >= 1e300
    rho = zcdp_rho(1e300, 1e-5)
    assert 0.0 < rho < 1e300
    assert zcdp_epsilon(rho, 1e-5) <= 1e300
