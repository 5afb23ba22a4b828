"""Write a synthetic site-visits table (clearly fake data) for gaussdp's demo and benchmark.

Each row is one visit: ``user_id`` (the privacy unit), ``day``, ``page``,
``minutes`` (about 1 % missing). Users are skewed (a few visit very often) and
so are pages, so contribution bounding has real work to do. Nothing here is
derived from real people.

Usage::

    python examples/make_visits.py                                  # examples/visits.csv, 6000 rows
    python examples/make_visits.py --rows 10000000 --users 1000000 \
        --pages 1000 --out visits_10m.parquet                       # the benchmark table

The output format follows the suffix (.csv or .parquet). Generation runs in
DuckDB (a 10⁷-row Parquet file takes a few seconds and little memory); the
small table is deterministic (fixed seed, one thread).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import duckdb

PAGES = ["home", "search", "product", "cart", "checkout", "help", "account", "blog"]


def write_visits(out: Path, *, rows: int, users: int, pages: int, days: int, seed: float) -> None:
    """Write ``rows`` synthetic visits to ``out`` (.csv or .parquet)."""
    con = duckdb.connect()
    con.execute("SET threads = 1")  # setseed is repeatable only single-threaded
    con.execute("SELECT setseed(?)", [seed])
    if pages <= len(PAGES):
        names = "[" + ", ".join(f"'{p}'" for p in PAGES[:pages]) + "]"
        page = f"list_extract({names}, CAST(floor(pow(random(), 1.6) * {pages}) AS INTEGER) + 1)"
    else:
        index = f"CAST(floor(pow(random(), 1.6) * {pages}) AS INTEGER)"
        page = f"'page-' || lpad(CAST({index} AS VARCHAR), 4, '0')"
    fmt = "FORMAT PARQUET" if out.suffix == ".parquet" else "FORMAT CSV, HEADER"
    if out.suffix == ".parquet":
        con.execute("SET threads = 2")  # big tables: speed over exact repeatability
    con.execute(
        f"""
        COPY (
          SELECT
            CAST(floor(pow(random(), 2) * {users}) AS BIGINT) + 1 AS user_id,
            DATE '2026-03-02' + CAST(floor(random() * {days}) AS INTEGER) AS day,
            {page} AS page,
            CASE WHEN random() < 0.01 THEN NULL
                 ELSE round(0.5 + 60 * pow(random(), 2) + 10 * random(), 1) END AS minutes
          FROM range({rows})
        ) TO '{out.as_posix()}' ({fmt})
        """
    )
    con.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=6000)
    parser.add_argument("--users", type=int, default=800)
    parser.add_argument("--pages", type=int, default=len(PAGES))
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--seed", type=float, default=0.42)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("visits.csv"))
    args = parser.parse_args()
    write_visits(
        args.out, rows=args.rows, users=args.users, pages=args.pages, days=args.days, seed=args.seed
    )
    print(f"wrote {args.rows} synthetic visits to {args.out}")


if __name__ == "__main__":
    main()
