"""The vectorised exact samplers against the exact pmf, the scalar reference, and bad input.

All statistical tests use alpha = 1e-6 each (critical values beside them, see
``sampling_stats``), fixed ChaCha20Random seeds, and expected probabilities from
``gaussdp.privacy`` (exact pmf, cdf and variance), never from a sampler.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from sampling_stats import (
    Z_CRIT,
    bin_counts,
    chi2_gof,
    chi2_two_sample,
    make_bins,
    moment_z_scores,
)

from gaussdp.privacy import DiscreteGaussianDistribution, DiscreteLaplaceDistribution
from gaussdp.random import ChaCha20Random, RandomSource, SystemRandom
from gaussdp.sampling import (
    FixedWork,
    SamplingShortfallError,
    discrete_gaussian,
    discrete_gaussian_scalar,
    discrete_laplace,
    discrete_laplace_scalar,
)
from gaussdp.sampling import vectorized as vec

GAUSSIAN_SIGMA2 = [Fraction(1, 4), 1, 2, 10, 10**4, 10**12]
LAPLACE_SCALES = [Fraction(1, 10), Fraction(1, 2), 1, Fraction(5, 2), 100, 10**6]


def _gaussian_edges(sigma2: Fraction | int) -> list[int]:
    sigma = math.sqrt(float(sigma2))
    if sigma < 30:
        return list(range(-int(8 * sigma) - 2, int(8 * sigma) + 3))
    return sorted({round(sigma * z / 8) for z in range(-48, 49)})


def _laplace_cdf(scale: Fraction | int):  # type: ignore[no-untyped-def]
    """Exact cdf of pmf (1 - q)/(1 + q) q**|x|, q = exp(-1/scale), summed in closed form.

    P[X <= k] = q**(-k) / (1 + q) for k < 0 and 1 - q**(k + 1) / (1 + q) for k >= 0.
    """
    exact = Fraction(scale)
    q = math.exp(-float(1 / exact))

    def power(m: int) -> float:  # q**m = exp(-m / scale), m >= 0, without float overflow of m
        return math.exp(-float(m / exact))

    def cdf(k: int) -> float:
        return power(-k) / (1 + q) if k < 0 else 1.0 - power(k + 1) / (1 + q)

    return cdf


def _laplace_edges(scale: Fraction | int) -> list[int]:
    s = float(scale)
    if s < 20:
        reach = int(12 * s) + 3
        return list(range(-reach, reach + 1))
    return sorted({round(s * z / 8) for z in range(-80, 81)})


@pytest.mark.parametrize("sigma2", GAUSSIAN_SIGMA2, ids=str)
def test_discrete_gaussian_matches_exact_pmf(sigma2: Fraction | int) -> None:
    n = 400_000
    edges, probs = make_bins(
        _gaussian_edges(sigma2), lambda k: float(DiscreteGaussianDistribution(sigma2).cdf(k)), n
    )
    sample = discrete_gaussian(sigma2, n, rng=ChaCha20Random(100))
    assert sample.dtype == np.int64
    assert sample.shape == (n,)
    stat, crit = chi2_gof(bin_counts(sample, edges), probs)
    assert stat < crit, (stat, crit)  # chi-square, alpha = 1e-6
    z_mean, z_var, z_sign = moment_z_scores(
        sample,
        DiscreteGaussianDistribution(sigma2).var(),
        float(DiscreteGaussianDistribution(sigma2).pmf(0)),
    )
    assert max(abs(z_mean), abs(z_var), abs(z_sign)) < Z_CRIT, (z_mean, z_var, z_sign)


def test_gaussian_cdf_helper_agrees_with_pmf() -> None:
    # The chi-square bins use the exact cdf; tie it to the exact pmf on a small case.
    total = sum(float(DiscreteGaussianDistribution(2).pmf(k)) for k in range(-30, 4))
    assert total == pytest.approx(float(DiscreteGaussianDistribution(2).cdf(3)), rel=1e-12)


@pytest.mark.parametrize("sigma2", [10**100, Fraction(10**60 + 7, 3)], ids=["1e100", "1e60/3"])
def test_discrete_gaussian_huge_sigma_moments(sigma2: Fraction | int) -> None:
    n = 40_000
    sample = discrete_gaussian(sigma2, n, rng=ChaCha20Random(101))
    assert sample.dtype == object
    assert isinstance(sample[0], int)
    scale = math.isqrt(int(sigma2))
    z_mean, z_var, z_sign = moment_z_scores(
        sample,
        DiscreteGaussianDistribution(sigma2).var(),
        float(DiscreteGaussianDistribution(sigma2).pmf(0)),
        scale,
    )
    assert max(abs(z_mean), abs(z_var), abs(z_sign)) < Z_CRIT, (z_mean, z_var, z_sign)
    # Coarse shape: chi-square on 16 bins of sigma/2 (cdf of the exact distribution).
    edges, probs = make_bins(
        [scale * z // 2 for z in range(-7, 8)],
        lambda k: float(DiscreteGaussianDistribution(sigma2).cdf(k)),
        n,
    )
    stat, crit = chi2_gof(bin_counts(sample, edges), probs)
    assert stat < crit, (stat, crit)  # chi-square, alpha = 1e-6
    # Low bits are uniform too (the big path draws them separately): parity balance,
    # z-test |z| < 4.89 at alpha = 1e-6.
    odd = sum(int(v) & 1 for v in sample)
    assert abs(odd - n / 2) / math.sqrt(n / 4) < Z_CRIT


def test_discrete_gaussian_medium_sigma_uses_big_path_with_int64() -> None:
    # sigma2 = 10**18 (t > 2**26): the CKS Alg 2 decomposition path, still int64 output.
    n = 100_000
    sigma2 = 10**18
    sample = discrete_gaussian(sigma2, n, rng=ChaCha20Random(102))
    assert sample.dtype == np.int64
    edges, probs = make_bins(
        _gaussian_edges(sigma2), lambda k: float(DiscreteGaussianDistribution(sigma2).cdf(k)), n
    )
    stat, crit = chi2_gof(bin_counts(sample, edges), probs)
    assert stat < crit, (stat, crit)  # chi-square, alpha = 1e-6
    z_mean, z_var, z_sign = moment_z_scores(
        sample,
        DiscreteGaussianDistribution(sigma2).var(),
        float(DiscreteGaussianDistribution(sigma2).pmf(0)),
    )
    assert max(abs(z_mean), abs(z_var), abs(z_sign)) < Z_CRIT, (z_mean, z_var, z_sign)


@pytest.mark.parametrize("scale", LAPLACE_SCALES, ids=str)
def test_discrete_laplace_matches_exact_pmf(scale: Fraction | int) -> None:
    n = 400_000
    edges, probs = make_bins(_laplace_edges(scale), _laplace_cdf(scale), n)
    sample = discrete_laplace(scale, n, rng=ChaCha20Random(103))
    assert sample.dtype == np.int64
    stat, crit = chi2_gof(bin_counts(sample, edges), probs)
    assert stat < crit, (stat, crit)  # chi-square, alpha = 1e-6
    z_mean, z_var, z_sign = moment_z_scores(
        sample,
        DiscreteLaplaceDistribution(scale).var(),
        float(DiscreteLaplaceDistribution(scale).pmf(0)),
    )
    assert max(abs(z_mean), abs(z_var), abs(z_sign)) < Z_CRIT, (z_mean, z_var, z_sign)


def test_laplace_cdf_helper_agrees_with_pmf() -> None:
    cdf = _laplace_cdf(Fraction(5, 2))
    total = sum(float(DiscreteLaplaceDistribution(Fraction(5, 2)).pmf(k)) for k in range(-200, 4))
    assert total == pytest.approx(cdf(3), rel=1e-12)


@pytest.mark.parametrize(
    "scale",
    [Fraction(3 * 2**26 + 1, 3), 10**9, Fraction(10**40, 7)],
    ids=["2^26+1/3", "1e9", "1e40/7"],
)
def test_discrete_laplace_big_scale(scale: Fraction | int) -> None:
    n = 40_000
    sample = discrete_laplace(scale, n, rng=ChaCha20Random(104))
    unit = int(scale)
    z_mean, z_var, z_sign = moment_z_scores(
        sample,
        DiscreteLaplaceDistribution(scale).var(),
        float(DiscreteLaplaceDistribution(scale).pmf(0)),
        unit,
    )
    assert max(abs(z_mean), abs(z_var), abs(z_sign)) < Z_CRIT, (z_mean, z_var, z_sign)
    edges, probs = make_bins([unit * z // 4 for z in range(-16, 17)], _laplace_cdf(scale), n)
    stat, crit = chi2_gof(bin_counts(sample, edges), probs)
    assert stat < crit, (stat, crit)  # chi-square, alpha = 1e-6


@pytest.mark.parametrize(
    ("sampler", "reference", "param"),
    [
        (discrete_gaussian, discrete_gaussian_scalar, 2),
        (discrete_gaussian, discrete_gaussian_scalar, Fraction(7, 3)),
        (discrete_laplace, discrete_laplace_scalar, Fraction(3, 2)),
    ],
    ids=["gauss-2", "gauss-7/3", "laplace-3/2"],
)
def test_vectorised_matches_scalar_reference(sampler, reference, param) -> None:  # type: ignore[no-untyped-def]
    # Two-sample chi-square (homogeneity), bins fixed from the exact pmf, alpha = 1e-6.
    n_ref, n_vec = 15_000, 200_000
    law = (
        DiscreteGaussianDistribution(param)
        if sampler is discrete_gaussian
        else DiscreteLaplaceDistribution(param)
    )
    support = list(range(-40, 41))
    edges, _ = make_bins(
        support, lambda k: float(sum(law.pmf(j) for j in range(-60, k + 1))), n_ref
    )
    rng = ChaCha20Random(105)
    ref = np.array([reference(param, rng=rng) for _ in range(n_ref)])
    fast = sampler(param, n_vec, rng=ChaCha20Random(106))
    stat, crit = chi2_two_sample(bin_counts(ref, edges), bin_counts(fast, edges))
    assert stat < crit, (stat, crit)


@pytest.mark.parametrize("sigma2", [2, 10**6], ids=["packed-word", "52-bit"])
def test_exact_fallback_alone_has_the_right_distribution(
    monkeypatch: pytest.MonkeyPatch, sigma2: int
) -> None:
    # Widen the float error bounds so that (almost) every lane is undecided by the fast
    # path and is finished by the exact resolver: the resolver alone must be exact.
    monkeypatch.setattr(vec, "_ETA_REL", 1.0)
    monkeypatch.setattr(vec, "_BRACKET_REL", 4.0)
    n = 4_000
    sample = discrete_gaussian(sigma2, n, rng=ChaCha20Random(107))
    edges, probs = make_bins(
        _gaussian_edges(sigma2), lambda k: float(DiscreteGaussianDistribution(sigma2).cdf(k)), n
    )
    stat, crit = chi2_gof(bin_counts(sample, edges), probs)
    assert stat < crit, (stat, crit)  # chi-square, alpha = 1e-6
    lap = discrete_laplace(Fraction(3, 2), n, rng=ChaCha20Random(108))
    edges, probs = make_bins(_laplace_edges(Fraction(3, 2)), _laplace_cdf(Fraction(3, 2)), n)
    stat, crit = chi2_gof(bin_counts(lap, edges), probs)
    assert stat < crit, (stat, crit)  # chi-square, alpha = 1e-6


@pytest.mark.parametrize("bits", [31, 52])
@pytest.mark.parametrize("tau", [1.0, 1.5, 257.0, 130_001.0, 2.0**20, 2.0**26])
def test_geometric_leaves_a_zero_prefix_undecided(bits: int, tau: float) -> None:
    # U in [0, 2**-bits) (m = 0) has no float bound on -tau ln U: the lane must go to the
    # exact resolver. For tau >= 1 _geometric relies on eta >= tau making its floors
    # differ (docs/sampler-exactness.md §2.1) instead of testing m = 0; check that here.
    m = np.array([0, 1, 2**bits - 1, 0], dtype=np.uint64)
    _, undecided = vec._geometric(m, bits, tau)
    assert undecided[[0, 3]].all()
    _, undecided_small = vec._geometric(m, bits, 0.25)  # tau < 1: tested explicitly
    assert undecided_small[[0, 3]].all()


def test_big_path_exact_fallback_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vec, "_BRACKET_REL", 4.0)
    n = 3_000
    sigma2 = 10**100
    sample = discrete_gaussian(sigma2, n, rng=ChaCha20Random(109))
    scale = 10**50
    edges, probs = make_bins(
        [scale * z // 2 for z in range(-5, 6)],
        lambda k: float(DiscreteGaussianDistribution(sigma2).cdf(k)),
        n,
    )
    stat, crit = chi2_gof(bin_counts(sample, edges), probs)
    assert stat < crit, (stat, crit)  # chi-square, alpha = 1e-6


def test_reproducible_with_chacha_and_shapes() -> None:
    a = discrete_gaussian(Fraction(9, 2), (3, 4), rng=ChaCha20Random(5))
    b = discrete_gaussian(Fraction(9, 2), (3, 4), rng=ChaCha20Random(5))
    assert a.shape == (3, 4)
    assert np.array_equal(a, b)
    scalar = discrete_gaussian(3, rng=ChaCha20Random(5))
    assert scalar.shape == ()
    assert scalar.dtype == np.int64
    assert discrete_laplace(2, 0, rng=ChaCha20Random(5)).shape == (0,)
    assert discrete_gaussian(2, (2, 0), rng=ChaCha20Random(5)).shape == (2, 0)
    assert discrete_gaussian(10**100, (2, 2), rng=ChaCha20Random(5)).shape == (2, 2)
    assert isinstance(discrete_gaussian(2, 4), np.ndarray)  # default SystemRandom


def test_accepts_fraction_strings_and_floats() -> None:
    a = discrete_gaussian("9/2", 5, rng=ChaCha20Random(6))
    b = discrete_gaussian(Fraction(9, 2), 5, rng=ChaCha20Random(6))
    c = discrete_gaussian(4.5, 5, rng=ChaCha20Random(6))
    assert np.array_equal(a, b)
    assert np.array_equal(a, c)


class _CountingSource(ChaCha20Random):
    """A ChaCha20 stream that counts the bytes it hands out."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.calls = 0
        self.requested = 0

    def random_bytes(self, n: int) -> bytes:
        self.calls += 1
        self.requested += n
        return super().random_bytes(n)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"sigma2": 0}, ValueError, "sigma2 must be a finite positive rational"),
        ({"sigma2": -1}, ValueError, "sigma2 must be a finite positive rational"),
        ({"sigma2": float("nan")}, ValueError, "sigma2 must be a finite positive rational"),
        ({"sigma2": float("inf")}, ValueError, "sigma2 must be a finite positive rational"),
        ({"sigma2": "abc"}, ValueError, "sigma2 must be a finite positive rational"),
        ({"sigma2": True}, TypeError, "sigma2 must be a finite positive rational"),
        ({"sigma2": 1, "size": -1}, ValueError, "size must be an integer >= 0, got -1"),
        ({"sigma2": 1, "size": 2.5}, ValueError, "size must be an integer >= 0, got 2.5"),
        ({"sigma2": 1, "size": (2, -3)}, ValueError, "size must be an integer >= 0, got -3"),
        ({"sigma2": 1, "size": [2]}, TypeError, "size must be an integer >= 0 or a tuple"),
        ({"sigma2": 1, "work": 5}, TypeError, "work must be None or a FixedWork"),
    ],
)
def test_bad_input_is_refused_before_drawing(kwargs, error, message) -> None:  # type: ignore[no-untyped-def]
    rng = _CountingSource()
    params = dict(kwargs)
    sigma2 = params.pop("sigma2")
    with pytest.raises(error, match=message):
        discrete_gaussian(sigma2, rng=rng, **params)
    scale_kwargs = dict(params)
    with pytest.raises(error, match=message.replace("sigma2", "scale")):
        discrete_laplace(sigma2, rng=rng, **scale_kwargs)
    assert rng.calls == 0


