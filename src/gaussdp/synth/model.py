"""A graphical model fitted to noisy marginals with Private-PGM (``mbi``), and sampling from it.

Post-processing only: the model sees the noisy measurements, never the data.
``mbi`` (the ``synth`` extra) and JAX are imported on first use. JAX is set to
64-bit floats (``mbi`` warns that 32 bits can stall on large tables) and its
persistent compilation cache is turned off (``mbi`` advises it) — process-wide
settings of JAX, made once.
"""

from __future__ import annotations

import importlib
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gaussdp.errors import MissingExtraError, invalid

__all__ = ["Measurement", "estimate_total", "fit_model", "sample_codes"]


@dataclass(frozen=True)
class Measurement:
    """A noisy marginal: counts over the cells of ``clique`` (C order), noise std ``sigma``.

    ``cells`` (after domain compression) gives the number of domain cells
    summed in each value, whose noise std is then ``sigma``·√cells.
    """

    clique: tuple[str, ...]
    values: npt.NDArray[np.float64]
    sigma: float
    cells: npt.NDArray[np.int64] | None = None


def estimate_total(measurements: Sequence[Measurement]) -> float:
    """The minimum-variance unbiased combination of the measurements' totals (≥ 1).

    Each measurement's Σ values estimates the total with variance σ²·(its
    domain cells); the inverse-variance weighted mean is the minimum-variance
    unbiased combination (as ``mbi.estimation.minimum_variance_unbiased_total``,
    which does not count compressed measurements).
    """
    estimates = np.array([float(m.values.sum()) for m in measurements])
    variances = np.array(
        [
            m.sigma**2 * (m.values.size if m.cells is None else float(m.cells.sum()))
            for m in measurements
        ]
    )
    if not len(estimates):
        return 1.0
    return max(1.0, float(np.average(estimates, weights=1.0 / variances)))


def _mbi() -> Any:
    try:
        jax: Any = importlib.import_module("jax")
    except ImportError as error:  # pragma: no cover - depends on the installation
        raise MissingExtraError("gaussdp.synth (Private-PGM)", "synth") from error
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_compilation_cache", False)
    return importlib.import_module("mbi")


@dataclass(frozen=True)
class _SlotLoss:
    """½ Σ_slots Σ_j w_j·(μ_r,j − ȳ_j)²: Private-PGM's L2 loss grouped by clique.

    A static part of the compiled program (``mbi`` jits one mirror-descent
    block per loss structure): compared by its ``slots`` only, so two fits
    whose models have the same cliques reuse one compiled program whatever
    their measurements (the weights and targets are traced data).
    """

    slots: tuple[tuple[str, ...], ...]

    def __call__(self, marginals: Any, data: Any) -> Any:
        import jax.numpy as jnp

        loss: Any = 0.0
        for r, (w, y) in zip(self.slots, data, strict=True):
            diff = marginals.project(r).datavector() - y
            loss += 0.5 * jnp.vdot(w * diff, diff)
        return loss


def _slots(
    cliques: Sequence[tuple[str, ...]], names: Sequence[str]
) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """The model's cliques (maximal measured ones) and every loss slot.

    The slots are every non-empty subset of a model clique of at most 3
    columns (so measuring one of them later does not change the program)
    and the measured cliques themselves, in a fixed order.
    """
    order = {n: i for i, n in enumerate(names)}
    distinct = sorted(set(cliques), key=lambda c: (-len(c), [order[a] for a in c]))
    maximal = [c for i, c in enumerate(distinct) if not any(set(c) <= set(b) for b in distinct[:i])]
    slots = set(distinct)
    for c in maximal:
        if len(c) <= 3:
            for k in range(1, len(c) + 1):
                slots.update(itertools.combinations(c, k))
    return maximal, sorted(slots, key=lambda c: (len(c), [order[a] for a in c]))


def _lipschitz(
    sizes: Mapping[str, int],
    maximal: Sequence[tuple[str, ...]],
    weight: Mapping[tuple[str, ...], npt.NDArray[np.float64]],
) -> float:
    """The loss gradient's Lipschitz constant, bounded as ``mbi`` does for identity queries
    (``calculate_l2_lipschitz_from_metadata``): max over model cliques C of
    Σ_{r routed to C} max(W_r)·|C|/|r| (exact when W is flat), each slot r routed, as
    ``mbi``'s ``clique_mapping`` does, to the containing model clique of smallest domain
    (the first such in ``maximal``'s order on a tie)."""

    def cells(c: Sequence[str]) -> int:
        return math.prod(sizes[a] for a in c)

    blocks = dict.fromkeys(maximal, 0.0)
    for r, w in weight.items():
        home = min((c for c in maximal if set(r) <= set(c)), key=cells)
        blocks[home] += float(w.max()) * cells(home) / w.size
    return max(max(blocks.values()), 1e-12)


