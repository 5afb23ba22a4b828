r"""Mechanisms as frozen, validated value objects.

A mechanism object describes one noise-adding mechanism: its noise scale, the
sensitivity it is calibrated for, and every privacy view of it (μ-GDP, ρ-zCDP,
Rényi DP, the exact (ε, δ) profile, the trade-off function). It is immutable and
checked at construction, so an invalid mechanism cannot exist.

Neighbouring datasets are add/remove-one by default (REFERENCE §1); the
``sensitivity`` field is the L2 sensitivity (Gaussian) or the integer L1
sensitivity (discrete mechanisms) under whichever relation the caller uses.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import partial
from typing import ClassVar, Literal

import numpy as np
import numpy.typing as npt
from scipy import special

from gaussdp._search import smallest_passing, smallest_passing_int
from gaussdp._validation import (
    check_delta,
    check_epsilon,
    check_fraction,
    check_int,
    check_positive,
    check_probability,
    nonfinite_at,
    redacted,
)
from gaussdp.errors import invalid
from gaussdp.privacy.discrete import (
    DiscreteGaussianDistribution,
    DiscreteLaplaceDistribution,
    _to_float_or_inf,
)
from gaussdp.privacy.gdp import (
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    gdp_delta,
    gdp_epsilon,
    gdp_tradeoff,
)
from gaussdp.privacy.zcdp import zcdp_epsilon
from gaussdp.random import RandomSource, check_rng
from gaussdp.sampling import FixedWork, discrete_gaussian, discrete_laplace

__all__ = [
    "DiscreteGaussian",
    "DiscreteLaplace",
    "Gaussian",
    "Interval",
    "Laplace",
    "LatticeGaussian",
    "epsilon_with_slack",
    "gdp_delta_with_slack",
    "smoothing_log_ratio",
]

FloatOrArray = float | npt.NDArray[np.float64]
IntOrArray = int | npt.NDArray[np.int64] | npt.NDArray[np.object_]

# Gaussian.release keeps every lattice value below 2**52 so that γ·k is an exact float.
_MAX_LATTICE_INDEX = 2**52


@dataclass(frozen=True, slots=True)
class Interval:
    """A closed interval ``[low, high]``, e.g. a confidence interval for a noisy value."""

    low: float
    high: float

    @property
    def half_width(self) -> float:
        """Half the interval's width."""
        return (self.high - self.low) / 2


def _sample(draw: npt.NDArray[np.int64] | npt.NDArray[np.object_], size: object) -> IntOrArray:
    """A 0-d draw becomes a Python int when ``size`` is None; arrays pass through."""
    if size is None:
        return int(draw.reshape(()).item())
    return draw


def _integer_values(value: object) -> tuple[IntOrArray, bool]:
    """Validate an integer query answer: a Python/numpy int or an integer array.

    Returns the values (an int64 or object array, or a Python int) and whether the
    input was a scalar. Floats, even integral ones, are refused: real values go
    through :meth:`Gaussian.release`.
    """
    constraint = "an integer or an array of integers (use Gaussian.release for real values)"
    if isinstance(value, bool | np.bool_):
        raise TypeError(invalid("value", constraint, redacted(value)))
    if isinstance(value, int | np.integer):
        return int(value), True
    array = np.asarray(value)
    if array.dtype == object:
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in array.flat):
            raise TypeError(invalid("value", constraint, redacted(value)))
        return array, False
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(invalid("value", constraint, redacted(value)))
    if array.dtype == np.uint64:  # may exceed int64: keep exact Python ints
        return array.astype(object), False
    return array.astype(np.int64), False


def _release_integers(
    sample: Callable[..., IntOrArray],
    value: object,
    rng: RandomSource | None,
    work: FixedWork | None,
) -> IntOrArray:
    """Validate an integer answer, then add ``sample``'s noise of the same shape to it."""
    values, scalar = _integer_values(value)
    source = check_rng(rng)
    noise = sample(None if scalar else np.shape(values), rng=source, work=work)
    return _add_integer_noise(values, noise)


def _add_integer_noise(values: IntOrArray, noise: IntOrArray) -> IntOrArray:
    """Exact integer addition, widening to Python ints where int64 could overflow."""
    if isinstance(values, int):
        return values + int(np.asarray(noise).item())
    values_array = np.asarray(values)
    noise_array = np.asarray(noise)
    limit = np.iinfo(np.int64).max // 2
    exact_in_int64 = (
        values_array.dtype != object
        and noise_array.dtype != object
        and (values_array.size == 0 or int(np.abs(values_array).max()) < limit)
        and (noise_array.size == 0 or int(np.abs(noise_array).max()) < limit)
    )
    if exact_in_int64:
        summed: npt.NDArray[np.int64] = values_array.astype(np.int64) + noise_array
        return summed
    widened: npt.NDArray[np.object_] = values_array.astype(object) + noise_array.astype(object)
    return widened


_REAL_CONSTRAINT = "a finite real number or a non-empty array of them"


def _real_array(value: object) -> npt.NDArray[np.generic]:
    """Validate a real query answer without rounding it.

    Returns a float64 array (floats, and ints that float64 holds exactly), an int64
    array (integer dtypes that fit), or an object array of exact ``int``/``Fraction``
    values (Python ints of any size, uint64, long doubles, Fractions, Decimals, and
    lists mixing floats with ints of 2**53 or more, which float64 would round).
    """
    try:
        array = np.asarray(value)
    except (ValueError, OverflowError):  # ragged nesting
        raise ValueError(
            invalid("value", _REAL_CONSTRAINT, redacted(value, "ragged nesting"))
        ) from None
    if array.size == 0:
        raise ValueError(invalid("value", _REAL_CONSTRAINT, redacted(value, "no entries")))
    kind, itemsize = array.dtype.kind, array.dtype.itemsize
    if kind == "f" and itemsize <= 8:
        floats = array.astype(np.float64)
        if not np.all(np.isfinite(floats)):
            raise ValueError(
                invalid("value", _REAL_CONSTRAINT, redacted(value, nonfinite_at(floats)))
            )
        # A list may hold ints that np.asarray rounded to float64: any of 2**53 or more
        # would be rounded; below that every int is exact.
        if isinstance(value, np.ndarray | np.generic) or not np.any(np.abs(floats) >= 2.0**53):
            return floats
        array = np.asarray(value, dtype=object)
    elif (kind in "iu" and itemsize < 8) or kind == "i":
        return array.astype(np.int64)
    elif kind not in "fuO":
        raise TypeError(invalid("value", _REAL_CONSTRAINT, redacted(value)))
    exact = np.empty(array.shape, dtype=object)
    flat = exact.reshape(-1)
    for i, item in enumerate(array.reshape(-1).tolist() if kind == "O" else array.flat):
        flat[i] = _exact_real(item, value)
    return exact


