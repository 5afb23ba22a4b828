r"""DP-SGD for PyTorch: wrap a model, an optimizer and a data loader (Abadi et al. 2016).

One step of DP-SGD (Abadi et al. 2016, Alg 1), as gaussdp runs it:

1. a batch is a Poisson sample of the dataset: every example is kept
   independently with probability q (:class:`PoissonBatchSampler`), so batch sizes
   vary and a batch may be empty — an empty batch still takes a noise-only step;
2. per-example gradients are computed with ``torch.func`` (``functional_call`` +
   ``vmap`` + ``grad``, :func:`per_example_gradients`) and each is clipped to L2
   norm C (:func:`clip_factors`); or, when Linear, Conv1d/2d, Embedding,
   LayerNorm/GroupNorm and MultiheadAttention layers hold every trainable parameter,
   ghost clipping gets the same clipped sum from the batched pass's activations and
   output gradients, without materialising the model's per-example gradients
   (:mod:`gaussdp.ml._ghost`, ``grad_sample_mode``);
3. no example's contribution exceeds norm C, float rounding included (rigorous
   error bounds, see :func:`clip_factors` and :mod:`gaussdp.ml.noise`);
4. the clipped gradients are summed and N(0, σ²C²) noise is added to the sum —
   exact discrete Gaussian noise on a lattice by default (:mod:`gaussdp.ml.noise`);
5. the noisy sum is divided by the *expected* batch size qN (dividing by the actual
   size would leak it) and the wrapped optimizer steps;
6. the step is composed into a :class:`~gaussdp.accounting.PLDAccountant` as
   :attr:`DPOptimizer.step_event`, ``Subsampled(LatticeGaussian, sample_rate=q)``
   (add/remove-one neighbours, both directions accounted) — and, with
   ``make_private(..., ledger=...)`` or ``filter=...``, charged there *before* the
   noise is drawn (in blocks of steps, :mod:`gaussdp.ml._budget`).

Usage::

    model, optimizer, loader = make_private(
        model, optimizer, loader, target_epsilon=3.0, delta=1e-5, epochs=10,
        max_grad_norm=1.0)
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)  # mean (or sum) of per-example losses
        loss.backward()                           # records d loss / d output
        optimizer.step()                          # per-example clipping, noise, accounting
    optimizer.privacy_spent(1e-5)  # EpsilonBounds(lower=..., upper=...)

The training call of the model runs each example on its own (or the batched path of
ghost clipping: the model's traced graph, proven to keep examples apart) and
``loss.backward()`` stops at its output; per-example gradients are computed at the
step with ``torch.func`` from ∂loss/∂output (:class:`PrivateModule` states the rule
this assumes). ``model.backward(x, y)``, with
``loss_fn`` given to :func:`make_private`, is a faster path for a fixed loss. Models
whose output on one example depends on the others (batch normalisation) are refused.

Accounting note. What is released is the lattice mechanism of
:meth:`gaussdp.Gaussian.lattice`, whose output law is within e^{±a} (a < 10⁻⁷⁶ per
coordinate) of a post-processing of a continuous Gaussian with noise multiplier at
least σ (:class:`gaussdp.LatticeGaussian`, the smoothing argument). The accountants
compose the step event ``Subsampled(LatticeGaussian, q)`` by that argument, so
:meth:`DPOptimizer.privacy_spent` reports ε_PLD(δe^{−A}) + 2A with A = steps × d × a,
which is certified for the lattice noise (within an ulp or so of the continuous figure).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import hashlib
import math
import secrets
import sys
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.utils.data import (
    DataLoader,
    Dataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    Subset,
    TensorDataset,
)
from torch.utils.data.dataloader import default_collate

from gaussdp._validation import check_count, check_delta, check_int, check_positive
from gaussdp.accounting import (
    Accountant,
    EpsilonBounds,
    PLDAccountant,
    RDPAccountant,
    Subsampled,
)
from gaussdp.accounting.calibration import steps_per_epoch
from gaussdp.accounting.events import (
    Composed,
    Event,
    SelfComposed,
    check_rate,
    event_from_json,
    event_to_json,
)
from gaussdp.accounting.filter import PrivacyFilter
from gaussdp.errors import invalid
from gaussdp.mechanisms import Gaussian, LatticeGaussian
from gaussdp.ml._batches import (
    BatchId,
    batches_of,
    first_row,
    owning_rows,
    refuse_mixed_rows,
    tag,
)
from gaussdp.ml._budget import Charger, check_spender
from gaussdp.ml._fetch import SecretFetch, rekey_worker
from gaussdp.ml._ghost import (
    GHOST_LAYERS,
    GHOST_MARGIN,
    GHOST_MAX_BATCH,
    GHOST_TAIL,
    LayerRecord,
    check_batch,
    clipped_sums,
    ghost_clipped_sums,
    ghost_layers,
    ghost_run,
    input_guard,
    recorded_forward,
    signature,
    vmap_attention,
)
from gaussdp.ml._loss_check import LossCheck, Probe
from gaussdp.ml._masks import MaskStates
from gaussdp.ml._raw_calls import RawCalls
from gaussdp.ml.noise import (
    CLIP_MARGIN,
    NoiseMode,
    SumNoiser,
    check_noise_mode,
    check_noise_multiplier,
    sum_lattice,
)
from gaussdp.random import RandomSource, _DerivedStream, _process_identity, check_rng

if TYPE_CHECKING:
    from gaussdp.ml._independence import Proven
    from gaussdp.release.ledger import Ledger

__all__ = [
    "AccountantKind",
    "DPDataLoader",
    "DPOptimizer",
    "GradSampleMode",
    "LossReduction",
    "PoissonBatchSampler",
    "PrivateModule",
    "PrivateTraining",
    "clip_factors",
    "clip_gradients",
    "make_private",
    "per_example_gradients",
]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: How per-example gradients are clipped: ``"auto"`` uses ghost clipping when layers
#: of :data:`gaussdp.ml._ghost.GHOST_LAYERS` hold every trainable parameter, else
#: ``torch.func``.
GradSampleMode = Literal["auto", "functorch", "ghost"]
#: How the user's loss combines the per-example losses of a batch (``loss.backward()``
#: path): ``"mean"`` (torch's default reduction) or ``"sum"``.
LossReduction = Literal["mean", "sum"]


# -- per-example gradients and clipping -----------------------------------------------
def per_example_gradients(
    model: nn.Module, loss_fn: LossFn, inputs: torch.Tensor, targets: torch.Tensor
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Gradients of ``loss_fn(model(x_i), y_i)`` for each example i, with ``torch.func``.

    Each example is run as a batch of one (``functional_call`` on the model's
    parameters and buffers), differentiated with ``grad`` and vectorised over the
    batch with ``vmap``.

    Parameters
    ----------
    model : torch.nn.Module
        The model; only parameters with ``requires_grad`` are differentiated.
    loss_fn : callable
        ``loss_fn(output, target) -> scalar`` on a batch (e.g.
        ``torch.nn.functional.cross_entropy``); it is called on batches of one.
    inputs, targets : torch.Tensor
        A batch, examples along the first dimension (which may be 0).

    Returns
    -------
    grads : dict of str to torch.Tensor
        For each trainable parameter name, a tensor ``[B, *param.shape]``.
    losses : torch.Tensor
        The B per-example losses (detached).

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> model = nn.Linear(3, 2)
    >>> grads, losses = per_example_gradients(
    ...     model, nn.functional.cross_entropy, torch.randn(4, 3), torch.tensor([0, 1, 1, 0]))
    >>> grads["weight"].shape, losses.shape
    (torch.Size([4, 2, 3]), torch.Size([4]))
    """
    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    buffers = {k: v.detach() for k, v in model.named_buffers()}
    batch = inputs.shape[0]
    if batch == 0:
        empty = {k: v.new_zeros((0, *v.shape)) for k, v in params.items()}
        return empty, inputs.new_zeros((0,), dtype=torch.float32)

    def one(
        p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out = functional_call(model, (p, b), (x.unsqueeze(0),))
        loss = loss_fn(out, y.unsqueeze(0))
        return loss, loss.detach()

    # randomness="different": dropout draws independently for each example, as in a batch.
    per_example = vmap(grad(one, has_aux=True), in_dims=(None, None, 0, 0), randomness="different")
    with vmap_attention():
        grads, losses = per_example(params, buffers, inputs, targets)
    return dict(grads), losses


def _squared_norm_upper(block: torch.Tensor) -> torch.Tensor:
    r"""An upper bound on each example's squared L2 norm, from float32 dot products (float64 out).

    A block ``[B, k]`` is cut into chunks of m coordinates (m = gcd(k, 4096) when that
    is at least 256, else m = k) and each chunk's dot product x·x is computed in the
    block's dtype. Whatever the summation order, the computed ŝ of m terms satisfies
    |ŝ − s| ≤ γ_m s with γ_m = m·u/(1 − m·u), u the unit roundoff (Higham 2002,
    Accuracy and Stability of Numerical Algorithms, eq. 3.5), so s ≤ ŝ/(1 − γ_m).
    Chunk bounds are added in float64 (relative error ≤ (k/m)·2⁻⁵², a factor of its
    own below). Blocks with m·u ≥ 1/4 are computed in float64. Proof in docs/ml.md,
    "Certified norms in float32".

    Overflow: a row whose float32 result is not finite (an entry above ≈ 1.8·10¹⁹, or
    a sum above 3.4·10³⁸) is recomputed in float64 after scaling by 2⁻ᵉ, e the binary
    exponent of its largest entry (exact: a power of two), and the bound is scaled back
    by 2²ᵉ in float64; so only a row with an inf or NaN entry (or, for float64
    gradients, a norm above ≈ 10¹⁵⁴) gets a non-finite bound.

    One block of :func:`_squared_norms_upper`, which bounds several at once.
    """
    return _squared_norms_upper([block])[0]


def _squared_norms_upper(blocks: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """:func:`_squared_norm_upper` of each block ``[B, …]``, the float64 steps shared.

    The blocks of one batch size and device have their chunk sums stacked, and every
    later step (the factors of :func:`_chunked_bounds`, the underflow and overflow
    checks) is one tensor operation for all of them: the same operations on the same
    values, element by element and in the same order, as one block at a time — the
    bounds are identical, the work of a few blocks of a ghost layer is ≈ 25 small
    tensor operations fewer.
    """
    plans = [_chunk_plan(block) for block in blocks]
    bounds: list[torch.Tensor | None] = [None] * len(plans)
    groups: dict[tuple[int, torch.device], list[int]] = {}
    for i, (flat, _, _) in enumerate(plans):
        if flat.shape[1] == 0:
            bounds[i] = torch.zeros(flat.shape[0], dtype=torch.float64, device=flat.device)
        else:
            groups.setdefault((flat.shape[0], flat.device), []).append(i)
    for members in groups.values():
        stacked = _chunked_bounds([plans[i] for i in members])
        if not bool(torch.isfinite(stacked).all()):
            overflowed = ~torch.isfinite(stacked)
            for row, i in enumerate(members):
                if bool(overflowed[row].any()):
                    _rescaled_rows(stacked[row], plans[i][0], overflowed[row])
        for i, bound in zip(members, stacked.unbind(0), strict=True):
            bounds[i] = bound
    return [b for b in bounds if b is not None]


def _chunk_plan(block: torch.Tensor) -> tuple[torch.Tensor, int, float]:
    """A block as rows ``[B, k]``, its chunk length m and unit roundoff u (see above)."""
    batch = block.shape[0]
    flat = block.reshape(batch, -1)
    k = flat.shape[1]
    u = torch.finfo(flat.dtype).eps / 2
    m = math.gcd(k, 4096)
    if m < 256:
        m = k
    if m * u >= 0.25:
        return flat.to(torch.float64), k, 2.0**-53
    return flat, m, u


def _rescaled_rows(bound: torch.Tensor, flat: torch.Tensor, overflowed: torch.Tensor) -> None:
    """Bounds of the rows ``overflowed`` recomputed in float64 after an exact scaling.

    Rows whose chunk sums were not finite: each is scaled by 2⁻ᵉ (e the binary exponent
    of its largest entry) and the bound scaled back by 2²ᵉ, in float64.
    """
    rows = flat[overflowed].to(torch.float64)
    _, exponent = torch.frexp(rows.abs().amax(1))  # largest entry in [2^(e-1), 2^e)
    scaled = torch.ldexp(rows, -exponent[:, None])  # exact: a power of two, float64
    again = _chunked_bounds([(scaled, scaled.shape[1], 2.0**-53)])[0]
    bound[overflowed] = torch.ldexp(again, 2 * exponent)


#: Integer types of the float types' widths, to compare magnitudes bit for bit.
_SAME_WIDTH_INT = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}


#: Float elements whose squares ``linalg.vecdot`` writes out at once (4 MB of float32).
_SQUARES_AT_ONCE = 2**20


def _sums_of_squares(chunks: torch.Tensor) -> torch.Tensor:
    """x·x over the last dimension, in the block's dtype (the chunk sums ŝⱼ of docs/ml.md).

    ``linalg.vecdot`` writes every product out before it sums them: 100 MB for the
    MLP's per-example gradients at batch 256 (the check of the batched path, the
    per-example path), most of that check's time in page faults. A block of more than
    :data:`_SQUARES_AT_ONCE` elements is taken a few rows at a time, into one output:
    the same operation on the same rows, whose results do not depend on the rows
    taken with them (bit for bit, tests/ml/test_norm_bound.py), and whose memory is
    reused from range to range.
    """
    rows = max(1, _SQUARES_AT_ONCE // max(1, math.prod(chunks.shape[1:])))
    if rows >= chunks.shape[0]:
        whole: torch.Tensor = torch.linalg.vecdot(chunks, chunks)
        return whole
    out = chunks.new_empty(chunks.shape[:-1])
    for start in range(0, chunks.shape[0], rows):
        part = chunks[start : start + rows]
        torch.linalg.vecdot(part, part, out=out[start : start + rows])
    return out


def _chunked_bounds(plans: Sequence[tuple[torch.Tensor, int, float]]) -> torch.Tensor:
    """Σ over chunks of m coordinates of the dot products, bounded above (float64).

    One ``(flat, m, u)`` per block (:func:`_chunk_plan`), all of one batch size and
    device; returns their bounds stacked, ``[blocks, B]``.

    Underflow: a product x² below the smallest normal number t (|x| < √t) may be lost,
    flushed or rounded (or x itself read as 0 when denormals are flushed), and so may a
    partial sum below t — all of whose terms are such products. Each such square is lost
    at most once, so a row loses at most t per nonzero entry below √t: its bound adds 4t
    per nonzero entry below 2√t (a margin), or kt for rows whose sum is far above that
    (≥ 2⁴⁰kt), which saves counting them. The float64 sum of the k/m chunk values has
    relative error at most (k/m)·2⁻⁵² (Higham 2002, eq. 3.5, in float64), multiplied in;
    the 2⁻⁴⁰ factor covers the last few float64 roundings.
    """
    partials, constants = [], []
    for flat, m, u in plans:
        batch, k = flat.shape
        if m == k:  # one chunk: its dot product, converted (exactly) with the others below
            partials.append(_sums_of_squares(flat))
        else:
            chunks = flat.reshape(batch, k // m, m)
            partials.append(_sums_of_squares(chunks).to(torch.float64).sum(1))
        gamma = m * u / (1 - m * u)
        tiny = float(torch.finfo(flat.dtype).tiny)
        constants.append([1 + (k // m) * 2.0**-52, 1 - gamma, k * tiny, k * tiny * 2.0**40])
    partial = torch.stack(partials).to(torch.float64)
    # The same float64 operations on the same values either way; on the CPU in numpy,
    # whose calls on these few hundred values cost a fraction of torch's.
    cpu = partial.device.type == "cpu"
    values: Any = partial.detach().numpy() if cpu else partial
    c: Any = (
        np.array(constants)
        if cpu
        else torch.tensor(constants, dtype=torch.float64, device=partial.device)
    )
    values *= c[:, 0:1]  # in place: ``partial`` holds the same memory on the CPU
    bound = torch.as_tensor((values / c[:, 1:2] + c[:, 2:3]) * (1 + 2.0**-40))
    if not bool((values < c[:, 3:4]).any()):
        return bound
    c = torch.as_tensor(c, device=partial.device)
    faint = partial < c[:, 3:4]
    for row, (flat, _, _) in enumerate(plans):
        if not bool(faint[row].any()):
            continue
        # Magnitudes compared as integers (the bit patterns of non-negative floats
        # are ordered like their values): with denormals flushed
        # (``torch.set_flush_denormal``, which also treats subnormal inputs as 0), a
        # float comparison would count a subnormal entry as 0 although its square is
        # lost.
        tiny = float(torch.finfo(flat.dtype).tiny)
        ints = _SAME_WIDTH_INT[flat.dtype]
        bits = flat[faint[row]].view(ints) & torch.iinfo(ints).max  # sign bit cleared
        limit = torch.tensor(2 * math.sqrt(tiny), dtype=flat.dtype).view(ints)  # 2√t
        small = ((bits != 0) & (bits < limit)).sum(1, dtype=torch.float64)
        slack = partial[row, faint[row]] / c[row, 1] + 4 * tiny * small
        bound[row, faint[row]] = slack * (1 + 2.0**-40)
    return bound


def clip_factors(grads: Mapping[str, torch.Tensor], max_grad_norm: float) -> torch.Tensor:
    r"""Per-example scale factors min(1, C/‖gᵢ‖)·(1 − 2⁻²⁰), in float64 (Abadi et al. 2016).

    ‖gᵢ‖ is the L2 norm of example i's gradient over all parameters, replaced by a
    rigorous upper bound computed from float32 dot products (relative excess at most
    ~2⁻¹³, see ``_squared_norm_upper``), so a factor is never too large. The margin
    1 − 2⁻²⁰ keeps the scaled float32 gradient's norm ≤ C (see :mod:`gaussdp.ml.noise`).
    ``max_grad_norm=inf`` gives factors of 1. Norms are computed without overflow, so
    any finite gradient, however large, is scaled onto the sphere of radius C.

    Non-finite gradients, one rule everywhere in :mod:`gaussdp.ml`: an example whose
    gradient has an inf or NaN entry counts as the zero vector — factor 0 here, a zero
    row from :func:`clip_gradients`, left out of every sum (DP-SGD steps, ghost
    clipping, :class:`~gaussdp.ml.DPAggregator`; a client's update in
    :class:`~gaussdp.ml.DistributedDiscreteGaussian`). Mapping it to 0 is a valid clipping
    (norm 0 ≤ C, decided from that example alone), so the sensitivity stays C and
    nothing about it is revealed; refusing with an error would instead stop training
    because of one example, an unaccounted, data-dependent output.

    Examples
    --------
    >>> import torch
    >>> g = {"w": torch.tensor([[3.0, 4.0], [0.3, 0.4]])}
    >>> [round(f, 5) for f in clip_factors(g, 1.0).tolist()]
    [0.2, 1.0]
    """
    clip = check_positive("max_grad_norm", max_grad_norm, allow_inf=True)
    blocks = list(grads.values())
    if not blocks:
        raise ValueError(invalid("grads", "a non-empty mapping of per-example gradients", grads))
    batch = blocks[0].shape[0]
    if math.isinf(clip):
        return torch.ones(batch, dtype=torch.float64, device=blocks[0].device)
    return _factors_from_squared(_total_squared_norms(grads, batch), clip)


def _factors_from_squared(
    squared: torch.Tensor, clip: float, margin: float = CLIP_MARGIN
) -> torch.Tensor:
    """min(1, C/‖gᵢ‖)·(1 − 2⁻²⁰) from upper bounds on ‖gᵢ‖² (float64).

    ``margin`` replaces 1 − 2⁻²⁰ (ghost clipping's :data:`~gaussdp.ml._ghost.GHOST_MARGIN`).
    """
    if math.isinf(clip):
        return torch.ones_like(squared)
    norms = torch.sqrt(squared)
    # Abadi et al. 2016, Alg 1: ḡᵢ = gᵢ / max(1, ‖gᵢ‖/C); the margin absorbs float rounding.
    ratio = torch.where(norms > clip, clip / norms.clamp_min(1e-300), 1.0)
    # A gradient with an inf or NaN entry counts as zero (factor 0, see clip_factors): it
    # must not turn the noisy sum into NaN, which would reveal that the example is present.
    ratio = torch.where(torch.isfinite(norms), ratio, 0.0)
    return ratio.mul_(margin)


def clip_gradients(
    grads: Mapping[str, torch.Tensor], max_grad_norm: float
) -> dict[str, torch.Tensor]:
    """Per-example gradients scaled by :func:`clip_factors`: each has L2 norm ≤ ``max_grad_norm``.

    A gradient with an inf or NaN entry becomes a zero row (the rule of
    :func:`clip_factors`). The scaling is done in float64 and rounded once to the
    gradient's dtype, or to float32 for float16/bfloat16 gradients (the 2⁻²⁰ margin
    absorbs float32's rounding, not half precision's).

    Examples
    --------
    >>> import torch
    >>> clipped = clip_gradients({"w": torch.tensor([[3.0, 4.0]])}, 1.0)
    >>> bool(torch.linalg.vector_norm(clipped["w"]) <= 1.0)
    True
    """
    factors = clip_factors(grads, max_grad_norm)
    out = {}
    for name, g in grads.items():
        shape = (-1,) + (1,) * (g.dim() - 1)
        scaled = g.to(torch.float64) * factors.reshape(shape)
        dtype = torch.promote_types(g.dtype, torch.float32)
        out[name] = torch.where(factors.reshape(shape) == 0, 0.0, scaled).to(dtype)
    return out


# -- Poisson sampling -------------------------------------------------------------------
class PoissonBatchSampler(Sampler[list[int]]):
    """Batches of a Poisson sample: each of ``num_examples`` kept with prob. ``sample_rate``.

    One pass yields ``steps`` batches (by default round(1/q), one epoch in
    expectation). Each decision is ``u < ⌊q·2⁶⁴⌋`` for a uniform 64-bit word u, so an
    example is kept with probability ⌊q·2⁶⁴⌋/2⁶⁴ ≤ q — never more than the accounted
    rate (a smaller rate is at least as private).

    Parameters
    ----------
    num_examples : int
        Dataset size N, ≥ 1.
    sample_rate : float
        Sampling probability q in (0, 1].
    steps : int, optional
        Batches per pass, ≥ 1; default ``max(1, round(1/q))``.
    rng : RandomSource, optional
        ``None`` is the operating system's CSPRNG.

    Examples
    --------
    >>> from gaussdp.random import ChaCha20Random
    >>> sampler = PoissonBatchSampler(100, 0.1, rng=ChaCha20Random(0))
    >>> len(sampler), len(list(sampler))
    (10, 10)
    """

    def __init__(
        self,
        num_examples: int,
        sample_rate: float,
        *,
        steps: int | None = None,
        rng: RandomSource | None = None,
    ) -> None:
        self._n = check_int("num_examples", num_examples, minimum=1)
        self._rate = check_rate("sample_rate", sample_rate)
        self._steps = steps_per_epoch(self._rate) if steps is None else check_count("steps", steps)
        self._rng = check_rng(rng)
        # ⌊q·2⁶⁴⌋ computed exactly: a float q is a dyadic rational.
        self._threshold = math.floor(self._rate * 2.0**64) if self._rate < 1.0 else 2**64
        self._drawn_in: tuple[int, bytes] | None = None
        # The batch the data loader handed out last in this process (see
        # gaussdp.ml._batches), the count of those handed out, and whether a step
        # released that batch's sums.
        self._current: BatchId | None = None
        self._handed_out = 0
        self._released = False
        # Examples of the current batch, and of the batches this pass drew but the
        # data loader has not handed out yet (its workers fetch ahead), oldest first.
        self._current_rows = 0
        self._drawn_sizes: collections.deque[int] = collections.deque()

    @property
    def drawn_in(self) -> tuple[int, bytes] | None:
        """The process (id and fork token) that drew the last batch; None before the first.

        A process forked after a batch was drawn holds that batch too; DP-SGD steps
        on it only in the process that drew it (see :meth:`DPOptimizer.step`).
        """
        return self._drawn_in

    @property
    def sample_rate(self) -> float:
        """The sampling probability q."""
        return self._rate

    @property
    def num_examples(self) -> int:
        """The dataset size N."""
        return self._n

    def __len__(self) -> int:
        return self._steps

    def sample(self) -> list[int]:
        """One Poisson-sampled batch of example indices (possibly empty)."""
        self._drawn_in = _process_identity()
        if self._threshold >= 2**64:
            return list(range(self._n))
        keep = self._rng.words(self._n) < np.uint64(self._threshold)
        return np.flatnonzero(keep).tolist()

    def __iter__(self) -> Iterator[list[int]]:
        self._drawn_sizes.clear()  # a new pass: batches of an abandoned one are never handed out
        for _ in range(self._steps):
            batch = self.sample()
            self._drawn_sizes.append(len(batch))
            yield batch

    def _hand_out(self) -> BatchId:
        """A new current batch of this process (the data loader is handing it out)."""
        self._handed_out += 1
        self._current = (*_process_identity(), self._handed_out)
        self._current_rows = self._drawn_sizes.popleft()
        self._released = False
        return self._current


def _empty_like(batch: Any) -> Any:
    """The same structure with every tensor cut to 0 examples along the first dimension."""
    if isinstance(batch, torch.Tensor):
        return batch[:0]
    if isinstance(batch, tuple | list):
        return type(batch)(_empty_like(b) for b in batch)
    if isinstance(batch, Mapping):
        return {k: _empty_like(v) for k, v in batch.items()}
    return batch


class _EmptySafeCollate:
    """Collate that turns an empty batch into tensors with 0 examples (shapes from example 0).

    Under a secret generator state of ``fetch`` (:mod:`gaussdp.ml._fetch`), so that a
    ``collate_fn`` that draws random numbers does not draw from the script's generator.
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        collate_fn: Callable[[list[Any]], Any],
        fetch: SecretFetch,
    ) -> None:
        self._dataset = dataset
        self._collate = collate_fn
        self._fetch = fetch

    def __call__(self, batch: list[Any]) -> Any:
        with self._fetch.secret_state():
            if batch:
                return self._collate(batch)
            return _empty_like(self._collate([self._dataset[0]]))


class DPDataLoader(DataLoader[Any]):
    """A :class:`torch.utils.data.DataLoader` whose batches are Poisson samples.

    Batch sizes vary (Binomial(N, q)); an empty batch is yielded as tensors with 0
    examples, so the training loop still takes its noise-only step. The tensors of
    each batch are tagged with its identity, and the last batch handed out is the
    process's current one: a DP-SGD step releases that batch's sums only, once
    (:mod:`gaussdp.ml._batches`).

    Parameters
    ----------
    dataset : torch.utils.data.Dataset
        A map-style dataset with a length.
    sample_rate : float
        q in (0, 1].
    steps : int, optional
        Batches per pass (default round(1/q)).
    rng : RandomSource, optional
        ``None`` is the operating system's CSPRNG.
    collate_fn : callable, optional
        As for DataLoader (default: ``default_collate``).
    num_workers : int, default 0
        As for DataLoader; sampling always runs in the main process. Each pass
        draws one fetch key per worker (:mod:`gaussdp.ml._fetch`): the loader's
        ``worker_init_fn`` re-keys the worker with it.
    fetch_rng : RandomSource, optional
        Source of the generator states each example is fetched under (random data
        augmentation in the dataset, :mod:`gaussdp.ml._fetch`); ``None`` is a stream
        keyed from the operating system's CSPRNG. ``dataset`` is fetched through a
        :class:`~gaussdp.ml._fetch.SecretFetch` (the loader's ``dataset``; the one
        given is its ``dataset``), except a ``TensorDataset`` or a ``Subset`` of one,
        which draw nothing.

    Examples
    --------
    >>> import torch
    >>> from torch.utils.data import TensorDataset
    >>> from gaussdp.random import ChaCha20Random
    >>> data = TensorDataset(torch.randn(50, 3), torch.zeros(50, dtype=torch.long))
    >>> loader = DPDataLoader(data, sample_rate=0.1, rng=ChaCha20Random(0))
    >>> len(loader), next(iter(loader))[0].shape[1]
    (10, 3)
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        *,
        sample_rate: float,
        steps: int | None = None,
        rng: RandomSource | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        num_workers: int = 0,
        fetch_rng: RandomSource | None = None,
    ) -> None:
        size = _dataset_length(dataset, "dataset")
        sampler = PoissonBatchSampler(size, sample_rate, steps=steps, rng=rng)
        source = _DerivedStream(check_rng(None)) if fetch_rng is None else check_rng(fetch_rng)
        fetch = SecretFetch(dataset, source)
        collate = _EmptySafeCollate(dataset, collate_fn or default_collate, fetch)
        self._indexed_collate = collate if collate._collate is default_collate else None
        super().__init__(
            dataset if _draws_nothing(dataset) else fetch,
            batch_sampler=sampler,
            collate_fn=collate,
            num_workers=num_workers,
            generator=fetch.generator(),  # the workers' seeds: secret (_fetch)
            worker_init_fn=functools.partial(rekey_worker, fetch),
        )
        self.sample_rate: float = sampler.sample_rate
        self._fetch = fetch

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        """The batches, each tagged with its own identity (:mod:`gaussdp.ml._batches`)."""
        sampler = self.batch_sampler
        assert isinstance(sampler, PoissonBatchSampler)
        if self.num_workers > 0:  # fresh keys for this pass's workers (_fetch)
            self._fetch.key_workers(self.num_workers)
        indexed = (
            self._indexed_collate is not None
            and self.collate_fn is self._indexed_collate
            and self.num_workers == 0
            and not self.pin_memory
            and _draws_nothing(self.dataset)
        )
        for batch in _indexed(self.dataset, sampler) if indexed else super().__iter__():
            batch = owning_rows(batch)  # a view's rows are checked against its own base
            tag(batch, sampler._hand_out())
            yield batch


def _indexed(dataset: Dataset[Any], sampler: PoissonBatchSampler) -> Iterator[list[torch.Tensor]]:
    """The batches of a ``TensorDataset`` (or a ``Subset`` of one), one index per tensor.

    What ``default_collate`` makes of the examples fetched one by one — a list of the
    tensors' rows, stacked, 0 rows for an empty batch — with one indexing operation per
    tensor instead of one per example and tensor (≈ 0.1 ms against ≈ 1 ms for 256
    MNIST-sized examples). Such a dataset draws nothing (:func:`_draws_nothing`).
    """
    for indices in sampler:
        source = dataset
        while type(source) is Subset:
            indices = [int(source.indices[i]) for i in indices]
            source = source.dataset
        assert isinstance(source, TensorDataset)
        index = torch.from_numpy(np.array(indices, dtype=np.int64))  # ≈ 5× torch.tensor's speed
        yield [torch.index_select(t, 0, index.to(t.device)) for t in source.tensors]


def _draws_nothing(dataset: Dataset[Any]) -> bool:
    """A ``TensorDataset``, or a ``Subset`` of one: fetching only indexes tensors.

    Such a dataset needs no generator state per example (:mod:`gaussdp.ml._fetch`).
    Exact types only: a subclass may override ``__getitem__``.
    """
    if type(dataset) is Subset:
        return _draws_nothing(dataset.dataset)
    return type(dataset) is TensorDataset


def _dataset_length(dataset: object, name: str) -> int:
    try:
        size = len(dataset)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            invalid(name, "a map-style dataset with a length (len(dataset) works)", dataset)
        ) from None
    if size < 1:
        raise ValueError(invalid(f"len({name})", "at least 1", size))
    return size


# -- the wrapped model and optimizer ------------------------------------------------------
#: Float32 elements of per-example gradients the per-example path holds at once (16 MB):
#: a larger batch (a Poisson batch above GHOST_MAX_BATCH, or torch.func on a large model)
#: is processed ⌊limit/d⌋ examples at a time (at least one), each range clipped on its own
#: and its clipped sum added (exact on the secure path: integers in lattice units). The
#: check of the batched path against the per-example one takes the same ranges. Below
#: glibc's 32 MB mmap limit, a range's memory is reused by the next instead of mapped
#: afresh: 256 MB ranges cost the MLP of benchmarks/dpsgd.py (d = 101,770, batch 256)
#: ≈ 25,000 page faults a checked call (half of its ≈ 50,000 with vecdot's squares, which
#: cost 66-630 ms of system CPU at load 12; see _sums_of_squares).
PER_EXAMPLE_LIMIT = 2**22

#: Proofs (each with its traced graph) kept per engine: a model whose proof key changes
#: at every step (a float attribute set each step) must not hold a graph per step.
_MAX_PROOFS = 32


class _Watch(functools.partial[Any]):
    """One of an engine's watch hooks (:meth:`_Engine._watch_raw_calls` or ``_outputs``).

    ``copy.deepcopy`` of the watched network (an EMA or BYOL target) copies the
    modules' hook tables, and so each watch: it copies as a :class:`_Carried` mark,
    never as a copy of the engine (its noise and mask generators, clipped sums and
    batch). The copy is another network: its calls run no check and add nothing to
    the private step, and its parameters are its own, outside the private optimizer.
    """

    @property
    def engine(self) -> _Engine:
        """The engine whose method this is."""
        owner = getattr(self.func, "__self__", None)
        assert isinstance(owner, _Engine)
        return owner

    def __deepcopy__(self, memo: dict[int, Any]) -> _Carried:
        return _Carried(self.engine)


class _Carried:
    """A watch hook's mark on a deep copy of the network: watches nothing, keeps the steps.

    The copy's parameters come from a privately trained network (and an EMA target's
    keep following it), so :func:`make_private` on the copy asks for the history of
    the run it came from, as on the network itself (:func:`_check_resume`): the steps
    of that run, or of the run of a later ``make_private`` that took it over, counted
    when asked; a pickled mark keeps those counted when pickled.
    """

    __slots__ = ("engine", "frozen")

    def __init__(self, engine: _Engine | None, frozen: int = 0) -> None:
        self.engine, self.frozen = engine, frozen

    def __call__(self, *_args: Any) -> None:
        return None

    @property
    def latest(self) -> _Engine | None:
        """The engine of the run now training the copy's source (None once pickled)."""
        engine = self.engine
        while engine is not None and engine.successor is not None:
            engine = engine.successor
        return engine

    @property
    def steps(self) -> int:
        """The steps the run of the copy's source carries now (see the class notes)."""
        latest = self.latest
        return max(self.frozen, 0 if latest is None else latest.carried)

    def __deepcopy__(self, memo: dict[int, Any]) -> _Carried:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Carried, (None, self.steps))


class _Engine:
    """State shared by the wrapped model and optimizer of one :func:`make_private` call."""

    def __init__(
        self,
        module: nn.Module,
        loss_fn: LossFn | None,
        *,
        noise_multiplier: float,
        max_grad_norm: float,
        sample_rate: float,
        num_examples: int,
        noise: NoiseMode,
        rng: RandomSource,
        mask_rng: RandomSource,
        grad_sample_mode: GradSampleMode = "auto",
        loss_reduction: LossReduction = "mean",
    ) -> None:
        self.module = module
        self.mode = grad_sample_mode
        self.loss_reduction = loss_reduction
        # Ghost or per-example for the whole run, from public parameters only: the ghost
        # path rounds a float sum once, the per-example path each example, and neighbouring
        # batches computed in different ways differ by more than the sensitivity bound.
        run_ghost = ghost_run(sample_rate, num_examples)
        if not run_ghost and grad_sample_mode == "ghost":
            raise ValueError(
                invalid(
                    "grad_sample_mode",
                    "'auto' or 'functorch' when the Poisson batch (expected "
                    f"{sample_rate * num_examples:g} examples) exceeds {GHOST_MAX_BATCH} "
                    f"with probability above {GHOST_TAIL:g} (gaussdp.ml._ghost.ghost_run)",
                    grad_sample_mode,
                )
            )
        self.ghost_layers = (
            ghost_layers(module) if grad_sample_mode != "functorch" and run_ghost else None
        )
        if grad_sample_mode == "ghost" and self.ghost_layers is None:
            names = ", ".join(t.__name__ for t in GHOST_LAYERS)
            raise ValueError(
                invalid(
                    "grad_sample_mode",
                    f"'auto' or 'functorch' unless layers of the types {names} (those "
                    "types exactly, not subclasses) hold every trainable parameter",
                    grad_sample_mode,
                )
            )
        # Whether a step's batch is held to GHOST_MAX_BATCH (refuse_rows): the run may
        # take the ghost path (a later switch to the per-example path leaves it so).
        self.ghost_limit = self.ghost_layers is not None
        # The dimension along which ghost clipping reads each layer's examples.
        self.expected = {
            id(m): 1 if isinstance(m, nn.MultiheadAttention) and not m.batch_first else 0
            for _, m in self.ghost_layers or []
        }
        # Per call structure and modules' state: the proven graph the batched path runs,
        # or why the model is not proven to keep examples independent
        # (gaussdp.ml._independence).
        self.proofs: dict[tuple[Any, ...], Proven | str] = {}
        self.loss_fn = loss_fn
        self.names = [k for k, v in module.named_parameters() if v.requires_grad]
        # Where each was found: the path of submodules and the parameter's attribute name.
        self.places = [(tuple(n.split(".")[:-1]), n.split(".")[-1]) for n in self.names]
        self.params = [v for v in module.parameters() if v.requires_grad]
        self.device = self.params[0].device if self.params else torch.device("cpu")
        dim = sum(p.numel() for p in self.params)
        self.noiser = SumNoiser(noise_multiplier, max_grad_norm, dim, noise=noise, rng=rng)
        # Secret generator states, one per training pass: its dropout masks (_masks).
        self.masks = MaskStates(mask_rng, self.device)
        # Steps the parameters carry from this engine's optimizer, loaded ones included:
        # a later make_private on the model must take them over (its ``resume``).
        self.carried = 0
        # The runs whose steps those are, oldest first: the histories loaded, then this
        # engine's own (a random id). A later make_private's ``resume`` must name them all.
        self.runs: list[str] = [secrets.token_hex(16)]
        self.max_grad_norm = max_grad_norm
        self.sample_rate = sample_rate
        self.expected_batch_size = sample_rate * num_examples
        # This step's clipped sums so far (see pending): lattice integers (per-example
        # path) and the float64 ghost sums in lattice units, rounded once at the release.
        self.exact: list[torch.Tensor] | None = None
        self.unrounded: list[torch.Tensor] | None = None
        # The process the pending sums belong to (see origin): only it may release them.
        self.pending_origin: tuple[int, bytes] | None = None
        # The loader's batches the pending sums came from (gaussdp.ml._batches).
        self.pending_batches: frozenset[BatchId] = frozenset()
        self.pending_rows = 0  # examples of the model.backward calls since the last step
        # The sampler of make_private's loader: a batch belongs to the process that drew it.
        self.sampler: PoissonBatchSampler | None = None
        self.batched_calls = 0  # calls of the batched (ghost) path, for _verify_now
        self.warned = False  # the "not proven" warning of "auto" was given
        self.checked: set[tuple[tuple[int, ...], ...]] = set()  # layer shapes checked
        self.copy_outputs: set[str] = set()  # layers followed by an in-place operation
        # Calls (input shapes and structure, see _call_key) where a layer ran in a
        # configuration ghost clipping does not cover: they skip the batched forward.
        self.uncovered: set[tuple[Any, ...]] = set()
        # The loss.backward() path: one record per training forward call since the last step.
        self.records: list[_Record] = []
        self.forward_calls = 0
        self.anchor = torch.zeros((), requires_grad=True)  # makes captured outputs differentiable
        self.loss_check = LossCheck(self.params)  # the loss keeps examples apart (probed steps)
        self.inside = False  # True while the engine itself runs the model
        self.raw_forward = False  # the unwrapped model or a part ran with gradients enabled
        # A backward pass reached the output of such a call (since the last zero_grad()):
        # its unclipped gradient went into param.grad, whenever the call was made.
        self.raw_backward = False
        self.raw_module = ""  # the name of the first one that did
        self.raw_calls = RawCalls()  # such a call under way: its tensors are watched
        # On the model and on every module that holds a trainable parameter (itself or
        # in a submodule): a call of a part (an auxiliary head, an activation penalty on
        # features) runs on data too.
        self.module_names = {id(m): n for n, m in module.named_modules()}
        self.watches: list[torch.utils.hooks.RemovableHandle] = []
        for sub in module.modules():
            if sub is module or any(p.requires_grad for p in sub.parameters()):
                self.watches.append(sub.register_forward_pre_hook(_Watch(self._watch_raw_calls)))
                self.watches.append(
                    sub.register_forward_hook(_Watch(self._watch_raw_outputs), always_call=True)
                )
        self.retired = False  # a later make_private took the model over (_check_resume)
        self.successor: _Engine | None = None  # that make_private's engine

    def retire(self, successor: _Engine) -> None:
        """Hand the model over to ``successor``, a later :func:`make_private`'s: no step here.

        Its watch hooks leave the modules (the new engine's proof of the batched path
        would see them as foreign hooks); :meth:`DPOptimizer.step` then refuses, so
        no step is taken outside the history the new optimizer carries.
        """
        for handle in self.watches:
            handle.remove()
        self.retired = True
        self.successor = successor

    def _watch_raw_calls(self, module: nn.Module, _args: Any) -> None:
        """A call outside the engine begins: with gradients, its tensors are watched.

        Every result of a torch function from the start of the outermost such call to
        its end gets a tensor hook (:mod:`gaussdp.ml._raw_calls`): a backward pass
        reaching one flags the step, however the call passed it on — returned,
        in a dataclass, kept as an attribute (rev29-ml #1).
        """
        if self.inside:
            return
        reached = None
        if torch.is_grad_enabled():
            name = self.module_names.get(id(module), type(module).__name__)
            if not self.raw_forward:
                self.raw_forward = True  # named by the first (outermost) call
                self.raw_module = name
            reached = functools.partial(self._raw_reached, name)
        self.raw_calls.begin(module, reached)

    def _watch_raw_outputs(self, module: nn.Module, _args: Any, output: Any) -> Any:
        """A call outside the engine ended (also by an exception): its outputs are watched.

        With gradients enabled, each output that requires a gradient gets a tensor
        hook, as every tensor made during the call did (:meth:`_watch_raw_calls`): it
        stays with the graph (also after the tensor itself is gone) and fires when a
        backward pass reaches that output, whenever the call was made — before or
        after ``zero_grad()`` — so ``out = net[0](x); optimizer.zero_grad();
        loss.backward()`` is seen (rev28-ml: 1.77·C, unbounded with the weight). The
        model's own outputs, with gradients enabled or not, are the keys of a
        stop-gradient loss while the loader's batch awaits its step (:meth:`keys`):
        ``k = net(x2).detach()`` is as ``torch.no_grad()`` keys are (rev29-ml #3:
        2.18·C). Calls the engine makes itself pass as they are.
        """
        if self.inside:
            return None
        self.raw_calls.ended(module)
        if torch.is_grad_enabled():
            name = self.module_names.get(id(module), type(module).__name__)
            for t in tree_flatten(output)[0]:
                # (A leaf, such as a parameter a module returns, is not data.)
                if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                    t.register_hook(functools.partial(self._raw_reached, name))  # type: ignore[no-untyped-call]
        return self.keys(output) if module is self.module else None

    def _raw_reached(self, name: str, _grad: torch.Tensor) -> None:
        """A backward pass reached the output of a call outside the engine (a tensor hook).

        Named by the outermost call: an output of a part is also its container's.
        """
        named = self.raw_forward or self.raw_backward
        if not named or name == "" or self.raw_module.startswith(f"{name}."):
            self.raw_module = name
        self.raw_backward = True

    def keys(self, output: Any) -> Any:
        """The model's output under ``torch.no_grad()``, as keys of a stop-gradient loss.

        On every step (probed or not: a loss of a new form is checked on any step),
        while the data loader's last batch awaits its step, in training or eval mode
        (keys computed in ``model.eval()`` to switch dropout off): the loss check's keys
        (:meth:`gaussdp.ml._loss_check.LossCheck.wrap_keys`). Otherwise as it is: keys
        of the current batch come after it is drawn, and no step releases sums without
        a batch drawn from the loader, so evaluation after a step (or after training)
        gets plain tensors and is not recorded.
        """
        sampler = self.sampler
        if (
            not self.params
            or sampler is None
            or sampler._released
            or sampler._current is None
            or sampler._current[:2] != _process_identity()
        ):
            return output
        return self.loss_check.wrap_keys(output, sampler._current_rows)

    def refuse_raw_calls(self) -> None:
        """Refuse a step after the unwrapped model, or a part of it, ran with gradients.

        Every module holding a trainable parameter (itself or in a submodule) watches
        its calls: one outside the engine with gradients enabled since the last
        ``zero_grad()``, or a backward pass since then that reached a tensor such a call
        made at any time (``out = net[0](x)`` before ``zero_grad()``, its backward
        after it; its output, or anything it computed: a dataclass's field, an
        auxiliary loss kept as an attribute, :mod:`gaussdp.ml._raw_calls`), may have
        put unclipped per-example gradients into ``param.grad``, which the step would
        add un-noised as a regulariser. Not seen: a parameter used on data outside the
        module calls (``w @ x.T`` in the loss, ``net[0].forward(x)``: ``.forward()``
        skips the hooks; see :class:`PrivateModule`), and a module that turns
        gradients on inside a call made under ``torch.no_grad()``. Raised before
        anything is captured, drawn or charged.
        """
        if (self.raw_forward or self.raw_backward) and any(p.grad is not None for p in self.params):
            part = f"'s submodule {self.raw_module!r}" if self.raw_module else ""
            raise RuntimeError(
                invalid(
                    "optimizer.step()",
                    "called without the unwrapped model or any of its layers having run "
                    "with gradients enabled since the last zero_grad(), and without a "
                    "backward pass since then reaching a tensor such a call made earlier, "
                    "while parameters hold gradients (they may be unclipped "
                    "per-example gradients, added un-noised): train through the model "
                    "make_private returned and run the unwrapped one and its parts under "
                    "torch.no_grad()",
                    f"the unwrapped model{part} ran with gradients enabled",
                )
            )

    def check_params(self) -> None:
        """Refuse a model whose trainable parameters of ``make_private`` were replaced.

        A reassigned parameter (``net.a.weight = nn.Parameter(...)``) is not the one
        clipped and noised: its gradient would be missing from the clipped sum.
        Raised before anything is computed or drawn. Each parameter is first looked up
        where make_private found it (the submodules' and parameters' own dicts, as
        ``parameters()`` walks them); only if one is not there are all the model's
        parameters listed (a parameter moved elsewhere in the model still counts).
        """
        places = zip(self.places, self.params, strict=True)
        if all(_holds(self.module, where, p) for where, p in places):
            return
        present = {id(p) for p in self.module.parameters()}
        gone = [n for n, p in zip(self.names, self.params, strict=True) if id(p) not in present]
        if gone:
            raise ValueError(
                invalid(
                    "the model's parameters",
                    "the trainable parameters given to make_private (a parameter "
                    "reassigned afterwards is not trained privately: call make_private "
                    "on the new model)",
                    gone,
                )
            )

    @property
    def pending(self) -> list[torch.Tensor] | None:
        """The clipped sums of this step's batch so far, ready for release (None: none yet).

        The ghost path's float sums of every call of the step are added up unrounded and
        rounded to the lattice here, once: rounding each call's sum on its own would let
        an example removed from one call move every later example across the call
        boundaries, each call's rounding adding up to √d (module notes of
        :mod:`gaussdp.ml._ghost`, "Several calls for one step"). Setting it replaces
        the step's sums (None drops them).
        """
        if self.unrounded is None:
            return self.exact
        rounded = self.noiser.accumulate_sums(self.unrounded)
        return rounded if self.exact is None else _added(self.exact, rounded)

    @pending.setter
    def pending(self, sums: list[torch.Tensor] | None) -> None:
        self.exact, self.unrounded = sums, None

    @property
    def held(self) -> bool:
        """Whether :attr:`pending` is not None (without rounding the sums)."""
        return self.exact is not None or self.unrounded is not None

    def add_pending(
        self, exact: list[torch.Tensor] | None, unrounded: list[torch.Tensor] | None
    ) -> None:
        """Add one call's clipped sums to the step's: lattice integers and/or ghost sums."""
        if exact is not None:
            self.exact = exact if self.exact is None else _added(self.exact, exact)
        if unrounded is not None:
            self.unrounded = (
                unrounded if self.unrounded is None else _added(self.unrounded, unrounded)
            )

    def origin(self) -> tuple[int, bytes]:
        """The process clipped sums computed now belong to.

        This one, unless the loader's last batch was drawn in another: a process
        forked after its parent drew a batch holds that batch (the parent's Poisson
        sample, which the parent releases) until it draws one of its own.
        """
        drawn = None if self.sampler is None else self.sampler.drawn_in
        return _process_identity() if drawn is None else drawn

    def refuse_foreign(self) -> None:
        """Refuse, and drop, clipped sums that belong to another process.

        A process forked after ``backward`` (or after its parent drew the batch)
        but before ``step`` holds the parent's clipped sums; parent and child would
        each release them and each charge one subsampled step, but two releases of
        one Poisson sample are not two independently subsampled steps (and under a
        seeded stream their noise is the same). Called before anything is drawn or
        charged: the sums and captured gradients are dropped here, whether or not
        the steps are charged (the optimizer's own accountant would under-count too).

        Then the batch rule of :meth:`_refuse_other_batches`.

        Raises
        ------
        RuntimeError
            If a pending sum or a captured gradient belongs to another process, or
            to a batch other than the loader's current one, or to a batch already
            stepped on.
        """
        here = _process_identity()
        origins = {r.origin for r in self.records if r.grads is not None}
        if self.held and self.pending_origin is not None:
            origins.add(self.pending_origin)
        if not origins <= {here}:
            self.drop()
            raise RuntimeError(
                invalid(
                    "optimizer.step()",
                    "called in the process that drew the batch and computed its clipped "
                    "sums (a forked process holds its parent's, which the parent releases: "
                    "they are dropped here, nothing is drawn or charged; in the child, draw "
                    "a batch from the data loader and call backward on it before stepping)",
                    f"sums of process {min(o[0] for o in origins - {here})} in process {here[0]}",
                )
            )
        self._refuse_other_batches()

    def drop(self) -> None:
        """Forget the pending sums and every captured gradient."""
        self.pending = self.pending_origin = None
        self.pending_batches = frozenset()
        self.pending_rows = 0
        self.records = []

    def refuse_rows(self) -> None:
        """Refuse, and drop, sums beyond the data loader's current batch (at a step).

        The step is charged as the Gaussian mechanism on one Poisson sample, each
        example contributing one clipped gradient: the rows of the training calls and
        ``model.backward`` calls since the last step (those whose gradients are
        captured) must not exceed the examples of the batch the data loader of
        :func:`make_private` handed out last in this process, and no step may have
        released that batch. Two augmented views of a batch, each with its own
        backward or concatenated into one call, would let one example put two
        clipped gradients into the sum (sensitivity 2C); training on batches of
        another loader (the user's original one) would be charged as a Poisson
        sample that was never drawn. This holds whatever the tensors' tags
        (:mod:`gaussdp.ml._batches`: augmentation makes untagged tensors); splitting
        the batch into micro-batches, each with its own backward, keeps to it.
        Called before the clipped sums of captured gradients are formed and before
        anything is drawn or charged; with nothing pending it leaves the step's own
        refusal to it.

        Raises
        ------
        RuntimeError
            The pending sums and captured gradients are dropped first.
        ValueError
            In a run that may take the ghost path, for a step of more than
            :data:`~gaussdp.ml._ghost.GHOST_MAX_BATCH` rows, each call within it
            (micro-batches of a larger Poisson batch); dropped first too.
        """
        captured = [r for r in self.records if r.grads is not None]
        if not self.held and not captured:
            return
        sampler = self.sampler
        current = None if sampler is None else sampler._current
        used = self.pending_rows + sum(r.batch for r in captured)
        if sampler is None or current is None or current[:2] != _process_identity():
            got = "no batch of it drawn in this process"
        elif sampler._released:
            got = "its last batch, which a step already released"
        elif used > sampler._current_rows:
            got = f"{used} rows for a batch of {sampler._current_rows} examples"
        elif self.ghost_limit and used > GHOST_MAX_BATCH:
            # The float bound of the ghost sums holds for a step of at most GHOST_MAX_BATCH
            # examples, whatever its calls (_ghost, "Several calls for one step"); with
            # the rows within the Poisson batch, this is the event B > GHOST_MAX_BATCH
            # (probability at most GHOST_TAIL a step), as for one call's check_batch.
            self.drop()
            raise ValueError(
                invalid(
                    "the step's batch size",
                    f"at most {GHOST_MAX_BATCH} examples over all the training and "
                    "model.backward calls since the last step, for ghost clipping (a run "
                    "takes it only if a Poisson batch exceeds that with probability at most "
                    f"{GHOST_TAIL:g}; the sums are dropped here, nothing is drawn or charged)",
                    used,
                )
            )
        else:
            return
        self.drop()
        raise RuntimeError(
            invalid(
                "optimizer.step()",
                "called on the examples of the batch last drawn in this process from the "
                "data loader make_private returned (iterate that loader, not the original "
                "one), each once (the rows of the training calls and model.backward calls "
                "since the last step at most the batch's examples, a new batch for each "
                "step: two augmented views of a batch, each with its own backward or "
                "concatenated into one call, count an example twice; micro-batches of the "
                "batch are fine; the sums are dropped here, nothing is drawn or charged)",
                got,
            )
        )

    def _refuse_other_batches(self) -> None:
        """Refuse, and drop, sums of a batch other than the loader's current one, or stepped on.

        Each Poisson batch the data loader hands out is released by one step, in the
        process that drew it (:mod:`gaussdp.ml._batches`): a step on sums of an earlier
        batch (one the process held when it was forked, whose tensors it uses after
        drawing its own) or of a batch a step already released would release one
        Poisson sample twice, each time charged as an independently subsampled step.
        Sums of untagged tensors only are not held to this rule.
        """
        used = set(self.pending_batches) if self.held else set()
        for record in self.records:
            if record.grads is not None:
                used |= record.batches
        if not used:
            return
        sampler = self.sampler
        current = None if sampler is None else sampler._current
        if sampler is not None and used == {current} and not sampler._released:
            return
        got = (
            "sums of a batch a step already released"
            if used == {current}
            else f"sums of {len(used)} batches of the data loader"
            if len(used) > 1
            else "sums of a batch other than the last the data loader handed out in this process"
        )
        self.drop()
        raise RuntimeError(
            invalid(
                "optimizer.step()",
                "called once per batch, on the sums of the data loader's last batch in "
                "this process (each Poisson sample is released by one step, in the process "
                "that drew it; a process forked after its parent drew a batch holds the "
                "parent's tensors: the sums are dropped here, nothing is drawn or charged; "
                "draw the next batch from the data loader and call backward on it)",
                got,
            )
        )

    def backward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``model.backward(x, y)``, its random layers drawing from a secret state (_masks).

        Outside any ``torch.autocast``: its norm bounds and sums assume the products
        of the parameters' dtype (autocast would run them in bfloat16 or float16).
        """
        if _autocasting(self.device):
            with _without_autocast(self.device):
                return self.backward(inputs, targets)
        refuse_mixed_rows((inputs, targets), "model.backward inputs and targets")
        self.check_batch(inputs.shape[0])  # before the mask stream moves
        with _replaying(self.masks.next(), self.device):
            return self._backward(inputs, targets)

    def _backward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.check_params()
        if self.loss_fn is None:
            raise ValueError(
                invalid("loss_fn", "given to make_private to use model.backward(x, y)", None)
            )
        sums: list[torch.Tensor] | None = None  # lattice integers (per-example path)
        unrounded: list[torch.Tensor] | None = None  # float64 in lattice units (ghost path)
        losses: torch.Tensor | None = None
        key = _call_key([inputs], None)
        restore: Callable[[], None] = _nothing  # before each later run on the same inputs
        proof = (
            self._proven((inputs,), {}, [inputs], key)
            if self.ghost_layers is not None and inputs.shape[0] > 0 and key not in self.uncovered
            else None
        )
        if proof is not None:
            assert self.ghost_layers is not None
            restore = input_guard([inputs])
            clip, unit = self.max_grad_norm, self.noiser.unit
            rng_state = _rng_snapshot(self.device)  # the check replays the same dropout masks
            self.inside = True
            try:
                ghost = ghost_clipped_sums(
                    proof,  # the proven graph, not model.forward
                    self.ghost_layers,
                    self.loss_fn,
                    inputs,
                    targets,
                    _squared_norms_upper,
                    # Factors over the noiser's unit (γ = 2**k, exact): sums in lattice units.
                    lambda squared: _factors_from_squared(squared, clip, GHOST_MARGIN) / unit,
                    copy=self.copy_outputs,
                    replay=lambda: _replaying(rng_state, self.device),
                    restore=restore,
                    # float64 where the step has a ghost sum already (module notes)
                    float32=self.unrounded is None,
                )
            finally:
                self.inside = False
            if ghost is not None:
                by_id, ghost_losses, squared, layer_records = ghost
                if self._verify_now(signature(layer_records, inputs.shape[0])):
                    drew = _rng_moved(rng_state, self.device)  # the pass drew dropout masks
                    # Dropout masks depend on how many examples one pass draws them for:
                    # a batch that drew random numbers is checked at once (every example
                    # whose clipped gradient is used is compared), at the memory of the
                    # whole batch's per-example gradients; otherwise in ranges.
                    rows = inputs.shape[0] if drew else self._rows()
                    restore()
                    with _replaying(rng_state, self.device):
                        agree = self._agrees_in_ranges(inputs, targets, ghost_losses, squared, rows)
                    if not agree:
                        self._batched_path_mixes()
                        restore()
                        with _replaying(rng_state, self.device):
                            sums, losses = self._clipped_per_example(inputs, targets)
                if sums is None:
                    losses = ghost_losses
                    unrounded = [by_id[id(p)] for p in self.params]
            elif self.mode == "ghost":
                raise ValueError(
                    invalid(
                        "grad_sample_mode",
                        "'auto' or 'functorch' for a model whose layers run more than once "
                        "or in a configuration ghost clipping does not cover (see "
                        "gaussdp.ml._ghost)",
                        self.mode,
                    )
                )
            else:
                self.uncovered.add(key)
        if sums is None and unrounded is None:
            restore()
            sums, losses = self._clipped_per_example(inputs, targets)
        origin = self.origin()
        batches = batches_of([inputs, targets])
        if self.held:  # several calls form one step's batch
            batches |= self.pending_batches
            if self.pending_origin != _process_identity():
                origin = self.pending_origin or origin  # sums of another process stay its
        self.add_pending(sums, unrounded)
        self.pending_origin, self.pending_batches = origin, batches
        self.pending_rows += inputs.shape[0]
        assert losses is not None
        if losses.numel() == 0:
            return torch.tensor(float("nan"))
        return losses.mean()

    def check_batch(self, batch: int) -> None:
        """Refuse a batch above :data:`~gaussdp.ml._ghost.GHOST_MAX_BATCH` in a ghost run.

        A run takes the ghost path only where a Poisson batch exceeds the limit with
        probability at most :data:`~gaussdp.ml._ghost.GHOST_TAIL` (10⁻¹⁰⁰,
        :func:`~gaussdp.ml._ghost.ghost_run`); such a batch is refused rather than
        computed the per-example way (neighbours computed in different ways differ by
        more than the sensitivity bound). Raised before anything is captured, drawn or
        charged (the mask stream included).
        """
        if self.ghost_layers is not None:
            check_batch(batch)

    def _rows(self) -> int:
        """Examples per range of the per-example path (see :data:`PER_EXAMPLE_LIMIT`)."""
        return max(1, PER_EXAMPLE_LIMIT // self.noiser.dim)

    def _add(self, total: list[torch.Tensor], grads: Mapping[str, torch.Tensor]) -> None:
        """Clip a range of per-example gradients and add their sum to ``total`` (in place)."""
        sums = self.noiser.accumulate(
            [grads[k] for k in self.names], clip_factors(grads, self.max_grad_norm)
        )
        total[:] = sums if not total else [a + b for a, b in zip(total, sums, strict=True)]

    def _clipped_per_example(
        self, inputs: torch.Tensor, targets: torch.Tensor
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The per-example path of ``model.backward``: clipped sums and per-example losses.

        :meth:`_rows` examples at a time, so that memory stays bounded whatever the batch.
        """
        batch = inputs.shape[0]
        if batch == 0:
            grads, losses = self._per_example(inputs, targets)
            factors = torch.zeros(0, dtype=torch.float64, device=self.device)
            return self.noiser.accumulate([grads[k] for k in self.names], factors), losses
        total: list[torch.Tensor] = []
        parts = []
        rows = self._rows()
        for start in range(0, batch, rows):
            grads, losses = self._per_example(
                inputs[start : start + rows], targets[start : start + rows]
            )
            self._add(total, grads)
            parts.append(losses)
            del grads  # before the next range's are formed
        return total, torch.cat(parts)

    def _agrees_in_ranges(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        batched_losses: torch.Tensor,
        batched_squared: torch.Tensor,
        rows: int,
    ) -> bool:
        """Whether the per-example path gives the batched path's losses and squared norms.

        The per-example gradients are formed ``rows`` examples at a time and let go
        after their norms are taken (:meth:`_rows` examples: at most as much memory as
        the per-example path); the values of all examples are compared at once.
        """
        losses, norms = [], []
        for start in range(0, inputs.shape[0], rows):
            grads, part = self._per_example(
                inputs[start : start + rows], targets[start : start + rows]
            )
            losses.append(part)
            norms.append(_total_squared_norms(grads, part.shape[0]))
            del grads  # before the next range's are formed
        return _agree(batched_losses, torch.cat(losses)) and _agree(
            batched_squared, torch.cat(norms)
        )

    def _per_example(
        self, inputs: torch.Tensor, targets: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """:func:`per_example_gradients`, with a failure on one example explained."""
        assert self.loss_fn is not None
        try:
            self.inside = True
            return per_example_gradients(self.module, self.loss_fn, inputs, targets)
        except (RuntimeError, ValueError) as error:
            raise _one_example_error(error) from error
        finally:
            self.inside = False

    def _proven(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        leaves: list[Any],
        key: tuple[Any, ...],
    ) -> Proven | None:
        """The graph the batched path may run for this call: proven per-example independent.

        ``leaves`` are those of ``tree_flatten((args, kwargs))`` and ``key`` their
        :func:`_call_key`.

        The proof (:func:`gaussdp.ml._independence.prove`) is made once per call
        structure (``key``, see :func:`_call_key`), batch of one or not, and state of
        the modules (see :func:`_module_state`; global hooks); a change of any of these
        traces and proves the model again. The batched path runs the proven graph,
        never ``model.forward``, whose Python control flow may have changed since
        (state in lists, dicts, globals). Not proven (None): ``"ghost"`` raises,
        ``"auto"`` warns once and the call takes the per-example path.
        """
        from torch.nn.modules import module as torch_module

        state = tuple(_module_state(name, m) for name, m in self.module.named_modules())
        hooks = tuple(
            tuple(getattr(torch_module, h, {}))
            for h in (
                "_global_forward_hooks",
                "_global_forward_pre_hooks",
                "_global_backward_hooks",
                "_global_backward_pre_hooks",
            )
        )
        # A proof made on a batch of one holds for it only: size rules such as
        # x.repeat(x.size(0), 1) keeping the batch dimension can hold at B = 1 alone.
        ones = tuple(t.dim() > 0 and t.shape[0] == 1 for t in leaves if isinstance(t, torch.Tensor))
        full = (key, ones, state, hooks)
        if full not in self.proofs:
            from gaussdp.ml._independence import prove

            inside, self.inside = self.inside, True
            try:
                made = prove(
                    self.module,
                    self.expected,
                    args,
                    kwargs,
                    allowed_hook=lambda _, h: isinstance(h, _Watch) and h.engine is self,
                )
            finally:
                self.inside = inside
            if len(self.proofs) >= _MAX_PROOFS:  # the oldest is proven again if needed
                del self.proofs[next(iter(self.proofs))]
            self.proofs[full] = made
            if isinstance(made, str) and self.mode == "auto" and not self.warned:
                self.warned = True
                warnings.warn(
                    "grad_sample_mode='auto' computes per-example gradients with torch.func "
                    "(slower than ghost clipping) because the model's per-example "
                    f"independence could not be proven: {made}",
                    UserWarning,
                    stacklevel=4,
                )
        proof = self.proofs[full]
        if not isinstance(proof, str):
            return proof
        if self.mode == "ghost":
            raise ValueError(
                invalid(
                    "grad_sample_mode",
                    "'auto' or 'functorch' for a model whose per-example independence "
                    f"ghost clipping cannot prove ({proof})",
                    self.mode,
                )
            )
        return None

    def _verify_now(self, shapes: tuple[tuple[int, ...], ...]) -> bool:
        """Whether this batched call is checked against the per-example path.

        Calls 0, 1, 2, 4, 8, … are checked (a logarithmic share of the cost), and so
        is every call whose layer input shapes (``shapes``, from
        :func:`gaussdp.ml._ghost.signature`) were never checked. The check forms
        per-example gradients in ranges of :meth:`_rows` examples
        (:meth:`_agrees_in_ranges`), except for a batch that drew random numbers
        (dropout), checked at once: its masks depend on how many examples one pass
        draws them for, and every example whose clipped gradient is used is compared.
        """
        calls = self.batched_calls
        self.batched_calls += 1
        if shapes not in self.checked:
            self.checked.add(shapes)
            return True
        return calls & (calls - 1) == 0

    def _batched_path_mixes(self) -> None:
        """The batched path disagreed with the per-example one: fall back, or refuse.

        The batched path runs the proven graph and the per-example one the model's
        ``forward``: they differ if the model mixes examples in a way the proof missed,
        or if ``forward`` now takes another path than the one traced (it branches on
        Python state outside the proof's key: a list, a dict, a global).
        """
        cause = (
            "the model mixes examples (e.g. x - x.mean(0) or functional batch norm), or "
            "its forward no longer takes the path traced and proven for the batched pass "
            "(it branches on Python state such as a list, a dict or a global)"
        )
        if self.mode == "ghost":
            raise ValueError(
                invalid(
                    "grad_sample_mode",
                    "'auto' or 'functorch' for this model: on the whole batch its "
                    "outputs or gradient norms differ from those computed one example "
                    f"at a time, so {cause}",
                    self.mode,
                )
            )
        warnings.warn(
            "the batched path's outputs or gradient norms differ from those computed one "
            f"example at a time ({cause}): ghost clipping is switched off and per-example "
            "gradients are computed with torch.func",
            UserWarning,
            stacklevel=4,
        )
        self.ghost_layers = None

    # -- the loss.backward() path ----------------------------------------------------
    def forward(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The model's output for a training batch, with its gradient captured for the step.

        Returns the output of the per-example path (each example run on its own, vmap)
        or of the batched path when ghost clipping applies and is verified; either way
        it is detached from the parameters, and ``loss.backward()`` only records the
        gradient with respect to it (see :class:`PrivateModule`).
        """
        self.check_params()
        leaves, spec = tree_flatten((args, kwargs))
        refuse_mixed_rows(leaves, "model inputs")  # x.transpose(0, 1) of a batch tensor
        batch = _batch_of(leaves)
        self.check_batch(batch)
        # Its random layers draw from a secret state, the same in every re-run (_masks).
        record = _Record(self, leaves, spec, batch, self.masks.next())
        self.forward_calls += 1
        self.inside = True
        try:
            with _replaying(record.rng_state, self.device):
                output = self._record_forward(record)
        finally:
            self.inside = False
        out_leaves, out_spec = tree_flatten(output)
        if not all(isinstance(t, torch.Tensor) and t.shape[:1] == (batch,) for t in out_leaves):
            shapes = [getattr(t, "shape", type(t).__name__) for t in out_leaves]
            raise ValueError(
                invalid("model outputs", f"tensors with the {batch} examples first", shapes)
            )
        record.floating = [i for i, t in enumerate(out_leaves) if t.is_floating_point()]
        captured = _Capture.apply(  # type: ignore[no-untyped-call]
            # Detached: the user's backward stops at the capture and leaves the graph
            # of the batched path intact for the step.
            record,
            self.anchor,
            *(out_leaves[i].detach() for i in record.floating),
        )
        first = first_row(leaves)  # where a micro-batch x[a:b] lies in the batch
        captured, record.probe = self.loss_check.wrap(list(captured), batch, first)
        for i, tensor in zip(record.floating, captured, strict=True):
            out_leaves[i] = tensor
        self.records.append(record)
        return tree_unflatten(out_leaves, out_spec)

    def _record_forward(self, record: _Record) -> Any:
        if record.batch == 0:
            with torch.no_grad():
                args, kwargs = tree_unflatten(record.inputs, record.spec)
                return self.module(*args, **kwargs)
        key = _call_key(record.inputs, record.spec)
        args, kwargs = tree_unflatten(record.inputs, record.spec)
        proof = (
            self._proven(args, kwargs, record.inputs, key)
            if self.ghost_layers is not None and key not in self.uncovered
            else None
        )
        if proof is not None:
            assert self.ghost_layers is not None
            by_id = {id(p): p.detach().requires_grad_() for p in self.params}
            # The proven graph runs (not model.forward), on the model's own layers with
            # their trainable parameters swapped for these shadows (tied ones by each name).
            shadows = {n: by_id[id(p)] for n, p in proof.parameters if id(p) in by_id}
            arguments = proof.arguments(args, kwargs)
            output, record.io = recorded_forward(
                self.ghost_layers,
                self.copy_outputs,
                lambda: functional_call(proof.module, shadows, arguments),
                record.batch,
                lambda: _replaying(record.rng_state, self.device),
                record.restore,
            )
            if record.io is None and self.mode == "ghost":
                raise ValueError(
                    invalid(
                        "grad_sample_mode",
                        "'auto' or 'functorch' for a model whose layers run more than once "
                        "or in a configuration ghost clipping does not cover (see "
                        "gaussdp.ml._ghost)",
                        self.mode,
                    )
                )
            if record.io is None:
                self.uncovered.add(key)
            else:
                record.outputs = tree_flatten(output)[0]
                record.check = self._verify_now(signature(record.io, record.batch))
                if not record.check:
                    return output
                if _rng_moved(record.rng_state, self.device):
                    # Dropout masks depend on how many examples one pass draws them for:
                    # checked at once, every example (the whole batch's per-example
                    # gradients at the step); the step's ranges are the forward's.
                    record.rows = record.batch
                single = self._vmap_forward(record)  # in ranges, let go range by range
                if _all_agree(record.outputs, tree_flatten(single)[0]):
                    return output
                self._batched_path_mixes()
                record.io = None
                return single
        return self._vmap_forward(record)

    def _per_example_norms(self, record: _Record, cots: list[torch.Tensor | None]) -> torch.Tensor:
        """Squared norm bounds of the per-example path's gradients, range by range."""
        norms: list[torch.Tensor] = []
        self._vjp_per_example(
            record,
            cots,
            record.rows,
            lambda g: norms.append(_total_squared_norms(g, next(iter(g.values())).shape[0])),
        )
        return torch.cat(norms)

    def _vmap_forward(self, record: _Record) -> Any:
        """The output with every example run on its own (a batch of one, vmap)."""
        record.restore()
        params = {n: p.detach() for n, p in zip(self.names, self.params, strict=True)}
        buffers = {k: v.detach() for k, v in self.module.named_buffers()}
        batched = [i for i, t in enumerate(record.inputs) if isinstance(t, torch.Tensor)]
        out_spec: list[Any] = []

        def one(*examples: torch.Tensor) -> tuple[torch.Tensor, ...]:
            leaves = list(record.inputs)
            for i, t in zip(batched, examples, strict=True):
                leaves[i] = t.unsqueeze(0)
            args, kwargs = tree_unflatten(leaves, record.spec)
            out, spec = tree_flatten(functional_call(self.module, (params, buffers), args, kwargs))
            out_spec[:] = [spec]
            return tuple(_unbatch_one(t) for t in out)

        # In the ranges of examples the step's gradients take (the same dropout masks).
        parts = []
        with _replaying(record.rng_state, self.device), torch.no_grad(), vmap_attention():
            try:
                for start in range(0, record.batch, record.rows):
                    chunk = (record.inputs[i][start : start + record.rows] for i in batched)
                    parts.append(vmap(one, randomness="different")(*chunk))
            except (RuntimeError, ValueError) as error:
                raise _one_example_error(error) from error
        outs = parts[0] if len(parts) == 1 else [torch.cat(o) for o in zip(*parts, strict=True)]
        return tree_unflatten(list(outs), out_spec[0])

    def take_records(self) -> None:
        """Add the clipped sums of every captured record since the last step to :attr:`pending`.

        Raises before anything is drawn or added if two model outputs reached one
        backward pass (their examples would count twice), and drops every sum of the
        step if the loss check refused a loss after one of them was captured (the
        other micro-batches of a batch: a refusal that depends on the data or the
        batch size would choose the examples released).
        """
        captured = [r for r in self.records if r.grads is not None]
        self.records = []
        if any(r.probe is not None and r.probe.spoiled for r in captured):
            self.pending = None
            self.pending_rows = 0
            self.loss_check.drop()
            raise RuntimeError(
                "optimizer.step() after loss.backward() refused a loss of this step: the "
                "gradients captured before the refusal (other micro-batches of the "
                "batch) are dropped, not released; draw the next batch and train on it "
                "with a per-example loss (nothing was drawn or charged)"
            )
        moments = [r.captured_at for r in captured]
        if len(set(moments)) != len(moments):
            raise RuntimeError(
                "two outputs of the private model reached one loss.backward(): each call of "
                "the model in training must be one set of distinct examples followed by "
                "its own backward (call the model once per batch; evaluate under "
                "torch.no_grad())"
            )
        self.loss_check.stepped([r.probe for r in captured])
        exact: list[torch.Tensor] | None = None
        unrounded: list[torch.Tensor] | None = None
        for record in captured:
            # float64 where the step has a ghost sum already (module notes of _ghost)
            first = self.unrounded is None and unrounded is None
            sums, ghost = self._finish(record, float32=first)
            if ghost:
                unrounded = sums if unrounded is None else _added(unrounded, sums)
            else:
                exact = sums if exact is None else _added(exact, sums)
        self.add_pending(exact, unrounded)  # all or nothing, should a record raise

    def _cotangents(self, record: _Record) -> list[torch.Tensor | None]:
        """∂loss/∂output per output leaf, times B for a mean over the batch (per-example)."""
        assert record.grads is not None
        scale = float(record.batch) if self.loss_reduction == "mean" else 1.0
        return [None if g is None else g * scale for g in record.grads]

    def _finish(self, record: _Record, *, float32: bool) -> tuple[list[torch.Tensor], bool]:
        """A record's clipped sums, and whether they are unrounded ghost sums (else integers)."""
        if record.batch == 0:
            empty = [p.new_zeros((0, *p.shape)) for p in self.params]
            factors = torch.zeros(0, dtype=torch.float64, device=self.device)
            return self.noiser.accumulate(empty, factors), False
        cots = self._cotangents(record)
        if record.io is not None:
            assert self.ghost_layers is not None
            assert record.outputs is not None
            pairs = [
                (record.outputs[i], c)
                for i, c in zip(record.floating, cots, strict=True)
                if c is not None
            ]
            deltas = torch.autograd.grad(
                [o for o, _ in pairs],
                [out for layer in record.io for out in layer.outputs],
                [c for _, c in pairs],
                allow_unused=True,
            )
            clip, unit = self.max_grad_norm, self.noiser.unit
            by_id, squared = clipped_sums(
                record.io,
                deltas,
                record.batch,
                _squared_norms_upper,
                lambda sq: _factors_from_squared(sq, clip, GHOST_MARGIN) / unit,
                float32=float32,
            )
            if not record.check or _agree(squared, self._per_example_norms(record, cots)):
                return [by_id[id(p)] for p in self.params], True
            self._batched_path_mixes()
        total: list[torch.Tensor] = []
        self._vjp_per_example(record, cots, record.rows, lambda g: self._add(total, g))
        return total, False

    def _vjp_per_example(
        self,
        record: _Record,
        cots: list[torch.Tensor | None],
        rows: int,
        each: Callable[[dict[str, torch.Tensor]], None],
    ) -> None:
        """Each example's gradient of ⟨output, cotangent⟩, the example run on its own.

        ``rows`` examples at a time (those of the forward pass, for its dropout masks),
        each range's gradients handed to ``each`` and let go before the next.
        """
        record.restore()
        params = {n: p.detach() for n, p in zip(self.names, self.params, strict=True)}
        buffers = {k: v.detach() for k, v in self.module.named_buffers()}
        batched = [i for i, t in enumerate(record.inputs) if isinstance(t, torch.Tensor)]
        used = [(i, c) for i, c in zip(record.floating, cots, strict=True) if c is not None]

        def one(
            p: dict[str, torch.Tensor],
            examples: tuple[torch.Tensor, ...],
            cot: tuple[torch.Tensor, ...],
        ) -> torch.Tensor:
            leaves = list(record.inputs)
            for i, t in zip(batched, examples, strict=True):
                leaves[i] = t.unsqueeze(0)
            args, kwargs = tree_unflatten(leaves, record.spec)
            out = tree_flatten(functional_call(self.module, (p, buffers), args, kwargs))[0]
            terms = [(_unbatch_one(out[i]) * c).sum() for (i, _), c in zip(used, cot, strict=True)]
            return torch.stack(terms).sum() if terms else out[0].new_zeros(())

        per_example = vmap(grad(one), in_dims=(None, 0, 0), randomness="different")
        self.inside = True
        try:
            with _replaying(record.rng_state, self.device), vmap_attention():
                for start in range(0, record.batch, rows):
                    span = slice(start, start + rows)
                    try:
                        grads = per_example(
                            params,
                            tuple(record.inputs[i][span] for i in batched),
                            tuple(c[span] for _, c in used),
                        )
                    except (RuntimeError, ValueError) as error:
                        raise _one_example_error(error) from error
                    each(dict(grads))
                    del grads  # before the next range's are formed
        finally:
            self.inside = False


class _Record:
    """One training forward call of the private model (the loss.backward() path)."""

    def __init__(
        self, engine: _Engine, inputs: list[Any], spec: Any, batch: int, rng_state: RngState
    ) -> None:
        self.engine = engine
        self.inputs = inputs
        self.spec = spec
        self.batch = batch
        self.rng_state = rng_state
        # Each run after the first sees the inputs as the first did (in-place changes).
        self.restore = input_guard(inputs) if engine.ghost_layers is not None else _nothing
        self.io: list[LayerRecord] | None = None  # ghost path: each layer's call
        self.outputs: list[torch.Tensor] | None = None  # ghost path: outputs in the graph
        self.check = False  # ghost path: compare with the per-example path at the step
        self.floating: list[int] = []  # indices of the output leaves that carry gradients
        # Examples per range of the per-example path (PER_EXAMPLE_LIMIT): the forward
        # pass and the step's gradients take the same ranges, hence the same dropout masks.
        self.rows = engine._rows()
        self.origin = engine.origin()  # the process whose examples these are
        self.batches = batches_of(inputs)  # the loader's batches they came from
        self.grads: list[torch.Tensor | None] | None = None
        self.captured_at = -1
        self.probe: Probe | None = None  # the loss check of a probed step (_loss_check)

    def capture(self, grads: tuple[torch.Tensor | None, ...]) -> None:
        if self.grads is None:
            self.grads = list(grads)
        else:  # a second backward through the same output adds up, as .grad does
            self.grads = [
                b if a is None else a if b is None else a + b
                for a, b in zip(self.grads, grads, strict=True)
            ]
        self.captured_at = self.engine.forward_calls


class _Capture(torch.autograd.Function):
    """Identity on the model's outputs whose backward records ∂loss/∂output and stops there.

    The autograd node holds its record weakly: the record holds the captured outputs
    (through its loss-check probe), whose node this is, and a strong reference would
    close a cycle through torch's C++ graph that Python's garbage collector cannot
    follow — every step's record, with its batch's activations and graph, was kept for
    the life of the process (≈ 50 MB a step on the transformer of
    ``benchmarks/dpsgd.py``). The engine holds each record until the step that uses
    or drops it; a backward through the outputs of a record no step will use (dropped,
    or already stepped on) records nothing, as before, when its gradients went to a
    record no step read.
    """

    @staticmethod
    def forward(ctx: Any, record: _Record, anchor: torch.Tensor, *outputs: torch.Tensor) -> Any:
        ctx.record = weakref.ref(record)
        return tuple(o.view_as(o) for o in outputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> Any:
        record = ctx.record()
        if record is not None:
            record.capture(grads)
        return (None, None, *(None for _ in grads))


RngState = tuple[torch.Tensor, torch.Tensor | None]


def _added(a: list[torch.Tensor], b: list[torch.Tensor]) -> list[torch.Tensor]:
    return [x + y for x, y in zip(a, b, strict=True)]


def _nothing() -> None:
    """No inputs to restore (a single run on them)."""


def _rng_snapshot(device: torch.device) -> RngState:
    """The state of torch's generators that a forward pass on ``device`` draws from."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


@contextlib.contextmanager
def _replaying(state: RngState, device: torch.device) -> Iterator[None]:
    """Run with the generators set to ``state`` (same dropout masks), then restore them.

    ``torch.random.fork_rng(devices=[device])`` without its per-call device lookup.
    """
    saved = _rng_snapshot(device)
    _set_rng(state, device)
    try:
        yield
    finally:
        _set_rng(saved, device)


def _set_rng(state: RngState, device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def _rng_moved(state: RngState, device: torch.device) -> bool:
    """Whether torch's generators moved since ``state`` (a pass drew random numbers)."""
    now = _rng_snapshot(device)
    if not torch.equal(now[0], state[0]):
        return True
    return now[1] is not None and state[1] is not None and not torch.equal(now[1], state[1])


def _autocasting(device: torch.device) -> bool:
    """Whether ``torch.autocast`` is on for the CPU or for ``device``."""
    return torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled(device.type)


@contextlib.contextmanager
def _without_autocast(device: torch.device) -> Iterator[None]:
    """Autocast off on the CPU and on ``device``: float32 products stay float32.

    The certified norm bounds and the error bounds of the sums (:func:`_chunked_bounds`,
    :mod:`gaussdp.ml._ghost`) take the unit roundoff of the tensors' dtype; autocast
    would run float32 ``mm``, ``bmm`` and ``linalg.vecdot`` in bfloat16 or float16
    (a review: 1.0002·C under CPU bfloat16 autocast).
    """
    with contextlib.ExitStack() as stack:
        for kind in {"cpu", device.type}:
            stack.enter_context(torch.autocast(kind, enabled=False))
        yield


def _holds(model: nn.Module, place: tuple[tuple[str, ...], str], param: torch.Tensor) -> bool:
    """Whether ``param`` is still registered at ``place`` (submodule path, name) in ``model``.

    Through the ``_modules`` and ``_parameters`` dicts, which ``model.parameters()`` walks.
    """
    path, name = place
    module = model
    for part in path:
        inner = module._modules.get(part)
        if inner is None:
            return False
        module = inner
    return module._parameters.get(name) is param


def _batch_of(leaves: list[Any]) -> int:
    """The number of examples: the first dimension, shared by every tensor argument."""
    sizes = {t.shape[0] if t.dim() else None for t in leaves if isinstance(t, torch.Tensor)}
    if len(sizes) != 1 or None in sizes:
        raise ValueError(
            invalid(
                "model inputs",
                "tensors with the examples along the first dimension, all of one size",
                sorted(sizes, key=str),
            )
        )
    (batch,) = sizes
    assert batch is not None
    return int(batch)


def _module_state(name: str, module: torch.nn.Module) -> tuple[Any, ...]:
    """What a proof of ``module`` (named ``name`` in the model) depends on, for its cache key.

    The module's identity and type, an instance-level ``forward``/``_call_impl``, the
    handles of its hooks (so a hook swapped for another is a change), its attributes
    that are None, bools, numbers or strings (flags a forward may read), and the
    identity of each parameter, buffer and tensor attribute (the proven graph holds
    those objects: one assigned anew is traced again; a change in place is not a
    change). Other Python state a forward reads (a list, a global) is not seen: the
    batched path runs the proven graph, where it is fixed.
    """
    own = vars(module)
    flags, tensors = [], []
    for k, v in own.items():  # one pass over the instance's attributes
        if v is None or isinstance(v, _FLAG_TYPES):
            flags.append((k, type(v), v))
        elif isinstance(v, torch.Tensor):
            tensors.append((k, id(v)))
    return (
        name,
        id(module),
        type(module),
        id(own.get("forward")),
        id(own.get("_call_impl")),
        tuple(getattr(module, "_forward_hooks", ())),
        tuple(getattr(module, "_forward_pre_hooks", ())),
        tuple(getattr(module, "_backward_hooks", ())),
        tuple(getattr(module, "_backward_pre_hooks", ())),
        tuple(flags),
        tuple([(k, id(v)) for k, v in module._parameters.items()]),
        tuple([(k, id(v)) for k, v in module._buffers.items()]),
        tuple(tensors),
    )


#: The attribute types :func:`_module_state` keys by value (flags a forward may read).
_FLAG_TYPES = (bool, int, float, str)


def _call_key(leaves: list[Any], spec: Any) -> tuple[Any, ...]:
    """A training call's structure: the argument tree and every leaf but the batch size.

    Tensors count by dtype and shape beyond the first dimension, other leaves by
    ``repr``, except numpy arrays: by dtype, shape and a SHA-256 of their bytes
    (their contents become constants of the traced graph, and numpy abbreviates the
    repr of more than 1000 elements: two arrays once shared a key and the second
    call ran the graph of the first).
    """
    return (str(spec), *(_leaf_key(t) for t in leaves))


def _leaf_key(leaf: Any) -> Any:
    """One leaf of :func:`_call_key`."""
    if isinstance(leaf, torch.Tensor):
        return (leaf.dtype, tuple(leaf.shape[1:]))
    if isinstance(leaf, np.ndarray):
        if leaf.dtype.hasobject:  # bytes would be pointers: the full repr instead
            with np.printoptions(threshold=sys.maxsize):
                return ("ndarray", repr(leaf))
        content = hashlib.sha256(np.ascontiguousarray(leaf).tobytes()).hexdigest()
        return ("ndarray", leaf.dtype.str, leaf.shape, content)
    return repr(leaf)


def _unbatch_one(t: torch.Tensor) -> torch.Tensor:
    """An output leaf of a batch of one, without its batch dimension."""
    if t.dim() == 0 or t.shape[0] != 1:
        raise ValueError(
            invalid("model outputs", "tensors with the examples first", tuple(t.shape))
        )
    return t.squeeze(0)


def _total_squared_norms(grads: Mapping[str, torch.Tensor], batch: int) -> torch.Tensor:
    """Upper bounds on each example's squared gradient norm over all blocks (float64)."""
    device = next(iter(grads.values())).device
    squared = torch.zeros(batch, dtype=torch.float64, device=device)
    for bound in _squared_norms_upper(list(grads.values())):
        squared += bound
    return squared


def _agree(batched: torch.Tensor, single: torch.Tensor) -> bool:
    """Whether per-example values from the batched path match those of the per-example path.

    Float rounding differs between the two (other kernels, other summation orders, norm
    bounds with a relative excess up to 2.4·10⁻⁴), so each value must be within a
    relative 10⁻³ of its counterpart, or within 10⁻⁶ of the largest value; non-finite
    values must sit at the same places.
    """
    a, b = batched.detach().to(torch.float64), single.detach().to(torch.float64)
    if a.shape != b.shape:
        return False
    finite = torch.isfinite(a)
    if not torch.equal(finite, torch.isfinite(b)):
        return False
    a, b = a[finite], b[finite]
    if a.numel() == 0:
        return True
    floor = 1e-6 * float(torch.maximum(a.abs().max(), b.abs().max()))
    return bool(((a - b).abs() <= 1e-3 * torch.maximum(a.abs(), b.abs()) + floor).all())


def _all_agree(batched: list[torch.Tensor], single: list[Any]) -> bool:
    """:func:`_agree` for every output leaf of the two paths."""
    return len(batched) == len(single) and all(
        _agree(a, b) for a, b in zip(batched, single, strict=True)
    )


def _one_example_error(error: Exception) -> ValueError:
    return ValueError(
        "model must compute each example's output from that example alone: per-example "
        "clipping runs it on batches of one example, where it raised "
        f"{type(error).__name__}: {error} (batch normalisation and other layers that "
        "mix examples cannot be trained with DP-SGD; use GroupNorm or LayerNorm)"
    )


def _not_copied(name: str, obj: object) -> TypeError:
    """The refusal of a copy, deepcopy or pickle (``torch.save``) of a private model/optimizer."""
    return TypeError(
        f"{name} must be saved or copied through its state_dict(), not copied or pickled "
        "whole (a copy would draw the noise the original draws next, or release its clipped "
        "sums again): load the state_dict() into a new make_private(), got a "
        f"{type(obj).__name__} to copy or pickle"
    )


class PrivateModule(nn.Module):
    r"""The model wrapped for DP-SGD: call it and ``loss.backward()`` as usual, or :meth:`backward`.

    **The PyTorch idiom.** ``loss = criterion(model(x), y); loss.backward();
    optimizer.step()``. A training call (gradients enabled) runs each example on its
    own (``vmap`` over batches of one; or, for models ghost clipping covers, the
    batched path: the model's graph traced with ``torch.fx`` and proven to keep
    examples apart, run in place of its ``forward``) and returns the output detached from the
    parameters: ``loss.backward()`` records G = ∂loss/∂output and stops there. At
    ``optimizer.step()`` example i's gradient is computed as the gradient of
    ⟨outputᵢ, s·Gᵢ⟩ on that example alone (``torch.func``), clipped to C, summed and
    noised. The rule this assumes: **the loss is the sum (``loss_reduction="sum"``)
    or the mean over the batch (``"mean"``, torch's default; then s = B, the batch
    size) of per-example terms, each depending on its own example's output only** —
    so s·Gᵢ is example i's own ∂ℓᵢ/∂outputᵢ. A loss that couples examples (batch-wide
    softmax, contrastive losses over the batch) breaks the per-example bound and is
    refused: on probed steps, and on any step whose loss has a form not checked
    before, ``loss.backward()`` first checks, with the loss's second
    derivative and a second evaluation of the loss with other examples' outputs
    changed, that no example's Gᵢ depends on another example's output
    (:mod:`gaussdp.ml._loss_check`, which also says what that check cannot see).
    On every step the outputs are a ``torch.Tensor`` subclass that makes the mean
    of ``cross_entropy`` / ``nll_loss`` over class-index targets divide by the number
    of targets, ``ignore_index`` ones included (torch's divides by those not ignored,
    the other examples' labels), and refuses unequal class weights with it. A
    wrong ``loss_reduction`` breaks the bound too and is not detected (each clipped
    gradient would then scale with the actual batch size, and one example could move
    the sum by about 2C).
    Any number of outputs (tuples, dicts) works.

    **Regularisers.** Terms of the loss that depend on the parameters directly (such
    as λ‖w‖² over ``model.parameters()``) reach ``param.grad`` through the ordinary
    backward pass; the step adds that gradient, unclipped and un-noised, to the noisy
    average. This is private only if such terms do not depend on the data: data must
    reach the loss only through the private model's outputs, and no parameter may
    meet those outputs outside the model (``model(x) @ w`` is refused on probed
    steps). A call of the *unwrapped* model, or of any of its modules that holds a
    trainable parameter, with gradients enabled since the last ``zero_grad()``, or a
    backward pass since then that reached a tensor such a call made earlier (its
    output, a dataclass's field, an auxiliary loss it kept as an attribute:
    :mod:`gaussdp.ml._raw_calls`), makes the step refuse if any parameter holds a
    gradient. Not detected: a parameter used on data outside every module call
    (``net[0].weight @ x.T`` in the loss, ``net[0].forward(x)``, which runs no
    module hook).

    **One call per set of examples.** Each training call is one set of distinct
    examples; several calls each followed by their own ``loss.backward()`` before one
    ``optimizer.step()`` form that step's batch (gradient accumulation, as with
    :meth:`backward`). Two outputs reaching one backward pass (a siamese loss, or
    the same examples twice) would count examples twice: the step refuses. Evaluate
    under ``torch.no_grad()``.

    **Examples along the first dimension** of every input and output, as the data
    loader's batches hold them: a time-major layer (``batch_first=False``) gets its
    input transposed inside the model's ``forward``. A view of a batch tensor whose
    rows are not each inside one example's row (``x.transpose(0, 1)``) is refused
    (``ValueError``, before anything is drawn; :mod:`gaussdp.ml._batches`); a copy
    (``.contiguous()``) is not seen.

    **The fast path.** :meth:`backward` (``model.backward(x, y)`` with the
    ``loss_fn`` given to :func:`make_private`) saves the extra forward pass.

    Examples
    --------
    See :func:`make_private`.
    """

    def __init__(self, engine: _Engine) -> None:
        super().__init__()
        self._module = engine.module
        self._engine = engine

    @property
    def module(self) -> nn.Module:
        """The wrapped model."""
        return self._module

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Refused (``TypeError``): copy, pickle and ``torch.save`` it through
        :meth:`state_dict`."""
        raise _not_copied("model", self)

    def __deepcopy__(self, memo: dict[int, Any]) -> nn.Module:
        """A deep copy of the wrapped network, not private (an EMA or BYOL target).

        The copy is another network (:class:`_Watch`): of the wrapped network's class,
        with its own parameters and the keys of :meth:`state_dict`, no engine, no
        checks; training it is not private, and its outputs in the private model's loss
        are keys the loss check does not see. ``make_private`` on it asks for the
        history of this model's run (``resume``), as on the wrapped network.
        """
        return copy.deepcopy(self._module, memo)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The model's output; with gradients enabled, ready for a private ``loss.backward()``.

        Under ``torch.no_grad()`` (evaluation, inference) this is the wrapped model's
        forward pass; on a step the loss check probes, while the data loader's last
        batch awaits its step, its outputs come as probed tensors, the keys of a
        stop-gradient loss (:meth:`gaussdp.ml._loss_check.LossCheck.wrap_keys`), and
        in training mode its random layers draw from a fresh secret state
        (:mod:`gaussdp.ml._masks`). With gradients enabled it
        is the training call of the ``loss.backward()`` path (see the class notes):
        every tensor argument holds the examples along its first dimension, and so
        must every output.
        """
        engine = self._engine
        if torch.is_grad_enabled() and engine.params:
            return engine.forward(args, kwargs)
        if not self._module.training:
            return self._module(*args, **kwargs)  # keys on probed steps: _Engine.keys
        # Keys in training mode: dropout masks from a fresh secret state (_masks), as in
        # the training passes (rev28-ml: 2.91·C from torch's public generator).
        with _replaying(engine.masks.next(), engine.device):
            return self._module(*args, **kwargs)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's ``state_dict``, with its own keys (no ``_module.`` prefix)."""
        return self._module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        """Load a ``state_dict`` of the wrapped model (the keys of :meth:`state_dict`)."""
        return self._module.load_state_dict(state_dict, *args, **kwargs)

    def backward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-example gradients, clipped and summed for the next ``optimizer.step()``.

        The private replacement of ``loss_fn(model(inputs), targets).backward()``;
        it does not fill ``param.grad`` (the optimizer's step does, with the noisy
        average). Returns the mean per-example loss (not private: for monitoring
        only), NaN for an empty batch.
        """
        return self._engine.backward(inputs, targets)


class DPOptimizer(torch.optim.Optimizer):
    """The optimizer wrapped for DP-SGD: :meth:`step` adds the noise, steps and accounts.

    Each :meth:`step` takes the clipped sum left by ``model.backward``, adds the noise,
    divides by the expected batch size qN, writes it to ``param.grad``, calls the
    wrapped optimizer's ``step`` and composes ``Subsampled(Gaussian(σ), q)`` into
    its :class:`~gaussdp.accounting.PLDAccountant` (in bulk, when the accountant or
    :meth:`privacy_spent` is asked for). For float32 parameters the ``param.grad``
    tensors are views of one buffer that the next step overwrites, as
    ``loss.backward()`` would accumulate into them; copy a gradient to keep it.

    It is a :class:`torch.optim.Optimizer` whose ``param_groups``, ``state`` and
    ``defaults`` are the wrapped optimizer's, so learning-rate schedulers take it
    directly (``StepLR(optimizer, ...)``, ``ReduceLROnPlateau(optimizer)``).

    Examples
    --------
    See :func:`make_private`.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        engine: _Engine,
        *,
        accountant: AccountantKind = "pld",
        ledger: Ledger | None = None,
        filter: PrivacyFilter | None = None,
        reserve_steps: int = 1,
    ) -> None:
        # Optimizer.__init__ is not called: every optimizer attribute is the wrapped one's.
        self._optimizer = optimizer
        self._engine = engine
        self._kind = check_accountant(accountant)
        self._accountant: Accountant = _new_accountant(self._kind)
        self._steps = 0
        self._unaccounted = 0  # private steps taken but not yet composed into the accountant
        # Steps with σ = 0 (not private), this run's and loaded ones: ε is then infinite.
        self._free_steps = 0
        self._loaded_steps = 0
        self._loaded = False  # a history was loaded: a second load_state_dict is refused
        self._charger: Charger | None = None
        # The loaded history's steps and where each was charged (see load_state_dict).
        self._segments: list[Segment] = []
        if ledger is not None or filter is not None:
            check_spender(ledger, filter)
            if engine.noiser.noise_multiplier == 0:
                raise ValueError(
                    invalid(
                        "noise_multiplier",
                        "> 0 with a ledger or filter (a step without noise is not private)",
                        0.0,
                    )
                )
            self._charger = Charger(
                self.step_event,
                ledger=ledger,
                filter=filter,
                block=reserve_steps,
                label="DP-SGD",
                what="DP-SGD step",
                detail={
                    "kind": "dpsgd",
                    "noise_multiplier": engine.noiser.noise_multiplier,
                    "max_grad_norm": engine.max_grad_norm,
                    "sample_rate": engine.sample_rate,
                    "noise": engine.noiser.noise,
                    # Marks this run's entries: a checkpoint's steps are charged here
                    # iff the ledger holds their run's entries (load_state_dict).
                    "run": secrets.token_hex(16),
                },
                rng=engine.noiser.rng,
            )
        self._grads: torch.Tensor | None = None  # one float32 buffer behind every param.grad

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The wrapped optimizer."""
        return self._optimizer

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        """The wrapped optimizer's parameter groups (e.g. to change the learning rate)."""
        return self._optimizer.param_groups

    @property
    def state(self) -> Any:  # type: ignore[override]
        """The wrapped optimizer's per-parameter state (e.g. momentum buffers)."""
        return self._optimizer.state

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        """The wrapped optimizer's default hyper-parameters."""
        return self._optimizer.defaults

    def __repr__(self) -> str:
        return f"DPOptimizer({self._optimizer!r}, noise_multiplier={self.noise_multiplier})"

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Refused (``TypeError``): copy, deepcopy, pickle and ``torch.save`` it through
        :meth:`state_dict`."""
        raise _not_copied("optimizer", self)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Refused: the private parameters are fixed when :func:`make_private` is called."""
        raise ValueError(
            invalid(
                "param_group",
                "added before make_private (the clipped, noised parameters are fixed there)",
                param_group,
            )
        )

    @property
    def noise_multiplier(self) -> float:
        """σ: the noise standard deviation is σ·``max_grad_norm``."""
        return self._engine.noiser.noise_multiplier

    @property
    def max_grad_norm(self) -> float:
        """C, the per-example clipping norm."""
        return self._engine.max_grad_norm

    @property
    def sample_rate(self) -> float:
        """q, the Poisson sampling rate."""
        return self._engine.sample_rate

    @property
    def expected_batch_size(self) -> float:
        """qN, the divisor of the noisy gradient sum."""
        return self._engine.expected_batch_size

    @property
    def noise_std(self) -> float:
        """Standard deviation of the noise added to the gradient sum (see SumNoiser)."""
        return self._engine.noiser.noise_std

    @property
    def steps(self) -> int:
        """The number of steps taken by this optimizer (not counting loaded ones)."""
        return self._steps

    @property
    def accountant(self) -> Accountant:
        """A copy of the accountant holding this optimizer's steps (loaded ones included)."""
        return self._composed().copy()

    @property
    def accountant_kind(self) -> AccountantKind:
        """``"pld"`` or ``"rdp"``, as chosen in :func:`make_private`."""
        return self._kind

    def _composed(self) -> Accountant:
        """The accountant with every step taken composed in (steps are composed in bulk)."""
        if self._unaccounted:
            self._accountant.compose(self.step_event, count=self._unaccounted)
            self._unaccounted = 0
        return self._accountant

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear ``param.grad`` and any clipped sum or captured gradient not yet stepped."""
        self._optimizer.zero_grad(set_to_none=set_to_none)
        engine = self._engine
        engine.pending = engine.pending_origin = None
        engine.pending_batches = frozenset()
        engine.pending_rows = 0
        engine.records = [r for r in engine.records if r.grads is None]
        engine.raw_forward = engine.raw_backward = False

    def step(self, closure: None = None) -> None:  # type: ignore[override]
        """Add noise to the clipped gradient sum, step the wrapped optimizer, account the step.

        The clipped sum comes from ``loss.backward()`` on the private model's outputs
        and/or ``model.backward(x, y)`` since the last step. ``param.grad`` becomes the
        noisy sum over the expected batch size qN, plus whatever gradient the
        parameters already held (data-independent regularisers, see
        :class:`PrivateModule`). ``closure`` must be None: DP-SGD takes exactly one
        noisy gradient per step. It runs with ``torch.autocast`` off (the norm bounds
        and sums assume the products of the tensors' own dtype), as does
        :meth:`PrivateModule.backward`.

        Raises
        ------
        RuntimeError
            If no gradient was captured since the last step (an empty batch must
            still go through the model and ``loss.backward()``, or
            ``model.backward``), if two outputs reached one backward pass, if a
            probed output's gradient arrived without the loss check of
            :mod:`gaussdp.ml._loss_check`, if the loss check refused a loss after
            some of the step's gradients were captured (they are dropped), or if
            the unwrapped model or one of its modules with trainable parameters ran
            with gradients enabled and parameters hold gradients.
            Nothing is drawn or accounted. Also in a process forked from inside this
            step (a hook): the parent paid for the step and draws its noise, so the
            child draws none, changes no parameter and drops the clipped sum (the
            parent releases it). Also in a process forked after the batch was drawn
            or its backward ran (outside a step): the batch and its clipped sums
            belong to the process that drew and computed them (two releases of one
            Poisson sample are not two independently subsampled steps), so the child
            drops them, charges and draws nothing, whether or not steps are charged;
            a child that draws a batch from the data loader and runs backward on it
            takes steps of its own. Also, with the same effect, for sums of a batch
            other than the data loader's last in this process (the tensors of a batch
            a forked child's parent drew, a batch kept while the next was drawn), of
            two batches, or of a batch a step already released: each batch the loader
            hands out is released by one step (:mod:`gaussdp.ml._batches`). Also on
            the optimizer of a make_private whose model a later make_private took
            over (``resume``): its steps would be missing from the later history.
        ValueError
            If ``closure`` is given, or a trainable parameter of the model was
            reassigned since :func:`make_private`; nothing is drawn or accounted.
        BudgetExceededError
            If the ledger or filter of :func:`make_private` refuses the step: raised
            before the noise is drawn and before the parameters change; the clipped
            sum is kept (a later ``step()`` retries it).
        """
        engine = self._engine
        if _autocasting(engine.device):  # the norms and sums in the parameters' dtype
            with _without_autocast(engine.device):
                return self.step(closure)
        if closure is not None:
            raise ValueError(
                invalid("closure", "None (DP-SGD steps once per noisy gradient)", closure)
            )
        if engine.retired:
            raise RuntimeError(
                invalid(
                    "optimizer.step()",
                    "called on the optimizer of the last make_private of the model (a "
                    "later one took it over; its steps would be missing from that history)",
                    "the optimizer of an earlier make_private",
                )
            )
        engine.refuse_foreign()  # sums of another process: dropped, nothing drawn or charged
        engine.refuse_raw_calls()
        engine.refuse_rows()  # beyond the loader's current batch: the same
        engine.check_params()
        batches = engine.pending_batches if engine.held else frozenset()
        batches = batches.union(*(r.batches for r in engine.records if r.grads is not None))
        rows = engine.pending_rows + sum(r.batch for r in engine.records if r.grads is not None)
        engine.take_records()  # added to engine.pending
        sums = engine.pending  # the ghost sums rounded once (see _Engine.pending)
        if sums is None:
            raise RuntimeError(
                "optimizer.step() must follow loss.backward() on the private model's output "
                "or model.backward(inputs, targets) (also for an empty batch)"
            )
        # Kept until the noise is added, so a refused step loses nothing.
        engine.pending, engine.pending_origin = sums, _process_identity()
        engine.pending_batches, engine.pending_rows = batches, rows  # for refuse_rows
        # BudgetExceededError here: nothing drawn or changed. Steps take turns.
        with contextlib.nullcontext() if self._charger is None else self._charger.run():
            if self._grads is None:
                self._grads = torch.empty(engine.noiser.dim, dtype=torch.float32)
            # Copies: with zero_grad(set_to_none=False) the gradients are (zeroed) views of the
            # buffer that release() is about to overwrite.
            regularisers = [None if p.grad is None else p.grad.clone() for p in engine.params]
            # Counted before the draw, as the charger counts the run: a release or a wrapped
            # optimizer that raises after the noise is in param.grad (or in its views of
            # self._grads) is still a step taken; a failure before the draw over-counts.
            self._steps += 1
            engine.carried += 1
            if engine.noiser.noise_multiplier > 0:
                self._unaccounted += 1
            else:
                self._free_steps += 1
            if engine.sampler is not None:  # tagged or not, the batch is released once
                engine.sampler._released = True
            if self._charger is not None:
                try:
                    self._charger.check_draw()  # a step the parent began, continued in a child
                except RuntimeError:
                    engine.pending = engine.pending_origin = None  # the parent releases them
                    engine.pending_rows = 0
                    raise
            noisy = engine.noiser.release(
                sums, scale=1.0 / engine.expected_batch_size, out=self._grads
            )
            engine.pending = engine.pending_origin = None
            engine.pending_rows = 0
            for param, average, extra in zip(engine.params, noisy, regularisers, strict=True):
                update = average.to(param.device, param.dtype).reshape(param.shape)
                param.grad = update if extra is None else update + extra
            self._optimizer.step()

    @property
    def step_event(self) -> Event:
        """One step as the accountants, the filter and the ledger compose it.

        ``Subsampled(LatticeGaussian, sample_rate=q)`` on the secure path: the lattice
        mechanism actually run on a Poisson sample (Abadi et al. 2016 §3.1), which
        accountants take through the smoothing argument (μ-GDP plus its slack,
        :class:`gaussdp.LatticeGaussian`); ``Subsampled(Gaussian(σ), q)`` for
        ``noise="insecure-float"``.

        Raises
        ------
        ValueError
            With σ = 0: a step without noise is no privacy event (ε is infinite).
        """
        noiser = self._engine.noiser
        mechanism: Gaussian | LatticeGaussian | None = noiser.lattice
        if mechanism is None:
            if noiser.noise_multiplier == 0:
                raise ValueError(invalid("noise_multiplier", "> 0 for a privacy event", 0.0))
            mechanism = Gaussian(sigma=noiser.noise_multiplier)
        # Abadi et al. 2016 §3.1: each step is the Poisson-subsampled Gaussian mechanism.
        return Subsampled(mechanism, sample_rate=self._engine.sample_rate)

    @property
    def history(self) -> Composed:
        """Every private step taken, loaded ones included, as one event (what is charged).

        One ``SelfComposed(step event, count)`` per configuration, in the order first
        run, so a resumed run has the history of an uninterrupted one.
        """
        events = self._composed().events
        return Composed(tuple(e if c == 1 else SelfComposed(e, c) for e, c in events))

    def privacy_spent(self, delta: float) -> EpsilonBounds:
        """Bounds on ε at ``delta`` after the steps taken so far, loaded ones included.

        The accountant's bounds on :attr:`history`: ``upper`` is certified for the
        lattice noise actually added (the smoothing argument's slack A of every step
        is in it, ε(δe^{−A}) + 2A); ``lower`` says how tight it is (always 0 with
        ``accountant="rdp"``). With any σ = 0 step both are ∞; before any step both
        are 0.
        """
        delta = check_delta("delta", delta)
        if self._free_steps:
            return EpsilonBounds(lower=math.inf, upper=math.inf)
        return self._composed().epsilon(delta)

    def close(self) -> None:
        """Commit the open ledger block as the steps taken; give back the others.

        Training stopped mid-block leaves its block reserved (it counts whole);
        call this when a run ends to commit the entry as the steps actually taken
        (:meth:`gaussdp.Ledger.commit_part`). With ``filter=`` the untaken steps
        of the block stay charged (a filter cannot give back). A later
        :meth:`step` reserves a new block.

        Raises
        ------
        RuntimeError
            If called inside :meth:`step` (a hook of the wrapped optimizer): call it
            after the step returns.
        """
        if self._charger is not None:
            self._charger.close()

    def state_dict(self) -> dict[str, Any]:
        """The wrapped optimizer's state and the privacy history, for a checkpoint.

        ``{"optimizer": <the wrapped optimizer's state_dict>, "privacy": {"format": 2,
        "accountant": "pld" | "rdp", "steps": n, "non_private_steps": m,
        "history": <JSON of the history event>, "charges": [...], "runs": [...]}}``:
        ``runs`` names the runs the history holds (the loaded histories' runs, then
        this optimizer's own random id), which ``make_private(resume=...)`` compares
        with the runs the model's parameters carry; the history is
        :attr:`history` in the events' JSON form
        (:func:`gaussdp.accounting.events.event_to_json`), the same form a
        :class:`gaussdp.Ledger` stores; ``charges`` splits its steps by where they
        were charged, ``{"event": <JSON of a step event>, "count": k, "charged":
        "ledger:<run>" | "filter:<token>" | None}`` each (see :meth:`load_state_dict`).
        :meth:`load_state_dict` restores them.
        """
        return {
            "optimizer": self._optimizer.state_dict(),
            "privacy": {
                "format": _CHECKPOINT_FORMAT,
                "accountant": self._kind,
                "steps": self._loaded_steps + self._steps,
                "non_private_steps": self._free_steps,
                "history": event_to_json(self.history),
                "charges": self._charges(),
                "runs": list(self._engine.runs),
            },
        }

    def _charges(self) -> list[dict[str, Any]]:
        """The ``charges`` of :meth:`state_dict`: loaded segments, then this run's steps."""
        segments = list(self._segments)
        if self._steps and self._engine.noiser.noise_multiplier > 0:
            where = None if self._charger is None else self._charger.where
            segments.append((self.step_event, self._steps, where))
        merged: list[Segment] = []
        for event, count, where in segments:
            if merged and merged[-1][0] == event and merged[-1][2] == where:
                merged[-1] = (event, merged[-1][1] + count, where)
            else:
                merged.append((event, count, where))
        return [{"event": event_to_json(e), "count": c, "charged": w} for e, c, w in merged]

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict`: the wrapped optimizer's state and the privacy history.

        The history is composed into a fresh accountant, so :meth:`privacy_spent`
        continues the ε of the checkpointed run. With a ``ledger`` or ``filter``
        given to :func:`make_private`, the model's whole history ends up there: the
        checkpoint records where each of its steps was charged (``charges``), and
        the steps that this ledger (it holds the entries of the run that took them)
        or this filter object does not hold are charged at once, one entry, before
        anything is loaded — so a run trained without a ledger and resumed with one
        has its earlier steps charged, while a resume of a run charged to the same
        ledger charges nothing again. A checkpoint that does not say (written by
        gaussdp before ``charges``) counts as charged nowhere: charged again, the
        safe side. A checkpoint with steps taken without noise is refused with a
        ledger or filter (its ε is infinite).
        A state without the privacy history (e.g. a plain optimizer's) is refused:
        it would restart ε at 0. Loading is for a fresh optimizer only: once this
        optimizer has taken a step or loaded a history it is refused, since the
        parameters keep those noisy updates and replacing the history would
        forget them (under-report ε).

        Raises
        ------
        ValueError
            If the state lacks a valid privacy history, or has the format 1 of
            gaussdp before events, or this optimizer has already taken a step or
            loaded a history, or holds steps without noise while a ledger or filter
            is given. Nothing changes.
        BudgetExceededError
            If the ledger or filter cannot admit the history's steps it does not
            hold yet; nothing is charged or loaded.
        """
        if not isinstance(state_dict, Mapping) or "privacy" not in state_dict:
            keys = sorted(state_dict) if isinstance(state_dict, Mapping) else state_dict
            raise ValueError(
                invalid(
                    "state_dict",
                    "a DPOptimizer.state_dict() with the accountant's history under "
                    "'privacy' (loading without it would restart epsilon at 0)",
                    keys,
                )
            )
        history, steps, free = _check_privacy(state_dict["privacy"])
        segments = _check_charges(state_dict["privacy"], history)
        runs = _check_runs(state_dict["privacy"])
        if self._steps or self._loaded:
            raise ValueError(
                invalid(
                    "load_state_dict",
                    "called on a fresh DPOptimizer (the parameters keep the noisy steps "
                    "already taken or loaded; replacing the history would forget them): "
                    "load the checkpoint into a new make_private()",
                    f"{self._loaded_steps + self._steps} steps taken or loaded",
                )
            )
        accountant = _new_accountant(self._kind)
        for event in history.events:
            if isinstance(event, SelfComposed):
                accountant.compose(event.event, event.count)
            else:
                accountant.compose(event)
        if self._charger is not None:
            if free:
                raise ValueError(
                    invalid(
                        "state_dict['privacy']['non_private_steps']",
                        "0 with a ledger or filter (steps taken without noise have no "
                        "finite epsilon to charge)",
                        free,
                    )
                )
            segments = self._charge_loaded(self._charger, segments)
        self._segments = segments
        self._optimizer.load_state_dict(state_dict["optimizer"])
        self._accountant = accountant
        self._steps = self._unaccounted = 0
        self._loaded_steps, self._free_steps = steps, free
        self._loaded = True
        self._engine.carried += steps
        self._engine.runs = [*dict.fromkeys([*(runs or []), *self._engine.runs])]

    def _charge_loaded(self, charger: Charger, segments: list[Segment]) -> list[Segment]:
        """Charge the loaded steps ``charger`` does not hold; all are then held there."""
        held = [charger.holds(where) for _, _, where in segments]
        missing = [(e, c) for (e, c, _), h in zip(segments, held, strict=True) if not h]
        if missing:
            parts = tuple(e if c == 1 else SelfComposed(e, c) for e, c in missing)
            event = parts[0] if len(parts) == 1 else Composed(parts)
            charger.charge_taken(event, sum(c for _, c in missing))
        return [
            (e, c, where if h else charger.where)
            for (e, c, where), h in zip(segments, held, strict=True)
        ]


#: Steps of one step event, and where they were charged (:meth:`DPOptimizer.state_dict`).
Segment = tuple[Event, int, str | None]


def _history_counts(history: Composed) -> dict[Event, int]:
    counts: dict[Event, int] = {}
    for event in history.events:
        one, count = (event.event, event.count) if isinstance(event, SelfComposed) else (event, 1)
        counts[one] = counts.get(one, 0) + count
    return counts


def _check_charges(privacy: Mapping[str, Any], history: Composed) -> list[Segment]:
    """The ``charges`` of a checkpoint's privacy part, checked against its history.

    A checkpoint without them (gaussdp before they were recorded) has its history's
    steps charged nowhere known.
    """
    counts = _history_counts(history)
    if "charges" not in privacy:
        return [(event, count, None) for event, count in counts.items()]
    raw = privacy["charges"]
    constraint = (
        "a list of {'event': <JSON>, 'count': n, 'charged': str or None} whose steps "
        "add up to the history's (from DPOptimizer.state_dict())"
    )
    segments: list[Segment] = []
    if not isinstance(raw, list):
        raise ValueError(invalid("state_dict['privacy']['charges']", constraint, raw))
    for item in raw:
        where = item.get("charged") if isinstance(item, Mapping) else None
        if not (
            isinstance(item, Mapping)
            and isinstance(item.get("event"), str)
            and (where is None or isinstance(where, str))
        ):
            raise ValueError(invalid("state_dict['privacy']['charges']", constraint, item))
        count = check_int("state_dict['privacy']['charges'] count", item.get("count"), minimum=1)
        segments.append((event_from_json(item["event"]), count, where))
    totals: dict[Event, int] = {}
    for event, count, _ in segments:
        totals[event] = totals.get(event, 0) + count
    if totals != counts:
        raise ValueError(invalid("state_dict['privacy']['charges']", constraint, raw))
    return segments


_CHECKPOINT_FORMAT = 2


def _check_runs(privacy: Mapping[str, Any]) -> list[str] | None:
    """The ``runs`` of a checkpoint's privacy part; None for one written before them."""
    if "runs" not in privacy:
        return None
    runs = privacy["runs"]
    if not (isinstance(runs, list) and runs and all(isinstance(r, str) and r for r in runs)):
        raise ValueError(
            invalid(
                "state_dict['privacy']['runs']",
                "a non-empty list of run ids (from DPOptimizer.state_dict())",
                runs,
            )
        )
    return runs


def _check_privacy(privacy: object) -> tuple[Composed, int, int]:
    """The history event, step count and σ = 0 step count of a checkpoint's privacy part."""
    constraint = (
        f"a mapping with format {_CHECKPOINT_FORMAT}, an accountant, steps, "
        "non_private_steps and the history event's JSON (from DPOptimizer.state_dict())"
    )
    if isinstance(privacy, Mapping) and privacy.get("format") == 1:
        raise ValueError(
            invalid(
                "state_dict['privacy']",
                f"format {_CHECKPOINT_FORMAT}: format 1 (gaussdp before privacy events) is "
                "not read; resume that run with the gaussdp that wrote it",
                "format 1",
            )
        )
    if not (
        isinstance(privacy, Mapping)
        and privacy.get("format") == _CHECKPOINT_FORMAT
        and isinstance(privacy.get("history"), str)
    ):
        raise ValueError(invalid("state_dict['privacy']", constraint, privacy))
    history = event_from_json(privacy["history"])
    if not isinstance(history, Composed):
        raise ValueError(invalid("state_dict['privacy']['history']", "a Composed event", history))
    steps = check_int("steps", privacy.get("steps"), minimum=0)
    free = check_int("non_private_steps", privacy.get("non_private_steps"), minimum=0)
    return history, steps, free


#: The accountant of :func:`make_private`: ``"pld"`` (tight, with a lower bound) or
#: ``"rdp"`` (Rényi DP: faster, an upper bound only, looser).
AccountantKind = Literal["pld", "rdp"]


def check_accountant(value: object) -> AccountantKind:
    """Return ``value`` if it names an accountant of :func:`make_private`."""
    if value == "pld":
        return "pld"
    if value == "rdp":
        return "rdp"
    raise ValueError(invalid("accountant", "'pld' or 'rdp'", value))


def _new_accountant(kind: AccountantKind) -> Accountant:
    return PLDAccountant() if kind == "pld" else RDPAccountant()


def _calibrate_rdp(
    target: float, delta: float, rate: float, steps: int, rtol: float = 1e-3
) -> float:
    """The smallest σ (to ``rtol``) whose RDP bound after ``steps`` steps meets ``target``.

    RDP's ε decreases in σ (Mironov et al. 2019, the accountant of
    :class:`~gaussdp.accounting.RDPAccountant`): the library's one safe-side search
    (:func:`gaussdp._search.smallest_scale`, over
    :func:`gaussdp._search.smallest_passing_score`) returns a σ at which ε was evaluated
    to be at most ``target``.
    """
    from gaussdp._search import smallest_scale

    target = check_positive("target_epsilon", target)

    def eps(sigma: float) -> float:
        event = Subsampled(Gaussian(sigma=sigma), sample_rate=rate)
        acc = RDPAccountant().compose(event, count=steps)
        return acc.epsilon(delta).upper

    return smallest_scale(eps, target, 1.0, rtol, step=2.0)


def _step_event(sigma: float, clip: float, dim: int, rate: float, noise: NoiseMode) -> Event:
    """:attr:`DPOptimizer.step_event` of a run with noise multiplier ``sigma`` (> 0)."""
    if noise == "secure":  # the lattice SumNoiser draws from
        return Subsampled(sum_lattice(sigma, clip, dim), sample_rate=rate)
    return Subsampled(Gaussian(sigma=sigma), sample_rate=rate)


#: Grid steps of the two PLD searches of :func:`_calibrate`, as multiples of the
#: accountant's own step: each costs about 1/64 and 1/12 of a default evaluation
#: (N = 10⁶, batch 256, 10 epochs), and their upper bounds exceed the default one by
#: about 0.9 % and 0.1 % of ε.
_COARSE, _MEDIUM = 64.0, 16.0
#: Tolerance of the searches' accountants: their grids are fixed, so it only decides
#: whether a grid is rebuilt in extended precision (round-off above half of it); the
#: searches skip that rebuild (measured: 0.5 s of 1.6 s, σ 4·10⁻⁵ higher, within rtol).
#: The certification uses the default accountant.
_SEARCH_TOLERANCE = 1e-2


def _calibrate(
    kind: AccountantKind,
    target: float,
    delta: float,
    rate: float,
    steps: int,
    event_of: Callable[[float], Event],
    rtol: float = 1e-3,
) -> float:
    """σ for ``target_epsilon``: its certified ε after ``steps`` steps is at most ``target``.

    ``event_of(σ)`` is the step event actually run (the lattice mechanism for secure
    noise). RDP: :func:`_calibrate_rdp`. PLD, with few evaluations
    at the accountant's own grid (each about 2-4 s for N = 10⁶, batch 256, 10
    epochs): the RDP answer brackets σ from above (for the subsampled Gaussian the
    PLD bound is the tighter one); a search of ``Subsampled(Gaussian(σ), q)`` on a
    grid 64 times coarser than the accountant's, then one on a grid 16 times
    coarser started there (aimed at ε 0.1 % below the target), finds the smallest σ
    to ``rtol`` on that grid (the Illinois search of
    :mod:`gaussdp.accounting.calibration`).
    Whatever the searches found, the answer is then certified the way
    :meth:`DPOptimizer.privacy_spent` will report it — the default accountant of
    ``kind`` on ``event_of(σ)`` — and raised by a factor 1 + ``rtol`` until that
    upper bound is at most ``target`` (usually zero times): never under-reported.
    """
    from gaussdp._search import smallest_scale

    target = check_positive("target_epsilon", target)
    # To 2 % only when it just starts the PLD search.
    sigma = _calibrate_rdp(target, delta, rate, steps, rtol if kind == "rdp" else 0.02)
    if kind == "pld":
        step = PLDAccountant().compose(Subsampled(Gaussian(sigma), rate), steps)
        grid = step.value_discretization

        def eps_on(multiple: float) -> Callable[[float], float]:
            def eps(s: float) -> float:
                h = min(1.0, multiple * grid)
                acc = PLDAccountant(value_discretization=h, tolerance=_SEARCH_TOLERANCE)
                return acc.compose(Subsampled(Gaussian(s), rate), steps).epsilon(delta).upper

            return eps

        sigma = smallest_scale(eps_on(_COARSE), target, sigma, rtol, step=1.05)
        # Aimed 0.1 % of ε below the target: the default grid's bound can exceed the
        # medium grid's by about that much, and each retry below costs a full evaluation.
        aim = target * (1 - rtol)
        sigma = smallest_scale(eps_on(_MEDIUM), aim, sigma, rtol, step=1 + 2 * rtol)
    for _ in range(1000):
        certified = _new_accountant(kind).compose(event_of(sigma), steps)
        if certified.epsilon(delta).upper <= target:
            return sigma
        sigma *= 1 + rtol
    raise ValueError(invalid("target_epsilon", "reachable with finite noise", target))


class PrivateTraining(NamedTuple):
    """What :func:`make_private` returns; unpacks as ``model, optimizer, loader``."""

    model: PrivateModule
    optimizer: DPOptimizer
    data_loader: DPDataLoader


def _check_no_data_dependent_state(model: nn.Module) -> None:
    """Refuse layers that change the model from a batch outside the clipped, noised sum.

    Batch normalisation mixes examples and keeps running statistics of the data;
    instance normalisation with ``track_running_stats=True`` keeps them too;
    ``nn.Embedding(max_norm=...)`` renormalises, in place during the forward pass,
    the rows of the tokens the batch contains, so the released weights would show
    which tokens were seen. Neither change is clipped or noised.
    """
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            raise ValueError(
                invalid(
                    f"model.{name or 'self'}",
                    "free of batch normalisation, which mixes examples "
                    "(use GroupNorm or LayerNorm)",
                    type(module).__name__,
                )
            )
        if isinstance(module, nn.modules.batchnorm._NormBase) and module.track_running_stats:
            # InstanceNorm with running statistics: its buffers are updated from the raw
            # batch in every training forward pass and released with the model.
            raise ValueError(
                invalid(
                    f"model.{name or 'self'}.track_running_stats",
                    "False: running statistics are updated from the data outside the "
                    "private update",
                    module.track_running_stats,
                )
            )
        if isinstance(module, nn.Embedding) and module.max_norm is not None:
            raise ValueError(
                invalid(
                    f"model.{name or 'self'}.max_norm",
                    "None: it rescales the embedding rows a batch uses in place, "
                    "outside the private update",
                    module.max_norm,
                )
            )


def _check_device(model: nn.Module) -> None:
    """All trainable parameters on one CPU or CUDA device (the noise is drawn on the CPU)."""
    devices = {p.device for p in model.parameters() if p.requires_grad}
    for name, param in model.named_parameters():
        if param.device.type not in ("cpu", "cuda") or len(devices) > 1:
            raise ValueError(
                invalid(
                    f"model parameter {name!r}",
                    "on the CPU or on one CUDA device, like every other parameter",
                    str(param.device),
                )
            )


def make_private(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data_loader: DataLoader[Any],
    *,
    max_grad_norm: float,
    delta: float,
    loss_fn: LossFn | None = None,
    loss_reduction: LossReduction = "mean",
    noise_multiplier: float | None = None,
    target_epsilon: float | None = None,
    epochs: int | None = None,
    noise: NoiseMode = "secure",
    grad_sample_mode: GradSampleMode = "auto",
    accountant: AccountantKind = "pld",
    rng: RandomSource | None = None,
    ledger: Ledger | None = None,
    filter: PrivacyFilter | None = None,
    reserve_steps: int | None = None,
    resume: Mapping[str, Any] | None = None,
) -> PrivateTraining:
    r"""Wrap a model, its optimizer and its data loader for DP-SGD (Abadi et al. 2016).

    Parameters
    ----------
    model : torch.nn.Module
        The model (no batch normalisation), its trainable parameters on the CPU or on
        one CUDA device (clipping runs there; the exact noise is drawn on the CPU and
        copied). Its trainable parameters must be those of ``optimizer``.
    optimizer : torch.optim.Optimizer
        Any optimizer over the model's parameters; it sees the noisy average gradient.
    data_loader : torch.utils.data.DataLoader
        A loader over a map-style dataset with a length; its ``batch_size`` B sets
        the sampling rate q = B/N and its ``collate_fn`` is kept.
    max_grad_norm : float
        The clipping norm C > 0 (``inf`` only with ``noise_multiplier=0``).
    delta : float
        The δ at which ε is targeted and reported, in (0, 1). A δ ≥ 1/N warns: such
        a δ allows publishing an example in full.
    loss_fn : callable, optional
        ``loss_fn(output, target) -> scalar``, e.g. ``torch.nn.functional.cross_entropy``;
        needed only for the fast path ``model.backward(x, y)``.
    loss_reduction : {"mean", "sum"}, default "mean"
        How the loss of the ``loss.backward()`` path combines per-example losses:
        the mean over the batch (torch's default ``reduction``) or the sum. Per-example
        gradients are recovered from ∂loss/∂output times B (mean) or 1 (sum); see
        :class:`PrivateModule` for the rule this assumes.
    noise_multiplier : float, optional
        σ ≥ 0, the noise standard deviation over C. Exactly one of
        ``noise_multiplier`` and ``target_epsilon`` must be given; σ = 0 warns (not
        private).
    target_epsilon : float, optional
        Calibrate σ so that ``epochs`` epochs of round(1/q) steps meet
        (``target_epsilon``, ``delta``)-DP, certified by the PLD accountant
        (:func:`~gaussdp.accounting.calibrate_noise_multiplier`).
    epochs : int, optional
        Needed with ``target_epsilon``.
    noise : {"secure", "insecure-float"}, default "secure"
        ``"insecure-float"`` uses ``torch.normal`` noise — not private, warns.
    grad_sample_mode : {"auto", "functorch", "ghost"}, default "auto"
        ``"functorch"``: per-example gradients with ``torch.func`` (any model).
        ``"ghost"``: ghost clipping (:mod:`gaussdp.ml._ghost`) — per-example norms
        and the clipped sum (float64) from each layer's activations and output
        gradients on the whole batch, without materialising the model's per-example
        gradients; only when Linear, Conv1d, Conv2d, Embedding, LayerNorm,
        GroupNorm and MultiheadAttention layers hold every trainable parameter.
        ``"auto"`` uses ghost clipping where it applies. Ghost clipping runs the
        batch at once, so it is used only for a model *proven* to process examples
        independently (:mod:`gaussdp.ml._independence`, once per input structure
        and training mode): the model is traced with ``torch.fx`` and every node
        must be a known per-example layer or an operation that keeps the batch
        dimension apart (elementwise, reductions/reshapes over explicit non-batch
        dimensions); anything else (``h.mean(0)``, ``.any()``, ``view(-1)``,
        ``F.batch_norm``, an untraceable forward, hooks) is not proven: ``"auto"``
        warns once naming the node and uses ``torch.func``, ``"ghost"`` raises
        ``ValueError``. Python control flow not on tensors is fixed at the trace,
        and the batched path runs the proven graph itself (the model's own layers
        and parameters), never ``forward``: a forward that branches on Python state
        (a list, a dict, a global) keeps there the branch traced, so one that is
        meant to change with such state should use ``"functorch"``. As a
        second line the batched path is still compared with the per-example one on
        calls 0, 1, 2, 4, … and on new layer input shapes: on a disagreement
        ``"auto"`` falls back to ``torch.func`` with a warning and ``"ghost"``
        raises ``ValueError``.
    accountant : {"pld", "rdp"}, default "pld"
        ``"pld"``: privacy loss distributions, a certified upper bound and a lower
        bound (:class:`~gaussdp.accounting.PLDAccountant`). ``"rdp"``: Rényi DP,
        faster, an upper bound only and looser (lower bound reported as 0). Also
        used to calibrate σ from ``target_epsilon``.
    rng : RandomSource, optional
        Source of the sampling, noise, dropout-mask and augmentation randomness;
        ``None`` is the operating system's CSPRNG. Pass ``ChaCha20Random(seed)`` to
        replay a run. Four ChaCha20 streams keyed from it drive the loader, the noise,
        the generator states every training pass of the model runs under (its dropout
        masks, secret unless ``rng`` is seeded; torch's own generators are left as they
        were, see :mod:`gaussdp.ml._masks`) and those each example is fetched under
        (random augmentation in the dataset, :mod:`gaussdp.ml._fetch`); when ``rng``
        is not a seeded stream, a forked process re-keys them from it (it never
        repeats the parent's noise), while under a seed a forked process continues
        the parent's streams: give each process its own seed. With a ``ledger`` or
        ``filter``, a step in a forked process under a seeded ``rng`` is refused
        (``RuntimeError``, before the charge): the ledger would pay twice for noise
        drawn once. A seed is for tests and replays, not for releases.
    ledger : gaussdp.Ledger, optional
        Charge every step to this persistent filter: blocks of ``reserve_steps``
        steps (``SelfComposed(optimizer.step_event, k)``) are reserved before their
        first step draws noise and committed after their last; a step the ledger
        cannot admit raises :class:`~gaussdp.errors.BudgetExceededError` before
        its noise is drawn and before the parameters change. A crash leaves the
        block reserved, so it stays counted (never under-counted);
        ``optimizer.close()`` at the end of a run gives back the steps of the
        last block not taken.
    filter : gaussdp.accounting.PrivacyFilter, optional
        Charge every step to this in-memory filter the same way (at most one of
        ``ledger`` and ``filter``).
    reserve_steps : int, optional
        Steps charged at once (default: one pass, round(1/q) steps). Larger blocks
        mean fewer ledger writes; the steps of a block never taken stay charged
        until ``optimizer.close()`` (ledger) or for good (filter).
        When a block does not fit, halves are tried down to one step.
    resume : mapping, optional
        The ``state_dict()`` of the :class:`DPOptimizer` that trained ``model`` before
        (staged training: a new σ, batch size or optimizer after some epochs). Its
        privacy history is loaded into the new optimizer as by
        :meth:`DPOptimizer.load_state_dict` (charged to ``ledger``/``filter`` where
        they do not hold it yet); the new optimizer keeps its own state. Needed when
        a make_private engine still wraps ``model`` or one of its modules and its
        optimizer took or loaded private steps: without it the new
        :meth:`~DPOptimizer.privacy_spent` would start from 0 although the parameters
        carry those steps. Its step count must be at least theirs, and its ``runs``
        must name every run whose steps they carry (another network's history, or
        one of two parts trained by separate make_private calls and joined, is
        refused; a checkpoint without ``runs`` only for a model no engine with steps
        wraps).

    Returns
    -------
    PrivateTraining
        ``(model, optimizer, data_loader)``: a :class:`PrivateModule`, a
        :class:`DPOptimizer` and a :class:`DPDataLoader`.

    Raises
    ------
    TypeError, ValueError
        For invalid arguments (message template of :func:`gaussdp.errors.invalid`),
        and for a ``model`` that carries steps of an earlier make_private without
        ``resume`` (see there); nothing is charged.
    BudgetExceededError
        If ``ledger`` or ``filter`` cannot admit the steps of ``resume`` it does not
        hold yet.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> from gaussdp.random import ChaCha20Random
    >>> _ = torch.manual_seed(0)
    >>> data = TensorDataset(torch.randn(200, 4), torch.randint(0, 2, (200,)))
    >>> net = nn.Linear(4, 2)
    >>> model, optimizer, loader = make_private(
    ...     net, torch.optim.SGD(net.parameters(), lr=0.1), DataLoader(data, batch_size=20),
    ...     loss_fn=nn.functional.cross_entropy, noise_multiplier=1.0, delta=1e-3,
    ...     max_grad_norm=1.0, rng=ChaCha20Random(0))
    >>> for x, y in loader:
    ...     optimizer.zero_grad()
    ...     loss = model.backward(x, y)
    ...     optimizer.step()
    >>> optimizer.steps
    10
    >>> bounds = optimizer.privacy_spent(1e-3)
    >>> bool(0 < bounds.lower <= bounds.upper < 2)
    True
    """
    if not isinstance(model, nn.Module):
        raise TypeError(invalid("model", "a torch.nn.Module", model))
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(invalid("optimizer", "a torch.optim.Optimizer", optimizer))
    if not isinstance(data_loader, DataLoader):
        raise TypeError(invalid("data_loader", "a torch.utils.data.DataLoader", data_loader))
    if loss_fn is not None and not callable(loss_fn):
        raise TypeError(invalid("loss_fn", "a callable loss_fn(output, target)", loss_fn))
    if loss_reduction not in ("mean", "sum"):
        raise ValueError(invalid("loss_reduction", "'mean' or 'sum'", loss_reduction))
    if (noise_multiplier is None) == (target_epsilon is None):
        given = {"noise_multiplier": noise_multiplier, "target_epsilon": target_epsilon}
        raise ValueError(invalid("noise_multiplier, target_epsilon", "exactly one given", given))
    clip = check_positive("max_grad_norm", max_grad_norm, allow_inf=True)
    delta = check_delta("delta", delta)
    mode = check_noise_mode(noise)
    kind = check_accountant(accountant)
    if grad_sample_mode not in ("auto", "functorch", "ghost"):
        raise ValueError(
            invalid("grad_sample_mode", "'auto', 'functorch' or 'ghost'", grad_sample_mode)
        )
    _check_no_data_dependent_state(model)
    _check_device(model)
    earlier = _check_resume(model, resume)
    size = _dataset_length(data_loader.dataset, "data_loader.dataset")
    batch_size = data_loader.batch_size
    sampler = data_loader.sampler
    if not (
        type(sampler) is SequentialSampler
        or (
            type(sampler) is RandomSampler
            and not sampler.replacement
            and sampler._num_samples is None
        )
    ):
        # Poisson sampling draws from the whole dataset: a SubsetRandomSampler's split
        # would silently become training on every example.
        raise ValueError(
            invalid(
                "data_loader.sampler",
                "the default one (shuffle=True or False): DP-SGD samples from the whole "
                "dataset; pass a Subset of the dataset instead",
                type(sampler).__name__,
            )
        )
    if batch_size is None:
        raise ValueError(
            invalid("data_loader.batch_size", "an integer (no custom batch_sampler)", batch_size)
        )
    if batch_size > size:
        raise ValueError(
            invalid("data_loader.batch_size", f"at most len(dataset) = {size}", batch_size)
        )
    rate = batch_size / size
    epoch_steps = steps_per_epoch(rate)
    if delta >= 1 / size:
        warnings.warn(
            f"delta={delta!r} is not below 1/len(dataset) = {1 / size!r}: a mechanism that "
            "publishes a random example in full meets this delta. Choose delta well below "
            "1/len(dataset).",
            UserWarning,
            stacklevel=2,
        )
    check_spender(ledger, filter)
    if (ledger is not None or filter is not None) and noise_multiplier == 0:
        raise ValueError(
            invalid(
                "noise_multiplier",
                "> 0 with a ledger or filter (a step without noise is not private)",
                noise_multiplier,
            )
        )
    if target_epsilon is not None:
        if epochs is None:
            raise ValueError(invalid("epochs", "an integer >= 1 with target_epsilon", epochs))
        epochs = check_count("epochs", epochs)
        if math.isinf(clip):
            raise ValueError(
                invalid("max_grad_norm", "finite when noise_multiplier > 0", max_grad_norm)
            )
        dim = sum(p.numel() for p in model.parameters() if p.requires_grad)
        sigma = _calibrate(
            kind,
            target_epsilon,
            delta,
            rate,
            epochs * epoch_steps,
            lambda s: _step_event(s, clip, dim, rate, mode),
        )
    else:
        sigma = check_noise_multiplier(noise_multiplier)
    if math.isinf(clip) and sigma > 0:
        raise ValueError(
            invalid("max_grad_norm", "finite when noise_multiplier > 0", max_grad_norm)
        )
    _check_optimizer_params(model, optimizer)
    block = epoch_steps if reserve_steps is None else reserve_steps
    block = check_int("reserve_steps", block, minimum=1)
    source = check_rng(rng)
    # Streams of their own, re-keyed in a forked child (see gaussdp.random).
    loader_rng = _DerivedStream(source)
    noise_rng = _DerivedStream(source)
    mask_rng = _DerivedStream(source)  # the dropout masks' (gaussdp.ml._masks)
    fetch_rng = _DerivedStream(source)  # the examples' fetch (gaussdp.ml._fetch)
    engine = _Engine(
        model,
        loss_fn,
        noise_multiplier=sigma,
        max_grad_norm=clip,
        sample_rate=rate,
        num_examples=size,
        noise=mode,
        rng=noise_rng,
        mask_rng=mask_rng,
        grad_sample_mode=grad_sample_mode,
        loss_reduction=loss_reduction,
    )
    loader = DPDataLoader(
        data_loader.dataset,
        sample_rate=rate,
        steps=epoch_steps,
        rng=loader_rng,
        collate_fn=data_loader.collate_fn,
        num_workers=data_loader.num_workers,
        fetch_rng=fetch_rng,
    )
    assert isinstance(loader.batch_sampler, PoissonBatchSampler)
    engine.sampler = loader.batch_sampler
    private = DPOptimizer(
        optimizer, engine, accountant=kind, ledger=ledger, filter=filter, reserve_steps=block
    )
    if resume is not None:  # the history only: the wrapped optimizer keeps its own state
        private.load_state_dict({"optimizer": optimizer.state_dict(), "privacy": resume["privacy"]})
    for old in earlier:  # the model is this engine's now
        old.retire(engine)
    for sub in model.modules():  # and so is a deep copy (_Carried): it carries no more steps
        for table in (sub._forward_pre_hooks, sub._forward_hooks):
            for key in [k for k, hook in table.items() if isinstance(hook, _Carried)]:
                del table[key]
    return PrivateTraining(PrivateModule(engine), private, loader)


def _check_resume(model: nn.Module, resume: Mapping[str, Any] | None) -> list[_Engine]:
    """The earlier engines wrapping ``model``; refused if they carry steps ``resume`` lacks.

    An engine's watch hooks stay on the modules it wrapped (and keep it alive) until a
    later :func:`make_private` retires it, so a model trained by an earlier one is
    found from its modules; a deep copy of one carries marks of the run instead
    (:class:`_Carried`). ``resume`` must hold the history of every earlier engine
    that carries steps: its ``runs`` must include each one's (its own id and those of
    the histories it loaded), and its steps be at least the most any carries. So the
    history of another network, or of one of two parts trained by separate
    make_private calls and then joined, is refused (rev29-ml: ε 2.866 reported for
    4.688, and 10.498 for 12.200): one history cannot hold two unrelated runs. A
    checkpoint written before ``runs`` names none: refused when an earlier engine
    carries steps (it cannot be shown to be their history), accepted otherwise (a
    network rebuilt from a saved state carries no engine to compare with).
    """
    hooks = [hook for sub in model.modules() for hook in sub._forward_pre_hooks.values()]
    owners = (h.engine for h in hooks if isinstance(h, _Watch))
    earlier = list({id(e): e for e in owners}.values())
    marks = (h.steps for h in hooks if isinstance(h, _Carried))  # a deep copy's
    carried = max((*(e.carried for e in earlier), *marks), default=0)
    if resume is None:
        if carried:
            raise ValueError(
                invalid(
                    "resume",
                    "the state_dict() of the optimizer that trained this model before "
                    "(an earlier make_private still wraps it or the network it was deep-copied "
                    "from, and the parameters carry its private steps: without their history "
                    "epsilon would restart at 0)",
                    f"None for a model carrying {carried} steps",
                )
            )
        return earlier
    if not isinstance(resume, Mapping) or "privacy" not in resume:
        raise ValueError(
            invalid("resume", "a DPOptimizer.state_dict() with its 'privacy' history", resume)
        )
    _, steps, _ = _check_privacy(resume["privacy"])
    if steps < carried:
        raise ValueError(
            invalid(
                "resume",
                f"the state_dict() of the optimizer that trained this model before, with "
                f"at least the {carried} steps the model carries (take it after the last step)",
                f"a history of {steps} steps",
            )
        )
    runs = _check_runs(resume["privacy"])
    # A deep copy's source run counts too (a pickled copy keeps only its step count).
    sources = [h.latest for h in hooks if isinstance(h, _Carried) and h.latest is not None]
    runners = {id(e): e for e in (*earlier, *sources)}.values()
    missing = [e for e in runners if e.carried and not set(e.runs) <= set(runs or [])]
    if missing:
        held = "no run ids (a checkpoint of gaussdp before them)" if runs is None else runs
        raise ValueError(
            invalid(
                "resume",
                "the state_dict() of the optimizer that trained this model before, whose "
                "'runs' include those of every earlier make_private whose steps the "
                f"model's parameters carry ({[e.runs for e in missing]}): the history of "
                "another network, or of one of two parts trained by separate make_private "
                "calls, would under-report epsilon (train the parts in one make_private)",
                f"a history naming {held}",
            )
        )
    return earlier


def _check_optimizer_params(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    optimized: Sequence[int] = [id(p) for g in optimizer.param_groups for p in g["params"]]
    if not set(optimized) <= trainable:
        raise ValueError(
            invalid("optimizer", "an optimizer over the model's trainable parameters", optimizer)
        )
