r"""Exact mathematics of the discrete Gaussian and the discrete Laplace.

The discrete Gaussian :math:`\mathcal{N}_\mathbb{Z}(0, \sigma^2)` has pmf
:math:`p(y) = e^{-y^2/(2\sigma^2)} / Z(\sigma^2)` on the integers, with
:math:`Z(\sigma^2) = \sum_{y \in \mathbb{Z}} e^{-y^2/(2\sigma^2)}` (CKS Def 1).
The discrete Laplace with scale :math:`t` has pmf proportional to
:math:`e^{-|x|/t}` (CKS §4). Both are the noise distributions of
:mod:`gaussdp`'s exact mechanisms; this module gives them as frozen distribution
objects in scipy's vocabulary, :class:`DiscreteGaussianDistribution` and
:class:`DiscreteLaplaceDistribution` (pmf, tails, moments, normaliser, exact
privacy profiles, and ``rvs``, which delegates to :mod:`gaussdp.sampling`).

Parameters are exact rationals: ``sigma2`` (:math:`\sigma^2`) and ``scale``
(:math:`t`) are converted with :func:`gaussdp._validation.check_fraction`
(floats exactly), and must lie in ``[1e-12, 1e300]``.

Numerical method and error control
----------------------------------
Every infinite sum is truncated with a stated bound on the neglected part
(:math:`e^{-45} \approx 2.9\times10^{-20}` relative for direct sums,
:math:`10^{-17}` for Euler--Maclaurin), so the results carry only
floating-point rounding error. Measured against mpmath at 50+ digits in
``tests/privacy/test_discrete.py``: a few ulps for the normaliser, pmf, tails,
variance and δ, and at most :math:`\approx 6\times10^{-15}` relative for δ
with huge :math:`\sigma^2` (Euler--Maclaurin path).

* **Normaliser.** For :math:`\sigma^2 \le 1`, direct summation. For
  :math:`\sigma^2 > 1`, Poisson summation (the Jacobi theta identity)
  :math:`Z = \sqrt{2\pi\sigma^2}\,\sum_{n} e^{-2\pi^2\sigma^2 n^2}`, whose
  terms :math:`n \ne 0` are below :math:`e^{-19.7}` and decay super-geometrically.
* **Tails** :math:`\sum_{y \ge m} e^{-y^2/(2\sigma^2)}` (for ``sf`` and the
  privacy profile). Direct summation of the terms relative to the first one
  whenever it needs few terms; otherwise (large :math:`\sigma^2` with a
  threshold :math:`m \ll \sigma^2`) the Euler--Maclaurin formula with :math:`p`
  Bernoulli corrections, whose remainder is bounded by
  :math:`\frac{|B_{2p}|}{(2p)!}\int_m^\infty |f^{(2p)}|`; the bound is evaluated
  (see :func:`_em_remainder_log_factor`) and the formula is used only when it is
  below :math:`10^{-17}` relative.
* **Privacy profile** (CKS Thm 7) is summed as a series of *non-negative* terms
  :math:`\sum_{z \ge m} p(z)\,(1 - e^{\varepsilon - L(-z)})` (no cancellation
  between two tail probabilities), so δ has relative accuracy down to the
  smallest normal float; for huge :math:`\sigma^2` the same non-negative
  summand goes through Euler--Maclaurin, its integral written with the moments
  :math:`\int_0^\infty v^k e^{-2uv-v^2}\,dv` so that no difference of two nearly
  equal tails is ever formed.
* Large exponents :math:`x = k^2/(2\sigma^2)` are kept exact (``Fraction``) and
  :math:`e^{-x}` is formed as :math:`e^{-\lfloor x\rfloor} e^{-(x - \lfloor x\rfloor)}`,
  so tiny probabilities (δ down to 1e-300) keep full relative accuracy.

References
----------
.. [CKS] C. L. Canonne, G. Kamath, T. Steinke. "The Discrete Gaussian for
   Differential Privacy." NeurIPS 2020 / Journal of Privacy and
   Confidentiality 2022. arXiv:2004.00010.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import overload

import numpy as np
from numpy.typing import NDArray
from scipy import special

from gaussdp._validation import check_delta, check_epsilon, check_fraction, check_int
from gaussdp.errors import invalid
from gaussdp.random import RandomSource
from gaussdp.sampling import discrete_gaussian as sample_discrete_gaussian
from gaussdp.sampling import discrete_laplace as sample_discrete_laplace

__all__ = ["DiscreteGaussianDistribution", "DiscreteLaplaceDistribution"]

FloatArray = NDArray[np.float64]

#: The range of σ² (or scale) the samplers draw and the distributions take, exact.
SIGMA2_MIN = Fraction(1, 10**12)
SIGMA2_MAX = Fraction(10**300)
_PARAM_RANGE = "a rational number in [1e-12, 1e300]"

#: Direct summation for the normaliser/variance below this σ², Poisson above.
_POISSON_SWITCH = Fraction(1)
#: Relative size of a neglected tail that we accept: e^{-45} ≈ 2.9e-20 < 2^{-60}.
_LOG_TAIL_TOL = -45.0
#: Euler-Maclaurin is used only if its remainder bound is below this (relative).
_LOG_EM_TOL = math.log(1e-17)
#: Euler-Maclaurin is not attempted below this σ² (direct sums are short there).
_EM_MIN_SIGMA2 = Fraction(10**4)
_EM_MAX_ORDER = 6
#: Bernoulli numbers B_2, B_4, ..., B_12.
_BERNOULLI = (
    Fraction(1, 6),
    Fraction(-1, 30),
    Fraction(1, 42),
    Fraction(-1, 30),
    Fraction(5, 66),
    Fraction(-691, 2730),
)
_SQRT_PI_2 = math.sqrt(math.pi) / 2.0
_LOG_2PI = math.log(2.0 * math.pi)

#: Grid of ``DiscreteGaussianDistribution.calibrate``: σ² = n·2^e with 2^20 <= n < 2^21.
_GRID_BITS = 20


# ---------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------


def _check_param(name: str, value: object) -> Fraction:
    result = check_fraction(name, value)
    if not SIGMA2_MIN <= result <= SIGMA2_MAX:
        raise ValueError(invalid(name, _PARAM_RANGE, value))
    return result


def _check_sensitivity(value: object) -> int:
    return check_int("sensitivity", value, minimum=1)


_K_CONSTRAINT = "an integer or an array of integers"


def _scalar_k(k: object) -> int | None:
    """Return ``k`` as a Python int if it is a scalar, ``None`` if array-like."""
    if isinstance(k, bool | np.bool_):
        raise TypeError(invalid("k", _K_CONSTRAINT, k))
    if isinstance(k, numbers.Integral):
        return int(k)
    if isinstance(k, numbers.Real):
        as_float = float(k)
        if not math.isfinite(as_float) or not as_float.is_integer():
            raise ValueError(invalid("k", _K_CONSTRAINT, k))
        return int(as_float)
    if isinstance(k, np.ndarray | list | tuple):
        return None
    raise TypeError(invalid("k", _K_CONSTRAINT, k))


def _array_k(k: object) -> NDArray[np.object_] | FloatArray:
    """Validate an array-like ``k``: a float64 array, or an object array of ints."""
    arr = np.asarray(k)
    if arr.dtype.kind in "iu":
        return arr.astype(np.float64)
    if arr.dtype.kind == "f":
        if not bool(np.all(np.isfinite(arr))) or not bool(np.all(arr == np.floor(arr))):
            raise ValueError(invalid("k", _K_CONSTRAINT, k))
        return arr.astype(np.float64)
    if arr.dtype.kind == "O":
        flat = arr.ravel()
        for item in flat:
            if isinstance(item, bool) or not isinstance(item, numbers.Integral):
                raise TypeError(invalid("k", _K_CONSTRAINT, k))
        out = np.empty(arr.shape, dtype=object)
        out.ravel()[:] = [int(item) for item in flat]
        return out
    raise TypeError(invalid("k", _K_CONSTRAINT, k))


#: Integers (and ratios) above this overflow float products: paths that meet them take care.
_HUGE_INDEX = 2**1000


def _to_float_or_inf(x: Fraction) -> float:
    """``float(x)`` for ``x >= 0``, or ``inf`` when it exceeds the float range."""
    try:
        return float(x)
    except OverflowError:
        return math.inf


def _log_fraction(x: Fraction) -> float:
    return math.log(x.numerator) - math.log(x.denominator)


def _exp(x: float) -> float:
    """``exp`` that returns ``inf`` instead of raising ``OverflowError``."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


