"""Refusals of private data arguments describe the problem without echoing a data value.

Error messages end up in logs, so a query answer, gradient or client update that is
refused must not appear in the message; parameters (sigma, epsilon, …) still do.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from gaussdp._validation import nonfinite_at, redacted
from gaussdp.errors import invalid
from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian

# Values that look like salaries: none of their digits may appear in a message.
SECRETS = ("81234", "99120", "45870", "31337")


def _refusal(call: object, *args: object) -> str:
    with pytest.raises((ValueError, TypeError)) as info:
        call(*args)  # type: ignore[operator]
    message = str(info.value)
    assert " must be " in message
    assert ", got " in message
    for secret in SECRETS:
        assert secret not in message, message
    return message


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        (
            np.array([81234.5, 99120.0, 45870.25, np.nan]),
            "of shape (4,) and dtype float64 with a NaN at index 3",
        ),
        ([81234.5, float("inf")], "a list of length 2 with an infinity at index 1"),
        (np.array([[81234.5, 1.0], [-np.inf, 2.0]]), "with an infinity at index (1, 0)"),
        ([Fraction(81234), Decimal("NaN")], "with a NaN or infinity"),
        ([81234, 2**60, "45870"], "got a list of length 3"),
        ([Fraction(81234), "45870"], "with an entry of type str"),
        (np.array([81234.5, True], dtype=object), "with a boolean entry"),
        ("81234.5", "got a str"),
        (np.array(["81234.5"]), "dtype <U7"),
        ([[81234.5], [1.0, 2.0]], "with ragged nesting"),
    ],
)
def test_gaussian_release_refusal_hides_the_values(value: object, detail: str) -> None:
    message = _refusal(Gaussian(sigma=1000.0, sensitivity=100.0).release, value)
    assert message.startswith("value must be ")
    assert detail in message


@pytest.mark.parametrize("mechanism", [DiscreteGaussian(4), DiscreteLaplace(2)])
@pytest.mark.parametrize(
    "value", [np.array([81234.5, 99120.0]), [81234, "45870"], 81234.5, np.array([31337.0])]
)
def test_discrete_release_refusal_hides_the_values(mechanism: object, value: object) -> None:
    message = _refusal(mechanism.release, value)  # type: ignore[attr-defined]
    assert "got a " in message


def test_parameters_still_echo_their_value() -> None:
    with pytest.raises(
        ValueError, match=r"^sigma must be a finite positive real number, got -2\.5$"
    ):
        Gaussian(sigma=-2.5)


def test_redacted_describes_without_values() -> None:
    assert repr(redacted(81234.5)) == "a float"
    assert repr(redacted((81234, 2), "a problem")) == "a tuple of length 2 with a problem"
    assert invalid("x", "finite", redacted(np.zeros((2, 3)))) == (
        "x must be finite, got a numpy.ndarray of shape (2, 3) and dtype float64"
    )
    assert nonfinite_at(np.array([1.0, 2.0, -np.inf])) == "an infinity at index 2"
    assert nonfinite_at(float("nan")) == "a NaN"


def test_federated_refusal_hides_the_update() -> None:
    pytest.importorskip("torch")
    from gaussdp.ml import DPAggregator
    from gaussdp.random import ChaCha20Random

    agg = DPAggregator(1.0, 2.0, dim=3, rng=ChaCha20Random(0))
    message = _refusal(agg.aggregate, [np.array([81234.5, 99120.0, 45870.25])])
    assert message == (
        "updates[0] must be a torch.Tensor, got a numpy.ndarray of shape (3,) and dtype float64"
    )
