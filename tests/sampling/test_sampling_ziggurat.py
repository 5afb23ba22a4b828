"""The discrete ziggurat (docs/sampler-exactness.md §2.6): tables, law and paths.

Statistical tests use alpha = 1e-6 each (``sampling_stats``), fixed ChaCha20Random
seeds and expected probabilities from the exact pmf (``gaussdp.privacy``), never from a
sampler. Table inequalities are checked exactly with ``exp_neg_bounds``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from sampling_stats import Z_CRIT, bin_counts, chi2_gof, chi2_two_sample, make_bins

from gaussdp.privacy import DiscreteGaussianDistribution
from gaussdp.random import ChaCha20Random, RandomSource
from gaussdp.sampling import _ziggurat, discrete_gaussian, discrete_gaussian_scalar
from gaussdp.sampling import vectorized as vec
from gaussdp.sampling._exact import exp_neg_bounds
from gaussdp.sampling._ziggurat import ACCEPTED, REJECTED, TAIL, UNDECIDED, Ziggurat, accepted

SIGMA2S = [Fraction(4096), Fraction(10**5, 3), Fraction(10**6), Fraction(17263857673),
           Fraction(10**12), Fraction(2**52 - 1)]  # fmt: skip


def _fused() -> object:
    pytest.importorskip("numba")
    module = vec._fused_module()
    assert module is not None
    return module


class _Prefixed(RandomSource):
    """Given words first, then a ChaCha20 stream (the exact finish's fresh bits)."""

    def __init__(self, words: np.ndarray, seed: int = 9) -> None:
        self._head = words.astype("<u8").tobytes()
        self._tail = ChaCha20Random(seed)

    def random_bytes(self, n: int) -> bytes:
        head, self._head = self._head[:n], self._head[n:]
        return head + self._tail.random_bytes(n - len(head))


def _draw(zig: Ziggurat, words: np.ndarray, kernel: object, seed: int = 9) -> np.ndarray:
    """The accepted values of one block of ``words`` through numpy's or the compiled block."""
    saved = vec._Kernels.fused
    vec._Kernels.fused = kernel  # type: ignore[assignment]
    try:
        return vec._gaussian_ziggurat(zig, words.size, _Prefixed(words, seed))
    finally:
        vec._Kernels.fused = saved


@pytest.mark.parametrize("sigma2", SIGMA2S, ids=str)
def test_tables_hold_their_inequalities_exactly(sigma2: Fraction) -> None:
    zig = Ziggurat(sigma2)
    t = zig.tables
    scale, w, k_max, precision = t.scale, zig.w, zig.blocks, 128
    assert w * 64 <= math.isqrt(sigma2.numerator // sigma2.denominator) < w * 128
    # the tail's heights halve per super-block: K 2**h w^2 >= sigma2 ln 2 (0.6932 > ln 2)
    assert k_max * (w << zig.h) * w >= Fraction(6932, 10000) * sigma2
    assert Fraction(6932, 10000) > Fraction(math.log(2))
    heights = [int(v) for v in t.heights]
    for k in range(k_max + 1):
        # H_k >= S rho(k w): with hi >= 2**P rho, H_k 2**P >= S hi suffices
        _, hi = exp_neg_bounds(Fraction((k * w) ** 2) / (2 * sigma2), precision)
        assert heights[k] << precision >= scale * hi or (hi <= 1 and heights[k] >= 1)
    for k in range(k_max):
        end = (k + 1) * w - 1  # the block's last magnitude: rho is smallest there
        lo, _ = exp_neg_bounds(Fraction(end * end) / (2 * sigma2), precision)
        threshold = int(t.thresholds[k])
        # T_k <= 2**beta S rho(end) / H_k: T_k H_k 2**P <= 2**beta S lo
        assert (threshold * heights[k]) << precision <= (scale * lo) << zig.beta
        assert t.ratios[k] == float(Fraction(scale, heights[k]))
    # the alias table: entry k is chosen with probability weight_k / 2**26 exactly
    capacity = 1 << 16
    mass = [0] * (k_max + 2)
    for own, other, prob in zip(t.primary.tolist(), t.alias.tolist(), t.prob.tolist(), strict=True):
        mass[own] += prob
        mass[other] += capacity - prob
    assert mass[:k_max] == heights[:k_max]
    assert mass[k_max] == heights[k_max] << (zig.h + 1)  # the tail
    assert sum(mass) == 1 << 26  # with the reject entry's mass, which is >= 0:
    assert mass[k_max + 1] >= 0
    # the compiled block's packed copy of the same table
    packed = t.packed.astype(object)
    assert [int(p) >> 32 for p in packed] == t.prob.tolist()
    assert [(int(p) >> 16) & 0xFFFF for p in packed] == t.primary.tolist()
    assert [int(p) & 0xFFFF for p in packed] == t.alias.tolist()
    both = [(int(s) >> 48, int(s) & (2**48 - 1)) for s in t.slots.tolist()]
    thresholds = t.thresholds.tolist()
    assert both[0::2] == [(k, thresholds[k]) for k in t.primary.tolist()]
    assert both[1::2] == [(k, thresholds[k]) for k in t.alias.tolist()]


def test_the_scaled_exact_comparison_is_the_indicator() -> None:
    # U < weight exp(-x) for U's prefix at 8 bits and a known threshold
    from gaussdp.sampling._exact import LazyUniform

    weight, x = Fraction(3, 4), Fraction(1, 2)
    threshold = 0.75 * math.exp(-0.5)  # 0.4549: prefixes 0..116 below, 117 straddles
    for prefix in range(256):
        u = LazyUniform(prefix, 8, ChaCha20Random(prefix))
        got = u.below_scaled_exp_neg(x, weight)
        if (prefix + 1) / 256 <= threshold:
            assert got
        elif prefix / 256 >= threshold:
            assert not got
    # a rational threshold (x = 0) ends too, on either side of a dyadic point
    assert LazyUniform(1, 1, ChaCha20Random(0)).below_scaled_exp_neg(Fraction(0), Fraction(1))
    assert not LazyUniform(1, 1, ChaCha20Random(0)).below_scaled_exp_neg(
        Fraction(0), Fraction(1, 2)
    )


def _gaussian_cdf(sigma2: Fraction):  # type: ignore[no-untyped-def]
    dist = DiscreteGaussianDistribution(sigma2)
    return lambda k: float(dist.cdf(k))


@pytest.mark.parametrize("sigma2", [Fraction(4096), Fraction(36001, 3)], ids=str)
@pytest.mark.parametrize("compiled", [False, True])
def test_ziggurat_matches_exact_pmf_per_integer(sigma2: Fraction, compiled: bool) -> None:
    # w = 1 here: every magnitude is a block of its own, so a wrong height, threshold or
    # wedge decision shows in its own bin
    kernel = _fused() if compiled else None
    zig = Ziggurat(sigma2)
    assert zig.w == 1
    n = 400_000
    sigma = math.sqrt(float(sigma2))
    edges, probs = make_bins(list(range(-int(5 * sigma), int(5 * sigma) + 1)),
                             _gaussian_cdf(sigma2), n)  # fmt: skip
    sample = _draw(zig, ChaCha20Random(31).words(n + n // 50), kernel)[:n]
    assert sample.size == n
    stat, crit = chi2_gof(bin_counts(sample, edges), probs)
    assert stat < crit, (stat, crit)


@pytest.mark.parametrize("sigma2", [Fraction(10**6), Fraction(17263857673)], ids=str)
def test_ziggurat_matches_exact_pmf_within_blocks(sigma2: Fraction) -> None:
    # w = 8 and 2048: the residue of |x| mod w (and the sign) against the exact pmf's,
    # and coarse bins of the whole range (the block level)
    zig = Ziggurat(sigma2)
    n = 400_000
    sample = _draw(zig, ChaCha20Random(47).words(n + n // 50), _fused())[:n]
    dist = DiscreteGaussianDistribution(sigma2)
    sigma = math.sqrt(float(sigma2))
    edges, probs = make_bins(sorted({round(sigma * z / 16) for z in range(-96, 97)}),
                             _gaussian_cdf(sigma2), n)  # fmt: skip
    stat, crit = chi2_gof(bin_counts(sample, edges), probs)
    assert stat < crit, (stat, crit)
    groups = min(zig.w, 64)  # residues mod w grouped into 64 classes of w / 64
    residue = (np.abs(sample) % zig.w) * groups // zig.w
    reach = int(9 * sigma)
    xs = np.arange(-reach, reach + 1)
    pmf = np.array([float(dist.pmf(int(x))) for x in xs]) if reach < 50_000 else None
    if pmf is None:  # sum the pmf by residue from float rho (a test oracle, 1e-12 accurate)
        rho = np.exp(-(xs.astype(np.float64) ** 2) / (2 * float(sigma2)))
        pmf = rho / rho.sum()
    expected = np.bincount((np.abs(xs) % zig.w) * groups // zig.w, weights=pmf, minlength=groups)
    counts = np.bincount(residue, minlength=groups)
    stat, crit = chi2_gof(counts, expected / expected.sum())
    assert stat < crit, (stat, crit)


def test_a_ziggurat_with_a_heavy_tail_matches_the_exact_pmf() -> None:
    # K = 62 blocks reach about sigma / 2: the tail entry (exact, fresh J and offset)
    # carries most of the candidates; chi-square against the exact pmf
    sigma2 = Fraction(5000)
    zig = Ziggurat(sigma2, bucket_bits=6)
    assert zig.blocks == 62
    assert zig.h > 0
    words = ChaCha20Random(5).words(30_000)
    values, codes, pending = zig.block(words, lambda p: np.exp(p, out=p))
    assert pending >= np.count_nonzero(codes == TAIL) > 10_000
    zig.finish(words, values, codes, ChaCha20Random(6))
    sample = accepted(values, codes)
    n = sample.size
    sigma = math.sqrt(float(sigma2))
    edges, probs = make_bins(sorted({round(sigma * z / 8) for z in range(-40, 41)}),
                             _gaussian_cdf(sigma2), n)  # fmt: skip
    stat, crit = chi2_gof(bin_counts(sample, edges), probs)
    assert stat < crit, (stat, crit)


@pytest.mark.parametrize("sigma2", [Fraction(10**5, 3), Fraction(10**6), Fraction(10**12)], ids=str)
def test_fast_decisions_are_the_exact_decisions(sigma2: Fraction) -> None:
    # The reference path: every lane's acceptance decided by the exact comparison
    # (§2.6 step 3) from the same prefix. Every lane the fast path decided must get the
    # same decision (both are the indicator of the same real U).
    zig = Ziggurat(sigma2)
    words = ChaCha20Random(77).words(4000)
    values, codes, _ = zig.block(words, lambda p: np.exp(p, out=p))
    rng = ChaCha20Random(78)
    wedge_seen = 0
    for i in range(words.size):
        entry, negative, u, _ = zig.fields(int(words[i]))
        if (
            int(codes[i]) in (UNDECIDED, TAIL)
            or entry > zig.blocks
            or (negative and u + entry == 0)
        ):
            continue  # not decided by the fast path, or the reject entry, or a restart
        exact, magnitude = zig.decide_exactly(int(words[i]), False, rng)
        assert magnitude == abs(int(values[i]))
        assert exact == (int(codes[i]) == ACCEPTED), i
        wedge_seen += int(int(words[i]) & ((1 << zig.beta) - 1)) >= int(
            zig.tables.thresholds[zig.fields(int(words[i]))[0]]
        )
    assert wedge_seen > 0  # the float bracket was exercised, not only the quick accept


@pytest.mark.parametrize("sigma2", [Fraction(10**5, 3), Fraction(17263857673)], ids=str)
def test_ziggurat_agrees_with_the_scalar_reference(sigma2: Fraction) -> None:
    # two-sample chi-square: the ziggurat against CKS Alg 3 line by line (reference.py)
    n_ref = 3000
    reference = np.array([discrete_gaussian_scalar(sigma2, rng=ChaCha20Random(1000 + i))
                          for i in range(n_ref)])  # fmt: skip
    fast = discrete_gaussian(sigma2, 60_000, rng=ChaCha20Random(3))
    sigma = math.sqrt(float(sigma2))
    edges, _ = make_bins(sorted({round(sigma * z / 4) for z in range(-12, 13)}),
                         _gaussian_cdf(sigma2), n_ref)  # fmt: skip
    stat, crit = chi2_two_sample(bin_counts(fast, edges), bin_counts(reference, edges))
    assert stat < crit, (stat, crit)


def _crafted_words(zig: Ziggurat, rng: ChaCha20Random) -> np.ndarray:
    """Random words, and words aimed at the tail entry, the reject entry and the
    wedge bracket's edges (m next to 2**beta S rho(x) / H_k)."""
    t = zig.tables
    words = [int(w) for w in rng.words(600)]
    shift_v, shift_s = 48 - zig.b, zig.beta + zig.e
    for target in (zig.blocks, zig.blocks + 1):  # tail, reject
        for bucket in np.flatnonzero((t.primary == target) & (t.prob > 0)).tolist()[:3]:
            words.append((bucket << (64 - zig.b)) | (1 << shift_s) | 12345)
        for bucket in np.flatnonzero((t.alias == target) & (t.prob < 1 << 16)).tolist()[:3]:
            words.append((bucket << (64 - zig.b)) | (0xFFFF << shift_v) | 777)
    for word in rng.words(200).tolist():
        entry, _, u, _ = zig.fields(int(word))
        if entry >= zig.blocks:
            continue
        x = entry * zig.w + u
        xf = float(x)
        big = math.exp(xf * xf * -zig.inv_two_sigma2_f) * float(t.ratios[entry])
        edge = int(big * (1 << zig.beta))
        for m in (edge - 1, edge, edge + 1):
            if 0 <= m < 1 << zig.beta:
                words.append((int(word) >> zig.beta << zig.beta) | m)
    return np.array(words, dtype=np.uint64)


@pytest.mark.parametrize("sigma2", SIGMA2S, ids=str)
def test_compiled_numpy_and_one_at_a_time_paths_agree(sigma2: Fraction) -> None:
    zig = Ziggurat(sigma2)
    fused = _fused()
    words = _crafted_words(zig, ChaCha20Random(11))
    numpy_out = _draw(zig, words, None)
    fused_out = _draw(zig, words, fused)
    np.testing.assert_array_equal(fused_out, numpy_out)
    one_at_a_time = zig.few(words.size, words.size, _Prefixed(words))
    assert one_at_a_time == numpy_out.tolist()
    _, codes, _ = zig.block(words, lambda p: np.exp(p, out=p))
    assert np.count_nonzero(codes == UNDECIDED) > 0
    assert np.count_nonzero(codes == TAIL) > 0
    assert np.count_nonzero(codes == REJECTED) > 0
    # the compiled block's codes on a clean block equal numpy's
    plain = ChaCha20Random(12).words(5000)
    want_values, want, _ = zig.block(plain, lambda p: np.exp(p, out=p))
    codes_out, out = np.empty(5000, dtype=np.uint8), np.empty(5000, dtype=np.int64)
    t = zig.tables
    count = fused.ziggurat_block(plain, zig.b, zig.e, zig.beta, zig.blocks, t.packed,  # type: ignore[attr-defined]
                                 t.slots, t.ratios, zig.inv_two_sigma2_f,
                                 codes_out, out)  # fmt: skip
    signed = zig.signed(plain, codes_out)  # codes the restarted lanes as the numpy block does
    np.testing.assert_array_equal(codes_out, want)
    np.testing.assert_array_equal(signed, want_values)
    if count >= 0:
        np.testing.assert_array_equal(out[:count], accepted(want_values, want))


@pytest.mark.parametrize("sigma2", [Fraction(4096), Fraction(10**6), Fraction(2**52 - 1)], ids=str)
def test_acceptance_lower_bound_holds_and_is_tight(sigma2: Fraction) -> None:
    zig = Ziggurat(sigma2)
    m = 200_000
    got = _draw(zig, ChaCha20Random(19).words(m), None).size
    a = zig.acceptance
    assert (got - m * a) / math.sqrt(m * a * (1 - a)) > -Z_CRIT  # z-test, alpha = 1e-6
    assert got / m < a + 5 * math.sqrt(a * (1 - a) / m)  # tight: about 0.994-0.997
    assert vec._gaussian_plan(sigma2).acceptance == a  # what FixedWork sizes batches with


def test_the_ziggurat_draws_only_in_its_range() -> None:
    assert vec._gaussian_plan(Fraction(4095)).ziggurat is None
    assert vec._gaussian_plan(Fraction(4096)).ziggurat is not None
    assert vec._gaussian_plan(Fraction(2**52 - 1)).ziggurat is not None
    assert vec._gaussian_plan(Fraction(2**52)).ziggurat is None
    assert _ziggurat.SIGMA2_MIN == 4096
    assert _ziggurat.SIGMA2_MAX == 2**52
