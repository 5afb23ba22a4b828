"""Tests of gaussdp.privacy.discrete against multi-precision references.

References are computed here with mpmath (never with the code under test):

* the normaliser and tails by exact truncated sums with a bounded tail
  (``_mp_tail_direct``) for σ² <= 10^4, and by Euler-Maclaurin with 12
  Bernoulli corrections at high precision (``_mp_tail_em``) for σ² >= 10^12,
  the two cross-checked at σ² = 10^4;
* δ of CKS Thm 7 by brute force, Σ_y max(0, p(y) - e^ε p(y - Δ)), for small σ²,
  and as the difference of the two high-precision tails (working precision
  raised by log10(σ) digits to absorb the cancellation) for huge σ².

Each tolerance is stated next to its assert. Worst relative errors measured on
these grids when the tests were written (float64, unit roundoff 1.1e-16):

    normaliser 9.6e-17, log normaliser 1.2e-16, variance 2.4e-16,
    logpmf 1.2e-16 (absolute error / max(1, |log p|)), pmf 2.6e-16 (scalar k;
    arrays: 4.5e-14 at |log p| ~ 700, the exponent being rounded),
    logsf 6.5e-16 (absolute / max(1, |log P|)), sf 7.1e-16, cdf 8.0e-16,
    δ (CKS Thm 7) 3.3e-16 on the σ²×ε×Δ grid and 5.5e-15 for huge σ² with
    ε ~ Δ/σ (Euler-Maclaurin path),
    discrete Laplace: variance 1.7e-16, logpmf 9e-17, δ 2.6e-16.
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gaussdp.privacy.discrete import (
    DiscreteGaussianDistribution,
    DiscreteLaplaceDistribution,
    _grid_value,
)
from gaussdp.random import ChaCha20Random
from gaussdp.sampling import discrete_gaussian, discrete_laplace

DPS = 50
SIGMA2_GRID = [
    Fraction(1, 100),
    Fraction(1, 4),
    Fraction(1),
    Fraction(2),
    Fraction(10),
    Fraction(25, 4),
    Fraction(10**4),
    Fraction(10**12),
    Fraction(10**100),
]
EPSILONS = [0.0, 0.1, 1.0, 5.0, 50.0, 200.0]
SENSITIVITIES = [1, 2, 5]


# ---------------------------------------------------------------------------
# mpmath references
# ---------------------------------------------------------------------------


def _mpf(x: Fraction | int) -> mp.mpf:
    x = Fraction(x)
    return mp.mpf(x.numerator) / x.denominator


def _mp_tail_direct(m: int, s: Fraction) -> mp.mpf:
    """Σ_{y>=m} e^{-y²/(2s)} / e^{-m²/(2s)} for m >= 0, by an exact truncated sum.

    Terms e^{-j(2m+j)/(2s)}; we stop at the first j with exponent > 150 + log(4s):
    the rest is below e^{-150} (consecutive exponents grow by >= (2m+2j+1)/(2s)).
    """
    ss = _mpf(s)
    total = mp.mpf(0)
    j = 0
    limit = 150 + math.log(4 * float(s) + 1)
    while True:
        e = mp.mpf(j) * (2 * m + j) / (2 * ss)
        total += mp.exp(-e)
        if e > limit:
            return total
        j += 1


def _mp_tail_em(m: int, s: Fraction) -> mp.mpf:
    """Same quantity by Euler-Maclaurin with 12 corrections (huge σ² only).

    f^{(j)}(y) = (-1)^j (2s)^{-j/2} H_j(y/sqrt(2s)) f(y); the k-th correction is
    O((m/s)^{2k-1} + s^{-(2k-1)/2}), negligible at these precisions for s >= 10^12.
    """
    ss = _mpf(s)
    r = mp.sqrt(2 * ss)
    u = m / r
    total = r * mp.sqrt(mp.pi) / 2 * mp.erfc(u) * mp.exp(u * u) + mp.mpf(1) / 2
    for k in range(1, 13):
        j = 2 * k - 1
        total += mp.bernoulli(2 * k) / mp.factorial(2 * k) * mp.hermite(j, u) / r**j
    return total


def _mp_tail(m: int, s: Fraction) -> mp.mpf:
    return _mp_tail_direct(m, s) if s <= 10**4 else _mp_tail_em(m, s)


def _mp_log_z(s: Fraction) -> mp.mpf:
    ss = _mpf(s)
    if s <= 10**4:  # Z = 1 + 2 Σ_{y>=1} f(y), direct
        return mp.log(1 + 2 * mp.exp(-1 / (2 * ss)) * _mp_tail_direct(1, s))
    # Jacobi theta (Poisson summation), terms n >= 3 below e^{-10^13}
    return mp.log(mp.sqrt(2 * mp.pi * ss) * (1 + 2 * mp.exp(-2 * mp.pi**2 * ss)))


def _mp_log_upper(m: int, s: Fraction) -> mp.mpf:
    """log P[Y >= m]."""
    if m <= 0:
        return mp.log(1 - mp.exp(_mp_log_upper(1 - m, s)))
    return -_mpf(Fraction(m * m) / (2 * s)) + mp.log(_mp_tail(m, s)) - _mp_log_z(s)


def _mp_variance(s: Fraction) -> mp.mpf:
    ss = _mpf(s)
    if s <= 10**4:
        num = mp.mpf(0)
        den = mp.mpf(1)
        y = 1
        while True:  # terms decay geometrically past y = sqrt(s); stop at e^{-200}
            t = mp.exp(-mp.mpf(y * y) / (2 * ss))
            num += 2 * y * y * t
            den += 2 * t
            if y * y / (2 * float(s)) > 200 + 2 * math.log(y):
                return num / den
            y += 1
    q = mp.exp(-2 * mp.pi**2 * ss)
    return ss - 4 * mp.pi**2 * ss**2 * (2 * q) / (1 + 2 * q)


def _mp_delta_brute(s: Fraction, eps: float, sens: int) -> mp.mpf:
    """Σ_y max(0, p(y) - e^ε p(y - Δ)) with p the N_Z(0, s) pmf, brute force.

    Summed over y <= y_top + Δ + 3 downward, y_top = ⌈Δ/2 - εs/Δ⌉ (terms above are
    zero because the loss (Δ² - 2yΔ)/(2s) decreases in y -- a few are included to
    check that); stops once terms are below e^{-150} of the total, past the mode.
    """
    ss = _mpf(s)
    ee = mp.exp(mp.mpf(eps))
    log_z = _mp_log_z(s)
    a = Fraction(sens, 2) - Fraction(eps) * s / sens
    y = math.ceil(a) + sens + 3
    total = mp.mpf(0)
    while True:
        py = mp.exp(-mp.mpf(y * y) / (2 * ss) - log_z)
        qy = mp.exp(-mp.mpf((y - sens) ** 2) / (2 * ss) - log_z)
        total += max(mp.mpf(0), py - ee * qy)
        if y < 0 and total > 0 and py < total * mp.exp(-150) / (1 + 4 * ss):
            return total
        if y < 0 and total == 0 and y * y / (2 * float(s)) > 2000:
            return total
        y -= 1


def _mp_delta_formula(s: Fraction, eps: float, sens: int) -> mp.mpf:
    """CKS Thm 7 as P[Y >= m] - e^ε P[Y >= m + Δ], m = ⌊εs/Δ - Δ/2⌋ + 1."""
    a = Fraction(eps) * s / sens - Fraction(sens, 2)
    m = math.floor(a) + 1
    with mp.workdps(DPS + 60):
        return mp.exp(_mp_log_upper(m, s)) - mp.exp(mp.mpf(eps)) * mp.exp(
            _mp_log_upper(m + sens, s)
        )


def _rel(x: float, ref: mp.mpf) -> float:
    if ref == 0:
        return 0.0 if x == 0 else math.inf
    return float(abs((mp.mpf(x) - ref) / ref))


@pytest.fixture(autouse=True)
def _mp_precision():
    with mp.workdps(DPS):
        yield


# ---------------------------------------------------------------------------
# normaliser, pmf, variance
# ---------------------------------------------------------------------------


def test_em_reference_agrees_with_direct_reference() -> None:
    # the two references of this file agree where both apply (σ² = 10^4)
    s = Fraction(10**4)
    for m in [1, 100, 1000]:
        assert abs(_mp_tail_em(m, s) / _mp_tail_direct(m, s) - 1) < mp.mpf(10) ** -30


def test_log_normalizer_matches_mpmath() -> None:
    worst = 0.0
    for s in SIGMA2_GRID:
        ref = _mp_log_z(s)
        got = DiscreteGaussianDistribution(s).log_normalizer()
        worst = max(worst, _rel(got, ref))
        worst = max(worst, _rel(DiscreteGaussianDistribution(s).normalizer(), mp.exp(ref)))
    # measured: 1.2e-16 (log), 2.2e-16 (Z)
    assert worst < 1e-15


def _pmf_points(s: Fraction) -> list[int]:
    sigma = math.isqrt(int(s)) if s >= 1 else 1
    far = math.isqrt(int(2 * s * 700)) if s >= 1 else 5
    return [0, 1, sigma, 3 * sigma, 10 * sigma, far, -far]


def test_logpmf_matches_mpmath() -> None:
    worst_log = 0.0
    worst_pmf = 0.0
    for s in SIGMA2_GRID:
        log_z = _mp_log_z(s)
        ks = _pmf_points(s)
        arr_small = [k for k in ks if abs(k) < 2**53]
        got_arr = DiscreteGaussianDistribution(s).logpmf(np.array(arr_small, dtype=np.int64))
        for k in ks:
            ref = -_mpf(Fraction(k * k) / (2 * s)) - log_z
            got = DiscreteGaussianDistribution(s).logpmf(k)
            # absolute error in the log = relative error of the pmf
            worst_log = max(worst_log, float(abs(got - ref)) / max(1.0, float(abs(ref))))
            p = DiscreteGaussianDistribution(s).pmf(k)
            if mp.exp(ref) > mp.mpf("1e-300"):
                worst_pmf = max(worst_pmf, _rel(p, mp.exp(ref)) / max(1.0, float(abs(ref))))
        for k, got in zip(arr_small, got_arr, strict=True):
            ref = -_mpf(Fraction(k * k) / (2 * s)) - log_z
            worst_log = max(worst_log, float(abs(float(got) - ref)) / max(1.0, float(abs(ref))))
    # error of log p relative to max(1, |log p|): measured 2.2e-16; the pmf's relative
    # error is that times max(1, |log p|) (condition number of exp): measured 4e-16 · |log p|
    assert worst_log < 1e-15
    assert worst_pmf < 2e-15


def test_pmf_huge_k_and_sigma2() -> None:
    s = 10**100
    k = 10**60
    expected = -_mpf(Fraction(k * k, 2 * s)) - _mp_log_z(Fraction(s))
    assert _rel(DiscreteGaussianDistribution(s).logpmf(k), expected) < 1e-15
    assert DiscreteGaussianDistribution(1).logpmf(10**400) == -math.inf
    assert DiscreteGaussianDistribution(1).pmf(10**400) == 0.0
    obj = np.array([10**60, -(10**60), 0], dtype=object)
    out = DiscreteGaussianDistribution(s).logpmf(obj)
    assert out.dtype == np.float64
    assert out[0] == out[1] == DiscreteGaussianDistribution(s).logpmf(k)


def test_pmf_sums_to_one_and_is_symmetric() -> None:
    for s in [Fraction(1, 100), Fraction(1, 4), Fraction(1), Fraction(25, 4), Fraction(10**4)]:
        w = math.isqrt(int(80 * s)) + 3
        ks = np.arange(-w, w + 1)
        p = DiscreteGaussianDistribution(s).pmf(ks)
        assert math.fsum(p) == pytest.approx(1.0, abs=1e-14)
        np.testing.assert_array_equal(p, p[::-1])


def test_variance_matches_mpmath_and_is_below_sigma2() -> None:
    worst = 0.0
    for s in SIGMA2_GRID:
        ref = _mp_variance(s)
        if s <= 2:  # beyond, the deficit (< 1e-15 relative) is invisible at 50 digits
            assert ref < _mpf(s)  # CKS Prop 21
        got = DiscreteGaussianDistribution(s).var()
        worst = max(worst, _rel(got, ref))
        if s < 3:
            assert got < float(s)
    # measured 1.6e-16
    assert worst < 1e-15
    # from σ² = 3 on the deficit is below 2^-60: the result is σ² rounded
    assert DiscreteGaussianDistribution(3).var() == 3.0
    assert DiscreteGaussianDistribution(50).var() == 50.0


def test_variance_strictly_below_sigma2_on_a_fine_grid() -> None:
    for num in range(1, 60):
        s = Fraction(num, 20)
        assert DiscreteGaussianDistribution(s).var() <= float(s)
        assert _mp_variance(s) < _mpf(s)


# ---------------------------------------------------------------------------
# tails
# ---------------------------------------------------------------------------


def _sf_points(s: Fraction) -> list[int]:
    sigma = max(1, math.isqrt(int(s)))
    pts = [-5 * sigma, -sigma, -1, 0, 1, sigma, 3 * sigma, 10 * sigma, 20 * sigma]
    pts.append(math.isqrt(int(2 * s * 690)) + 1)  # P ~ 1e-300
    return pts


def test_sf_and_cdf_match_mpmath_in_the_far_tail() -> None:
    worst = 0.0
    worst_lin = 0.0
    for s in SIGMA2_GRID:
        for k in _sf_points(s):
            ref = _mp_log_upper(k + 1, s)
            got = DiscreteGaussianDistribution(s).logsf(k)
            # relative error of P[Y > k] = absolute error of the log
            worst = max(worst, float(abs(got - ref)) / max(1.0, float(abs(ref))))
            if ref > -700:
                worst_lin = max(worst_lin, _rel(DiscreteGaussianDistribution(s).sf(k), mp.exp(ref)))
            ref_cdf = _mp_log_upper(-k, s)  # P[Y <= k] = P[Y >= -k]
            worst = max(
                worst,
                float(abs(DiscreteGaussianDistribution(s).logcdf(k) - ref_cdf))
                / max(1.0, float(abs(ref_cdf))),
            )
            if ref_cdf > -700:
                worst_lin = max(
                    worst_lin, _rel(DiscreteGaussianDistribution(s).cdf(k), mp.exp(ref_cdf))
                )
    # measured 6.5e-16 (log: absolute error / max(1, |log P|)); sf, cdf: 8.0e-16
    assert worst < 2e-15
    assert worst_lin < 2e-15


def test_cdf_is_complement_of_sf() -> None:
    for s in [Fraction(1, 4), Fraction(25, 4), Fraction(10**12)]:
        ks = np.array([-3, -1, 0, 2, 7])
        total = DiscreteGaussianDistribution(s).cdf(ks) + DiscreteGaussianDistribution(s).sf(ks)
        np.testing.assert_allclose(total, 1.0, rtol=1e-15)
        assert DiscreteGaussianDistribution(s).logcdf(-4) == DiscreteGaussianDistribution(s).logsf(
            3
        )


# ---------------------------------------------------------------------------
# δ(ε): CKS Thm 7
# ---------------------------------------------------------------------------


def _delta_reference(s: Fraction, eps: float, sens: int) -> mp.mpf:
    if s <= 10**4:
        return _mp_delta_brute(s, eps, sens)
    return _mp_delta_formula(s, eps, sens)


@pytest.mark.parametrize("s", SIGMA2_GRID, ids=str)
def test_delta_matches_mpmath(s: Fraction) -> None:
    worst = 0.0
    for eps in EPSILONS:
        for sens in SENSITIVITIES:
            got = DiscreteGaussianDistribution(s).delta(eps, sens)
            a = Fraction(eps) * s / sens - Fraction(sens, 2)
            if a > 0 and a * a / (2 * s) > 800:  # δ <= P[Y > a] < e^{-800}
                assert got == 0.0
                continue
            ref = _delta_reference(s, eps, sens)
            if ref < mp.mpf("1e-300"):
                assert got < 1e-299
                continue
            worst = max(worst, _rel(got, ref))
    # measured worst over the whole grid: 3.3e-16 (see the module docstring)
    assert worst < 1e-14


@pytest.mark.parametrize(
    ("s", "epsilons"),
    [
        (Fraction(10**6), [1e-4, 1e-3, 5e-3, 2e-2]),
        (Fraction(10**12), [1e-7, 1e-6, 5e-6, 1e-5, 3e-5]),
        (Fraction(10**100), [1e-51, 1e-50, 5e-50, 2e-49, 6e-49]),
    ],
    ids=["1e6", "1e12", "1e100"],
)
def test_delta_large_sigma2_meaningful_epsilon(s: Fraction, epsilons: list[float]) -> None:
    # ε of order Δ/σ, where δ is neither 0 nor 1: the Euler-Maclaurin path for
    # Δ/σ² small, plus Δ = 1000 (h = Δ/sqrt(2σ²) >= 0.05 at σ² = 10^6) and 10^5
    worst = 0.0
    for eps in epsilons:
        for sens in [1, 2, 5, 1000, 10**5]:
            got = DiscreteGaussianDistribution(s).delta(eps, sens)
            ref = _mp_delta_formula(s, eps, sens)
            if ref < mp.mpf("1e-300"):
                assert got < 1e-299
                continue
            worst = max(worst, _rel(got, ref))
    # measured 5.5e-15 (σ² = 10^12, ε = 3e-5, Δ = 5)
    assert worst < 5e-14


@pytest.mark.parametrize(
    ("s", "eps", "sens"),
    [
        (Fraction(1), 1.0, 1),  # a = 1/2
        (Fraction(3, 2), 1.0, 1),  # a = 1: integer threshold
        (Fraction(5), 0.5, 1),  # a = 2: integer threshold
        (Fraction(4), 1.0, 2),  # a = 1: integer threshold, Δ = 2
        (Fraction(9, 2), 2.0, 3),  # a = 3/2 and a + Δ = 9/2
        (Fraction(25, 4), 0.0, 2),  # ε = 0: total variation, a = -1
        (Fraction(7), 0.25, 5),  # a = -2.15
        (Fraction(6), 1.5, 3),  # a = 3/2... and 1.5·6/3 - 3/2 = 3/2
        (Fraction(10), 0.25, 1),  # a = 2: integer
    ],
)
def test_thm7_against_brute_force(s: Fraction, eps: float, sens: int) -> None:
    # brute force over a full window of outputs, independent of the thresholds
    ss = _mpf(s)
    w = 200
    log_z = _mp_log_z(s)
    brute = mp.fsum(
        max(
            mp.mpf(0),
            mp.exp(-mp.mpf(y * y) / (2 * ss) - log_z)
            - mp.exp(mp.mpf(eps)) * mp.exp(-mp.mpf((y - sens) ** 2) / (2 * ss) - log_z),
        )
        for y in range(-w, w + 1)
    )
    # the Thm 7 formula with strict inequalities, evaluated exactly
    assert _rel(float(_mp_delta_formula(s, eps, sens)), brute) < 1e-15
    assert _rel(DiscreteGaussianDistribution(s).delta(eps, sens), brute) < 1e-14


def test_delta_edges() -> None:
    # ε = 0 is the total variation distance P[-Δ/2 < Y <= Δ/2]
    s = Fraction(10**100)
    ref = mp.exp(-_mp_log_z(s))
    assert _rel(DiscreteGaussianDistribution(s).delta(0.0), ref) < 1e-13
    assert DiscreteGaussianDistribution(Fraction(1, 100)).delta(0.0) == pytest.approx(
        1.0, abs=1e-20
    )
    # δ decreases in ε
    values = [DiscreteGaussianDistribution(2).delta(e) for e in np.linspace(0, 6, 25)]
    assert all(x >= y for x, y in itertools.pairwise(values))


# ---------------------------------------------------------------------------
# calibration
# ---------------------------------------------------------------------------


def _grid_prev(s: Fraction) -> Fraction:
    # grid: n · 2^(e-20), 2^20 <= n < 2^21; find the predecessor
    e = s.numerator.bit_length() - s.denominator.bit_length()
    for e_try in (e - 1, e, e + 1):
        step = Fraction(2) ** (e_try - 20)
        n = s / step
        if n.denominator == 1 and 2**20 <= n < 2**21:
            if n == 2**20:
                return Fraction(2**21 - 1) * step / 2
            return (n - 1) * step
    raise AssertionError(f"{s} is not on the grid")


@pytest.mark.parametrize(
    ("eps", "delta", "sens"),
    [(1.0, 1e-5, 1), (0.1, 1e-10, 1), (5.0, 1e-100, 2), (0.0, 1e-3, 1), (200.0, 0.5, 5)],
)
def test_sigma2_meets_target_and_previous_point_does_not(
    eps: float, delta: float, sens: int
) -> None:
    s = DiscreteGaussianDistribution.calibrate(eps, delta, sens).sigma2
    assert isinstance(s, Fraction)
    assert DiscreteGaussianDistribution(s).delta(eps, sens) <= delta
    # the search keeps a 1e-12 relative safety margin on δ
    assert DiscreteGaussianDistribution(_grid_prev(s)).delta(eps, sens) > delta * (1 - 1e-12)


def test_grid_is_increasing_and_contiguous() -> None:
    for i in [-(2**20) - 1, -1, 0, 2**20 - 1, 2**20, 5 * 2**20 + 7]:
        a, b = _grid_value(i), _grid_value(i + 1)
        assert a < b
        assert _grid_prev(b) == a


@settings(max_examples=25, deadline=None)
@given(
    eps=st.floats(min_value=0.0, max_value=20.0),
    log_delta=st.floats(min_value=-60.0, max_value=-0.1),
    sens=st.integers(min_value=1, max_value=4),
)
def test_sigma2_never_overshoots_delta(eps: float, log_delta: float, sens: int) -> None:
    delta = math.exp(log_delta)
    s = DiscreteGaussianDistribution.calibrate(eps, delta, sens).sigma2
    assert DiscreteGaussianDistribution(s).delta(eps, sens) <= delta


# ---------------------------------------------------------------------------
# discrete Laplace
# ---------------------------------------------------------------------------

LAPLACE_SCALES = [Fraction(1, 100), Fraction(1, 3), Fraction(1), Fraction(7, 2), Fraction(50)]


def _mp_laplace_logz(t: Fraction) -> mp.mpf:
    q = mp.exp(-1 / _mpf(t))
    return mp.log((1 + q) / (1 - q))


def test_laplace_pmf_and_variance_vs_brute_force() -> None:
    worst = 0.0
    for t in LAPLACE_SCALES:
        tt = _mpf(t)
        w = int(200 * t) + 50
        weights = [mp.exp(-abs(mp.mpf(x)) / tt) for x in range(-w, w + 1)]
        z = mp.fsum(weights)
        var = mp.fsum(x * x * wx for x, wx in zip(range(-w, w + 1), weights, strict=True)) / z
        worst = max(worst, _rel(DiscreteLaplaceDistribution(t).var(), var))
        for k in [0, 1, -3, w]:
            ref = -abs(mp.mpf(k)) / tt - mp.log(z)
            got = DiscreteLaplaceDistribution(t).logpmf(k)
            worst = max(worst, float(abs(got - ref)) / max(1.0, float(abs(ref))))
        p = DiscreteLaplaceDistribution(t).pmf(np.arange(-w, w + 1))
        assert math.fsum(p) == pytest.approx(1.0, abs=1e-14)
    # measured 2.3e-16
    assert worst < 1e-15
    # large t: variance ≈ 2t² - 1/6 (series of 1/(2 sinh²(1/(2t))))
    assert DiscreteLaplaceDistribution(10**100).var() == pytest.approx(2e200, rel=1e-15)
    assert DiscreteLaplaceDistribution(10**160).var() == math.inf


@functools.lru_cache(maxsize=8)
def _mp_laplace_pmf_table(t: Fraction, w: int) -> dict[int, mp.mpf]:
    with mp.workdps(DPS):
        tt = _mpf(t)
        log_z = _mp_laplace_logz(t)
        return {y: mp.exp(-abs(mp.mpf(y)) / tt - log_z) for y in range(-w - 5, w + 1)}


def _mp_laplace_delta_brute(t: Fraction, eps: float, sens: int) -> mp.mpf:
    """Σ_y max(0, p(y) - e^ε p(y - Δ)) over |y| <= 200 t + 50 (the rest < e^{-200})."""
    w = int(200 * t) + 50
    table = _mp_laplace_pmf_table(t, w)
    ee = mp.exp(mp.mpf(eps))
    tiny = mp.mpf(10) ** (-DPS + 10)
    total = mp.mpf(0)
    for y in range(-w + sens, w + 1):
        py = table[y]
        diff = py - ee * table[y - sens]
        if diff > py * tiny:  # equality up to mpmath rounding counts as 0
            total += diff
    return total


@pytest.mark.parametrize("t", LAPLACE_SCALES, ids=str)
def test_laplace_delta_vs_brute_force(t: Fraction) -> None:
    worst = 0.0
    for sens in [1, 2, 5]:
        eps_max = sens / t
        for frac in [0.0, 0.1, 0.3, 0.5, 0.77, 0.999]:
            eps = float(eps_max) * frac
            ref = _mp_laplace_delta_brute(t, eps, sens)
            worst = max(worst, _rel(DiscreteLaplaceDistribution(t).delta(eps, sens), ref))
        assert DiscreteLaplaceDistribution(t).delta(float(eps_max) * 1.0000001, sens) == 0.0
        # thresholds hit exactly: ε = (Δ - 2y)/t for an integer y
        for y in range(0, (sens + 1) // 2):
            eps = Fraction(sens - 2 * y) / t
            if float(eps) == eps:
                ref = _mp_laplace_delta_brute(t, float(eps), sens)
                worst = max(
                    worst, _rel(DiscreteLaplaceDistribution(t).delta(float(eps), sens), ref)
                )
    # measured 3.3e-16
    assert worst < 1e-14


def test_laplace_epsilon_and_edges() -> None:
    assert DiscreteLaplaceDistribution(4).epsilon(2) == 0.5
    assert DiscreteLaplaceDistribution("1/3").epsilon() == 3.0
    assert DiscreteLaplaceDistribution(1).delta(1.0) == 0.0
    assert DiscreteLaplaceDistribution(2).delta(3.0, 5) == 0.0
    # ε = 0: total variation between DL(0, t) and DL(Δ, t)
    t = Fraction(7, 2)
    assert (
        _rel(DiscreteLaplaceDistribution(t).delta(0.0, 3), _mp_laplace_delta_brute(t, 0.0, 3))
        < 1e-15
    )


# ---------------------------------------------------------------------------
# bad inputs
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "exc", "match"),
    [
        (0, ValueError, r"sigma2 must be a finite positive rational number .*, got 0"),
        (-1.5, ValueError, r"sigma2 must be .*, got -1.5"),
        (math.nan, ValueError, r"sigma2 must be .*, got nan"),
        (math.inf, ValueError, r"sigma2 must be .*, got inf"),
        ("abc", ValueError, r"sigma2 must be .*, got 'abc'"),
        (True, TypeError, r"sigma2 must be .*, got True"),
        (None, TypeError, r"sigma2 must be .*, got None"),
        (Fraction(1, 10**13), ValueError, r"sigma2 must be a rational number in \[1e-12, 1e300\]"),
        (10**301, ValueError, r"sigma2 must be a rational number in \[1e-12, 1e300\]"),
    ],
)
def test_bad_sigma2(value, exc, match) -> None:  # type: ignore[no-untyped-def]
    # validated once, at construction: no object with a bad sigma2 can exist
    with pytest.raises(exc, match=match):
        DiscreteGaussianDistribution(value)


@pytest.mark.parametrize(
    ("value", "exc", "match"),
    [
        (0, ValueError, r"scale must be .*, got 0"),
        (math.nan, ValueError, r"scale must be .*, got nan"),
        (math.inf, ValueError, r"scale must be .*, got inf"),
        (False, TypeError, r"scale must be .*, got False"),
        (10**301, ValueError, r"scale must be a rational number in \[1e-12, 1e300\]"),
    ],
)
def test_bad_scale(value, exc, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc, match=match):
        DiscreteLaplaceDistribution(value)


@pytest.mark.parametrize("method", ["pmf", "logpmf", "sf", "logsf", "cdf", "logcdf"])
@pytest.mark.parametrize("dist", [DiscreteGaussianDistribution(1), DiscreteLaplaceDistribution(1)])
@pytest.mark.parametrize(
    ("k", "exc", "match"),
    [
        (1.5, ValueError, r"k must be an integer or an array of integers, got 1.5"),
        (math.nan, ValueError, r"k must be an integer or an array of integers, got nan"),
        (True, TypeError, r"k must be an integer or an array of integers, got True"),
        ("3", TypeError, r"k must be an integer or an array of integers, got '3'"),
        (np.array([1.0, 2.5]), ValueError, r"k must be an integer or an array of integers"),
        (np.array([True]), TypeError, r"k must be an integer or an array of integers"),
        (np.array([1, "a"], dtype=object), TypeError, r"k must be an integer or an array"),
    ],
)
def test_bad_k(dist, method, k, exc, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc, match=match):
        getattr(dist, method)(k)


def test_integral_float_k_is_accepted() -> None:
    assert DiscreteGaussianDistribution(1).pmf(2.0) == DiscreteGaussianDistribution(1).pmf(2)
    np.testing.assert_array_equal(
        DiscreteGaussianDistribution(1).pmf(np.array([1.0, -2.0])),
        DiscreteGaussianDistribution(1).pmf([1, -2]),
    )


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"epsilon": -0.1}, ValueError, r"epsilon must be a finite real number >= 0, got -0.1"),
        ({"epsilon": math.nan}, ValueError, r"epsilon must be .*, got nan"),
        ({"epsilon": math.inf}, ValueError, r"epsilon must be .*, got inf"),
        ({"epsilon": "1"}, TypeError, r"epsilon must be .*, got '1'"),
        ({"sensitivity": 0}, ValueError, r"sensitivity must be an integer >= 1, got 0"),
        ({"sensitivity": 1.5}, ValueError, r"sensitivity must be an integer >= 1, got 1.5"),
        ({"sensitivity": True}, TypeError, r"sensitivity must be an integer >= 1, got True"),
        ({"sensitivity": -2}, ValueError, r"sensitivity must be an integer >= 1, got -2"),
    ],
)
def test_bad_delta_arguments(kwargs, exc, match) -> None:  # type: ignore[no-untyped-def]
    args = {"epsilon": 1.0, "sensitivity": 1} | kwargs
    with pytest.raises(exc, match=match):
        DiscreteGaussianDistribution(2).delta(args["epsilon"], args["sensitivity"])
    with pytest.raises(exc, match=match):
        DiscreteLaplaceDistribution(2).delta(args["epsilon"], args["sensitivity"])
    with pytest.raises(exc, match=match):
        DiscreteGaussianDistribution.calibrate(args["epsilon"], 1e-5, args["sensitivity"])
    if "sensitivity" in kwargs:
        with pytest.raises(exc, match=match):
            DiscreteLaplaceDistribution(2).epsilon(args["sensitivity"])


@pytest.mark.parametrize(
    ("delta", "exc", "match"),
    [
        (0.0, ValueError, r"delta must be a real number in \(0, 1\), got 0.0"),
        (1.0, ValueError, r"delta must be a real number in \(0, 1\), got 1.0"),
        (-1e-5, ValueError, r"delta must be .*, got -1e-05"),
        (math.nan, ValueError, r"delta must be .*, got nan"),
        (None, TypeError, r"delta must be .*, got None"),
    ],
)
def test_bad_sigma2_delta(delta, exc, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc, match=match):
        DiscreteGaussianDistribution.calibrate(1.0, delta)


def test_unattainable_target() -> None:
    with pytest.raises(ValueError, match=r"delta must be attainable with sigma2 <= 1e300"):
        DiscreteGaussianDistribution.calibrate(0.0, 1e-300, 10**100)


# ---------------------------------------------------------------------------
# the frozen distribution objects
# ---------------------------------------------------------------------------


def _mp_laplace_tail(m: int, t: Fraction) -> mp.mpf:
    """P[X >= m] of the discrete Laplace, by brute-force summation of the pmf in mpmath.

    The terms decay geometrically (ratio e^{-1/t}); the sum stops when a term is below
    1e-60 of the running total, which bounds the neglected tail far below 1e-40 relative.
    """
    with mp.workdps(DPS):
        q = mp.exp(-1 / _mpf(t))
        p0 = (1 - q) / (1 + q)
        if m <= 0:
            return 1 - _mp_laplace_tail(1 - m, t)
        total, term = mp.mpf(0), p0 * q**m
        while term > total * mp.mpf(10) ** -60:
            total += term
            term *= q
        return total


@pytest.mark.parametrize("t", [Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(40)])
def test_laplace_tails_match_mpmath(t: Fraction) -> None:
    dl = DiscreteLaplaceDistribution(t)
    ks = [-200, -7, -1, 0, 1, 3, 25, 400]
    for k in ks:
        upper = _mp_laplace_tail(k + 1, t)  # P[X > k]
        lower = _mp_laplace_tail(-k, t)  # P[X <= k] = P[X >= -k]
        # relative, also far in the tails (below the float range only the logs are compared)
        assert _rel(dl.sf(k), upper) < 1e-14 or (upper < 1e-310 and dl.sf(k) == 0.0)
        assert _rel(dl.cdf(k), lower) < 1e-14 or (lower < 1e-310 and dl.cdf(k) == 0.0)
        with mp.workdps(DPS):
            assert abs(dl.logsf(k) - float(mp.log(upper))) <= 1e-14 * max(1.0, abs(dl.logsf(k)))
            assert abs(dl.logcdf(k) - float(mp.log(lower))) <= 1e-14 * max(1.0, abs(dl.logcdf(k)))
    np.testing.assert_array_equal(dl.sf(np.array(ks)), [dl.sf(k) for k in ks])


def test_distribution_objects_are_frozen_hashable_values() -> None:
    dg, dl = DiscreteGaussianDistribution("9/4"), DiscreteLaplaceDistribution(2.5)
    assert dg == DiscreteGaussianDistribution(Fraction(9, 4))
    assert hash(dl) == hash(DiscreteLaplaceDistribution("5/2"))
    assert dg.sigma2 == Fraction(9, 4)
    assert dl.scale == Fraction(5, 2)
    with pytest.raises(AttributeError):
        dg.sigma2 = Fraction(1)  # type: ignore[misc]
    assert repr(dl) == "DiscreteLaplaceDistribution(scale=Fraction(5, 2))"


@pytest.mark.parametrize(
    "dist",
    [DiscreteGaussianDistribution(Fraction(7, 3)), DiscreteLaplaceDistribution(Fraction(3, 2))],
    ids=["gaussian", "laplace"],
)
def test_moments_and_tails_agree_with_the_pmf(dist) -> None:  # type: ignore[no-untyped-def]
    # Exact sums over a support far wider than the mass (tails < 1e-30): float sums agree
    # with the closed-form methods to rounding.
    ks = np.arange(-120, 121)
    pmf = np.asarray(dist.pmf(ks))
    assert math.fsum(pmf) == pytest.approx(1.0, rel=1e-14)
    assert dist.mean() == 0.0
    assert math.fsum(ks * ks * pmf) == pytest.approx(dist.var(), rel=1e-13)
    assert dist.std() == pytest.approx(math.sqrt(dist.var()), rel=1e-15)
    for k in (-3, 0, 2):
        assert math.fsum(pmf[ks <= k]) == pytest.approx(dist.cdf(k), rel=1e-13)
        assert math.fsum(pmf[ks > k]) == pytest.approx(dist.sf(k), rel=1e-13)
        assert math.exp(dist.logpmf(k)) == pytest.approx(dist.pmf(k), rel=1e-14)


def test_rvs_draws_from_the_samplers() -> None:
    dg, dl = DiscreteGaussianDistribution(4), DiscreteLaplaceDistribution(Fraction(5, 2))
    one = dg.rvs(rng=ChaCha20Random(3))
    assert type(one) is int
    np.testing.assert_array_equal(
        dg.rvs((2, 3), rng=ChaCha20Random(4)), discrete_gaussian(4, (2, 3), rng=ChaCha20Random(4))
    )
    np.testing.assert_array_equal(
        dl.rvs(5, rng=ChaCha20Random(5)), discrete_laplace(Fraction(5, 2), 5, rng=ChaCha20Random(5))
    )
    assert type(DiscreteGaussianDistribution(10**100).rvs(rng=ChaCha20Random(6))) is int
    with pytest.raises(TypeError, match="rng must be None or a gaussdp.random.RandomSource"):
        dg.rvs(3, rng=7)  # type: ignore[arg-type]