# ---------------------------------------------------------------------------
# normaliser
# ---------------------------------------------------------------------------


def _direct_count(s: float, extra: float = 0.0) -> int:
    r"""Smallest N with (N+1)²/(2s) >= 45 + extra (the neglected tail then is tiny).

    For y >= N+1 and s <= 1 consecutive terms of e^{-y²/(2s)} (or y² e^{-y²/(2s)})
    shrink by a factor <= 4 e^{-3/2} < 1/2 once N >= 2, so the neglected tail is at
    most twice its first term: below 2 e^{-45-extra}.
    """
    return max(3, math.ceil(math.sqrt(2.0 * s * (45.0 + extra))))


def _theta_terms(s: Fraction) -> tuple[float, float]:
    r"""Return (Σ_{n>=1} e^{-2π²s n²}, Σ_{n>=1} n² e^{-2π²s n²}) for s > 1.

    With q = e^{-2π²s} <= e^{-2π²} the ratio of consecutive terms n -> n+1 is
    ((n+1)/n)² q^{2n+1} <= 4 e^{-6π²} < 1/2, so the terms n >= 4 that are dropped
    sum to less than 2·16·q^{16} < e^{-312}: far below double precision.
    """
    a = 2.0 * math.pi**2 * float(s)
    t1 = sum(math.exp(-a * n * n) for n in range(1, 4))
    t2 = sum(n * n * math.exp(-a * n * n) for n in range(1, 4))
    return t1, t2


def _log_normalizer(s: Fraction) -> float:
    if s <= _POISSON_SWITCH:
        sf = float(s)
        y = np.arange(1, _direct_count(sf) + 1, dtype=np.float64)
        # Z = 1 + 2 Σ_{y>=1} e^{-y²/(2σ²)}  (CKS Def 1); tail bound in _direct_count
        return math.log1p(2.0 * float(np.sum(np.exp(-(y * y) / (2.0 * sf)))))
    # Poisson summation (CKS Fact 19 proof): Z = sqrt(2πσ²) Σ_n e^{-2π²σ²n²}
    t1, _ = _theta_terms(s)
    return 0.5 * (_LOG_2PI + _log_fraction(s)) + math.log1p(2.0 * t1)


def _normalizer(s: Fraction) -> float:
    if s <= _POISSON_SWITCH:
        return math.exp(_log_normalizer(s))  # log Z <= log(1 + 2·e^{-1/2}·1.01) < 0.6
    t1, _ = _theta_terms(s)
    # Poisson summation (CKS Fact 19 proof), evaluated directly to avoid exp(log Z)
    return math.sqrt(2.0 * math.pi * float(s)) * (1.0 + 2.0 * t1)


# ---------------------------------------------------------------------------
# pmf
# ---------------------------------------------------------------------------


def _half_square_over(k: object, s: Fraction) -> float | FloatArray:
    """k²/(2s) (exact and rounded once for Python ints; float64 for arrays)."""
    scalar = _scalar_k(k)
    if scalar is not None:
        return _to_float_or_inf(Fraction(scalar * scalar) / (2 * s))
    arr = _array_k(k)
    if arr.dtype == object:
        flat = [_to_float_or_inf(Fraction(int(v) * int(v)) / (2 * s)) for v in arr.ravel()]
        return np.asarray(flat, dtype=np.float64).reshape(arr.shape)
    with np.errstate(over="ignore"):
        result: FloatArray = (arr * arr) / (2.0 * float(s))
    return result


# ---------------------------------------------------------------------------
# tails
# ---------------------------------------------------------------------------


def _log_binom_dfact_sum(p: int) -> float:
    """log Σ_j C(p, j) (2j-1)!!  (the constant part of B_p(u) below)."""
    total = 0
    dfact = 1  # (2j-1)!!, with (-1)!! = 1
    for j in range(p + 1):
        if j > 0:
            dfact *= 2 * j - 1
        total += math.comb(p, j) * dfact
    return math.log(total)


def _abs_hermite_at_one(n: int) -> int:
    """Sum of |coefficients| of the physicists' Hermite polynomial H_n."""
    g_prev, g = 1, 2
    if n == 0:
        return 1
    for j in range(1, n):
        g_prev, g = g, 2 * g + 2 * j * g_prev
    return g


def _em_remainder_log_factor(p: int, u: float, s: float) -> float:
    r"""log of an upper bound on |R_p| / ∫_m^∞ e^{-y²/(2s)} dy, with u = m/sqrt(2s).

    Euler-Maclaurin's remainder after p corrections obeys
    |R_p| <= |B_{2p}|/(2p)! ∫_m^∞ |f^{(2p)}(y)| dy, and with f(y) = e^{-y²/(2s)},
    f^{(2p)}(y) = (2s)^{-p} H_{2p}(w) e^{-w²} in w = y/sqrt(2s). We bound
    |H_{2p}(w)| <= A_p (1 + w²)^p with A_p the sum of |coefficients| of H_{2p}.
    For u >= 0: the Gaussian overshoot W - u given W >= u (density ∝ e^{-w²}) is
    stochastically smaller than a half-normal T with density ∝ e^{-t²} on t >= 0
    (the Gaussian hazard rate increases), so
    E[(1+W²)^p | W >= u] <= E[(1 + 2u² + 2T²)^p] = Σ_j C(p,j)(1+2u²)^{p-j}(2j-1)!!
    <= (1+2u²)^p Σ_j C(p,j)(2j-1)!!. For u < 0: ∫_u^∞ e^{-w²} >= sqrt(π)/2, and the
    full Gaussian moment gives the same bound with u = 0 and a factor 2.
    """
    log_a = math.log(_abs_hermite_at_one(2 * p))
    log_bern = math.log(abs(_BERNOULLI[p - 1])) - math.lgamma(2 * p + 1)
    if u > 0:
        uu = 2.0 * math.log(u) + math.log(2.0) if u > 1e100 else math.log1p(2.0 * u * u)
        log_b = p * uu + _log_binom_dfact_sum(p)
    else:
        log_b = math.log(2.0) + _log_binom_dfact_sum(p)
    return log_bern + log_a + log_b - p * math.log(2.0 * s)


def _scaled_hermite(y_over_s: float, inv_s: float, n: int) -> list[float]:
    """h_j = (2s)^{-j/2} H_j(y/sqrt(2s)), j = 0..n, so f^{(j)}(y) = (-1)^j h_j f(y).

    Recurrence h_{j+1} = (y/s) h_j - (j/s) h_{j-1} (from H_{j+1} = 2w H_j - 2j H_{j-1}).
    """
    h = [1.0, y_over_s]
    for j in range(1, n):
        h.append(y_over_s * h[j] - j * inv_s * h[j - 1])
    return h


