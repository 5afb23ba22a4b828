"""An independent ε for a planned release: hockey-stick sums, no PLD or accountant code.

The release's dominating pair (``gaussdp.release.plan``'s module docs) is a product of

* for each exact part with box (n, K) and scale σ²: n copies of
  (N_Z(0, σ²), N_Z(K, σ²)), whose privacy loss depends on the sum S of the n
  coordinates only, L = (nK² − 2KS)/(2σ²), S ~ the n-fold convolution of N_Z(0, σ²);
* for the parts accounted by the smoothing argument: one Gaussian pair with
  μ² = Σ Δ²/(σ² − τ²) (DRS Cor 3.3), up to the slack A = Σ cells·a.

The pair is symmetric, so one direction suffices, and its hockey-stick divergence is
H(ε) = E_P[G(ε − L)], L the exact parts' total loss under P and
G(t) = Φ(−t/μ + μ/2) − e^t Φ(−t/μ − μ/2) the Gaussian part's, for every real t
(DRS Cor 2.13; G(t) = (1 − e^t)₊ without Gaussian parts). H is increasing in each
loss value, so rounding every part's losses up (down) to a multiple of h bounds H
from above (below); the parts' rounded loss pmfs are convolved on that grid. The
pmfs are normalised over ±13σ and loss values below 10⁻³⁰ dropped; the mass left
out is added to the upper bound. ε at δ then solves H(ε) = (δ − Σδ_s)·e^{−A}, plus 2A.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np
from scipy.signal import fftconvolve
from scipy.special import log_ndtr

from gaussdp.release.plan import Plan

TAU2 = 9
#: Half-width of the enumerated support, in standard deviations.
_WIDTH = 13.0
#: The loss grid of the bracket (nats).
STEP = 1e-4
#: Loss values of smaller probability are dropped (their mass is added to the upper bound).
_PRUNE = 1e-30


def discrete_gaussian_pmf(sigma2: float, n: int = 1) -> tuple[np.ndarray, np.ndarray, float]:
    """Support, pmf of the sum of n N_Z(0, σ²) draws, and a bound on the mass left out."""
    half = math.ceil(_WIDTH * math.sqrt(sigma2)) + 2
    y = np.arange(-half, half + 1)
    w = np.exp(-(y.astype(float) ** 2) / (2 * sigma2))
    one = w / w.sum()
    # Left out: 2·Σ_{y > half} e^{−y²/(2σ²)} ≤ 2e^{−half²/(2σ²)}/(1 − e^{−half/σ²}).
    lost = 2 * math.exp(-(half**2) / (2 * sigma2)) / -math.expm1(-half / sigma2)
    pmf = one
    for _ in range(n - 1):
        pmf = np.convolve(pmf, one) if one.size < 2000 else np.maximum(fftconvolve(pmf, one), 0.0)
    support = np.arange(len(pmf)) - n * half
    return support, pmf, n * lost


def gaussian_hockey_stick(mu: float, t: np.ndarray) -> np.ndarray:
    """H_{e^t}(N(0, 1) ‖ N(μ, 1)) for every real t (DRS Cor 2.13), in log space."""
    if mu == 0.0:
        return np.maximum(0.0, -np.expm1(t))
    a = np.exp(log_ndtr(-t / mu + mu / 2))
    b = np.exp(t + log_ndtr(-t / mu - mu / 2))
    return np.maximum(0.0, a - b)


def loss_pmf(plan: Plan, up: bool) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The exact parts' total loss rounded up (down) to multiples of STEP: losses, pmf,
    the mass left out, and μ of the smoothing parts."""
    mu2 = Fraction(0)
    groups: Counter[tuple[Fraction, int]] = Counter()
    for p in plan.parts:
        if p.exact:
            assert p.box is not None
            groups[(p.sigma2, p.box[1])] += p.box[0]  # the same (σ², K): n's add
        else:
            mu2 += p.sensitivity2 / (p.sigma2 - TAU2)
    offset, dense, lost = 0, np.ones(1), 0.0
    for (sigma2, k), n in groups.items():
        s2 = float(sigma2)
        support, pmf, left = discrete_gaussian_pmf(s2, n)
        scaled = (n * k * k - 2 * k * support) / (2 * s2) / STEP
        index = np.ceil(scaled) if up else np.floor(scaled)
        index = index.astype(np.int64)
        low = int(index.min())
        part = np.bincount(index - low, weights=pmf)
        dense = np.maximum(fftconvolve(dense, part), 0.0) if dense.size > 1 else part
        offset += low
        lost += left
    losses = (offset + np.arange(dense.size)) * STEP
    return losses, dense, lost, math.sqrt(mu2)


def _epsilon(plan: Plan, delta: float, up: bool, selection_delta: float | None) -> float:
    losses, pmf, lost, mu = loss_pmf(plan, up)
    keep = pmf > _PRUNE
    lost += float(np.sum(pmf[~keep]))
    losses, pmf = losses[keep], pmf[keep]
    slack = plan.slack
    spent = plan.selection_delta if selection_delta is None else selection_delta
    target = (delta - spent) * math.exp(-slack)

    def h(eps: float) -> float:
        value = float(np.sum(pmf * gaussian_hockey_stick(mu, eps - losses)))
        return value + lost if up else value

    lo, hi = 0.0, 1.0
    while h(hi) > target:
        lo, hi = hi, 2 * hi
    for _ in range(45):
        mid = (lo + hi) / 2
        if h(mid) > target:
            lo = mid
        else:
            hi = mid
    return hi + 2 * slack


def independent_epsilon(
    plan: Plan, delta: float, selection_delta: float | None = None
) -> tuple[float, float]:
    """Bounds (lower, upper) on ε at δ of the plan's dominating pair (module docs); the
    selections' δ is ``selection_delta`` if given (e.g. recomputed), else the plan's."""
    return (
        _epsilon(plan, delta, False, selection_delta),
        _epsilon(plan, delta, True, selection_delta),
    )
