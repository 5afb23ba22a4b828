"""The DuckDB pipeline against a pure-Python reference, sensitivities, σ, reports and bad input."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from release_reference import arrow_table, bounded_aggregates, make_rows

from gaussdp.accounting.filter import budget_accountant
from gaussdp.budget import Budget
from gaussdp.random import ChaCha20Random
from gaussdp.release import Ledger, Release, load_spec, release_from_spec
from gaussdp.release.core import _aggregate
from gaussdp.release.plan import grid_step

BUDGET = Budget(epsilon=1.0, delta=1e-6)


def outputs_by_kind(release: Release) -> dict[tuple[Any, ...], dict[str, int]]:
    plan, results = _aggregate(release)
    (g,), (rows,) = plan.groupings, results
    kinds = {o.kind: j for j, o in enumerate(g.outputs)}
    width = len(g.by)
    out = {}
    for row in rows:
        aggs = row[width + 1 :]
        out[tuple(row[:width])] = {
            "units": row[width],
            **{kind: int(aggs[j] or 0) for kind, j in kinds.items()},
        }
    return out


@pytest.mark.parametrize("kind", ["arrow", "pandas", "polars", "csv", "parquet"])
def test_duckdb_matches_reference(kind: str, tmp_path: Path) -> None:
    rows = make_rows()
    table = arrow_table(rows)
    source: object
    if kind == "arrow":
        source = table
    elif kind == "pandas":
        source = table.to_pandas()
    elif kind == "polars":
        pl = pytest.importorskip("polars")
        source = pl.from_arrow(table)
    elif kind == "csv":
        source = tmp_path / "t.csv"
        table.to_pandas().to_csv(source, index=False)
    else:
        import pyarrow.parquet as pq

        source = tmp_path / "t.parquet"
        pq.write_table(table, source)
    release = (
        Release(
            source, privacy_unit="user", budget=BUDGET, max_groups_per_unit=3, max_rows_per_group=2
        )
        .count(by="page")
        .mean("minutes", bounds=(0, 100), by="page")
    )
    got = outputs_by_kind(release)
    gamma = grid_step(100.0)
    if kind == "csv":
        # A CSV's `inf` is not a number (docs/release.md, "Reading a CSV"): missing, like
        # NaN and NULL (pandas cannot tell NaN from NULL either; both are ignored).
        rows = [{**r, "minutes": None if r["minutes"] == math.inf else r["minutes"]} for r in rows]
    want = bounded_aggregates(
        rows, unit="user", by=("page",), value="minutes", bounds=(0.0, 100.0), linf=2, gamma=gamma
    )
    assert got == want


def test_zero_noise_results_equal_reference(no_noise: None) -> None:
    rows = make_rows()
    result = (
        Release(
            arrow_table(rows),
            privacy_unit="user",
            budget=BUDGET,
            max_groups_per_unit=3,
            max_rows_per_group=2,
        )
        .count(by="page", keys=["a", "b", "c", "zzz"])
        .sum("minutes", bounds=(0, 100), by="page", keys=["a", "b", "c", "zzz"])
        .mean("minutes", bounds=(0, 100), by="page", keys=["a", "b", "c", "zzz"])
        .run(rng=ChaCha20Random(0))
    )
    gamma = grid_step(100.0)
    want = bounded_aggregates(
        rows, unit="user", by=("page",), value="minutes", bounds=(0.0, 100.0), linf=2, gamma=gamma
    )
    frame = result.frame.set_index(["statistic", "page"])["value"]
    for page in "abc":
        assert frame[("count", page)] == want[(page,)]["rows"]
        assert frame[("sum(minutes)", page)] == want[(page,)]["sum"] * gamma
        assert frame[("mean(minutes)", page)] == pytest.approx(
            want[(page,)]["sum"] * gamma / want[(page,)]["valid"]
        )
    # A public key with no rows appears (with noise, here zero).
    assert frame[("count", "zzz")] == 0
    assert frame[("mean(minutes)", "zzz")] == 0.0  # clamped into the bounds


def test_l0_bounding_is_exact_and_uniform() -> None:
    """Every unit has rows in 5 groups, L0 = 2: each keeps exactly 2, uniformly.

    The number of units keeping group j is a sum of N independent Bernoulli(2/5)
    (each unit's choice is uniform over pairs); z-test per group with
    critical value 5.0 (two-sided α ≈ 5.7e-7 per group, ≈ 2.9e-6 for the five).
    """
    n_units, groups = 4000, ["g0", "g1", "g2", "g3", "g4"]
    table = pa.table(
        {
            "user": pa.array(np.repeat(np.arange(n_units), 5 * 2)),
            # Two rows per (unit, group), in the same order for every unit: an order-biased
            # selection (first L0 groups) would fail the test.
            "g": pa.array(np.tile(np.repeat(groups, 2), n_units)),
        }
    )
    release = Release(
        table, privacy_unit="user", budget=BUDGET, max_groups_per_unit=2, max_rows_per_group=1
    ).count(by="g")
    got = outputs_by_kind(release)
    units = np.array([got[(g,)]["units"] for g in groups])
    assert units.sum() == 2 * n_units  # exactly L0 groups per unit
    assert [got[(g,)]["rows"] for g in groups] == list(units)  # L∞ = 1 caps the 2 rows
    p = 2 / 5
    z = (units - n_units * p) / math.sqrt(n_units * p * (1 - p))
    assert np.all(np.abs(z) < 5.0), z


def test_sigma_equals_hand_computation() -> None:
    # ρ budget 0.5 split over two queries: count gets ρ = 0.25, mean 0.125 + 0.125.
    release = (
        Release(
            pd.DataFrame({"u": [1], "p": ["x"], "m": [1.0]}),
            privacy_unit="u",
            budget=Budget(rho=0.5),
            max_groups_per_unit=3,
            max_rows_per_group=2,
        )
        .count(by="p", keys=["x"])
        .mean("m", bounds=(0, 60), by="p", keys=["x"])
    )
    costs = {(c.query, c.part): c for c in release.report.costs}
    count = costs[("count", "count")]
    # Δ = √L0·L∞ = √3·2; σ² = Δ²/(2ρ) = 12/(2·0.25) = 24.
    assert count.sensitivity == pytest.approx(math.sqrt(12))
    assert count.sigma == pytest.approx(math.sqrt(24), rel=1e-9)
    s = costs[("mean(m)", "sum")]
    # Each row on the grid γ = 2^⌊log2(60/256)⌋ = 1/8, so a row is ≤ 480 steps and a
    # unit's cell ≤ K = L∞·480 = 960 steps; Δ = √3·960 steps; σ = γ·√(3·960²/(2·0.125)).
    assert s.gamma == 0.125
    assert s.sensitivity == pytest.approx(math.sqrt(3) * 120)
    assert s.sigma == pytest.approx(0.125 * math.sqrt(3 * 960**2 / 0.25), rel=1e-9)
    c = costs[("mean(m)", "count")]
    assert c.sigma == pytest.approx(math.sqrt(12 / 0.25), rel=1e-9)
    assert release.report.rho == pytest.approx(0.5, rel=1e-9)
    assert release.report.rho <= 0.5


def test_report_epsilon_within_budget_and_equals_accountant() -> None:
    release = (
        Release(
            pd.DataFrame({"u": [1], "p": ["x"], "m": [1.0]}),
            privacy_unit="u",
            budget=BUDGET,
            max_groups_per_unit=2,
            max_rows_per_group=1,
        )
        .count(by="p")
        .sum("m", bounds=(-5, 5))
        .vector_sum(["m"], norm=3.0, by="p", keys=["x"])
        .histogram("m", bins=[0, 1, 2])
    )
    report = release.report
    assert 0 < report.selection_delta <= BUDGET.delta / 2
    assert report.epsilon <= 1.0
    # PLD accounting of the plan's events (tests/release/test_accounting.py and
    # test_exact_accounting.py have the hand and independent computations).
    assert report.mode == "pld"
    acc = budget_accountant(BUDGET).compose(release.plan().event)
    assert report.epsilon == acc.epsilon(1e-6).upper
    assert report.rho == pytest.approx(sum(c.rho for c in report.costs), rel=1e-12)


def test_private_selection_drops_small_groups(no_noise: None) -> None:
    big = pd.DataFrame({"u": range(400), "p": ["big"] * 400})
    small = pd.DataFrame({"u": range(400, 405), "p": ["small"] * 5})
    release = Release(
        pd.concat([big, small]),
        privacy_unit="u",
        budget=BUDGET,
        max_groups_per_unit=1,
        max_rows_per_group=1,
    ).count(by="p")
    tau = release.report.costs[-1].threshold
    assert tau is not None
    assert 5 < tau < 400
    frame = release.run().frame
    assert list(frame["p"]) == ["big"]


def test_empty_table_releases_noise_only(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("user,page,minutes\n")
    result = (
        Release(
            path, privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
        )
        .count(by="page", keys=["a", "b"])
        .count(by="page")
        .run(rng=ChaCha20Random(1))
    )
    # Refusing an empty table would reveal that it is empty; it gets noise like any other.
    assert list(result.frame["page"]) == ["a", "b"]


def test_raw_counts_are_the_unclamped_noisy_integers(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("user,page,minutes\n")
    keys = [f"k{i}" for i in range(40)]

    def run(**kwargs: Any) -> pd.DataFrame:
        release = Release(
            path, privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
        ).count(by="page", keys=keys)
        return release.run(rng=ChaCha20Random(3), **kwargs).frame

    clamped, raw = run(), run(raw=True)
    # Pure noise on an empty table: about half the raw counts are negative, integers all.
    values = raw["value"].to_numpy()
    assert 5 < int((values < 0).sum()) < 35
    assert np.array_equal(values, np.rint(values))
    # The same draws; the default clamps them (and their intervals) at 0.
    assert np.array_equal(clamped["value"].to_numpy(), np.maximum(values, 0))
    assert np.array_equal(clamped["ci_low"].to_numpy(), np.maximum(raw["ci_low"].to_numpy(), 0))
    half = raw["value"] - raw["ci_low"]
    assert np.allclose(raw["ci_high"] - raw["value"], half)
    assert (half > 0).all()
    assert np.array_equal(raw["std"].to_numpy(), clamped["std"].to_numpy())
    with pytest.raises(TypeError, match="raw must be a bool"):
        Release(
            path, privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
        ).count().run(raw="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda r: r.count(by="nope"), ValueError, "by must be a column among"),
        (lambda r: r.sum("page", bounds=(0, 1)), ValueError, "numeric"),
        (lambda r: r.sum("minutes", bounds=None), ValueError, "bounds"),
        (lambda r: r.sum("minutes", bounds=(5, 1)), ValueError, "bounds"),
        (lambda r: r.mean("user", bounds=(0, 1)), ValueError, "privacy unit"),
        (lambda r: r.histogram("minutes", bins=[1]), ValueError, "bin edges"),
        (lambda r: r.vector_sum(["minutes"], norm=0), ValueError, "norm"),
        (lambda r: r, ValueError, "at least one query"),
    ],
)
def test_bad_queries_spend_nothing(
    build: Any, error: type[Exception], match: str, tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "b.db", total=Budget(epsilon=5.0, delta=1e-5))
    table = arrow_table(make_rows(n=50))
    release = Release(
        table, privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
    )
    with pytest.raises(error, match=match):
        build(release).run(ledger=ledger)
    assert ledger.entries() == []


def test_missing_file_and_bad_rng_spend_nothing(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "b.db", total=Budget(epsilon=5.0, delta=1e-5))
    release = Release(
        tmp_path / "nope.csv",
        privacy_unit="u",
        budget=BUDGET,
        max_groups_per_unit=1,
        max_rows_per_group=1,
    ).count()
    with pytest.raises(FileNotFoundError, match="existing file"):
        release.run(ledger=ledger)
    with pytest.raises(TypeError, match="rng"):
        release.run(rng=7, ledger=ledger)  # type: ignore[arg-type]
    assert ledger.entries() == []


def test_non_numeric_column_refused_by_schema_not_by_csv_rows(tmp_path: Path) -> None:
    # A CSV's types come from its rows: its non-numeric value is NULL (no refusal that
    # depends on one row). A frame's declared string column is refused (its schema).
    path = tmp_path / "t.csv"
    path.write_text("user,minutes\n1,3\n2,abc\n")

    def summing(source: object) -> Release:
        return Release(
            source, privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
        ).sum("minutes", bounds=(0, 10))

    assert len(summing(path).run(rng=ChaCha20Random(0)).frame) == 1
    frame = pd.DataFrame({"user": [1, 2], "minutes": ["3", "4"]})
    with pytest.raises(ValueError, match="numeric"):
        summing(frame).run()


def test_ledger_is_charged_the_report(tmp_path: Path) -> None:
    release = Release(
        arrow_table(make_rows(n=50)),
        privacy_unit="user",
        budget=BUDGET,
        max_groups_per_unit=1,
        max_rows_per_group=1,
    ).count(by="page")
    # A total that fits two such releases but not three: the ledger composes the events
    # with the same accountant.
    event = release.plan().event
    two, three = (budget_accountant(BUDGET).compose(event, n).epsilon(1e-5).upper for n in (2, 3))
    assert two < three
    total = Budget(epsilon=(two + three) / 2, delta=1e-5)
    ledger = Ledger(tmp_path / "b.db", total=total)
    release.run(ledger=ledger)
    (entry,) = ledger.entries()
    assert entry.status == "committed"
    assert entry.event == release.plan().event  # the release's event itself
    assert entry.detail == release.report.to_dict()
    release.run(ledger=ledger)
    with pytest.raises(ValueError, match="^refused: this release costs ε = "):  # BudgetExceeded
        release.run(ledger=ledger)
    assert len(ledger.entries()) == 2


def test_spec_round_trip_and_errors(tmp_path: Path) -> None:
    spec = load_spec(Path(__file__).parents[2] / "examples" / "visits.toml")
    release = release_from_spec(spec, Path(__file__).parents[2] / "examples" / "visits.csv")
    assert [q.statistic for q in release.queries] == ["count", "mean", "histogram", "count"]
    assert release.report.epsilon <= 1.0
    bad = {**spec, "query": [{"statistic": "sum", "column": "minutes"}]}
    with pytest.raises(ValueError, match=r"^query\[0\] \(sum\): .*bounds"):
        release_from_spec(bad, None)
    # The failing query is named by its index and statistic, not only by what is wrong.
    bad = {**spec, "query": [{"statistic": "count"}, {"statistic": "mean"}]}
    with pytest.raises(ValueError, match=r"^query\[1\] \(mean\): columns must be 1 column"):
        release_from_spec(bad, None)
    bad = {**spec, "query": [{"statistic": "count", "bye": "page"}]}
    with pytest.raises(ValueError, match="bye"):
        release_from_spec(bad, None)
    bad = {**spec, "budget": {"epsilon": 1.0, "delta": 1e-6, "eps": 2}}
    with pytest.raises(ValueError, match="eps"):
        release_from_spec(bad, None)
    path = tmp_path / "s.toml"
    path.write_text("privacy_unit = [")
    with pytest.raises(ValueError, match="valid TOML"):
        load_spec(path)
    with pytest.raises(FileNotFoundError):
        load_spec(tmp_path / "none.toml")


def test_vector_and_histogram_zero_noise(no_noise: None) -> None:
    table = pd.DataFrame(
        {"u": [1, 1, 2, 3, 3], "x": [3.0, 0.0, 0.5, 1.0, None], "y": [4.0, 0.25, 0.0, 0.0, 1.0]}
    )
    result = (
        Release(
            table,
            privacy_unit="u",
            budget=Budget(rho=1.0),
            max_groups_per_unit=2,
            max_rows_per_group=2,
        )
        .vector_sum(["x", "y"], norm=1.0)
        .histogram("x", bins=[0, 1, 2])
        .run()
    ).frame.set_index(["statistic", "bin"])["value"]
    # Row (3, 4) is clipped to (0.6, 0.8); rows with a NULL coordinate are ignored.
    # Unit 1: (0.6, 0.8) + (0, 0.25); unit 2: (0.5, 0); unit 3: (1, 0). Grid γ = 2^-7.
    gamma = grid_step(2.0)
    assert result[("vector_sum(x, y)[x]", np.nan)] == pytest.approx(2.1, abs=gamma)
    assert result[("vector_sum(x, y)[y]", np.nan)] == pytest.approx(1.05, abs=gamma)
    # Histogram: x = 0, 0.5 in [0, 1) (units 1, 2); 1.0 and 3.0 (clamped) in [1, 2].
    assert result[("histogram(x)", "[0, 1)")] == 2
    assert result[("histogram(x)", "[1, 2]")] == 2


def test_rho_and_mu_budgets() -> None:
    frame = pd.DataFrame({"u": [1, 2], "p": ["x", "y"]})
    for budget in (Budget(rho=0.3), Budget(mu=1.0)):
        release = Release(
            frame, privacy_unit="u", budget=budget, max_groups_per_unit=1, max_rows_per_group=1
        ).count(by="p", keys=["x", "y"])
        # A ρ budget is spent in ρ (CKS Thm 4), a μ budget in μ (smoothing argument).
        spent = release.report.rho if budget.rho is not None else release.report.mu
        assert spent == pytest.approx(budget.rho or budget.mu, rel=1e-9)
        assert spent <= (budget.rho or budget.mu)
        assert release.report.epsilon is None  # no δ given: ε is not reported
        with pytest.raises(ValueError, match="epsilon, delta"):
            release.count(by="p").plan()  # private partition selection needs a δ


def test_released_noise_has_the_planned_scale() -> None:
    """End to end: on an all-zero table, released sums are γ·N_Z(0, σ²) per key.

    2000 public keys, no rows: every released sum is pure noise. z-tests of the
    mean (against 0) and of the variance (against the exact Var N_Z, CKS Prop 21,
    whose sampling std is √(2/n)·Var up to the kurtosis term) with critical value
    5.0 (two-sided α ≈ 5.7e-7 each). Deterministic: ChaCha20Random(11).
    """
    from gaussdp.mechanisms import DiscreteGaussian

    keys = [f"k{i}" for i in range(2000)]
    release = Release(
        pd.DataFrame(
            {
                "u": pd.Series([], dtype="int64"),
                "p": pd.Series([], dtype="str"),
                "m": pd.Series([], dtype="float64"),
            }
        ),
        privacy_unit="u",
        budget=Budget(rho=0.5),
        max_groups_per_unit=2,
        max_rows_per_group=1,
    ).sum("m", bounds=(-3, 5), by="p", keys=keys)
    (measure,) = release.plan().groupings[0].measures
    frame = release.run(rng=ChaCha20Random(11)).frame
    z = frame["value"].to_numpy() / measure.gamma
    assert np.all(z == np.round(z))  # values lie on the grid
    var = DiscreteGaussian(measure.sigma2).variance
    n = len(z)
    assert abs(z.mean()) / math.sqrt(var / n) < 5.0
    assert abs(z.var() - var) / (var * math.sqrt(2 / n)) < 5.0
    assert frame["std"].iloc[0] == pytest.approx(measure.gamma * math.sqrt(var))


def test_noise_beyond_int64_is_added_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    """σ² > 2⁸⁰: the sampler returns Python ints (object arrays); sums stay exact integers."""
    from gaussdp.release import _noise

    big = 2**70
    monkeypatch.setattr(_noise, "draw", lambda sigma2, size, rng: np.full(size, big, dtype=object))
    frame = (
        Release(
            pd.DataFrame({"u": [1, 2, 3], "p": ["x", "y", "x"], "m": [1.0, 2.0, 3.0]}),
            privacy_unit="u",
            budget=Budget(rho=1.0),
            max_groups_per_unit=1,
            max_rows_per_group=1,
        )
        .count(by="p", keys=["x", "y"])
        .run()
        .frame
    )
    assert frame["value"].tolist() == [float(2 + big), float(1 + big)]
