r"""PLD grids chosen by the accuracy asked for, within a memory bound.

The accountant states a tolerance τ on ε (relative; default 10⁻⁴). The grid step h is
first set from the loss spread s of one run (h = 1.6√τ·s: the connect-the-dots upper
bound inflates the variance of each run's loss by at most h²/4, a relative error of
about (h/s)²/8 in ε, see docs/accounting.md), then refined where the certified bracket
shows that it is needed: while ``upper − lower`` exceeds τ·upper (lower ≤ truth ≤ upper,
so a bracket within τ·upper proves the upper bound within τ of the truth), h is divided
by √(gap / (τ·upper))·1.2 (the errors are O(h²)) and the PLD rebuilt, at most
:data:`_MAX_REFINEMENTS` times. ``upper`` is certified at every step, and a query
answers with the smallest upper bound of the grids it built. A finer grid is not
always tighter: its round-off allowance grows with its length, and where the bracket
is wide for a reason the step does not change (the mass the truncations put at +∞,
against a small δ) a finer grid only adds allowance. So a finer grid whose upper bound
is larger than the grid it refines is dropped, the refinement stops there, and the
next query starts from the tighter grid. The truncations' tail mass is chosen per
query from δ (:func:`tail_mass_for`).

Precision: where the FFT round-off allowance (proven in float64, docs/accounting.md §3)
would move the upper bound by more than half the tolerance, the next grid is built with
its FFTs in extended precision (long double; an allowance about 2¹¹ smaller).

Memory: every operation (one run's build, a k-fold power, a composition) checks,
before allocating, that the arrays alive at its peak fit :data:`MAX_GRID_POINTS` units
of :data:`VALUES_PER_POINT` float64 values (288 MB; with the interpreter and its
libraries, about 90 MB, and what the allocator keeps, a process stays under 500 MB). A
k-fold power counts :data:`POWER_ARRAYS` arrays of its window's length and the PMFs the
PLD being built holds (its one-run PMFs, the directions already powered). A build that
would need more raises :class:`GridTooLargeError`; the automatic policy then coarsens h
to fit (the result is still certified, only looser, and its ``note`` says so), and an
explicit ``value_discretization`` that cannot fit is refused with the step that would.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import numpy as np

from gaussdp._validation import check_positive
from gaussdp.accounting.bounds import DeltaBounds, EpsilonBounds
from gaussdp.errors import invalid

__all__ = [
    "COMPOSE_ARRAYS",
    "DEFAULT_TOLERANCE",
    "EXTENDED_COST",
    "MAX_GRID_POINTS",
    "MIN_STEP",
    "POWER_ARRAYS",
    "QUERY_ARRAYS",
    "VALUES_PER_POINT",
    "AdaptivePLD",
    "GridTooLargeError",
    "MemoryBoundError",
    "check_grid_points",
    "check_tolerance",
    "points_of_values",
    "tail_mass_for",
]

#: Default relative tolerance on ε of the PLD accountant's upper bound.
DEFAULT_TOLERANCE = 1e-4
#: Smallest grid step a refinement builds: below it the grid's points e^{±h} are a few
#: ulps from 1 and its chords carry no information.
MIN_STEP = 1e-9
#: The memory bound of the PLD code's arrays, in grid points of :data:`VALUES_PER_POINT`
#: float64 values each (4.5·10⁶ × 64 bytes = 288 MB; see :func:`check_grid_points` for
#: long double). A process holds up to about 70 MB more than this count (measured: glibc
#: keeps up to 64 MB of freed heap memory resident, its trim threshold), so one whose
#: interpreter and libraries take about 90 MB stays under 500 MB. Measured in fresh
#: processes (tests/accounting/test_memory.py): the 10⁴-step, q = 0.1, σ = 0.6
#: subsampled Gaussian at h = 9e-5 (windows of 5.4 and 2.9 million points) and its
#: 10⁶-step version, coarsened to the bound.
MAX_GRID_POINTS = 4_500_000
#: float64 values (8 bytes) per grid point of :data:`MAX_GRID_POINTS`.
VALUES_PER_POINT = 8
#: Arrays of its window's length N alive at the peak of a k-fold power besides the PMFs
#: it holds (float64; twice that in long double): the forward transform's zero-padded
#: input, output and work buffer and pocketfft's plan; then the spectrum (raised in
#: place), the inverse's output, work buffer and plan (docs/accounting.md, "Memory").
POWER_ARRAYS = 4
#: Arrays of the largest PMF's length that an ε(δ) query of a self-composed PLD adds
#: to its PMFs: the suffix sums over its top (measured: 2.1 at 10⁶ steps of q = 0.1,
#: σ = 0.6, whose search covers the top 40 % of the grid; δ(ε) is summed by blocks).
QUERY_ARRAYS = 3
#: The same for a composition of two PLDs of output length N, counting the other
#: directions' inputs and outputs: both spectra, their moduli and error terms, the
#: product and its inverse transform (6 at the peak), the inputs of all four directions
#: (about 4) and the three outputs already made.
COMPOSE_ARRAYS = 13
#: Memory of a long double (extended precision) grid point, in float64 points.
EXTENDED_COST = np.dtype(np.longdouble).itemsize / np.dtype(np.float64).itemsize
# Largest number of rebuilds with a finer grid per query, and the largest grid a
# refinement may build (refining is for accuracy; it stops where it gets expensive).
_MAX_REFINEMENTS = 4
_REFINE_POINTS = 1_500_000
# The bracket's relative width that is accepted, in units of the tolerance: 1 for ε, so
# that an accepted bracket proves the tolerance (it was 10 while the lower bound's error
# was ten times the upper's; docs/accounting.md §1, "Choosing h"). A δ(ε) query's bracket
# is relative in δ, which moves |d ln δ/d ln ε| (10–100 at the usual δ) times faster than
# ε: 10τ in δ is about τ/10–τ in ε, as before.
_GAP_FACTOR = 1.0
_DELTA_GAP_FACTOR = 10.0
# The share of the tolerance on ε that the numerical allowances may take before the
# PLD is rebuilt with its FFTs in extended precision.
_ALLOWANCE_SHARE = 0.5
# On grids of at most _CHEAP_POINTS points a long double rebuild costs milliseconds (an
# FFT of 2¹⁶ points: 6 ms against 1.3 ms in float64): it is made once the allowances
# take more than this fraction of that share, so that a finer tolerance (a smaller tail
# mass, a wider window, a larger float64 allowance) does not give a looser upper bound
# (a discrete Gaussian vector on its lattice at δ = 1e-9: float64 upper 4.99760 at
# τ = 1e-4 and 4.99760 + 1.5e-6 at τ = 1e-5; long double 4.9975904 at both).
_CHEAP_POINTS = 1 << 16
_CHEAP_SHARE = 0.01
# Automatic truncation (tail_mass_for): the mass all truncations and wrap-arounds of a
# query at δ may move together is at most this share of τ·δ, in about
# _TAIL_OPS_PER_EVENT operations per distinct event, per operation between the two bounds.
_TAIL_SHARE = 1.0
_TAIL_OPS_PER_EVENT = 4
_TAIL_MASS_RANGE = (1e-15, 1e-10)


class GridTooLargeError(ValueError):
    """A grid of ``points`` points was requested, more than :data:`MAX_GRID_POINTS`."""

    def __init__(self, points: int) -> None:
        super().__init__(
            invalid(
                "value_discretization",
                f"large enough for grids of at most {MAX_GRID_POINTS} points",
                f"a grid of {points} points",
            )
        )
        self.points = points


class MemoryBoundError(ValueError):
    """No grid within the memory bound meets the tolerance: the PLD accountant
    certifies nothing for this composition (another accountant may, e.g. RDP)."""


def check_grid_points(points: int, extended: bool = False) -> None:
    """Raise :class:`GridTooLargeError` if a grid of ``points`` points may not be allocated.

    The bound is on memory, counted in float64 points: a grid whose arrays are long
    double (``extended``) counts :data:`EXTENDED_COST` times its points (2 where long
    double is stored in 16 bytes, x86-64; 1 where it is float64).
    """
    cost = math.ceil(points * EXTENDED_COST) if extended else points
    if cost > MAX_GRID_POINTS:
        raise GridTooLargeError(cost)


def points_of_values(values: int) -> int:
    """The grid points of :data:`MAX_GRID_POINTS` that ``values`` float64 values take."""
    return -(-values // VALUES_PER_POINT)


def check_tolerance(value: object) -> float:
    """Return ``value`` as a relative tolerance in (0, 0.1], else raise the shared template."""
    tol = check_positive("tolerance", value)
    if tol > 0.1:
        raise ValueError(invalid("tolerance", "in (0, 0.1]", value))
    return tol


def tail_mass_for(delta: float, tolerance: float, events: int) -> float:
    r"""The mass each truncation or wrap-around may move, for a query at ``delta``.

    ``tolerance`` is the relative accuracy on ε that the grid aims at: the accountant's
    tolerance τ, or less where its first grid step is capped below what τ asks for
    (``PLDAccountant._first_step``), so that truncation does not dominate that grid's
    error.

    What truncation moves is never lost on the upper side: mass cut above a window goes
    to +∞ (δ(ε) counts it in full), mass cut below is rounded up to the window's first
    point, and the Chernoff bound on what wraps around is added to δ
    (docs/accounting.md §2). So the tail mass is a matter of tightness only, and it need
    only be small against what is asked: about 4 operations per distinct event (one
    run's truncation, summed over its runs; the window's wrap-around; the truncation
    after the power; the composition with the others) together move at most
    τ·δ (``_TAIL_SHARE`` = 1), which changes δ by at most the tolerance relative (and ε
    by that over |d ln δ/d ln ε|, which the bracket check then measures). Rounded down to
    a power of ten (so that nearby δ share a grid), within [1e-15, 1e-10]: never below
    the fixed default it replaces (1e-15, so no window grows), never above 1e-10 per
    operation.
    """
    lo, hi = _TAIL_MASS_RANGE
    want = _TAIL_SHARE * tolerance * delta / (_TAIL_OPS_PER_EVENT * max(events, 1))
    if not want > lo:  # also NaN-safe: δ = 0 asks for the most accurate truncation
        return lo
    return min(hi, 10.0 ** math.floor(math.log10(want)))


class _Built(Protocol):
    """What :class:`AdaptivePLD` builds: any object with ``epsilon`` and ``delta``."""

    def epsilon(self, delta: float) -> EpsilonBounds: ...

    def delta(self, epsilon: float) -> DeltaBounds: ...

    def without_allowances(self) -> _Built: ...


class AdaptivePLD:
    """Builds a composition's PLD at grid steps chosen by the accuracy asked for.

    Parameters
    ----------
    build : callable
        ``build(h, extended)`` returns the composition's PLD on grid step ``h``, its FFTs
        in extended precision (long double) if ``extended``.
    h0 : float
        The first grid step (from the loss spread, see the module docstring).
    tolerance : float
        Relative tolerance τ on ε.
    fixed : bool
        True when the user gave the grid step: no refinement, no coarsening; a grid
        that does not fit is refused.
    snap : callable
        Maps a wanted step to the step used (e.g. one dividing a loss lattice).
    loose : bool
        True when the bracket's width comes from the pairs themselves, not the grid:
        the upper side is a dominating pair that is not tight under composition and the
        lower side a different, realisable pair (an ε-bounded-range step, see
        :mod:`gaussdp.accounting._bounded_range`). A finer grid cannot close that gap,
        so the bracket does not drive refinement: ``h0`` (chosen for the tolerance from
        the loss spread) is kept.
    """

    def __init__(
        self,
        build: Callable[[float, bool], _Built],
        h0: float,
        tolerance: float,
        *,
        fixed: bool,
        snap: Callable[[float], float],
        loose: bool = False,
    ) -> None:
        self._build = build
        self._loose = loose
        self._tol = tolerance
        self._fixed = fixed
        self._snap = snap
        self._h = h0
        self._pld: _Built | None = None
        self._coarsened = False
        self._extended = False
        self._no_extended = False  # extended precision did not fit the memory bound

    @property
    def value_discretization(self) -> float:
        """The current grid's step: the finest kept so far (the first one before any
        query; a finer grid that was looser is not kept)."""
        return self._h

    @property
    def coarsened(self) -> bool:
        """Whether a grid was coarsened to fit the memory bound."""
        return self._coarsened

    def pld(self) -> _Built:
        """The PLD on the current grid (the finest kept so far)."""
        if self._pld is None:
            self._pld = self._build_fitting(self._h)
        return self._pld

    def _build_fitting(self, h: float) -> _Built:
        for _ in range(4):
            try:
                built = self._build(h, self._extended)
            except GridTooLargeError as exc:
                if self._fixed:
                    need = h * exc.points / MAX_GRID_POINTS
                    raise ValueError(
                        invalid(
                            "value_discretization",
                            f"at least {need:.3g} for this composition to fit the memory "
                            f"bound of {MAX_GRID_POINTS} grid points (or use a larger "
                            "tolerance and no explicit step, or RDPAccountant)",
                            h,
                        )
                    ) from None
                h = self._snap(h * exc.points / MAX_GRID_POINTS * 1.25)
                self._coarsened = True
                if h > 1.0:  # grid steps are at most 1 nat: a huge count fits no grid
                    break
                continue
            self._h = h
            return built
        raise MemoryBoundError(
            invalid(
                "tolerance", "reachable within the memory bound (or use RDPAccountant)", self._tol
            )
        )

    def epsilon(self, delta: float) -> EpsilonBounds:
        """Bounds on ε at ``delta``, refining the grid until the bracket is narrow."""
        lower, upper = self._refine(
            lambda pld: pld.epsilon(delta), _ALLOWANCE_SHARE * self._tol, _GAP_FACTOR
        )
        return EpsilonBounds(lower, upper, method="pld", note=self._note(lower, upper, _GAP_FACTOR))

    def delta(self, epsilon: float) -> DeltaBounds:
        """Bounds on δ at ``epsilon``, refining the grid until the bracket is narrow.

        At an ε beyond every finite loss of the grid (``largest_finite_loss``) no grid
        is refined (both bounds stay certified; only the tightness is at stake): the
        upper δ there is the mass at +∞ plus the allowances, and the lower δ is 0 (its
        losses are rounded down). A finer grid could only resolve the mass that this
        grid's windows moved to +∞ (at most the tail bound per operation, 1e-15 by
        default), at the cost of grids up to 16² times larger.
        """

        def beyond(pld: _Built) -> bool:
            return epsilon >= getattr(pld, "largest_finite_loss", math.inf)

        gap = _DELTA_GAP_FACTOR
        lower, upper = self._refine(lambda pld: pld.delta(epsilon), self._tol, gap, beyond)
        return DeltaBounds(lower, upper, method="pld", note=self._note(lower, upper, gap))

    def _refine(
        self,
        query: Callable[[_Built], EpsilonBounds | DeltaBounds],
        share: float,
        gap_factor: float,
        settled: Callable[[_Built], bool] | None = None,
    ) -> tuple[float, float]:
        """The bracket of ``query``, intersected over the grids built: every grid's
        bounds are certified, so the largest lower and the smallest upper are too. Stops
        when the bracket is within ``gap_factor``·τ·upper, the grid cannot grow, two
        finer grids in a row did not narrow it by 5 % (the allowances, not the
        discretisation, dominate), or a finer grid's upper bound is larger than the
        grid it refines: that grid is dropped and the coarser one kept (its round-off
        allowance, which grows with the grid's length, outweighed the discretisation it
        saved; at δ = 6e-13 with the bracket held wide by the truncations' mass at +∞,
        steps 7.1e-5, 2.6e-5, 9.3e-6 gave 0.3954520, 0.3954637, 0.3954753).

        If the numerical allowances (round-off, wrapped mass) move the upper bound by
        more than ``share``·upper (or make it infinite), the next grid is built with its
        FFTs in extended precision (and every later one): the finer grid if the
        discretisation asks for one, else the same grid again. No grid is refined where
        ``settled(pld)`` says a finer one cannot change the bracket."""
        pld = self.pld()
        b = query(pld)
        lower, upper = b.lower, b.upper
        built_extended = self._extended
        bare: EpsilonBounds | DeltaBounds | None = query(pld.without_allowances())
        size = getattr(pld, "largest_grid", None)
        if isinstance(size, int) and size <= _CHEAP_POINTS:
            share *= _CHEAP_SHARE
        allowances_too_large = bare is not None and upper - bare.upper > share * bare.upper
        if not self._extended and not self._no_extended and allowances_too_large:
            self._extended = True
        stalled = 0
        refinements = 0 if settled is not None and settled(pld) else _MAX_REFINEMENTS
        for _ in range(refinements):
            # The allowances (round-off, wrapped mass) do not shrink with h: the step is
            # refined only while the discretisation alone leaves the bracket too wide
            # (the same grid's bare bracket is reused), against what the allowances leave
            # of the tolerance (none of it where an extended rebuild will shrink them).
            bare = bare if bare is not None else query(pld.without_allowances())
            spent = 0.0
            if built_extended or not self._extended:
                spent = max(0.0, (b.upper - b.lower) - (bare.upper - bare.lower))
            factor = self._refinement(bare.lower, bare.upper, gap_factor, spent)
            if factor is None:
                break
            coarser_h, coarser_upper = self._h, b.upper
            finer = self._finer(factor)
            if finer is None:
                break
            b = query(finer)
            old_gap = upper - lower
            lower, upper = max(lower, b.lower), min(upper, b.upper)
            if b.upper > coarser_upper:
                # Looser than the grid it refines (``pld``, see above): keep that one.
                self._pld, self._h = pld, coarser_h
                finer = None
                break
            pld = finer
            built_extended = self._extended
            bare = None
            stalled = stalled + 1 if upper - lower > old_gap * 0.95 else 0
            if stalled == 2:
                break
        if self._extended and not built_extended:
            # The float64 grid is not held while the long double one is built (its
            # bounds are in the bracket already): up to 4 × 3e6 float64 points.
            del pld
            finer = None
            rebuilt = self._rebuilt_extended()
            if rebuilt is not None:
                b = query(rebuilt)
                lower, upper = max(lower, b.lower), min(upper, b.upper)
        return min(lower, upper), upper

    def _rebuilt_extended(self) -> _Built | None:
        """The current grid rebuilt with its FFTs in extended precision, or None where
        that does not fit the memory bound (long double counts double, see
        :func:`check_grid_points`): the float64 grid's bounds are certified and stand,
        and later builds stay in float64. Where it does not fit and the step is not the
        user's, a coarser step that fits is tried: it trades discretisation (O(h²)) for
        round-off, which here takes more than its share of the tolerance, and the
        bracket is the intersection of both grids' certified ones (10⁵ runs of
        Subsampled(Gaussian(0.6), 1e-5): the float64 grid at h = 6.2e-7 carries an
        allowance of 6.4e-9 against δ = 1e-5; the long double one at the coarser step
        that fits, under 1e-10)."""
        self._pld = None  # rebuilt (in float64) by the next query if this does not fit
        h = self._h
        for _ in range(2):
            try:
                built = self._build(h, True)
            except GridTooLargeError as exc:
                h = self._snap(h * exc.points / MAX_GRID_POINTS * 1.25)
                if self._fixed or h > 1.0:
                    break
                continue
            if h != self._h:
                self._h = h
                self._coarsened = True
            self._pld = built
            return built
        self._extended = False
        self._no_extended = True
        return None

    def _refinement(
        self, lower: float, upper: float, gap_factor: float, spent: float
    ) -> float | None:
        """The factor to divide h by, or None when the bare bracket [lower, upper] is
        narrow enough (or cannot be narrowed by the grid: ``loose``): within
        ``gap_factor``·τ·upper less ``spent`` (the allowances' part of the full bracket),
        but at least half of it (the allowances are then the larger part; an extended
        rebuild, not a finer grid, shrinks them)."""
        if self._fixed or self._loose or not math.isfinite(upper) or upper <= 0.0:
            return None
        whole = gap_factor * self._tol * upper
        target = max(whole - spent, 0.5 * whole)
        gap = upper - lower
        if gap <= target:
            return None
        return min(16.0, max(1.5, 1.2 * math.sqrt(gap / target)))

    def _finer(self, factor: float) -> _Built | None:
        h = self._snap(max(self._h / factor, MIN_STEP))
        if h >= self._h:
            return None
        size = getattr(self._pld, "largest_grid", None)
        if isinstance(size, int) and size * self._h / h > _REFINE_POINTS:
            return None
        before = self._coarsened
        self._coarsened = False
        try:
            built = self._build(h, self._extended)
        except GridTooLargeError:
            self._coarsened = True
            return None
        finally:
            self._coarsened = self._coarsened or before
        self._h = h
        self._pld = built
        return built

    def _note(self, lower: float, upper: float, gap_factor: float) -> str:
        if math.isfinite(upper) and upper - lower <= gap_factor * self._tol * max(upper, 0.0):
            return ""
        if not math.isfinite(upper):
            return (
                "the PLD cannot certify an upper bound here (its mass at +inf and its "
                "numerical allowances exceed delta)"
            )
        if self._loose:
            return (
                f"grid step {self._h:.3g}: the bracket is wider than the tolerance because "
                "the bounded-range dominating pair is not tight under composition (a "
                "finer grid would not narrow it)"
            )
        if self._coarsened:
            return (
                f"grid step {self._h:.3g} (coarsened to fit the memory bound of "
                f"{MAX_GRID_POINTS} points): the bracket is wider than the tolerance"
            )
        return f"grid step {self._h:.3g}: the bracket is wider than the tolerance"