def _exact_real(item: object, value: object) -> int | Fraction:
    """One entry of a real answer as an exact int or Fraction (floats at their binary value)."""
    if isinstance(item, bool | np.bool_):
        raise TypeError(invalid("value", _REAL_CONSTRAINT, redacted(value, "a boolean entry")))
    if isinstance(item, int | np.integer):
        return int(item)
    if isinstance(item, Fraction):
        return item
    if isinstance(item, Decimal):
        if not item.is_finite():
            raise ValueError(
                invalid("value", _REAL_CONSTRAINT, redacted(value, "a NaN or infinity"))
            )
        return Fraction(item)  # exact
    if isinstance(item, float | np.floating):
        if not np.isfinite(item):
            raise ValueError(
                invalid("value", _REAL_CONSTRAINT, redacted(value, "a NaN or infinity"))
            )
        numerator, denominator = item.as_integer_ratio()  # exact: a float is a dyadic rational
        return Fraction(numerator, denominator)
    problem = f"an entry of type {type(item).__name__}"
    raise TypeError(invalid("value", _REAL_CONSTRAINT, redacted(value, problem)))


def _round_to_grid(array: npt.NDArray[np.generic], gamma: float) -> npt.NDArray[np.int64]:
    """The nearest grid index round(x/γ) of every entry (ties to even), computed exactly.

    γ = 2**e is a power of two. Floats: x/γ is exact unless it leaves the normal range;
    if it underflows, |x/γ| < 2**-1022 and both it and the exact quotient round to 0,
    and if it overflows to ±inf, the exact |x/γ| is beyond the grid's limit as well, so
    ``rint`` gives the exact nearest integer (or an over-limit value the caller refuses).
    Integers: a shift and an integer half-to-even step. Other exact values: ``round`` of
    the exact Fraction (half to even). Every index is then clamped to
    [−_MAX_LATTICE_INDEX, _MAX_LATTICE_INDEX]: the clamp of the exact nearest index
    (1-Lipschitz per coordinate, so neighbours never move apart).
    """
    exponent = math.frexp(gamma)[1] - 1  # gamma = 2**exponent exactly
    limit = _MAX_LATTICE_INDEX
    if array.dtype == np.float64:
        floats = array.astype(np.float64)
        with np.errstate(over="ignore"):  # an overflow to ±inf is clamped below
            scaled = np.rint(floats / gamma)
        clipped: npt.NDArray[np.int64] = np.clip(scaled, -limit, limit).astype(np.int64)
        return clipped
    if array.dtype == np.int64 and -62 <= exponent <= 62:
        values = array.astype(np.int64)
        index: npt.NDArray[np.int64]
        if exponent <= 0:
            cap = max(limit >> -exponent, 1)  # |v| >= cap gives an index >= limit
            too_big = (values >= cap) | (values <= -cap)
            shifted = np.where(too_big, 0, values) << np.int64(-exponent)
            index = np.where(too_big, np.sign(values) * limit, shifted)
            return index
        quotient = values >> np.int64(exponent)  # floor(v / 2**e)
        remainder = values - (quotient << np.int64(exponent))  # in [0, 2**e)
        half = np.int64(1) << np.int64(exponent - 1)
        up = (remainder > half) | ((remainder == half) & ((quotient & 1) == 1))
        index = np.clip(quotient + up, -limit, limit)
        return index
    step = Fraction(gamma)
    rounded = [round(Fraction(x) / step) for x in array.reshape(-1).tolist()]
    within = [max(-limit, min(limit, r)) for r in rounded]
    return np.array(within, dtype=np.int64).reshape(array.shape)


def _ceil_sqrt(n: int) -> int:
    root = math.isqrt(n)
    return root if root * root == n else root + 1


def _round_up_dyadic(x: Fraction, bits: int = 40) -> Fraction:
    """The smallest number ≥ ``x`` of the form m·2^e with ``bits``-bit m (keeps σ² compact)."""
    exponent = x.numerator.bit_length() - x.denominator.bit_length() - bits
    scale = Fraction(2) ** exponent
    return math.ceil(x / scale) * scale


def smoothing_log_ratio(tau2: Fraction) -> float:
    r"""Upper bound on a = ln((1+η)/(1−η)), η = 2Σ_{k≥1} e^{−2π²τ²k²} (Poisson summation).

    For t² ≥ τ², Σ_{w∈ℤ} e^{−(w−y)²/(2t²)}/(√(2π)t) = 1 + 2Σ_{k≥1} e^{−2π²t²k²}cos(2πky)
    lies in [1 − η, 1 + η]; a bounds the log-ratio of a discrete Gaussian's pmf to the
    smoothed continuous Gaussian's (see :class:`LatticeGaussian`). Requires τ² ≥ 1.

    Examples
    --------
    >>> smoothing_log_ratio(Fraction(9)) < 1e-76
    True
    """
    if tau2 < 1:
        raise ValueError(invalid("tau2", "at least 1", tau2))
    # Σ_{k≥1} r^{k²} ≤ r/(1 − r) with r = e^{−2π²τ²} ≤ e^{−19.7}; the factors (1 + 1e-9)
    # absorb floating-point error in exp, and ln((1+η)/(1−η)) ≤ 2η/(1−η) ≤ 2η(1 + 1e-9).
    r = math.exp(-2 * math.pi**2 * float(tau2)) * (1 + 1e-9)
    eta = 2 * r / (1 - r) * (1 + 1e-9)
    return 2 * eta * (1 + 1e-9)


