"""Hypothesis properties: monotonicity of ε, ordering of the bounds, filters never overspend."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gaussdp._validation import format_bound
from gaussdp.accounting import (
    Composed,
    PLDAccountant,
    PrivacyFilter,
    RDPAccountant,
    SelfComposed,
    Subsampled,
    UnsupportedEventError,
)
from gaussdp.accounting.events import PartitionSelection
from gaussdp.accounting.filter import left_text, spent
from gaussdp.budget import Budget
from gaussdp.errors import BudgetExceededError
from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace

# A coarse grid keeps each PLD evaluation in the millisecond range; the properties
# below hold on any grid (connect-the-dots respects dominance, docs/accounting.md).
H = 1e-3
SLACK = 1e-9  # FFT round-off allowance in the comparisons

sigmas = st.floats(min_value=0.6, max_value=4.0)
rates = st.floats(min_value=1e-3, max_value=0.5)
steps = st.integers(min_value=1, max_value=200)


def _eps(sigma: float, rate: float, count: int) -> tuple[float, float]:
    acc = PLDAccountant(value_discretization=H).compose(Subsampled(Gaussian(sigma), rate), count)
    b = acc.epsilon(1e-5)
    return b.lower, b.upper


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sigma=sigmas, rate=rates, count=steps, extra=st.integers(1, 100))
def test_epsilon_is_monotone_in_steps(sigma: float, rate: float, count: int, extra: int) -> None:
    lo1, up1 = _eps(sigma, rate, count)
    lo2, up2 = _eps(sigma, rate, count + extra)
    assert lo1 <= up1
    assert lo2 <= up2
    assert up2 >= up1 * (1 - SLACK)


@settings(max_examples=12, deadline=None)
@given(sigma=sigmas, rate=rates, factor=st.floats(1.05, 3.0), count=steps)
def test_epsilon_is_monotone_in_rate(sigma: float, rate: float, factor: float, count: int) -> None:
    up1 = _eps(sigma, rate, count)[1]
    up2 = _eps(sigma, min(1.0, rate * factor), count)[1]
    assert up2 >= up1 * (1 - SLACK)


@settings(max_examples=20, deadline=None)
@given(sigma=sigmas, factor=st.floats(1.05, 3.0), rate=rates, count=steps)
def test_epsilon_is_decreasing_in_sigma(
    sigma: float, factor: float, rate: float, count: int
) -> None:
    up1 = _eps(sigma, rate, count)[1]
    up2 = _eps(sigma * factor, rate, count)[1]
    assert up2 <= up1 * (1 + SLACK)


@settings(max_examples=15, deadline=None)
@given(sigma=sigmas, rate=rates, count=steps)
def test_pld_upper_is_below_rdp(sigma: float, rate: float, count: int) -> None:
    event = Subsampled(Gaussian(sigma), rate)
    rdp = RDPAccountant().compose(event, count).epsilon(1e-5).upper
    assert _eps(sigma, rate, count)[1] <= rdp * (1 + 1e-9)


events = st.one_of(
    st.builds(Gaussian, sigma=st.floats(1.0, 20.0)),
    st.builds(DiscreteGaussian, sigma2=st.integers(1, 400)),
    st.builds(DiscreteLaplace, scale=st.integers(1, 50)),
    st.builds(Laplace, scale=st.floats(1.0, 50.0)),
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seq=st.lists(st.tuples(events, st.integers(1, 5)), min_size=1, max_size=6))
def test_rho_filter_never_exceeds_budget(seq: list[tuple[object, int]]) -> None:
    f = PrivacyFilter(rho=0.5)
    for event, count in seq:
        before = (f.spent, f.history)
        try:
            f.accept(event, count)  # type: ignore[arg-type]
        except BudgetExceededError:
            assert (f.spent, f.history) == before
        assert f.spent <= 0.5


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seq=st.lists(
        st.tuples(
            st.one_of(
                events,
                st.builds(
                    Subsampled,
                    st.builds(Gaussian, sigma=st.floats(0.8, 3.0)),
                    sample_rate=st.floats(0.01, 0.2),
                ),
            ),
            st.integers(1, 20),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_approx_filter_never_exceeds_budget(seq: list[tuple[object, int]]) -> None:
    f = PrivacyFilter(epsilon=2.0, delta=1e-6)
    for event, count in seq:
        before = f.history
        try:
            f.accept(event, count)  # type: ignore[arg-type]
        except BudgetExceededError:
            assert f.history == before
    if f.history.events:
        # The history is an event: another accountant re-evaluates it.
        acc = PLDAccountant().compose(f.history)
        assert acc.epsilon(1e-6).upper <= 2.0
        assert f.spent <= 2.0


def test_mu_filter() -> None:
    f = PrivacyFilter(mu=1.0)
    f.accept(Gaussian(sigma=2.0), 3)  # μ² = 0.75
    assert f.spent == pytest.approx(math.sqrt(0.75))
    with pytest.raises(
        BudgetExceededError, match=r"^refused: this costs μ = 0.708; the filter has μ = 0.499 left"
    ):
        f.accept(Gaussian(sigma=2.0), 2)
    assert f.spent == pytest.approx(math.sqrt(0.75))
    f.accept(Gaussian(sigma=2.0))
    assert f.spent == pytest.approx(1.0)
    message = r"^Laplace\(scale=1.0\) is not supported by GDPAccountant$"
    with pytest.raises(UnsupportedEventError, match=message):
        f.accept(Laplace(scale=1.0))


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"epsilon": 1.0},
        {"delta": 1e-5},
        {"rho": 1.0, "mu": 1.0},
        {"epsilon": 1.0, "delta": 1e-5, "rho": 1.0},
    ],
)
def test_filter_needs_exactly_one_budget(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"^budget must be epsilon and delta together"):
        PrivacyFilter(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"epsilon": -1.0, "delta": 1e-5}, "epsilon"),
        ({"epsilon": 1.0, "delta": 1.0}, "delta"),
        ({"rho": 0.0}, "rho"),
        ({"mu": math.inf}, "mu"),
    ],
)
def test_filter_budget_values_are_validated(kwargs: dict[str, float], name: str) -> None:
    with pytest.raises(ValueError, match=f"^{name} must be"):
        PrivacyFilter(**kwargs)


def test_no_epsilon_left_is_shown_that_the_filter_would_refuse() -> None:
    # Audit: after partition selections had used 7.3e-07 of δ = 1e-06 the filter said
    # "ε = 0.9 left" while refusing a release of ε = 0.05. ε at a fixed δ does not add,
    # so no ε amount is shown: spent ε and δ against the budget instead.
    selection = PartitionSelection(sigma2=100, threshold=51, max_groups_per_unit=1, cells=16)
    f = PrivacyFilter(epsilon=1.0, delta=1e-6)
    f.accept(selection, 2)
    assert math.isnan(f.remaining)
    budget = Budget(epsilon=1.0, delta=1e-6)
    used = spent(budget, f.accountant)
    assert used.value < 0.7  # the old display: "ε = 0.35 left", yet nothing fits
    assert used.delta == pytest.approx(2 * selection.delta)
    shown = left_text(budget, used.value, used.delta)
    assert shown.startswith("no ε amount")
    assert f"used δ = {format_bound(used.delta, up=True, digits=3)} of 1e-06" in shown
    assert f.can_accept(selection) is False  # δ is used up: refused whatever its ε
    with pytest.raises(BudgetExceededError) as refused:
        f.accept(selection)
    message = str(refused.value)
    assert "left" not in message
    assert (
        f"spent ε = {format_bound(used.value, up=True, digits=3)} of 1 "
        "(δ = 1e-06, partition selection δ = " in message
    )
    assert message.endswith("with it: ε = ∞, partition selection δ = 1.11e-06")
    # ρ and μ add: what is shown left is exactly the edge of what the filter admits.
    for kwargs, event_at in (
        ({"rho": 1.0}, lambda r: Gaussian(sigma=math.sqrt(1 / (2 * r)))),
        ({"mu": 1.0}, lambda m: Gaussian(sigma=1 / m)),
    ):
        g = PrivacyFilter(**kwargs)
        g.accept(Gaussian(sigma=1.5))
        left = g.remaining
        assert 0 < left < 1
        assert g.can_accept(event_at(left * (1 - 1e-9))) is True
        assert g.can_accept(event_at(left * (1 + 1e-9))) is False


def test_approx_filter_refuses_and_keeps_state() -> None:
    f = PrivacyFilter(epsilon=1.0, delta=1e-5)
    f.accept(Gaussian(sigma=10.0), 2)
    spent = f.spent
    assert f.can_accept(Gaussian(sigma=1.0)) is False
    message = (
        r"^refused: this costs ε = 4.38 at δ = 1e-05; the filter has spent ε = 0.497 of 1 "
        r"\(δ = 1e-05, partition selection δ = 0\); with it: ε = 4.\d+$"
    )
    with pytest.raises(BudgetExceededError, match=message):
        f.accept(Gaussian(sigma=1.0))
    assert f.spent == spent
    assert f.history == Composed((SelfComposed(Gaussian(sigma=10.0), 2),))
