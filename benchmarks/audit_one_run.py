"""One-run audits (Steinke, Nasr, Jagielski 2023): audited ε next to the certified ε.

Run with ``python benchmarks/audit_one_run.py [--seed 1]``. The DP-SGD rows need the
``torch`` extra. Each row is one run of the mechanism: a table release with one
group per canary unit (:func:`gaussdp.audit.one_run.audit_table_release_one_run`),
or DP-SGD with gradient canaries (:func:`gaussdp.audit.one_run.audit_dpsgd_one_run`).
The guesses (k₊ = k₋) are fixed per row before the run. It prints a markdown table
with the wall time and the CPU time (this process and its children, the noise
worker included while it runs) of each row; docs/audit.md quotes it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time

import pandas as pd

from gaussdp.accounting import format_bound
from gaussdp.audit.one_run import (
    OneRunAuditResult,
    audit_dpsgd_one_run,
    audit_table_release_one_run,
)
from gaussdp.random import ChaCha20Random
from gaussdp.release import Budget, Release

# (certified ε of the release, canaries, k₊ = k₋)
TABLE_ROWS = [(1.0, 10_000, 500), (2.0, 10_000, 300), (4.0, 10_000, 100), (8.0, 10_000, 100)]
# (σ, steps, canaries, k₊ = k₋); q = 0.5: batch (100 + canaries)/2 of 100 examples + canaries
DPSGD_ROWS = [
    (4.0, 50, 1000, 100),
    (2.0, 50, 1000, 100),
    (1.0, 50, 1000, 100),
    (1.0, 50, 5000, 500),
]


def _live_children_cpu() -> float:
    """CPU seconds of this process's children that have not been waited for (the noise
    worker of a DP-SGD run lives as long as its model): ``utime + stime`` from
    ``/proc/<pid>/stat`` (Linux; 0 elsewhere). ``os.times`` counts a child only once it
    has been waited for, so the two parts never count the same child twice."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0.0
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids = f.read().split()
        except OSError:
            continue
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / ticks


def _clock() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and of its children, live or waited for)."""
    t = os.times()
    own = t.user + t.system + t.children_user + t.children_system
    return time.perf_counter(), own + _live_children_cpu()


def table_audit(epsilon: float, canaries: int, k: int, seed: int) -> OneRunAuditResult:
    """Sum of x by g with public keys; each canary unit holds 1000 in its own group."""

    def build(frame: pd.DataFrame, keys: list[int]) -> Release:
        return Release(
            frame,
            privacy_unit="user",
            budget=Budget(epsilon=epsilon, delta=1e-6),
            max_groups_per_unit=1,
            max_rows_per_group=1,
        ).sum("x", by="g", keys=keys, bounds=(0, 1000))

    return audit_table_release_one_run(
        build, canaries=canaries, value=1000.0, k_plus=k, k_minus=k, rng=ChaCha20Random(seed)
    )


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print("| mechanism | canaries | guesses | right | audited ε ≥ | certified ε ≤ | wall / CPU |")
    print("|---|---|---|---|---|---|---|")

    def row(name: str, result: OneRunAuditResult, start: tuple[float, float]) -> None:
        wall, cpu = (b - a for a, b in zip(start, _clock(), strict=True))
        print(
            f"| {name} | {result.canaries} | {result.guesses} | {result.correct} | "
            f"{format_bound(result.epsilon_lower, up=False, digits=3)} | "
            f"{format_bound(result.epsilon_certified, up=True, digits=3)} | "
            f"{wall:.1f} s / {cpu:.1f} s |",
            flush=True,
        )

    for epsilon, canaries, k in TABLE_ROWS:
        start = _clock()
        result = table_audit(epsilon, canaries, k, args.seed)
        row(f"table release, sum, budget ({epsilon:g}, 1e-6)", result, start)
    if importlib.util.find_spec("torch") is None:
        return
    import torch

    torch.set_num_threads(1)  # see docs/audit.md: spinning intra-op workers on a busy machine
    for sigma, steps, canaries, k in DPSGD_ROWS:
        start = _clock()
        result = audit_dpsgd_one_run(
            canaries=canaries,
            k_plus=k,
            k_minus=k,
            noise_multiplier=sigma,
            steps=steps,
            examples=100,
            batch_size=(100 + canaries) // 2,
            rng=ChaCha20Random(args.seed),
        )
        name = f"DP-SGD, σ = {sigma:g}, q = 0.5, {steps} steps, δ = 1e-5"
        row(name, result, start)


if __name__ == "__main__":
    main()
