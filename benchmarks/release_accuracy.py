"""Accuracy of gaussdp's quantiles, variance and distinct-unit counts against OpenDP, PipelineDP
and Tumult Analytics.

Run with::

    python benchmarks/release_accuracy.py [--peer-python /work/venv-bench/bin/python] [--runs 40]
        [--tumult-python /work/venv-tumult/bin/python]

One table of ``--users`` users (10⁴ by default), one row each, values
Gamma(2, 10) clamped to [0, 100] (seeded), one group; every method at ε = 1
(δ = 10⁻⁶ where the method takes one), one user's row as the unit of privacy
(add/remove), bounds [0, 100]. Reported: the mean absolute error over
``--runs`` runs against the statistic of the clamped values (and, for
quantiles, the mean rank error |F(x̂) − q|), ± its standard error (the
standard deviation of the absolute errors over √runs).

- ``gaussdp``: :class:`gaussdp.release.Release` (L0 = L∞ = 1), exact discrete
  Gaussian noise, (ε, δ) accounted in μ-GDP: ``quantile`` (a tree of 1024
  leaves; all levels q from one tree), ``variance``, ``distinct_units``.
- ``opendp``: ``make_private_quantile`` (exponential mechanism over 1025
  candidates, pure ε; each of k quantiles gets ε/k).
- ``pipelinedp``: ``Metrics.PERCENTILE`` (its quantile tree), ``VARIANCE``,
  ``PRIVACY_ID_COUNT`` with Gaussian noise at (ε, δ), one public partition.
- ``tumult``: Tumult Analytics (``tmlt.analytics`` 0.21, on Spark) under an
  ``ApproxDPBudget(ε, δ)`` — the budget type of the (ε, δ) used here — and
  ``AddOneRow()`` (one row per user, so a row is the unit): ``quantile`` (each of
  k levels one query at (ε/k, δ/k); Tumult's quantile is pure ε and spends no
  δ), ``variance`` and ``count`` (under an ``ApproxDPBudget`` Tumult adds
  Laplace noise and sets δ to 0: its Gaussian noise needs a ``RhoZCDPBudget``,
  whose quantiles would get ε = √(8ρ) (Tumult charges ε²/8) from the ρ ≈ 0.02
  that (1, 10⁻⁶) allows: ≈ 0.4 against 1 — less).
  To avoid Spark's per-query overhead (≈ 15 s a query on a loaded 2-core
  machine), the runs are the groups of one grouped query: the table is copied
  ``--runs`` times with a ``copy`` column, and each query is grouped by
  ``copy`` over a public ``KeySet``. Under ``AddOneRow`` a row changes one group
  only, so each group's answer is Tumult's mechanism at the query's full budget
  on one copy of the table, independent of the others: one run.

Peers run under ``--peer-python`` (an interpreter with ``opendp`` and
``pipeline-dp``, e.g. the ``bench`` extra's); a missing peer is reported as such.

Tumult runs under ``--tumult-python``, an interpreter of its own: ``tmlt.analytics``
0.21 requires ``pandas<2``, ``pyspark[sql]<3.6`` and ``numpy<2`` on Python 3.10–3.11
(pandas 2.2 and pyspark 4 only on Python 3.12), while gaussdp needs ``pandas>=2.2``
and this project uses pyspark 4, so it is in none of the project's extras. With
Python 3.11 and Java 17::

    python3.11 -m venv /work/venv-tumult
    /work/venv-tumult/bin/pip install 'tmlt.analytics==0.21.0'

It reads the same values from a temporary Parquet file that this process writes.
Without ``--tumult-python`` (or if that interpreter is missing) Tumult is skipped
with a note.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

EPSILON, DELTA = 1.0, 1e-6
LO, HI = 0.0, 100.0


def values(users: int) -> np.ndarray[Any, Any]:
    """The benchmark's values (the same in every process)."""
    rng = np.random.default_rng(12)
    return np.clip(rng.gamma(2.0, 10.0, users), LO, HI)


def truth(users: int, levels: list[float]) -> dict[str, Any]:
    v = values(users)
    return {"quantiles": np.quantile(v, levels).tolist(), "variance": float(np.var(v)), "n": users}


