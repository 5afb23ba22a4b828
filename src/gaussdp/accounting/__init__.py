"""Privacy accounting: events, privacy loss distributions, accountants, filters, calibration.

The default is tight: compositions of plain Gaussians are accounted exactly
(μ = √Σμᵢ², DRS Cor 3.3); anything else goes through privacy loss distributions
on a grid with FFT composition, which return a certified upper bound (what
gaussdp promises) and a lower bound (how tight it is). RDP is offered as a fast,
looser alternative. See ``docs/accounting.md`` for the error analysis.
"""

from __future__ import annotations

from gaussdp.accounting.accountants import (
    DEFAULT_RDP_ORDERS,
    Accountant,
    FallbackAccountant,
    GDPAccountant,
    PLDAccountant,
    RDPAccountant,
    UnsupportedEventError,
    ZCDPAccountant,
)
from gaussdp.accounting.bounds import DeltaBounds, EpsilonBounds, LossMasses, format_bound
from gaussdp.accounting.calibration import calibrate_noise, calibrate_noise_multiplier
from gaussdp.accounting.compare import MechanismComparison, compare_discrete_mechanisms
from gaussdp.accounting.events import (
    ApproxDP,
    Composed,
    DiscreteGaussianL2,
    DiscreteGaussianVector,
    Event,
    ExponentialMechanism,
    LatticeNoise,
    PartitionSelection,
    PureDP,
    RecordedCost,
    SelfComposed,
    Subsampled,
    UnknownEventError,
    describe,
    event_from_json,
    event_to_json,
)
from gaussdp.accounting.filter import PrivacyFilter
from gaussdp.accounting.pld import PrivacyLossDistribution

__all__ = [
    "DEFAULT_RDP_ORDERS",
    "Accountant",
    "ApproxDP",
    "Composed",
    "DeltaBounds",
    "DiscreteGaussianL2",
    "DiscreteGaussianVector",
    "EpsilonBounds",
    "Event",
    "ExponentialMechanism",
    "FallbackAccountant",
    "GDPAccountant",
    "LatticeNoise",
    "LossMasses",
    "MechanismComparison",
    "PLDAccountant",
    "PartitionSelection",
    "PrivacyFilter",
    "PrivacyLossDistribution",
    "PureDP",
    "RDPAccountant",
    "RecordedCost",
    "SelfComposed",
    "Subsampled",
    "UnknownEventError",
    "UnsupportedEventError",
    "ZCDPAccountant",
    "calibrate_noise",
    "calibrate_noise_multiplier",
    "compare_discrete_mechanisms",
    "describe",
    "event_from_json",
    "event_to_json",
    "format_bound",
]
