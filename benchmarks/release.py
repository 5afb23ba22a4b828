"""Rows per second and peak memory of a private group-by release, gaussdp against plain DuckDB.

Run with ``python benchmarks/release.py [--rows 10000000] [--data visits.parquet]``.
The table (synthetic site visits, 1000 pages, written by
``examples/make_visits.py`` if ``--data`` does not exist) gets, per page, a
count, a sum and a mean of ``minutes`` with L0 = 3 groups per user and L∞ = 2
rows per user and group:

- ``gaussdp (duckdb)``: :class:`gaussdp.release.Release` end to end — planning,
  contribution bounding and aggregation in DuckDB, private partition selection
  and exact discrete Gaussian noise;
- ``plain duckdb``: the same group-by without privacy (the speed ceiling);
- ``opendp polars`` if OpenDP's Polars context runs in this environment (it pins
  its own polars version; see the note printed otherwise).

Each method runs once, in its own process, so that peak memory (``ru_maxrss`` of
that process, which includes the interpreter and imports) is its own. For
orientation, the issue measured on this kind of machine: OpenDP's Polars context
≈ 2.3·10⁵ rows/s, PipelineDP local ≈ 3.6·10⁴ rows/s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PEERS_AS_MEASURED = {
    "opendp polars (issue 5, measured)": 2.3e5,
    "pipelinedp local (issue 5, measured)": 3.6e4,
}


def _worker(method: str, data: str) -> float:
    """Run one method on ``data`` and return the seconds it took."""
    if method == "plain":
        import duckdb

        start = time.perf_counter()
        con = duckdb.connect()
        con.execute(
            "SELECT page, COUNT(*), SUM(minutes), AVG(minutes) FROM read_parquet(?) GROUP BY page",
            [data],
        ).fetchall()
        return time.perf_counter() - start
    if method == "gaussdp":
        from gaussdp.budget import Budget
        from gaussdp.release import Release

        start = time.perf_counter()
        (
            Release(
                data,
                privacy_unit="user_id",
                budget=Budget(epsilon=1.0, delta=1e-6),
                max_groups_per_unit=3,
                max_rows_per_group=2,
            )
            .count(by="page")
            .sum("minutes", bounds=(0, 60), by="page")
            .mean("minutes", bounds=(0, 60), by="page")
            .run()
        )
        return time.perf_counter() - start
    if method == "opendp":
        import opendp.prelude as dp  # type: ignore[import-not-found]
        import polars as pl

        dp.enable_features("contrib")
        start = time.perf_counter()
        lf = pl.scan_parquet(data)
        context = dp.Context.compositor(
            data=lf,
            privacy_unit=dp.unit_of(contributions=3, identifier=pl.col("user_id")),
            privacy_loss=dp.loss_of(epsilon=1.0, delta=1e-6),
            split_evenly_over=3,
            margins=[dp.polars.Margin(by=["page"], max_length=10**7)],
        )
        query = (
            context.query()
            .group_by("page")
            .agg(
                dp.len(),
                pl.col("minutes").fill_null(0).dp.sum((0, 60)),
                pl.col("minutes").fill_null(0).dp.mean((0, 60)),
            )
        )
        query.release().collect()
        return time.perf_counter() - start
    raise SystemExit(f"unknown method {method!r}")


def _run(method: str, data: str) -> tuple[float | None, float, str]:
    """(seconds or None, peak RSS in MB, error text) of one method in a fresh process."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--worker", method, "--data", data],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    out = proc.stdout.read() if proc.stdout else ""
    err = proc.stderr.read() if proc.stderr else ""
    peak_mb = usage.ru_maxrss / 1024  # KiB on Linux
    if os.waitstatus_to_exitcode(status) != 0:
        return None, peak_mb, err.strip().splitlines()[-1] if err.strip() else "failed"
    return float(json.loads(out)["seconds"]), peak_mb, ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--data", type=Path, default=Path("visits_10m.parquet"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--skip-opendp", action="store_true")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps({"seconds": _worker(args.worker, str(args.data))}))
        return
    if not args.data.exists():
        sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
        from make_visits import write_visits

        print(f"writing {args.rows} synthetic rows to {args.data} …", flush=True)
        write_visits(
            args.data, rows=args.rows, users=args.rows // 10, pages=1000, days=28, seed=0.42
        )
    import duckdb

    rows = (
        duckdb.connect()
        .execute("SELECT COUNT(*) FROM read_parquet(?)", [str(args.data)])
        .fetchone()
    )
    n = int(rows[0]) if rows else 0
    methods = [("gaussdp (duckdb)", "gaussdp"), ("plain duckdb (no privacy)", "plain")]
    if not args.skip_opendp:
        methods.append(("opendp polars", "opendp"))
    results: dict[str, tuple[float | None, float, str]] = {}
    for label, method in methods:
        results[label] = _run(method, str(args.data))
    base = results["gaussdp (duckdb)"][0]
    base_rate = n / base if base else float("nan")
    print(f"\n{n:,} rows, 1000 pages, count + sum + mean per page, L0 = 3, L∞ = 2\n")
    print(
        f"| {'method':<40} | {'seconds':>8} | {'rows/s':>10} | {'peak MB':>8} "
        f"| {'gaussdp speed ×':>15} |"
    )
    print(f"|{'-' * 42}|{'-' * 10}|{'-' * 12}|{'-' * 10}|{'-' * 17}|")
    for label, (seconds, peak, error) in results.items():
        if seconds is None:
            print(
                f"| {label:<40} | {'—':>8} | {'—':>10} | {peak:>8.0f} | {'—':>15} |  ({error[:80]})"
            )
            continue
        rate = n / seconds
        print(
            f"| {label:<40} | {seconds:>8.2f} | {rate:>10.3g} | {peak:>8.0f} "
            f"| {base_rate / rate:>15.3g} |"
        )
    for label, rate in PEERS_AS_MEASURED.items():
        print(f"| {label:<40} | {'—':>8} | {rate:>10.3g} | {'—':>8} | {base_rate / rate:>15.3g} |")


if __name__ == "__main__":
    main()
