"""Events as pure data: JSON round trip, one traversal, named refusals, optimal composition."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import mpmath
import pytest
from scipy.special import comb

from gaussdp.accounting import (
    Accountant,
    ApproxDP,
    Composed,
    DeltaBounds,
    DiscreteGaussianL2,
    DiscreteGaussianVector,
    ExponentialMechanism,
    GDPAccountant,
    LatticeNoise,
    PartitionSelection,
    PLDAccountant,
    PureDP,
    RDPAccountant,
    RecordedCost,
    SelfComposed,
    Subsampled,
    UnknownEventError,
    UnsupportedEventError,
    ZCDPAccountant,
    event_from_json,
    event_to_json,
)
from gaussdp.accounting.events import EVENT_TYPES
from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace
from gaussdp.privacy import gdp_epsilon

LATTICE = Gaussian(sigma=3.0).lattice(5)
EVENTS = [
    Gaussian(sigma=2.0, sensitivity=0.5),
    DiscreteGaussian("25/4", 2),
    DiscreteLaplace(Fraction(7, 3)),
    Laplace(scale=1.5),
    LATTICE,
    LatticeNoise(Fraction(1000, 3), Fraction(8), 2**64),
    Subsampled(Gaussian(1.1), 256 / 60000),
    Subsampled(LATTICE, 0.01),
    Subsampled(DiscreteLaplace(2), 0.05),
    Subsampled(Gaussian(1.0), 0.1, scheme="without_replacement"),
    DiscreteGaussianVector(9, (1, 2)),
    DiscreteGaussianL2(4, 2, dimension=3),
    PureDP(0.5),
    ApproxDP(1.0, 1e-7),
    ExponentialMechanism(0.5),
    PartitionSelection(100, 60, 2, 2**64),
    PartitionSelection(100, 60, 2, 2**64, exact=True),
    RecordedCost(rho=0.01, mu=0.1, slack=1e-70, delta=1e-8),
    RecordedCost(rho=0.01, mu=None, slack=0.0, delta=0.0),
    SelfComposed(Subsampled(LATTICE, 0.01), 100),
    Composed((Gaussian(2.0), Composed((PureDP(0.1),)), SelfComposed(Laplace(1.0), 3))),
    Composed(()),
]
ACCOUNTANTS: list[type[Accountant]] = [
    PLDAccountant,
    RDPAccountant,
    GDPAccountant,
    ZCDPAccountant,
]


def test_every_event_type_is_covered() -> None:
    assert {type(e).__name__ for e in EVENTS} == set(EVENT_TYPES)


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_json_round_trip_hash_frozen_slots(event: object) -> None:
    text = event_to_json(event)  # type: ignore[arg-type]
    back = event_from_json(text)
    assert back == event
    assert hash(back) == hash(event)
    assert type(back) is type(event)
    assert event_to_json(back) == text
    assert not hasattr(event, "__dict__")  # slotted
    name = dataclasses.fields(event)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(event, name, 1)


def test_exact_fields_stay_exact() -> None:
    back = event_from_json(event_to_json(DiscreteGaussian("1/3")))
    assert back.sigma2 == Fraction(1, 3)  # type: ignore[union-attr]
    g = Gaussian(sigma=0.1 + 0.2)
    assert event_from_json(event_to_json(g)).sigma == 0.1 + 0.2  # type: ignore[union-attr]


def test_unknown_types_and_versions_are_refused() -> None:
    text = event_to_json(Gaussian(1.0))
    with pytest.raises(UnknownEventError, match="^event type must be one of .*got 'Exponential'"):
        event_from_json(text.replace('"Gaussian"', '"Exponential"'))
    with pytest.raises(UnknownEventError, match="event format must be 1, 2 or 3"):
        event_from_json(text.replace('"format":3', '"format":4'))
    with pytest.raises(ValueError, match="event JSON must be valid JSON"):
        event_from_json("{not json")
    with pytest.raises(ValueError, match="Gaussian fields must be"):
        event_from_json(text.replace('"sigma"', '"sigmaa"'))
    with pytest.raises(ValueError, match="sigma must be"):
        event_from_json(text.replace('"sigma":1.0', '"sigma":-1.0'))
    for bad in (1.0, None, True):
        with pytest.raises(TypeError, match=rf"^event JSON must be a str or bytes, got {bad!r}$"):
            event_from_json(bad)  # type: ignore[arg-type]


def test_format_1_is_still_read() -> None:
    # A format-1 ledger entry (gaussdp before the parameter glossary): Subsampled's
    # sampling probability was called "rate".
    old = (
        '{"format":1,"event":{"type":"SelfComposed","event":{"type":"Subsampled",'
        '"mechanism":{"type":"Gaussian","sigma":1.1,"sensitivity":1.0},"rate":0.01,'
        '"scheme":"poisson"},"count":1000}}'
    )
    assert event_from_json(old) == SelfComposed(Subsampled(Gaussian(1.1), 0.01), 1000)
    assert '"format":3' in event_to_json(event_from_json(old))
    assert '"sample_rate":0.01' in event_to_json(event_from_json(old))


def test_bad_event_values_use_the_template() -> None:
    for bad in (1.0, -1.0, math.nan, math.inf, 1.5):  # one message for every bad delta
        with pytest.raises(ValueError, match=r"^delta must be a real number in \[0, 1\), got "):
            ApproxDP(1.0, bad)
    with pytest.raises(ValueError, match="^epsilon must be"):
        PureDP(math.nan)
    with pytest.raises(ValueError, match="^scheme must be 'poisson' or 'without_replacement'"):
        Subsampled(Gaussian(1.0), 0.1, scheme="shuffle")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="^event must be"):
        Composed((Gaussian(1.0), "x"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^count must be an integer in \[1, 2\*\*53\]"):
        SelfComposed(Gaussian(1.0), 0)
    with pytest.raises(ValueError, match="^threshold must be"):
        PartitionSelection(1, 1.5, 1, 1)  # type: ignore[arg-type]
    # τ ≤ 0 is not a threshold; τ = 1 is a valid event with δ ≥ 1/2 (older planners could
    # choose it, so ledgers holding one must still load), and its δ says so.
    for tau in (-1, 0):
        with pytest.raises(ValueError, match=rf"^threshold must be an integer >= 1, got {tau}$"):
            PartitionSelection(1, tau, 1, 1)
    assert PartitionSelection(1, 1, 1, 1).delta >= 0.5
    assert event_from_json(event_to_json(PartitionSelection(1, 1, 1, 1))).threshold == 1
    assert PartitionSelection(1, 2, 1, 1).delta < 0.5
    assert Subsampled(Gaussian(1.0), 0.1, "without_replacement").neighbours == "replace one"


@pytest.mark.parametrize("cls", ACCOUNTANTS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_supports_is_compose_without_composing(cls: type[Accountant], event: object) -> None:
    acc = cls()
    supported = acc.supports(event)
    assert acc.count == 0
    try:
        acc.compose(event)  # type: ignore[arg-type]
    except UnsupportedEventError:
        assert not supported
        assert acc.count == 0
    else:
        assert supported
        assert acc.count == 1


def test_unsupported_error_names_the_sub_event_and_where() -> None:
    event = Composed(
        (Gaussian(1.0), Gaussian(2.0), Gaussian(3.0), Subsampled(DiscreteLaplace(2), 0.05))
    )
    with pytest.raises(
        UnsupportedEventError,
        match=r"^Subsampled\(DiscreteLaplace\(scale=2\), sample_rate=0.05\) inside Composed\[3\] "
        r"is not supported by GDPAccountant$",
    ):
        GDPAccountant().compose(event)
    nested = SelfComposed(Composed((PureDP(1.0),)), 4)
    with pytest.raises(
        UnsupportedEventError,
        match=r"^PureDP\(epsilon=1.0\) inside Composed\[0\] inside SelfComposed\(count=4\) ",
    ):
        GDPAccountant().compose(nested)
    with pytest.raises(UnsupportedEventError, match="without_replacement.*PLDAccountant"):
        PLDAccountant().compose(Subsampled(Gaussian(1.0), 0.1, "without_replacement"))


def test_history_is_an_event_another_accountant_reevaluates() -> None:
    pld = PLDAccountant()
    pld.compose(Subsampled(Gaussian(1.1), 0.01), 100).compose(Gaussian(4.0)).compose(PureDP(0.1))
    rdp_direct = RDPAccountant()
    for event, count in pld.events:
        rdp_direct.compose(event, count)
    again = RDPAccountant().compose(pld.history)
    assert again.epsilon(1e-6) == rdp_direct.epsilon(1e-6)
    assert event_from_json(event_to_json(pld.history)) == pld.history
    assert PLDAccountant().compose(pld.history).epsilon(1e-6) == pld.epsilon(1e-6)


def _rr_delta(eps0: float, k: int, eps: float) -> float:
    """Exact δ(ε) of k randomised responses of parameter ε₀ (the KOV 2015 pair), by the binomial.

    The loss is ε₀(k − 2j) with probability C(k, j) p^{k−j}(1 − p)^j, p = e^{ε₀}/(1 + e^{ε₀});
    δ(ε) = E[max(0, 1 − e^{ε − L})] (KOV Thm 3.3 in this form).
    """
    p = math.exp(eps0) / (1 + math.exp(eps0))
    total = 0.0
    for j in range(k + 1):
        loss = eps0 * (k - 2 * j)
        if loss > eps:
            total += comb(k, j, exact=True) * p ** (k - j) * (1 - p) ** j * -math.expm1(eps - loss)
    return total


@pytest.mark.parametrize(("eps0", "k", "eps"), [(0.1, 50, 0.5), (0.5, 10, 1.0), (1.0, 5, 2.0)])
def test_k_fold_pure_dp_is_the_optimal_composition(eps0: float, k: int, eps: float) -> None:
    exact = _rr_delta(eps0, k, eps)
    bounds = PLDAccountant().compose(PureDP(eps0), k).delta(eps)
    assert bounds.lower <= exact <= bounds.upper
    assert bounds.upper == pytest.approx(exact, rel=2e-3)


@pytest.mark.parametrize(("eps0", "delta0", "k"), [(0.2, 1e-6, 20), (1.0, 1e-8, 5)])
def test_k_fold_approx_dp_is_the_optimal_composition(eps0: float, delta0: float, k: int) -> None:
    eps = eps0 * k / 2
    # KOV 2015 Thm 3.3: δ_k(ε) = 1 − (1 − δ₀)^k (1 − δ_pure,k(ε)).
    exact = 1 - (1 - delta0) ** k * (1 - _rr_delta(eps0, k, eps))
    bounds = PLDAccountant().compose(ApproxDP(eps0, delta0), k).delta(eps)
    assert bounds.lower <= exact * (1 + 1e-9)
    assert exact <= bounds.upper
    assert bounds.upper == pytest.approx(exact, rel=2e-3)


def test_beyond_the_largest_loss_delta_is_exact_and_carries_no_note() -> None:
    # ε ≥ kε₀: no run's loss exceeds ε₀, so δ is the mass at +∞ (0 for pure steps). The
    # grid's bracket there was [0, 1.6e-16] (its round-off allowance) with the note
    # "the bracket is wider than the tolerance".
    acc = PLDAccountant().compose(PureDP(1.0), 10)
    for eps in (10.0, 11.01, 1e6):
        assert acc.delta(eps) == DeltaBounds(0.0, 0.0, method="pld", note="")
    just_below = acc.delta(9.99)  # the grid's answer, around the binomial sum
    assert just_below.lower <= _rr_delta(1.0, 10, 9.99) <= just_below.upper
    approx = PLDAccountant().compose(ApproxDP(0.5, 1e-6), 10).compose(DiscreteLaplace(2), 3)
    b = approx.delta(6.5)  # 10·0.5 + 3·(1/2)
    with mpmath.workdps(40):  # KOV Thm 3.3 at ε = kε₀
        exact = float(1 - (1 - mpmath.mpf(1e-6)) ** 10)
    assert b.lower <= exact <= b.upper
    assert b.upper - b.lower <= 1e-11 * exact
    assert b.note == ""
    # An event with unbounded losses: the grid answers.
    mixed = PLDAccountant().compose(PureDP(1.0), 10).compose(Gaussian(1.0))
    assert mixed.delta(11.01).upper > 0.0


def test_lattice_noise_is_accounted_from_the_event() -> None:
    # The smoothing slack is the accountant's: ε(δ) = ε_μ(δe^{−A}) + 2A (A < 1e-70).
    acc = PLDAccountant().compose(LATTICE, 3)
    mu = math.sqrt(3) * LatticeNoise(LATTICE.sigma2, LATTICE.lattice_sensitivity**2, 5).mu
    assert acc.slack == pytest.approx(15 * 2.8e-77, rel=0.1)
    assert acc.epsilon(1e-6).upper >= gdp_epsilon(mu, 1e-6)
    assert acc.epsilon(1e-6).upper == pytest.approx(gdp_epsilon(mu, 1e-6), rel=1e-14)
    # The lattice μ is at most the nominal Gaussian's (Gaussian.lattice's guarantee; the
    # certificate's roundings up add a few ulps).
    nominal = GDPAccountant().compose(Gaussian(3.0), 3).epsilon(1e-6).upper
    assert acc.epsilon(1e-6).upper <= nominal * (1 + 1e-14)
    # zCDP and RDP use its exact ρ (CKS Thm 14), no slack.
    assert ZCDPAccountant().compose(LATTICE).rho == pytest.approx(LATTICE.rho, rel=1e-15)
    assert ZCDPAccountant().compose(LATTICE).slack == 0.0


def test_partition_selection_adds_its_delta() -> None:
    sel = PartitionSelection(400, 150, 1, 2**64)
    acc = PLDAccountant().compose(sel)
    noise = PLDAccountant().compose(sel.noise)
    assert 0 < sel.delta < 1e-9
    assert acc.extra_delta == sel.delta
    assert acc.epsilon(1e-6).upper >= noise.epsilon(1e-6 - sel.delta).upper
    assert acc.delta(1.0).upper >= noise.delta(1.0).upper + sel.delta
    assert acc.epsilon(sel.delta / 2).upper == math.inf  # δ below what the selection spends
    with pytest.raises(UnsupportedEventError, match="^Subsampled"):
        ZCDPAccountant().compose(Subsampled(Gaussian(1.0), 0.5))
