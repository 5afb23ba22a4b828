r"""A privacy filter: a budget that cannot be overspent.

:class:`PrivacyFilter` admits an event only if the composition of everything
admitted so far plus the new event stays within its :class:`~gaussdp.Budget`,
and otherwise raises :class:`~gaussdp.errors.BudgetExceededError` with its
history unchanged. The whole history is evaluated by one accountant
(:func:`budget_accountant`):

* an (ε, δ) budget by :class:`~gaussdp.accounting.PLDAccountant` — its certified
  upper ε at δ must be at most ε (exact μ-GDP when every event is Gaussian noise);
  zCDP's bound is used instead once an event is known only by its ρ, and RDP's
  once an event has no PLD (sampling without replacement)
  (:class:`~gaussdp.accounting.FallbackAccountant`);
* a ρ budget by :class:`~gaussdp.accounting.ZCDPAccountant` — ρ's add (Bun &
  Steinke 2016 Lemma 2.3), and no δ may be spent;
* a μ budget by :class:`~gaussdp.accounting.GDPAccountant` — μ = √Σμᵢ² (DRS Cor
  3.3); lattice noise is μ-GDP up to its smoothing slack, which is reported
  (:attr:`PrivacyFilter.slack`), and no δ may be spent.

Because every check composes the whole history (a *filter*, not a fixed
sequence), the budget holds for adaptively chosen events with fixed parameters
known before each run (Rogers et al. 2016; Whitehouse et al. 2023 for filters
with fully adaptive (ε, δ) and ρ budgets).

The same check (:func:`refusal`) serves the persistent filter,
:class:`gaussdp.Ledger`.

A history that no accountant can certify within the memory bound (a PLD of a huge
count of an event that zCDP and RDP do not cover, e.g. ``ApproxDP``) costs ∞: it
is refused, with the reason in the message, and nothing is spent. Where the PLD
does not fit but zCDP or RDP covers every event, that certified bound is used
(:class:`~gaussdp.accounting.FallbackAccountant`).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from gaussdp._validation import check_count, format_bound
from gaussdp.accounting._adaptive import MAX_GRID_POINTS, MemoryBoundError
from gaussdp.accounting.accountants import (
    Accountant,
    FallbackAccountant,
    GDPAccountant,
    PLDAccountant,
    RDPAccountant,
    ZCDPAccountant,
)
from gaussdp.accounting.events import Composed, Event, check_event
from gaussdp.budget import Budget
from gaussdp.errors import BudgetExceededError, invalid
from gaussdp.random import _process_identity

__all__ = [
    "PrivacyFilter",
    "Spent",
    "SpentMemo",
    "budget_accountant",
    "budget_limit",
    "left_of",
    "left_text",
    "refusal",
    "remember_spent",
    "spent",
]


def spend_target(ledger: object | None, filter: object | None, own: PrivacyFilter) -> PrivacyFilter:
    """The in-memory filter a run is charged to when no ledger is given: ``filter`` if
    given, else the object's ``own``. Refuses both a ledger and a filter, and a
    ``filter`` that is not a :class:`PrivacyFilter` (the one check of
    :meth:`gaussdp.release.Release.run` and :meth:`gaussdp.synth.Synthesizer.run`)."""
    if ledger is not None and filter is not None:
        raise ValueError(invalid("filter", "None when a ledger is given", filter))
    if filter is None:
        return own
    if not isinstance(filter, PrivacyFilter):
        raise TypeError(invalid("filter", "a gaussdp.accounting.PrivacyFilter", filter))
    return filter


def budget_accountant(budget: Budget) -> Accountant:
    """A fresh accountant of the kind that checks ``budget`` (see the module docs)."""
    if budget.rho is not None:
        return ZCDPAccountant()
    if budget.mu is not None:
        return GDPAccountant()
    # The PLD bound; zCDP's once an event is known only by its ρ; RDP's once an event
    # has no PLD (sampling without replacement).
    return FallbackAccountant([PLDAccountant(), ZCDPAccountant(), RDPAccountant()])


@dataclass(frozen=True, slots=True)
class Spent:
    """What a history spends in a budget's unit.

    ``value`` is the certified upper bound (ε at the budget's δ, or ρ, or μ) and
    ``lower`` a lower bound where the accountant gives one (else 0); ``delta`` is
    the δ spent outside the composition (partition selection), ``slack`` the
    smoothing slack of lattice noise (μ budgets are met up to it). ``note`` says
    why ``value`` is ∞ where no accountant certifies the history, and which bound
    certified it where that is not the PLD of an ε budget's accountant (the zCDP or
    RDP fallback of :class:`~gaussdp.accounting.FallbackAccountant`, the PLD's own
    RDP bound); else "".
    """

    value: float
    lower: float
    delta: float
    slack: float
    note: str = ""


def spent(budget: Budget, accountant: Accountant) -> Spent:
    """What ``accountant``'s history spends in ``budget``'s unit.

    For a ρ or μ budget with δ spent outside the composition, ``value`` is ∞:
    such budgets have no δ to spend.

    Examples
    --------
    >>> from gaussdp.mechanisms import Gaussian
    >>> spent(Budget(mu=1.0), GDPAccountant().compose(Gaussian(2.0), 3)).value  # √0.75, up
    0.8660254037844387
    """
    extra, slack = accountant.extra_delta, accountant.slack
    if not accountant.count:
        return Spent(0.0, 0.0, 0.0, 0.0)
    if isinstance(accountant, ZCDPAccountant):
        value = accountant.rho if extra == 0 else math.inf
        return Spent(value, 0.0, extra, slack)
    if isinstance(accountant, GDPAccountant):
        value = accountant.mu if extra == 0 else math.inf
        return Spent(value, value, extra, slack)
    delta = budget.delta
    if delta is None:  # pragma: no cover - budget_accountant gives PLD only with a δ
        raise ValueError(invalid("budget", "one with a delta", budget))
    try:
        bounds = accountant.epsilon(delta)
    except MemoryBoundError:
        # Nothing certifies the history (the PLD does not fit, and no other member of
        # the budget's accountant covers every event): ∞, never admitted.
        why = f"no accountant certifies it within the memory bound of {MAX_GRID_POINTS} points"
        return Spent(math.inf, 0.0, extra, slack, why)
    # A note on the PLD's own finite bound (its bracket is wide) is about the lower
    # bound, not about what certified the figure: not carried.
    note = bounds.note if bounds.method != "pld" or math.isinf(bounds.upper) else ""
    if isinstance(accountant, FallbackAccountant) and not note:
        # The member that answered is not the PLD: an event it cannot account for
        # (known only by its ρ, or sampled without replacement). Its bound is certified
        # but usually looser; say which it is (the member's own answer does not).
        active = accountant.active
        if not isinstance(active, PLDAccountant):
            name = _BOUND_NAMES.get(type(active), type(active).__name__)
            note = f"certified by the {name} bound: the PLD cannot account for every event"
    return Spent(bounds.upper, bounds.lower, extra, slack, note)


#: How :func:`spent`'s note names the bound of a fallback member.
_BOUND_NAMES: dict[type, str] = {ZCDPAccountant: "zCDP", RDPAccountant: "RDP"}


def budget_limit(budget: Budget) -> tuple[str, float]:
    """The budget's unit (``"ε"``, ``"ρ"`` or ``"μ"``) and its limit."""
    if budget.rho is not None:
        return "ρ", budget.rho
    if budget.mu is not None:
        return "μ", budget.mu
    return "ε", float(budget.epsilon or 0.0)


