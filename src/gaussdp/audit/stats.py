r"""Confidence bounds for empirical audits: Clopper–Pearson, and ε lower bounds from a test.

A test that tells two neighbouring worlds apart has a true-positive rate TPR and a
false-positive rate FPR. If the mechanism is (ε, δ)-DP, then

    TPR ≤ e^ε FPR + δ   and   1 − FPR ≤ e^ε (1 − TPR) + δ

(Kairouz, Oh, Viswanath 2015 Thm 2.1; DRS Prop 2.4). Bounding TPR from below and FPR
from above with exact binomial (Clopper–Pearson) intervals gives a lower bound on ε
that holds with the stated confidence (Jagielski, Ullman, Oprea 2020; Nasr et al. 2021).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.stats import beta

from gaussdp._validation import check_int, check_probability, format_bound
from gaussdp.errors import invalid

__all__ = ["AuditResult", "clopper_pearson", "epsilon_lower_bound"]


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    r"""Exact two-sided 1 − α confidence interval for a binomial proportion.

    Each side holds with probability ≥ 1 − α/2 (Clopper & Pearson 1934: beta quantiles).

    Examples
    --------
    >>> lo, hi = clopper_pearson(50, 100, 0.05)
    >>> round(lo, 4), round(hi, 4)
    (0.3983, 0.6017)
    >>> clopper_pearson(0, 10, 0.05)[0]
    0.0
    """
    trials = check_int("trials", trials, minimum=1)
    successes = check_int("successes", successes, minimum=0)
    if successes > trials:
        raise ValueError(invalid("successes", f"at most trials = {trials}", successes))
    alpha = check_probability("alpha", alpha, open_interval=True)
    lo, hi = clopper_pearson_arrays(np.array([successes]), trials, alpha)
    return float(lo[0]), float(hi[0])


def clopper_pearson_arrays(
    successes: npt.NDArray[np.int64], trials: int, alpha: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """:func:`clopper_pearson` for many success counts out of the same ``trials`` at once.

    The arguments are not validated (callers pass counts they computed): 0 ≤ successes ≤
    trials, trials ≥ 1, 0 < α < 1.
    """
    k = np.asarray(successes, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        # beta.ppf is NaN where a shape parameter is 0; those ends are 0 and 1 exactly.
        lo = np.where(k == 0, 0.0, beta.ppf(alpha / 2, k, trials - k + 1))
        hi = np.where(k == trials, 1.0, beta.ppf(1 - alpha / 2, k + 1, trials - k))
    return lo, hi


def epsilon_lower_bound(
    true_positives: int,
    positives: int,
    false_positives: int,
    negatives: int,
    *,
    delta: float = 0.0,
    alpha: float = 0.05,
) -> float:
    r"""A 1 − α confidence lower bound on ε from one test's outcomes in the two worlds.

    ``positives`` runs of the world with the unit, ``true_positives`` of them flagged;
    ``negatives`` runs without it, ``false_positives`` flagged. Both inequalities of
    the module docstring are used, with a lower bound on TPR and an upper bound on FPR
    (one-sided Clopper–Pearson, each failing with probability ≤ α/4), so the result
    is a valid lower bound with probability ≥ 1 − α/2 ≥ 1 − α.
    Returns 0.0 when the data show nothing.

    Examples
    --------
    >>> round(epsilon_lower_bound(900, 1000, 100, 1000, alpha=0.05), 3)
    1.962
    >>> epsilon_lower_bound(10, 20, 10, 20)
    0.0
    """
    positives = check_int("positives", positives, minimum=1)
    negatives = check_int("negatives", negatives, minimum=1)
    delta = check_probability("delta", delta)
    alpha = check_probability("alpha", alpha, open_interval=True)
    # Two one-sided bounds (the sides of intervals at α/2), each failing w.p. ≤ α/4.
    tpr_lo = clopper_pearson(true_positives, positives, alpha / 2)[0]
    fpr_hi = clopper_pearson(false_positives, negatives, alpha / 2)[1]
    best = 0.0
    # TPR ≤ e^ε FPR + δ and TNR ≤ e^ε FNR + δ (Kairouz et al. 2015 Thm 2.1).
    for num, den in ((tpr_lo - delta, fpr_hi), ((1 - fpr_hi) - delta, 1 - tpr_lo)):
        if num > 0 and den > 0:
            best = max(best, math.log(num / den))
        elif num > 0 and den <= 0:
            return math.inf  # pragma: no cover - needs a perfect test and δ = 0
    return best


@dataclass(frozen=True, slots=True)
class AuditResult:
    """An empirical lower bound on ε next to the certified upper bound.

    Attributes
    ----------
    epsilon_lower : float
        Audited ε: with probability ≥ ``confidence`` the mechanism is not
        (ε, ``delta``)-DP for any ε below this.
    epsilon_certified : float
        What gaussdp certifies at ``delta``.
    delta : float
        The δ of both.
    confidence : float
        1 − α.
    runs : int
        Runs per world used for the bound (the held-out half).
    true_positives, false_positives : int
        The test's outcomes on those runs.
    method : str
        What was audited and how.
    """

    epsilon_lower: float
    epsilon_certified: float
    delta: float
    confidence: float
    runs: int
    true_positives: int
    false_positives: int
    method: str

    def __str__(self) -> str:
        return (
            f"audited ε ≥ {format_bound(self.epsilon_lower, up=False, digits=3)}, "
            f"certified ε ≤ {format_bound(self.epsilon_certified, up=True, digits=3)} "
            f"(δ = {self.delta:g}, {self.confidence:.0%} confidence, {self.runs} runs per world; "
            f"{self.method})"
        )