def gaussdp_runs(
    users: int, levels: list[float], runs: int, branching: int, *, quantiles_only: bool
) -> dict[str, Any]:
    import pandas as pd

    from gaussdp.budget import Budget
    from gaussdp.release import Release

    frame = pd.DataFrame({"u": np.arange(users), "v": values(users)})
    out: dict[str, list[Any]] = {"quantiles": [], "variance": [], "distinct": []}
    for _ in range(runs):

        def release() -> Release:
            return Release(
                frame,
                privacy_unit="u",
                budget=Budget(epsilon=EPSILON, delta=DELTA),
                max_groups_per_unit=1,
                max_rows_per_group=1,
            )

        q = release().quantile("v", levels, bounds=(LO, HI), resolution=1024, branching=branching)
        out["quantiles"].append(q.run().frame["value"].tolist())
        if quantiles_only:
            continue
        out["variance"].append(
            float(release().variance("v", bounds=(LO, HI)).run().frame["value"][0])
        )
        out["distinct"].append(float(release().distinct_units().run().frame["value"][0]))
    return out


def opendp_runs(users: int, levels: list[float], runs: int) -> dict[str, Any]:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    data = values(users).tolist()
    candidates = np.linspace(LO, HI, 1025).tolist()
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    measurements = [
        dp.binary_search_chain(
            lambda s, a=alpha: dp.m.make_private_quantile(
                domain, dp.symmetric_distance(), dp.max_divergence(), candidates, a, s
            ),
            d_in=1,
            d_out=EPSILON / len(levels),
        )
        for alpha in levels
    ]
    return {"quantiles": [[float(m(data)) for m in measurements] for _ in range(runs)]}


def pipelinedp_runs(users: int, levels: list[float], runs: int) -> dict[str, Any]:
    import pipeline_dp

    rows = list(enumerate(values(users).tolist()))

    def aggregate(metrics: list[Any]) -> Any:
        accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=DELTA)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
        params = pipeline_dp.AggregateParams(
            noise_kind=pipeline_dp.NoiseKind.GAUSSIAN,
            metrics=metrics,
            max_partitions_contributed=1,
            max_contributions_per_partition=1,
            min_value=LO,
            max_value=HI,
        )
        extractors = pipeline_dp.DataExtractors(
            partition_extractor=lambda r: 0,
            privacy_id_extractor=lambda r: r[0],
            value_extractor=lambda r: r[1],
        )
        result = engine.aggregate(rows, params, extractors, public_partitions=[0])
        accountant.compute_budgets()
        ((_, metrics_tuple),) = list(result)
        return metrics_tuple

    out: dict[str, list[Any]] = {"quantiles": [], "variance": [], "distinct": []}
    percentiles = [pipeline_dp.Metrics.PERCENTILE(100 * a) for a in levels]
    for _ in range(runs):
        out["quantiles"].append([float(x) for x in aggregate(percentiles)])
        out["variance"].append(float(aggregate([pipeline_dp.Metrics.VARIANCE]).variance))
        out["distinct"].append(
            float(aggregate([pipeline_dp.Metrics.PRIVACY_ID_COUNT]).privacy_id_count)
        )
    return out


