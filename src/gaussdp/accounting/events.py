r"""Privacy events that accountants compose.

An event is a mechanism object from :mod:`gaussdp.mechanisms` (``Gaussian``,
``DiscreteGaussian``, ``DiscreteLaplace``, ``Laplace``) or one of the wrappers
here: :class:`Subsampled` (Poisson subsampling of a mechanism) and
:class:`DiscreteGaussianVector` (independent discrete Gaussian noise on each
coordinate of an integer vector query, CKS Thm 14). Events are frozen, validated
value objects; a field never changes meaning (dp_accounting's ``DpEvent`` rule).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from gaussdp._validation import check_fraction, check_int
from gaussdp.errors import invalid
from gaussdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace

__all__ = [
    "MECHANISM_TYPES",
    "DiscreteGaussianVector",
    "Event",
    "Mechanism",
    "Subsampled",
    "check_event",
    "check_rate",
]

Mechanism = Gaussian | DiscreteGaussian | DiscreteLaplace | Laplace
#: The mechanism classes an event may be built from.
MECHANISM_TYPES: tuple[type, ...] = (Gaussian, DiscreteGaussian, DiscreteLaplace, Laplace)


@dataclass(frozen=True, slots=True)
class DiscreteGaussianVector:
    r"""Independent N_Z(0, σ²) noise on each coordinate of an integer vector query.

    ``sensitivities`` is the worst-case vector of per-coordinate changes |f(D)_j −
    f(D′)_j| (CKS Thm 14). The privacy loss is the sum of the coordinates' losses;
    it is ρ-zCDP with ρ = Σ_j Δ_j²/(2σ²).

    Parameters
    ----------
    sigma2 : Fraction, int, float or str
        The scale parameter σ² of every coordinate, exact and > 0.
    sensitivities : tuple of int
        Non-negative integers, at least one positive.

    Examples
    --------
    >>> v = DiscreteGaussianVector("25/4", (1, 1))
    >>> v.rho
    0.16
    """

    sigma2: Fraction
    sensitivities: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma2", check_fraction("sigma2", self.sigma2))
        if isinstance(self.sensitivities, (str, bytes)) or not hasattr(
            self.sensitivities, "__iter__"
        ):
            raise TypeError(invalid("sensitivities", "a sequence of integers", self.sensitivities))
        values = tuple(check_int("sensitivities", s, minimum=0) for s in self.sensitivities)
        if not any(values):
            raise ValueError(
                invalid("sensitivities", "a sequence with a positive entry", self.sensitivities)
            )
        object.__setattr__(self, "sensitivities", values)

    @property
    def rho(self) -> float:
        """Σ_j Δ_j²/(2σ²) (CKS Thm 14)."""
        return float(Fraction(sum(s * s for s in self.sensitivities)) / (2 * self.sigma2))

    @property
    def mu(self) -> float:
        """‖Δ‖₂/σ: the vector mechanism is at least as private as μ-GDP with this μ."""
        return float((2 * self.rho) ** 0.5)

    def rdp(self, order: float) -> float:
        """Rényi divergence bound αρ at order α > 1 (CKS Thm 14)."""
        return float(order) * self.rho


@dataclass(frozen=True, slots=True)
class Subsampled:
    r"""A mechanism run on a Poisson subsample: each unit is kept independently with ``rate``.

    Under add/remove neighbours the pair of output distributions is
    ((1 − q)M(0) + qM(Δ), M(0)) in the remove direction and the reverse in the add
    direction; accountants bound both (Koskela et al. 2021).

    Parameters
    ----------
    mechanism : Gaussian, DiscreteGaussian, DiscreteLaplace or Laplace
        The mechanism applied to the subsample.
    rate : float
        Sampling probability q, in (0, 1].
    scheme : {"poisson"}
        The sampling scheme; only Poisson sampling is supported.

    Examples
    --------
    >>> from gaussdp.mechanisms import Gaussian
    >>> Subsampled(Gaussian(sigma=1.1), rate=256 / 60000).rate
    0.004266666666666667
    """

    mechanism: Mechanism
    rate: float
    scheme: Literal["poisson"] = "poisson"

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, MECHANISM_TYPES):
            raise TypeError(
                invalid(
                    "mechanism",
                    "a Gaussian, DiscreteGaussian, DiscreteLaplace or Laplace mechanism",
                    self.mechanism,
                )
            )
        object.__setattr__(self, "rate", check_rate("rate", self.rate))
        if self.scheme != "poisson":
            raise ValueError(invalid("scheme", "'poisson'", self.scheme))


Event = Mechanism | Subsampled | DiscreteGaussianVector


def check_rate(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a sampling rate in (0, 1].

    Examples
    --------
    >>> check_rate("rate", 0)
    Traceback (most recent call last):
    ...
    ValueError: rate must be a real number in (0, 1], got 0
    """
    constraint = "a real number in (0, 1]"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(invalid(name, constraint, value))
    rate = float(value)
    if not 0.0 < rate <= 1.0:  # also rejects NaN
        raise ValueError(invalid(name, constraint, value))
    return rate


def check_event(event: object) -> Event:
    """Return ``event`` if it is a privacy event, else raise ``TypeError``.

    Examples
    --------
    >>> check_event("gaussian")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: event must be a mechanism (Gaussian, DiscreteGaussian, ...
    """
    if isinstance(event, (*MECHANISM_TYPES, Subsampled, DiscreteGaussianVector)):
        return event  # type: ignore[return-value]
    raise TypeError(
        invalid(
            "event",
            "a mechanism (Gaussian, DiscreteGaussian, DiscreteLaplace, Laplace), "
            "Subsampled or DiscreteGaussianVector",
            event,
        )
    )