def test_sigma2_beyond_the_plans_doubles_is_refused_before_drawing() -> None:
    # 2**2047 is the largest sigma2 whose plan constants are finite doubles; above it the
    # plan raised a bare OverflowError (int too large to convert to float).
    rng = _CountingSource()
    with pytest.raises(ValueError, match=r"sigma2 must be a number <= 2\*\*2047, got"):
        discrete_gaussian(2**2047 + 1, rng=rng)
    assert rng.calls == 0
    assert abs(int(discrete_gaussian(2**2047, rng=rng))) < 2**1100


def test_scalar_draws_go_through_a_subclass_random_bytes() -> None:
    # A subclass that overrides random_bytes sees every request of the few-values path
    # (the in-place read of the buffer is only for the sources' own random_bytes).
    rng = _CountingSource(3)
    for _ in range(3):
        discrete_gaussian(10, rng=rng)
        discrete_laplace(3, size=5, rng=rng)
    assert rng.calls >= 6


@pytest.mark.parametrize("bad_rng", [42, 1.5, np.random.default_rng(0)])
def test_bad_rng_is_refused(bad_rng: object) -> None:
    with pytest.raises(TypeError, match=r"ChaCha20Random\(seed\)"):
        discrete_gaussian(2, 3, rng=bad_rng)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"ChaCha20Random\(seed\)"):
        discrete_laplace(2, 3, rng=bad_rng)  # type: ignore[arg-type]


