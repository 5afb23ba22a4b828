"""Samplers called from several threads on one shared source.

A source shared by threads must never hand the same bytes to two of them; for the
samplers that means no crash and no repeated noise. At sigma2 = 10**30 two independent
draws coincide with probability about 1 / (sqrt(4 pi) * 10**15) per pair, so among the
5.5 * 10**5 outputs of a test below a repeat by chance has probability below 10**-4 (the
false-alarm rate); noise built from repeated words repeats whole runs of outputs. The pooled outputs
at sigma2 = 100 are also tested against the exact pmf (chi-square, alpha = 1e-6).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from sampling_stats import bin_counts, chi2_gof, make_bins

from gaussdp.mechanisms import DiscreteGaussian
from gaussdp.privacy import DiscreteGaussianDistribution
from gaussdp.random import ChaCha20Random, RandomSource, SystemRandom, check_rng
from gaussdp.sampling import discrete_gaussian, discrete_gaussian_scalar

Draw = Callable[[RandomSource, int], npt.NDArray[np.generic]]


def _in_threads(draw: Draw, source: RandomSource, threads: int, calls: int) -> np.ndarray:
    barrier = threading.Barrier(threads)
    results: list[list[npt.NDArray[np.generic]]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def work(index: int) -> None:
        barrier.wait()
        try:
            for k in range(calls):
                results[index].append(np.asarray(draw(source, (index + k) % 4)).ravel())
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert not errors, errors
    return np.concatenate([np.concatenate(r) for r in results])


_HUGE = 10**30


def _vectorised(source: RandomSource, k: int) -> npt.NDArray[np.generic]:
    return discrete_gaussian(_HUGE, (1, 10, 1000, 5000)[k], rng=source)


def _mechanism(source: RandomSource, k: int) -> npt.NDArray[np.generic]:
    mechanism = DiscreteGaussian(sigma2=_HUGE)
    if k == 0:
        return np.array([mechanism.sample(rng=source)])
    return np.asarray(mechanism.sample((10, 1000, 5000)[k - 1], rng=source))


def _scalar(source: RandomSource, k: int) -> npt.NDArray[np.generic]:
    return np.array([discrete_gaussian_scalar(_HUGE, rng=source) for _ in range(k + 1)])


@pytest.mark.slow
@pytest.mark.parametrize("draw", [_vectorised, _mechanism, _scalar], ids=lambda f: f.__name__)
@pytest.mark.parametrize("make", [lambda: ChaCha20Random(3), SystemRandom, lambda: check_rng(None)])
def test_samplers_sharing_a_source_between_threads_never_repeat_noise(
    draw: Draw, make: Callable[[], RandomSource]
) -> None:
    calls = 10 if draw is _scalar else 60
    values = _in_threads(draw, make(), threads=6, calls=calls)
    ints = np.asarray(values, dtype=np.int64)
    assert ints.size == values.size
    ints.sort()
    assert not np.any(ints[1:] == ints[:-1])


@pytest.mark.slow
def test_pooled_threaded_draws_follow_the_exact_pmf() -> None:
    sigma2 = Fraction(100)
    source = ChaCha20Random(4)
    values = _in_threads(
        lambda rng, k: discrete_gaussian(sigma2, (1, 17, 3000, 20000)[k], rng=rng),
        source,
        threads=4,
        calls=40,
    ).astype(np.int64)
    edges, probs = make_bins(
        list(range(-40, 41, 2)),
        lambda e: float(DiscreteGaussianDistribution(sigma2).cdf(e)),
        values.size,
    )
    stat, critical = chi2_gof(bin_counts(values, edges), probs)
    assert stat < critical
