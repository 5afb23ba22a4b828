"""Public group keys as the engine's typed values, normalised once before any check.

A public key list is matched against the values the engine returns for the
group column, so it must be compared as values *of the column's type*: the
Python values ``1`` and ``"1"``, or the TOML date ``2026-03-02`` and the string
``"2026-03-02"``, are one cell of a BIGINT or DATE column, and a key list
holding both would release that cell twice with independent noise while the
report counts it once (issue 12 item 2). :func:`typed_keys` converts every key
to the column's type, by the rules below, and only then checks that the keys
are distinct; anything else is refused with the column's type in the message.

Conversions (anything not listed is refused):

- integer columns: ``int`` and integral ``float``/``Decimal`` (not ``bool``);
- ``DOUBLE``: ``int`` and ``float`` (not NaN); ``FLOAT`` (32-bit): the same,
  rounded to the nearest float32 — the value the column stores for it, so
  ``0.1`` matches the rows written as ``0.1``;
- ``DECIMAL``: ``int``, ``Decimal`` and ``float`` (by its shortest repr);
- strings: ``str``, and a ``date`` as its ISO form ``YYYY-MM-DD``;
- ``DATE``: ``date`` and ISO strings; ``TIMESTAMP``: naive ``datetime`` and ISO
  strings;
- ``BOOLEAN``: ``bool``;
- a column of type ``NULL`` (no values, e.g. an empty pandas object column):
  the keys as given (they can match no row).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import numbers
from collections.abc import Callable, Sequence

import numpy as np

from gaussdp.errors import invalid
from gaussdp.release.queries import KeyTuple
from gaussdp.release.values import type_label

__all__ = ["typed_keys"]

_INTEGER = {
    "tinyint",
    "smallint",
    "integer",
    "int",
    "bigint",
    "hugeint",
    "utinyint",
    "usmallint",
    "uinteger",
    "ubigint",
    "uhugeint",
    "long",
    "short",
    "byte",
}
_STRING = {"varchar", "string", "text"}


def _integer(value: object) -> object:
    if isinstance(value, bool):
        raise TypeError
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, float | decimal.Decimal) and math.isfinite(value) and value == int(value):
        return int(value)
    raise TypeError


def _real(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError
    result = float(value)
    if math.isnan(result):
        raise TypeError
    return result


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _float32(value: object) -> object:
    real = _real(value)
    if math.isfinite(real) and abs(real) > _FLOAT32_MAX:
        raise TypeError  # beyond float32's range: the column cannot hold it
    return float(np.float32(real))


def _decimal(value: object) -> object:
    if isinstance(value, bool):
        raise TypeError
    if isinstance(value, numbers.Integral):
        return decimal.Decimal(int(value))
    if isinstance(value, decimal.Decimal) and value.is_finite():
        return value
    if isinstance(value, float) and math.isfinite(value):
        return decimal.Decimal(repr(value))
    raise TypeError


def _string(value: object) -> object:
    if isinstance(value, str):
        return value
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError


def _date(value: object) -> object:
    if isinstance(value, dt.datetime):
        raise TypeError
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            raise TypeError from None
    raise TypeError


def _timestamp(value: object) -> object:
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            raise TypeError
        return value
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value)
        except ValueError:
            raise TypeError from None
        if parsed.tzinfo is not None:
            raise TypeError
        return parsed
    raise TypeError


def _boolean(value: object) -> object:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise TypeError


_RULES: dict[str, tuple[Callable[[object], object], str]] = {
    "integer": (_integer, "integers"),
    "double": (_real, "numbers (not NaN)"),
    "float": (_float32, "numbers within float32's range (matched as float32)"),
    "decimal": (_decimal, "integers, decimals or floats"),
    "string": (_string, "strings (or dates, as YYYY-MM-DD)"),
    "date": (_date, "dates or ISO date strings (YYYY-MM-DD)"),
    "timestamp": (_timestamp, "naive datetimes or ISO timestamp strings"),
    "boolean": (_boolean, "booleans"),
    # A column of DuckDB type NULL (e.g. an empty object column of pandas) holds no value
    # a key could match: every key gets pure noise; distinctness is checked on the values.
    "null": (lambda value: value, "any value"),
}


def _family(type_name: str) -> str | None:
    """The key family of an engine type name (DuckDB's or Spark's), or None if unsupported."""
    name = type_name.strip().lower()
    base = name.split("(")[0].strip()
    if base in _INTEGER:
        return "integer"
    if base in ("double", "float8", "double precision"):
        return "double"
    if base in ("float", "real", "float4"):
        return "float"
    if base in ("decimal", "numeric"):
        return "decimal"
    if base in _STRING or base.startswith(("varchar", "char")):
        return "string"
    if base == "date":
        return "date"
    if base in ("timestamp", "timestamp_ntz", "timestamp_ns", "timestamp_ms", "timestamp_s"):
        return "timestamp"
    if base in ("boolean", "bool"):
        return "boolean"
    if base in ('"null"', "null", "void"):
        return "null"
    return None


def typed_keys(
    keys: Sequence[KeyTuple], columns: Sequence[str], types: Sequence[str]
) -> tuple[KeyTuple, ...]:
    """Convert public keys to the engine values of their columns, then check they are distinct.

    Parameters
    ----------
    keys : sequence of tuples
        Public keys, one value per column.
    columns, types : sequence of str
        The group columns (user names) and their engine type names.

    Raises
    ------
    TypeError
        A column type public keys cannot be given for, or a key value that is
        not of (or convertible to) the column's type.
    ValueError
        Keys that are the same cell once converted.

    Examples
    --------
    >>> typed_keys([(1,), (2.0,)], ["n"], ["BIGINT"])
    ((1,), (2,))
    >>> try:
    ...     typed_keys([(1,), ("1",)], ["n"], ["BIGINT"])
    ... except TypeError as error:
    ...     print(error)
    keys for column 'n' (BIGINT) must be integers, got '1'
    >>> import datetime
    >>> try:
    ...     typed_keys([(datetime.date(2026, 3, 2),), ("2026-03-02",)], ["day"], ["DATE"])
    ... except ValueError as error:
    ...     print(error)  # doctest: +ELLIPSIS
    keys must be distinct as values of the columns' types (DATE): these two are one cell,
    got ((datetime.date(2026, 3, 2),), ('2026-03-02',))
    """
    types = [type_label(t) for t in types]  # an ENUM's values are data: not in a message
    rules = []
    for column, type_name in zip(columns, types, strict=True):
        family = _family(type_name)
        if family is None:
            raise TypeError(
                invalid(
                    f"column {column!r}",
                    "of an integer, floating, decimal, string, date, timestamp or boolean "
                    "type to take public keys (omit keys= for private selection)",
                    type_name,
                )
            )
        rules.append((column, type_name, *_RULES[family]))
    out: list[KeyTuple] = []
    seen: dict[KeyTuple, KeyTuple] = {}
    for key in keys:
        typed = []
        for value, (column, type_name, convert, what) in zip(key, rules, strict=True):
            try:
                typed.append(convert(value))
            except (TypeError, ValueError, OverflowError, decimal.InvalidOperation):
                raise TypeError(
                    invalid(f"keys for column {column!r} ({type_name})", what, value)
                ) from None
        cell = tuple(typed)
        if cell in seen:
            raise ValueError(
                invalid(
                    "keys",
                    f"distinct as values of the columns' types ({', '.join(types)}): "
                    "these two are one cell",
                    (seen[cell], key),
                )
            )
        seen[cell] = key
        out.append(cell)
    return tuple(out)
