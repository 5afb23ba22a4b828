"""Checkpoints carry the model's own keys and the accountant's history; choice of accountant."""

from __future__ import annotations

import copy
import io
import json
import pickle
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from gaussdp import Budget, Ledger  # noqa: E402
from gaussdp.accounting import (  # noqa: E402
    Composed,
    PLDAccountant,
    PrivacyFilter,
    RDPAccountant,
    SelfComposed,
    Subsampled,
    calibrate_noise_multiplier,
)
from gaussdp.accounting.events import event_from_json, event_to_json  # noqa: E402
from gaussdp.errors import BudgetExceededError  # noqa: E402
from gaussdp.mechanisms import Gaussian, LatticeGaussian  # noqa: E402
from gaussdp.ml import make_private  # noqa: E402
from gaussdp.random import ChaCha20Random  # noqa: E402

DELTA = 1e-5


def _data() -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(100, 5, generator=gen), torch.randint(0, 3, (100,)))


def _setup(seed: int, **kwargs: object):  # type: ignore[no-untyped-def]
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    options: dict[str, object] = {"noise_multiplier": 1.2, "rng": ChaCha20Random(seed)}
    options.update(kwargs)
    return make_private(
        net,
        torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9),
        DataLoader(_data(), batch_size=10),  # q = 0.1, 10 steps per pass
        loss_fn=nnf.cross_entropy,
        max_grad_norm=1.0,
        delta=DELTA,
        **options,  # type: ignore[arg-type]
    )


