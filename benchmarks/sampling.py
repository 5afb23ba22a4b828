"""Samples per second of exact discrete Gaussian samplers, gaussdp against its peers.

Run with ``python benchmarks/sampling.py [--seconds 1.0]``. For each sigma in
{1, 10, 10**3, 10**6} and for sigma**2 = 10**100 it prints one table row per
sampler:

- gaussdp vectorised, SystemRandom (the default, OS CSPRNG) and ChaCha20Random;
- gaussdp scalar reference (CKS Alg 1-3 on Fractions, as in the paper's code);
- numpy's float normal (insecure and unsafe for privacy; the speed ceiling);
- OpenDP's integer discrete Gaussian (``opendp``, the ``bench`` extra) if installed.

Each figure is the best of several timed runs of at least ``--seconds`` in total;
the ratio column compares with OpenDP (or with the scalar reference when OpenDP
is absent) and the last column with numpy's float normal. Numbers are only
comparable within one run on an otherwise idle machine. Peak memory of the
vectorised sampler is reported once (``tracemalloc``, 10**6 samples at sigma 10**3).
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from gaussdp.random import ChaCha20Random, SystemRandom
from gaussdp.sampling import discrete_gaussian, discrete_gaussian_scalar

Sampler = Callable[[int], object]


def _rate(draw: Sampler, batch: int, seconds: float) -> float:
    """Best samples/s over repeated calls of ``draw(batch)`` lasting ``seconds`` in all."""
    draw(min(batch, 1000))  # warm up
    best = 0.0
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        draw(batch)
        elapsed = time.perf_counter() - t0
        best = max(best, batch / elapsed)
        if time.perf_counter() - start > seconds:
            return best


def _opendp_sampler(sigma: float) -> Sampler | str:
    try:
        import opendp.prelude as dp
    except ImportError:
        return "not installed (pip install 'gaussdp[bench]')"
    dp.enable_features("contrib")
    if sigma > 1e9:
        return "n/a: integer outputs limited to 32/64-bit"
    measurement = dp.m.make_gaussian(
        dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=float), scale=sigma
    )

    def draw(n: int) -> object:
        return measurement([0] * n)

    return draw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    parser.add_argument(
        "--timing",
        action="store_true",
        help="instead: how much a batch's running time depends on the sampled values",
    )
    args = parser.parse_args()
    if args.timing:
        timing_dependence()
        return
    seconds = args.seconds

    cases: list[tuple[str, Fraction, float]] = [
        ("sigma=1", Fraction(1), 1.0),
        ("sigma=10", Fraction(100), 10.0),
        ("sigma=1e3", Fraction(10**6), 1e3),
        ("sigma=1e6", Fraction(10**12), 1e6),
        ("sigma2=1e100", Fraction(10**100), 1e50),
    ]
    system, chacha = SystemRandom(), ChaCha20Random(0)
    generator = np.random.default_rng()
    header = f"{'case':<14}{'sampler':<34}{'samples/s':>14}{'vs peer':>10}{'vs float':>10}"
    print(header)
    print("-" * len(header))
    for label, sigma2, sigma in cases:
        big = sigma2 > 10**40
        vec_batch = 100_000 if big else 1_000_000
        rows: list[tuple[str, float | str]] = [
            (
                "gaussdp vectorised, SystemRandom",
                _rate(lambda n, s=sigma2: discrete_gaussian(s, n, rng=system), vec_batch, seconds),
            ),
            (
                "gaussdp vectorised, ChaCha20",
                _rate(lambda n, s=sigma2: discrete_gaussian(s, n, rng=chacha), vec_batch, seconds),
            ),
            (
                "gaussdp scalar reference (CKS)",
                _rate(
                    lambda n, s=sigma2: [discrete_gaussian_scalar(s, system) for _ in range(n)],
                    2_000,
                    seconds,
                ),
            ),
            (
                "numpy float normal (unsafe)",
                _rate(lambda n, sd=sigma: generator.normal(0.0, sd, n), 1_000_000, seconds),
            ),
        ]
        peer = _opendp_sampler(sigma)
        if isinstance(peer, str):
            rows.append(("OpenDP discrete Gaussian", peer))
        else:
            rows.append(("OpenDP discrete Gaussian", _rate(peer, 100_000, seconds)))
        values = dict(rows)
        reference = values["OpenDP discrete Gaussian"]
        if isinstance(reference, str):
            print(f"{label:<14}('vs peer' below is against the scalar reference)")
            reference = values["gaussdp scalar reference (CKS)"]
        ceiling = values["numpy float normal (unsafe)"]
        for name, value in rows:
            if isinstance(value, str):
                print(f"{label:<14}{name:<34}{value:>34}")
                continue
            assert isinstance(reference, float)
            assert isinstance(ceiling, float)
            print(
                f"{label:<14}{name:<34}{value:>14.3g}"
                f"{value / reference:>9.1f}x{value / ceiling:>9.2f}x"
            )
        print()
    tracemalloc.start()
    discrete_gaussian(10**6, 1_000_000, rng=chacha)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"peak traced memory, 10**6 samples at sigma 1e3: {peak / 2**20:.1f} MiB")
    print("(the 8 MiB output array included; the working set is one block of 8192 candidates)")


def _dependence(times: list[float], stat: list[float]) -> tuple[float, float, float]:
    """Rank correlation of time with ``stat``, median-time gap top vs bottom decile, spread.

    Medians and ranks make the figures robust to the scheduler's outliers on a shared
    machine; the spread is the interquartile range over the median time.
    """
    t = np.asarray(times)
    x = np.asarray(stat)
    rank_t = np.argsort(np.argsort(t, kind="stable"), kind="stable")
    rank_x = np.argsort(np.argsort(x, kind="stable"), kind="stable")
    corr = float(np.corrcoef(rank_t, rank_x)[0, 1])
    order = np.argsort(x, kind="stable")
    tenth = len(x) // 10
    low, high = np.median(t[order[:tenth]]), np.median(t[order[-tenth:]])
    q1, med, q3 = np.percentile(t, [25, 50, 75])
    return corr, float((high - low) / med), float((q3 - q1) / med)


def timing_dependence(repeats: int = 5000) -> None:
    """Time many small batches and relate each batch's time to its sampled values.

    The statistic is the mean |value| of the batch (for one sample: |value|). A
    timing side channel shows as a rank correlation between time and the
    statistic and as a gap between the median times of the batches in its top
    and bottom deciles. ``FixedWork`` runs a data-independent number of candidates.
    """
    from gaussdp.sampling import FixedWork

    rng = ChaCha20Random(1)
    sigma2 = Fraction(10**4)
    configs: list[tuple[str, int, Callable[[int], list[int]]]] = [
        ("scalar reference, 1 sample", 1, lambda n: [discrete_gaussian_scalar(sigma2, rng)]),
        (
            "vectorised, variable work, 1 sample",
            1,
            lambda n: discrete_gaussian(sigma2, n, rng=rng).tolist(),
        ),
        (
            "vectorised, FixedWork, 1 sample",
            1,
            lambda n: discrete_gaussian(sigma2, n, rng=rng, work=FixedWork()).tolist(),
        ),
        (
            "vectorised, variable work, 1000 samples",
            1000,
            lambda n: discrete_gaussian(sigma2, n, rng=rng).tolist(),
        ),
        (
            "vectorised, FixedWork, 1000 samples",
            1000,
            lambda n: discrete_gaussian(sigma2, n, rng=rng, work=FixedWork()).tolist(),
        ),
    ]
    print(f"sigma2 = {sigma2}, {repeats} timed batches per row (ChaCha20Random)")
    header = f"{'sampler':<42}{'rank corr':>10}{'top-bottom':>12}{'IQR/med':>9}{'median':>10}"
    print(header)
    print("-" * len(header))
    for name, n, draw in configs:
        for _ in range(50):
            draw(n)  # warm up
        times, stats = [], []
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            values = draw(n)
            times.append(float(time.perf_counter_ns() - t0))
            stats.append(float(np.mean(np.abs(np.asarray(values, dtype=np.float64)))))
        corr, gap, cv = _dependence(times, stats)
        median_us = float(np.median(times)) / 1e3
        print(f"{name:<42}{corr:>10.3f}{gap:>11.1%}{cv:>9.2f}{median_us:>8.1f}us")


if __name__ == "__main__":
    main()
