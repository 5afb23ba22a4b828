"""RDP of subsampled mechanisms: Poisson (Zhu & Wang 2019 Thm 6) and without replacement
(Wang, Balle & Kasiviswanath 2019 Thm 9), checked against exact Rényi divergences."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import logsumexp

from gaussdp.accounting import (
    Composed,
    PLDAccountant,
    PrivacyFilter,
    RDPAccountant,
    Subsampled,
    UnsupportedEventError,
)
from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace

ORDERS = (2.0, 3.0, 4.0, 8.0, 16.0, 32.0)
SUPPORT = np.arange(-400, 401, dtype=np.float64)


def _log_pmf(mechanism: DiscreteGaussian | DiscreteLaplace, shift: int) -> np.ndarray:
    """Log-pmf of the mechanism's output at ``shift`` on SUPPORT, normalised here."""
    z = SUPPORT - shift
    if isinstance(mechanism, DiscreteGaussian):
        logits = -(z**2) / (2 * float(mechanism.sigma2))  # CKS Def 1
    else:
        logits = -np.abs(z) / float(mechanism.scale)  # CKS §4
    return logits - logsumexp(logits)


def _renyi(log_p: np.ndarray, log_q: np.ndarray, alpha: float) -> float:
    """D_α(P ‖ Q) = ln Σ p^α q^{1−α} / (α − 1), by direct summation."""
    return float(logsumexp(alpha * log_p + (1 - alpha) * log_q)) / (alpha - 1)


def _mixture(mechanism: DiscreteGaussian | DiscreteLaplace, rate: float) -> np.ndarray:
    """(1 − q)M(0) + qM(1): the output law when the differing unit is sampled w.p. q."""
    return np.logaddexp(
        math.log1p(-rate) + _log_pmf(mechanism, 0), math.log(rate) + _log_pmf(mechanism, 1)
    )


MECHANISMS = [DiscreteGaussian(4), DiscreteGaussian("1/2"), DiscreteLaplace(2), DiscreteLaplace(1)]


@pytest.mark.parametrize("scheme", ["poisson", "without_replacement"])
@pytest.mark.parametrize("rate", [0.01, 0.2])
@pytest.mark.parametrize("mechanism", MECHANISMS, ids=repr)
def test_bound_is_above_the_exact_divergence(
    mechanism: DiscreteGaussian | DiscreteLaplace, rate: float, scheme: str
) -> None:
    # The pair ((1 − q)M(0) + qM(1), M(0)) is realised by both schemes: add/remove a unit
    # (Poisson) and replace a unit of value 1 by one of value 0 among zeros (fixed batch,
    # q = m/n). Both directions must be below the bound.
    acc = RDPAccountant(ORDERS).compose(Subsampled(mechanism, rate, scheme))  # type: ignore[arg-type]
    bound = acc.rdp()
    mix, base = _mixture(mechanism, rate), _log_pmf(mechanism, 0)
    for alpha, value in zip(ORDERS, bound, strict=True):
        exact = max(_renyi(mix, base, alpha), _renyi(base, mix, alpha))
        assert exact <= value
        if scheme == "poisson" and rate == 0.01 and alpha <= 4:
            # Not vacuous: within a factor 3 of the realised divergence at small q.
            assert value <= 3 * exact


def test_poisson_general_bound_is_above_the_tight_gaussian_one() -> None:
    # Zhu & Wang's general bound on the Gaussian's RDP curve (here through a discrete
    # Gaussian with the same ρ at a huge σ², whose RDP curve is that of the Gaussian)
    # cannot beat Mironov et al.'s exact expansion for the Poisson Gaussian.
    sigma = 1000.0
    dg = RDPAccountant(ORDERS).compose(Subsampled(DiscreteGaussian(sigma**2, 1000), 0.05))
    g = RDPAccountant(ORDERS).compose(Subsampled(Gaussian(sigma=1.0), 0.05))
    assert np.all(dg.rdp() >= g.rdp() * (1 - 1e-9))
    assert np.all(dg.rdp() <= 3 * g.rdp())


def test_non_integer_orders_and_full_rate() -> None:
    acc = RDPAccountant((1.5, 2.0)).compose(Subsampled(Laplace(1.0), 0.1, "without_replacement"))
    assert math.isinf(acc.rdp()[0])
    assert math.isfinite(acc.rdp()[1])
    whole = RDPAccountant(ORDERS).compose(Subsampled(DiscreteLaplace(2), 1.0))
    alone = RDPAccountant(ORDERS).compose(DiscreteLaplace(2))
    np.testing.assert_array_equal(whole.rdp(), alone.rdp())


def test_without_replacement_dpsgd_and_refusals() -> None:
    event = Subsampled(Gaussian(1.1), 256 / 60000, "without_replacement")
    b = RDPAccountant().compose(event, 14063).epsilon(1e-5)
    poisson = RDPAccountant().compose(Subsampled(Gaussian(1.1), 256 / 60000), 14063)
    assert poisson.epsilon(1e-5).upper < b.upper < math.inf
    with pytest.raises(UnsupportedEventError, match=r"without_replacement.*use RDPAccountant"):
        PLDAccountant().compose(event)
    # An (ε, δ) budget filter answers by RDP once such an event is admitted.
    f = PrivacyFilter(epsilon=8.0, delta=1e-5)
    f.accept(event, 14063)
    assert f.spent == b.upper


def test_poisson_discrete_events_get_a_finite_rdp_bound() -> None:
    # Before Zhu & Wang's bound, the RDP accountant refused these (and so the PLD
    # accountant had no RDP fallback for them).
    event = Subsampled(DiscreteLaplace(2), 0.05)
    rdp = RDPAccountant().compose(event, 300).epsilon(1e-6)
    pld = PLDAccountant().compose(event, 300).epsilon(1e-6)
    assert pld.upper <= rdp.upper < math.inf
    assert RDPAccountant().supports(event)


def test_add_remove_and_replace_one_events_are_not_composed_together() -> None:
    """RDP adds up under one neighbouring relation only; a mixed history is refused."""
    poisson = Subsampled(Gaussian(5.0), 0.01)
    fixed = Subsampled(Gaussian(5.0), 0.01, "without_replacement")
    acc = RDPAccountant().compose(poisson, count=3)
    assert not acc.supports(fixed)
    with pytest.raises(UnsupportedEventError, match="mixes add/remove and replace-one"):
        acc.compose(fixed)
    assert acc.count == 3  # the refused event left the history as it was
    with pytest.raises(UnsupportedEventError, match="mixes add/remove and replace-one"):
        RDPAccountant().compose(Composed((poisson, fixed)))
    budget = PrivacyFilter(epsilon=1.0, delta=1e-5)
    budget.accept(poisson)
    with pytest.raises(UnsupportedEventError):
        budget.accept(fixed)
    assert budget.accountant.events == ((poisson, 1),)  # nothing recorded for the refusal
