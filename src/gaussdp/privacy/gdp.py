r"""Gaussian differential privacy (μ-GDP) and the calibration of the Gaussian mechanism.

A mechanism is μ-GDP (DRS Def 2.6) when telling two neighbouring datasets apart
from its output is at least as hard as telling N(0, 1) from N(μ, 1) from one
draw. The Gaussian mechanism ``f(D) + N(0, σ² I)`` with L2 sensitivity Δ is
exactly (Δ/σ)-GDP (DRS Thm 2.7). This module holds the trade-off curve, the
exact privacy profile δ(ε) and its inverses, composition, membership-inference
bounds, and the analytic and classic calibrations of σ.

Every function accepts μ = 0 (identical output distributions, perfect privacy)
where the answer is meaningful, and rejects NaN, infinities and negative μ.

Accuracy
--------
The privacy profile is computed without subtracting two tail probabilities.
With a = −ε/μ + μ/2, b = a − μ, the identity e^ε φ(b) = φ(a) gives

    δ(ε) = ½ e^{−u²} (erfcx(u) − erfcx(u + h)),   u = −a/√2,  h = μ/√2,

where ``erfcx(x) = e^{x²} erfc(x)``. The difference is evaluated by a
16-point Gauss–Legendre rule on its positive integrand −erfcx' when h <= 1 and
−3 < u < 8; by the asymptotic series of erfcx, whose truncation error is
bounded by the first omitted term, when u >= 8; and directly otherwise. For
u <= −3 (δ > 0.9999), δ = 1 − Φ(−a) − ½ e^{−u²} erfcx(u + h). No branch
subtracts nearly equal tail probabilities, and ln δ stays accurate where δ
underflows. Against 80-digit mpmath the worst relative error of δ measured over
3000 random points with μ in [1e-4, 100], ε in [0, 200] and δ down to e^{−800}
is 5.1e-13 (see ``tests/privacy/test_gdp.py``).

The inverses (:func:`gdp_epsilon`, :func:`gdp_mu`, :func:`analytic_gaussian_sigma`)
solve for a computed δ that is at most ``target·(1 − 1e-10)``, a margin 200
times the measured evaluation error, so the value returned is on the safe side
of the exact answer (ε and σ never too small, μ never too large); the price is
a relative error of about 1e-10 (measured worst 2.0e-10).

References
----------
.. [DRS] J. Dong, A. Roth, W. J. Su, "Gaussian Differential Privacy",
   J. R. Stat. Soc. B 84(1), 2022. Def 2.6, Thm 2.7, Cor 2.13, Cor 3.3.
.. [BW] B. Balle, Y.-X. Wang, "Improving the Gaussian Mechanism for Differential
   Privacy: Analytical Calibration and Optimal Denoising", ICML 2018. Thm 8.
.. [DR] C. Dwork, A. Roth, "The Algorithmic Foundations of Differential
   Privacy", 2014. Thm A.1.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Iterable
from typing import overload

import numpy as np
import numpy.typing as npt
from scipy.special import erf, erfcx, erfinv, ndtr, ndtri

from gaussdp._search import ULP_TOL, largest_passing, smallest_passing
from gaussdp._validation import check_delta, check_epsilon, check_positive
from gaussdp.errors import invalid

__all__ = [
    "analytic_gaussian_sigma",
    "classic_gaussian_sigma",
    "equal_error_rate",
    "gdp_compose",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_log_delta",
    "gdp_mu",
    "gdp_tradeoff",
    "mia_advantage",
]

_SQRT2 = math.sqrt(2.0)
_LN2 = math.log(2.0)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_TINY = math.ulp(0.0)  # smallest positive subnormal, 5e-324
_MAX = sys.float_info.max

# Relative margin between the computed δ and the target in the inverse
# functions: 10x the worst evaluation error measured against mpmath.
_MARGIN = 1e-10
_LOG1M_MARGIN = math.log1p(-_MARGIN)

# Relative factor by which :func:`gdp_delta` rounds the computed δ up, so that it is an
# upper bound on the exact δ: 10x the worst relative evaluation error measured against
# mpmath (5.1e-13; see the module docstring). Below _MARGIN, so the inverses, which
# aim at target·(1 − _MARGIN), still land on the safe side of the rounded-up δ.
DELTA_ROUND_UP = 5e-12
# Relative margin by which :func:`gdp_log_delta` also rounds ln δ up: 10x the worst
# relative error of ln δ measured against mpmath where δ underflows (3.6e-16, ln δ down
# to −2e12), where one float of ln δ is worth more than DELTA_ROUND_UP.
_LOG_ROUND_UP = 4e-15

# Gauss–Legendre rule on [0, 1] for the erfcx difference over short intervals.
_GL_X, _GL_W = np.polynomial.legendre.leggauss(16)
_GL_X = 0.5 * (_GL_X + 1.0)
_GL_W = 0.5 * _GL_W


def _check_mu(name: str, value: object) -> float:
    """Return μ as a float if it is finite and >= 0."""
    return check_epsilon(name, value)


# ---------------------------------------------------------------------------
# The privacy profile in log space
# ---------------------------------------------------------------------------


def _erfcx_diff_quadrature(u: float, h: float) -> float:
    """erfcx(u) − erfcx(u + h) for 0 < h <= 1, -3 <= u < 8, as ∫ −erfcx'."""
    t = u + h * _GL_X
    # −erfcx'(t) = 2/√π − 2 t erfcx(t) > 0
    g = _TWO_OVER_SQRT_PI - 2.0 * t * erfcx(t)
    return float(h * np.dot(_GL_W, g))


