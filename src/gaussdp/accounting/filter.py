r"""A privacy filter: a budget that cannot be overspent.

:class:`PrivacyFilter` accepts an event only if the composition of everything
accepted so far plus the new event stays within its budget, and otherwise raises
:class:`~gaussdp.errors.BudgetExceededError` with its state unchanged. The budget
is an (ε, δ) pair (checked with the certified upper bound of a
:class:`~gaussdp.accounting.PLDAccountant`), a ρ-zCDP budget (ρ's add, Bun &
Steinke 2016 Lemma 2.3), or a μ-GDP budget (μ² add, DRS Cor 3.3).

Because every check composes the whole history (a *filter*, not a fixed
sequence), the budget holds for adaptively chosen events with fixed parameters
known before each run (Rogers et al. 2016; Whitehouse et al. 2023 for filters
with fully adaptive (ε, δ) and ρ budgets).
"""

from __future__ import annotations

import math
from typing import Literal

from gaussdp._validation import check_delta, check_epsilon, check_int, check_positive
from gaussdp.accounting.accountants import PLDAccountant
from gaussdp.accounting.events import Event, check_event
from gaussdp.errors import BudgetExceededError, invalid
from gaussdp.mechanisms import Gaussian

__all__ = ["PrivacyFilter"]

BudgetKind = Literal["approx", "rho", "mu"]


class PrivacyFilter:
    r"""Accept events while the composed privacy loss stays within a budget.

    Give exactly one budget: ``epsilon`` and ``delta`` together, or ``rho``, or ``mu``.

    Parameters
    ----------
    epsilon : float, optional
        ε of an (ε, δ) budget, finite and >= 0.
    delta : float, optional
        δ of an (ε, δ) budget, in (0, 1).
    rho : float, optional
        A ρ-zCDP budget, finite and > 0. Events must have a ``rho`` (not subsampled).
    mu : float, optional
        A μ-GDP budget, finite and > 0. Events must be Gaussian.

    Raises
    ------
    ValueError
        If no budget, more than one, or an invalid value is given.

    Examples
    --------
    >>> from gaussdp.mechanisms import Gaussian
    >>> f = PrivacyFilter(rho=1.0)
    >>> f.accept(Gaussian(sigma=1.0))        # ρ = 0.5
    >>> f.can_accept(Gaussian(sigma=0.9))    # ρ ≈ 0.617 would exceed the budget
    False
    >>> f.accept(Gaussian(sigma=0.9))
    Traceback (most recent call last):
    ...
    gaussdp.errors.BudgetExceededError: rho spent must be at most 1.0, got 1.117283950617284
    >>> f.spent
    0.5
    """

    def __init__(
        self,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
    ) -> None:
        given = [
            name
            for name, v in (("epsilon", epsilon), ("delta", delta), ("rho", rho), ("mu", mu))
            if v is not None
        ]
        self._epsilon = self._delta = self._budget = math.nan
        self._kind: BudgetKind
        if set(given) == {"epsilon", "delta"}:
            self._kind = "approx"
            self._epsilon = check_epsilon("epsilon", epsilon)
            self._delta = check_delta("delta", delta)
            self._accountant = PLDAccountant()
        elif given == ["rho"]:
            self._kind = "rho"
            self._budget = check_positive("rho", rho)
        elif given == ["mu"]:
            self._kind = "mu"
            self._budget = check_positive("mu", mu)
        else:
            raise ValueError(
                invalid("budget", "epsilon and delta together, or rho, or mu", tuple(given))
            )
        self._spent_sum = 0.0  # Σρ or Σμ² of accepted events
        self._history: list[tuple[Event, int]] = []

    @property
    def kind(self) -> BudgetKind:
        """``"approx"`` for an (ε, δ) budget, ``"rho"`` or ``"mu"``."""
        return self._kind

    @property
    def history(self) -> tuple[tuple[Event, int], ...]:
        """The accepted events with their counts, in order."""
        return tuple(self._history)

    @property
    def spent(self) -> float:
        """Privacy spent so far: ε upper bound at δ, or ρ, or μ."""
        if self._kind == "approx":
            return self._accountant.epsilon(self._delta).upper if self._history else 0.0
        if self._kind == "rho":
            return self._spent_sum
        return math.sqrt(self._spent_sum)

    def _cost(self, event: Event) -> float:
        if self._kind == "rho":
            if not hasattr(event, "rho"):
                raise TypeError(invalid("event", "an event with a zCDP parameter rho", event))
            return float(event.rho)
        if not isinstance(event, Gaussian):
            raise TypeError(invalid("event", "a Gaussian mechanism for a mu budget", event))
        return event.mu**2  # DRS Cor 3.3: μ² add

    def _check(
        self, event: object, count: object
    ) -> tuple[Event, int, str | None, PLDAccountant | None]:
        """Validate; return (event, count, reason it would be refused or None, trial)."""
        ev = check_event(event)
        n = check_int("count", count, minimum=1)
        if self._kind == "approx":
            trial = self._accountant.copy()
            assert isinstance(trial, PLDAccountant)
            if not trial.supports(ev):
                raise ValueError(invalid("event", "an event supported by PLDAccountant", ev))
            trial.compose(ev, n)
            # Certified: δ upper bound at the budget's ε must not exceed the budget's δ.
            d = trial.delta(self._epsilon).upper
            if d > self._delta:
                name = f"delta at epsilon={self._epsilon!r}"
                return ev, n, invalid(name, f"at most {self._delta!r}", d), None
            return ev, n, None, trial
        total = math.fsum([self._spent_sum, n * self._cost(ev)])
        if self._kind == "rho" and total > self._budget:
            return ev, n, invalid("rho spent", f"at most {self._budget!r}", total), None
        if self._kind == "mu" and math.sqrt(total) > self._budget:
            spent = math.sqrt(total)
            return ev, n, invalid("mu spent", f"at most {self._budget!r}", spent), None
        return ev, n, None, None

    def can_accept(self, event: Event, count: int = 1) -> bool:
        """Whether :meth:`accept` would accept ``count`` runs of ``event`` now."""
        return self._check(event, count)[2] is None

    def accept(self, event: Event, count: int = 1) -> None:
        """Record ``count`` runs of ``event`` if the budget allows, else raise.

        Raises
        ------
        BudgetExceededError
            If the composition would exceed the budget; nothing is recorded.
        TypeError, ValueError
            If the event or count is invalid or the event cannot be accounted.
        """
        ev, n, reason, trial = self._check(event, count)
        if reason is not None:
            raise BudgetExceededError(reason)
        if trial is not None:
            self._accountant = trial
        else:
            self._spent_sum = math.fsum([self._spent_sum, n * self._cost(ev)])
        self._history.append((ev, n))
