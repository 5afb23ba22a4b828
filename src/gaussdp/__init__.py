"""gaussdp: the Gaussian mechanism of differential privacy, exact from calibration to release.

The top level holds the objects most users need: the mechanisms, the table
release with its budget and ledger, and the errors. The mathematics is in
:mod:`gaussdp.privacy`, accounting in :mod:`gaussdp.accounting`, the exact
samplers in :mod:`gaussdp.sampling`.

The names below are imported on first use (PEP 562), so ``import gaussdp``
and the ``gaussdp`` command start without loading scipy, DuckDB or pandas.
The library logs to the ``gaussdp`` logger and never prints.

Examples
--------
>>> import gaussdp
>>> g = gaussdp.Gaussian.calibrate(epsilon=1.0, delta=1e-6)
>>> round(g.sigma, 3)
4.225
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Where each public name lives; the module is imported when the name is first used.
_HOMES = {
    "Budget": "gaussdp.budget",
    "BudgetExceededError": "gaussdp.errors",
    "MissingExtraError": "gaussdp.errors",
    "DiscreteGaussian": "gaussdp.mechanisms",
    "DiscreteLaplace": "gaussdp.mechanisms",
    "Gaussian": "gaussdp.mechanisms",
    "Interval": "gaussdp.mechanisms",
    "Laplace": "gaussdp.mechanisms",
    "LatticeGaussian": "gaussdp.mechanisms",
    "Ledger": "gaussdp.release",
    "Release": "gaussdp.release",
}

logging.getLogger(__name__).addHandler(logging.NullHandler())


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'gaussdp' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