def _erfcx_diff_asymptotic(u: float, h: float) -> float:
    """erfcx(u) − erfcx(u + h) for u >= 8 by the asymptotic series of erfcx.

    erfcx(x) = (2/√π) ∫₀^∞ e^{−2xt} e^{−t²} dt; expanding e^{−t²} gives the terms
    (−1)^n (2n−1)!!/2^n x^{−(2n+1)}/√π, and since e^{−2ut} − e^{−2(u+h)t} >= 0 the
    truncation error of the difference is bounded by its first omitted term.
    """
    ratio = math.log1p(h / u)
    inv_u2 = 1.0 / (u * u)
    power = 1.0 / u  # u^{−(2n+1)}
    coef = 1.0  # (2n−1)!!/2^n
    total = 0.0
    for n in range(60):
        m = 2 * n + 1
        term = coef * power * -math.expm1(-m * ratio)
        if n % 2:
            total -= term
        else:
            total += term
        if term <= 1e-17 * total:
            break
        coef *= (2 * n + 1) / 2.0
        power *= inv_u2
    return total * _INV_SQRT_PI


def _log_delta(mu: float, epsilon: float) -> float:
    """ln δ(ε) for μ-GDP, μ > 0, ε >= 0 (validated by the caller)."""
    # DRS Cor 2.13; Balle & Wang 2018 Thm 8: δ = Φ(a) − e^ε Φ(b)
    a = -epsilon / mu + mu / 2.0
    u = -a / _SQRT2
    h = mu / _SQRT2
    # With b = a − μ, e^ε φ(b) = φ(a), so e^ε Φ(b) = ½ e^{−u²} erfcx(u + h), u + h = −b/√2 > 0.
    if u <= -3.0:
        # δ = 1 − Φ(−a) − e^ε Φ(b), both terms below 1e-4: no cancellation, no overflow.
        tail = 0.5 * math.exp(-u * u) * float(erfcx(u + h))
        return math.log1p(-(float(ndtr(-a)) + tail))
    if math.isinf(u * u):  # ε/μ beyond 1e154: δ is far below any float
        return -math.inf
    # δ = ½ e^{−u²} (erfcx(u) − erfcx(u + h))
    if u >= 8.0:
        diff = _erfcx_diff_asymptotic(u, h)
    elif h <= 1.0:
        diff = _erfcx_diff_quadrature(u, h)
    else:
        diff = float(erfcx(u)) - float(erfcx(u + h))
    if diff <= 0.0:  # underflow of the difference for u beyond ~1e300
        return -math.inf
    return -u * u - _LN2 + math.log(diff)