def epsilon_with_slack(epsilon_at: Callable[[float], float], delta: float, slack: float) -> float:
    """ε at δ of a mechanism whose output law is within e^{±slack} of one with ``epsilon_at``.

    If P ≤ e^A P' and P' ≤ e^A P pointwise, and P' is (ε, δ')-DP, then P is
    (ε + 2A, e^A·δ')-DP; so ε(δ) ≤ ε'(δe^{−A}) + 2A. Both roundings go the safe way.
    """
    if slack == 0:
        return epsilon_at(delta)
    shrunk = math.nextafter(delta * math.exp(-slack), 0.0)
    return math.nextafter(epsilon_at(shrunk) + 2 * slack, math.inf)


def gdp_delta_with_slack(mu: float, epsilon: float, slack: float) -> float:
    """δ at ε of a mechanism within e^{±slack} of a μ-GDP one: e^A·δ_μ(ε − 2A), rounded up."""
    if math.isinf(mu):
        return 1.0
    if slack == 0:
        return gdp_delta(mu, epsilon)
    shifted = max(0.0, math.nextafter(epsilon - 2 * slack, -math.inf))
    return min(1.0, math.nextafter(gdp_delta(mu, shifted) * math.exp(slack), math.inf))


def _check_level(level: object) -> float:
    return check_probability("level", level, open_interval=True)


def _check_order(order: object) -> float:
    value = check_positive("order", order, allow_inf=True)
    if value <= 1:
        raise ValueError(invalid("order", "a real number > 1", order))
    return value


def _smallest_epsilon(delta_of: Callable[[float], float], delta: float, upper: float) -> float:
    """Smallest ε in [0, upper] with ``delta_of(ε) <= delta``, never under-reported.

    ``delta_of`` must be non-increasing; ``upper`` is a first guess at an ε with
    ``delta_of(upper) <= delta`` (the bracket grows until it is one). The safe-side
    search (:func:`gaussdp._search.smallest_passing`) returns a point where
    ``delta_of(ε) <= delta`` was evaluated, so the answer is at least the true ε and
    within 1e-12 relative (or 1e-15 absolute) of it.
    """
    return smallest_passing(
        lambda e: delta_of(e) <= delta, 0.0, upper, rel_tol=1e-12, abs_tol=1e-15, grow=True
    )


@functools.lru_cache(maxsize=256)
def _gaussian_lattice(sigma: float, sensitivity: float, dim: int) -> LatticeGaussian:
    """:meth:`Gaussian.lattice`, cached: its exact Fraction arithmetic costs more than a
    scalar release's draw, and a mechanism releases many values of one size."""
    root = _ceil_sqrt(dim)
    by_sensitivity, by_sigma = sensitivity / (250 * root), sigma / 20
    if min(by_sensitivity, by_sigma) < 2.0**-999:  # also when a quotient underflows to 0
        name, value = (
            ("sensitivity", sensitivity) if by_sensitivity < by_sigma else ("sigma", sigma)
        )
        raise ValueError(invalid(name, "large enough for a normal-float release grid", value))
    _, exponent = math.frexp(min(by_sensitivity, by_sigma))
    gamma = math.ldexp(1.0, exponent - 1)
    bound = LatticeGaussian.sensitivity_bound(sensitivity, gamma, dim)
    # σ_Z² ≥ (σ·L/Δ)² + τ²: the continuous part s = √(σ_Z² − τ²) has L/s ≤ Δ/σ, so the
    # lattice mechanism is at least as private as this one (see LatticeGaussian), and
    # its ρ = L²/(2σ_Z²) is at most the Gaussian's.
    scaled = (Fraction(sigma) * bound / Fraction(sensitivity)) ** 2
    sigma2 = _round_up_dyadic(scaled + LatticeGaussian.SMOOTHING_TAU2)
    return LatticeGaussian(gamma=gamma, sigma2=sigma2, dim=dim, sensitivity=sensitivity)