def left_of(symbol: str, total: float, used: float) -> float:
    """What a next event can still spend of ``total`` after ``used``, or NaN for ε.

    ρ add under composition (Bun & Steinke 2016 Lemma 2.3) and so do μ² (DRS Cor
    3.3): total − used (μ: √(total² − used²)) is exactly what the filter admits
    next. ε at a fixed δ does not add (two steps can compose to less than the sum,
    or to more, and partition selection spends the same δ), so ``total − used`` is
    not what a next release can spend — it can be more, or nothing at all — and
    no single ε figure is: NaN. The filter's check is the answer for ε budgets.
    """
    if symbol == "ε":
        return math.nan
    if symbol == "μ":  # μ² add (DRS Cor 3.3)
        return math.sqrt(max(0.0, total * total - used * used))
    return max(0.0, total - used)


def left_text(budget: Budget, used: float, selection_delta: float, note: str = "") -> str:
    """What is left of ``budget`` after ``used``, as shown to people (never overstated).

    ρ and μ: the amount (:func:`left_of`). ε: no amount (see :func:`left_of`), but
    the δ that partition selection has used (``selection_delta``) of the budget's δ,
    since a release is refused once that δ is used up, whatever ε is spent.
    ``note``, the :attr:`Spent.note` of ``used`` (e.g. a zCDP or RDP bound certified
    it, not the PLD), is added in parentheses.
    """
    symbol, limit = budget_limit(budget)
    after = f" ({note})" if note else ""
    if symbol != "ε":
        return f"{symbol} = {_fmt(left_of(symbol, limit, used), up=False)} of {limit:g}{after}"
    return (
        f"no ε amount (ε at δ = {budget.delta:g} does not add up; each release is checked "
        f"against ε = {limit:g}); partition selection has used δ = {_fmt(selection_delta)} of "
        f"{budget.delta:g}{after}"
    )


