"""Accounting benchmark: gaussdp's PLD accountant against dp_accounting, in one run.

Every measurement runs in a fresh child process, which reports its CPU time
(``time.process_time``, not wall time: the machine may be shared) and its peak RSS
(``VmHWM``);
rounds are interleaved (round 1 of every case and method, then round 2, ...) and the
table shows the median CPU time with its range, and gaussdp's CPU time over
dp_accounting's, round by round (median and range; "loses" where gaussdp is slower).
Children are limited to 4 GB of address space and ``--timeout`` seconds of CPU time; a
child over either is reported as failed.

Tables:

* headline cases (δ = 1e-5 unless stated): the DP-SGD reference (σ = 1.1,
  q = 256/60000, 14,063 steps) at δ = 1e-5 and 1e-12, the small-q cases of issue 10,
  a long run at small δ (σ = 1, q = 1e-3, 10⁵ steps, δ = 1e-9: the round-off allowance
  matters), the large-dataset run that used to exhaust memory (σ = 1, q = 2.56e-4,
  39,063 steps, δ = 1e-6), mixes of 10 and 100 distinct events (subsampled Gaussians, discrete
  Gaussians, discrete Laplace), and 5 exponential-mechanism steps (ε = 1) with 10 runs of a
  subsampled Gaussian (σ = 5, q = 1e-3) — gaussdp only: dp_accounting has no
  ε-bounded-range event;
* the sweep q ∈ {1e-5, 1e-4, 1e-3, 1e-2, 0.1} × steps ∈ {1e3, 1e4, 1e5, 1e6} ×
  σ ∈ {0.6, 1, 2} at δ = 1e-5 (``--sweep``; ``--sweep-rounds`` interleaved rounds,
  default 3; gaussdp only unless ``--sweep-peers``). With ``--sweep-matched`` (and
  peers), every case where dp_accounting's ε is looser than gaussdp's certified bracket
  allows is run once more with gaussdp at the tolerance that dp_accounting's ε meets
  (half its distance to gaussdp's upper bound, in [1e-4, 0.1]): the comparison at equal
  tightness. With ``--sweep-truth``, dp_accounting's optimistic estimate (losses rounded
  down: a lower estimate of the true ε) at the finer grid h = 2e-5 is run once per case
  and the totals say in how many cases gaussdp's certified upper bound is at least it.

Peers: dp_accounting's PLD accountant at h = 1e-4 (the ``bench`` extra). Run::

    python benchmarks/accounting.py [--rounds 3] [--sweep [--sweep-peers]
        [--sweep-matched] [--sweep-truth] [--sweep-rounds 2]] [--timeout 120] [--only mix --only EM]
        [--gaussdp-only] [--no-headline]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

MIX_DELTA = 1e-5


def _mix(n: int) -> list[tuple[str, dict[str, float], int]]:
    """``n`` distinct events in the proportions 5 : 3 : 2 (subsampled Gaussian, discrete
    Gaussian, discrete Laplace), 20 runs each."""
    out: list[tuple[str, dict[str, float], int]] = []
    for i in range(n):
        kind = i % 10
        j = i // 10
        if kind < 5:
            out.append(("sg", {"sigma": 0.8 + 0.1 * kind + 0.01 * j, "q": 0.01 * (kind + 1)}, 20))
        elif kind < 8:
            out.append(("dg", {"sigma": 6.0 + 3.0 * (kind - 5) + 0.1 * j}, 20))
        else:
            out.append(("dl", {"scale": 8.0 + 4.0 * (kind - 8) + 0.1 * j}, 20))
    return out


# -- one measurement (in the child) ----------------------------------------------------
def _gaussdp(spec: dict[str, Any]) -> dict[str, Any]:
    from fractions import Fraction

    from gaussdp.accounting import PLDAccountant, Subsampled
    from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian

    acc = PLDAccountant(tolerance=spec.get("tolerance"))  # None: the default τ = 1e-4
    if spec["kind"] == "em":
        from gaussdp.accounting import ExponentialMechanism

        acc.compose(ExponentialMechanism(spec["em_epsilon"]), spec["em_count"])
        acc.compose(Subsampled(Gaussian(spec["sigma"]), spec["q"]), spec["steps"])
    elif spec["kind"] == "dpsgd":
        acc.compose(Subsampled(Gaussian(spec["sigma"]), spec["q"]), spec["steps"])
    else:
        for kind, p, count in _mix(spec["n"]):
            if kind == "sg":
                acc.compose(Subsampled(Gaussian(p["sigma"]), p["q"]), count)
            elif kind == "dg":
                s2 = Fraction(p["sigma"]).limit_denominator(1000) ** 2
                acc.compose(DiscreteGaussian(s2), count)
            else:
                acc.compose(DiscreteLaplace(Fraction(p["scale"]).limit_denominator(1000)), count)
    b = acc.epsilon(spec["delta"])
    out = {"eps": b.upper, "lower": b.lower, "label": b.method + (" (note)" if b.note else "")}
    if "tolerance" in spec:
        out["tolerance"] = spec["tolerance"]
    return out


#: The method name of dp_accounting's optimistic estimate at a finer grid (``--sweep-truth``).
TRUTH = "dp_acc truth"
TRUTH_STEP = 2e-5


def _dp_accounting(spec: dict[str, Any]) -> dict[str, Any]:
    from dp_accounting.pld import privacy_loss_distribution as pldlib

    # "dp_acc truth": the optimistic estimate (losses rounded down) at a 5x finer grid, a
    # lower estimate of the true ε that gaussdp's certified upper bound must not be below.
    truth = spec["method"] == TRUTH
    h = TRUTH_STEP if truth else 1e-4
    if spec["kind"] == "em":
        return {"na": "no ε-bounded-range event"}
    if spec["kind"] == "dpsgd":
        one = pldlib.from_gaussian_mechanism(
            spec["sigma"],
            sampling_prob=spec["q"],
            value_discretization_interval=h,
            pessimistic_estimate=not truth,
        )
        total = one.self_compose(spec["steps"])
    else:
        total = None
        for kind, p, count in _mix(spec["n"]):
            if kind == "sg":
                one = pldlib.from_gaussian_mechanism(
                    p["sigma"], sampling_prob=p["q"], value_discretization_interval=h
                )
            elif kind == "dg":
                one = pldlib.from_discrete_gaussian_mechanism(
                    p["sigma"], value_discretization_interval=h
                )
            else:
                one = pldlib.from_discrete_laplace_mechanism(
                    1.0 / p["scale"], value_discretization_interval=h
                )
            part = one.self_compose(count)
            total = part if total is None else total.compose(part)
    assert total is not None
    return {"eps": total.get_epsilon_for_delta(spec["delta"]), "lower": None, "label": ""}


def _child(spec: dict[str, Any]) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    limit = int(spec["cpu_limit"])
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit))
    # Imports are not timed.
    ours = spec["method"].startswith("gaussdp")
    if ours:
        # scipy.optimize is imported lazily by the PLD's lower hull (about a second);
        # imported here so that it is not timed either.
        import scipy.optimize  # noqa: F401

        import gaussdp.accounting  # noqa: F401
    else:
        import dp_accounting.pld.privacy_loss_distribution  # noqa: F401
    start = time.process_time()
    out = _gaussdp(spec) if ours else _dp_accounting(spec)
    out["cpu"] = time.process_time() - start
    out["rss_mb"] = _peak_rss_mb()
    print(json.dumps(out))


def _peak_rss_mb() -> float:
    """This process's peak resident memory (``VmHWM``; ``ru_maxrss`` of a subprocess
    child on Linux can carry its parent's peak), in MB; ``ru_maxrss`` where there is no
    /proc."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- the parent --------------------------------------------------------------------------
