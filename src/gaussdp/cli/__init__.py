"""The ``gaussdp`` command.

Each subcommand lives in its own module and registers itself on :data:`app`.
The modules import numpy, scipy, DuckDB and pandas only inside the commands
that need them, so ``gaussdp --help`` and ``gaussdp --version`` start fast.
Failures follow one contract (:mod:`gaussdp.cli._output`): one line on
stderr and a documented exit status.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer
from typer._click.core import Context
from typer._click.exceptions import UsageError
from typer.core import TyperGroup

from gaussdp.cli import account, calibrate, explain, plot, release, synth
from gaussdp.cli._output import EXIT_CODES_HELP, OPTIONS, one_line_usage

__all__ = ["app"]


class _OneLineUsageGroup(TyperGroup):
    """The command group, its parse errors (a flag's value of the wrong type, an
    unknown option) turned into one template line with exit status 2."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: Context | None = None, **extra: Any
    ) -> Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except UsageError as error:
            raise one_line_usage(error) from None

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as error:
            raise one_line_usage(error) from None


app = typer.Typer(
    cls=_OneLineUsageGroup,
    name="gaussdp",
    help=(
        "The Gaussian mechanism of differential privacy, exact from calibration to release.\n\n"
        "Release private statistics from a table with a budget ledger that cannot be "
        "overspent; calibrate noise for an (ε, δ) target; convert between the (ε, δ), μ-GDP, "
        "ρ-zCDP and σ views of one mechanism; account for compositions and DP-SGD with "
        "certified bounds. Every command takes --json (one JSON object on stdout) and "
        "--help.\n\n" + EXIT_CODES_HELP
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from gaussdp import __version__

        typer.echo(f"gaussdp {__version__}")
        raise typer.Exit


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Log progress, and print the traceback of a failure."),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="Print results and errors only: no progress lines."),
    ] = False,
) -> None:
    """Options that apply to every command (give them before the command's name)."""
    OPTIONS.update(verbose=verbose, quiet=quiet)
    log = logging.getLogger("gaussdp")
    log.setLevel(logging.DEBUG if verbose else logging.ERROR if quiet else logging.WARNING)
    if not any(isinstance(handler, _EchoHandler) for handler in log.handlers):
        log.addHandler(_EchoHandler())


class _EchoHandler(logging.Handler):
    """Log records of the library to the current stderr, one line each."""

    def emit(self, record: logging.LogRecord) -> None:
        typer.echo(f"{record.levelname.lower()}: {record.getMessage()}", err=True)


release.register(app)
calibrate.register(app)
account.register(app)
explain.register(app)
plot.register(app)
synth.register(app)
