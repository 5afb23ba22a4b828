"""Membership-inference attacks: ROC mechanics, LiRA scores, and a DP model under its bound."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
datasets = pytest.importorskip("sklearn.datasets")

import torch  # noqa: E402

from gaussdp.audit.mia import (  # noqa: E402
    confidence_logits,
    lira_scores,
    lira_scores_each,
    loss_scores,
    roc,
    train_classifier,
)
from gaussdp.audit.stats import clopper_pearson  # noqa: E402
from gaussdp.privacy.tradeoff import TradeoffCurve  # noqa: E402
from gaussdp.random import ChaCha20Random  # noqa: E402

EXAMPLE = Path(__file__).parents[2] / "examples" / "mia_digits.py"


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
    with pytest.raises(ValueError, match="alpha must be"):
        perfect.violations(TradeoffCurve.from_gdp(0.5), alpha=float("nan"))


def test_violations_match_the_threshold_by_threshold_check() -> None:
    # The vectorised check against one Clopper–Pearson interval per threshold, on a
    # ROC that crosses the curve at some thresholds and not at others.
    rng = np.random.default_rng(2)
    members = rng.random(600) < 0.5
    scores = np.where(members, rng.normal(1.5, 1, 600), rng.normal(0, 1, 600))
    result = roc("shifted", scores, members)
    curve = TradeoffCurve.from_gdp(1.0)
    expected = [
        (float(f), float(t))
        for fp, tp, f, t in zip(
            result.false_positives, result.true_positives, result.fpr, result.tpr, strict=True
        )
        if clopper_pearson(int(tp), result.positives, 1e-3)[0]
        > float(curve.max_tpr(clopper_pearson(int(fp), result.negatives, 1e-3)[1]))
    ]
    assert 0 < len(expected) < len(result.fpr)
    assert result.violations(curve, alpha=1e-3) == expected


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
    target = train_classifier(
        x[inside], y[inside], epsilon=2.0, epochs=2, batch_size=50, rng=ChaCha20Random(0)
    )
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
            rng=ChaCha20Random(10 + i),
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


def test_private_training_noise_is_not_fixed_by_the_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Once the DP-SGD noise came from ChaCha20Random(seed), seed=0 by default: two
    # "private" trainings gave bit-identical models, their noise predictable from a
    # public default. The noise source is now rng (None: the OS CSPRNG), never the seed.
    import gaussdp.ml

    given: list[object] = []

    class StopError(Exception):
        pass

    def spy(*args: object, **kwargs: object) -> None:
        given.append(kwargs["rng"])
        raise StopError

    monkeypatch.setattr(gaussdp.ml, "make_private", spy)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 3, generator=gen), torch.randint(0, 2, (8,), generator=gen)
    source = ChaCha20Random(7)
    for kwargs in ({}, {"seed": 5}, {"seed": 5, "rng": source}):
        with pytest.raises(StopError):
            train_classifier(x, y, epsilon=1.0, epochs=1, **kwargs)  # type: ignore[arg-type]
    assert given == [None, None, source]


def test_lira_scores_each_is_lira_against_the_other_models() -> None:
    rng = np.random.default_rng(3)
    inside = rng.random((4, 50)) < 0.5
    phi = rng.normal(0, 1, (4, 50)) + inside
    each = lira_scores_each(phi, inside)
    for k in range(4):
        others = [j for j in range(4) if j != k]
        assert np.array_equal(each[k], lira_scores(phi[k], phi[others], inside[others]))
    with pytest.raises(ValueError, match="at least 3 models"):
        lira_scores_each(phi[:2], inside[:2])


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_mia_example_at_small_size(monkeypatch: pytest.MonkeyPatch) -> None:
    # examples/mia_digits.py's run() on 200 digits and 3 models per setting (the
    # documented run is 1,797 digits and 9 models): the pooled ROC covers every
    # (model, example) pair, and the ε = 1 models stay under their bound. About 20 s on
    # the busy machine (6 trainings, 3 of them calibrating σ for ε = 1 with the PLD
    # accountant): the smallest run of the example's whole pipeline.
    spec = importlib.util.spec_from_file_location("mia_digits", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "mia_digits", example)  # its dataclass looks itself up
    spec.loader.exec_module(example)
    rows = example.run(
        population=200, models=3, epochs=1, epochs_nonprivate=5, batch_size=20, settings=(1.0, None)
    )
    assert [(r.setting, r.result.attack.split(",")[0]) for r in rows] == [
        ("ε = 1", "loss"),
        ("ε = 1", "LiRA"),
        ("no DP", "loss"),
        ("no DP", "LiRA"),
    ]
    for row in rows:
        assert row.result.positives + row.result.negatives == 3 * 200
        assert row.curve is rows[0].curve  # the non-private models are held to the ε = 1 bound
    assert all(r.violations == 0 and r.violations_each == 0 for r in rows[:2])
    assert rows[0].epsilon is not None
    assert rows[0].epsilon <= 1.0 + 1e-3
