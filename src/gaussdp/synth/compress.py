r"""Domain compression: merge each column's rare cells, read from its noisy 1-way marginal.

MST's domain-compression step (McKenna, Miklau & Sheldon 2021): a cell whose
noisy 1-way count y is below 3σ carries little signal and multiplies the size
of every marginal the column enters. All such cells of a column (when
there are at least two) become one cell; the 1-way measurement over the new
cells is the supported cells' y and the merged cell's Σy, whose noise has
variance m·σ² for m merged cells. This is post-processing of the 1-way
marginals, which were measured and charged: it costs no budget. Selection,
measurement and the model then use the compressed cells; a synthetic row in
the merged cell gets one of the merged domain cells uniformly at random (as
MST does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["compress", "compressed_sizes", "expand", "recode"]


def compress(
    measurements: Sequence[Any], threshold: float
) -> tuple[dict[str, tuple[int, ...]], list[Any]]:
    """Merge the cells with noisy count < ``threshold``·σ of each 1-way measurement.

    Returns the merged domain cells per compressed column and the 1-way
    measurements over the compressed cells (others unchanged).

    Examples
    --------
    >>> from gaussdp.synth.model import Measurement
    >>> m = Measurement(("a",), np.array([50.0, 1.0, 90.0, -2.0, 4.0]), 2.0)
    >>> merged, (c,) = compress([m], 3.0)
    >>> merged, c.values.tolist(), c.cells.tolist()
    ({'a': (1, 3, 4)}, [50.0, 90.0, 3.0], [1, 1, 3])
    """
    from gaussdp.synth.model import Measurement

    merged: dict[str, tuple[int, ...]] = {}
    out: list[Any] = []
    for m in measurements:
        rare = np.flatnonzero(~(m.values >= threshold * m.sigma))
        if len(m.clique) != 1 or len(rare) < 2:
            out.append(m)
            continue
        keep = np.setdiff1d(np.arange(len(m.values)), rare)
        values = np.append(m.values[keep], m.values[rare].sum())
        cells = np.append(np.ones(len(keep), dtype=np.int64), len(rare))
        merged[m.clique[0]] = tuple(int(i) for i in rare)
        out.append(Measurement(m.clique, values, m.sigma, cells))
    return merged, out


def compressed_sizes(
    sizes: Mapping[str, int], merged: Mapping[str, tuple[int, ...]]
) -> dict[str, int]:
    """The number of model cells of each column."""
    return {a: k - len(merged[a]) + 1 if a in merged else k for a, k in sizes.items()}


def _table(size: int, rare: tuple[int, ...]) -> npt.NDArray[np.int64]:
    """Domain cell → model cell: kept cells in order, then the merged one."""
    table = np.empty(size, dtype=np.int64)
    keep = np.setdiff1d(np.arange(size), rare)
    table[keep] = np.arange(len(keep))
    table[list(rare)] = len(keep)
    return table


def recode(
    coded: pd.DataFrame, sizes: Mapping[str, int], merged: Mapping[str, tuple[int, ...]]
) -> pd.DataFrame:
    """The coded table in model cells."""
    if not merged:
        return coded
    out = coded.copy()
    for a, rare in merged.items():
        out[a] = _table(sizes[a], rare)[out[a].to_numpy(dtype=np.int64)]
    return out


def expand(
    codes: Mapping[str, npt.NDArray[np.int64]],
    sizes: Mapping[str, int],
    merged: Mapping[str, tuple[int, ...]],
    *,
    rng: np.random.Generator,
) -> dict[str, npt.NDArray[np.int64]]:
    """Model cells → domain cells; a merged cell becomes one of its cells uniformly."""
    out = dict(codes)
    for a, rare in merged.items():
        keep = np.setdiff1d(np.arange(sizes[a]), rare)
        c = np.asarray(codes[a], dtype=np.int64)
        in_merged = c == len(keep)
        result = keep[np.minimum(c, len(keep) - 1)] if len(keep) else np.zeros_like(c)
        result[in_merged] = np.asarray(rare)[rng.integers(len(rare), size=int(in_merged.sum()))]
        out[a] = result.astype(np.int64)
    return out
