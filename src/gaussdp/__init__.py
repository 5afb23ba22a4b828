"""gaussdp: the Gaussian mechanism of differential privacy, exact from calibration to release.

The top level holds the objects most users need: the mechanisms, the table
release with its budget and ledger, and the errors. The mathematics is in
:mod:`gaussdp.privacy`, accounting in :mod:`gaussdp.accounting`, the exact
samplers in :mod:`gaussdp.sampling`.

Examples
--------
>>> import gaussdp
>>> g = gaussdp.Gaussian.calibrate(epsilon=1.0, delta=1e-6)
>>> round(g.sigma, 3)
4.225
"""

from __future__ import annotations

from gaussdp.budget import Budget
from gaussdp.errors import BudgetExceededError, MissingExtraError
from gaussdp.mechanisms import (
    DiscreteGaussian,
    DiscreteLaplace,
    Gaussian,
    Interval,
    Laplace,
    LatticeGaussian,
)
from gaussdp.release import Ledger, Release

__all__ = [
    "Budget",
    "BudgetExceededError",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "Gaussian",
    "Interval",
    "Laplace",
    "LatticeGaussian",
    "Ledger",
    "MissingExtraError",
    "Release",
]

__version__ = "0.1.0.dev0"
