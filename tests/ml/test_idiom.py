"""The PyTorch idiom: ``loss = criterion(model(x), y); loss.backward(); optimizer.step()``.

Statistical tests use a stated false-alarm rate α = 1e-6 (STYLE 11).
"""

from __future__ import annotations

import gc
import math
import warnings
import weakref

import pytest
from scipy import stats

torch = pytest.importorskip("torch")

from brute_force import draw, keep_loader, sensitivity, zero_noise_private  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from gaussdp import Budget  # noqa: E402
from gaussdp.ml import make_private  # noqa: E402
from gaussdp.ml._ghost import GHOST_MARGIN  # noqa: E402
from gaussdp.ml.noise import CLIP_MARGIN  # noqa: E402
from gaussdp.random import ChaCha20Random  # noqa: E402

SHRINK = GHOST_MARGIN / CLIP_MARGIN  # ghost clipping's margin for its float error

ALPHA = 1e-6
CLIP = 0.7
LAMBDA = 0.01


def _data(n: int = 40, d: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return 3 * torch.randn(n, d, generator=gen), torch.randint(0, 3, (n,), generator=gen)


def _net(seed: int = 0, dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Dropout(dropout), nn.Linear(8, 3))


def _private(net: nn.Module, sigma: float = 0.0, **kwargs: object):  # type: ignore[no-untyped-def]
    x, y = _data()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "noise_multiplier=0", UserWarning)
        return keep_loader(  # sample rate 1: each batch drawn holds all 40 examples
            make_private(
                net,
                torch.optim.SGD(net.parameters(), lr=0.0),
                DataLoader(TensorDataset(x, y), batch_size=x.shape[0]),
                noise_multiplier=sigma,
                max_grad_norm=CLIP,
                delta=1e-5,
                **kwargs,  # type: ignore[arg-type]
            )
        )


def _flat_grad(net: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in net.parameters()]).to(torch.float64)  # type: ignore[union-attr]


