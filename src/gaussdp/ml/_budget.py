r"""Charging DP-SGD steps and federated rounds to a filter or a ledger before the noise.

:class:`Charger` pays for runs of one fixed event (a DP-SGD step
``Subsampled(LatticeGaussian, q)``, a federated round) *ahead* of them, in blocks:
before the first run of a block it charges ``SelfComposed(event, k)`` to the
:class:`~gaussdp.accounting.PrivacyFilter` (``accept``) or reserves it in the
:class:`~gaussdp.Ledger` (one entry, ``BEGIN IMMEDIATE``), and commits the
ledger entry once the k runs are done. So

* nothing is drawn before it is paid for: a refusal raises
  :class:`~gaussdp.errors.BudgetExceededError` before the noise and before the
  parameters change;
* a crash never under-counts: a reserved block stays counted in the ledger
  (DESIGN decision 6), used or not;
* many steps cost few writes: one ledger entry (one PLD evaluation of the whole
  history) per block, not per step.

When a block of k runs does not fit, blocks of ⌊k/2⌋, ⌊k/4⌋, …, 1 are tried, so
every run that fits is admitted and exactly the first run that would exceed the
budget is refused. Runs of a block that are never taken (training stopped
mid-block) are returned to a ledger by :meth:`Charger.close`
(``DPOptimizer.close()``), which commits the entry as the runs taken
(:meth:`gaussdp.Ledger.commit_part`); until then, and forever after a crash, the
whole block counts: over-counting is the safe side. An in-memory filter cannot
give runs back, so with ``filter=`` choose the block size (``reserve_steps`` of
:func:`~gaussdp.ml.make_private`) to divide the run.

Runs of one charger take turns (:meth:`Charger.run` holds a lock from the check
that the run is paid for to the count of runs taken): threads sharing one
optimizer or aggregator once released 800 rounds and charged 790, two of them
passing the check for the last paid run of a block.

A run is paid for once, by the process that began it. A thread that forks from
inside its own run (a hook, a signal handler) continues that run in the child,
where nothing paid for it: :meth:`Charger.check_draw`, called by the run's body
just before its noise, refuses the draw there (the parent draws the run's noise;
a second draw in the child would be a second release of the same sample for one
charge, and charging it again would not cover it either: two releases of one
Poisson sample are not two independently subsampled runs).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from gaussdp._validation import check_int
from gaussdp.accounting.events import Event, SelfComposed, describe
from gaussdp.accounting.filter import PrivacyFilter, budget_accountant
from gaussdp.errors import BudgetExceededError, invalid
from gaussdp.random import _process_identity, _refuse_foreign_seed

if TYPE_CHECKING:
    from gaussdp.random import RandomSource
    from gaussdp.release.ledger import Ledger, Reservation

# Every live charger, so that a forked child can replace their locks (a lock held by
# another thread of the parent at the fork would stay held in the child forever).
_LIVE_CHARGERS: weakref.WeakSet[Charger] = weakref.WeakSet()


def check_spender(ledger: object, filter: object) -> None:
    """Refuse a ledger that is not a :class:`~gaussdp.Ledger`, a bad filter, or both given."""
    from gaussdp.release.ledger import Ledger

    if ledger is not None and not isinstance(ledger, Ledger):
        raise TypeError(invalid("ledger", "a gaussdp.Ledger or None", ledger))
    if filter is not None and not isinstance(filter, PrivacyFilter):
        raise TypeError(invalid("filter", "a gaussdp.accounting.PrivacyFilter or None", filter))
    if ledger is not None and filter is not None:
        raise ValueError(invalid("ledger, filter", "at most one given", (ledger, filter)))


class Charger:
    """Pay for runs of ``event`` ahead, ``block`` runs at a time (module docs).

    Parameters
    ----------
    event : Event
        One run (a DP-SGD step, a federated round).
    ledger, filter : Ledger or PrivacyFilter, optional
        Where to charge (at most one; with neither nothing is charged).
    block : int
        Runs charged at once (≥ 1).
    label : str
        The ledger entry's label; ``what`` names one run in refusals.
    detail : dict
        JSON-ready description stored with each ledger entry.
    rng : RandomSource, optional
        The source of the runs' noise. A reproducible one (a seeded
        :class:`~gaussdp.random.ChaCha20Random`, or a stream derived from one) gives
        the same noise in every process forked from the one that made the stream,
        while the ledger would charge their runs as independent: charged runs in a
        process other than the one that made the stream (and the charger) are then
        refused. The same seed given to ``ChaCha20Random`` separately in two processes
        cannot be detected: that is the caller's responsibility (seeds are for tests
        and replays).

    Raises
    ------
    ValueError
        If the budget's accountant cannot account for ``event``
        (:class:`~gaussdp.accounting.UnsupportedEventError`), before anything is spent.
    """

    def __init__(
        self,
        event: Event,
        *,
        ledger: Ledger | None,
        filter: PrivacyFilter | None,
        block: int,
        label: str,
        what: str,
        detail: dict[str, Any],
        rng: RandomSource | None = None,
    ) -> None:
        check_spender(ledger, filter)
        self.event = event
        self._ledger, self._filter = ledger, filter
        self._block = check_int("reserve_steps", block, minimum=1)
        self._label, self._what, self._detail = label, what, detail
        self._left = 0  # runs paid for and not yet taken
        self._charged = 0  # runs in the open block
        self._open: Reservation | None = None
        self._lock = threading.RLock()
        self._running = 0  # runs in progress: the lock's owner is inside run()
        self._owner: int | None = None  # the thread inside run() (runs nest in one thread)
        # Runs in progress that began in the parent (the forking thread was inside them).
        self._inherited = 0
        self._pid = os.getpid()  # the process that owns the open block
        self._home = _process_identity()  # the process that built the charger
        self._rng = rng
        _LIVE_CHARGERS.add(self)
        budget = None if ledger is None and filter is None else self.budget
        if budget is not None:
            # Fails now (UnsupportedEventError) rather than at the first run.
            budget_accountant(budget).compose(event)

    @property
    def active(self) -> bool:
        """Whether runs are charged anywhere."""
        return self._ledger is not None or self._filter is not None

    @property
    def budget(self) -> Any:
        """The budget charged (the ledger's total or the filter's budget)."""
        if self._ledger is not None:
            return self._ledger.total
        return None if self._filter is None else self._filter.budget

    def _event(self, count: int) -> Event:
        return self.event if count == 1 else SelfComposed(self.event, count)

    def _charge(self, count: int) -> None:
        event = self._event(count)
        what = f"{count} {self._what}s" if count > 1 else f"the next {self._what}"
        if self._filter is not None:
            self._filter.accept(event, what=what)
        elif self._ledger is not None:
            detail = {**self._detail, "runs": count, "event": describe(self.event)}
            self._open = self._ledger.reserve(event, label=self._label, detail=detail, what=what)

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        """One run: paid for before the body, counted as taken after it, one run at a time.

        Raises ``BudgetExceededError`` before the body when the run cannot be paid
        for (nothing is drawn or changed by the caller then). A body that raises is
        still counted as taken: it may have raised after its noise was drawn and
        seen (a wrapped optimizer failing on noisy gradients once gave 50 noisy
        releases for one paid run). A body that fails before its draw is so
        over-counted, the safe side; callers refuse bad input before the run. The
        lock is held for the whole run, so concurrent runs of one charger (and the
        caller's own bookkeeping in the body) are sequential; :meth:`close` is
        refused inside a run.
        """
        with self._lock:
            self._before()
            self._running += 1
            self._owner = threading.get_ident()
            try:
                yield
            finally:
                self._running -= 1
                self._inherited = min(self._inherited, self._running)
                self._after()

    def check_draw(self) -> None:
        """Refuse to draw a run's noise in a process that did not pay for the run.

        Called by the run's body just before its noise is drawn. A thread that forked
        from inside its own run continues that run in the child: the parent paid for
        it and draws its noise, so the child may not draw (a second release of the
        same data and sample for one charge). A run the child begins itself, even
        nested in the inherited one, is the child's (paid by the child's own block).
        Without a ledger or filter nothing is charged anywhere and nothing is refused.

        Raises
        ------
        RuntimeError
            In a forked child, inside a run that began in the parent; nothing is
            charged or drawn.
        """
        if self.active and self._running and self._running <= self._inherited:
            raise RuntimeError(
                invalid(
                    "os.fork()",
                    f"called outside a {self._what} for the child to draw noise (the "
                    f"{self._what} under way at the fork was paid for once, by the parent, "
                    f"which draws its noise; nothing is charged or drawn in the child)",
                    f"a fork inside a {self._what} that began in the parent",
                )
            )

    def _forked(self) -> None:
        """In a forked child: drop the parent's block (the parent commits it).

        The child's runs are its own noise, so they are paid for in a block the
        child reserves from the ledger. An in-memory filter cannot be shared with
        the parent (each process would spend its own copy): refused.
        """
        if self._pid == os.getpid():
            return
        if self._filter is not None:
            raise RuntimeError(
                f"an in-memory PrivacyFilter cannot pay for a {self._what} in a forked "
                "process (parent and child would each spend their own copy of it): use a "
                "Ledger, which processes share"
            )
        self._open = None
        self._left = self._charged = 0
        self._pid = os.getpid()

    def _after_fork_in_child(self) -> None:
        """Run first in a forked child: a fresh lock, and no run in progress.

        A thread of the parent inside :meth:`run` at the fork held the lock; that
        thread does not exist in the child, whose first run would wait for it forever.
        If the forking thread itself is inside :meth:`run`, it continues there in the
        child: it keeps the lock and its runs (with none left, its exit from the run
        once left the count at -1, and :meth:`close` was refused for good), but
        those runs are the parent's: :meth:`check_draw` refuses their noise here.
        """
        if self._running and self._owner == threading.get_ident():
            self._inherited = self._running
            return
        self._lock = threading.RLock()
        self._running = self._inherited = 0

    def _check_reproducible(self) -> None:
        """Refuse a charged run of seeded noise outside the process that made the stream.

        The stream's process (``rng._home``) and the charger's are both checked: a
        charger built in a forked child from a stream the parent made repeats the
        noise of every sibling that does the same. A process is its id and a token
        drawn again at every fork (an id is reused once its process exits), and a
        reproducible stream that does not say where it was made is refused.
        """
        if self.active and self._rng is not None:
            _refuse_foreign_seed(self._rng, self._what, owner=self._home)

    def _before(self) -> None:
        """Make sure the next run is paid for; raise ``BudgetExceededError`` if it cannot be."""
        self._check_reproducible()
        self._forked()
        if not self.active or self._left > 0:
            return
        self._commit()
        count = self._block
        while True:
            try:
                self._charge(count)
            except BudgetExceededError:
                if count == 1:
                    raise
                count //= 2
                continue
            self._left = self._charged = count
            return

    def _after(self) -> None:
        """Record that one paid-for run was taken; commit the ledger entry of a used-up block."""
        if not self.active:
            return
        self._left -= 1
        if self._left == 0:
            self._commit()

    def close(self) -> None:
        """Commit the open ledger reservation for the runs taken; return the untaken ones.

        A ledger block of k runs of which j ≥ 1 were taken is committed as j runs
        (:meth:`gaussdp.Ledger.commit_part`); with none taken (the run failed after
        the reservation) the whole block stays charged. A filter cannot give back:
        its untaken runs stay charged.

        Raises
        ------
        RuntimeError
            If called inside a run (from the run's own thread, e.g. a step hook):
            the block would be committed without the run in progress. Nothing changes.
        """
        with self._lock:
            if self._running:
                raise RuntimeError(
                    f"close() cannot be called during a {self._what} (from inside it, "
                    f"e.g. a hook): call it after the {self._what} returns"
                )
            self._commit()

    def _commit(self) -> None:
        """:meth:`close` without the check: commit the open block as the runs taken."""
        with self._lock:
            self._forked()
            if self._open is not None and self._ledger is not None:
                taken = self._charged - self._left
                if 1 <= taken < self._charged:
                    self._ledger.commit_part(self._open, taken)
                else:
                    self._ledger.commit(self._open)
            self._open = None
            self._left = self._charged = 0

    @property
    def unused(self) -> int:
        """Runs paid for but not taken yet."""
        return self._left

    # -- runs taken before this charger (a resumed DP-SGD run) ------------------------
    @property
    def where(self) -> str | None:
        """Where this charger's runs are charged, as a checkpoint records it.

        ``"ledger:<run>"`` (``detail["run"]``, a token stored with each of its ledger
        entries), ``"filter:<token>"`` (a random token of the filter object, for this
        process's life) or None (charged nowhere).
        """
        if self._ledger is not None:
            return f"ledger:{self._detail['run']}"
        if self._filter is not None:
            return f"filter:{_filter_token(self._filter)}"
        return None

    def holds(self, where: object) -> bool:
        """Whether runs recorded as charged at ``where`` (:attr:`where`) are charged here.

        A ledger holds the runs of every run token among its entries' details (each
        run was charged there before its noise was drawn); a filter only its own.
        """
        if not isinstance(where, str):
            return False
        if self._filter is not None:
            return where == self.where
        if self._ledger is not None and where.startswith("ledger:"):
            runs = {(e.detail or {}).get("run") for e in self._ledger.entries()}
            return where.removeprefix("ledger:") in runs
        return False

    def charge_taken(self, event: Event, runs: int) -> None:
        """Charge ``event``, ``runs`` runs taken before this charger (nothing to run).

        Raises :class:`~gaussdp.errors.BudgetExceededError` if it does not fit;
        nothing is charged then.
        """
        what = f"the {runs} {self._what}s taken before, not charged here"
        with self._lock:
            self._forked()
            if self._filter is not None:
                self._filter.accept(event, what=what)
            elif self._ledger is not None:
                detail = {**self._detail, "runs": runs, "event": describe(event), "resumed": True}
                reservation = self._ledger.reserve(
                    event, label=self._label, detail=detail, what=what
                )
                self._ledger.commit(reservation)


#: A random token per live filter object (PrivacyFilter is in memory, one process).
_FILTER_TOKENS: weakref.WeakKeyDictionary[PrivacyFilter, str] = weakref.WeakKeyDictionary()


def _filter_token(spend: PrivacyFilter) -> str:
    token = _FILTER_TOKENS.get(spend)
    if token is None:
        token = _FILTER_TOKENS[spend] = secrets.token_hex(16)
    return token


def _after_fork_in_child() -> None:
    for charger in list(_LIVE_CHARGERS):
        charger._after_fork_in_child()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