@dataclass(frozen=True, slots=True)
class Gaussian:
    r"""The Gaussian mechanism: add :math:`N(0, \sigma^2)` to a query of L2 sensitivity Δ.

    It is exactly μ-GDP with μ = Δ/σ (DRS Thm 2.7), ρ-zCDP with ρ = μ²/2, and
    (α, αρ)-RDP for every α > 1. Its (ε, δ) profile is exact (DRS Cor 2.13).

    Parameters
    ----------
    sigma : float
        Standard deviation of the noise, finite and > 0.
    sensitivity : float, default 1.0
        L2 sensitivity Δ of the query, finite and > 0.

    Raises
    ------
    ValueError, TypeError
        If ``sigma`` or ``sensitivity`` is not a finite positive number.

    Examples
    --------
    >>> g = Gaussian.calibrate(epsilon=1.0, delta=1e-6)
    >>> round(g.sigma, 4), round(g.mu, 4)
    (4.2247, 0.2367)
    >>> round(g.epsilon(1e-6), 6)
    1.0
    >>> Gaussian(sigma=2.0).mu
    0.5
    """

    sigma: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", check_positive("sigma", self.sigma))
        object.__setattr__(self, "sensitivity", check_positive("sensitivity", self.sensitivity))

    # -- constructors -----------------------------------------------------------------
    @classmethod
    def calibrate(
        cls,
        *,
        epsilon: float,
        delta: float,
        sensitivity: float = 1.0,
        method: Literal["analytic", "classic"] = "analytic",
    ) -> Gaussian:
        """The Gaussian mechanism meeting (ε, δ)-DP with the least noise.

        ``method="analytic"`` (default) gives the smallest σ (Balle & Wang 2018);
        ``"classic"`` gives Δ·√(2 ln(1.25/δ))/ε (Dwork & Roth Thm A.1), valid only
        for ε < 1 and always larger.
        """
        if method == "analytic":
            sigma = analytic_gaussian_sigma(epsilon, delta, sensitivity)
        elif method == "classic":
            sigma = classic_gaussian_sigma(epsilon, delta, sensitivity)
        else:
            raise ValueError(invalid("method", "'analytic' or 'classic'", method))
        return cls._overflow_checked(sigma, sensitivity, f"epsilon={epsilon}, delta={delta}")

    @classmethod
    def from_mu(cls, mu: float, sensitivity: float = 1.0) -> Gaussian:
        """The Gaussian mechanism that is exactly μ-GDP: σ = Δ/μ (DRS Thm 2.7)."""
        mu = check_positive("mu", mu)
        sensitivity = check_positive("sensitivity", sensitivity)
        return cls._overflow_checked(sensitivity / mu, sensitivity, f"mu={mu}")

    @classmethod
    def from_rho(cls, rho: float, sensitivity: float = 1.0) -> Gaussian:
        """The Gaussian mechanism that is exactly ρ-zCDP: σ = Δ/√(2ρ) (Bun & Steinke 2016)."""
        rho = check_positive("rho", rho)
        sensitivity = check_positive("sensitivity", sensitivity)
        return cls._overflow_checked(sensitivity / math.sqrt(2 * rho), sensitivity, f"rho={rho}")

    @classmethod
    def _overflow_checked(cls, sigma: float, sensitivity: float, given: str) -> Gaussian:
        """The mechanism with this σ; a σ past the float range names ``sensitivity``
        (the argument that scales it), not a ``sigma`` the caller never gave."""
        if math.isinf(sigma):
            raise ValueError(
                invalid("sensitivity", f"small enough for a finite σ at {given}", sensitivity)
            )
        return cls(sigma=sigma, sensitivity=sensitivity)

    # -- privacy views ----------------------------------------------------------------
    @property
    def mu(self) -> float:
        """μ of the tight μ-GDP guarantee, Δ/σ (DRS Thm 2.7)."""
        return self.sensitivity / self.sigma

    @property
    def rho(self) -> float:
        """ρ of the tight ρ-zCDP guarantee, Δ²/(2σ²) (Bun & Steinke 2016 Prop 1.6)."""
        mu = self.mu
        return mu * mu / 2  # ∞, not OverflowError, past μ = 1e154

    def rdp(self, order: float) -> float:
        """Rényi divergence bound at ``order`` α > 1: αΔ²/(2σ²) (Mironov 2017 Prop 7)."""
        return _check_order(order) * self.rho

    def delta(self, epsilon: float) -> float:
        """Smallest δ for (ε, δ)-DP at this ε (DRS Cor 2.13), rounded up (:func:`gdp_delta`)."""
        return gdp_delta(self.mu, epsilon)

    def epsilon(self, delta: float) -> float:
        """Exact smallest ε for (ε, δ)-DP at this δ (DRS Cor 2.13)."""
        return gdp_epsilon(self.mu, delta)

    def tradeoff(self, alpha: FloatOrArray) -> FloatOrArray:
        """Trade-off function G_μ(α): least type II error at type I error α (DRS Def 2.6)."""
        return gdp_tradeoff(self.mu, alpha)

    # -- float-safe release -------------------------------------------------------------
    def lattice(self, dim: int = 1) -> LatticeGaussian:
        """The mechanism :meth:`release` actually runs on a ``dim``-dimensional value.

        The grid step γ is the largest power of two with γ ≤ Δ/(250⌈√d⌉) and
        γ ≤ σ/20, so the rounding costs under 1% of the variance (the sensitivity
        grows by at most 0.4%, and the rounding error is at most (γ/2)² ≤ σ²/1600
        per coordinate). The lattice noise σ_Z² is σ² scaled by the grown
        sensitivity, plus the smoothing margin τ² = 9, rounded up: the released
        mechanism's μ is at most :attr:`mu` and its ρ at most :attr:`rho`, and it
        satisfies this mechanism's (ε, δ) profile up to a certified slack of about
        d·10⁻⁷⁶ (see :class:`LatticeGaussian`).

        Examples
        --------
        >>> lattice = Gaussian(sigma=4.0).lattice()
        >>> lattice.gamma
        0.00390625
        >>> lattice.rho <= Gaussian(sigma=4.0).rho
        True
        """
        return _gaussian_lattice(self.sigma, self.sensitivity, check_int("dim", dim, minimum=1))

    def release(
        self, value: object, *, rng: RandomSource | None = None, work: FixedWork | None = None
    ) -> FloatOrArray:
        r"""Release a real scalar or vector with exact discrete noise on a grid, never float noise.

        Rounds ``value`` to the nearest point of the grid γℤ (ties to even), adds
        γ·N_Z(0, σ_Z²) per coordinate and returns values on the grid (exact floats
        while |value/γ| + noise < 2**53). The rounding is exact and happens once:
        ``value`` may hold floats, ints of any size (numpy ints, Python ints,
        object arrays), Fractions and Decimals, and none is converted to float64
        first — a double rounding could put neighbours one grid unit further apart
        than the sensitivity the lattice charges.
        The guarantee of what is released is that of :meth:`lattice` for the
        value's size: its μ and ρ are at most this mechanism's, and its certified
        :meth:`~LatticeGaussian.epsilon` is this mechanism's ε up to a slack below
        10⁻⁷⁰ (an ulp after rounding up) — report that one for the release.
        ``value`` must be the answer of a query with L2 sensitivity
        :attr:`sensitivity`.

        Each rounded coordinate is clamped to ±2**52 grid steps (±2**52·γ, about
        1.8e13 for σ = Δ = 1), so its float is exact. The clamp acts on the input
        before the noise and moves no two coordinates further apart, so it keeps the
        charged sensitivity; it replaces a refusal that depended on the value (a
        neighbour one step below the limit was released, one at it refused).

        Refusals depend on the parameters and on the type and shape of ``value``,
        not on its size. A NaN or infinite entry is refused (the message names its
        position, never a value): a query with finite sensitivity Δ cannot be
        finite on one dataset and not on a neighbour, so under the sensitivity
        contract this refusal is the same for all neighbours. A query that can
        yield NaN or ±inf on some datasets breaks that contract, and its refusal
        would reveal which case holds: the caller must map such answers to finite
        values (within the sensitivity) before calling this method.

        Raises
        ------
        TypeError
            If ``value`` is not real-valued (strings, booleans, complex, objects).
        ValueError
            If ``value`` is empty, NaN or infinite, or if σ is too large (or Δ or σ
            too small) for the released values to be finite floats on a
            normal-float grid. Nothing is drawn.

        Examples
        --------
        >>> from gaussdp.random import ChaCha20Random
        >>> g = Gaussian(sigma=4.0)
        >>> out = g.release([1.25, 10.5], rng=ChaCha20Random(0))
        >>> bool(np.all(out / g.lattice(2).gamma == np.round(out / g.lattice(2).gamma)))
        True
        """
        array = _real_array(value)
        lattice = self.lattice(array.size)
        rng = check_rng(rng)
        # Clamped to ±2**52 grid steps (see the docstring): a clamp, not a refusal, so
        # whether something is released never depends on the value's size.
        index = _round_to_grid(array, lattice.gamma)
        # The released floats γ·(index + noise) stay finite: |noise| < 64 σ_Z except with
        # probability below e^(-2048), and |index| ≤ 2**52. A check of the parameters only.
        noise_bound = 64 * (_ceil_sqrt(math.ceil(lattice.sigma2)))
        if Fraction(lattice.gamma) * (_MAX_LATTICE_INDEX + noise_bound) >= 2**1023:
            raise ValueError(
                invalid(
                    "sigma", "small enough that 64 sigma + |value| is a finite float", self.sigma
                )
            )
        noise = discrete_gaussian(lattice.sigma2, array.shape, rng=rng, work=work)
        total = _add_integer_noise(index, noise)
        released: npt.NDArray[np.float64] = np.asarray(total, dtype=np.float64) * lattice.gamma
        if array.ndim == 0:
            return float(released)
        return released

    # -- utility ----------------------------------------------------------------------
    @property
    def variance(self) -> float:
        """Variance of the noise, σ² (∞ beyond the float range)."""
        return self.sigma * self.sigma

    def confidence_interval(self, level: float, value: float = 0.0) -> Interval:
        """Interval around ``value`` that holds the noise-free answer with probability ``level``.

        Examples
        --------
        >>> ci = Gaussian(sigma=1.0).confidence_interval(0.95)
        >>> round(ci.high, 4)
        1.96
        """
        level = _check_level(level)
        # The upper quantile as minus the lower one: 0.5 + level/2 rounds to 1.0 (an
        # infinite quantile) for level ≥ 1 − 2⁻⁵³, while (1 − level)/2 stays positive.
        half = self.sigma * -float(special.ndtri((1 - level) / 2))
        return Interval(value - half, value + half)


