"""gaussdp: the Gaussian mechanism of differential privacy, exact from calibration to release.

The top level holds the objects most users need: the mechanisms and the errors.
The mathematics is in :mod:`gaussdp.privacy`.

Examples
--------
>>> import gaussdp
>>> g = gaussdp.Gaussian.calibrate(epsilon=1.0, delta=1e-6)
>>> round(g.sigma, 3)
4.225
"""

from __future__ import annotations

from gaussdp.errors import BudgetExceededError, MissingExtraError
from gaussdp.mechanisms import (
    DiscreteGaussian,
    DiscreteLaplace,
    Gaussian,
    Interval,
    Laplace,
    LatticeGaussian,
)

__all__ = [
    "BudgetExceededError",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "Gaussian",
    "Interval",
    "Laplace",
    "LatticeGaussian",
    "MissingExtraError",
]

__version__ = "0.1.0.dev0"