def _regularised_loss(net: nn.Module, output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    penalty = sum((p**2).sum() for p in net.parameters())
    return nnf.cross_entropy(output, y) + LAMBDA * penalty  # type: ignore[no-any-return]


def _independent_clipped(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Σᵢ clip(∇ cross_entropy(net(xᵢ), yᵢ)), one plain backward per example, in float64."""
    total = torch.zeros(sum(p.numel() for p in net.parameters()), dtype=torch.float64)
    for i in range(x.shape[0]):
        net.zero_grad()
        nnf.cross_entropy(net(x[i : i + 1]), y[i : i + 1]).backward()
        g = _flat_grad(net)
        total += g * min(1.0, CLIP / float(torch.linalg.vector_norm(g)))
    net.zero_grad()
    return total


@pytest.mark.parametrize("mode", ["auto", "functorch"])
def test_custom_loss_clips_every_example_and_adds_the_regulariser(mode: str) -> None:
    net = _net()
    model, optimizer, _ = _private(net, grad_sample_mode=mode)
    x, y = _data(n=12)
    reference = copy_net = _net()
    penalty = torch.cat([2 * LAMBDA * p.detach().reshape(-1) for p in copy_net.parameters()])
    scale = optimizer.expected_batch_size
    shrink = SHRINK if mode == "auto" else 1.0  # auto: ghost clipping
    for i in range(x.shape[0]):  # one example per step: its clipped gradient is visible
        optimizer.zero_grad()
        draw(optimizer)
        _regularised_loss(net, model(x[i : i + 1]), y[i : i + 1]).backward()
        optimizer.step()
        clipped = (_flat_grad(net) - penalty.to(torch.float64)) * scale
        expected = _independent_clipped(reference, x[i : i + 1], y[i : i + 1]) * shrink
        assert float(torch.linalg.vector_norm(clipped)) <= CLIP * (1 + 1e-5)
        torch.testing.assert_close(clipped, expected, rtol=1e-4, atol=1e-6)
    optimizer.zero_grad()  # the whole batch: the sum of the clipped gradients
    draw(optimizer)
    _regularised_loss(net, model(x), y).backward()
    optimizer.step()
    clipped = (_flat_grad(net) - penalty.to(torch.float64)) * scale
    expected = _independent_clipped(reference, x, y) * shrink
    torch.testing.assert_close(clipped, expected, rtol=1e-4, atol=1e-5)


def test_sum_reduction_gives_the_same_clipped_sum() -> None:
    x, y = _data(n=9)
    results = []
    for reduction in ("mean", "sum"):
        net = _net()
        model, optimizer, _ = _private(net, loss_reduction=reduction, grad_sample_mode="functorch")
        optimizer.zero_grad()
        draw(optimizer)
        nnf.cross_entropy(model(x), y, reduction=reduction).backward()
        optimizer.step()
        results.append(_flat_grad(net))
    torch.testing.assert_close(results[0], results[1], rtol=1e-5, atol=1e-7)


def test_zero_gradient_model_update_has_the_noise_std() -> None:
    torch.manual_seed(0)
    net = nn.Linear(50, 20)  # 1,020 coordinates
    sigma = 1.3
    model, optimizer, _ = _private(net, sigma=sigma, rng=ChaCha20Random(11))
    x = torch.randn(10, 50)
    samples = []
    for _ in range(20):
        optimizer.zero_grad()
        draw(optimizer)
        (0.0 * model(x)).sum().backward()  # every per-example gradient is zero
        optimizer.step()
        samples.append(_flat_grad(net) * optimizer.expected_batch_size)
    values = torch.cat(samples)
    n = values.numel()
    std = optimizer.noise_std
    assert sigma * CLIP <= std <= sigma * CLIP * 1.004
    # Mean known (0): n·S²/s² ~ χ²(n); two-sided test at α = 1e-6.
    statistic = float((values**2).sum()) / std**2
    assert stats.chi2.ppf(ALPHA / 2, n) < statistic < stats.chi2.ppf(1 - ALPHA / 2, n)


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(5, 8)
        self.cls = nn.Linear(8, 3)
        self.reg = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = torch.tanh(self.body(x))
        return {"logits": self.cls(h), "value": self.reg(h).squeeze(1)}


@pytest.mark.parametrize("mode", ["auto", "functorch"])
def test_multi_output_model(mode: str) -> None:
    x, y = _data(n=7)
    target = x[:, 0]

    def loss_of(out: dict[str, torch.Tensor], rows: slice) -> torch.Tensor:
        return nnf.cross_entropy(out["logits"], y[rows]) + nnf.mse_loss(out["value"], target[rows])

    torch.manual_seed(0)
    net = TwoHeads()
    model, optimizer, _ = _private(net, grad_sample_mode=mode)
    optimizer.zero_grad()
    draw(optimizer)
    loss_of(model(x), slice(None)).backward()
    optimizer.step()
    got = _flat_grad(net) * optimizer.expected_batch_size
    torch.manual_seed(0)
    reference = TwoHeads()
    expected = torch.zeros_like(got)
    for i in range(x.shape[0]):
        reference.zero_grad()
        loss_of(reference(x[i : i + 1]), slice(i, i + 1)).backward()
        g = _flat_grad(reference)
        expected += g * min(1.0, CLIP / float(torch.linalg.vector_norm(g)))
    if mode == "auto":  # ghost clipping
        expected *= SHRINK
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


def test_dropout_masks_agree_between_the_paths() -> None:
    x, y = _data(n=16)
    results = []
    for mode in ("ghost", "functorch"):
        net = _net(dropout=0.5)
        # The masks come from make_private's rng (gaussdp.ml._masks): one seed for both.
        model, optimizer, _ = _private(net, grad_sample_mode=mode, rng=ChaCha20Random(123))
        optimizer.zero_grad()
        draw(optimizer)
        nnf.cross_entropy(model(x), y).backward()
        optimizer.step()  # the ghost call is checked against the per-example path
        results.append(_flat_grad(net))
    torch.testing.assert_close(results[0], results[1] * SHRINK, rtol=1e-4, atol=1e-6)


def test_gradient_accumulation_equals_one_batch() -> None:
    x, y = _data(n=10)
    results = []
    for parts in (1, 2):
        net = _net()
        model, optimizer, _ = _private(net, loss_reduction="sum")
        optimizer.zero_grad()
        draw(optimizer)
        for chunk_x, chunk_y in zip(x.chunk(parts), y.chunk(parts), strict=True):
            nnf.cross_entropy(model(chunk_x), chunk_y, reduction="sum").backward()
        optimizer.step()
        results.append(_flat_grad(net))
    torch.testing.assert_close(results[0], results[1], rtol=1e-5, atol=1e-7)


def test_two_outputs_in_one_backward_are_refused() -> None:
    net = _net()
    model, optimizer, _ = _private(net, sigma=1.0)
    x, y = _data(n=6)
    optimizer.zero_grad()
    draw(optimizer)
    (nnf.cross_entropy(model(x), y) + nnf.cross_entropy(model(x), y)).backward()
    with pytest.raises(RuntimeError, match="two outputs of the private model reached one"):
        optimizer.step()
    assert optimizer.steps == 0


def test_unwrapped_model_gradients_are_refused() -> None:
    net = _net()
    model, optimizer, _ = _private(net, sigma=1.0)
    x, y = _data(n=6)
    optimizer.zero_grad()
    draw(optimizer)
    nnf.cross_entropy(model(x), y).backward()
    nnf.cross_entropy(net(x), y).backward()  # unclipped gradients into param.grad
    with pytest.raises(RuntimeError, match="the unwrapped model ran with gradients enabled"):
        optimizer.step()
    assert optimizer.steps == 0


@pytest.mark.parametrize("zero_grad_first", [True, False])
@pytest.mark.parametrize("mode", ["auto", "functorch"])
def test_a_submodule_run_on_data_with_gradients_is_refused_before_the_charge(
    mode: str, zero_grad_first: bool
) -> None:
    # rev27-ml #2: the raw-call check watched the root only, so net[1](net[0](x)) with
    # gradients put unclipped per-example gradients into param.grad and step() added
    # them un-noised as a "regulariser": brute-force sensitivity 1.77·C at weight 0.5,
    # growing without bound with the weight. rev28-ml #1: the same with zero_grad()
    # after the forward pass (below: zero_grad_first=False).
    from gaussdp.accounting import PrivacyFilter

    spend = PrivacyFilter(Budget(epsilon=100.0, delta=1e-5))
    net = _net()
    model, optimizer, _ = _private(net, sigma=1.0, grad_sample_mode=mode, filter=spend)
    before = [p.detach().clone() for p in net.parameters()]
    x, y = _data(n=6)
    if zero_grad_first:
        optimizer.zero_grad()
    draw(optimizer)
    loss = nnf.cross_entropy(model(x), y)
    features = net[1](net[0](x))  # an activation penalty on the data, outside the model
    if not zero_grad_first:
        optimizer.zero_grad()  # after the forward pass, as in PyTorch's tutorials
    (loss + 50.0 * features.pow(2).mean()).backward()
    with pytest.raises(RuntimeError, match="submodule '0' ran with gradients enabled"):
        optimizer.step()
    assert optimizer.steps == 0
    assert spend.spent == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
    # The same part run under torch.no_grad() (or after zero_grad()) is fine.
    optimizer.zero_grad()
    draw(optimizer)
    with torch.no_grad():
        features = net[1](net[0](x))
    nnf.cross_entropy(model(x), y).backward()
    optimizer.step()
    assert optimizer.steps == 1


@pytest.mark.parametrize("mode", ["auto", "functorch"])
def test_a_part_run_before_zero_grad_and_backpropagated_after_it_is_refused(mode: str) -> None:
    # rev28-ml #1: zero_grad() cleared the raw-call flag, but the graph of a part run
    # before it (the textbook order forward, zero_grad, backward, step) still put its
    # unclipped per-example gradient into param.grad at the backward after it: the
    # brute-force sensitivity was 1.77·C at weight 0.5 and 158·C at weight 50.
    def textbook_order(model, optimizer):  # type: ignore[no-untyped-def]
        def clipped_sum(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            draw(optimizer)
            # An activation penalty; no output of the parts is kept, only its graph.
            penalty = model.module[1](model.module[0](xb)).pow(2).mean()
            loss = nnf.cross_entropy(model(xb), yb) + 0.5 * penalty
            optimizer.zero_grad()  # after the forward pass, as in PyTorch's tutorials
            loss.backward()
            optimizer.step()
            return _flat_grad(model.module) * optimizer.expected_batch_size

        return clipped_sum

    x, y = _data(n=6)
    model, optimizer, _ = zero_noise_private(_net(), x, y, mode)
    with pytest.raises(RuntimeError, match="submodule '0' ran with gradients enabled"):
        sensitivity(textbook_order(model, optimizer), x, y)
    assert optimizer.steps == 0


def test_a_part_run_with_gradients_that_no_backward_reaches_is_fine_after_zero_grad() -> None:
    net = _net()
    model, optimizer, _ = _private(net, sigma=1.0)
    xb, yb = draw(optimizer)
    features = net[0](xb)  # with gradients enabled, but never back-propagated
    optimizer.zero_grad()
    _regularised_loss(net, model(xb), yb).backward()  # a regulariser: param.grad is set
    optimizer.step()
    assert optimizer.steps == 1
    assert features.grad_fn is not None


def test_watching_the_parts_keeps_the_batched_path_proven() -> None:
    net = _net()
    model, optimizer, _ = _private(net, sigma=1.0, grad_sample_mode="ghost")
    x, y = _data(n=6)
    for _ in range(2):
        optimizer.zero_grad()
        draw(optimizer)
        nnf.cross_entropy(model(x), y).backward()
        optimizer.step()
    assert optimizer.steps == 2


def test_step_without_backward_is_refused_and_empty_batch_steps() -> None:
    net = _net()
    model, optimizer, _ = _private(net, sigma=1.0, rng=ChaCha20Random(0))
    with pytest.raises(RuntimeError, match=r"optimizer.step\(\) must follow loss.backward\(\)"):
        optimizer.step()
    x, y = _data(n=1)
    optimizer.zero_grad()
    draw(optimizer)
    loss = nnf.cross_entropy(model(x[:0]), y[:0], reduction="sum")
    loss.backward()
    optimizer.step()  # a noise-only step, accounted
    assert optimizer.steps == 1
    assert bool(torch.isfinite(_flat_grad(net)).all())
    assert math.isfinite(optimizer.privacy_spent(1e-5).upper)


def test_evaluation_under_no_grad_is_the_plain_model() -> None:
    net = _net()
    model, _, _ = _private(net, sigma=1.0)
    x, _ = _data(n=4)
    with torch.no_grad():
        torch.testing.assert_close(model(x), net(x))


@pytest.mark.parametrize("api", ["backward", "idiom"])
def test_zero_grad_without_set_to_none_does_not_double_the_step(api: str) -> None:
    net = _net()
    model, optimizer, _ = _private(net, loss_fn=nnf.cross_entropy)
    x, y = _data(n=8)
    grads = []
    for _ in range(3):
        optimizer.zero_grad(set_to_none=False)
        draw(optimizer)
        if api == "backward":
            model.backward(x, y)
        else:
            nnf.cross_entropy(model(x), y).backward()
        optimizer.step()
        grads.append(_flat_grad(net))
    torch.testing.assert_close(grads[1], grads[0])
    torch.testing.assert_close(grads[2], grads[0])


@pytest.mark.parametrize("mode", ["auto", "functorch"])
def test_a_step_lets_go_of_its_training_call(mode: str) -> None:
    """Once stepped on (or its step refused), a training call's record, activations and
    graph are freed: the autograd node of the captured outputs held its record, which
    holds those outputs (the loss check's probe), a cycle through torch's graph that
    garbage collection cannot break — every step's batch stayed in memory (≈ 50 MB a
    step on the benchmark's transformer)."""
    net = _net()
    model, optimizer, _ = _private(net, sigma=1.0, rng=ChaCha20Random(0))
    x, y = _data()  # the 40 examples of each batch drawn
    records = []
    for refused in (False, True):
        optimizer.zero_grad()
        draw(optimizer)
        output = model(x)
        nnf.cross_entropy(output, y).backward()
        records.append(weakref.ref(model._engine.records[0]))  # type: ignore[attr-defined]
        if refused:  # the rows again: 80 for a batch of 40, refused and dropped
            nnf.cross_entropy(model(x), y).backward()
            with pytest.raises(RuntimeError, match="rows"):
                optimizer.step()
        else:
            optimizer.step()
        del output
        gc.collect()
        assert records[-1]() is None
    assert optimizer.steps == 1
