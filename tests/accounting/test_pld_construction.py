"""One run's PLD construction: blocked sums, the clipped hull, memory counts, refusals."""

from __future__ import annotations

import gc
import math
import weakref
from fractions import Fraction

import numpy as np
import pytest

import gaussdp.accounting.pld as pld_module
from gaussdp._search import smallest_scale
from gaussdp.accounting import PLDAccountant, PrivacyLossDistribution, Subsampled
from gaussdp.accounting.accountants import UnsupportedEventError
from gaussdp.accounting.events import DiscreteGaussianVector
from gaussdp.mechanisms import DiscreteGaussian, Gaussian


def _sides(pld: PrivacyLossDistribution) -> list[pld_module._LossPMF]:
    return [pld.upper_remove, pld.upper_add, pld.lower_remove, pld.lower_add]


@pytest.mark.parametrize("chunk", [50, 1000])
def test_blocked_construction_equals_one_block(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    # The long double suffix sums, the lowerings and the hull's tests are formed
    # _CHUNK points at a time; the blocks carry their totals in the order of one
    # cumulative sum, so the PMFs are those of a single block (to the last bits of the
    # long double totals).
    def build() -> list[PrivacyLossDistribution]:
        return [
            PrivacyLossDistribution.from_subsampled_gaussian(0.8, 0.01, value_discretization=2e-3),
            PrivacyLossDistribution.from_gaussian(1.5, value_discretization=1e-3),
            PrivacyLossDistribution.from_discrete_gaussian(3, 2, value_discretization=1e-3),
        ]

    whole = build()
    monkeypatch.setattr(pld_module, "_CHUNK", chunk)
    blocked = build()
    for one, other in zip(whole, blocked, strict=True):
        for a, b in zip(_sides(one), _sides(other), strict=True):
            assert (a.start, a.probs.size, a.inf_mass) == (b.start, b.probs.size, b.inf_mass)
            if a.upper:
                np.testing.assert_array_equal(a.probs, b.probs)
            else:
                np.testing.assert_allclose(a.probs, b.probs, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("seed", range(4))
def test_clipped_hull_equals_the_hull_of_its_points(seed: int) -> None:
    # Pass 2 of the lower side: a convex chain (pass 1's vertices), then zeros from z0.
    # The tangent from (x_z0, 0) gives the hull without peeling the chain's end one point
    # per pass; it must be the hull the general search finds.
    from gaussdp.accounting.pld import _below, _clipped_hull, _lower_hull

    rng = np.random.default_rng(seed)
    n = 4000
    x = np.concatenate(([0.0], np.exp(np.linspace(-3, 1, n - 1))))
    w = np.maximum(np.exp(-2 * x) - 0.05 - 1e-3 * rng.random(), 0.0)
    z0 = int(np.argmax(w == 0.0)) + int(rng.integers(0, 50))
    w[z0:] = 0.0
    chain = np.arange(z0, dtype=np.intp)  # convex: a decreasing exponential, clipped
    if seed % 2:
        chain = chain[:: 1 + seed]  # a subset, as pass 1's vertices are
    hull = _clipped_hull(x, w, chain, z0)
    cand = np.concatenate((chain, [z0, n - 1]))
    assert hull[0] == 0
    assert hull[-1] == n - 1
    assert _below(x[cand], w[cand], np.searchsorted(cand, hull)).size == 0
    general = cand[_lower_hull(x[cand], w[cand])]
    assert np.allclose(
        np.interp(x, x[hull], w[hull]), np.interp(x, x[general], w[general]), rtol=0, atol=1e-15
    )


def test_a_discrete_grid_is_counted_as_a_continuous_one() -> None:
    # _from_points builds with _from_bins as _from_continuous does: the memory bound
    # counts the same _BUILD_COST per grid point for both (an ApproxDP step on h = 5e-7
    # spans 4·10⁶ points: over the bound, like a continuous grid of that length).
    from gaussdp.accounting._adaptive import MAX_GRID_POINTS, GridTooLargeError

    points = int(2.0 / 5e-7) + 1
    assert points < MAX_GRID_POINTS < pld_module._BUILD_COST * points
    with pytest.raises(GridTooLargeError):
        PrivacyLossDistribution.from_approx_dp(1.0, 1e-6, value_discretization=5e-7)
    with pytest.raises(GridTooLargeError):
        PrivacyLossDistribution.from_laplace(1.0, value_discretization=5e-7)


def test_an_accountant_is_freed_without_the_cyclic_collector() -> None:
    # The accountant's adaptive grid refers back to it weakly: no reference cycle keeps
    # an accountant and its PLDs alive until the cyclic collector runs.
    enabled = gc.isenabled()
    gc.disable()
    try:
        acc = PLDAccountant().compose(Subsampled(Gaussian(1.0), 0.01), 20)
        assert acc.epsilon(1e-5).upper < 1.0
        ref = weakref.ref(acc)
        del acc
        assert ref() is None
    finally:
        if enabled:
            gc.enable()


@pytest.mark.parametrize(
    "event",
    [
        DiscreteGaussian(1, 10**300),
        Subsampled(DiscreteGaussian(1, 10**300), 0.1),
        DiscreteGaussianVector(1, (1, 10**300)),
        DiscreteGaussian(1, 2_000_000),
    ],
)
def test_a_sensitivity_too_large_to_list_is_refused_by_name(event: object) -> None:
    # supports() is the traversal compose() runs: both refuse what a query would, and
    # the reason names the sensitivity (not σ², which is 1).
    acc = PLDAccountant()
    assert not acc.supports(event)
    with pytest.raises(UnsupportedEventError, match=r"\(sensitivity must be at most 1999987 "):
        acc.compose(event)  # type: ignore[arg-type]


def test_sigma2_outside_the_listed_range_is_refused_by_name() -> None:
    acc = PLDAccountant()
    tiny = DiscreteGaussian(1e-300)
    assert not acc.supports(tiny)
    with pytest.raises(UnsupportedEventError, match=r"\(sigma2 must be a rational number in"):
        acc.compose(tiny)
    # The largest σ² whose support (±10σ, Δ = 1) can be listed, and the next integer.
    assert acc.supports(DiscreteGaussian(39_999_840_000))
    assert not acc.supports(DiscreteGaussian(39_999_840_001))
    with pytest.raises(UnsupportedEventError, match=r"sigma2 must be at most 39999840000 "):
        acc.compose(DiscreteGaussian(39_999_840_001))
    # The construction itself names the same parameter.
    with pytest.raises(ValueError, match="^sensitivity must be at most 1999987 "):
        PrivacyLossDistribution.from_discrete_gaussian(1, 10**300)
    with pytest.raises(ValueError, match="^sigma2 must be at most 39999840000 "):
        PrivacyLossDistribution.from_discrete_gaussian(Fraction(39_999_840_001))


def test_smallest_scale_returns_an_evaluated_scale() -> None:
    # The library's calibration search (gaussdp._search): the scale returned was
    # evaluated to meet the target, within rtol of the smallest one.
    seen: dict[float, float] = {}

    def eps_of(s: float) -> float:
        seen[s] = 3.0 / s
        return seen[s]

    s = smallest_scale(eps_of, 0.7, 1.0, 1e-6)
    assert s in seen
    assert seen[s] <= 0.7
    assert 3.0 / 0.7 <= s <= 3.0 / 0.7 * (1 + 1e-6)
    with pytest.raises(ValueError, match="^target_epsilon must be reachable with finite noise"):
        smallest_scale(lambda s: 1.0 + 1.0 / s, 0.5, 1.0, 1e-3)
    import gaussdp.accounting.calibration as calibration

    assert not hasattr(calibration, "_smallest_scale")


@pytest.mark.parametrize(("work", "chain_points"), [(0, 0), (16, 0), (0, 1 << 17)])
def test_every_route_of_the_lower_hull_finds_the_hull(
    monkeypatch: pytest.MonkeyPatch, work: int, chain_points: int
) -> None:
    # Local passes (bounded by _HULL_WORK), then the monotone chain (up to _CHAIN_POINTS
    # points) or the isotonic regression: each route gives the hull of Andrew's chain.
    from gaussdp.accounting.pld import _below, _bends_up, _hull_of, _lower_hull

    monkeypatch.setattr(pld_module, "_HULL_WORK", work)
    monkeypatch.setattr(pld_module, "_CHAIN_POINTS", chain_points)
    rng = np.random.default_rng(7)
    n = 3000
    x = np.concatenate(([0.0], np.exp(np.linspace(-2, 1, n - 1))))
    y = np.exp(-x) - rng.random(n) * 10.0 ** rng.uniform(-8, -3)
    y[n // 2 :] = np.minimum(y[n // 2 :], 0.0)
    hull = _lower_hull(x, y)
    assert hull[0] == 0
    assert hull[-1] == n - 1
    assert not _bends_up(x, y, hull).any()
    assert _below(x, y, hull).size == 0
    reference = _hull_of(x, y, np.arange(n))
    assert np.allclose(
        np.interp(x, x[hull], y[hull]), np.interp(x, x[reference], y[reference]), atol=1e-14
    )


@pytest.mark.parametrize(
    ("sigma", "q", "h"), [(1.1, 256 / 60000, 1e-4), (0.6, 1e-5, 1e-4), (0.3, 0.9, 2e-3)]
)
def test_subsampled_gaussian_add_side_equals_its_own_cdfs(sigma: float, q: float, h: float) -> None:
    # The add direction takes the remove direction's CDF values on the part of its grid
    # they share: the PMFs are those built from the add direction's own CDFs, evaluated
    # here independently (the loss of N(0, 1) against the mixture, y = y(−t)).
    from scipy.special import ndtr

    pld = PrivacyLossDistribution.from_subsampled_gaussian(sigma, q, value_discretization=h)
    d = 1.0 / sigma

    def cdfs(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        arg = np.expm1(-t) + q
        with np.errstate(divide="ignore", invalid="ignore"):
            y = 1.0 / d * (np.log(np.where(arg > 0, arg, 1.0)) - math.log(q)) + d / 2
        y = np.where(arg > 0, y, -np.inf)
        n_le, n_gt = ndtr(y), ndtr(-y)
        cdf = (1 - q) * n_le + q * ndtr(y - d)
        sf = (1 - q) * n_gt + q * ndtr(d - y)
        return n_gt, n_le, sf, cdf

    lo = (pld.upper_add.start + 0.5) * h  # inside the first bin: the same grid
    hi = (pld.upper_add.start + pld.upper_add.probs.size - 1.5) * h
    upper, lower = pld_module._from_continuous(h, lo, hi, cdfs)
    for built, fresh in ((pld.upper_add, upper), (pld.lower_add, lower)):
        assert built.start == fresh.start
        np.testing.assert_array_equal(built.probs, fresh.probs)
        assert built.inf_mass == fresh.inf_mass


def test_subsampled_gaussian_cdf_reuse_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # Grids above _CDF_REUSE_MAX points evaluate the add direction's CDFs afresh (the
    # reuse would hold four more arrays at the build's peak): both ways give the same PLD.
    reused = PrivacyLossDistribution.from_subsampled_gaussian(0.9, 0.02, value_discretization=1e-3)
    monkeypatch.setattr(pld_module, "_CDF_REUSE_MAX", 0)
    fresh = PrivacyLossDistribution.from_subsampled_gaussian(0.9, 0.02, value_discretization=1e-3)
    for a, b in (
        (reused.upper_add, fresh.upper_add),
        (reused.lower_add, fresh.lower_add),
        (reused.upper_remove, fresh.upper_remove),
    ):
        assert a.start == b.start
        np.testing.assert_array_equal(a.probs, b.probs)
        assert a.inf_mass == b.inf_mass
