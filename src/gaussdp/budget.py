r"""A privacy budget as a frozen, validated value object.

A :class:`Budget` is stated in exactly one currency:

- ``Budget(epsilon=, delta=)`` — approximate differential privacy;
- ``Budget(rho=)`` — ρ-zero-concentrated DP (optionally with a ``delta`` at
  which to report ε);
- ``Budget(mu=)`` — μ-Gaussian DP (optionally with a reporting ``delta``).

The currency also fixes how a table release (:mod:`gaussdp.release`) is
accounted (:attr:`Budget.accounting`):

- (ε, δ) and μ budgets are accounted in **μ-GDP**. Each released part is exact
  lattice noise (:class:`gaussdp.accounting.LatticeNoise`) N_Z(0, σ²) with
  σ² = s² + τ² (τ² = 9); by the smoothing argument of
  :class:`gaussdp.LatticeGaussian` a part with L2 sensitivity Δ over c cells is
  within e^{±c·a} of a (Δ/s)-GDP mechanism. The accountants compose the μ's
  exactly, μ = √Σμᵢ² (DRS Cor 3.3), add the slacks, A = Σcᵢ·a, and give ε at δ
  as ε_μ(δe^{−A}) + 2A (DRS Cor 2.13). A μ budget is met up to that certified
  slack A (reported).
- ρ budgets are accounted in **ρ-zCDP**: N_Z(0, σ²) with σ² ≥ Δ²/(2ρ) is ρ-zCDP
  exactly (CKS Thm 4, Thm 14 for vectors), ρ's add (Bun & Steinke 2016 Lemma
  2.3) and ε at δ is certified with CKS Cor 13. No slack.

Private partition selection adds a δ that is carried separately (its noisy
counts are part of the composition; Bun & Steinke 2016 Def 8.1 and Lemma 8.3
for zCDP): ε is reported at δ minus that δ. :meth:`Budget.mu_capacity` and
:meth:`Budget.rho_capacity` turn a budget into the largest total μ or ρ a
release may spend (calibration). Whether a history of events fits a budget is
decided by one accountant only: :class:`gaussdp.accounting.PrivacyFilter` in
memory and :class:`gaussdp.Ledger` on disk.

Examples
--------
>>> b = Budget(epsilon=1.0, delta=1e-6)
>>> b.accounting
'gdp'
>>> round(b.mu_capacity(), 5)
0.2367
>>> round(b.rho_capacity(), 5)  # what ρ-zCDP accounting would allow: μ = √(2ρ) ≈ 0.2207
0.02436
>>> Budget(mu=1.0).mu_capacity()
1.0
>>> Budget(rho=0.5).accounting, Budget(rho=0.5).rho_capacity()
('zcdp', 0.5)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Literal

from gaussdp._search import largest_passing
from gaussdp._validation import check_delta, check_epsilon, check_positive
from gaussdp.errors import invalid
from gaussdp.mechanisms import epsilon_with_slack
from gaussdp.privacy import gdp_epsilon, gdp_mu, zcdp_epsilon, zcdp_rho

__all__ = ["Accounting", "Budget", "BudgetKind"]

BudgetKind = Literal["approx_dp", "zcdp", "gdp"]
Accounting = Literal["gdp", "zcdp"]


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
        ρ > 0 of a ρ-zCDP budget; a release is accounted in ρ (CKS Thm 4/14).
    mu : float, optional
        μ > 0 of a μ-GDP budget; a release is accounted in μ (DRS Cor 3.3) and
        meets it up to the certified smoothing slack of its lattice noise
        (:class:`gaussdp.LatticeGaussian`), which the release reports.

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

    @property
    def accounting(self) -> Accounting:
        """How a release is accounted: ``'gdp'`` for (ε, δ) and μ budgets, ``'zcdp'`` for ρ."""
        return "zcdp" if self.rho is not None else "gdp"

    def _no_delta_to_spend(self, extra: float) -> None:
        if extra > 0.0:
            raise ValueError(
                invalid(
                    "budget",
                    "an (epsilon, delta) budget when a release spends delta "
                    "(private partition selection)",
                    self,
                )
            )

    def mu_capacity(self, extra_delta: float = 0.0, slack: float = 0.0) -> float:
        """The largest total μ that fits the budget, given ``extra_delta`` and a ``slack``.

        Parameters
        ----------
        extra_delta : float, default 0.0
            δ spent outside the Gaussian composition (private partition
            selection), in [0, 1).
        slack : float, default 0.0
            A ≥ 0: the release's pmf is within e^{±A} of a μ-GDP mechanism's.

        Returns
        -------
        float
            μ ≥ 0. For (ε, δ): the largest μ (found by DRS Cor 2.13 inverted,
            then checked with :meth:`epsilon_at_mu`, the computation the report
            uses) with ε_μ((δ − ``extra_delta``)e^{−A}) + 2A ≤ ε; 0 if
            ``extra_delta`` ≥ δ or ε ≤ 2A. For μ: μ.

        Raises
        ------
        ValueError
            For a ρ budget (it is accounted in ρ: :meth:`rho_capacity`), or if
            ``extra_delta`` > 0 and the budget has no δ to spend.

        Examples
        --------
        >>> b = Budget(epsilon=1.0, delta=1e-6)
        >>> b.epsilon_at_mu(b.mu_capacity(5e-7), 5e-7) <= 1.0
        True
        """
        extra = check_epsilon("extra_delta", extra_delta)
        slack = check_epsilon("slack", slack)
        epsilon, delta = self.epsilon, self.delta
        if epsilon is not None and delta is not None:
            remaining = delta - extra
            target = math.nextafter(epsilon - 2 * slack, -math.inf)
            if remaining <= 0.0 or target <= 0.0:
                return 0.0
            shrunk = math.nextafter(remaining * math.exp(-slack), 0.0)
            mu = gdp_mu(target, shrunk)  # DRS Cor 2.13, inverted (rounded down)
            # The forward computation (the one reports use) decides: the largest μ ≤ that
            # inversion at which it meets ε (the inversion itself, unless rounding disagrees).
            return largest_passing(
                lambda m: self._epsilon_mu(m, remaining, slack) <= epsilon, 0.0, mu
            )
        if self.rho is not None:
            raise ValueError(
                invalid("budget", "an (epsilon, delta) or mu budget for mu accounting", self)
            )
        self._no_delta_to_spend(extra)
        return float(self.mu or 0.0)

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
            δ − ``extra_delta`` is at most ε (0 if ``extra_delta`` ≥ δ). For ρ: ρ.

        Raises
        ------
        ValueError
            For a μ budget (ρ-zCDP does not imply μ-GDP: it is accounted in μ,
            :meth:`mu_capacity`), or if ``extra_delta`` > 0 and the budget is ρ
            (it has no δ to spend).
        """
        extra = check_epsilon("extra_delta", extra_delta)
        epsilon, delta = self.epsilon, self.delta
        if epsilon is not None and delta is not None:
            remaining = delta - extra
            if remaining <= 0.0 or epsilon == 0.0:
                return 0.0
            # CKS Cor 13 inverted (largest ρ meeting ε at the remaining δ).
            return zcdp_rho(epsilon, remaining)
        if self.mu is not None:
            raise ValueError(
                invalid("budget", "an (epsilon, delta) or rho budget for rho accounting", self)
            )
        self._no_delta_to_spend(extra)
        return float(self.rho or 0.0)

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

    def epsilon_at_mu(
        self, mu: float, extra_delta: float = 0.0, slack: float = 0.0
    ) -> float | None:
        """ε at this budget's δ for μ-GDP up to ``slack``, plus ``extra_delta``.

        ε = ε_μ((δ − ``extra_delta``)·e^{−A}) + 2A with A = ``slack``
        (:func:`gaussdp.mechanisms.epsilon_with_slack`; ε_μ by DRS Cor 2.13),
        rounded up. Returns ``None`` when the budget has no δ, and ``inf`` when
        ``extra_delta`` ≥ δ.

        Examples
        --------
        >>> Budget(mu=0.5, delta=1e-5).epsilon_at_mu(0.5)  # doctest: +ELLIPSIS
        1.99...
        """
        mu = check_epsilon("mu", mu)
        extra = check_epsilon("extra_delta", extra_delta)
        slack = check_epsilon("slack", slack)
        if self.delta is None:
            return None
        remaining = self.delta - extra
        if remaining <= 0.0:
            return math.inf
        return self._epsilon_mu(mu, remaining, slack)

    @staticmethod
    def _epsilon_mu(mu: float, delta: float, slack: float) -> float:
        # DRS Cor 2.13 for μ-GDP, then the smoothing slack (LatticeGaussian).
        return epsilon_with_slack(partial(gdp_epsilon, mu), delta, slack)

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
