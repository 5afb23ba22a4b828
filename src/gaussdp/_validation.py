"""Argument checks shared by every public entry point.

Each check returns the normalised value or raises ``TypeError`` (wrong kind of
object) or ``ValueError`` (right kind, outside the allowed range) with the
message template of :func:`gaussdp.errors.invalid`. Booleans are never accepted
as numbers.
"""

from __future__ import annotations

import math
import numbers
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from fractions import Fraction

from gaussdp.errors import invalid

__all__ = [
    "MAX_COUNT",
    "check_count",
    "check_delta",
    "check_epsilon",
    "check_finite",
    "check_fraction",
    "check_int",
    "check_positive",
    "check_probability",
    "nonfinite_at",
    "redacted",
]

# The largest count of compositions (steps, runs) accepted: check_count.
MAX_COUNT = 2**53


class _Redacted:
    """Stands in for private data in a message: its ``repr`` describes, never shows, it."""

    __slots__ = ("_text",)

    def __init__(self, text: str) -> None:
        self._text = text

    def __repr__(self) -> str:
        return self._text


def format_bound(value: float, *, up: bool, digits: int = 6) -> str:
    """A bound as text, rounded outward so that the text is still a bound.

    Public as :func:`gaussdp.accounting.format_bound`. ``f"{eps:.3g}"`` rounds to
    nearest, so a printed ε can be below the certified one (2.38174 shown as 2.38).

    Parameters
    ----------
    value : float
        The bound (an ε, δ, ρ, μ, σ ...). Infinities, NaN and 0 are shown as they are.
    up : bool
        True for an upper bound (rounded towards +∞), False for a lower bound
        (rounded towards −∞).
    digits : int
        Significant digits, 1 to 15 (default 6).

    Returns
    -------
    str
        The shortest ``g``-format text of the outward-rounded value: read back as a
        float it is ≥ ``value`` when ``up`` (≤ when not).

    Raises
    ------
    TypeError
        If ``value`` is not a real number, or ``up`` is not a bool.
    ValueError
        If ``digits`` is not an integer from 1 to 15.

    Examples
    --------
    >>> format_bound(3.566680272, up=True), format_bound(3.566680272, up=False)
    ('3.56669', '3.56668')
    >>> format_bound(0.9999996, up=True), format_bound(2.0, up=True, digits=3)
    ('1', '2')
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(invalid("value", "a real number", value))
    if not isinstance(up, bool):
        raise TypeError(invalid("up", "True or False", up))
    if (
        isinstance(digits, bool)
        or not isinstance(digits, numbers.Integral)
        or not 1 <= digits <= 15
    ):
        raise ValueError(invalid("digits", "an integer from 1 to 15", digits))
    if not math.isfinite(value) or value == 0:
        return f"{value:.{digits}g}"
    # The shortest decimal that reads back as this float (0.1, not 0.1000000000000000055…).
    shortest = Decimal(repr(float(value)))
    exponent = math.floor(math.log10(abs(value))) - (digits - 1)
    rounded = shortest.quantize(
        Decimal(1).scaleb(exponent), rounding=ROUND_CEILING if up else ROUND_FLOOR
    )
    # A decimal of `digits` ≤ 15 significant digits survives the trip through a float.
    return f"{float(rounded):.{digits}g}"


def redacted(value: object, problem: str | None = None) -> object:
    """A stand-in for private ``value`` to pass to :func:`~gaussdp.errors.invalid`.

    Refusals of data arguments (query answers, gradients, client updates) end up in
    logs, so they name the kind of object, its shape and dtype and the ``problem``
    (such as ``"a NaN at index 3"``) but never a data value:

    >>> import numpy as np
    >>> invalid("x", "finite", redacted(np.array([3.5, np.nan]), "a NaN at index 1"))
    'x must be finite, got a numpy.ndarray of shape (2,) and dtype float64 with a NaN at index 1'
    """
    kind = type(value)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    name = name.replace("numpy._core.multiarray.", "numpy.").replace(
        "numpy.core.multiarray.", "numpy."
    )
    text = f"a {name}"
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if isinstance(shape, tuple) and shape != ():
        text += f" of shape {tuple(int(n) for n in shape)}"
        if dtype is not None:
            text += f" and dtype {dtype}"
    elif isinstance(value, list | tuple | dict | set | frozenset):
        text += f" of length {len(value)}"
    if problem is not None:
        text += f" with {problem}"
    return _Redacted(text)


def nonfinite_at(values: object) -> str:
    """Describe the first NaN or infinity of a float array, e.g. ``"a NaN at index 3"``.

    Only the kind and position are named, never a finite entry.
    """
    import numpy as np  # here, not at the top: the CLI's --help imports this module

    array = np.asarray(values, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size == 0:
        return "no NaN or infinity"
    position = tuple(int(i) for i in np.unravel_index(int(bad[0]), array.shape))
    what = "a NaN" if math.isnan(float(array[position])) else "an infinity"
    where = "" if not position else f" at index {position[0] if len(position) == 1 else position}"
    return what + where


def _as_float(name: str, value: object, constraint: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(invalid(name, constraint, value))
    try:
        result = float(value)
    except OverflowError:  # a Python int or Fraction beyond the float range
        raise ValueError(invalid(name, constraint, value)) from None
    if math.isnan(result):
        raise ValueError(invalid(name, constraint, value))
    return result


def check_finite(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite real number."""
    constraint = "a finite real number"
    result = _as_float(name, value, constraint)
    if math.isinf(result):
        raise ValueError(invalid(name, constraint, value))
    return result