@dataclass(frozen=True, slots=True)
class DiscreteGaussian:
    r"""The discrete Gaussian mechanism: add :math:`N_\mathbb{Z}(0, \sigma^2)` to an integer query.

    σ² is held exactly as a :class:`~fractions.Fraction`. With integer sensitivity
    Δ the mechanism is Δ²/(2σ²)-zCDP (CKS Thm 4), and its (ε, δ) profile is exact
    (CKS Thm 7). That profile is close to, but not the same as, the continuous
    Gaussian's: for small σ² or in far tails it can be worse (e.g. σ² = 10/3,
    ε = 10), so the discrete mechanism reports no μ-GDP parameter; use
    :meth:`delta`, :meth:`epsilon` or :meth:`tradeoff`, which are exact.

    Parameters
    ----------
    sigma2 : Fraction, int, float or str
        The scale parameter σ² (the variance is slightly less, CKS Prop 21). Floats
        are converted exactly; strings such as ``"25/4"`` are parsed exactly.
    sensitivity : int, default 1
        L2 sensitivity Δ of the integer-valued query, an integer ≥ 1.

    Examples
    --------
    >>> dg = DiscreteGaussian("25/4")
    >>> dg.sigma2
    Fraction(25, 4)
    >>> dg.rho
    0.08
    >>> round(dg.epsilon(1e-6), 4)
    1.7775
    """

    sigma2: Fraction
    sensitivity: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma2", check_fraction("sigma2", self.sigma2))
        object.__setattr__(
            self, "sensitivity", check_int("sensitivity", self.sensitivity, minimum=1)
        )

    @property
    def noise(self) -> DiscreteGaussianDistribution:
        """The noise N_Z(0, σ²) as a distribution (pmf, tails, δ; σ² in [1e-12, 1e300])."""
        return DiscreteGaussianDistribution(self.sigma2)

    @classmethod
    def calibrate(cls, *, epsilon: float, delta: float, sensitivity: int = 1) -> DiscreteGaussian:
        """The smallest σ² on gaussdp's rational grid meeting (ε, δ) exactly (CKS Thm 7).

        See :meth:`gaussdp.privacy.DiscreteGaussianDistribution.calibrate` for the grid.
        """
        sigma2 = DiscreteGaussianDistribution.calibrate(epsilon, delta, sensitivity).sigma2
        return cls(sigma2=sigma2, sensitivity=sensitivity)

    @property
    def sigma(self) -> float:
        """√σ², the scale parameter as a float."""
        return math.sqrt(self.sigma2)

    @property
    def rho(self) -> float:
        """Δ²/(2σ²): the mechanism is ρ-zCDP (CKS Thm 4)."""
        return _to_float_or_inf(Fraction(self.sensitivity**2) / (2 * self.sigma2))

    def rdp(self, order: float) -> float:
        """Rényi divergence bound at ``order`` α > 1: αρ (CKS Thm 4)."""
        return _check_order(order) * self.rho

    def delta(self, epsilon: float) -> float:
        """Exact smallest δ at this ε (CKS Thm 7)."""
        return self.noise.delta(epsilon, self.sensitivity)

    def epsilon(self, delta: float) -> float:
        """Smallest ε with :meth:`delta` ≤ δ, never under-reported (bisection on CKS Thm 7)."""
        delta = check_delta("delta", delta)
        # ρ-zCDP (CKS Thm 4) ⇒ (zcdp_epsilon(ρ, δ), δ)-DP (CKS Cor 13): a valid upper bracket.
        upper = zcdp_epsilon(self.rho, delta)
        return _smallest_epsilon(self.delta, delta, upper)

    def tradeoff(self, alpha: float) -> float:
        r"""Exact trade-off function T(N_Z(0,σ²), N_Z(Δ,σ²))(α).

        The likelihood ratio of N_Z(Δ, σ²) to N_Z(0, σ²) increases in the output, so
        by Neyman–Pearson the most powerful level-α test rejects the outputs
        ≥ c and rejects c − 1 with the probability that uses up the level.
        """
        alpha = check_probability("alpha", alpha)
        if alpha == 0.0:
            return 1.0
        if alpha == 1.0:
            return 0.0
        sf = self._sf
        # Smallest integer c with P[Y >= c] = sf(c - 1) <= alpha (sf is non-increasing).
        bound = math.ceil(40 * self.sigma) + self.sensitivity + 2
        lo, hi = -bound, bound
        while sf(lo - 1) <= alpha:
            lo *= 2
        while sf(hi - 1) > alpha:
            hi *= 2
        c = smallest_passing_int(lambda c: sf(c - 1) <= alpha, lo, hi)
        pmf_edge = self.pmf(c - 1)
        size_rest = float(sf(c - 1))
        r = min(1.0, max(0.0, (alpha - size_rest) / pmf_edge)) if pmf_edge > 0 else 0.0
        # β = Q[Y <= c - 2] + (1 - r) Q[Y = c - 1], with Q = N_Z(Δ, σ²) and symmetry of N_Z(0, σ²).
        shift = c - 1 - self.sensitivity
        below = float(sf(-(shift - 1) - 1))
        return below + (1 - r) * self.pmf(shift)

    def _sf(self, k: int) -> float:
        return float(self.noise.sf(k))

    # -- sampling ---------------------------------------------------------------------
    def sample(
        self,
        size: int | tuple[int, ...] | None = None,
        *,
        rng: RandomSource | None = None,
        work: FixedWork | None = None,
    ) -> IntOrArray:
        """Exact draws of N_Z(0, σ²) (CKS §5 Alg 3, :func:`gaussdp.sampling.discrete_gaussian`).

        ``size=None`` gives one Python int; otherwise an array of that shape
        (int64, or Python ints when σ² > 2**80). ``rng=None`` uses the operating
        system's CSPRNG; pass :class:`~gaussdp.random.ChaCha20Random` to replay.

        Examples
        --------
        >>> from gaussdp.random import ChaCha20Random
        >>> DiscreteGaussian(4).sample(5, rng=ChaCha20Random(0))
        array([ 0, -1, -4,  3, -2])
        """
        draw = discrete_gaussian(
            self.sigma2, () if size is None else size, rng=check_rng(rng), work=work
        )
        return _sample(draw, size)

    def release(
        self, value: object, *, rng: RandomSource | None = None, work: FixedWork | None = None
    ) -> IntOrArray:
        """Add exact N_Z(0, σ²) noise to an integer answer (scalar or array), element-wise.

        Each element must be a query with L2 sensitivity :attr:`sensitivity` for the
        guarantee to hold; for a vector, use the vector's L2 sensitivity (CKS Thm 14).

        Examples
        --------
        >>> from gaussdp.random import ChaCha20Random
        >>> DiscreteGaussian(4).release(100, rng=ChaCha20Random(0))
        100
        >>> DiscreteGaussian(4).release([10, 20, 30], rng=ChaCha20Random(0))
        array([10, 19, 26])
        """
        return _release_integers(self.sample, value, rng, work)

    def pmf(self, k: int) -> float:
        """P[N_Z(0, σ²) = k] (exact normaliser, CKS Def 1)."""
        return float(self.noise.pmf(k))

    @property
    def variance(self) -> float:
        """Variance of the noise, strictly below σ² (CKS Prop 21)."""
        return self.noise.var()

    def confidence_interval(self, level: float, value: int = 0) -> Interval:
        """Smallest symmetric integer interval around ``value`` with coverage ≥ ``level``.

        Examples
        --------
        >>> DiscreteGaussian(1).confidence_interval(0.95)
        Interval(low=-2, high=2)
        """
        level = _check_level(level)
        h = self._half_width((1 - level) / 2)
        return Interval(value - h, value + h)

    def _half_width(self, tail: float) -> int:
        """Smallest h ≥ 0 with P[Y > h] ≤ ``tail`` (exact integer search), ``tail`` in (0, ½).

        Taken as the tail rather than a level: a Bonferroni level 1 − tail/k rounds
        to 1.0 in floats for a level ≥ 1 − 2⁻⁵³ (an error), the tail does not.
        """

        def covers(h: int) -> bool:
            return self._sf(h) <= tail

        # Tried first at the continuous Gaussian's quantile and its neighbour below:
        # P[Y > h] is non-increasing in h, so a pass there and a failure below is the
        # answer, and otherwise the search goes on from the side the tries left (≈ 2
        # evaluations of the tail instead of ≈ 20 from 0). The quantile is −ndtri(tail)
        # (ndtri(1 − tail) is infinite where 1 − tail rounds to 1); any guess is exact.
        quantile = math.sqrt(self.sigma2) * -float(special.ndtri(tail))
        guess = max(0, math.floor(quantile)) if math.isfinite(quantile) else 0
        if not covers(guess):
            return smallest_passing_int(covers, guess + 1)
        if guess == 0 or not covers(guess - 1):
            return guess
        return smallest_passing_int(covers, 0, guess - 1)


