"""Variance, standard deviation, quantiles, distinct units and per-query L0/L∞.

The sensitivity of every part is brute-forced: each unit is removed in turn
from a small table, the pre-noise aggregate is recomputed (same salts, so the
other units' L0 choices do not change), and the L2 change of every part — in
grid units, over all its cells and coordinates — is at most the part's stated
Δ; for the parts a designed unit saturates, it equals Δ.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gaussdp.budget import Budget
from gaussdp.mechanisms import DiscreteGaussian
from gaussdp.random import ChaCha20Random
from gaussdp.release import Ledger, Release, release_from_spec
from gaussdp.release import _noise as noise_module
from gaussdp.release.core import _aggregate
from gaussdp.release.plan import Plan, grid_step
from gaussdp.release.queries import Query
from gaussdp.release.tree import consistent_leaves, invert, quantile_intervals, rank_halfwidth

BUDGET = Budget(epsilon=1.0, delta=1e-6)
PAGES = ["a", "b", "c", "d"]


def small_table(seed: int = 2) -> pd.DataFrame:
    """11 units with 1–4 pages and 1–4 rows per page (more than L0 = 2 and L∞ = 2), values
    in [−20, 130] (outside the bounds too), NULL values; unit 99 saturates every bound:
    4 rows at 1e9 on each of 4 pages."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for unit in range(10):
        for page in rng.choice(PAGES, size=int(rng.integers(1, 5)), replace=False):
            for _ in range(int(rng.integers(1, 5))):
                value = float(rng.integers(-20, 130)) + 0.25
                rows.append({"user": unit, "page": page, "minutes": value, "score": value / 10})
    rows[3]["minutes"] = None
    rows += [
        {"user": 99, "page": page, "minutes": 1e9, "score": 1e9} for page in PAGES for _ in range(4)
    ]
    return pd.DataFrame(rows)


def build(source: object) -> Release:
    keys = PAGES
    return (
        Release(
            source, privacy_unit="user", budget=BUDGET, max_groups_per_unit=2, max_rows_per_group=2
        )
        .count(by="page")  # private partition selection: the distinct-units part too
        .distinct_units(by="page", keys=keys)
        .distinct_units(by="page", keys=keys, max_groups_per_unit=4)
        .sum("minutes", bounds=(0, 100), by="page", keys=keys)
        .mean("minutes", bounds=(0, 100), by="page", keys=keys, max_rows_per_group=3)
        .variance("minutes", bounds=(0, 100), by="page", keys=keys)
        .std("minutes", bounds=(-10, 100), by="page", keys=keys, max_groups_per_unit=3)
        .quantile("minutes", [0.25, 0.5], bounds=(0, 100), by="page", keys=keys, resolution=16,
                  branching=2)
        .quantile("minutes", 0.5, bounds=(0, 100), resolution=16, max_rows_per_group=4)
        .histogram("minutes", bins=[0, 50, 100], max_groups_per_unit=1)
        .vector_sum(["minutes", "score"], norm=50.0, by="page", keys=keys)
    )  # fmt: skip


def part_vectors(
    plan: Plan, results: list[list[tuple[Any, ...]]], queries: tuple[Query, ...]
) -> dict[int, dict[Any, float]]:
    """Per part: {(cell, coordinate): pre-noise value in grid units}."""
    out: dict[int, dict[Any, float]] = defaultdict(dict)
    for pi, p in enumerate(plan.parts):
        g = plan.groupings[p.grouping]
        rows = results[p.grouping]
        width = len(g.by) + (1 if g.histogram is not None else 0)
        if g.tree is not None:
            # Rows (keys…, leaf, units, count): every node of the tree is a coordinate.
            leaves: dict[Any, np.ndarray[Any, Any]] = {}
            for row in rows:
                counts = leaves.setdefault(tuple(row[:width]), np.zeros(g.tree.resolution))
                counts[int(row[width])] += int(row[width + 2])
            branching = queries[p.query or 0].branching or 2
            for key, counts in leaves.items():
                level, depth = counts, 0
                while True:
                    for j, v in enumerate(level):
                        out[pi][(key, depth, j)] = float(v)
                    if len(level) == 1:
                        break
                    level = level.reshape(-1, branching).sum(axis=1)
                    depth += 1
            continue
        for row in rows:
            key = tuple(row[:width])
            if p.query is None:  # partition selection: distinct units per group
                out[pi][(key, "units")] = float(row[width])
                continue
            for m in g.measures:
                if m.query != p.query or _kind(m.role, p.kind) != p.kind:
                    continue
                out[pi][(key, m.role)] = float(row[width + 1 + m.output] or 0)
    return out


