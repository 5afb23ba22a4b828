"""One contract, one shared test suite: every accountant runs the same tests."""

from __future__ import annotations

import math

import pytest

from gaussdp.accounting import (
    Accountant,
    ApproxDP,
    GDPAccountant,
    PLDAccountant,
    RDPAccountant,
    Subsampled,
    UnsupportedEventError,
)
from gaussdp.accounting.events import Event
from gaussdp.mechanisms import DiscreteGaussian, Gaussian, Laplace


class AccountantContract:
    """Shared tests; subclasses provide ``make`` and a supported / unsupported event."""

    def make(self) -> Accountant:
        raise NotImplementedError

    supported: Event = Gaussian(sigma=2.0)
    unsupported: Event | None = None

    def test_empty_accountant_is_perfectly_private(self) -> None:
        acc = self.make()
        assert acc.epsilon(1e-5).upper == 0.0
        assert acc.delta(1.0).upper == 0.0

    def test_compose_returns_self_and_counts(self) -> None:
        acc = self.make()
        assert acc.compose(self.supported) is acc
        assert acc.compose(self.supported, count=3) is acc
        assert acc.count == 4
        assert acc.events == ((self.supported, 4),)

    def test_bounds_are_ordered_and_in_range(self) -> None:
        acc = self.make().compose(self.supported, count=5)
        for delta in (1e-10, 1e-5, 0.1):
            b = acc.epsilon(delta)
            assert 0.0 <= b.lower <= b.upper < math.inf
        for eps in (0.0, 0.5, 3.0):
            d = acc.delta(eps)
            assert 0.0 <= d.lower <= d.upper <= 1.0

    def test_epsilon_and_delta_are_consistent(self) -> None:
        acc = self.make().compose(self.supported, count=5)
        eps = acc.epsilon(1e-5).upper
        assert acc.delta(eps).upper <= 1e-5 * (1 + 1e-6)

    def test_monotone_in_delta_and_count(self) -> None:
        acc = self.make().compose(self.supported, count=2)
        assert acc.epsilon(1e-3).upper <= acc.epsilon(1e-6).upper
        e2 = acc.epsilon(1e-5).upper
        acc.compose(self.supported)
        assert acc.epsilon(1e-5).upper >= e2

    def test_supports_answers_for_anything(self) -> None:
        acc = self.make()
        assert acc.supports(self.supported) is True
        assert acc.supports("not an event") is False
        assert acc.supports(None) is False

    @pytest.mark.parametrize("delta", [0.0, 1.0, 1.5, -1e-3, math.nan])
    def test_bad_delta(self, delta: float) -> None:
        acc = self.make().compose(self.supported)
        with pytest.raises(ValueError, match=r"^delta must be a real number in \(0, 1\), got "):
            acc.epsilon(delta)

    @pytest.mark.parametrize("epsilon", [-1.0, math.inf, math.nan])
    def test_bad_epsilon(self, epsilon: float) -> None:
        acc = self.make().compose(self.supported)
        with pytest.raises(ValueError, match=r"^epsilon must be"):
            acc.delta(epsilon)

    def test_non_event_is_refused_and_state_unchanged(self) -> None:
        acc = self.make().compose(self.supported)
        before = acc.epsilon(1e-5)
        with pytest.raises(TypeError, match=r"^event must be a mechanism"):
            acc.compose("gaussian")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^event must be"):
            acc.compose(1.0)  # type: ignore[arg-type]
        assert acc.count == 1
        assert acc.epsilon(1e-5) == before

    @pytest.mark.parametrize("count", [0, -1, 2.5, True, 2**53 + 1])
    def test_bad_count_is_refused_and_state_unchanged(self, count: object) -> None:
        acc = self.make().compose(self.supported)
        with pytest.raises(
            (TypeError, ValueError), match=r"^count must be an integer in \[1, 2\*\*53\], got "
        ):
            acc.compose(self.supported, count=count)  # type: ignore[arg-type]
        assert acc.count == 1

    def test_unsupported_event_is_refused_and_state_unchanged(self) -> None:
        if self.unsupported is None:
            pytest.skip("this accountant supports every event kind")
        acc = self.make().compose(self.supported)
        assert acc.supports(self.unsupported) is False
        name = type(acc).__name__
        # The event is named; a reason may follow in parentheses.
        with pytest.raises(UnsupportedEventError, match=rf" is not supported by {name}( \(.+\))?$"):
            acc.compose(self.unsupported)
        assert acc.count == 1

    def test_copy_is_independent(self) -> None:
        acc = self.make().compose(self.supported)
        other = acc.copy()
        other.compose(self.supported)
        assert acc.count == 1
        assert other.count == 2


class TestPLDAccountant(AccountantContract):
    # σ² beyond what the discrete Gaussian PLD enumerates (±10σ support).
    unsupported = DiscreteGaussian(10**12)

    def make(self) -> Accountant:
        return PLDAccountant()


class TestPLDAccountantForcedGrid(AccountantContract):
    """The same contract on the PLD path (the exact-Gaussian shortcut switched off)."""

    unsupported = DiscreteGaussian(10**12)

    def make(self) -> Accountant:
        return PLDAccountant(exact_gaussian=False, value_discretization=1e-3)


class TestRDPAccountant(AccountantContract):
    unsupported = ApproxDP(1.0, 1e-6)  # no Rényi bound for a generic (ε, δ) step

    def make(self) -> Accountant:
        return RDPAccountant()


class TestGDPAccountant(AccountantContract):
    unsupported = Laplace(scale=1.0)

    def make(self) -> Accountant:
        return GDPAccountant()


def test_gdp_refuses_subsampling_rather_than_approximate() -> None:
    acc = GDPAccountant()
    with pytest.raises(ValueError, match="GDPAccountant"):
        acc.compose(Subsampled(Gaussian(1.1), 0.01))
    assert acc.count == 0


def test_rdp_is_an_upper_bound_looser_than_pld() -> None:
    event = Subsampled(Gaussian(1.1), 256 / 60000)
    rdp = RDPAccountant().compose(event, 1000).epsilon(1e-5).upper
    pld = PLDAccountant().compose(event, 1000).epsilon(1e-5)
    assert pld.upper < rdp


def test_accountants_agree_on_plain_gaussians() -> None:
    # DRS Cor 3.3: 4 runs at σ = 2 is one run at μ = 1; ε(1e-5) = 4.3772 (gdp_epsilon).
    values = [
        cls().compose(Gaussian(sigma=2.0), 4).epsilon(1e-5).upper
        for cls in (PLDAccountant, GDPAccountant)
    ]
    assert values[0] == values[1]
    assert values[0] == pytest.approx(4.377178, abs=1e-6)
    assert RDPAccountant().compose(Gaussian(sigma=2.0), 4).epsilon(1e-5).upper > values[0]
