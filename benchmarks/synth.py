"""Workload error and time of private synthetic data: gaussdp's MST and AIM against SmartNoise.

Run with::

    python benchmarks/synth.py [--data bn|xor|wine|census] [--rows 5000] [--seeds 5] \
        [--first-seed 0] [--epsilon 1.0] [--delta 1e-6] \
        [--methods gaussdp-mst,gaussdp-aim,mst,aim] [--timeout 3600] \
        [--smartnoise-python /work/venv-snsynth/bin/python]

Every method gets the same discretised table (each column's cell codes, from
the public domains of :mod:`gaussdp.synth.data` or ``examples/synth_census.py``),
one row per person (``unit`` = row; census: its first record per person), the
same ε and δ, and draws as many rows as the input has. The error of a run is the
average, over all 3-way marginals, of the total-variation distance between the
synthetic and the true table's marginal (the workload error of McKenna et al.
2021, halved); the table reports its mean and standard deviation over the seeds
and the mean time per run (from construction, MST's ρ calibration included,
through fit and sample; after imports): wall seconds and
the CPU seconds of the process (all its threads; on a shared machine the wall
time mostly measures the load).

- ``gaussdp MST`` / ``gaussdp AIM``: :class:`gaussdp.synth.Synthesizer`
  (L0 = L∞ = 1; ``method="mst"|"aim"``, AIM with its defaults: all 3-way
  marginals, T = 16d, 80 MB).
- ``smartnoise MST`` / ``smartnoise AIM``: ``snsynth`` 1.0
  (``Synthesizer.create("mst"|"aim", epsilon, delta)``, every column
  categorical, ``preprocessor_eps=0``: it reads the categories from the data
  instead of a public domain). SmartNoise pins ``mbi<2`` and ``opacus<0.15``,
  which conflict with the project's, so it runs under its own interpreter::

      python -m venv /work/venv-snsynth
      /work/venv-snsynth/bin/pip install torch==2.13.0 smartnoise-synth

Each SmartNoise run is a fresh process (the file itself with ``--peer``, which
imports only numpy, pandas and snsynth); its time is measured inside it, and
it is stopped after ``--timeout`` seconds (reported as such).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _peer(method: str, codes: str, epsilon: float, delta: float, seed: int, out: str) -> None:
    """SmartNoise side (own interpreter): fit on the coded table, sample, write codes."""
    import warnings

    import pandas as pd

    warnings.simplefilter("ignore")
    from snsynth import Synthesizer  # type: ignore[import-not-found]

    np.random.seed(seed)  # noqa: NPY002 - snsynth and mbi<2 draw from numpy's global generator
    data = pd.read_csv(codes)
    start, cpu = time.perf_counter(), time.process_time()
    synth = Synthesizer.create(method, epsilon=epsilon, delta=delta)
    synth.fit(data, categorical_columns=list(data.columns), preprocessor_eps=0.0)
    sample = synth.sample(len(data))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    sample.to_csv(out, index=False)
    print(json.dumps({"seconds": seconds, "cpu": cpu}))


def _dataset(name: str, rows: int) -> tuple[dict[str, np.ndarray], dict[str, int], object]:
    """Coded columns, domain sizes and the gaussdp column domains (one row per person)."""
    from gaussdp.random import ChaCha20Random
    from gaussdp.synth import Categorical
    from gaussdp.synth.data import BayesNet, wine

    if name in ("bn", "xor"):
        net = BayesNet.example() if name == "bn" else BayesNet.xor()
        frame = net.sample(rows, rng=ChaCha20Random(99)).drop(columns="unit")
        columns = net.columns
    elif name == "wine":
        frame, columns = wine()
        frame = frame.drop(columns="id")
    else:
        spec = importlib.util.spec_from_file_location("census", ROOT / "examples/synth_census.py")
        if spec is None or spec.loader is None:
            raise FileNotFoundError(ROOT / "examples/synth_census.py")
        census = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(census)
        full = census.make_census(rows, seed=1)
        frame = full.drop_duplicates("person").drop(columns="person")
        columns = census.COLUMNS
    codes = {c.name: c.encode(frame[c.name].reset_index(drop=True)) for c in columns}
    sizes = {c.name: c.size for c in columns}
    cat_columns = [Categorical(n, list(range(k))) for n, k in sizes.items()]
    return codes, sizes, cat_columns


def _error(
    synth: dict[str, np.ndarray], truth: dict[str, np.ndarray], sizes: dict[str, int]
) -> float:
    from gaussdp.synth.quality import marginal, total_variation

    order = min(3, len(sizes))
    return float(
        np.mean(
            [
                total_variation(marginal(synth, sizes, c), marginal(truth, sizes, c))
                for c in itertools.combinations(list(sizes), order)
            ]
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=["bn", "xor", "wine", "census"], default="bn")
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed, ...")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--iters", type=int, default=1000)
    parser.add_argument("--methods", default="gaussdp-mst,gaussdp-aim,mst,aim")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--smartnoise-python", default="/work/venv-snsynth/bin/python")
    parser.add_argument("--peer", help=argparse.SUPPRESS)
    parser.add_argument("--codes", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        _peer(args.peer, args.codes, args.epsilon, args.delta, args.seed, args.out)
        return

    import pandas as pd

    from gaussdp.budget import Budget
    from gaussdp.random import ChaCha20Random
    from gaussdp.synth import Synthesizer
    from gaussdp.synth import core as synth_core

    truth, sizes, columns = _dataset(args.data, args.rows)
    n = len(next(iter(truth.values())))
    print(
        f"data {args.data}: {n} rows, {len(sizes)} columns, domain sizes {list(sizes.values())}; "
        f"epsilon = {args.epsilon}, delta = {args.delta}, {args.seeds} seeds"
    )
    table = pd.DataFrame(truth)
    results: dict[str, list[tuple[float, float, float]]] = {}
    methods = args.methods.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        codes_csv = os.path.join(tmp, "codes.csv")
        table.to_csv(codes_csv, index=False)
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for ours in ("mst", "aim"):
                if f"gaussdp-{ours}" not in methods:
                    continue
                frame = table.assign(unit=np.arange(n))
                # Timed from construction: MST calibrates its ρ to the PLD check there (as
                # SmartNoise's time includes create + fit). The calibration is cached per
                # process; cleared, every run pays it, as each fresh SmartNoise process does.
                synth_core._MST_CALIBRATION.clear()
                start, cpu = time.perf_counter(), time.process_time()
                synth = Synthesizer(
                    frame,
                    columns=columns,  # type: ignore[arg-type]
                    privacy_unit="unit",
                    budget=Budget(epsilon=args.epsilon, delta=args.delta),
                    max_groups_per_unit=1,
                    max_rows_per_group=1,
                    iters=args.iters,
                    method=ours,
                )
                plan = time.process_time() - cpu
                result = synth.run(rows=n, rng=ChaCha20Random(seed))
                seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
                out = {c: result.frame[c].to_numpy(dtype=np.int64) for c in sizes}
                name = f"gaussdp {ours.upper()}"
                results.setdefault(name, []).append((_error(out, truth, sizes), seconds, cpu))
                print(
                    f"seed {seed} {name}: {results[name][-1]} (plan {plan:.2f} CPU s)",
                    result.tree,
                    flush=True,
                )
            for method in ("mst", "aim"):
                if method not in methods:
                    continue
                out_csv = os.path.join(tmp, f"{method}.csv")
                name = f"smartnoise {method.upper()}"
                try:
                    proc = subprocess.run(
                        [
                            *(args.smartnoise_python, __file__, "--peer", method),
                            *("--codes", codes_csv, "--out", out_csv, "--seed", str(seed)),
                            *("--epsilon", str(args.epsilon), "--delta", str(args.delta)),
                        ],
                        capture_output=True,
                        text=True,
                        check=False,
                        timeout=args.timeout,
                    )
                except subprocess.TimeoutExpired:
                    print(f"seed {seed} {name}: stopped after {args.timeout:g} s", flush=True)
                    continue
                if proc.returncode != 0:
                    print(f"{name}: failed: {proc.stderr.strip().splitlines()[-1:]}")
                    continue
                timing = json.loads(proc.stdout.strip().splitlines()[-1])
                sample = pd.read_csv(out_csv)
                out = {c: sample[c].to_numpy(dtype=np.int64) for c in sizes}
                error = _error(out, truth, sizes)
                results.setdefault(name, []).append((error, timing["seconds"], timing["cpu"]))
                print(f"seed {seed} {name}: {results[name][-1]}", flush=True)
    print(f"\n| method | 3-way TV error, mean ± sd over {args.seeds} seeds | seconds | CPU s |")
    print("|---|---|---|---|")
    for name, runs in results.items():
        errors = np.array([e for e, _, _ in runs])
        times = np.array([t for _, t, _ in runs])
        cpus = np.array([c for _, _, c in runs])
        print(
            f"| {name} | {errors.mean():.4f} ± {errors.std(ddof=1) if len(runs) > 1 else 0:.4f} "
            f"| {times.mean():.2f} | {cpus.mean():.2f} |"
        )


if __name__ == "__main__":
    main()
