"""PrivacyFilter answers: a history nothing certifies costs ∞ (refused, nothing spent),
another certified bound where the PLD does not fit, and a check made twice computes once."""

from __future__ import annotations

import math

import pytest

import gaussdp.accounting.filter as filter_module
from gaussdp.accounting import (
    ApproxDP,
    Composed,
    PLDAccountant,
    PrivacyFilter,
    PureDP,
    ZCDPAccountant,
)
from gaussdp.accounting._adaptive import MemoryBoundError
from gaussdp.accounting.filter import refusal, spent
from gaussdp.errors import BudgetExceededError
from gaussdp.mechanisms import Gaussian

# 2**53 runs of a step whose PLD lattice is ε0 = 1e-9: about 10⁸ grid points, beyond the
# memory bound at every step the accountant tries.
HUGE = 2**53


def test_a_history_nothing_certifies_is_refused_and_spends_nothing() -> None:
    # Truly within the budget (δ: 2**53·1e-25 ≈ 9e-10; ε ≈ ε0·√(2k ln(1/δ)) ≈ 0.6 by
    # advanced composition), but no accountant of the budget certifies it: the PLD does
    # not fit and zCDP/RDP have no bound for an (ε, δ) step. Used to raise ValueError
    # ("tolerance must be reachable within the memory bound").
    event = ApproxDP(1e-9, 1e-25)
    with pytest.raises(MemoryBoundError):
        PLDAccountant().compose(event, HUGE).epsilon(1e-5)
    f = PrivacyFilter(epsilon=1.0, delta=1e-5)
    f.accept(Gaussian(10.0))
    before = f.spent
    assert not f.can_accept(event, HUGE)
    with pytest.raises(BudgetExceededError, match="no accountant certifies it within the memory"):
        f.accept(event, HUGE)
    assert f.history == Composed((Gaussian(10.0),))
    assert f.spent == before
    assert f.cost(event, HUGE) == math.inf
    # A count that fits is answered as before.
    assert PrivacyFilter(epsilon=1.0, delta=1e-5).can_accept(event, 10)


def test_where_the_pld_does_not_fit_another_certified_bound_answers() -> None:
    # PureDP(1e-9) ×2**53 is ρ = 2**53·1e-18/2-zCDP (Bun & Steinke 2016 Prop 1.4): the
    # filter's zCDP member certifies it where the PLD cannot.
    event = PureDP(1e-9)
    f = PrivacyFilter(epsilon=1.0, delta=1e-5)
    f.accept(Gaussian(10.0))
    assert f.can_accept(event, HUGE)
    f.accept(event, HUGE)
    zcdp = ZCDPAccountant().compose(Gaussian(10.0)).compose(event, HUGE).epsilon(1e-5)
    assert f.spent == zcdp.upper < 1.0
    answer = f.accountant.epsilon(1e-5)
    assert answer.note.startswith("the PLD does not fit the memory bound; the ZCDPAccountant")


def test_a_check_made_twice_computes_once_and_decides_as_without_memo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []

    def counted(budget: object, accountant: object) -> object:
        calls.append(1)
        return spent(budget, accountant)  # type: ignore[arg-type]

    monkeypatch.setattr(filter_module, "spent", counted)
    f = PrivacyFilter(epsilon=1.0, delta=1e-5)
    plain = PrivacyFilter(epsilon=1.0, delta=1e-5)  # decides by fresh computations
    events = [Gaussian(4.0), Gaussian(1.5), Gaussian(2.0), PureDP(0.3), Gaussian(8.0)]
    verdicts = []
    for event in events:
        calls.clear()
        ok = f.can_accept(event)
        if ok:
            f.accept(event)  # as Release.run does: the same check again
            assert len(calls) == 1  # the history with the event: measured once
        else:
            with pytest.raises(BudgetExceededError):
                f.accept(event)
        acc = plain.accountant
        fresh, _ = refusal(plain.budget, acc, event, measure=spent)
        assert (fresh is None) == ok
        if fresh is None:
            plain.accept(event)
        verdicts.append(ok)
    assert True in verdicts  # both answers were exercised
    assert False in verdicts
    assert f.history == plain.history
    assert f.spent == spent(plain.budget, plain.accountant).value


def test_a_charge_certified_by_zcdp_or_rdp_says_so() -> None:
    # An event known only by its ρ (no μ) has no PLD: the ε budget's zCDP member certifies
    # the history, and what is spent says so, in the filter and in the text people read.
    from gaussdp.accounting import RecordedCost
    from gaussdp.accounting.filter import left_text

    f = PrivacyFilter(epsilon=1.0, delta=1e-5)
    f.accept(Gaussian(10.0))
    assert f.spent_note == ""  # the PLD's own bound
    f.accept(RecordedCost(rho=0.01, mu=None, slack=0.0, delta=0.0))
    used = spent(f.budget, f.accountant)
    zcdp = ZCDPAccountant().compose(Gaussian(10.0)).epsilon(1e-5).upper
    assert used.value > zcdp  # the ρ on top, converted (Bun & Steinke 2016 Prop 1.3)
    assert used.note == f.spent_note
    assert f.spent_note.startswith("certified by the zCDP bound: the PLD cannot account")
    text = left_text(f.budget, used.value, used.delta, used.note)
    assert text.endswith(f"({f.spent_note})")
    assert left_text(f.budget, used.value, used.delta) == text.removesuffix(f" ({used.note})")
