"""CPU and wall time per DP-SGD step: gaussdp against non-private training and Opacus.

Run with ``python benchmarks/dpsgd.py [--batch 256] [--rounds 9]``. Needs the
``torch`` extra; Opacus (``bench`` extra: ``pip install '.[torch,bench]'``) is measured
if it is installed. Where it is installed in another environment (one with the same
torch), ``--opacus-python /path/to/that/bin/python`` runs the whole benchmark under that
interpreter with this checkout's gaussdp first on ``PYTHONPATH``: every method then runs
in one process, interleaved and counted alike.

Three models, batch 256 of random data, SGD:

- an MLP (784-128-10, 101,770 parameters);
- a small CNN (two 5x5 convolutions and a linear layer on 28x28 inputs, 18,378);
- a one-layer transformer (token and position embeddings, LayerNorm, self-attention
  with ``nn.Linear`` projections and ``F.scaled_dot_product_attention``, a
  feed-forward block, mean pooling; 32 tokens of a 64-word vocabulary, width 64).

Methods: the non-private step (``loss.backward(); optimizer.step()``); gaussdp with
its default secure noise (exact discrete Gaussian on a lattice, drawn by a worker
process), as ``model.backward(x, y)`` and in the PyTorch idiom
``loss_fn(model(x), y).backward()``, and with ``noise="insecure-float"``; Opacus 1.6
with ``grad_sample_mode="ghost"`` (float noise), with ``secure_mode=True`` where
``torchcsprng`` installs (it has no build for this torch), and with ``"hooks"`` if
``--opacus-hooks`` is given. Every method draws its batch within the step's time, as in
training: gaussdp and Opacus their Poisson batch (expected size 256) from the loader their
``make_private`` returned (gaussdp trains only on the batch its loader drew last), the
non-private step the next batch of a shuffled ``DataLoader``. gaussdp's loader indexes
the ``TensorDataset`` once per batch; torch's ``DataLoader`` (the non-private step's,
and Opacus's) fetches the examples one by one and stacks them (≈ 1 ms a step here).

Each method takes ``--block`` steps in turn, for ``--rounds`` interleaved rounds
(so that a change of load hits every method alike), after ``--warmup`` steps (35:
gaussdp checks its batched path against the per-example one on calls 1, 2, 4, …,
32 — later checks, at calls 64, 128, …, fall in one block per round at most and
the medians leave them out). Per method and step: the median and the range over
the rounds of the wall time and of the CPU time of every process involved — this
process (all its threads) and its child processes (gaussdp's noise worker), read
from ``time.process_time`` and ``/proc/<pid>/task/*/schedstat`` (nanoseconds on a
CPU of all the child's threads, Linux); a method's
child processes are those started while it was built (``make_private`` starts the
noise worker) or during its warm-up. A worker's CPU
time is counted from the start of its method's block to the start of its next
one, which includes the draw prefetched after the block's last step. Ratios:
CPU per step over Opacus ghost's, wall time over the non-private step's.

A second table times the noise alone for 10^5 coordinates, releases back to back:
``torch.normal`` against gaussdp's secure path drawn in the caller and drawn by
the worker. Numbers are only comparable within one run.

``--calibration N`` (N rounds; 0 skips it) times ``make_private(target_epsilon=3,
delta=1e-6, epochs=10)`` on a dataset of 10^6 examples with batch 256 (39,063 steps:
the noise multiplier is calibrated and certified by the PLD accountant), each round
in a fresh child process that imports torch first: CPU (a noise worker's included,
if one starts: this model's 22 parameters are below ``PREFETCH_MIN_DIM``, so none does)
and wall time of the call, and the child's own peak RSS (``VmHWM``) before and after
it (issue 13's target: at most 10 s and 500 MB). Not ``ru_maxrss``: a child started by
``subprocess`` inherits its parent's (this process, Opacus and the trained models
included) across the exec.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from importlib.util import find_spec
from itertools import chain, repeat
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as nnf
from torch.utils.data import DataLoader, TensorDataset

import gaussdp
from gaussdp.ml import SumNoiser, make_private
from gaussdp.random import ChaCha20Random

#: Set in the environment of the re-run under ``--opacus-python`` (it must not re-run again).
_RERUN = "GAUSSDP_DPSGD_BENCH_RERUN"


def mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 10),
    )


VOCAB, TOKENS, WIDTH, HEADS = 64, 32, 64, 4


class Transformer(nn.Module):
    """One pre-norm transformer layer over token ids, mean-pooled into 10 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)
        self.positions = nn.Embedding(TOKENS, WIDTH)
        self.norm1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)
        self.norm2 = nn.LayerNorm(WIDTH)
        self.ff = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.ReLU(), nn.Linear(2 * WIDTH, WIDTH))
        self.head = nn.Linear(WIDTH, 10)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        batch, length = ids.shape
        where = torch.arange(length, device=ids.device).repeat(batch, 1)
        h = self.tokens(ids) + self.positions(where)
        q, k, v = self.qkv(self.norm1(h)).chunk(3, dim=-1)
        q, k, v = (t.reshape(batch, length, HEADS, -1).transpose(1, 2) for t in (q, k, v))
        attended = nnf.scaled_dot_product_attention(q, k, v)
        h = h + self.out(attended.transpose(1, 2).reshape(batch, length, WIDTH))
        h = h + self.ff(self.norm2(h))
        return self.head(h.mean(1))


