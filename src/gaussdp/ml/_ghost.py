r"""Ghost clipping for models whose trainable parameters all sit in ``nn.Linear`` layers.

For a linear layer z = W a + b on one example, the example's gradients are
∇_W = δ aᵀ and ∇_b = δ with δ = ∂ℓ/∂z, so ‖∇_W‖_F² = ‖a‖²‖δ‖² and the per-example
norm needs no per-example gradient (Goodfellow 2015; Lee & Kifer 2021; Li et al.
2022 "ghost clipping"). The clipped sum is then Σᵢ cᵢ δᵢ aᵢᵀ = Δᵀ diag(c) A, one
matrix product — DP-SGD at about the cost of two backward passes instead of
materialising B copies of the gradient.

Rigour. Norms are upper-bounded from float32 dot products as in
:func:`gaussdp.ml.dpsgd.clip_factors`, so every exact contribution cᵢ δᵢ aᵢᵀ has norm
≤ C(1 − 2⁻²⁰). The sums are computed in float64: whatever the order, each entry's
error is at most γ_{B+2} times the sum of the absolute terms (Higham 2002, eq. 3.5,
with one more rounding for cᵢδᵢ), so the whole error has Frobenius norm at most
γ_{B+2}·Σᵢ cᵢ‖δᵢ‖‖aᵢ‖ ≤ γ_{B+2}·B·C ≤ 2⁻²¹·C for B ≤ 2¹⁶ − 3. Between neighbouring
batches the float64 sums thus differ by at most C(1 − 2⁻²⁰) + 2·2⁻²¹·C = C, and
rounding both to the lattice adds at most √d (one unit per coordinate) — within
:meth:`gaussdp.LatticeGaussian.sensitivity_bound` = C/γ + ⌈√d⌉. A batch of 2¹⁶ − 2
examples or more is refused (with Poisson sampling at an expected batch ≤ 2¹⁴
this has probability below 10⁻¹⁰⁰⁰).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.func import vmap
from torch.nn import functional as nnf

from gaussdp.errors import invalid

__all__ = [
    "GHOST_MAX_BATCH",
    "LinearRecorder",
    "check_batch",
    "clipped_sums",
    "ghost_clipped_sums",
    "linear_only",
]

#: Largest batch for which the float64 error bound above holds.
GHOST_MAX_BATCH = 2**16 - 3

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
SquaredNorm = Callable[[torch.Tensor], torch.Tensor]
Factors = Callable[[torch.Tensor], torch.Tensor]


_CLASS_LOSSES = (nnf.cross_entropy, nnf.nll_loss)
_ELEMENTWISE_LOSSES = (
    nnf.mse_loss,
    nnf.l1_loss,
    nnf.smooth_l1_loss,
    nnf.huber_loss,
    nnf.binary_cross_entropy,
    nnf.binary_cross_entropy_with_logits,
)


def per_example_losses(
    loss_fn: LossFn, output: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """``loss_fn(output[i:i+1], targets[i:i+1])`` for every i, as a ``[B]`` tensor.

    In general each example's loss is computed on its own with ``vmap``, so that no
    example's loss (hence gradient) can depend on another's — the premise of
    per-example clipping. For torch's own mean-reduced losses, called with their
    defaults, the same values come from one batched call with ``reduction="none"``
    (averaged over each example's elements, which is what the mean of a batch of one
    is), about 0.5 ms faster per step for a batch of 256. Class-index losses take the
    batched path only for ``[B, classes]`` outputs: with extra dimensions their mean
    skips ``ignore_index`` entries, which an element mean would not.
    """
    batch = output.shape[0]
    if loss_fn in _ELEMENTWISE_LOSSES or (loss_fn in _CLASS_LOSSES and output.dim() == 2):
        unreduced: torch.Tensor = loss_fn(output, targets, reduction="none")
        if unreduced.shape[:1] == (batch,):
            return unreduced.reshape(batch, -1).mean(1)

    def one(o: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return loss_fn(o.unsqueeze(0), t.unsqueeze(0))

    losses: torch.Tensor = vmap(one)(output, targets)
    return losses


def linear_only(model: nn.Module) -> list[tuple[str, nn.Linear]] | None:
    """The model's ``nn.Linear`` layers if they hold every trainable parameter, else None."""
    layers: list[tuple[str, nn.Linear]] = []
    covered: set[int] = set()
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            layers.append((name, module))
            covered.update(id(p) for p in module.parameters(recurse=False))
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not layers or any(id(p) not in covered for p in trainable):
        return None
    return layers


