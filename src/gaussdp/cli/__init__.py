"""The ``gaussdp`` command.

Each subcommand lives in its own module and registers itself on :data:`app`.
"""

from __future__ import annotations

import typer

from gaussdp.cli import account, calibrate, explain, plot, release

__all__ = ["app"]

app = typer.Typer(
    name="gaussdp",
    help=(
        "The Gaussian mechanism of differential privacy, exact from calibration to release.\n\n"
        "Release private statistics from a table with a budget ledger that cannot be "
        "overspent; calibrate noise for an (ε, δ) target; convert between the (ε, δ), μ-GDP, "
        "ρ-zCDP and σ views of one mechanism; account for compositions and DP-SGD with "
        "certified bounds."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
)

release.register(app)
calibrate.register(app)
account.register(app)
explain.register(app)
plot.register(app)
