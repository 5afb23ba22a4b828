r"""Membership-inference attacks on models trained with :mod:`gaussdp.ml`, against the bound.

Two attacks score each example of a population, half of which trained the target
model:

* **loss threshold** (Yeom et al. 2018): a low loss on the target model says
  "member";
* **likelihood ratio with shadow models**, in the style of LiRA (Carlini et al.,
  "Membership Inference Attacks From First Principles", S&P 2022): train a few
  shadow models on random halves of the population, model the logit-scaled
  confidence φ = ln(p_y/(1 − p_y)) of each example under models that did and did
  not train on it as two Gaussians (per-example means, pooled variances, since
  there are few shadows), and score the target model's φ by their log-likelihood
  ratio.

The empirical ROC is compared with the certified bound TPR ≤ 1 − f(FPR) of the
target's DP-SGD run (:meth:`gaussdp.privacy.tradeoff.TradeoffCurve.from_dpsgd`):
at each threshold, a Clopper–Pearson lower bound on the TPR above the bound read
at the upper bound of the FPR would be a violation (:meth:`MIAResult.violations`).

Needs the ``torch`` extra; sized for CPU (scikit-learn's digits in the example
``examples/mia_digits.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

try:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
except ImportError:  # pragma: no cover - exercised only without the extra
    from gaussdp.errors import MissingExtraError

    raise MissingExtraError("gaussdp.audit.mia", "torch") from None

from gaussdp._validation import check_delta, check_int, check_positive, check_probability
from gaussdp.audit.stats import clopper_pearson_arrays
from gaussdp.errors import invalid
from gaussdp.privacy.tradeoff import TradeoffCurve
from gaussdp.random import RandomSource

__all__ = [
    "MIAResult",
    "TrainedModel",
    "confidence_logits",
    "lira_scores",
    "lira_scores_each",
    "loss_scores",
    "roc",
    "train_classifier",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class TrainedModel:
    """A classifier and, when trained privately, its certified guarantee."""

    model: nn.Module
    epsilon: float | None
    delta: float
    curve: TradeoffCurve | None


def _mlp(features: int, classes: int, hidden: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, classes))


def train_classifier(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epsilon: float | None,
    epochs: int,
    batch_size: int = 64,
    delta: float = 1e-5,
    hidden: int = 64,
    lr: float = 0.5,
    max_grad_norm: float = 1.0,
    seed: int = 0,
    rng: RandomSource | None = None,
) -> TrainedModel:
    r"""Train a one-hidden-layer MLP, with DP-SGD at (``epsilon``, ``delta``) or without.

    DP-SGD: :func:`gaussdp.ml.make_private` calibrates σ for ``epochs`` epochs
    (certified by the PLD accountant), secure noise, Poisson sampling at
    ``batch_size/len(x)``; the certified curve is that of the run's actual σ, q and
    steps. ``epsilon=None``: plain SGD on shuffled batches, the same steps
    (no privacy: the attack's reference).

    ``seed`` fixes only what is not private: the initial weights (and, without DP,
    the shuffling). The DP-SGD batches and noise come from ``rng``: ``None`` is the
    operating system's CSPRNG, so two private trainings differ; pass
    ``ChaCha20Random(seed)`` to replay an experiment (its noise is then predictable
    from the seed, and ``epsilon`` holds only if the seed is secret).
    """
    epochs = check_int("epochs", epochs, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    delta = check_delta("delta", delta)
    lr = check_positive("lr", lr)
    classes = int(y.max()) + 1
    model = _mlp(x.shape[1], classes, hidden, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.functional.cross_entropy
    if epsilon is None:
        generator = torch.Generator().manual_seed(seed)
        loader = DataLoader(
            TensorDataset(x, y), batch_size=batch_size, shuffle=True, generator=generator
        )
        for _ in range(epochs):
            for bx, by in loader:
                optimizer.zero_grad()
                loss = loss_fn(model(bx), by)
                loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
        return TrainedModel(model, None, delta, None)
    from gaussdp.ml import make_private

    epsilon = check_positive("epsilon", epsilon)
    private, dp_optimizer, dp_loader = make_private(
        model,
        optimizer,
        DataLoader(TensorDataset(x, y), batch_size=batch_size),
        loss_fn=loss_fn,
        max_grad_norm=max_grad_norm,
        delta=delta,
        target_epsilon=epsilon,
        epochs=epochs,
        rng=rng,
    )
    for _ in range(epochs):
        for bx, by in dp_loader:
            dp_optimizer.zero_grad()
            private.backward(bx, by)
            dp_optimizer.step()
    curve = TradeoffCurve.from_dpsgd(
        dp_optimizer.noise_multiplier, dp_optimizer.sample_rate, dp_optimizer.steps
    )
    spent = dp_optimizer.privacy_spent(delta).upper
    return TrainedModel(model, spent, delta, curve)


@torch.no_grad()
def confidence_logits(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> FloatArray:
    r"""φ = ln(p_y/(1 − p_y)) per example, computed stably as z_y − logsumexp_{j≠y} z_j."""
    z = model(x).double()
    true = z.gather(1, y.view(-1, 1)).squeeze(1)
    others = z.scatter(1, y.view(-1, 1), -math.inf)
    return np.asarray((true - torch.logsumexp(others, dim=1)).numpy(), dtype=np.float64)


@torch.no_grad()
def loss_scores(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> FloatArray:
    """Membership scores of the loss-threshold attack: minus the cross-entropy loss."""
    losses = nn.functional.cross_entropy(model(x).double(), y, reduction="none")
    return np.asarray(-losses.numpy(), dtype=np.float64)


def lira_scores(
    target: FloatArray, shadow_logits: FloatArray, shadow_members: BoolArray
) -> FloatArray:
    r"""LiRA-style scores from the target's φ and shadow models' φ (rows: shadows).

    Per example, the mean φ over shadows that trained on it (IN) and that did not
    (OUT); variances pooled over all examples (few shadows). An example never IN
    (or never OUT) gets the population mean for that side. Score:
    ln N(φ; μ_in, σ_in²) − ln N(φ; μ_out, σ_out²).
    """
    phi = np.asarray(shadow_logits, dtype=np.float64)
    inside = np.asarray(shadow_members, dtype=bool)
    if phi.shape != inside.shape or phi.ndim != 2 or phi.shape[1] != np.size(target):
        raise ValueError(
            invalid("shadow_logits", "a (shadows, examples) array matching the target", phi.shape)
        )
    counts_in, counts_out = inside.sum(0), (~inside).sum(0)
    mean_in_all = phi[inside].mean() if inside.any() else 0.0
    mean_out_all = phi[~inside].mean() if (~inside).any() else 0.0
    mu_in = np.where(counts_in > 0, (phi * inside).sum(0) / np.maximum(counts_in, 1), mean_in_all)
    mu_out = np.where(
        counts_out > 0, (phi * ~inside).sum(0) / np.maximum(counts_out, 1), mean_out_all
    )
    resid_in = (phi - mu_in)[inside]
    resid_out = (phi - mu_out)[~inside]
    sd_in = max(float(resid_in.std()) if resid_in.size > 1 else 1.0, 1e-3)
    sd_out = max(float(resid_out.std()) if resid_out.size > 1 else 1.0, 1e-3)
    t = np.asarray(target, dtype=np.float64)
    log_in = -0.5 * ((t - mu_in) / sd_in) ** 2 - math.log(sd_in)
    log_out = -0.5 * ((t - mu_out) / sd_out) ** 2 - math.log(sd_out)
    return np.asarray(log_in - log_out, dtype=np.float64)


def lira_scores_each(logits: FloatArray, members: BoolArray) -> FloatArray:
    r"""LiRA scores with every model in turn as the target and the others as its shadows.

    ``logits[k]`` is model k's φ on every example and ``members[k]`` its training
    set (rows: K ≥ 3 models, each trained on an independent random half). Row k of
    the result is :func:`lira_scores` of model k against the other K − 1 models.
    Pooling the K rows (with ``members`` as the truth) evaluates the attack on K
    targets at the cost of K trainings (Carlini et al. 2022 evaluate LiRA this way).
    """
    phi = np.asarray(logits, dtype=np.float64)
    inside = np.asarray(members, dtype=bool)
    if phi.ndim != 2 or phi.shape != inside.shape or phi.shape[0] < 3:
        raise ValueError(
            invalid("logits", "a (models, examples) array of at least 3 models", phi.shape)
        )
    rows = [
        lira_scores(phi[k], np.delete(phi, k, axis=0), np.delete(inside, k, axis=0))
        for k in range(phi.shape[0])
    ]
    return np.stack(rows)


@dataclass(frozen=True, slots=True)
class MIAResult:
    """An attack's empirical ROC: ``fpr[i]``, ``tpr[i]`` of "score ≥ i-th threshold".

    ``false_positives``/``true_positives`` are the counts behind the rates, out of
    ``negatives`` non-members and ``positives`` members.
    """

    attack: str
    fpr: FloatArray
    tpr: FloatArray
    false_positives: npt.NDArray[np.int64]
    true_positives: npt.NDArray[np.int64]
    negatives: int
    positives: int

    @property
    def auc(self) -> float:
        """Area under the ROC curve."""
        x = np.concatenate([[0.0], self.fpr, [1.0]])
        y = np.concatenate([[0.0], self.tpr, [1.0]])
        return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2))

    def tpr_at(self, fpr: float) -> float:
        """The largest empirical TPR at an empirical FPR ≤ ``fpr``."""
        ok = self.fpr <= fpr
        return float(self.tpr[ok].max()) if np.any(ok) else 0.0

    def violations(self, curve: TradeoffCurve, alpha: float = 1e-6) -> list[tuple[float, float]]:
        r"""Thresholds where the attack provably beats TPR ≤ 1 − f(FPR).

        At each threshold, with Clopper–Pearson bounds at level α: a violation is
        TPR_low > 1 − f(FPR_high) (1 − f is increasing, so this is conservative).
        Returns the (FPR, TPR) points; empty when the ROC stays under the bound
        wherever its interval is informative.
        """
        alpha = check_probability("alpha", alpha, open_interval=True)
        tpr_low = clopper_pearson_arrays(self.true_positives, self.positives, alpha)[0]
        fpr_high = clopper_pearson_arrays(self.false_positives, self.negatives, alpha)[1]
        beaten = tpr_low > np.asarray(curve.max_tpr(fpr_high), dtype=np.float64)
        points = zip(self.fpr[beaten], self.tpr[beaten], strict=True)
        return [(float(f), float(t)) for f, t in points]


def roc(attack: str, scores: npt.ArrayLike, members: npt.ArrayLike) -> MIAResult:
    """The ROC of membership scores (higher: more likely a member) against the truth."""
    s = np.asarray(scores, dtype=np.float64)
    m = np.asarray(members, dtype=bool)
    if s.shape != m.shape or s.ndim != 1:
        raise ValueError(invalid("scores", "a 1-d array matching members", s.shape))
    positives, negatives = int(m.sum()), int((~m).sum())
    if positives == 0 or negatives == 0:
        raise ValueError(invalid("members", "both members and non-members", positives))
    order = np.argsort(-s, kind="stable")
    sorted_scores, sorted_members = s[order], m[order]
    tp = np.cumsum(sorted_members)
    fp = np.cumsum(~sorted_members)
    # Keep the last index of each run of equal scores (a threshold cannot split ties).
    last = np.r_[sorted_scores[1:] != sorted_scores[:-1], True]
    tp, fp = tp[last].astype(np.int64), fp[last].astype(np.int64)
    return MIAResult(attack, fp / negatives, tp / positives, fp, tp, negatives, positives)
