r"""Ghost clipping: clipped per-example gradient sums from layer activations, without vmap.

Layers covered (their trainable parameters must hold every trainable parameter of the
model): ``nn.Linear``, ``nn.Conv1d``, ``nn.Conv2d``, ``nn.Embedding``, ``nn.LayerNorm``,
``nn.GroupNorm`` and ``nn.MultiheadAttention``. A forward hook records each layer's
input and output on the whole batch; one backward pass gives δ = ∂ℓ/∂output for every
example at once (the per-example losses are summed). Per layer:

- ``nn.Linear`` on ``[B, features]``: example i's gradients are ∇_W = δᵢ aᵢᵀ and
  ∇_b = δᵢ, so ‖∇_W‖_F² = ‖aᵢ‖²‖δᵢ‖² and the clipped sum is Δᵀ diag(c) A, one
  matrix product — no per-example gradient is formed (Goodfellow 2015; Lee & Kifer
  2021; Li et al. 2022, "ghost clipping").
- every other case has a per-token or per-position structure (``nn.Linear`` on
  ``[B, T, features]``, convolutions as a linear map of unfolded patches, normalisation
  layers as an elementwise affine map of the normalised input): example i's gradient
  of that layer alone, Σₜ δᵢₜ aᵢₜᵀ, is formed by one batched operation over the T
  positions (``bmm`` of the recorded tensors; for convolutions the weight gradient of
  one convolution with the batch folded into the channel groups, which keeps the
  examples apart). Bu, Mao, Xu 2022 ("mixed ghost clipping") instantiate it
  wherever that is cheaper than the T×T Gram matrices of the ghost norm, which for
  convolutions is almost always. Only one layer's per-example
  gradients are held at a time, never the whole model's, and no ``vmap`` is needed.
  A layer whose B per-example weight gradients would exceed :data:`FORM_LIMIT`
  float32 values (2²⁴, 64 MB) forms them for ⌊2²⁴/numel⌋ examples at a time (at least
  one): once for the norms, and again, after the clip factors are known, for the
  sum — twice the work of that layer's weight gradients, memory bounded by
  max(2²⁴, numel) float32 values per layer plus the float64 copy of the sum's chunk
  (max(2²², numel) values).
- ``nn.Embedding``: example i's gradient is non-zero only in the rows of its own
  tokens; those rows (repeated tokens summed within the example) are formed sparsely
  with ``index_add`` — at most B·T rows, never B copies of the table.
- ``nn.MultiheadAttention`` (whose forward calls its projections functionally, so
  hooks on them would not fire): per-example gradients of that module alone with
  ``torch.func`` (``vmap`` of ``grad`` of ⟨attn(qᵢ, kᵢ, vᵢ), δᵢ⟩), from its recorded
  inputs — the rest of the model stays batched. This is exact but not fast (a
  vmapped attention costs several times a batched one); attention written with
  ``nn.Linear`` projections and ``F.scaled_dot_product_attention`` takes the fast
  sequence-Linear formulas instead.

A layer in a configuration these formulas do not cover (a convolution with non-zero
``padding_mode`` or string padding, an embedding with ``scale_grad_by_freq``,
attention with dropout in training or a per-example 3-D ``attn_mask``, a layer run
twice) makes the batch go through the ``torch.func`` path. (An embedding with
``max_norm`` is refused by :func:`~gaussdp.ml.make_private`.)

Rigour. A per-example vector gᵢ is what is clipped and summed; its squared norm is
bounded above from float32 dot products as in :func:`gaussdp.ml.dpsgd.clip_factors`
(for ghost Linear layers, ‖aᵢ‖²‖δᵢ‖², a product of two such bounds), and its clip
factor is min(1, C/‖gᵢ‖)·:data:`GHOST_MARGIN`, GHOST_MARGIN = (1 − 2⁻²⁰)(1 − 2⁻⁹)
(exact in float64; :mod:`gaussdp.ml.dpsgd` passes it, the per-example path keeping
1 − 2⁻²⁰), so each exact contribution cᵢgᵢ has norm ≤ C·GHOST_MARGIN·(1 + 2⁻⁵⁰)
< C(1 − 2⁻⁹) (the last factor: the float64 roundings of the factor). The margin is a
constant, whatever the batch: it pays for the float error of the sums below, less
than 2⁻¹⁰·C per batch, so that between neighbouring batches the computed sums differ
by less than C(1 − 2⁻⁹) + 2·2⁻¹⁰·C = C. (A margin that depended on the batch size B
would not do: neighbours differ in B, and a factor changed by ε moves the whole sum,
B·C·ε.) Rounding both sums to the lattice adds at most √d (one unit per coordinate)
— within :meth:`gaussdp.LatticeGaussian.sensitivity_bound` = C/γ + ⌈√d⌉. Sums are
taken in lattice units (the factors include 1/γ), where C/γ ≥ 250√d
(:meth:`gaussdp.Gaussian.lattice`).

The float error of a sum, whichever of the two ways below computes it, is bounded
entry by entry by γ_n (Higham 2002: γ_n = nu/(1 − nu), u the unit roundoff) times the
sum of the absolute exact terms cᵢ|gᵢⱼ|, where n is the largest number of roundings
any term goes through; by the triangle inequality over examples (Minkowski's, over
all parameters at once) the whole error then has L2 norm at most
γ_n·Σᵢ cᵢ‖gᵢ‖ ≤ γ_n·B·C — whatever the order of the additions (any summation tree).

- Float64 (u = 2⁻⁵³; every sum but the one below): each entry is a sum of at most
  B products cᵢ·gᵢⱼ (the Linear outer products δᵢₖ aᵢⱼ with one more rounding), so
  n ≤ B + 2 and the error is at most γ_{B+2}·B·C ≤ 2⁻²¹·C for B ≤ 2¹⁶ − 3.
  (Sums over the positions t are done inside each example's gᵢ, before clipping,
  never mixed with the sum over examples: there a cancellation between positions
  could make the float error of the mixed sum larger than C.)
- Float32 (u = 2⁻²⁴), for the weight of a Linear layer on ``[B, features]`` on the
  CPU — the one product that costs as much as the layer's own backward pass — when
  :func:`float32_chunks` allows it: the examples are split into n ranges of at most k
  examples, the product Σᵢ (cᵢδᵢ)aᵢᵀ of each range is one float32 matrix product and
  the n results are added up in float32. A term cᵢδᵢₖaᵢⱼ goes through at most k + n + 1
  roundings (cᵢ to float32, cᵢ·δᵢₖ, the product with aᵢⱼ, k − 1 additions in its
  range, n − 1 across ranges), so the error is at most γ_{k+n+1}·B·C, and
  :func:`float32_chunks` allows only (k + n + 1)·B ≤ 2¹⁴ − 2⁶, hence
  γ_{k+n+1}·B < 2⁻¹⁰(1 − 2⁻⁹). The float64 sums of the other parameters have the
  smaller γ, so this bound covers the whole error. It needs IEEE single precision:
  float32 is used only while torch's float32 matrix-product settings are IEEE (not
  ``torch.set_float32_matmul_precision("medium")``, a bf16/tf32 oneDNN setting or
  ``ONEDNN_DEFAULT_FPMATH_MODE``) and only where every kept example has
  2⁻¹⁰⁰ ≤ cᵢ ≤ 2⁴⁰ and ‖aᵢ‖, cᵢ‖δᵢ‖ ≤ 2⁴⁰ (from the norm bounds): no value
  overflows, cᵢ is a normal float32, and each underflow (gradual, or flushed to
  zero, inputs included, under ``torch.set_flush_denormal``) errs by at most 2⁻¹²⁶
  times at most 2⁸⁰ — below B·√d·2⁻⁴⁴ ≤ 2⁻³⁶·C/γ in all, inside the slack of the
  bound (γ_{k+n+1}·B·C is below 2⁻¹⁰·C by more than 2⁻¹⁹·C). Otherwise (a larger
  batch, other settings or values, GPUs) float64.

Which of the two ways (float32 or float64) a batch takes depends on its size and
values, and that is allowed: each way
keeps its error within 2⁻¹⁰·C, so the sensitivity bound holds whatever the two
neighbouring batches took. The margin costs 0.2 % of the clipped signal (the noise
stays calibrated to C) — less than the lattice's 0.4 % — and makes the MLP of
``benchmarks/dpsgd.py`` (batch 256: n = 5 ranges of ≤ 52) compute its largest product
in float32, at 0.6–0.7× the CPU of the float64 product.

Several calls for one step. One step's batch may come in several calls (micro-batches:
``model.backward`` per part, or a forward and ``loss.backward()`` per part). The bound
above is kept for the step's whole sum: the calls' float64 sums (lattice units) are
added up unrounded and rounded once, when the step reads them (``_Engine.pending`` in
:mod:`gaussdp.ml.dpsgd`; a float32 product's total is kept in float32 and counts as the
float64 value it converts to exactly: no rounding is added). Rounding each call's sum on
its own would not do: with fixed-size micro-batches of a Poisson batch, removing one
example moves every later example into the call before, and every later call's rounding
may change by one unit per coordinate between the neighbours — up to (m − 1)·√d beyond
the sensitivity bound for m calls (8 calls of 2 examples in 4 dimensions: 518.6 lattice
units against a bound of 514, ``tests/ml/test_ghost_edge_cases.py``). The float error is
then bounded for the whole step, B its examples. Each call the ghost path takes has at
least one example, and adding the calls' sums (any tree over the m calls) puts a term
through at most m − 1 float64 additions more, so a float64 term goes through at most B_j
+ 2 + m − 1 ≤ B + 2 roundings: γ_{B+2}·B·C as above. Float32 is allowed only to the call
that finds no ghost sum of the step held yet (``float32`` of :func:`clipped_sums`);
every later call computes its Linear products in float64. With the first call's B₁, k
and n ((k + n + 1)·B₁ ≤ 2¹⁴ − 2⁶), its float32 terms have relative error at most (1 +
γ_{k+n+1})(1 + γ_{m−1}) − 1 (float32, then float64 γ), every other term at most γ_{B+2}
in float64, so the step's error is at most [γ_{k+n+1}·B₁ + (1 + γ_{k+n+1})·γ_{B+2}·B]·C.
In exact rationals (the float32 γ_{k+n+1}·B₁ ≤ γ_{2¹⁴−2⁶} < 0.99707·2⁻¹⁰, the float64
γ_{B+2}·B < 0.99994·2⁻²¹ for B ≤ 2¹⁶ − 3) that is below 2⁻¹⁰·C − 2.5·2⁻²⁰·C, and the
underflows' 2⁻³⁶·C/γ fit in the rest: the step's error stays within 2⁻¹⁰·C, whatever the
number of calls. Which call may use float32 depends on the order of the calls only,
never on the data. The bound needs the step's B ≤ :data:`GHOST_MAX_BATCH`:
:func:`check_batch` refuses each call above it, and the step (``_Engine.refuse_rows``)
a step whose calls stay within the limit but whose rows, all calls together, do not —
before anything is drawn or charged, the sums dropped. The step's rows are at most its
Poisson batch's (that rule comes first), so this is the event B > GHOST_MAX_BATCH,
whose probability (≤ GHOST_TAIL) the (1 + e^ε)·p added to δ below pays for.

Ghost or per-example: decided for the run, never by the batch. The per-example path
rounds each clipped contribution to the lattice and sums the integers; this path rounds
the float sum once. The two differ by Σᵢ round(xᵢ) − round(Σᵢ xᵢ), about √(B/12) units
per coordinate for random fractions and up to B/2 for equal ones — outside the bound
above, which compares two batches computed the same way. So the path must not depend
on the realised batch size B (which tells neighbours apart): a batch beyond
:data:`GHOST_MAX_BATCH` once took the per-example path while its neighbour one example
smaller took this one (neighbours 2,118.5 lattice units apart against a bound of 2,056,
``tests/ml/test_ghost_edge_cases.py``). :func:`ghost_run` decides from the public
parameters make_private sees, the sample rate q and the dataset size N: if a rigorous
Chernoff bound puts P(B > GHOST_MAX_BATCH) above :data:`GHOST_TAIL` = 10⁻¹⁰⁰ (expected
batches above 60,192 or so), every batch of the run takes the per-example path
(``grad_sample_mode="ghost"`` is refused by make_private); otherwise every batch takes
this one (the exceptions below aside), and a batch above the limit is refused
(:func:`check_batch`) before anything is captured, drawn or charged. That refusal has
probability at most p = 10⁻¹⁰⁰ per step under either neighbour, so a step is
(ε, δ + (1 + e^ε)p)-DP where the unrefused mechanism is (ε, δ)-DP: T steps add at most
T(1 + e^ε)·10⁻¹⁰⁰ to δ, which the reported δ leaves out (below its float resolution
for any δ ≥ 10⁻⁶⁵, up to 10¹⁰ steps at ε ≤ 20).

Where a batch can still take the other path (checked for this fix): a call whose
layers run in a configuration these formulas do not cover goes per-example, keyed by
the call's structure without its batch size (``_call_key`` in :mod:`gaussdp.ml.dpsgd`),
and the independence proof is keyed by that structure and by whether the batch has one
example (a batch of one rounds a single term either way, so the paths differ there
only by the margin's 2⁻⁹·C). Neither depends on the batch's values — only on the
model's code, and a ``forward`` that branches on the batch size could still switch
(not detected). ``model.backward`` without make_private's loader takes the same
run-wide decision (the engine's sample rate and dataset size), and each call is
refused above the limit. The check against the per-example path (below) switches the
run to that path when the two disagree — for a model the proof declared independent,
a data-dependent event (a float tolerance); not addressed here. Several calls for one
step (micro-batches) each go the way their structure decides; the ghost calls' sums are
rounded once for the step (above), so fixed-size micro-batches of a Poisson batch, which
shift every later example across call boundaries, keep the bound.

Independence. These formulas attribute slice i of each recorded tensor to example i;
that holds only if the model processes examples independently along the first
dimension (the batch dimension of attention with ``batch_first=False`` is the second).
:mod:`gaussdp.ml.dpsgd` proves it statically (:mod:`gaussdp.ml._independence`), runs
the proven graph on the batched path, and compares per-example losses and squared
norms with the per-example path on some calls.

Bitwise assumption. The bound between neighbouring batches above takes every other
example's exact contribution cⱼgⱼ to be the same in both, i.e. the *computed* aᵢ, δᵢ
(and per-example gradients) of an example to depend on that example alone. The
independence proof gives that in exact arithmetic; in floats a batched kernel may round
one row differently with the batch size (a ``nn.Linear`` row in a batch of 5 or 7
differs in its last bits from the same row in a batch of 300 on the CPU the project is
tested on) and with its position in the batch, which removing an example shifts (padding
the batch to a multiple of 4 or 16 rows does not remove that). Such a change of the
other examples' contributions adds to the sensitivity; a well-conditioned model keeps it to a few
lattice units, a model that amplifies rounding (features sin(10⁷·h)) does not — see
docs/ml.md, "What the float arguments assume".
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as nnf
from torch.nn.attention import SDPBackend, sdpa_kernel

from gaussdp.errors import invalid

__all__ = [
    "GHOST_LAYERS",
    "GHOST_MARGIN",
    "GHOST_MAX_BATCH",
    "GHOST_TAIL",
    "LayerRecord",
    "LayerRecorder",
    "check_batch",
    "clipped_sums",
    "float32_chunks",
    "ghost_clipped_sums",
    "ghost_layers",
    "ghost_run",
    "input_guard",
    "per_example_losses",
    "recorded_forward",
    "signature",
    "vmap_attention",
]

#: Largest batch for which the float64 error bound above holds.
GHOST_MAX_BATCH = 2**16 - 3

#: A run takes this path only if its Poisson batch exceeds GHOST_MAX_BATCH with probability
#: at most this (:func:`ghost_run`); such a batch is then refused (module notes).
GHOST_TAIL = 1e-100
# Below ln(GHOST_TAIL) = -230.2585…: the comparison errs on the side of no ghost path.
_LOG_TAIL = -230.26

#: Clip factors of this path are min(1, C/‖gᵢ‖) times this (exact) constant: the margin
#: 2⁻²⁰ of the per-example path and 2⁻⁹ more for the float error of the sums (module notes).
GHOST_MARGIN = (1.0 - 2.0**-20) * (1.0 - 2.0**-9)

# Float32 products are allowed while (k + n + 1)·B stays within this (module notes):
# then γ_{k+n+1}·B < 2⁻¹⁰(1 − 2⁻⁹), u = 2⁻²⁴.
_FLOAT32_ROUNDINGS = 2**14 - 2**6

# Clip factors and norms for which the float32 product has no overflow and negligible
# underflow (module notes).
_FLOAT32_FACTORS = (2.0**-100, 2.0**40)
_FLOAT32_NORM_SQ = 2.0**80
# Smaller weights (out × in entries) keep the float64 product: it costs less than the checks.
_FLOAT32_MIN_SIZE = 2**14

#: Float64 elements per chunk of the clipped sum of materialised per-example gradients.
_CHUNK = 2**22

#: Float32 elements of one layer's per-example weight gradients formed at once: a layer
#: whose B per-example gradients would be more (a ResNet's last convolutions at batch
#: 256: 2.4 GB) forms them for a range of examples at a time, twice (norms, then sum).
FORM_LIMIT = 2**24

#: The layer types ghost clipping covers.
GHOST_LAYERS: tuple[type[nn.Module], ...] = (
    nn.Linear,
    nn.Conv1d,
    nn.Conv2d,
    nn.Embedding,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.MultiheadAttention,
)

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
SquaredNorms = Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]
Factors = Callable[[torch.Tensor], torch.Tensor]
Layers = list[tuple[str, nn.Module]]


_CLASS_LOSSES = (nnf.cross_entropy, nnf.nll_loss)
_ELEMENTWISE_LOSSES = (
    nnf.mse_loss,
    nnf.l1_loss,
    nnf.smooth_l1_loss,
    nnf.huber_loss,
    nnf.binary_cross_entropy,
    nnf.binary_cross_entropy_with_logits,
)


def vmap_attention() -> Any:
    """A context in which ``vmap`` runs attention through batched kernels.

    ``scaled_dot_product_attention`` picks fused kernels that have no ``vmap``
    batching rule (torch then loops over the examples and warns); the math backend
    is made of operations that have one.
    """
    return sdpa_kernel(SDPBackend.MATH)


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
        if unreduced.shape == (batch,):  # one value per example: its own mean
            return unreduced
        if unreduced.shape[:1] == (batch,):
            return unreduced.reshape(batch, -1).mean(1)

    def one(o: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return loss_fn(o.unsqueeze(0), t.unsqueeze(0))

    losses: torch.Tensor = vmap(one)(output, targets)
    return losses


def _own_trainable(module: nn.Module) -> list[nn.Parameter]:
    if isinstance(module, nn.MultiheadAttention):  # its out_proj is part of it
        return [p for p in module.parameters() if p.requires_grad]
    return [p for p in module.parameters(recurse=False) if p.requires_grad]


# The parameters the formulas read, by name (``module.weight`` and so on).
_FORMULA_PARAMS = frozenset({"weight", "bias"})
_ATTENTION_PARAMS = frozenset(
    {"in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"}
    | {"in_proj_bias", "bias_k", "bias_v"}
)


def _plain(module: nn.Module, names: frozenset[str]) -> bool:
    """Whether the module's registered parameters are among ``names``, each its attribute.

    Not so under the legacy ``torch.nn.utils.weight_norm`` or ``spectral_norm``: they
    keep the type but train ``weight_g``/``weight_v`` (``weight_orig``), from which
    ``module.weight`` is computed at each call.
    """
    own = module._parameters
    return set(own) <= names and all(getattr(module, k) is v for k, v in own.items())


def ghost_layers(model: nn.Module) -> Layers | None:
    """The model's layers of :data:`GHOST_LAYERS` holding trainable parameters, or None.

    None unless those layers hold every trainable parameter. Types are matched
    exactly: a subclass may override ``forward``, which the formulas would not
    describe. The projections inside ``nn.MultiheadAttention`` belong to it (they are
    not listed on their own). A parameter held by several layers (tied weights) is
    listed with each. A layer whose registered parameters are not exactly those the
    formulas read (legacy weight or spectral normalisation) does not count either;
    ``torch.nn.utils.parametrize`` changes the type, so its layers do not count.
    """
    layers: Layers = []
    covered: set[int] = set()
    inside: list[str] = []  # attention modules, whose submodules are theirs
    for name, module in model.named_modules():
        if any(name.startswith(prefix + ".") for prefix in inside):
            continue
        if type(module) in GHOST_LAYERS:
            if isinstance(module, nn.MultiheadAttention):
                plain = _plain(module, _ATTENTION_PARAMS) and _plain(
                    module.out_proj, _FORMULA_PARAMS
                )
            else:
                plain = _plain(module, _FORMULA_PARAMS)
            if not plain:
                continue
            own = _own_trainable(module)
            if type(module) is nn.MultiheadAttention:
                inside.append(name)
            if own:
                layers.append((name, module))
                covered.update(id(p) for p in own)
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not layers or any(id(p) not in covered for p in trainable):
        return None
    return layers


@dataclass
class LayerRecord:
    """One layer's call during a batched forward pass."""

    module: nn.Module
    args: tuple[Any, ...]  # detached tensors (and other arguments) of the call
    kwargs: dict[str, Any]
    outputs: list[torch.Tensor]  # the outputs whose gradients are needed (in the graph)
    versions: list[int]  # the outputs' version counters when recorded
    deltas: list[torch.Tensor | None] = field(default_factory=list)

    @property
    def modified(self) -> bool:
        """Whether an output was modified in place after the call (e.g. ``ReLU(inplace=True)``).

        The gradient with respect to such a tensor is taken at its modified value,
        not at the layer's output.
        """
        return any(o._version != v for o, v in zip(self.outputs, self.versions, strict=True))

    @property
    def input(self) -> torch.Tensor:
        value = self.args[0] if self.args else next(iter(self.kwargs.values()))
        assert isinstance(value, torch.Tensor)
        return value


