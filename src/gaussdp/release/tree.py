r"""Quantiles from a noisy hierarchical histogram: node counts, consistency, inversion.

The engine returns each group's bounded leaf counts (:func:`gaussdp.release.sql.tree_sql`).
Here, per group, every node of the complete ``b``-ary tree over the leaves (the
root, ``b`` children, …, the leaves: ``levels`` = D + 1 levels) gets its exact
count — the sum of its leaves — plus N_Z(0, σ²), all nodes the same σ² (one
part, L2 sensitivity √(L0·levels)·L∞; :mod:`gaussdp.release.plan`). The rest is
post-processing:

1. **Consistency** (Hay, Rastogi, Miklau & Suciu 2010, "Boosting the accuracy of
   differentially private histograms through consistency", Thm 3): the least
   squares estimate of the leaves given every noisy node, in two linear passes
   (:func:`consistent_leaves`). With equal noise on all nodes it is the best
   linear unbiased estimate (Gauss–Markov), and a range of leaves is estimated
   with variance at most that of its canonical decomposition into ≤ (b − 1)·D
   noisy nodes (the hierarchical method: Qardaji, Yang & Li 2013, "Understanding
   hierarchical methods for differentially private histograms", §3).
2. **Monotone inversion** (:func:`invert`): the running maximum of the
   consistent prefix counts, clipped to [0, N̂], is a non-decreasing CDF, so
   the quantiles of increasing levels q are non-decreasing; within a leaf the
   value is interpolated linearly.
3. **Interval** (:func:`quantile_intervals`): a prefix estimate is
   w·Z with ‖w‖² ≤ k = (b − 1)·D (step 1) and Z independent N_Z(0, σ²), each
   σ²-subgaussian (CKS Cor 9), so P[|F̂(j) − F(j)| ≥ h] ≤ 2·exp(−h²/(2kσ²)); with
   h = σ·√(2k·ln(2B/α)) all B prefixes (the total among them) are within h
   at once with probability ≥ 1 − α, and then the true quantile's leaf lies
   between the first leaf j with F̂(j) + h ≥ q·(N̂ − h) and the first with
   F̂(j) − h ≥ q·(N̂ + h).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["consistent_leaves", "invert", "node_counts", "quantile_intervals", "rank_halfwidth"]

_Array = np.ndarray[Any, Any]


def node_counts(leaves: _Array, branching: int) -> list[_Array]:
    """Every level's node counts, root first: ``levels[ℓ]`` has shape (groups, b^ℓ).

    Examples
    --------
    >>> [level.tolist() for level in node_counts(np.array([[1, 2, 3, 4]]), 2)]
    [[[10]], [[3, 7]], [[1, 2, 3, 4]]]
    """
    levels = [leaves]
    while levels[0].shape[1] > 1:
        child = levels[0]
        shape = (child.shape[0], child.shape[1] // branching, branching)
        levels.insert(0, child.reshape(shape).sum(axis=2))
    return levels


def consistent_leaves(levels: list[_Array], branching: int) -> _Array:
    """The least-squares leaves given noisy counts of every node (Hay et al. 2010 Thm 3).

    ``levels`` as from :func:`node_counts` (root first), all with the same noise
    variance. Bottom-up, a node at height i (leaves: 1) gets
    z = (bⁱ − bⁱ⁻¹)/(bⁱ − 1)·y + (bⁱ⁻¹ − 1)/(bⁱ − 1)·Σ z(children); top-down,
    the root keeps z and a child gets z + (parent − Σ z(siblings and itself))/b.

    Examples
    --------
    >>> noisy = [np.array([[10.0]]), np.array([[3.0, 9.0]])]
    >>> np.round(consistent_leaves(noisy, 2), 6).tolist()  # the root's 10, the leaves' 12 meet
    [[2.333333, 8.333333]]
    """
    b = branching
    depth = len(levels) - 1
    z = [np.asarray(level, dtype=np.float64) for level in levels]
    for level in range(depth - 1, -1, -1):  # bottom-up: heights 2 … D + 1
        i = depth - level + 1
        children = z[level + 1].reshape((*z[level].shape, b)).sum(axis=2)
        z[level] = ((b**i - b ** (i - 1)) * z[level] + (b ** (i - 1) - 1) * children) / (b**i - 1)
    out = z[0]
    for level in range(1, depth + 1):  # top-down
        siblings = z[level].reshape((*out.shape, b)).sum(axis=2)
        out = z[level] + np.repeat((out - siblings) / b, b, axis=1)
    return out


def invert(leaves: _Array, levels: tuple[float, ...], lo: float, hi: float) -> _Array:
    """Quantiles (groups × levels) from consistent leaf counts, by a monotone CDF.

    F̂(j) is the prefix sum of the leaves and N̂ = F̂(B − 1) the total; the CDF
    is the running maximum of F̂ clipped to [0, N̂] (non-decreasing, ending at
    N̂), the quantile at level q the first leaf where it reaches q·N̂, with
    linear interpolation inside that leaf. Non-decreasing in q. A group with
    N̂ ≤ 0 gets the quantiles of the uniform distribution on [lo, hi].
    (Setting negative leaves to 0 instead would add the positive half of every
    leaf's noise to the mass: with many leaves the CDF would turn uniform.)

    Examples
    --------
    >>> invert(np.array([[0.0, 4.0, -1.0, 5.0]]), (0.25, 0.5, 1.0), 0.0, 4.0).tolist()
    [[1.5, 2.0, 4.0]]
    """
    f = np.cumsum(np.asarray(leaves, dtype=np.float64), axis=1)
    groups, resolution = f.shape
    width = (hi - lo) / resolution
    total = f[:, -1]
    cdf = np.maximum.accumulate(np.clip(f, 0.0, np.maximum(total, 0.0)[:, None]), axis=1)
    before = np.concatenate([np.zeros((groups, 1)), cdf[:, :-1]], axis=1)
    rows = np.arange(groups)
    out = np.empty((groups, len(levels)))
    for a, level in enumerate(levels):
        target = level * total
        j = np.argmax(cdf >= target[:, None], axis=1)
        step = cdf[rows, j] - before[rows, j]
        inside = np.where(step > 0, (target - before[rows, j]) / np.where(step > 0, step, 1.0), 0)
        value = lo + (j + np.clip(inside, 0.0, 1.0)) * width
        out[:, a] = np.where(total > 0, value, lo + level * (hi - lo))
    return np.clip(out, lo, hi)


def rank_halfwidth(sigma: float, resolution: int, branching: int, alpha: float) -> float:
    """h = σ·√(2k·ln(2B/α)), k = (b − 1)·D: every prefix count within h with prob. ≥ 1 − α.

    Examples
    --------
    >>> round(rank_halfwidth(1.0, 4, 2, 0.05), 6)  # k = 2, B = 4
    4.505629
    """
    depth = round(math.log(resolution, branching))
    k = (branching - 1) * depth
    return sigma * math.sqrt(2 * k * math.log(2 * resolution / alpha))


def quantile_intervals(
    leaves: _Array, levels: tuple[float, ...], lo: float, hi: float, h: float
) -> tuple[_Array, _Array]:
    """Interval ends (groups × levels) holding the bounded data's quantiles (module doc, 3)."""
    f = np.cumsum(np.asarray(leaves, dtype=np.float64), axis=1)
    groups, resolution = f.shape
    width = (hi - lo) / resolution
    n = f[:, -1]
    low = np.empty((groups, len(levels)))
    high = np.empty((groups, len(levels)))
    for a, level in enumerate(levels):
        lower = f + h >= (level * (n - h))[:, None]
        upper = f - h >= (level * (n + h))[:, None]
        j_lo = np.where(lower.any(axis=1), np.argmax(lower, axis=1), resolution - 1)
        j_hi = np.where(upper.any(axis=1), np.argmax(upper, axis=1), resolution - 1)
        low[:, a] = lo + j_lo * width
        high[:, a] = lo + (j_hi + 1) * width
    return np.clip(low, lo, hi), np.clip(high, lo, hi)
