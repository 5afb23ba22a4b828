"""AIM: the workload, the accounting of its adaptive rounds, accuracy where MST cannot follow."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gaussdp.budget import Budget
from gaussdp.errors import BudgetExceededError
from gaussdp.privacy import zcdp_epsilon
from gaussdp.random import ChaCha20Random
from gaussdp.release import Ledger
from gaussdp.synth import Synthesizer, SynthResult, synthesizer_from_spec
from gaussdp.synth.aim import _largest_epsilon, workload_cliques, workload_weights
from gaussdp.synth.data import BayesNet
from gaussdp.synth.quality import workload_error

NET = BayesNet.xor()
COLUMNS = list(NET.columns)
SIZES = dict(NET.sizes)


def _xor(n: int) -> pd.DataFrame:
    """c = a XOR b (5 % flipped), d independent: every pair is independent, the triple is not."""
    return NET.sample(n, rng=ChaCha20Random(0))


def _synth(data: object, method: str, budget: Budget, **kw: object) -> Synthesizer:
    return Synthesizer(
        data,
        columns=COLUMNS,
        privacy_unit="unit",
        budget=budget,
        max_groups_per_unit=1,
        max_rows_per_group=1,
        iters=200,
        method=method,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


# -- the workload ------------------------------------------------------------------------
def test_workload_default_orders_and_lists() -> None:
    names = ["a", "b", "c", "d"]
    assert len(workload_cliques(names, None)) == 4  # all 3-way
    assert workload_cliques(names, 1) == (("a",), ("b",), ("c",), ("d",))
    assert workload_cliques(names, [["c", "a"], ("a", "c"), "d"]) == (("a", "c"), ("d",))
    for bad in (0, 5, [], [["a", "a"]], [["a", "z"]], "ab"):
        with pytest.raises(ValueError, match="workload"):
            workload_cliques(names, bad)


def test_weights_count_the_overlap_with_every_workload_marginal() -> None:
    # AIM, workload weights: w_r = Σ_s |r ∩ s|; checked by hand on W = {ab, bc}.
    w = workload_weights([("a", "b"), ("b", "c")])
    assert w == {("a",): 1, ("b",): 2, ("c",): 1, ("a", "b"): 3, ("b", "c"): 3}


def test_largest_epsilon_is_exact() -> None:
    for rho in (Fraction(1, 10), Fraction(1, 3), Fraction(7, 1000)):
        eps = _largest_epsilon(rho)
        assert Fraction(eps) ** 2 / 8 <= rho < Fraction(np.nextafter(eps, np.inf)) ** 2 / 8


def test_bad_options_are_refused() -> None:
    budget = Budget(rho=1.0)
    with pytest.raises(ValueError, match="method must be 'mst' or 'aim'"):
        _synth(None, "pgm", budget)
    with pytest.raises(ValueError, match="rounds must be"):
        _synth(None, "aim", budget, rounds=3)  # fewer than d = 4
    with pytest.raises(ValueError, match="max_model_size must be"):
        _synth(None, "aim", budget, max_model_size=0.0)


# -- accounting before the run -------------------------------------------------------------
def test_planned_report_caps_the_rounds_at_the_budget() -> None:
    budget = Budget(epsilon=1.0, delta=1e-6)
    report = _synth(None, "aim", budget).report
    capacity = budget.rho_capacity()
    assert report.method == "AIM"
    assert [e.kind for e in report.events] == ["measure"] * 4 + ["rounds"]
    # Each 1-way marginal gets α·ρ/T with T = 16d (AIM Alg. 1), Δ = 1: σ² = T/(2αρ) rounded up.
    for e in report.events[:4]:
        assert e.rho == pytest.approx(0.9 * capacity / 64, rel=1e-9)
        assert e.rho <= 0.9 * capacity / 64
    total = sum((Fraction(e.rho) for e in report.events), Fraction(0))
    assert total <= Fraction(capacity)
    assert report.rho == capacity
    assert report.epsilon == zcdp_epsilon(capacity, 1e-6)  # CKS Cor 13
    assert report.epsilon is not None
    assert report.epsilon <= 1.0


# -- a run -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[SynthResult, SynthResult, Ledger]:
    data = _xor(2000)
    budget = Budget(epsilon=2.0, delta=1e-6)
    ledger = Ledger(tmp_path_factory.mktemp("l") / "b.db", total=Budget(epsilon=5.0, delta=1e-6))
    # T = 6 rounds planned for d = 4 columns: two rounds run (≈ 15 s on one core, most of it
    # JAX compiling one model fit per round).
    aim = _synth(data, "aim", budget, rounds=6).run(
        rng=ChaCha20Random(1), ledger=ledger, evaluate=True
    )
    mst = _synth(data, "mst", budget).run(rng=ChaCha20Random(1))
    return aim, mst, ledger


@pytest.mark.slow
def test_the_rounds_spend_the_budget_and_no_more(
    runs: tuple[SynthResult, SynthResult, Ledger],
) -> None:
    aim, _, ledger = runs
    capacity = Fraction(Budget(epsilon=2.0, delta=1e-6).rho_capacity())
    events = aim.report.events
    assert [e.kind for e in events[:4]] == ["measure"] * 4
    rounds = events[4:]
    assert len(rounds) == 2 * len(aim.tree) >= 2
    assert [e.kind for e in rounds] == ["select", "measure"] * len(aim.tree)
    assert [e.clique for e in rounds[::2]] == list(aim.tree)
    exact = Fraction(0)
    for e in events:
        if e.kind == "select":
            assert e.epsilon is not None
            exact += Fraction(e.epsilon) ** 2 / 8  # Cesar & Rogers 2021 Lemma 3.2
            assert e.rho == pytest.approx(e.epsilon**2 / 8, rel=1e-15)
        else:
            gaussian = e.gaussian
            assert gaussian is not None
            assert gaussian.rho == pytest.approx(e.rho, rel=1e-15)  # Δ²/(2σ²), Δ² = L0·L∞²
            exact += Fraction(1, 2) / Fraction(e.sigma2 or 1)
    # The last round takes exactly what is left: the realised ρ's sum to the capacity
    # (up to σ² rounded up to multiples of 2⁻³²), never above it.
    assert exact <= capacity
    assert float(exact) == pytest.approx(float(capacity), rel=1e-9)
    assert aim.report.rho == float(capacity)
    (entry,) = ledger.entries()
    assert entry.status == "committed"
    assert entry.event.rho == float(capacity)  # type: ignore[union-attr]
    assert entry.detail is not None
    assert entry.detail["method"] == "AIM"


@pytest.mark.slow
def test_aim_finds_the_three_way_interaction_mst_cannot(
    runs: tuple[SynthResult, SynthResult, Ledger],
) -> None:
    aim, mst, _ = runs
    data = _xor(2000)
    truth = {n: data[n].to_numpy() for n in SIZES}

    def error(result: SynthResult) -> float:
        codes = {c.name: c.encode(result.frame[c.name]) for c in COLUMNS}
        return float(workload_error(codes, truth, SIZES, 3).mean())

    # Every pair of a, b, c is independent, so a tree of 2-way marginals cannot
    # carry c = a XOR b; AIM measures the 3-way marginal (a, b, c).
    assert ("a", "b", "c") in aim.tree
    assert error(aim) < 0.05 < 0.1 < error(mst)
    q = aim.quality
    abc = q[q["clique"] == "a,b,c"]
    assert float(abc["tv_true"].iloc[0]) < 0.05


def test_a_ledger_that_cannot_afford_aim_refuses_it(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "b.db", total=Budget(epsilon=0.5, delta=1e-6))
    with pytest.raises(BudgetExceededError):
        _synth(_xor(50), "aim", Budget(epsilon=1.0, delta=1e-6)).run(
            rng=ChaCha20Random(1), ledger=ledger
        )
    assert ledger.entries() == []


def test_a_spec_selects_aim_and_its_options() -> None:
    spec = {
        "privacy_unit": "unit",
        "max_groups_per_unit": 1,
        "max_rows_per_group": 1,
        "budget": {"rho": 0.5},
        "method": "aim",
        "workload": [["a", "b"], ["c", "d"]],
        "rounds": 10,
        "max_model_size": 1.5,
        "column": [{"name": c.name, "categories": list(c.categories)} for c in COLUMNS],
    }
    synth = synthesizer_from_spec(spec, None)
    assert synth.method == "aim"
    assert synth.workload == (("a", "b"), ("c", "d"))
    assert (synth.rounds, synth.max_model_size) == (10, 1.5)
    assert synth.report.method == "AIM"
    with pytest.raises(ValueError, match="workload entry must be"):
        synthesizer_from_spec({**spec, "workload": [["a", "e"]]}, None)
    with pytest.raises(ValueError, match="workload entry must be"):
        synthesizer_from_spec({**spec, "workload": [["a", ["b"]]]}, None)
