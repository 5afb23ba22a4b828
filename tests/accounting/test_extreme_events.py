"""Every event at extreme parameters: an answer on the safe side or the one message
template, never a raw OverflowError, ZeroDivisionError or numpy error."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from fractions import Fraction
from typing import TypeVar

import numpy as np
import pytest

from gaussdp import BudgetExceededError
from gaussdp._search import fraction_down, fraction_up
from gaussdp.accounting import (
    Accountant,
    ApproxDP,
    DeltaBounds,
    EpsilonBounds,
    ExponentialMechanism,
    FallbackAccountant,
    GDPAccountant,
    LatticeNoise,
    PartitionSelection,
    PLDAccountant,
    PrivacyFilter,
    PrivacyLossDistribution,
    PureDP,
    RDPAccountant,
    RecordedCost,
    Subsampled,
    UnsupportedEventError,
    ZCDPAccountant,
)
from gaussdp.accounting.events import DiscreteGaussianL2, Event
from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace
from gaussdp.privacy import gdp_epsilon

TEMPLATE = re.compile(r"^\S.* must be .+, got .+$", re.DOTALL)
EXTREMES = (1e-300, 1e300)

# One factory per event type (and per parameter that can be extreme); x is the extreme.
FACTORIES: dict[str, Callable[[float], Event]] = {
    "Gaussian.sigma": lambda x: Gaussian(x),
    "Gaussian.sensitivity": lambda x: Gaussian(1.0, x),
    "DiscreteGaussian.sigma2": lambda x: DiscreteGaussian(Fraction(x)),
    "DiscreteLaplace.scale": lambda x: DiscreteLaplace(Fraction(x)),
    "Laplace.scale": lambda x: Laplace(x),
    "Laplace.sensitivity": lambda x: Laplace(1.0, x),
    "LatticeGaussian.sigma": lambda x: Gaussian(max(x, 1.0)).lattice(),
    "LatticeNoise.sigma2": lambda x: LatticeNoise(Fraction(x), Fraction(1), 1),
    "LatticeNoise.sensitivity2": lambda x: LatticeNoise(Fraction(1), Fraction(x), 1),
    "PureDP": lambda x: PureDP(x),
    "ApproxDP.epsilon": lambda x: ApproxDP(x, 1e-6),
    "ApproxDP.delta": lambda x: ApproxDP(1.0, min(x, 0.5)),
    "ExponentialMechanism": lambda x: ExponentialMechanism(x),
    "RecordedCost": lambda x: RecordedCost(x, x, 0.0, 0.0),
    "DiscreteGaussianL2.sigma2": lambda x: DiscreteGaussianL2(Fraction(x), 1, 3),
    "PartitionSelection.sigma2": lambda x: PartitionSelection(Fraction(x), 10, 1, 100),
    "Subsampled(Gaussian).sigma": lambda x: Subsampled(Gaussian(x), 0.01),
    "Subsampled(Gaussian).sample_rate": lambda x: Subsampled(Gaussian(1.0), min(x, 1.0)),
    "Subsampled(Laplace).scale": lambda x: Subsampled(Laplace(x), 0.01),
    "Subsampled(DiscreteLaplace).scale": lambda x: Subsampled(DiscreteLaplace(Fraction(x)), 0.01),
    "Subsampled(DiscreteGaussian).sigma2": lambda x: Subsampled(
        DiscreteGaussian(Fraction(x)), 0.01
    ),
}
ACCOUNTANTS: dict[str, Callable[[], Accountant]] = {
    "rdp": RDPAccountant,
    "zcdp": ZCDPAccountant,
    "gdp": GDPAccountant,
    "pld": PLDAccountant,
    "fallback": lambda: FallbackAccountant([PLDAccountant(), RDPAccountant()]),
}


T = TypeVar("T")


def _run(fn: Callable[[], T]) -> T | str:
    """``fn()``, or the message of the ValueError/TypeError it raised (anything else
    propagates and fails the test)."""
    try:
        return fn()
    except (ValueError, TypeError) as error:
        if isinstance(error, UnsupportedEventError):
            return "unsupported: " + str(error)
        return str(error)


def _is_refusal(outcome: object) -> bool:
    return isinstance(outcome, str) and (
        outcome.startswith("unsupported: ") or bool(TEMPLATE.match(outcome))
    )


@pytest.mark.parametrize("x", EXTREMES)
@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_every_event_answers_or_refuses_with_the_template(kind: str, x: float) -> None:
    event = _run(lambda: FACTORIES[kind](x))
    if isinstance(event, str):
        assert TEMPLATE.match(event), event
        return
    for name in ("rho", "delta"):  # derived quantities: a float (∞ allowed), never NaN
        if name in dir(event) and not callable(getattr(type(event), name, None)):
            value = _run(lambda name=name: getattr(event, name))  # type: ignore[misc]
            if isinstance(value, str):
                assert TEMPLATE.match(value), (name, value)
            else:
                assert isinstance(value, float), (name, value)
                assert value >= 0, (name, value)
    if callable(getattr(event, "rdp", None)):
        assert event.rdp(2.0) >= 0  # type: ignore[union-attr]
    for acc_name, make in ACCOUNTANTS.items():
        acc = make()
        if not acc.supports(event):
            continue

        def queries(acc: Accountant = acc) -> tuple[EpsilonBounds, list[DeltaBounds]]:
            composed = acc.compose(event, 3)  # type: ignore[arg-type]
            eps = composed.epsilon(1e-6)
            return eps, [composed.delta(e) for e in (0.0, 1.0, 1e300)]

        outcome = _run(queries)
        if isinstance(outcome, str):
            assert _is_refusal(outcome), (acc_name, outcome)
            continue
        eps, deltas = outcome
        for b in (eps, *deltas):
            assert not math.isnan(b.upper), (acc_name, b)
            assert b.lower <= b.upper, (acc_name, b)
        assert all(0.0 <= d.upper <= 1.0 for d in deltas), (acc_name, deltas)
        assert deltas[0].upper >= deltas[1].upper >= deltas[2].upper, (acc_name, deltas)


def test_quantities_past_the_float_range_are_inf_on_the_safe_side() -> None:
    assert ExponentialMechanism(1e300).rho == math.inf
    assert ZCDPAccountant().compose(ExponentialMechanism(1e300)).epsilon(1e-6).upper == math.inf
    assert Gaussian(1e-300).rho == math.inf
    assert Gaussian(1e-300).rdp(2.0) == math.inf
    gdp = GDPAccountant().compose(Gaussian(1e-300), 3)
    assert gdp.epsilon(1e-6).upper == math.inf
    assert gdp.delta(1.0).upper == 1.0
    assert PLDAccountant().compose(Gaussian(1e-300)).epsilon(1e-6).upper == math.inf
    # All the mass at +∞ (e^{−ε} = 0): δ = 1 at every ε.
    assert PLDAccountant().compose(PureDP(1e300), 2).delta(5.0).upper == 1.0
    # σ² underflows: the subsampled Gaussian's RDP is beyond the float range.
    assert math.isinf(RDPAccountant().compose(Subsampled(Gaussian(1e-300), 0.5)).rdp()[0])


def test_nearly_private_mechanisms_have_small_nonnegative_rdp() -> None:
    # Laplace with b = 1e300: the log-sum cancels to ≈ 0 and used to come out −4e-16.
    rdp = RDPAccountant().compose(Laplace(1e300)).rdp()
    assert np.all(rdp >= 0)
    assert np.all(rdp <= 1e-15)
    assert RDPAccountant().compose(Laplace(1e300)).epsilon(1e-6).upper > 0
    # Ordinary scales are unchanged by the round-off allowance: Mironov 2017 Prop 6 at α = 2.
    b = 2.0
    exact = math.log(2 / 3 * math.exp(1 / b) + 1 / 3 * math.exp(-2 / b))
    got = RDPAccountant(orders=(2.0,)).compose(Laplace(b)).rdp()[0]
    assert exact <= got <= exact + 1e-14


def test_directed_rounding_of_fractions_past_the_float_range() -> None:
    big = Fraction(10**400)
    assert fraction_up(big) == math.inf
    assert fraction_down(big) == sys.float_info.max
    assert fraction_up(-big) == -sys.float_info.max
    assert fraction_down(-big) == -math.inf


@pytest.mark.parametrize(
    "pld",
    [
        PrivacyLossDistribution.from_gaussian(1.0),
        PrivacyLossDistribution.from_laplace(1.0),
        PrivacyLossDistribution.from_subsampled_gaussian(1.0, 0.01).self_compose(10),
        PrivacyLossDistribution.from_discrete_laplace(Fraction(2)),
        PrivacyLossDistribution.from_approx_dp(1.0, 1e-6),
    ],
    ids=["gaussian", "laplace", "subsampled", "discrete-laplace", "approx-dp"],
)
@pytest.mark.parametrize("epsilon", [1e20, 1e300, 1e308, sys.float_info.max])
def test_delta_at_a_huge_epsilon_is_the_mass_at_infinity(
    pld: PrivacyLossDistribution, epsilon: float
) -> None:
    far = pld.delta(epsilon)
    # Beyond every finite loss δ(ε) is constant: the mass at +∞ and the allowances.
    beyond = pld.delta(200.0)
    assert far.upper == beyond.upper
    assert 0.0 <= far.lower <= far.upper < 1e-5


@pytest.mark.parametrize(
    "event",
    [ApproxDP(1.0, 1e-6), Laplace(1.0), Subsampled(Gaussian(1.0), 0.01)],
    ids=["approx-dp", "laplace", "subsampled-gaussian"],
)
def test_delta_beyond_every_finite_loss_does_not_refine_the_grid(event: Event) -> None:
    # There δ is the mass at +∞ (upper) and 0 (lower) on every grid: refining cannot
    # narrow the bracket, and used to cost seconds of finer grids.
    acc = PLDAccountant().compose(event, 3)
    step = acc.value_discretization
    top = acc.pld().largest_finite_loss
    far = acc.delta(1e300)
    assert acc.value_discretization == step
    # (Pure and approximate DP steps are answered in closed form there: exactly the
    # mass at +∞ of their worst-case pairs, no looser than the grid's bound.)
    assert far.upper <= acc.pld().delta(top).upper or far.method == "rdp"
    assert 0.0 <= far.lower <= far.upper <= acc.delta(top / 2).upper


@pytest.mark.parametrize("count", [1, 10])
def test_losses_all_beyond_the_cap_keep_their_mass(count: int) -> None:
    # Discrete Laplace with scale 1/100: every finite loss is ±100, beyond the ±64 cap.
    # Its P-mass goes to +∞ on the upper side; a regression once dropped it (δ = 0).
    # Exact: the loss is 100·k with P-probability ≥ (1 − 2e^{−100})^k,
    # so δ(ε) ≥ 1 − 10⁻⁹ for every ε below 100·k − 1.
    pld = PrivacyLossDistribution.from_discrete_laplace(Fraction(1, 100))
    composed = pld.self_compose(count) if count > 1 else pld
    assert composed.delta(50.0 * count).upper >= 1 - 1e-9
    acc = PLDAccountant()
    acc.compose(DiscreteLaplace(Fraction(1, 100)), count)
    assert acc.epsilon(1e-5).upper >= 100.0 * count * (1 - 1e-9)


@pytest.mark.parametrize("sigma", [0.02, 0.01, 1e-5, 1e-100, 1e-160, 1e-200])
def test_a_gaussian_with_huge_mu_in_a_mix_gets_an_answer(sigma: float) -> None:
    # Alone, a Gaussian takes the exact μ-GDP path; in a mix its one-run PLD once held
    # NaN (e^{t} overflowing beyond the cap) or overflowed building μ², and the filter
    # raised. The answer must be an upper bound on the Gaussian's own ε.
    acc = PLDAccountant()
    acc.compose(Gaussian(sigma)).compose(PureDP(0.1))
    bounds = acc.epsilon(1e-6)
    assert bounds.lower <= bounds.upper
    mu = 1.0 / sigma
    if mu < 1e9:
        assert bounds.upper >= gdp_epsilon(mu, 1e-6)
    f = PrivacyFilter(epsilon=1e300, delta=1e-6)
    f.accept(PureDP(0.1))
    try:  # an answer or a refusal, not a raw exception
        f.accept(Gaussian(sigma))
    except BudgetExceededError:
        assert mu > 1e100


@pytest.mark.parametrize("accountant", [GDPAccountant, PLDAccountant])
def test_a_gaussian_epsilon_past_the_float_range_keeps_a_certified_lower_bound(
    accountant: Callable[[], Accountant],
) -> None:
    # μ = 1e160: μ² overflows, and the exact ε ≈ μ²/2 = 5e319 is past the float range.
    # The upper bound is ∞; the lower bound is not the trivial 0 but the largest float
    # (ε grows with μ, and μ is at least the largest one run's), and δ(1) is about 1.
    composed = accountant().compose(Gaussian(1e-160))
    bounds = composed.epsilon(1e-5)
    assert bounds.upper == math.inf
    assert bounds.lower == sys.float_info.max
    assert composed.delta(1.0).lower > 0.99


def test_an_rdp_delta_below_the_smallest_float_is_not_reported_as_zero() -> None:
    # Ten ε = 1 steps and a far-off Gaussian, ε just past 10: CKS Prop 12 gives
    # δ = e^{(α−1)(τ−ε)}/α·(1 − 1/α)^{α−1} > 0 at every order, around e^{-1250} at the best
    # one, below the smallest subnormal: the upper bound must stay positive.
    for accountant in (RDPAccountant(), PLDAccountant()):
        composed = accountant.compose(PureDP(1.0), 10).compose(Gaussian(50.0))
        bounds = composed.delta(11.01)
        assert 0.0 < bounds.upper < 1e-300


@pytest.mark.parametrize("accountant", [GDPAccountant, PLDAccountant])
@pytest.mark.parametrize(
    ("sigma", "count", "epsilon"), [(1e-100, 1, 1e300), (1 / 1.5e154, 1, 1.7e308)]
)
def test_a_gaussian_delta_below_the_smallest_float_has_lower_bound_zero(
    accountant: Callable[[], Accountant], sigma: float, count: int, epsilon: float
) -> None:
    # The exact δ (about 10^(−3e306) at the second) is below 5e-324, the upper bound
    # gdp_delta rounds it to (μ² overflows at the second: the upper bound is then 1);
    # the lower bound was 5e-324, above the truth. Independent bound:
    # δ = Φ(−x) − e^ε·Φ(−ε/μ − μ/2) < Φ(−x) < φ(x)/x, x = ε/μ − μ/2 > 0 (Mills).
    mp = pytest.importorskip("mpmath")
    mu = mp.sqrt(count) / mp.mpf(sigma)
    x = mp.mpf(epsilon) / mu - mu / 2
    assert x > 0
    assert mp.npdf(x) / x < 5e-324
    bounds = accountant().compose(Gaussian(sigma), count).delta(epsilon)
    assert bounds.lower == 0.0 < bounds.upper


@pytest.mark.parametrize("mu", [0.5, 1.0, 3.0])
def test_a_subnormal_gdp_delta_is_bracketed(mu: float) -> None:
    # ε where δ(ε) runs through the subnormal floats (and below): there gdp_delta's
    # roundings are absolute, one unit of 5e-324 each, and d·(1 − 1e-11) rounded back to
    # d, above the exact δ (mpmath, 50 digits).
    mp = pytest.importorskip("mpmath")
    inside = 0
    # ln δ ≈ −t²/2 at ε = μ(t + μ/2): t in [37, 39.5] runs ln δ across [−745, −708].
    for epsilon in mu * (np.linspace(37.0, 39.5, 80) + mu / 2):
        m, e = mp.mpf(mu), mp.mpf(float(epsilon))
        with mp.workdps(50):
            exact = mp.ncdf(-e / m + m / 2) - mp.exp(e) * mp.ncdf(-e / m - m / 2)
        bounds = GDPAccountant().compose(Gaussian(1 / mu)).delta(float(epsilon))
        assert mp.mpf(bounds.lower) <= exact <= mp.mpf(bounds.upper)
        inside += 0.0 < bounds.lower < sys.float_info.min
    assert inside > 5  # the subnormal range itself was crossed
