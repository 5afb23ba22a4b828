r"""The privacy loss distribution of an ε-bounded-range step (the exponential mechanism).

A pair (P, Q) is ε-bounded-range (ε-BR) when its privacy loss L = ln(dP/dQ)
takes values in an interval [t − ε, t]. Its hockey-stick curve, as a function of
x = e^{ε′}, is H(x) = E_Q[(e^L − x)₊]. The derivation below (written out in
``docs/accounting.md``, "Bounded range") gives one pair that dominates every ε-BR
pair, so its k-fold composition bounds any adaptive composition of k ε-BR steps
(dominating pairs compose: Zhu, Dong & Wang 2022).

1. E_Q[e^L] = 1 forces t ∈ [0, ε]. The function y ↦ (y − x)₊ is convex, so on
   [a, b] = [e^{t−ε}, e^t] it lies below its chord; taking E_Q, the curve of (P, Q)
   lies below that of the two-point pair W_t whose Q-law of e^L sits on {a, b} with
   mean 1 (Dong, Durfee & Rogers 2020 reduce ε-BR composition to such pairs).
2. For x ∈ [1, e^ε], H_{W_t}(x) = (1 − e^{t−ε})(1 − x e^{−t})/(1 − e^{−ε}); its
   maximum over t is at e^t = √(x e^ε): H*(x) = (1 − √(x e^{−ε}))²/(1 − e^{−ε}).
   The class is closed under swapping P and Q (t ↦ ε − t), and
   H_{P,Q}(x) = 1 − x + x·H_{Q,P}(1/x), so H*(x) = 1 − x + x·H*(1/x) for x < 1.
3. H* (a supremum of convex curves) is convex, non-increasing, 1 − x below e^{−ε}
   and 0 above e^ε: the curve of the symmetric pair (P*, Q*) with
   Q*(L > t) = −H*′(e^t) and P*(L > t) = H*(e^t) − e^t H*′(e^t), i.e.

   * t ∈ [0, ε]:  P*(L > t) = (1 − e^{(t−ε)/2})/(1 − e^{−ε}),
     P*(L ≤ t) = e^{−ε}(e^{(t+ε)/2} − 1)/(1 − e^{−ε});
   * t ∈ [−ε, 0]: P*(L ≤ t) = (1 − e^{−(t+ε)/2}) e^{(t−ε)/2}/(1 − e^{−ε});
   * Q*(L ≤ t) = P*(L ≥ −t), Q*(L > t) = P*(L < −t) (the pair is its own swap).

The upper side is the connect-the-dots discretisation of (P*, Q*). The lower side
is that of W_{ε/2} (randomised response with parameter ε/2, a realisable ε-BR
pair: the largest single-run δ at ε′ = 0), so ``lower`` stays a value some ε-BR
composition reaches.
"""

from __future__ import annotations

import math

import numpy as np

from gaussdp.accounting.pld import (
    FloatArray,
    PrivacyLossDistribution,
    _from_continuous,
    _from_points,
)

__all__ = ["bounded_range_pld"]


def _p_cdfs(t: FloatArray, eps: float) -> tuple[FloatArray, FloatArray]:
    """P*(L ≤ t) and P*(L > t) for losses t (clipped to [−ε, ε]), without cancellation."""
    t = np.clip(t, -eps, eps)
    c = 1.0 / -math.expm1(-eps)  # 1/(1 − e^{−ε})
    pos = t >= 0
    le = np.empty_like(t)
    gt = np.empty_like(t)
    tp, tn = t[pos], t[~pos]
    # t ≥ 0: P*(L > t) = c(1 − e^{(t−ε)/2}), P*(L ≤ t) = c·e^{−ε}(e^{(t+ε)/2} − 1),
    # written as c·e^{(t−ε)/2}(1 − e^{−(t+ε)/2}) so that no factor overflows at large ε.
    gt[pos] = c * -np.expm1((tp - eps) / 2)
    le[pos] = c * np.exp((tp - eps) / 2) * -np.expm1(-(tp + eps) / 2)
    # t < 0: P*(L ≤ t) = c(1 − e^{−(t+ε)/2})e^{(t−ε)/2}, P*(L > t) its complement.
    le[~pos] = c * -np.expm1(-(tn + eps) / 2) * np.exp((tn - eps) / 2)
    gt[~pos] = 1.0 - le[~pos]
    return le, gt


def bounded_range_pld(
    epsilon: float, *, value_discretization: float, tail_mass: float
) -> PrivacyLossDistribution:
    """The PLD dominating every ε-bounded-range pair (upper) and W_{ε/2}'s (lower).

    ``epsilon`` must be finite and ≥ 0 (the caller validates it: the event does).
    """
    h = value_discretization
    eps = float(epsilon)
    half = eps / 2
    a = 1.0 / (1.0 + math.exp(-half))  # W_{ε/2}: randomised response with ε/2
    lower = _from_points(h, np.array([half, -half]), np.array([a, 1.0 - a]), 0.0)[1]
    if eps == 0.0:
        return PrivacyLossDistribution._build(
            h, _from_points(h, np.array([0.0]), np.array([1.0]), 0.0), None, tail_mass
        )

    def cdfs(t: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        p_le, p_gt = _p_cdfs(t, eps)
        # The pair is its own swap and continuous: Q*(L ≤ t) = P*(L > −t).
        m_le, m_gt = _p_cdfs(-t, eps)
        return p_le, p_gt, m_gt, m_le

    upper = _from_continuous(h, -eps, eps, cdfs)[0]
    return PrivacyLossDistribution._build(h, (upper, lower), None, tail_mass)
