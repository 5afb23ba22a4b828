"""A deep copy of the private model or its network is another network (EMA/BYOL targets).

``copy.deepcopy(net)`` after make_private raised TypeError (the watch hooks were the
engine's methods, so the copy tried to copy the engine and its noise generator): an
EMA target (``torch.optim.swa_utils.AveragedModel``, BYOL) could not be made. The copy
must not share the engine: its training calls are no part of a private step, and
make_private on it still asks for the history its parameters carry.
"""

from __future__ import annotations

import copy
import io
import pickle

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from gaussdp.ml import make_private  # noqa: E402
from gaussdp.random import ChaCha20Random  # noqa: E402

DELTA = 1e-4


def _data() -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(200, 5, generator=gen)
    return TensorDataset(x, (x[:, 0] > 0).long())


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2))


def _wrap(net: nn.Module, **kw):  # type: ignore[no-untyped-def]
    return make_private(
        net,
        torch.optim.SGD(net.parameters(), lr=0.5),
        DataLoader(_data(), batch_size=20),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        delta=DELTA,
        rng=ChaCha20Random(0),
        **kw,
    )


def _train(model, optimizer, loader, between=lambda x: None) -> None:  # type: ignore[no-untyped-def]
    for xb, yb in loader:
        optimizer.zero_grad()
        nnf.cross_entropy(model(xb), yb).backward()
        optimizer.step()
        between(xb)


@pytest.mark.parametrize("of", ["model", "network", "layer"])
def test_a_deep_copy_is_a_plain_network(of: str) -> None:
    net = _net()
    model, _, loader = _wrap(net)
    source = {"model": model, "network": net, "layer": net[0]}[of]
    target = copy.deepcopy(source)
    assert type(target) is type(net if of == "model" else source)  # not a PrivateModule
    pairs = list(zip(target.parameters(), source.parameters(), strict=True))
    assert all(a is not b and torch.equal(a, b) for a, b in pairs)
    x = next(iter(loader))[0]
    target(x).sum().backward()  # trains like any network
    assert all(p.grad is not None for p in target.parameters())
    assert all(p.grad is None for p in net.parameters())


def test_an_ema_target_follows_the_private_model_and_takes_nothing_from_its_steps() -> None:
    """EMA updates and training calls of the copy leave the private run as it was."""
    model, optimizer, loader = _wrap(_net())
    _train(model, optimizer, loader)
    alone = [p.detach().clone() for p in model.parameters()]

    model, optimizer, loader = _wrap(_net())
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))  # deep-copies model
    byol = copy.deepcopy(model)
    own = torch.optim.SGD(byol.parameters(), lr=0.1)

    def between(x: torch.Tensor) -> None:
        ema.update_parameters(model)
        own.zero_grad()
        byol(x).pow(2).mean().backward()  # the copy's own (non-private) training
        own.step()

    _train(model, optimizer, loader, between)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), alone, strict=True))
    assert optimizer.steps == 10
    assert not all(torch.equal(a, b) for a, b in zip(ema.parameters(), alone, strict=True))
    # Its state_dict and the private model's load into each other.
    model.load_state_dict(ema.module.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), ema.parameters(), strict=True))
    byol.load_state_dict(model.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(byol.parameters(), ema.parameters(), strict=True))


def test_the_network_itself_is_still_watched_after_a_copy() -> None:
    net = _net()
    model, optimizer, loader = _wrap(net)
    copy.deepcopy(net)
    x, y = next(iter(loader))
    optimizer.zero_grad()
    nnf.cross_entropy(model(x), y).backward()
    net(x).sum().backward()  # the unwrapped network, with gradients
    with pytest.raises(RuntimeError, match="the unwrapped model ran with gradients enabled"):
        optimizer.step()


def test_make_private_on_a_copy_asks_for_the_history_of_its_source() -> None:
    """A target copied before training carries the steps its source took since."""
    net = _net()
    model, optimizer, loader = _wrap(net)
    target = copy.deepcopy(net)  # at step 0
    _train(model, optimizer, loader)
    with pytest.raises(ValueError, match="or the network it was deep-copied from"):
        _wrap(target)
    with pytest.raises(ValueError, match="at least the 10 steps"):
        _wrap(target, resume=_wrap(_net())[1].state_dict())  # a history of 0 steps
    # Staged training of the source: the copy follows the run that took it over.
    second, second_opt, second_loader = _wrap(net, resume=optimizer.state_dict())
    _train(second, second_opt, second_loader)
    with pytest.raises(ValueError, match="at least the 20 steps"):
        _wrap(target, resume=optimizer.state_dict())
    frozen = pickle.loads(pickle.dumps(target))  # a pickled copy keeps the count
    with pytest.raises(ValueError, match="at least the 20 steps"):
        _wrap(frozen, resume=optimizer.state_dict())
    # With the history the copy trains privately, on the batched path (no hook left).
    third, third_opt, third_loader = _wrap(
        target, resume=second_opt.state_dict(), grad_sample_mode="ghost"
    )
    _train(third, third_opt, third_loader)
    assert third_opt.state_dict()["privacy"]["steps"] == 30


def test_a_copy_takes_only_its_source_runs_history() -> None:
    """Another network's history of as many steps is not the copy's (rev29-ml #5)."""
    net = _net()
    model, optimizer, loader = _wrap(net)
    target = copy.deepcopy(net)
    _train(model, optimizer, loader)
    other = _net()
    other_model, other_opt, other_loader = _wrap(other)
    _train(other_model, other_opt, other_loader)
    with pytest.raises(ValueError, match="'runs' include those of every earlier"):
        _wrap(target, resume=other_opt.state_dict())
    _wrap(target, resume=optimizer.state_dict())


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
def test_the_network_itself_is_still_not_pickled(how: str) -> None:
    """Pickled to a torch.multiprocessing worker, an unwatched copy would share its storage."""
    net = _net()
    _wrap(net)
    copier = {"pickle": pickle.dumps, "torch.save": lambda o: torch.save(o, io.BytesIO())}[how]
    with pytest.raises(TypeError, match="to save a model made private, use its state_dict"):
        copier(net)
    copier(copy.deepcopy(net))  # a copy has nothing of the run to share
