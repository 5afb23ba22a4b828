"""``gaussdp synth``: private synthetic data from a table, as a TOML spec describes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gaussdp.cli._output import (
    CliError,
    ceil_text,
    console,
    format_value,
    handle_errors,
    is_quiet,
    progress,
)

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["register"]


def _report_table(report: dict[str, Any]) -> Table:
    from rich.table import Table

    table = Table(
        title=f"privacy report ({report['method']})", show_header=True, header_style="bold"
    )
    for name in ("event", "marginal", "sensitivity", "σ", "ε", "ρ"):
        table.add_column(name, justify="left" if name in ("event", "marginal") else "right")
    for e in report["events"]:
        table.add_row(
            e["kind"],
            ", ".join(e["clique"]) or "—",
            format_value(e["sensitivity"]),
            format_value(e["sigma"]),
            format_value(e["epsilon"]),
            format_value(e["rho"]),
        )
    eps = report["epsilon"]
    table.caption = (
        f"total ρ = {ceil_text(report['rho'])}; "
        + (
            f"ε = {ceil_text(eps)} at δ = {ceil_text(report['delta'], 3)}"
            if eps is not None
            else "no δ given"
        )
        + f"\n{report['accounting']}"
    )
    return table


def _quality_table(quality: Any) -> Table:
    from rich.table import Table

    table = Table(title="quality (mean TV distance)", show_header=True, header_style="bold")
    for name in ("marginals", "count", "vs noisy measurements", "vs true data"):
        table.add_column(name, justify="left" if name == "marginals" else "right")
    for order, group in quality.groupby("order"):
        measured = group["tv_measured"].dropna()
        true = group["tv_true"].dropna()
        table.add_row(
            f"{order}-way",
            str(len(group)),
            format_value(float(measured.mean())) if len(measured) else "—",
            format_value(float(true.mean())) if len(true) else "—",
        )
    return table


@handle_errors("give fewer columns, coarser domains or --rows")
def synth_command(
    spec: Annotated[
        Path, typer.Argument(help="The TOML spec: privacy unit, budget, bounds, column domains.")
    ],
    data: Annotated[str, typer.Option("--data", help="CSV or Parquet file.")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Write the synthetic table to this CSV file (checked before any budget is spent).",
        ),
    ],
    ledger: Annotated[
        Path | None,
        typer.Option("--ledger", help="A budget ledger to spend from (gaussdp ledger init)."),
    ] = None,
    rows: Annotated[
        int | None, typer.Option("--rows", help="Synthetic rows (overrides the spec's `rows`).")
    ] = None,
    evaluate: Annotated[
        bool,
        typer.Option(
            "--evaluate",
            help="Also compare with the true data's marginals: NOT private, for evaluation only.",
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of tables.")
    ] = False,
) -> None:
    """Private synthetic data: MST or AIM on noisy marginals, a graphical model, sampled rows.

    Measures the 1-way marginals and then (MST) a spanning tree of 2-way
    marginals or (AIM, `method = "aim"` in the spec) a workload's marginals
    round by round, with exact discrete Gaussian noise (each person bounded in
    the engine), chosen by an exactly sampled exponential mechanism; fits a
    graphical model (Private-PGM) and writes sampled rows; prints the privacy
    report and the marginals' total-variation errors. If the table cannot be
    written after the ledger committed the spend, it is saved to a recovery file
    that the error line names.
    """
    from gaussdp.cli.release import check_distinct, check_writable, open_ledger
    from gaussdp.release import load_spec
    from gaussdp.synth import synthesizer_from_spec

    check_writable(out, "--out")
    check_distinct({"--out": out}, {"--ledger": ledger, "spec": spec, "--data": data})
    parsed = load_spec(spec)
    synth = synthesizer_from_spec({k: v for k, v in parsed.items() if k != "rows"}, data)
    n_rows = rows if rows is not None else parsed.get("rows")
    book = open_ledger(ledger) if ledger is not None else None
    with progress("measuring, selecting, fitting the model…", as_json=as_json):
        result = synth.run(
            rows=n_rows, ledger=book, label=f"synth {spec.name} on {data}", evaluate=evaluate
        )
    try:
        result.frame.to_csv(out, index=False)
    except OSError as error:
        raise _write_failure(result.frame, out, error, ledger) from error
    report = result.report.to_dict()
    if as_json:
        payload = {
            "out": str(out),
            "rows": len(result.frame),
            "tree": [list(e) for e in result.tree],
            "report": report,
            "quality": json.loads(result.quality.to_json(orient="records")),
        }
        typer.echo(json.dumps(payload, indent=2, default=str))
        return
    console().print(_report_table(report))
    console().print(_quality_table(result.quality))
    if not is_quiet():
        console().print(f"{len(result.frame)} synthetic rows written to {out}")


def _write_failure(frame: Any, out: Path, error: OSError, ledger: Path | None) -> CliError:
    """Exit status 4 for a table that could not be written after the spend; saved elsewhere."""
    from gaussdp.cli.release import late_write_error, save_recovery

    text = frame.to_csv(index=False)
    recovered = save_recovery(text, ".csv")
    if recovered is None:
        typer.echo(text, nl=False)
    saved = (
        f"the synthetic rows are saved in {recovered}"
        if recovered is not None
        else "no recovery file could be written either; the rows follow on stdout"
    )
    return late_write_error(out, error, ledger, saved)


def register(app: typer.Typer) -> None:
    """Add ``gaussdp synth`` to ``app``."""
    app.command("synth")(synth_command)