def _kind(role: str, part_kind: str) -> str:
    if role.startswith("coord"):
        return "vector"
    return {"sum": "sum", "sumsq": "sum of squares", "tree": "tree"}.get(
        role, part_kind if part_kind in ("count", "distinct units") else "count"
    )


def l2(a: dict[Any, float], b: dict[Any, float]) -> float:
    return math.sqrt(sum((a.get(k, 0.0) - b.get(k, 0.0)) ** 2 for k in set(a) | set(b)))


def test_every_part_moves_by_at_most_its_sensitivity(bounding: list[str]) -> None:
    """Remove each unit in turn: ≤ Δ for every part; = Δ where unit 99 saturates the bound.
    On DuckDB's SQL bounding, then on its default (the groupings without a histogram,
    vector or tree by the compiled path)."""
    table = small_table()
    release = build(table)
    plan, results = _aggregate(release, rng=ChaCha20Random(3))
    full = part_vectors(plan, results, release.queries)
    worst = defaultdict(float)
    for unit in table["user"].unique():
        _, without = _aggregate(build(table[table["user"] != unit]), rng=ChaCha20Random(3))
        moved = part_vectors(plan, without, release.queries)
        for pi, p in enumerate(plan.parts):
            change = l2(full[pi], moved[pi])
            assert change <= p.sensitivity * (1 + 1e-12), (p, unit, change)
            if p.box is not None:  # box-constrained: ≤ n cells move, each by ≤ K (integers)
                n, k = p.box
                steps = [moved[pi].get(c, 0.0) - full[pi].get(c, 0.0) for c in full[pi]]
                steps += [v for c, v in moved[pi].items() if c not in full[pi]]
                assert all(s == round(s) and abs(s) <= k for s in steps), (p, unit)
                assert sum(1 for s in steps if s) <= n, (p, unit)
            if unit == 99:
                worst[pi] = change
    by_kind = {(p.query, p.kind): worst[pi] / p.sensitivity for pi, p in enumerate(plan.parts)}
    # Unit 99 (4 rows at the upper bound on every page) attains Δ exactly for counts,
    # distinct units, the sums (hi is the larger end), sums of squares and both trees.
    saturated = [
        (query, kind, ratio)
        for (query, kind), ratio in by_kind.items()
        if kind in ("count", "distinct units", "sum", "sum of squares", "tree")
    ]
    assert len(saturated) == 16  # every part but the vector sum's (selection's included)
    for query, kind, ratio in saturated:
        assert ratio == pytest.approx(1.0, abs=1e-12), (query, kind, ratio)
    assert ("compiled" in bounding) == (os.environ["GAUSSDP_BOUNDING"] == "auto")


def test_per_query_bounds_are_charged() -> None:
    release = build(small_table())
    costs = {(c.query, c.part): c for c in release.report.costs}
    assert [c.sensitivity for c in release.report.costs if c.query == "distinct_units"] == [
        pytest.approx(math.sqrt(2)),
        pytest.approx(math.sqrt(4)),  # its own L0 = 4
    ]
    # The mean's own L∞ = 3: Δ_count = √2·3; the std's own L0 = 3: Δ_count = √3·2.
    assert costs[("mean(minutes)", "count")].sensitivity == pytest.approx(math.sqrt(2) * 3)
    assert costs[("std(minutes)", "count")].sensitivity == pytest.approx(math.sqrt(3) * 2)
    # Trees: √(L0·levels)·L∞ — 16 leaves: 5 levels (b = 2), 3 levels (b = 4); the
    # ungrouped tree has L0 = 1 and its own L∞ = 4.
    trees = [c.sensitivity for c in release.report.costs if c.part == "tree"]
    assert trees == [pytest.approx(math.sqrt(2 * 5) * 2), pytest.approx(math.sqrt(3) * 4)]
    # The histogram's own L0 = 1 (over bins): Δ = 2.
    assert costs[("histogram(minutes)", "count")].sensitivity == pytest.approx(2.0)
    sqls = _aggregate_sql(release)
    # The mean's grouping caps at its own L∞, the std's ranks to its own L0: own SQL passes.
    assert sum("LEAST(n0, 3)" in s for s in sqls) == 1
    assert sum("rn < 3" in s for s in sqls) == 1


