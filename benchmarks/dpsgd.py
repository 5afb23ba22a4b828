"""Step time of DP-SGD: gaussdp against non-private training and Opacus, in one run.

Run with ``python benchmarks/dpsgd.py [--batch 256] [--repeats 20]``. Needs the
``torch`` extra; Opacus (``bench`` extra) is measured if it is installed.

For a small MLP (784-128-10, 101,770 parameters) and a small CNN (two 5x5
convolutions and a linear layer on 28x28 inputs) it times one optimizer step on
a fixed batch of random data:

- non-private: ``loss.backward(); optimizer.step()``;
- gaussdp DP-SGD with its default secure noise (exact discrete Gaussian on a
  lattice) and with ``noise="insecure-float"`` (``torch.normal``), i.e.
  ``model.backward(x, y); optimizer.step()``, and the secure step in the PyTorch
  idiom ``loss_fn(model(x), y).backward(); optimizer.step()``;
- Opacus ``PrivacyEngine.make_private`` with ``grad_sample_mode`` "hooks" and
  "ghost" (float noise; its ``secure_mode`` needs ``torchcsprng``, which has no
  build for this torch).

Each figure is the median of ``--repeats`` timed steps after warm-up; the ratio
columns divide by the non-private step and by gaussdp's secure step, and the line
under each model gives what the secure noise adds over ``torch.normal`` noise per
step (the MLP has 101,770 parameters: the "10^5 parameters" case). The secure
noise of the next step is drawn by a worker process while the current step
computes gradients (``SumNoiser(prefetch=...)``). A second table times the noise
alone for 10^5 coordinates, releases back to back: ``torch.normal`` against
gaussdp's secure path (lattice rounding, exact discrete Gaussian, conversion)
drawn in the caller and drawn by the worker. Numbers are only comparable within
one run on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as nnf
from torch.utils.data import DataLoader, TensorDataset

from gaussdp.ml import SumNoiser, make_private
from gaussdp.random import ChaCha20Random


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


Step = Callable[[], None]


def median_time(step: Step, repeats: int, warmup: int = 3) -> float:
    return round_robin([step], repeats, warmup)[0]


def round_robin(steps: list[Step], repeats: int, warmup: int = 3, block: int = 5) -> list[float]:
    """Median time per step of each method, timing blocks of ``block`` steps in turn.

    Taking turns spreads load changes over all methods; blocks keep the background
    noise draw of the secure path (prefetched one step ahead) from spilling much
    into another method's timing.
    """
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


def data(batch: int, n: int) -> tuple[TensorDataset, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (n,), generator=gen)
    return TensorDataset(x, y), x[:batch], y[:batch]


def nonprivate_step(make: Callable[[], nn.Module], x: torch.Tensor, y: torch.Tensor) -> Step:
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        nnf.cross_entropy(model(x), y).backward()
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
        pmodel, opt, _ = make_private(
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

    def step() -> None:
        opt.zero_grad()
        if idiom:
            nnf.cross_entropy(pmodel(x), y).backward()
        else:
            pmodel.backward(x, y)
        opt.step()

    return step


def opacus_step(
    make: Callable[[], nn.Module],
    dataset: TensorDataset,
    x: torch.Tensor,
    y: torch.Tensor,
    mode: str = "hooks",
) -> Step | None:
    """One Opacus step (``grad_sample_mode`` "hooks" or "ghost"), or None without Opacus."""
    try:
        from opacus import PrivacyEngine
    except ImportError:
        return None
    model = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = PrivacyEngine()
        made = engine.make_private(
            module=model,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            data_loader=DataLoader(dataset, batch_size=x.shape[0]),
            criterion=nn.CrossEntropyLoss(),
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            grad_sample_mode=mode,
        )
    if mode == "ghost":
        pmodel, opt, criterion, _ = made

        def ghost_step() -> None:
            opt.zero_grad()
            criterion(pmodel(x), y).backward()
            opt.step()

        return ghost_step
    pmodel, opt, _ = made

    def step() -> None:
        opt.zero_grad()
        nnf.cross_entropy(pmodel(x), y).backward()
        opt.step()

    return step


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (1 is steadier on a shared machine)",
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="Full backward hook")  # Opacus, every step
    torch.set_num_threads(args.threads)
    dataset, x, y = data(args.batch, 4 * args.batch)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}")
    header = f"{'model':<6}{'method':<28}{'ms/step':>10}{'x non-private':>15}{'x gaussdp':>11}"
    print(header)
    for name, make in (("MLP", mlp), ("CNN", cnn)):
        torch.manual_seed(0)
        params = sum(p.numel() for p in make().parameters())
        steps = [
            nonprivate_step(make, x, y),
            gaussdp_step(make, dataset, x, y, "secure"),
            gaussdp_step(make, dataset, x, y, "insecure-float"),
            gaussdp_step(make, dataset, x, y, "secure", idiom=True),
        ]
        opacus = opacus_step(make, dataset, x, y)
        opacus_ghost = opacus_step(make, dataset, x, y, "ghost")
        extra = [s for s in (opacus, opacus_ghost) if s is not None]
        timed = round_robin(steps + extra, args.repeats)
        base, secure = timed[0], timed[1]
        rows = [
            ("non-private", base),
            ("gaussdp secure", secure),
            ("gaussdp insecure-float", timed[2]),
            ("gaussdp secure loss.backward", timed[3]),
            ("opacus hooks (float noise)", timed[4] if opacus else None),
            ("opacus ghost (float noise)", timed[5] if opacus_ghost else None),
        ]
        for method, t in rows:
            if t is None:
                print(f"{name:<6}{method:<28}{'absent':>10}")
                continue
            print(f"{name:<6}{method:<28}{t * 1e3:>10.2f}{t / base:>15.2f}{t / secure:>11.2f}")
        print(
            f"{'':<6}({params} parameters; secure noise adds "
            f"{(secure / timed[2] - 1) * 100:+.1f}% over torch.normal noise per step)"
        )
    noise_table(args.repeats)


if __name__ == "__main__":
    main()
