"""The shared argument checks: one message template, no silent coercion."""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest

from gaussdp import Gaussian
from gaussdp._validation import (
    check_count,
    check_delta,
    check_epsilon,
    check_finite,
    check_fraction,
    check_int,
    check_positive,
    check_probability,
)
from gaussdp.accounting import RDPAccountant, Subsampled
from gaussdp.errors import BudgetExceededError, MissingExtraError, invalid
from gaussdp.privacy import DiscreteGaussianDistribution


def test_message_template() -> None:
    assert invalid("x", "positive", -1) == "x must be positive, got -1"


def test_domain_errors_subclass_builtins() -> None:
    assert issubclass(BudgetExceededError, ValueError)
    error = MissingExtraError("Spark release", "spark")
    assert isinstance(error, ImportError)
    assert "pip install 'gaussdp[spark]'" in str(error)
    # gaussdp is not on a package index: the message also gives the checkout install, once.
    assert str(error).count("pip install '.[spark]'") == 2  # plain and .venv/bin/pip
    assert str(error).count("from a gaussdp checkout") == 1


def test_accepted_values_are_normalised() -> None:
    assert check_positive("s", np.float32(2.5)) == 2.5
    assert check_positive("s", float("inf"), allow_inf=True) == float("inf")
    assert check_finite("x", -3) == -3.0
    assert check_epsilon("epsilon", 0) == 0.0
    assert check_delta("delta", 1e-100) == 1e-100
    assert check_probability("p", 1.0) == 1.0
    assert check_int("n", 3.0, minimum=1) == 3
    assert check_int("n", np.int64(7)) == 7
    assert check_fraction("s", "25/4") == Fraction(25, 4)
    assert check_fraction("s", " 6.25 ") == Fraction(25, 4)
    assert check_fraction("s", 0.5) == Fraction(1, 2)
    assert check_fraction("s", np.int64(3)) == Fraction(3)


@pytest.mark.parametrize(
    ("check", "value", "error", "message"),
    [
        (check_positive, 0, ValueError, "s must be a finite positive real number, got 0"),
        (
            check_positive,
            float("nan"),
            ValueError,
            "s must be a finite positive real number, got nan",
        ),
        (
            check_positive,
            float("inf"),
            ValueError,
            "s must be a finite positive real number, got inf",
        ),
        (check_positive, True, TypeError, "s must be a finite positive real number, got True"),
        (check_positive, None, TypeError, "s must be a finite positive real number, got None"),
        (check_finite, float("-inf"), ValueError, "s must be a finite real number, got -inf"),
        (check_epsilon, -0.1, ValueError, "s must be a finite real number >= 0, got -0.1"),
        (check_epsilon, float("inf"), ValueError, "s must be a finite real number >= 0, got inf"),
        (check_delta, 0.0, ValueError, r"s must be a real number in \(0, 1\), got 0.0"),
        (check_delta, 1, ValueError, r"s must be a real number in \(0, 1\), got 1"),
        (check_delta, float("nan"), ValueError, r"s must be a real number in \(0, 1\), got nan"),
        (check_probability, 1.5, ValueError, r"s must be a real number in \[0, 1\], got 1.5"),
        (check_int, 2.5, ValueError, "s must be an integer, got 2.5"),
        (check_int, "3", TypeError, "s must be an integer, got '3'"),
        (check_int, False, TypeError, "s must be an integer, got False"),
        (check_fraction, 0, ValueError, "s must be a finite positive rational number"),
        (check_fraction, "1/0", ValueError, "s must be a finite positive rational number"),
        (check_fraction, float("inf"), ValueError, "s must be a finite positive rational number"),
        (check_fraction, [1], TypeError, "s must be a finite positive rational number"),
    ],
)
def test_rejections_name_parameter_value_and_constraint(
    check: object, value: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^{message}"):
        check("s", value)  # type: ignore[operator]


def test_int_minimum() -> None:
    with pytest.raises(ValueError, match=r"^n must be an integer >= 1, got 0$"):
        check_int("n", 0, minimum=1)


@pytest.mark.parametrize("value", [1e308, 2.0, np.float64(3.0), 0.5])
def test_check_count_refuses_floats_even_integral(value: float) -> None:
    with pytest.raises(
        ValueError,
        match=rf"^count must be an integer in \[1, 2\*\*53\], got {re.escape(repr(value))}$",
    ):
        check_count("count", value)


def test_check_count_accepts_ints_only() -> None:
    assert check_count("count", np.int64(3)) == 3
    assert check_count("count", 2**53) == 2**53  # MAX_COUNT: every accountant answers
    with pytest.raises(
        ValueError, match=rf"^count must be an integer in \[1, 2\*\*53\], got {2**53 + 1}$"
    ):
        check_count("count", 2**53 + 1)
    # A repr of over 4300 digits would raise: the message gives the size instead.
    with pytest.raises(
        ValueError,
        match=r"^count must be an integer in \[1, 2\*\*53\], got an integer of 16610 bits$",
    ):
        check_count("count", 10**5000)
    with pytest.raises(TypeError, match=r"^count must be an integer in \[1, 2\*\*53\], got True$"):
        check_count("count", True)
    with pytest.raises(ValueError, match=r"^count must be an integer in \[1, 2\*\*53\], got 0$"):
        check_count("count", 0)


@pytest.mark.parametrize("check", [check_finite, check_positive, check_epsilon, check_delta])
def test_numbers_beyond_the_float_range_are_refused_with_the_template(
    check: Callable[[str, object], float],
) -> None:
    # float(10**400) raises OverflowError: it must become the template's ValueError.
    with pytest.raises(ValueError, match=r"^s must be .*, got 1000"):
        check("s", 10**400)
    with pytest.raises(ValueError, match=r"^s must be .*, got Fraction\(1000"):
        check("s", Fraction(10**400, 3))
    # A number too long for repr (Python's 4300-digit limit) is described instead.
    with pytest.raises(ValueError, match=r", got an int too long to print$"):
        check("s", -(10**5000))
    with pytest.raises(ValueError, match=r", got a Fraction too long to print$"):
        check("s", Fraction(10**5000, 7))


def test_an_in_range_fraction_too_long_to_print_is_refused_with_the_template() -> None:
    with pytest.raises(ValueError, match=r"^s must be .*, got a Fraction too long to print$"):
        check_positive("s", Fraction(-1, 10**5000))


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: Subsampled(Gaussian(1.0), 10**400),
            ValueError,
            r"^sample_rate must be a real number in \(0, 1\], got 1000",
        ),
        (
            lambda: Subsampled(Gaussian(1.0), 0.1, scheme=[1]),  # type: ignore[arg-type]
            TypeError,
            r"^scheme must be 'poisson' or 'without_replacement', got \[1\]$",
        ),
        (
            lambda: RDPAccountant(orders=[10**400]),
            ValueError,
            r"^orders must be a non-empty sequence of finite reals > 1, got \[1000",
        ),
        (
            lambda: RDPAccountant(orders=[None]),  # type: ignore[list-item]
            TypeError,
            r"^orders must be a non-empty sequence of finite reals > 1, got \[None\]$",
        ),
        (
            lambda: RDPAccountant(orders="abc"),
            TypeError,
            r"^orders must be a non-empty sequence of finite reals > 1, got 'abc'$",
        ),
        (
            lambda: RDPAccountant(orders=[2.0, 0.5]),
            ValueError,
            r"^orders must be a non-empty sequence of finite reals > 1, got \[2.0, 0.5\]$",
        ),
        (
            lambda: DiscreteGaussianDistribution(Fraction(4)).rvs(10**400),
            ValueError,
            r"^size must be a shape of at most \d+ values, got 1000",
        ),
        (
            lambda: DiscreteGaussianDistribution(Fraction(4)).rvs((0, 2**64)),
            ValueError,
            r"^size must be a shape of at most \d+ values, got \(0, 18446744073709551616\)$",
        ),
    ],
)
def test_public_entries_refuse_bad_input_with_the_template(
    call: Callable[[], object], error: type[Exception], message: str
) -> None:
    # Found by an audit fuzz: these raised OverflowError, float()'s own errors,
    # "unhashable type: 'list'" or numpy's "Maximum allowed dimension exceeded".
    with pytest.raises(error, match=message):
        call()


