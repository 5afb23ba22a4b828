"""Public column domains: encoding, the out-of-domain rule, decoding back to column types."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pandas as pd
import pytest

from gaussdp.synth import Categorical, Numeric
from gaussdp.synth.domain import DROP


def test_categorical_codes_and_the_other_bucket() -> None:
    col = Categorical("c", ["a", "b"], other="rest")
    codes = col.encode(pd.Series(["b", "a", "zz", None, "b"]))
    assert codes.tolist() == [1, 0, 2, 2, 1]
    assert col.labels == ("a", "b", "rest")
    assert col.decode(np.array([2, 0]), rng=np.random.default_rng(0)).tolist() == ["rest", "a"]


def test_decoded_categories_keep_their_type() -> None:
    rng = np.random.default_rng(0)
    assert Categorical("n", [3, 1]).decode(np.array([1, 0]), rng=rng).tolist() == [1, 3]
    assert str(Categorical("n", [3, 1]).decode(np.array([1]), rng=rng).dtype) == "int64"
    assert str(Categorical("b", [False, True]).decode(np.array([1]), rng=rng).dtype) == "bool"
    other = Categorical("n", [3, 1], other="x")
    assert other.decode(np.array([2, 0]), rng=rng).tolist() == ["x", 3]


def test_categorical_values_outside_without_other_are_dropped() -> None:
    # Regression: they were refused, a refusal that depends on one person's value.
    col = Categorical("c", ["a", "b"])
    assert col.encode(pd.Series(["a", "zz", None, "b"])).tolist() == [0, DROP, DROP, 1]


def test_integer_categories_match_integral_floats_and_strings_stay_distinct() -> None:
    col = Categorical("n", [1, 2, 3])
    assert col.encode(pd.Series([3.0, 1.0, 2, 1.5])).tolist() == [2, 0, 1, DROP]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"categories": []}, ValueError),
        ({"categories": "ab"}, TypeError),
        ({"categories": ["a", "a"]}, ValueError),
        ({"categories": [1.5]}, TypeError),
        ({"categories": ["a"], "other": "a"}, ValueError),
    ],
)
def test_bad_categorical_domains(kwargs: dict, error: type) -> None:
    with pytest.raises(error):
        Categorical("c", **kwargs)


def test_numeric_bins_clamp_to_the_end_bins_and_missing_goes_to_other() -> None:
    col = Numeric("x", (0, 10), 5, other="missing")
    values = pd.Series([-3.0, 0.0, 1.99, 2.0, 9.99, 10.0, 42.0, np.nan, "SSN 1"], dtype=object)
    assert col.encode(values).tolist() == [0, 0, 0, 1, 4, 4, 4, 5, 5]
    # Without `other`, missing and non-numeric values drop their rows (never refused).
    plain = Numeric("x", (0, 10), 5).encode(pd.Series([1.0, None, "SSN 1"], dtype=object))
    assert plain.tolist() == [0, DROP, DROP]


def test_numeric_decode_stays_in_its_bin_and_keeps_integers() -> None:
    rng = np.random.default_rng(1)
    col = Numeric("x", (0, 10), [0, 2.5, 10])
    values = col.decode(np.array([0] * 500 + [1] * 500), rng=rng).to_numpy()
    assert (values[:500] >= 0).all()
    assert (values[:500] < 2.5).all()
    assert (values[500:] >= 2.5).all()
    assert (values[500:] <= 10).all()
    ints = Numeric("age", (0, 99), 3, integer=True, other="na")
    out = ints.decode(np.array([0, 1, 2, 3] * 100), rng=rng)
    assert str(out.dtype) == "Int64"
    assert out.iloc[3] is pd.NA
    assert set(out.dropna().astype(int)) <= set(range(100))
    first = out.iloc[0::4].astype(int)
    assert (first >= 0).all()
    assert (first < 33).all()


def test_integer_bins_each_hold_an_integer_and_decode_inside_their_bin() -> None:
    # Once [0.2, 0.4) of Numeric("x", (0, 1), 5, integer=True) decoded to 1, outside it.
    with pytest.raises(ValueError, match=r"x\.bins must be bins that each hold an integer"):
        Numeric("x", (0, 1), 5, integer=True)
    with pytest.raises(ValueError, match=r"bin \[2\.5, 2\.7\) holds none"):
        Numeric("x", (0, 5), [0, 2.5, 2.7, 5], integer=True)
    rng = np.random.default_rng(4)
    col = Numeric("x", (0, 7), [0, 1, 2.5, 4, 7], integer=True)
    codes = np.repeat(np.arange(4), 200)
    values = col.decode(codes, rng=rng).to_numpy(dtype=np.float64)
    edges = np.asarray(col.edges)
    assert (values >= edges[codes]).all()
    inner = codes < 3  # [lo, hi); the last bin is closed
    assert (values[inner] < edges[codes + 1][inner]).all()
    assert (values[~inner] <= 7).all()
    assert set(values[codes == 1]) == {1.0, 2.0}  # the integers of [1, 2.5)


@pytest.mark.parametrize(
    ("bounds", "bins"),
    [
        ((1, 1), 3),
        ((0, float("inf")), 3),
        ((0, 1), 0),
        ((0, 1), [0, 0.5]),
        ((0, 1), [0, 0.7, 0.5, 1]),
    ],
)
def test_bad_numeric_domains(bounds: tuple[float, float], bins: object) -> None:
    with pytest.raises(ValueError, match=r"x\.(bounds|bins) must be"):
        Numeric("x", bounds, bins)  # type: ignore[arg-type]


def test_values_read_as_text_match_typed_categories() -> None:
    # A CSV is read as text (its inferred types would depend on the rows).
    assert Categorical("n", [1, 2]).encode(pd.Series(["2", "1.0", "x"])).tolist() == [1, 0, DROP]
    assert Categorical("b", [False, True]).encode(pd.Series(["true", "False"])).tolist() == [1, 0]


def test_one_odd_python_value_is_outside_the_domain_not_an_error() -> None:
    # One row's list, dict or signalling NaN made pd.factorize raise, an int beyond the
    # largest double made pd.to_numeric raise: the run was refused, its neighbour ran.
    cats = Categorical("c", ["a", 7], other="rest")
    odd = [[1], {"a": 1}, Decimal("sNaN"), b"\xff"]
    values = pd.Series(["a", 7.0, np.int64(7), *odd], dtype=object)
    assert cats.encode(values).tolist() == [0, 1, 1, 2, 2, 2, 2]
    assert Categorical("c", ["a"]).encode(values).tolist() == [0, DROP, DROP] + [DROP] * 4
    num = Numeric("n", (0, 10), 2)
    numbers = pd.Series([10**400, -(10**400), Decimal("sNaN"), [1], "3", 7], dtype=object)
    assert num.encode(numbers).tolist() == [1, 0, DROP, DROP, 0, 1]
