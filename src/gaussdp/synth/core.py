r"""MST (McKenna, Miklau & Sheldon 2021) and AIM (McKenna et al. 2022) on the release pipeline.

``method="mst"``:

1. **Measure** every 1-way marginal with a third of the ρ budget: a
   :class:`~gaussdp.release.Release` count per column, grouped by the column
   with the domain's cells as public keys — so each privacy unit is bounded in
   the engine (L0 cells per marginal, L∞ rows per cell) and exact discrete
   Gaussian noise is added (CKS Thm 4/14).
2. **Select** a spanning tree with a third: Kruskal's algorithm where each of
   the d − 1 edges is chosen by the exponential mechanism among the pairs that
   join two components (McKenna et al. 2021, Alg. 1). The score of pair (a, b)
   is ‖M_ab − round(M̂_ab)‖₁, M_ab the *bounded* 2-way marginal (as the engine
   bounds it) and M̂_ab the independent estimate from step 1 (public); one unit
   changes it by at most Δ = L0·L∞ (triangle inequality). Each choice is
   ε-bounded-range, ε²/8-zCDP (Cesar & Rogers 2021 Lemma 3.2), sampled exactly
   (:func:`gaussdp.synth.exponential_mechanism`).
3. **Measure** the d − 1 chosen 2-way marginals with the last third.
4. **Estimate** a graphical model with Private-PGM (``mbi``) and **sample**
   (post-processing).

The run is ρ-zCDP with ρ = Σ Δᵢ²/(2σᵢ²) + Σ εⱼ²/8 (Bun & Steinke 2016 Lemma
2.3). With an (ε, δ) budget its ε at δ is the PLD accountant's for the
composition of these events, the noise calibrated to meet it (ρ can exceed
the budget's Cor 13 capacity); with a ρ budget ε is CKS Cor 13's. The report
is known before the data are read; a ledger is charged once for the whole run.

``method="aim"``: the 1-way marginals, then adaptive rounds of selection and
measurement over a workload's marginals until the budget is spent
(:mod:`gaussdp.synth.aim`); the run is ρ-zCDP by a zCDP filter, ρ the whole
budget's capacity.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from gaussdp._search import fraction_down, fraction_up, smallest_passing_score
from gaussdp._validation import check_int, check_positive
from gaussdp.accounting import (
    Composed,
    DiscreteGaussianVector,
    Event,
    ExponentialMechanism,
    RecordedCost,
    SelfComposed,
)
from gaussdp.accounting.filter import PrivacyFilter, budget_accountant, spend_target, spent
from gaussdp.budget import Budget
from gaussdp.errors import invalid
from gaussdp.random import RandomSource, _refuse_foreign_seed, check_rng
from gaussdp.release import Release
from gaussdp.synth.aim import ALPHA, Round, run_rounds, workload_cliques, workload_weights
from gaussdp.synth.compress import compress, compressed_sizes, expand, recode
from gaussdp.synth.domain import DROP, Categorical, Column, Numeric
from gaussdp.synth.quality import marginal, total_variation
from gaussdp.synth.select import exponential_mechanism

if TYPE_CHECKING:
    import pandas as pd

    from gaussdp.release import Ledger

__all__ = ["SynthEvent", "SynthReport", "SynthResult", "Synthesizer"]

#: DuckDB types a Parquet column of a run is read as (every value converts to pandas);
#: any other is read as text (:meth:`Synthesizer._parquet_columns`).
_KEPT_TYPE = re.compile(
    r"U?(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT)|FLOAT|DOUBLE|DECIMAL\(\d+,\s*\d+\)"
    r"|BOOLEAN|VARCHAR"
)

Method = Literal["mst", "aim"]

#: (d, L0, L∞, ε, δ) → (ρ, ε): MST's plan calibrated by the PLD composition of its events.
_MST_CALIBRATION: dict[
    tuple[int, int, int, float | None, float | None], tuple[float, float | None]
] = {}

_EVENTS = (
    "rho-zCDP: each marginal is exact discrete Gaussian noise N_Z(0, sigma^2) on bounded counts, "
    "rho = Delta^2/(2 sigma^2) (CKS Thm 4/14); each exponential-mechanism choice is "
    "epsilon-bounded-range, epsilon^2/8-zCDP (Cesar & Rogers 2021 Lemma 3.2); "
)
_ACCOUNTING_MST = (
    _EVENTS + "rho's add (Bun & Steinke 2016 Lemma 2.3); with an (epsilon, delta) budget, "
    "epsilon at delta is the ledger's check of the composition of these events (PLD "
    "accountant; the noise is calibrated to meet it), else CKS Cor 13's"
)
_ACCOUNTING_AIM = (
    _EVENTS + "AIM's adaptive rounds stop before the rho's sum exceeds the budget's rho, a zCDP "
    "filter (AIM's privacy analysis; the Renyi filter of Feldman & Zrnic 2021), so the run is "
    "rho-zCDP for that rho; epsilon at delta by CKS Cor 13"
)


@dataclass(frozen=True, slots=True)
class SynthEvent:
    """One privacy event of a synthesis run.

    ``kind`` is ``'measure'`` (a noisy marginal: ``clique``, exact ``sigma2``
    in counts, L2 ``sensitivity`` √L0·L∞, ``rho`` = Δ²/(2σ²)) or ``'select'``
    (one exponential-mechanism choice: ``epsilon``, score ``sensitivity``
    — L0·L∞ for MST, max w_r·L0·L∞ for AIM — ``rho`` = ε²/8; ``clique`` is the
    chosen marginal, empty before the run) or, in AIM's report before the run,
    ``'rounds'``: the adaptive rounds, together at most ``rho``.
    """

    kind: Literal["measure", "select", "rounds"]
    clique: tuple[str, ...]
    rho: float
    sensitivity: float
    sigma2: Fraction | None = None
    epsilon: float | None = None
    l0: int = 1
    linf: int = 1

    @property
    def gaussian(self) -> DiscreteGaussianVector | None:
        """The measurement as an accounting event (worst case: L0 cells change by L∞)."""
        if self.sigma2 is None:
            return None
        return DiscreteGaussianVector(self.sigma2, (self.linf,) * self.l0)

    @property
    def event(self) -> Event:
        """The accounting event: a :class:`~gaussdp.accounting.DiscreteGaussianVector`
        (measure), an :class:`~gaussdp.accounting.ExponentialMechanism` (select), or,
        for AIM's rounds before the run, a :class:`~gaussdp.accounting.RecordedCost`
        of their ρ cap."""
        if self.kind == "select" and self.epsilon is not None:
            return ExponentialMechanism(self.epsilon)
        gaussian = self.gaussian
        if self.kind == "measure" and gaussian is not None:
            return gaussian
        return RecordedCost(rho=self.rho, mu=None, slack=0.0, delta=0.0)


@dataclass(frozen=True, slots=True)
class SynthReport:
    """What a synthesis run spends (known before any data are read).

    ``rho`` is the run's ρ-zCDP: for MST the sum of the events' ρ (rounded
    up); for AIM the budget's ρ capacity, which the adaptive rounds' sum never
    exceeds (a zCDP filter). ``epsilon`` is the ε at ``delta`` (``None``
    without δ), as ``mode`` says: ``"pld"`` for MST with an (ε, δ) budget —
    the ε the PLD accountant certifies for the composition of the run's
    events (the check a ledger makes), to which the noise was calibrated; its
    ``rho`` can then exceed ``budget.rho_capacity()``, the ε staying within
    the budget's — or ``"zcdp"``: ρ's ε by CKS Cor 13 (AIM, a ρ budget, or an
    MST plan the PLD check refused at Cor 13's capacity).
    """

    events: tuple[SynthEvent, ...]
    rho: float
    delta: float | None
    epsilon: float | None
    budget: Budget
    method: str = "MST"
    mode: Literal["zcdp", "pld"] = "zcdp"

    @property
    def event(self) -> Event:
        """What a ledger is charged: the run as one accounting event.

        MST: the composition of its events (their parameters are fixed before
        the data are read: d − 1 selections, all with one ε). AIM: its ρ as a
        :class:`~gaussdp.accounting.RecordedCost` — the number of rounds and
        their parameters depend on the data, so only the filter's ρ-zCDP is
        certified, not a composition of the events that happened to run.
        """
        if self.method == "AIM":
            return RecordedCost(rho=self.rho, mu=None, slack=0.0, delta=0.0)
        events: list[Event] = []
        for e in self.events:
            event = e.event
            if events and e.kind == "select" and isinstance(events[-1], SelfComposed):
                events[-1] = SelfComposed(event, events[-1].count + 1)
            elif e.kind == "select":
                events.append(SelfComposed(event, 1))
            else:
                events.append(event)
        return Composed(tuple(events))

    @property
    def accounting(self) -> str:
        """How the run is accounted, with the results cited."""
        return _ACCOUNTING_AIM if self.method == "AIM" else _ACCOUNTING_MST

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "method": self.method,
            "mode": self.mode,
            "accounting": self.accounting,
            "budget": self.budget.as_dict(),
            "rho": self.rho,
            "delta": self.delta,
            "epsilon": self.epsilon,
            "events": [
                {
                    "kind": e.kind,
                    "clique": list(e.clique),
                    "rho": e.rho,
                    "sensitivity": e.sensitivity,
                    "sigma": None if e.sigma2 is None else math.sqrt(e.sigma2),
                    "epsilon": e.epsilon,
                }
                for e in self.events
            ],
        }


@dataclass(frozen=True)
class SynthResult:
    """A finished run: the synthetic table, the privacy report and a quality report.

    ``quality`` has one row per 1-, 2- and 3-way marginal: ``clique``,
    ``order``, ``tv_measured`` (TV distance of the synthetic marginal to the
    noisy measurement, for measured marginals) and ``tv_true`` (to the true
    data, only with ``evaluate=True``: outside the budget, for evaluation).
    ``tree`` lists the selected marginals (MST: the tree's pairs; AIM: each
    round's choice, in order); ``measurements`` the noisy marginals
    (:class:`gaussdp.synth.model.Measurement`, cell codes in C order);
    ``model`` is the ``mbi`` model. ``merged`` names, per compressed column,
    the domain cells merged into its last model cell (domain compression);
    the model, ``measurements`` and ``tv_measured`` are in the compressed cells.
    """

    frame: pd.DataFrame
    report: SynthReport
    quality: pd.DataFrame
    tree: tuple[tuple[str, ...], ...]
    measurements: tuple[Any, ...]
    model: Any
    merged: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


class Synthesizer:
    r"""Differentially private synthetic data by MST or AIM on the release pipeline.

    Parameters
    ----------
    source : str, path or DataFrame
        A CSV or Parquet path, or a pandas/polars/Arrow frame.
    columns : sequence of Categorical or Numeric
        The columns to synthesise, each with its public domain.
    privacy_unit : str
        The column identifying a person; all their rows are protected together.
    budget : Budget
        An (ε, δ) or ρ budget. A ρ budget, and AIM, are accounted in
        ρ-zCDP; MST with an (ε, δ) budget by the PLD composition of its
        events (:attr:`SynthReport.mode`).
    max_groups_per_unit : int
        L0 ≥ 1: a unit counts in at most this many cells of each marginal
        (e.g. its number of rows to keep when a person has several).
    max_rows_per_group : int
        L∞ ≥ 1: and at most this many times in one cell.
    iters : int
        Mirror-descent iterations of the model fit (default 1000).
    round_iters : int
        AIM only: iterations of the re-fit after each round, warm-started
        from the previous model (default 100); the final model gets ``iters``.
        Checked but not used by MST (one fit, of ``iters``), like the other
        AIM-only options below.
    max_sigma : float
        The largest noise standard deviation (in rows) of a 1-way marginal
        cell that still counts as a measurement; a budget that gives more is
        refused as too small (default 10⁴).
    method : {"mst", "aim"}
        MST (a spanning tree of 2-way marginals, McKenna, Miklau & Sheldon
        2021) or AIM (adaptive rounds over a workload, McKenna et al. 2022).
    workload : int or list of column lists, optional
        AIM only: the marginals the synthetic data should preserve — an order
        k (all k-way marginals) or a list of cliques; default all 3-way (all
        d-way with d < 3 columns).
    rounds : int, optional
        AIM only: T ≥ d, the budget is planned for T rounds (default 16·d).
    max_model_size : float
        AIM only: the largest model (junction-tree cells × 8 bytes) in MB
        (default 80, the paper's).
    compress : bool
        Merge each column's rare cells — those whose noisy 1-way count is
        below ``compress_threshold``·σ — into one before selecting and
        measuring more (MST's domain compression; post-processing of the
        1-way marginals). Default on.
    compress_threshold : float
        The threshold in noise standard deviations (default 3, MST's).

    Examples
    --------
    >>> import pandas as pd
    >>> from gaussdp.synth import Categorical
    >>> data = pd.DataFrame({"id": range(4), "a": ["x", "y", "x", "x"], "b": [1, 2, 1, 2]})
    >>> synth = Synthesizer(data, columns=[Categorical("a", ["x", "y"]), Categorical("b", [1, 2])],
    ...                     privacy_unit="id", budget=Budget(rho=0.5, delta=1e-6),
    ...                     max_groups_per_unit=1, max_rows_per_group=1)
    >>> [e.kind for e in synth.report.events]
    ['measure', 'measure', 'select', 'measure']
    >>> synth.report.rho <= 0.5
    True
    """

    def __init__(
        self,
        source: object,
        *,
        columns: Sequence[Column],
        privacy_unit: str,
        budget: Budget,
        max_groups_per_unit: int,
        max_rows_per_group: int,
        iters: int = 1000,
        round_iters: int = 100,
        max_sigma: float = 1e4,
        method: Method = "mst",
        workload: int | Sequence[Sequence[str]] | None = None,
        rounds: int | None = None,
        max_model_size: float = 80.0,
        compress: bool = True,
        compress_threshold: float = 3.0,
    ) -> None:
        if not isinstance(privacy_unit, str) or not privacy_unit:
            raise TypeError(invalid("privacy_unit", "a column name (str)", privacy_unit))
        if not isinstance(budget, Budget):
            raise TypeError(invalid("budget", "a gaussdp.Budget", budget))
        if budget.mu is not None:
            raise ValueError(
                invalid(
                    "budget", "an (epsilon, delta) or rho budget (synth accounts in zCDP)", budget
                )
            )
        cols = tuple(columns) if isinstance(columns, Sequence) else ()
        if not cols:
            raise ValueError(invalid("columns", "a non-empty list of column domains", columns))
        for c in cols:
            if not isinstance(c, Categorical | Numeric):
                raise TypeError(
                    invalid(
                        "columns",
                        "Categorical or Numeric domains (every column needs a public domain)",
                        c,
                    )
                )
        names = [c.name for c in cols]
        if len(set(names)) != len(names) or privacy_unit in names:
            raise ValueError(
                invalid("columns", "distinct names other than the privacy unit", names)
            )
        self.source = source
        self.columns = cols
        self.privacy_unit = privacy_unit
        self.budget = budget
        self.max_groups_per_unit = check_int("max_groups_per_unit", max_groups_per_unit, minimum=1)
        self.max_rows_per_group = check_int("max_rows_per_group", max_rows_per_group, minimum=1)
        self.iters = check_int("iters", iters, minimum=1)
        self.round_iters = check_int("round_iters", round_iters, minimum=1)
        self.max_sigma = check_positive("max_sigma", max_sigma)
        if method not in ("mst", "aim"):
            raise ValueError(invalid("method", "'mst' or 'aim'", method))
        self.method: Method = method
        self.workload = workload_cliques(names, workload)
        d = len(names)
        self.rounds = 16 * d if rounds is None else check_int("rounds", rounds, minimum=d)
        self.max_model_size = check_positive("max_model_size", max_model_size)
        if not isinstance(compress, bool):
            raise TypeError(invalid("compress", "a bool", compress))
        self.compress = compress
        self.compress_threshold = check_positive("compress_threshold", compress_threshold)
        self._plan = self._make_plan()
        #: The in-memory filter a run without ``ledger=`` or ``filter=`` is charged to:
        #: running the same synthesizer twice is charged twice (refused once over).
        self.filter = PrivacyFilter(budget)

    # -- planning ---------------------------------------------------------------------
    @property
    def sizes(self) -> dict[str, int]:
        """Number of cells of each column's domain."""
        return {c.name: c.size for c in self.columns}

    def _release(self, source: object, rho: float) -> Release:
        return Release(
            source,
            privacy_unit=self.privacy_unit,
            budget=Budget(rho=rho, delta=self.budget.delta),
            max_groups_per_unit=self.max_groups_per_unit,
            max_rows_per_group=self.max_rows_per_group,
        )

    def _make_plan(self) -> tuple[float, float, float, float]:
        """The ρ of each phase and the ε of each selection; refuses a budget too small."""
        capacity = self.budget.rho_capacity()
        if capacity <= 0.0:
            raise ValueError(
                invalid("budget", "large enough to measure the 1-way marginals", self.budget)
            )
        self._epsilon: float | None = None
        if self.method == "mst" and self.budget.epsilon is not None:
            capacity, self._epsilon = self._calibrate(capacity)
        plan = self._phases(capacity)
        one_way = self._one_way(None, plan[0])
        sigma = max(c.sigma for c in one_way.report.costs)
        if not sigma <= self.max_sigma:
            raise ValueError(
                invalid(
                    "budget",
                    f"large enough to measure the 1-way marginals with noise std <= max_sigma "
                    f"= {self.max_sigma:g} rows (it gives {sigma:.4g})",
                    self.budget,
                )
            )
        return plan

    def _phases(self, capacity: float) -> tuple[float, float, float, float]:
        """The ρ of each phase and the ε of each selection for a total ρ ``capacity``."""
        d = len(self.columns)
        rho1 = capacity if d == 1 else capacity / 3
        rho2 = rho3 = 0.0 if d == 1 else capacity / 3
        eps_sel = 0.0
        if self.method == "aim":
            # AIM Alg. 1: each 1-way marginal gets α·ρ/T (σ₀ = √(T/(2αρ))); the rest: the rounds.
            rho1 = fraction_down(Fraction(capacity) * ALPHA * d / self.rounds)
            rho2, rho3 = capacity - rho1, 0.0
        elif d > 1:
            # ε with (d − 1) ε²/8 ≤ ρ₂ exactly (Cesar & Rogers 2021 Lemma 3.2), rounded down.
            eps_sel = math.sqrt(8 * rho2 / (d - 1))
            while Fraction(eps_sel) ** 2 * (d - 1) / 8 > Fraction(rho2):
                eps_sel = math.nextafter(eps_sel, 0.0)
        return rho1, rho2, rho3, eps_sel

    def _calibrate(self, capacity: float) -> tuple[float, float | None]:
        """MST's ρ scale for an (ε, δ) budget by the PLD composition of its events.

        The events' parameters are fixed before the data are read (they depend
        on d, L0, L∞ and the budget only), so the run is accounted by the
        composition of its events — what a ledger with an (ε, δ) total does
        (:func:`gaussdp.accounting.filter.refusal`: the PLD accountant, zCDP's
        and RDP's as fallbacks). Cor 13's ρ capacity fits (CKS Cor 13: its
        zCDP bound is one the check takes); the largest ρ (within 10⁻³ relative,
        at most 1.5× it) whose composition the check admits is searched by
        :func:`gaussdp._search.smallest_passing_score` (regula falsi), which
        returns a point it evaluated to pass. Returns that ρ and the ε the
        check certifies for it at δ (cached per d, L0, L∞, ε, δ); if the check
        refuses even Cor 13's capacity, that capacity and ``None`` (Cor 13's ε).
        """
        budget = self.budget
        key = (
            len(self.columns),
            self.max_groups_per_unit,
            self.max_rows_per_group,
            budget.epsilon,
            budget.delta,
        )
        cached = _MST_CALIBRATION.get(key)
        if cached is not None:
            return cached
        limit = float(budget.epsilon or 0.0)
        certified: dict[float, float] = {}

        def excess(y: float) -> float:
            # ε of the run's events at the ρ scale −y, minus the budget's ε: ≤ 0 iff the
            # check a ledger or filter makes (refusal: ε ≤ its limit) admits it alone.
            event = self._planned(self._phases(capacity * -y)).event
            value = spent(budget, budget_accountant(budget).compose(event)).value
            certified[-y] = value
            return value - limit  # its sign is that of the exact comparison

        # Scale s ∈ [1, 1.5] as y = −s, so that the excess is non-increasing in y.
        try:
            scale = -smallest_passing_score(excess, -1.5, -1.0, rel_tol=1e-3)
            out: tuple[float, float | None] = (capacity * scale, certified[scale])
        except ValueError:  # not even Cor 13's capacity passes the check: plan by Cor 13
            out = (capacity, None)
        _MST_CALIBRATION[key] = out
        return out

    def _one_way(self, source: object, rho: float) -> Release:
        release = self._release(source, rho)
        for c in self.columns:
            release.count(by=c.name, keys=list(range(c.size)))
        return release

    def _marginals(
        self,
        source: object,
        rho: float,
        cliques: Sequence[Sequence[str]],
        sizes: Mapping[str, int] | None = None,
    ) -> Release:
        """A release counting every cell of each clique (ρ shared equally).

        ``sizes``: the cells of each column (default the domains'; after
        compression, fewer). A count's cost does not depend on its keys.
        """
        release = self._release(source, rho)
        sizes = self.sizes if sizes is None else sizes
        for clique in cliques:
            cells = itertools.product(*(range(sizes[a]) for a in clique))
            if len(clique) == 1:
                release.count(by=clique[0], keys=[k[0] for k in cells])
            else:
                release.count(by=tuple(clique), keys=[list(k) for k in cells])
        return release

    def _events(self, release: Release, cliques: Sequence[tuple[str, ...]]) -> list[SynthEvent]:
        l0, linf = self.max_groups_per_unit, self.max_rows_per_group
        return [
            SynthEvent(
                "measure",
                clique,
                # Δ²/(2σ²) with Δ² = L0·L∞² (CKS Thm 14), exact, rounded up.
                fraction_up(_measure_rho(l0, linf, part.sigma2)),
                cost.sensitivity,
                sigma2=part.sigma2,
                l0=l0,
                linf=linf,
            )
            for clique, cost, part in zip(
                cliques, release.report.costs, release.plan().parts, strict=True
            )
        ]

    def _report(
        self,
        one: Release,
        two: Release | None,
        tree: Sequence[tuple[str, ...]],
        eps_sel: float,
    ) -> SynthReport:
        events = self._events(one, [(c.name,) for c in self.columns])
        d = len(self.columns)
        delta_q = self.max_groups_per_unit * self.max_rows_per_group
        rho_sel = fraction_up(Fraction(eps_sel) ** 2 / 8)  # Cesar & Rogers 2021 Lemma 3.2
        for j in range(d - 1):
            events.append(
                SynthEvent(
                    "select",
                    tuple(tree[j]) if j < len(tree) else (),
                    rho_sel,
                    float(delta_q),
                    epsilon=eps_sel,
                )
            )
        if two is not None:
            # Before the run the pairs are unknown; their cost is not.
            events.extend(self._events(two, list(tree) or [()] * (d - 1)))
        # ρ's add (Bun & Steinke 2016 Lemma 2.3); summed exactly, rounded up.
        rho = fraction_up(sum((Fraction(e.rho) for e in events), Fraction(0)))
        # ε: the PLD composition's, as calibrated (an (ε, δ) budget), else CKS Cor 13's.
        if self._epsilon is not None:
            return SynthReport(
                tuple(events), rho, self.budget.delta, self._epsilon, self.budget, mode="pld"
            )
        return SynthReport(
            tuple(events), rho, self.budget.delta, self.budget.epsilon_at(rho), self.budget
        )

    def _report_aim(self, one: Release, rounds: Sequence[Round] | None) -> SynthReport:
        """AIM's report: the 1-way events, then each round's (or, before the run, their cap)."""
        events = self._events(one, [(c.name,) for c in self.columns])
        capacity = Fraction(self.budget.rho_capacity())
        if rounds is None:
            spent = sum((Fraction(e.rho) for e in events), Fraction(0))
            events.append(SynthEvent("rounds", (), fraction_down(capacity - spent), 0.0))
        else:
            for r in rounds:
                events.append(
                    SynthEvent(
                        "select",
                        r.clique,
                        fraction_up(Fraction(r.epsilon) ** 2 / 8),  # Cesar & Rogers 2021 L3.2
                        float(r.sensitivity),
                        epsilon=r.epsilon,
                    )
                )
                events.extend(self._events(r.release, [r.clique]))
        # A zCDP filter: the rounds stop before the sum exceeds the capacity (AIM's analysis).
        rho = float(capacity)
        return SynthReport(
            tuple(events),
            rho,
            self.budget.delta,
            self.budget.epsilon_at(rho),
            self.budget,
            method="AIM",
        )

    @property
    def report(self) -> SynthReport:
        """The privacy report, computed before any data are read."""
        if self.method == "aim":
            return self._report_aim(self._one_way(None, self._plan[0]), None)
        return self._planned(self._plan)

    def _planned(self, plan: tuple[float, float, float, float]) -> SynthReport:
        """MST's report for ``plan`` before the run (the tree's pairs unknown)."""
        rho1, _, rho3, eps_sel = plan
        d = len(self.columns)
        # Any d − 1 pairs: a count's cost does not depend on its keys.
        pair = tuple(c.name for c in self.columns[:2])
        two = self._marginals(None, rho3, [(pair[0], pair[-1])] * (d - 1)) if d > 1 else None
        return self._report(self._one_way(None, rho1), two, (), eps_sel)

    # -- running ----------------------------------------------------------------------
    def _load(self) -> pd.DataFrame:
        import pandas as pd

        source = self.source
        if isinstance(source, str | Path):
            import duckdb

            path = Path(source)
            if not path.is_file():
                raise FileNotFoundError(
                    invalid("data", "an existing CSV or Parquet file", str(path))
                )
            from gaussdp.release.engines import failure_message, raise_detached, read_csv_text

            with duckdb.connect() as con:
                try:
                    if path.suffix.lower() == ".parquet":
                        frame = self._parquet_columns(con.read_parquet(str(path))).df()
                    else:
                        # Text, not types inferred from the rows (a late string would fail
                        # the read: a refusal that depends on one row), a malformed line
                        # dropped (docs/release.md, "Reading a CSV"); each column's domain
                        # converts its values (one that does not convert is outside it).
                        frame = read_csv_text(con, [str(path)]).df()
                except duckdb.Error as error:  # its message quotes the record and line number
                    message = failure_message("duckdb", "reading the data", error)
                    raise_detached(ValueError(message), type(error).__name__)  # quotes rows
                if not isinstance(frame, pd.DataFrame):  # pragma: no cover - duckdb's contract
                    raise TypeError(invalid("data", "read as a table", str(path)))
                return frame
        if isinstance(source, pd.DataFrame):
            return source
        to_pandas = getattr(source, "to_pandas", None)
        if callable(to_pandas):
            frame = to_pandas()
            if isinstance(frame, pd.DataFrame):
                return frame
        raise TypeError(
            invalid("source", "a CSV/Parquet path or a pandas/polars/Arrow frame", source)
        )

    def _parquet_columns(self, table: Any) -> Any:
        """The columns a run uses of a Parquet ``table`` (a DuckDB relation), each
        converted so that no value can fail the read: numbers, booleans and text as they
        are, any other type (dates, intervals, …) as text by ``TRY_CAST`` (a value with
        no text is NULL). Columns the run does not use are not read: a value there
        (``'infinity'::DATE``) never decides a refusal."""
        import duckdb

        types = {c: str(t) for c, t in zip(table.columns, table.types, strict=True)}
        wanted = [self.privacy_unit, *self.sizes]
        missing = [c for c in wanted if c not in types]
        if missing:
            raise ValueError(invalid("data columns", f"including {missing}", list(types)))
        selected = []
        for c in dict.fromkeys(wanted):
            column = duckdb.ColumnExpression(c)
            if not _KEPT_TYPE.fullmatch(types[c]):
                column = column.try_cast(duckdb.sqltype("VARCHAR"))
            selected.append(column.alias(c))
        return table.select(*selected)

    def encode(self) -> pd.DataFrame:
        """The privacy unit and every column's cell codes.

        A row with a value outside its column's domain and no ``other`` cell is
        dropped (see :mod:`gaussdp.synth.domain`): never a refusal, which would
        depend on one person's value. An empty table is measured like any other.
        """
        import pandas as pd

        data = self._load()
        missing = [c for c in [self.privacy_unit, *self.sizes] if c not in data.columns]
        if missing:
            raise ValueError(invalid("data columns", f"including {missing}", list(data.columns)))
        out = {self.privacy_unit: data[self.privacy_unit].reset_index(drop=True)}
        for c in self.columns:
            out[c.name] = pd.Series(c.encode(data[c.name].reset_index(drop=True)), dtype=np.int64)
        coded = pd.DataFrame(out)
        kept = (coded[list(self.sizes)] != DROP).all(axis=1)
        return coded[kept].reset_index(drop=True)

    def run(
        self,
        *,
        rows: int | None = None,
        rng: RandomSource | None = None,
        ledger: Ledger | None = None,
        label: str | None = None,
        evaluate: bool = False,
        filter: PrivacyFilter | None = None,
    ) -> SynthResult:
        """Measure, select, fit and sample; every run is charged once, to a filter.

        The run's event (``report.event``) is charged to ``ledger`` if given,
        else to ``filter`` if given, else to :attr:`filter`, the in-memory
        :class:`~gaussdp.accounting.PrivacyFilter` created from the
        synthesizer's budget: running the same synthesizer twice is charged
        twice, so the second run is refused (as :meth:`Release.run
        <gaussdp.release.Release.run>`).

        Order: ask an in-memory filter (refused: nothing is read), read and
        encode the data (bad input: an error, nothing spent), charge the
        planned cost (the ledger reserves it; refused: nothing is run or
        drawn), measure and select, commit, then fit and sample.

        Parameters
        ----------
        rows : int, optional
            Synthetic rows to draw (default: the model's estimated total).
        rng : RandomSource, optional
            All randomness of the run (noise, selection and sampling); ``None``
            is the operating system's CSPRNG.
        ledger : Ledger, optional
            Charged with the run's event (one entry).
        label : str, optional
            The ledger entry's label.
        evaluate : bool
            Also compare every 1-, 2- and 3-way marginal with the true data
            (``quality.tv_true``) — **not private**: for evaluation only.
        filter : PrivacyFilter, optional
            A filter shared with other runs or releases (not with ``ledger``).

        Raises
        ------
        ValueError, TypeError, FileNotFoundError
            Bad input (a missing column or file; never a data value; both
            ``ledger`` and ``filter``).
        BudgetExceededError
            The ledger or filter cannot afford the run (nothing was drawn; a
            filter refuses before the data are read).
        RuntimeError
            A seeded ``rng`` (:class:`~gaussdp.random.ChaCha20Random`) in a process
            other than the one that made it (a forked child repeats the parent's noise,
            which the budget would pay for as independent), or an in-memory filter
            outside the process that made it, or copied (see
            :class:`~gaussdp.accounting.PrivacyFilter`). Nothing was read or charged.
        """
        import pandas as pd

        from gaussdp.synth.model import fit_model, sample_codes

        if rows is not None:
            rows = check_int("rows", rows, minimum=0)
        source = check_rng(rng)
        _refuse_foreign_seed(source, "synthesizer run")
        spend_to = spend_target(ledger, filter, self.filter)
        planned = self.report
        what = "this synthesizer run"
        # MST: its events (the accountant composes them); AIM: its ρ.
        if ledger is None and not spend_to.can_accept(planned.event):
            spend_to.accept(planned.event, what=what)  # raises: nothing is read
        coded = self.encode()
        sizes = self.sizes
        names = list(sizes)
        reservation = None
        if ledger is not None:
            reservation = ledger.reserve(
                planned.event,
                label=label or f"synth {planned.method} of {', '.join(names)}",
                detail=planned.to_dict(),
            )
        else:
            spend_to.accept(planned.event, what=what)
        # 1. 1-way marginals.
        one = self._one_way(coded, self._plan[0])
        measurements = self._measure(one, [(n,) for n in names], source, sizes)
        truth = {n: coded[n].to_numpy(dtype=np.int64) for n in names} if evaluate else None
        merged: dict[str, tuple[int, ...]] = {}
        if self.compress:
            # Post-processing of the noisy 1-way marginals: merge each column's rare cells.
            merged, measurements = compress(measurements, self.compress_threshold)
            coded = recode(coded, sizes, merged)
        cells = compressed_sizes(sizes, merged)
        if self.method == "aim":
            selected, report, model = self._run_aim(coded, cells, one, measurements, source)
        else:
            selected, report = self._run_mst(coded, cells, one, measurements, source)
            model = None
        if ledger is not None and reservation is not None:
            ledger.commit(reservation)
        # 4. Post-processing: fit, sample, decode.
        # MST: one fit; AIM: the last round's model refined, warm-started.
        model = fit_model(cells, measurements, iters=self.iters, warm_start=model)
        n_out = rows if rows is not None else max(round(float(model.total)), 0)
        gen = np.random.default_rng(int.from_bytes(source.random_bytes(32), "little"))
        model_codes = sample_codes(model, n_out, rng=gen)
        codes = expand(model_codes, sizes, merged, rng=gen)
        frame = pd.DataFrame({c.name: c.decode(codes[c.name], rng=gen) for c in self.columns})
        quality = _quality(model_codes, cells, measurements, codes, sizes, truth)
        return SynthResult(
            frame, report, quality, tuple(selected), tuple(measurements), model, merged
        )

    def _run_mst(
        self,
        coded: pd.DataFrame,
        sizes: Mapping[str, int],
        one: Release,
        measurements: list[Any],
        source: RandomSource,
    ) -> tuple[list[tuple[str, ...]], SynthReport]:
        """MST's selection and 2-way measurements (``measurements`` is extended)."""
        _, _, rho3, eps_sel = self._plan
        names = list(sizes)
        d = len(names)
        tree: list[tuple[str, ...]] = []
        two = None
        if d > 1:
            # 2. Kruskal with the exponential mechanism (McKenna et al. 2021, Alg. 1).
            pairs = list(itertools.combinations(names, 2))
            scores = self._scores(coded, sizes, pairs, measurements, source)
            parent = {n: n for n in names}

            def find(a: str) -> str:
                while parent[a] != a:
                    a = parent[a]
                return a

            delta_q = self.max_groups_per_unit * self.max_rows_per_group
            for _ in range(d - 1):
                candidates = [i for i, (a, b) in enumerate(pairs) if find(a) != find(b)]
                chosen = candidates[
                    exponential_mechanism(
                        [scores[i] for i in candidates],
                        epsilon=eps_sel,
                        sensitivity=delta_q,
                        rng=source,
                    )
                ]
                a, b = pairs[chosen]
                tree.append((a, b))
                parent[find(a)] = find(b)
            # 3. The chosen 2-way marginals.
            two = self._marginals(coded, rho3, tree, sizes)
            measurements += self._measure(two, tree, source, sizes)
        return tree, self._report(one, two, tree, eps_sel)

    def _run_aim(
        self,
        coded: pd.DataFrame,
        sizes: Mapping[str, int],
        one: Release,
        measurements: list[Any],
        source: RandomSource,
    ) -> tuple[list[tuple[str, ...]], SynthReport, Any]:
        """AIM's rounds (:mod:`gaussdp.synth.aim`); ``measurements`` is extended."""
        from gaussdp.synth.model import fit_model

        l0, linf = self.max_groups_per_unit, self.max_rows_per_group
        weights = workload_weights(self.workload)
        truth = self._bounded(coded, sizes, list(weights), source)
        used = sum((_measure_rho(l0, linf, p.sigma2) for p in one.plan().parts), Fraction(0))

        def measure(clique: tuple[str, ...], rho: float) -> tuple[Any, Release, Fraction]:
            release = self._marginals(coded, rho, [clique], sizes)
            (m,) = self._measure(release, [clique], source, sizes)
            (part,) = release.plan().parts
            return m, release, _measure_rho(l0, linf, part.sigma2)

        def sigma_of(rho: float) -> float:
            # A count's σ depends on ρ and L0·L∞ only, not on its keys: plan a 1-way
            # count rather than listing every cell of a (possibly huge) workload clique.
            (part,) = self._marginals(None, rho, [self.workload[0][:1]], sizes).plan().parts
            return math.sqrt(part.sigma2)

        def fit(ms: list[Any], warm: Any) -> Any:
            return fit_model(sizes, ms, iters=self.round_iters, warm_start=warm)

        rounds, model = run_rounds(
            sizes=sizes,
            weights=weights,
            truth=truth,
            measurements=measurements,
            capacity=Fraction(self.budget.rho_capacity()),
            used=used,
            rounds=self.rounds,
            max_model_size=self.max_model_size,
            unit_sensitivity=l0 * linf,
            measure=measure,
            sigma_of=sigma_of,
            fit=fit,
            source=source,
        )
        return [r.clique for r in rounds], self._report_aim(one, rounds), model

    def _measure(
        self,
        release: Release,
        cliques: Sequence[tuple[str, ...]],
        source: RandomSource,
        sizes: Mapping[str, int],
    ) -> list[Any]:
        from gaussdp.synth.model import Measurement

        # Raw noisy counts (not clamped at 0): Private-PGM's least squares and its
        # total estimate assume unbiased measurements.
        result = release.run(rng=source, raw=True)
        values = result.frame["value"].to_numpy(dtype=np.float64)
        stds = result.frame["std"].to_numpy(dtype=np.float64)
        out = []
        start = 0
        for clique in cliques:
            n = math.prod(sizes[a] for a in clique)
            out.append(Measurement(tuple(clique), values[start : start + n], float(stds[start])))
            start += n
        return out

    def _bounded(
        self,
        coded: pd.DataFrame,
        sizes: Mapping[str, int],
        cliques: Sequence[tuple[str, ...]],
        source: RandomSource,
    ) -> dict[tuple[str, ...], npt.NDArray[np.int64]]:
        """The exact bounded counts of each clique (C order), as the engine bounds them.

        No noise is drawn: only the selection's scores use them. The bounding's
        salt comes from ``source``.
        """
        from gaussdp.release.core import _aggregate

        _, rows = _aggregate(self._marginals(coded, 1.0, cliques, sizes), source)
        out: dict[tuple[str, ...], npt.NDArray[np.int64]] = {}
        for clique, grouping_rows in zip(cliques, rows, strict=True):
            k = len(clique)
            counts = np.zeros(tuple(sizes[a] for a in clique), dtype=np.int64)
            for row in grouping_rows:  # the keys, the units, then the bounded row count
                counts[tuple(int(v) for v in row[:k])] += int(row[k + 1] or 0)
            out[tuple(clique)] = counts.ravel()
        return out

    def _scores(
        self,
        coded: pd.DataFrame,
        sizes: Mapping[str, int],
        pairs: Sequence[tuple[str, str]],
        measurements: Sequence[Any],
        source: RandomSource,
    ) -> list[int]:
        """‖M_ab − round(M̂_ab)‖₁ per pair: bounded true counts against the public estimate."""
        ones = {m.clique[0]: np.clip(m.values, 0.0, None) for m in measurements}
        total = float(np.mean([v.sum() for v in ones.values()]))
        probs = {
            a: (v / v.sum() if v.sum() > 0 else np.full(len(v), 1 / len(v)))
            for a, v in ones.items()
        }
        bounded = self._bounded(coded, sizes, pairs, source)
        scores = []
        for a, b in pairs:
            estimate = np.rint(total * np.outer(probs[a], probs[b])).astype(np.int64)
            scores.append(int(np.abs(bounded[(a, b)] - estimate.ravel()).sum()))
        return scores


def _measure_rho(l0: int, linf: int, sigma2: Fraction) -> Fraction:
    """Δ²/(2σ²) with Δ² = L0·L∞²: the exact ρ of a noisy marginal (CKS Thm 14)."""
    return Fraction(l0 * linf * linf) / (2 * sigma2)


def _quality(
    model_codes: Mapping[str, npt.NDArray[np.int64]],
    cells: Mapping[str, int],
    measurements: Sequence[Any],
    codes: Mapping[str, npt.NDArray[np.int64]],
    sizes: Mapping[str, int],
    truth: Mapping[str, npt.NDArray[np.int64]] | None,
) -> pd.DataFrame:
    """TV per 1-, 2-, 3-way marginal: vs the measurements (in the model's, compressed,
    cells) and vs the true data (in the domains' cells)."""
    import pandas as pd

    measured = {m.clique: m.values for m in measurements}
    records = []
    names = list(sizes)
    for order in (1, 2, 3):
        for clique in itertools.combinations(names, order):
            noisy = measured.get(clique)
            records.append(
                {
                    "clique": ",".join(clique),
                    "order": order,
                    "tv_measured": math.nan
                    if noisy is None
                    else total_variation(marginal(model_codes, cells, clique), noisy),
                    "tv_true": math.nan
                    if truth is None
                    else total_variation(
                        marginal(codes, sizes, clique), marginal(truth, sizes, clique)
                    ),
                }
            )
    return pd.DataFrame.from_records(records, columns=["clique", "order", "tv_measured", "tv_true"])