def _log_delta_up(mu: float, epsilon: float) -> float:
    """An upper bound on the exact ln δ(ε) of μ-GDP, μ > 0 (see :func:`gdp_log_delta`)."""
    log_delta = _log_delta(mu, epsilon)
    if math.isinf(log_delta):  # ln δ below −1.8e308 (−u² with u past 1e154)
        return -_MAX
    bound = log_delta + DELTA_ROUND_UP + _LOG_ROUND_UP * abs(log_delta)
    return min(0.0, math.nextafter(bound, math.inf))


def gdp_epsilon_lower(mu: float, delta: float) -> float:
    r"""A lower bound on the smallest ε ≥ 0 such that μ-GDP implies (ε, δ)-DP.

    The companion of :func:`gdp_epsilon` (the upper bound; both within about 1e-10
    relative of the exact ε): the largest ε found at which the computed δ(ε) is at
    least ``delta·(1 + 1e-10)``, a margin 200 times the measured evaluation error
    (5.1e-13 relative), so the exact δ there exceeds ``delta`` and, δ(ε) being
    decreasing (DRS Cor 2.13), the exact ε is above the value returned. 0.0 when
    δ(0) does not reach that level.

    Examples
    --------
    >>> lo, hi = gdp_epsilon_lower(0.5, 1e-5), gdp_epsilon(0.5, 1e-5)
    >>> lo < hi and hi - lo < 1e-9
    True
    """
    mu = _check_mu("mu", mu)
    delta = check_delta("delta", delta)
    if mu == 0.0:
        return 0.0
    level = math.log(delta) - _LOG1M_MARGIN  # ln(δ) + about 1e-10

    def above(eps: float) -> bool:
        return _log_delta(mu, eps) >= level

    if not above(0.0):
        return 0.0
    hi = min(mu * mu / 2.0 + mu * math.sqrt(-2.0 * math.log(delta)), _MAX)
    while above(hi):
        if hi == _MAX:  # pragma: no cover - μ near 1e154 and above
            return _MAX
        hi = min(2.0 * hi, _MAX)
    return largest_passing(above, 0.0, hi, rel_tol=ULP_TOL, abs_tol=_TINY)


# ---------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------


@overload
def gdp_tradeoff(mu: float, alpha: float) -> float: ...


@overload
def gdp_tradeoff(mu: float, alpha: npt.ArrayLike) -> npt.NDArray[np.float64]: ...


def gdp_tradeoff(mu: float, alpha: float | npt.ArrayLike) -> float | npt.NDArray[np.float64]:
    r"""The μ-GDP trade-off function G_μ(α) = Φ(Φ⁻¹(1 − α) − μ).

    The smallest type II error (false negatives) of any test telling two
    neighbouring datasets apart at type I error (false positives) ``alpha``.

    Parameters
    ----------
    mu : float
        The GDP parameter, finite and ``>= 0``. μ = 0 gives G_0(α) = 1 − α.
    alpha : float or array_like of float
        Type I error(s), each in [0, 1].

    Returns
    -------
    float or numpy.ndarray
        G_μ(α): a float for a scalar ``alpha``, an array of the same shape
        otherwise. G_μ(0) = 1 and G_μ(1) = 0.

    Raises
    ------
    TypeError
        If ``mu`` or an element of ``alpha`` is not a real number.
    ValueError
        If ``mu`` is negative, NaN or infinite, or an ``alpha`` lies outside [0, 1].

    References
    ----------
    DRS Def 2.6 (the trade-off function of N(0, 1) against N(μ, 1)).

    Examples
    --------
    >>> round(gdp_tradeoff(1.0, 0.05), 4)
    0.7405
    >>> gdp_tradeoff(1.0, [0.0, 0.5, 1.0])
    array([1.        , 0.15865525, 0.        ])
    """
    mu = _check_mu("mu", mu)
    scalar = isinstance(alpha, numbers.Real) and not isinstance(alpha, bool)
    if scalar:
        a = np.asarray(alpha, dtype=np.float64)
    else:
        if isinstance(alpha, bool | str | bytes):
            raise TypeError(invalid("alpha", "a real number or array of reals in [0, 1]", alpha))
        try:
            a = np.asarray(alpha)
        except (TypeError, ValueError):
            raise TypeError(
                invalid("alpha", "a real number or array of reals in [0, 1]", alpha)
            ) from None
        if a.dtype == np.bool_ or not (
            np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)
        ):
            raise TypeError(invalid("alpha", "a real number or array of reals in [0, 1]", alpha))
        a = a.astype(np.float64)
    bad = ~((a >= 0.0) & (a <= 1.0))  # also catches NaN
    if np.any(bad):
        first = a if a.ndim == 0 else a[bad].flat[0]
        raise ValueError(invalid("alpha", "a real number in [0, 1]", float(first)))
    # DRS Def 2.6: G_μ(α) = Φ(Φ⁻¹(1 − α) − μ), with Φ⁻¹(1 − α) = −Φ⁻¹(α) for accuracy at small α
    result = ndtr(-ndtri(a) - mu)
    if scalar:
        return float(result)
    return np.asarray(result, dtype=np.float64)