def _fmt(x: float, *, up: bool = True) -> str:
    """A budget figure to 3 digits, rounded outward: spent and costs up, what is left down."""
    return "∞" if math.isinf(x) else format_bound(x, up=up, digits=3)


def refusal(
    budget: Budget,
    before: Accountant,
    event: Event,
    count: int = 1,
    *,
    owner: str = "filter",
    what: str = "this",
    measure: Callable[[Budget, Accountant], Spent] = spent,
) -> tuple[str | None, Accountant]:
    """Check ``count`` runs of ``event`` against ``budget`` after the history in ``before``.

    Returns ``(None, after)`` when the whole history plus the event stays within
    the budget (``after`` is a copy of ``before`` with the event composed), else
    ``(message, before)`` with a one-line message in the budget's own terms
    (``what`` names the event, ``owner`` the budget's holder):
    ``"refused: this costs ρ = 0.41; the ledger has ρ = 0.22 left of 3"``; for an ε
    budget the ε and δ spent and what the history would spend with the event, never
    an "ε left" (see :func:`left_of`). ``before`` is never changed. ``measure`` is :func:`spent`
    or a function with the same results (a ledger's remembers them per history).

    Raises
    ------
    UnsupportedEventError
        If the budget's accountant cannot account for the event.
    """
    after = before.copy().compose(event, count)
    total_spent = measure(budget, after)
    symbol, limit = budget_limit(budget)
    if total_spent.value <= limit:
        return None, after
    alone = measure(budget, budget_accountant(budget).compose(event, count)).value
    used = measure(budget, before)
    if symbol == "ε":
        # No "ε left" figure: ε at a fixed δ does not add (see left_of). Say what is
        # spent of both ε and δ, and what the history would spend with this event.
        selection = (
            f", partition selection δ = {_fmt(total_spent.delta)}" if total_spent.delta > 0 else ""
        )
        message = (
            f"refused: {what} costs ε = {_fmt(alone)} at δ = {budget.delta:g}; the {owner} "
            f"has spent ε = {_fmt(used.value)} of {limit:g} (δ = {budget.delta:g}, partition "
            f"selection δ = {_fmt(used.delta)}); with it: ε = {_fmt(total_spent.value)}{selection}"
        )
        if total_spent.note:
            message += f" ({total_spent.note})"
        return message, before
    message = (
        f"refused: {what} costs {symbol} = {_fmt(alone)}; the {owner} has "
        f"{symbol} = {_fmt(left_of(symbol, limit, used.value), up=False)} left of {limit:g}"
    )
    if symbol != "ε" and total_spent.delta > 0:
        message += f" (a {symbol} budget cannot spend δ, and this spends δ)"
    if total_spent.note:
        message += f" (with the history: {total_spent.note})"
    return message, before


class SpentMemo:
    """:func:`spent`, remembered for the few most recent histories.

    What a history spends is a function of the budget and of the events composed, in
    order, into a fresh accountant of the budget's kind (every accountant a filter
    measures is one: :func:`refusal` composes into a copy, and a copy starts with no
    grid). So the key is the budget, the accountant's type and the history itself
    (events are hashable values), and a remembered value is the one a new
    computation would give: a check followed by the same check (``can_accept`` then
    ``accept``, as ``Release.run`` does) computes once, and never decides otherwise.
    A history not remembered here is looked up among those a release plan certified
    in this process (:func:`remember_spent`, the same key) before it is computed.
    Thread-safe.
    """

    def __init__(self, size: int = 8) -> None:
        self._size = size
        self._known: OrderedDict[tuple[object, ...], Spent] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, budget: Budget, accountant: Accountant) -> Spent:
        key = (budget, type(accountant), accountant.history)
        known = self._get(key)
        if known is None and self is not _PLANNED:
            known = _PLANNED._get(key)
        if known is None:
            known = spent(budget, accountant)
        self._put(key, known)
        return known

    def _get(self, key: tuple[object, ...]) -> Spent | None:
        with self._lock:
            known = self._known.get(key)
            if known is not None:
                self._known.move_to_end(key)
            return known

    def _put(self, key: tuple[object, ...], value: Spent) -> None:
        with self._lock:
            self._known[key] = value
            self._known.move_to_end(key)
            while len(self._known) > self._size:
                self._known.popitem(last=False)


