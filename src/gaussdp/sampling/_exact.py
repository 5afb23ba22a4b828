"""Exact resolution of the comparisons the vectorised fast path leaves undecided.

The fast path (:mod:`gaussdp.sampling.vectorized`) reads a uniform real ``U`` in
``[0, 1)`` to 52 or 53 bits and compares it with ``exp(-x)`` through rigorous
floating-point bounds. When ``U`` falls inside the bounds, the comparison is
finished here: :class:`LazyUniform` keeps the bits of ``U`` already drawn and
appends fresh 64-bit words on demand, and :func:`exp_neg_bounds` brackets
``exp(-x)`` for rational ``x`` with integers at any precision, using
:mod:`decimal`, whose ``exp`` is correctly rounded. The result is exactly the
indicator ``U < exp(-x)`` of one uniform real, so ``P[True] = exp(-x)``
exactly. The derivation is in ``docs/sampler-exactness.md`` §3.
"""

from __future__ import annotations

import decimal
from fractions import Fraction

from gaussdp.random import RandomSource

__all__ = ["LazyUniform", "exp_neg_bounds", "floor_neg_log"]


def exp_neg_bounds(x: Fraction, precision: int) -> tuple[int, int]:
    """Return integers ``lo <= 2**precision * exp(-x) <= hi`` for rational ``x >= 0``.

    ``hi - lo`` is a few units for moderate ``x``. The bounds come from
    :mod:`decimal` at ``~precision * log10(2) + 12`` digits: ``x`` is rounded
    down and up (``ROUND_FLOOR`` / ``ROUND_CEILING`` division), ``exp`` of each
    is correctly rounded (Python documents ``Decimal.exp`` as correctly
    rounded), so the true value lies between the representable neighbours
    ``next_minus`` / ``next_plus`` of the computed results, and ``exp`` is
    increasing.

    Examples
    --------
    >>> lo, hi = exp_neg_bounds(Fraction(1), 64)
    >>> lo <= 6786177901268885274 <= hi  # floor(2**64 / e)
    True
    """
    if x == 0:
        return 1 << precision, 1 << precision
    # exp(-x) < 2**-(precision + 1) when x >= 0.7 (precision + 1), since ln 2 < 0.7.
    if x >= Fraction(7, 10) * (precision + 1):
        return 0, 1
    whole_digits = len(str(x.numerator // x.denominator))
    digits = int(precision * 0.30103) + whole_digits + 12
    down = decimal.Context(
        prec=digits, rounding=decimal.ROUND_FLOOR, Emin=decimal.MIN_EMIN, Emax=decimal.MAX_EMAX
    )
    up = decimal.Context(
        prec=digits, rounding=decimal.ROUND_CEILING, Emin=decimal.MIN_EMIN, Emax=decimal.MAX_EMAX
    )
    # Every operation goes through an explicit context: unary minus or a bare ``exp``
    # would round to the thread's default 28 digits.
    neg_num, den = decimal.Decimal(-x.numerator), decimal.Decimal(x.denominator)  # exact
    neg_x_down = down.divide(neg_num, den)  # <= -x
    neg_x_up = up.divide(neg_num, den)  # >= -x
    e_low = down.next_minus(down.exp(neg_x_down))  # <= exp(neg_x_down) <= exp(-x)
    e_high = up.next_plus(up.exp(neg_x_up))  # >= exp(neg_x_up) >= exp(-x)
    scale = 1 << precision
    low = Fraction(e_low) * scale
    high = Fraction(e_high) * scale
    lo = max(low.numerator // low.denominator, 0)
    hi = -((-high.numerator) // high.denominator)
    return lo, hi


class LazyUniform:
    """A uniform real ``U`` in ``[0, 1)`` of which only a binary prefix has been drawn.

    ``U = (prefix + R) / 2**bits`` with ``R`` uniform in ``[0, 1)`` and
    independent of everything drawn so far; :meth:`extend` reveals 64 more
    bits of ``R`` from fresh words.
    """

    __slots__ = ("bits", "prefix", "rng")

    def __init__(self, prefix: int, bits: int, rng: RandomSource) -> None:
        self.prefix = prefix
        self.bits = bits
        self.rng = rng

    def extend(self) -> None:
        """Append 64 fresh uniform bits to the prefix."""
        self.prefix = (self.prefix << 64) | self.rng.randbits(64)
        self.bits += 64

    def below_exp_neg(self, x: Fraction) -> bool:
        """Return ``U < exp(-x)`` for rational ``x >= 0``, exactly.

        ``U`` lies in ``[prefix, prefix + 1) / 2**bits``. With integer bounds
        ``lo <= 2**bits exp(-x) <= hi``: ``prefix + 1 <= lo`` proves
        ``U < exp(-x)``; ``prefix >= hi`` proves ``U >= exp(-x)``; otherwise
        64 more bits are drawn. ``exp(-x)`` is irrational for rational
        ``x > 0`` (Lindemann), so the loop ends with probability 1 and the
        expected number of extensions is below 1.
        """
        if x == 0:
            return True
        while True:
            lo, hi = exp_neg_bounds(x, self.bits)
            if self.prefix + 1 <= lo:
                return True
            if self.prefix >= hi:
                return False
            self.extend()

    def below_scaled_exp_neg(self, x: Fraction, weight: Fraction) -> bool:
        """Return ``U < weight * exp(-x)`` for rational ``x >= 0`` and ``weight > 0``, exactly.

        With ``lo <= 2**P exp(-x) <= hi`` (``P`` = the prefix's bits plus the weight's
        size plus 16): ``(prefix + 1) / 2**bits <= weight lo / 2**P`` proves
        ``U < weight exp(-x)``, ``prefix / 2**bits >= weight hi / 2**P`` proves the
        opposite (integer comparisons); otherwise 64 more bits are drawn. For ``x > 0``
        the threshold is irrational, so it is never an end of the prefix's interval;
        for ``x = 0`` it is the rational ``weight`` and the bounds are exact. Either way
        the interval shrinks onto one side with probability 1.
        """
        num, den = weight.numerator, weight.denominator
        while True:
            extra = max(num.bit_length() - den.bit_length(), 0) + 16
            precision = self.bits + extra
            lo, hi = exp_neg_bounds(x, precision)
            if (self.prefix + 1) * den << precision <= num * lo << self.bits:
                return True
            if self.prefix * den << precision >= num * hi << self.bits:
                return False
            self.extend()


def floor_neg_log(u: LazyUniform, tau: Fraction, hint: int) -> int:
    """Return ``floor(-tau * ln U)`` exactly, searching from the estimate ``hint``.

    ``-tau ln U >= g`` iff ``U <= exp(-g / tau)``; the search keeps
    ``lo <= -tau ln U < hi`` (``U < exp(-lo/tau)`` and ``U >= exp(-hi/tau)``)
    by galloping from ``hint`` and then bisecting, so it needs ``O(1)``
    comparisons when ``hint`` is close and ``O(log |error|)`` otherwise.
    """
    lo = max(hint - 1, 0)
    step = 1
    hi_seen: int | None = None
    while lo > 0 and not u.below_exp_neg(Fraction(lo) / tau):
        hi_seen = lo
        lo = max(lo - step, 0)
        step *= 2
    hi = hi_seen if hi_seen is not None else max(hint + 2, lo + 1)
    step = 1
    while hi_seen is None and u.below_exp_neg(Fraction(hi) / tau):
        lo = hi
        hi += step
        step *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if u.below_exp_neg(Fraction(mid) / tau):
            lo = mid
        else:
            hi = mid
    return lo
