"""Public column domains: categories, or numeric bounds with bins — never taken from the data.

Every column of a synthesizer has a domain declared by the user. A value is
mapped to a cell index (a *code*) ``0 … size − 1``; the synthetic table maps
codes back to values of the column's type. The rule for values outside the
declared domain (documented in ``docs/synth.md``):

* a **categorical** value that is not one of the categories, or a missing
  value (NULL/NaN), is counted in the column's declared ``other`` bucket if it
  has one; otherwise its row is dropped (code :data:`DROP`). The domain is
  never widened from the data.
* a **numeric** value below the lower bound or above the upper bound is
  counted in the first or last bin (clamping, as a release's histogram does);
  a missing or non-numeric value goes to the ``other`` bucket if declared,
  else its row is dropped.

A data value is never refused: a refusal would tell neighbouring tables apart
(one person's value outside the domain). Dropping a row is a stable
transformation (it changes a neighbouring table's rows by at most one person's).
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gaussdp.errors import invalid
from gaussdp.release.values import column_text, value_text

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Categorical", "Column", "Numeric"]

#: The code of a value whose row is dropped (outside the domain, no ``other``).
DROP = -1


@dataclass(frozen=True, slots=True)
class Categorical:
    """A column whose public domain is a list of categories.

    Parameters
    ----------
    name : str
        The column in the data.
    categories : sequence
        The distinct public values (strings, integers or booleans), at least one.
    other : str, optional
        A label for one more cell that counts every value outside
        ``categories`` (and missing values). Without it their rows are dropped.

    Examples
    --------
    >>> Categorical("sex", ["F", "M"]).size
    2
    >>> Categorical("sex", ["F", "M"], other="other").labels
    ('F', 'M', 'other')
    """

    name: str
    categories: Sequence[Any]  # stored as a tuple
    other: str | None = None

    def __post_init__(self) -> None:
        _check_name(self.name)
        if isinstance(self.categories, str | bytes) or not isinstance(self.categories, Sequence):
            raise TypeError(invalid(f"{self.name}.categories", "a list", self.categories))
        cats = tuple(self.categories)
        if not cats:
            raise ValueError(invalid(f"{self.name}.categories", "a non-empty list", cats))
        for c in cats:
            if not isinstance(c, str | int | bool) or _key(c) is None:
                raise TypeError(
                    invalid(f"{self.name}.categories", "strings, integers or booleans", c)
                )
        if len({_key(c) for c in cats}) != len(cats):
            raise ValueError(invalid(f"{self.name}.categories", "distinct values", cats))
        if self.other is not None and (
            not isinstance(self.other, str) or _key(self.other) in {_key(c) for c in cats}
        ):
            raise ValueError(
                invalid(f"{self.name}.other", "a label (str) that is not a category", self.other)
            )
        object.__setattr__(self, "categories", cats)

    @property
    def size(self) -> int:
        """Number of cells (categories, plus one for ``other``)."""
        return len(self.categories) + (self.other is not None)

    @property
    def labels(self) -> tuple[Any, ...]:
        """The value of each cell."""
        return (*self.categories, *((self.other,) if self.other is not None else ()))

    def encode(self, values: pd.Series) -> npt.NDArray[np.int64]:
        """Codes of ``values``; values outside the domain are ``other``, else :data:`DROP`."""
        import pandas as pd

        index = {_key(c): i for i, c in enumerate(self.categories)}
        if values.dtype == np.dtype(object):
            # Python values of any kind (a list, a signalling NaN: factorize would raise):
            # each as its text, the releases' rule for object columns (None: missing).
            values = column_text(values)
        # Each distinct value is looked up once (pd.factorize: -1 for missing values).
        inverse, distinct = pd.factorize(values, use_na_sentinel=True)
        table = np.array(
            [
                -1 if _missing(v) else index.get(_key(v), index.get(_text_key(v), -1))
                for v in distinct
            ]
            + [-1],
            dtype=np.int64,
        )
        codes = table[inverse]
        if self.other is not None:
            codes[codes < 0] = len(self.categories)
        return codes

    def decode(self, codes: npt.NDArray[np.int64], *, rng: np.random.Generator) -> pd.Series:
        """Values of ``codes`` (``rng`` unused: a category is one value)."""
        import pandas as pd

        labels = np.empty(self.size, dtype=object)
        labels[:] = list(self.labels)
        values = pd.Series(labels[codes], name=self.name)
        # The categories' own type when they share one (the `other` label is a str).
        if self.other is None and all(isinstance(c, bool) for c in self.categories):
            return values.astype(bool)
        if self.other is None and all(
            isinstance(c, int) and not isinstance(c, bool) for c in self.categories
        ):
            return values.astype(np.int64)
        return values


@dataclass(frozen=True, slots=True)
class Numeric:
    """A numeric column with public bounds, discretised into bins.

    Parameters
    ----------
    name : str
        The column in the data.
    bounds : (float, float)
        Public ``lo < hi``; values outside are counted in the end bins.
    bins : int or sequence of float
        The number of equal-width bins (≥ 1), or the edges (increasing, first
        ``lo`` and last ``hi``).
    integer : bool
        Synthetic values are integers (drawn uniformly among the integers of
        the bin) instead of reals drawn uniformly in the bin. Every bin must then
        hold an integer (``[0.2, 0.4)`` is refused).
    other : str, optional
        A label for a cell counting missing and non-numeric values (else their
        rows are dropped).

    Examples
    --------
    >>> Numeric("age", (0, 100), 4).edges
    (0.0, 25.0, 50.0, 75.0, 100.0)
    """

    name: str
    bounds: tuple[float, float]
    bins: int | Sequence[float]  # edges stored as a tuple
    integer: bool = False
    other: str | None = None

    def __post_init__(self) -> None:
        _check_name(self.name)
        try:
            lo, hi = (float(b) for b in self.bounds)
        except (TypeError, ValueError) as error:
            raise TypeError(
                invalid(f"{self.name}.bounds", "two numbers [lo, hi]", self.bounds)
            ) from error
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(
                invalid(f"{self.name}.bounds", "finite [lo, hi] with lo < hi", self.bounds)
            )
        object.__setattr__(self, "bounds", (lo, hi))
        if isinstance(self.bins, bool):
            raise TypeError(invalid(f"{self.name}.bins", "an int or a list of edges", self.bins))
        if isinstance(self.bins, int):
            if self.bins < 1:
                raise ValueError(invalid(f"{self.name}.bins", "an int >= 1", self.bins))
        else:
            edges = tuple(float(e) for e in self.bins)
            if (
                len(edges) < 2
                or edges[0] != lo
                or edges[-1] != hi
                or any(b <= a for a, b in itertools.pairwise(edges))
            ):
                raise ValueError(
                    invalid(
                        f"{self.name}.bins",
                        f"increasing edges from {lo:g} to {hi:g}",
                        self.bins,
                    )
                )
            object.__setattr__(self, "bins", edges)
        if self.integer:
            e = self.edges
            for j in range(len(e) - 1):
                last = math.floor(e[j + 1]) if j == len(e) - 2 else math.ceil(e[j + 1]) - 1
                if math.ceil(e[j]) > last:
                    raise ValueError(
                        invalid(
                            f"{self.name}.bins",
                            f"bins that each hold an integer (integer=True; bin {self.labels[j]} "
                            "holds none)",
                            self.bins,
                        )
                    )
        if self.other is not None and not isinstance(self.other, str):
            raise TypeError(invalid(f"{self.name}.other", "a label (str)", self.other))

    @property
    def edges(self) -> tuple[float, ...]:
        """The bin edges."""
        if isinstance(self.bins, int):
            lo, hi = self.bounds
            k = self.bins
            return (*(lo + (hi - lo) * i / k for i in range(k)), hi)
        return tuple(self.bins)

    @property
    def size(self) -> int:
        """Number of cells (bins, plus one for ``other``)."""
        return len(self.edges) - 1 + (self.other is not None)

    @property
    def labels(self) -> tuple[Any, ...]:
        """A label per cell: ``[lo, hi)`` per bin (the last closed), then ``other``."""
        e = self.edges
        out: list[Any] = [
            f"[{e[j]:g}, {e[j + 1]:g}{']' if j == len(e) - 2 else ')'}" for j in range(len(e) - 1)
        ]
        if self.other is not None:
            out.append(self.other)
        return tuple(out)

    def encode(self, values: pd.Series) -> npt.NDArray[np.int64]:
        """Bin indices; out-of-bounds values go to the end bins.

        Missing and non-numeric values go to ``other``, else they are :data:`DROP`.
        """
        import pandas as pd

        if values.dtype == np.dtype(object):
            # Value by value, so that no value fails the whole column (an int beyond the
            # largest double, a signalling NaN): text as pandas reads numbers, others
            # through float() (±inf when too large: an end bin), else missing.
            values = pd.Series([_number(v) for v in values], dtype=object, index=values.index)
        numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
        edges = np.asarray(self.edges)
        k = len(edges) - 1
        missing = np.isnan(numbers)
        codes = np.clip(np.searchsorted(edges, numbers, side="right") - 1, 0, k - 1)
        codes[missing] = DROP if self.other is None else k
        return codes.astype(np.int64)

    def decode(self, codes: npt.NDArray[np.int64], *, rng: np.random.Generator) -> pd.Series:
        """A value drawn uniformly within each code's bin (missing for ``other``)."""
        import pandas as pd

        edges = np.asarray(self.edges)
        k = len(edges) - 1
        in_bin = codes < k
        c = np.minimum(codes, k - 1)
        lo, hi = edges[c], edges[c + 1]
        if self.integer:
            first = np.ceil(lo)
            # Integers of [lo, hi) — of [lo, hi] for the last bin.
            last = np.where(c == k - 1, np.floor(hi), np.ceil(hi) - 1)  # ≥ first (checked)
            ints = first + np.floor(rng.random(len(codes)) * (last - first + 1))
            ints[~in_bin] = np.nan
            return pd.Series(ints, name=self.name).astype("Int64")
        vals = lo + rng.random(len(codes)) * (hi - lo)
        vals[~in_bin] = np.nan
        return pd.Series(vals, name=self.name)


