"""Statistical checks shared by the sampler tests (imported by the test modules beside it).

Every check is a two-sided test at false-alarm rate alpha = 1e-6 (STYLE convention 11):
the z critical value is 4.8916 and chi-square critical values come from
``scipy.stats.chi2.isf(1e-6, df)``. Expected probabilities always come from exact
computation (``gaussdp.privacy`` or closed forms of the pmf), never from a sampler.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from scipy import stats

ALPHA = 1e-6
Z_CRIT = 4.8916  # two-sided normal critical value at alpha = 1e-6


def chi2_critical(df: int) -> float:
    """Chi-square critical value at alpha = 1e-6 with ``df`` degrees of freedom."""
    return float(stats.chi2.isf(ALPHA, df))


def make_bins(
    edges: Sequence[int], cdf: Callable[[int], float], n: int, min_expected: float = 10.0
) -> tuple[list[int], npt.NDArray[np.float64]]:
    """Bins ``(-inf, e0], (e0, e1], ..., (e_last, inf)`` merged until each expects >= 10.

    Depends only on the exact cdf and ``n`` (fixed before sampling). Returns the kept
    upper edges (the last bin is open) and the bin probabilities.
    """
    cuts = sorted(set(edges))
    cum = [cdf(e) for e in cuts]
    probs = np.diff(np.array([0.0, *cum, 1.0]))
    kept: list[int] = []
    kept_probs: list[float] = []
    acc = 0.0
    for edge, p in zip([*cuts, None], probs, strict=True):
        acc += float(p)
        if acc * n >= min_expected and edge is not None:
            kept.append(edge)
            kept_probs.append(acc)
            acc = 0.0
    if kept_probs and acc * n < min_expected:  # merge a thin right tail into the last bin
        kept.pop()
        acc += kept_probs.pop()
    kept_probs.append(acc)
    return kept, np.array(kept_probs)


def bin_counts(sample: npt.NDArray[np.generic], upper_edges: list[int]) -> npt.NDArray[np.int64]:
    """Counts of ``sample`` in the bins of :func:`make_bins` (right-closed)."""
    values = np.asarray(sample)
    if values.dtype == object:
        idx = np.array([_bisect(upper_edges, int(v)) for v in values], dtype=np.int64)
    else:
        idx = np.searchsorted(np.asarray(upper_edges, dtype=np.int64), values, side="left")
    return np.bincount(idx, minlength=len(upper_edges) + 1)


def _bisect(edges: list[int], v: int) -> int:
    lo, hi = 0, len(edges)
    while lo < hi:
        mid = (lo + hi) // 2
        if edges[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


def chi2_gof(counts: npt.NDArray[np.int64], probs: npt.NDArray[np.float64]) -> tuple[float, float]:
    """Chi-square statistic against ``probs`` and its alpha = 1e-6 critical value."""
    n = counts.sum()
    expected = probs * n
    assert expected.min() >= 10
    stat = float(((counts - expected) ** 2 / expected).sum())
    return stat, chi2_critical(len(counts) - 1)


def chi2_two_sample(a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> tuple[float, float]:
    """Chi-square test of homogeneity of two count vectors, and its critical value."""
    table = np.vstack([a, b]).astype(np.float64)
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0) / table.sum()
    stat = float(((table - expected) ** 2 / expected).sum())
    return stat, chi2_critical(table.shape[1] - 1)


def moment_z_scores(
    sample: npt.NDArray[np.generic], variance: float, p_zero: float, scale: int = 1
) -> tuple[float, float, float]:
    """z-scores of the mean (0), the second moment (``variance``) and the sign balance.

    Values are divided by ``scale`` exactly (Fractions) before moments are taken, so
    Python-int samples of size 10**50 are handled. The second-moment z-score is
    studentised by the sample standard deviation of X**2; the sign test uses
    ``Var(#pos - #neg) = n (1 - P[X = 0])`` with the exact ``P[X = 0]``.
    """
    values = [int(v) for v in np.asarray(sample).ravel()]
    n = len(values)
    scaled = np.array([float(Fraction(v, scale)) for v in values])
    var_scaled = variance / (scale * scale)
    z_mean = scaled.mean() / np.sqrt(var_scaled / n)
    squares = scaled * scaled
    z_var = (squares.mean() - var_scaled) / (squares.std(ddof=1) / np.sqrt(n))
    balance = sum(1 for v in values if v > 0) - sum(1 for v in values if v < 0)
    z_sign = balance / np.sqrt(n * (1.0 - p_zero))
    return float(z_mean), float(z_var), float(z_sign)
