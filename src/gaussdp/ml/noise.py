r"""The noise of DP-SGD and central federated aggregation: a sum of clipped vectors plus N(0, σ²C²).

Each contribution (an example's gradient, a client's update) is clipped to L2
norm C, so under add/remove-one neighbours the sum has L2 sensitivity C and the
Gaussian mechanism with standard deviation σC per coordinate is exactly
(1/σ)-GDP (DRS Thm 2.7); this is the step of Abadi et al. (2016, Alg 1).

Secure mode (the default) never releases floating-point noise (Mironov 2012). It
is the float-safe path of :meth:`gaussdp.Gaussian.release`, applied to a sum:

1. ``Gaussian(sigma=σC, sensitivity=C).lattice(d)`` chooses the power-of-two grid
   step γ and the lattice noise σ_Z² (CKS Thm 14; its ρ is at most the Gaussian's).
2. Each clipped contribution is rounded to γℤ^d *before* summing, and the integer
   vectors are summed exactly (float64 holds every partial sum exactly, all being
   integers below 2⁵³). Removing one contribution r changes the sum by
   ‖r‖₂ ≤ C/γ + √d/2, within :meth:`~gaussdp.LatticeGaussian.sensitivity_bound`,
   whatever the summation order — rounding the float sum instead would make the
   sensitivity depend on it. This assumes that every *other* contribution is the
   same vector in both neighbouring batches, bitwise: the caller must compute
   each one from its own example alone. DP-SGD computes them with batched kernels,
   whose float rounding of one row can depend on the batch size; a change there
   adds to the sensitivity (docs/ml.md, "What the float arguments assume").
3. Exact N_Z(0, σ_Z²) noise (CKS Alg 3, :func:`gaussdp.sampling.discrete_gaussian`)
   is added in integers and the result is multiplied by γ (exact). Casting to
   float32 afterwards is post-processing.

Clipping keeps a relative margin of 2⁻²⁰: the norm is computed in float64 from the
float32 values and the scale factor is shrunk by (1 − 2⁻²⁰), which absorbs the
float32 rounding of the scaled vector (at most 2⁻²³ relative per coordinate), so
every contribution fed to step 2 has norm ≤ C.

The random words for each release come from a fresh ChaCha20 keystream keyed with
256 bits read from ``rng`` (the operating system's CSPRNG by default): the
userspace-stream construction of DESIGN.md decision 2, rekeyed on every release,
which halves the cost of the words against ``os.urandom`` and keeps a seeded
``ChaCha20Random`` reproducible. The noise does not depend on the data, so for
large models the next release's vector is drawn in a worker process while the
caller computes gradients (:class:`gaussdp.sampling.background.NoiseStream`; same
values either way).

Fork. A forked child never uses the parent's noise worker: it lets go of it at
the fork and starts one of its own if it draws (see
:mod:`gaussdp.sampling.background`, which also says how its keys differ from the
parent's). torch's OpenMP thread pool is not fork-safe: a child forked after a
multi-threaded torch operation can hang in its first parallel one, before any noise
is drawn. Call ``torch.set_num_threads(1)`` in forked children that compute, as
torch's DataLoader workers do, or use the ``spawn`` start method.

``noise="insecure-float"`` adds ``torch.normal`` noise to the float sum instead. It
is for speed experiments only, warns when selected, and is not differentially
private against an adversary who sees the low-order bits (Mironov 2012).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
import torch

from gaussdp._validation import check_int, check_positive, redacted
from gaussdp.errors import invalid
from gaussdp.mechanisms import Gaussian, LatticeGaussian
from gaussdp.random import RandomSource, check_rng
from gaussdp.sampling.background import NoiseStream

__all__ = [
    "PREFETCH_MIN_DIM",
    "NoiseMode",
    "SumNoiser",
    "check_noise_mode",
    "check_noise_multiplier",
    "sum_lattice",
]

#: ``"secure"``: exact discrete Gaussian on a lattice (default);
#: ``"insecure-float"``: ``torch.normal`` noise, for speed experiments only.
NoiseMode = Literal["secure", "insecure-float"]

#: Clipping scales by min(1, C/‖g‖)·(1 − 2⁻²⁰), absorbing float32 rounding (module notes).
CLIP_MARGIN = 1.0 - 2.0**-20

#: Default :class:`SumNoiser` prefetching: a worker process for vectors of at least this
#: many coordinates (below, drawing in place takes under a millisecond).
PREFETCH_MIN_DIM = 2**15

# Lattice indices of one clipped contribution are below C/γ; float32 holds them
# exactly below 2**24. Past 2**23 the rounding is done in float64.
_FLOAT32_EXACT = 2.0**23


def check_noise_mode(noise: object) -> NoiseMode:
    """Return ``noise`` if it is a valid noise mode; warn loudly for the insecure one."""
    if noise == "secure":
        return "secure"
    if noise == "insecure-float":
        warnings.warn(
            "noise='insecure-float' adds floating-point Gaussian noise with torch.normal: "
            "its low-order bits can reveal the data (Mironov 2012), so the result is NOT "
            "differentially private. Use it only for speed experiments; the default "
            "noise='secure' is exact.",
            UserWarning,
            stacklevel=3,
        )
        return "insecure-float"
    raise ValueError(invalid("noise", "'secure' or 'insecure-float'", noise))


def check_noise_multiplier(value: object) -> float:
    """Return the noise multiplier σ as a float if it is finite and ≥ 0; warn loudly at 0."""
    if value == 0 and not isinstance(value, bool):
        warnings.warn(
            "noise_multiplier=0 adds no noise: training is NOT differentially private "
            "and privacy_spent() reports an infinite epsilon",
            UserWarning,
            stacklevel=3,
        )
        return 0.0
    return check_positive("noise_multiplier", value)


def sum_lattice(noise_multiplier: float, clip_norm: float, dim: int) -> LatticeGaussian:
    """The lattice mechanism of the secure path for σ > 0, C and d (module notes, step 1).

    ``Gaussian(sigma=σC, sensitivity=C).lattice(d)``: what :class:`SumNoiser` draws
    from and what the accounting of :mod:`gaussdp.ml` composes, built in one place.
    """
    return Gaussian(sigma=noise_multiplier * clip_norm, sensitivity=clip_norm).lattice(dim)


class SumNoiser:
    r"""Release Σᵢ clipᵢ(xᵢ) + N(0, σ²C²)^d, with the secure lattice path by default.

    Contributions are accumulated with :meth:`accumulate` (already scaled by their
    clip factors, see :func:`gaussdp.ml.clip_factors`) and the noisy sum is drawn
    with :meth:`release`.

    Parameters
    ----------
    noise_multiplier : float
        σ, the noise standard deviation over the clip norm; finite and ≥ 0 (0 adds
        no noise and is not private).
    clip_norm : float
        C, the L2 bound of one contribution; > 0 (``inf`` only with σ = 0).
    dim : int
        d, the number of coordinates released together, ≥ 1.
    noise : {"secure", "insecure-float"}
        The noise path (module notes).
    rng : RandomSource, optional
        Source of the keys of the per-release ChaCha20 streams; ``None`` is the
        operating system's CSPRNG.
    prefetch : bool, optional
        Draw the next release's lattice noise in a worker process while the caller
        computes gradients (:class:`~gaussdp.sampling.background.NoiseStream`). The
        noise does not depend on the data, and each draw uses its own key taken
        from ``rng`` in order, so results are the same with and without
        prefetching. ``None`` (default) prefetches when ``dim`` is at least
        :data:`PREFETCH_MIN_DIM`, where the worker saves more than it costs.
        Prefetching reads each key one release early: if other code reads the
        same ``rng``, give the noiser a stream of its own (as :func:`make_private`
        and :class:`DPAggregator` do) so that a seeded run does not depend on it.

    Examples
    --------
    >>> import torch
    >>> from gaussdp.random import ChaCha20Random
    >>> noiser = SumNoiser(1.0, 1.0, dim=3, rng=ChaCha20Random(0))
    >>> x = torch.tensor([[0.6, 0.8, 0.0], [0.0, 0.0, 0.5]])
    >>> sums = noiser.accumulate([x], torch.ones(2, dtype=torch.float64))
    >>> out = noiser.release(sums)[0]
    >>> out.shape, out.dtype
    (torch.Size([3]), torch.float32)
    >>> 1.0 <= noiser.noise_std / 1.0 < 1.005
    True
    """

    def __init__(
        self,
        noise_multiplier: float,
        clip_norm: float,
        dim: int,
        *,
        noise: NoiseMode = "secure",
        rng: RandomSource | None = None,
        prefetch: bool | None = None,
    ) -> None:
        sigma = (
            0.0 if noise_multiplier == 0 else check_positive("noise_multiplier", noise_multiplier)
        )
        clip = check_positive("clip_norm", clip_norm, allow_inf=True)
        if math.isinf(clip) and sigma > 0:
            raise ValueError(invalid("clip_norm", "finite when noise_multiplier > 0", clip_norm))
        if noise not in ("secure", "insecure-float"):
            raise ValueError(invalid("noise", "'secure' or 'insecure-float'", noise))
        self._sigma = sigma
        self._clip = clip
        self._dim = check_int("dim", dim, minimum=1)
        self._noise: NoiseMode = noise
        self._rng = check_rng(rng)
        self._lattice: LatticeGaussian | None = None
        self._stream: NoiseStream | None = None
        if sigma > 0 and noise == "secure":
            self._lattice = sum_lattice(sigma, clip, self._dim)
            background = self._dim >= PREFETCH_MIN_DIM if prefetch is None else bool(prefetch)
            # σ_Z² ≤ 2**80 here (σ_Z ≈ 500·σ·√d), so the noise is int64.
            self._stream = NoiseStream(
                self._lattice.sigma2, self._dim, rng=self._rng, background=background
            )

    @property
    def noise_multiplier(self) -> float:
        """σ: the nominal noise standard deviation is σ·C."""
        return self._sigma

    @property
    def clip_norm(self) -> float:
        """C, the L2 bound of one contribution."""
        return self._clip

    @property
    def dim(self) -> int:
        """d, the number of coordinates."""
        return self._dim

    @property
    def noise(self) -> NoiseMode:
        """The noise path, ``"secure"`` or ``"insecure-float"``."""
        return self._noise

    @property
    def rng(self) -> RandomSource:
        """The source of the noise."""
        return self._rng

    @property
    def lattice(self) -> LatticeGaussian | None:
        """The lattice mechanism of the secure path (None for σ = 0 or float noise)."""
        return self._lattice

    @property
    def noise_std(self) -> float:
        """Standard deviation of the noise actually added per coordinate.

        Secure path: γ·σ_Z, slightly above σC (by at most 0.4%, the rounding's share of
        the sensitivity, see :meth:`gaussdp.Gaussian.lattice`).
        """
        if self._lattice is None:
            return self._sigma * self._clip if self._sigma > 0 else 0.0
        return self._lattice.gamma * math.sqrt(float(self._lattice.sigma2))

    def accumulate(
        self, contributions: Sequence[torch.Tensor], factors: torch.Tensor
    ) -> list[torch.Tensor]:
        """Sum scaled contributions: one tensor ``[B, *shape]`` per block of coordinates.

        ``factors`` (float64, shape ``[B]``) are the clip factors of the B
        contributions; rows with factor 0 are left out (zeroed, even if NaN). Secure
        path: each scaled contribution is rounded to the lattice and the integers are
        summed exactly (float64 tensors in lattice units). Otherwise the float32 sum.
        Returns one tensor of ``shape`` per block.
        """
        if self._lattice is None:
            return [_float_sum(block, factors) for block in contributions]
        gamma = self._lattice.gamma
        exact_in_float32 = self._clip / gamma < _FLOAT32_EXACT
        # Clipped contributions have ‖mᵢ·xᵢ‖∞ ≤ ‖mᵢ·xᵢ‖₂ ≤ C/γ.
        bound = self._clip / gamma
        return [
            _lattice_sum(block, factors / gamma, exact_in_float32, bound) for block in contributions
        ]

    @property
    def unit(self) -> float:
        """The unit of the sums :meth:`accumulate_sums` takes: γ on the secure path, else 1."""
        return 1.0 if self._lattice is None else self._lattice.gamma

    def accumulate_sums(self, sums: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Prepare float sums of clipped contributions (ghost clipping) for :meth:`release`.

        The sums are in units of :attr:`unit` (the caller scales its clip factors by
        1/unit, an exact power of two). Secure path: each sum is rounded to the lattice
        (float32 and float64 sums in their own dtype, which holds the rounded values
        exactly; others in float64); the caller guarantees that neighbouring sums differ
        by at most C/γ in L2 norm, float error included (see :mod:`gaussdp.ml._ghost`),
        so the rounded sums differ by at most C/γ + √d. Otherwise the float32 sums. The caller's
        tensors are left as they are (DP-SGD rounds the sums of a step's calls so far
        whenever it reads them, and keeps adding to the unrounded ones).
        """
        if self._lattice is None:
            return [s.to(torch.float32) for s in sums]
        # A float32 or float64 value rounds to an integer of its own type, exactly: the
        # same values as rounding in float64, without a float64 copy (release converts).
        return [s.round() if s.dtype in _ROUND_EXACT else s.to(torch.float64).round() for s in sums]

    def release(
        self,
        sums: Sequence[torch.Tensor],
        *,
        scale: float = 1.0,
        out: torch.Tensor | None = None,
    ) -> list[torch.Tensor]:
        """Add the noise to sums from :meth:`accumulate`; return float32 tensors in real units.

        ``scale`` multiplies the noisy sums (post-processing, e.g. 1/(expected batch
        size)). ``out``, a float32 tensor of :attr:`dim` elements, receives the result
        and the returned tensors are views of it (DP-SGD reuses one buffer for the
        gradients); by default they are fresh tensors.
        """
        sizes = [s.numel() for s in sums]
        if sum(sizes) != self._dim:
            raise ValueError(invalid("sums", f"blocks with {self._dim} coordinates in all", sizes))
        if out is not None and (out.dtype != torch.float32 or out.numel() != self._dim):
            raise ValueError(
                invalid("out", f"a float32 tensor of {self._dim} elements", redacted(out))
            )
        # On the CPU: the noise is drawn there (CUDA sums are copied over, and the caller
        # copies the result back; the noise never leaves the exact integer path before).
        pieces = [s.detach().reshape(-1).to("cpu") for s in sums]
        result = torch.empty(self._dim, dtype=torch.float32) if out is None else out.reshape(-1)
        into = result if result.device.type == "cpu" and result.is_contiguous() else None
        if self._sigma > 0 and self._lattice is not None and into is not None:
            assert self._stream is not None
            # A fresh ChaCha20 key per release. Integers below 2**53 add exactly in
            # float64; multiplying by γ = 2**k is exact, the rest is post-processing. The
            # view of the worker's memory is read at once and not kept (no copy).
            _noisy_into(pieces, self._stream._next(), scale * self._lattice.gamma, into)
        else:
            flat = torch.cat(pieces, out=torch.empty(self._dim, dtype=torch.float64))
            if self._sigma > 0 and self._lattice is None:  # insecure-float
                generator = torch.Generator().manual_seed(self._rng.randbits(63))
                flat += torch.normal(0.0, self._sigma * self._clip, flat.shape, generator=generator)
            elif self._sigma > 0:  # the output is not the CPU's: as above, then copied over
                assert self._stream is not None
                assert self._lattice is not None
                np.add(flat.numpy(), self._stream._next(), out=flat.numpy())
                scale *= self._lattice.gamma
            if scale != 1.0:
                flat *= scale
            result.copy_(flat)
        return [
            block.reshape(s.shape)
            for block, s in zip(torch.split(result, sizes), sums, strict=True)
        ]

    def close(self) -> None:
        """Stop the noise worker process, if any (later releases draw in place)."""
        if self._stream is not None:
            self._stream.close()


