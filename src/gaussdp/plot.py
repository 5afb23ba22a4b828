r"""Figures of gaussdp's privacy mathematics (the optional ``plot`` extra, matplotlib).

Each function returns ``(figure, table)``: a :class:`matplotlib.figure.Figure`
(built without pyplot, so no global state and no display is needed) and a
:class:`pandas.DataFrame` holding every number drawn. Save with
``figure.savefig("f.png")``; the ``gaussdp plot ...`` commands do both.

* :func:`tradeoff_figure`: trade-off curves with the DRS reading (G_μ for
  μ = 0.5, 1, 3, 6 as in DRS Fig. 3), and any release's curve beside them.
* :func:`privacy_profile_figure`: δ(ε) of one composition by the PLD (both bounds),
  RDP and zCDP accountants side by side.
* :func:`sigma_epsilon_figure`: noise σ against ε at a fixed δ, per calibration.
* :func:`cks_fig1`, :func:`cks_fig2`, :func:`cks_fig4`: Canonne–Kamath–Steinke
  Figures 1, 2 and 4 from gaussdp's own exact computations. Where the paper used a
  bound, the table has the paper's method too (see ``docs/audit.md``).

``import gaussdp`` does not import this module; importing it imports matplotlib
and raises :class:`~gaussdp.errors.MissingExtraError` without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pandas as pd

try:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
except ImportError:  # pragma: no cover - exercised only without the extra
    from gaussdp.errors import MissingExtraError

    raise MissingExtraError("gaussdp.plot", "plot") from None

from scipy.special import gammaln, log_ndtr, logsumexp, ndtr

from gaussdp._search import smallest_passing
from gaussdp._validation import check_count, check_delta, check_epsilon, check_int, check_positive
from gaussdp.accounting import (
    PLDAccountant,
    RDPAccountant,
    Subsampled,
    calibrate_noise,
)
from gaussdp.accounting.compare import discrete_laplace_scale
from gaussdp.errors import invalid
from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian
from gaussdp.privacy import (
    DiscreteGaussianDistribution,
    DiscreteLaplaceDistribution,
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    gdp_delta,
    zcdp_delta,
    zcdp_rho,
)
from gaussdp.privacy.tradeoff import TradeoffCurve

__all__ = [
    "DRS_MUS",
    "cks_analytic_delta",
    "cks_fig1",
    "cks_fig2",
    "cks_fig4",
    "discrete_laplace_composed_delta",
    "privacy_profile_figure",
    "sigma_epsilon_figure",
    "tradeoff_figure",
]

#: The μ of DRS Fig. 3 and their reading (DRS §2.2; REFERENCE.md §1).
DRS_MUS: dict[float, str] = {
    0.5: "very private",
    1.0: "reasonably private",
    3.0: "basically non-private",
    6.0: "no privacy",
}

_WIDTH = 6.4
_HEIGHT = 4.8


def _figure(panels: int = 1) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=(_WIDTH * panels, _HEIGHT), layout="constrained")
    axes = [fig.add_subplot(1, panels, i + 1) for i in range(panels)]
    return fig, axes


def tradeoff_figure(
    curves: Sequence[TradeoffCurve] = (),
    *,
    mus: Sequence[float] = tuple(DRS_MUS),
    log: bool = False,
    points: int = 401,
) -> tuple[Figure, pd.DataFrame]:
    r"""Trade-off curves: G_μ for ``mus`` with the DRS reading, and ``curves`` beside them.

    Parameters
    ----------
    curves : sequence of TradeoffCurve
        Curves of releases to draw (their certified ``lower``), e.g.
        ``TradeoffCurve.from_accountant(...)``.
    mus : sequence of float
        The μ-GDP reference curves, DRS Fig. 3 by default.
    log : bool, default False
        Log-log axes in the attacker's view (TPR = 1 − β against FPR = α), which
        shows the low-FPR regime that matters for membership inference.
    points : int, default 401
        Number of α values.

    Returns
    -------
    (Figure, DataFrame)
        The table has ``alpha`` and one column per curve (type II error β).
    """
    points = check_int("points", points, minimum=3)
    alpha = np.geomspace(1e-6, 1.0, points) if log else np.linspace(0.0, 1.0, points)
    table = pd.DataFrame({"alpha": alpha})
    fig, (ax,) = _figure()
    for mu in mus:
        curve = TradeoffCurve.from_gdp(mu)
        label = f"G_{mu:g}" + (f" ({DRS_MUS[mu]})" if mu in DRS_MUS else "")
        table[f"G_{mu:g}"] = curve(alpha)
        _draw(ax, alpha, table[f"G_{mu:g}"].to_numpy(), label, log, style=":")
    for curve in curves:
        if not isinstance(curve, TradeoffCurve):
            raise TypeError(invalid("curves", "a sequence of TradeoffCurve", curve))
        table[curve.description] = curve(alpha)
        _draw(ax, alpha, table[curve.description].to_numpy(), curve.description, log, "-")
    if log:
        ax.plot(alpha, alpha, color="grey", lw=0.8, label="random guess")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("false-positive rate α")
        ax.set_ylabel("largest true-positive rate 1 − f(α)")
        ax.set_ylim(1e-6, 1.0)
    else:
        ax.plot([0, 1], [1, 0], color="grey", lw=0.8, label="perfect privacy")
        ax.set_xlabel("type I error α (false positives)")
        ax.set_ylabel("least type II error f(α) (false negatives)")
        ax.set_aspect("equal")
    ax.set_title("Trade-off functions: how hard is telling neighbours apart?")
    ax.legend(fontsize="small")
    return fig, table


def _draw(
    ax: Axes,
    alpha: npt.NDArray[np.float64],
    beta: npt.NDArray[np.float64],
    label: str,
    log: bool,
    style: str,
) -> None:
    y = 1.0 - beta if log else beta
    ax.plot(alpha, y, style, label=label)


def privacy_profile_figure(
    mechanism: Gaussian | Subsampled,
    count: int,
    *,
    epsilons: Sequence[float] | None = None,
) -> tuple[Figure, pd.DataFrame]:
    r"""δ(ε) of ``count`` runs of ``mechanism`` by each accountant, side by side.

    PLD upper (certified) and lower bounds, the RDP accountant, and for a plain
    Gaussian the exact μ-GDP profile (DRS Cor 2.13) and the zCDP conversions
    (CKS Cor 13 and the standard bound).
    """
    count = check_count("count", count)
    if not isinstance(mechanism, Gaussian | Subsampled):
        raise TypeError(invalid("mechanism", "a Gaussian or a Subsampled Gaussian", mechanism))
    eps = np.linspace(0.0, 8.0, 81) if epsilons is None else np.asarray(epsilons, dtype=float)
    pld = PLDAccountant(exact_gaussian=False).compose(mechanism, count)
    rdp = RDPAccountant().compose(mechanism, count)
    bounds = [pld.delta(float(e)) for e in eps]
    table = pd.DataFrame(
        {
            "epsilon": eps,
            "pld_upper": [b.upper for b in bounds],
            "pld_lower": [b.lower for b in bounds],
            "rdp": [rdp.delta(float(e)).upper for e in eps],
        }
    )
    if isinstance(mechanism, Gaussian):
        mu = mechanism.mu * math.sqrt(count)  # DRS Cor 3.3
        rho = mechanism.rho * count
        table["gdp_exact"] = [gdp_delta(mu, float(e)) for e in eps]
        table["zcdp_cks"] = [zcdp_delta(rho, float(e)) for e in eps]
        table["zcdp_standard"] = [zcdp_delta(rho, float(e), method="standard") for e in eps]
    fig, (ax,) = _figure()
    labels = {
        "pld_upper": "PLD upper (certified)",
        "pld_lower": "PLD lower",
        "rdp": "RDP",
        "gdp_exact": "exact μ-GDP (DRS Cor 2.13)",
        "zcdp_cks": "zCDP, CKS Cor 13",
        "zcdp_standard": "zCDP, standard",
    }
    for column, label in labels.items():
        if column in table:
            ax.plot(eps, table[column].clip(lower=1e-300), label=label)
    ax.set_yscale("log")
    ax.set_ylim(1e-12, 1.0)
    ax.set_xlabel("ε")
    ax.set_ylabel("δ(ε)")
    ax.set_title(f"Privacy profile of {count} runs")
    ax.legend(fontsize="small")
    return fig, table


def sigma_epsilon_figure(
    delta: float = 1e-5, *, epsilons: Sequence[float] | None = None
) -> tuple[Figure, pd.DataFrame]:
    r"""Noise σ (sensitivity 1) needed for (ε, δ)-DP against ε, per calibration.

    Analytic Gaussian (Balle & Wang 2018, optimal), classic (Dwork & Roth Thm A.1,
    only for ε < 1), discrete Gaussian (CKS Thm 7, √σ²) and through zCDP
    (CKS Cor 13: σ = 1/√(2ρ)).
    """
    delta = check_delta("delta", delta)
    eps = np.geomspace(0.1, 10.0, 41) if epsilons is None else np.asarray(epsilons, dtype=float)
    rows = []
    for e in eps:
        e = float(e)
        rows.append(
            {
                "epsilon": e,
                "analytic": analytic_gaussian_sigma(e, delta),
                "classic": classic_gaussian_sigma(e, delta) if e < 1 else math.nan,
                "discrete": math.sqrt(DiscreteGaussianDistribution.calibrate(e, delta).sigma2),
                "zcdp": 1.0 / math.sqrt(2.0 * zcdp_rho(e, delta)),
            }
        )
    table = pd.DataFrame(rows)
    fig, (ax,) = _figure()
    for column, label in [
        ("analytic", "analytic Gaussian (Balle & Wang)"),
        ("classic", "classic (ε < 1 only)"),
        ("discrete", "discrete Gaussian (CKS Thm 7)"),
        ("zcdp", "via zCDP (CKS Cor 13)"),
    ]:
        ax.plot(eps, table[column], label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ε")
    ax.set_ylabel("σ (sensitivity 1)")
    ax.set_title(f"Noise for (ε, {delta:g})-DP")
    ax.legend(fontsize="small")
    return fig, table


# --------------------------------------------------------------------------------------
# CKS figures
# --------------------------------------------------------------------------------------
def cks_analytic_delta(sigma2: float, epsilon: float) -> float:
    r"""A certified upper bound on the discrete Gaussian's δ(ε), sensitivity 1 (CKS eq. (5)).

    Derivation (Y ~ N_Z(0, σ²), X ~ N(0, σ²), g(x) = e^{−x²/(2σ²)}, r = √(2πσ²),
    Z = Σ_y g(y) its normaliser). CKS Thm 7 with Δ = 1, and P[Y > u] = P[Y ≥ ⌊u⌋ + 1]
    for integer Y:

        δ = P[Y ≥ a] − e^ε P[Y ≥ b],   a = ⌊εσ² − ½⌋ + 1,  b = ⌊εσ² + ½⌋ + 1.

    CKS Fact 19: r ≤ Z ≤ 1 + r. For an integer m the series–integral comparison on
    the decreasing half of g gives

    * m ≥ 1: Σ_{y≥m} g(y) ≤ ∫_{m−1}^∞ g, so P[Y ≥ m] ≤ P[X ≥ m − 1] (using Z ≥ r);
    * m ≥ 0: Σ_{y≥m} g(y) ≥ ∫_m^∞ g, so P[Y ≥ m] ≥ c·P[X ≥ m] with
      c = r/(1 + r) = 1 − 1/(1 + √(2πσ²)) (using Z ≤ 1 + r);
    * m ≤ 0: by symmetry P[Y ≥ m] = 1 − P[Y ≥ 1 − m], and the first two bullets
      give P[Y ≥ m] ≥ 1 − P[X ≥ −m] = P[X ≥ m] ≥ c·P[X ≥ m] and
      P[Y ≥ m] ≤ 1 − c·P[X ≥ 1 − m].

    So the lower bound on a tail starts at m itself while the upper bound starts one
    step earlier, and

        δ ≤ P[X ≥ ⌊εσ² − ½⌋] − e^ε (1 − 1/(1 + √(2πσ²))) P[X ≥ ⌊εσ² + ½⌋ + 1]

    when a ≥ 1 (first term 1 − c·P[X ≥ 1 − a] when a ≤ 0). The subtracted tail
    starts at ⌊εσ² + ½⌋ + 1, one step beyond the first term's shift: a lower bound
    on P[Y ≥ b] needs P[X ≥ b], not P[X ≥ b − 1].

    Evaluation: ε·σ² and the floors are exact (rationals of the two floats); the
    normal tails' arguments are rounded outward and each tail is widened by a
    relative 10⁻¹⁰ (far above the ~10⁻¹⁵ error of ``log_ndtr``/``exp``), so the
    float result is still an upper bound. When the first term is below 10⁻³⁰⁰ the
    subtracted term is dropped and that term alone is returned (at least the
    smallest subnormal, as δ > 0). The result lies in (0, 1].
    """
    sigma2 = check_positive("sigma2", sigma2)
    epsilon = check_epsilon("epsilon", epsilon)
    slack = 1e-10
    t = Fraction(epsilon) * Fraction(sigma2)
    a = math.floor(t - Fraction(1, 2)) + 1
    b = math.floor(t + Fraction(1, 2)) + 1
    s = math.sqrt(sigma2)

    def up(x: float) -> float:
        return math.nextafter(x, math.inf)

    def down(x: float) -> float:
        return math.nextafter(x, -math.inf)

    # log c, c = r/(1 + r) = 1/(1 + 1/r), rounded down by the slack below.
    log_c = -math.log1p(1.0 / math.sqrt(2.0 * math.pi * sigma2))
    if a >= 1:
        log_first = float(log_ndtr(-down(down((a - 1) / s)))) + slack
        if log_first < -690.0:
            return max(up(math.exp(log_first)), math.ulp(0.0))
        first = math.exp(log_first)
    else:
        inner = math.exp(log_c + float(log_ndtr(-up(up((1 - a) / s)))) - slack)
        first = up(1.0 - inner)
    log_sub = epsilon + log_c + float(log_ndtr(-up(up(b / s)))) - slack
    subtracted = math.exp(log_sub) if log_sub < 709.0 else math.inf
    # first ≥ (true first term) > (true subtracted) ≥ subtracted, so the difference
    # is positive; one step up covers its rounding.
    return min(1.0, up(first - subtracted))


def cks_fig1(
    panels: Sequence[tuple[float, float]] = ((100.0, 1.0), (4.0, 5.0)),
) -> tuple[Figure, pd.DataFrame]:
    r"""CKS Figure 1: δ(ε) of the discrete Gaussian against its bounds, sensitivity 1.

    For each ``(σ², ε_max)`` panel: the optimal δ (CKS Thm 7, exact), the continuous
    Gaussian's (DRS Cor 2.13), the analytic bound (5) (:func:`cks_analytic_delta`),
    and the ρ = 1/(2σ²) zCDP bounds, standard and improved (CKS Cor 13).
    """
    frames = []
    fig, axes = _figure(len(panels))
    for ax, (sigma2, eps_max) in zip(axes, panels, strict=True):
        sigma2 = check_positive("sigma2", sigma2)
        eps = np.linspace(0.0, check_positive("eps_max", eps_max), 101)
        rho = 1.0 / (2.0 * sigma2)
        noise = DiscreteGaussianDistribution(Fraction(sigma2))
        frame = pd.DataFrame(
            {
                "sigma2": sigma2,
                "epsilon": eps,
                "discrete": [noise.delta(float(e)) for e in eps],
                "continuous": [gdp_delta(1.0 / math.sqrt(sigma2), float(e)) for e in eps],
                "analytic_bound": [cks_analytic_delta(sigma2, float(e)) for e in eps],
                "zcdp_standard": [zcdp_delta(rho, float(e), method="standard") for e in eps],
                "zcdp_cks": [zcdp_delta(rho, float(e)) for e in eps],
            }
        )
        frames.append(frame)
        for column, style, label in [
            ("discrete", "b-", "N_Z(0, σ²) discrete (CKS Thm 7)"),
            ("continuous", "r:", "N(0, σ²) continuous"),
            ("analytic_bound", "g--", "analytic upper bound (5)"),
            ("zcdp_standard", "m-", "zCDP upper bound (standard)"),
            ("zcdp_cks", "y-.", "zCDP upper bound (CKS Cor 13)"),
        ]:
            ax.plot(eps, frame[column].clip(lower=1e-300), style, label=label)
        ax.set_yscale("log")
        ax.set_ylim(1e-20, 1.0)
        ax.set_xlabel("ε")
        ax.set_ylabel("δ")
        ax.set_title(f"(ε, δ)-DP of the discrete Gaussian, σ² = {sigma2:g}")
        ax.legend(loc="lower left", fontsize="small")
    return fig, pd.concat(frames, ignore_index=True)


def cks_fig2(sigma2: float = 2.0) -> tuple[Figure, pd.DataFrame]:
    r"""CKS Figure 2: tails P[X > x] of the discrete, continuous and rounded Gaussian.

    Rounded: P[round(N(0, σ²)) > x] = P[N(0, σ²) > x + ½] for integer x. CKS §3
    states the rounded Gaussian's tail dominates the discrete Gaussian's.
    """
    sigma2 = check_positive("sigma2", sigma2)
    s = math.sqrt(sigma2)
    top = math.ceil(3 * s) + 1
    xs = np.arange(0, top)
    noise = DiscreteGaussianDistribution(Fraction(sigma2))
    table = pd.DataFrame(
        {
            "x": xs,
            "discrete": np.asarray(noise.sf(xs), dtype=float),
            "continuous": ndtr(-xs / s),
            "rounded": ndtr(-(xs + 0.5) / s),
        }
    )
    fig, (ax,) = _figure()
    ax.step(xs, table["discrete"], "b-", where="post", label=f"N_Z(0, {sigma2:g})")
    fine = np.linspace(0, top - 1, 400)
    ax.plot(fine, ndtr(-fine / s), "r:", label=f"N(0, {sigma2:g})")
    ax.step(xs, table["rounded"], "g--", where="post", label=f"round(N(0, {sigma2:g}))")
    ax.set_xlabel("x")
    ax.set_ylabel("P[X > x]")
    ax.set_title("Comparison of tail probabilities")
    ax.legend()
    return fig, table


def discrete_laplace_composed_delta(count: int, scale: float, epsilon: float) -> float:
    r"""Exact δ(ε) of ``count`` sensitivity-1 queries with discrete Laplace noise of ``scale`` t.

    For integer outputs the privacy loss of one query is exactly ±1/t (|y − 1| − |y|
    = ±1), +1/t with probability p = 1/(1 + e^{−1/t}) (CKS §4), so the composed
    loss is (2I − k)/t with I ~ Binomial(k, p) and δ(ε) = E[(1 − e^{ε − L})₊]
    (CKS Lemma 9) is a finite sum, evaluated in log space. This is the optimal
    composition of pure DP (Kairouz, Oh, Viswanath 2015) and is independent of the
    PLD accountant.
    """
    count = check_count("count", count)
    scale = check_positive("scale", scale)
    epsilon = check_epsilon("epsilon", epsilon)
    e0 = 1.0 / scale
    i = np.arange(count + 1)
    loss = (2 * i - count) * e0
    keep = loss > epsilon
    if not np.any(keep):
        return 0.0
    i, loss = i[keep], loss[keep]
    log_p = -np.logaddexp(0.0, -e0)  # ln p, p = 1/(1 + e^{−1/t})
    log_q = -np.logaddexp(0.0, e0)  # ln(1 − p)
    log_binom = gammaln(count + 1) - gammaln(i + 1) - gammaln(count - i + 1)
    log_terms = log_binom + i * log_p + (count - i) * log_q + np.log(-np.expm1(epsilon - loss))
    return float(np.exp(logsumexp(log_terms)))


def cks_fig4(
    count: int = 100,
    sigma: float = 50.0,
    *,
    epsilon: float = 1.0,
    delta: float = 1e-6,
    counts: Sequence[int] = (1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100),
    eps_max: float = 3.0,
) -> tuple[Figure, pd.DataFrame]:
    r"""CKS Figure 4: discrete Gaussian against discrete Laplace for counting queries.

    Left panel (``panel == "left"``): δ(ε) for ``count`` queries, each with noise
    variance ``sigma``²: the discrete Gaussian exactly (PLD upper bound, resolved down
    to ~1e-12) and by the zCDP conversion the paper used (CKS Cor 13 with σ² matched
    to the variance), the discrete Laplace exactly
    (:func:`discrete_laplace_composed_delta`). Right panel: the variance per query
    needed for (``epsilon``, ``delta``)-DP against the number of queries, exact
    (certified PLD calibration, 1e-3 relative) and the paper's zCDP method for the
    discrete Gaussian.
    """
    count = check_count("count", count)
    variance = check_positive("sigma", sigma) ** 2
    epsilon = check_epsilon("epsilon", epsilon)
    delta = check_delta("delta", delta)
    dl_scale = discrete_laplace_scale(variance)
    dg_sigma2 = _sigma2_for_variance(variance)
    dg_pld = PLDAccountant().compose(DiscreteGaussian(Fraction(dg_sigma2)), count)
    eps = np.linspace(0.0, check_positive("eps_max", eps_max), 61)
    rho_total = count / (2.0 * dg_sigma2)
    dg_bounds = [dg_pld.delta(float(e)) for e in eps]
    left = pd.DataFrame(
        {
            "panel": "left",
            "epsilon": eps,
            "dg_exact": [b.upper for b in dg_bounds],
            "dg_exact_lower": [b.lower for b in dg_bounds],
            "dg_zcdp": [zcdp_delta(rho_total, float(e)) for e in eps],
            "dl_exact": [discrete_laplace_composed_delta(count, dl_scale, float(e)) for e in eps],
        }
    )
    rows = []
    rho_target = zcdp_rho(epsilon, delta)
    for k in counts:
        k = check_int("counts", k, minimum=1)
        dg = calibrate_noise("discrete_gaussian", epsilon, delta, k)
        dl = calibrate_noise("discrete_laplace", epsilon, delta, k)
        if not isinstance(dg, DiscreteGaussian) or not isinstance(dl, DiscreteLaplace):
            raise TypeError("calibrate_noise returned an unexpected mechanism")  # pragma: no cover
        var_dg = DiscreteGaussianDistribution(dg.sigma2).var()
        var_dl = DiscreteLaplaceDistribution(dl.scale).var()
        # The paper's method: ρ-zCDP in total (CKS Cor 13), σ² = k/(2ρ) per query.
        var_zcdp = DiscreteGaussianDistribution(Fraction(k / (2.0 * rho_target))).var()
        rows.append(
            {
                "panel": "right",
                "k": k,
                "var_dg_exact": var_dg,
                "var_dl_exact": var_dl,
                "var_dg_zcdp": var_zcdp,
                "ratio_exact": var_dl / var_dg,
                "ratio_zcdp": var_dl / var_zcdp,
            }
        )
    right = pd.DataFrame(rows)
    fig, (ax_l, ax_r) = _figure(2)
    # Drawn where the PLD resolves δ (its lower bound within 2x): below ~1e-12 its
    # allowance dominates.
    resolved = (left["dg_exact_lower"] > 0.5 * left["dg_exact"]).to_numpy()
    ax_l.plot(
        eps[resolved], left["dg_exact"][resolved], "b-", label="discrete Gaussian (exact PLD)"
    )
    ax_l.plot(eps, left["dg_zcdp"], "b:", label="discrete Gaussian (zCDP, paper)")
    ax_l.plot(eps, left["dl_exact"].clip(lower=1e-300), "m--", label="discrete Laplace (exact)")
    ax_l.set_yscale("log")
    ax_l.set_ylim(1e-50, 1.0)
    ax_l.set_xlabel("ε")
    ax_l.set_ylabel("δ")
    ax_l.set_title(f"{count} queries, each with standard deviation {sigma:g}")
    ax_l.legend(loc="lower left", fontsize="small")
    ax_r.plot(right["k"], right["var_dg_exact"], "b-o", ms=3, label="discrete Gaussian (exact)")
    ax_r.plot(right["k"], right["var_dg_zcdp"], "b:", label="discrete Gaussian (zCDP, paper)")
    ax_r.plot(right["k"], right["var_dl_exact"], "m--o", ms=3, label="discrete Laplace (exact)")
    ax_r.set_xlabel("number of queries k")
    ax_r.set_ylabel("noise variance per query")
    ax_r.set_title(f"Variance for ({epsilon:g}, {delta:g})-DP")
    ax_r.legend(fontsize="small")
    return fig, pd.concat([left, right], ignore_index=True)


def _sigma2_for_variance(variance: float) -> float:
    """σ² whose discrete Gaussian has this variance (CKS Prop 21: slightly above it)."""
    return smallest_passing(
        lambda s2: DiscreteGaussianDistribution(Fraction(s2)).var() >= variance,
        variance,
        variance * 1.5 + 1.0,
    )
