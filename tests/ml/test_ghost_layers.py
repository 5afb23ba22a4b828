"""Ghost clipping beyond nn.Linear: convolutions, embeddings, normalisation, attention.

Each layer type's per-example squared norms and clipped sums (float64, exact sums of
squares) are compared with the per-example ``torch.func`` path; then the brute-force
sensitivity of the clipped sum (remove each example in turn; no noise) is measured on
the ghost path through ``make_private``, in both APIs.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial

import pytest

torch = pytest.importorskip("torch")

from brute_force import sensitivity, step_sum, zero_noise_private  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as nnf  # noqa: E402

from gaussdp.ml import per_example_gradients  # noqa: E402
from gaussdp.ml._ghost import ghost_clipped_sums, ghost_layers  # noqa: E402
from gaussdp.ml.dpsgd import _factors_from_squared  # noqa: E402

CLIP = 1.0


class Tokens(nn.Module):
    """Embedding (with a padding row) → Linear on [B, T, d] → mean over T → Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 5, padding_idx=0)
        self.proj = nn.Linear(5, 6)
        self.head = nn.Linear(6, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.proj(self.embed(ids))).mean(1))


class Attention(nn.Module):
    """Embedding → multi-head attention (padding mask, optional causal mask) → Linear."""

    def __init__(self, batch_first: bool, weights: bool = False) -> None:
        super().__init__()
        self.batch_first, self.weights = batch_first, weights
        self.embed = nn.Embedding(7, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=batch_first, kdim=8, vdim=8)
        self.head = nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        # Every example attends to something (position 0); written without an indexed
        # assignment, which torch.fx cannot trace (the independence proof needs a trace).
        pad = (ids == 0) & (torch.arange(ids.shape[1], device=ids.device) > 0)
        if not self.batch_first:
            h = h.transpose(0, 1)
        out, w = self.attn(h, h, h, key_padding_mask=pad, need_weights=self.weights)
        if not self.batch_first:
            out = out.transpose(0, 1)
        extra = w.sum((1, 2))[:, None] if self.weights else 0.0
        return self.head(out.mean(1)) + extra


