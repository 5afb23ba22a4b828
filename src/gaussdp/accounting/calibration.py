r"""Noise calibration under composition, certified by the PLD upper bound.

:func:`calibrate_noise_multiplier` finds the DP-SGD noise multiplier (σ/C) for a
target ε; :func:`calibrate_noise` the smallest noise scale of any supported
mechanism family for a target (ε, δ) under k-fold composition. Both return a value
whose certified ε upper bound (:class:`~gaussdp.accounting.PLDAccountant`) is at
most the target, and which is within ``rtol`` of the smallest such value on the
accountant's grid (a bracket is kept whose lower end misses the target).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Literal

from gaussdp._search import smallest_passing, smallest_scale
from gaussdp._validation import check_count, check_delta, check_int, check_positive
from gaussdp.accounting.accountants import PLDAccountant, RDPAccountant
from gaussdp.accounting.events import Event, Subsampled, check_rate
from gaussdp.errors import invalid
from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace

__all__ = ["calibrate_noise", "calibrate_noise_multiplier"]

#: calibrate_noise_multiplier refuses a larger target ε: e^100 bounds no likelihood ratio
#: worth protecting, and the search for the tiny σ it allows takes minutes to hours.
MAX_TARGET_EPSILON = 100.0

Family = Literal["gaussian", "discrete_gaussian", "discrete_laplace", "laplace"]


def _pld_epsilon(event: Event, count: int, delta: float, h: float | None = None) -> float:
    try:
        return PLDAccountant(value_discretization=h).compose(event, count).epsilon(delta).upper
    except ValueError:
        if h is None:
            raise
    # The search's grid step h (set from the starting scale) does not fit the memory
    # bound at this scale: the accountant's own grid, coarsened to fit, still certifies.
    return _pld_epsilon(event, count, delta, None)


def _coarse_then_fine(
    eps_of: Callable[[float, float | None], float],
    target: float,
    start: float,
    rtol: float,
    fine_h: float,
) -> float:
    """Search on a grid 4x coarser (fast), then finish on the accountant's grid.

    The coarse step is capped at 1 nat, the largest grid step a PLD takes; the
    accountant's own grid may be coarser (a lone lattice event on its lattice).
    """
    coarse_h = min(4 * fine_h, 1.0)
    coarse = smallest_scale(lambda s: eps_of(s, coarse_h), target, start, rtol / 2)
    return smallest_scale(lambda s: eps_of(s, None), target, coarse, rtol, step=1 + rtol)


def steps_per_epoch(sample_rate: float) -> int:
    """DP-SGD steps in one epoch at Poisson sampling rate q: ``max(1, round(1/q))``.

    The one rule of :func:`gaussdp.ml.make_private`, its data loader and
    ``gaussdp dpsgd --epochs`` (an expected batch of qN examples, N/(qN) batches).

    >>> steps_per_epoch(256 / 60000), steps_per_epoch(60 / 100)
    (234, 2)
    """
    return max(1, round(1 / sample_rate))


def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    *,
    rtol: float = 1e-3,
) -> float:
    r"""The smallest DP-SGD noise multiplier (to ``rtol``) meeting (ε, δ) after ``steps`` steps.

    Each step is the Poisson-subsampled Gaussian mechanism with rate q and noise
    multiplier σ (noise standard deviation over the clipping norm). The returned σ
    is certified: the accountant's upper bound on ε is at most ``target_epsilon`` (the
    PLD bound, or, where the PLD's round-off allowance exceeds δ, e.g. δ = 1e-12 on
    long runs, the RDP bound it falls back to; see docs/accounting.md §4).

    Parameters
    ----------
    target_epsilon : float
        Target ε, in (0, :data:`MAX_TARGET_EPSILON` = 100].
    delta : float
        Target δ, in (0, 1).
    sample_rate : float
        Poisson sampling rate q (batch size / dataset size), in (0, 1]; refused if
        1 − (1 − q)^steps ≤ δ (then the run is (0, δ)-DP without noise).
    steps : int
        Number of steps, >= 1.
    rtol : float, default 1e-3
        Relative width of the final bracket: the answer is within ``rtol`` of the
        smallest certified σ.

    Returns
    -------
    float
        The noise multiplier σ.

    Raises
    ------
    TypeError, ValueError
        For arguments outside their ranges.

    Examples
    --------
    >>> sigma = calibrate_noise_multiplier(3.0, 1e-5, 256 / 60000, 14063)
    >>> round(sigma, 3)
    0.969
    """
    target = check_positive("target_epsilon", target_epsilon)
    if target > MAX_TARGET_EPSILON:
        constraint = f"a real number in (0, {MAX_TARGET_EPSILON:g}] (a larger ε protects nothing)"
        raise ValueError(invalid("target_epsilon", constraint, target_epsilon))
    delta = check_delta("delta", delta)
    steps = check_count("steps", steps)
    rtol = check_positive("rtol", rtol)
    q = check_rate("sample_rate", sample_rate)
    # Without noise the run is (0, δ')-DP with δ' = P(an example is ever sampled) =
    # 1 − (1 − q)^steps: at δ' ≤ δ every σ meets any target and no smallest one exists.
    if q < 1 and -math.expm1(steps * math.log1p(-q)) <= delta:
        constraint = f"large enough that 1 - (1 - sample_rate)**{steps} exceeds delta = {delta:g}"
        raise ValueError(invalid("sample_rate", constraint, sample_rate))

    def eps_of(sigma: float, h: float | None) -> float:
        return _pld_epsilon(Subsampled(Gaussian(sigma), q), steps, delta, h)

    # Start from the RDP answer (an over-estimate of σ), found cheaply by bisection.
    def rdp_eps(sigma: float) -> float:
        acc = RDPAccountant().compose(Subsampled(Gaussian(sigma), q), steps)
        return acc.epsilon(delta).upper

    lo, hi = 0.05, 1.0
    while rdp_eps(hi) > target:
        lo, hi = hi, hi * 2
        if hi > 1e6:
            # RDP's orders (≤ 1024) floor its ε near ln(1/δ)/1023, but the PLD has no such
            # floor: search on the PLD alone, to 2 %, from the central-limit σ (at large σ
            # the run is close to q·√steps/σ-GDP, the CLT view of DP-SGD in Dong, Roth and
            # Su's GDP paper; only a start: the PLD decides).
            from gaussdp.privacy import gdp_mu

            start = q * math.sqrt(steps) / gdp_mu(target, delta)
            hi = smallest_scale(lambda s: eps_of(s, None), target, start, 0.02, step=2.0)
            break
    else:
        # The RDP σ to 2 % (a start: the PLD search below decides).
        hi = math.exp(
            smallest_passing(
                lambda x: rdp_eps(math.exp(x)) <= target,
                math.log(lo),
                math.log(hi),
                rel_tol=0.0,
                abs_tol=math.log(1.02),
                grow=True,
            )
        )
    fine_h = PLDAccountant().compose(Subsampled(Gaussian(hi), q), steps).value_discretization
    return _coarse_then_fine(eps_of, target, 0.95 * hi, rtol, fine_h)


def calibrate_noise(
    family: Family,
    target_epsilon: float,
    delta: float,
    count: int = 1,
    *,
    sensitivity: int | float = 1,
    rtol: float = 1e-3,
) -> Gaussian | DiscreteGaussian | DiscreteLaplace | Laplace:
    r"""The mechanism with the smallest noise meeting (ε, δ) after ``count`` runs.

    Parameters
    ----------
    family : {"gaussian", "discrete_gaussian", "discrete_laplace", "laplace"}
        The mechanism family. For ``"gaussian"`` the answer is exact (μ-GDP,
        DRS Cor 2.13 and 3.3); otherwise it is certified by the PLD upper bound.
    target_epsilon : float
        Target ε, > 0.
    delta : float
        Target δ, in (0, 1).
    count : int, default 1
        Number of composed runs.
    sensitivity : int or float, default 1
        The query's sensitivity (an integer for the discrete families).
    rtol : float, default 1e-3
        Relative precision of the noise scale.

    Returns
    -------
    Gaussian, DiscreteGaussian, DiscreteLaplace or Laplace
        The calibrated mechanism (discrete scales are rounded up to a rational).

    Examples
    --------
    >>> g = calibrate_noise("gaussian", 1.0, 1e-5, count=10)
    >>> round(g.sigma, 3)
    11.797
    >>> dl = calibrate_noise("discrete_laplace", 1.0, 1e-6, count=100)
    >>> float(dl.scale) > 0
    True
    """
    target = check_positive("target_epsilon", target_epsilon)
    delta = check_delta("delta", delta)
    count = check_count("count", count)
    if family == "gaussian":
        from gaussdp.privacy import gdp_mu

        # DRS Cor 3.3: k runs of μ-GDP are √k·μ-GDP; Cor 2.13 gives the largest μ.
        mu_total = gdp_mu(target, delta)
        sens = check_positive("sensitivity", sensitivity)
        return Gaussian(sigma=sens * math.sqrt(count) / mu_total, sensitivity=sens)

    def to_fraction(x: float) -> Fraction:
        # Round up to 8 significant decimal digits (never below x).
        e = math.floor(math.log10(x)) - 7
        unit = Fraction(10) ** e
        return math.ceil(Fraction(x) / unit) * unit

    if family == "discrete_gaussian":
        d = check_int("sensitivity", sensitivity, minimum=1)

        def make(s: float) -> Event:
            return DiscreteGaussian(to_fraction(s * s), d)

        start = (
            d * math.sqrt(count) / 1.0 * max(1.0, math.sqrt(2 * math.log(1.25 / delta)) / target)
        )
    elif family == "discrete_laplace":
        d = check_int("sensitivity", sensitivity, minimum=1)

        def make(s: float) -> Event:
            return DiscreteLaplace(to_fraction(s), d)

        start = d * count / target
    elif family == "laplace":
        sens = check_positive("sensitivity", sensitivity)

        def make(s: float) -> Event:
            return Laplace(scale=s, sensitivity=sens)

        start = sens * count / target
    else:
        raise ValueError(
            invalid(
                "family",
                "one of 'gaussian', 'discrete_gaussian', 'discrete_laplace', 'laplace'",
                family,
            )
        )
    fine_h = PLDAccountant().compose(make(start), count).value_discretization
    scale = _coarse_then_fine(
        lambda s, h: _pld_epsilon(make(s), count, delta, h), target, start, rtol, fine_h
    )
    result = make(scale)
    if not isinstance(result, (DiscreteGaussian, DiscreteLaplace, Laplace)):  # pragma: no cover
        raise TypeError(invalid("family", "a mechanism family", family))
    return result
