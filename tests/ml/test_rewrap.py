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


def test_the_history_of_another_network_is_refused() -> None:
    # rev29-ml #5 (a): only the step count was compared, so network B resumed with the
    # history of network A (as many steps, σ = 8) reported ε 2.866 instead of 4.688.
    a = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2))
    b = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2))
    first_a = _stage(a)
    first_b = _stage(b)
    with pytest.raises(ValueError, match="resume must be the state_dict.*'runs' include"):
        _stage(b, resume=first_a.state_dict())
    second = _stage(b, resume=first_b.state_dict())  # its own history: accepted
    assert second.state_dict()["privacy"]["runs"][:-1] == first_b.state_dict()["privacy"]["runs"]
    third = _stage(b, resume=second.state_dict())  # a third stage names both runs
    assert third.state_dict()["privacy"]["steps"] == 30
    assert len(third.state_dict()["privacy"]["runs"]) == 3


class _Joint(nn.Module):
    def __init__(self, encoder: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.encoder, self.head, self.out = encoder, head, nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.encoder(x)) + self.head(x)  # type: ignore[no-any-return]


def test_parts_trained_apart_cannot_be_joined_under_one_history() -> None:
    # rev29-ml #5 (b): an encoder and a head trained by two make_private calls, joined:
    # the encoder's history was accepted and ε reported 10.498 for 12.200.
    encoder = nn.Sequential(nn.Linear(5, 4), nn.ReLU())
    head = nn.Linear(5, 2)
    first = _stage(nn.Sequential(encoder, nn.Linear(4, 2)))
    other = _stage(head)
    for history in (first, other):
        with pytest.raises(ValueError, match="'runs' include"):
            _stage(_Joint(encoder, head), resume=history.state_dict())
    assert first.steps == other.steps == 10  # both still wrap their parts, unretired


def test_a_checkpoint_without_run_ids_is_refused_for_a_model_carrying_steps() -> None:
    net = nn.Sequential(nn.Linear(5, 2))
    first = _stage(net)
    old = first.state_dict()
    del old["privacy"]["runs"]  # as gaussdp wrote it before run ids
    with pytest.raises(ValueError, match="a history naming no run ids"):
        _stage(net, resume=old)
    fresh = nn.Sequential(nn.Linear(5, 2))  # no engine to compare with: loaded
    assert _stage(fresh, resume=old).state_dict()["privacy"]["steps"] == 20
    broken = first.state_dict()
    broken["privacy"]["runs"] = []
    with pytest.raises(ValueError, match=r"\['runs'\] must be a non-empty list"):
        _stage(nn.Sequential(nn.Linear(5, 2)), resume=broken)
