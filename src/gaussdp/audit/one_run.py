r"""The one-run audit: an ε lower bound from a single run with many random canaries.

Steinke, Nasr, Jagielski, *Privacy Auditing with One (1) Training Run*, NeurIPS 2023
(arXiv:2305.08846v1; SNJ below). Instead of running the mechanism hundreds of times
with and without one unit, insert m canaries and include each independently with
probability 1/2 (S_i = +1 in, −1 out), run the mechanism **once**, score every
canary from the output, and guess: "in" for the k₊ highest scores, "out" for the k₋
lowest, abstain on the rest. Let r = k₊ + k₋ be the number of guesses and v the
number of correct ones.

If the mechanism is ε-DP in each canary, every guess is right with probability at
most p = e^ε/(1 + e^ε), whatever the others (SNJ: the guesses are dominated by r
independent coins of bias p), so P[V ≥ v] ≤ P[Binomial(r, p) ≥ v]. For (ε, δ)-DP the
tail gains a term (SNJ Cor 5.4, the main theorem's computable form, Appendix D):

    P[V ≥ v] ≤ f(v) + 2mδ · max_{i = 1..v} (f(v − i) − f(v)) / i,
    f(u) = P[Binomial(r, e^ε/(1 + e^ε)) ≥ u].

That right-hand side is the p-value of the hypothesis "(ε, δ)-DP" given v correct
guesses (:func:`one_run_p_value`). The audited ε is the smallest ε the data do *not*
reject at level α (:func:`one_run_epsilon_lower_bound`): with probability ≥ 1 − α
the mechanism is not (ε, δ)-DP for any smaller ε.

The guesses (which k₊, k₋) must be fixed before the run; choosing them after seeing
which guesses were right would void the bound.

* :func:`audit_scores`: the audit from given scores and inclusion bits.
* :func:`audit_table_release_one_run`: a table release with one group per canary
  unit; the score of a canary is its group's released value.
* :func:`audit_dpsgd_one_run`: DP-SGD (:func:`gaussdp.ml.make_private`) with
  gradient canaries, each on its own coordinate (white box, SNJ §6); needs the
  ``torch`` extra.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from scipy.special import expit
from scipy.stats import binom

from gaussdp._validation import (
    check_count,
    check_delta,
    check_epsilon,
    check_finite,
    check_int,
    check_positive,
    check_probability,
    format_bound,
)
from gaussdp.errors import invalid
from gaussdp.random import RandomSource, check_rng

if TYPE_CHECKING:
    import pandas as pd

    from gaussdp.release import Release

__all__ = [
    "OneRunAuditResult",
    "audit_dpsgd_one_run",
    "audit_scores",
    "audit_table_release_one_run",
    "count_correct",
    "one_run_epsilon_lower_bound",
    "one_run_p_value",
]

# ε is searched on [0, _EPS_MAX]: v = r correct guesses reject at most ε with
# p^r ≤ α, i.e. ε ≈ ln(r / ln(1/α)), far below 50 for any feasible r.
_EPS_MAX = 50.0
# Scan step of the search for the first ε the data do not reject (see below).
_EPS_STEP = 1e-3


def _check_counts(canaries: object, guesses: object, correct: object) -> tuple[int, int, int]:
    m = check_int("canaries", canaries, minimum=1)
    r = check_int("guesses", guesses, minimum=0)
    v = check_int("correct", correct, minimum=0)
    if r > m:
        raise ValueError(invalid("guesses", f"at most canaries = {m}", r))
    if v > r:
        raise ValueError(invalid("correct", f"at most guesses = {r}", v))
    return m, r, v


def _check_guesses(k_plus: object, k_minus: object, canaries: int) -> tuple[int, int]:
    """``(k_plus, k_minus)`` if both are integers ≥ 0 with a sum of at most ``canaries``."""
    plus = check_int("k_plus", k_plus, minimum=0)
    minus = check_int("k_minus", k_minus, minimum=0)
    if plus + minus > canaries:
        raise ValueError(invalid("k_plus + k_minus", f"at most {canaries} canaries", plus + minus))
    return plus, minus


def _p_values(m: int, r: int, v: int, epsilons: npt.NDArray[np.float64], delta: float) -> Any:
    """:func:`one_run_p_value` at each ε of ``epsilons`` (already validated)."""
    q = expit(epsilons)  # e^ε/(1 + e^ε): the best accuracy of an ε-DP guess
    tail = binom.sf(v - 1, r, q)  # f(v) = P[Binomial(r, q) ≥ v]
    if delta == 0.0 or v == 0:
        return np.minimum(tail, 1.0)
    # f(v − i) − f(v) = P[v − i ≤ Binomial(r, q) ≤ v − 1] = Σ_{j=1..i} pmf(v − j).
    below = np.arange(v - 1, -1, -1)  # v − 1, v − 2, ..., 0
    gaps = np.cumsum(binom.pmf(below[:, None], r, q[None, :]), axis=0)
    slope = np.max(gaps / np.arange(1, v + 1)[:, None], axis=0)
    # SNJ Cor 5.4: P[V ≥ v] ≤ f(v) + 2mδ · max_i (f(v − i) − f(v))/i.
    return np.minimum(tail + 2.0 * m * delta * slope, 1.0)


def one_run_p_value(
    canaries: int, guesses: int, correct: int, epsilon: float, delta: float
) -> float:
    r"""The largest probability of ``correct`` or more right guesses under (ε, δ)-DP.

    Parameters
    ----------
    canaries : int
        m, the number of canaries, each included independently with probability 1/2.
    guesses : int
        r ≤ m, the number of guesses (abstentions excluded), fixed before the run.
    correct : int
        v ≤ r, the number of right guesses.
    epsilon : float
        ε ≥ 0 of the hypothesis.
    delta : float
        δ in [0, 1] of the hypothesis.

    Returns
    -------
    float
        f(v) + 2mδ · max_{i=1..v} (f(v − i) − f(v))/i with
        f(u) = P[Binomial(r, e^ε/(1 + e^ε)) ≥ u] (SNJ Cor 5.4), capped at 1;
        for δ = 0 the binomial tail f(v) alone.

    Examples
    --------
    >>> round(one_run_p_value(100, 10, 10, 1.0, 0.0), 6)  # (e/(1+e))^10
    0.043604
    >>> one_run_p_value(100, 10, 0, 1.0, 1e-3)
    1.0
    """
    m, r, v = _check_counts(canaries, guesses, correct)
    eps = check_epsilon("epsilon", epsilon)
    delta = check_probability("delta", delta)
    if r == 0:
        return 1.0
    return float(_p_values(m, r, v, np.array([eps]), delta)[0])


def one_run_epsilon_lower_bound(
    canaries: int, guesses: int, correct: int, *, delta: float, alpha: float = 0.05
) -> float:
    r"""The audited ε: with probability ≥ 1 − α the mechanism is not (ε', δ)-DP for ε' below it.

    It is the smallest ε whose p-value (:func:`one_run_p_value`) exceeds α. Proof
    of validity: if the mechanism is (ε₀, δ)-DP, then p(ε₀) ≤ α with probability
    ≤ α (SNJ Cor 5.4), and the returned value exceeds ε₀ only when every ε ≤ ε₀ is
    rejected, in particular ε₀. The p-value is scanned upwards from 0 in steps of
    10⁻³ nats and the first crossing is refined by bisection, so a non-monotone
    p-value cannot move the result past its first crossing (at that resolution).

    Parameters
    ----------
    canaries, guesses, correct : int
        m, r and v as in :func:`one_run_p_value`.
    delta : float
        δ in [0, 1] of the hypotheses.
    alpha : float, default 0.05
        The level, in (0, 1).

    Returns
    -------
    float
        ε ≥ 0; 0.0 when the data reject nothing.

    Examples
    --------
    SNJ Appendix D's example (m = 1000, r = 100, v = 75, δ = 10⁻⁴) gives 0.673:

    >>> round(one_run_epsilon_lower_bound(1000, 100, 75, delta=1e-4), 3)
    0.673
    """
    m, r, v = _check_counts(canaries, guesses, correct)
    delta = check_probability("delta", delta)
    alpha = check_probability("alpha", alpha, open_interval=True)
    if r == 0:
        return 0.0

    def p(eps: npt.NDArray[np.float64]) -> Any:
        return _p_values(m, r, v, eps, delta)

    if p(np.array([0.0]))[0] > alpha:
        return 0.0
    # Scan in blocks for the first grid point that is not rejected.
    lo = 0.0
    block = 512
    while lo < _EPS_MAX:
        grid = lo + _EPS_STEP * np.arange(1, block + 1, dtype=np.float64)
        above = np.nonzero(p(grid) > alpha)[0]
        if above.size:
            hi = float(grid[above[0]])
            lo = hi - _EPS_STEP
            break
        lo = float(grid[-1])
    else:
        return _EPS_MAX  # pragma: no cover - needs r far beyond any feasible run
    # p(lo) ≤ α < p(hi): bisect, keeping the rejected end (the lower bound) on the safe side.
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if p(np.array([mid]))[0] > alpha:
            hi = mid
        else:
            lo = mid
    return lo


def count_correct(
    scores: npt.ArrayLike, included: npt.ArrayLike, *, k_plus: int, k_minus: int
) -> tuple[int, int]:
    """Guess "in" for the ``k_plus`` highest scores and "out" for the ``k_minus`` lowest.

    Returns ``(guesses, correct)``. Ties are broken by position (a stable sort), which
    depends on the scores only, never on ``included``.

    Examples
    --------
    >>> count_correct([3.0, 1.0, 2.0, 0.0], [True, False, True, True], k_plus=1, k_minus=1)
    (2, 1)
    """
    s = np.asarray(scores, dtype=np.float64)
    inc = np.asarray(included)
    if s.ndim != 1 or inc.shape != s.shape or inc.dtype != np.bool_:
        raise ValueError(
            invalid("scores, included", "a 1-d float array and a bool array of its length", s.shape)
        )
    if not np.all(np.isfinite(s)):
        raise ValueError(invalid("scores", "finite", s[~np.isfinite(s)][0]))
    k_plus, k_minus = _check_guesses(k_plus, k_minus, s.size)
    order = np.argsort(s, kind="stable")  # ascending
    out_guess, in_guess = order[:k_minus], order[s.size - k_plus :]
    correct = int(np.sum(inc[in_guess])) + int(np.sum(~inc[out_guess]))
    return k_plus + k_minus, correct


@dataclass(frozen=True, slots=True)
class OneRunAuditResult:
    """An ε lower bound from one run (SNJ), next to the certified upper bound.

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
    canaries : int
        m, each included with probability 1/2.
    guesses, correct : int
        r = k₊ + k₋ and the number of right guesses.
    method : str
        What was audited and how.
    """

    epsilon_lower: float
    epsilon_certified: float
    delta: float
    confidence: float
    canaries: int
    guesses: int
    correct: int
    method: str

    def __str__(self) -> str:
        return (
            f"audited ε ≥ {format_bound(self.epsilon_lower, up=False, digits=3)}, "
            f"certified ε ≤ {format_bound(self.epsilon_certified, up=True, digits=3)} "
            f"(δ = {self.delta:g}, {self.confidence:.0%} confidence, one run, "
            f"{self.correct}/{self.guesses} guesses right of {self.canaries} canaries; "
            f"{self.method})"
        )


def audit_scores(
    scores: npt.ArrayLike,
    included: npt.ArrayLike,
    *,
    k_plus: int,
    k_minus: int,
    epsilon_certified: float,
    delta: float,
    alpha: float = 0.05,
    method: str = "one-run audit",
) -> OneRunAuditResult:
    """The one-run audit from canary scores (higher = more likely included) and the truth.

    ``k_plus`` and ``k_minus`` must be fixed before the scores are seen.
    """
    r, v = count_correct(scores, included, k_plus=k_plus, k_minus=k_minus)
    m = int(np.asarray(scores).size)
    delta = check_probability("delta", delta)
    return OneRunAuditResult(
        epsilon_lower=one_run_epsilon_lower_bound(m, r, v, delta=delta, alpha=alpha),
        epsilon_certified=float(epsilon_certified),
        delta=delta,
        confidence=1 - alpha,
        canaries=m,
        guesses=r,
        correct=v,
        method=method,
    )


def _inclusion(canaries: int, rng: RandomSource) -> npt.NDArray[np.bool_]:
    """Each canary in with probability 1/2, from the audit's random source."""
    return np.asarray(rng.bits(canaries), dtype=np.bool_)


def audit_table_release_one_run(
    build: Callable[[pd.DataFrame, list[int]], Release],
    *,
    canaries: int,
    value: float,
    k_plus: int,
    k_minus: int,
    background: pd.DataFrame | None = None,
    rng: RandomSource | None = None,
    alpha: float = 0.05,
) -> OneRunAuditResult:
    r"""One-run audit of a table release with one group per canary unit.

    Canary i is a unit (``user`` = ``"canary-i"``) with one row in group
    ``g = i`` holding ``x = value``; it is included with probability 1/2. The release
    ``build(table, keys)`` must release one value per group in ``keys`` (public
    keys ``0..m−1``, in that order, e.g. ``.sum("x", by="g", keys=keys, bounds=...)``);
    the score of canary i is the released value of group i. The table is the
    included canaries plus ``background`` (rows with the columns ``user``, ``g``,
    ``x``; e.g. other units in the same groups).

    Returns
    -------
    OneRunAuditResult
        With ``epsilon_certified`` = the release's reported ε at its budget's δ.
    """
    import pandas as pd

    # Everything is checked before the release runs (no budget spent on a refused audit).
    m = check_int("canaries", canaries, minimum=2)
    value = check_finite("value", value)
    _check_guesses(k_plus, k_minus, m)
    check_probability("alpha", alpha, open_interval=True)
    source = check_rng(rng)
    included = _inclusion(m, source)
    rows = pd.DataFrame(
        {
            "user": [f"canary-{i}" for i in range(m)],
            "g": np.arange(m, dtype=np.int64),
            "x": np.full(m, value),
        }
    )[included]
    table = rows if background is None else pd.concat([background, rows], ignore_index=True)
    keys = list(range(m))
    release = build(table, keys)
    report = release.report
    if report.epsilon is None or report.delta is None:
        raise ValueError(invalid("build", "a release with an (ε, δ) budget", report.budget))
    frame = release.run(rng=source).frame
    if len(frame) != m:
        raise ValueError(invalid("build", f"a release of one value per key ({m})", len(frame)))
    scores = frame["value"].to_numpy(dtype=np.float64)
    return audit_scores(
        scores,
        included,
        k_plus=k_plus,
        k_minus=k_minus,
        epsilon_certified=report.epsilon,
        delta=report.delta,
        alpha=alpha,
        method=f"table release, {m} canary units of value {value:g}, one group each",
    )


def audit_dpsgd_one_run(
    *,
    canaries: int,
    k_plus: int,
    k_minus: int,
    noise_multiplier: float,
    steps: int,
    examples: int = 100,
    batch_size: int = 50,
    features: int = 8,
    max_grad_norm: float = 1.0,
    delta: float = 1e-5,
    alpha: float = 0.05,
    rng: RandomSource | None = None,
) -> OneRunAuditResult:
    r"""One-run audit of DP-SGD with gradient canaries (white box, SNJ §6).

    The model is ``nn.Linear(features + canaries, 1, bias=False)`` trained from zero
    by SGD (learning rate 1) through :func:`gaussdp.ml.make_private` (secure
    noise, Poisson sampling at q = ``batch_size`` / (``examples`` + ``canaries``))
    with the linear loss −y·output. ``examples`` ordinary examples have random
    features on the first ``features`` coordinates. Canary i is the example
    x = 10⁴·e_{features+i}, y = 1 when included, and x = 0 (zero gradient) when not:
    the dataset keeps its size, so q and the divisor qN do not depend on the
    canaries, and a left-out canary is exactly a removed one. An included canary's
    clipped gradient is −C on its own coordinate in every step that samples it, and
    nothing else touches that coordinate; its score is the final weight there.

    Returns
    -------
    OneRunAuditResult
        With ``epsilon_certified`` = the optimizer's certified ε at ``delta``
        (:meth:`gaussdp.ml.DPOptimizer.privacy_spent`).
    """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from gaussdp.ml import make_private

    # Everything is checked before training starts.
    m = check_int("canaries", canaries, minimum=2)
    _check_guesses(k_plus, k_minus, m)
    check_probability("alpha", alpha, open_interval=True)
    noise_multiplier = check_positive("noise_multiplier", noise_multiplier)
    steps = check_count("steps", steps)
    examples = check_int("examples", examples, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    features = check_int("features", features, minimum=1)
    max_grad_norm = check_positive("max_grad_norm", max_grad_norm)
    delta = check_delta("delta", delta)
    source = check_rng(rng)
    included = _inclusion(m, source)
    # The ordinary examples' features and labels: public, drawn from the same source.
    gen = torch.Generator().manual_seed(int(source.randbits(63)))
    x = torch.zeros(examples + m, features + m)
    x[:examples, :features] = torch.randn(examples, features, generator=gen)
    y = torch.ones(examples + m)
    y[:examples] = torch.randint(0, 2, (examples,), generator=gen).float() * 2 - 1
    rows = torch.arange(m)[torch.from_numpy(included)]
    x[examples + rows, features + rows] = 1e4

    def linear_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return -(output.squeeze(-1) * target).mean()

    model = nn.Linear(features + m, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size)
    wrapped, opt, data_loader = make_private(
        model,
        optimizer,
        loader,
        loss_fn=linear_loss,
        max_grad_norm=max_grad_norm,
        delta=delta,
        noise_multiplier=noise_multiplier,
        rng=source,
    )
    done = 0
    while done < steps:
        for bx, by in data_loader:
            opt.zero_grad()
            wrapped.backward(bx, by)
            opt.step()
            done += 1
            if done == steps:
                break
    certified = opt.privacy_spent(delta).upper
    # Gradient descent on −output moves the weight up by C/(qN) per sampling.
    scores = model.weight.detach()[0, features:].to(torch.float64).numpy()
    q = batch_size / (examples + m)
    return audit_scores(
        scores,
        included,
        k_plus=k_plus,
        k_minus=k_minus,
        epsilon_certified=certified,
        delta=delta,
        alpha=alpha,
        method=(
            f"DP-SGD gradient canaries, σ = {noise_multiplier:g}, q = {q:.3g}, {steps} steps, "
            f"one run"
        ),
    )
