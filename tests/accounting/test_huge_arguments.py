"""Huge arguments: a float count is refused, a huge ε answers without a warning."""

from __future__ import annotations

import re

import pytest

from gaussdp.accounting import PLDAccountant, RDPAccountant, SelfComposed, Subsampled
from gaussdp.mechanisms import Gaussian


@pytest.mark.parametrize("count", [1e308, 3.0])
def test_float_counts_are_refused(count: float) -> None:
    # 1e308 used to become a 309-digit int silently (audit21 badinput10.py).
    message = f"^count must be an integer >= 1, got {re.escape(repr(count))}$"
    with pytest.raises(ValueError, match=message):
        SelfComposed(Gaussian(1.0), count)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        PLDAccountant().compose(Gaussian(1.0), count)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        RDPAccountant().compose(Gaussian(1.0), count)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^count must be an integer >= 1, got True$"):
        SelfComposed(Gaussian(1.0), True)


@pytest.mark.parametrize("accountant", [PLDAccountant, RDPAccountant])
def test_delta_at_a_huge_epsilon_is_tiny_positive_without_warning(accountant: type) -> None:
    # Runs under filterwarnings=error: the overflow of (α−1)(τ−ε) used to warn.
    acc = accountant().compose(Subsampled(Gaussian(1.0), 0.1), 3)
    huge = acc.delta(1e308)
    assert 0 < huge.upper <= acc.delta(50.0).upper  # never 0: δ(ε) > 0 for every ε
    assert huge.upper < 1e-300
