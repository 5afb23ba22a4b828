"""Write a synthetic site-visits table (clearly fake data) for gaussdp's demo and benchmark.

Each row is one visit: ``user_id`` (the privacy unit), ``day``, ``page``,
``minutes`` (about 1 % missing). Users are skewed (a few visit very often) and
so are pages, so contribution bounding has real work to do. Nothing here is
derived from real people.

Usage::

    python examples/make_visits.py --out visits.csv                 # 6000 rows, as the demo's
    python examples/make_visits.py --rows 1e7 --users 1e6 \
        --pages 1000 --out visits_10m.parquet                       # the benchmark table

``--out`` is required and an existing file is never replaced unless
``--overwrite`` is given (the demo's ``examples/visits.csv`` is this script's
default output: ``--out examples/visits.csv --overwrite`` regenerates it).
Counts accept ``1e7`` or ``10_000_000``. The output format follows the suffix
(.csv or .parquet). Generation runs in DuckDB (a 10⁷-row Parquet file takes a
few seconds and little memory); CSV output is deterministic (fixed seed, one
thread), Parquet output uses two threads and is not.
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
        width = len(str(pages - 1))  # page-0000 … page-9999, page-00000 … for 10⁵ pages
        page = f"'page-' || lpad(CAST({index} AS VARCHAR), {width}, '0')"
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
        ) TO '{out.as_posix().replace("'", "''")}' ({fmt})
        """
    )
    con.close()


def count(text: str) -> int:
    """A positive whole number, written ``6000``, ``10_000_000`` or ``1e7``."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not (value >= 1 and value.is_integer() and value < 2**62):
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=count, default=6000, help="visits (default 6000)")
    parser.add_argument("--users", type=count, default=800, help="distinct users (default 800)")
    parser.add_argument(
        "--pages", type=count, default=len(PAGES), help=f"distinct pages (default {len(PAGES)})"
    )
    parser.add_argument("--days", type=count, default=14, help="distinct days (default 14)")
    parser.add_argument("--seed", type=float, default=0.42, help="DuckDB setseed, in [-1, 1]")
    parser.add_argument("--out", type=Path, required=True, help="the .csv or .parquet to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = parser.parse_args()
    if args.out.suffix not in (".csv", ".parquet"):
        parser.error(f"--out must end in .csv or .parquet, got {str(args.out)!r}")
    if args.out.exists() and not args.overwrite:
        parser.error(f"--out {str(args.out)!r} exists; pass --overwrite to replace it")
    if not -1 <= args.seed <= 1:
        parser.error(f"--seed must be in [-1, 1], got {args.seed}")
    write_visits(
        args.out, rows=args.rows, users=args.users, pages=args.pages, days=args.days, seed=args.seed
    )
    print(f"wrote {args.rows:,} synthetic visits to {args.out}")


if __name__ == "__main__":
    main()
