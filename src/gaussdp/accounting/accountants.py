r"""Privacy accountants sharing one contract.

Every accountant implements ``compose(event, count=1) -> self``,
``epsilon(delta) -> EpsilonBounds``, ``delta(epsilon) -> DeltaBounds`` and
``supports(event) -> bool``; one shared test suite runs against all of them.

* :class:`PLDAccountant` (the default): privacy loss distributions with a
  certified upper and a lower bound; a composition of plain Gaussians only is
  accounted exactly (μ = √Σμᵢ², DRS Cor 3.3).
* :class:`RDPAccountant`: Rényi DP, fast and looser (an upper bound only; the
  lower bound it reports is the trivial 0).
* :class:`GDPAccountant`: exact μ-GDP composition of Gaussian mechanisms; it refuses
  anything else rather than use a central-limit approximation.

Neighbouring datasets are add/remove-one; both directions are accounted.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction
from typing import Self

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln, logsumexp

from gaussdp._validation import check_delta, check_epsilon, check_int
from gaussdp.accounting._adaptive import DEFAULT_TOLERANCE, AdaptivePLD, check_tolerance
from gaussdp.accounting.bounds import DeltaBounds, EpsilonBounds
from gaussdp.accounting.events import (
    DiscreteGaussianL2,
    DiscreteGaussianVector,
    Event,
    Subsampled,
    check_event,
    max_delta_bounds,
    max_epsilon_bounds,
)
from gaussdp.accounting.pld import (
    DEFAULT_TAIL_MASS,
    DEFAULT_VALUE_DISCRETIZATION,
    PrivacyLossDistribution,
    check_value_discretization,
)
from gaussdp.errors import invalid
from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace
from gaussdp.privacy import gdp_delta, gdp_epsilon
from gaussdp.privacy.zcdp import rdp_epsilon

__all__ = [
    "DEFAULT_RDP_ORDERS",
    "Accountant",
    "GDPAccountant",
    "PLDAccountant",
    "RDPAccountant",
]

#: Rényi orders used by :class:`RDPAccountant` (integers where subsampling needs them).
DEFAULT_RDP_ORDERS: tuple[float, ...] = (
    1.25,
    1.5,
    1.75,
    *[float(a) for a in range(2, 65)],
    80.0,
    96.0,
    128.0,
    160.0,
    192.0,
    256.0,
    384.0,
    512.0,
    1024.0,
)

# Largest σ² of a discrete Gaussian the PLD accountant enumerates (±10σ support).
_MAX_DG_SIGMA2 = 3.9e10
_MAX_DL_SCALE = 3.0e4


class Accountant(ABC):
    """The contract every accountant implements.

    An accountant holds a multiset of events (with counts). :meth:`compose` adds to
    it and returns the accountant; queries do not change it. An event the accountant
    does not support is refused with a clear error and the state is unchanged.
    """

    def __init__(self) -> None:
        self._events: Counter[Event] = Counter()

    @property
    def events(self) -> tuple[tuple[Event, int], ...]:
        """The composed events and their counts, in the order first seen."""
        return tuple(self._events.items())

    @property
    def count(self) -> int:
        """The total number of composed mechanism runs."""
        return sum(self._events.values())

    @abstractmethod
    def supports(self, event: object) -> bool:
        """Whether :meth:`compose` accepts ``event``."""

    def compose(self, event: Event, count: int = 1) -> Self:
        """Compose ``count`` independent runs of ``event``; return the accountant.

        Raises
        ------
        TypeError
            If ``event`` is not a privacy event.
        ValueError
            If ``count`` is not an integer >= 1 or the event is not supported.
        """
        check_event(event)
        count = check_int("count", count, minimum=1)
        if not self.supports(event):
            raise ValueError(
                invalid("event", f"an event supported by {type(self).__name__}", event)
            )
        self._events[event] += count
        self._invalidate()
        return self

    def _invalidate(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Drop cached results after a composition."""

    def copy(self) -> Self:
        """An independent accountant of the same kind holding the same events."""
        other = self._empty_like()
        other._events = Counter(self._events)
        return other

    @abstractmethod
    def _empty_like(self) -> Self: ...

    @abstractmethod
    def epsilon(self, delta: float) -> EpsilonBounds:
        """Bounds on the smallest ε such that the composition is (ε, ``delta``)-DP."""

    @abstractmethod
    def delta(self, epsilon: float) -> DeltaBounds:
        """Bounds on the smallest δ such that the composition is (``epsilon``, δ)-DP."""


