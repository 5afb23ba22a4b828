r"""Conversions from zero-concentrated DP (ρ-zCDP) and Rényi DP to (ε, δ)-DP.

ρ-zCDP bounds the Rényi divergence of every order α > 1 by αρ; (α, τ)-RDP
bounds it at one order. Two conversions to (ε, δ)-DP are offered:

- ``"cks"`` (the default): CKS Prop 12 at each order, minimised over α (CKS
  Cor 13). Always at least as tight as the standard conversion.
- ``"standard"``: ε = ρ + 2√(ρ ln(1/δ)) (Bun & Steinke 2016 Prop 1.3).

Every bound returned is rounded in the safe direction: ε and δ are never below
the exact value of the bound they name, ρ is never above it. CKS Prop 12 holds at
*every* order α > 1, so an inexact optimiser only loosens the bound; the
remaining floating-point error of evaluating the formula at the chosen order is
covered by an explicit upward rounding.

For a pure Gaussian mechanism (ρ = μ²/2) these conversions are looser than the
exact profile of :func:`gaussdp.privacy.gdp_epsilon`.

References
----------
.. [CKS] C. L. Canonne, G. Kamath, T. Steinke, "The Discrete Gaussian for
   Differential Privacy", NeurIPS 2020. Prop 12, Cor 13.
.. [BS] M. Bun, T. Steinke, "Concentrated Differential Privacy:
   Simplifications, Extensions, and Lower Bounds", TCC 2016. Prop 1.3.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from gaussdp._search import ULP_TOL, bracketed_root, largest_passing
from gaussdp._validation import check_delta, check_epsilon, check_finite
from gaussdp.errors import invalid

__all__ = [
    "RdpEpsilon",
    "rdp_epsilon",
    "rdp_epsilon_order",
    "zcdp_delta",
    "zcdp_epsilon",
    "zcdp_rho",
]

Method = Literal["cks", "standard"]

_EPS = float(np.finfo(np.float64).eps)
_TINY = math.ulp(0.0)  # smallest positive subnormal, 5e-324
_MAX = sys.float_info.max
# Relative rounding allowance when evaluating a closed form: each formula below
# has at most a handful of correctly rounded operations per term.
_ROUND = 16 * _EPS
# Range searched for the optimal α − 1.
_X_MIN = 1e-300
_X_MAX = 1e300


def _check_method(method: object) -> Method:
    if method == "cks":
        return "cks"
    if method == "standard":
        return "standard"
    raise ValueError(invalid("method", "'cks' or 'standard'", method))


def _check_rho(name: str, value: object) -> float:
    """Return ρ as a float if it is finite and >= 0."""
    return check_epsilon(name, value)


# ---------------------------------------------------------------------------
# CKS Prop 12 / Cor 13 kernels (validated inputs; x = α − 1 > 0 throughout)
# ---------------------------------------------------------------------------


def _prop12_epsilon(x: float, tau: float, log_inv_delta: float) -> float:
    """CKS Prop 12 at α = 1 + x, rounded up; not clamped at 0."""
    log_alpha = math.log1p(x)
    t1 = tau
    t2 = (log_inv_delta - log_alpha) / x
    t3 = -math.log1p(1.0 / x)  # ln(1 − 1/α)
    # CKS Prop 12: ε = τ + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α)
    value = t1 + t2 + t3
    error = _ROUND * (abs(t1) + (log_inv_delta + log_alpha) / x + abs(t3) + abs(value))
    return value + error


def _cks_epsilon(rho: float, log_inv_delta: float) -> tuple[float, float]:
    """CKS Cor 13 for ρ > 0: (ε rounded up and not clamped, the order α used)."""
    big_l = log_inv_delta

    # CKS Cor 13: d ε/dα = ρ − (L − ln α)/(α − 1)² vanishes where
    # h(x) = ρx² + ln(1 + x) − L = 0; h is increasing in x = α − 1 > 0.
    def h(x: float) -> float:
        return rho * x * x + math.log1p(x) - big_l

    # ln(1 + x) >= 0 gives an upper end, ln(1 + x) <= x a lower end. Every x > 0
    # is a valid order, so clipping to [1e-300, 1e300] only loosens the bound.
    hi = min(math.sqrt(big_l / rho), _X_MAX)
    lo = 2.0 * big_l / (1.0 + math.sqrt(1.0 + 4.0 * rho * big_l))
    lo = min(max(lo, _X_MIN), hi)
    x = _solve_increasing(h, lo, hi)
    return _prop12_epsilon(x, (1.0 + x) * rho * (1.0 + _ROUND), big_l), 1.0 + x


def _cks_log_delta(rho: float, epsilon: float) -> float:
    """ln δ of CKS Cor 13 for ρ > 0, rounded up (not capped at 0)."""

    # CKS Prop 12 in δ form with τ = αρ: ln δ(α) = (α−1)(αρ − ε) − ln α + (α−1) ln(1 − 1/α);
    # its derivative k(x) = (2x + 1)ρ − ln(1 + 1/x) − ε is increasing in x = α − 1.
    def k(x: float) -> float:
        return (2.0 * x + 1.0) * rho - math.log1p(1.0 / x) - epsilon

    # ln(1 + 1/x) <= 1/x: the positive root of 2ρx² − (ε − ρ)x − 1 = 0 is an
    # upper end (written without cancellation); halving finds a lower end.
    c = epsilon - rho
    root = math.hypot(c, math.sqrt(8.0 * rho))
    hi = (c + root) / (4.0 * rho) if c > 0.0 else 2.0 / (root - c)
    hi = min(max(hi, _X_MIN), _X_MAX)
    x = _solve_increasing(k, hi / 2.0, hi)
    t1 = x * ((x + 1.0) * rho - epsilon)
    t2 = -math.log1p(x)
    t3 = -x * math.log1p(1.0 / x)
    # CKS Prop 12: δ = e^{(α−1)(τ−ε)}/α · (1 − 1/α)^{α−1}, τ = αρ (CKS Cor 13)
    value = t1 + t2 + t3
    if value == -math.inf:
        return value
    error = _ROUND * (x * ((x + 1.0) * rho + epsilon) + abs(t2) + abs(t3) + abs(value))
    bound = value + error
    return 0.0 if math.isnan(bound) else bound


def _solve_increasing(f: Callable[[float], float], lo: float, hi: float) -> float:
    """The zero of an increasing ``f``, searched from [lo, hi] within [1e-300, 1e300].

    Widens the bracket by halving ``lo`` / doubling ``hi`` as needed; if the zero
    lies outside [1e-300, 1e300] the nearest end is returned. The callers
    accept any point (each is a valid order), so the result only needs to be
    close to the zero for tightness.
    """
    while lo > _X_MIN and f(lo) > 0.0:
        hi, lo = lo, max(lo / 2.0, _X_MIN)
    while hi < _X_MAX and f(hi) < 0.0:
        lo, hi = hi, min(hi * 2.0, _X_MAX)
    f_lo, f_hi = f(lo), f(hi)
    if f_lo >= 0.0:
        return lo
    if f_hi <= 0.0:
        return hi
    return bracketed_root(f, lo, hi)


def _round_up(value: float) -> float:
    if math.isinf(value):
        return value
    return value + _ROUND * abs(value)


def _exp_up(log_value: float) -> float:
    """exp of an upper bound on ln δ, capped at 1, never 0."""
    if not log_value < 0.0:  # also NaN, which only the safe answer can replace
        return 1.0
    return min(1.0, max(_round_up(math.exp(log_value)), _TINY))


# ---------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------


def zcdp_epsilon(rho: float, delta: float, method: Method = "cks") -> float:
    r"""The ε such that ρ-zCDP implies (ε, δ)-DP.

    Parameters
    ----------
    rho : float
        The zCDP parameter, finite and ``>= 0``. ρ = 0 gives ε = 0.
    delta : float
        Target δ, in (0, 1).
    method : {"cks", "standard"}, default "cks"
        ``"cks"``: inf over α > 1 of CKS Prop 12 with τ = αρ (CKS Cor 13).
        ``"standard"``: ρ + 2√(ρ ln(1/δ)).

    Returns
    -------
    float
        ε >= 0, an upper bound rounded up. ``"cks"`` never exceeds ``"standard"``.

    Raises
    ------
    TypeError
        If ``rho`` or ``delta`` is not a real number.
    ValueError
        If ``rho`` is negative, NaN or infinite, ``delta`` is not in (0, 1), or
        ``method`` is unknown.

    References
    ----------
    CKS Prop 12 and Cor 13; Bun & Steinke 2016 Prop 1.3.

    Examples
    --------
    >>> round(zcdp_epsilon(0.5, 1e-5), 4)
    4.7284
    >>> round(zcdp_epsilon(0.5, 1e-5, method="standard"), 4)
    5.2985
    >>> zcdp_epsilon(0.0, 1e-5)
    0.0
    """
    rho = _check_rho("rho", rho)
    delta = check_delta("delta", delta)
    method = _check_method(method)
    if rho == 0.0:
        return 0.0
    log_inv_delta = -math.log(delta)
    if method == "standard":
        # Bun & Steinke 2016 Prop 1.3
        return _round_up(rho + 2.0 * math.sqrt(rho * log_inv_delta))
    return max(0.0, _cks_epsilon(rho, log_inv_delta)[0])


def zcdp_delta(rho: float, epsilon: float, method: Method = "cks") -> float:
    r"""The δ such that ρ-zCDP implies (ε, δ)-DP.

    Parameters
    ----------
    rho : float
        The zCDP parameter, finite and ``>= 0``. ρ = 0 gives δ = 0.
    epsilon : float
        The ε of the guarantee, finite and ``>= 0``.
    method : {"cks", "standard"}, default "cks"
        ``"cks"``: inf over α > 1 of CKS Prop 12 in δ form with τ = αρ
        (CKS Cor 13). ``"standard"``: the inverse of ε = ρ + 2√(ρ ln(1/δ)),
        δ = exp(−(ε − ρ)²/(4ρ)) for ε > ρ and 1 otherwise.

    Returns
    -------
    float
        δ in (0, 1] for ρ > 0, an upper bound rounded up; a bound below the
        smallest positive float is returned as 5e-324, never 0.

    Raises
    ------
    TypeError
        If ``rho`` or ``epsilon`` is not a real number.
    ValueError
        If an argument is negative, NaN or infinite, or ``method`` is unknown.

    References
    ----------
    CKS Prop 12 and Cor 13; Bun & Steinke 2016 Prop 1.3.

    Examples
    --------
    >>> d = zcdp_delta(0.5, 4.7284)
    >>> round(d / 1e-5, 3)
    1.0
    >>> zcdp_delta(0.5, 0.25, method="standard")
    1.0
    """
    rho = _check_rho("rho", rho)
    epsilon = check_epsilon("epsilon", epsilon)
    method = _check_method(method)
    if rho == 0.0:
        return 0.0
    if method == "standard":
        if epsilon <= rho:
            return 1.0
        # Bun & Steinke 2016 Prop 1.3 solved for δ
        excess = (epsilon - rho) / (2.0 * math.sqrt(rho))
        return _exp_up(_round_up(-excess * excess))
    return _exp_up(_cks_log_delta(rho, epsilon))


def zcdp_rho(epsilon: float, delta: float) -> float:
    r"""The largest ρ such that ρ-zCDP implies (ε, δ)-DP under CKS Cor 13.

    Parameters
    ----------
    epsilon : float
        Target ε, finite and ``>= 0``.
    delta : float
        Target δ, in (0, 1).

    Returns
    -------
    float
        ρ >= 0, rounded down: ``zcdp_epsilon(rho, delta) <= epsilon``. For
        ε = 0 the answer is about δ², returned as 0.0 if that underflows.

    Raises
    ------
    TypeError
        If an argument is not a real number.
    ValueError
        If ``epsilon`` is negative, NaN or infinite, or ``delta`` is not in (0, 1).

    References
    ----------
    CKS Cor 13.

    Examples
    --------
    >>> rho = zcdp_rho(1.0, 1e-5)
    >>> round(rho, 5)
    0.03056
    >>> zcdp_epsilon(rho, 1e-5) <= 1.0
    True
    """
    epsilon = check_epsilon("epsilon", epsilon)
    delta = check_delta("delta", delta)
    log_inv_delta = -math.log(delta)

    def excess(rho: float) -> float:
        return _cks_epsilon(rho, log_inv_delta)[0] - epsilon

    # The standard conversion is looser, so its ρ is feasible here.
    lo = (epsilon / (math.sqrt(log_inv_delta + epsilon) + math.sqrt(log_inv_delta))) ** 2
    if lo == 0.0:
        lo = delta * delta  # CKS Cor 13 at ε = 0 allows ρ of about (e/2)·δ²
    while lo > 0.0 and excess(lo) > 0.0:
        lo /= 2.0
    if lo == 0.0:
        return 0.0
    hi = min(2.0 * lo, _MAX)
    while excess(hi) <= 0.0:
        if hi == _MAX:  # pragma: no cover - ε near 1e308
            return hi
        lo, hi = hi, min(2.0 * hi, _MAX)
    # The largest ρ evaluated to meet ε (the safe side).
    return largest_passing(lambda r: excess(r) <= 0.0, lo, hi, rel_tol=ULP_TOL)


@dataclass(frozen=True, slots=True)
class RdpEpsilon:
    """The result of converting an RDP curve to (ε, δ)-DP.

    Attributes
    ----------
    epsilon : float
        The ε (upper bound, rounded up, >= 0).
    order : float
        The Rényi order α at which it is attained (``inf`` if every RDP value is infinite).
    """

    epsilon: float
    order: float


def _rdp_arrays(
    orders: Sequence[float] | npt.ArrayLike, rdp: Sequence[float] | npt.ArrayLike
) -> tuple[list[float], list[float]]:
    listed: list[list[float]] = []
    for name, values in (("orders", orders), ("rdp", rdp)):
        if isinstance(values, str | bytes):
            raise TypeError(invalid(name, "a non-empty sequence of real numbers", values))
        try:
            items = list(np.asarray(values, dtype=object).ravel())
        except (TypeError, ValueError):  # pragma: no cover - defensive
            raise TypeError(invalid(name, "a non-empty sequence of real numbers", values)) from None
        if np.ndim(np.asarray(values, dtype=object)) != 1 or not items:
            raise ValueError(invalid(name, "a non-empty 1-D sequence of real numbers", values))
        listed.append(items)
    order_items, rdp_items = listed
    if len(order_items) != len(rdp_items):
        raise ValueError(
            invalid("rdp", f"a sequence of the same length as orders ({len(order_items)})", rdp)
        )
    checked_orders = []
    for i, a in enumerate(order_items):
        value = check_finite(f"orders[{i}]", a)
        if not value > 1.0:
            raise ValueError(invalid(f"orders[{i}]", "a finite real number > 1", a))
        checked_orders.append(value)
    checked_rdp = [check_epsilon(f"rdp[{i}]", t, allow_inf=True) for i, t in enumerate(rdp_items)]
    return checked_orders, checked_rdp


def rdp_epsilon_order(
    orders: Sequence[float] | npt.ArrayLike,
    rdp: Sequence[float] | npt.ArrayLike,
    delta: float,
) -> RdpEpsilon:
    r"""Convert an RDP curve to (ε, δ)-DP and report the order that attains it.

    See :func:`rdp_epsilon` for the parameters.

    Returns
    -------
    RdpEpsilon
        ``epsilon`` (as :func:`rdp_epsilon`) and the minimising ``order``.

    Raises
    ------
    TypeError
        If an argument is not real / not a sequence.
    ValueError
        As :func:`rdp_epsilon`.

    References
    ----------
    CKS Prop 12.

    Examples
    --------
    >>> r = rdp_epsilon_order([2, 4, 8, 16, 32], [0.5 * a for a in (2, 4, 8, 16, 32)], 1e-5)
    >>> r.order, round(r.epsilon, 4)
    (4.0, 5.0879)
    """
    checked_orders, checked_rdp = _rdp_arrays(orders, rdp)
    delta = check_delta("delta", delta)
    log_inv_delta = -math.log(delta)
    best = RdpEpsilon(math.inf, math.inf)
    for alpha, tau in zip(checked_orders, checked_rdp, strict=True):
        if math.isinf(tau):
            continue
        # CKS Prop 12 at α, x = α − 1
        eps = max(0.0, _prop12_epsilon(alpha - 1.0, tau, log_inv_delta))
        if eps < best.epsilon:
            best = RdpEpsilon(eps, alpha)
    return best


def rdp_epsilon(
    orders: Sequence[float] | npt.ArrayLike,
    rdp: Sequence[float] | npt.ArrayLike,
    delta: float,
) -> float:
    r"""Convert an RDP curve to (ε, δ)-DP: min over the orders of CKS Prop 12.

    (α, τ)-RDP implies (ε, δ)-DP with
    ε = τ + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α).

    Parameters
    ----------
    orders : sequence of float
        Rényi orders α, each finite and ``> 1``; non-empty, 1-D.
    rdp : sequence of float
        The RDP values τ at those orders, each ``>= 0`` (``inf`` allowed, meaning
        no bound at that order); same length as ``orders``.
    delta : float
        Target δ, in (0, 1).

    Returns
    -------
    float
        ε >= 0, rounded up; ``inf`` if every RDP value is infinite.

    Raises
    ------
    TypeError
        If an element is not a real number or an argument is a string.
    ValueError
        If an order is not > 1 or not finite, an RDP value is negative or NaN,
        the lengths differ or are 0, or ``delta`` is not in (0, 1).

    References
    ----------
    CKS Prop 12.

    Examples
    --------
    >>> orders = [1.5, 2, 4, 8, 16, 32, 64]
    >>> round(rdp_epsilon(orders, [0.5 * a for a in orders], 1e-5), 4)
    5.0879
    """
    return rdp_epsilon_order(orders, rdp, delta).epsilon
