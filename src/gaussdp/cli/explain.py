"""``gaussdp explain``: what a guarantee means for a membership-inference attacker.

The guarantee is given by its parameters (ε and δ, μ, ρ, a DP-SGD run) or is the
total spend of a budget ledger (``--ledger DB``): every entry with its cost alone,
the composed total with its certified upper and its lower bound, and the trade-off
curve of the whole history read as a membership-inference bound.
"""

from __future__ import annotations

import json as jsonlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gaussdp.cli._output import ceil_text, console, emit, fail, handle_errors

if TYPE_CHECKING:
    from gaussdp.privacy.tradeoff import TradeoffCurve
    from gaussdp.release.ledger import LedgerSummary

__all__ = ["register"]

# False-positive rates at which the table reads the curve, besides --fpr.
_READINGS = (1e-4, 1e-2, 1e-1)


def _check_one_guarantee(**given: bool) -> None:
    """Exit with status 2 unless exactly one guarantee's options are given."""
    named = [name for name, present in given.items() if present]
    if len(named) != 1:
        fail(
            "give exactly one of --epsilon with --delta, --mu, --rho, --noise-multiplier "
            f"with --sample-rate and --steps, or --ledger, got {named or 'none'}"
        )


def explain_curve(
    *,
    epsilon: float | None,
    delta: float | None,
    mu: float | None,
    rho: float | None,
    noise_multiplier: float | None,
    sample_rate: float | None,
    steps: int | None,
) -> TradeoffCurve:
    """The trade-off curve of the one guarantee the options describe (a ledger's:
    :func:`ledger_curve`)."""
    from gaussdp.privacy.tradeoff import TradeoffCurve

    _check_one_guarantee(
        **{
            "--epsilon/--delta": epsilon is not None or delta is not None,
            "--mu": mu is not None,
            "--rho": rho is not None,
            "--noise-multiplier/--sample-rate/--steps": any(
                v is not None for v in (noise_multiplier, sample_rate, steps)
            ),
        }
    )
    if mu is not None:
        return TradeoffCurve.from_gdp(mu)
    if rho is not None:
        return TradeoffCurve.from_rho(rho)
    if epsilon is not None or delta is not None:
        if epsilon is None or delta is None:
            fail("give both --epsilon and --delta")
        return TradeoffCurve.from_epsilon_delta(epsilon, delta)
    if noise_multiplier is None or sample_rate is None or steps is None:
        fail("a DP-SGD run needs --noise-multiplier, --sample-rate and --steps")
    return TradeoffCurve.from_dpsgd(noise_multiplier, sample_rate, steps)


def ledger_curve(path: Path) -> tuple[LedgerSummary, TradeoffCurve]:
    """A ledger's summary and the trade-off curve of its whole history.

    The curve comes from the ledger's own accountant (every entry, reserved ones
    included: they count), through :meth:`TradeoffCurve.from_accountant`. An empty
    ledger has spent nothing: its curve is f(α) = 1 − α (no test beats guessing).
    """
    from gaussdp.cli.release import open_ledger
    from gaussdp.privacy.tradeoff import TradeoffCurve

    book = open_ledger(path)
    summary = book.summary()
    if not summary.rows:
        # (0, 0)-DP: f(α) = 1 − α, no test does better than guessing.
        return summary, replace(
            TradeoffCurve.from_epsilon_delta(0.0, 0.0), description="nothing spent"
        )
    curve = TradeoffCurve.from_accountant(book.accountant())
    unit = summary.symbol
    at = f" at δ = {ceil_text(summary.delta, 3)}" if summary.unit == "epsilon" else ""
    entries = f"{len(summary.rows)} {'entry' if len(summary.rows) == 1 else 'entries'}"
    description = f"ledger {path}: {entries}, {unit} ≤ {ceil_text(summary.spent, 4)}{at}"
    return summary, replace(curve, description=description)


def register(app: typer.Typer) -> None:
    """Add ``explain`` to ``app``."""

    @app.command()
    @handle_errors()
    def explain(
        epsilon: Annotated[float | None, typer.Option("--epsilon", "-e", help="ε ≥ 0.")] = None,
        delta: Annotated[float | None, typer.Option("--delta", "-d", help="δ in [0, 1].")] = None,
        mu: Annotated[float | None, typer.Option(help="μ of μ-GDP.")] = None,
        rho: Annotated[float | None, typer.Option(help="ρ of ρ-zCDP.")] = None,
        noise_multiplier: Annotated[
            float | None, typer.Option(help="DP-SGD noise multiplier σ/C.")
        ] = None,
        sample_rate: Annotated[
            float | None, typer.Option(help="DP-SGD Poisson sampling rate q.")
        ] = None,
        steps: Annotated[int | None, typer.Option(help="DP-SGD number of steps.")] = None,
        ledger: Annotated[
            Path | None,
            typer.Option(help="A budget ledger: explain the total spend of its entries."),
        ] = None,
        fpr: Annotated[
            float, typer.Option(help="False-positive rate at which to read the bound.")
        ] = 1e-3,
        json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    ) -> None:
        """What an attacker can learn: the membership-inference bound TPR ≤ 1 − f(FPR),
        the maximal advantage and the equal-error point of a guarantee (DRS f-DP).

        With --ledger DB: every entry with its cost alone, the composed total (certified
        upper and lower bound) and what the whole history means for an attacker.

        Examples: gaussdp explain --epsilon 1 --delta 1e-6;
        gaussdp explain --ledger budget.db
        """
        from gaussdp.privacy.tradeoff import explain as explain_guarantee

        summary: LedgerSummary | None = None
        others = (epsilon, delta, mu, rho, noise_multiplier, sample_rate, steps)
        if ledger is not None:
            _check_one_guarantee(
                **{"--ledger": True, "another guarantee": any(v is not None for v in others)}
            )
            summary, curve = ledger_curve(ledger)
        else:
            curve = explain_curve(
                epsilon=epsilon,
                delta=delta,
                mu=mu,
                rho=rho,
                noise_multiplier=noise_multiplier,
                sample_rate=sample_rate,
                steps=steps,
            )
        result = explain_guarantee(curve, fpr)
        readings = [(f, float(curve.max_tpr(f))) for f in sorted({*_READINGS, result.fpr})]
        if json:
            payload = result.as_dict()
            payload["max_tpr_at"] = {f"{f:g}": t for f, t in readings}
            payload["text"] = result.text()
            if summary is not None:
                from gaussdp.cli.release import ledger_json

                payload["ledger"] = ledger_json(summary)
            typer.echo(jsonlib.dumps(payload, indent=2, allow_nan=False))
            return
        if summary is not None and ledger is not None:
            from gaussdp.cli.release import ledger_table

            screen = console()
            screen.print(ledger_table(f"What ledger {ledger} spent", summary, screen.width))
        rows: list[tuple[str, str, object]] = [("guarantee", "guarantee", result.guarantee)]
        rows += [(f"max TPR at FPR = {f:g}", f"max_tpr_{f:g}", t) for f, t in readings]
        rows += [
            ("max advantage TPR − FPR", "advantage", result.advantage),
            ("equal-error point", "equal_error_rate", result.equal_error_rate),
        ]
        emit("What an attacker can learn", rows, as_json=False)
        console().print(
            f"At FPR = {result.fpr:g} no attack exceeds TPR = {ceil_text(result.max_tpr, 4)}.",
            highlight=False,
        )
        if summary is not None:
            console().print(result.text(), highlight=False)
