"""The loss.backward() path refuses a loss that mixes examples (gaussdp.ml._loss_check).

audit26 item 9: ``cross_entropy + 10·‖batch mean of the outputs‖²`` gave the clipped sum
a brute-force sensitivity of 1.88·C, a softmax across the batch 1.15·C.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from brute_force import draw, sensitivity, zero_noise_private  # noqa: E402
from test_idiom import TwoHeads  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from gaussdp.ml import _loss_check, make_private  # noqa: E402
from gaussdp.random import ChaCha20Random  # noqa: E402

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
MODES = ["auto", "functorch"]
MIXES = "gradient for example .* depends on the outputs of other examples"


def _data(n: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return 5 * torch.randn(n, 4, generator=gen), torch.randint(0, 3, (n,), generator=gen)


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))


def _private(mode: str = "auto") -> tuple[nn.Module, Any, Any, torch.Tensor, torch.Tensor]:
    """The MLP made private with no noise, learning rate 0, and the data (12 examples)."""
    x, y = _data()
    net = _net()
    model, optimizer, _ = zero_noise_private(net, x, y, mode)
    return net, model, optimizer, x, y


def _clipped_sum(net: nn.Module, model: object, optimizer: object, loss_fn: Loss):  # type: ignore[no-untyped-def]
    def clipped_sum(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()  # type: ignore[attr-defined]
        draw(optimizer)
        loss_fn(model(inputs), targets).backward()  # type: ignore[operator]
        optimizer.step()  # type: ignore[attr-defined]
        flat = torch.cat([p.grad.reshape(-1) for p in net.parameters()])  # type: ignore[union-attr]
        return flat.to(torch.float64) * optimizer.expected_batch_size  # type: ignore[attr-defined,no-any-return]

    return clipped_sum


def _batch_mean_penalty(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nnf.cross_entropy(out, y) + 10 * (out.mean(0) ** 2).sum()


def _batch_softmax(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return -(out[:, 0].log_softmax(0)).mean()


def _pair(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Examples 2 and 3 only are coupled (a siamese term inside one batch)."""
    return nnf.cross_entropy(out, y) + ((out[2] - out[3]) ** 2).sum()


