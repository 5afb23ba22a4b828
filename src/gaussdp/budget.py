r"""A privacy budget as a frozen, validated value object.

A :class:`Budget` is stated in exactly one currency:

- ``Budget(epsilon=, delta=)`` — approximate differential privacy;
- ``Budget(rho=)`` — ρ-zero-concentrated DP (optionally with a ``delta`` at
  which to report ε);
- ``Budget(mu=)`` — μ-Gaussian DP (optionally with a reporting ``delta``).

Table releases (:mod:`gaussdp.release`) add exact discrete Gaussian noise. The
discrete Gaussian with L2 sensitivity Δ and scale σ² is Δ²/(2σ²)-zCDP (CKS
Thm 4, Thm 14 for vectors) but is *not* exactly μ-GDP (its privacy profile can
be slightly worse than the continuous Gaussian's), so releases are accounted in
ρ: ρ's of a composition add (Bun & Steinke 2016 Lemma 2.3) — the same
bookkeeping as μ_total = √Σμᵢ² with μ = √(2ρ) — and ε at δ is certified with
CKS Cor 13. Private partition selection adds a δ that is carried separately
(approximate zCDP, Bun & Steinke 2016 Def 8.1 and Lemma 8.3).
:meth:`Budget.rho_capacity` is the one place where a budget is turned into the
largest total ρ a release may spend.

Examples
--------
>>> b = Budget(epsilon=1.0, delta=1e-6)
>>> round(b.rho_capacity(), 5)
0.02436
>>> Budget(rho=0.5).rho_capacity()
0.5
>>> Budget(mu=1.0).rho_capacity()
0.5
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from gaussdp._validation import check_delta, check_epsilon, check_positive
from gaussdp.errors import invalid
from gaussdp.privacy import zcdp_epsilon, zcdp_rho

__all__ = ["Budget", "BudgetKind"]

BudgetKind = Literal["approx_dp", "zcdp", "gdp"]


@dataclass(frozen=True, slots=True)
class Budget:
    """A privacy budget in exactly one currency: (ε, δ), ρ or μ.

    Parameters
    ----------
    epsilon : float, optional
        ε ≥ 0 (finite) of an (ε, δ)-DP budget; requires ``delta``.
    delta : float, optional
        δ in (0, 1). Required with ``epsilon``; optional with ``rho`` or
        ``mu``, where it is only the δ at which ε is reported.
    rho : float, optional
        ρ > 0 of a ρ-zCDP budget.
    mu : float, optional
        μ > 0 of a μ-GDP budget. A release with discrete Gaussian noise is
        held to ρ = μ²/2 (the zCDP parameter of μ-GDP Gaussian noise); the
        discrete mechanism is then ρ-zCDP (CKS Thm 4), not exactly μ-GDP.

    Raises
    ------
    ValueError
        If not exactly one of ``epsilon``, ``rho``, ``mu`` is given, if
        ``epsilon`` comes without ``delta``, or if a value is out of range.
    TypeError
        If a value is not a real number.

    Examples
    --------
    >>> Budget(epsilon=1.0, delta=1e-6).kind
    'approx_dp'
    >>> Budget(rho=0.1, delta=1e-6).epsilon_at(0.1)  # doctest: +ELLIPSIS
    2.14...
    >>> try:
    ...     Budget(epsilon=1.0)
    ... except ValueError as error:
    ...     print(error)
    delta must be given with epsilon, got None
    """

    epsilon: float | None = None
    delta: float | None = None
    rho: float | None = None
    mu: float | None = None

    def __post_init__(self) -> None:
        given = [name for name in ("epsilon", "rho", "mu") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                invalid("budget", "exactly one of epsilon (with delta), rho or mu", given)
            )
        if self.epsilon is not None:
            object.__setattr__(self, "epsilon", check_epsilon("epsilon", self.epsilon))
            if self.delta is None:
                raise ValueError(invalid("delta", "given with epsilon", None))
        if self.rho is not None:
            object.__setattr__(self, "rho", check_positive("rho", self.rho))
        if self.mu is not None:
            object.__setattr__(self, "mu", check_positive("mu", self.mu))
        if self.delta is not None:
            object.__setattr__(self, "delta", check_delta("delta", self.delta))

    @property
    def kind(self) -> BudgetKind:
        """The currency: ``'approx_dp'``, ``'zcdp'`` or ``'gdp'``."""
        if self.epsilon is not None:
            return "approx_dp"
        if self.rho is not None:
            return "zcdp"
        return "gdp"

    def rho_capacity(self, extra_delta: float = 0.0) -> float:
        """The largest total ρ that, with ``extra_delta`` of approximate zCDP, fits the budget.

        Parameters
        ----------
        extra_delta : float, default 0.0
            δ spent outside zCDP (private partition selection), in [0, 1).

        Returns
        -------
        float
            ρ ≥ 0. For (ε, δ): the largest ρ whose CKS Cor 13 ε at
            δ − ``extra_delta`` is at most ε (0 if ``extra_delta`` ≥ δ). For ρ:
            ρ. For μ: μ²/2.

        Raises
        ------
        ValueError
            If ``extra_delta`` > 0 and the budget is ρ or μ (such budgets have
            no δ to spend).
        """
        extra = check_epsilon("extra_delta", extra_delta)
        epsilon, delta = self.epsilon, self.delta
        if epsilon is not None and delta is not None:
            remaining = delta - extra
            if remaining <= 0.0 or epsilon == 0.0:
                return 0.0
            # CKS Cor 13 inverted (largest ρ meeting ε at the remaining δ).
            return zcdp_rho(epsilon, remaining)
        if extra > 0.0:
            raise ValueError(
                invalid(
                    "budget",
                    "an (epsilon, delta) budget when a release spends delta "
                    "(private partition selection)",
                    self,
                )
            )
        if self.rho is not None:
            return self.rho
        mu = float(self.mu or 0.0)
        return mu * mu / 2.0  # ρ = μ²/2 (DRS / Bun & Steinke 2016 Prop 1.6)

    def epsilon_at(self, rho: float, extra_delta: float = 0.0) -> float | None:
        """ε at this budget's δ for a total ``rho`` plus ``extra_delta`` (CKS Cor 13).

        Returns ``None`` when the budget has no δ, and ``inf`` when
        ``extra_delta`` ≥ δ.
        """
        rho = check_epsilon("rho", rho)
        extra = check_epsilon("extra_delta", extra_delta)
        if self.delta is None:
            return None
        remaining = self.delta - extra
        if remaining <= 0.0:
            return math.inf
        return zcdp_epsilon(rho, remaining)

    def as_dict(self) -> dict[str, float]:
        """The fields that are set, e.g. ``{'epsilon': 1.0, 'delta': 1e-06}``."""
        out: dict[str, float] = {}
        for name in ("epsilon", "delta", "rho", "mu"):
            value = getattr(self, name)
            if value is not None:
                out[name] = float(value)
        return out

    def __str__(self) -> str:
        parts = ", ".join(f"{k}={v:g}" for k, v in self.as_dict().items())
        return f"Budget({parts})"