@dataclass(frozen=True, slots=True)
class LatticeGaussian:
    r"""What :meth:`Gaussian.release` releases: γ·(round(x/γ) + N_Z(0, σ_Z²)^d).

    A real query x with L2 sensitivity Δ is rounded to the lattice γℤ^d, where
    neighbouring answers differ by at most Δ/γ + √d in L2 norm (each rounding
    moves a point by at most √d/2); for d = 1 the difference is an integer, at
    most ⌊Δ/γ⌋ + 1. Independent discrete Gaussian noise per coordinate then gives
    ρ = L²/(2σ_Z²) with L that bound (CKS Thm 14).

    The (ε, δ) profile is certified by a smoothing argument (Micciancio & Regev
    2007; Poisson summation): write σ_Z² = s² + τ² with τ² = 9. Adding continuous
    N(0, s²) noise and then rounding y to z ∈ ℤ with probability ∝ e^{−(z−y)²/(2τ²)}
    is post-processing of the continuous Gaussian mechanism, hence exactly
    (L/s)-GDP (DRS Thm 2.7), and its pmf is within a factor e^{±a} of
    N_Z(x, σ_Z²)'s, a = ln((1+η)/(1−η)), η = 2Σ_{k≥1} e^{−2π²τ²k²} < 2·10⁻⁷⁷,
    because both normalisers Σ_w e^{−(w−y)²/(2t²)}/(√(2π)t) lie in [1 − η, 1 + η]
    for t ≥ τ. Over d coordinates the slack is A = d·a, and the release is
    (ε + 2A, e^A·δ_μ(ε))-DP with μ = L/s (:attr:`mu`, :attr:`smoothing_slack`).
    For d = 1 the exact profile (CKS Thm 7) is used where it is smaller.

    Parameters
    ----------
    gamma : float
        Grid step, a positive power of two.
    sigma2 : Fraction
        Noise scale σ_Z² in lattice units (the real-valued noise is γ times it).
    dim : int
        Number of coordinates released together, ≥ 1.
    sensitivity : float
        L2 sensitivity Δ of the real-valued query.

    Examples
    --------
    >>> lattice = LatticeGaussian(gamma=2.0**-8, sigma2=Fraction(2**20), dim=1, sensitivity=1.0)
    >>> lattice.lattice_sensitivity, lattice.effective_sensitivity
    (Fraction(257, 1), 1.00390625)
    """

    gamma: float
    sigma2: Fraction
    dim: int
    sensitivity: float

    #: τ² of the smoothing argument, in lattice units².
    SMOOTHING_TAU2: ClassVar[Fraction] = Fraction(9)

    def __post_init__(self) -> None:
        gamma = check_positive("gamma", self.gamma)
        if math.frexp(gamma)[0] != 0.5:
            raise ValueError(invalid("gamma", "a positive power of two", self.gamma))
        object.__setattr__(self, "gamma", gamma)
        object.__setattr__(self, "sigma2", check_fraction("sigma2", self.sigma2))
        object.__setattr__(self, "dim", check_int("dim", self.dim, minimum=1))
        object.__setattr__(self, "sensitivity", check_positive("sensitivity", self.sensitivity))

    @staticmethod
    def sensitivity_bound(sensitivity: float, gamma: float, dim: int) -> Fraction:
        """L2 distance bound, in lattice units, between rounded neighbouring answers."""
        scaled = Fraction(sensitivity) / Fraction(gamma)
        if dim == 1:
            # |round(a) − round(b)| is an integer ≤ |a − b| + 1.
            return Fraction(math.floor(scaled) + 1)
        # ‖round(a) − round(b)‖₂ ≤ ‖a − b‖₂ + √d, and √d ≤ ⌈√d⌉.
        return scaled + _ceil_sqrt(dim)

    @property
    def lattice_sensitivity(self) -> Fraction:
        """L2 sensitivity of the rounded query in lattice units (an integer when d = 1)."""
        return self.sensitivity_bound(self.sensitivity, self.gamma, self.dim)

    @property
    def effective_sensitivity(self) -> float:
        """The same bound in the query's units: at most Δ + γ√d (∞ past the float range)."""
        return _to_float_or_inf(self.lattice_sensitivity * Fraction(self.gamma))

    @property
    def rho(self) -> float:
        """ρ-zCDP of the release, L²/(2σ_Z²) (CKS Thm 14)."""
        return _to_float_or_inf(self.lattice_sensitivity**2 / (2 * self.sigma2))

    @property
    def mu(self) -> float:
        """μ = L/√(σ_Z² − τ²) of the smoothing argument (rounded up); ∞ when σ_Z² ≤ τ²."""
        continuous = self.sigma2 - self.SMOOTHING_TAU2
        if continuous <= 0:
            return math.inf
        # Three roundings (to float, sqrt, division) of at most half an ulp each: 1e-15 covers them.
        return float(self.lattice_sensitivity) / math.sqrt(continuous) * (1 + 1e-15)

    @property
    def smoothing_slack(self) -> float:
        """A = d·a: the release's pmf is within e^{±A} of a μ-GDP mechanism's (upper bound)."""
        return self.dim * smoothing_log_ratio(self.SMOOTHING_TAU2)

    def delta(self, epsilon: float) -> float:
        """Certified δ at ε: e^A·δ_μ(ε − 2A), or the exact CKS Thm 7 value for d = 1 if smaller."""
        epsilon = check_epsilon("epsilon", epsilon)
        bounds = [gdp_delta_with_slack(self.mu, epsilon, self.smoothing_slack)]
        if self.dim == 1:
            bounds.append(self._scalar().delta(epsilon))
        return min(bounds)

    def epsilon(self, delta: float) -> float:
        """Certified ε at δ: ε_μ(δe^{−A}) + 2A, or the exact CKS Thm 7 value (d = 1) if smaller."""
        delta = check_delta("delta", delta)
        gdp = partial(gdp_epsilon, self.mu)
        bounds = [epsilon_with_slack(gdp, delta, self.smoothing_slack)]
        if self.dim == 1:
            bounds.append(self._scalar().epsilon(delta))
        return min(bounds)

    def _scalar(self) -> DiscreteGaussian:
        return DiscreteGaussian(self.sigma2, int(self.lattice_sensitivity))

    @property
    def variance(self) -> float:
        """Variance of the noise per coordinate, γ²·Var N_Z(0, σ_Z²), in the query's units."""
        return self.gamma**2 * DiscreteGaussianDistribution(self.sigma2).var()

    def confidence_interval(self, level: float, value: float = 0.0) -> Interval:
        """Interval around a released ``value`` holding the rounded answer with prob. ``level``."""
        noise = DiscreteGaussian(self.sigma2).confidence_interval(level)
        return Interval(value + noise.low * self.gamma, value + noise.high * self.gamma)


