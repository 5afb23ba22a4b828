"""PrivacyFilter shared by threads: every admitted event is recorded, nothing is overspent."""

from __future__ import annotations

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
