r"""Privacy accountants sharing one contract and one traversal of events.

Every accountant implements ``compose(event, count=1) -> self``,
``epsilon(delta) -> EpsilonBounds``, ``delta(epsilon) -> DeltaBounds`` and
``supports(event) -> bool``; one shared test suite runs against all of them.

* :class:`PLDAccountant` (the default): privacy loss distributions with a
  certified upper and a lower bound; a composition of plain Gaussians only is
  accounted exactly (μ = √Σμᵢ², DRS Cor 3.3).
* :class:`RDPAccountant`: Rényi DP, fast and looser (an upper bound only; the
  lower bound it reports is the trivial 0).
* :class:`ZCDPAccountant`: ρ-zCDP, ρ's add (Bun & Steinke 2016 Lemma 2.3); what a
  ρ budget is checked with.
* :class:`GDPAccountant`: exact μ-GDP composition of Gaussian mechanisms; it refuses
  anything else rather than use a central-limit approximation.

One traversal (:meth:`Accountant.supports` runs it without composing,
:meth:`Accountant.compose` runs it and then composes) reduces an event to the
accountant's *leaves* plus two terms that apply to the whole composition:

* ``Composed`` and ``SelfComposed`` are walked (counts multiply);
* lattice noise (:class:`gaussdp.LatticeGaussian`, :class:`LatticeNoise`) becomes,
  for the accountants that use the smoothing argument (PLD, GDP), a Gaussian with
  the lattice's μ plus its smoothing slack A (its output law is within e^{±A} of a
  post-processed Gaussian mechanism; ratios multiply under adaptive composition
  and survive subsampling, a mixture, so the slacks add). RDP and zCDP use its
  exact ρ-zCDP instead (CKS Thm 14), except under subsampling;
* :class:`PartitionSelection` contributes its noise and its δ; the δ's add
  (Bun & Steinke 2016 Def 8.1, Lemma 8.3);
* what remains must be a leaf the accountant supports; otherwise the error names
  the sub-event and where it sits.

With total slack A and extra δ_s, ε(δ) = ε_leaves((δ − δ_s)e^{−A}) + 2A and
δ(ε) = e^A·δ_leaves(ε − 2A) + δ_s, rounded the safe way.

The history is kept as given and exposed as an event (:attr:`Accountant.history`),
so it can be saved (:func:`~gaussdp.accounting.events.event_to_json`), shown, and
re-evaluated by another accountant (``RDPAccountant().compose(pld.history)``).

Neighbouring datasets are add/remove-one; both directions are accounted.
"""

from __future__ import annotations

import math
import sys
import weakref
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import ClassVar, Self, TypeVar, cast

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln, logsumexp

from gaussdp._search import add_up, down, mul_up, sqrt_up, up
from gaussdp._validation import (
    check_count,
    check_delta,
    check_epsilon,
    check_finite,
    format_bound,
)
from gaussdp.accounting._adaptive import (
    _DELTA_GAP_FACTOR,
    _GAP_FACTOR,
    DEFAULT_TOLERANCE,
    MAX_GRID_POINTS,
    MIN_STEP,
    AdaptivePLD,
    GridTooLargeError,
    MemoryBoundError,
    check_tolerance,
    tail_mass_for,
)
from gaussdp.accounting._bounded_range import bounded_range_pld, realised_runs
from gaussdp.accounting.bounds import DeltaBounds, EpsilonBounds
from gaussdp.accounting.events import (
    ApproxDP,
    Composed,
    DiscreteGaussianL2,
    DiscreteGaussianVector,
    Event,
    ExponentialMechanism,
    LatticeNoise,
    PartitionSelection,
    PureDP,
    RecordedCost,
    SelfComposed,
    Subsampled,
    check_event,
    describe,
    lattice_noise,
    max_delta_bounds,
    max_epsilon_bounds,
)
from gaussdp.accounting.pld import (
    _LOSS_CAP,
    DEFAULT_TAIL_MASS,
    DEFAULT_VALUE_DISCRETIZATION,
    MAX_SUBSAMPLED_MU,
    PrivacyLossDistribution,
    _LossPMF,
    check_discrete_gaussian_support,
    check_tail_mass,
    check_value_discretization,
    subsampled_discrete_laplace_runs,
)
from gaussdp.errors import invalid
from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace, LatticeGaussian
from gaussdp.privacy import gdp_delta, gdp_epsilon, zcdp_delta, zcdp_epsilon
from gaussdp.privacy.gdp import DELTA_ROUND_UP, gdp_epsilon_lower
from gaussdp.privacy.zcdp import rdp_epsilon