# --------------------------------------------------------------------------------------
class GDPAccountant(Accountant):
    r"""Exact accounting of Gaussian mechanisms by μ-GDP: μ = √Σ μᵢ² (DRS Cor 3.3).

    Only :class:`~gaussdp.mechanisms.Gaussian` events are accepted: anything else
    would need the central limit theorem, which is an approximation and can
    under-report ε (Opacus's GDP accountant does, on DP-SGD). Results are exact,
    so ``lower == upper``.

    Examples
    --------
    >>> from gaussdp.mechanisms import Gaussian
    >>> acc = GDPAccountant().compose(Gaussian(sigma=2.0), count=4)
    >>> acc.mu
    1.0
    >>> round(acc.epsilon(1e-5).upper, 4)
    4.3772
    """

    @property
    def mu(self) -> float:
        """The μ of the composition."""
        return math.sqrt(math.fsum(c * e.mu**2 for e, c in self._events.items()))  # type: ignore[union-attr]

    def supports(self, event: object) -> bool:
        return isinstance(event, Gaussian)

    def _empty_like(self) -> Self:
        return type(self)()

    def epsilon(self, delta: float) -> EpsilonBounds:
        delta = check_delta("delta", delta)
        eps = gdp_epsilon(self.mu, delta)  # DRS Cor 2.13, rounded up
        return EpsilonBounds(lower=eps, upper=eps)

    def delta(self, epsilon: float) -> DeltaBounds:
        epsilon = check_epsilon("epsilon", epsilon)
        d = gdp_delta(self.mu, epsilon)  # DRS Cor 2.13
        return DeltaBounds(lower=d, upper=d)


# --------------------------------------------------------------------------------------
class RDPAccountant(Accountant):
    r"""Rényi DP accounting: fast, an upper bound only, looser than PLD.

    RDP curves add under composition; the conversion to (ε, δ) is CKS Prop 12
    minimised over the orders. The Poisson-subsampled Gaussian uses the integer-order
    binomial expansion of Mironov et al. 2019 (valid for both neighbouring
    directions). ``lower`` is always 0: RDP gives no lower bound.

    Parameters
    ----------
    orders : sequence of float, optional
        Rényi orders α > 1; default :data:`DEFAULT_RDP_ORDERS`.

    Examples
    --------
    >>> from gaussdp.mechanisms import Gaussian
    >>> acc = RDPAccountant().compose(Subsampled(Gaussian(1.1), 256 / 60000), 14063)
    >>> round(acc.epsilon(1e-5).upper, 2)
    2.6
    """

    def __init__(self, orders: Sequence[float] | None = None) -> None:
        super().__init__()
        chosen = DEFAULT_RDP_ORDERS if orders is None else tuple(float(a) for a in orders)
        if not chosen or any(not (a > 1 and math.isfinite(a)) for a in chosen):
            raise ValueError(invalid("orders", "a non-empty sequence of finite reals > 1", orders))
        self._orders = np.asarray(chosen, dtype=np.float64)

    @property
    def orders(self) -> tuple[float, ...]:
        """The Rényi orders used."""
        return tuple(float(a) for a in self._orders)

    def supports(self, event: object) -> bool:
        if isinstance(event, Subsampled):
            return isinstance(event.mechanism, Gaussian)
        return isinstance(
            event,
            (
                Gaussian,
                DiscreteGaussian,
                DiscreteLaplace,
                Laplace,
                DiscreteGaussianVector,
                DiscreteGaussianL2,
            ),
        )

    def _empty_like(self) -> Self:
        return type(self)(self.orders)

    def rdp(self) -> npt.NDArray[np.float64]:
        """The composed RDP curve at :attr:`orders`."""
        total = np.zeros_like(self._orders)
        for event, count in self._events.items():
            total += count * _event_rdp(event, self._orders)
        return total

    def epsilon(self, delta: float) -> EpsilonBounds:
        delta = check_delta("delta", delta)
        if not self._events:
            return EpsilonBounds(lower=0.0, upper=0.0)
        eps = rdp_epsilon(self._orders, self.rdp(), delta)  # CKS Prop 12
        return EpsilonBounds(lower=0.0, upper=eps)

    def delta(self, epsilon: float) -> DeltaBounds:
        epsilon = check_epsilon("epsilon", epsilon)
        if not self._events:
            return DeltaBounds(lower=0.0, upper=0.0)
        a = self._orders
        tau = self.rdp()
        # CKS Prop 12: δ = e^{(α−1)(τ−ε)}/α · (1 − 1/α)^{α−1}.
        with np.errstate(invalid="ignore"):
            log_d = (a - 1) * (tau - epsilon) - np.log(a) + (a - 1) * np.log1p(-1 / a)
        log_d = np.where(np.isfinite(tau), log_d, np.inf)
        best = float(np.min(log_d))
        d = 1.0 if best >= 0 else min(1.0, math.exp(best) * (1 + 1e-12))
        return DeltaBounds(lower=0.0, upper=d)


