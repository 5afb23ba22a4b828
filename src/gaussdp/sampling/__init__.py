"""Exact samplers for the discrete Gaussian and discrete Laplace (CKS §5).

- :func:`discrete_gaussian`, :func:`discrete_laplace`: vectorised exact samplers
  returning numpy arrays (:mod:`gaussdp.sampling.vectorized`), with an optional
  fixed-work mode (:class:`FixedWork`); values too wide for int64 come as
  Python ints or, faster, as a :class:`BigIntArray` of 64-bit limbs.
- :func:`bernoulli_exp`, :func:`discrete_laplace_scalar`,
  :func:`discrete_gaussian_scalar`: the scalar reference, CKS Algorithms 1, 2
  and 3 line by line on ints and Fractions (:mod:`gaussdp.sampling.reference`).
- :class:`NoiseStream`: keyed N_Z(0, σ²)^d vectors drawn one ahead in a worker
  process, for training loops that add a fresh noise vector every step
  (:mod:`gaussdp.sampling.background`).

Both take ``rng=`` (a :class:`gaussdp.random.RandomSource`; ``None`` is the
operating system's CSPRNG). Why the vectorised path has exactly the reference's
distribution is argued in ``docs/sampler-exactness.md``.
"""

from __future__ import annotations

from gaussdp.sampling._limbs import BigIntArray
from gaussdp.sampling.background import NoiseStream
from gaussdp.sampling.reference import (
    bernoulli_exp,
    discrete_gaussian_scalar,
    discrete_laplace_scalar,
)
from gaussdp.sampling.vectorized import (
    FixedWork,
    SamplingShortfallError,
    discrete_gaussian,
    discrete_laplace,
)

__all__ = [
    "BigIntArray",
    "FixedWork",
    "NoiseStream",
    "SamplingShortfallError",
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_gaussian_scalar",
    "discrete_laplace",
    "discrete_laplace_scalar",
]