def _aggregate_sql(release: Release) -> tuple[str, ...]:
    from gaussdp.release.core import _open, _prepare

    engine = _open(release)
    try:
        return tuple(
            sql for sql, _ in _prepare(release, release.plan(), engine, ChaCha20Random(0))[1]
        )
    finally:
        engine.close()


def test_variance_and_std_without_noise(no_noise: None) -> None:
    table = pd.DataFrame(
        {"u": [1, 1, 2, 3, 3, 3, 4], "m": [10.0, 70.0, 25.5, 40.0, 200.0, -5.0, None]}
    )
    release = (
        Release(table, privacy_unit="u", budget=Budget(rho=1e4), max_groups_per_unit=1,
                max_rows_per_group=3)
        .variance("m", bounds=(0, 100))
        .std("m", bounds=(0, 100))
    )  # fmt: skip
    frame = release.run().frame.set_index("statistic")["value"]
    # Independent: clamp, centre at 50, put on the grid γ = 2^⌊log2(50/256)⌋ = 1/8 per row.
    gamma = grid_step(50.0)
    y = np.floor((np.clip([10.0, 70.0, 25.5, 40.0, 200.0, -5.0], 0, 100) - 50) / gamma + 0.5)
    n, s, q = len(y), y.sum() * gamma, (y**2).sum() * gamma**2
    (m_sum,) = [m for m in release.plan().groupings[0].measures if m.query == 0 and m.role == "sum"]
    var_s = DiscreteGaussian(m_sum.sigma2).variance * gamma**2
    want = (q - (s * s - var_s) / n) / n  # the estimator's bias correction, noise-free
    assert frame["variance(m)"] == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx(np.var(np.clip([10, 70, 25.5, 40, 200, -5], 0, 100)), rel=1e-3)
    (m_sum,) = [m for m in release.plan().groupings[0].measures if m.query == 1 and m.role == "sum"]
    var_s = DiscreteGaussian(m_sum.sigma2).variance * gamma**2
    assert frame["std(m)"] == pytest.approx(math.sqrt((q - (s * s - var_s) / n) / n), rel=1e-12)


def test_variance_interval_covers() -> None:
    """2000 seeded draws of the noise of a planned variance: the interval holds the value.

    The post-processing (``core._variance``) gets the true centred sum, sum of
    squares and count of 400 values plus the planned noise (the real sampler).
    Its level is 0.95 (Bonferroni over the three, so at least that): misses are
    Binomial(2000, ≤ 0.05), P[> 140] < 10⁻⁶.
    """
    from gaussdp.release.core import _Noise, _variance

    rng = np.random.default_rng(0)
    values = rng.uniform(0, 100, 400)
    release = Release(
        pd.DataFrame({"u": np.arange(400), "m": values}), privacy_unit="u",
        budget=Budget(rho=0.5), max_groups_per_unit=1, max_rows_per_group=1,
    ).variance("m", bounds=(0, 100))  # fmt: skip
    measures = {m.role: m for m in release.plan().groupings[0].measures}
    gamma = grid_step(50.0)
    y = np.floor((values - 50) / gamma + 0.5)
    exact = {"sum": y.sum(), "sumsq": (y * y).sum(), "count": len(y)}
    truth = np.var(y * gamma)
    facts = {role: _Noise(m.sigma2, 0.95) for role, m in measures.items()}
    source = ChaCha20Random(1)
    noisy = {
        role: (exact[role] + noise_module.draw(m.sigma2, 2000, source).astype(float)) * m.gamma
        for role, m in measures.items()
    }
    scale = {role: m.gamma for role, m in measures.items()}
    _, _, low, high = _variance(
        noisy["sum"],
        noisy["sumsq"],
        noisy["count"],
        tuple(facts[r].std * scale[r] for r in ("sum", "sumsq", "count")),  # type: ignore[arg-type]
        tuple(facts[r].half_third * scale[r] for r in ("sum", "sumsq", "count")),  # type: ignore[arg-type]
        50.0,
    )
    misses = int(np.sum((low > truth) | (high < truth)))
    assert misses <= 140
    assert np.mean(high - low) < 0.5 * 50.0**2  # and it says something


