"""CPU cost of exact discrete Gaussian samplers by batch size, gaussdp against its peers.

Run with ``python benchmarks/sampling.py [--rounds 5] [--min-cpu 0.02]`` (peers are
found if importable: ``pip install 'gaussdp[bench]'`` for OpenDP; diffprivlib is not in
an extra, it needs ``scikit-learn<1.7``). For sigma**2 in {1, 10**6, 10**18, 10**100}
(small, moderate, the int64 end of the huge-scale path, huge) and batch sizes 1, 10,
10**3 and 10**6 it measures:

- gaussdp, the default source (``rng=None``: the per-process SystemRandom) and
  ChaCha20Random; for sigma**2 = 10**100 also ``big_ints="limbs"`` (exact values as a
  BigIntArray of 64-bit limbs, no Python ints built);
- gaussdp scalar reference (CKS Alg 1-3 on Fractions, as in the paper's code);
- numpy's float normal (insecure and unsafe for privacy; the speed ceiling);
- OpenDP's integer discrete Gaussian (``make_gaussian`` on integers) and diffprivlib's
  ``GaussianDiscrete`` (scalar calls; scale matched through its public epsilon).

Peers and the scalar reference run batches up to 10**3 only (10**6 would take minutes).
Time is CPU time of this process (``time.process_time``), not wall time, so other jobs
on the machine disturb it less. Measurements are interleaved: each round measures every
(case, sampler, batch) once, in the same order, repeating the call until at least
``--min-cpu`` seconds of CPU have been spent; the table gives the median over the
rounds and the range (min-max) across them. Cells are microseconds per call for
batches of 1 and 10, and samples per second for 10**3 and 10**6. A second table gives
each peer's median time over gaussdp's (default source): above 1 gaussdp is faster,
below 1 (marked "loses") the peer is. Last come issue 10's two figures against their
targets: a scalar draw with the default source (n = 1, every sigma**2; <= 30 us) and
n = 10**6 at sigma**2 = 10**100 (object and limb output; >= 5e6 samples/s). Numbers
are only comparable within one run.
``--laplace`` measures the discrete Laplace sampler instead (scales 10**3, 10**9 and
10**50/7, gaussdp only). ``--worker`` measures instead the draw of DP-SGD's noise
worker (``NoiseStream``: one vector of 101,770 coordinates at the lattice sigma**2 of
noise multiplier 1 and clip 1), CPU ns per value with each kernel available here:
numpy's, torch's log and exp (where torch is installed), and the compiled block
(where numba is installed; docs/sampler-exactness.md §2.5). Peak memory of the
vectorised sampler is reported once (``tracemalloc``, 10**6 samples at sigma 10**3).
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from gaussdp.privacy import DiscreteGaussianDistribution
from gaussdp.random import ChaCha20Random
from gaussdp.sampling import discrete_gaussian, discrete_gaussian_scalar, discrete_laplace

Sampler = Callable[[int], object]
BATCHES = (1, 10, 1000, 1_000_000)
SLOW_MAX = 1000  # the scalar reference and the peers are not run on larger batches
OURS = "gaussdp, default source"


def _cpu_per_call(draw: Sampler, batch: int, min_cpu: float) -> float:
    """CPU seconds per call of ``draw(batch)``, over calls lasting ``min_cpu`` at least."""
    calls = 0
    start = time.process_time()
    while True:
        draw(batch)
        calls += 1
        spent = time.process_time() - start
        if spent >= min_cpu:
            return spent / calls


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


def _diffprivlib_sampler(sigma: float) -> Sampler | str:
    """diffprivlib's GaussianDiscrete with scale sigma, through its epsilon at delta = 1e-5."""
    try:
        from diffprivlib.mechanisms import GaussianDiscrete
    except ImportError:
        return "not installed (pip install diffprivlib 'scikit-learn<1.7')"
    if sigma > 10:
        return "n/a: > 1 ms per draw from sigma ~ 10**3 on (float CKS loops)"
    # diffprivlib takes (epsilon, delta), not a scale: use the epsilon at which
    # N_Z(0, sigma**2) is exactly (epsilon, 1e-5)-DP (CKS Thm 7), found by bisection.
    lo, hi = 1e-6, 100.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if DiscreteGaussianDistribution(Fraction(sigma * sigma)).delta(mid) > 1e-5:
            lo = mid
        else:
            hi = mid
    mechanism = GaussianDiscrete(epsilon=hi, delta=1e-5)

    def draw(n: int) -> object:
        return [mechanism.randomise(0) for _ in range(n)]

    return draw


def _cell(per_call: list[float], batch: int) -> str:
    """Median and range over rounds: µs per call (small batches) or samples/s."""
    values = sorted(t * 1e6 if batch <= 10 else batch / t for t in per_call)
    return f"{_number(statistics.median(values))} ({_number(values[0])}-{_number(values[-1])})"