@dataclass(frozen=True, slots=True)
class DiscreteLaplace:
    r"""The discrete Laplace mechanism: add noise with pmf ∝ e^{−|k|/t} to an integer query.

    With integer L1 sensitivity Δ it is (Δ/t)-DP (CKS §4), hence (Δ/t)²/2-zCDP
    (Bun & Steinke 2016 Prop 1.4). Its (ε, δ) profile below Δ/t is exact.

    Parameters
    ----------
    scale : Fraction, int, float or str
        The scale t > 0, held exactly.
    sensitivity : int, default 1
        L1 sensitivity Δ of the integer query, an integer ≥ 1.

    Examples
    --------
    >>> dl = DiscreteLaplace(2)
    >>> dl.pure_epsilon
    0.5
    >>> dl.delta(0.5)
    0.0
    """

    scale: Fraction
    sensitivity: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", check_fraction("scale", self.scale))
        object.__setattr__(
            self, "sensitivity", check_int("sensitivity", self.sensitivity, minimum=1)
        )

    @property
    def noise(self) -> DiscreteLaplaceDistribution:
        """The noise as a distribution (pmf, tails, δ; scale in [1e-12, 1e300])."""
        return DiscreteLaplaceDistribution(self.scale)

    @property
    def pure_epsilon(self) -> float:
        """Δ/t: the mechanism is (Δ/t, 0)-DP (CKS §4)."""
        return _to_float_or_inf(Fraction(self.sensitivity) / self.scale)

    @property
    def rho(self) -> float:
        """ε²/2 with ε = Δ/t: pure ε-DP implies ε²/2-zCDP (Bun & Steinke 2016 Prop 1.4)."""
        return self.pure_epsilon * self.pure_epsilon / 2  # ∞, not OverflowError, past 1e154

    def rdp(self, order: float) -> float:
        """A Rényi divergence bound at ``order`` α > 1: min(αρ, ε) (Bun & Steinke 2016)."""
        return min(_check_order(order) * self.rho, self.pure_epsilon)

    def delta(self, epsilon: float) -> float:
        """Exact smallest δ at this ε; 0 for ε ≥ Δ/t."""
        return self.noise.delta(epsilon, self.sensitivity)

    def epsilon(self, delta: float) -> float:
        """Smallest ε with :meth:`delta` ≤ δ, never under-reported (at most Δ/t)."""
        delta = check_delta("delta", delta)
        return _smallest_epsilon(self.delta, delta, self.pure_epsilon)

    def pmf(self, k: int) -> float:
        """P[noise = k] = tanh(1/(2t)) e^{−|k|/t}."""
        return float(self.noise.pmf(k))

    def sample(
        self,
        size: int | tuple[int, ...] | None = None,
        *,
        rng: RandomSource | None = None,
        work: FixedWork | None = None,
    ) -> IntOrArray:
        """Exact draws (CKS §5 Alg 2, :func:`gaussdp.sampling.discrete_laplace`).

        ``size=None`` gives one Python int; otherwise an array of that shape.

        Examples
        --------
        >>> from gaussdp.random import ChaCha20Random
        >>> DiscreteLaplace(3).sample(4, rng=ChaCha20Random(0)).shape
        (4,)
        """
        draw = discrete_laplace(
            self.scale, () if size is None else size, rng=check_rng(rng), work=work
        )
        return _sample(draw, size)

    def release(
        self, value: object, *, rng: RandomSource | None = None, work: FixedWork | None = None
    ) -> IntOrArray:
        """Add exact discrete Laplace noise to an integer answer (scalar or array)."""
        return _release_integers(self.sample, value, rng, work)

    @property
    def variance(self) -> float:
        """Variance of the noise, 2e^{−1/t}/(1 − e^{−1/t})² (CKS §4)."""
        return self.noise.var()