def _run(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    # The limit is on CPU time (RLIMIT_CPU in the child): on a shared machine wall time
    # says little. The wall-clock limit is only a backstop.
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps({**spec, "cpu_limit": timeout})],
            capture_output=True,
            text=True,
            timeout=20 * timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"over {20 * timeout:.0f} s wall"}
    if proc.returncode == -signal.SIGXCPU or proc.returncode == -signal.SIGKILL:
        return {"error": f"over {timeout:.0f} s CPU"}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": last[:60]}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _measure(
    cases: list[tuple[str, dict[str, Any]]], methods: list[str], rounds: int, timeout: float
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for name, spec in cases:
            for method in methods:
                prior = results.setdefault((name, method), [])
                if prior and "error" in prior[-1]:
                    continue  # failed once: not retried
                prior.append(_run({**spec, "method": method}, timeout))
                print(f"  {name}, {method}: {prior[-1]}", file=sys.stderr, flush=True)
    return results


def _table(
    title: str,
    cases: list[tuple[str, dict[str, Any]]],
    methods: list[str],
    results: dict[tuple[str, str], list[dict[str, Any]]],
) -> None:
    print(f"\n{title}")
    print(
        "CPU ×dp_acc: gaussdp's CPU time / dp_accounting's, per interleaved round, median "
        "[range]; 'loses' where gaussdp is slower (median > 1). ε/dp_acc: upper ε / "
        "dp_accounting's ε."
    )
    head = f"{'case':34} {'method':14} {'CPU s median [range]':24} {'CPU ×dp_acc':>24} "
    print(head + f"{'peak RSS':>9} {'upper ε':>12} {'lower ε':>12} {'ε/dp_acc':>10}  label")
    for name, _ in cases:
        peer = results.get((name, "dp_accounting"), [{}])
        ref = peer[-1].get("eps")
        for method in methods:
            if (name, method) not in results:
                continue
            runs = results[(name, method)]
            if runs and "na" in runs[-1]:
                print(f"{name:34} {method:14} n/a: {runs[-1]['na']}")
                continue
            if any("error" in r for r in runs):
                print(f"{name:34} {method:14} failed: {runs[-1]['error']}")
                continue
            cpu = [r["cpu"] for r in runs]
            spread = f"{statistics.median(cpu):.3f} [{min(cpu):.3f}, {max(cpu):.3f}]"
            rss = max(r["rss_mb"] for r in runs)
            r = runs[-1]
            low = "" if r["lower"] is None else f"{r['lower']:.6g}"
            ratio = f"{r['eps'] / ref:.5f}" if ref and math.isfinite(r["eps"]) else ""
            label = r["label"] + (f" τ={r['tolerance']:.2g}" if "tolerance" in r else "")
            speed = _cpu_ratio(cpu, peer) if method == "gaussdp" else ""
            print(
                f"{name:34} {method:14} {spread:24} {speed:>24} {rss:7.0f}MB "
                f"{r['eps']:12.6g} {low:>12} {ratio:>10}  {label}"
            )


