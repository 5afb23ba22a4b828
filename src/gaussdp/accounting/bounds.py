"""Named results of numerical accountants: certified upper and lower bounds."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeltaBounds", "EpsilonBounds"]


@dataclass(frozen=True, slots=True)
class EpsilonBounds:
    """The ε of a composition at a fixed δ, bracketed by two bounds.

    ``upper`` is what gaussdp promises: the composition is (``upper``, δ)-DP. ``lower``
    says how tight that is: the composition is *not* (ε, δ)-DP for any ε < ``lower``
    (up to the accountant's stated numerical allowance). When an accountant is exact,
    the two are equal.

    Examples
    --------
    >>> b = EpsilonBounds(lower=1.0, upper=1.01)
    >>> b.upper, b.gap
    (1.01, 0.010000000000000009)
    """

    lower: float
    upper: float

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

    Examples
    --------
    >>> DeltaBounds(lower=1e-6, upper=2e-6).upper
    2e-06
    """

    lower: float
    upper: float

    @property
    def gap(self) -> float:
        """``upper - lower``."""
        return self.upper - self.lower

    def __float__(self) -> float:
        return self.upper
