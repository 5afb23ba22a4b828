"""Calls of the unwrapped model's parts with gradients: every tensor they make is watched.

rev29-ml #1: the raw-call check hooked only the tensors ``tree_flatten`` finds in a
call's output. A part returning a dataclass, or keeping an auxiliary loss as an
attribute, put its unclipped per-example gradient into ``param.grad`` in the textbook
order (forward, ``zero_grad()``, backward, step), and the step added it un-noised:
brute-force sensitivity 1.25·C (dataclass) and 10.4·C (attribute) at weight 0.5,
62.9·C and 1033·C at weight 50.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from brute_force import draw, sensitivity, zero_noise_private  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402

MODES = ["auto", "functorch"]
REFUSED = "submodule 'body' ran with gradients enabled"


@dataclasses.dataclass
class Features:
    h: torch.Tensor


class _Tanh(torch.autograd.Function):
    """tanh(x wᵀ) as a custom autograd function (torch function modes do not see it)."""

    generate_vmap_rule = True  # the private model's per-example path runs it under vmap

    @staticmethod
    def forward(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ w.T)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(*inputs, output)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w, z = ctx.saved_tensors
        inner = grad * (1 - z * z)
        return inner @ w, inner.T @ x


class Body(nn.Module):
    """Its own parameter (no Linear); how it hands on its features depends on ``kind``."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.weight = nn.Parameter(torch.randn(8, 5) * 0.4)
        self.aux: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> Any:
        if self.kind == "custom":  # an auxiliary term from a custom autograd function
            self.aux = _Tanh.apply(x, self.weight).pow(2).mean()
        z = x @ self.weight.T
        if self.kind == "attribute":  # an auxiliary loss kept on the module (MoE style)
            self.aux = z.pow(2).mean()
        if self.kind == "custom-output":  # the function's result itself, in a dataclass
            return Features(_Tanh.apply(x, self.weight))
        return Features(torch.tanh(z)) if self.kind == "dataclass" else torch.tanh(z)


class Net(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = Body(kind)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        return self.head(out.h if isinstance(out, Features) else out)  # type: ignore[no-any-return]


def _penalty(net: Net, out: Any) -> torch.Tensor:
    if isinstance(out, Features):
        return out.h.pow(2).mean()
    assert net.body.aux is not None
    return net.body.aux


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return 3 * torch.randn(6, 5, generator=gen), torch.randint(0, 3, (6,), generator=gen)


def _textbook_order(net: Net, model: Any, optimizer: Any, weight: float) -> Any:
    def clipped_sum(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        draw(optimizer)
        penalty = _penalty(net, net.body(xb))  # the unwrapped part, gradients on
        loss = nnf.cross_entropy(model(xb), yb) + weight * penalty
        optimizer.zero_grad()  # after the forward pass, as in PyTorch's tutorials
        loss.backward()
        optimizer.step()
        flat = torch.cat([p.grad.reshape(-1) for p in net.parameters()])  # type: ignore[union-attr]
        return flat.to(torch.float64) * optimizer.expected_batch_size

    return clipped_sum


@pytest.mark.parametrize("kind", ["dataclass", "attribute", "custom", "custom-output"])
@pytest.mark.parametrize("mode", MODES)
def test_a_part_passing_on_its_features_outside_its_output_is_refused(mode: str, kind: str) -> None:
    x, y = _data()
    net = Net(kind)
    model, optimizer, _ = zero_noise_private(net, x, y, mode)
    before = [p.detach().clone() for p in net.parameters()]
    with pytest.raises(RuntimeError, match=REFUSED):
        sensitivity(_textbook_order(net, model, optimizer, 50.0), x, y)
    assert optimizer.steps == 0
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))


@pytest.mark.parametrize("mode", MODES)
def test_a_graph_made_before_the_last_step_is_refused_when_back_propagated(mode: str) -> None:
    x, y = _data()
    net = Net("attribute")
    model, optimizer, _ = zero_noise_private(net, x, y, mode)
    draw(optimizer)
    net.body(x)  # a step earlier: its graph waits in net.body.aux
    kept = net.body.aux
    assert kept is not None
    optimizer.zero_grad()
    nnf.cross_entropy(model(x), y).backward()
    optimizer.step()
    assert optimizer.steps == 1
    optimizer.zero_grad()
    draw(optimizer)
    (nnf.cross_entropy(model(x), y) + 50.0 * kept).backward()
    with pytest.raises(RuntimeError, match=REFUSED):
        optimizer.step()
    assert optimizer.steps == 1


def test_watching_ends_with_the_call_also_when_it_raises() -> None:
    x, y = _data()
    net = Net("plain")
    model, optimizer, _ = zero_noise_private(net, x, y, "auto")
    modes = torch._C._len_torch_function_stack()  # torch's function modes in use
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        net.body(x[:, :4])
    assert torch._C._len_torch_function_stack() == modes
    net.body(x)
    assert torch._C._len_torch_function_stack() == modes
    # A part run with gradients that no backward pass reaches, and a regulariser: fine.
    draw(optimizer)
    features = Features(net.body(x))
    optimizer.zero_grad()
    penalty = sum(p.pow(2).sum() for p in net.parameters())
    (nnf.cross_entropy(model(x), y) + 0.01 * penalty).backward()
    optimizer.step()
    assert optimizer.steps == 1
    assert features.h.grad_fn is not None