def _train(model, optimizer, loader, passes: int) -> None:  # type: ignore[no-untyped-def]
    for _ in range(passes):
        for x, y in loader:
            optimizer.zero_grad()
            model.backward(x, y)
            optimizer.step()


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_resumed_run_reports_the_epsilon_of_the_whole_run(accountant: str) -> None:
    model, optimizer, loader = _setup(1, accountant=accountant)
    _train(model, optimizer, loader, 5)  # 50 steps
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)

    buffer.seek(0)
    checkpoint = torch.load(buffer, weights_only=True)
    assert set(checkpoint["model"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    json.dumps(checkpoint["optimizer"]["privacy"])  # the history is plain JSON
    fresh_model, fresh_optimizer, fresh_loader = _setup(2, accountant=accountant)
    fresh_model.load_state_dict(checkpoint["model"])
    fresh_optimizer.load_state_dict(checkpoint["optimizer"])
    for a, b in zip(fresh_model.module.parameters(), model.module.parameters(), strict=True):
        assert torch.equal(a, b)
    torch.testing.assert_close(
        fresh_optimizer.state_dict()["optimizer"], optimizer.state_dict()["optimizer"]
    )
    assert fresh_optimizer.privacy_spent(DELTA) == optimizer.privacy_spent(DELTA)
    _train(fresh_model, fresh_optimizer, fresh_loader, 5)  # 50 more

    whole_model, whole_optimizer, whole_loader = _setup(3, accountant=accountant)
    _train(whole_model, whole_optimizer, whole_loader, 10)  # 100 uninterrupted
    assert fresh_optimizer.privacy_spent(DELTA) == whole_optimizer.privacy_spent(DELTA)
    resumed = fresh_optimizer.state_dict()["privacy"]
    whole = whole_optimizer.state_dict()["privacy"]
    assert resumed.pop("runs")[0] == checkpoint["optimizer"]["privacy"]["runs"][0]
    assert len(whole.pop("runs")) == 1  # the ids of the runs differ; the rest is the same
    assert resumed == whole
    assert resumed["steps"] == 100


def test_loading_without_the_history_is_refused() -> None:
    model, optimizer, loader = _setup(1)
    _train(model, optimizer, loader, 1)
    before = optimizer.privacy_spent(DELTA)
    plain = optimizer.optimizer.state_dict()
    with pytest.raises(ValueError, match="state_dict must be a DPOptimizer.state_dict"):
        optimizer.load_state_dict(plain)
    broken = optimizer.state_dict()
    broken["privacy"]["steps"] = -1
    with pytest.raises(ValueError, match="steps must be"):
        optimizer.load_state_dict(broken)
    broken = optimizer.state_dict()
    broken["privacy"]["history"] = event_to_json(Gaussian(sigma=1.0))
    with pytest.raises(ValueError, match=r"\['history'\] must be a Composed event"):
        optimizer.load_state_dict(broken)
    old_format = {"format": 1, "accountant": "pld", "steps": 10, "history": []}
    with pytest.raises(ValueError, match="format 1 .* is not read"):
        optimizer.load_state_dict({"optimizer": plain, "privacy": old_format})
    assert optimizer.privacy_spent(DELTA) == before  # nothing changed


def test_loading_after_steps_or_a_load_is_refused() -> None:
    """The parameters keep the noisy steps taken: loading must not lower epsilon."""
    model, optimizer, loader = _setup(1)
    before_training = optimizer.state_dict()
    _train(model, optimizer, loader, 1)  # 10 steps
    spent = optimizer.privacy_spent(DELTA)
    saved = optimizer.state_dict()
    with pytest.raises(ValueError, match="load_state_dict must be called on a fresh"):
        optimizer.load_state_dict(before_training)
    assert optimizer.privacy_spent(DELTA) == spent  # nothing changed
    assert optimizer.state_dict()["privacy"] == saved["privacy"]  # the same run id too
    _, fresh, _ = _setup(2)
    fresh.load_state_dict(saved)
    with pytest.raises(ValueError, match="10 steps taken or loaded"):
        fresh.load_state_dict(before_training)
    assert fresh.privacy_spent(DELTA) == spent


@pytest.mark.parametrize(
    ("which", "how"),
    [
        (which, how)
        for which in ("model", "optimizer")
        for how in ("copy", "deepcopy", "pickle", "torch.save")
        if (which, how) != ("model", "deepcopy")  # a plain network (test_deep_copy.py)
    ],
)
def test_copying_the_private_model_or_optimizer_points_to_state_dict(which: str, how: str) -> None:
    # Once: copy.deepcopy(optimizer) raised a bare AttributeError ('DPOptimizer' object
    # has no attribute '_optimizer'), the model's copy a message about its rng.
    model, optimizer, loader = _setup(1)
    _train(model, optimizer, loader, 1)
    obj = model if which == "model" else optimizer
    kind = "PrivateModule" if which == "model" else "DPOptimizer"
    copier = {
        "copy": copy.copy,
        "deepcopy": copy.deepcopy,
        "pickle": pickle.dumps,
        "torch.save": lambda o: torch.save(o, io.BytesIO()),
    }[how]
    with pytest.raises(TypeError) as refused:
        copier(obj)
    assert str(refused.value) == (
        f"{which} must be saved or copied through its state_dict(), not copied or pickled "
        "whole (a copy would draw the noise the original draws next, or release its clipped "
        "sums again): load the state_dict() into a new make_private(), got a "
        f"{kind} to copy or pickle"
    )
    state = copy.deepcopy(obj.state_dict())  # the way that works
    fresh = _setup(2)[0 if which == "model" else 1]
    fresh.load_state_dict(state)
    if which == "optimizer":
        assert fresh.privacy_spent(DELTA) == optimizer.privacy_spent(DELTA)
    else:
        assert all(
            torch.equal(a, b) for a, b in zip(fresh.parameters(), model.parameters(), strict=True)
        )


def test_history_is_the_step_events_in_their_json_form() -> None:
    model, optimizer, loader = _setup(1, noise_multiplier=2.0)
    _train(model, optimizer, loader, 1)  # 10 steps at sigma 2
    _, other, other_loader = _setup(2, noise_multiplier=1.0)
    other.load_state_dict(optimizer.state_dict())
    _train(_, other, other_loader, 2)  # 20 steps at sigma 1
    first, second = optimizer.step_event, other.step_event
    assert isinstance(first, Subsampled)
    assert isinstance(first.mechanism, LatticeGaussian)
    assert first.sample_rate == 0.1
    history = event_from_json(other.state_dict()["privacy"]["history"])
    assert history == Composed((SelfComposed(first, 10), SelfComposed(second, 20)))
    bounds = other.privacy_spent(DELTA)
    assert bounds == PLDAccountant().compose(first, 10).compose(second, 20).epsilon(DELTA)
    # The lattice steps cost what the continuous Gaussian steps do, to 1e-9.
    continuous = (
        PLDAccountant()
        .compose(Subsampled(Gaussian(sigma=2.0), sample_rate=0.1), 10)
        .compose(Subsampled(Gaussian(sigma=1.0), sample_rate=0.1), 20)
        .epsilon(DELTA)
    )
    assert bounds.upper == pytest.approx(continuous.upper, rel=1e-9)


def test_rdp_accountant_reports_the_rdp_bound() -> None:
    model, optimizer, loader = _setup(1, accountant="rdp")
    _train(model, optimizer, loader, 2)
    bounds = optimizer.privacy_spent(DELTA)
    reference = RDPAccountant().compose(optimizer.step_event, 20).epsilon(DELTA)
    assert bounds == reference
    continuous = Subsampled(Gaussian(sigma=1.2), sample_rate=0.1)
    assert bounds.upper == pytest.approx(
        RDPAccountant().compose(continuous, 20).epsilon(DELTA).upper, rel=1e-9
    )
    assert bounds.lower == 0
    assert bounds.method == "rdp"  # regression: it was '' (unlabelled)
    assert optimizer.accountant.delta(2.0).method == "rdp"
    assert isinstance(optimizer.accountant, RDPAccountant)
    assert optimizer.accountant_kind == "rdp"


def test_target_epsilon_with_rdp_calibrates_with_rdp() -> None:
    _, rdp_opt, _ = _setup(1, noise_multiplier=None, target_epsilon=2.0, epochs=3, accountant="rdp")
    sigma = rdp_opt.noise_multiplier
    event = Subsampled(Gaussian(sigma=sigma), sample_rate=0.1)
    assert RDPAccountant().compose(event, 30).epsilon(DELTA).upper <= 2.0
    looser = Subsampled(Gaussian(sigma=sigma / 1.002), sample_rate=0.1)
    assert RDPAccountant().compose(looser, 30).epsilon(DELTA).upper > 2.0
    # RDP is looser than PLD, so it needs more noise for the same target.
    assert sigma > calibrate_noise_multiplier(2.0, DELTA, 0.1, 30)


def test_bad_accountant_is_refused() -> None:
    with pytest.raises(ValueError, match="accountant must be 'pld' or 'rdp', got 'gdp'"):
        _setup(1, accountant="gdp")


# -- resuming under a ledger or filter: the whole history ends up there (rev27-ml #6) ----
def _checkpoint(optimizer) -> dict:  # type: ignore[no-untyped-def,type-arg]
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)  # type: ignore[no-any-return]


def _pld(event, steps: int) -> float:  # type: ignore[no-untyped-def]
    return PLDAccountant().compose(event, steps).epsilon(DELTA).upper


def _trained(passes: int, **kwargs: object):  # type: ignore[no-untyped-def]
    """The optimizer of a run of ``passes`` passes (seed 1) and its checkpoint."""
    model, optimizer, loader = _setup(1, **kwargs)
    _train(model, optimizer, loader, passes)
    return optimizer, _checkpoint(optimizer)


def test_a_history_charged_nowhere_is_charged_when_resumed_with_a_ledger(tmp_path: Path) -> None:
    # The reviewer's case: 50 steps without a ledger, resumed with one; the ledger said
    # 50 steps while the model carried 100.
    optimizer, saved = _trained(5)
    assert saved["privacy"]["charges"][0]["charged"] is None
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=50.0, delta=DELTA))
    fresh_model, fresh, fresh_loader = _setup(2, ledger=ledger, reserve_steps=5)
    fresh.load_state_dict(saved)
    (entry,) = ledger.entries()  # the 50 loaded steps, charged at once
    assert entry.event == SelfComposed(optimizer.step_event, 50)
    assert entry.detail is not None
    assert entry.detail["runs"] == 50
    _train(fresh_model, fresh, fresh_loader, 5)
    fresh.close()
    assert ledger.spent == _pld(optimizer.step_event, 100) == fresh.privacy_spent(DELTA).upper
    # Resumed again under the same ledger: every step is held there, nothing is charged.
    _, again, _ = _setup(3, ledger=ledger)
    again.load_state_dict(_checkpoint(fresh))
    assert ledger.spent == _pld(optimizer.step_event, 100)
    # Under another ledger: none of them is held there, all 100 are charged.
    other = Ledger(tmp_path / "other.db", total=Budget(epsilon=50.0, delta=DELTA))
    _, elsewhere, _ = _setup(4, ledger=other)
    elsewhere.load_state_dict(_checkpoint(fresh))
    assert other.spent == _pld(optimizer.step_event, 100)