def gdp_log_delta(mu: float, epsilon: float) -> float:
    r"""The natural logarithm of the exact δ(ε) of μ-GDP.

    Accurate where :func:`gdp_delta` underflows (δ below 1e-308).

    Parameters
    ----------
    mu : float
        The GDP parameter, finite and ``>= 0``.
    epsilon : float
        The ε of the (ε, δ)-DP guarantee, finite and ``>= 0``.

    Returns
    -------
    float
        ln δ(ε), rounded up (an upper bound on the exact ln δ, like :func:`gdp_delta`):
        the computed value plus ``DELTA_ROUND_UP`` (10x the worst relative error of δ
        measured against mpmath) plus 4e-15·|ln δ| (10x the worst relative error of
        ln δ measured where δ underflows), moved up one float; at most 0. ``-inf``
        only when μ = 0 (δ = 0); where ln δ is below the float range,
        ``-sys.float_info.max``.

    Raises
    ------
    TypeError
        If an argument is not a real number.
    ValueError
        If an argument is negative, NaN or infinite.

    References
    ----------
    DRS Cor 2.13; Balle & Wang 2018 Thm 8.

    Examples
    --------
    >>> round(gdp_log_delta(1.0, 50.0), 2)
    -1233.87
    """
    mu = _check_mu("mu", mu)
    epsilon = check_epsilon("epsilon", epsilon)
    if mu == 0.0:
        return -math.inf
    return _log_delta_up(mu, epsilon)


def gdp_delta(mu: float, epsilon: float) -> float:
    r"""The exact δ(ε) of μ-GDP: δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2).

    μ-GDP holds if and only if (ε, δ(ε))-DP holds for every ε >= 0; δ(ε) is the
    smallest δ for this ε.

    Parameters
    ----------
    mu : float
        The GDP parameter, finite and ``>= 0``. μ = 0 gives δ = 0.
    epsilon : float
        The ε of the (ε, δ)-DP guarantee, finite and ``>= 0``.

    Returns
    -------
    float
        δ(ε) in [0, 1], rounded up: computed in log space (relative error
        measured at most 5.1e-13 for μ in [1e-4, 100]), then multiplied by
        1 + 5e-12 (``DELTA_ROUND_UP``) and moved up one float, so it is an
        upper bound on the exact δ, above it by at most about 6e-12 relative.
        When μ > 0 but the true δ is below the smallest positive float,
        5e-324 is returned (never 0); for δ between 5e-324 and 2.2e-308
        (subnormal floats) the relative precision is that of the subnormal.
        Use :func:`gdp_log_delta` there.

    Raises
    ------
    TypeError
        If an argument is not a real number.
    ValueError
        If an argument is negative, NaN or infinite.

    References
    ----------
    DRS Cor 2.13; Balle & Wang 2018 Thm 8.

    Examples
    --------
    >>> round(gdp_delta(0.5, 1.0), 5)
    0.00683
    >>> gdp_delta(0.0, 1.0)
    0.0
    """
    mu = _check_mu("mu", mu)
    epsilon = check_epsilon("epsilon", epsilon)
    if mu == 0.0:
        return 0.0
    # Round up (see DELTA_ROUND_UP): a certified upper bound, not a nearest value.
    delta = math.nextafter(math.exp(_log_delta(mu, epsilon)) * (1.0 + DELTA_ROUND_UP), math.inf)
    return min(1.0, max(delta, _TINY))


