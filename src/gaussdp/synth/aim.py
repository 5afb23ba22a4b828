r"""AIM's adaptive rounds (McKenna, Mullins, Sheldon & Miklau 2022, Algorithm 1).

After the 1-way marginals are measured, each round

1. keeps the candidates — the workload's downward closure W₊ — whose addition
   keeps the model within ``(ρ_used/ρ)·max_model_size`` MB (those already
   covered by the model's cliques are free);
2. chooses one by the exponential mechanism (exact, :func:`exponential_mechanism`)
   with AIM's quality score,

       q_r = w_r·(‖M_r(D) − round(M_r(p̂))‖₁ − round(√(2/π)·σ·n_r)),

   w_r = Σ_{s ∈ W} |r ∩ s| the candidate's weight, M_r(D) the *bounded*
   marginal as the engine bounds it, M_r(p̂) the current model's marginal
   (public), n_r its cells and σ the noise this round will add: the error
   minus the noise expected from measuring r. Rounding the public parts makes
   the score an integer; one unit changes M_r(D) by at most L0·L∞ in L1, so
   the score's sensitivity is max_r w_r·L0·L∞ over the candidates;
3. measures the chosen marginal through a :class:`~gaussdp.release.Release`
   (exact discrete Gaussian noise) and re-fits the model, warm-started;
4. anneals (AIM Alg. 1, budget annealing): if the model's marginal on r moved by at most
   √(2/π)·σ·n_r, the next rounds use σ/2 and 2ε (4× the ρ per round).

Budget (AIM Alg. 1, budget annealing): with T rounds (default 16d) and α = 0.9, a round
costs ρ/T at first, α of it for the measurement (ρ_m = Δ²/(2σ²)) and 1 − α for
the selection (ε²/8, Cesar & Rogers 2021 Lemma 3.2). When less than two rounds'
cost is left, the last round spends exactly the rest. ρ_used is the exact sum
of the *realised* costs (σ² rounded up, ε rounded down), so the total never
exceeds ρ. The number of rounds and each round's parameters depend on the
data, so the guarantee is that of a zCDP privacy filter: a sequence of
adaptively chosen ρᵢ-zCDP steps stopped before Σρᵢ exceeds ρ is ρ-zCDP
(AIM, its privacy analysis; the Rényi filter of Feldman & Zrnic 2021 at
every Rényi order, zCDP being RDP of order a with a·ρ).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from gaussdp._search import fraction_down
from gaussdp.errors import invalid
from gaussdp.random import RandomSource
from gaussdp.synth.select import exponential_mechanism

__all__ = ["ALPHA", "Round", "run_rounds", "workload_cliques", "workload_weights"]

#: The share of each round's ρ spent on the measurement (AIM Alg. 1, budget annealing: α = 0.9).
ALPHA = Fraction(9, 10)

Clique = tuple[str, ...]


def workload_cliques(names: Sequence[str], workload: object) -> tuple[Clique, ...]:
    """The workload as cliques of ``names``: ``None`` (all 3-way), ``k`` (all k-way) or a list.

    Examples
    --------
    >>> workload_cliques(["a", "b", "c"], 2)
    (('a', 'b'), ('a', 'c'), ('b', 'c'))
    >>> workload_cliques(["a", "b"], None)
    (('a', 'b'),)
    """
    d = len(names)
    if workload is None:
        workload = min(3, d)
    if isinstance(workload, int) and not isinstance(workload, bool):
        if not 1 <= workload <= d:
            raise ValueError(invalid("workload", f"an order between 1 and {d}", workload))
        return tuple(itertools.combinations(names, workload))
    if isinstance(workload, str | bytes) or not isinstance(workload, Sequence) or not workload:
        raise ValueError(
            invalid("workload", "an order k (all k-way marginals) or a list of cliques", workload)
        )
    order = {n: i for i, n in enumerate(names)}
    out: list[Clique] = []
    for clique in workload:
        cols = [clique] if isinstance(clique, str) else clique
        if (
            not isinstance(cols, Sequence)
            or not cols
            or any(not isinstance(c, str) or c not in order for c in cols)
            or len(set(cols)) != len(cols)
        ):
            raise ValueError(
                invalid("workload entry", f"distinct column names among {list(names)}", clique)
            )
        key = tuple(sorted(cols, key=order.__getitem__))
        if key not in out:
            out.append(key)
    return tuple(out)


def workload_weights(workload: Sequence[Clique]) -> dict[Clique, int]:
    """w_r = Σ_{s ∈ W} |r ∩ s| for every r in the downward closure of W (AIM, workload weights).

    Examples
    --------
    >>> workload_weights([("a", "b")])
    {('a',): 1, ('b',): 1, ('a', 'b'): 2}
    """
    closure: list[Clique] = []
    for s in workload:
        for k in range(1, len(s) + 1):
            for r in itertools.combinations(s, k):
                if r not in closure:
                    closure.append(r)
    closure.sort(key=len)
    return {r: sum(len(set(r) & set(s)) for s in workload) for r in closure}


@dataclass(frozen=True, slots=True)
class Round:
    """One round: the chosen clique, the selection's ε and sensitivity, the measurement."""

    clique: Clique
    epsilon: float
    sensitivity: int
    measurement: Any  # gaussdp.synth.model.Measurement
    release: Any  # the Release that measured it
    annealed: bool


