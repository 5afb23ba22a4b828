"""``gaussdp plot ...``: the figures of :mod:`gaussdp.plot`, saved to a file with their table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gaussdp.cli._output import console, fail, handle_errors

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["register"]

plot_app = typer.Typer(
    help="Draw gaussdp's privacy figures (needs the 'plot' extra: from the checkout, "
    "pip install -e '.[plot]').",
    no_args_is_help=True,
)

OutOption = Annotated[
    Path, typer.Option("--out", "-o", help="Image file to write (.png, .svg, .pdf).")
]
TableOption = Annotated[
    Path | None, typer.Option("--table", help="Also write the numbers drawn as CSV.")
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON object naming the files written.")
]


def _plot_module() -> Any:
    """gaussdp.plot; without the extra, MissingExtraError (exit 4, naming the install)."""
    import gaussdp.plot as module

    return module


def _save(
    result: tuple[Figure, pd.DataFrame], out: Path, table: Path | None, as_json: bool
) -> None:
    from gaussdp.cli.release import check_distinct, check_writable, write_failure

    check_distinct({"--out": out, "--table": table}, {})
    for option, path in (("--out", out), ("--table", table)):
        if path is not None:
            check_writable(path, option)
    fig, frame = result
    try:
        fig.savefig(out, dpi=120)
    except OSError as error:  # checked above; the disk may still fail
        fail(write_failure("--out", out, error))
    if table is not None:
        try:
            frame.to_csv(table, index=False)
        except OSError as error:
            fail(write_failure("--table", table, error))
    if as_json:
        typer.echo(json.dumps({"figure": str(out), "table": None if table is None else str(table)}))
        return
    console().print(f"wrote {out}", highlight=False)
    if table is not None:
        console().print(f"wrote {table}", highlight=False)


@plot_app.command("tradeoff")
@handle_errors()
def tradeoff(
    out: OutOption,
    mu: Annotated[
        list[float] | None,
        typer.Option(help="μ of a reference G_μ curve (repeatable; default 0.5, 1, 3, 6)."),
    ] = None,
    epsilon: Annotated[float | None, typer.Option(help="Add the curve of (ε, δ)-DP.")] = None,
    delta: Annotated[float | None, typer.Option(help="δ of that curve.")] = None,
    rho: Annotated[float | None, typer.Option(help="Add the curve of ρ-zCDP.")] = None,
    noise_multiplier: Annotated[
        float | None, typer.Option(help="Add the curve of a DP-SGD run: noise multiplier.")
    ] = None,
    sample_rate: Annotated[float | None, typer.Option(help="DP-SGD sampling rate.")] = None,
    steps: Annotated[int | None, typer.Option(help="DP-SGD steps.")] = None,
    log: Annotated[bool, typer.Option("--log", help="Log-log axes, attacker's view.")] = False,
    table: TableOption = None,
    as_json: JsonOption = False,
) -> None:
    """Trade-off curves with the DRS reading, and a guarantee's curve beside them.

    Example: gaussdp plot tradeoff --epsilon 1 --delta 1e-6 --out tradeoff.png
    """
    from gaussdp.cli.explain import explain_curve

    module = _plot_module()
    release = (epsilon, delta, rho, noise_multiplier, sample_rate, steps)
    curves = []
    if any(v is not None for v in release):
        curves.append(
            explain_curve(
                epsilon=epsilon,
                delta=delta,
                mu=None,
                rho=rho,
                noise_multiplier=noise_multiplier,
                sample_rate=sample_rate,
                steps=steps,
            )
        )
    mus = tuple(mu) if mu else tuple(module.DRS_MUS)
    _save(module.tradeoff_figure(curves, mus=mus, log=log), out, table, as_json)


@plot_app.command("profile")
@handle_errors()
def profile(
    out: OutOption,
    sigma: Annotated[float, typer.Option(help="Noise σ of each run (sensitivity 1).")],
    count: Annotated[int, typer.Option(help="Number of composed runs.")] = 1,
    sample_rate: Annotated[
        float | None, typer.Option(help="Poisson subsampling rate (DP-SGD).")
    ] = None,
    table: TableOption = None,
    as_json: JsonOption = False,
) -> None:
    """Privacy profiles δ(ε) by the PLD, RDP and zCDP accountants side by side.

    Example: gaussdp plot profile --sigma 1.1 --sample-rate 0.01 --count 1000 --out p.png
    """
    from gaussdp.accounting import Subsampled
    from gaussdp.mechanisms import Gaussian

    module = _plot_module()

    def build() -> tuple[Figure, pd.DataFrame]:
        gaussian = Gaussian(sigma=sigma)
        mechanism = (
            gaussian if sample_rate is None else Subsampled(gaussian, sample_rate=sample_rate)
        )
        result: tuple[Figure, pd.DataFrame] = module.privacy_profile_figure(mechanism, count)
        return result

    _save(build(), out, table, as_json)


@plot_app.command("sigma")
@handle_errors()
def sigma(
    out: OutOption,
    delta: Annotated[float, typer.Option(help="The fixed δ.")] = 1e-5,
    table: TableOption = None,
    as_json: JsonOption = False,
) -> None:
    """Noise σ against ε at a fixed δ for each calibration.

    Example: gaussdp plot sigma --delta 1e-6 --out sigma.png
    """
    module = _plot_module()
    _save(module.sigma_epsilon_figure(delta), out, table, as_json)


@plot_app.command("cks-fig1")
@handle_errors()
def cks_fig1(out: OutOption, table: TableOption = None, as_json: JsonOption = False) -> None:
    """CKS Figure 1: δ(ε) of the discrete Gaussian against the continuous one and bounds."""
    module = _plot_module()
    _save(module.cks_fig1(), out, table, as_json)


@plot_app.command("cks-fig2")
@handle_errors()
def cks_fig2(
    out: OutOption,
    sigma2: Annotated[float, typer.Option(help="σ² of the three distributions.")] = 2.0,
    table: TableOption = None,
    as_json: JsonOption = False,
) -> None:
    """CKS Figure 2: tails of the discrete, continuous and rounded Gaussian."""
    module = _plot_module()
    _save(module.cks_fig2(sigma2), out, table, as_json)


@plot_app.command("cks-fig4")
@handle_errors()
def cks_fig4(
    out: OutOption,
    count: Annotated[int, typer.Option(help="Number of queries k (left panel).")] = 100,
    sigma: Annotated[float, typer.Option(help="Noise standard deviation per query.")] = 50.0,
    table: TableOption = None,
    as_json: JsonOption = False,
) -> None:
    """CKS Figure 4: discrete Gaussian against discrete Laplace for k counting queries.

    Example: gaussdp plot cks-fig4 --out fig4.png --table fig4.csv
    """
    module = _plot_module()
    _save(module.cks_fig4(count, sigma), out, table, as_json)


def register(app: typer.Typer) -> None:
    """Add the ``plot`` sub-app to ``app``."""
    app.add_typer(plot_app, name="plot")