def tumult_runs(data: str, levels: list[float], runs: int) -> dict[str, Any]:
    """Tumult's runs on the values in the Parquet file ``data`` (see the module docstring)."""
    import os

    # Spark starts Python workers with `python3` from PATH unless told: they need tmlt too.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from tmlt.analytics import AddOneRow, ApproxDPBudget, KeySet, QueryBuilder, Session

    spark = (
        SparkSession.builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    table = spark.read.parquet(data).select("v").crossJoin(spark.range(runs).toDF("copy"))
    keys = KeySet.from_dict({"copy": list(range(runs))})

    def evaluate(queries: list[Any]) -> list[list[float]]:
        """Each query's answer per copy, each query at an equal share of (ε, δ)."""
        session = Session.from_dataframe(
            privacy_budget=ApproxDPBudget(EPSILON, DELTA),
            source_id="t",
            dataframe=table,
            protected_change=AddOneRow(),
        )
        share = ApproxDPBudget(EPSILON / len(queries), DELTA / len(queries))
        answers = []
        for query in queries:
            frame = session.evaluate(query(QueryBuilder("t").groupby(keys)), share).toPandas()
            answers.append(frame.sort_values("copy")["value"].astype(float).tolist())
        return answers

    quantiles = evaluate([lambda b, a=a: b.quantile("v", a, LO, HI, name="value") for a in levels])
    (variance,) = evaluate([lambda b: b.variance("v", LO, HI, name="value")])
    (count,) = evaluate([lambda b: b.count(name="value")])  # one row per user: the units
    return {
        "quantiles": [list(run) for run in zip(*quantiles, strict=True)],
        "variance": variance,
        "distinct": count,
    }


def _mean_se(errors: np.ndarray[Any, Any]) -> tuple[Any, Any]:
    """Mean of absolute errors over runs (axis 0) and its standard error."""
    spread = errors.std(axis=0, ddof=1) if len(errors) > 1 else np.full(errors.shape[1:], np.nan)
    return errors.mean(axis=0), spread / np.sqrt(len(errors))


def summarise(name: str, result: dict[str, Any], users: int, levels: list[float]) -> list[str]:
    t = truth(users, levels)
    v = np.sort(values(users))
    lines = []
    if result.get("quantiles"):
        est = np.array(result["quantiles"])
        err, err_se = _mean_se(np.abs(est - np.array(t["quantiles"])))
        rank, rank_se = _mean_se(np.abs(np.searchsorted(v, est) / users - np.array(levels)))
        for a, level in enumerate(levels):
            lines.append(
                f"| quantile {level:g} | {name} | {err[a]:.3g} ± {err_se[a]:.2g} "
                f"| rank {rank[a]:.2g} ± {rank_se[a]:.1g} |"
            )
    if result.get("variance"):
        err_v, se_v = _mean_se(np.abs(np.array(result["variance"]) - t["variance"]))
        lines.append(
            f"| variance | {name} | {err_v:.3g} ± {se_v:.2g} | truth {t['variance']:.4g} |"
        )
    if result.get("distinct"):
        err_d, se_d = _mean_se(np.abs(np.array(result["distinct"]) - users))
        lines.append(f"| distinct units | {name} | {err_d:.3g} ± {se_d:.2g} | truth {users} |")
    return lines


def _peer(python: str, worker: str, args: argparse.Namespace, *extra: str) -> dict[str, Any] | str:
    """Run one peer's worker under ``python``: its results, or why it did not run."""
    if not Path(python).exists():
        return f"not run: {python} not found"
    command = [python, __file__, "--worker", worker, "--users", str(args.users), *extra]
    command += ["--runs", str(args.runs), "--levels", *map(str, args.levels)]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        return f"not run: {lines[-1]}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--levels", type=float, nargs="+", default=[0.25, 0.5, 0.75])
    parser.add_argument("--branching", type=int, nargs="+", default=[4])  # 1024 leaves: 2, 4, 32
    parser.add_argument("--peer-python", default=sys.executable)
    parser.add_argument("--tumult-python", help="an interpreter with tmlt.analytics (see above)")
    parser.add_argument(
        "--worker", choices=["opendp", "pipelinedp", "tumult"], help=argparse.SUPPRESS
    )
    parser.add_argument("--data", help=argparse.SUPPRESS)  # the tumult worker's Parquet file
    args = parser.parse_args()
    if args.worker == "tumult":
        print(json.dumps(tumult_runs(args.data, args.levels, args.runs)))
        return
    if args.worker:
        run = opendp_runs if args.worker == "opendp" else pipelinedp_runs
        print(json.dumps(run(args.users, args.levels, args.runs)))
        return
    lines = ["| statistic | method | mean abs. error ± s.e. | |", "|---|---|---|---|"]
    for i, b in enumerate(args.branching):
        result = gaussdp_runs(args.users, args.levels, args.runs, b, quantiles_only=i > 0)
        lines += summarise(f"gaussdp (b = {b})", result, args.users, args.levels)
    for peer in ("opendp", "pipelinedp"):
        outcome = _peer(args.peer_python, peer, args)
        if isinstance(outcome, str):
            lines.append(f"| — | {peer} | {outcome} | |")
        else:
            lines += summarise(peer, outcome, args.users, args.levels)
    if args.tumult_python is None:
        lines.append("| — | tumult | not run: pass --tumult-python (see the docstring) | |")
    else:
        import pandas as pd

        with tempfile.TemporaryDirectory() as tmp:
            data = str(Path(tmp) / "values.parquet")
            pd.DataFrame({"v": values(args.users)}).to_parquet(data)
            outcome = _peer(args.tumult_python, "tumult", args, "--data", data)
        if isinstance(outcome, str):
            lines.append(f"| — | tumult | {outcome} | |")
        else:
            lines += summarise("tumult", outcome, args.users, args.levels)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