def _cpu_ratio(cpu: list[float], peer: list[dict[str, Any]]) -> str:
    """gaussdp's CPU time over dp_accounting's, round by round (the rounds are
    interleaved, so each pair ran under the same load): median [range], and "loses"
    where the median is above 1. Empty without a peer that finished every round."""
    theirs = [r.get("cpu") for r in peer]
    if len(theirs) != len(cpu) or not all(isinstance(t, float) and t > 0 for t in theirs):
        return ""
    ratios = [mine / t for mine, t in zip(cpu, theirs, strict=True)]
    median = statistics.median(ratios)
    text = f"{median:.3g} [{min(ratios):.3g}, {max(ratios):.3g}]"
    return text + (" loses" if median > 1 else "")


def _totals(
    cases: list[tuple[str, dict[str, Any]]],
    methods: list[str],
    results: dict[tuple[str, str], list[dict[str, Any]]],
) -> None:
    """The sweep's totals per method over the cases every method finished: the sum of
    the median CPU times, the largest peak RSS, and (against dp_accounting) in how many
    cases gaussdp's certified upper bound is at most dp_accounting's ε."""

    def ok(name: str, method: str) -> bool:
        runs = results.get((name, method), [])
        return bool(runs) and not any("error" in r or "na" in r for r in runs)

    common = [name for name, _ in cases if all(ok(name, m) for m in methods)]
    print(f"\nTotals over the {len(common)} of {len(cases)} cases that every method finished:")
    for method in methods:
        runs = [results[(name, method)] for name in common]
        cpu = sum(statistics.median(r["cpu"] for r in rs) for rs in runs)
        rss = max((max(r["rss_mb"] for r in rs) for rs in runs), default=0.0)
        line = f"  {method:16} CPU {cpu:8.2f} s   peak RSS {rss:6.0f} MB"
        if method != "dp_accounting" and "dp_accounting" in methods:
            tighter = sum(
                1
                for name in common
                if results[(name, method)][-1]["eps"] <= results[(name, "dp_accounting")][-1]["eps"]
            )
            line += f"   upper ≤ dp_accounting's ε in {tighter} of {len(common)}"
        print(line)
    failed = [(name, m) for name, _ in cases for m in methods if not ok(name, m)]
    for name, method in failed:
        print(f"  not finished: {name}, {method}")