def test_only_the_steps_charged_nowhere_are_charged_on_resume(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=50.0, delta=DELTA))
    model, charged, loader = _setup(1, ledger=ledger, reserve_steps=10)
    _train(model, charged, loader, 1)  # 10 steps charged to the ledger
    plain_model, plain, plain_loader = _setup(2)
    plain.load_state_dict(_checkpoint(charged))  # no ledger: nothing charged
    _train(plain_model, plain, plain_loader, 1)  # 10 steps charged nowhere
    mixed = _checkpoint(plain)
    assert [(c["count"], c["charged"] is None) for c in mixed["privacy"]["charges"]] == [
        (10, False),
        (10, True),
    ]
    _, resumed, _ = _setup(3, ledger=ledger)
    resumed.load_state_dict(mixed)
    assert [e.event for e in ledger.entries()] == [SelfComposed(charged.step_event, 10)] * 2
    assert ledger.spent == _pld(charged.step_event, 20) == resumed.privacy_spent(DELTA).upper


def test_a_filter_holds_its_own_runs_only() -> None:
    spend = PrivacyFilter(Budget(epsilon=50.0, delta=DELTA))
    optimizer, saved = _trained(1, filter=spend, reserve_steps=10)
    _, same, _ = _setup(2, filter=spend)
    same.load_state_dict(saved)
    assert spend.spent == _pld(optimizer.step_event, 10)  # held by this filter
    other = PrivacyFilter(Budget(epsilon=50.0, delta=DELTA))
    _, fresh, _ = _setup(3, filter=other)
    fresh.load_state_dict(saved)
    assert other.spent == _pld(optimizer.step_event, 10)


