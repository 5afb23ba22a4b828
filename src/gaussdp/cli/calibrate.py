"""``gaussdp calibrate`` and ``gaussdp convert``: noise for a target, and one mechanism's views."""

from __future__ import annotations

import math
from typing import Annotated

import typer

from gaussdp.cli._output import Shown, emit, fail, handle_errors
from gaussdp.errors import invalid

__all__ = ["register"]

EpsilonOption = Annotated[float, typer.Option("--epsilon", "-e", help="Target ε ≥ 0.")]
DeltaOption = Annotated[float, typer.Option("--delta", "-d", help="Target δ in (0, 1).")]
SensitivityOption = Annotated[
    float, typer.Option("--sensitivity", "-s", help="L2 sensitivity of the query (> 0).")
]
JsonOption = Annotated[
    bool,
    typer.Option("--json", help="Print one JSON object (numbers or null) instead of a table."),
]


def calibrate_rows(
    epsilon: float, delta: float, sensitivity: float
) -> list[tuple[str, str, object]]:
    """The rows of ``gaussdp calibrate``: every calibration and view for one (ε, δ) target."""
    from gaussdp.mechanisms import DiscreteGaussian, Gaussian
    from gaussdp.privacy import (
        classic_gaussian_sigma,
        equal_error_rate,
        mia_advantage,
        zcdp_epsilon,
    )

    gaussian = Gaussian.calibrate(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
    if math.isinf(gaussian.rho):
        # ρ = μ²/2 overflows a float only for ε near the largest float: name the user's
        # option rather than let the zCDP rows refuse an ρ the user never gave.
        fail(
            invalid(
                "epsilon", "small enough that ρ = μ²/2 is a finite float (ε ≤ 1e307 is)", epsilon
            )
        )
    classic: object
    classic_ratio: object
    try:
        classic_sigma = classic_gaussian_sigma(epsilon, delta, sensitivity)
        classic, classic_ratio = classic_sigma, classic_sigma / gaussian.sigma
    except ValueError:
        classic, classic_ratio = Shown("not valid for ε ≥ 1 (the formula needs ε < 1)", None), None
    rows: list[tuple[str, str, object]] = [
        ("target ε", "epsilon", epsilon),
        ("target δ", "delta", delta),
        ("L2 sensitivity Δ", "sensitivity", sensitivity),
        ("analytic Gaussian σ (Balle & Wang 2018)", "sigma_analytic", gaussian.sigma),
        ("classic Gaussian σ (Dwork & Roth Thm A.1)", "sigma_classic", classic),
        ("classic σ / analytic σ", "classic_over_analytic", classic_ratio),
    ]
    if float(sensitivity).is_integer():
        discrete = DiscreteGaussian.calibrate(
            epsilon=epsilon, delta=delta, sensitivity=int(sensitivity)
        )
        sigma2 = discrete.sigma2
        rows += [
            (
                "discrete Gaussian σ² (CKS Thm 7, exact)",
                "sigma2_discrete",
                Shown(str(sigma2), float(sigma2)),
            ),
            ("σ² numerator", "sigma2_discrete_numerator", sigma2.numerator),
            ("σ² denominator", "sigma2_discrete_denominator", sigma2.denominator),
        ]
    else:
        rows.append(
            ("discrete Gaussian σ²", "sigma2_discrete", Shown("needs an integer sensitivity", None))
        )
    rows += [
        ("μ (GDP)", "mu", gaussian.mu),
        ("ρ (zCDP)", "rho", gaussian.rho),
        ("ε at δ, exact (DRS Cor 2.13)", "epsilon_exact", gaussian.epsilon(delta)),
        ("ε at δ via zCDP (CKS Cor 13)", "epsilon_zcdp_cks", zcdp_epsilon(gaussian.rho, delta)),
        (
            "ε at δ via zCDP (standard)",
            "epsilon_zcdp_standard",
            zcdp_epsilon(gaussian.rho, delta, method="standard"),
        ),
        ("equal error rate Φ(−μ/2)", "equal_error_rate", equal_error_rate(gaussian.mu)),
        (
            "membership-inference advantage 2Φ(μ/2) − 1",
            "mia_advantage",
            mia_advantage(gaussian.mu),
        ),
    ]
    return rows


def convert_rows(
    *,
    sigma: float | None,
    mu: float | None,
    rho: float | None,
    epsilon: float | None,
    delta: float | None,
    sensitivity: float,
) -> list[tuple[str, str, object]]:
    """The rows of ``gaussdp convert``: all views of the Gaussian mechanism given one of them."""
    from gaussdp.mechanisms import Gaussian
    from gaussdp.privacy import equal_error_rate, gdp_mu, mia_advantage

    given = {"--sigma": sigma, "--mu": mu, "--rho": rho}
    named = [name for name, value in given.items() if value is not None]
    if len(named) > 1:
        fail(f"give one of --sigma, --mu, --rho (or --epsilon with --delta), got {named}")
    if sigma is not None:
        gaussian = Gaussian(sigma=sigma, sensitivity=sensitivity)
    elif mu is not None:
        gaussian = Gaussian.from_mu(mu, sensitivity)
    elif rho is not None:
        gaussian = Gaussian.from_rho(rho, sensitivity)
    elif epsilon is not None and delta is not None:
        gaussian = Gaussian.from_mu(gdp_mu(epsilon, delta), sensitivity)
    else:
        fail("give one of --sigma, --mu, --rho, or both --epsilon and --delta")
    rows: list[tuple[str, str, object]] = [
        ("L2 sensitivity Δ", "sensitivity", sensitivity),
        ("σ", "sigma", gaussian.sigma),
        ("μ (GDP)", "mu", gaussian.mu),
        ("ρ (zCDP)", "rho", gaussian.rho),
    ]
    if delta is not None:
        rows.append(("ε at δ, exact (DRS Cor 2.13)", "epsilon", gaussian.epsilon(delta)))
        rows.append(("δ", "delta", delta))
    if epsilon is not None and delta is None:
        rows.append(("δ at ε, exact (DRS Cor 2.13)", "delta", gaussian.delta(epsilon)))
        rows.append(("ε", "epsilon", epsilon))
    rows += [
        ("equal error rate Φ(−μ/2)", "equal_error_rate", equal_error_rate(gaussian.mu)),
        (
            "membership-inference advantage 2Φ(μ/2) − 1",
            "mia_advantage",
            mia_advantage(gaussian.mu),
        ),
    ]
    return rows


def register(app: typer.Typer) -> None:
    """Add ``calibrate`` and ``convert`` to ``app``."""

    @app.command()
    @handle_errors()
    def calibrate(
        epsilon: EpsilonOption,
        delta: DeltaOption,
        sensitivity: SensitivityOption = 1.0,
        json: JsonOption = False,
    ) -> None:
        """Noise for an (ε, δ) target: analytic and classic Gaussian σ, discrete Gaussian σ²,
        and what the result means (μ, ρ, equal error rate, membership-inference advantage).

        Example: gaussdp calibrate --epsilon 1 --delta 1e-6
        """
        rows = calibrate_rows(epsilon, delta, sensitivity)
        emit(f"Gaussian mechanism for ({epsilon:g}, {delta:g})-DP", rows, as_json=json)

    @app.command()
    @handle_errors()
    def convert(
        sigma: Annotated[float | None, typer.Option(help="Noise standard deviation σ.")] = None,
        mu: Annotated[float | None, typer.Option(help="μ of μ-GDP.")] = None,
        rho: Annotated[float | None, typer.Option(help="ρ of ρ-zCDP.")] = None,
        epsilon: Annotated[
            float | None,
            typer.Option(
                "--epsilon", "-e", help="ε: an input with --delta, else where to report δ."
            ),
        ] = None,
        delta: Annotated[
            float | None,
            typer.Option(
                "--delta", "-d", help="δ: an input with --epsilon, else where to report ε."
            ),
        ] = None,
        sensitivity: SensitivityOption = 1.0,
        json: JsonOption = False,
    ) -> None:
        """Convert between the σ, μ-GDP, ρ-zCDP and (ε, δ) views of one Gaussian mechanism.

        Give one of --sigma, --mu, --rho, or --epsilon with --delta.

        Example: gaussdp convert --mu 1 --delta 1e-5
        """
        rows = convert_rows(
            sigma=sigma, mu=mu, rho=rho, epsilon=epsilon, delta=delta, sensitivity=sensitivity
        )
        emit("Views of one Gaussian mechanism", rows, as_json=json)