#: What the histories release plans certified spend (:func:`remember_spent`).
_PLANNED = SpentMemo(16)


def remember_spent(budget: Budget, accountant: Accountant) -> Spent:
    """:func:`spent` of ``accountant`` (a fresh accountant of ``budget``'s kind,
    :func:`budget_accountant`, with a history composed), kept in this process for the
    filters' and ledgers' checks of the same history (:class:`SpentMemo`): a release
    plan certifies its event on an empty history (its ε), and the budget check of a
    fresh filter or an empty ledger then measures that same history — the same key,
    so the same value a new computation would give, computed once."""
    return _PLANNED(budget, accountant)


class PrivacyFilter:
    r"""Admit events while the composed privacy loss stays within a budget.

    Give a :class:`~gaussdp.Budget`, or its fields as keywords (``epsilon`` and
    ``delta`` together, or ``rho``, or ``mu``).

    Parameters
    ----------
    budget : Budget, optional
        The budget.
    epsilon, delta, rho, mu : float, optional
        The budget's fields, if ``budget`` is not given.

    Raises
    ------
    ValueError
        If no budget, more than one, or an invalid value is given.

    Notes
    -----
    Thread-safe: :meth:`accept` checks and records under one lock, so threads
    sharing a filter never admit more than the budget together; queries take the
    same lock (an accountant caches what it computes).

    One budget, one process: a filter spends only in the process that made it. In a
    forked child (each process would spend its own copy of the budget) and in a copy
    (``pickle`` — also how ``multiprocessing`` hands objects to 'spawn' and
    'forkserver' workers —, ``copy.copy``, ``copy.deepcopy``: each copy would spend
    the budget again), :meth:`accept` and :meth:`can_accept` raise ``RuntimeError``
    and record nothing; the copy still shows the budget and the history
    (:attr:`spent`, :attr:`history`, ...). Share the filter itself between threads,
    and a :class:`~gaussdp.release.Ledger` (a file that processes share) between
    processes. A process is its id and a token drawn again at every fork.

    Examples
    --------
    >>> from gaussdp.mechanisms import Gaussian
    >>> f = PrivacyFilter(Budget(rho=1.0))
    >>> f.accept(Gaussian(sigma=1.0))        # ρ = 0.5
    >>> f.can_accept(Gaussian(sigma=0.9))    # ρ ≈ 0.617 would exceed the budget
    False
    >>> f.accept(Gaussian(sigma=0.9))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gaussdp.errors.BudgetExceededError: refused: this costs ρ = 0.618; the filter has ρ = 0.499 ...
    >>> f.spent
    0.5000000000000001
    """

    def __init__(
        self,
        budget: Budget | None = None,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
    ) -> None:
        if budget is None:
            given = {
                k: v
                for k, v in (("epsilon", epsilon), ("delta", delta), ("rho", rho), ("mu", mu))
                if v is not None
            }
            if set(given) not in ({"epsilon", "delta"}, {"rho"}, {"mu"}):
                raise ValueError(
                    invalid("budget", "epsilon and delta together, or rho, or mu", tuple(given))
                )
            budget = Budget(**given)
        elif not isinstance(budget, Budget):
            raise TypeError(invalid("budget", "a gaussdp.Budget", budget))
        elif any(v is not None for v in (epsilon, delta, rho, mu)):
            raise ValueError(invalid("budget", "given once (a Budget or keywords)", budget))
        self._budget = budget
        self._accountant = budget_accountant(budget)
        self._lock = threading.RLock()
        self._measure = SpentMemo()
        self._home: tuple[int, bytes] | None = _process_identity()  # None: a copy

    def __repr__(self) -> str:
        return f"PrivacyFilter({self._budget}, spent={self.spent:.6g})"

    # A lock cannot be pickled: the state is the budget and the history (taken under
    # the lock, so a concurrent accept is either wholly in it or not at all); unpickling
    # gives a fresh lock, and a copy that spends nothing (no home process). copy.copy
    # and copy.deepcopy go through the same two methods.
    def __getstate__(self) -> dict[str, object]:
        with self._lock:
            return {"budget": self._budget, "accountant": self._accountant.copy()}

    def __setstate__(self, state: dict[str, object]) -> None:
        budget, accountant = state["budget"], state["accountant"]
        if not isinstance(budget, Budget) or not isinstance(accountant, Accountant):
            raise TypeError(invalid("state", "a pickled PrivacyFilter", state))
        self._budget = budget
        self._accountant = accountant
        self._lock = threading.RLock()
        self._measure = SpentMemo()
        self._home = None  # a copy: it would spend the original's budget a second time

    def _check_home(self) -> None:
        """Refuse to admit anything outside the original, in the process that made it."""
        if self._home is None or self._home != _process_identity():
            raise RuntimeError(
                invalid(
                    "filter",
                    "the original, in the process that made it (a filter in a forked "
                    "process or a pickled or copied one would spend its budget a second "
                    "time): share the filter between threads, use a gaussdp.release.Ledger "
                    "between processes, or make a new PrivacyFilter",
                    self,
                )
            )

    @property
    def budget(self) -> Budget:
        """The budget."""
        return self._budget

    @property
    def history(self) -> Composed:
        """The admitted events, in order, as one event."""
        with self._lock:
            return self._accountant.history

    @property
    def accountant(self) -> Accountant:
        """A copy of the accountant holding the admitted history."""
        with self._lock:
            return self._accountant.copy()

    @property
    def spent(self) -> float:
        """Privacy spent so far: certified ε at the budget's δ, or ρ, or μ."""
        with self._lock:
            return self._measure(self._budget, self._accountant).value

    @property
    def spent_note(self) -> str:
        """Which bound certified :attr:`spent` where it is not the PLD (an ε budget whose
        history has an event the PLD cannot account for gets zCDP's or RDP's, looser),
        or why it is ∞; "" otherwise (:attr:`Spent.note`)."""
        with self._lock:
            return self._measure(self._budget, self._accountant).note

    @property
    def remaining(self) -> float:
        """What a next event can spend (ρ: total − spent; μ: √(μ² − spent²); ε: NaN).

        NaN for an ε budget: ε at a fixed δ does not add, so no ε amount is certain to
        be admitted or refused (see :func:`left_of`); ask :meth:`can_accept` instead.
        """
        symbol, limit = budget_limit(self._budget)
        return left_of(symbol, limit, self.spent)

    @property
    def slack(self) -> float:
        """The smoothing slack of the lattice noise admitted (a μ budget is met up to it)."""
        with self._lock:
            return self._accountant.slack

    def cost(self, event: Event, count: int = 1) -> float:
        """What ``count`` runs of ``event`` alone cost in the budget's unit (∞ where no
        accountant certifies it within the memory bound)."""
        check_event(event)
        n = check_count("count", count)
        alone = budget_accountant(self._budget).compose(event, n)
        return self._measure(self._budget, alone).value

    def can_accept(self, event: Event, count: int = 1) -> bool:
        """Whether :meth:`accept` would admit ``count`` runs of ``event`` now.

        Raises ``RuntimeError`` outside the original filter's process, as :meth:`accept`.
        """
        check_event(event)
        n = check_count("count", count)
        self._check_home()
        with self._lock:
            return (
                refusal(self._budget, self._accountant, event, n, measure=self._measure)[0] is None
            )

    def accept(self, event: Event, count: int = 1, *, what: str = "this") -> None:
        """Admit ``count`` runs of ``event`` if the budget allows, else raise.

        ``what`` names the event in the refusal ("this release costs ε = …").

        Raises
        ------
        BudgetExceededError
            If the composition would exceed the budget; nothing is recorded.
        TypeError, ValueError
            If the event or count is invalid or the event cannot be accounted
            (:class:`~gaussdp.accounting.UnsupportedEventError`).
        RuntimeError
            In a forked child of the filter's process, or in a pickled or copied
            filter (see Notes); nothing is recorded.
        """
        check_event(event)
        n = check_count("count", count)
        self._check_home()
        with self._lock:  # the check and the record are one step
            message, after = refusal(
                self._budget, self._accountant, event, n, what=what, measure=self._measure
            )
            if message is not None:
                raise BudgetExceededError(message)
            self._accountant = after

    charge = accept