def _direct_sum(m: int, s: Fraction, c: float | None, b: float) -> float:
    r"""Σ_{z >= m} e^{-(z² - z0²)/(2s)} w(z), with z0 = max(m, 0) (all terms <= 1).

    ``w(z) = 1`` if ``c`` is None, else ``w(z) = 1 - e^{-(c + (z - m) b)}`` (c > 0,
    b > 0). Summation stops when the rest is provably below e^{-45} relative: past
    the peak the exponents grow by at least d = (2 z + 1)/(2s) per step and w <= 1,
    so the rest after index z is at most e^{-e(z+1)} / (1 - e^{-d}). When m < 0 the
    terms below -R are dropped, R chosen so they are below e^{-45} of the term z = 0.
    """
    sf = float(s)
    z0 = max(m, 0)
    ratio = Fraction(z0) / s
    if ratio > 100 and (z0 > _HUGE_INDEX or ratio > _HUGE_INDEX):
        # The exponents below would overflow; the terms after the first are below
        # e^{-(2 z0 + 1)/(2s)} < e^{-200} each and shrink geometrically, so the first
        # term is the sum to double precision.
        return 1.0 if c is None else -math.expm1(-c)
    two_z0 = float(2 * z0)
    inv_2s = 1.0 / (2.0 * sf)
    start = m
    if m < 0:
        # the left part Σ_{z < -R} f(z) w(z) <= Σ_{z > R} f(z) <= f(R+1)/(1 - e^{-(2R+3)/(2s)})
        # must be below e^{-45} f(0) w(0); w(0) >= 1 - e^{-(c + |m| b)}.
        log_w0 = 0.0 if c is None else math.log(-math.expm1(-(c + (-m) * b)))
        extra = -log_w0 + max(0.0, math.log1p(sf))
        radius = _direct_count(sf, extra)
        start = max(m, -radius)
    parts: list[float] = []
    i = start - z0  # z = z0 + i
    chunk = 256
    while True:
        idx = np.arange(i, i + chunk, dtype=np.float64)
        terms = np.exp(-(idx * (two_z0 + idx)) * inv_2s)
        if c is not None:
            terms *= -np.expm1(-(c + (idx + float(z0 - m)) * b))
        parts.append(float(np.sum(terms)))
        i += chunk  # the next index to sum
        if i >= 0:
            total = math.fsum(parts)
            e_next = i * (two_z0 + i) * inv_2s
            d = (two_z0 + 2.0 * i + 1.0) * inv_2s
            log_rest = -e_next - math.log(-math.expm1(-d))
            if total > 0.0 and log_rest - math.log(total) < _LOG_TAIL_TOL:
                return total
        chunk = min(2 * chunk, 1 << 16)


def _scaled(x: Fraction, r: float) -> float:
    """e^{-x} r for an exact x >= 0, without rounding x itself to a float.

    e^{-x} = e^{-n} e^{-(x-n)} with n = ⌊x⌋ exact, so a large x costs no accuracy
    (rounding x to a float would cost x·2^{-53} relative).
    """
    n = math.floor(x)
    if n > 700:  # the result is below 1e-300 r: subnormal or zero
        return 0.0 if n > 1500 else math.exp(-float(x) + math.log(r))
    return math.exp(-n) * math.exp(-float(x - n)) * r


def _log_scaled(x: Fraction, r: float) -> float:
    """log(e^{-x} r)."""
    return -_to_float_or_inf(x) + math.log(r)


def _upper_tail(m: int, s: Fraction, z: float) -> tuple[Fraction, float]:
    r"""(x, r) with P[Y >= m] = e^{-x} r, for m >= 1, to relative accuracy.

    x = m²/(2s) (exact) and r = Σ_{y>=m} e^{-(y²-m²)/(2s)} / Z.
    """
    x = Fraction(m * m) / (2 * s)
    if m > _HUGE_INDEX and math.isinf(_to_float_or_inf(x)):
        # e^{-x} is 0 in floats; r <= (1 + ∫_m^∞ e^{-(y²-m²)/(2s)} dy) / Z <= (1 + s/m) / Z.
        return x, (1.0 + _to_float_or_inf(s / m)) / z
    if s >= _EM_MIN_SIGMA2:
        sf = float(s)
        u = math.sqrt(float(x)) if m > _HUGE_INDEX else float(m) / math.sqrt(2.0 * sf)
        for p in range(1, _EM_MAX_ORDER + 1):
            if _em_remainder_log_factor(p, u, sf) < _LOG_EM_TOL:
                # Euler-Maclaurin: Σ_{y>=m} f = ∫_m^∞ f + f(m)/2
                #   - Σ_k B_{2k}/(2k)! f^{(2k-1)}(m) + R_p, all divided by f(m) here;
                # ∫_m^∞ f / f(m) = sqrt(2s) · (sqrt(π)/2) erfcx(u).
                h = _scaled_hermite(float(Fraction(m) / s), 1.0 / sf, 2 * p)
                rest = 0.5
                for k in range(1, p + 1):
                    rest += float(_BERNOULLI[k - 1]) / math.factorial(2 * k) * h[2 * k - 1]
                # divide by Z = sqrt(2πs)(1 + 2Σ q^{n²}) without forming sqrt(2s) twice
                theta = z / math.sqrt(2.0 * math.pi * sf)
                bracket = _SQRT_PI_2 * float(special.erfcx(u)) + rest / math.sqrt(2.0 * sf)
                return x, bracket / (math.sqrt(math.pi) * theta)
    return x, _direct_sum(m, s, None, 0.0) / z


def _log_sf_int(m: int, s: Fraction, z: float) -> float:
    """log P[Y >= m] for an integer m; z is the normaliser."""
    if m <= 0:
        # P[Y >= m] = 1 - P[Y <= m - 1] = 1 - P[Y >= 1 - m] (symmetry), and
        # P[Y >= 1 - m] <= P[Y >= 1] < 1/2, so log1p is well conditioned.
        return math.log1p(-_scaled(*_upper_tail(1 - m, s, z)))
    return _log_scaled(*_upper_tail(m, s, z))


def _sf_int(m: int, s: Fraction, z: float) -> float:
    """P[Y >= m] for an integer m; z is the normaliser."""
    if m <= 0:
        return 1.0 - _scaled(*_upper_tail(1 - m, s, z))
    return _scaled(*_upper_tail(m, s, z))


def _apply_int(k: object, fn: Callable[[int], float]) -> float | FloatArray:
    """``fn`` at an integer ``k``, or element-wise over an array of them."""
    scalar = _scalar_k(k)
    if scalar is not None:
        return fn(scalar)
    arr = _array_k(k)
    flat = [fn(int(v)) for v in arr.ravel()]
    return np.asarray(flat, dtype=np.float64).reshape(arr.shape)


def _tail_fn(s: Fraction, z: float, shift: int, sign: int, log: bool) -> Callable[[int], float]:
    """k -> (log) P[Y >= sign k + shift] for N_Z(0, s) with normaliser z."""
    tail = _log_sf_int if log else _sf_int
    return lambda k: tail(sign * k + shift, s, z)