def _event_rdp(event: Event, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """RDP of one run of ``event`` at each order."""
    if isinstance(event, Subsampled):
        mech = event.mechanism
        if not isinstance(mech, Gaussian):  # pragma: no cover - refused by supports()
            raise ValueError(invalid("event", "a subsampled Gaussian", event))
        return _subsampled_gaussian_rdp(event.rate, mech.sigma / mech.sensitivity, orders)
    if isinstance(event, Laplace):
        # Mironov 2017 Prop 6: Laplace RDP, b = scale/Δ.
        e0 = event.pure_epsilon
        a = orders
        val = np.logaddexp(
            np.log(a / (2 * a - 1)) + (a - 1) * e0, np.log((a - 1) / (2 * a - 1)) - a * e0
        ) / (a - 1)
        return np.minimum(val, e0)
    if isinstance(event, (Gaussian, DiscreteGaussian, DiscreteGaussianVector, DiscreteGaussianL2)):
        return orders * event.rho  # Mironov 2017 Prop 7; CKS Thm 4, Thm 14
    return np.asarray([event.rdp(float(a)) for a in orders], dtype=np.float64)


def _subsampled_gaussian_rdp(
    q: float, sigma: float, orders: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    r"""RDP of the Poisson-subsampled Gaussian with noise multiplier σ at integer orders.

    Mironov et al. 2019 (§3.3): for integer α,
    A_α = Σ_k C(α, k) (1 − q)^{α−k} q^k e^{(k² − k)/(2σ²)} and the RDP is
    ln A_α / (α − 1); non-integer orders get ``inf``. The bound holds for both
    add and remove neighbours (Mironov et al. 2019 Thm 5).
    """
    out = np.full(orders.shape, np.inf)
    for i, a in enumerate(orders):
        if not float(a).is_integer():
            continue
        alpha = int(a)
        if q == 1.0:
            out[i] = alpha / (2 * sigma**2)
            continue
        k = np.arange(alpha + 1, dtype=np.float64)
        log_binom = gammaln(alpha + 1) - gammaln(k + 1) - gammaln(alpha - k + 1)
        terms = (
            log_binom
            + (alpha - k) * math.log1p(-q)
            + k * math.log(q)
            + (k * k - k) / (2 * sigma**2)
        )
        out[i] = max(0.0, float(logsumexp(terms)) / (alpha - 1))
    return out


# --------------------------------------------------------------------------------------
class PLDAccountant(Accountant):
    r"""Privacy loss distribution accounting with certified upper and lower bounds.

    Each distinct event is discretised once, self-composed by powering its Fourier
    transform, and the results are convolved (see :mod:`gaussdp.accounting.pld` and
    ``docs/accounting.md``). ``epsilon(delta).upper`` is certified; ``.lower`` says
    how tight it is. If every event is a plain Gaussian the composition is accounted
    exactly by μ = √Σμᵢ² (DRS Cor 3.3) and ``lower == upper``.

    Parameters
    ----------
    value_discretization : float, optional
        Grid step h of the privacy loss, in nats. Default: chosen by ``tolerance``
        (from the loss spread of one run, refined while the bracket is wider than
        10·tolerance, within the memory bound; see ``docs/accounting.md``). Given
        explicitly, it is used as is (refused if its grid cannot fit in memory).
    tolerance : float, default 1e-4
        Relative accuracy asked for ε's upper bound. Where the PLD cannot certify a
        bound within it (its round-off allowance exceeds δ), the RDP bound is returned
        when tighter, labelled ``method="rdp"``.
    exact_gaussian : bool, default True
        Use the exact μ-GDP formula when every event is a plain Gaussian.
    tail_mass : float, default 1e-15
        Bound on the probability mass moved by each truncation or wrap-around.

    Examples
    --------
    >>> from gaussdp.mechanisms import Gaussian
    >>> acc = PLDAccountant()
    >>> acc.compose(Subsampled(Gaussian(sigma=1.1), rate=256 / 60000), count=14063)
    PLDAccountant(events=1, count=14063)
    >>> b = acc.epsilon(1e-5)
    >>> 2.3816 < b.upper < 2.3826
    True
    """

    def __init__(
        self,
        *,
        value_discretization: float | None = None,
        exact_gaussian: bool = True,
        tail_mass: float = DEFAULT_TAIL_MASS,
        tolerance: float = DEFAULT_TOLERANCE,
    ) -> None:
        super().__init__()
        if value_discretization is not None:
            value_discretization = check_value_discretization(value_discretization)
        self._h = value_discretization
        self._tolerance = check_tolerance(tolerance)
        self._adaptive: AdaptivePLD | None = None
        self._exact_gaussian = bool(exact_gaussian)
        self._tail_mass = tail_mass
        self._single_cache: list[PrivacyLossDistribution] | None = None

    def __repr__(self) -> str:
        return f"PLDAccountant(events={len(self._events)}, count={self.count})"

    def _empty_like(self) -> Self:
        return type(self)(
            value_discretization=self._h,
            exact_gaussian=self._exact_gaussian,
            tail_mass=self._tail_mass,
            tolerance=self._tolerance,
        )

    def _invalidate(self) -> None:
        self._adaptive = None
        self._single_cache = None

    def supports(self, event: object) -> bool:
        if isinstance(event, Subsampled):
            return self.supports(event.mechanism)
        if isinstance(event, (DiscreteGaussian, DiscreteGaussianVector, DiscreteGaussianL2)):
            return float(event.sigma2) <= _MAX_DG_SIGMA2
        if isinstance(event, DiscreteLaplace):
            return float(event.scale) <= _MAX_DL_SCALE
        return isinstance(event, (Gaussian, Laplace))

    @property
    def value_discretization(self) -> float:
        """The grid step h of the current composition (the finest built so far)."""
        if self._h is not None:
            return self._h
        if self._adaptive is not None:
            return self._adaptive.value_discretization
        # The connect-the-dots upper bound inflates each run's loss variance by at most
        # h²/4, a relative error of about (h/s)²/8 in ε (s the spread of one run's loss):
        # h = 2√τ·s, and at most 1e-4·√(τ/1e-4). Refined per query (see _adaptive).
        tol = self._tolerance
        h = DEFAULT_VALUE_DISCRETIZATION * math.sqrt(tol / DEFAULT_TOLERANCE)
        for event in self._events:
            h = min(h, 2.0 * math.sqrt(tol) * _loss_spread(event))
        return self._snap(max(h, 1e-9))

    def _snap(self, h: float) -> float:
        """A lattice PLD (discrete Laplace, discrete Gaussian) alone is put on its own
        lattice: both bounds are then exact, on the fewest points (the FFT round-off
        allowance grows with the number of points)."""
        if len(self._events) == 1:
            (event,) = self._events
            lattice = _loss_lattice(event)
            if lattice is not None:
                return lattice
        return h

    @property
    def is_exact(self) -> bool:
        """True when the composition is accounted exactly (plain Gaussians only)."""
        return self._exact_gaussian and all(isinstance(e, Gaussian) for e in self._events)

    def _mu(self) -> float:
        return math.sqrt(math.fsum(c * e.mu**2 for e, c in self._events.items()))  # type: ignore[union-attr]

    def pld(self) -> PrivacyLossDistribution:
        """The composed privacy loss distribution on the current grid (cached)."""
        if not self._events:
            raise ValueError(invalid("accountant", "non-empty to build a PLD", self))
        built = self._grid().pld()
        if not isinstance(built, PrivacyLossDistribution):  # pragma: no cover
            raise TypeError(invalid("pld", "a PrivacyLossDistribution", built))
        return built

    def _grid(self) -> AdaptivePLD:
        if self._adaptive is None:
            self._adaptive = AdaptivePLD(
                self._build,
                self.value_discretization,
                self._tolerance,
                fixed=self._h is not None,
                snap=self._snap,
            )
        return self._adaptive

    def _build(self, h: float) -> PrivacyLossDistribution:
        # A subsampled run's truncation may move tail_mass/count (to +∞ on the upper
        # side): the composition then moves at most tail_mass per event.
        parts = [
            _event_pld(
                event,
                h,
                self._tail_mass / count if _subsampled(event) else self._tail_mass,
            ).self_compose(count)
            for event, count in self._events.items()
        ]
        total = parts[0]
        for part in parts[1:]:
            total = total.compose(part)
        return total

    def _rdp(self) -> RDPAccountant | None:
        """The same composition in an RDP accountant, if it supports every event."""
        rdp = RDPAccountant()
        if not all(rdp.supports(e) for e in self._events):
            return None
        for event, count in self._events.items():
            rdp.compose(event, count)
        return rdp

    def epsilon(self, delta: float) -> EpsilonBounds:
        delta = check_delta("delta", delta)
        if not self._events:
            return EpsilonBounds(lower=0.0, upper=0.0)
        if self.is_exact:
            eps = gdp_epsilon(self._mu(), delta)  # DRS Cor 2.13 / Cor 3.3, rounded up
            return EpsilonBounds(lower=eps, upper=eps, method="gdp")
        single = self._single_l2_run()
        if single is not None:
            # One run: the max over the worst-case vectors (no composition involved).
            return max_epsilon_bounds(single, delta)
        b = self._grid().epsilon(delta)
        if b.note:
            # The PLD could not certify within the tolerance (its allowances are too large
            # for this δ, or the grid does not fit): the RDP bound, if tighter, is returned.
            rdp = self._rdp()
            if rdp is not None:
                r = rdp.epsilon(delta).upper
                if r < b.upper:
                    note = f"{b.note}; the RDP bound (CKS Prop 12) is tighter"
                    return EpsilonBounds(lower=min(b.lower, r), upper=r, method="rdp", note=note)
        return b

    def delta(self, epsilon: float) -> DeltaBounds:
        epsilon = check_epsilon("epsilon", epsilon)
        if not self._events:
            return DeltaBounds(lower=0.0, upper=0.0)
        if self.is_exact:
            d = gdp_delta(self._mu(), epsilon)  # DRS Cor 2.13 / Cor 3.3
            return DeltaBounds(lower=d, upper=d, method="gdp")
        single = self._single_l2_run()
        if single is not None:
            return max_delta_bounds(single, epsilon)
        b = self._grid().delta(epsilon)
        if b.note:
            rdp = self._rdp()
            if rdp is not None:
                r = rdp.delta(epsilon).upper
                if r < b.upper:
                    note = f"{b.note}; the RDP bound (CKS Prop 12) is tighter"
                    return DeltaBounds(lower=min(b.lower, r), upper=r, method="rdp", note=note)
        return b

    def _single_l2_run(self) -> list[PrivacyLossDistribution] | None:
        """The candidates' PLDs if the composition is one run of a DiscreteGaussianL2.

        One run needs no dominating pair: its bounds are the max over the candidates.
        """
        if len(self._events) != 1:
            return None
        ((event, count),) = self._events.items()
        if count != 1 or not isinstance(event, DiscreteGaussianL2):
            return None
        if self._single_cache is None:
            self._single_cache = event.candidate_plds(
                value_discretization=self.value_discretization, tail_mass=self._tail_mass
            )
        return self._single_cache


def _subsampled(event: Event) -> bool:
    return isinstance(event, Subsampled) and event.rate < 1.0


def _loss_lattice(event: Event) -> float | None:
    """A step such that every privacy loss of ``event`` is a multiple of it, if any."""
    if isinstance(event, DiscreteLaplace):
        # Losses (|y − Δ| − |y|)/t are multiples of 1/t (CKS §4).
        return 1.0 / float(event.scale)
    if isinstance(event, DiscreteGaussian):
        # Losses (Δ² − 2yΔ)/(2σ²) are multiples of Δ/(2σ²) (CKS Thm 7 proof).
        return float(Fraction(event.sensitivity) / (2 * event.sigma2))
    if isinstance(event, DiscreteGaussianL2):
        # Losses Σ_j (v_j² − 2y_j v_j)/(2σ²) are multiples of 1/(2σ²) (CKS Thm 14).
        return float(1 / (2 * event.sigma2))
    return None


def _loss_spread(event: Event) -> float:
    """A rough standard deviation of one run's privacy loss (only used to pick h)."""
    rate = 1.0
    mech: object = event
    if isinstance(event, Subsampled):
        rate, mech = event.rate, event.mechanism
    if isinstance(mech, (DiscreteLaplace, Laplace)):
        base = mech.pure_epsilon
    elif isinstance(mech, (Gaussian, DiscreteGaussian, DiscreteGaussianVector, DiscreteGaussianL2)):
        base = math.sqrt(2 * mech.rho)  # Δ/σ
    else:  # pragma: no cover - every supported event is listed above
        base = 1.0
    if rate == 1.0:
        return base
    # Var of the loss ≈ q²·χ²(M(Δ) ‖ M(0)) for small q; χ² = e^{μ²} − 1 for the Gaussian.
    return min(base, rate * math.sqrt(math.expm1(min(base * base, 700.0))))


def _event_pld(event: Event, h: float, tail_mass: float) -> PrivacyLossDistribution:
    """The (one-run) PLD of a supported event on grid step ``h``."""
    kw = {"value_discretization": h, "tail_mass": tail_mass}
    rate = 1.0
    mech: object = event
    if isinstance(event, Subsampled):
        rate, mech = event.rate, event.mechanism
    if isinstance(mech, Gaussian):
        if rate < 1.0:
            return PrivacyLossDistribution.from_subsampled_gaussian(
                mech.sigma, rate, mech.sensitivity, **kw
            )
        return PrivacyLossDistribution.from_gaussian(mech.sigma, mech.sensitivity, **kw)
    if isinstance(mech, DiscreteGaussian):
        return PrivacyLossDistribution.from_discrete_gaussian(
            mech.sigma2, mech.sensitivity, sample_rate=rate, **kw
        )
    if isinstance(mech, DiscreteGaussianVector):
        return PrivacyLossDistribution.from_discrete_gaussian(
            mech.sigma2, list(mech.sensitivities), **kw
        )
    if isinstance(mech, DiscreteGaussianL2):
        # A dominating pair of all worst-case vectors: it composes (Zhu, Dong & Wang 2022).
        return PrivacyLossDistribution.from_discrete_gaussian_worst_case(
            mech.sigma2, mech.candidates, **kw
        )
    if isinstance(mech, DiscreteLaplace):
        return PrivacyLossDistribution.from_discrete_laplace(
            mech.scale, mech.sensitivity, sample_rate=rate, **kw
        )
    if isinstance(mech, Laplace):
        return PrivacyLossDistribution.from_laplace(
            mech.scale, mech.sensitivity, sample_rate=rate, **kw
        )
    raise ValueError(invalid("event", "an event supported by PLDAccountant", event))