def _number(x: float) -> str:
    """About three significant digits, without an exponent below 10**4: 31.4, 1730, 1.2e6."""
    if x < 1000:
        return f"{x:.3g}"
    return f"{x:.0f}" if x < 1e4 else f"{x:.2g}".replace("e+0", "e")


def _rows() -> list[tuple[str, str, Sampler | str]]:
    cases: list[tuple[str, Fraction, float]] = [
        ("sigma2=1", Fraction(1), 1.0),
        ("sigma2=1e6", Fraction(10**6), 1e3),
        ("sigma2=1e18", Fraction(10**18), 1e9),
        ("sigma2=1e100", Fraction(10**100), 1e50),
    ]
    chacha = ChaCha20Random(0)
    generator = np.random.default_rng()
    rows: list[tuple[str, str, Sampler | str]] = []
    for label, sigma2, sigma in cases:
        rows += [
            (label, OURS, lambda n, s=sigma2: discrete_gaussian(s, n)),
            (
                label,
                "gaussdp, ChaCha20Random",
                lambda n, s=sigma2: discrete_gaussian(s, n, rng=chacha),
            ),
        ]
        if sigma2 > 2**80:
            rows.append(
                (
                    label,
                    "gaussdp, big_ints='limbs'",
                    lambda n, s=sigma2: discrete_gaussian(s, n, big_ints="limbs"),
                )
            )
        rows += [
            (
                label,
                "gaussdp scalar reference (CKS)",
                lambda n, s=sigma2: [discrete_gaussian_scalar(s) for _ in range(n)],
            ),
            (
                label,
                "numpy float normal (unsafe)",
                lambda n, sd=sigma: generator.normal(0.0, sd, n),
            ),
            (label, "OpenDP discrete Gaussian", _opendp_sampler(sigma)),
            (label, "diffprivlib GaussianDiscrete", _diffprivlib_sampler(sigma)),
        ]
    return rows


def _laplace_rows() -> list[tuple[str, str, Sampler | str]]:
    """Discrete Laplace (``--laplace``): the small path, and scales past 2**26 (the int64
    end and a huge scale)."""
    chacha = ChaCha20Random(0)
    rows: list[tuple[str, str, Sampler | str]] = []
    for label, scale in (
        ("scale=1e3", Fraction(10**3)),
        ("scale=1e9", Fraction(10**9)),
        ("scale=1e50/7", Fraction(10**50, 7)),
    ):
        rows += [
            (label, OURS, lambda n, s=scale: discrete_laplace(s, n)),
            (
                label,
                "gaussdp, ChaCha20Random",
                lambda n, s=scale: discrete_laplace(s, n, rng=chacha),
            ),
        ]
    return rows


def _is_slow(name: str) -> bool:
    return not name.startswith("gaussdp,") and not name.startswith("numpy")


def _is_peer(name: str) -> bool:
    return not name.startswith("gaussdp")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--min-cpu", type=float, default=0.02, help="CPU seconds per cell")
    parser.add_argument(
        "--timing",
        action="store_true",
        help="instead: how much a batch's running time depends on the sampled values",
    )
    parser.add_argument(
        "--laplace", action="store_true", help="instead: the discrete Laplace sampler"
    )
    parser.add_argument(
        "--worker", action="store_true", help="instead: the DP-SGD noise worker's kernels"
    )
    args = parser.parse_args()
    if args.timing:
        timing_dependence()
        return
    if args.worker:
        worker_kernels(args.rounds)
        return

    rows = _laplace_rows() if args.laplace else _rows()
    timings: dict[tuple[int, int], list[float]] = {}
    for _ in range(args.rounds):
        for index, (_, name, draw) in enumerate(rows):
            if isinstance(draw, str):
                continue
            for batch in BATCHES:
                if _is_slow(name) and batch > SLOW_MAX:
                    continue
                per_call = _cpu_per_call(draw, batch, args.min_cpu)
                timings.setdefault((index, batch), []).append(per_call)

    print(f"CPU time, median (min-max) over {args.rounds} interleaved rounds")
    heads = ["n=1 us/call", "n=10 us/call", "n=1e3 samples/s", "n=1e6 samples/s"]
    header = f"{'case':<14}{'sampler':<32}" + "".join(f"{h:>26}" for h in heads)
    print(header)
    print("-" * len(header))
    for index, (label, name, draw) in enumerate(rows):
        if isinstance(draw, str):
            print(f"{label:<14}{name:<32}  {draw}")
            continue
        cells = [
            _cell(timings[(index, batch)], batch) if (index, batch) in timings else "-"
            for batch in BATCHES
        ]
        print(f"{label:<14}{name:<32}" + "".join(f"{c:>26}" for c in cells))
    _print_ratios(rows, timings)
    if not args.laplace:
        _print_targets(rows, timings)
    tracemalloc.start()
    discrete_gaussian(10**6, 1_000_000, rng=ChaCha20Random(0))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"peak traced memory, 10**6 samples at sigma 1e3: {peak / 2**20:.1f} MiB")
    print("(the 8 MiB output array included; the working set is one block of 16384 candidates)")