def test_rdp_orders_accept_any_iterable_of_reals() -> None:
    assert RDPAccountant(orders=np.array([2, 3.5])).orders == (2.0, 3.5)
    assert RDPAccountant(orders=(Fraction(5, 2),)).orders == (2.5,)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"value": "1", "up": True}, TypeError, "value must be a real number, got '1'"),
        ({"value": 1.0, "up": 1}, TypeError, "up must be True or False, got 1"),
        ({"value": 1.0, "up": True, "digits": 16}, ValueError, "digits must be an integer from"),
        ({"value": 1.0, "up": True, "digits": 2.0}, ValueError, "digits must be an integer from"),
    ],
)
def test_format_bound_refuses_bad_arguments(
    arguments: dict[str, object], error: type[Exception], message: str
) -> None:
    from gaussdp.accounting import format_bound

    with pytest.raises(error, match=re.escape(message)):
        format_bound(**arguments)  # type: ignore[arg-type]


def test_displayed_bounds_round_outward() -> None:
    # Regression: displays rounded bounds to nearest (ε upper 3.566680272 shown 3.56668).
    from gaussdp.accounting import format_bound
    from gaussdp.cli._output import format_value
    from gaussdp.privacy.tradeoff import TradeoffCurve, explain

    assert format_bound(3.566680272, up=True) == format_value(3.566680272) == "3.56669"
    assert format_bound(3.566680272, up=False) == "3.56668"
    assert format_bound(0.1, up=True) == format_bound(0.1, up=False) == "0.1"  # exact enough
    rng = np.random.default_rng(5)
    for value in 10.0 ** rng.uniform(-300, 300, 2000):
        for digits in (3, 4, 6):
            assert float(format_bound(value, up=True, digits=digits)) >= value
            assert float(format_bound(value, up=False, digits=digits)) <= value
    # The explanation's TPR and advantage round up, its equal-error point down.
    shown = explain(TradeoffCurve.from_epsilon_delta(1.0, 1e-6), fpr=1e-3)
    text = shown.text()
    assert f"catches at most {format_bound(shown.max_tpr, up=True, digits=4)} " in text
    assert f"more than {format_bound(shown.advantage, up=True, digits=4)} " in text
    assert f"below {format_bound(shown.equal_error_rate, up=False, digits=4)} " in text
    assert "0.00272 of members" in text  # 0.0027192…, rounded up
