"""``gaussdp release`` (the main job) and ``gaussdp ledger init|show``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from gaussdp.budget import Budget
from gaussdp.cli._output import console, error_console, fail, format_value
from gaussdp.errors import BudgetExceededError, LedgerError

__all__ = ["register"]

JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON object instead of tables.")
]


def _report_table(report: dict[str, Any]) -> Table:
    table = Table(title="privacy report", show_header=True, header_style="bold")
    for name in ("query", "by", "part", "sensitivity", "γ", "σ", "μ", "ρ", "δ", "τ"):
        table.add_column(name, justify="left" if name in ("query", "by", "part") else "right")
    for c in report["costs"]:
        table.add_row(
            c["query"],
            ", ".join(c["by"]) or "—",
            c["part"],
            format_value(c["sensitivity"]),
            format_value(c["gamma"]),
            format_value(c["sigma"]),
            format_value(c["mu"]),
            format_value(c["rho"]),
            format_value(c["delta"]) if c["delta"] else "—",
            format_value(c["threshold"]),
        )
    eps = report["epsilon"]
    if report["mode"] == "gdp":
        totals = (
            f"accounted in μ: total μ = {report['mu']:.6g} (slack A = {report['slack']:.3g}; "
            f"ρ = {report['rho']:.6g} for information); "
        )
    else:
        mu = report["mu"]
        totals = f"accounted in ρ: total ρ = {report['rho']:.6g}" + (
            "; " if mu is None else f" (μ = {mu:.6g} for information); "
        )
    table.caption = (
        totals
        + f"selection δ = {report['selection_delta']:.3g}; "
        + (f"ε = {eps:.6g} at δ = {report['delta']:.3g}" if eps is not None else "no δ given")
        + f"; budget {Budget(**report['budget'])}\n{report['accounting']}"
    )
    return table


def _frame_table(frame: Any) -> Table:
    table = Table(title="release", show_header=True, header_style="bold")
    for column in frame.columns:
        table.add_column(
            str(column),
            justify="right" if column in ("value", "std", "ci_low", "ci_high") else "left",
        )
    for row in frame.itertuples(index=False):
        table.add_row(*[_cell(v) for v in row])
    return table


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return format_value(value)


def release_command(
    spec: Annotated[
        Path, typer.Argument(help="The TOML spec: privacy unit, budget, bounds, queries.")
    ],
    data: Annotated[
        str,
        typer.Option("--data", help="CSV or Parquet file (or, with --engine spark, a table name)."),
    ],
    engine: Annotated[
        str | None, typer.Option("--engine", help="duckdb (default) or spark; overrides the spec.")
    ] = None,
    ledger: Annotated[
        Path | None,
        typer.Option("--ledger", help="A budget ledger to spend from (gaussdp ledger init)."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the results to this CSV file.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Release private statistics from a table, as a TOML spec describes.

    Bounds each person's contribution inside the engine, adds exact discrete
    Gaussian noise, prints the values with their noise std and confidence
    intervals, and the privacy report.
    """
    from gaussdp.release import Ledger, load_spec, release_from_spec

    try:
        parsed = load_spec(spec)
        release = release_from_spec(parsed, data, engine=engine)
        book = Ledger(ledger) if ledger is not None else None
        with error_console.status(f"bounding and aggregating on {release.engine}…"):
            result = release.run(ledger=book, label=f"{spec.name} on {data}")
    except BudgetExceededError as error:
        # The message starts with "refused: " and says what remains, in the budget's terms.
        error_console.print(f"[bold red]{error}[/]", highlight=False)
        raise typer.Exit(code=3) from None
    except (ValueError, TypeError, OSError, LedgerError) as error:
        fail(str(error))
    report = result.report.to_dict()
    if out is not None:
        result.frame.to_csv(out, index=False)
    if as_json:
        payload = {
            "results": json.loads(result.frame.to_json(orient="records")),
            "report": report,
        }
        typer.echo(json.dumps(payload, indent=2, default=str))
        return
    console.print(_frame_table(result.frame))
    console.print(_report_table(report))
    if out is not None:
        console.print(f"results written to {out}")


ledger_app = typer.Typer(
    help="A persistent privacy budget (SQLite) that cannot be overspent.", no_args_is_help=True
)


@ledger_app.command("init")
def ledger_init(
    path: Annotated[Path, typer.Argument(help="The ledger file to create.")],
    epsilon: Annotated[float | None, typer.Option("--epsilon", "-e", help="Total ε.")] = None,
    delta: Annotated[float | None, typer.Option("--delta", "-d", help="Total δ.")] = None,
    rho: Annotated[float | None, typer.Option("--rho", help="Total ρ (zCDP).")] = None,
    mu: Annotated[float | None, typer.Option("--mu", help="Total μ (GDP).")] = None,
) -> None:
    """Create a ledger holding a total budget."""
    from gaussdp.release import Ledger

    if path.exists():
        fail(f"ledger must be a new file, got {str(path)!r} (it exists)")
    try:
        Ledger(path, total=Budget(epsilon=epsilon, delta=delta, rho=rho, mu=mu))
    except (ValueError, TypeError, OSError) as error:
        fail(str(error))
    console.print(f"created {path}")


@ledger_app.command("show")
def ledger_show(
    path: Annotated[Path, typer.Argument(help="The ledger file.")],
    as_json: JsonOption = False,
) -> None:
    """List what was spent, by whom, when, on what — and what remains."""
    from gaussdp.release import Ledger

    try:
        summary = Ledger(path).summary()
    except (ValueError, TypeError, OSError, LedgerError) as error:
        fail(str(error))
    unit = {"epsilon": "ε", "rho": "ρ", "mu": "μ"}[summary.unit]
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "total": summary.total.as_dict(),
                    "unit": summary.unit,
                    "delta": summary.delta,
                    "spent": summary.spent,
                    "spent_lower": summary.spent_lower,
                    "remaining": summary.remaining,
                    "selection_delta": summary.selection_delta,
                    "slack": summary.slack,
                    "entries": [
                        {
                            "id": r.id,
                            "status": r.status,
                            "what": r.what,
                            "reserved_at": r.when,
                            "committed_at": r.committed_at,
                            "who": r.who,
                            "event": r.event,
                            "cost": r.cost,
                        }
                        for r in summary.rows
                    ],
                },
                indent=2,
            )
        )
        return
    table = Table(title=f"ledger {path}", show_header=True, header_style="bold")
    for name in ("id", "status", f"{unit} alone", "what", "event", "who", "reserved", "committed"):
        table.add_column(name)
    for r in summary.rows:
        table.add_row(
            str(r.id),
            r.status,
            format_value(r.cost),
            r.what,
            r.event,
            r.who,
            r.when,
            r.committed_at or "—",
        )
    at = f" at δ = {summary.delta:.3g}" if summary.unit == "epsilon" else ""
    table.caption = (
        f"total {summary.total}; spent {unit} = {summary.spent:.6g}{at}"
        f" (lower bound {summary.spent_lower:.6g}); remaining {unit} = {summary.remaining:.6g}"
    )
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add ``release`` and the ``ledger`` sub-app to ``app``."""
    app.command("release")(release_command)
    app.add_typer(ledger_app, name="ledger")
