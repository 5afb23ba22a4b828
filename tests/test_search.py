"""The one safe-side search and the directed rounding helpers, against exact arithmetic."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gaussdp._search import (
    add_up,
    fraction_down,
    fraction_up,
    largest_passing,
    mul_up,
    smallest_passing,
    smallest_passing_int,
    smallest_scale,
    sqrt_up,
)

positive = st.floats(min_value=1e-300, max_value=1e300)


@given(threshold=st.floats(min_value=-1e6, max_value=1e6))
def test_smallest_passing_is_on_the_safe_side(threshold: float) -> None:
    calls: list[float] = []

    def passes(x: float) -> bool:
        calls.append(x)
        return x >= threshold

    x = smallest_passing(passes, -2e6, 2e6, abs_tol=1e-9)
    assert x >= threshold  # evaluated to pass
    assert x - max(1e-12 * abs(x), 1e-9) <= threshold + 1e-9
    assert x in calls or x == -2e6


@given(threshold=st.floats(min_value=0.0, max_value=1e6))
def test_largest_passing_is_on_the_safe_side(threshold: float) -> None:
    x = largest_passing(lambda v: v <= threshold, 0.0, 2e6, abs_tol=1e-9)
    assert x <= threshold
    assert threshold - x <= max(1e-12 * threshold, 1e-9) + 1e-9


def test_growing_bracket_and_refusals() -> None:
    assert smallest_passing(lambda x: x >= 1e6, 0.0, 1.0, grow=True) >= 1e6
    with pytest.raises(ValueError, match="^bracket must be one whose upper end passes"):
        smallest_passing(lambda x: x >= 5.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="^bracket must be one with a passing point below inf"):
        smallest_passing(lambda x: False, 0.0, 1.0, grow=True)
    with pytest.raises(ValueError, match="^bracket must be finite with lo <= hi"):
        smallest_passing(lambda x: True, 1.0, 0.0)
    with pytest.raises(ValueError, match="^bracket must be one whose lower end passes"):
        largest_passing(lambda x: False, 0.0, 1.0)


def test_smallest_scale_refuses_a_target_met_without_noise() -> None:
    # ε below the target at every scale (e.g. δ at least the sample rate): a clear error
    # after a bounded number of evaluations, not an endless search towards 0.
    calls: list[float] = []

    def eps_of(s: float) -> float:
        calls.append(s)
        return 0.0

    with pytest.raises(ValueError, match="^target_epsilon must be small enough that some noise"):
        smallest_scale(eps_of, 1.0, 1.0, 1e-3)
    assert len(calls) < 100
    with pytest.raises(ValueError, match="^target_epsilon must be reachable with finite noise"):
        smallest_scale(lambda s: math.inf, 1.0, 1.0, 1e-3)


@given(n=st.integers(min_value=0, max_value=10**30), lo=st.integers(-100, 100))
def test_smallest_passing_int_is_exact(n: int, lo: int) -> None:
    target = max(n, lo)
    assert smallest_passing_int(lambda k: k >= target, lo) == target
    assert smallest_passing_int(lambda k: k >= target, lo, target + 5) == target


@given(a=positive, b=positive)
def test_mul_add_up_bound_the_exact_result(a: float, b: float) -> None:
    p = mul_up(a, b)
    if math.isfinite(p):
        assert Fraction(p) >= Fraction(a) * Fraction(b)
        assert p <= math.nextafter(a * b, math.inf)
    s = add_up(a, b, -a / 3)
    assert Fraction(s) >= Fraction(a) + Fraction(b) + Fraction(-a / 3)


@given(num=st.integers(1, 10**40), den=st.integers(1, 10**40))
def test_fraction_and_sqrt_rounding(num: int, den: int) -> None:
    x = Fraction(num, den)
    assert Fraction(fraction_down(x)) <= x <= Fraction(fraction_up(x))
    root = sqrt_up(x)
    assert Fraction(root) ** 2 >= x
    assert math.nextafter(root, 0.0) ** 2 <= float(x) * (1 + 1e-15)
    assert sqrt_up(Fraction(1, 4)) == 0.5  # exact roots are not pushed up