__all__ = [
    "DEFAULT_RDP_ORDERS",
    "Accountant",
    "FallbackAccountant",
    "GDPAccountant",
    "PLDAccountant",
    "RDPAccountant",
    "UnsupportedEventError",
    "ZCDPAccountant",
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

# Unit round-off of float64.
_UNIT = 2.0**-53
_MAX_DL_SCALE = 3.0e4
# The largest first grid step at the default tolerance (scaled by √(τ/1e-4)), where the
# loss spread would allow a coarser one (large sampling rates, large ε). A tenth below
# the common default h = 1e-4 (dp_accounting's): the certified upper bound carries
# allowances (round-off, truncation) that an uncertified connect-the-dots PLD on the same
# step does not, about 1e-9 relative at the cap once the truncation is sized to the
# accuracy aimed at, while 0.9·h takes about a fifth off the O(h²) discretisation.
# See docs/accounting.md §1, "Choosing h".
_STEP_CAP = 9e-5


class UnsupportedEventError(ValueError):
    """An accountant cannot account for an event; the message names the sub-event and where.

    Example message: ``Subsampled(DiscreteLaplace(scale=2), sample_rate=0.05) inside
    Composed[3] is not supported by GDPAccountant``.
    """


@dataclass(slots=True)
class _Reduction:
    """What one traversal found: leaves with counts, slack and δ terms (summed up later)."""

    leaves: Counter[Event] = field(default_factory=Counter)
    slack: list[float] = field(default_factory=list)
    delta: list[float] = field(default_factory=list)


class Accountant(ABC):
    """The contract every accountant implements.

    An accountant holds the events composed so far (its history). :meth:`compose`
    adds to it and returns the accountant; queries do not change it. An event the
    accountant does not support is refused with :class:`UnsupportedEventError`
    naming the sub-event, and the state is unchanged.
    """

    #: Whether lattice noise is accounted by the smoothing argument (μ-GDP plus slack).
    _smoothing: ClassVar[bool] = True

    def __init__(self) -> None:
        self._calls: list[tuple[Event, int]] = []
        self._leaves: Counter[Event] = Counter()
        self._slack = 0.0
        self._extra_delta = 0.0

    # -- the history ------------------------------------------------------------------
    @property
    def events(self) -> tuple[tuple[Event, int], ...]:
        """The composed events (as given) and their total counts, in the order first seen."""
        totals: Counter[Event] = Counter()
        for event, count in self._calls:
            totals[event] += count
        return tuple(totals.items())

    @property
    def count(self) -> int:
        """The total number of composed runs (of the events as given)."""
        return sum(c for _, c in self._calls)

    @property
    def history(self) -> Composed:
        """Everything composed so far, in order, as one event.

        Examples
        --------
        >>> acc = GDPAccountant().compose(Gaussian(2.0), 3)
        >>> acc.history
        Composed(events=(SelfComposed(event=Gaussian(sigma=2.0, sensitivity=1.0), count=3),))
        >>> RDPAccountant().compose(acc.history).count
        1
        """
        return Composed(tuple(e if c == 1 else SelfComposed(e, c) for e, c in self._calls))

    @property
    def slack(self) -> float:
        """Total smoothing slack A of the lattice noise composed (rounded up)."""
        return self._slack

    @property
    def extra_delta(self) -> float:
        """Total δ composed outside the leaves (partition selection), rounded up."""
        return self._extra_delta

    # -- the one traversal ------------------------------------------------------------
    def supports(self, event: object) -> bool:
        """Whether :meth:`compose` accepts ``event``: the same traversal, without composing."""
        try:
            self._walk(check_event(event), 1, (), _Reduction())
        except (TypeError, ValueError):
            return False
        return True

    def compose(self, event: Event, count: int = 1) -> Self:
        """Compose ``count`` independent runs of ``event``; return the accountant.

        Raises
        ------
        TypeError
            If ``event`` is not a privacy event.
        ValueError
            If ``count`` is not an integer >= 1.
        UnsupportedEventError
            If the event (or a part of it, named in the message) is not supported.
        """
        check_event(event)
        count = check_count("count", count)
        found = _Reduction()
        self._walk(event, count, (), found)
        self._check_leaves(found.leaves)
        self._leaves.update(found.leaves)
        if found.slack:
            self._slack = add_up(self._slack, *found.slack)
        if found.delta:
            self._extra_delta = min(1.0, add_up(self._extra_delta, *found.delta))
        self._calls.append((event, count))
        self._invalidate()
        return self

    def _walk(self, event: Event, count: int, where: tuple[str, ...], out: _Reduction) -> None:
        if isinstance(event, Composed):
            for i, inner in enumerate(event.events):
                self._walk(inner, count, (*where, f"Composed[{i}]"), out)
            return
        if isinstance(event, SelfComposed):
            inner_where = (*where, f"SelfComposed(count={event.count})")
            self._walk(event.event, count * event.count, inner_where, out)
            return
        if isinstance(event, PartitionSelection):
            out.delta.append(mul_up(float(count), event.delta))
            self._walk(event.noise, count, (*where, "PartitionSelection"), out)
            return
        leaf: Event = event
        if isinstance(event, RecordedCost):
            if event.delta > 0:
                out.delta.append(mul_up(float(count), event.delta))
            if self._smoothing:
                if event.mu is None:
                    raise self._unsupported(event, where, "it has no μ-GDP certificate")
                if event.slack > 0:
                    out.slack.append(mul_up(float(count), event.slack))
                if event.mu == 0:
                    return
                leaf = Gaussian(sigma=1.0, sensitivity=event.mu)
        elif isinstance(event, (LatticeGaussian, LatticeNoise)) and self._smoothing:
            leaf = self._smoothed(event, event, count, where, out)
        elif isinstance(event, Subsampled) and isinstance(
            event.mechanism, (LatticeGaussian, LatticeNoise)
        ):
            inner = self._smoothed(event.mechanism, event, count, where, out)
            leaf = Subsampled(inner, event.sample_rate, event.scheme)
        if not self._leaf_supported(leaf):
            raise self._unsupported(event, where, self._refusal_reason(leaf))
        out.leaves[leaf] += count

    def _smoothed(
        self,
        mechanism: LatticeGaussian | LatticeNoise,
        event: Event,
        count: int,
        where: tuple[str, ...],
        out: _Reduction,
    ) -> Gaussian:
        """The Gaussian of the smoothing argument; its slack goes to ``out``."""
        noise = lattice_noise(mechanism) if isinstance(mechanism, LatticeGaussian) else mechanism
        mu = noise.mu
        if math.isinf(mu):
            raise self._unsupported(event, where, "σ² ≤ τ² = 9 gives no μ-GDP certificate")
        out.slack.append(mul_up(float(count), noise.smoothing_slack))
        # Exactly μ-GDP with μ = Δ/σ = mu (DRS Thm 2.7), mu rounded up.
        return Gaussian(sigma=1.0, sensitivity=mu)

    def _unsupported(
        self, event: Event, where: tuple[str, ...], reason: str | None = None
    ) -> UnsupportedEventError:
        inside = "".join(f" inside {w}" for w in reversed(where))
        why = f" ({reason})" if reason else ""
        return UnsupportedEventError(
            f"{describe(event)}{inside} is not supported by {type(self).__name__}{why}"
        )

    @abstractmethod
    def _leaf_supported(self, event: Event) -> bool:
        """Whether a reduced event (no structure left) is accounted by this accountant."""

    def _refusal_reason(self, event: Event) -> str | None:
        """What to tell the user about a refused leaf (``None``: nothing beyond its name)."""
        return None

    def _check_leaves(self, leaves: Counter[Event]) -> None:  # noqa: B027 - optional hook
        """Refuse, before anything is recorded, leaves (with their counts) that
        :meth:`compose` would add but the accountant cannot take (no-op by default)."""

    def _invalidate(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Drop cached results after a composition."""

    def copy(self) -> Self:
        """An independent accountant of the same kind holding the same events."""
        other = self._empty_like()
        other._calls = list(self._calls)
        other._leaves = Counter(self._leaves)
        other._slack = self._slack
        other._extra_delta = self._extra_delta
        return other

    @abstractmethod
    def _empty_like(self) -> Self: ...

    # -- queries ----------------------------------------------------------------------
    def epsilon(self, delta: float) -> EpsilonBounds:
        """Bounds on the smallest ε such that the composition is (ε, ``delta``)-DP."""
        delta = check_delta("delta", delta)
        if not self._calls:
            return EpsilonBounds(lower=0.0, upper=0.0)
        slack, extra = self._slack, self._extra_delta
        if slack == 0.0 and extra == 0.0:
            return self._base_epsilon(delta) if self._leaves else _ZERO_EPS
        remaining = down(delta - extra) if extra > 0 else delta
        if remaining <= 0.0:
            return EpsilonBounds(lower=0.0, upper=math.inf)
        shrunk = down(remaining * down(math.exp(-slack))) if slack > 0 else remaining
        if shrunk <= 0.0:
            return EpsilonBounds(lower=0.0, upper=math.inf)
        base = self._base_epsilon(shrunk) if self._leaves else _ZERO_EPS
        upper = up(base.upper + 2 * slack) if slack > 0 else base.upper
        if extra > 0 or not self._leaves:
            lower = 0.0  # the δ-close mechanism may be more private than the leaves
        else:
            # P within e^{±A} of P′: ε_P(δ) ≥ ε_P′(δe^A) − 2A.
            grown = min(up(delta * up(math.exp(slack))), down(1.0))
            lower = max(0.0, down(self._base_epsilon(grown).lower - 2 * slack))
        return EpsilonBounds(
            lower=min(lower, upper), upper=upper, method=base.method, note=base.note
        )

    def delta(self, epsilon: float) -> DeltaBounds:
        """Bounds on the smallest δ such that the composition is (``epsilon``, δ)-DP."""
        epsilon = check_epsilon("epsilon", epsilon)
        if not self._calls:
            return DeltaBounds(lower=0.0, upper=0.0)
        slack, extra = self._slack, self._extra_delta
        if slack == 0.0 and extra == 0.0:
            return self._base_delta(epsilon) if self._leaves else _ZERO_DELTA
        shifted = max(0.0, down(epsilon - 2 * slack)) if slack > 0 else epsilon
        base = self._base_delta(shifted) if self._leaves else _ZERO_DELTA
        grown = up(base.upper * up(math.exp(slack))) if slack > 0 else base.upper
        upper = min(1.0, add_up(grown, extra) if extra > 0 else grown)
        if extra > 0 or not self._leaves:
            lower = 0.0
        else:
            at = self._base_delta(up(epsilon + 2 * slack)).lower
            lower = down(at * down(math.exp(-slack)))
        return DeltaBounds(
            lower=max(0.0, min(lower, upper)), upper=upper, method=base.method, note=base.note
        )

    @abstractmethod
    def _base_epsilon(self, delta: float) -> EpsilonBounds:
        """Bounds on ε of the composed leaves alone (non-empty)."""

    @abstractmethod
    def _base_delta(self, epsilon: float) -> DeltaBounds:
        """Bounds on δ of the composed leaves alone (non-empty)."""


_ZERO_EPS = EpsilonBounds(lower=0.0, upper=0.0)
_B = TypeVar("_B", EpsilonBounds, DeltaBounds)
_ZERO_DELTA = DeltaBounds(lower=0.0, upper=0.0)


def _gaussian_mu(leaves: Counter[Event]) -> float:
    """√Σ cᵢμᵢ² over Gaussian leaves (DRS Cor 3.3), rounded up."""
    squares = []
    for event, count in leaves.items():
        assert isinstance(event, Gaussian)
        squares.append(mul_up(float(count), mul_up(event.mu, event.mu)))
    total = add_up(*squares)
    return math.inf if math.isinf(total) else sqrt_up(Fraction(total))


def _gaussian_mu_floor(leaves: Counter[Event]) -> float:
    """A lower bound on √Σ cᵢμᵢ²: the largest μᵢ, two ulps down (μᵢ = Δᵢ/σᵢ is rounded
    to nearest). Finite where :func:`_gaussian_mu` overflows, so that the lower bounds
    of an overflowing composition still say something (ε and δ grow with μ)."""
    largest = max((e.mu for e in leaves if isinstance(e, Gaussian)), default=0.0)
    return max(0.0, math.nextafter(math.nextafter(largest, 0.0), 0.0))


# --------------------------------------------------------------------------------------
class FallbackAccountant(Accountant):
    r"""The first of several accountants that can account for the whole history.

    Every member composes every event it supports; a member that cannot account
    for one event drops out (its bound would miss that event). Queries are
    answered by the first remaining member. An event no remaining member supports
    is refused and nothing changes. This is how an (ε, δ) budget is checked: by
    the PLD accountant, and by zCDP once an event is known only by its ρ
    (:class:`RecordedCost` without μ: a migrated format-1 entry, a run certified in
    ρ only).

    Examples
    --------
    >>> acc = FallbackAccountant([PLDAccountant(), ZCDPAccountant()])
    >>> acc.compose(Gaussian(2.0))
    FallbackAccountant(PLDAccountant, ZCDPAccountant)
    >>> acc.compose(RecordedCost(rho=0.1, mu=None, slack=0, delta=0))
    FallbackAccountant(ZCDPAccountant)
    >>> acc.epsilon(1e-6) == ZCDPAccountant().compose(acc.history).epsilon(1e-6)
    True
    """

    def __init__(self, accountants: Sequence[Accountant]) -> None:
        super().__init__()
        if not accountants or not all(isinstance(a, Accountant) for a in accountants):
            raise TypeError(
                invalid("accountants", "a non-empty sequence of accountants", accountants)
            )
        self._members = list(accountants)
        self._valid = [True] * len(self._members)

    def __repr__(self) -> str:
        names = ", ".join(type(m).__name__ for m in self._live())
        return f"FallbackAccountant({names})"

    def _live(self) -> list[Accountant]:
        return [m for m, ok in zip(self._members, self._valid, strict=True) if ok]

    def _leaf_supported(self, event: Event) -> bool:  # pragma: no cover - not used
        return False

    def supports(self, event: object) -> bool:
        return any(m.supports(event) for m in self._live())

    def compose(self, event: Event, count: int = 1) -> Self:
        check_event(event)
        count = check_count("count", count)
        ok = [
            valid and m.supports(event) for m, valid in zip(self._members, self._valid, strict=True)
        ]
        if not any(ok):
            self._live()[0].copy().compose(event, count)  # raises its UnsupportedEventError
        for member, take in zip(self._members, ok, strict=True):
            if take:  # every member's refusal before any member records the event
                found = _Reduction()
                member._walk(event, count, (), found)
                member._check_leaves(found.leaves)
        for member, take in zip(self._members, ok, strict=True):
            if take:
                member.compose(event, count)
        self._valid = ok
        self._calls.append((event, count))
        return self

    def copy(self) -> Self:
        other = type(self)([m.copy() for m in self._members])
        other._valid = list(self._valid)
        other._calls = list(self._calls)
        return other

    def _empty_like(self) -> Self:  # pragma: no cover - copy() is overridden
        return type(self)([m._empty_like() for m in self._members])

    @property
    def slack(self) -> float:
        return self._live()[0].slack

    @property
    def extra_delta(self) -> float:
        return self._live()[0].extra_delta

    @property
    def active(self) -> Accountant:
        """The member that answers: the first that accounts for the whole history."""
        return self._live()[0]

    def epsilon(self, delta: float) -> EpsilonBounds:
        return self._answer(lambda member: member.epsilon(delta))

    def delta(self, epsilon: float) -> DeltaBounds:
        return self._answer(lambda member: member.delta(epsilon))

    def _answer(self, query: Callable[[Accountant], _B]) -> _B:
        """The first remaining member's answer; where its grid cannot fit the memory
        bound (a PLD of a huge count: :class:`~gaussdp.accounting._adaptive.MemoryBoundError`),
        the next one's, labelled (every member's bound is certified for the whole
        history). Raises the first member's error if none can answer."""
        failed: MemoryBoundError | None = None
        for member in self._live():
            try:
                bounds = query(member)
            except MemoryBoundError as error:
                failed = failed or error
                continue
            if failed is None:
                return bounds
            why = f"the PLD does not fit the memory bound; the {type(member).__name__} bound"
            note = f"{why}; {bounds.note}" if bounds.note else why
            return replace(bounds, note=note)
        raise cast(MemoryBoundError, failed)  # every live member failed (there is one)

    def _base_epsilon(self, delta: float) -> EpsilonBounds:  # pragma: no cover - not used
        return self.epsilon(delta)

    def _base_delta(self, epsilon: float) -> DeltaBounds:  # pragma: no cover - not used
        return self.delta(epsilon)


# --------------------------------------------------------------------------------------
class GDPAccountant(Accountant):
    r"""Exact accounting of Gaussian mechanisms by μ-GDP: μ = √Σ μᵢ² (DRS Cor 3.3).

    Only Gaussian noise is accepted (:class:`~gaussdp.mechanisms.Gaussian`, and
    lattice noise through its smoothing argument, whose slack is added to ε):
    anything else would need the central limit theorem, which is an approximation
    and can under-report ε (Opacus's GDP accountant does, on DP-SGD). Results for
    plain Gaussians are exact: ``lower`` and ``upper`` bracket the exact ε (DRS
    Cor 2.13) within about 1e-10 relative.

    Examples
    --------
    >>> acc = GDPAccountant().compose(Gaussian(sigma=2.0), count=4)
    >>> acc.mu
    1.0
    >>> round(acc.epsilon(1e-5).upper, 4)
    4.3772
    """

    @property
    def mu(self) -> float:
        """The μ of the composition (rounded up; lattice noise up to :attr:`slack`)."""
        return _gaussian_mu(self._leaves) if self._leaves else 0.0

    def _leaf_supported(self, event: Event) -> bool:
        return isinstance(event, Gaussian)

    def _empty_like(self) -> Self:
        return type(self)()

    def _base_epsilon(self, delta: float) -> EpsilonBounds:
        return _gdp_epsilon_bounds(self.mu, delta, "gdp", mu_floor=_gaussian_mu_floor(self._leaves))

    def _base_delta(self, epsilon: float) -> DeltaBounds:
        return _gdp_delta_bounds(self.mu, epsilon, "gdp", mu_floor=_gaussian_mu_floor(self._leaves))


def _gdp_epsilon_bounds(
    mu: float, delta: float, method: str = "", mu_floor: float = 0.0
) -> EpsilonBounds:
    """ε of μ-GDP at ``delta`` (DRS Cor 2.13): the exact ε, bracketed within about
    1e-10 relative (:func:`gdp_epsilon` rounds it up, :func:`gdp_epsilon_lower` down).

    Where μ overflowed, ``mu_floor`` (a finite lower bound on μ) gives the lower bound.
    """
    if math.isinf(mu):  # Σμᵢ² past the float range: no finite upper bound
        lower = gdp_epsilon_lower(mu_floor, delta) if mu_floor > 0 else 0.0
        return EpsilonBounds(lower=lower, upper=math.inf, method=method)
    upper = gdp_epsilon(mu, delta)
    lower = min(gdp_epsilon_lower(mu, delta), upper)
    return EpsilonBounds(lower=lower, upper=upper, method=method)


def _gdp_delta_bounds(
    mu: float, epsilon: float, method: str = "", mu_floor: float = 0.0
) -> DeltaBounds:
    """δ of μ-GDP at ``epsilon`` (DRS Cor 2.13), bracketed within about 1e-11 relative.

    :func:`gdp_delta` is rounded up by ``DELTA_ROUND_UP`` (10x its measured evaluation
    error), so it is the upper bound and twice that margin below it is the lower one
    (:func:`_gdp_delta_lower`). Where μ overflowed, ``mu_floor`` (a finite lower bound
    on μ) gives the lower bound.
    """
    if math.isinf(mu):
        lower = _gdp_delta_lower(gdp_delta(mu_floor, epsilon)) if mu_floor else 0.0
        return DeltaBounds(lower=lower, upper=1.0, method=method)
    d = gdp_delta(mu, epsilon)
    return DeltaBounds(lower=_gdp_delta_lower(d), upper=d, method=method)


def _gdp_delta_lower(d: float) -> float:
    """A lower bound on the exact δ whose rounded-up value :func:`gdp_delta` gave as ``d``.

    Among normal floats, ``d·(1 − 2·DELTA_ROUND_UP)``. Among subnormals the rounding of
    exp, of the product by 1 + DELTA_ROUND_UP and the step up move ``d`` by up to two
    units of 5e-324 above the exact δ (each rounding is absolute there, not relative),
    so three units come off first, and the product is rounded down: 0 where ``d`` is
    the smallest subnormal, which :func:`gdp_delta` returns for any δ below it, down to
    10^(−3e306) (the lower bound must not exceed such a δ)."""
    if d >= sys.float_info.min:
        return d * (1.0 - 2.0 * DELTA_ROUND_UP)
    return max(0.0, math.nextafter((d - 3 * math.ulp(0.0)) * (1.0 - 2.0 * DELTA_ROUND_UP), 0.0))


# --------------------------------------------------------------------------------------
class ZCDPAccountant(Accountant):
    r"""ρ-zCDP accounting: ρ's add (Bun & Steinke 2016 Lemma 2.3); ε at δ by CKS Cor 13.

    Accepts every event with a ρ-zCDP guarantee: Gaussian (ρ = Δ²/(2σ²)), discrete
    Gaussian noise of every kind, lattice noise (exact, CKS Thm 14), and pure ε-DP
    steps (ε²/2, Bun & Steinke 2016 Prop 1.4), ε-bounded-range steps
    (:class:`ExponentialMechanism`, ε²/8, Cesar & Rogers 2021); partition selection's δ is carried
    on top (approximate zCDP, Lemma 8.3). Subsampling is refused (zCDP does not
    amplify). ``lower`` is always 0.

    Examples
    --------
    >>> acc = ZCDPAccountant().compose(Gaussian(sigma=2.0), count=4)
    >>> acc.rho
    0.5
    """

    _smoothing: ClassVar[bool] = False

    @property
    def rho(self) -> float:
        """Σ cᵢρᵢ (rounded up)."""
        if not self._leaves:
            return 0.0
        return add_up(*(mul_up(float(c), _event_rho(e)) for e, c in self._leaves.items()))

    def _leaf_supported(self, event: Event) -> bool:
        return isinstance(event, _RHO_TYPES)

    def _empty_like(self) -> Self:
        return type(self)()

    def _base_epsilon(self, delta: float) -> EpsilonBounds:
        rho = self.rho  # ∞ past the float range: no finite guarantee
        upper = math.inf if math.isinf(rho) else zcdp_epsilon(rho, delta)  # CKS Cor 13
        return EpsilonBounds(lower=0.0, upper=upper, method="zcdp")

    def _base_delta(self, epsilon: float) -> DeltaBounds:
        rho = self.rho
        upper = 1.0 if math.isinf(rho) else zcdp_delta(rho, epsilon)  # CKS Cor 13
        return DeltaBounds(lower=0.0, upper=upper, method="zcdp")


_RHO_TYPES: tuple[type, ...] = (
    Gaussian,
    DiscreteGaussian,
    DiscreteLaplace,
    Laplace,
    DiscreteGaussianVector,
    DiscreteGaussianL2,
    LatticeGaussian,
    LatticeNoise,
    PureDP,
    ExponentialMechanism,
    RecordedCost,
)


def _event_rho(event: Event) -> float:
    """ρ of one run of a leaf with a ρ-zCDP guarantee, rounded up."""
    if isinstance(event, Gaussian):
        # Δ²/(2σ²) (Bun & Steinke 2016 Prop 1.6), from μ rounded up.
        return up(mul_up(event.mu, event.mu) / 2)
    return up(float(event.rho))  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------
class RDPAccountant(Accountant):
    r"""Rényi DP accounting: fast, an upper bound only, looser than PLD.

    RDP curves add under composition; the conversion to (ε, δ) is CKS Prop 12
    minimised over the orders. The Poisson-subsampled Gaussian uses the integer-order
    binomial expansion of Mironov et al. 2019 (valid for both neighbouring
    directions); other Poisson-subsampled mechanisms the general bound of Zhu & Wang
    2019 (Thm 6), and sampling without replacement (replace-one neighbours) that of
    Wang, Balle & Kasiviswanath 2019 (Thm 9), both at integer orders from the
    mechanism's RDP curve. ``lower`` is always 0: RDP gives no lower bound.

    Parameters
    ----------
    orders : sequence of float, optional
        Rényi orders α > 1; default :data:`DEFAULT_RDP_ORDERS`.

    Examples
    --------
    >>> acc = RDPAccountant().compose(Subsampled(Gaussian(1.1), 256 / 60000), 14063)
    >>> round(acc.epsilon(1e-5).upper, 2)
    2.6
    """

    _smoothing: ClassVar[bool] = False

    def __init__(self, orders: Sequence[float] | None = None) -> None:
        super().__init__()
        constraint = "a non-empty sequence of finite reals > 1"
        if orders is None:
            chosen = DEFAULT_RDP_ORDERS
        elif isinstance(orders, str) or not isinstance(orders, Iterable):
            raise TypeError(invalid("orders", constraint, orders))
        else:
            try:
                chosen = tuple(check_finite("orders", a) for a in orders)
            except TypeError:  # an element is not a real number (None, a string)
                raise TypeError(invalid("orders", constraint, orders)) from None
            except ValueError:  # NaN, an infinity or an int beyond the float range
                raise ValueError(invalid("orders", constraint, orders)) from None
        if not chosen or any(a <= 1 for a in chosen):
            raise ValueError(invalid("orders", constraint, orders))
        self._orders = np.asarray(chosen, dtype=np.float64)

    @property
    def orders(self) -> tuple[float, ...]:
        """The Rényi orders used."""
        return tuple(float(a) for a in self._orders)

    def _leaf_supported(self, event: Event) -> bool:
        if isinstance(event, Subsampled):
            # Any base with an RDP curve at integer orders: Mironov et al. 2019 for the
            # Poisson Gaussian, Zhu & Wang 2019 Thm 6 for other Poisson-subsampled
            # mechanisms, Wang, Balle & Kasiviswanath 2019 Thm 9 without replacement.
            return isinstance(event.mechanism, _RHO_TYPES)
        return isinstance(event, _RHO_TYPES)

    def _empty_like(self) -> Self:
        return type(self)(self.orders)

    def supports(self, event: object) -> bool:
        """As :meth:`Accountant.supports`, also refusing a mix of neighbouring relations."""
        if not super().supports(event):
            return False
        try:
            self._check_one_relation(cast(Event, event))
        except ValueError:
            return False
        return True

    def compose(self, event: Event, count: int = 1) -> Self:
        """As :meth:`Accountant.compose`; refuses to mix neighbouring relations.

        RDP curves add up only under one neighbouring relation. Poisson subsampling
        is stated for add/remove neighbours, sampling without replacement for
        replace-one neighbours, and an add/remove bound does not bound replace-one
        (that takes group privacy), so a history holding both is refused.
        """
        self._check_one_relation(check_event(event))
        return super().compose(event, count)

    def _check_one_relation(self, event: Event) -> None:
        found = _Reduction()
        self._walk(event, 1, (), found)
        relations = {
            leaf.neighbours
            for leaf in (*self._leaves, *found.leaves)
            if isinstance(leaf, Subsampled) and leaf.sample_rate < 1.0
        }
        if len(relations) > 1:
            raise self._unsupported(
                event,
                (),
                "it mixes add/remove and replace-one neighbours: RDP only composes "
                "events stated for one relation",
            )

    def rdp(self) -> npt.NDArray[np.float64]:
        """The composed RDP curve of the leaves at :attr:`orders`."""
        total = np.zeros_like(self._orders)
        for event, count in self._leaves.items():
            total += count * _event_rdp(event, self._orders)
        return total

    def _base_epsilon(self, delta: float) -> EpsilonBounds:
        eps = rdp_epsilon(self._orders, self.rdp(), delta)  # CKS Prop 12
        return EpsilonBounds(lower=0.0, upper=eps, method="rdp")

    def _base_delta(self, epsilon: float) -> DeltaBounds:
        a = self._orders
        tau = self.rdp()
        # CKS Prop 12: δ = e^{(α−1)(τ−ε)}/α · (1 − 1/α)^{α−1}.
        # A huge ε overflows (α−1)(τ−ε) to −inf (δ below every float: rounded up
        # below); an overflow to +inf gives δ = 1.
        with np.errstate(invalid="ignore", over="ignore"):
            log_d = (a - 1) * (tau - epsilon) - np.log(a) + (a - 1) * np.log1p(-1 / a)
        log_d = np.where(np.isfinite(tau), log_d, np.inf)
        best = float(np.min(log_d))
        # exp and the sum above are accurate to a few ulps: 1e-12 relative covers them;
        # below e^{-708} exp's result is subnormal (or 0) and errs by up to one subnormal
        # unit, so two are added: a positive δ never comes back as 0.
        d = 1.0 if best >= 0 else min(1.0, math.exp(best) * (1 + 1e-12))
        if best < -708.0:
            d += 2 * math.ulp(0.0)
        return DeltaBounds(lower=0.0, upper=d, method="rdp")


def _event_rdp(event: Event, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """RDP of one run of ``event`` at each order."""
    if isinstance(event, Subsampled):
        mech = event.mechanism
        if event.sample_rate == 1.0:  # the whole dataset: the mechanism itself
            return _event_rdp(mech, orders)
        if event.scheme == "poisson" and isinstance(mech, Gaussian):
            sigma = mech.sigma / mech.sensitivity
            return _subsampled_gaussian_rdp(event.sample_rate, sigma, orders)
        return _subsampled_rdp(event, orders)
    if isinstance(event, Laplace):
        # Mironov 2017 Prop 6: Laplace RDP, b = scale/Δ.
        e0 = event.pure_epsilon
        a = orders
        t1 = np.log(a / (2 * a - 1)) + (a - 1) * e0
        t2 = np.log((a - 1) / (2 * a - 1)) - a * e0
        # The log-sum cancels to ≈ 0 at small e0: add its absolute round-off (a few ulps
        # of the terms) and never go above αε²/2 (pure ε-DP ⇒ ε²/2-zCDP, Bun & Steinke
        # 2016 Prop 1.4), which stays positive where the log-sum is lost in round-off.
        err = 8 * _UNIT * (np.abs(t1) + np.abs(t2) + 1.0)
        val = (np.logaddexp(t1, t2) + err) / (a - 1)
        return np.minimum(np.minimum(val, a * (mul_up(e0, e0) / 2)), e0)
    if isinstance(event, PureDP):
        # Pure ε-DP: D_α ≤ D_∞ = ε, and ε²/2-zCDP (Bun & Steinke 2016 Prop 1.4).
        return np.minimum(orders * event.rho, event.epsilon)
    if isinstance(event, ExponentialMechanism):
        # ε-BR: ε-DP, so D_α ≤ D_∞ = ε; and ε²/8-zCDP, D_α ≤ αε²/8 (Cesar & Rogers 2021, §3).
        return np.minimum(orders * event.rho, event.epsilon)
    if isinstance(event, DiscreteLaplace):
        return np.asarray([event.rdp(float(a)) for a in orders], dtype=np.float64)
    # Gaussian (Mironov 2017 Prop 7); discrete Gaussian noise of every kind, lattice noise
    # and recorded costs by their ρ-zCDP (CKS Thm 4, Thm 14).
    return orders * _event_rho(event)


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
    if sigma * sigma == 0.0:  # σ² underflows: every RDP ≥ α/(2σ²) exceeds the float range
        return out
    for i, a in enumerate(orders):
        if not float(a).is_integer():
            continue
        alpha = int(a)
        if q == 1.0:
            out[i] = alpha / (2 * sigma * sigma)  # 0, not OverflowError, past σ = 1e154
            continue
        k = np.arange(alpha + 1, dtype=np.float64)
        log_binom = gammaln(alpha + 1) - gammaln(k + 1) - gammaln(alpha - k + 1)
        terms = (
            log_binom
            + (alpha - k) * math.log1p(-q)
            + k * math.log(q)
            + (k * k - k) / (2 * sigma * sigma)
        )
        out[i] = max(0.0, _log_sum_up(terms) / (alpha - 1))
    return out


def _subsampled_rdp(event: Subsampled, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    r"""RDP of a subsampled mechanism at integer orders, from the mechanism's RDP curve.

    With ε(j) the mechanism's RDP at order j, γ the rate and α ≥ 2 an integer:

    * Poisson (add/remove neighbours, both directions), Zhu & Wang 2019 Thm 6:
      (α − 1)ε′(α) ≤ ln[(1 − γ)^{α−1}(αγ − γ + 1) + C(α, 2)γ²(1 − γ)^{α−2}e^{ε(2)}
      + 3 Σ_{j=3}^{α} C(α, j)(1 − γ)^{α−j}γ^j e^{(j−1)ε(j)}];
    * without replacement (replace-one neighbours; ε(j) for replace-one), Wang, Balle
      & Kasiviswanath 2019 Thm 9: (α − 1)ε′(α) ≤ ln[1 + γ²C(α, 2)
      min(4(e^{ε(2)} − 1), e^{ε(2)} min(2, (e^{ε(∞)} − 1)²))
      + Σ_{j=3}^{α} γ^j C(α, j) e^{(j−1)ε(j)} min(2, (e^{ε(∞)} − 1)^j)],
      ε(∞) the mechanism's pure ε (∞ unless it is a Laplace mechanism).

    Non-integer orders get ``inf``.
    """
    q = event.sample_rate
    mech = event.mechanism
    integer = np.asarray([float(a).is_integer() for a in orders])
    out = np.full(orders.shape, np.inf)
    if not integer.any():
        return out
    top = int(orders[integer].max())
    eps_j = np.zeros(top + 1)
    eps_j[2:] = _event_rdp(mech, np.arange(2, top + 1, dtype=np.float64))
    log_q, log_1mq = math.log(q), math.log1p(-q)
    pure = getattr(mech, "pure_epsilon", math.inf)
    # ln min(2, (e^{ε(∞)} − 1)^j) for j = 0..top (WBK Thm 9).
    j_all = np.arange(top + 1, dtype=np.float64)
    log_cap = np.full(top + 1, math.log(2.0))
    if pure < 700:
        log_cap = np.minimum(log_cap, j_all * math.log(math.expm1(pure)))
    for i, a in enumerate(orders):
        if not integer[i]:
            continue
        alpha = int(a)
        j = j_all[: alpha + 1]
        log_binom = gammaln(alpha + 1) - gammaln(j + 1) - gammaln(alpha - j + 1)
        e2 = float(eps_j[2])
        if event.scheme == "poisson":
            # Zhu & Wang 2019 Thm 6.
            head = [
                (alpha - 1) * log_1mq + math.log(alpha * q - q + 1),
                float(log_binom[2]) + 2 * log_q + (alpha - 2) * log_1mq + e2,
            ]
            rest = (
                math.log(3.0)
                + log_binom[3:]
                + (alpha - j[3:]) * log_1mq
                + j[3:] * log_q
                + (j[3:] - 1) * eps_j[3 : alpha + 1]
            )
        else:
            # Wang, Balle & Kasiviswanath 2019 Thm 9.
            log_4expm1 = math.log(4.0) + (math.log(math.expm1(e2)) if e2 < 700 else e2)
            second = min(log_4expm1, e2 + float(log_cap[2]))
            head = [0.0, float(log_binom[2]) + 2 * log_q + second]
            rest = (
                j[3:] * log_q
                + log_binom[3:]
                + (j[3:] - 1) * eps_j[3 : alpha + 1]
                + log_cap[3 : alpha + 1]
            )
        terms = np.concatenate((head, rest))
        out[i] = max(0.0, _log_sum_up(terms) / (alpha - 1))
    return out


def _log_sum_up(terms: npt.NDArray[np.float64]) -> float:
    """A float ≥ ln Σ e^{t_i} for exponents t_i computed in floating point.

    Each t_i is a sum of a few correctly rounded terms, off by at most 8u(1 + |t_i|)
    (u = 2⁻⁵³), and logsumexp's own sum of n terms by n·u relative: the log-sum moves by
    at most 64u(n + max|t_i|), which is added, and the result rounded up.
    """
    finite = terms[np.isfinite(terms)]
    total = float(logsumexp(terms))
    if not math.isfinite(total) or finite.size == 0:
        return total
    return up(total + 64 * _UNIT * (terms.size + float(np.max(np.abs(finite)))))


# --------------------------------------------------------------------------------------
class PLDAccountant(Accountant):
    r"""Privacy loss distribution accounting with certified upper and lower bounds.

    Each distinct leaf is discretised once, self-composed by powering its Fourier
    transform, and the results are convolved (see :mod:`gaussdp.accounting.pld` and
    ``docs/accounting.md``). ``epsilon(delta).upper`` is certified; ``.lower`` says
    how tight it is. If every leaf is a Gaussian (lattice noise included, through
    its smoothing argument) the composition is accounted exactly by μ = √Σμᵢ²
    (DRS Cor 3.3). :class:`PureDP` and :class:`ApproxDP` steps are composed through
    their worst-case pairs (Kairouz, Oh & Viswanath 2015 Thm 2.1), which gives the
    optimal composition (KOV Thm 3.3) up to the grid; an :class:`ExponentialMechanism`
    (ε-bounded-range) as the pure ε-DP step it also is.

    Parameters
    ----------
    value_discretization : float, optional
        Grid step h of the privacy loss, in nats. Default: chosen by ``tolerance``
        (from the loss spread of one run, pooled over the runs of distinct events,
        refined while the bracket is wider than the tolerance unless a bounded-range
        step makes it wide, within the memory bound; see ``docs/accounting.md``). Given
        explicitly, it is used as is (refused if its grid cannot fit in memory).
    tolerance : float, default 1e-4
        Relative accuracy asked for ε's upper bound. Where the PLD cannot certify a
        bound within it (its round-off allowance exceeds δ), the RDP bound is returned
        when tighter, labelled ``method="rdp"``. A tolerance given explicitly that the
        grid cannot meet within the memory bound (``MAX_GRID_POINTS`` points) is refused
        at the query with the tolerance that would fit; with the default tolerance the
        grid is coarsened to fit instead and the result's ``note`` says so (the bound is
        still certified, only looser: a default must not make a query fail).
    exact_gaussian : bool, default True
        Use the exact μ-GDP formula when every leaf is a Gaussian.
    tail_mass : float, optional
        Bound on the probability mass moved by each truncation or wrap-around (on the
        upper side it goes to +∞ or is added to δ, so the upper bound stays certified
        whatever it is). Default: chosen per query from δ and ``tolerance``, so that all
        truncations together move at most τ·δ (within [1e-15, 1e-10] per
        operation; 1e-15 for ``delta(epsilon)``, whose δ is not known in advance, and
        for :meth:`pld` on a fresh accountant; see ``docs/accounting.md`` §2).

    Notes
    -----
    A query asked again, with the same argument and no event composed since, gets
    the same answer: the first one, kept (per argument, until the next composition).
    Without that, an answer would depend on how often it was asked, since each query
    may refine the grid, and a budget check that remembers one answer for a history
    (:class:`~gaussdp.accounting.filter.SpentMemo`) would disagree with another check
    of it (``docs/accounting.md`` §5). Every answer is a certified bracket, so the
    first is as sound as a later one would be (which could differ from it in its last
    digits, either way).

    The accountant keeps the grid its queries built (the finest step kept, the smallest
    tail mass, extended precision), so a query at a new argument can differ slightly
    from the same query on a fresh accountant (measured: 2–4e-7 relative in ε, tighter);
    both answers are certified and within the tolerance. For answers that depend only
    on the events, query a copy (``acc.copy().epsilon(delta)``: a copy holds no grid and
    no answers), at the cost of rebuilding it (``docs/accounting.md`` §5, "Query order").

    Examples
    --------
    >>> acc = PLDAccountant()
    >>> acc.compose(Subsampled(Gaussian(sigma=1.1), sample_rate=256 / 60000), count=14063)
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
        tail_mass: float | None = None,
        tolerance: float | None = None,
    ) -> None:
        super().__init__()
        if value_discretization is not None:
            value_discretization = check_value_discretization(value_discretization)
        self._h = value_discretization
        # Stated by the user: refused rather than silently not met (see _check_met).
        self._tolerance_given = tolerance is not None
        self._tolerance = check_tolerance(DEFAULT_TOLERANCE if tolerance is None else tolerance)
        self._adaptive: AdaptivePLD | None = None
        # The tail mass the current grid (``_adaptive``) is built with, at steps up to
        # ``_coarse_above``; above it (coarsened to fit the memory bound), one sized to
        # the step (at least ``_coarse_step``) for a query at ``_coarse_delta``.
        self._adaptive_tail = DEFAULT_TAIL_MASS
        self._coarse_above = math.inf
        self._coarse_step = 0.0
        self._coarse_delta = 0.0
        self._exact_gaussian = bool(exact_gaussian)
        self._tail_mass = None if tail_mass is None else check_tail_mass(tail_mass)
        self._single_cache: list[PrivacyLossDistribution] | None = None
        # One run's PLD of a single event on the last grid built: a rebuild on the same
        # grid (in extended precision) does not discretise it again. (Not kept for many
        # events: their one-run PLDs together could take a lot of memory.)
        self._run_cache: dict[tuple[Event, float, float, bool], PrivacyLossDistribution] = {}
        # Every answer given for the current history, per argument (see Notes).
        self._epsilons: dict[float, EpsilonBounds] = {}
        self._deltas: dict[float, DeltaBounds] = {}

    def __repr__(self) -> str:
        return f"PLDAccountant(events={len(self.events)}, count={self.count})"

    def _empty_like(self) -> Self:
        return type(self)(
            value_discretization=self._h,
            exact_gaussian=self._exact_gaussian,
            tail_mass=self._tail_mass,
            tolerance=self._tolerance if self._tolerance_given else None,
        )

    def _check_leaves(self, leaves: Counter[Event]) -> None:
        """With an explicit ``tail_mass``, refuse a subsampled event of more runs in all
        than it can be shared between: each run's truncation may move tail_mass/runs,
        which must not be 0."""
        if self._tail_mass is not None:
            for leaf, runs in leaves.items():
                if _subsampled(leaf):
                    _check_tail_share(self._tail_mass, self._leaves[leaf] + runs)

    def _invalidate(self) -> None:
        self._adaptive = None
        self._single_cache = None
        self._run_cache = {}
        self._epsilons = {}
        self._deltas = {}

    def _leaf_supported(self, event: Event) -> bool:
        if isinstance(event, Subsampled):
            if _mu_too_large(event.mechanism):
                return False
            return event.scheme == "poisson" and self._leaf_supported(event.mechanism)
        if isinstance(event, (DiscreteGaussian, DiscreteGaussianVector, DiscreteGaussianL2)):
            return _discrete_gaussian_refusal(event) is None
        if isinstance(event, DiscreteLaplace):
            return float(event.scale) <= _MAX_DL_SCALE
        return isinstance(event, (Gaussian, Laplace, PureDP, ApproxDP, ExponentialMechanism))

    def _refusal_reason(self, event: Event) -> str | None:
        if isinstance(event, Subsampled) and _mu_too_large(event.mechanism):
            return f"sensitivity/sigma above {MAX_SUBSAMPLED_MU:g}; use RDPAccountant"
        if isinstance(event, Subsampled) and event.scheme == "without_replacement":
            return (
                "no proven PLD for sampling without replacement; use RDPAccountant "
                "(Wang, Balle & Kasiviswanath 2019 Thm 9)"
            )
        mechanism = event.mechanism if isinstance(event, Subsampled) else event
        if isinstance(mechanism, (DiscreteGaussian, DiscreteGaussianVector, DiscreteGaussianL2)):
            return _discrete_gaussian_refusal(mechanism)
        return None

    @property
    def value_discretization(self) -> float:
        """The grid step h of the current composition (the finest kept so far)."""
        if self._h is not None:
            return self._h
        if self._adaptive is not None:
            return self._adaptive.value_discretization
        return self._first_step()[0]

    def _first_step(self) -> tuple[float, float]:
        """The first grid step h and the relative accuracy in ε it aims at.

        The connect-the-dots upper bound inflates each run's loss variance by at most
        h²/4, a relative error of about (h/s)²/8 in ε (s the spread of one run's loss):
        h = 1.6√τ·s aims at τ. (1.6 rather than 2: the bracket must be within τ, and at
        2 the sweep's first brackets were 1.1–1.5τ wide, asking for a second, finer
        grid.) Where the loss is wide (large q) that step is capped at
        :data:`_STEP_CAP`·√(τ/1e-4), and the grid then aims at the finer accuracy
        τ·(h/(1.6√τ·s))² of the same model: the truncations are sized to it
        (:meth:`_tail_for`), so that they do not dominate its error. Refined per query
        (see _adaptive)."""
        tol = self._tolerance
        if len(self._leaves) > 1:
            # Several distinct events aim at τ: their lattice parts, moved to h, add an
            # O(h) error that the variance model does not cover.
            return _pooled_step(self._leaves, tol), tol
        cap = min((_step_cap(event) for event in self._leaves), default=_STEP_CAP)
        cap *= math.sqrt(tol / DEFAULT_TOLERANCE)
        h = self._snap(max(min(cap, self._free_step()), MIN_STEP))
        return h, self._aim(h)

    def _free_step(self) -> float:
        """The step 1.6√τ·s that aims at τ (s: one run's loss spread; one event)."""
        spread = min((_loss_spread(event) for event in self._leaves), default=math.inf)
        return max(1.6 * math.sqrt(self._tolerance) * spread, MIN_STEP)

    def _aim(self, h: float) -> float:
        """The relative accuracy in ε a grid of step ``h`` aims at (see _first_step)."""
        if len(self._leaves) > 1:
            return self._tolerance
        return self._tolerance * min(1.0, (h / self._free_step()) ** 2)

    def _snap(self, h: float) -> float:
        """A lattice PLD (discrete Laplace, discrete Gaussian) alone is put on its own
        lattice: both bounds are then exact, on the fewest points (the FFT round-off
        allowance grows with the number of points). A Laplace mechanism alone gets a
        step at most ``h`` that divides its ε₀ (:func:`_atoms_on_grid`)."""
        if len(self._leaves) == 1:
            (event,) = self._leaves
            lattice = _lattice_grid(event)
            if lattice is not None:
                return lattice
            if isinstance(event, Laplace):
                return _atoms_on_grid(event.pure_epsilon, h)
        return h

    @property
    def is_exact(self) -> bool:
        """True when the leaves are accounted exactly (Gaussians only)."""
        return self._exact_gaussian and all(isinstance(e, Gaussian) for e in self._leaves)

    def pld(self) -> PrivacyLossDistribution:
        """The composed privacy loss distribution on the current grid (cached)."""
        if not self._leaves:
            raise ValueError(invalid("accountant", "non-empty to build a PLD", self))
        built = self._grid(None).pld()
        if not isinstance(built, PrivacyLossDistribution):  # pragma: no cover
            raise TypeError(invalid("pld", "a PrivacyLossDistribution", built))
        return built

    def _tail_for(self, delta: float | None) -> float:
        """The tail mass for a query at ``delta`` (None: not known): the user's, else
        :func:`~gaussdp.accounting._adaptive.tail_mass_for`, or the current grid's where
        that is at most as large (it is then at least as accurate)."""
        if self._tail_mass is not None:
            return self._tail_mass
        if delta is None:
            return self._adaptive_tail if self._adaptive is not None else DEFAULT_TAIL_MASS
        # Sized to the accuracy the first grid aims at (at most τ; finer where the grid
        # step is capped), so that truncation does not dominate that grid's error.
        aim = self._tolerance if self._h is not None else self._first_step()[1]
        want = tail_mass_for(delta, aim, len(self._leaves))
        if self._adaptive is not None and self._adaptive_tail <= want:
            return self._adaptive_tail
        return want

    def _tail_at(self, h: float) -> float:
        """The tail mass of the current grid's builds at step ``h``. Where the grid is
        coarsened to fit the memory bound (a step above the first one, or once the
        first grid did not fit), it no longer aims at the capped step's finer accuracy,
        and the truncations are sized to τ: a smaller tail mass only widens the windows,
        and the grid then coarsens further (an explicit τ = 2.35e-6 for 10⁵ runs of
        Subsampled(Gaussian(2), 0.5) at δ = 1e-5 was refused; 10⁷ of them at the
        default τ read 325438.89 instead of 325433.58). Sized to the accuracy the step
        actually used aims at (:meth:`_aim`), and never smaller than the first grid's."""
        if h <= self._coarse_above:
            return self._adaptive_tail
        aim = self._aim(max(h, self._coarse_step))
        want = tail_mass_for(self._coarse_delta, aim, len(self._leaves))
        return max(self._adaptive_tail, want)

    def _grid(self, delta: float | None) -> AdaptivePLD:
        """The adaptive grid for a query at ``delta``: the current one, or a new one
        (from the current step) where the query needs a smaller tail mass."""
        tail = self._tail_for(delta)
        if self._adaptive is None or tail != self._adaptive_tail:
            h0 = self.value_discretization
            self._adaptive_tail = tail
            self._coarse_above, self._coarse_step = math.inf, 0.0
            if delta is not None and self._tail_mass is None and self._h is None:
                self._coarse_above, self._coarse_delta = self._first_step()[0], delta
            # The grid reaches back to this accountant through a weak reference: bound
            # methods would close a reference cycle, and the accountant with its PLDs
            # (tens of MB on a long DP-SGD run) would then wait for the cyclic collector
            # (measured: 96 MB still held after a make_private calibration).
            owner = weakref.ref(self)

            def build(h: float, extended: bool = False) -> PrivacyLossDistribution:
                acc = _owner(owner)
                tail = acc._tail_at(h)
                try:
                    return acc._build(h, extended, tail)
                except GridTooLargeError as exc:
                    if extended or h < h0 or acc._coarse_above == 0.0:
                        raise
                    # The first grid does not fit and will be coarsened to about
                    # h·points/MAX_GRID_POINTS (AdaptivePLD): every step of it takes
                    # the tail for that step, this one too, so that the coarsening is
                    # sized from a grid with that tail (the smaller one would widen the
                    # windows and coarsen it further).
                    acc._coarse_above = 0.0
                    acc._coarse_step = h * exc.points / MAX_GRID_POINTS
                    if acc._tail_at(h) == tail:
                        raise
                return acc._build(h, extended, acc._tail_at(h))

            def snap(h: float) -> float:
                return _owner(owner)._snap(h)

            self._adaptive = AdaptivePLD(
                build,
                h0,
                self._tolerance,
                fixed=self._h is not None,
                snap=snap,
                loose=self._bounded_range,
            )
        return self._adaptive

    def _build(
        self, h: float, extended: bool, tail_mass: float, leaves: Counter[Event] | None = None
    ) -> PrivacyLossDistribution:
        # A subsampled run's truncation may move tail_mass/count (to +∞ on the upper
        # side): the composition then moves at most tail_mass per event. ``extended``:
        # FFTs in long double (smaller round-off allowances; for small δ).
        # Composed pairwise as the parts are built, in a balanced tree (each level costs
        # about one FFT of the final length, instead of one per event), so that at most
        # about log₂(n) partial results are alive (issue #10: memory), not all n parts.
        # Events come in order of their composed loss's rough spread (√count × one run's),
        # so that similar grids meet; symmetric PLDs (one direction, half the work) are
        # composed among themselves first.
        stacks: dict[bool, list[tuple[int, PrivacyLossDistribution]]] = {True: [], False: []}
        for event, count in sorted(
            (self._leaves if leaves is None else leaves).items(),
            key=lambda item: _loss_spread(item[0]) * math.sqrt(item[1]),
        ):
            # Positive: compose refuses a tail mass the runs cannot share.
            tail = tail_mass / count if _subsampled(event) else tail_mass
            part = _composed_event_pld(
                event, count, h, tail, extended, self._one_run, power_tail=tail_mass
            )
            _push_balanced(stacks[part.symmetric], part, extended)
        groups = [[p for _, p in stacks[sym]] for sym in (True, False)]
        return _compose_tree([_compose_tree(g, extended) for g in groups if g], extended)

    def _one_run(
        self, event: Event, h: float, tail: float, extended: bool
    ) -> PrivacyLossDistribution:
        """One run's PLD of ``event`` on grid step ``h`` (kept when it is the only event)."""
        if len(self._leaves) > 1:
            return _event_pld(event, h, tail, extended)
        key = (event, h, tail, extended and isinstance(event, DiscreteGaussianVector))
        if key not in self._run_cache:
            self._run_cache = {key: _event_pld(event, h, tail, extended)}
        return self._run_cache[key]

    def _realised_lower(self, lower_of: Callable[[_LossPMF], float]) -> float:
        """The largest lower bound ``lower_of`` (applied to each direction's lower PMF)
        finds over realisable compositions: every ε-bounded-range leaf realised by the
        two-point pair W_{θε} (its swap in the other direction;
        :mod:`~gaussdp.accounting._bounded_range`), one θ in (0, 1) for all of them. Each
        θ is a mechanism some ε-BR composition runs, so each value is a lower bound, and
        so is their maximum. The best θ depends on the query (far from ½ at large ε): a
        scan of 13 values, then a golden-section refinement of the best (8 more), on the
        current grid; the other events are composed once, the runs of W_{θε} exactly
        (binomial), so each θ costs one composition per direction, lower side only.
        Where some leaf's runs reach the loss cap (ε·count > 64), only θ = ½."""
        grid = self._adaptive
        if grid is None:  # pragma: no cover - the caller has just queried the grid
            return 0.0
        h = grid.value_discretization
        tail = self._tail_at(h)
        others: Counter[Event] = Counter(
            {e: c for e, c in self._leaves.items() if not isinstance(e, ExponentialMechanism)}
        )
        ranges = [(e, c) for e, c in self._leaves.items() if isinstance(e, ExponentialMechanism)]
        rest = self._build(h, False, tail, others) if others else None
        found: dict[float, float] = {}

        def at(theta: float) -> float:
            if theta in found:
                return found[theta]
            sides = [None if rest is None else (rest.lower_remove, rest.lower_add)]
            for event, count in ranges:
                if event.epsilon > 0.0:
                    sides.append(realised_runs(event.epsilon, count, theta, h))
            value = 0.0
            for d in (0, 1):
                pmfs = [s[d] for s in sides if s is not None]
                if pmfs:
                    pmf = pmfs[0]
                    for other in pmfs[1:]:
                        pmf = pmf.compose(other, tail)
                    value = max(value, lower_of(pmf))
            found[theta] = value
            return value

        if any(e.epsilon * c > _LOSS_CAP for e, c in ranges):
            # Runs whose losses reach the grid's cap span the whole capped grid: each θ
            # would cost a full-width build, so only the symmetric pair is used there.
            return at(0.5)
        # The best pair can sit near either end (3 × EM(5) at δ = 1e-6: θ ≈ 0.005).
        scan = [0.005, 0.01, 0.03, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.97, 0.99, 0.995]
        best = max(range(len(scan)), key=lambda i: at(scan[i]))
        lo, hi = scan[max(best - 1, 0)], scan[min(best + 1, len(scan) - 1)]
        golden = (math.sqrt(5.0) - 1.0) / 2.0
        a, b = hi - golden * (hi - lo), lo + golden * (hi - lo)
        fa, fb = at(a), at(b)
        for _ in range(6):
            if fa >= fb:
                hi, b, fb = b, a, fa
                a = hi - golden * (hi - lo)
                fa = at(a)
            else:
                lo, a, fa = a, b, fb
                b = lo + golden * (hi - lo)
                fb = at(b)
        return max(found.values())

    def _rdp(self) -> RDPAccountant | None:
        """The same composition in an RDP accountant, if it supports every event."""
        rdp = RDPAccountant()
        if not all(rdp.supports(e) for e in self._leaves):
            return None
        for event, count in self._leaves.items():
            rdp.compose(event, count)
        return rdp

    def _base_epsilon(self, delta: float) -> EpsilonBounds:
        known = self._epsilons.get(delta)
        if known is None:
            known = self._epsilons[delta] = self._new_epsilon(delta)
        return known

    def _base_delta(self, epsilon: float) -> DeltaBounds:
        known = self._deltas.get(epsilon)
        if known is None:
            known = self._deltas[epsilon] = self._new_delta(epsilon)
        return known

    def _new_epsilon(self, delta: float) -> EpsilonBounds:
        if self.is_exact:
            # DRS Cor 2.13 / 3.3, rounded up
            mu, floor = _gaussian_mu(self._leaves), _gaussian_mu_floor(self._leaves)
            return _gdp_epsilon_bounds(mu, delta, "gdp", floor)
        single = self._single_l2_run()
        if single is not None:
            # One run: the max over the worst-case vectors (no composition involved).
            return max_epsilon_bounds(single, delta)
        b = self._grid(delta).epsilon(delta)
        self._check_met(b, _GAP_FACTOR)
        if self._bounded_range:
            lower = self._realised_lower(lambda pmf: pmf.epsilon(delta))
            b = replace(b, lower=min(max(b.lower, lower), b.upper))
        if b.note or self._bounded_range:
            # The PLD could not certify within the tolerance (its allowances are too large
            # for this δ, or the grid does not fit): the RDP bound, if tighter, is returned.
            rdp = self._rdp()
            if rdp is not None:
                r = rdp.epsilon(delta).upper
                if r < b.upper:
                    note = _rdp_note(b.note)
                    return EpsilonBounds(lower=min(b.lower, r), upper=r, method="rdp", note=note)
        return b

    def _new_delta(self, epsilon: float) -> DeltaBounds:
        if self.is_exact:
            # DRS Cor 2.13 / Cor 3.3
            mu, floor = _gaussian_mu(self._leaves), _gaussian_mu_floor(self._leaves)
            return _gdp_delta_bounds(mu, epsilon, "gdp", floor)
        single = self._single_l2_run()
        if single is not None:
            return max_delta_bounds(single, epsilon)
        beyond = _beyond_largest_loss(self._leaves, epsilon)
        if beyond is not None:
            return beyond
        # δ is not known in advance: the most accurate truncation (tail_mass_for(0) is the
        # smallest tail mass), so that δ(ε) does not depend on the tail mass of earlier ε
        # queries (the grid step may carry over; every answer is certified).
        b = self._grid(0.0).delta(epsilon)
        self._check_met(b, _DELTA_GAP_FACTOR)
        if self._bounded_range:
            lower = self._realised_lower(lambda pmf: pmf.delta(epsilon))
            b = replace(b, lower=min(max(b.lower, lower), b.upper))
        if b.note or self._bounded_range:
            rdp = self._rdp()
            if rdp is not None:
                r = rdp.delta(epsilon).upper
                if r < b.upper:
                    note = _rdp_note(b.note)
                    return DeltaBounds(lower=min(b.lower, r), upper=r, method="rdp", note=note)
        return b

    def _check_met(self, b: EpsilonBounds | DeltaBounds, gap_factor: float) -> None:
        """Refuse a tolerance stated by the user that the grid, coarsened to fit the memory
        bound, did not meet; name the tolerance this grid does meet (its bracket is
        within gap_factor·tolerance, relative, the adaptive grid's criterion for the
        query: _GAP_FACTOR for ε, _DELTA_GAP_FACTOR for δ)."""
        grid = self._adaptive  # the grid that answered the query
        if grid is None or not (self._tolerance_given and grid.coarsened and b.note):
            return
        if not (math.isfinite(b.upper) and b.upper > 0):
            return  # not a grid-size matter: the allowances exceed δ (RDP fallback)
        fits = (b.upper - b.lower) / (gap_factor * b.upper)
        fits = float(f"{fits:.1e}") * 1.1  # rounded, and up
        raise ValueError(
            invalid(
                "tolerance",
                f"at least about {fits:.2g} for this composition to fit the memory bound "
                f"of {MAX_GRID_POINTS} grid points (or leave it at the default, which "
                "coarsens the grid and notes it; or use RDPAccountant)",
                self._tolerance,
            )
        )

    @property
    def _bounded_range(self) -> bool:
        """Whether a leaf is ε-bounded-range: its dominating PLD is not tight under
        composition, and the RDP bound (ε²/8-zCDP, Cesar & Rogers 2021) often beats it."""
        return any(isinstance(e, ExponentialMechanism) for e in self._leaves)

    def _single_l2_run(self) -> list[PrivacyLossDistribution] | None:
        """The candidates' PLDs if the leaves are one run of a DiscreteGaussianL2.

        One run needs no dominating pair: its bounds are the max over the candidates.
        """
        if len(self._leaves) != 1:
            return None
        ((event, count),) = self._leaves.items()
        if count != 1 or not isinstance(event, DiscreteGaussianL2):
            return None
        if self._single_cache is None:
            self._single_cache = event.candidate_plds(
                value_discretization=self.value_discretization,
                tail_mass=self._tail_for(None),
            )
        return self._single_cache


def _discrete_gaussian_refusal(
    event: DiscreteGaussian | DiscreteGaussianVector | DiscreteGaussianL2,
) -> str | None:
    """Why the PLD of a discrete Gaussian event cannot be built (None: it can), naming
    the parameter at fault (:func:`~gaussdp.accounting.pld.check_discrete_gaussian_support`,
    the check the construction makes, with the event's largest coordinate sensitivity)."""
    if isinstance(event, DiscreteGaussian):
        largest = event.sensitivity
    elif isinstance(event, DiscreteGaussianVector):
        largest = max(event.sensitivities)
    else:
        largest = max(max(vector) for vector in event.candidates)
    try:
        check_discrete_gaussian_support(Fraction(event.sigma2), max(largest, 1))
    except ValueError as exc:
        return str(exc)
    return None


def _owner(ref: weakref.ref[PLDAccountant]) -> PLDAccountant:
    """The accountant behind a grid's weak reference (alive while its grid is used)."""
    accountant = ref()
    if accountant is None:  # pragma: no cover - only the accountant reaches its grid
        raise ReferenceError("the PLDAccountant of this grid no longer exists")
    return accountant


def _beyond_largest_loss(leaves: Counter[Event], epsilon: float) -> DeltaBounds | None:
    """δ(ε) in closed form where ε is at least every finite loss of the composition, if
    every leaf's finite losses are bounded (pure ε_i-DP steps, and ApproxDP(ε_i, δ_i)),
    else None.

    Each ε_i-DP pair (P, Q) has loss at most ε_i, except where Q has no mass (loss +∞,
    P-mass ≤ δ_i): its worst-case pair, randomised response with a δ_i flag, dominates
    it (KOV 2015 Thm 2.1) and dominance survives composition. So at ε ≥ Σ_i k_i·ε_i
    (exact rational sum) the composition's δ(ε) is at most the probability that some
    run's loss is +∞, 1 − Π_i(1 − δ_i)^{k_i} (KOV Thm 3.3 at its largest ε), and for
    the worst-case pairs the accountant stands for it is exactly that: the bracket is
    closed (0 for pure steps), where the grid's would only add round-off allowances.
    """
    total = Fraction(0)
    log_clean = 0.0  # Σ k_i ln(1 − δ_i) ≤ 0
    for event, count in leaves.items():
        flagged = 0.0
        if isinstance(event, (PureDP, ExponentialMechanism)):  # ε-BR implies ε-DP
            largest = Fraction(event.epsilon)
        elif isinstance(event, ApproxDP):
            largest, flagged = Fraction(event.epsilon), event.delta
        elif isinstance(event, (DiscreteLaplace, Laplace)):
            # |loss| ≤ Δ/t (CKS §4), Δ/b (Dwork & Roth Thm 3.6)
            largest = Fraction(event.sensitivity) / Fraction(event.scale)
        else:
            return None
        total += count * largest
        log_clean += count * math.log1p(-flagged)
    if not Fraction(epsilon) >= total:
        return None
    if log_clean == 0.0:
        return DeltaBounds(lower=0.0, upper=0.0, method="pld")
    # log1p, the products, the sum and expm1 err by far less than 1e-12 relative.
    value = -math.expm1(log_clean)
    return DeltaBounds(
        lower=max(0.0, value * (1 - 1e-12)), upper=min(1.0, value * (1 + 1e-12)), method="pld"
    )


def _rdp_note(note: str) -> str:
    """Why the RDP bound was returned instead of the PLD's."""
    why = "the RDP bound (CKS Prop 12) is tighter"
    return f"{note}; {why}" if note else why


def _push_balanced(
    stack: list[tuple[int, PrivacyLossDistribution]],
    part: PrivacyLossDistribution,
    extended: bool,
) -> None:
    """Add ``part`` to a binary-counter stack of (level, composition of 2^level parts).

    Two compositions of equal level are composed at once, so the stack holds at most one
    per level (about log₂ n for n parts), and the tree is the balanced one over the order
    of arrival.
    """
    level = 0
    while stack and stack[-1][0] == level:
        _, earlier = stack.pop()
        part = earlier.compose(part, extended_precision=extended)
        level += 1
    stack.append((level, part))


def _compose_tree(parts: list[PrivacyLossDistribution], extended: bool) -> PrivacyLossDistribution:
    """The composition of ``parts``, pairwise, the two smallest grids at a time."""
    while len(parts) > 1:
        parts = sorted(parts, key=lambda pld: pld.largest_grid)
        paired = [
            parts[i].compose(parts[i + 1], extended_precision=extended)
            for i in range(0, len(parts) - 1, 2)
        ]
        parts = paired + parts[len(paired) * 2 :]
    return parts[0]


def _mu_too_large(mechanism: object) -> bool:
    """A Gaussian whose Δ/σ is beyond what the subsampled-Gaussian PLD is built for."""
    return isinstance(mechanism, Gaussian) and not mechanism.mu <= MAX_SUBSAMPLED_MU


def _subsampled(event: Event) -> bool:
    return isinstance(event, Subsampled) and event.sample_rate < 1.0


def _loss_lattice(event: Event) -> float | None:
    """A step such that every privacy loss of ``event`` is a multiple of it, if any."""
    if isinstance(event, DiscreteLaplace):
        # Losses (|y − Δ| − |y|)/t are multiples of 1/t (CKS §4).
        return 1.0 / float(event.scale)
    if isinstance(event, DiscreteGaussian):
        # Losses (Δ² − 2yΔ)/(2σ²) are multiples of Δ/(2σ²) (CKS Thm 7 proof).
        return float(Fraction(event.sensitivity) / (2 * event.sigma2))
    if isinstance(event, DiscreteGaussianVector):
        # Σ_j Δ_j(Δ_j − 2y_j)/(2σ²): each term a multiple of Δ_j, so the sum one of
        # g/(2σ²), g = gcd of the Δ_j (CKS Thm 14). Off this lattice every coordinate's
        # atoms fall between grid points, and a finer grid only trades the lower bound's
        # O(h) error for a round-off allowance growing like 1/h.
        return float(Fraction(math.gcd(*event.sensitivities)) / (2 * event.sigma2))
    if isinstance(event, DiscreteGaussianL2):
        # Losses Σ_j (v_j² − 2y_j v_j)/(2σ²) are multiples of 1/(2σ²) (CKS Thm 14).
        return float(1 / (2 * event.sigma2))
    return None


def _pooled_step(leaves: Counter[Event], tolerance: float) -> float:
    """The first grid step for a composition of several distinct events.

    Connect the dots inflates the variance of each run's loss by at most h²/4, so that
    of the whole composition by n·h²/4 (n runs in all) against its variance
    ≈ Σ_i c_i s_i² (c_i runs of spread s_i): h = 2√τ·s̄ with s̄² = Σ c_i s_i²/n keeps
    the relative error in ε near τ/2, as h = 2√τ·s does for one event; a run of small
    spread costs only its share. At most 1e-3·√(τ/1e-4) nats. The bracket then
    refines it where needed (:class:`AdaptivePLD`).
    """
    runs = sum(leaves.values())
    mean_square = sum(c * _loss_spread(e) ** 2 for e, c in leaves.items()) / runs
    h = 2.0 * math.sqrt(tolerance * mean_square)
    cap = 10 * DEFAULT_VALUE_DISCRETIZATION * math.sqrt(tolerance / DEFAULT_TOLERANCE)
    return max(min(h, cap), MIN_STEP)


def _lattice_grid(event: Event) -> float | None:
    """The grid step on which every privacy loss of ``event`` lies, if any: its loss
    lattice, divided evenly where coarser than 1 nat (the largest grid step)."""
    lattice = _loss_lattice(event)
    if lattice is None:
        return None
    return lattice if lattice <= 1.0 else lattice / math.ceil(lattice)


def _worst_case_on_lattice(
    event: Event, h: float, tail_mass: float
) -> PrivacyLossDistribution | None:
    """The worst-case pair of a :class:`PureDP` or :class:`ApproxDP` step with
    h < ε ≤ 1 on grid step ε (else None): its losses are ±ε and +∞ (KOV 2015 Thm 2.1),
    so composing its runs there is exact (KOV Thm 3.3) up to round-off. Built from the
    losses themselves (ln p − ln q would round them off the grid)."""
    if not isinstance(event, (PureDP, ApproxDP)) or not h < event.epsilon <= 1.0:
        return None
    delta = event.delta if isinstance(event, ApproxDP) else 0.0
    return PrivacyLossDistribution.from_approx_dp(
        event.epsilon, delta, value_discretization=event.epsilon, tail_mass=tail_mass
    )


def _composed_event_pld(
    event: Event,
    count: int,
    h: float,
    tail_mass: float,
    extended: bool,
    one_run: Callable[[Event, float, float, bool], PrivacyLossDistribution],
    power_tail: float | None = None,
) -> PrivacyLossDistribution:
    """The PLD of ``count`` runs of ``event`` on grid step ``h``.

    ``tail_mass`` is what one run's truncation may move; ``power_tail`` (default: the
    same), what the k-fold power's window wrap-around and truncation may move, each
    once per event (docs/accounting.md §2, "The tail mass η"): a subsampled run's
    truncation moves η/k at each of its k runs, the power's only once.

    An event whose losses lie on a lattice coarser than ``h`` (discrete Laplace,
    discrete Gaussian, pure and approximate DP steps) is composed on its lattice, where
    both bounds are exact up to round-off, and moved to ``h`` once
    (:meth:`PrivacyLossDistribution.regridded`): the lower bound's discretisation
    error, O(h) per atom off the grid, is then paid once instead of at every run, and
    the lattice has fewer points to compose. ``one_run(event, step, tail_mass, extended)``
    builds (or recalls) one run's PLD.
    """
    two_point = _two_point_laplace(event)
    if count > 1 and two_point is not None:
        return subsampled_discrete_laplace_runs(
            two_point.scale,
            cast(Subsampled, event).sample_rate,
            count,
            value_discretization=h,
            tail_mass=tail_mass,
            extended_precision=extended,
        )
    lattice = _lattice_grid(event)
    on_lattice: PrivacyLossDistribution | None = None
    if count > 1 and lattice is not None and lattice > h:
        on_lattice = one_run(event, lattice, tail_mass, extended)
    elif count > 1:
        on_lattice = _worst_case_on_lattice(event, h, tail_mass)
    if on_lattice is None:
        run = one_run(event, h, tail_mass, extended)
        if power_tail is not None and count > 1:
            run = replace(run, tail_mass=max(run.tail_mass, power_tail))
        return run.self_compose(count, extended_precision=extended)
    return on_lattice.self_compose(count, extended_precision=extended).regridded(h)


def _step_cap(event: Event) -> float:
    """The cap on the first grid step of ``event`` alone (at τ = 1e-4): :data:`_STEP_CAP`,
    but 1e-4 for the events whose runs are composed on their own loss lattice and moved
    to h once (pure and approximate DP steps, sensitivity-1 subsampled discrete Laplace;
    :func:`_composed_event_pld`): their composition on the lattice is exact, so a finer
    step does not tighten it as it does a composition on h, and decimal lattices such
    as ε₀ = 0.3 are multiples of 1e-4, where the move is exact."""
    if isinstance(event, (PureDP, ApproxDP)) or _two_point_laplace(event) is not None:
        return DEFAULT_VALUE_DISCRETIZATION
    return _STEP_CAP


def _atoms_on_grid(eps0: float, h: float) -> float:
    """A grid step at most ``h`` with ε₀ = k·step exactly in floats (k an integer), else
    ``h``: the Laplace mechanism's loss has atoms at ±ε₀ (mass about ½ each), which the
    upper bound rounds up to the next grid point. Off the grid one run's ε is over by up
    to h, and more than basic composition allows at a few runs (ε₀ = 1 on step 9e-5:
    1.00006 at δ = 1e-6 for the exact 0.999998); on it, the atoms are exact."""
    if not eps0 <= _LOSS_CAP:  # beyond the cap the loss is moved to ±∞ anyway
        return h
    k = max(math.ceil(eps0 / h), 1)
    for n in range(k, k + 64):
        step = eps0 / n
        if n * step == eps0:
            return step if step >= MIN_STEP else h
    return h  # pragma: no cover - some n near ε₀/h divides ε₀ exactly in floats


def _check_tail_share(tail_mass: float, runs: int) -> None:
    """Refuse a tail mass whose share per run, tail_mass/runs, may not be a positive
    float: below runs·5e-324 (exact in floats for runs ≤ 2**53), shown rounded up."""
    need = runs * math.ulp(0.0)
    if tail_mass < need:
        raise ValueError(
            invalid(
                "tail_mass",
                f"at least {format_bound(need, up=True, digits=3)} (a share of at least "
                f"5e-324 for each of the {runs} runs of a subsampled event)",
                tail_mass,
            )
        )


def _two_point_laplace(event: Event) -> DiscreteLaplace | None:
    """The mechanism of a Poisson-subsampled DLap(t ≥ 1) with sensitivity 1 and
    q ≤ 1/2 (else None): two losses per run, which
    :func:`~gaussdp.accounting.pld.subsampled_discrete_laplace_runs` composes on their
    own lattice, so that the lower bound is not lowered O(h) at every run."""
    if not (isinstance(event, Subsampled) and event.scheme == "poisson"):
        return None
    mech = event.mechanism
    if not isinstance(mech, DiscreteLaplace) or event.sample_rate > 0.5:
        return None
    return mech if mech.sensitivity == 1 and mech.scale >= 1 else None


def _loss_spread(event: Event) -> float:
    """A rough standard deviation of one run's privacy loss (only used to pick h)."""
    rate = 1.0
    mech: object = event
    if isinstance(event, Subsampled):
        rate, mech = event.sample_rate, event.mechanism
    if isinstance(mech, (DiscreteLaplace, Laplace)):
        base = mech.pure_epsilon
    elif isinstance(mech, (PureDP, ApproxDP, ExponentialMechanism)):
        base = mech.epsilon
    elif isinstance(mech, (Gaussian, DiscreteGaussian, DiscreteGaussianVector, DiscreteGaussianL2)):
        base = math.sqrt(2 * mech.rho)  # Δ/σ
    else:  # pragma: no cover - every supported event is listed above
        base = 1.0
    if rate == 1.0:
        return base
    # Var of the loss ≈ q²·χ²(M(Δ) ‖ M(0)) for small q; χ² = e^{μ²} − 1 for the Gaussian.
    return min(base, rate * math.sqrt(math.expm1(min(base * base, 700.0))))


def _event_pld(
    event: Event, h: float, tail_mass: float, extended: bool = False
) -> PrivacyLossDistribution:
    """The (one-run) PLD of a supported event on grid step ``h`` (``extended``: a
    vector's coordinates composed with FFTs in long double, the accountant's rebuild for
    small δ; one run of any other event has no FFT)."""
    kw = {"value_discretization": h, "tail_mass": tail_mass}
    rate = 1.0
    mech: object = event
    if isinstance(event, Subsampled):
        rate, mech = event.sample_rate, event.mechanism
    if isinstance(mech, Gaussian):
        if rate < 1.0:
            return PrivacyLossDistribution.from_subsampled_gaussian(
                mech.sigma, rate, mech.sensitivity, **kw
            )
        return PrivacyLossDistribution.from_gaussian(mech.sigma, mech.sensitivity, **kw)
    if isinstance(mech, DiscreteGaussian):
        return PrivacyLossDistribution.from_discrete_gaussian(
            mech.sigma2,
            mech.sensitivity,
            sample_rate=rate,
            value_discretization=h,
            tail_mass=tail_mass,
        )
    if isinstance(mech, DiscreteGaussianVector):
        return PrivacyLossDistribution.from_discrete_gaussian(
            mech.sigma2,
            list(mech.sensitivities),
            value_discretization=h,
            tail_mass=tail_mass,
            extended_precision=extended,
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
    if isinstance(mech, ExponentialMechanism):
        # A pair dominating every ε-bounded-range pair (proof in _bounded_range).
        return bounded_range_pld(mech.epsilon, **kw)
    if isinstance(mech, PureDP):
        # Randomised response dominates every ε-DP mechanism (KOV 2015 Thm 2.1).
        e = math.exp(-mech.epsilon)
        p = [1 / (1 + e), e / (1 + e)]
        return PrivacyLossDistribution.from_distributions(p, p[::-1], **kw)
    if isinstance(mech, ApproxDP):
        # The (ε, δ) pair of KOV 2015 Thm 2.1: mass δ at +∞ loss, the rest ±ε.
        e, d = math.exp(-mech.epsilon), mech.delta
        p = [d, (1 - d) / (1 + e), (1 - d) * e / (1 + e), 0.0]
        return PrivacyLossDistribution.from_distributions(p, p[::-1], **kw)
    raise ValueError(invalid("event", "an event supported by PLDAccountant", event))
