"""Nothing spends outside a filter: every Release.run is charged, and refused before reading."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pandas as pd
import pytest

from gaussdp.accounting import PartitionSelection, PLDAccountant, PrivacyFilter
from gaussdp.budget import Budget
from gaussdp.errors import BudgetExceededError
from gaussdp.mechanisms import Gaussian
from gaussdp.random import ChaCha20Random
from gaussdp.release import Ledger, Release

BUDGET = Budget(epsilon=1.0, delta=1e-6)


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "visits.csv"
    frame = pd.DataFrame({"user": [1, 1, 2, 3, 4], "page": ["a", "b", "a", "a", "b"]})
    frame.to_csv(path, index=False)
    return path


def _release(source: object, budget: Budget = BUDGET) -> Release:
    return Release(
        source, privacy_unit="user", budget=budget, max_groups_per_unit=2, max_rows_per_group=1
    ).count(by="page", keys=["a", "b"])


def _unreadable(path: Path) -> None:
    """Make ``path`` fail if anything opens it: it becomes a directory."""
    path.unlink()
    path.mkdir()


def test_rerunning_a_release_is_charged_and_refused_before_reading(tmp_path: Path) -> None:
    path = _csv(tmp_path)
    release = _release(path)
    release.run(rng=ChaCha20Random(1))
    assert release.filter.spent == release.report.epsilon  # ≤ 1 (PLD: to 10⁻⁴ of it)
    assert 0.999 <= release.filter.spent <= 1.0
    assert release.filter.history.events == (release.plan().event,)
    _unreadable(path)  # a source that fails if read
    message = (
        r"^refused: this release costs ε = (1|0\.999\d*) at δ = 1e-06; "
        r"the filter has spent ε = (1|0\.999\d*) of 1 \(δ = 1e-06, partition selection δ = 0\); "
        r"with it: ε = \d"
    )
    with pytest.raises(BudgetExceededError, match=message):
        release.run(rng=ChaCha20Random(2))
    assert len(release.filter.history.events) == 1  # nothing charged by the refusal


def test_a_second_query_set_against_the_same_filter(tmp_path: Path) -> None:
    path = _csv(tmp_path)
    shared = PrivacyFilter(Budget(epsilon=1.6, delta=1e-6))
    first = _release(path, Budget(epsilon=1.5, delta=1e-6))
    first.run(rng=ChaCha20Random(1), filter=shared)
    spent = shared.spent
    second = _release(path, Budget(epsilon=1.0, delta=1e-6))  # its own budget fits alone
    _unreadable(path)
    with pytest.raises(BudgetExceededError, match=r"the filter has spent ε = 1\.[45]\d* of 1\.6"):
        second.run(rng=ChaCha20Random(2), filter=shared)
    assert shared.spent == spent
    assert second.filter.spent == 0.0  # its own filter was not touched either


def test_a_ledger_release_is_checked_before_reading(tmp_path: Path) -> None:
    path = _csv(tmp_path)
    ledger = Ledger(tmp_path / "b.db", total=Budget(epsilon=1.2, delta=1e-6))
    release = _release(path)
    release.run(rng=ChaCha20Random(1), ledger=ledger)
    assert release.filter.spent == 0.0  # the ledger was charged instead
    (entry,) = ledger.entries()
    assert entry.event == release.plan().event
    expected = PLDAccountant().compose(release.plan().event).epsilon(1e-6).upper
    assert ledger.spent == expected
    _unreadable(path)
    with pytest.raises(BudgetExceededError, match=r"the ledger has spent ε = (1|0\.9\d*) of 1\.2"):
        release.run(rng=ChaCha20Random(2), ledger=ledger)
    assert len(ledger.entries()) == 1
    with pytest.raises(ValueError, match="^filter must be None when a ledger is given"):
        release.run(ledger=ledger, filter=PrivacyFilter(BUDGET))


def test_a_bad_input_spends_nothing(tmp_path: Path) -> None:
    path = _csv(tmp_path)
    release = Release(
        path, privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
    ).sum("nope", bounds=(0, 1))
    with pytest.raises(ValueError, match="nope"):
        release.run()
    assert release.filter.spent == 0.0


def test_filter_takes_a_budget_and_keywords() -> None:
    assert PrivacyFilter(Budget(mu=1.0)).budget == PrivacyFilter(mu=1.0).budget
    f = PrivacyFilter(Budget(epsilon=1.0, delta=1e-5))
    assert f.cost(Gaussian(sigma=10.0)) == f.cost(Gaussian(sigma=10.0), 1) > 0
    with pytest.raises(ValueError, match="^budget must be given once"):
        PrivacyFilter(Budget(mu=1.0), mu=1.0)
    with pytest.raises(TypeError, match="^budget must be a gaussdp.Budget"):
        PrivacyFilter("1.0")  # type: ignore[arg-type]
    rho = PrivacyFilter(Budget(rho=1.0))
    with pytest.raises(BudgetExceededError, match="a ρ budget cannot spend δ"):
        rho.accept(PartitionSelection(1000, 300, 1, 10))


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_copied_release_cannot_spend_its_budget_again(tmp_path: Path, how: str) -> None:
    # Once (priv25 #3): the original, 3 pickled copies (what a 'spawn' worker gets) and 2
    # deep copies each answered on a budget that pays for one run: 6 answers.
    path = _csv(tmp_path)
    release = _release(path)
    copied = pickle.loads(pickle.dumps(release)) if how == "pickle" else copy.deepcopy(release)
    release.run()
    _unreadable(path)  # the refusals read nothing
    with pytest.raises(RuntimeError, match=r"^filter must be the original, in the process"):
        copied.run()
    assert copied.filter.history.events == ()  # nothing charged by the refusal
    with pytest.raises(BudgetExceededError):
        release.run()


def test_report_and_run_share_one_plan_until_an_input_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The charged plan is made once for ``report`` and ``run``; replacing any input of
    it (an added query, another budget or L∞) plans again, and ``plan()`` is always a
    fresh object, so no caller holds the plan a later run charges."""
    from gaussdp.release import core

    made: list[object] = []
    real = core.make_plan

    def counting(*args: object, **kwargs: object) -> object:
        made.append(kwargs["max_rows_per_group"])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(core, "make_plan", counting)
    path = _csv(tmp_path)
    release = _release(path)
    report = release.report
    result = release.run(rng=ChaCha20Random(1))
    assert made == [1]  # planned once for both
    assert result.report == report
    release.sum("minutes", bounds=(0, 1), by="page", keys=["a"])
    release.report  # noqa: B018
    release.max_rows_per_group = 2
    release.report  # noqa: B018
    release.budget = Budget(epsilon=1.0, delta=1e-6)  # equal, another object: planned again
    release.report  # noqa: B018
    assert made == [1, 1, 2, 2]
    assert release.plan() is not release.plan()  # a fresh object each time
    assert made == [1, 1, 2, 2, 2, 2]


