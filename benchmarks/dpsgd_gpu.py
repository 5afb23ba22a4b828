"""DP-SGD step time and peak GPU memory: gaussdp against Opacus on a ResNet-18-sized CNN.

Run with ``python benchmarks/dpsgd_gpu.py [--device cuda] [--steps 200] [--batch 256]``;
``--device cpu --steps 1 --warmup 0 --batch 2 --width 4 --no-opacus`` is the smoke run
of the test suite.
Needs the ``torch`` extra; Opacus (``bench`` extra) is measured if it is installed.

The model is ResNet-18 (four stages of two basic blocks, 64-128-256-512 channels at
``--width 64``: 11.2 M parameters) with GroupNorm instead of BatchNorm (batch
normalisation mixes examples, which DP-SGD cannot clip), on synthetic 32×32 RGB
images with 10 classes. Every method trains the same model from the same
initialisation on the same fixed batch, in the user's loop
``loss = cross_entropy(model(x), y); loss.backward(); optimizer.step()``:

- non-private;
- gaussdp, secure noise (exact discrete Gaussian on a lattice, drawn on the CPU from
  the OS CSPRNG and copied to the device) and ``noise="insecure-float"``;
- Opacus ``grad_sample_mode="hooks"`` with ``secure_mode`` off and, if ``torchcsprng``
  installs, on.

Each figure is the median over ``--steps`` timed steps after ``--warmup`` steps
(``torch.cuda.synchronize`` around each step on CUDA), and the peak memory is
``torch.cuda.max_memory_allocated`` over the timed steps. A method that fails (out
of memory, missing package) is reported with its error and the others still run.
``--json PATH`` writes the results.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from itertools import chain, repeat
from typing import Any

import torch
from torch import nn
from torch.nn import functional as nnf
from torch.utils.data import DataLoader, TensorDataset

from gaussdp.ml import make_private

Step = Callable[[], None]


class Block(nn.Module):
    """The basic block of ResNet-18 (He et al. 2016), with GroupNorm."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(min(32, cout), cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(min(32, cout), cout)
        self.skip: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.GroupNorm(min(32, cout), cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.norm1(self.conv1(x)))
        return torch.relu(self.norm2(self.conv2(h)) + self.skip(x))


def resnet18(width: int = 64, classes: int = 10) -> nn.Module:
    """ResNet-18 for 32×32 inputs (3×3 stem, no max-pool), GroupNorm, ``width`` base channels."""
    widths = [width, 2 * width, 4 * width, 8 * width]
    layers: list[nn.Module] = [
        nn.Conv2d(3, width, 3, 1, 1, bias=False),
        nn.GroupNorm(min(32, width), width),
        nn.ReLU(),
    ]
    cin = width
    for i, cout in enumerate(widths):
        layers += [Block(cin, cout, 1 if i == 0 else 2), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def _fresh(width: int, device: str) -> nn.Module:
    torch.manual_seed(0)
    return resnet18(width).to(device)


def nonprivate(width: int, device: str, x: torch.Tensor, y: torch.Tensor) -> Step:
    model = _fresh(width, device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        nnf.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def gaussdp(
    width: int, device: str, x: torch.Tensor, y: torch.Tensor, data: TensorDataset, noise: str
) -> Step:
    model = _fresh(width, device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # insecure-float warns
        pmodel, opt, loader = make_private(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            DataLoader(data, batch_size=x.shape[0]),
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            delta=1e-6,
            noise=noise,  # type: ignore[arg-type]
        )
    # A step trains on the Poisson batch drawn last from the private loader (expected
    # size that of x), drawn and moved to the device within the step, as in training.
    batches = chain.from_iterable(repeat(loader))

    def step() -> None:
        opt.zero_grad()
        xb, yb = next(batches)
        nnf.cross_entropy(pmodel(xb.to(device)), yb.to(device)).backward()
        opt.step()

    return step


def opacus(
    width: int, device: str, x: torch.Tensor, y: torch.Tensor, data: TensorDataset, secure: bool
) -> Step:
    from opacus import PrivacyEngine  # the bench extra; ImportError is reported

    model = _fresh(width, device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = PrivacyEngine(secure_mode=secure)
        pmodel, opt, _ = engine.make_private(
            module=model,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            data_loader=DataLoader(data, batch_size=x.shape[0]),
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            grad_sample_mode="hooks",
        )

    def step() -> None:
        opt.zero_grad()
        nnf.cross_entropy(pmodel(x), y).backward()
        opt.step()

    return step


def measure(make: Callable[[], Step], device: str, steps: int, warmup: int) -> dict[str, Any]:
    """Median step time (ms) and peak device memory (MiB) of one method, or its error."""
    cuda = device.startswith("cuda")
    try:
        step = make()
        for _ in range(warmup):
            step()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            step()
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    except Exception as error:  # report and go on: one run of the script measures everything
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
    finally:
        if cuda:
            torch.cuda.empty_cache()
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
    return {"ms_per_step": statistics.median(times) * 1e3, "peak_mib": peak}


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=64, help="base channels (64: ResNet-18)")
    parser.add_argument("--no-opacus", action="store_true", help="skip the Opacus rows")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(4 * args.batch, 3, 32, 32, generator=gen)
    labels = torch.randint(0, 10, (4 * args.batch,), generator=gen)
    data = TensorDataset(images, labels)
    x, y = images[: args.batch].to(args.device), labels[: args.batch].to(args.device)
    params = sum(p.numel() for p in resnet18(args.width).parameters())
    methods: list[tuple[str, Callable[[], Step]]] = [
        ("non-private", lambda: nonprivate(args.width, args.device, x, y)),
        ("gaussdp secure", lambda: gaussdp(args.width, args.device, x, y, data, "secure")),
        (
            "gaussdp insecure-float",
            lambda: gaussdp(args.width, args.device, x, y, data, "insecure-float"),
        ),
    ]
    if not args.no_opacus:
        methods += [
            ("opacus hooks", lambda: opacus(args.width, args.device, x, y, data, False)),
            ("opacus hooks secure_mode", lambda: opacus(args.width, args.device, x, y, data, True)),
        ]
    device_name = (
        torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    )
    print(
        f"torch {torch.__version__}, {device_name}, ResNet-18 width {args.width} "
        f"({params:,} parameters), batch {args.batch}, median of {args.steps} steps"
    )
    print(f"{'method':<28}{'ms/step':>10}{'x non-private':>15}{'peak MiB':>10}")
    results: list[dict[str, Any]] = []
    for name, make in methods:
        result = {"method": name, **measure(make, args.device, args.steps, args.warmup)}
        results.append(result)
        if "error" in result:
            print(f"{name:<28}  {result['error']}")
            continue
        base = results[0].get("ms_per_step")
        ratio = f"{result['ms_per_step'] / base:>15.2f}" if base else f"{'-':>15}"
        peak = f"{result['peak_mib']:>10.0f}" if result["peak_mib"] is not None else f"{'-':>10}"
        print(f"{name:<28}{result['ms_per_step']:>10.1f}{ratio}{peak}")
    if args.json:
        meta = {"device": device_name, "batch": args.batch, "width": args.width, "params": params}
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"setup": meta, "results": results}, out, indent=2)
    return results


if __name__ == "__main__":
    main()