def worker_kernels(rounds: int, dim: int = 101_770) -> None:
    """CPU ns per value of the noise worker's draw, with each kernel, interleaved rounds."""
    from gaussdp.ml.noise import sum_lattice
    from gaussdp.sampling import vectorized

    sigma2 = sum_lattice(1.0, 1.0, dim).sigma2
    kernels = vectorized._Kernels
    setups: dict[str, Callable[[], None]] = {}

    def numpy_kernels() -> None:
        kernels.fused, kernels.log, kernels.exp = None, vectorized._numpy_log, vectorized._numpy_exp

    setups["numpy"] = numpy_kernels
    torch_kernels = vectorized._torch_kernels()
    if torch_kernels is not None:
        import torch

        torch.set_num_threads(1)  # as in the worker

        def torch_setup() -> None:
            numpy_kernels()
            kernels.log, kernels.exp = torch_kernels

        setups["torch log/exp"] = torch_setup
    fused = vectorized._fused_module()
    if fused is not None:

        def fused_setup() -> None:
            numpy_kernels()
            kernels.fused = fused

        setups["compiled block (numba)"] = fused_setup
    out = np.empty(dim, dtype=np.int64)
    for setup in setups.values():  # warm-up: numba loads (or compiles) its cache here
        setup()
        vectorized._discrete_gaussian_into(sigma2, out, ChaCha20Random(0))
    times: dict[str, list[float]] = {name: [] for name in setups}
    for r in range(rounds):
        for name, setup in setups.items():
            setup()
            rng = ChaCha20Random(r)
            start = time.process_time_ns()
            vectorized._discrete_gaussian_into(sigma2, out, rng)
            times[name].append((time.process_time_ns() - start) / dim)
    numpy_kernels()
    print(f"noise worker draw, sigma2 = {sigma2}, {dim} values; CPU ns per value, ", end="")
    print(f"median (min-max) over {rounds} interleaved rounds")
    for name, values in times.items():
        print(f"{name:<26}{statistics.median(values):8.1f}  ({min(values):.1f}-{max(values):.1f})")


def _print_ratios(
    rows: list[tuple[str, str, Sampler | str]], timings: dict[tuple[int, int], list[float]]
) -> None:
    """Each sampler's median CPU time over gaussdp's (default source), per case and batch."""
    ours = {label: index for index, (label, name, _) in enumerate(rows) if name == OURS}
    print()
    print(f"time of the sampler / time of '{OURS}' (median; > 1: gaussdp is faster)")
    header = f"{'case':<14}{'sampler':<32}" + "".join(f"{'n=' + str(b):>14}" for b in BATCHES)
    print(header)
    print("-" * len(header))
    for index, (label, name, draw) in enumerate(rows):
        if name == OURS or isinstance(draw, str):
            continue
        cells = []
        for batch in BATCHES:
            mine, theirs = timings.get((ours[label], batch)), timings.get((index, batch))
            if not mine or not theirs:
                cells.append("-")
                continue
            ratio = statistics.median(theirs) / statistics.median(mine)
            text = f"{ratio:.3g}" if ratio < 1000 else f"{ratio:.2g}"
            cells.append(text + (" loses" if ratio < 1 and _is_peer(name) else ""))
        print(f"{label:<14}{name:<32}" + "".join(f"{c:>14}" for c in cells))


def _print_targets(
    rows: list[tuple[str, str, Sampler | str]], timings: dict[tuple[int, int], list[float]]
) -> None:
    """Issue 10's two figures: a scalar draw and sigma2 = 10**100 throughput, default source."""
    print()
    print("issue 10 targets (CPU time, median (min-max) over the rounds):")
    for index, (label, name, _) in enumerate(rows):
        if name == OURS and (index, 1) in timings:
            cell = _cell(timings[(index, 1)], 1)
            print(f"  scalar draw, default source, {label:<13} {cell:>20} us  (target <= 30)")
    for index, (label, name, _) in enumerate(rows):
        if label == "sigma2=1e100" and name.startswith("gaussdp,") and "ChaCha" not in name:
            cell = _cell(timings[(index, BATCHES[-1])], BATCHES[-1])
            print(f"  n=1e6 at {label}, {name:<28} {cell:>20} /s  (target >= 5e6)")


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
        ("scalar reference, 1 sample", 1, lambda n: [discrete_gaussian_scalar(sigma2, rng=rng)]),
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
