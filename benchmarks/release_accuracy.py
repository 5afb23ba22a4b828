"""Accuracy of gaussdp's quantiles, variance and distinct-unit counts against OpenDP and PipelineDP.

Run with::

    python benchmarks/release_accuracy.py [--peer-python /work/venv-bench/bin/python] [--runs 40]

One table of ``--users`` users (10⁴ by default), one row each, values
Gamma(2, 10) clamped to [0, 100] (seeded), one group; every method at ε = 1
(δ = 10⁻⁶ where the method takes one), one user's row as the unit of privacy
(add/remove), bounds [0, 100]. Reported: the mean absolute error over
``--runs`` runs against the statistic of the clamped values (and, for
quantiles, the mean rank error |F(x̂) − q|).

- ``gaussdp``: :class:`gaussdp.release.Release` (L0 = L∞ = 1), exact discrete
  Gaussian noise, (ε, δ) accounted in μ-GDP: ``quantile`` (a tree of 1024
  leaves; all levels q from one tree), ``variance``, ``distinct_units``.
- ``opendp``: ``make_private_quantile`` (exponential mechanism over 1025
  candidates, pure ε; each of k quantiles gets ε/k).
- ``pipelinedp``: ``Metrics.PERCENTILE`` (its quantile tree), ``VARIANCE``,
  ``PRIVACY_ID_COUNT`` with Gaussian noise at (ε, δ), one public partition.

Tumult Analytics (``tmlt.analytics`` 0.21) requires ``pyspark<3.6`` while this
project uses pyspark 4; it needs an environment of its own and is not run here.

Peers run under ``--peer-python`` (an interpreter with ``opendp`` and
``pipeline-dp``, e.g. the ``bench`` extra's); a missing peer is reported as such.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
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


def summarise(name: str, result: dict[str, Any], users: int, levels: list[float]) -> list[str]:
    t = truth(users, levels)
    v = np.sort(values(users))
    lines = []
    if result.get("quantiles"):
        est = np.array(result["quantiles"])
        err = np.abs(est - np.array(t["quantiles"])).mean(axis=0)
        rank = np.abs(np.searchsorted(v, est) / users - np.array(levels)).mean(axis=0)
        for a, level in enumerate(levels):
            lines.append(f"| quantile {level:g} | {name} | {err[a]:.3g} | rank {rank[a]:.2g} |")
    if result.get("variance"):
        err_v = np.abs(np.array(result["variance"]) - t["variance"]).mean()
        lines.append(f"| variance | {name} | {err_v:.3g} | truth {t['variance']:.4g} |")
    if result.get("distinct"):
        err_d = np.abs(np.array(result["distinct"]) - users).mean()
        lines.append(f"| distinct units | {name} | {err_d:.3g} | truth {users} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--levels", type=float, nargs="+", default=[0.25, 0.5, 0.75])
    parser.add_argument("--branching", type=int, nargs="+", default=[4])  # 1024 leaves: 2, 4, 32
    parser.add_argument("--peer-python", default=sys.executable)
    parser.add_argument("--worker", choices=["opendp", "pipelinedp"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run = opendp_runs if args.worker == "opendp" else pipelinedp_runs
        print(json.dumps(run(args.users, args.levels, args.runs)))
        return
    lines = ["| statistic | method | mean abs. error | |", "|---|---|---|---|"]
    for i, b in enumerate(args.branching):
        result = gaussdp_runs(args.users, args.levels, args.runs, b, quantiles_only=i > 0)
        lines += summarise(f"gaussdp (b = {b})", result, args.users, args.levels)
    for peer in ("opendp", "pipelinedp"):
        command = [args.peer_python, __file__, "--worker", peer, "--users", str(args.users)]
        command += ["--runs", str(args.runs), "--levels", *map(str, args.levels)]
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            lines.append(f"| — | {peer} | not run: {proc.stderr.strip().splitlines()[-1]} | |")
            continue
        lines += summarise(peer, json.loads(proc.stdout), args.users, args.levels)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
