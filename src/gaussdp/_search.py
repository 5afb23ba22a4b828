r"""One safe-side search and directed rounding, for every calibration and inversion.

A calibration asks for the smallest (or largest) parameter meeting a privacy
condition — the smallest ε with δ(ε) ≤ δ, the largest μ that fits a budget, the
smallest threshold whose δ is small enough. The answer must never be on the
unsafe side, so the search keeps an invariant instead of trusting a root
finder: :func:`smallest_passing` returns a point at which the predicate was
*evaluated* to pass, and the bracket shrinks only by evaluations (bisection).
Floating-point error in the predicate is the predicate's concern (it rounds its
own computation the safe way, with the helpers below); the search adds none.

The rounding helpers turn a correctly rounded float result into a bound:
:func:`up` and :func:`down` move one ulp (``math.nextafter``), :func:`add_up`,
:func:`mul_up` and :func:`sqrt_up` give floats ≥ the exact sum, product and
square root of their arguments (each IEEE operation is off by at most half an
ulp, so one step suffices); :func:`fraction_up` / :func:`fraction_down` bound an
exact rational.

Examples
--------
>>> smallest_passing(lambda x: x * x >= 2.0, 0.0, 2.0) ** 2 >= 2.0
True
>>> smallest_passing_int(lambda k: 2**k >= 1000, 0)
10
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from fractions import Fraction

from gaussdp.errors import invalid

__all__ = [
    "ULP_TOL",
    "add_up",
    "bracketed_root",
    "down",
    "fraction_down",
    "fraction_up",
    "largest_passing",
    "mul_up",
    "smallest_passing",
    "smallest_passing_int",
    "smallest_passing_score",
    "smallest_scale",
    "sqrt_up",
    "up",
]

#: Default relative width at which a float search stops (the answer is within it).
REL_TOL = 1e-12
#: A relative width of four ulps: a search to this width ends at adjacent floats.
ULP_TOL = 4 * sys.float_info.epsilon
# Smallest positive subnormal.
_TINY = math.ulp(0.0)
#: Largest number of bracket doublings before a search gives up.
_MAX_DOUBLINGS = 2100


def up(x: float) -> float:
    """The next float above ``x`` (a bound ≥ the exact value of a correctly rounded result)."""
    return math.nextafter(x, math.inf)


def down(x: float) -> float:
    """The next float below ``x``."""
    return math.nextafter(x, -math.inf)


def add_up(*terms: float) -> float:
    """A float ≥ the exact sum of ``terms`` (``math.fsum``, one ulp up if inexact)."""
    total = math.fsum(terms)
    exact = math.isinf(total) or math.fsum([*terms, -total]) == 0.0
    return total if exact else up(total)


def mul_up(a: float, b: float) -> float:
    """A float ≥ the exact product a·b of finite ``a``, ``b``: one ulp up if inexact."""
    product = a * b
    if math.isinf(product) or Fraction(product) == Fraction(a) * Fraction(b):
        return product
    return up(product)


def sqrt_up(x: Fraction | float) -> float:
    """A float ≥ √x for an exact x ≥ 0 (x rounded up to a float, the root rounded up)."""
    exact = Fraction(x)
    root = math.sqrt(fraction_up(exact))
    return root if Fraction(root) ** 2 >= exact else up(root)


def _fraction_to_float(x: Fraction) -> float:
    """``float(x)``, or ±inf where ``x`` is beyond the float range (never OverflowError)."""
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def fraction_up(x: Fraction) -> float:
    """A float ≥ the rational ``x`` (``float()`` rounds to nearest; one ulp up if inexact).

    ``inf`` above the float range (the bound stays on the safe side).
    """
    value = _fraction_to_float(x)
    if math.isinf(value):
        return value if value > 0 else -sys.float_info.max
    return value if Fraction(value) >= x else up(value)


def fraction_down(x: Fraction) -> float:
    """A float ≤ the rational ``x`` (``-inf`` below the float range)."""
    value = _fraction_to_float(x)
    if math.isinf(value):
        return value if value < 0 else sys.float_info.max
    return value if Fraction(value) <= x else down(value)


def smallest_passing(
    predicate: Callable[[float], bool],
    lo: float,
    hi: float,
    *,
    rel_tol: float = REL_TOL,
    abs_tol: float = 0.0,
    grow: bool = False,
) -> float:
    """A point in [lo, hi] where ``predicate`` passes, within the tolerance of the smallest one.

    ``predicate`` must be monotone: once it passes at x it passes at every
    larger x. The returned value was evaluated to pass (the safe side); the true
    threshold t satisfies ``result − max(rel_tol·result, abs_tol) ≤ t ≤ result``
    (up to float spacing). If ``predicate(lo)`` passes, ``lo`` is returned.

    Parameters
    ----------
    predicate : callable
        float → bool, monotone non-decreasing in its argument.
    lo, hi : float
        The bracket, finite, ``lo <= hi``.
    rel_tol, abs_tol : float
        Stop when hi − lo ≤ max(rel_tol·|hi|, abs_tol).
    grow : bool, default False
        If ``predicate(hi)`` fails, double ``hi − lo`` (from ``lo``) until it
        passes, instead of raising.

    Raises
    ------
    ValueError
        If the predicate fails at ``hi`` (after growing, if asked, past the
        largest float): there is no passing point in the bracket.

    Examples
    --------
    >>> x = smallest_passing(lambda x: x >= 0.3, 0.0, 1.0)
    >>> 0.3 <= x < 0.3 * (1 + 1e-11)
    True
    >>> smallest_passing(lambda x: x >= 5.0, 0.0, 1.0, grow=True) >= 5.0
    True
    """
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise ValueError(invalid("bracket", "finite with lo <= hi", (lo, hi)))
    if predicate(lo):
        return lo
    if not predicate(hi):
        if not grow:
            raise ValueError(invalid("bracket", "one whose upper end passes", (lo, hi)))
        width = max(hi - lo, 1e-300)
        for _ in range(_MAX_DOUBLINGS):
            lo, width = hi, 2 * width
            hi = lo + width
            if not math.isfinite(hi):
                break
            if predicate(hi):
                break
        else:  # pragma: no cover - 2100 doublings exceed every float
            hi = math.inf
        if not math.isfinite(hi):
            raise ValueError(invalid("bracket", "one with a passing point below inf", (lo, hi)))
    # Invariant: predicate(lo) fails, predicate(hi) passes.
    while hi - lo > max(rel_tol * abs(hi), abs_tol):
        mid = lo + (hi - lo) / 2
        if mid <= lo or mid >= hi:  # adjacent floats
            break
        if predicate(mid):
            hi = mid
        else:
            lo = mid
    return hi


def smallest_passing_score(
    score: Callable[[float], float],
    lo: float,
    hi: float,
    *,
    rel_tol: float = REL_TOL,
    abs_tol: float = 0.0,
) -> float:
    """:func:`smallest_passing` for a predicate ``score(x) <= 0``, with secant steps.

    For an expensive, smooth, non-increasing ``score``: the next point is the
    Illinois regula-falsi point (Dowell & Jarratt 1971) of the bracket, kept inside
    its inner 90 % (so the bracket shrinks by at least 5 % a step), instead of the
    midpoint. The invariant is that of :func:`smallest_passing`: ``score(lo) > 0``,
    ``score(hi) <= 0``, and the point returned was evaluated to pass. The caller's
    ``score`` must have the sign of the exact comparison it stands for.

    Raises
    ------
    ValueError
        If ``score(hi) > 0``.

    Examples
    --------
    >>> x = smallest_passing_score(lambda x: 2.0 - x * x, 0.0, 2.0)
    >>> x * x >= 2.0 and x < 1.4142136
    True
    """
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise ValueError(invalid("bracket", "finite with lo <= hi", (lo, hi)))
    f_lo = score(lo)
    if f_lo <= 0.0:
        return lo
    f_hi = score(hi)
    if not f_hi <= 0.0:
        raise ValueError(invalid("bracket", "one whose upper end passes", (lo, hi)))
    side = 0
    while hi - lo > max(rel_tol * abs(hi), abs_tol):
        width = hi - lo
        x = lo + width / 2
        if math.isfinite(f_lo) and math.isfinite(f_hi) and f_lo != f_hi:
            x = lo + width * (f_lo / (f_lo - f_hi))
        x = min(max(x, lo + 0.05 * width), hi - 0.05 * width)
        if not lo < x < hi:  # adjacent floats
            break
        fx = score(x)
        if fx <= 0.0:
            hi, f_hi = x, fx
            if side == 1:
                f_lo /= 2.0  # Illinois: the end kept twice has its weight halved
            side = 1
        else:
            lo, f_lo = x, fx
            if side == -1:
                f_hi /= 2.0
            side = -1
    return hi


def smallest_scale(
    eps_of: Callable[[float], float],
    target: float,
    start: float,
    rtol: float,
    step: float = 1.5,
) -> float:
    """Smallest noise scale s (to ``rtol``) with eps_of(s) <= target; eps_of decreases in s.

    The calibration search of the library (noise multipliers, noise scales, release
    plans): the bracket [lo, hi] (eps_of(lo) > target >= eps_of(hi)) is found by steps
    of ``step`` from ``start``; :func:`smallest_passing_score` (secant steps on ln ε)
    then returns a scale at which ε was *evaluated* to meet the target, never one
    interpolated. Evaluations are cached (each may cost a PLD).

    Raises
    ------
    ValueError
        If no scale up to 1e12 meets ``target``, or every scale down to 1e-12 of
        ``start`` does (named ``target_epsilon``).

    Examples
    --------
    >>> s = smallest_scale(lambda s: 1.0 / s, 0.25, 1.0, 1e-6)
    >>> 1.0 / s <= 0.25 and s < 4.0 * (1 + 1e-6)
    True
    """
    cache: dict[float, float] = {}

    def eps_at(s: float) -> float:
        if s not in cache:
            cache[s] = eps_of(s)
        return cache[s]

    lo = hi = start
    if eps_at(start) <= target:
        while eps_at(lo) <= target:
            hi, lo = lo, lo / step
            if lo < start * 1e-12:
                # Met at every scale tried down to 1e-12 of the start (e.g. δ at least the
                # sample rate): no smallest noise to calibrate to.
                raise ValueError(
                    invalid(
                        "target_epsilon",
                        "small enough that some noise is needed at this delta (it is met "
                        f"even at a noise scale of {lo:.3g}; lower it or delta)",
                        target,
                    )
                )
    else:
        while eps_at(hi) > target:
            lo, hi = hi, hi * step
            if hi > 1e12:
                raise ValueError(invalid("target_epsilon", "reachable with finite noise", target))
    log_target = math.log(target)

    def score(s: float) -> float:
        # ln ε − ln target, with the sign of the exact comparison ε <= target.
        e = eps_at(s)
        if e <= target:
            return min(0.0, math.log(e) - log_target) if e > 0 else -50.0
        return max(math.log(e) - log_target, 1e-300) if math.isfinite(e) else math.inf

    return smallest_passing_score(score, lo, hi, rel_tol=rtol)


def largest_passing(
    predicate: Callable[[float], bool],
    lo: float,
    hi: float,
    *,
    rel_tol: float = REL_TOL,
    abs_tol: float = 0.0,
) -> float:
    """A point in [lo, hi] where ``predicate`` passes, within the tolerance of the largest one.

    ``predicate`` must be monotone non-increasing (once it fails at x it fails at
    every larger x) and pass at ``lo``. The returned value was evaluated to pass.

    Examples
    --------
    >>> x = largest_passing(lambda x: x * x <= 2.0, 0.0, 2.0)
    >>> x * x <= 2.0 and x > 1.41421356
    True
    """
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise ValueError(invalid("bracket", "finite with lo <= hi", (lo, hi)))
    if not predicate(lo):
        raise ValueError(invalid("bracket", "one whose lower end passes", (lo, hi)))
    if predicate(hi):
        return hi
    # Invariant: predicate(lo) passes, predicate(hi) fails.
    while hi - lo > max(rel_tol * abs(hi), abs_tol):
        mid = lo + (hi - lo) / 2
        if mid <= lo or mid >= hi:
            break
        if predicate(mid):
            lo = mid
        else:
            hi = mid
    return lo


def smallest_passing_int(
    predicate: Callable[[int], bool], lo: int, hi: int | None = None, *, limit: int = 2**4096
) -> int:
    """The smallest integer k ≥ ``lo`` at which a monotone ``predicate`` passes (exact).

    Without ``hi`` the bracket grows by doubling from ``lo`` until the predicate
    passes (up to ``limit``).

    Raises
    ------
    ValueError
        If the predicate fails at ``hi`` (or at ``limit``).

    Examples
    --------
    >>> smallest_passing_int(lambda k: k * k >= 50, 0)
    8
    """
    if predicate(lo):
        return lo
    if hi is None:
        step = 1
        hi = lo + step
        while not predicate(hi):
            lo, step = hi, 2 * step
            hi = lo + step
            if hi > limit:
                raise ValueError(invalid("bracket", f"one with a passing point below {limit}", lo))
    elif not predicate(hi):
        raise ValueError(invalid("bracket", "one whose upper end passes", (lo, hi)))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if predicate(mid):
            hi = mid
        else:
            lo = mid
    return hi


def bracketed_root(f: Callable[[float], float], lo: float, hi: float) -> float:
    """A zero of ``f`` in [lo, hi], where f(lo) and f(hi) differ in sign.

    The Illinois variant of regula falsi (Dowell & Jarratt 1971), with a bisection
    step whenever the secant point leaves the bracket or is not finite and every
    third step if the bracket has not halved, down to a width of about 4 ulps. Not
    scipy.optimize.brentq: importing scipy.optimize costs about a second that
    ``gaussdp calibrate`` need not pay. The bracket always keeps the sign change, so
    this is at worst a bisection.

    Not a safe-side search: use it where every point is valid and only closeness to
    the zero matters (e.g. the optimal Rényi order of a conversion, where any order
    gives a valid bound); a privacy decision uses :func:`smallest_passing` or
    :func:`largest_passing`.
    """
    f_lo, f_hi = f(lo), f(hi)
    side = 0
    last_width = hi - lo
    for step in range(1, 2300):  # bisection alone exhausts the doubles in under 2200
        if f_lo == 0.0:
            return lo
        if f_hi == 0.0:
            return hi
        width = hi - lo
        mid = lo + width / 2.0
        if width <= _TINY + ULP_TOL * max(abs(lo), abs(hi)) or not lo < mid < hi:
            break
        x = mid
        if step % 3 != 0 or width < last_width / 2.0:
            secant = lo + width * (f_lo / (f_lo - f_hi))
            if math.isfinite(secant) and lo < secant < hi:
                x = secant
        if step % 3 == 0:
            last_width = width
        fx = f(x)
        if (fx > 0.0) == (f_lo > 0.0):
            lo, f_lo = x, fx
            if side == -1:
                f_hi /= 2.0
            side = -1
        else:
            hi, f_hi = x, fx
            if side == 1:
                f_lo /= 2.0
            side = 1
    return lo if abs(f_lo) <= abs(f_hi) else hi
