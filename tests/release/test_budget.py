"""Budget: exactly one currency, validation, capacity (μ and ρ), ε at δ, the spend check."""

from __future__ import annotations

import math
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gaussdp.budget import Budget
from gaussdp.mechanisms import epsilon_with_slack
from gaussdp.privacy import gdp_epsilon, gdp_mu, zcdp_epsilon, zcdp_rho


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"epsilon": 1.0},
        {"epsilon": 1.0, "delta": 1e-6, "rho": 0.1},
        {"rho": 0.1, "mu": 1.0},
        {"epsilon": -1.0, "delta": 1e-6},
        {"epsilon": 1.0, "delta": 0.0},
        {"epsilon": 1.0, "delta": 1.0},
        {"rho": 0.0},
        {"mu": math.inf},
        {"rho": math.nan},
    ],
)
def test_invalid_budgets_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        Budget(**kwargs)


def test_bool_is_not_a_number() -> None:
    with pytest.raises(TypeError):
        Budget(rho=True)


def test_capacity_of_each_kind() -> None:
    assert Budget(epsilon=1.0, delta=1e-6).rho_capacity() == zcdp_rho(1.0, 1e-6)
    assert Budget(epsilon=1.0, delta=1e-6).rho_capacity(5e-7) == zcdp_rho(1.0, 5e-7)
    assert Budget(epsilon=1.0, delta=1e-6).rho_capacity(1e-6) == 0.0
    assert Budget(epsilon=0.0, delta=1e-6).rho_capacity() == 0.0
    assert Budget(rho=0.25).rho_capacity() == 0.25
    with pytest.raises(ValueError, match="delta"):
        Budget(rho=0.25).rho_capacity(1e-9)
    # ρ-zCDP does not imply μ-GDP: a μ budget has no ρ capacity, a ρ budget no μ capacity.
    with pytest.raises(ValueError, match="rho accounting"):
        Budget(mu=0.5).rho_capacity()
    with pytest.raises(ValueError, match="mu accounting"):
        Budget(rho=0.5).mu_capacity()
    assert Budget(mu=0.5).mu_capacity() == 0.5
    assert Budget(mu=0.5, delta=1e-6).mu_capacity(slack=1e-70) == 0.5  # met up to the slack
    with pytest.raises(ValueError, match="delta"):
        Budget(mu=0.5).mu_capacity(1e-9)


def test_accounting_follows_the_budget_kind() -> None:
    assert Budget(epsilon=1.0, delta=1e-6).accounting == "gdp"
    assert Budget(mu=1.0).accounting == "gdp"
    assert Budget(rho=1.0, delta=1e-6).accounting == "zcdp"


def test_mu_capacity_of_an_epsilon_delta_budget() -> None:
    b = Budget(epsilon=1.0, delta=1e-6)
    # No slack, no extra δ: DRS Cor 2.13 inverted (gdp_mu), checked forward.
    assert b.mu_capacity() <= gdp_mu(1.0, 1e-6)
    assert b.mu_capacity() == pytest.approx(gdp_mu(1.0, 1e-6), rel=1e-12)
    assert b.epsilon_at_mu(b.mu_capacity()) <= 1.0
    # Partition selection's δ and a slack both shrink it.
    assert b.mu_capacity(5e-7) == pytest.approx(gdp_mu(1.0, 5e-7), rel=1e-12)
    assert b.mu_capacity(0.0, 0.01) < b.mu_capacity()
    assert b.epsilon_at_mu(b.mu_capacity(0.0, 0.01), 0.0, 0.01) <= 1.0
    # Edges: nothing left.
    assert b.mu_capacity(1e-6) == 0.0
    assert b.mu_capacity(0.0, 0.5) == 0.0  # ε ≤ 2A
    assert Budget(epsilon=0.0, delta=1e-6).mu_capacity() == 0.0
    # μ accounting allows more than ρ accounting (the point of the change): 0.2367 vs 0.2207.
    assert math.sqrt(2 * b.rho_capacity()) < 0.94 * b.mu_capacity()


def test_epsilon_at_mu_is_the_slack_formula() -> None:
    b = Budget(epsilon=1.0, delta=1e-6)
    slack = 1e-3
    expected = epsilon_with_slack(partial(gdp_epsilon, 0.2), 1e-6 - 1e-7, slack)
    assert b.epsilon_at_mu(0.2, 1e-7, slack) == expected
    assert expected == pytest.approx(gdp_epsilon(0.2, (1e-6 - 1e-7) * math.exp(-slack)) + 2e-3)
    assert b.epsilon_at_mu(0.2) == gdp_epsilon(0.2, 1e-6)  # no slack: exactly DRS Cor 2.13
    assert b.epsilon_at_mu(0.2, 1e-6) == math.inf
    assert Budget(mu=0.2).epsilon_at_mu(0.2) is None


@settings(max_examples=60, deadline=None)
@given(
    epsilon=st.floats(0.01, 20.0),
    log_delta=st.floats(-30.0, -1.0),
    share=st.floats(0.0, 0.9),
    slack=st.sampled_from([0.0, 1e-76, 1e-50, 1e-6]),
)
def test_mu_capacity_never_overshoots(
    epsilon: float, log_delta: float, share: float, slack: float
) -> None:
    """Property: spending exactly the capacity meets the budget (the plan relies on it)."""
    delta = 10.0**log_delta
    b = Budget(epsilon=epsilon, delta=delta)
    extra = share * delta
    mu = b.mu_capacity(extra, slack)
    if mu > 0:
        spent = b.epsilon_at_mu(mu, extra, slack)
        assert spent is not None
        assert spent <= epsilon
        assert spent == pytest.approx(epsilon, rel=1e-6, abs=3 * slack + 1e-12)


def test_zcdp_is_at_most_gdp_capacity() -> None:
    # The discrete release is accounted in zCDP: never more ρ than μ-GDP would allow.
    b = Budget(epsilon=1.0, delta=1e-6)
    assert b.rho_capacity() <= gdp_mu(1.0, 1e-6) ** 2 / 2


def test_epsilon_at_round_trip() -> None:
    b = Budget(epsilon=2.0, delta=1e-7)
    rho = b.rho_capacity(1e-8)
    assert b.epsilon_at(rho, 1e-8) <= 2.0
    assert b.epsilon_at(rho, 1e-8) == pytest.approx(2.0, rel=1e-6)
    assert Budget(rho=1.0).epsilon_at(1.0) is None
    assert Budget(rho=1.0, delta=1e-5).epsilon_at(1.0) == zcdp_epsilon(1.0, 1e-5)
    assert b.epsilon_at(rho, 1e-7) == math.inf


def test_frozen_and_dict() -> None:
    b = Budget(epsilon=1.0, delta=1e-6)
    with pytest.raises(AttributeError):
        b.epsilon = 2.0  # type: ignore[misc]
    assert b.as_dict() == {"epsilon": 1.0, "delta": 1e-6}
    assert Budget(**b.as_dict()) == b
    assert str(b) == "Budget(epsilon=1, delta=1e-06)"
