"""Membership-inference attacks: ROC mechanics, LiRA scores, and a DP model under its bound."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
datasets = pytest.importorskip("sklearn.datasets")

import torch  # noqa: E402

from gaussdp.audit.mia import (  # noqa: E402
    confidence_logits,
    lira_scores,
    loss_scores,
    roc,
    train_classifier,
)
from gaussdp.privacy.tradeoff import TradeoffCurve  # noqa: E402


def test_roc_of_perfect_random_and_tied_scores() -> None:
    members = np.array([True] * 50 + [False] * 50)
    perfect = roc("perfect", members.astype(float), members)
    assert perfect.auc == 1.0
    assert perfect.tpr_at(0.0) == 1.0
    tied = roc("tied", np.zeros(100), members)
    assert tied.fpr.tolist() == [1.0]  # one threshold: everything flagged
    assert tied.auc == pytest.approx(0.5)
    with pytest.raises(ValueError, match="members must be"):
        roc("x", np.zeros(3), np.ones(3, dtype=bool))


def test_lira_separates_gaussian_in_and_out() -> None:
    rng = np.random.default_rng(0)
    shadows, n = 8, 400
    inside = rng.random((shadows, n)) < 0.5
    base = rng.normal(0, 3, n)  # per-example difficulty
    phi = base + np.where(inside, 2.0, 0.0) + rng.normal(0, 0.5, (shadows, n))
    members = rng.random(n) < 0.5
    target = base + np.where(members, 2.0, 0.0) + rng.normal(0, 0.5, n)
    result = roc("lira", lira_scores(target, phi, inside), members)
    assert result.auc > 0.95  # per-example calibration removes the difficulty spread
    naive = roc("raw", target, members)
    assert naive.auc < result.auc


def test_violations_flag_only_provable_excess() -> None:
    members = np.array([True] * 400 + [False] * 400)
    perfect = roc("perfect", members.astype(float), members)
    assert perfect.violations(TradeoffCurve.from_gdp(0.5)) != []
    noise = roc("random", np.random.default_rng(1).random(800), members)
    assert noise.violations(TradeoffCurve.from_gdp(0.5)) == []


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_dp_model_attacks_stay_under_the_certified_bound() -> None:
    digits = datasets.load_digits()
    rng = np.random.default_rng(0)
    pick = rng.choice(len(digits.target), 200, replace=False)
    x = torch.tensor(digits.data[pick] / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target[pick], dtype=torch.long)
    members = rng.random(200) < 0.5
    inside = torch.from_numpy(np.flatnonzero(members))
    target = train_classifier(x[inside], y[inside], epsilon=2.0, epochs=2, batch_size=50)
    assert target.curve is not None
    assert target.epsilon is not None
    assert target.epsilon <= 2.0 * (1 + 1e-3)
    shadow_sets = rng.random((1, 200)) < 0.5
    shadows = [
        train_classifier(
            x[torch.from_numpy(np.flatnonzero(m))],
            y[torch.from_numpy(np.flatnonzero(m))],
            epsilon=2.0,
            epochs=2,
            batch_size=50,
            seed=10 + i,
        )
        for i, m in enumerate(shadow_sets)
    ]
    phi = np.stack([confidence_logits(s.model, x, y) for s in shadows])
    for scores in (
        loss_scores(target.model, x, y),
        lira_scores(confidence_logits(target.model, x, y), phi, shadow_sets),
    ):
        result = roc("attack", scores, members)
        assert result.violations(target.curve) == []