def _variance(s: Fraction) -> float:
    """E[Y²] of N_Z(0, s); see :meth:`DiscreteGaussianDistribution.var`."""
    sf = float(s)
    if s <= _POISSON_SWITCH:
        y = np.arange(1, _direct_count(sf, 2.0 * math.log(45.0)) + 1, dtype=np.float64)
        terms = np.exp(-(y * y) / (2.0 * sf))
        # CKS Def 1: E[Y²] = Σ y² e^{-y²/(2σ²)} / Σ e^{-y²/(2σ²)}; y² <= N² adds
        # log N² < 2 log 45 to the required exponent (hence `extra` above).
        return 2.0 * float(np.sum(y * y * terms)) / (1.0 + 2.0 * float(np.sum(terms)))
    t1, t2 = _theta_terms(s)
    # CKS Prop 21 proof (Poisson summation): σ² - 4π²σ⁴ · 2Σn²q^{n²} / (1 + 2Σq^{n²})
    if t2 == 0.0:
        return sf
    log_deficit = math.log(4.0 * math.pi**2) + 2.0 * _log_fraction(s) + math.log(2.0 * t2)
    return sf - math.exp(log_deficit - math.log1p(2.0 * t1))


# ---------------------------------------------------------------------------
# privacy profile (CKS Thm 7)
# ---------------------------------------------------------------------------


def _n_moments(u: float, kmax: int) -> list[float]:
    r"""N_k(u) = ∫_0^∞ v^k e^{-2uv - v²} dv for k = 0..kmax.

    N_0 = (sqrt(π)/2) erfcx(u). For u > 7 the alternating asymptotic series
    N_k = Σ_j (-1)^j (k+2j)! / (j! (2u)^{k+2j+1}) is used (from the alternating
    Taylor series of e^{-v²}, so the error is below the first omitted term);
    otherwise the recurrence 2 N_{k+1} = k N_{k-1} - 2u N_k, 2 N_1 = 1 - 2u N_0.
    """
    if u > 7.0:
        out = []
        inv = 1.0 / (2.0 * u)
        for k in range(kmax + 1):
            term = math.factorial(k) * inv ** (k + 1)
            total = 0.0
            j = 0
            while term != 0.0:
                total += term
                if abs(term) < 1e-19 * abs(total):
                    break
                ratio = (k + 2 * j + 1) * (k + 2 * j + 2) / (j + 1) * inv * inv
                if ratio >= 1.0:  # the asymptotic series starts to diverge: stop
                    break
                term *= -ratio
                j += 1
            out.append(total)
        return out
    n = [_SQRT_PI_2 * float(special.erfcx(u))]
    n.append((1.0 - 2.0 * u * n[0]) / 2.0)
    for k in range(1, kmax):
        n.append((k * n[k - 1] - 2.0 * u * n[k]) / 2.0)
    return n


def _em_delta_ratio(m: int, s: Fraction, c: float, sensitivity: int, z: float) -> float | None:
    r"""Euler-Maclaurin for Σ_{z>=m} [f(z) - e^ε f(z+Δ)] / (f(m) Z), or None.

    With G(z) = f(z) - e^ε f(z+Δ) = f(z)(1 - e^{-c - (z-m)Δ/s}) (non-negative on
    z >= m), Σ_{z>=m} G = ∫_m^∞ G + G(m)/2 - Σ_k B_{2k}/(2k)! G^{(2k-1)}(m) + R_p.
    In v = (z-m)/sqrt(2s), ∫_m^∞ G / f(m) = sqrt(2s) K with
    K = ∫_0^∞ e^{-2uv-v²}(1 - e^{-c-2hv}) dv = (1-e^{-c}) N_0(u) + e^{-c}(N_0(u) - N_0(u+h)),
    u = m/sqrt(2s), h = Δ/sqrt(2s); the difference N_0(u) - N_0(u+h) is the
    alternating series Σ_k (-1)^{k+1} (2h)^k N_k(u)/k! when h is small.
    G^{(j)}(m)/f(m) = (-1)^j [h_j(m) - e^{-c} h_j(m+Δ)] (scaled Hermite h_j).
    |R_p| <= |B_{2p}|/(2p)! (∫_m^∞|f^{(2p)}| + e^ε ∫_{m+Δ}^∞ |f^{(2p)}|), and
    e^ε ∫_{m+Δ}^∞ f <= ∫_m^∞ f, so the remainder is at most
    2 exp(_em_remainder_log_factor) · ∫_m^∞ f. Returns None if that bound is not
    below 1e-17 of the result.
    """
    sf = float(s)
    root = math.sqrt(2.0 * sf)
    u = float(m) / root
    h = sensitivity / root
    em1 = -math.expm1(-c)  # 1 - e^{-c}
    if h >= 0.05:
        nu = _n_moments(u, 0)[0]
        diff = nu - _n_moments(u + h, 0)[0]
    else:
        n1 = _n_moments(u, 1)
        nu = n1[0]
        # |term k| <= (2h)^k/k! · min(k!/(2u)^{k+1}, e^{u²} Γ((k+1)/2)/2): stop below 1e-19
        first = max(2.0 * h * n1[1], 1e-300)
        kmax = 1
        while kmax < 30:
            k = kmax + 1
            log_bound = math.lgamma((k + 1) / 2) - math.log(2.0) + (u * u if u < 0 else 0.0)
            if u > 0:
                log_bound = min(log_bound, math.lgamma(k + 1) - (k + 1) * math.log(2.0 * u))
            log_term = k * math.log(2.0 * h) - math.lgamma(k + 1) + log_bound
            if log_term < math.log(1e-19 * first):
                break
            kmax = k
        n = _n_moments(u, kmax)
        diff = 0.0
        for k in range(kmax, 0, -1):
            diff += (-1) ** (k + 1) * (2.0 * h) ** k / math.factorial(k) * n[k]
    # everything below is divided by sqrt(2s) (= root)
    main = (em1 * nu + (1.0 - em1) * diff) + em1 / (2.0 * root)
    if main <= 0.0:
        return None
    log_rel_scale = math.log(2.0) + math.log(nu) - math.log(main)
    for p in range(1, _EM_MAX_ORDER + 1):
        log_factor = max(
            _em_remainder_log_factor(p, u + h, sf), _em_remainder_log_factor(p, 0.0, sf)
        )
        if log_factor + log_rel_scale < _LOG_EM_TOL:
            break
    else:
        return None
    corr = 0.0
    hm = _scaled_hermite(float(Fraction(m) / s), 1.0 / sf, 2 * p)
    hm_d = _scaled_hermite(float(Fraction(m + sensitivity) / s), 1.0 / sf, 2 * p)
    for k in range(1, p + 1):
        j = 2 * k - 1
        corr += float(_BERNOULLI[k - 1]) / math.factorial(2 * k) * (hm[j] - (1.0 - em1) * hm_d[j])
    # Z = sqrt(2πs) θ with θ = 1 + 2Σ q^{n²}, so (sqrt(2s) · x) / Z = x / (sqrt(π) θ)
    theta = z / math.sqrt(2.0 * math.pi * sf)
    return (main + corr / root) / (math.sqrt(math.pi) * theta)