def _truth(
    cases: list[tuple[str, dict[str, Any]]], results: dict[tuple[str, str], list[dict[str, Any]]]
) -> None:
    """In how many cases gaussdp's certified upper bound is at least dp_accounting's
    optimistic estimate at the finer grid (a lower estimate of the true ε: its losses are
    rounded down), over the cases both finished; the cases where it is not are listed."""
    both = [
        name
        for name, _ in cases
        if "eps" in results.get((name, "gaussdp"), [{}])[-1]
        and "eps" in results.get((name, TRUTH), [{}])[-1]
    ]
    below = [n for n in both if results[(n, "gaussdp")][-1]["eps"] < results[(n, TRUTH)][-1]["eps"]]
    print(
        f"  upper ≥ dp_accounting's optimistic ε at h = {TRUTH_STEP:g} in "
        f"{len(both) - len(below)} of {len(both)} cases both finished"
        + (f"; below in: {', '.join(below)}" if below else "")
    )


def _matched(
    cases: list[tuple[str, dict[str, Any]]],
    results: dict[tuple[str, str], list[dict[str, Any]]],
) -> list[tuple[str, dict[str, Any]]]:
    """The cases where dp_accounting's ε is looser than 2e-4 relative to gaussdp's
    certified upper bound, with the tolerance that puts gaussdp's bracket (hence its
    upper bound, within the tolerance of the truth) below dp_accounting's ε: half the
    relative distance, in [1e-4, 0.1]."""
    out = []
    for name, spec in cases:
        ours = results.get((name, "gaussdp"), [{}])[-1].get("eps")
        theirs = results.get((name, "dp_accounting"), [{}])[-1].get("eps")
        if not ours or not theirs or not math.isfinite(ours):
            continue
        loose = theirs / ours - 1.0
        if loose > 2e-4:
            out.append((name, {**spec, "tolerance": min(0.1, loose / 2)}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sweep", action="store_true", help="also run the 60-case sweep")
    parser.add_argument("--no-headline", action="store_true", help="skip the headline cases")
    parser.add_argument(
        "--sweep-peers", action="store_true", help="run dp_accounting on the sweep too"
    )
    parser.add_argument("--sweep-rounds", type=int, default=3, help="rounds of the sweep")
    parser.add_argument(
        "--sweep-truth",
        action="store_true",
        help=f"with --sweep: check gaussdp's upper bound against dp_accounting's optimistic "
        f"estimate (a lower estimate of the truth) at h = {TRUTH_STEP:g}, one round",
    )
    parser.add_argument(
        "--sweep-matched",
        action="store_true",
        help="with --sweep-peers: rerun gaussdp at dp_accounting's tightness where it is looser",
    )
    parser.add_argument("--timeout", type=int, default=60, help="CPU seconds per child")
    parser.add_argument(
        "--only", action="append", help="headline cases whose name contains this (repeatable)"
    )
    parser.add_argument("--gaussdp-only", action="store_true", help="do not run dp_accounting")
    args = parser.parse_args()
    if args.child:
        _child(json.loads(args.child))
        return
    methods = ["gaussdp"] if args.gaussdp_only else ["gaussdp", "dp_accounting"]
    headline: list[tuple[str, dict[str, Any]]] = [
        (
            "DP-SGD ref δ=1e-5",
            {"kind": "dpsgd", "sigma": 1.1, "q": 256 / 60000, "steps": 14063, "delta": 1e-5},
        ),
        (
            "DP-SGD ref δ=1e-12",
            {"kind": "dpsgd", "sigma": 1.1, "q": 256 / 60000, "steps": 14063, "delta": 1e-12},
        ),
        (
            "σ=0.8 q=1e-3 1e4 steps δ=1e-6",
            {"kind": "dpsgd", "sigma": 0.8, "q": 1e-3, "steps": 10_000, "delta": 1e-6},
        ),
        (
            "σ=1 q=1e-4 1e3 steps δ=1e-6",
            {"kind": "dpsgd", "sigma": 1.0, "q": 1e-4, "steps": 1000, "delta": 1e-6},
        ),
        (
            "σ=0.8 q=1e-3 1e6 steps",
            {"kind": "dpsgd", "sigma": 0.8, "q": 1e-3, "steps": 1_000_000, "delta": 1e-5},
        ),
        (
            "σ=1 q=1e-3 1e5 steps δ=1e-9",
            {"kind": "dpsgd", "sigma": 1.0, "q": 1e-3, "steps": 100_000, "delta": 1e-9},
        ),
        (
            "OOM: σ=1 q=2.56e-4 39063 δ=1e-6",
            {"kind": "dpsgd", "sigma": 1.0, "q": 2.56e-4, "steps": 39063, "delta": 1e-6},
        ),
        ("mix of 10 distinct events", {"kind": "mix", "n": 10, "delta": MIX_DELTA}),
        ("mix of 100 distinct events", {"kind": "mix", "n": 100, "delta": MIX_DELTA}),
        (
            "5 EM(ε=1) + 10 × σ=5 q=1e-3",
            {
                "kind": "em",
                "em_epsilon": 1.0,
                "em_count": 5,
                "sigma": 5.0,
                "q": 1e-3,
                "steps": 10,
                "delta": 1e-5,
            },
        ),
    ]
    if args.only:
        headline = [case for case in headline if any(part in case[0] for part in args.only)]
    if not args.no_headline:
        results = _measure(headline, methods, args.rounds, args.timeout)
        _table(f"Headline cases, {args.rounds} interleaved rounds", headline, methods, results)
    if args.sweep:
        sweep = [
            (
                f"q={q:g} k={k:g} σ={s:g}",
                {"kind": "dpsgd", "sigma": s, "q": q, "steps": k, "delta": 1e-5},
            )
            for q in (1e-5, 1e-4, 1e-3, 1e-2, 0.1)
            for k in (1000, 10_000, 100_000, 1_000_000)
            for s in (0.6, 1.0, 2.0)
        ]
        sweep_methods = methods if args.sweep_peers else ["gaussdp"]
        results = _measure(sweep, sweep_methods, args.sweep_rounds, args.timeout)
        if args.sweep_matched and "dp_accounting" in sweep_methods:
            matched = _matched(sweep, results)
            results.update(_measure(matched, ["gaussdp matched"], args.sweep_rounds, args.timeout))
            sweep_methods = [*sweep_methods, "gaussdp matched"]
        if args.sweep_truth:
            results.update(_measure(sweep, [TRUTH], 1, args.timeout))
            sweep_methods = [*sweep_methods, TRUTH]
        rounds = args.sweep_rounds
        _table(f"Sweep, δ = 1e-5, {rounds} interleaved round(s)", sweep, sweep_methods, results)
        _totals(sweep, [m for m in sweep_methods if m not in ("gaussdp matched", TRUTH)], results)
        if args.sweep_truth:
            _truth(sweep, results)


if __name__ == "__main__":
    main()