def _drop_zero_rows(block: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """Zero the rows with factor 0 (dropped examples), so that a NaN in them cannot spread."""
    dropped = factors == 0
    if not bool(dropped.any()):
        return block
    cleaned = block.clone()
    cleaned[dropped] = 0
    return cleaned


def _float_sum(block: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    block = _drop_zero_rows(block, factors)
    shape = (-1,) + (1,) * (block.dim() - 1)
    scaled = block * factors.to(block.dtype).reshape(shape)
    return scaled.sum(0)


_WIDER_THAN_FLOAT32 = (torch.float64, torch.complex128)

# Types in which rounding to an integer is exact (the result is one of the type's values).
_ROUND_EXACT = (torch.float32, torch.float64)

# Coordinates per pass of _noisy_into: its float64 scratch (256 KB) stays in the cache.
_NOISY_CHUNK = 2**15


def _noisy_into(
    pieces: Sequence[torch.Tensor], noise: npt.NDArray[np.int64], scale: float, out: torch.Tensor
) -> None:
    """``out[:] = (cat(pieces) + noise) * scale``, in float64, then rounded to float32.

    ``pieces`` are the CPU blocks of the sums (integers in float32 or float64, converted
    exactly), ``noise`` the int64 lattice noise (exact in float64 below 2**53), ``out``
    a contiguous float32 CPU tensor that receives the float64 product rounded to float32
    — the values of a float64 copy of the sums plus the noise, times ``scale``, then cast,
    computed a few thousand coordinates at a time so that no float64 vector is written
    out whole.
    """
    result = out.numpy()
    scratch = np.empty(min(_NOISY_CHUNK, result.size))
    offset = 0
    for piece in pieces:
        values = (piece if piece.dtype in _ROUND_EXACT else piece.to(torch.float64)).numpy()
        for a in range(0, values.size, _NOISY_CHUNK):
            b = min(a + _NOISY_CHUNK, values.size)
            part = scratch[: b - a]
            np.add(values[a:b], noise[offset + a : offset + b], out=part)
            np.multiply(part, scale, out=result[offset + a : offset + b], casting="same_kind")
        offset += values.size


def _lattice_sum(
    block: torch.Tensor, multipliers: torch.Tensor, in_float32: bool, bound: float
) -> torch.Tensor:
    """Σᵢ round(mᵢ·xᵢ) exactly, as float64, given |mᵢ·xᵢⱼ| ≤ ``bound`` for every entry."""
    block = _drop_zero_rows(block, multipliers)
    shape = (-1,) + (1,) * (block.dim() - 1)
    # A float64 entry can exceed the float32 range (a finite 1e39 casts to inf, and
    # inf·mᵢ stays inf): scale such blocks in float64, before any cast.
    if not in_float32 or block.dtype in _WIDER_THAN_FLOAT32:
        scaled64 = block.to(torch.float64) * multipliers.reshape(shape)
        return scaled64.round_().sum(0)
    rounded = (block.to(torch.float32) * multipliers.to(torch.float32).reshape(shape)).round_()
    # |round(mᵢ·xᵢⱼ)| ≤ bound + 1/2, and a float32 sum of integers whose partial sums all stay
    # below 2**24 in magnitude is exact: sum chunks of that many rows in float32.
    rows = max(1, int(2.0**24 // (bound + 1.0)))
    if rows >= rounded.shape[0]:
        return rounded.sum(0).to(torch.float64)
    parts = [chunk.sum(0) for chunk in torch.split(rounded, rows)]
    return torch.stack(parts).sum(0, dtype=torch.float64)