@dataclass(frozen=True, slots=True)
class Laplace:
    r"""The continuous Laplace mechanism, as an accounting event and for comparisons.

    gaussdp never releases floating-point noise: use :class:`DiscreteLaplace` to
    release values. This object describes Lap(b) noise on a query of L1
    sensitivity Δ, which is (Δ/b)-DP with the exact profile
    δ(ε) = max(0, 1 − e^{(ε − Δ/b)/2}).

    Examples
    --------
    >>> Laplace(scale=1.0).delta(0.0)
    0.3934693402873666
    """

    scale: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", check_positive("scale", self.scale))
        object.__setattr__(self, "sensitivity", check_positive("sensitivity", self.sensitivity))

    @property
    def pure_epsilon(self) -> float:
        """Δ/b: the mechanism is (Δ/b, 0)-DP (Dwork & Roth Thm 3.6)."""
        return self.sensitivity / self.scale

    @property
    def rho(self) -> float:
        """ε²/2 with ε = Δ/b (Bun & Steinke 2016 Prop 1.4)."""
        return self.pure_epsilon * self.pure_epsilon / 2  # ∞, not OverflowError, past 1e154

    def delta(self, epsilon: float) -> float:
        """Exact smallest δ at this ε: 1 − e^{(ε − ε₀)/2} for ε < ε₀ = Δ/b, else 0.

        The privacy loss of Lap(0, b) against Lap(Δ, b) is (|y − Δ| − |y|)/b;
        integrating max(0, p(y) − e^ε p'(y)) gives this closed form.
        """
        epsilon = check_epsilon("epsilon", epsilon)
        if epsilon >= self.pure_epsilon:
            return 0.0
        return -math.expm1((epsilon - self.pure_epsilon) / 2)

    def epsilon(self, delta: float) -> float:
        """Exact smallest ε at this δ: max(0, ε₀ + 2 ln(1 − δ))."""
        delta = check_delta("delta", delta)
        return max(0.0, self.pure_epsilon + 2 * math.log1p(-delta))

    @property
    def variance(self) -> float:
        """Variance of the noise, 2b²."""
        return 2 * self.scale * self.scale  # ∞, not OverflowError, past 1e154