def fit_model(
    sizes: Mapping[str, int],
    measurements: Sequence[Measurement],
    *,
    iters: int,
    warm_start: Any = None,
) -> Any:
    """Fit a Markov random field to ``measurements`` by mirror descent (Private-PGM).

    The loss is Private-PGM's, ½ Σ_m ‖(Q_m μ_m − y_m)/σ_m‖² (McKenna et al.
    2019, Algorithm 1, as ``mbi.estimation.MirrorDescent`` minimises it; Q_m
    scales a merged cell's entry by 1/√cells, its noise std being σ√cells).
    Measurements of one clique are combined into their sufficient statistic —
    per cell the weight W = Σ_m q²/σ_m² and the weighted mean ȳ = Σ_m (q²/σ_m²)
    y_m / W — which changes the loss by a constant only (same gradient, same
    minimiser), and every subset of a model clique gets a slot (weight 0 when
    unmeasured): the compiled program then depends on the model's cliques
    only, and AIM's rounds that measure a clique the model covers reuse it.
    The total is :func:`estimate_total`. ``warm_start`` (a model fitted to a
    subset of the measurements) starts from its potentials.
    """
    mbi = _mbi()
    names = tuple(sizes)
    domain = mbi.Domain(names, tuple(sizes.values()))
    maximal, slots = _slots([m.clique for m in measurements], names)
    weight = {r: np.zeros(math.prod(sizes[a] for a in r)) for r in slots}
    target = {r: np.zeros_like(weight[r]) for r in slots}
    for m in measurements:
        q2 = 1.0 if m.cells is None else 1.0 / m.cells.astype(np.float64)
        w = q2 / m.sigma**2 * np.ones_like(weight[m.clique])
        weight[m.clique] += w
        target[m.clique] += w * np.asarray(m.values, dtype=np.float64)
    data = tuple(
        (
            weight[r],
            np.divide(target[r], weight[r], out=np.zeros_like(weight[r]), where=weight[r] > 0),
        )
        for r in slots
    )
    lipschitz = _lipschitz(sizes, maximal, weight)
    loss = mbi.marginal_loss.MarginalLossFn(maximal, _SlotLoss(tuple(slots)), data, lipschitz)
    total = estimate_total(measurements)
    return mbi.estimation.MirrorDescent().estimate(
        domain, loss, known_total=total, iters=iters, warm_start=warm_start
    )


def model_marginal(model: Any, clique: Sequence[str]) -> npt.NDArray[np.float64]:
    """The model's marginal over ``clique`` (an array with one axis per attribute).

    Computed in numpy from the potentials: the model is p(x) ∝ exp(Σ_C θ_C(x_C))
    (McKenna et al. 2019 §3), so the marginal is the sum over the other
    attributes of the product of exp(θ_C − max θ_C) — one ``numpy.einsum``
    whose greedy contraction order eliminates variables one by one —
    normalised to the model's total. This avoids compiling a JAX program for
    every marginal of every model (AIM asks for many); ``mbi``'s variable
    elimination is the fallback if the product underflows.
    """
    domain = model.domain
    attrs = list(domain.attributes)
    index = {a: i for i, a in enumerate(attrs)}
    operands: list[Any] = []
    covered: set[str] = set()
    for c in model.potentials.cliques:
        theta = np.asarray(model.potentials.tables[c].values, dtype=np.float64)
        operands += [np.exp(theta - theta.max()), [index[a] for a in c]]
        covered.update(c)
    for a in clique:  # an attribute no potential mentions is uniform
        if a not in covered:
            operands += [np.ones(domain[a]), [index[a]]]
    out = np.einsum(*operands, [index[a] for a in clique], optimize="greedy")
    norm = out.sum()
    if not (np.isfinite(norm) and norm > 0):  # pragma: no cover - underflow of a degenerate model
        return np.asarray(model.project(tuple(clique)).datavector(flatten=False), dtype=np.float64)
    return np.asarray(out * (float(model.total) / norm), dtype=np.float64)


def sample_codes(
    model: Any, rows: int, *, rng: np.random.Generator
) -> dict[str, npt.NDArray[np.int64]]:
    """Draw ``rows`` i.i.d. records (cell codes per attribute) from ``model``.

    Forward sampling along the elimination order of the model's junction tree:
    each attribute is drawn from its conditional given the already drawn
    attributes of the cliques that contain it (the model's marginal over
    those attributes, normalised per conditioning cell). The randomness is
    ``rng`` only (``mbi``'s own sampler uses numpy's global generator).
    """
    if rows < 0:
        raise ValueError(invalid("rows", "an integer >= 0", rows))
    mbi = _mbi()
    domain = model.domain
    jtree, order = mbi.junction_tree.make_junction_tree(domain, [tuple(c) for c in model.cliques])
    cliques = [set(c) for c in jtree.nodes]
    order = list(order)[::-1]
    data: dict[str, npt.NDArray[np.int64]] = {}
    used: set[str] = set()
    for col in order:
        related = set().union(*[c for c in cliques if col in c]) if cliques else set()
        parents = tuple(a for a in order if a in used and a in related)
        joint = model_marginal(model, (*parents, col))
        joint = np.clip(joint, 0.0, None)
        k = domain[col]
        table = joint.reshape(-1, k)
        sums = table.sum(axis=1, keepdims=True)
        # A conditioning cell the model gives no mass: uniform (never reached in exact arithmetic).
        cond = np.where(sums > 0, table / np.where(sums > 0, sums, 1.0), 1.0 / k)
        cum = np.cumsum(cond, axis=1)
        cum[:, -1] = 1.0
        if parents:
            index = np.ravel_multi_index(
                tuple(data[p] for p in parents), tuple(domain[p] for p in parents)
            )
        else:
            index = np.zeros(rows, dtype=np.int64)
        # Inverse CDF in every row's own conditioning cell at once: row c of ``cum``
        # shifted by c is globally non-decreasing, so one search finds each draw.
        shifted = (cum + np.arange(len(cum))[:, None]).ravel()
        pos = np.searchsorted(shifted, index + rng.random(rows), side="right") - index * k
        data[col] = np.clip(pos, 0, k - 1).astype(np.int64)
        used.add(col)
    return {a: data[a] for a in domain.attributes}
