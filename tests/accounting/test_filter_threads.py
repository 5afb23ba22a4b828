"""PrivacyFilter shared by threads: every admitted event is recorded, nothing is overspent."""

from __future__ import annotations

import copy
import math
import pickle
import sys
import threading

import pytest

from gaussdp import Budget
from gaussdp.accounting import PrivacyFilter
from gaussdp.errors import BudgetExceededError
from gaussdp.mechanisms import Gaussian

THREADS = 8


def _hammer(f: PrivacyFilter, event: Gaussian, attempts: int) -> int:
    """Each of THREADS threads tries ``attempts`` charges at once; returns the admitted count."""
    admitted = [0] * THREADS
    start = threading.Barrier(THREADS)

    def work(i: int) -> None:
        start.wait()
        for _ in range(attempts):
            f.can_accept(event)
            try:
                f.charge(event)
            except BudgetExceededError:
                continue
            admitted[i] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: races show up if there are any
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    return sum(admitted)


@pytest.mark.parametrize(
    "budget", [Budget(rho=1.0), Budget(mu=1.0), Budget(epsilon=5.0, delta=1e-6)], ids=str
)
def test_concurrent_charges_never_overspend(budget: Budget) -> None:
    event = Gaussian(sigma=5.0)  # ρ = 0.02, μ = 0.2
    alone = PrivacyFilter(budget)
    expected = 0
    while alone.can_accept(event):
        alone.charge(event)
        expected += 1
    assert expected > THREADS  # the budget runs out while threads compete
    shared = PrivacyFilter(budget)
    admitted = _hammer(shared, event, attempts=2 * expected // THREADS + 2)
    # Every admitted charge is in the history (no lost update) and the total is within
    # the budget: exactly what one thread charging alone gets.
    assert admitted == expected
    assert shared.accountant.count == admitted
    assert shared.spent == alone.spent
    assert not shared.can_accept(event)


@pytest.mark.parametrize(
    "budget",
    [Budget(epsilon=5.0, delta=1e-6), Budget(rho=1.0), Budget(mu=1.5)],
    ids=["epsilon-delta", "rho", "mu"],
)
@pytest.mark.parametrize("how", ["pickle", "copy", "deepcopy"])
def test_a_copied_filter_shows_its_history_and_spends_nothing(budget: Budget, how: str) -> None:
    # Once: a pickled or copied filter admitted like the original, so a one-run budget
    # paid for a run in every copy (priv25 #3: 6 answers from one release's budget).
    f = PrivacyFilter(budget)
    f.accept(Gaussian(sigma=3.0))
    f.accept(Gaussian(sigma=4.0), 2)
    copier = {
        "pickle": lambda x: pickle.loads(pickle.dumps(x)),
        "copy": copy.copy,
        "deepcopy": copy.deepcopy,
    }[how]
    g = copier(f)
    assert g.budget == f.budget
    assert g.history == f.history
    assert g.spent == f.spent
    assert g.remaining == f.remaining or (math.isnan(g.remaining) and math.isnan(f.remaining))
    small = Gaussian(sigma=30.0)
    for ask in (lambda: g.accept(small), lambda: g.can_accept(small)):
        with pytest.raises(RuntimeError, match=r"^filter must be the original, in the process"):
            ask()
    assert g.history == f.history  # nothing recorded by the refusals
    f.accept(small)  # the original goes on
    assert len(f.history.events) == len(g.history.events) + 1


def test_a_bad_pickled_state_is_refused_with_the_template() -> None:
    f = PrivacyFilter(Budget(rho=1.0))
    with pytest.raises(TypeError, match=r"^state must be a pickled PrivacyFilter, got "):
        f.__setstate__({"budget": None, "accountant": None})