def _delta_parts(s: Fraction, eps: Fraction, sensitivity: int) -> tuple[Fraction, float]:
    r"""(x, r) with δ = e^{-x} r, δ of CKS Thm 7 as a sum of non-negative terms.

    Privacy loss of (N_Z(0,s), N_Z(Δ,s)) at y: L(y) = (Δ² - 2yΔ)/(2s); the worst
    event {L > ε} is y < Δ/2 - εs/Δ. With z = -y (symmetry) this is z > a with
    a = εs/Δ - Δ/2, i.e. z >= m = ⌊a⌋ + 1 (strict: terms with L = ε contribute 0
    either way), and
    δ = Σ_{z>=m} p(z) (1 - e^{ε - L(-z)}),  L(-z) - ε = c + (z - m)Δ/s,
    c = Δ(m - a)/s ∈ (0, Δ/s]. This equals P[Y > εs/Δ - Δ/2] - e^ε P[Y > εs/Δ + Δ/2].
    """
    a = eps * s / sensitivity - Fraction(sensitivity, 2)
    m = math.floor(a) + 1
    c = float(sensitivity * (m - a) / s)
    b = float(Fraction(sensitivity) / s)
    z = _normalizer(s)
    if m >= 1:
        upper = _upper_tail(m, s, z)  # δ <= P[Y >= m]
        if _log_scaled(*upper) < -800.0:
            return upper  # δ underflows to 0.0 anyway; return the upper bound
    if s >= _EM_MIN_SIGMA2:
        ratio = _em_delta_ratio(m, s, c, sensitivity, z)
        if ratio is not None:
            return Fraction(m * m) / (2 * s), ratio
    z0 = max(m, 0)  # _direct_sum is relative to the term f(z0)
    return Fraction(z0 * z0) / (2 * s), _direct_sum(m, s, c, b) / z


def _grid_value(i: int) -> Fraction:
    """The i-th point of the calibration grid (increasing in i; i = 0 is 1)."""
    e, n = divmod(i, 1 << _GRID_BITS)
    mant = (1 << _GRID_BITS) + n
    if e >= 0:
        return Fraction(mant << e, 1 << _GRID_BITS)
    return Fraction(mant, 1 << (_GRID_BITS - e))


# ---------------------------------------------------------------------------
# discrete Laplace (CKS §4)
# ---------------------------------------------------------------------------


def _log_tanh_half_inv(t: Fraction) -> float:
    """log tanh(1/(2t)) = log P[X = 0] for the discrete Laplace with scale t."""
    x = 1.0 / (2.0 * float(t))
    if x < 0.5:
        return math.log(math.tanh(x))
    e = math.exp(-2.0 * x)
    return math.log1p(-2.0 * e / (1.0 + e))


def _laplace_log_tail(m: int, t: Fraction) -> float:
    """log P[X >= m] for the discrete Laplace with scale t (geometric sums, CKS §4).

    For m >= 1, P[X >= m] = q^m / (1 + q) with q = e^{-1/t} (exponent m/t kept exact);
    for m <= 0, P[X >= m] = 1 - P[X >= 1 - m] by symmetry, and P[X >= 1 - m] < 1/2.
    """
    log_one_plus_q = math.log1p(math.exp(-1.0 / float(t)))
    if m >= 1:
        return -_to_float_or_inf(Fraction(m) / t) - log_one_plus_q
    return math.log1p(-_scaled(Fraction(1 - m) / t, math.exp(-log_one_plus_q)))


def _laplace_tail(m: int, t: Fraction) -> float:
    """P[X >= m] for the discrete Laplace with scale t (see :func:`_laplace_log_tail`)."""
    r = 1.0 / (1.0 + math.exp(-1.0 / float(t)))
    if m >= 1:
        return _scaled(Fraction(m) / t, r)
    return 1.0 - _scaled(Fraction(1 - m) / t, r)


def _calibrated_sigma2(
    eps: Fraction, log_target: float, sensitivity: int, delta: float
) -> Fraction:
    """The smallest grid σ² whose δ(ε) (CKS Thm 7) is at most the target; see ``calibrate``."""

    def ok(i: int) -> bool:
        # a 1e-12 relative safety margin covers the rounding error of δ (< 1e-14)
        return _log_scaled(*_delta_parts(_grid_value(i), eps, sensitivity)) + 1e-12 <= log_target

    step = 1 << _GRID_BITS  # one doubling of σ²
    max_i = (math.floor(math.log2(1e300)) - 1) << _GRID_BITS
    min_i = (math.ceil(math.log2(1e-12)) + 1) << _GRID_BITS
    i0 = (round(2 * math.log2(sensitivity)) if sensitivity > 1 else 0) << _GRID_BITS
    if ok(i0):
        hi, jump = i0, step
        lo = hi - jump
        while ok(lo):
            if lo <= min_i:  # unreachable for delta < 1: δ -> 1 as σ² -> 0
                return _grid_value(lo)
            hi, jump = lo, 2 * jump
            lo = max(hi - jump, min_i)
    else:
        lo, jump = i0, step
        hi = lo + jump
        while not ok(hi):
            if hi >= max_i:
                raise ValueError(
                    invalid(
                        "delta",
                        f"attainable with sigma2 <= 1e300 at epsilon={float(eps)!r}",
                        delta,
                    )
                )
            lo, jump = hi, 2 * jump
            hi = min(lo + jump, max_i)
    while hi - lo > 1:  # invariant: not ok(lo), ok(hi)
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return _grid_value(hi)