# --- fixed-work mode --------------------------------------------------------------------


def test_fixed_work_draws_a_fixed_number_of_words() -> None:
    # The same request spends the same number of random bytes whatever the values drawn
    # (no exact resolution happens at these sizes; see docs/sampler-exactness.md §4).
    work = FixedWork(delta_prime=2**-64)
    used, sums = set(), set()
    for seed in range(8):
        rng = _CountingSource(seed)
        sample = discrete_gaussian(100, 1000, rng=rng, work=work)
        assert sample.shape == (1000,)
        used.add(rng.requested)
        sums.add(int(np.abs(sample).sum()))
    assert len(used) == 1
    assert len(sums) > 1


def test_fixed_work_output_has_the_right_distribution() -> None:
    n, sigma2 = 200_000, 10
    sample = discrete_gaussian(sigma2, n, rng=ChaCha20Random(110), work=FixedWork())
    edges, probs = make_bins(
        _gaussian_edges(sigma2), lambda k: float(DiscreteGaussianDistribution(sigma2).cdf(k)), n
    )
    stat, crit = chi2_gof(bin_counts(sample, edges), probs)
    assert stat < crit, (stat, crit)  # chi-square, alpha = 1e-6
    lap = discrete_laplace(3, 1000, rng=ChaCha20Random(111), work=FixedWork())
    assert lap.shape == (1000,)
    big = discrete_gaussian(10**100, 100, rng=ChaCha20Random(112), work=FixedWork())
    assert big.shape == (100,)