@pytest.mark.parametrize("confidence", [1 - 2**-52, 1 - 2**-53])
def test_a_confidence_close_to_one_is_released(confidence: float, no_noise: None) -> None:
    # 1 - tail rounds to 1.0 there: the interval's search started at an infinite quantile
    # (OverflowError), and Bonferroni's level (1 + confidence)/2 was 1.0 (ValueError); the
    # run failed (rev28-rel). Each half-width is the smallest whose exact tail passes, as
    # a scan from 0 finds it.
    from gaussdp.release.core import _Noise

    release = Release(
        pd.DataFrame({"u": [1, 2, 3], "m": [1.0, 2.0, 3.0]}), privacy_unit="u",
        budget=Budget(rho=0.5), max_groups_per_unit=1, max_rows_per_group=1,
        confidence=confidence,
    ).count().variance("m", bounds=(0, 4))  # fmt: skip
    count, variance = release.run().frame.itertuples()
    sigma2 = release.plan().groupings[0].measures[0].sigma2
    dg = DiscreteGaussian(sigma2)

    def scan(tail: float) -> int:
        return next(h for h in range(10**4) if dg._sf(h) <= tail)

    miss = 1 - confidence
    assert count.ci_high == 3 + scan(miss / 2)
    facts = _Noise(sigma2, confidence)
    assert (facts.half, facts.half_bonferroni, facts.half_third) == tuple(
        scan(miss / k) for k in (2, 4, 6)
    )
    assert math.isfinite(variance.ci_low)
    assert math.isfinite(variance.ci_high)


def test_consistency_is_least_squares() -> None:
    """Hay et al.'s two passes equal the least-squares fit of the whole tree (numpy lstsq)."""
    rng = np.random.default_rng(4)
    b, depth = 3, 2
    leaves = 9
    rows = [np.ones(leaves)]
    for level in range(1, depth + 1):
        size = leaves // b**level
        for node in range(b**level):
            r = np.zeros(leaves)
            r[node * size : (node + 1) * size] = 1
            rows.append(r)
    design = np.array(rows)
    noisy = rng.normal(10, 5, size=(2, len(rows)))
    levels = [noisy[:, :1], noisy[:, 1:4], noisy[:, 4:]]
    got = consistent_leaves(levels, b)
    for g in range(2):
        want, *_ = np.linalg.lstsq(design, noisy[g], rcond=None)
        np.testing.assert_allclose(got[g], want, rtol=1e-12, atol=1e-12)


def test_quantiles_without_noise_and_monotone(no_noise: None) -> None:
    rng = np.random.default_rng(1)
    values = rng.gamma(2.0, 10.0, 2000)
    table = pd.DataFrame({"u": np.arange(2000), "p": np.where(np.arange(2000) % 2, "x", "y"),
                          "m": values})  # fmt: skip
    levels = [0.1, 0.25, 0.5, 0.75, 0.9]

    def release(q: object) -> pd.DataFrame:
        return (
            Release(table, privacy_unit="u", budget=BUDGET, max_groups_per_unit=1,
                    max_rows_per_group=1)
            .quantile("m", q, bounds=(0, 100), by="p", keys=["x", "y"], resolution=256)  # type: ignore[arg-type]
            .run()
            .frame
        )  # fmt: skip

    frame = release(levels)
    # Levels as a numpy array or a pandas Series are the same query.
    pd.testing.assert_frame_equal(release(np.array(levels)), frame)
    pd.testing.assert_frame_equal(release(pd.Series(levels)), frame)
    width = 100 / 256
    for page in ("x", "y"):
        got = frame[frame["p"] == page]["value"].to_numpy()
        want = np.quantile(np.clip(values[table["p"] == page], 0, 100), levels)
        assert np.all(np.abs(got - want) <= width)  # within one leaf
        assert np.all(np.diff(got) >= 0)
    with_noise = invert(np.array([[3.0, -5.0, 9.0, 1.0, -2.0, 7.0, 0.0, 4.0]]), tuple(levels), 0, 8)
    assert np.all(np.diff(with_noise) >= 0)


