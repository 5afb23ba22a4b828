"""Pure privacy mathematics: no randomness, no I/O.

μ-GDP (trade-off curve, exact privacy profile, composition, calibration of the
Gaussian mechanism), zCDP and RDP conversions to (ε, δ)-DP, and the discrete
Gaussian and discrete Laplace distributions.
"""

from __future__ import annotations

from gaussdp.privacy.discrete import (
    discrete_gaussian_cdf,
    discrete_gaussian_delta,
    discrete_gaussian_log_normalizer,
    discrete_gaussian_logcdf,
    discrete_gaussian_logpmf,
    discrete_gaussian_logsf,
    discrete_gaussian_normalizer,
    discrete_gaussian_pmf,
    discrete_gaussian_sf,
    discrete_gaussian_sigma2,
    discrete_gaussian_variance,
    discrete_laplace_delta,
    discrete_laplace_epsilon,
    discrete_laplace_logpmf,
    discrete_laplace_pmf,
    discrete_laplace_variance,
)
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
    "RdpEpsilon",
    "analytic_gaussian_sigma",
    "classic_gaussian_sigma",
    "discrete_gaussian_cdf",
    "discrete_gaussian_delta",
    "discrete_gaussian_log_normalizer",
    "discrete_gaussian_logcdf",
    "discrete_gaussian_logpmf",
    "discrete_gaussian_logsf",
    "discrete_gaussian_normalizer",
    "discrete_gaussian_pmf",
    "discrete_gaussian_sf",
    "discrete_gaussian_sigma2",
    "discrete_gaussian_variance",
    "discrete_laplace_delta",
    "discrete_laplace_epsilon",
    "discrete_laplace_logpmf",
    "discrete_laplace_pmf",
    "discrete_laplace_variance",
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