@pytest.mark.parametrize(
    ("budget", "keys"),
    [
        (Budget(epsilon=1.0, delta=1e-6), None),  # exact parts, private partition selection
        (Budget(epsilon=0.3, delta=1e-9), ["a", "b", "c"]),
        (Budget(rho=0.5), ["a", "b", "c"]),
    ],
)
def test_the_budget_check_reuses_the_plans_certified_spend_exactly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, budget: Budget, keys: list[str] | None
) -> None:
    """A release plan certifies its event on an empty history; the check of a fresh filter
    (and of an empty ledger) measures that same history, and takes the plan's value
    (``filter.remember_spent``) instead of a second PLD: the check computes nothing for
    an (ε, δ) budget, and what is charged — ε or ρ, its lower bound, the selection's δ,
    the slack, the note — equals a new computation of the filter's history. A second run
    (a history of two) is computed, and equal too."""
    from gaussdp.accounting import filter as filter_module
    from gaussdp.accounting.filter import budget_accountant

    frame = pd.DataFrame(
        {
            "user": [u // 3 for u in range(300)],
            "page": [["a", "b", "c"][u % 3] for u in range(300)],
            "minutes": [float(u % 50) for u in range(300)],
        }
    )

    def build() -> Release:
        release = Release(
            frame, privacy_unit="user", budget=budget, max_groups_per_unit=2, max_rows_per_group=2
        )
        release.count(by="page", keys=keys).sum("minutes", bounds=(0, 60), by="page", keys=keys)
        return release.mean("minutes", bounds=(0, 60), by="page", keys=keys)

    computed: list[object] = []
    real = filter_module.spent

    def counted(b: Budget, accountant: object) -> filter_module.Spent:
        computed.append(accountant)
        return real(b, accountant)  # type: ignore[arg-type]

    release = build()
    event = release.plan().event
    monkeypatch.setattr(filter_module, "spent", counted)
    release.run(rng=ChaCha20Random(1))
    if budget.delta is not None:
        assert computed == []  # the plan's certified value
    charged = release.filter._measure(budget, release.filter.accountant)
    fresh = real(budget, budget_accountant(budget).compose(event))
    assert charged == fresh
    assert charged.value == release.filter.spent > 0
    # A ledger's check of an empty ledger takes it as well, and charges the same.
    book = Ledger(tmp_path / "book.db", total=budget)
    computed.clear()
    build().run(ledger=book, rng=ChaCha20Random(2))
    if budget.delta is not None:
        assert computed == []
    assert book.spent == fresh.value
    # A history of two is not the plan's: computed, and the same as a new computation.
    larger = Budget(rho=3 * budget.rho) if budget.rho else Budget(epsilon=3.0, delta=budget.delta)
    other = PrivacyFilter(larger)
    release.run(filter=other, rng=ChaCha20Random(3))
    computed.clear()
    release.run(filter=other, rng=ChaCha20Random(4))
    assert computed != []
    twice = real(larger, budget_accountant(larger).compose(event).compose(event))
    assert other._measure(larger, other.accountant) == twice
    assert other.spent == twice.value


def test_a_plan_that_meets_its_budget_at_a_tiny_delta_is_admitted_by_that_budget(
    tmp_path: Path,
) -> None:
    """rev29-rel F2: at δ = 1e-12 the PLD's bracket is held wide by its truncations, and
    each query of the plan's accountant refined the grid and answered a larger upper
    bound (0.59999 for the plan, 0.601 for the check it remembered). A fresh filter and
    an empty ledger of the release's own budget then refused a plan that meets it. Now
    the plan's ε is the one query the check remembers, and asking again answers the same."""
    from gaussdp.accounting.filter import budget_accountant

    budget = Budget(epsilon=0.6, delta=1e-12)
    frame = pd.DataFrame(
        {
            "user": [u % 500 for u in range(3000)],
            "page": [["a", "b", "c", "d", "e", "f"][(7 * u) % 6] for u in range(3000)],
            "minutes": [float((13 * u) % 60) for u in range(3000)],
        }
    )

    def build() -> Release:
        release = Release(
            frame, privacy_unit="user", budget=budget, max_groups_per_unit=3, max_rows_per_group=2
        )
        release.count(by="page").sum("minutes", bounds=(0, 60), by="page")
        return release.mean("minutes", bounds=(0, 60), by="page")

    release = build()
    plan = release.plan()
    assert plan.accounting == "pld"
    assert plan.epsilon is not None
    assert plan.epsilon <= budget.epsilon
    assert PrivacyFilter(budget).can_accept(plan.event)
    release.run(rng=ChaCha20Random(1))
    assert release.filter.spent == plan.epsilon
    book = Ledger(tmp_path / "book.db", total=budget)
    build().run(ledger=book, rng=ChaCha20Random(2))
    assert book.spent == plan.epsilon
    # A new computation, asked three times, answers the plan's ε each time.
    accountant = budget_accountant(budget).compose(plan.event)
    assert [accountant.epsilon(1e-12).upper for _ in range(3)] == [plan.epsilon] * 3