class Encoder(nn.Module):
    """Embedding → one transformer encoder layer (no dropout) → Linear: a small transformer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 8)
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(self.embed(ids)).mean(1))


def _conv1d() -> nn.Module:
    return nn.Sequential(
        nn.Conv1d(3, 4, 3, stride=2, padding=1, dilation=1),
        nn.ReLU(),
        nn.Conv1d(4, 4, 2, groups=2, padding="valid"),
        nn.Flatten(),
        nn.Linear(4 * 3, 3),
    )


def _conv2d() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1, stride=(1, 2)),
        nn.GroupNorm(2, 4),
        nn.ReLU(),
        nn.Conv2d(4, 4, 2, groups=2, dilation=2, bias=False),
        nn.Flatten(),
        nn.LayerNorm(8),
        nn.Linear(8, 3),
    )


def _seq_layernorm() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), nn.Flatten(), nn.Linear(18, 3))


Inputs = Callable[[torch.Generator, int], torch.Tensor]
MODELS: dict[str, tuple[Callable[[], nn.Module], Inputs]] = {
    "conv1d": (_conv1d, lambda g, n: torch.randn(n, 3, 7, generator=g)),
    "conv2d+groupnorm+layernorm": (_conv2d, lambda g, n: torch.randn(n, 2, 4, 6, generator=g)),
    "linear-sequence+layernorm": (_seq_layernorm, lambda g, n: torch.randn(n, 3, 4, generator=g)),
    "embedding": (Tokens, lambda g, n: torch.randint(0, 7, (n, 5), generator=g)),
    "attention": (lambda: Attention(True), lambda g, n: torch.randint(0, 7, (n, 5), generator=g)),
    "attention-seq-first-weights": (
        lambda: Attention(False, weights=True),
        lambda g, n: torch.randint(0, 7, (n, 5), generator=g),
    ),
    "transformer": (Encoder, lambda g, n: torch.randint(0, 7, (n, 5), generator=g)),
}


def _data(name: str, n: int = 10, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = MODELS[name][1](gen, n)
    if x.is_floating_point():
        x = 3 * x
    return x, torch.randint(0, 3, (n,), generator=gen)


def _exact_squares(block: torch.Tensor) -> torch.Tensor:
    return block.reshape(block.shape[0], -1).to(torch.float64).pow(2).sum(1)


def _exact_bounds(blocks: list[torch.Tensor]) -> list[torch.Tensor]:
    return [_exact_squares(block) for block in blocks]


@pytest.mark.parametrize("clip", [float("inf"), 0.3])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_ghost_norms_and_sums_equal_the_per_example_path(name: str, clip: float) -> None:
    torch.manual_seed(1)
    net = MODELS[name][0]().double()
    layers = ghost_layers(net)
    assert layers is not None
    x, y = _data(name)
    if x.is_floating_point():
        x = x.double()
    factors = partial(_factors_from_squared, clip=clip)
    result = ghost_clipped_sums(net, layers, nnf.cross_entropy, x, y, _exact_bounds, factors)
    assert result is not None, "the batch should take the ghost path"
    sums, losses, squared, _ = result
    grads, ref_losses = per_example_gradients(net, nnf.cross_entropy, x, y)
    ref_squared = sum(_exact_squares(g) for g in grads.values())
    torch.testing.assert_close(losses, ref_losses, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(squared, ref_squared, rtol=1e-10, atol=1e-14)
    ref_factors = _factors_from_squared(ref_squared, clip)
    for pname, param in net.named_parameters():
        expected = torch.einsum("b,b...->...", ref_factors, grads[pname])
        torch.testing.assert_close(sums[id(param)], expected, rtol=1e-10, atol=1e-12)


def _clipped_sum_fn(name: str, api: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    torch.manual_seed(0)
    net = MODELS[name][0]()
    x, y = _data(name)
    model, optimizer, _ = zero_noise_private(net, x, y, "ghost", CLIP)
    return step_sum(net, model, optimizer, api)


@pytest.mark.parametrize("api", ["backward", "idiom"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_ghost_path_keeps_sensitivity_c(name: str, api: str) -> None:
    clipped_sum = _clipped_sum_fn(name, api)
    x, y = _data(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to torch.func: a warning would say so
        worst = sensitivity(clipped_sum, x, y)
    assert 0.5 * CLIP < worst <= CLIP * (1 + 1e-6)


def test_uncovered_configurations_take_the_per_example_path() -> None:
    torch.manual_seed(0)
    x = torch.randint(0, 7, (6, 5))
    y = torch.randint(0, 3, (6,))
    cases = [
        nn.Sequential(nn.Embedding(7, 4, scale_grad_by_freq=True), nn.Flatten(), nn.Linear(20, 3)),
        nn.Sequential(
            nn.Embedding(7, 4), nn.Conv1d(5, 3, 3, padding="same"), nn.Flatten(), nn.Linear(12, 3)
        ),
    ]
    for net in cases:
        layers = ghost_layers(net)
        assert layers is not None
        result = ghost_clipped_sums(
            net, layers, nnf.cross_entropy, x, y, _exact_bounds, lambda s: s * 0 + 1
        )
        assert result is None


def test_attention_dropout_in_training_takes_the_per_example_path() -> None:
    net = Attention(True)
    net.attn.dropout = 0.5
    layers = ghost_layers(net)
    assert layers is not None
    x, y = _data("attention")
    assert (
        ghost_clipped_sums(net, layers, nnf.cross_entropy, x, y, _exact_bounds, lambda s: s * 0 + 1)
        is None
    )


def test_layers_outside_the_list_leave_ghost_clipping_off() -> None:
    assert ghost_layers(nn.Sequential(nn.Conv3d(1, 2, 2), nn.Flatten(), nn.Linear(2, 1))) is None
    frozen = nn.Sequential(nn.Conv3d(1, 2, 2), nn.Flatten(), nn.Linear(2, 1))
    frozen[0].requires_grad_(False)
    assert ghost_layers(frozen) is not None
    # The projections of attention belong to it: listed once, as the attention module.
    names = [n for n, _ in ghost_layers(Encoder()) or []]
    assert "layer.self_attn" in names
    assert "layer.self_attn.out_proj" not in names
