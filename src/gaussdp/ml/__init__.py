"""Differentially private machine learning for PyTorch (the optional ``torch`` extra).

- :func:`make_private` wraps a model, an optimizer and a data loader for DP-SGD
  (Abadi et al. 2016): per-example gradients by ``torch.func``, clipping,
  Poisson-sampled batches, noise on the summed gradient and PLD accounting.
- :class:`DPAggregator` clips, sums and noises client updates for federated
  learning with central differential privacy;
  :class:`DistributedDiscreteGaussian` simulates the distributed discrete
  Gaussian under secure aggregation (Kairouz, Liu, Steinke 2021).

Noise is secure by default: the summed gradient is rounded to the lattice of
:meth:`gaussdp.Gaussian.lattice` and gets exact discrete Gaussian noise from the
operating system's CSPRNG, never floating-point noise. ``import gaussdp`` does
not import torch; importing this package does, and raises
:class:`~gaussdp.errors.MissingExtraError` when torch is not installed.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError:  # pragma: no cover - exercised only without the extra
    from gaussdp.errors import MissingExtraError

    raise MissingExtraError("gaussdp.ml", "torch") from None

from gaussdp.ml.dpsgd import (
    AccountantKind,
    DPDataLoader,
    DPOptimizer,
    GradSampleMode,
    PoissonBatchSampler,
    PrivateModule,
    PrivateTraining,
    clip_factors,
    clip_gradients,
    make_private,
    per_example_gradients,
)
from gaussdp.ml.federated import DistributedDiscreteGaussian, DPAggregator, ddg_rho
from gaussdp.ml.noise import NoiseMode, SumNoiser

__all__ = [
    "AccountantKind",
    "DPAggregator",
    "DPDataLoader",
    "DPOptimizer",
    "DistributedDiscreteGaussian",
    "GradSampleMode",
    "NoiseMode",
    "PoissonBatchSampler",
    "PrivateModule",
    "PrivateTraining",
    "SumNoiser",
    "clip_factors",
    "clip_gradients",
    "ddg_rho",
    "make_private",
    "per_example_gradients",
]
