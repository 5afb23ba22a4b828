"""Huge arguments: a float count is refused, a huge ε answers without a warning."""

from __future__ import annotations

import re

import pytest

from gaussdp.accounting import PLDAccountant, RDPAccountant, SelfComposed
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