def test_fixed_work_candidate_count_and_shortfall() -> None:
    work = FixedWork(delta_prime=1e-12)
    # Chernoff: C a >= n + L + sqrt(L^2 + 2 n L), L = ln(1e12).
    log_inv = math.log(1e12)
    need = 1000 + log_inv + math.sqrt(log_inv**2 + 2000 * log_inv)
    c = work.candidates(1000, 0.5)
    assert c * 0.5 >= need
    assert (c - 2) * 0.5 < need * (1 + 1e-6)
    assert work.candidates(0, 0.5) == 0
    # A false acceptance bound forces a shortfall: the error is raised, nothing returned.
    tight = FixedWork(delta_prime=0.5)
    with pytest.raises(SamplingShortfallError, match="nothing was released"):
        vec._draw(
            lambda m: np.zeros(m // 10, dtype=np.int64),
            1000,
            1.0,
            lambda n: np.empty(n, dtype=np.int64),
            tight,
        )


@pytest.mark.parametrize("delta_prime", [0, 1, -0.1, float("nan")])
def test_fixed_work_refuses_bad_delta_prime(delta_prime: float) -> None:
    with pytest.raises(ValueError, match=r"delta_prime must be a real number in \(0, 1\)"):
        FixedWork(delta_prime=delta_prime)


def test_acceptance_lower_bounds_hold() -> None:
    # The fixed-work candidate count relies on a lower bound of the per-candidate
    # acceptance probability; compare with the observed rate (z-test, alpha = 1e-6).
    for sigma2 in [Fraction(1, 4), 2, 10**6, 10**100]:
        plan = vec._GaussianPlan(Fraction(sigma2))
        m = 100_000 if plan.small else 20_000
        rng = ChaCha20Random(113)
        got = (
            len(vec._gaussian_small(plan, m, rng))
            if plan.huge is None
            else len(vec._gaussian_huge(plan, plan.huge, m, rng))
        )
        a = plan.cks_acceptance  # CKS Alg 3's (the ziggurat's is tested in its own file)
        assert (got - m * a) / math.sqrt(m * a * (1 - a)) > -Z_CRIT
        assert got / m < a * 1.05  # the bound is tight, not just valid
    for scale in [Fraction(1, 2), 100, Fraction(2**27 + 1, 2), Fraction(10**40, 7)]:
        lplan = vec._laplace_plan(Fraction(scale))
        m = 20_000
        rng = ChaCha20Random(114)
        got = (
            len(vec._laplace_small(lplan, m, rng))
            if lplan.huge is None
            else len(vec._laplace_huge(lplan.huge, m, rng))
        )
        a = lplan.acceptance
        assert (got - m * a) / math.sqrt(m * a * (1 - a)) > -Z_CRIT


def _mod_bins_law(scale: Fraction, modulus: int, width: int) -> npt.NDArray[np.float64]:
    """Exact P[(|X| mod modulus) // width = b] for X discrete Laplace (pmf ∝ r^|x|)."""
    one_minus_r = -math.expm1(-1 / scale)  # 1 − r without cancellation
    norm = one_minus_r / (2 - one_minus_r)  # P[X = 0] = (1 − r)/(1 + r)
    cycle = -math.expm1(-modulus / scale)  # 1 − r^modulus
    probs = []
    for b in range(modulus // width):
        # Σ over l in the bin and g ≥ 0 of P[|X| = g·modulus + l]; 2× for y ≥ 1.
        block = math.exp(-b * width / scale) * -math.expm1(-width / scale) / one_minus_r
        probs.append(2 * norm * block / cycle)
    probs[0] -= norm  # |X| = 0 was counted twice
    return np.array(probs)


def test_discrete_laplace_huge_path_low_bits_follow_the_exact_law() -> None:
    # Scale 2**39 + 1/3: S = 2**19, so Y = S·G + Lo with 19 bits of Lo assembled from a
    # separate word. Chi-square (alpha = 1e-6 each) of the top 6 bits of Lo and of the
    # bottom 6 bits of |X| against the exact pmf; fixed seed.
    scale = Fraction(3 * 2**39 + 1, 3)
    sample = discrete_laplace(scale, 100_000, rng=ChaCha20Random(115))
    assert sample.dtype == np.int64
    y = np.abs(sample)
    for modulus, width in ((2**19, 2**13), (64, 1)):
        probs = _mod_bins_law(scale, modulus, width)
        assert probs.sum() == pytest.approx(1.0, abs=1e-12)
        counts = np.bincount((y % modulus) // width, minlength=modulus // width)
        stat, crit = chi2_gof(counts, probs)
        assert stat < crit, (modulus, stat, crit)


def test_system_random_default_runs() -> None:
    sample = discrete_gaussian(10**6, 1000, rng=SystemRandom())
    assert sample.dtype == np.int64
    assert np.abs(sample).max() < 10**8


@pytest.mark.parametrize(
    "param", [Fraction(1, 2**59), Fraction(1, 2**61), Fraction(1, 10**400)], ids=str
)
def test_tiny_parameters_are_near_point_masses(param: Fraction) -> None:
    # P[X != 0] is below 2 exp(-2**58) for both laws here: every draw is 0. Below 2**-60 the
    # scalar reference draws them (variable work, so FixedWork is refused).
    assert np.array_equal(discrete_gaussian(param, (3, 2), rng=ChaCha20Random(9)), np.zeros((3, 2)))
    assert np.array_equal(discrete_laplace(param, 4, rng=ChaCha20Random(9)), np.zeros(4))
    if param < Fraction(1, 2**60):
        with pytest.raises(ValueError, match="sigma2 must be >= 2\\*\\*-60 for fixed-work"):
            discrete_gaussian(param, 3, rng=ChaCha20Random(9), work=FixedWork())


# --- a few outputs: the same candidates, one at a time (docs §4.1) ---------------------------


def _both_paths(
    monkeypatch: pytest.MonkeyPatch, draw: object, n: int, make_rng: object
) -> tuple[np.ndarray, np.ndarray, object, object]:
    """The output and the next word after it, with the few-path off and on."""
    results = []
    for few_max in (0, vec._FEW_MAX):
        monkeypatch.setattr(vec, "_FEW_MAX", few_max)
        rng = make_rng()  # type: ignore[operator]
        results.append((draw(n, rng), int(rng.words(1)[0])))  # type: ignore[operator]
    (a, a_next), (b, b_next) = results
    return a, b, a_next, b_next


@pytest.mark.parametrize(
    ("sampler", "param"),
    [
        *[(discrete_gaussian, s) for s in (Fraction(1, 4), 1, Fraction(7, 3), 100, 65536, 10**12)],
        *[(discrete_gaussian, s) for s in (10**18, 10**100)],  # t > 2**26: the huge path
        *[(discrete_laplace, s) for s in (Fraction(1, 10), 1, Fraction(5, 2), 1000, 2**20)],
        *[(discrete_laplace, s) for s in (10**9, Fraction(10**40, 7))],  # the huge path
    ],
    # Names, not reprs: a function's repr holds its address, which differs between
    # pytest-xdist workers and makes them collect different tests.
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_few_outputs_are_the_vectorised_outputs(
    monkeypatch: pytest.MonkeyPatch, sampler: object, param: object
) -> None:
    # Same words, same bit layout, same decisions: the outputs and the position in the
    # stream afterwards agree (65536 has t = 257: the unpacked layout; 10**100 and
    # 10**40/7 give Python ints).
    assert vec._FEW_MAX >= 16
    int64_max = 2**80 if sampler is discrete_gaussian else 2**40  # σ² or scale
    for seed in range(25):
        for n in (1, 2, 5, 16):
            a, b, a_next, b_next = _both_paths(
                monkeypatch,
                lambda m, rng: sampler(param, m, rng=rng),  # type: ignore[operator]
                n,
                lambda seed=seed: ChaCha20Random(seed),
            )
            assert a.tolist() == b.tolist()
            assert a.dtype == b.dtype == (object if param > int64_max else np.int64)
            assert a_next == b_next


class _Scripted(RandomSource):
    """Given words first (little-endian), then a ChaCha20 stream."""

    def __init__(self, words: list[int]) -> None:
        self.head = b"".join(w.to_bytes(8, "little") for w in words)
        self.tail = ChaCha20Random(9)

    def random_bytes(self, n: int) -> bytes:
        take, self.head = self.head[:n], self.head[n:]
        return take + self.tail.random_bytes(n - len(take))


@pytest.mark.parametrize("sigma2", [100, 65536], ids=["packed", "unpacked"])
def test_few_path_exact_fallbacks_match_the_vectorised_ones(
    monkeypatch: pytest.MonkeyPatch, sigma2: int
) -> None:
    # The first candidate has U = 0 to 31 or 52 bits, so its geometric is decided by the
    # exact resolver from fresh bits; in the second script its acceptance uniform also sits
    # at exp(-gamma(0)), within the bracket if G = 0. The few-path must draw the same extra
    # words in the same order as the vectorised one.
    plan = vec._GaussianPlan(Fraction(sigma2))
    p = math.exp(-float(plan.gamma(0)))
    m_tie = int(p * 2**32)
    packed = plan.t <= vec._PACKED_T_MAX
    first = [0, m_tie] if packed else [0, 0]  # unpacked: U' of lane 0 is the next word's top
    for words in ([first[0]], [m_tie if packed else m_tie << 32]):
        a, b, a_next, b_next = _both_paths(
            monkeypatch,
            lambda m, rng: discrete_gaussian(sigma2, m, rng=rng),
            1,
            lambda words=words: _Scripted(words),
        )
        np.testing.assert_array_equal(a, b)
        assert a_next == b_next


@pytest.mark.parametrize(
    ("sampler", "param", "cdf"),
    [
        (
            discrete_gaussian,
            Fraction(9, 4),
            lambda k: float(DiscreteGaussianDistribution(Fraction(9, 4)).cdf(k)),
        ),
        (discrete_gaussian, 10**4, lambda k: float(DiscreteGaussianDistribution(10**4).cdf(k))),
        (discrete_laplace, Fraction(5, 2), _laplace_cdf(Fraction(5, 2))),
    ],
    ids=["gaussian-9/4", "gaussian-1e4", "laplace-5/2"],
)
def test_scalar_draws_match_the_exact_pmf(sampler: object, param: object, cdf: object) -> None:
    # 20,000 separate scalar calls (the few-outputs path) on one stream; chi-square at
    # alpha = 1e-6 against the exact cdf.
    n = 20_000
    rng = ChaCha20Random(77)
    sample = np.array([int(sampler(param, rng=rng)) for _ in range(n)])  # type: ignore[operator]
    sigma = math.sqrt(float(Fraction(param)))  # type: ignore[arg-type]
    reach = int(10 * sigma) + 3
    edges, probs = make_bins(list(range(-reach, reach + 1, max(1, reach // 40))), cdf, n)  # type: ignore[arg-type]
    stat, crit = chi2_gof(bin_counts(sample, edges), probs)
    assert stat < crit, (stat, crit)


def test_cached_parameters_still_refuse_what_check_fraction_refuses() -> None:
    # Validated parameters are cached per (type, value): a cached 1 must not let True in,
    # and a refusal must not be cached as anything.
    assert discrete_gaussian(1, rng=ChaCha20Random(0)).dtype == np.int64
    for bad, error in ((True, TypeError), (float("nan"), ValueError), (-1, ValueError)):
        for _ in range(2):
            with pytest.raises(error, match="^sigma2 must be a finite positive rational"):
                discrete_gaussian(bad, rng=ChaCha20Random(0))
    one = [discrete_gaussian(p, 3, rng=ChaCha20Random(4)) for p in (1, 1.0, "1", Fraction(1))]
    for other in one[1:]:
        np.testing.assert_array_equal(one[0], other)
