"""MST synthesis end to end: accounting, ledger, bounding, bad input, utility on a known network."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gaussdp.accounting import (
    Composed,
    ExponentialMechanism,
    PLDAccountant,
    RDPAccountant,
    SelfComposed,
    ZCDPAccountant,
)
from gaussdp.accounting.filter import PrivacyFilter, budget_accountant, spent
from gaussdp.budget import Budget
from gaussdp.errors import BudgetExceededError
from gaussdp.privacy import zcdp_epsilon
from gaussdp.random import ChaCha20Random
from gaussdp.release import Ledger
from gaussdp.synth import Categorical, Numeric, Synthesizer, SynthResult
from gaussdp.synth.data import BayesNet
from gaussdp.synth.quality import total_variation

NET = BayesNet.example()


def _synth(data: object, budget: Budget, **kw: object) -> Synthesizer:
    options: dict[str, object] = {
        "columns": NET.columns,
        "privacy_unit": "unit",
        "budget": budget,
        "max_groups_per_unit": 1,
        "max_rows_per_group": 1,
        "iters": 300,
    }
    options.update(kw)
    return Synthesizer(data, **options)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def bn_data() -> pd.DataFrame:
    return NET.sample(5000, rng=ChaCha20Random(11))


@pytest.fixture(scope="module")
def run(
    bn_data: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory
) -> tuple[SynthResult, Ledger]:
    ledger = Ledger(tmp_path_factory.mktemp("l") / "b.db", total=Budget(epsilon=50.0, delta=1e-6))
    synth = _synth(bn_data, Budget(epsilon=30.0, delta=1e-6))
    return synth.run(rng=ChaCha20Random(3), ledger=ledger, evaluate=True), ledger


# -- accounting (no data read) ---------------------------------------------------------
def test_report_is_the_composition_of_its_events() -> None:
    budget = Budget(epsilon=1.0, delta=1e-6)
    report = _synth(None, budget).report
    d = len(NET.sizes)
    kinds = [e.kind for e in report.events]
    assert kinds == ["measure"] * d + ["select"] * (d - 1) + ["measure"] * (d - 1)
    measures = [e for e in report.events if e.kind == "measure"]
    selects = [e for e in report.events if e.kind == "select"]
    accountant = RDPAccountant()
    for e in measures:
        event = e.gaussian
        assert event is not None
        assert event.rho == pytest.approx(e.rho, rel=1e-15)  # Release's ρ = Δ²/(2σ²)
        accountant.compose(event)
    rho_gauss = accountant.rdp() / np.asarray(accountant.orders)  # RDP of zCDP is α·ρ
    assert np.allclose(rho_gauss, rho_gauss[0], rtol=1e-12)
    # Exponential mechanism: ε-bounded-range, ε²/8-zCDP; ε set so the d − 1 choices use ρ/3.
    rho_select = sum(Fraction(e.epsilon) ** 2 / 8 for e in selects)  # type: ignore[arg-type]
    total = Fraction(float(rho_gauss[0])) + rho_select
    assert report.rho == pytest.approx(float(total), rel=1e-12)
    # The plan is calibrated so that the composition of its events — the ledger's check,
    # PLD accountant — meets (ε, δ): more ρ than CKS Cor 13 allows, and the report's ε
    # is exactly what the accountant certifies.
    assert report.rho > 1.05 * budget.rho_capacity()
    certified = spent(budget, budget_accountant(budget).compose(report.event)).value
    assert report.epsilon == certified
    assert 0.999 <= report.epsilon <= 1.0  # the budget is spent, not wasted
    assert zcdp_epsilon(report.rho, 1e-6) > 1.0  # Cor 13 could not certify this plan
    assert report.mode == "pld"  # the report says where its ε comes from
    assert report.to_dict()["mode"] == "pld"
    assert all(e.sensitivity == 1.0 for e in report.events)
    # The ledger is charged the events themselves: the selections as ε-bounded-range
    # ExponentialMechanism events, composed by the accountants (zCDP: ε²/8 each).
    event = report.event
    assert isinstance(event, Composed)
    assert SelfComposed(ExponentialMechanism(selects[0].epsilon or 0.0), d - 1) in event.events
    assert ZCDPAccountant().compose(event).rho == pytest.approx(report.rho, rel=1e-12)
    assert PLDAccountant().compose(event).epsilon(1e-6).upper <= 1.0


def test_a_rho_budget_is_planned_in_rho() -> None:
    budget = Budget(rho=0.05, delta=1e-6)
    report = _synth(None, budget).report
    assert 0.999 * 0.05 <= report.rho <= 0.05
    assert report.epsilon == zcdp_epsilon(report.rho, 1e-6)  # CKS Cor 13
    assert report.to_dict()["mode"] == "zcdp"


@pytest.mark.parametrize(
    "budget", [Budget(rho=0.5), Budget(epsilon=1.0, delta=1e-6)], ids=["rho", "eps-delta"]
)
def test_a_ledger_holding_exactly_the_budget_accepts_the_run(
    budget: Budget, tmp_path: Path
) -> None:
    report = _synth(None, budget).report
    Ledger(tmp_path / "b.db", total=budget).check(report.event)  # no BudgetExceededError


def test_bounds_enter_the_sensitivities() -> None:
    report = _synth(None, Budget(rho=1.0), max_groups_per_unit=4, max_rows_per_group=2).report
    assert {e.sensitivity for e in report.events if e.kind == "measure"} == {2.0 * 2}  # √L0·L∞
    assert {e.sensitivity for e in report.events if e.kind == "select"} == {8.0}  # L0·L∞
    assert report.rho <= 1.0
    assert report.epsilon is None


# -- a run -------------------------------------------------------------------------------
@pytest.mark.slow
def test_run_report_equals_the_planned_one_and_the_ledger_holds_it(
    run: tuple[SynthResult, Ledger], bn_data: pd.DataFrame
) -> None:
    result, ledger = run
    planned = _synth(bn_data, Budget(epsilon=30.0, delta=1e-6)).report
    assert result.report.rho == planned.rho
    assert result.report.epsilon == planned.epsilon
    (entry,) = ledger.entries()
    assert entry.status == "committed"
    assert entry.event == planned.event  # the measurements and the selections as events
    assert entry.detail is not None
    assert entry.detail["method"] == "MST"
    assert [tuple(e.clique) for e in result.report.events if e.kind == "select"] == list(
        result.tree
    )


@pytest.mark.slow
def test_true_edges_are_recovered_and_their_marginals_are_close(
    run: tuple[SynthResult, Ledger],
) -> None:
    result, _ = run
    assert {frozenset(e) for e in result.tree} == {frozenset(e) for e in NET.edges}
    frame = result.frame
    assert len(frame) == pytest.approx(5000, rel=0.02)
    for a, b in NET.edges:
        synthetic = pd.crosstab(frame[a], frame[b]).reindex(
            index=range(NET.sizes[a]), columns=range(NET.sizes[b]), fill_value=0
        )
        # Sampling error of 5000 rows on ≤ 12 cells is ~0.02; 0.05 leaves room for the noise.
        assert total_variation(synthetic.to_numpy().ravel(), NET.marginal((a, b))) < 0.05
    q = result.quality
    assert len(q) == 6 + 15 + 20
    measured = q[q["tv_measured"].notna()]
    assert sorted(measured["order"]) == [1] * 6 + [2] * 5
    assert (q["tv_true"] < 0.1).all()


@pytest.mark.slow
def test_same_seed_same_table_and_rows_is_honoured(bn_data: pd.DataFrame) -> None:
    # Two synthesizers: one's own filter pays for one run of its budget.
    one = _synth(bn_data.head(400), Budget(rho=2.0)).run(rng=ChaCha20Random(8), rows=300)
    two = _synth(bn_data.head(400), Budget(rho=2.0)).run(rng=ChaCha20Random(8), rows=300)
    assert len(one.frame) == 300
    pd.testing.assert_frame_equal(one.frame, two.frame)
    assert one.tree == two.tree
    assert np.isnan(one.quality["tv_true"]).all()  # not computed unless asked


@pytest.mark.slow
def test_a_unit_with_many_rows_is_bounded() -> None:
    # 300 units with one row each, and unit -1 with 2000 rows all in cell "z".
    rng = np.random.default_rng(4)
    data = pd.DataFrame(
        {
            "unit": np.r_[np.arange(300), np.full(2000, -1)],
            "k": np.r_[rng.choice(["x", "y"], 300), np.full(2000, "z")],
            "v": np.r_[rng.uniform(0, 1, 300), np.full(2000, 0.5)],
        }
    )
    synth = Synthesizer(
        data,
        columns=[Categorical("k", ["x", "y", "z"]), Numeric("v", (0, 1), 4)],
        privacy_unit="unit",
        budget=Budget(rho=2.0),
        max_groups_per_unit=1,
        max_rows_per_group=1,
        iters=100,
    )
    result = synth.run(rng=ChaCha20Random(1))
    one_way_k = result.measurements[0]
    assert one_way_k.clique == ("k",)
    # The unit counts once: z's noisy count is 1 + N_Z(0, σ²) with σ² = 1.5 (ρ/3 over two
    # columns, Δ = 1); 20 is > 15σ away, where 2000 would be without bounding.
    assert one_way_k.sigma < 1.25
    assert one_way_k.values[2] < 20


# -- bad input: clear errors, nothing spent ----------------------------------------------
def _ledger(tmp_path: Path, epsilon: float = 10.0) -> Ledger:
    return Ledger(tmp_path / "b.db", total=Budget(epsilon=epsilon, delta=1e-6))


def test_a_column_without_a_domain_is_refused() -> None:
    with pytest.raises(TypeError, match="every column needs a public domain"):
        Synthesizer(
            None,
            columns=["a"],  # type: ignore[list-item]
            privacy_unit="unit",
            budget=Budget(rho=1.0),
            max_groups_per_unit=1,
            max_rows_per_group=1,
        )


def test_a_row_outside_the_domain_is_dropped_not_refused(
    tmp_path: Path, bn_data: pd.DataFrame
) -> None:
    # Regression: one person's value outside the domain made the run refuse, which told
    # neighbouring tables apart. The row is dropped: the run equals the one without it.
    data = bn_data.head(100).copy()
    data.loc[5, "d"] = 9
    data.loc[7, "d"] = None
    budget = Budget(epsilon=1.0, delta=1e-6)
    ledger = _ledger(tmp_path)
    got = _synth(data, budget, iters=20).run(rng=ChaCha20Random(1), ledger=ledger)
    without = data.drop(index=[5, 7])
    want = _synth(without, budget, iters=20).run(rng=ChaCha20Random(1))
    pd.testing.assert_frame_equal(got.frame, want.frame)
    assert len(ledger.entries()) == 1


def test_a_csv_string_after_the_sample_rows_is_outside_the_domain(tmp_path: Path) -> None:
    # Regression: DuckDB's types came from a sample, so one late string failed the read
    # (a refusal that depends on one row, its cause quoting the row). Read as text, the
    # value is outside the numeric domain: its row is dropped.
    path = tmp_path / "late.csv"
    rows = [f"{i},{i % 2},{i % 7}" for i in range(25_000)]
    path.write_text("\n".join(["unit,a,x", *rows, "25000,1,SSN-123"]) + "\n")
    columns = [Categorical("a", [0, 1]), Numeric("x", (0, 7), 7)]
    options = {"columns": columns, "iters": 20}
    got = _synth(path, Budget(rho=1.0), **options).run(rng=ChaCha20Random(1))
    plain = tmp_path / "plain.csv"
    plain.write_text("\n".join(["unit,a,x", *rows]) + "\n")
    want = _synth(plain, Budget(rho=1.0), **options).run(rng=ChaCha20Random(1))
    pd.testing.assert_frame_equal(got.frame, want.frame)


def test_an_empty_table_is_synthesised_from_noise(tmp_path: Path, bn_data: pd.DataFrame) -> None:
    # Regression: an empty table was refused (a refusal that depends on the data).
    ledger = _ledger(tmp_path)
    result = _synth(bn_data.head(0), Budget(epsilon=1.0, delta=1e-6), iters=20).run(
        rng=ChaCha20Random(1), ledger=ledger
    )
    assert list(result.frame.columns) == [c.name for c in NET.columns]
    assert len(ledger.entries()) == 1


def test_a_missing_column_or_file_spends_nothing(tmp_path: Path, bn_data: pd.DataFrame) -> None:
    ledger = _ledger(tmp_path)
    with pytest.raises(ValueError, match="data columns must be including"):
        _synth(bn_data.drop(columns="f"), Budget(rho=1.0)).run(ledger=ledger)
    with pytest.raises(FileNotFoundError):
        _synth(tmp_path / "nope.csv", Budget(rho=1.0)).run(ledger=ledger)
    assert ledger.entries() == []


def test_a_budget_too_small_for_the_one_way_marginals_is_refused() -> None:
    with pytest.raises(ValueError, match="large enough to measure the 1-way marginals"):
        _synth(None, Budget(epsilon=1e-6, delta=1e-9))
    with pytest.raises(ValueError, match="large enough to measure the 1-way marginals"):
        _synth(None, Budget(epsilon=0.0, delta=1e-6))
    with pytest.raises(ValueError, match="synth accounts in zCDP"):
        _synth(None, Budget(mu=1.0))


def test_a_ledger_that_cannot_afford_the_run_refuses_it(
    tmp_path: Path, bn_data: pd.DataFrame
) -> None:
    ledger = _ledger(tmp_path, epsilon=0.5)
    with pytest.raises(BudgetExceededError):
        _synth(bn_data.head(50), Budget(epsilon=1.0, delta=1e-6)).run(
            rng=ChaCha20Random(1), ledger=ledger
        )
    assert ledger.entries() == []


def test_a_second_run_is_charged_to_its_own_filter_and_refused_before_reading(
    tmp_path: Path, bn_data: pd.DataFrame
) -> None:
    # Once (priv25 #4): a run without a ledger was charged nowhere; one synthesizer with
    # ρ = 0.5 ran 20 times, each with fresh noise on the same marginals.
    path = tmp_path / "data.csv"
    bn_data.head(200).to_csv(path, index=False)
    synth = _synth(path, Budget(rho=0.5), iters=20)
    synth.run(rng=ChaCha20Random(1))
    assert synth.filter.history.events == (synth.report.event,)
    path.unlink()
    path.mkdir()  # a source that fails if read: the refusal reads nothing
    with pytest.raises(BudgetExceededError, match=r"^refused: this synthesizer run costs ρ = "):
        synth.run(rng=ChaCha20Random(2))
    assert len(synth.filter.history.events) == 1  # nothing charged by the refusal


def test_a_shared_filter_pays_for_the_runs_of_several_synthesizers(
    tmp_path: Path, bn_data: pd.DataFrame
) -> None:
    shared = PrivacyFilter(Budget(rho=1.2))
    synths = [_synth(bn_data.head(200), Budget(rho=0.5), iters=20) for _ in range(3)]
    for synth in synths[:2]:
        synth.run(rng=ChaCha20Random(1), filter=shared)
        assert synth.filter.spent == 0  # the shared filter paid, not the synthesizer's
    with pytest.raises(BudgetExceededError):
        synths[2].run(rng=ChaCha20Random(1), filter=shared)
    assert len(shared.history.events) == 2
    with pytest.raises(ValueError, match=r"^filter must be None when a ledger is given"):
        synths[2].run(filter=shared, ledger=_ledger(tmp_path))
    with pytest.raises(TypeError, match=r"^filter must be a gaussdp.accounting.PrivacyFilter"):
        synths[2].run(filter=Budget(rho=1.0))  # type: ignore[arg-type]
    # A bad input is refused before the synthesizer's own filter is charged.
    bad = _synth(bn_data.drop(columns="f"), Budget(rho=1.0))
    with pytest.raises(ValueError, match="data columns must be including"):
        bad.run()
    assert bad.filter.spent == 0


@pytest.mark.parametrize("odd", ["'infinity'::DATE", "INTERVAL 1000000 YEAR"])
def test_a_parquet_value_in_an_unused_column_is_not_read(tmp_path: Path, odd: str) -> None:
    # Regression: every column of a Parquet file was converted to pandas, used or not: one
    # person's open-ended date in an unused column refused the run; its neighbour ran.
    import duckdb

    columns = [Categorical("a", [0, 1]), Numeric("x", (0, 7), 7)]
    runs = []
    for extra in ("NULL", f"CASE WHEN i = 3 THEN {odd} END"):
        path = tmp_path / f"t{len(runs)}.parquet"
        duckdb.sql(
            f"COPY (SELECT i AS unit, i % 2 AS a, i % 7 AS x, {extra} AS extra, "
            f"CASE WHEN i = 3 THEN {odd} END AS used FROM range(30) t(i)) TO '{path}'"
        )
        runs.append(_synth(path, Budget(rho=1.0), columns=columns, iters=20))
    want = runs[0].run(rng=ChaCha20Random(1)).frame
    pd.testing.assert_frame_equal(runs[1].run(rng=ChaCha20Random(1)).frame, want)
    # A used column of such a type is read as text: the value is outside the domain.
    used = [Categorical("a", [0, 1]), Categorical("used", ["x"], other="rest")]
    assert _synth(path, Budget(rho=1.0), columns=used, iters=20).encode()["used"].tolist() == (
        [1] * 30
    )