# ---------------------------------------------------------------------------
# the distributions
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DiscreteGaussianDistribution:
    r"""The discrete Gaussian :math:`\mathcal{N}_\mathbb{Z}(0, \sigma^2)` in scipy's vocabulary.

    pmf :math:`p(y) = e^{-y^2/(2\sigma^2)} / Z(\sigma^2)` on the integers, with
    :math:`Z(\sigma^2) = \sum_{y \in \mathbb{Z}} e^{-y^2/(2\sigma^2)}` (CKS Def 1).
    ``sigma2`` is validated once, here; every method then takes only its own
    arguments (``k`` an integer or an array of integers, like scipy's frozen
    ``rv_discrete``). The accuracy of each method is that of the module notes
    (:mod:`gaussdp.privacy.discrete`): a few ulps, measured against mpmath.

    The name says *distribution* because :class:`gaussdp.mechanisms.DiscreteGaussian`
    is the mechanism (and accounting event) that adds this noise; its ``noise``
    is one of these.

    Parameters
    ----------
    sigma2 : int, float, Fraction or str
        The scale parameter :math:`\sigma^2`, an exact rational in ``[1e-12, 1e300]``
        (floats are taken at their exact binary value, ``"p/q"`` strings parsed).

    Raises
    ------
    TypeError
        If ``sigma2`` is not a real number or rational string.
    ValueError
        If ``sigma2`` is NaN, infinite or outside ``[1e-12, 1e300]``.

    Notes
    -----
    Methods taking ``k`` accept Python ints of any size, numpy integer arrays, and
    float values or arrays that are exact integers; they return a float for a
    scalar ``k`` and a float64 array of ``k``'s shape otherwise, and raise
    ``TypeError`` / ``ValueError`` (message template of :mod:`gaussdp.errors`)
    for a bool, a string or a non-integral value.

    References
    ----------
    .. [CKS] C. L. Canonne, G. Kamath, T. Steinke. "The Discrete Gaussian for
       Differential Privacy." NeurIPS 2020. arXiv:2004.00010.

    Examples
    --------
    >>> dg = DiscreteGaussianDistribution("1/4")
    >>> dg
    DiscreteGaussianDistribution(sigma2=Fraction(1, 4))
    >>> dg.pmf(np.array([-1, 0, 1]))
    array([0.10645077, 0.78657071, 0.10645077])
    >>> dg.var()  # well below 1/4 for small sigma2 (CKS Prop 21)
    0.215012675088
    """

    sigma2: Fraction
    _z: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        s = _check_param("sigma2", self.sigma2)
        object.__setattr__(self, "sigma2", s)
        object.__setattr__(self, "_z", _normalizer(s))

    @classmethod
    def calibrate(
        cls, epsilon: object, delta: object, sensitivity: object = 1
    ) -> DiscreteGaussianDistribution:
        r"""The smallest grid σ² at which adding this noise is (ε, δ)-DP (CKS Thm 7).

        Parameters
        ----------
        epsilon : float
            Target :math:`\varepsilon \ge 0`, finite.
        delta : float
            Target :math:`\delta \in (0, 1)`.
        sensitivity : int, optional
            The sensitivity :math:`\Delta`, an integer :math:`\ge 1` (default 1).

        Returns
        -------
        DiscreteGaussianDistribution
            Its ``sigma2`` is a point of the grid :math:`\{n\,2^{e-20} : 2^{20} \le n
            < 2^{21}, e \in \mathbb{Z}\}` (dyadic rationals with 21 significant bits,
            relative spacing at most :math:`2^{-20}`) with ``delta(epsilon, sensitivity)
            <= delta * (1 - 1e-12)``, while at the previous grid point δ exceeds
            ``delta * (1 - 1e-12)``. δ(σ²) is decreasing in practice, which makes
            this the smallest such point; the target is never missed.

        Raises
        ------
        TypeError
            If an argument has the wrong type.
        ValueError
            If ``epsilon`` is negative or not finite, ``delta`` is not in (0, 1),
            ``sensitivity`` is not an integer ``>= 1``, or the target needs
            :math:`\sigma^2 > 10^{300}`.

        Notes
        -----
        Exponential search for a bracket on the grid index (starting at
        :math:`\sigma^2 = \Delta^2`), then bisection: about 20 + log2(octaves
        searched) evaluations of the exact δ, which is accurate to better than
        1e-14 relative, so the 1e-12 margin makes the result safe against
        rounding. The grid is dyadic so that exact samplers get a short rational.

        Examples
        --------
        >>> dg = DiscreteGaussianDistribution.calibrate(1.0, 1e-5)
        >>> dg.sigma2, float(dg.sigma2)
        (Fraction(916929, 65536), 13.991226196289)
        >>> dg.delta(1.0) <= 1e-5
        True
        """
        eps = Fraction(check_epsilon("epsilon", epsilon))
        target = check_delta("delta", delta)
        sens = _check_sensitivity(sensitivity)
        return cls(_calibrated_sigma2(eps, math.log(target), sens, target))

    # -- normaliser ---------------------------------------------------------------------
    def normalizer(self) -> float:
        r""":math:`Z(\sigma^2)`, about :math:`\sqrt{2\pi\sigma^2}` for large σ² (always finite).

        For :math:`\sigma^2 \le 1` the sum is taken directly; above, by Poisson
        summation :math:`Z = \sqrt{2\pi\sigma^2}\,(1 + 2\sum_{n\ge1}
        e^{-2\pi^2\sigma^2 n^2})` (the Jacobi theta identity, CKS Fact 19); neglected
        terms are below :math:`2^{-60}` relative.

        Examples
        --------
        >>> DiscreteGaussianDistribution(1).normalizer()  # slightly above sqrt(2 pi)
        2.5066282880429
        """
        return self._z

    def log_normalizer(self) -> float:
        r""":math:`\log Z(\sigma^2)`, to a few ulps (see :meth:`normalizer`).

        Examples
        --------
        >>> DiscreteGaussianDistribution(10**100).log_normalizer()  # 0.5 log(2 pi 1e100)
        116.048193182907
        """
        return _log_normalizer(self.sigma2)

    # -- pmf ----------------------------------------------------------------------------
    @overload
    def logpmf(self, k: int) -> float: ...
    @overload
    def logpmf(self, k: object) -> float | FloatArray: ...
    def logpmf(self, k: object) -> float | FloatArray:
        r""":math:`\log P[Y = k] = -k^2/(2\sigma^2) - \log Z` (CKS Def 1).

        For a scalar ``k`` the exponent is exact and rounded once; for arrays it is
        computed in float64. ``-inf`` when :math:`k^2/(2\sigma^2)` exceeds the float range.

        Examples
        --------
        >>> DiscreteGaussianDistribution(1).logpmf([0, 3])
        array([-0.91893854, -5.41893854])
        >>> DiscreteGaussianDistribution(10**100).logpmf(10**60)  # -1e120 / 2e100 - log Z
        -5e+19
        """
        s = self.sigma2
        # CKS Def 1: log p(k) = -k²/(2σ²) - log Z
        return -_half_square_over(k, s) - _log_normalizer(s)

    @overload
    def pmf(self, k: int) -> float: ...
    @overload
    def pmf(self, k: object) -> float | FloatArray: ...
    def pmf(self, k: object) -> float | FloatArray:
        r""":math:`P[Y = k] = e^{-k^2/(2\sigma^2)}/Z` (CKS Def 1), 0.0 when it underflows.

        For a scalar ``k`` the exponent is exact (a few ulps even far in the tail);
        for arrays a few ulps times :math:`\max(1, k^2/(2\sigma^2))`.

        Examples
        --------
        >>> DiscreteGaussianDistribution(1).pmf(0)
        0.3989422782669
        """
        s, z = self.sigma2, self._z
        # CKS Def 1: p(k) = e^{-k²/(2σ²)} / Z (Z itself, not exp(log Z), for accuracy)
        scalar = _scalar_k(k)
        if scalar is not None:
            return _scaled(Fraction(scalar * scalar) / (2 * s), 1.0 / z)
        x = _half_square_over(k, s)
        result: FloatArray = np.exp(-x) / z
        return result

    # -- tails --------------------------------------------------------------------------
    def sf(self, k: object) -> float | FloatArray:
        r"""Survival function :math:`P[Y > k]`, relatively accurate down to the smallest float.

        For :math:`k \ge 0` the tail :math:`\sum_{y>k} e^{-y^2/(2\sigma^2)}/Z` is
        summed relative to its first term, directly or by Euler--Maclaurin with a
        bounded remainder (module notes), and formed with the exact exponent; for
        :math:`k < 0`, :math:`1 - P[Y > -k-1]` (symmetry).

        Examples
        --------
        >>> DiscreteGaussianDistribution(1).sf(0)  # (1 - p(0)) / 2
        0.300528860867
        >>> DiscreteGaussianDistribution(1).sf(10)
        2.11884070609e-27
        """
        return _apply_int(k, _tail_fn(self.sigma2, self._z, 1, 1, log=False))

    def logsf(self, k: object) -> float | FloatArray:
        r""":math:`\log P[Y > k]`, finite long after :math:`P[Y > k]` underflows (see :meth:`sf`).

        Examples
        --------
        >>> DiscreteGaussianDistribution(1).logsf(-1)  # log P[Y >= 0] = log((1 + p(0)) / 2)
        -0.357430745008
        >>> DiscreteGaussianDistribution(10**100).logsf(10**52)
        -5005.524208694
        """
        return _apply_int(k, _tail_fn(self.sigma2, self._z, 1, 1, log=True))

    def cdf(self, k: object) -> float | FloatArray:
        r""":math:`P[Y \le k] = P[Y \ge -k]` (symmetry), relatively accurate in the lower tail.

        Examples
        --------
        >>> DiscreteGaussianDistribution(1).cdf([-1, 0])
        array([0.30052886, 0.69947114])
        """
        return _apply_int(k, _tail_fn(self.sigma2, self._z, 0, -1, log=False))

    def logcdf(self, k: object) -> float | FloatArray:
        r""":math:`\log P[Y \le k]` (see :meth:`cdf`).

        Examples
        --------
        >>> dg = DiscreteGaussianDistribution(1)
        >>> dg.logcdf(-1) == dg.logsf(0)
        True
        """
        return _apply_int(k, _tail_fn(self.sigma2, self._z, 0, -1, log=True))

    # -- moments ------------------------------------------------------------------------
    def mean(self) -> float:
        """0.0: the distribution is symmetric about 0."""
        return 0.0

    def var(self) -> float:
        r""":math:`E[Y^2]`, strictly below :math:`\sigma^2` (CKS Prop 21), to an ulp.

        For :math:`\sigma^2 \le 1`, direct sums (neglected tail below
        :math:`2^{-60}` relative). Above, Poisson summation of numerator and
        denominator (proof of CKS Prop 21) gives exactly

        .. math:: E[Y^2] = \sigma^2 - 4\pi^2\sigma^4\,
           \frac{2\sum_{n\ge1} n^2 q^{n^2}}{1 + 2\sum_{n\ge1} q^{n^2}},
           \qquad q = e^{-2\pi^2\sigma^2};

        the relative deficit is below :math:`8\pi^2\sigma^2 e^{-2\pi^2\sigma^2}\cdot
        1.01 < 2^{-60}` for :math:`\sigma^2 \ge 3`, where the result is σ² rounded.

        Examples
        --------
        >>> DiscreteGaussianDistribution(1).var()
        0.9999997887677
        >>> DiscreteGaussianDistribution(10**100).var()
        1e+100
        """
        return _variance(self.sigma2)

    def std(self) -> float:
        """The standard deviation, ``sqrt(var())``."""
        return math.sqrt(self.var())

    # -- sampling -----------------------------------------------------------------------
    def rvs(
        self, size: int | tuple[int, ...] | None = None, *, rng: RandomSource | None = None
    ) -> int | NDArray[np.int64] | NDArray[np.object_]:
        """Exact draws (CKS §5 Alg 3, :func:`gaussdp.sampling.discrete_gaussian`).

        ``size=None`` gives one Python int; otherwise an array of that shape (int64,
        or Python ints when σ² > 2**80). ``rng=None`` is the operating system's CSPRNG;
        pass a :class:`~gaussdp.random.ChaCha20Random` to replay.

        Examples
        --------
        >>> from gaussdp.random import ChaCha20Random
        >>> DiscreteGaussianDistribution(4).rvs(6, rng=ChaCha20Random(0))
        array([ 0, -1, -4,  3, -2, -2])
        """
        draw = sample_discrete_gaussian(self.sigma2, () if size is None else size, rng=rng)
        return int(draw[()]) if size is None else draw

    # -- privacy ------------------------------------------------------------------------
    def delta(self, epsilon: object, sensitivity: object = 1) -> float:
        r"""Exact (tight) δ(ε) of adding this noise to an integer query (CKS Thm 7).

        .. math:: \delta = P[Y > \varepsilon\sigma^2/\Delta - \Delta/2]
                  - e^\varepsilon P[Y > \varepsilon\sigma^2/\Delta + \Delta/2],

        and no smaller δ holds when the sensitivity :math:`\Delta` is attained.

        Parameters
        ----------
        epsilon : float
            :math:`\varepsilon \ge 0`, finite, used at its exact binary value.
        sensitivity : int, optional
            The sensitivity :math:`\Delta`, an integer :math:`\ge 1` (default 1).

        Returns
        -------
        float
            δ in [0, 1], with relative accuracy down to the smallest normal float (a
            few ulps; about 6e-15 at most measured on the Euler--Maclaurin path for
            huge σ²); 0.0 below that.

        Raises
        ------
        TypeError
            If an argument has the wrong type (e.g. a bool).
        ValueError
            If ``epsilon`` is negative, NaN or infinite, or ``sensitivity`` is not an
            integer ``>= 1``.

        Notes
        -----
        The privacy loss at output :math:`y` is :math:`L(y) = (\Delta^2 - 2y\Delta)/(2\sigma^2)`,
        so :math:`\delta = \sum_y \max(0, p(y) - e^\varepsilon p(y-\Delta))` (CKS
        Lemma 9) is a sum of non-negative terms :math:`p(z)(1 - e^{\varepsilon - L(-z)})`
        over the integers :math:`z > \varepsilon\sigma^2/\Delta - \Delta/2`, summed
        directly (no difference of two tails, no cancellation) or, for huge σ², by
        Euler--Maclaurin with a bounded remainder.

        Examples
        --------
        >>> DiscreteGaussianDistribution(1).delta(1)  # P[Y >= 1] - e P[Y >= 2]
        0.141351339406
        >>> DiscreteGaussianDistribution(10**100).delta(0)  # total variation = p(0)
        3.98942280401e-51
        >>> DiscreteGaussianDistribution(10**100).delta(1e-50)  # far below 2^-53
        8.33154705877e-52
        """
        eps = check_epsilon("epsilon", epsilon)
        sens = _check_sensitivity(sensitivity)
        # CKS Thm 7
        return min(1.0, _scaled(*_delta_parts(self.sigma2, Fraction(eps), sens)))