def _detach(value: Any) -> Any:
    return value.detach() if isinstance(value, torch.Tensor) else value


def _copy_out(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, tuple):
        return tuple(_copy_out(o) for o in out)
    return out


class LayerRecorder:
    """Records each listed layer's inputs (detached) and outputs during a forward pass.

    The layers named in ``copy`` pass a copy of their output on to the rest of the
    model, so that an in-place operation after them (``ReLU(inplace=True)``) leaves the
    recorded output intact (:func:`recorded_forward` fills it).
    """

    def __init__(self, layers: Layers, copy: set[str] | None = None) -> None:
        self._layers = layers
        self._copy = set() if copy is None else copy
        self._seen: dict[str, list[LayerRecord]] = {name: [] for name, _ in layers}
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> LayerRecorder:
        def hook(name: str) -> Callable[..., Any]:
            def record(
                module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
            ) -> Any:
                outs = list(out) if isinstance(out, tuple) else [out]
                tensors = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
                self._seen[name].append(
                    LayerRecord(
                        module,
                        tuple(_detach(a) for a in args),
                        {k: _detach(v) for k, v in kwargs.items()},
                        tensors,
                        [o._version for o in tensors],
                    )
                )
                return _copy_out(out) if name in self._copy else None

            return record

        self._handles = [
            m.register_forward_hook(hook(name), with_kwargs=True) for name, m in self._layers
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()

    def io(self, batch: int) -> list[LayerRecord] | None:
        """Each layer's record, or None unless each ran once in a configuration covered.

        Also None if a recorded output was modified in place after its layer's call.
        """
        records = [self._seen[name] for name, _ in self._layers]
        if any(len(r) != 1 or r[0].modified or not _covered(r[0], batch) for r in records):
            return None
        return [r[0] for r in records]

    def modified(self) -> list[str]:
        """The layers one of whose recorded outputs was modified in place after the call."""
        return [name for name, seen in self._seen.items() if any(r.modified for r in seen)]


def input_guard(inputs: Sequence[Any]) -> Callable[[], None]:
    """Copies the tensors among ``inputs``; the function returned restores them.

    For a model that modifies its inputs in place (``x.mul_(2)``,
    ``Dropout(inplace=True)`` as the first layer): each later run on the same inputs
    (a repeat, the per-example check or path) must see them as the first run did, so
    that the change is applied once. Restores only tensors modified since the copy.
    """
    saved = [(t, t._version, t.detach().clone()) for t in inputs if isinstance(t, torch.Tensor)]

    def restore() -> None:
        with torch.no_grad():
            for tensor, version, value in saved:
                if tensor._version != version:
                    tensor.detach().copy_(value)

    return restore


def recorded_forward(
    layers: Layers,
    copy: set[str],
    run: Callable[[], Any],
    batch: int,
    replay: Callable[[], AbstractContextManager[Any]],
    restore: Callable[[], None],
) -> tuple[Any, list[LayerRecord] | None]:
    """``run()`` with the layers recorded: its output and :meth:`LayerRecorder.io`.

    If an in-place operation modified a layer's recorded output (``ReLU(inplace=True)``
    after it), the layer is added to ``copy`` (kept by the caller, so later batches
    copy at once) and ``run()`` is repeated within ``replay()`` (the caller's
    generators reset to the first run's state: the same dropout masks), after
    ``restore()`` (an :func:`input_guard` of the inputs ``run()`` reads).
    """
    with LayerRecorder(layers, copy) as recorder:
        output = run()
    modified = recorder.modified()
    if modified and not copy.issuperset(modified):
        copy.update(modified)
        restore()
        with replay(), LayerRecorder(layers, copy) as recorder:
            output = run()
    return output, recorder.io(batch)


def _conv_padding(module: nn.Conv1d | nn.Conv2d) -> tuple[int, ...] | None:
    if module.padding_mode != "zeros":
        return None
    if isinstance(module.padding, str):
        return (0,) * len(module.kernel_size) if module.padding == "valid" else None
    return tuple(module.padding)


def _attention_call(record: LayerRecord) -> inspect.BoundArguments:
    bound = inspect.signature(record.module.forward).bind(*record.args, **record.kwargs)
    bound.apply_defaults()
    return bound


def _covered(record: LayerRecord, batch: int) -> bool:
    """Whether the formulas cover this call (examples along the batch dimension)."""
    module = record.module
    if not record.args and not record.kwargs:
        return False
    if isinstance(module, nn.MultiheadAttention):
        call = _attention_call(record).arguments
        dim = 0 if module.batch_first else 1
        mask = call["attn_mask"]
        padding = call["key_padding_mask"]
        return (
            not (module.training and module.dropout > 0)
            and all(
                isinstance(call[k], torch.Tensor) and call[k].dim() == 3
                for k in ("query", "key", "value")
            )
            and all(call[k].shape[dim] == batch for k in ("query", "key", "value"))
            and (mask is None or mask.dim() == 2)
            and (padding is None or padding.shape[0] == batch)
            and record.outputs[0].shape[dim] == batch
        )
    x = record.input
    if x.dim() == 0 or x.shape[0] != batch or len(record.outputs) != 1:
        return False
    if record.outputs[0].shape[0] != batch:
        return False
    if isinstance(module, nn.Conv1d | nn.Conv2d):
        return x.dim() == 2 + len(module.kernel_size) and _conv_padding(module) is not None
    if isinstance(module, nn.Embedding):
        return not module.scale_grad_by_freq  # max_norm is refused by make_private
    if isinstance(module, nn.LayerNorm):
        return x.dim() > len(module.normalized_shape)
    if isinstance(module, nn.GroupNorm):
        return x.dim() >= 2
    return x.dim() >= 2  # Linear


def signature(records: list[LayerRecord], batch: int) -> tuple[tuple[int, ...], ...]:
    """The shapes of the layers' inputs, every dimension equal to the batch size as -1.

    A batch whose signature was never checked against the per-example path is checked
    (a dimension other than the first that happens to equal the batch size would
    otherwise go unnoticed on the calls that are not checked).
    """
    shapes = []
    for record in records:
        x = record.input
        shapes.append(tuple(-1 if s == batch else s for s in x.shape))
    return tuple(shapes)


# -- the per-example parts of each layer ---------------------------------------------------
@dataclass
class _Outer:
    """A Linear layer on [B, features]: gradients δᵢaᵢᵀ (weight) and δᵢ (bias), not formed."""

    module: nn.Linear
    act: torch.Tensor
    delta: torch.Tensor


@dataclass
class _Dense:
    """A parameter's per-example gradients ``[B, *shape]``."""

    param: torch.Tensor
    grads: torch.Tensor


@dataclass
class _Rows:
    """An embedding's per-example gradients as (example, row, values) triples."""

    param: torch.Tensor
    example: torch.Tensor
    row: torch.Tensor
    values: torch.Tensor


@dataclass
class _Chunked:
    """A parameter's per-example gradients, formed for a range of examples at a time.

    ``form(start, stop)`` returns the gradients ``[stop - start, *shape]`` of examples
    start to stop − 1; at most ``step`` examples are formed at once (``step · numel ≤``
    :data:`FORM_LIMIT` where possible).
    """

    param: torch.Tensor
    batch: int
    form: Callable[[int, int], torch.Tensor]
    squared: torch.Tensor | None = None  # per-example bounds of the first pass

    @property
    def step(self) -> int:
        return max(1, FORM_LIMIT // max(1, self.param.numel()))

    def ranges(self) -> list[tuple[int, int]]:
        return [(a, min(a + self.step, self.batch)) for a in range(0, self.batch, self.step)]


Part = _Outer | _Dense | _Rows | _Chunked


def _zeros_if_none(delta: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if delta is None else delta.detach()


def _dense(parts: list[Part], param: torch.Tensor | None, grads: torch.Tensor) -> None:
    if param is not None and param.requires_grad:
        parts.append(_Dense(param, grads))


def _weight_part(
    parts: list[Part], param: torch.Tensor, batch: int, form: Callable[[int, int], torch.Tensor]
) -> None:
    """A weight's per-example gradients: formed now, or in chunks above :data:`FORM_LIMIT`."""
    if batch * param.numel() <= FORM_LIMIT:
        parts.append(_Dense(param, form(0, batch)))
    else:
        parts.append(_Chunked(param, batch, form))


def _linear_parts(module: nn.Linear, x: torch.Tensor, d: torch.Tensor) -> list[Part]:
    batch = x.shape[0]
    if x.dim() == 2:
        return [_Outer(module, x, d)]
    acts = x.reshape(batch, -1, x.shape[-1])
    deltas = d.reshape(batch, -1, d.shape[-1])
    parts: list[Part] = []
    if module.weight.requires_grad:  # Σₜ δᵢₜ aᵢₜᵀ for every example at once

        def form(start: int, stop: int) -> torch.Tensor:
            return torch.bmm(deltas[start:stop].transpose(1, 2), acts[start:stop])

        _weight_part(parts, module.weight, batch, form)
    _dense(parts, module.bias, deltas.sum(1))
    return parts


def _conv_parts(module: nn.Conv1d | nn.Conv2d, x: torch.Tensor, d: torch.Tensor) -> list[Part]:
    batch = x.shape[0]
    padding = _conv_padding(module)
    assert padding is not None
    kernel, stride, dilation = module.kernel_size, module.stride, module.dilation
    if isinstance(module, nn.Conv1d):  # as a 2-D convolution of height 1
        x, d = x.unsqueeze(2), d.unsqueeze(2)
        kernel, stride = (1, *kernel), (1, *stride)
        dilation, padding = (1, *dilation), (0, *padding)
    parts: list[Part] = []
    if module.weight.requires_grad:
        # Each example's weight gradient at once: the examples folded into the channels,
        # one convolution group per (example, group) — the weight gradient of a
        # grouped convolution keeps the groups apart.
        out_channels, in_per_group = module.weight.shape[0], module.weight.shape[1]

        def form(start: int, stop: int) -> torch.Tensor:
            n = stop - start
            xs, ds = x[start:stop], d[start:stop]
            _, weight, _ = torch.ops.aten.convolution_backward(
                ds.reshape(1, n * ds.shape[1], *ds.shape[2:]),
                xs.reshape(1, n * xs.shape[1], *xs.shape[2:]),
                xs.new_empty((n * out_channels, in_per_group, *kernel)),
                None,
                list(stride),
                list(padding),
                list(dilation),
                False,
                [0, 0],
                n * module.groups,
                [False, True, False],
            )
            grads: torch.Tensor = weight.reshape(n, *module.weight.shape)
            return grads

        _weight_part(parts, module.weight, batch, form)
    _dense(parts, module.bias, d.sum((2, 3)))
    return parts


def _norm_parts(
    module: nn.LayerNorm | nn.GroupNorm, x: torch.Tensor, d: torch.Tensor
) -> list[Part]:
    if isinstance(module, nn.LayerNorm):
        normalised = nnf.layer_norm(x, module.normalized_shape, None, None, module.eps)
        dims = tuple(range(1, x.dim() - len(module.normalized_shape)))
    else:
        normalised = nnf.group_norm(x, module.num_groups, None, None, module.eps)
        dims = tuple(range(2, x.dim()))
    parts: list[Part] = []
    if module.weight is not None and module.weight.requires_grad:
        weighted = d * normalised
        _dense(parts, module.weight, weighted.sum(dims) if dims else weighted)
    _dense(parts, module.bias, d.sum(dims) if dims else d)
    return parts


def _embedding_parts(module: nn.Embedding, ids: torch.Tensor, d: torch.Tensor) -> list[Part]:
    batch, vocab = ids.shape[0], module.num_embeddings
    flat_ids = ids.reshape(batch, -1)
    deltas = d.reshape(-1, d.shape[-1])
    example = torch.arange(batch, device=ids.device).repeat_interleave(flat_ids.shape[1])
    keys = example * vocab + flat_ids.reshape(-1)
    if module.padding_idx is not None:  # that row receives no gradient
        keep = flat_ids.reshape(-1) != module.padding_idx
        keys, deltas = keys[keep], deltas[keep]
    unique, inverse = torch.unique(keys, return_inverse=True)
    rows = deltas.new_zeros((unique.shape[0], deltas.shape[1])).index_add_(0, inverse, deltas)
    return [_Rows(module.weight, unique // vocab, unique % vocab, rows)]


def _attention_parts(record: LayerRecord) -> list[Part]:
    module = record.module
    assert isinstance(module, nn.MultiheadAttention)
    call = _attention_call(record).arguments
    dim = 0 if module.batch_first else 1
    names = [n for n, p in module.named_parameters() if p.requires_grad]
    params = {n: p.detach() for n, p in module.named_parameters() if p.requires_grad}
    used = [(i, delta) for i, delta in enumerate(record.deltas) if delta is not None]
    padding = call["key_padding_mask"]
    options = {
        k: call[k] for k in ("need_weights", "attn_mask", "average_attn_weights", "is_causal")
    }

    def one(
        p: dict[str, torch.Tensor],
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        cots: tuple[torch.Tensor, ...],
    ) -> torch.Tensor:
        outs = functional_call(
            module,
            p,
            (q.unsqueeze(dim), k.unsqueeze(dim), v.unsqueeze(dim)),
            {"key_padding_mask": None if mask is None else mask.unsqueeze(0), **options},
        )
        outs = [o for o in outs if o is not None]
        terms = [
            (outs[i].squeeze(dim if i == 0 else 0) * c).sum()
            for (i, _), c in zip(used, cots, strict=True)
        ]
        return torch.stack(terms).sum() if terms else outs[0].new_zeros(())

    cot_dims = tuple(dim if i == 0 else 0 for i, _ in used)
    per_example = vmap(
        grad(one), in_dims=(None, dim, dim, dim, None if padding is None else 0, cot_dims)
    )
    with vmap_attention():
        grads = per_example(
            params, call["query"], call["key"], call["value"], padding, tuple(c for _, c in used)
        )
    lookup = dict(module.named_parameters())
    return [_Dense(lookup[n], grads[n]) for n in names]


def _parts(record: LayerRecord) -> list[Part]:
    module = record.module
    if isinstance(module, nn.MultiheadAttention):
        return _attention_parts(record)
    x, d = record.input, _zeros_if_none(record.deltas[0], record.outputs[0])
    if isinstance(module, nn.Conv1d | nn.Conv2d):
        return _conv_parts(module, x, d)
    if isinstance(module, nn.Embedding):
        return _embedding_parts(module, x, d)
    if isinstance(module, nn.LayerNorm | nn.GroupNorm):
        return _norm_parts(module, x, d)
    assert isinstance(module, nn.Linear)
    return _linear_parts(module, x, d)


def _params_of(part: Part) -> list[torch.Tensor]:
    if isinstance(part, _Outer):
        weight, bias = part.module.weight, part.module.bias
        return [p for p in (weight, bias) if p is not None and p.requires_grad]
    return [part.param]


def _slicer(part: Part, param: torch.Tensor) -> Callable[[int, int], torch.Tensor]:
    """``form(start, stop)``: the part's gradients for ``param`` of examples start to stop − 1."""
    if isinstance(part, _Chunked):
        return part.form
    if isinstance(part, _Dense):
        grads = part.grads
        return lambda a, b: grads[a:b]
    if isinstance(part, _Outer):
        act, delta = part.act, part.delta
        if param is part.module.weight:
            return lambda a, b: delta[a:b, :, None] * act[a:b, None, :]  # δᵢaᵢᵀ
        return lambda a, b: delta[a:b]
    rows = part

    def form(a: int, b: int) -> torch.Tensor:
        keep = (rows.example >= a) & (rows.example < b)
        out = rows.values.new_zeros((b - a, *param.shape))
        index = (rows.example[keep] - a, rows.row[keep])
        return out.index_put_(index, rows.values[keep], accumulate=True)

    return form


def _merged_rows(param: torch.Tensor, rows: list[_Rows]) -> _Rows:
    """Embedding rows of several uses, summed per example and row."""
    vocab = param.shape[0]
    keys = torch.cat([p.example * vocab + p.row for p in rows])
    values = torch.cat([p.values for p in rows])
    unique, inverse = torch.unique(keys, return_inverse=True)
    summed = values.new_zeros((unique.shape[0], values.shape[1])).index_add_(0, inverse, values)
    return _Rows(param, unique // vocab, unique % vocab, summed)


def _one_per_param(parts: list[Part], batch: int) -> list[Part]:
    """Parts with each parameter in exactly one: the uses of a tied parameter merged.

    A parameter held by several layers (an output Linear sharing an Embedding's
    weight) has as example i's gradient the sum of its uses' gradients; that sum
    (computed in the gradients' dtype) is the vector whose norm is bounded and which
    is clipped, as for any other parameter. The sums are formed for a range of
    examples at a time above :data:`FORM_LIMIT`, as for any weight.
    """
    uses: dict[int, int] = {}
    for part in parts:
        for param in _params_of(part):
            uses[id(param)] = uses.get(id(param), 0) + 1
    if all(count == 1 for count in uses.values()):
        return parts
    single: list[Part] = []
    tied: dict[int, tuple[torch.Tensor, list[Part]]] = {}
    for part in parts:
        params = _params_of(part)
        if all(uses[id(p)] == 1 for p in params):
            single.append(part)
            continue
        for param in params:
            if uses[id(param)] == 1:
                _weight_part(single, param, batch, _slicer(part, param))
            else:
                tied.setdefault(id(param), (param, []))[1].append(part)
    merged: list[Part] = []
    for param, group in tied.values():
        rows = [p for p in group if isinstance(p, _Rows)]
        if len(rows) == len(group):
            merged.append(_merged_rows(param, rows))
            continue
        forms = [_slicer(p, param) for p in group]

        def form(
            a: int, b: int, forms: list[Callable[[int, int], torch.Tensor]] = forms
        ) -> torch.Tensor:
            total = forms[0](a, b).clone()
            for more in forms[1:]:
                total += more(a, b)
            return total

        _weight_part(merged, param, batch, form)
    return single + merged


def _drop(t: torch.Tensor, dropped: torch.Tensor | None) -> torch.Tensor:
    """Rows of dropped examples (factor 0, possibly NaN) zeroed, so NaN cannot spread.

    ``None``: no example is dropped (checked once by the caller).
    """
    if dropped is None or not bool(dropped.any()):
        return t
    t = t.clone()
    t[dropped] = 0
    return t


def clipped_sums(
    records: list[LayerRecord],
    deltas: tuple[torch.Tensor | None, ...],
    batch: int,
    squared_norms_upper: SquaredNorms,
    factors_of: Factors,
    *,
    float32: bool = True,
) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    """Clipped per-example gradient sums keyed by ``id(param)``, and squared norms.

    ``deltas`` are the gradients of the per-example objective with respect to every
    recorded output, layer after layer (None for an output that does not reach it);
    ``batch`` is the number of examples. ``factors_of`` turns per-example squared-norm
    bounds into clip factors, min(1, C/‖gᵢ‖)·:data:`GHOST_MARGIN` for the sensitivity
    bound of the module notes. ``float32=False`` computes every sum in float64 (a
    step's later calls, module notes "Several calls for one step"). Sums are float64,
    except a Linear weight's float32 product (:func:`_outer_sum`), whose float32 total
    stands for the float64 sum of the same values.
    """
    position = 0
    for record in records:
        record.deltas = list(deltas[position : position + len(record.outputs)])
        position += len(record.outputs)
    device = records[0].outputs[0].device
    squared = torch.zeros(batch, dtype=torch.float64, device=device)
    parts = _one_per_param([part for record in records for part in _parts(record)], batch)
    # The bounds of every block formed at once are taken together (one call), then
    # added part by part in order; chunked parameters are formed and bounded in turn.
    blocks: list[torch.Tensor] = []
    for part in parts:
        if isinstance(part, _Outer):
            blocks.append(part.delta)
            if part.module.weight.requires_grad:
                blocks.append(part.act)
        elif isinstance(part, _Dense):
            blocks.append(part.grads)
        elif isinstance(part, _Rows):
            blocks.append(part.values)
    bounds = iter(squared_norms_upper(blocks))
    outer_bounds: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # ‖δᵢ‖², ‖aᵢ‖² bounds
    for part in parts:
        if isinstance(part, _Outer):
            delta_sq = next(bounds)
            if part.module.weight.requires_grad:
                act_sq = next(bounds)
                outer_bounds[id(part)] = delta_sq, act_sq
                squared += act_sq * delta_sq  # ‖δ aᵀ‖_F² = ‖a‖²‖δ‖²
            if part.module.bias is not None and part.module.bias.requires_grad:
                squared += delta_sq
        elif isinstance(part, _Dense):
            squared += next(bounds)
        elif isinstance(part, _Chunked):
            part.squared = torch.cat(
                [squared_norms_upper([part.form(a, b)])[0] for a, b in part.ranges()]
            )
            squared += part.squared
        else:
            # Per-row bounds added per example in float64 (relative error below 2⁻³⁰ for
            # fewer than 2²² rows, covered by the factor).
            squared.index_add_(0, part.example, next(bounds) * (1 + 2.0**-30))
    factors = factors_of(squared)
    dropped = factors == 0  # non-finite gradients count as zero (see clip_factors)
    any_dropped = dropped if bool(dropped.any()) else None
    sums: dict[int, torch.Tensor] = {}
    for part in parts:
        if isinstance(part, _Outer):
            act, d = _drop(part.act, any_dropped), _drop(part.delta, any_dropped)
            if part.module.weight.requires_grad:
                sums[id(part.module.weight)] = _outer_sum(
                    d, act, factors, *outer_bounds[id(part)], float32=float32
                )  # Σᵢ cᵢδᵢaᵢᵀ
            if part.module.bias is not None and part.module.bias.requires_grad:
                # Σᵢ cᵢδᵢ in float64, one product (any order: the bound of the notes)
                sums[id(part.module.bias)] = factors @ d.to(torch.float64)
        elif isinstance(part, _Dense):
            total = torch.zeros(part.param.numel(), dtype=torch.float64, device=device)
            _add_weighted(total, _drop(part.grads, any_dropped), factors)
            sums[id(part.param)] = total.reshape(part.param.shape)
        elif isinstance(part, _Chunked):
            # The same examples' gradients formed again. Should a kernel not give the
            # same values twice (non-deterministic GPU kernels), an example whose new
            # bound exceeds the first pass's has this block scaled down to that bound,
            # so its whole contribution still has norm ≤ cᵢ·(its bound) ≤ C(1 − 2⁻²⁰).
            assert part.squared is not None
            total = torch.zeros(part.param.numel(), dtype=torch.float64, device=device)
            for a, b in part.ranges():
                # A row that is not finite the second time counts as zero (as everywhere);
                # ``~(again <= first)`` also scales down a NaN bound (to zero, with the row).
                grads = _drop(part.form(a, b), dropped[a:b])
                bad = ~torch.isfinite(grads.reshape(grads.shape[0], -1)).all(1)
                grads = _drop(grads, bad)
                first, again = part.squared[a:b], squared_norms_upper([grads])[0]
                shrink = torch.where(
                    ~(again <= first), torch.sqrt(first / again) * (1 - 2.0**-40), 1.0
                )
                _add_weighted(total, grads, torch.where(bad, 0.0, factors[a:b] * shrink))
            sums[id(part.param)] = total.reshape(part.param.shape)
        else:
            keep = ~dropped[part.example]
            scaled = part.values[keep].to(torch.float64) * factors[part.example[keep], None]
            total = torch.zeros(part.param.shape, dtype=torch.float64, device=device)
            sums[id(part.param)] = total.index_add_(0, part.row[keep], scaled)
    return sums, squared


@functools.lru_cache(maxsize=1024)
def float32_chunks(batch: int) -> int | None:
    """The number n of example ranges of a float32 Linear product for a batch of B, or None.

    The least n ≥ 1 with (⌈B/n⌉ + n + 1)·B within the float32 budget of the module
    notes (fewest products: fastest), or None where no n qualifies (B above 400 or so,
    as ⌈B/n⌉ + n ≥ 2√B): the product is then computed in float64.
    """
    if batch < 1 or (2 * math.isqrt(batch) + 1) * batch > _FLOAT32_ROUNDINGS:
        return None
    for n in range(1, batch + 1):
        k = -(-batch // n)
        if (k + n + 1) * batch <= _FLOAT32_ROUNDINGS:
            return n
        if n > k:  # k + n only grows from here
            break
    return None


def _ieee_float32_products() -> bool:
    """Whether torch computes float32 matrix products on the CPU in IEEE single precision.

    Not under ``torch.set_float32_matmul_precision("medium")`` or ``"high"``, nor a
    ``bf16``/``tf32`` setting of ``torch.backends.fp32_precision`` or of oneDNN's, nor
    oneDNN's ``ONEDNN_DEFAULT_FPMATH_MODE`` (``DNNL_…``) other than ``STRICT``: those
    allow lower-precision products, outside the float32 bound (module notes).
    """
    for variable in ("ONEDNN_DEFAULT_FPMATH_MODE", "DNNL_DEFAULT_FPMATH_MODE"):
        if os.environ.get(variable, "STRICT").upper() != "STRICT":
            return False
    backends = torch.backends
    owners = (backends, backends.mkldnn, getattr(backends.mkldnn, "matmul", None))
    # None where this torch has no such setting (then only the legacy one counts)
    settings = [getattr(owner, "fp32_precision", None) for owner in owners]
    known = [setting for setting in settings if setting is not None]
    if any(setting not in ("none", "ieee") for setting in known):
        return False
    try:
        return torch.get_float32_matmul_precision() == "highest"
    except RuntimeError:  # raised where the legacy and the new settings were both used
        return bool(known)


def _outer_sum(
    delta: torch.Tensor,
    act: torch.Tensor,
    factors: torch.Tensor,
    delta_sq: torch.Tensor,
    act_sq: torch.Tensor,
    *,
    float32: bool = True,
) -> torch.Tensor:
    """Σᵢ cᵢδᵢaᵢᵀ of a Linear layer on ``[B, features]``: float32 where allowed, else float64.

    ``delta_sq`` and ``act_sq`` are the per-example bounds on ‖δᵢ‖² and ‖aᵢ‖²; rows with
    factor 0 are zero in ``delta`` and ``act``. In float32 (module notes: ``float32``
    true, IEEE products on the CPU, :func:`float32_chunks`, factors and norms in range;
    weights of at least 2¹⁴ entries) the examples are split into n ranges, one product
    each, summed in float32, and the float32 total is returned (its values, converted
    exactly, are the float64 sum's; no float64 copy is made here); otherwise one float64
    product.
    """
    batch, out_features, in_features = act.shape[0], delta.shape[1], act.shape[1]
    chunks = (
        float32_chunks(batch)
        if float32
        and act.device.type == "cpu"
        and act.dtype == delta.dtype == torch.float32
        and out_features * in_features >= _FLOAT32_MIN_SIZE
        else None
    )
    if (
        chunks is not None
        and _ieee_float32_products()
        and _float32_range(factors, delta_sq, act_sq)
    ):
        weighted = delta * factors.to(torch.float32)[:, None]
        ends = [batch * j // chunks for j in range(chunks + 1)]
        total = weighted[: ends[1]].T @ act[: ends[1]]
        part = torch.empty_like(total) if chunks > 1 else total
        for a, b in itertools.pairwise(ends[1:]):
            # each range's product on its own, then added: one more rounding per range
            torch.mm(weighted[a:b].T, act[a:b], out=part)
            total += part
        return total  # float32: converted exactly to float64 where it is added or rounded
    weighted64 = delta.to(torch.float64) * factors[:, None]
    return weighted64.T @ act.to(torch.float64)


def _float32_range(factors: torch.Tensor, delta_sq: torch.Tensor, act_sq: torch.Tensor) -> bool:
    """Whether every kept example has 2⁻¹⁰⁰ ≤ cᵢ ≤ 2⁴⁰ and ‖aᵢ‖², cᵢ²‖δᵢ‖² ≤ 2⁸⁰ (notes).

    Dropped examples (factor 0) do not count; a NaN bound fails. In numpy: a dozen
    torch operations on ``[B]`` vectors cost about 0.1 ms a step.
    """
    c = factors.detach().numpy()
    kept = c != 0
    if not kept.any():
        return True
    c = c[kept]
    low, high = _FLOAT32_FACTORS
    return bool(
        c.min() >= low
        and c.max() <= high
        and act_sq.detach().numpy()[kept].max() <= _FLOAT32_NORM_SQ
        and (c * c * delta_sq.detach().numpy()[kept]).max() <= _FLOAT32_NORM_SQ
    )


def _add_weighted(total: torch.Tensor, grads: torch.Tensor, factors: torch.Tensor) -> None:
    """``total += Σᵢ factorsᵢ·gradsᵢ`` in float64, a few examples at a time.

    In chunks of examples, so that the float64 copy stays small: any order of the
    terms of an entry has the same error bound (module notes).
    """
    flat = grads.reshape(grads.shape[0], -1)
    per_chunk = max(1, _CHUNK // max(1, flat.shape[1]))
    for start in range(0, flat.shape[0], per_chunk):
        chunk = flat[start : start + per_chunk].to(torch.float64)
        total += factors[start : start + per_chunk] @ chunk


def ghost_clipped_sums(
    model: Callable[[torch.Tensor], Any],
    layers: Layers,
    loss_fn: LossFn,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    squared_norms_upper: SquaredNorms,
    factors_of: Factors,
    *,
    copy: set[str] | None = None,
    replay: Callable[[], AbstractContextManager[Any]] = nullcontext,
    restore: Callable[[], None] | None = None,
    float32: bool = True,
) -> tuple[dict[int, torch.Tensor], torch.Tensor, torch.Tensor, list[LayerRecord]] | None:
    """Clipped per-example gradient sums (float64) keyed by ``id(param)``, losses, squared norms.

    Also returns the layer records (for :func:`signature`). Returns None when the
    fast path does not apply to this batch (a layer ran more than once or in a
    configuration the formulas do not cover); the caller then uses ``torch.func``.
    ``squared_norms_upper(blocks)`` bounds each example's squared norm in each block
    ``[B, …]`` of a list (one call for all the blocks formed at once);
    ``factors_of`` turns per-example squared-norm bounds into clip factors (with
    :data:`GHOST_MARGIN`, see :func:`clipped_sums`). ``model(inputs)`` is the forward
    pass, on the whole batch: the caller must make sure it processes examples
    independently (``gaussdp.ml.dpsgd`` passes the graph
    :func:`gaussdp.ml._independence.prove` proved, which calls the model's own
    layers, and compares the losses and squared norms returned here with a
    per-example pass on some calls). ``copy``, ``replay`` and
    ``restore`` are those of :func:`recorded_forward` (by default an
    :func:`input_guard` of ``inputs``); ``float32`` that of :func:`clipped_sums`.
    """
    batch = inputs.shape[0]
    check_batch(batch)
    output, records = recorded_forward(
        layers,
        set() if copy is None else copy,
        lambda: model(inputs),
        batch,
        replay,
        input_guard([inputs]) if restore is None else restore,
    )
    if records is None:
        return None
    losses = per_example_losses(loss_fn, output, targets)
    outs = [out for record in records for out in record.outputs]
    deltas = torch.autograd.grad(losses.sum(), outs, allow_unused=True)
    sums, squared = clipped_sums(
        records, deltas, batch, squared_norms_upper, factors_of, float32=float32
    )
    return sums, losses.detach(), squared, records


def ghost_run(sample_rate: float, num_examples: int) -> bool:
    """Whether a run may take this path: P(B > :data:`GHOST_MAX_BATCH`) ≤ :data:`GHOST_TAIL`.

    From public parameters only, never from a realised batch: B is the Poisson batch of
    ``num_examples`` examples each kept with probability ``sample_rate`` (a Binomial,
    whose moment generating function is at most that of a Poisson variable with the
    same mean μ = q·N), so by Chernoff's bound P(B ≥ a) ≤ exp(a − μ − a·ln(a/μ)) for
    a > μ, with a = GHOST_MAX_BATCH + 1. The bound increases with μ below a, so μ is
    rounded up (the sampler's own rate, ⌊q·2⁶⁴⌋/2⁶⁴, is at most q); the float error of
    the exponent (a few roundings of terms at most a(1 + |ln a| + |ln μ|) + μ, each
    relative error below 2⁻⁵⁰ with a faithful ``log``) is bounded by 2⁻⁴⁰ times that
    sum and added before comparing with ln(GHOST_TAIL), itself taken below its value.
    A False answer may be pessimistic, never a True one optimistic.
    """
    refused = GHOST_MAX_BATCH + 1
    if num_examples < refused:
        return True  # B ≤ num_examples: never refused
    mean = math.nextafter(sample_rate * num_examples, math.inf)
    if mean >= refused:
        return False
    log_mean, log_refused = math.log(mean), math.log(refused)
    exponent = refused - mean - refused * (log_refused - log_mean)
    slack = 2.0**-40 * (refused * (1.0 + abs(log_refused) + abs(log_mean)) + mean)
    return exponent + slack <= _LOG_TAIL


def check_batch(batch: int) -> None:
    """Refuse a batch beyond the float64 error bound of the module notes."""
    if batch > GHOST_MAX_BATCH:
        raise ValueError(
            invalid(
                "batch size",
                f"at most {GHOST_MAX_BATCH} for ghost clipping (a run takes it only if a "
                f"Poisson batch exceeds that with probability at most {GHOST_TAIL:g}; "
                "nothing was captured, drawn or charged)",
                batch,
            )
        )
