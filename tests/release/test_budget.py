"""Budget: exactly one currency, validation, capacity and ε at δ."""

from __future__ import annotations

import math

import pytest

from gaussdp.budget import Budget
from gaussdp.privacy import gdp_mu, zcdp_epsilon, zcdp_rho


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
    assert Budget(mu=0.5).rho_capacity() == 0.125
    with pytest.raises(ValueError, match="delta"):
        Budget(rho=0.25).rho_capacity(1e-9)


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