@dataclass(frozen=True, slots=True)
class DiscreteLaplaceDistribution:
    r"""The discrete Laplace with scale :math:`t`, frozen, in scipy's vocabulary.

    pmf :math:`P[X = k] = \frac{1 - e^{-1/t}}{1 + e^{-1/t}} e^{-|k|/t}
    = \tanh\!\big(\tfrac{1}{2t}\big)\,e^{-|k|/t}` on the integers (CKS §4; the
    normaliser is a geometric sum). ``scale`` is validated once, here; methods
    taking ``k`` behave as in :class:`DiscreteGaussianDistribution`.
    :class:`gaussdp.mechanisms.DiscreteLaplace` is the mechanism that adds this noise.

    Parameters
    ----------
    scale : int, float, Fraction or str
        The scale :math:`t`, an exact rational in ``[1e-12, 1e300]``.

    Raises
    ------
    TypeError
        If ``scale`` is not a real number or rational string.
    ValueError
        If ``scale`` is NaN, infinite or outside ``[1e-12, 1e300]``.

    References
    ----------
    .. [CKS] Canonne, Kamath, Steinke (2020), §4 and Lemma 9.

    Examples
    --------
    >>> dl = DiscreteLaplaceDistribution(1)
    >>> dl.pmf(0)  # tanh(1/2)
    0.46211715726
    >>> dl.logpmf([0, 2])
    array([-0.77193683, -2.77193683])
    """

    scale: Fraction

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _check_param("scale", self.scale))

    # -- pmf ----------------------------------------------------------------------------
    @overload
    def logpmf(self, k: int) -> float: ...
    @overload
    def logpmf(self, k: object) -> float | FloatArray: ...
    def logpmf(self, k: object) -> float | FloatArray:
        r""":math:`-|k|/t + \log\tanh(1/(2t))`, with log tanh evaluated stably."""
        t = self.scale
        log_p0 = _log_tanh_half_inv(t)
        scalar = _scalar_k(k)
        if scalar is not None:
            # CKS §4: p(k) = tanh(1/(2t)) e^{-|k|/t}
            return -_to_float_or_inf(Fraction(abs(scalar)) / t) + log_p0
        arr = _array_k(k)
        if arr.dtype == object:
            flat = [-_to_float_or_inf(Fraction(abs(int(v))) / t) + log_p0 for v in arr.ravel()]
            return np.asarray(flat, dtype=np.float64).reshape(arr.shape)
        result: FloatArray = -np.abs(arr) / float(t) + log_p0
        return result

    @overload
    def pmf(self, k: int) -> float: ...
    @overload
    def pmf(self, k: object) -> float | FloatArray: ...
    def pmf(self, k: object) -> float | FloatArray:
        r""":math:`\tanh(1/(2t))\,e^{-|k|/t}`; the exponent is exact for a scalar ``k``.

        For arrays this is ``exp`` of :meth:`logpmf` (a few ulps times :math:`\max(1, |k|/t)`).
        """
        t = self.scale
        scalar = _scalar_k(k)
        if scalar is not None:
            # CKS §4: p(k) = tanh(1/(2t)) e^{-|k|/t}, exponent kept exact
            return _scaled(Fraction(abs(scalar)) / t, math.exp(_log_tanh_half_inv(t)))
        result: FloatArray = np.exp(self.logpmf(k))
        return result

    # -- tails --------------------------------------------------------------------------
    def sf(self, k: object) -> float | FloatArray:
        r""":math:`P[X > k]`: :math:`e^{-(k+1)/t}/(1 + e^{-1/t})` for :math:`k \ge 0` (CKS §4).

        For :math:`k < 0`, :math:`1 - P[X > -k-1]` (symmetry). The exponent is exact.

        Examples
        --------
        >>> DiscreteLaplaceDistribution(1).sf([-1, 0, 30])
        array([7.31058579e-01, 2.68941421e-01, 2.51665242e-14])
        """
        t = self.scale
        return _apply_int(k, lambda v: _laplace_tail(v + 1, t))

    def logsf(self, k: object) -> float | FloatArray:
        r""":math:`\log P[X > k]` (see :meth:`sf`), finite far beyond float underflow."""
        t = self.scale
        return _apply_int(k, lambda v: _laplace_log_tail(v + 1, t))

    def cdf(self, k: object) -> float | FloatArray:
        r""":math:`P[X \le k] = P[X \ge -k]` (symmetry)."""
        t = self.scale
        return _apply_int(k, lambda v: _laplace_tail(-v, t))

    def logcdf(self, k: object) -> float | FloatArray:
        r""":math:`\log P[X \le k]` (see :meth:`cdf`)."""
        t = self.scale
        return _apply_int(k, lambda v: _laplace_log_tail(-v, t))

    # -- moments ------------------------------------------------------------------------
    def mean(self) -> float:
        """0.0: the distribution is symmetric about 0."""
        return 0.0

    def var(self) -> float:
        r""":math:`2e^{-1/t}/(1 - e^{-1/t})^2` (CKS §4), about :math:`2t^2` for large t.

        ``expm1`` gives :math:`1 - e^{-1/t}` accurately (log space beyond
        :math:`t = 10^{150}`); ``inf`` past the float range (:math:`t \gtrsim 9.5\times10^{153}`).

        Examples
        --------
        >>> DiscreteLaplaceDistribution(1).var()
        1.84134718842
        >>> DiscreteLaplaceDistribution(10**6).var()  # 2 t^2 - 1/6
        1999999999999.83
        """
        r = 1.0 / float(self.scale)
        one_minus_q = -math.expm1(-r)
        if one_minus_q > 1e-150:
            # CKS §4: Var = 2 e^{-1/t} / (1 - e^{-1/t})²
            return 2.0 * math.exp(-r) / (one_minus_q * one_minus_q)
        # same formula in log space (t > 1e150: the square would underflow)
        return _exp(math.log(2.0) - r - 2.0 * math.log(one_minus_q))

    def std(self) -> float:
        """The standard deviation, ``sqrt(var())``."""
        return math.sqrt(self.var())

    # -- sampling -----------------------------------------------------------------------
    def rvs(
        self, size: int | tuple[int, ...] | None = None, *, rng: RandomSource | None = None
    ) -> int | NDArray[np.int64] | NDArray[np.object_]:
        """Exact draws (CKS §5 Alg 2, :func:`gaussdp.sampling.discrete_laplace`); as
        :meth:`DiscreteGaussianDistribution.rvs` (Python ints when ``scale > 2**40``).

        Examples
        --------
        >>> from gaussdp.random import ChaCha20Random
        >>> DiscreteLaplaceDistribution("5/2").rvs(6, rng=ChaCha20Random(0))
        array([ 0,  0,  0, -3, -2,  2])
        """
        draw = sample_discrete_laplace(self.scale, () if size is None else size, rng=rng)
        return int(draw[()]) if size is None else draw

    # -- privacy ------------------------------------------------------------------------
    def epsilon(self, sensitivity: object = 1) -> float:
        r"""Pure-DP :math:`\varepsilon = \Delta/t` of adding this noise (rounded once).

        The privacy loss of (DL(0), DL(Δ)) is bounded by Δ/t in absolute value, so the
        mechanism is (Δ/t, 0)-DP (CKS §4). ``sensitivity`` is an integer :math:`\ge 1`.

        Examples
        --------
        >>> DiscreteLaplaceDistribution(4).epsilon(2)
        0.5
        """
        return float(Fraction(_check_sensitivity(sensitivity)) / self.scale)

    def delta(self, epsilon: object, sensitivity: object = 1) -> float:
        r"""Exact (tight) δ(ε) of adding this noise to an integer query; 0 for ε ≥ Δ/t.

        Parameters
        ----------
        epsilon : float
            :math:`\varepsilon \ge 0`, finite (used with its exact binary value).
        sensitivity : int, optional
            The sensitivity :math:`\Delta`, an integer :math:`\ge 1` (default 1).

        Raises
        ------
        TypeError
            If an argument has the wrong type.
        ValueError
            If ``epsilon`` is negative or not finite, or ``sensitivity`` is not an
            integer ``>= 1``.

        Notes
        -----
        For :math:`P = DL(0, t)`, :math:`Q = DL(\Delta, t)` the privacy loss
        :math:`L(y) = (|y-\Delta| - |y|)/t` is :math:`\Delta/t` for :math:`y \le 0`,
        :math:`(\Delta - 2y)/t` for :math:`0 < y < \Delta` and :math:`-\Delta/t` for
        :math:`y \ge \Delta`. With :math:`a = \Delta/t - \varepsilon > 0`,
        :math:`r = 1/t`, :math:`q = e^{-r}` and :math:`Y_1 = \lceil a t/2\rceil - 1`
        (the largest :math:`y` with :math:`L(y) > \varepsilon`), summing
        :math:`\max(0, P(y) - e^\varepsilon Q(y))` (CKS Lemma 9) as geometric series gives

        .. math:: \delta(1 + q) = 1 + q - q^{Y_1+1} - e^{-(a - Y_1 r)}
           = (1 - e^{-\alpha})(1 - e^{-\beta}) + q\,(1 - e^{-a}),

        with :math:`\alpha = (Y_1+1) r`, :math:`\beta = a - Y_1 r`. Both terms are
        non-negative and computed with ``expm1``, so δ has full relative accuracy.
        The reverse pair gives the same δ by symmetry.

        Examples
        --------
        >>> DiscreteLaplaceDistribution(1).delta(0.5)
        0.287649136645
        >>> DiscreteLaplaceDistribution(1).delta(1.0)
        0.0
        """
        t = self.scale
        eps = Fraction(check_epsilon("epsilon", epsilon))
        sens = _check_sensitivity(sensitivity)
        gap = Fraction(sens) / t - eps  # a = Δ/t - ε
        if gap <= 0:
            return 0.0  # (Δ/t, 0)-DP
        y1 = math.ceil(gap * t / 2) - 1
        r = 1.0 / float(t)
        alpha = float((y1 + 1) / t)
        beta = float(gap - Fraction(y1) / t)
        # δ(1+q) = (1-e^{-α})(1-e^{-β}) + q(1-e^{-a})  (derived above from CKS Lemma 9)
        num = math.expm1(-alpha) * math.expm1(-beta) - math.exp(-r) * math.expm1(-float(gap))
        return num / (1.0 + math.exp(-r))
