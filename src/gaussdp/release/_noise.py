"""Where a release draws its noise: the single call into the exact sampler.

Tests replace :func:`draw` (monkeypatch) to switch noise off and compare the
pipeline with a pure-Python implementation; there is no public flag for that.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt

from gaussdp.random import RandomSource
from gaussdp.sampling import discrete_gaussian

__all__ = ["draw"]


def draw(
    sigma2: Fraction, size: int, rng: RandomSource
) -> npt.NDArray[np.int64] | npt.NDArray[np.object_]:
    """``size`` exact draws of N_Z(0, sigma2) (CKS Alg 3, vectorised)."""
    return discrete_gaussian(sigma2, size, rng=rng)