def gdp_epsilon(mu: float, delta: float) -> float:
    r"""The smallest ε >= 0 such that μ-GDP implies (ε, δ)-DP.

    Parameters
    ----------
    mu : float
        The GDP parameter, finite and ``>= 0``.
    delta : float
        Target δ, in (0, 1); any positive float, including subnormals, is accepted.

    Returns
    -------
    float
        ε, rounded up: :func:`gdp_delta` at the returned ε is at most
        ``delta·(1 − 1e-10)``, a margin above the evaluation error, so the
        result is never below the exact ε. It is 0.0 when δ(0) already meets
        the target (including μ = 0).

    Raises
    ------
    TypeError
        If an argument is not a real number.
    ValueError
        If ``mu`` is negative, NaN or infinite, or ``delta`` is not in (0, 1).

    References
    ----------
    DRS Cor 2.13; Balle & Wang 2018 Thm 8.

    Examples
    --------
    >>> round(gdp_epsilon(0.5, 1e-5), 3)
    1.993
    >>> gdp_epsilon(0.5, 0.5)
    0.0
    """
    mu = _check_mu("mu", mu)
    delta = check_delta("delta", delta)
    if mu == 0.0:
        return 0.0
    level = math.log(delta) + _LOG1M_MARGIN

    def excess(eps: float) -> float:
        return _log_delta(mu, eps) - level

    if excess(0.0) <= 0.0:
        return 0.0
    # ρ-zCDP with ρ = μ²/2 (DRS/CKS standard conversion) bounds ε from above.
    hi = min(mu * mu / 2.0 + mu * math.sqrt(-2.0 * math.log(delta)), _MAX)
    while excess(hi) > 0.0:
        if hi == _MAX:  # pragma: no cover - μ near 1e154 and above
            return math.inf
        hi = min(2.0 * hi, _MAX)
    # The smallest ε at which δ(ε) was evaluated to meet the target (the safe side).
    return smallest_passing(lambda e: excess(e) <= 0.0, 0.0, hi, rel_tol=ULP_TOL, abs_tol=_TINY)


def gdp_mu(epsilon: float, delta: float) -> float:
    r"""The largest μ such that μ-GDP implies (ε, δ)-DP.

    Parameters
    ----------
    epsilon : float
        Target ε, finite and ``>= 0``.
    delta : float
        Target δ, in (0, 1).

    Returns
    -------
    float
        μ > 0, rounded down: :func:`gdp_delta` at the returned μ is at most
        ``delta·(1 − 1e-10)``, so the result never exceeds the exact μ.

    Raises
    ------
    TypeError
        If an argument is not a real number.
    ValueError
        If ``epsilon`` is negative, NaN or infinite, or ``delta`` is not in (0, 1).

    References
    ----------
    DRS Cor 2.13; Balle & Wang 2018 Thm 8.

    Examples
    --------
    >>> round(gdp_mu(1.0, 1e-5), 4)
    0.2681
    """
    epsilon = check_epsilon("epsilon", epsilon)
    delta = check_delta("delta", delta)
    level = math.log(delta) + _LOG1M_MARGIN

    def excess(mu: float) -> float:
        return _log_delta(mu, epsilon) - level

    if epsilon == 0.0:
        # DRS Cor 2.13 at ε = 0: δ(0) = 2Φ(μ/2) − 1 = erf(μ/(2√2)), inverted in closed form
        root = 2.0 * _SQRT2 * float(erfinv(delta))
        # The largest μ ≤ the closed form evaluated to meet the target (the safe side).
        return largest_passing(lambda m: excess(m) <= 0.0, root / 2.0, root, rel_tol=ULP_TOL)
    log_inv = -math.log(delta)
    # Two feasible (smaller) μ: the standard zCDP conversion with ρ = μ²/2, and
    # the μ meeting δ at ε = 0, δ(0) = erf(μ/(2√2)) (DRS Cor 2.13; δ decreases in ε).
    lo = max(
        _SQRT2 * (epsilon / (math.sqrt(log_inv + epsilon) + math.sqrt(log_inv))),  # no overflow
        2.0 * _SQRT2 * float(erfinv(delta)),
    )
    while lo > 0.0 and excess(lo) > 0.0:
        lo /= 2.0
    if lo == 0.0:  # pragma: no cover - δ so small that μ underflows
        return 0.0
    hi = min(2.0 * lo, _MAX)
    while excess(hi) <= 0.0:
        if hi == _MAX:  # pragma: no cover - ε near 1e308
            return _MAX
        lo, hi = hi, min(2.0 * hi, _MAX)
    return largest_passing(lambda m: excess(m) <= 0.0, lo, hi, rel_tol=ULP_TOL)