def check_positive(name: str, value: object, *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float if it is ``> 0`` (and finite unless ``allow_inf``)."""
    constraint = "a positive real number" if allow_inf else "a finite positive real number"
    result = _as_float(name, value, constraint)
    if result <= 0 or (math.isinf(result) and not allow_inf):
        raise ValueError(invalid(name, constraint, value))
    return result


def check_epsilon(name: str, value: object, *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float if it is a valid ε: ``>= 0`` and finite."""
    constraint = "a non-negative real number" if allow_inf else "a finite real number >= 0"
    result = _as_float(name, value, constraint)
    if result < 0 or (math.isinf(result) and not allow_inf):
        raise ValueError(invalid(name, constraint, value))
    return result


def check_delta(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a valid δ target: strictly inside (0, 1)."""
    constraint = "a real number in (0, 1)"
    result = _as_float(name, value, constraint)
    if not 0 < result < 1:
        raise ValueError(invalid(name, constraint, value))
    return result


def check_probability(name: str, value: object, *, open_interval: bool = False) -> float:
    """Return ``value`` as a float if it lies in [0, 1] (or (0, 1) if ``open_interval``)."""
    constraint = "a real number in (0, 1)" if open_interval else "a real number in [0, 1]"
    result = _as_float(name, value, constraint)
    inside = 0 < result < 1 if open_interval else 0 <= result <= 1
    if not inside:
        raise ValueError(invalid(name, constraint, value))
    return result


def check_int(name: str, value: object, *, minimum: int | None = None) -> int:
    """Return ``value`` as an ``int`` if it is an integer (``>= minimum`` when given).

    Integral floats such as ``2.0`` are accepted; ``2.5``, booleans and NaN are not.
    """
    constraint = "an integer" if minimum is None else f"an integer >= {minimum}"
    if isinstance(value, bool):
        raise TypeError(invalid(name, constraint, value))
    if isinstance(value, numbers.Integral):
        result = int(value)
    elif isinstance(value, numbers.Real):
        as_float = float(value)
        if not math.isfinite(as_float) or not as_float.is_integer():
            raise ValueError(invalid(name, constraint, value))
        result = int(as_float)
    else:
        raise TypeError(invalid(name, constraint, value))
    if minimum is not None and result < minimum:
        raise ValueError(invalid(name, constraint, value))
    return result


def check_count(name: str, value: object) -> int:
    """Return ``value`` if it is an ``int`` in [1, 2**53] (a number of runs or steps).

    Unlike :func:`check_int`, floats are refused even when integral: ``1e308`` would
    silently become a 309-digit count. The upper limit :data:`MAX_COUNT` is where
    every accountant still answers (beyond it ``count * x`` and ``exp(count * x)``
    overflow floats); 2**53 compositions are far more than any real analysis needs.
    """
    constraint = "an integer in [1, 2**53]"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(invalid(name, constraint, value))
    if not isinstance(value, numbers.Integral):
        raise ValueError(invalid(name, constraint, value))
    count = int(value)
    if count > MAX_COUNT and count.bit_length() > 256:
        # repr of an int of over 4300 digits raises; a bit count says enough.
        raise ValueError(
            invalid(name, constraint, _Redacted(f"an integer of {count.bit_length()} bits"))
        )
    if not 1 <= count <= MAX_COUNT:
        raise ValueError(invalid(name, constraint, value))
    return count


def check_fraction(name: str, value: object) -> Fraction:
    """Return ``value`` as an exact positive :class:`~fractions.Fraction`.

    Accepts ints, Fractions, finite floats (converted exactly, so ``0.1`` becomes
    ``3602879701896397/36028797018963968``) and strings such as ``"25/4"`` or
    ``"6.25"``.
    """
    constraint = "a finite positive rational number (int, Fraction, float or 'p/q')"
    if isinstance(value, bool):
        raise TypeError(invalid(name, constraint, value))
    if isinstance(value, str):
        try:
            result = Fraction(value.strip())
        except (ValueError, ZeroDivisionError):
            raise ValueError(invalid(name, constraint, value)) from None
    elif isinstance(value, numbers.Rational):
        result = Fraction(int(value.numerator), int(value.denominator))
    elif isinstance(value, numbers.Real):
        as_float = float(value)
        if not math.isfinite(as_float):
            raise ValueError(invalid(name, constraint, value))
        result = Fraction(as_float)
    else:
        raise TypeError(invalid(name, constraint, value))
    if result <= 0:
        raise ValueError(invalid(name, constraint, value))
    return result
