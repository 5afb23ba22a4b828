"""The text of a Python value: one rule for pandas ``object`` columns, releases and synth alike.

A pandas ``object`` column holds Python values of any type, and the engines would
type the column from them (one row could change a refusal). gaussdp reads such a
column as text, value by value, with :func:`value_text`: a total function (no value
makes it raise, so no row refuses a run) that gives values Python calls equal one
text (``7``, ``7.0``, ``numpy.int64(7)`` and ``Decimal('7')`` are one privacy unit,
never two), and gives ``None`` (NULL: a missing value) to a value that has no text.
:mod:`gaussdp.synth.domain` compares categories with the same function.
"""

from __future__ import annotations

import contextlib
import decimal
import math
import numbers
import re
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["column_text", "type_label", "value_text"]

#: Values with no text of their own: containers (Python calls ``[7]`` and ``[7.0]`` equal
#: but their texts differ) and arrays.
_CONTAINERS = (list, tuple, set, frozenset, dict, np.ndarray)
#: Most decimal digits of an integer's text (Python's default limit on ``str(int)``).
_MAX_DIGITS = 4300
_SURROGATE = re.compile("[\ud800-\udfff]")


def value_text(value: object) -> str | None:
    r"""The text of one value of a pandas ``object`` column, or ``None`` (NULL).

    * ``None``, NaN (float, ``Decimal``, quiet or signalling), ``pandas.NA`` and
      ``NaT``: ``None``, a missing value.
    * Booleans: ``'True'``/``'False'``.
    * Numbers equal to an integer (``int``, numpy integers, integral floats and
      decimals, fractions, complex numbers with no imaginary part): the integer's
      decimal digits (``-0.0`` is ``'0'``); one with more than 4,300 digits has no
      text. Other floats: ``repr`` of the double (numpy floats converted exactly);
      other decimals and fractions: ``repr`` of the double when they equal it,
      else their own text; infinities ``'inf'``/``'-inf'``.
    * Text: itself, unless it holds a lone surrogate (not UTF-8): ``None``.
      Bytes: decoded as UTF-8, ``None`` if they are not UTF-8.
    * Lists, tuples, sets, dicts, arrays: ``None`` (not a value of a column).
    * Anything else: ``str(value)``, ``None`` if that raises.

    The data values are never quoted in an error: nothing here raises.

    Examples
    --------
    >>> import decimal, numpy
    >>> {value_text(v) for v in (7, 7.0, numpy.int64(7), decimal.Decimal("7.00"))}
    {'7'}
    >>> value_text(0.5), value_text(True), value_text(b"\xff"), value_text(decimal.Decimal("sNaN"))
    ('0.5', 'True', None, None)
    """
    try:
        return _text(value)
    except Exception:  # a user type whose comparison or str raises: no text
        return None


def _text(value: object) -> str | None:
    if value is None or isinstance(value, _CONTAINERS):
        return None
    if isinstance(value, str):
        return None if _SURROGATE.search(value) else value
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, numbers.Integral):
        return _integer(int(value))
    if isinstance(value, decimal.Decimal):
        return _decimal(value)
    if isinstance(value, complex | np.complexfloating):
        return _text(value.real) if value.imag == 0 else str(complex(value))
    if isinstance(value, float | np.floating):
        return _float(float(value))
    if isinstance(value, numbers.Rational):
        if value.denominator == 1:
            return _integer(int(value.numerator))
        return repr(float(value)) if float(value) == value else str(value)
    if _missing(value):
        return None
    return str(value)


def _integer(value: int) -> str | None:
    try:
        return str(value)
    except ValueError:  # more digits than Python's limit on an int's text
        return None


def _float(value: float) -> str | None:
    if math.isnan(value):
        return None
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value.is_integer():
        return str(int(value))
    return repr(value)


def _decimal(value: decimal.Decimal) -> str | None:
    if value.is_nan():  # quiet or signalling: comparing a signalling NaN raises
        return None
    if value.is_infinite():
        return "inf" if value > 0 else "-inf"
    if value.is_zero():
        return "0"
    if value.adjusted() >= _MAX_DIGITS:
        return None  # an integer beyond the digits an int's text may have
    if value == value.to_integral_value():
        return _integer(int(value))
    as_float = float(value)
    if decimal.Decimal(as_float) == value:
        return repr(as_float)
    return str(value.normalize(decimal.Context(prec=max(len(value.as_tuple().digits), 1))))


def _missing(value: object) -> bool:
    """Whether ``value`` is pandas' or numpy's missing value (``NA``, ``NaT``)."""
    import pandas as pd

    if value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, np.datetime64 | np.timedelta64) and bool(np.isnat(value))


def column_text(values: pd.Series) -> pd.Series:
    """A pandas ``object`` column as pandas ``string`` values, each by :func:`value_text`.

    A column of ``str`` only (the common case) or of integers only is converted at
    once; any other, value by value (about 0.5 µs a value). Either way each value's
    text depends on that value alone.
    """
    import pandas as pd

    kind = pd.api.types.infer_dtype(values, skipna=True)
    if kind in ("string", "empty"):
        text = values.astype("string")
        try:  # one encoding of every value: fails only if one holds a lone surrogate
            "".join(text.to_numpy(dtype=object, na_value="")).encode("utf-8")
        except UnicodeEncodeError:
            return text.mask(text.str.contains(_SURROGATE, na=False))
        return text
    if kind == "integer":  # ints only (no bool): their digits, as value_text writes them
        with contextlib.suppress(ValueError):  # one beyond 4,300 digits: value by value
            return values.astype("string")
    out: Any = [value_text(v) for v in values]
    return pd.Series(out, index=values.index, name=values.name, dtype="string")


#: DuckDB's ENUM type names its values: ``ENUM('a', 'b')``.
_ENUM = re.compile(r"\bENUM\('(?:[^']|'')*'(?:,\s*'(?:[^']|'')*')*\)", re.IGNORECASE)


def type_label(type_name: str) -> str:
    """An engine's type name as a message may show it: without the values an ``ENUM``
    lists (a pandas ``category`` column's categories are the data's distinct values).

    Examples
    --------
    >>> type_label("ENUM('Jane Roe', 'a')"), type_label("STRUCT(a ENUM('x'))")
    ('ENUM', 'STRUCT(a ENUM)')
    >>> type_label("DECIMAL(18,3)")
    'DECIMAL(18,3)'
    """
    return _ENUM.sub("ENUM", type_name)
