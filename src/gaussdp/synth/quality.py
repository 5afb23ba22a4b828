"""Total-variation error of a synthetic table's marginals (post-processing, or evaluation)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["marginal", "total_variation", "workload_error"]

Codes = Mapping[str, npt.NDArray[np.int64]]


def marginal(
    codes: Codes, sizes: Mapping[str, int], clique: Sequence[str]
) -> npt.NDArray[np.int64]:
    """Counts of each cell of ``clique`` (C order, flattened) in a coded table."""
    shape = tuple(sizes[a] for a in clique)
    if not clique:
        n = len(next(iter(codes.values()))) if codes else 0
        return np.array([n], dtype=np.int64)
    flat = np.ravel_multi_index(tuple(codes[a] for a in clique), shape)
    return np.bincount(flat, minlength=int(np.prod(shape))).astype(np.int64)


def total_variation(p: npt.ArrayLike, q: npt.ArrayLike) -> float:
    """½‖p/Σp − q/Σq‖₁ of two non-negative count vectors (1.0 if exactly one is all zero).

    Examples
    --------
    >>> total_variation([1, 1], [2, 0])
    0.5
    """
    a = np.clip(np.asarray(p, dtype=np.float64), 0.0, None)
    b = np.clip(np.asarray(q, dtype=np.float64), 0.0, None)
    sa, sb = a.sum(), b.sum()
    if sa == 0.0 or sb == 0.0:
        return 0.0 if sa == sb else 1.0
    return float(0.5 * np.abs(a / sa - b / sb).sum())


def workload_error(
    synthetic: Codes, reference: Codes, sizes: Mapping[str, int], order: int
) -> npt.NDArray[np.float64]:
    """TV error of every ``order``-way marginal of ``synthetic`` against ``reference``."""
    names = list(sizes)
    return np.array(
        [
            total_variation(marginal(synthetic, sizes, c), marginal(reference, sizes, c))
            for c in itertools.combinations(names, order)
        ],
        dtype=np.float64,
    )