def test_quantile_interval_covers() -> None:
    """The interval of quantile_intervals holds the true quantile in 200 seeded trials.

    Leaves of 5000 rows, 256 leaves, b = 4, σ² = 400 per node (the real sampler);
    the interval is built for 1 − α = 0.9 by a union bound over all prefixes, so
    misses are Binomial(200, ≤ 0.1): P[> 35] < 10⁻⁴.
    """
    rng = np.random.default_rng(5)
    counts = np.bincount(np.minimum((rng.beta(2, 5, 5000) * 256).astype(int), 255), minlength=256)
    truth_leaf = {q: int(np.argmax(np.cumsum(counts) >= q * counts.sum())) for q in (0.3, 0.5)}
    sigma2 = 400
    h = rank_halfwidth(math.sqrt(sigma2), 256, 4, 0.1)
    source = ChaCha20Random(6)
    misses, widths = 0, []
    for _ in range(200):
        levels = []
        level = counts[None, :]
        while True:
            z = noise_module.draw(sigma2, level.size, source).reshape(level.shape)
            levels.insert(0, (level + z).astype(float))
            if level.shape[1] == 1:
                break
            level = level.reshape(1, -1, 4).sum(axis=2)
        est = consistent_leaves(levels, 4)
        low, high = quantile_intervals(est, (0.3, 0.5), 0.0, 256.0, h)
        for a, q in enumerate((0.3, 0.5)):
            misses += not low[0, a] <= truth_leaf[q] < high[0, a]
            widths.append(high[0, a] - low[0, a])
    assert misses <= 35
    assert np.mean(widths) < 256 / 4  # and it says something


@pytest.mark.parametrize(
    ("build_bad", "match"),
    [
        (lambda r: r.quantile("minutes", 1.5, bounds=(0, 1)), "quantiles"),
        (lambda r: r.quantile("minutes", [0.5, 0.2], bounds=(0, 1)), "quantiles"),
        (lambda r: r.quantile("minutes", None, bounds=(0, 1)), "^q must be .*, got None$"),
        (lambda r: r.quantile("minutes", "0.5", bounds=(0, 1)), "^q must be .*, got '0.5'$"),
        (lambda r: r.quantile("minutes", 0.5, bounds=(0, 1), resolution=100), "resolution"),
        (lambda r: r.quantile("minutes", 0.5, bounds=(0, 1), branching=1), "branching"),
        (lambda r: r.quantile("page", 0.5, bounds=(0, 1)), "numeric"),
        (lambda r: r.variance("minutes", bounds=None), "bounds"),
        (lambda r: r.std("minutes", bounds=(3, 3)), "bounds"),
        (lambda r: r.count(max_groups_per_unit=2), "grouped query"),
        (lambda r: r.count(by="page", max_rows_per_group=2**21), "at most"),
        (lambda r: r.sum("minutes", bounds=(0, 1), max_rows_per_group=0), "max_rows_per_group"),
        (lambda r: r.distinct_units(by="page", max_groups_per_unit=1.5), "max_groups_per_unit"),
    ],
)
def test_bad_queries_spend_nothing(build_bad: Any, match: str, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "b.db", total=Budget(epsilon=5.0, delta=1e-5))
    release = Release(
        small_table(), privacy_unit="user", budget=BUDGET, max_groups_per_unit=1,
        max_rows_per_group=1,
    )  # fmt: skip
    with pytest.raises(ValueError, match=match):
        build_bad(release).run(ledger=ledger)
    assert ledger.entries() == []


def test_spec_takes_the_new_statistics() -> None:
    spec = {
        "privacy_unit": "user",
        "max_groups_per_unit": 2,
        "max_rows_per_group": 2,
        "budget": {"epsilon": 1.0, "delta": 1e-6},
        "query": [
            {"statistic": "variance", "column": "minutes", "bounds": [0, 100], "by": "page",
             "keys": PAGES},
            {"statistic": "std", "column": "minutes", "bounds": [0, 100]},
            {"statistic": "quantile", "column": "minutes", "bounds": [0, 100],
             "quantiles": [0.5, 0.9], "resolution": 64, "branching": 8},
            {"statistic": "distinct_units", "by": "page", "max_groups_per_unit": 4},
            {"statistic": "count", "by": "page", "keys": PAGES, "max_rows_per_group": 1},
        ],
    }  # fmt: skip
    release = release_from_spec(spec, small_table())
    q = release.queries
    assert [x.statistic for x in q] == ["variance", "std", "quantile", "distinct_units", "count"]
    assert (q[2].quantiles, q[2].resolution, q[2].branching) == ((0.5, 0.9), 64, 8)
    assert (q[3].max_groups_per_unit, q[4].max_rows_per_group) == (4, 1)
    frame = release.run(rng=ChaCha20Random(0)).frame
    assert set(frame["statistic"]) >= {"quantile(minutes, 0.5)", "quantile(minutes, 0.9)"}
    bad = {**spec, "query": [{"statistic": "count", "quantiles": [0.5]}]}
    with pytest.raises(ValueError, match=r"^query\[0\] \(count\): quantiles must be omitted"):
        release_from_spec(bad, None)
    # A unit counts once per group whatever its rows: an L∞ for distinct_units is refused
    # (from the spec and from Query alike), not silently ignored.
    bad = {**spec, "query": [{"statistic": "distinct_units", "max_rows_per_group": 3}]}
    with pytest.raises(
        ValueError, match=r"^query\[0\] \(distinct_units\): max_rows_per_group must be omitted"
    ):
        release_from_spec(bad, None)
    with pytest.raises(ValueError, match="max_rows_per_group must be omitted for distinct_units"):
        Query("distinct_units", by=("page",), max_rows_per_group=1)


