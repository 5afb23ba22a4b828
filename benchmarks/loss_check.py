"""CPU and wall time per DP-SGD step of the loss check (gaussdp.ml._loss_check).

Run with ``python benchmarks/loss_check.py [--rounds 40] [--threads 1]``. Needs the
``torch`` extra. The MLP of ``benchmarks/dpsgd.py`` (784-128-10, batch 256 of random
data, SGD, default secure noise) trained in the PyTorch idiom
``cross_entropy(model(x), y).backward()``, four ways:

- ``plain``: the outputs plain tensors (no check at all: not what ``make_private``
  does, the reference of the ratios);
- ``off``: no step probed after the first: the outputs are ``_Probed`` tensors whose
  calls are recorded, the mean of ``cross_entropy`` over class-index targets is
  rewritten, and the loss is checked only when its form is new, as on every unprobed
  step (gaussdp.ml._loss_check);
- ``default``: the schedule of ``make_private`` (the first three steps, then one in
  ``_loss_check.EVERY``);
- ``every``: every step probed (the cost of one probed step).

Each arm takes ``--block`` steps in turn for ``--rounds`` interleaved rounds after
``--warmup`` steps, counted as ``benchmarks/dpsgd.py`` counts them (its ``measure``:
this process's CPU, all threads, plus the noise worker's). The table gives the median
and range over the rounds and the ratio of medians to ``plain``.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import torch
from dpsgd import Method, data, gaussdp_step, measure, mlp, spawning

from gaussdp.ml import _loss_check

WRAP = _loss_check.LossCheck.wrap


def _plain(
    _check: _loss_check.LossCheck,
    outputs: list[torch.Tensor],
    _batch: int,
    _first: int | None = None,
) -> tuple[list[torch.Tensor], None]:
    """No check at all: the outputs as they are, no probe."""
    return outputs, None


#: (FIRST_STEPS, EVERY, LossCheck.wrap) of each arm; None: the module's own.
SCHEDULES: dict[str, tuple[int, int, Callable[..., Any]] | None] = {
    "plain": (0, 2**62, _plain),
    "off": (0, 2**62, WRAP),
    "default": None,
    "every": (0, 1, WRAP),
}


def arm(
    schedule: tuple[int, int, Callable[..., Any]] | None, step: Callable[[], None]
) -> Callable[[], None]:
    """``step`` under ``schedule`` (the arms share the module, so each step sets it)."""
    first, every, wrap = schedule or (_loss_check.FIRST_STEPS, _loss_check.EVERY, WRAP)

    def run() -> None:
        _loss_check.FIRST_STEPS, _loss_check.EVERY = first, every
        _loss_check.LossCheck.wrap = wrap  # type: ignore[method-assign]
        step()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--block", type=int, default=5, help="steps per arm per round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dataset, x, y = data("MLP", args.batch, 10 * args.batch)
    methods = []
    for name, schedule in SCHEDULES.items():
        torch.manual_seed(0)
        step, kids = spawning(lambda: gaussdp_step(mlp, dataset, x, y, "secure", idiom=True))
        assert not isinstance(step, str)
        methods.append(Method(name, arm(schedule, step), kids))
    measure(methods, args.rounds, args.block, args.warmup)
    print(
        f"MLP, batch {args.batch}, loss.backward() path, {args.threads} thread(s); "
        f"{args.rounds} rounds of {args.block} steps per arm; ms per step"
    )
    print(f"{'arm':8s} {'CPU median [range]':>26s} {'wall median':>12s} {'CPU / plain':>12s}")
    base = statistics.median(methods[0].cpu)
    for m in methods:
        cpu = statistics.median(m.cpu)
        print(
            f"{m.name:8s} {1e3 * cpu:9.2f} [{1e3 * min(m.cpu):6.2f}, {1e3 * max(m.cpu):6.2f}] "
            f"{1e3 * statistics.median(m.wall):12.2f} {cpu / base:12.3f}"
        )


if __name__ == "__main__":
    main()
