"""Pure privacy mathematics: no randomness, no I/O.

μ-GDP (trade-off curve, exact privacy profile, composition, calibration of the
Gaussian mechanism), zCDP and RDP conversions to (ε, δ)-DP, and the discrete
Gaussian and discrete Laplace distributions (frozen objects; their ``rvs`` is the
one door to randomness here, through :mod:`gaussdp.sampling`).
"""

from __future__ import annotations

from gaussdp.privacy.discrete import DiscreteGaussianDistribution, DiscreteLaplaceDistribution
from gaussdp.privacy.gdp import (
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    equal_error_rate,
    gdp_compose,
    gdp_delta,
    gdp_epsilon,
    gdp_log_delta,
    gdp_mu,
    gdp_tradeoff,
    mia_advantage,
)
from gaussdp.privacy.zcdp import (
    RdpEpsilon,
    rdp_epsilon,
    rdp_epsilon_order,
    zcdp_delta,
    zcdp_epsilon,
    zcdp_rho,
)

__all__ = [
    "DiscreteGaussianDistribution",
    "DiscreteLaplaceDistribution",
    "RdpEpsilon",
    "analytic_gaussian_sigma",
    "classic_gaussian_sigma",
    "equal_error_rate",
    "gdp_compose",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_log_delta",
    "gdp_mu",
    "gdp_tradeoff",
    "mia_advantage",
    "rdp_epsilon",
    "rdp_epsilon_order",
    "zcdp_delta",
    "zcdp_epsilon",
    "zcdp_rho",
]