def _cancelling(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Coupled through a direction that a probe of all-equal values would miss."""
    return nnf.cross_entropy(out, y) + (out[:, 0].mean() - out[:, 1].mean()) ** 2


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("loss_fn", [_batch_mean_penalty, _batch_softmax, _pair, _cancelling])
def test_a_loss_mixing_examples_is_refused_and_nothing_is_charged(mode: str, loss_fn: Loss) -> None:
    net, model, optimizer, x, y = _private(mode)
    before = [p.detach().clone() for p in net.parameters()]
    optimizer.zero_grad()
    draw(optimizer)
    loss = loss_fn(model(x[:8]), y[:8])
    refusal = f"the loss given to loss.backward\\(\\) must be .*{MIXES}"
    with pytest.raises(ValueError, match=refusal):
        loss.backward()
    assert all(p.grad is None for p in net.parameters())  # the backward pass did not run
    with pytest.raises(RuntimeError, match="must follow loss.backward"):
        optimizer.step()
    assert optimizer.steps == 0
    assert all(torch.equal(a, p) for a, p in zip(before, net.parameters(), strict=True))
    # The same model trains on with a per-example loss.
    optimizer.zero_grad()
    draw(optimizer)
    nnf.cross_entropy(model(x), y).backward()
    optimizer.step()
    assert optimizer.steps == 1


@pytest.mark.parametrize("mode", MODES)
def test_the_auditors_coupling_losses_never_give_a_sensitivity_above_c(mode: str) -> None:
    x, y = _data()
    for loss_fn in (_batch_mean_penalty, _batch_softmax):
        net = _net()
        model, optimizer, _ = zero_noise_private(net, x, y, mode)
        with pytest.raises(ValueError, match=MIXES):
            sensitivity(_clipped_sum(net, model, optimizer, loss_fn), x, y)


def _regularised(net: nn.Module) -> Loss:
    def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        penalty = sum((p**2).sum() for p in net.parameters())
        return nnf.cross_entropy(out, y) + 0.01 * penalty  # type: ignore[no-any-return]

    return loss_fn


@pytest.mark.parametrize("mode", MODES)
def test_per_example_losses_and_parameter_regularisers_pass_with_sensitivity_c(mode: str) -> None:
    x, y = _data()
    losses: dict[str, Callable[[nn.Module], Loss]] = {
        "mean": lambda _: nnf.cross_entropy,
        "regularised": _regularised,
        "squared error": lambda _: lambda out, t: nnf.mse_loss(out, nnf.one_hot(t, 3).float()),
    }
    for make in losses.values():
        net = _net()
        model, optimizer, _ = zero_noise_private(net, x, y, mode)
        # 13 steps: probed ones (the first three) and unprobed ones alike.
        assert sensitivity(_clipped_sum(net, model, optimizer, make(net)), x, y) <= 1.0 + 1e-5


def _train(loss_name: str, probed: bool, monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    monkeypatch.setattr(_loss_check, "FIRST_STEPS", 3 if probed else 0)
    monkeypatch.setattr(_loss_check, "EVERY", 2 if probed else 10**9)
    x, y = _data(n=40)
    net = _net()
    loss_fn = {"mean": nnf.cross_entropy, "regularised": _regularised(net)}[loss_name]
    model, optimizer, loader = make_private(
        net,
        torch.optim.SGD(net.parameters(), lr=0.1),
        DataLoader(TensorDataset(x, y), batch_size=10),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        delta=1e-5,
        rng=ChaCha20Random(3),
    )
    torch.manual_seed(5)  # the loader's batches
    for xb, yb in loader:
        optimizer.zero_grad()
        loss_fn(model(xb), yb).backward()
        optimizer.step()
    if probed:  # the schedule probed steps 0, 1, 2 and every second one after (and step 0 of 1)
        assert model._engine.loss_check.steps == optimizer.steps
    return [p.detach().clone() for p in net.parameters()]


@pytest.mark.parametrize("loss_name", ["mean", "regularised"])
def test_the_check_changes_no_result(loss_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as patch:
        checked = _train(loss_name, True, patch)
    with monkeypatch.context() as patch:
        unchecked = _train(loss_name, False, patch)
    assert all(torch.equal(a, b) for a, b in zip(checked, unchecked, strict=True))


def test_a_parameter_combined_with_the_outputs_is_refused() -> None:
    """``model(x) @ w`` with a trained w: its gradient would be added unclipped."""
    net, model, optimizer, x, y = _private()
    head = net[2].weight  # (3, 6): reused on the outputs outside the model
    optimizer.zero_grad()
    draw(optimizer)
    loss = nnf.cross_entropy(model(x) @ head[:, :3], y)
    with pytest.raises(ValueError, match="combines a trained parameter with the model's outputs"):
        loss.backward()
    assert optimizer.steps == 0


def test_functional_backward_is_checked() -> None:
    _, model, optimizer, x, y = _private("functorch")
    optimizer.zero_grad()
    draw(optimizer)
    out = model(x)
    with pytest.raises(ValueError, match=MIXES):
        torch.autograd.backward([nnf.cross_entropy(out, y) + out.std(0).sum()])
    optimizer.zero_grad()
    draw(optimizer)
    torch.autograd.backward([nnf.cross_entropy(model(x), y)])
    optimizer.step()
    assert optimizer.steps == 1


def _abs_deviation(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (out - out.mean(0)).abs().sum(1).mean()  # second derivative 0: piecewise linear


def _hardest(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nnf.cross_entropy(out, y, reduction="none").topk(2).values.mean()


def _detached_mean(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (nnf.cross_entropy(out, y, reduction="none") * out.detach().mean() ** 2).mean()


@pytest.mark.parametrize("loss_fn", [_abs_deviation, _hardest, _detached_mean])
def test_mixing_without_a_second_derivative_is_found_by_recomputing(loss_fn: Loss) -> None:
    """The brute-force sensitivities were 1.75·C, 1.39·C and 0.01·C (lossmix/blind_spots)."""
    net, model, optimizer, x, y = _private()
    with pytest.raises(ValueError, match="changes when the outputs of other examples change"):
        sensitivity(_clipped_sum(net, model, optimizer, loss_fn), x, y)
    assert optimizer.steps == 0


def test_class_weights_with_the_mean_reduction_are_refused() -> None:
    """The mean divides by the batch's summed weights: the other examples' labels."""
    _, model, optimizer, x, y = _private()
    weight = torch.tensor([1.0, 5.0, 0.2])
    criterion = nn.CrossEntropyLoss(weight=weight)
    optimizer.zero_grad()
    draw(optimizer)
    with pytest.raises(ValueError, match="weight of cross_entropy with reduction='mean' must be"):
        criterion(model(x), y)
    per_example = (weight[y] * nnf.cross_entropy(model(x), y, reduction="none")).mean()
    per_example.backward()
    optimizer.step()
    optimizer.zero_grad()
    draw(optimizer)
    equal = nnf.nll_loss(model(x).log_softmax(1), y, weight=torch.full((3,), 2.0))
    equal.backward()
    optimizer.step()
    assert optimizer.steps == 2


def _padded(y: torch.Tensor) -> torch.Tensor:
    """Examples 0, 5 and 9 have their target ignored (as padded tokens are)."""
    y = y.clone()
    y[[0, 5, 9]] = -100
    return y


MEANS: dict[str, Loss] = {
    "cross_entropy": lambda out, t: nnf.cross_entropy(out, t),
    "CrossEntropyLoss": nn.CrossEntropyLoss(),
    "label_smoothing": nn.CrossEntropyLoss(label_smoothing=0.2),
    "nll_loss": lambda out, t: nnf.nll_loss(out.log_softmax(1), t),
    "ignore_index=2": lambda out, t: nnf.cross_entropy(out, t.clamp(min=0), ignore_index=2),
    "equal weights": nn.CrossEntropyLoss(weight=torch.full((3,), 2.0)),
    "size_average=True": lambda out, t: nnf.cross_entropy(out, t, size_average=True),
}


@pytest.mark.filterwarnings("ignore:size_average and reduce args will be deprecated")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(MEANS))
def test_a_mean_over_targets_does_not_depend_on_the_other_examples_labels(
    mode: str, name: str
) -> None:
    """torch's mean divides by the targets not ignored: 1.04·C by brute force before
    (lossmix/blind_spots). Now by the number of targets, on every step."""
    x, y = _data()
    y = _padded(y)
    net = _net()
    model, optimizer, _ = zero_noise_private(net, x, y, mode)
    # 13 steps: probed ones (the first three) and unprobed ones alike.
    assert sensitivity(_clipped_sum(net, model, optimizer, MEANS[name]), x, y) <= 1.0 + 1e-5


def test_the_mean_over_targets_counts_ignored_ones_and_is_torchs_without_them() -> None:
    _, model, optimizer, x, y = _private()
    for _ in range(_loss_check.FIRST_STEPS + 1):  # probed steps and an unprobed one
        optimizer.zero_grad()
        draw(optimizer)
        out = model(x)
        plain = out.detach().as_subclass(torch.Tensor)
        per = nnf.cross_entropy(plain, _padded(y), reduction="none")
        padded = nnf.cross_entropy(out, _padded(y))
        assert torch.allclose(padded, per.sum() / 12, rtol=1e-6)
        assert not torch.allclose(padded, nnf.cross_entropy(plain, _padded(y)), rtol=1e-3)
        full = nnf.cross_entropy(out, y)
        assert torch.allclose(full, nnf.cross_entropy(plain, y), rtol=1e-6)
        (full + padded).backward()
        optimizer.step()
    assert optimizer.steps == _loss_check.FIRST_STEPS + 1


def test_a_mean_over_padded_tokens_of_sequences_keeps_examples_apart() -> None:
    """Sequences: outputs (B, T, V), targets (B, T), padding ignored, flattened for the loss."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(12, 5, 4, generator=gen)
    y = torch.randint(0, 3, (12, 5), generator=gen)
    y[torch.rand(12, 5, generator=gen) < 0.3] = -100
    for mode in MODES:
        net = _net()
        model, optimizer, _ = zero_noise_private(net, x, y, mode)

        def loss_fn(out: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            return nnf.cross_entropy(out.reshape(-1, 3), t.reshape(-1))

        assert sensitivity(_clipped_sum(net, model, optimizer, loss_fn), x, y) <= 1.0 + 1e-5


@pytest.mark.parametrize("size_average", [None, True, False])
@pytest.mark.parametrize("reduce", [None, True, False])
def test_the_reduction_read_from_legacy_arguments_is_torchs(
    size_average: bool | None, reduce: bool | None
) -> None:
    """gaussdp reads torch's deprecated size_average/reduce itself (no private torch API)."""
    out, y = torch.randn(6, 3), torch.tensor([0, 1, 2, -100, 1, 0])
    reduction = _loss_check._reduction(size_average, reduce, "mean")
    legacy_args = (size_average, reduce) != (None, None)
    deprecated = pytest.warns(UserWarning, match="size_average and reduce args will be deprecated")
    with deprecated if legacy_args else nullcontext():
        legacy = nnf.cross_entropy(out, y, size_average=size_average, reduce=reduce)
    assert torch.equal(legacy, nnf.cross_entropy(out, y, reduction=reduction))


_STATE = torch.zeros(3)


def _through_item(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    scale = out.detach().abs().mean().item()  # a Python float of the whole batch
    return (nnf.cross_entropy(out, y, reduction="none") * scale).mean()


def _through_tolist(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    means = out.detach().mean(0).tolist()
    return (nnf.cross_entropy(out, y, reduction="none") * means[0]).mean()


def _through_state(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    _STATE.mul_(0.0).add_(out.detach().mean(0))  # a tensor of the caller's, changed in place
    return ((out - _STATE) ** 2).sum(1).mean()


@pytest.mark.parametrize("loss_fn", [_through_item, _through_tolist, _through_state])
def test_batch_values_through_python_numbers_or_state_changed_in_place_are_found(
    loss_fn: Loss,
) -> None:
    """Brute-force sensitivities on main at f154dd0: 1.02·C, 1.29·C and 1.14·C."""
    net, model, optimizer, x, y = _private()
    state = _STATE.clone()
    with pytest.raises(ValueError, match="changes when the outputs of other examples change"):
        sensitivity(_clipped_sum(net, model, optimizer, loss_fn), x, y)
    assert optimizer.steps == 0
    if loss_fn is not _through_state:
        assert torch.equal(_STATE, state)  # the recomputation left the caller's tensor alone


def test_python_numbers_for_logging_are_no_reason_to_refuse() -> None:
    net, model, optimizer, x, y = _private()

    def logged(out: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        batch_mean = out.detach().mean().item()  # printed, not used by the loss
        assert isinstance(batch_mean, float)
        return nnf.cross_entropy(out, t) + 0.0 * float(out[0, 0].detach())

    assert sensitivity(_clipped_sum(net, model, optimizer, logged), x, y) <= 1.0 + 1e-5


def test_class_weights_with_the_mean_reduction_are_refused_on_every_step() -> None:
    _, model, optimizer, x, y = _private()
    criterion = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 5.0, 0.2]))
    for _ in range(_loss_check.FIRST_STEPS + 1):
        optimizer.zero_grad()
        draw(optimizer)
        nnf.cross_entropy(model(x), y).backward()
        optimizer.step()
    optimizer.zero_grad()
    draw(optimizer)
    out = model(x)
    assert not model._engine.records[-1].probe.due  # an unprobed step
    with pytest.raises(ValueError, match="weight of cross_entropy with reduction='mean' must be"):
        criterion(out, y)
    with pytest.raises(RuntimeError, match="must follow loss.backward"):
        optimizer.step()  # nothing was captured
    assert optimizer.steps == _loss_check.FIRST_STEPS + 1


def test_accumulated_batches_and_single_examples_pass() -> None:
    _, model, optimizer, x, y = _private()
    for _ in range(2):
        optimizer.zero_grad()
        draw(optimizer)
        for start in (0, 1, 5):  # batches of 1, 4 and 7 examples before one step
            end = {0: 1, 1: 5, 5: 12}[start]
            nnf.cross_entropy(model(x[start:end]), y[start:end]).backward()
        optimizer.step()
    assert optimizer.steps == 2


def _weighted_penalty(weight: torch.Tensor) -> Loss:
    """A batch-mean penalty whose weight is a tensor: 0 first, the same form after."""
    return lambda out, y: nnf.cross_entropy(out, y) + weight * (out.mean(0) ** 2).sum()


def test_a_later_probed_step_finds_a_loss_that_changed_in_value_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_loss_check, "EVERY", 5)
    _, model, optimizer, x, y = _private()
    weight = torch.zeros(())
    for step in range(5):  # steps 3 and 4 are not probed and the form is the same: unseen
        weight.fill_(10.0 if step in (3, 4) else 0.0)
        optimizer.zero_grad()
        draw(optimizer)
        _weighted_penalty(weight)(model(x), y).backward()
        optimizer.step()
    optimizer.zero_grad()
    draw(optimizer)
    with pytest.raises(ValueError, match=MIXES):
        _weighted_penalty(weight)(model(x), y).backward()
    assert optimizer.steps == 5


def _switched_on(coefficient: float) -> Loss:
    return lambda out, y: nnf.cross_entropy(out, y) + coefficient * (out.mean(0) ** 2).sum()


@pytest.mark.parametrize(
    "later",
    [_batch_softmax, _switched_on(10.0), _abs_deviation],
    ids=["another loss", "a coefficient no longer 0", "a kink"],
)
def test_an_unprobed_step_checks_a_loss_whose_form_is_new(
    later: Loss, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mixing term switched on after the probed steps (by step, epoch or data)."""
    _, model, optimizer, x, y = _private()
    checks: list[int] = []
    real = _loss_check._check_examples
    monkeypatch.setattr(_loss_check, "_check_examples", lambda *a: (checks.append(1), real(*a))[1])
    for _ in range(_loss_check.FIRST_STEPS + 2):  # unprobed steps of a known form: no check
        optimizer.zero_grad()
        draw(optimizer)
        _switched_on(0.0)(model(x), y).backward()
        optimizer.step()
    assert len(checks) == _loss_check.FIRST_STEPS
    optimizer.zero_grad()
    draw(optimizer)
    out = model(x)
    assert not model._engine.records[-1].probe.due
    with pytest.raises(ValueError, match="the loss given to loss.backward\\(\\) must be"):
        later(out, y).backward()
    with pytest.raises(RuntimeError, match="must follow loss.backward"):
        optimizer.step()  # nothing was captured
    assert optimizer.steps == _loss_check.FIRST_STEPS + 2


@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
def test_a_compiled_loss_is_checked_as_written() -> None:
    """torch.compile runs the calls on the outputs eagerly (a graph break): recorded, checked."""
    _, model, optimizer, x, y = _private()
    per_example = torch.compile(lambda out, t: nnf.cross_entropy(out, t), backend="eager")
    for _ in range(_loss_check.FIRST_STEPS + 2):  # probed steps and unprobed ones
        optimizer.zero_grad()
        draw(optimizer)
        out = model(x)
        loss = per_example(out, y)
        assert type(loss) is _loss_check._Probed
        loss.backward()
        optimizer.step()
    mixing = torch.compile(_batch_softmax, backend="eager")
    optimizer.zero_grad()
    draw(optimizer)
    with pytest.raises(ValueError, match=MIXES):
        mixing(model(x), y).backward()  # a new form on an unprobed step
    assert optimizer.steps == _loss_check.FIRST_STEPS + 2


def test_a_loss_outside_torch_functions_is_refused_at_the_step() -> None:
    _, model, optimizer, x, y = _private()
    optimizer.zero_grad()
    draw(optimizer)
    out = model(x)
    loss = nnf.cross_entropy(out.as_subclass(torch.Tensor), y)  # as outside torch's functions
    assert type(loss) is torch.Tensor
    loss.backward()
    with pytest.raises(RuntimeError, match="without gaussdp's check"):
        optimizer.step()
    assert optimizer.steps == 0


def test_the_checks_own_calls_are_not_recorded_and_give_plain_tensors() -> None:
    """The check calls torch on probed tensors through torch's public default handler."""
    _, model, optimizer, x, y = _private()
    optimizer.zero_grad()
    draw(optimizer)
    out = model(x)
    loss = nnf.cross_entropy(out, y) + (out**2).mean()
    recorded = list(_loss_check._TRACE)
    loss.backward()
    assert [id(c) for c in _loss_check._TRACE] == [id(c) for c in recorded]  # none of its own
    assert not _loss_check._QUIET
    _loss_check._QUIET.append(True)
    try:
        assert type(out * 2) is torch.Tensor
    finally:
        _loss_check._QUIET.pop()
    assert len(_loss_check._TRACE) == len(recorded)
    optimizer.step()
    assert optimizer.steps == 1


def test_a_loss_without_a_second_derivative_is_refused() -> None:
    _, model, optimizer, x, y = _private()
    optimizer.zero_grad()
    draw(optimizer)
    with pytest.raises(ValueError, match="could not differentiate twice .*multi_margin"):
        nnf.multi_margin_loss(model(x), y).backward()
    assert optimizer.steps == 0


def test_evaluation_is_plain_and_training_outputs_are_probed_tensors() -> None:
    _, model, optimizer, x, y = _private()
    model.eval()
    with torch.no_grad():
        assert type(model(x)) is torch.Tensor
    model.train()
    for step in range(_loss_check.FIRST_STEPS + 1):
        optimizer.zero_grad()
        draw(optimizer)
        out = model(x)
        assert type(out) is _loss_check._Probed
        assert model._engine.records[-1].probe.due == (step < _loss_check.FIRST_STEPS)
        nnf.cross_entropy(out, y).backward()
        optimizer.step()
    assert optimizer.steps == _loss_check.FIRST_STEPS + 1


def test_the_second_evaluation_keeps_the_callers_state_and_random_draws() -> None:
    """A logging buffer changed in place is not changed again; dropout in the loss passes."""
    _, model, optimizer, x, y = _private()
    running = torch.zeros(3)
    optimizer.zero_grad()
    draw(optimizer)
    out = model(x)
    running.add_(out.detach().sum(0))
    expected = out.detach().sum(0)
    torch.manual_seed(7)
    nnf.cross_entropy(nnf.dropout(out, 0.5), y).backward()  # per-example random masks
    after = torch.rand(4)
    torch.manual_seed(7)
    nnf.dropout(out.detach().clone(), 0.5)  # what the loss's dropout drew
    assert torch.equal(after, torch.rand(4))  # the checks drew nothing from torch's state
    optimizer.step()
    assert torch.equal(running, expected)
    optimizer.zero_grad()
    draw(optimizer)
    out = model(x)
    running.add_(out.detach().sum(0))  # not made again by the recomputation
    expected += out.detach().sum(0)
    with pytest.raises(ValueError, match="changes when the outputs of other examples change"):
        _abs_deviation(out, y).backward()
    assert torch.equal(running, expected)
    assert optimizer.steps == 1


@pytest.mark.parametrize("mode", MODES)
def test_mixing_in_one_head_of_several_is_refused(mode: str) -> None:
    x, y = torch.randn(12, 5, generator=torch.Generator().manual_seed(0)), _data()[1]
    torch.manual_seed(0)
    net = TwoHeads()  # {"logits": ..., "value": ...}
    model, optimizer, _ = zero_noise_private(net, x, y, mode)
    optimizer.zero_grad()
    draw(optimizer)
    out = model(x)
    with pytest.raises(ValueError, match=MIXES):
        (nnf.cross_entropy(out["logits"], y) + out["value"].softmax(0).max()).backward()
    optimizer.zero_grad()
    draw(optimizer)
    out = model(x)
    (nnf.cross_entropy(out["logits"], y) + (out["value"] ** 2).mean()).backward()
    optimizer.step()
    assert optimizer.steps == 1


def test_an_example_with_a_non_finite_loss_is_no_reason_to_refuse() -> None:
    """Clipping counts its gradient as zero; only finite evidence of mixing counts."""
    _, model, optimizer, x, y = _private()
    scale = torch.ones(12)
    scale[3] = float("inf")  # example 3's own loss (as a log(0) would make it)
    optimizer.zero_grad()
    draw(optimizer)
    (scale * nnf.cross_entropy(model(x), y, reduction="none")).mean().backward()
    optimizer.step()
    assert optimizer.steps == 1
    optimizer.zero_grad()
    draw(optimizer)
    out = model(x)
    mixed = nnf.cross_entropy(out, y, reduction="none") * (out[:, 0].mean() ** 2) * scale
    with pytest.raises(ValueError, match=MIXES):
        mixed.mean().backward()


def test_a_generator_passed_to_the_loss_is_left_as_the_loss_left_it() -> None:
    """Per-example random weights from the caller's generator: drawn once, loss accepted."""
    _, model, optimizer, x, y = _private()
    gen = torch.Generator().manual_seed(1)
    optimizer.zero_grad()
    draw(optimizer)
    out = model(x)
    keep = torch.bernoulli(out[:, 0].detach() * 0 + 0.5, generator=gen)
    state = gen.get_state()
    (keep * nnf.cross_entropy(out, y, reduction="none")).mean().backward()
    assert torch.equal(gen.get_state(), state)
    optimizer.step()
    assert optimizer.steps == 1


def test_the_benchmark_runs_its_four_arms() -> None:
    """benchmarks/loss_check.py end to end, one round of one step (no timing checked)."""
    root = Path(__file__).resolve().parents[2]
    argv = ["--rounds", "1", "--block", "1", "--warmup", "1", "--batch", "8"]
    run = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "loss_check.py"), *argv],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    arms = [line.split()[0] for line in run.stdout.splitlines()[2:]]
    assert arms == ["plain", "off", "default", "every"]
