"""Views of a batch tensor that move another dimension first are refused (gaussdp.ml._batches).

rev28-ml #2: a time-major model fed ``x.transpose(0, 1)`` had each clipped "example"
hold one time step of every sequence, so one sequence moved every clipped row
(2.25·C at T = 6, B = 8). The refusal must not depend on the Poisson batch size.
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from gaussdp.ml import make_private  # noqa: E402
from gaussdp.ml._batches import _rows_kept  # noqa: E402
from gaussdp.random import ChaCha20Random  # noqa: E402

T, E = 4, 3


class Tagger(nn.Module):
    """A tag per token from a time-major encoder layer (``batch_first=False``)."""

    def __init__(self, inside: bool) -> None:
        super().__init__()
        self.inside = inside  # transpose inside forward (right) or take [T, B, E] (wrong)
        self.proj = nn.Linear(E, 8)
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
        self.head = nn.Linear(8, 2)

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        if self.inside:  # [B, T, E] in, [B, T, 2] out
            return self.head(self.layer(self.proj(seq).transpose(0, 1))).transpose(0, 1)
        return self.head(self.layer(self.proj(seq)))  # [T, B, E] in, [T, B, 2] out


def _data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = 0.1 * torch.randn(n, T, E, generator=gen)
    x[0] *= 1000  # one outlying sequence
    return x, torch.randint(0, 2, (n, T), generator=gen)


def _private(x: torch.Tensor, y: torch.Tensor, inside: bool):  # type: ignore[no-untyped-def]
    torch.manual_seed(1)
    net = Tagger(inside)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # noise_multiplier=0: a measurement, not private
        made = make_private(
            net,
            torch.optim.SGD(net.parameters(), lr=0.0),
            DataLoader(TensorDataset(x, y), batch_size=len(x)),  # q = 1
            loss_reduction="sum",
            noise_multiplier=0.0,
            max_grad_norm=1.0,
            delta=1e-6,
            rng=ChaCha20Random(0),
            grad_sample_mode="functorch",  # torch.func: the layer is not ghost-proven here
        )
    return net, made


def _clipped_sum(x: torch.Tensor, y: torch.Tensor, inside: bool) -> torch.Tensor:
    net, (model, optimizer, loader) = _private(x, y, inside)
    xb, yb = next(iter(loader))
    optimizer.zero_grad()
    if inside:
        logits, labels = model(xb), yb
    else:
        logits, labels = model(xb.transpose(0, 1)), yb.T
    nnf.cross_entropy(logits.reshape(-1, 2), labels.reshape(-1), reduction="sum").backward()
    optimizer.step()
    grads = [p.grad.reshape(-1).double() for p in net.parameters()]
    return torch.cat(grads) * optimizer.expected_batch_size


@pytest.mark.parametrize("batch", [0, 1, 2, 8])
def test_time_major_view_refused_at_every_batch_size(batch: int) -> None:
    """The reviewer's reproducer: refused before anything is drawn, whatever B (also B ≥ T)."""
    x, y = _data(max(batch, 1))
    _, (model, optimizer, loader) = _private(x, y, inside=False)
    xb, yb = next(iter(loader))
    xb, yb = xb[:batch], yb[:batch]  # views of the batch: micro-batches of B rows
    optimizer.zero_grad()
    ahead = len(optimizer._engine.masks._ahead)
    with pytest.raises(ValueError, match="examples along the first dimension"):
        model(xb.transpose(0, 1))
    with pytest.raises(ValueError, match="examples along the first dimension"):
        model.backward(xb.transpose(0, 1), yb)
    with pytest.raises(ValueError, match="examples along the first dimension"):
        model.backward(xb, yb.T)  # per-token targets time-major
    assert len(optimizer._engine.masks._ahead) == ahead  # no mask state drawn
    assert optimizer.steps == 0
    assert not optimizer._engine.held
    assert not optimizer._engine.records


def test_transposed_inside_forward_keeps_the_bound() -> None:
    """The documented way (examples first, transposed inside forward): sensitivity ≤ C."""
    x, y = _data(6)
    full = _clipped_sum(x, y, inside=True)
    worst = max(
        float((full - _clipped_sum(x[torch.arange(6) != i], y[torch.arange(6) != i], True)).norm())
        for i in range(6)
    )
    assert worst <= 1.0 + 1e-6


@pytest.mark.parametrize("batch", [0, 1, 2, 5, 8])
def test_views_that_keep_the_examples_pass(batch: int) -> None:
    """Slices, every other example, a time step, flattening, channels: accepted at every B."""
    x = torch.randn(batch, T, E)
    for view in (
        x[: batch // 2],
        x[::2],
        x[1::3],
        x[:, 0],
        x[:, -1],
        x.flatten(1),
        x.unsqueeze(1),
        x.permute(0, 2, 1),
        x[:, :, 1:],
    ):
        assert _rows_kept(view, x), (tuple(view.shape), view.stride())


@pytest.mark.parametrize("batch", [0, 2, 5, 8])
def test_views_that_mix_examples_fail(batch: int) -> None:
    """Time first, time merged into the rows, one leading row of everything: refused."""
    x = torch.randn(batch, T, E)
    for view in (x.transpose(0, 1), x.reshape(-1, E), x[None], x.permute(1, 0, 2)):
        assert not _rows_kept(view, x), (tuple(view.shape), view.stride())
    flat = torch.randn(batch, E)
    assert not _rows_kept(flat.T, flat)
    assert not _rows_kept(flat[:1].expand(batch, E), flat) or batch <= 1


def _time_major_collate(items: list[tuple[torch.Tensor, torch.Tensor]]) -> object:
    """Stacked time-major, handed out batch-first: views of the stacks, in a dict and tuple."""
    xs = torch.stack([x for x, _ in items], 1)  # [T, B, E]
    ys = torch.stack([y for _, y in items], 1)
    return {"x": xs.transpose(0, 1)}, (ys.transpose(0, 1),)


def test_a_collate_fn_returning_views_is_checked_like_the_default() -> None:
    # rev29-ml #4: the view was tagged, so the user's x.transpose(0, 1) of it had the
    # untagged stack as its base and was not checked (accepted at 2.89·C).
    x, y = _data(8)
    net = Tagger(inside=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, optimizer, loader = make_private(
            net,
            torch.optim.SGD(net.parameters(), lr=0.0),
            DataLoader(TensorDataset(x, y), batch_size=8, collate_fn=_time_major_collate),
            loss_reduction="sum",
            noise_multiplier=0.0,
            max_grad_norm=1.0,
            delta=1e-6,
            rng=ChaCha20Random(0),
            grad_sample_mode="functorch",
        )
    inputs, (yb,) = next(iter(loader))
    xb = inputs["x"]
    for t in (xb, yb):  # copies, row-major
        assert t._base is None
        assert t.is_contiguous()
    optimizer.zero_grad()
    with pytest.raises(ValueError, match="examples along the first dimension"):
        model(xb.transpose(0, 1))
    with pytest.raises(ValueError, match="examples along the first dimension"):
        model.backward(xb, yb.T)
    assert optimizer.steps == 0
    assert not optimizer._engine.held