def gdp_compose(mus: Iterable[float]) -> float:
    r"""Compose μ_i-GDP mechanisms: the result is √(Σ μ_i²)-GDP, exactly.

    Parameters
    ----------
    mus : iterable of float
        The GDP parameters, each finite and ``>= 0``. An empty iterable
        composes nothing and gives 0.0.

    Returns
    -------
    float
        √(Σ μ_i²), computed without overflow or underflow.

    Raises
    ------
    TypeError
        If ``mus`` is not iterable or an element is not a real number.
    ValueError
        If an element is negative, NaN or infinite.

    References
    ----------
    DRS Cor 3.3.

    Examples
    --------
    >>> gdp_compose([0.3, 0.4])
    0.5
    >>> round(gdp_compose([1.0] * 4), 12)
    2.0
    """
    if isinstance(mus, str | bytes) or not isinstance(mus, Iterable):
        raise TypeError(invalid("mus", "an iterable of real numbers >= 0", mus))
    values = [_check_mu(f"mus[{i}]", m) for i, m in enumerate(mus)]
    # DRS Cor 3.3: G_μ1 ⊗ … ⊗ G_μk = G_√(Σμi²)
    return math.hypot(*values)


def mia_advantage(mu: float) -> float:
    r"""The largest membership-inference advantage TPR − FPR under μ-GDP: 2Φ(μ/2) − 1.

    Parameters
    ----------
    mu : float
        The GDP parameter, finite and ``>= 0``.

    Returns
    -------
    float
        The advantage in [0, 1), computed as erf(μ/(2√2)) (accurate for small μ).

    Raises
    ------
    TypeError
        If ``mu`` is not a real number.
    ValueError
        If ``mu`` is negative, NaN or infinite.

    References
    ----------
    DRS Def 2.6 (max over α of 1 − α − G_μ(α), attained at α = Φ(−μ/2)).

    Examples
    --------
    >>> round(mia_advantage(1.0), 4)
    0.3829
    """
    mu = _check_mu("mu", mu)
    # DRS Def 2.6: sup_α (1 − α − G_μ(α)) = 2Φ(μ/2) − 1 = erf(μ/(2√2))
    return float(erf(mu / (2.0 * _SQRT2)))