def test_tree_keeps_linf_rows_by_systematic_sampling() -> None:
    """A unit with leaf counts (5, 1, 1, 3) and L∞ = 4 keeps 4 rows: each leaf the floor or
    the ceiling of its share c·4/10, and the share on average over salts.

    20 salts; per leaf a z-test of the mean allocation (frac·(1 − frac)/20 variance
    of the Bernoulli part) at critical value 5 (two-sided α ≈ 5.7·10⁻⁷ each).
    """
    values = [0.5] * 5 + [1.5] + [2.5] + [3.5] * 3
    table = pd.DataFrame({"u": [7] * 10, "m": values})
    release = Release(
        table, privacy_unit="u", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=4
    ).quantile("m", 0.5, bounds=(0, 4), resolution=4, branching=4)
    share = np.array([5, 1, 1, 3]) * 4 / 10
    kept = []
    for seed in range(20):
        _, (rows,) = _aggregate(release, rng=ChaCha20Random(seed))
        counts = np.zeros(4)
        for leaf, _units, count in rows:
            counts[leaf] = count
        assert counts.sum() == 4
        assert sum(units for _, units, _ in rows) == 1
        assert np.all((counts == np.floor(share)) | (counts == np.ceil(share)))
        kept.append(counts)
    frac = share - np.floor(share)
    mean = np.mean(kept, axis=0)
    assert np.all(np.abs(mean - share) <= 5 * np.sqrt(frac * (1 - frac) / 20) + 1e-12)


def test_cli_releases_the_example_spec() -> None:
    """``gaussdp release examples/visits_stats.toml``: distinct users, std, quartiles."""
    import json

    import typer
    from typer.testing import CliRunner

    from gaussdp.cli.release import register

    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """gaussdp (test app)."""

    register(app)
    examples = Path(__file__).parents[2] / "examples"
    spec, data = examples / "visits_stats.toml", examples / "visits.csv"
    r = CliRunner().invoke(app, ["release", str(spec), "--data", str(data), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["report"]["epsilon"] <= 1.0
    parts = [(c["query"], c["part"]) for c in out["report"]["costs"]]
    assert ("quantile(minutes)", "tree") in parts
    assert ("std(minutes)", "sum of squares") in parts
    rows = out["results"] if "results" in out else out["frame"]
    quartiles = [row["value"] for row in rows if row["statistic"].startswith("quantile")]
    assert quartiles == sorted(quartiles)
    assert len(quartiles) == 3


def test_empty_table_gets_noise_for_the_new_statistics() -> None:
    empty = pd.DataFrame(
        {"u": pd.Series([], dtype="int64"), "p": pd.Series([], dtype="str"),
         "m": pd.Series([], dtype="float64")}
    )  # fmt: skip
    frame = (
        Release(empty, privacy_unit="u", budget=BUDGET, max_groups_per_unit=1,
                max_rows_per_group=1)
        .variance("m", bounds=(0, 10), by="p", keys=["x"])
        .quantile("m", [0.5], bounds=(0, 10), by="p", keys=["x", "y"], resolution=16)
        .median("m", bounds=(0, 10))
        .quantile("m", [0.5], bounds=(0, 10), by="p")
        .distinct_units(by="p", keys=["x"])
        .run(rng=ChaCha20Random(0))
        .frame
    )  # fmt: skip
    assert list(frame["statistic"]) == [
        "variance(m)",
        "quantile(m, 0.5)",
        "quantile(m, 0.5)",
        "quantile(m, 0.5)",
        "distinct_units",
    ]
    assert frame["value"].between(0, 100).all()