def data(name: str, batch: int, n: int) -> tuple[TensorDataset, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    if name == "transformer":
        x = torch.randint(0, VOCAB, (n, TOKENS), generator=gen)
    else:
        x = torch.randn(n, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (n,), generator=gen)
    return TensorDataset(x, y), x[:batch], y[:batch]


Step = Callable[[], None]


def child_pids() -> set[int]:
    """Process ids of this process's children (Linux; empty elsewhere)."""
    me, found = os.getpid(), set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                found.add(int(entry))
    return found


def cpu_of(pids: set[int]) -> float:
    """CPU seconds the processes ``pids`` have run, all their live threads, in nanoseconds.

    The sum over ``/proc/<pid>/task/<tid>/schedstat`` (time on a CPU, ns): every thread,
    where ``/proc/<pid>/schedstat`` is the main thread's alone, at a resolution that a
    block of five MLP steps needs (``/proc/<pid>/stat``'s utime + stime count 10 ms
    ticks: one block's ~5 ms of noise read as 0 or 10 ms). Threads that have exited are
    not counted; the noise worker's threads live as long as it does.
    """
    nanoseconds = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    nanoseconds += int(f.read().split()[0])
            except OSError:
                continue
    return nanoseconds / 1e9


@dataclass
class Method:
    name: str
    step: Step
    children: set[int] = field(default_factory=set)
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def spawning(build: Callable[[], Step | str]) -> tuple[Step | str, set[int]]:
    """``build()`` and the child processes it started.

    gaussdp's noise worker starts in ``make_private``, before any step.
    """
    before = child_pids()
    made = build()
    return made, child_pids() - before


def measure(methods: list[Method], rounds: int, block: int, warmup: int) -> None:
    """Interleaved rounds: each method takes ``block`` steps in turn (see the notes)."""
    for method in methods:
        before = child_pids()
        for _ in range(warmup):
            method.step()
        method.children |= child_pids() - before
    starts = [cpu_of(m.children) for m in methods]
    own: list[float] = [0.0] * len(methods)
    for _ in range(rounds + 1):
        for i, method in enumerate(methods):
            children = cpu_of(method.children)
            if own[i]:  # the previous block's own CPU plus its worker's since then
                method.cpu.append((own[i] + children - starts[i]) / block)
            starts[i] = children
            if len(method.wall) == rounds:
                continue
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for _ in range(block):
                method.step()
            method.wall.append((time.perf_counter() - wall0) / block)
            own[i] = time.process_time() - cpu0


def nonprivate_step(make: Callable[[], nn.Module], dataset: TensorDataset, batch: int) -> Step:
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = chain.from_iterable(repeat(DataLoader(dataset, batch_size=batch, shuffle=True)))

    def step() -> None:
        opt.zero_grad()
        xb, yb = next(batches)
        nnf.cross_entropy(model(xb), yb).backward()
        opt.step()

    return step


def gaussdp_step(
    make: Callable[[], nn.Module],
    dataset: TensorDataset,
    x: torch.Tensor,
    y: torch.Tensor,
    noise: str,
    idiom: bool = False,
) -> Step:
    model = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pmodel, opt, loader = make_private(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            DataLoader(dataset, batch_size=x.shape[0]),
            loss_fn=nnf.cross_entropy,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            delta=1e-6,
            noise=noise,  # type: ignore[arg-type]
            rng=None if noise == "secure" else ChaCha20Random(0),
        )

    # Pass after pass of the private loader: a step trains on the Poisson batch drawn
    # last from it (expected size that of x), drawn within the step as in training.
    batches = chain.from_iterable(repeat(loader))

    def step() -> None:
        opt.zero_grad()
        xb, yb = next(batches)
        if idiom:
            nnf.cross_entropy(pmodel(xb), yb).backward()
        else:
            pmodel.backward(xb, yb)
        opt.step()

    return step


def opacus_step(
    make: Callable[[], nn.Module],
    dataset: TensorDataset,
    x: torch.Tensor,
    y: torch.Tensor,
    mode: str = "ghost",
    secure: bool = False,
) -> Step | str:
    """One Opacus step, or why there is none (not installed, or an error)."""
    try:
        from opacus import PrivacyEngine
    except ImportError:
        return "opacus not installed: install the bench extra or give --opacus-python"
    model = make()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            engine = PrivacyEngine(secure_mode=secure)
            made = engine.make_private(
                module=model,
                optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                data_loader=DataLoader(dataset, batch_size=x.shape[0]),
                criterion=nn.CrossEntropyLoss(),
                noise_multiplier=1.0,
                max_grad_norm=1.0,
                grad_sample_mode=mode,
            )
    except Exception as error:
        return f"{type(error).__name__}: {str(error).splitlines()[0][:60]}"
    if mode == "ghost":
        pmodel, opt, criterion, loader = made
    else:
        (pmodel, opt, loader), criterion = made, nn.CrossEntropyLoss()
    batches = chain.from_iterable(repeat(loader))  # Poisson batches, as gaussdp's

    def step() -> None:
        opt.zero_grad()
        xb, yb = next(batches)
        criterion(pmodel(xb), yb).backward()
        opt.step()

    try:
        step()
    except Exception as error:
        return f"{type(error).__name__}: {str(error).splitlines()[0][:60]}"
    return step


def round_robin(steps: list[Step], repeats: int, warmup: int = 3, block: int = 5) -> list[float]:
    """Median wall time per call of each function, timing blocks of ``block`` calls in turn."""
    for step in steps:
        for _ in range(warmup):
            step()
    times: list[list[float]] = [[] for _ in steps]
    for _ in range(max(1, repeats // block)):
        for step, bucket in zip(steps, times, strict=True):
            start = time.perf_counter()
            for _ in range(block):
                step()
            bucket.append((time.perf_counter() - start) / block)
    return [statistics.median(bucket) for bucket in times]


def noise_table(repeats: int) -> None:
    """The noise alone for 10**5 coordinates, releases back to back (no gradient work)."""
    d = 10**5
    total = torch.randn(d, dtype=torch.float64)
    ones = torch.ones(1, dtype=torch.float64)
    in_place = SumNoiser(1.0, 1.0, d, prefetch=False)
    worker = SumNoiser(1.0, 1.0, d, prefetch=True)

    def secure(noiser: SumNoiser) -> Step:
        def release() -> None:
            sums = noiser.accumulate([total.to(torch.float32).reshape(1, -1) * 0.001], ones)
            noiser.release(sums)

        return release

    def float_noise() -> None:
        (total.to(torch.float32) + torch.normal(0.0, 1.0, (d,))).to(torch.float32)

    t_float, t_in_place, t_worker = round_robin(
        [float_noise, secure(in_place), secure(worker)], repeats
    )
    worker.close()
    print(f"\nnoise alone for {d} coordinates, back to back (median of {repeats})")
    print(f"{'path':<46}{'ms':>9}")
    print(f"{'torch.normal (insecure)':<46}{t_float * 1e3:>9.2f}")
    print(f"{'gaussdp secure, drawn in the caller':<46}{t_in_place * 1e3:>9.2f}")
    print(f"{'gaussdp secure, drawn by the worker process':<46}{t_worker * 1e3:>9.2f}")
    print(
        "(in training the worker draws the next step's noise during the gradient "
        "computation; the step table shows what is left of its cost)"
    )


class _Sized(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """A dataset of ``n`` zero examples (only its length matters to the calibration)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.zeros(10), 0


def own_peak_mb() -> float:
    """This process's peak RSS in MB since its exec (``VmHWM``, Linux).

    ``ru_maxrss`` would not do: Linux carries the parent's peak over into a child that
    ``subprocess`` starts (vfork and exec), so a child of a 700 MB parent reports 700 MB.
    """
    status = Path("/proc/self/status").read_text(encoding="utf-8")
    return (
        next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
        / 1024
    )


def calibration_child() -> None:
    """One ``make_private(target_epsilon=3)`` for N = 10^6, batch 256, 10 epochs; prints JSON."""
    model = nn.Linear(10, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(_Sized(10**6), batch_size=256)
    before = own_peak_mb()
    workers = child_pids()
    cpu, wall = time.process_time(), time.perf_counter()
    _, private, _ = make_private(
        model,
        optimizer,
        loader,
        max_grad_norm=1.0,
        delta=1e-6,
        target_epsilon=3.0,
        epochs=10,
    )
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    cpu += cpu_of(child_pids() - workers)  # a noise worker, if make_private started one
    peak = own_peak_mb()
    print(
        json.dumps(
            {
                "cpu": cpu,
                "wall": wall,
                "rss_before_mb": before,
                "rss_peak_mb": peak,
                "sigma": private.noise_multiplier,
            }
        )
    )


def calibration_table(rounds: int) -> None:
    """:func:`calibration_child` in ``rounds`` fresh processes: median [range] and peak."""
    runs = []
    for _ in range(rounds):
        child = subprocess.run(
            [sys.executable, __file__, "--calibration-child"],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(child.stdout.splitlines()[-1]))
    cpu = [r["cpu"] for r in runs]
    wall = [r["wall"] for r in runs]
    print(
        "make_private(target_epsilon=3, delta=1e-6, epochs=10), N = 10^6, batch 256 "
        f"(σ = {runs[0]['sigma']:.4f}), {rounds} fresh processes; target ≤ 10 s, ≤ 500 MB"
    )
    print(
        f"  CPU {statistics.median(cpu):.2f} s [{min(cpu):.2f}-{max(cpu):.2f}], "
        f"wall {statistics.median(wall):.2f} s [{min(wall):.2f}-{max(wall):.2f}], "
        f"peak RSS {max(r['rss_peak_mb'] for r in runs):.0f} MB "
        f"(before the call {max(r['rss_before_mb'] for r in runs):.0f} MB)"
    )


def rerun_under(python: str) -> None:
    """Replace this process by the benchmark run under ``python``, with this gaussdp first."""
    if os.environ.get(_RERUN) or find_spec("opacus") is not None:
        return  # already the re-run, or Opacus is importable here
    env = dict(os.environ, **{_RERUN: "1"})
    package_root = str(Path(gaussdp.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
    sys.stdout.flush()
    os.execve(python, [python, __file__, *sys.argv[1:]], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--block", type=int, default=5, help="steps per method per round")
    parser.add_argument("--warmup", type=int, default=35)
    parser.add_argument("--models", default="MLP,CNN,transformer")
    parser.add_argument("--opacus-hooks", action="store_true")
    parser.add_argument(
        "--opacus-python",
        help="an interpreter with Opacus and the same torch (the bench extra): if Opacus "
        "is not importable here, the benchmark runs under it with this gaussdp",
    )
    parser.add_argument("--no-noise-table", action="store_true")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (1 is steadier on a shared machine)",
    )
    parser.add_argument(
        "--calibration",
        type=int,
        default=3,
        help="rounds of the make_private(target_epsilon=3) calibration case (0: skip)",
    )
    parser.add_argument("--calibration-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.calibration_child:
        calibration_child()
        return
    if args.opacus_python:
        rerun_under(args.opacus_python)
    warnings.filterwarnings("ignore", message="Full backward hook")  # Opacus, every step
    torch.set_num_threads(args.threads)
    print(f"{sys.executable}: gaussdp from {Path(gaussdp.__file__).parent}")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, "
        f"{args.rounds} rounds of {args.block} steps per method; per step: median [min-max]"
    )
    header = (
        f"{'model':<12}{'method':<30}{'CPU ms':>8}{'range':>15}{'wall ms':>9}{'range':>15}"
        f"{'CPU/opacus':>11}{'wall/np':>9}"
    )
    print(header)
    makers = {"MLP": mlp, "CNN": cnn, "transformer": Transformer}
    for name in filter(None, args.models.split(",")):
        make = makers[name]
        torch.manual_seed(0)
        dataset, x, y = data(name, args.batch, 4 * args.batch)
        params = sum(p.numel() for p in make().parameters())
        builders: list[tuple[str, Callable[[], Step | str]]] = [
            ("non-private", partial(nonprivate_step, make, dataset, x.shape[0])),
            ("gaussdp secure", partial(gaussdp_step, make, dataset, x, y, "secure")),
            (
                "gaussdp secure loss.backward",
                partial(gaussdp_step, make, dataset, x, y, "secure", True),
            ),
            (
                "gaussdp insecure-float",
                partial(gaussdp_step, make, dataset, x, y, "insecure-float"),
            ),
            ("opacus ghost (float noise)", partial(opacus_step, make, dataset, x, y)),
            ("opacus ghost secure_mode", partial(opacus_step, make, dataset, x, y, secure=True)),
        ]
        if args.opacus_hooks:
            builders.append(
                ("opacus hooks (float noise)", partial(opacus_step, make, dataset, x, y, "hooks"))
            )
        built = [(label, *spawning(build)) for label, build in builders]
        candidates = [(label, step) for label, step, _ in built]
        methods = [Method(m, s, kids) for m, s, kids in built if not isinstance(s, str)]
        measure(methods, args.rounds, args.block, args.warmup)
        by_name = {m.name: m for m in methods}
        base = statistics.median(by_name["non-private"].wall)
        opacus = by_name.get("opacus ghost (float noise)")
        ref = statistics.median(opacus.cpu) if opacus else None
        for method_name, step in candidates:
            if isinstance(step, str):
                print(f"{name:<12}{method_name:<30}  absent ({step})")
                continue
            m = by_name[method_name]
            cpu, wall = statistics.median(m.cpu), statistics.median(m.wall)
            ratio = f"{cpu / ref:>11.2f}" if ref else f"{'-':>11}"
            print(
                f"{name:<12}{method_name:<30}{cpu * 1e3:>8.2f}"
                f"{f'[{min(m.cpu) * 1e3:.2f}-{max(m.cpu) * 1e3:.2f}]':>15}"
                f"{wall * 1e3:>9.2f}{f'[{min(m.wall) * 1e3:.2f}-{max(m.wall) * 1e3:.2f}]':>15}"
                f"{ratio}{wall / base:>9.2f}"
            )
        print(f"{'':<12}({params} parameters)")
    if not args.no_noise_table:
        noise_table(10 * args.rounds)
    if args.calibration:
        calibration_table(args.calibration)


if __name__ == "__main__":
    main()
