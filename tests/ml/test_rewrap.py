"""make_private on a model that an earlier make_private trained needs its history (rev28-ml #9).

Staged training (a new σ or batch size after some epochs) called make_private again
on the same network; the new optimizer's privacy_spent() started from 0 although the
parameters carried the first stage's steps (ε 2.857 reported against 3.785).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from gaussdp.ml import make_private  # noqa: E402
from gaussdp.random import ChaCha20Random  # noqa: E402

DELTA = 1e-4


def _data() -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(200, 5, generator=gen)
    return TensorDataset(x, (x[:, 0] > 0).long())


def _stage(net: nn.Module, lr: float = 0.5, **kw):  # type: ignore[no-untyped-def]
    model, optimizer, loader = make_private(
        net,
        torch.optim.SGD(net.parameters(), lr=lr),
        DataLoader(_data(), batch_size=20),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        delta=DELTA,
        rng=ChaCha20Random(0),
        **kw,
    )
    for xb, yb in loader:
        optimizer.zero_grad()
        nnf.cross_entropy(model(xb), yb).backward()
        optimizer.step()
    return optimizer


def test_a_second_make_private_without_the_history_is_refused() -> None:
    """The reviewer's reproducer: refused, not a second run whose epsilon starts at 0."""
    net = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2))
    first = _stage(net)
    with pytest.raises(ValueError, match="resume must be the state_dict"):
        _stage(net)
    with pytest.raises(ValueError, match="resume must be the state_dict"):
        _stage(nn.Sequential(net, nn.Linear(2, 2)))  # a model holding the trained one
    assert first.steps == 10


def test_resume_carries_the_history_over() -> None:
    net = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2))
    first = _stage(net)
    second = _stage(net, lr=0.25, resume=first.state_dict())
    both = first.accountant
    both.compose(second.step_event, count=second.steps)
    assert second.privacy_spent(DELTA) == both.epsilon(DELTA)
    assert second.privacy_spent(DELTA).upper > first.privacy_spent(DELTA).upper
    assert second.param_groups[0]["lr"] == 0.25  # the new optimizer keeps its own state
    third = _stage(net, resume=second.state_dict())  # and a third stage after both
    assert third.state_dict()["privacy"]["steps"] == 30
    with pytest.raises(ValueError, match="with at least the 30 steps"):
        _stage(net, resume=first.state_dict())  # an older history than the model carries


def test_a_model_wrapped_without_steps_needs_no_history() -> None:
    net = nn.Sequential(nn.Linear(5, 2))
    make_private(
        net,
        torch.optim.SGD(net.parameters(), lr=0.1),
        DataLoader(_data(), batch_size=20),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        delta=DELTA,
    )
    assert _stage(net).steps == 10


def test_resume_must_hold_a_history() -> None:
    net = nn.Sequential(nn.Linear(5, 2))
    with pytest.raises(ValueError, match="resume must be a DPOptimizer.state_dict"):
        _stage(net, resume={"optimizer": {}})


def test_the_earlier_optimizer_is_retired() -> None:
    """After the take-over the earlier optimizer steps no more (its steps would be missing)."""
    net = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2))
    first = _stage(net)
    _stage(net, resume=first.state_dict())
    with pytest.raises(RuntimeError, match="a later one took it over"):
        first.step()
    assert first.steps == 10
