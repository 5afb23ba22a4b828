"""Named results of numerical accountants: certified upper and lower bounds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gaussdp._validation import format_bound

__all__ = ["DeltaBounds", "EpsilonBounds", "LossMasses", "format_bound"]


@dataclass(frozen=True, slots=True)
class EpsilonBounds:
    """The ε of a composition at a fixed δ, bracketed by two bounds.

    ``upper`` is what gaussdp promises: the composition is (``upper``, δ)-DP. ``lower``
    says how tight that is: the composition is *not* (ε, δ)-DP for any ε < ``lower``
    (up to the accountant's stated numerical allowance). When an accountant is exact,
    the two are equal. ``method`` names the analysis that certified ``upper`` (``"pld"``,
    ``"rdp"``, ...; empty when not stated) and ``note`` says why, when it is not the
    accountant's own (e.g. the PLD round-off allowance exceeded δ and the RDP bound was
    returned instead).

    Examples
    --------
    >>> b = EpsilonBounds(lower=1.0, upper=1.01)
    >>> b.upper, b.gap
    (1.01, 0.010000000000000009)
    """

    lower: float
    upper: float
    method: str = ""
    note: str = ""

    @property
    def gap(self) -> float:
        """``upper - lower``: how much the bound could still be tightened."""
        return self.upper - self.lower

    def __float__(self) -> float:
        return self.upper


@dataclass(frozen=True, slots=True)
class DeltaBounds:
    """The δ of a composition at a fixed ε, bracketed by two bounds.

    ``upper`` is what gaussdp promises: the composition is (ε, ``upper``)-DP.
    ``method`` and ``note`` as in :class:`EpsilonBounds`.

    Examples
    --------
    >>> DeltaBounds(lower=1e-6, upper=2e-6).upper
    2e-06
    """

    lower: float
    upper: float
    method: str = ""
    note: str = ""

    @property
    def gap(self) -> float:
        """``upper - lower``."""
        return self.upper - self.lower

    def __float__(self) -> float:
        return self.upper


@dataclass(frozen=True, slots=True)
class LossMasses:
    """One discretised privacy loss distribution: mass ``masses[j]`` at loss ``losses[j]``.

    Returned by :meth:`gaussdp.accounting.PrivacyLossDistribution.loss_masses`. The
    loss L = ln(dP/dQ) is in nats, under P (the first dataset of the neighbouring
    direction); ``inf_mass`` is P's mass at L = +∞. ``upper`` says which side: the
    pessimistic (certified) discretisation, whose pair dominates the true one, or
    the optimistic one. ``allowance`` is the side's additive δ allowance (round-off,
    wrapped mass): added to every δ of the upper side, subtracted on the lower side.
    """

    losses: npt.NDArray[np.float64]
    masses: npt.NDArray[np.float64]
    inf_mass: float
    allowance: float
    upper: bool