LayerIO = list[tuple[torch.Tensor, torch.Tensor]]


class LinearRecorder:
    """Records each listed layer's input (detached) and output during a forward pass."""

    def __init__(self, layers: list[tuple[str, nn.Linear]]) -> None:
        self._layers = layers
        self._seen: dict[str, LayerIO] = {name: [] for name, _ in layers}
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> LinearRecorder:
        def hook(name: str) -> Callable[[nn.Module, tuple[torch.Tensor, ...], torch.Tensor], None]:
            def record(_: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
                self._seen[name].append((args[0].detach(), out))

            return record

        self._handles = [m.register_forward_hook(hook(name)) for name, m in self._layers]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()

    def io(self, batch: int) -> LayerIO | None:
        """(input, output) of each layer, or None unless each ran once on ``[batch, features]``."""
        records = [self._seen[name] for name, _ in self._layers]
        if any(len(r) != 1 or r[0][0].dim() != 2 or r[0][0].shape[0] != batch for r in records):
            return None
        return [r[0] for r in records]


def clipped_sums(
    layers: list[tuple[str, nn.Linear]],
    io: LayerIO,
    deltas: tuple[torch.Tensor | None, ...],
    squared_norm_upper: SquaredNorm,
    factors_of: Factors,
) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    """Clipped per-example gradient sums (float64) keyed by ``id(param)``, and squared norms.

    ``deltas`` are the gradients of the per-example objective with respect to each
    layer's output (None for a layer that does not reach it).
    """
    batch = io[0][0].shape[0]
    squared = torch.zeros(batch, dtype=torch.float64, device=io[0][0].device)
    parts: list[tuple[nn.Linear, torch.Tensor, torch.Tensor]] = []
    for (_, module), (act, out), delta in zip(layers, io, deltas, strict=True):
        d = torch.zeros_like(out) if delta is None else delta.detach()
        delta_sq = squared_norm_upper(d)
        if module.weight.requires_grad:
            squared += squared_norm_upper(act) * delta_sq  # ‖δ aᵀ‖_F² = ‖a‖²‖δ‖²
        if module.bias is not None and module.bias.requires_grad:
            squared += delta_sq
        parts.append((module, act, d))
    factors = factors_of(squared)
    sums: dict[int, torch.Tensor] = {}
    dropped = factors == 0  # non-finite gradients count as zero (see clip_factors)
    for module, act, d in parts:
        if bool(dropped.any()):
            act, d = act.clone(), d.clone()
            act[dropped], d[dropped] = 0, 0
        weighted = d.to(torch.float64) * factors[:, None]
        if module.weight.requires_grad:
            sums[id(module.weight)] = weighted.T @ act.to(torch.float64)  # Σᵢ cᵢ δᵢ aᵢᵀ
        if module.bias is not None and module.bias.requires_grad:
            sums[id(module.bias)] = weighted.sum(0)
    return sums, squared


def ghost_clipped_sums(
    model: nn.Module,
    layers: list[tuple[str, nn.Linear]],
    loss_fn: LossFn,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    squared_norm_upper: SquaredNorm,
    factors_of: Factors,
) -> tuple[dict[int, torch.Tensor], torch.Tensor, torch.Tensor] | None:
    """Clipped per-example gradient sums (float64) keyed by ``id(param)``, losses, squared norms.

    Returns None when the fast path does not apply to this batch (a layer's input is
    not ``[B, features]`` or a layer ran more than once); the caller then uses
    ``torch.func``. ``factors_of`` turns per-example squared-norm bounds into clip
    factors. The forward pass runs on the whole batch: the caller must check that the
    model processes examples independently (``gaussdp.ml.dpsgd`` compares the losses
    and squared norms returned here with a per-example pass).
    """
    batch = inputs.shape[0]
    check_batch(batch)
    with LinearRecorder(layers) as recorder:
        output = model(inputs)
    io = recorder.io(batch)
    if io is None:
        return None
    losses = per_example_losses(loss_fn, output, targets)
    deltas = torch.autograd.grad(losses.sum(), [out for _, out in io], allow_unused=True)
    sums, squared = clipped_sums(layers, io, deltas, squared_norm_upper, factors_of)
    return sums, losses.detach(), squared


def check_batch(batch: int) -> None:
    """Refuse a batch beyond the float64 error bound of the module notes."""
    if batch > GHOST_MAX_BATCH:
        raise ValueError(
            invalid("batch size", f"at most {GHOST_MAX_BATCH} for ghost clipping", batch)
        )