def _largest_epsilon(rho_select: Fraction) -> float:
    """The largest float ε with ε²/8 ≤ ``rho_select`` exactly (Cesar & Rogers 2021 Lemma 3.2)."""
    eps = math.sqrt(8 * float(rho_select))
    while Fraction(eps) ** 2 / 8 > rho_select:
        eps = math.nextafter(eps, 0.0)
    return eps


def run_rounds(
    *,
    sizes: Mapping[str, int],
    weights: Mapping[Clique, int],
    truth: Mapping[Clique, npt.NDArray[np.int64]],
    measurements: list[Any],
    capacity: Fraction,
    used: Fraction,
    rounds: int,
    max_model_size: float,
    unit_sensitivity: int,
    measure: Callable[[Clique, float], tuple[Any, Any, Fraction]],
    sigma_of: Callable[[float], float],
    fit: Callable[[list[Any], Any], Any],
    source: RandomSource,
) -> tuple[list[Round], Any]:
    """Run AIM's rounds until ``capacity`` is spent; return them and the last model.

    ``measurements`` (the 1-way ones) is extended in place. ``measure(clique,
    rho)`` measures a marginal with at most ``rho`` (a float) and returns the
    measurement, its release and its exact realised ρ; ``sigma_of(rho)`` is
    the noise std such a measurement adds (in rows); ``fit(measurements,
    warm_start)`` fits the model. ``truth`` holds the bounded true marginals of
    every candidate (C order); ``unit_sensitivity`` is L0·L∞. The realised
    ρ's are in the rounds' events (the report); their exact sum never exceeds
    ``capacity`` (checked here).
    """
    from gaussdp.synth.model import _mbi, model_marginal

    mbi = _mbi()
    domain = mbi.Domain(tuple(sizes), tuple(sizes.values()))
    cells = {r: math.prod(sizes[a] for a in r) for r in weights}
    bias_factor = math.sqrt(2 / math.pi)  # E|Z| = σ√(2/π) for Z ~ N(0, σ²)
    # AIM Alg. 1: σ₀ = √(T/(2αρ)), ε₀ = √(8(1 − α)ρ/T), so a round costs ρ/T at first.
    round_rho = capacity / rounds
    rho_m, rho_s = ALPHA * round_rho, (1 - ALPHA) * round_rho
    model = fit(measurements, None)
    done: list[Round] = []
    while True:
        remaining = capacity - used
        last = remaining < 2 * (rho_m + rho_s)
        if last:  # AIM Alg. 1: the last round spends exactly what is left.
            rho_m, rho_s = ALPHA * remaining, (1 - ALPHA) * remaining
        epsilon = _largest_epsilon(rho_s)
        rho_measure = fraction_down(rho_m)
        sigma = sigma_of(rho_measure)
        # AIM Alg. 1's model-size filter: cliques the model already covers are free.
        limit = max_model_size * float((used + rho_m + rho_s) / capacity)
        model_cliques = [tuple(c) for c in model.cliques]
        free = _subsets(model_cliques, list(sizes))
        candidates = [
            r
            for r in weights
            if r in free
            or mbi.junction_tree.hypothetical_model_size(domain, [*model_cliques, r]) <= limit
        ]
        scores = []
        for r in candidates:
            estimate = np.rint(model_marginal(model, r).ravel()).astype(np.int64)
            error = int(np.abs(truth[r] - estimate).sum())
            scores.append(weights[r] * (error - round(bias_factor * sigma * cells[r])))
        sensitivity = max(weights[r] for r in candidates) * unit_sensitivity
        chosen = candidates[
            exponential_mechanism(scores, epsilon=epsilon, sensitivity=sensitivity, rng=source)
        ]
        measurement, release, rho_used = measure(chosen, rho_measure)
        used += rho_used + Fraction(epsilon) ** 2 / 8
        if used > capacity:  # pragma: no cover - excluded by construction; never under-report
            raise AssertionError(f"AIM spent {float(used)} > {float(capacity)}")
        before = model_marginal(model, chosen).ravel()
        measurements.append(measurement)
        model = fit(measurements, model)
        moved = float(np.abs(model_marginal(model, chosen).ravel() - before).sum())
        annealed = not last and moved <= bias_factor * measurement.sigma * cells[chosen]
        done.append(Round(chosen, epsilon, sensitivity, measurement, release, annealed))
        if last:
            return done, model
        if annealed:  # AIM Alg. 1, budget annealing: σ/2 and 2ε, so 4× the ρ of each part.
            rho_m, rho_s = 4 * rho_m, 4 * rho_s


def _subsets(cliques: Sequence[Clique], names: Sequence[str]) -> set[Clique]:
    """Every non-empty subset of every clique, its columns in ``names`` order."""
    order = {n: i for i, n in enumerate(names)}
    out: set[Clique] = set()
    for c in cliques:
        ordered = sorted(c, key=order.__getitem__)
        for k in range(1, len(ordered) + 1):
            out.update(itertools.combinations(ordered, k))
    return out
