"""Trade-off curves of every guarantee, against closed forms and a second method.

Independent answers: mpmath for G_μ (DRS Def 2.6), the closed form of the (ε, δ)
region (DRS Prop 2.4), DiscreteGaussian.tradeoff (a scalar Neyman–Pearson search
written separately), k Gaussians = one Gaussian with μ√k (DRS Cor 3.3), and the
PLD's own δ(ε) queries, which the curve must reproduce through DRS Prop 2.12.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

from gaussdp.accounting import (
    GDPAccountant,
    LossMasses,
    PartitionSelection,
    PLDAccountant,
    PrivacyLossDistribution,
    RDPAccountant,
    Subsampled,
)
from gaussdp.mechanisms import DiscreteGaussian, Gaussian
from gaussdp.privacy import gdp_tradeoff
from gaussdp.privacy.tradeoff import TradeoffCurve, explain, tradeoff_epsilon_delta

ALPHAS = np.concatenate([[0.0], np.geomspace(1e-8, 0.999, 60), [1.0]])


def _g_mp(mu: float, alpha: float) -> float:
    mp.mp.dps = 40  # restored after the test (conftest.py)
    # DRS Def 2.6: G_μ(α) = Φ(Φ⁻¹(1 − α) − μ), Φ⁻¹ by mpmath's erfinv
    z = mp.sqrt(2) * mp.erfinv(1 - 2 * mp.mpf(alpha))
    return float(mp.ncdf(z - mu))


def test_gdp_curve_known_answer_and_mpmath() -> None:
    curve = TradeoffCurve.from_gdp(1.0)
    assert round(curve(0.05), 4) == 0.7405  # REFERENCE.md §2, from DRS
    for a in (1e-6, 1e-3, 0.05, 0.5, 0.9):
        assert curve(a) == pytest.approx(_g_mp(1.0, a), rel=1e-12)
    assert curve.exact
    assert np.array_equal(curve.lower(ALPHAS), curve.upper(ALPHAS))


@pytest.mark.parametrize(("mu", "eer"), [(0.5, 0.401), (1.0, 0.309), (3.0, 0.067), (6.0, 0.00135)])
def test_equal_error_rate_is_phi_minus_mu_over_two(mu: float, eer: float) -> None:
    # Known answers of REFERENCE.md §2: Φ(−μ/2).
    got = TradeoffCurve.from_gdp(mu).equal_error_rate()
    assert got == pytest.approx(float(mp.ncdf(-mu / 2)), rel=1e-9)
    assert got == pytest.approx(eer, abs=5e-4 if mu < 6 else 5e-6)


def test_epsilon_delta_curve_closed_form() -> None:
    eps, delta = 1.0, 1e-6
    curve = TradeoffCurve.from_epsilon_delta(eps, delta)
    kink = (1 - delta) / (1 + math.e)
    # Left of the kink the steep side 1 − δ − e^ε α binds, right of it the flat side.
    assert curve(kink / 2) == pytest.approx(1 - delta - math.e * kink / 2, rel=1e-14)
    assert curve(0.9) == pytest.approx((1 - delta - 0.9) / math.e, rel=1e-14)
    assert curve(kink) == pytest.approx(kink, rel=1e-12)  # symmetric: f(kink) = kink
    assert curve(1.0) == 0.0
    assert tradeoff_epsilon_delta(eps, delta, 0.0) == 1 - delta
    # The advantage is 1 − 2·kink, attained at the kink.
    assert curve.advantage == pytest.approx(1 - 2 * kink, rel=1e-12)
    grid = np.linspace(0, 1, 100001)
    assert np.max(1 - grid - curve(grid)) == pytest.approx(curve.advantage, abs=1e-5)


def test_discrete_gaussian_curve_matches_scalar_search() -> None:
    curve = TradeoffCurve.from_discrete_gaussian("25/4", sensitivity=2)
    mech = DiscreteGaussian("25/4", sensitivity=2)
    for a in (1e-7, 1e-4, 0.013, 0.2, 0.5, 0.77, 0.999):
        assert curve(a) == pytest.approx(mech.tradeoff(a), abs=1e-15, rel=1e-12)
    # Advantage = total variation = δ(0) (CKS Thm 7 at ε = 0), ≥ the grid maximum.
    grid = np.linspace(0, 1, 20001)
    assert np.max(1 - grid - curve(grid)) <= curve.advantage + 1e-12
    assert curve.advantage == pytest.approx(mech.delta(0.0))


@pytest.mark.parametrize(("sigma", "k"), [(2.0, 4), (10.0, 100), (1.0, 1)])
def test_pld_curve_brackets_composed_gaussians(sigma: float, k: int) -> None:
    pld = PrivacyLossDistribution.from_gaussian(sigma).self_compose(k)
    curve = TradeoffCurve.from_pld(pld)
    exact = gdp_tradeoff(math.sqrt(k) / sigma, ALPHAS)  # DRS Cor 3.3: one Gaussian, μ√k
    low, high = curve.lower(ALPHAS), curve.upper(ALPHAS)
    assert np.all(low <= exact)  # certified side: never above the true trade-off
    assert np.all(exact <= high + 1e-15)
    assert np.max(high - low) < 1e-6  # and tight
    assert not curve.exact


def test_pld_curve_reproduces_the_pld_profile() -> None:
    # Subsampled Gaussian: the two neighbouring directions differ. Through DRS Prop 2.12,
    # sup_α (1 − f(α) − e^ε α) must give back max over directions of δ(ε).
    pld = PrivacyLossDistribution.from_subsampled_gaussian(0.8, 0.1).self_compose(20)
    curve = TradeoffCurve.from_pld(pld)
    alphas = np.unique(np.concatenate([np.geomspace(1e-12, 1, 40001), np.linspace(0, 1, 40001)]))
    f = curve.lower(alphas)
    for eps in (0.0, 0.5, 1.0, 2.0):
        from_curve = float(np.max(1 - f - math.exp(eps) * alphas))
        bounds = pld.delta(eps)
        # The curve takes the PLD's relative 1e-10 sum margin as absolute: ≤ 1e-10 more.
        assert from_curve <= bounds.upper + 1.1e-10
        assert from_curve >= bounds.lower - 1e-4 * max(bounds.lower, 1e-6)


def test_profile_curves_are_on_the_safe_side() -> None:
    mu = 1.0
    exact = gdp_tradeoff(mu, ALPHAS)
    rdp = RDPAccountant().compose(Gaussian.from_mu(mu))
    for curve in (TradeoffCurve.from_rho(mu**2 / 2), TradeoffCurve.from_accountant(rdp)):
        assert np.all(curve.lower(ALPHAS) <= exact + 1e-12)
        assert curve.advantage >= TradeoffCurve.from_gdp(mu).advantage
    # A single-point profile is f_{ε,δ} itself.
    one = TradeoffCurve.from_profile(lambda e: 1e-3, epsilons=[0.5])
    np.testing.assert_allclose(
        one.lower(ALPHAS), tradeoff_epsilon_delta(0.5, 1e-3, ALPHAS), rtol=1e-14
    )


def test_accountants_route_to_the_exact_curve() -> None:
    gdp = GDPAccountant().compose(Gaussian(sigma=2.0), count=4)
    pld = PLDAccountant().compose(Gaussian(sigma=2.0), count=4)
    exact = TradeoffCurve.from_accountant(gdp)
    assert exact.exact
    np.testing.assert_allclose(exact(ALPHAS), gdp_tradeoff(1.0, ALPHAS), rtol=1e-12)
    # The exact PLD accountant goes through its profile: safe side, close.
    profile = TradeoffCurve.from_accountant(pld)
    assert np.all(profile(ALPHAS) <= gdp_tradeoff(1.0, ALPHAS) + 1e-12)
    assert np.max(gdp_tradeoff(1.0, ALPHAS) - profile(ALPHAS)) < 2e-2


def test_dpsgd_curve_is_between_its_bounds_and_explained() -> None:
    curve = TradeoffCurve.from_dpsgd(1.1, 0.01, 200)
    assert np.all(curve.lower(ALPHAS) <= curve.upper(ALPHAS))
    acc = PLDAccountant().compose(Subsampled(Gaussian(sigma=1.1), sample_rate=0.01), count=200)
    assert curve.advantage == pytest.approx(acc.delta(0.0).upper)
    e = explain(curve, fpr=1e-3)
    assert e.max_tpr == pytest.approx(1 - curve(1e-3))
    assert 1e-3 < e.max_tpr < 1
    assert "DP-SGD" in e.text()


def test_explain_epsilon_delta_reads_the_curve() -> None:
    e = explain(TradeoffCurve.from_epsilon_delta(1.0, 1e-6), fpr=1e-3)
    # 1 − f(1e-3) = δ + e·1e-3 on the steep side.
    assert e.max_tpr == pytest.approx(1e-6 + math.e * 1e-3, rel=1e-12)
    assert set(e.as_dict()) == {"guarantee", "fpr", "max_tpr", "advantage", "equal_error_rate"}


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.1", True])
def test_bad_alpha_is_refused(bad: object) -> None:
    with pytest.raises((ValueError, TypeError), match="alpha must be"):
        TradeoffCurve.from_gdp(1.0)(bad)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="epsilon must be"):
        TradeoffCurve.from_epsilon_delta(-1.0, 1e-6)
    with pytest.raises(TypeError, match="pld must be"):
        TradeoffCurve.from_pld("pld")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fpr must be"):
        explain(TradeoffCurve.from_gdp(1.0), fpr=0.0)
    with pytest.raises(ValueError, match="epsilons must be"):
        TradeoffCurve.from_profile(lambda e: 0.0, epsilons=[-1.0])


def test_pld_loss_masses_accessor() -> None:
    # The public view of one discretised side: for N(0, σ²) vs N(1, σ²) the loss is
    # N(μ²/2, μ²) under P with μ = 1/σ, so its masses sum to 1 and their mean is μ²/2.
    pld = PrivacyLossDistribution.from_gaussian(2.0)
    for upper in (True, False):
        for remove in (True, False):
            side = pld.loss_masses(upper=upper, remove=remove)
            assert isinstance(side, LossMasses)
            assert side.upper is upper
            assert side.losses.shape == side.masses.shape
            assert float(side.masses.sum()) + side.inf_mass == pytest.approx(1.0, abs=1e-9)
            mean = float(np.sum(side.losses * side.masses))
            assert mean == pytest.approx(0.125, abs=2e-4)  # μ²/2 = 1/8, within the grid step
            assert side.allowance >= 0.0


def test_delta_profile_curve_is_the_max_over_certified_pairs() -> None:
    # A numerical PLD with partition selection's δ (and lattice slack) on top.
    sel = PartitionSelection(400, 150, 1, 2**64)
    acc = PLDAccountant().compose(Subsampled(Gaussian(sigma=0.8).lattice(5), 0.2), 3).compose(sel)
    assert acc.extra_delta > 0
    assert acc.slack > 0
    assert not acc.is_exact
    deltas = [1e-9, 1e-6, 1e-3, 0.1]
    curve = TradeoffCurve.from_delta_profile(acc, deltas=deltas)
    # Independently: the max over the pairs of f_{ε,δ} (DRS Prop 2.4), and δ(0).
    pairs = [(0.0, acc.delta(0.0).upper), *((acc.epsilon(d).upper, d) for d in deltas)]
    expected = np.max([tradeoff_epsilon_delta(e, d, ALPHAS) for e, d in pairs], axis=0)
    np.testing.assert_allclose(curve(ALPHAS), expected, rtol=1e-10, atol=1e-12)
    # The accountant may answer δ(0) a little tighter once the ε queries have refined its
    # grid: both answers are certified, the curve holds the first.
    assert pairs[0][1] <= curve.advantage <= pairs[0][1] * (1 + 1e-9)
    # The accountant route uses it (default δ grid).
    routed = TradeoffCurve.from_accountant(acc)
    # (Equal up to 1e-12: the accountant's answers move by ~1e-12 once its grid is cached.)
    default = TradeoffCurve.from_delta_profile(acc)
    np.testing.assert_allclose(routed(ALPHAS), default(ALPHAS), rtol=0, atol=1e-11)
    # δ below partition selection's δ certifies no ε: that pair is left out.
    assert math.isinf(acc.epsilon(sel.delta / 2).upper)
    below = TradeoffCurve.from_delta_profile(acc, deltas=[sel.delta / 2])
    np.testing.assert_allclose(below(ALPHAS), tradeoff_epsilon_delta(*pairs[0], ALPHAS))
    with pytest.raises(ValueError, match="deltas must be"):
        TradeoffCurve.from_delta_profile(acc, deltas=[0.0])


def test_descriptions_round_privacy_parameters_outward() -> None:
    # Each of these rounds *down* to nearest at 4 (δ: 3) significant digits; the displayed
    # guarantee must not be stronger than the true one (regression: `{mu:.4g}`).
    from gaussdp.audit.report import release_curve
    from gaussdp.plot import tradeoff_figure

    mu, eps, delta, rho = 1.00004, 2.00001, 1.0001e-6, 0.500001
    assert TradeoffCurve.from_gdp(mu).description == "1.001-GDP"
    assert TradeoffCurve.from_epsilon_delta(eps, delta).description == "(2.001, 1.01e-06)-DP"
    assert TradeoffCurve.from_rho(rho).description == "0.5001-zCDP"
    dpsgd = TradeoffCurve.from_dpsgd(noise_multiplier=1.0000004, sample_rate=0.0100000004, steps=3)
    assert dpsgd.description == "DP-SGD σ=1, q=0.0100001, 3 steps"  # less noise shown, not more
    gdp = release_curve("gdp", mu=mu, rho=mu**2 / 2, slack=1e-9, selection_delta=0.0)
    assert gdp.description == "1.001-GDP (release)"
    zcdp = release_curve("zcdp", mu=None, rho=rho, slack=0.0, selection_delta=0.0)
    assert zcdp.description == "0.5001-zCDP (release)"
    fig, _ = tradeoff_figure([TradeoffCurve.from_gdp(mu)], mus=())
    assert "1.001-GDP" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
