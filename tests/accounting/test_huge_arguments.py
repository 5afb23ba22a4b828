"""Huge arguments: a float count or one over 2**53 is refused; a huge ε answers quietly."""

from __future__ import annotations

import math
import re

import pytest

from gaussdp.accounting import (
    Event,
    GDPAccountant,
    PLDAccountant,
    PrivacyFilter,
    PureDP,
    RDPAccountant,
    SelfComposed,
    Subsampled,
    ZCDPAccountant,
    calibrate_noise_multiplier,
)
from gaussdp.mechanisms import Gaussian
from gaussdp.privacy.tradeoff import TradeoffCurve


@pytest.mark.parametrize("count", [1e308, 3.0])
def test_float_counts_are_refused(count: float) -> None:
    # 1e308 used to become a 309-digit int silently (audit21 badinput10.py).
    message = rf"^count must be an integer in \[1, 2\*\*53\], got {re.escape(repr(count))}$"
    with pytest.raises(ValueError, match=message):
        SelfComposed(Gaussian(1.0), count)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        PLDAccountant().compose(Gaussian(1.0), count)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        RDPAccountant().compose(Gaussian(1.0), count)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^count must be an integer in \[1, 2\*\*53\], got True$"):
        SelfComposed(Gaussian(1.0), True)


@pytest.mark.parametrize("accountant", [PLDAccountant, RDPAccountant])
def test_delta_at_a_huge_epsilon_is_tiny_positive_without_warning(accountant: type) -> None:
    # Runs under filterwarnings=error: the overflow of (α−1)(τ−ε) used to warn.
    acc = accountant().compose(Subsampled(Gaussian(1.0), 0.1), 3)
    huge = acc.delta(1e308)
    assert 0 < huge.upper <= acc.delta(50.0).upper  # never 0: δ(ε) > 0 for every ε
    assert huge.upper < 1e-300


_COUNT_REFUSED = r"^count must be an integer in \[1, 2\*\*53\], got "


@pytest.mark.parametrize(
    ("accountant", "event"),
    [
        (RDPAccountant, Subsampled(Gaussian(1.0), 0.01)),
        (RDPAccountant, PureDP(0.1)),
        (PLDAccountant, Gaussian(1.0)),
        (ZCDPAccountant, PureDP(0.1)),
        (GDPAccountant, Gaussian(1.0)),
    ],
)
def test_counts_up_to_two_to_the_53_answer_and_beyond_are_refused(
    accountant: type, event: Event
) -> None:
    # 10**20 and 10**400 used to raise a raw OverflowError (count * RDP, exp(count * ℓ)).
    acc = accountant().compose(event, 2**53)
    eps = acc.epsilon(1e-5).upper
    assert 1e11 < eps < math.inf  # grows with the count (each step costs ε > 1e-4)
    assert 0 < acc.delta(1e30).upper < 1e-300
    for count in (2**53 + 1, 10**20, 10**400):
        with pytest.raises(ValueError, match=_COUNT_REFUSED):
            accountant().compose(event, count)
        with pytest.raises(ValueError, match=_COUNT_REFUSED):
            SelfComposed(event, count)


@pytest.mark.parametrize(
    ("budget", "event"),
    [
        ({"epsilon": 1.0, "delta": 1e-5}, Gaussian(1.0)),
        ({"rho": 1.0}, PureDP(0.1)),
        ({"mu": 1.0}, Gaussian(1.0)),
    ],
)
def test_filter_at_the_count_limit(budget: dict[str, float], event: Event) -> None:
    flt = PrivacyFilter(**budget)
    assert not flt.can_accept(event, 2**53)
    assert math.isfinite(flt.cost(event, 2**53))
    with pytest.raises(ValueError, match=_COUNT_REFUSED):
        flt.can_accept(event, 10**20)
    assert flt.spent == 0.0


@pytest.mark.parametrize("steps", [100.0, 1e308, 2**53 + 1])
def test_calibration_steps_must_be_a_count(steps: float) -> None:
    # 1e308 used to overflow count * RDP and then blame target_epsilon.
    with pytest.raises(ValueError, match=r"^steps must be an integer in \[1, 2\*\*53\], got "):
        calibrate_noise_multiplier(2.0, 1e-5, 0.01, steps)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^steps must be an integer in \[1, 2\*\*53\], got "):
        TradeoffCurve.from_dpsgd(1.0, 0.01, steps)  # type: ignore[arg-type]


@pytest.mark.parametrize("event", [PureDP(0.1), Subsampled(Gaussian(1.0), 0.01)])
def test_pld_refuses_a_count_no_grid_fits_by_its_tolerance(event: Event) -> None:
    # The coarsened grid step passed 1 nat and was refused as value_discretization,
    # an argument the caller never gave.
    message = r"^tolerance must be reachable within the memory bound \(or use RDPAccountant\)"
    with pytest.raises(ValueError, match=message):
        PLDAccountant().compose(event, 2**53).epsilon(1e-5)
    assert RDPAccountant().compose(event, 2**53).epsilon(1e-5).upper < math.inf
