"""The discrete Gaussian for t > 2**26 (X = S G + Lo, docs/sampler-exactness.md §2.3).

Statistical tests use alpha = 1e-6 each (critical values in ``sampling_stats``), fixed
ChaCha20Random seeds and expected probabilities from the exact pmf in ``gaussdp.privacy``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction

import numpy as np
import pytest
from sampling_stats import Z_CRIT, bin_counts, chi2_gof, make_bins, moment_z_scores

from gaussdp.privacy import DiscreteGaussianDistribution
from gaussdp.random import ChaCha20Random
from gaussdp.sampling import BigIntArray, FixedWork, discrete_gaussian
from gaussdp.sampling import _limbs as vec_limbs
from gaussdp.sampling import vectorized as vec


@pytest.fixture
def fresh_plans() -> Iterator[None]:
    """Plans are cached per parameter: rebuild them under (and after) a monkeypatch."""
    vec._gaussian_plan.cache_clear()
    vec._cached_parameter.cache_clear()
    yield
    vec._gaussian_plan.cache_clear()
    vec._cached_parameter.cache_clear()


def _chi2_at(sigma2: int, sample: np.ndarray) -> tuple[float, float]:
    sigma = math.isqrt(sigma2)
    edges, probs = make_bins(
        sorted({sigma * z // 8 for z in range(-40, 41)}),
        lambda k: float(DiscreteGaussianDistribution(sigma2).cdf(k)),
        len(sample),
    )
    return chi2_gof(bin_counts(sample, edges), probs)


@pytest.mark.parametrize("tau_bits", [2, 21], ids=["tau~3", "tau~2^20"])
def test_huge_path_matches_exact_pmf(
    monkeypatch: pytest.MonkeyPatch, fresh_plans: None, tau_bits: int
) -> None:
    # tau = t / S in [2**(b-1), 2**b): with b = 2 about a third of the candidates reject
    # their first Lo (the truncated-geometric loop of _finish_low); b = 21 is the default.
    monkeypatch.setattr(vec, "_HUGE_TAU_BITS", tau_bits)
    sigma2 = 10**18
    n = 60_000
    sample = discrete_gaussian(sigma2, n, rng=ChaCha20Random(201))
    assert sample.dtype == np.int64
    stat, crit = _chi2_at(sigma2, sample)
    assert stat < crit, (stat, crit)  # chi-square, alpha = 1e-6
    z = moment_z_scores(
        sample,
        DiscreteGaussianDistribution(sigma2).var(),
        float(DiscreteGaussianDistribution(sigma2).pmf(0)),
    )
    assert max(map(abs, z)) < Z_CRIT, z  # z-tests, alpha = 1e-6 each
    # The low bits (Lo) are uniform to the eye of a parity test, |z| < 4.89 (alpha = 1e-6).
    odd = int(np.count_nonzero(sample & 1))
    assert abs(odd - n / 2) / math.sqrt(n / 4) < Z_CRIT


def test_default_object_output_at_sigma2_1e100_matches_exact_pmf() -> None:
    # The default output at sigma2 = 10**100: Python ints built by to_object's pickled
    # two's complement. Chi-square on 80 bins against the exact cdf, and z-tests of the
    # sign and of the lowest bit (the ends of the conversion), alpha = 1e-6 each.
    sigma2, n = 10**100, 60_000
    sample = discrete_gaussian(sigma2, n, rng=ChaCha20Random(209))
    assert sample.dtype == object
    assert all(type(v) is int for v in sample.tolist())
    stat, crit = _chi2_at(sigma2, sample)
    assert stat < crit, (stat, crit)
    negative = sum(v < 0 for v in sample.tolist())
    odd = sum(v & 1 for v in sample.tolist())
    for count in (negative, odd):
        assert abs(count - n / 2) / math.sqrt(n / 4) < Z_CRIT, count


def test_huge_path_one_draw_at_a_time(monkeypatch: pytest.MonkeyPatch, fresh_plans: None) -> None:
    # Single draws take the few-outputs form (§4.1); tau ~ 3 exercises its Lo rejection loop.
    monkeypatch.setattr(vec, "_HUGE_TAU_BITS", 2)
    sigma2, n = 10**18, 12_000
    rng = ChaCha20Random(208)
    sample = np.array([int(discrete_gaussian(sigma2, rng=rng)) for _ in range(n)])
    stat, crit = _chi2_at(sigma2, sample)
    assert stat < crit, (stat, crit)  # chi-square, alpha = 1e-6


def test_huge_path_exact_resolution_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # Widen the float bounds so that every G and every acceptance is decided exactly (§3).
    monkeypatch.setattr(vec, "_ETA_REL", 1.0)
    monkeypatch.setattr(vec, "_BRACKET_REL", 4.0)
    sigma2 = 10**18
    sample = discrete_gaussian(sigma2, 500, rng=ChaCha20Random(202))  # ~10 ms per draw
    stat, crit = _chi2_at(sigma2, sample)
    assert stat < crit, (stat, crit)  # chi-square, alpha = 1e-6


@pytest.mark.parametrize(
    "sigma2",
    [10**100, Fraction(10**60 + 7, 3), 2**81 + 1, 10**600],
    ids=["1e100", "1e60/3", "2^81+1", "1e600"],
)
@pytest.mark.parametrize("size", [1, 7, 20_000])
def test_limbs_are_the_object_values_and_use_the_same_words(
    sigma2: Fraction | int, size: int
) -> None:
    a, b = ChaCha20Random(size), ChaCha20Random(size)
    objects = discrete_gaussian(sigma2, size, rng=a)
    limbs = discrete_gaussian(sigma2, size, rng=b, big_ints="limbs")
    assert isinstance(limbs, BigIntArray)
    assert objects.dtype == object
    assert all(type(v) is int for v in objects.tolist())
    assert limbs.tolist() == objects.tolist()
    assert np.array_equal(a.words(4), b.words(4))  # the streams continue at the same word
    assert not limbs.magnitude.flags.writeable


def test_limbs_with_fixed_work_and_shapes() -> None:
    work = FixedWork()
    one = discrete_gaussian(10**100, (3, 2), rng=ChaCha20Random(203), work=work, big_ints="limbs")
    two = discrete_gaussian(10**100, (3, 2), rng=ChaCha20Random(203), work=work)
    assert isinstance(one, BigIntArray)
    assert one.shape == (3, 2)
    assert one.magnitude.shape == (3, 2, 4)
    assert one.tolist() == two.tolist()
    # Below 2**80 the output is int64 whatever big_ints says.
    small = discrete_gaussian(10**18, 5, rng=ChaCha20Random(204), big_ints="limbs")
    assert isinstance(small, np.ndarray)
    assert small.dtype == np.int64


def test_limbs_huge_sigma_moments() -> None:
    n, sigma2 = 40_000, 10**100
    sample = discrete_gaussian(sigma2, n, rng=ChaCha20Random(205), big_ints="limbs")
    values = np.asarray(sample)
    scale = 10**50
    z = moment_z_scores(
        values,
        DiscreteGaussianDistribution(sigma2).var(),
        float(DiscreteGaussianDistribution(sigma2).pmf(0)),
        scale,
    )
    assert max(map(abs, z)) < Z_CRIT, z  # z-tests, alpha = 1e-6 each
    # Lowest limb: parity balance of the low bits, |z| < 4.89 (alpha = 1e-6).
    odd = int(np.count_nonzero(sample.magnitude[:, 0] & np.uint64(1)))
    assert abs(odd - n / 2) / math.sqrt(n / 4) < Z_CRIT


def test_big_ints_is_validated_before_drawing() -> None:
    rng = ChaCha20Random(206)
    with pytest.raises(ValueError, match=r"big_ints must be 'object' or 'limbs', got 'int'"):
        discrete_gaussian(10**100, 3, rng=rng, big_ints="int")  # type: ignore[call-overload]
    assert np.array_equal(rng.words(2), ChaCha20Random(206).words(2))


# --- BigIntArray --------------------------------------------------------------------------


def _from_ints(values: list[int], limbs: int) -> BigIntArray:
    negative = np.array([v < 0 for v in values], dtype=np.bool_)
    magnitude = np.array(
        [[(abs(v) >> (64 * j)) & (2**64 - 1) for j in range(limbs)] for v in values],
        dtype=np.uint64,
    ).reshape(len(values), limbs)
    return BigIntArray(negative, magnitude)


def test_big_int_array_round_trips_python_ints() -> None:
    rng = ChaCha20Random(207)
    values = [0, 1, -1, 2**64 - 1, -(2**64), 2**191 + 2**64 - 1, -(2**192 - 1)]
    values += [int(rng.randbits(190)) - 2**189 for _ in range(200)]
    big = _from_ints(values, 3)
    assert big.tolist() == values
    assert big.shape == (len(values),)
    assert len(big) == len(values)
    assert big.ndim == 1
    as_float = np.asarray(big, dtype=np.float64)
    assert as_float.tolist() == [float(v) for v in values]  # correctly rounded
    grid = BigIntArray(
        np.zeros((2, 3), dtype=np.bool_), np.arange(6, dtype=np.uint64).reshape(2, 3, 1)
    )
    assert grid.tolist() == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize("limbs", [1, 2, 4, 33])
def test_big_int_array_builds_every_width_sign_and_carry(limbs: int) -> None:
    """to_object's pickled two's complement, checked against sums of shifted limbs: the
    carry of ~x + 1 across zero limbs, the extremes of each width, more than one block
    (_PICKLE_BLOCK values each) and LONG4 records past 255 bytes (33 limbs)."""
    top = 2 ** (64 * limbs) - 1
    edges = [0, 1, -1, 2**63, -(2**63), 2**64 - 1, -(2**64 - 1), top, -top, -(top // 2 + 1)]
    edges += [sign * 2 ** (64 * j) for j in range(limbs) for sign in (1, -1)]
    rng = ChaCha20Random(208)
    bits = [1 + rng.randbelow(64 * limbs) for _ in range(300)]
    values = edges + [rng.randbits(b) * (-1) ** rng.randbits(1) for b in bits]
    values += [0] * vec_limbs._PICKLE_BLOCK + [-5]  # a block of zeros, then a small one
    big = _from_ints(values, limbs)
    expected = [
        (-1) ** int(sign) * sum(int(word) << (64 * j) for j, word in enumerate(row))
        for sign, row in zip(big.negative.tolist(), big.magnitude, strict=True)
    ]
    assert expected == values
    objects = big.to_object()
    assert objects.dtype == object
    assert all(type(v) is int for v in objects.tolist())
    assert objects.tolist() == values


@pytest.mark.parametrize("limbs", [1, 3])
def test_big_int_array_negative_zero_is_zero(limbs: int) -> None:
    # A negative zero (sign set, magnitude 0; only _owned can build one): the carry of
    # ~0 + 1 runs through every limb into the sign word, giving 0, not -2**(64*limbs).
    magnitude = np.zeros((2, limbs), dtype=np.uint64)
    magnitude[1, 0] = 1
    big = BigIntArray._owned(np.array([True, True]), magnitude)
    assert big.to_object().tolist() == [0, -1]


def test_big_int_array_is_immutable_and_copies_its_input() -> None:
    negative = np.array([False])
    magnitude = np.array([[3]], dtype=np.uint64)
    big = BigIntArray(negative, magnitude)
    magnitude[0, 0] = 4
    assert big.tolist() == [3]
    with pytest.raises(ValueError, match="read-only"):
        big.magnitude[0, 0] = 5


@pytest.mark.parametrize(
    ("negative", "magnitude", "error", "message"),
    [
        ([False], np.array([[1]], dtype=np.uint64), TypeError, "negative must be a numpy array"),
        (np.array([False]), np.array([[1]]), TypeError, "magnitude must be a numpy array"),
        (np.array([False]), np.array([1], dtype=np.uint64), ValueError, "must be of shape"),
        (np.array([False]), np.empty((1, 0), np.uint64), ValueError, "at least one limb"),
        (np.array([True]), np.array([[0]], dtype=np.uint64), ValueError, "False where"),
    ],
)
def test_big_int_array_refuses_bad_parts(
    negative: object, magnitude: object, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        BigIntArray(negative, magnitude)  # type: ignore[arg-type]