def test_a_resume_the_budget_cannot_hold_loads_nothing(tmp_path: Path) -> None:
    optimizer, saved = _trained(5)
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=0.5, delta=DELTA))
    _, fresh, _ = _setup(2, ledger=ledger)
    with pytest.raises(BudgetExceededError, match="the 50 DP-SGD steps taken before"):
        fresh.load_state_dict(saved)
    assert ledger.entries() == []
    assert fresh.privacy_spent(DELTA).upper == 0.0
    # A checkpoint of gaussdp before charges were recorded counts as charged nowhere.
    del saved["privacy"]["charges"]
    roomy = Ledger(tmp_path / "roomy.db", total=Budget(epsilon=50.0, delta=DELTA))
    _, old, _ = _setup(3, ledger=roomy)
    old.load_state_dict(saved)
    assert roomy.spent == _pld(optimizer.step_event, 50)


def test_charges_that_do_not_add_up_or_steps_without_noise_are_refused(tmp_path: Path) -> None:
    _, saved = _trained(1)
    saved["privacy"]["charges"][0]["count"] = 4  # the history has 10
    _, fresh, _ = _setup(2)
    with pytest.raises(ValueError, match=r"\['charges'\] must be a list of"):
        fresh.load_state_dict(saved)
    with pytest.warns(UserWarning, match="NOT differentially private"):
        free_model, free, free_loader = _setup(3, noise_multiplier=0.0)
    _train(free_model, free, free_loader, 1)
    ledger = Ledger(tmp_path / "budget.db", total=Budget(epsilon=50.0, delta=DELTA))
    _, charged, _ = _setup(4, ledger=ledger)
    with pytest.raises(ValueError, match=r"\['non_private_steps'\] must be 0 with a ledger"):
        charged.load_state_dict(_checkpoint(free))
    assert ledger.entries() == []