Column = Categorical | Numeric


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name:
        raise TypeError(invalid("column name", "a non-empty str", name))


def _missing(value: object) -> bool:
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN and pandas' NA
    except (TypeError, ValueError):
        return True


def _text_key(value: object) -> str | None:
    """The key of a value read as text (a CSV): ``true``/``false`` and numbers as typed."""
    if not isinstance(value, str):
        return _NO_KEY
    if value.strip().lower() in ("true", "false"):
        return _key(value.strip().lower() == "true")
    try:
        return _key(float(value))
    except ValueError:
        return _NO_KEY


_NO_KEY = "\x00not a category"  # matches no category's key (categories hold no NUL)


def _key(value: object) -> str | None:
    """Compare categories and data alike: a value's text by the releases' rule for pandas
    ``object`` columns (:func:`gaussdp.release.values.value_text`: ints and integral floats
    as one, bools as text; ``None`` for a value with no text)."""
    return value_text(value)


def _number(value: object) -> object:
    """One value of an ``object`` column for ``pandas.to_numeric``: text as it is, a
    number as a float (one too large for a double is ±inf), anything else NaN."""
    if isinstance(value, str):
        return value
    if isinstance(value, np.bool_):
        return float(value)
    if not isinstance(value, numbers.Real | Decimal):
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf  # type: ignore[operator]
    except (ValueError, ArithmeticError):  # a signalling NaN
        return math.nan