def equal_error_rate(mu: float) -> float:
    r"""The equal-error point of μ-GDP: the α with G_μ(α) = α, which is Φ(−μ/2).

    Parameters
    ----------
    mu : float
        The GDP parameter, finite and ``>= 0``.

    Returns
    -------
    float
        Φ(−μ/2), in (0, 0.5]; 0.5 for μ = 0.

    Raises
    ------
    TypeError
        If ``mu`` is not a real number.
    ValueError
        If ``mu`` is negative, NaN or infinite.

    References
    ----------
    DRS Def 2.6.

    Examples
    --------
    >>> [round(equal_error_rate(m), 3) for m in (0.5, 1.0, 3.0)]
    [0.401, 0.309, 0.067]
    """
    mu = _check_mu("mu", mu)
    # DRS Def 2.6: G_μ(α) = α at α = Φ(−μ/2)
    return float(ndtr(-mu / 2.0))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    r"""The smallest σ for which the Gaussian mechanism is (ε, δ)-DP (analytic calibration).

    Solves δ(ε; μ = Δ/σ) = δ exactly (Balle & Wang 2018), which is optimal for
    every ε, including ε >= 1 where the classic formula does not apply.

    Parameters
    ----------
    epsilon : float
        Target ε, finite and ``>= 0``.
    delta : float
        Target δ, in (0, 1).
    sensitivity : float, default 1.0
        The L2 sensitivity Δ, finite and ``> 0``.

    Returns
    -------
    float
        σ, rounded up: with μ = sensitivity/σ the exact δ(ε) is at most
        ``delta``, and σ is within about 1e-9 (relative) of the true minimum.
        ``inf`` when σ exceeds the float range (only for ε = 0 with δ near the
        smallest floats, where σ ≈ 0.4·sensitivity/δ).

    Raises
    ------
    TypeError
        If an argument is not a real number.
    ValueError
        If ``epsilon`` is negative, ``delta`` is not in (0, 1), ``sensitivity``
        is not positive, or any is NaN or infinite.

    References
    ----------
    Balle & Wang 2018 Thm 8 (and Alg 1); DRS Cor 2.13.

    Examples
    --------
    >>> round(analytic_gaussian_sigma(1.0, 1e-5), 4)
    3.7306
    """
    epsilon = check_epsilon("epsilon", epsilon)
    delta = check_delta("delta", delta)
    sensitivity = check_positive("sensitivity", sensitivity)
    mu = gdp_mu(epsilon, delta)
    level = math.log(delta) + _LOG1M_MARGIN
    sigma = sensitivity / mu
    if not math.isfinite(sigma):  # ε = 0 and δ below ~1e-306: σ overflows
        return math.inf
    # A tiny Δ over a huge μ underflows to 0; start the upward search at the least float.
    sigma = max(sigma, math.ulp(0.0))
    # Balle & Wang 2018 Thm 8 at μ = Δ/σ, re-checked after the division rounds: the
    # smallest σ ≥ Δ/μ evaluated to meet the target.
    return smallest_passing(
        lambda s: _log_delta(sensitivity / s, epsilon) <= level,
        sigma,
        2.0 * sigma,
        rel_tol=ULP_TOL,
        grow=True,
    )


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    r"""The classic calibration σ = Δ·√(2 ln(1.25/δ))/ε, valid only for ε < 1.

    Offered for comparison: it is always larger than
    :func:`analytic_gaussian_sigma`, which should be used instead.

    Parameters
    ----------
    epsilon : float
        Target ε, in (0, 1).
    delta : float
        Target δ, in (0, 1).
    sensitivity : float, default 1.0
        The L2 sensitivity Δ, finite and ``> 0``.

    Returns
    -------
    float
        σ.

    Raises
    ------
    TypeError
        If an argument is not a real number.
    ValueError
        If ``epsilon`` is not in (0, 1) (the formula is only valid for ε < 1),
        ``delta`` is not in (0, 1), or ``sensitivity`` is not positive.

    References
    ----------
    Dwork & Roth 2014 Thm A.1.

    Examples
    --------
    >>> round(classic_gaussian_sigma(0.5, 1e-5), 4)
    9.6896
    """
    epsilon = check_positive("epsilon", epsilon)
    if epsilon >= 1.0:
        raise ValueError(
            invalid(
                "epsilon",
                "< 1 for the classic calibration (Dwork & Roth Thm A.1 is only valid "
                "for epsilon < 1; use analytic_gaussian_sigma, the analytic calibration)",
                epsilon,
            )
        )
    delta = check_delta("delta", delta)
    sensitivity = check_positive("sensitivity", sensitivity)
    # Dwork & Roth 2014 Thm A.1
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
