"""gaussdp.plot: the figures render, and their tables hold the papers' numbers.

CKS Figure 4 numbers are from §4 of the paper (k = 100, variance 50²): discrete
Laplace (1, 206e-7)-DP and (2.83, 0)-DP, discrete Gaussian (1, ≈1e-7)-DP, and 69 %
more variance for the discrete Laplace at (1, 1e-6), k = 100. The deviations of the
exact computation are explained in docs/audit.md.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

pytest.importorskip("matplotlib")

from gaussdp import plot
from gaussdp.accounting import PLDAccountant, compare_discrete_mechanisms
from gaussdp.accounting.compare import discrete_laplace_scale
from gaussdp.cli import app
from gaussdp.mechanisms import DiscreteLaplace, Gaussian
from gaussdp.privacy import gdp_tradeoff
from gaussdp.privacy.tradeoff import TradeoffCurve

PNG = b"\x89PNG\r\n\x1a\n"


def _saved(fig: object, tmp_path: object, name: str) -> bytes:
    path = tmp_path / name  # type: ignore[operator]
    fig.savefig(path)  # type: ignore[attr-defined]
    data: bytes = path.read_bytes()
    return data


@pytest.fixture(scope="module")
def fig4() -> tuple[object, pd.DataFrame]:
    return plot.cks_fig4(counts=(1, 10, 100))


def test_cks_fig4_left_matches_the_paper(fig4: tuple[object, pd.DataFrame]) -> None:
    _, table = fig4
    left = table[table.panel == "left"]
    at1 = left[np.isclose(left.epsilon, 1.0)].iloc[0]
    assert at1.dl_exact == pytest.approx(206e-7, rel=0.01)  # paper: (1, 206e-7)
    assert at1.dg_zcdp == pytest.approx(1e-7, rel=0.2)  # paper's method: ≈1e-7
    assert at1.dg_exact == pytest.approx(1.75e-8, rel=0.01)  # exact: 5.7x smaller
    assert at1.dg_exact_lower <= at1.dg_exact
    # Pure DP: k/t = 2.83 (paper); δ = 0 beyond it and positive just below.
    pure = 100 / discrete_laplace_scale(2500.0)
    assert round(pure, 2) == 2.83
    assert plot.discrete_laplace_composed_delta(100, discrete_laplace_scale(2500.0), 2.84) == 0
    assert plot.discrete_laplace_composed_delta(100, discrete_laplace_scale(2500.0), 2.8) > 0


def test_cks_fig4_right_matches_the_paper(
    fig4: tuple[object, pd.DataFrame], tmp_path: object
) -> None:
    fig, table = fig4
    assert _saved(fig, tmp_path, "fig4.png").startswith(PNG)
    right = table[table.panel == "right"].set_index("k")
    assert right.loc[100, "ratio_zcdp"] == pytest.approx(1.69, abs=0.01)  # paper: 69 % more
    assert right.loc[100, "ratio_exact"] == pytest.approx(1.94, abs=0.01)  # exact: 94 %
    # Paper: the discrete Laplace needs less variance for k <= 10 (with its zCDP method).
    assert right.loc[1, "ratio_exact"] < 1
    assert right.loc[10, "ratio_zcdp"] < 1
    assert np.all(right.var_dg_exact <= right.var_dg_zcdp)  # exact never needs more


def test_discrete_laplace_closed_form_agrees_with_the_pld() -> None:
    t = discrete_laplace_scale(2500.0)
    pld = PLDAccountant().compose(DiscreteLaplace(t), 100)
    for eps in (0.5, 1.0, 2.0):
        exact = plot.discrete_laplace_composed_delta(100, t, eps)
        bounds = pld.delta(eps)
        assert bounds.lower * (1 - 1e-9) <= exact <= bounds.upper * (1 + 1e-9)
    c = compare_discrete_mechanisms(100, 2500.0, 1.0, 1e-6)
    assert plot.discrete_laplace_composed_delta(100, t, 1.0) == pytest.approx(
        c.delta_discrete_laplace.upper, rel=1e-5
    )


def test_cks_fig1_bounds_are_ordered(tmp_path: object) -> None:
    fig, table = plot.cks_fig1()
    assert _saved(fig, tmp_path, "fig1.png").startswith(PNG)
    for _, frame in table.groupby("sigma2"):
        positive = frame[frame.discrete > 1e-300]
        assert np.all(positive.analytic_bound >= positive.discrete * (1 - 1e-9))
        assert np.all(positive.zcdp_cks >= positive.discrete * (1 - 1e-9))
        assert np.all(frame.zcdp_standard >= frame.zcdp_cks * (1 - 1e-9))
    # σ² = 100: discrete and continuous nearly identical (CKS §2; measured within 1.2 %).
    big = table[(table.sigma2 == 100) & (table.epsilon <= 0.5)]
    np.testing.assert_allclose(big.discrete, big.continuous, rtol=2e-2)


def test_cks_fig2_rounded_tail_dominates_discrete(tmp_path: object) -> None:
    fig, table = plot.cks_fig2(2.0)
    assert np.all(table.rounded >= table.discrete)  # CKS §3
    assert table.discrete.iloc[0] == pytest.approx((1 - 1 / _dg_norm(2.0)) / 2)
    assert _saved(fig, tmp_path, "fig2.png").startswith(PNG)


def _dg_norm(sigma2: float) -> float:
    # Σ_y e^{−y²/(2σ²)}, summed directly (P[X > 0] = (1 − p(0))/2 = (1 − 1/Z)/2).
    return sum(math.exp(-(y * y) / (2 * sigma2)) for y in range(-60, 61))


def test_tradeoff_figure_table_and_render(tmp_path: object) -> None:
    curve = TradeoffCurve.from_epsilon_delta(1.0, 1e-6)
    fig, table = plot.tradeoff_figure([curve])
    for mu in plot.DRS_MUS:
        np.testing.assert_allclose(table[f"G_{mu:g}"], gdp_tradeoff(mu, table.alpha.to_numpy()))
    np.testing.assert_allclose(table[curve.description], curve(table.alpha.to_numpy()))
    assert _saved(fig, tmp_path, "t.png").startswith(PNG)
    fig_log, _ = plot.tradeoff_figure([curve], log=True)
    assert _saved(fig_log, tmp_path, "t.svg").startswith(b"<?xml")


def test_profile_and_sigma_figures() -> None:
    _, profile = plot.privacy_profile_figure(Gaussian(sigma=2.0), 4, epsilons=[0.0, 1.0, 3.0])
    assert np.all(profile.pld_lower <= profile.gdp_exact * (1 + 1e-9))
    assert np.all(profile.gdp_exact <= profile.pld_upper)
    assert np.all(profile.pld_upper <= profile.rdp)
    assert np.all(profile.zcdp_cks <= profile.zcdp_standard)
    _, sigma = plot.sigma_epsilon_figure(1e-5, epsilons=[0.5, 1.0, 4.0])
    assert np.all(sigma.analytic <= sigma.zcdp)
    assert sigma.analytic.iloc[0] <= sigma.classic.iloc[0]
    assert math.isnan(sigma.classic.iloc[2])  # classic is not valid for ε >= 1


def test_cli_plot_writes_figure_and_table(tmp_path: object) -> None:
    runner = CliRunner()
    out, csv = tmp_path / "f.png", tmp_path / "f.csv"  # type: ignore[operator]
    result = runner.invoke(app, ["plot", "cks-fig2", "--out", str(out), "--table", str(csv)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(PNG)
    assert list(pd.read_csv(csv).columns) == ["x", "discrete", "continuous", "rounded"]
    result = runner.invoke(app, ["plot", "tradeoff", "--mu", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["plot", "tradeoff", "--epsilon", "1", "--out", str(out)])
    assert result.exit_code == 2


def _exact_discrete_delta(sigma2: float, epsilons: list[float]) -> list[object]:
    """δ(ε) of N_Z(0, σ²), sensitivity 1, by brute force: Σ_y max(0, p(y) − e^ε p(y − 1)).

    40-digit mpmath over −ε_max σ² − 40σ − 10 ≤ y ≤ 0 (the terms with y ≥ 1 are 0 as
    p(y) < p(y − 1) there; the dropped ones are below e^{−800} of the kept ones),
    independent of CKS Thm 7's closed form.
    """
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(40):
        s2 = mpmath.mpf(sigma2)
        top = math.ceil(max(epsilons) * sigma2 + 40 * math.sqrt(sigma2) + 10)
        g = {y: mpmath.exp(-(mpmath.mpf(y) ** 2) / (2 * s2)) for y in range(-top - 1, top + 1)}
        z = mpmath.fsum(g.values())
        out = []
        for eps in epsilons:
            e = mpmath.exp(mpmath.mpf(eps))
            out.append(mpmath.fsum(max(0, g[y] - e * g[y - 1]) for y in range(-top, 1)) / z)
        return out


def test_cks_analytic_delta_is_an_upper_bound_on_the_exact_delta() -> None:
    # Regression: the subtracted tail started at ⌊εσ² + ½⌋ instead of ⌊εσ² + ½⌋ + 1,
    # so the "upper bound" was below the exact δ (σ² = 0.25, ε = 0: 0.699 < 0.787;
    # σ² = 2, ε = 2.7: negative).
    mpmath = pytest.importorskip("mpmath")
    epsilons = [float(e) for e in np.linspace(0.0, 10.0, 26)] + [0.01, 0.15, 1 / 3, 2.7, 3.3]
    for sigma2 in (0.25, 0.3, 0.5, 1.0, 2.0, 3.0, 10 / 3, 5.0, 10.0, 50.0, 100.0):
        exact = _exact_discrete_delta(sigma2, epsilons)
        for eps, ex in zip(epsilons, exact, strict=True):
            bound = plot.cks_analytic_delta(sigma2, eps)
            assert 0.0 < bound <= 1.0
            assert mpmath.mpf(bound) >= ex, (sigma2, eps, bound, ex)
    # Not vacuous where δ is large (loose for large ε: the two tails are 2 steps apart).
    for sigma2, eps in ((0.25, 0.0), (100.0, 0.1)):
        (ex,) = _exact_discrete_delta(sigma2, [eps])
        assert plot.cks_analytic_delta(sigma2, eps) <= 5 * float(ex)
