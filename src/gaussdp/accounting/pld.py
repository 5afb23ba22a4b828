r"""Privacy loss distributions on a grid, with certified upper and lower bounds.

A mechanism's pair of output distributions (P, Q) on neighbouring datasets is
summarised by its privacy loss L = ln(dP/dQ)(Y), Y ~ P. The smallest δ at ε is the
hockey-stick divergence (CKS Lemma 9)

.. math:: \delta(\varepsilon) = \mathbb{E}[\max(0, 1 - e^{\varepsilon - L})],

losses add under composition, so the PLD of a composition is the convolution of
the PLDs (Koskela et al. 2021; Sommer et al. 2019).

Every loss value here lives on the global grid ``i * h`` (``h`` is the *value
discretisation interval*, in nats). Two discretisations of each mechanism are kept:

* **pessimistic** (upper bound): "connect the dots" (Doroshenko et al. 2022).
  Loss mass between two grid points is split between them so that total mass and
  :math:`\mathbb{E}[e^{-L}]` are preserved. The hockey-stick curve of the result
  is the chord interpolation of the true (convex) curve in :math:`e^\varepsilon`,
  so it lies above it: the discretised pair *dominates* the true pair, and
  dominance is preserved by composition. Mass above the grid goes to +∞ (it adds
  to δ in full); mass below it is moved up to the lowest grid point.
* **optimistic** (lower bound): the same chord interpolation, lowered at every
  grid point by a bound on the chord-over-curve gap of the adjacent segments
  (from the tangents of the curve; see ``_from_bins``), so that it lies *below*
  the true curve: the discretised pair is *dominated* by the true pair. Mass
  above the grid is moved down to the top grid point, mass below is dropped.
  (Rounding every loss down would also be valid, but its error grows like k·h/2
  under k-fold composition; the tangent correction keeps it O(k·h²) like the
  upper side.)

Composition is by FFT. The k-fold self-composition is computed by raising the
discrete Fourier transform to the k-th power on a circular window of length N
whose position and length are chosen from Chernoff bounds on both tails of the
k-fold sum. The mass that wraps around is at
most the Chernoff bound η: on the upper side that bound is *added* to δ (mass from
above the window wraps to lower losses) and mass from below the window only wraps to
higher losses (pessimistic); on the lower side η is *subtracted* from δ.
Floating-point round-off of the FFTs, the powers and their propagation is bounded by
the proven lemmas of :mod:`gaussdp.accounting._roundoff` (componentwise DFT error,
the power's own evaluation error, Young's inequality) and added to (upper) or
subtracted from (lower) δ; docs/accounting.md §3 has the proofs. Where these
allowances exceed δ the upper bound is ``inf`` (the accountant then falls back to a
labelled RDP bound). Every grid is bounded (``_adaptive.MAX_GRID_POINTS``).

References
----------
.. [CKS] C. Canonne, G. Kamath, T. Steinke, "The Discrete Gaussian for
   Differential Privacy", NeurIPS 2020. Lemma 9, Thm 7, Thm 14, §2.4.
.. [KJH] A. Koskela, J. Jälkö, L. Prediger, A. Honkela, "Tight Differential
   Privacy for Discrete-Valued Mechanisms and for the Subsampled Gaussian
   Mechanism Using FFT", AISTATS 2021.
.. [DGKKM] V. Doroshenko, B. Ghazi, P. Kamath, R. Kumar, P. Manurangsi, "Connect
   the Dots: Tighter Discrete Approximations of Privacy Loss Distributions",
   PETS 2022.
.. [ZDW] Y. Zhu, J. Dong, Y.-X. Wang, "Optimal Accounting of Differential Privacy
   via Characteristic Function", AISTATS 2022 (dominating pairs).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from scipy import fft as sp_fft
from scipy.special import ndtr, ndtri

from gaussdp._search import add_up, fraction_down, largest_passing, smallest_passing
from gaussdp._validation import (
    check_count,
    check_delta,
    check_epsilon,
    check_fraction,
    check_int,
    check_positive,
)
from gaussdp.accounting._adaptive import (
    COMPOSE_ARRAYS,
    POWER_ARRAYS,
    QUERY_ARRAYS,
    check_grid_points,
    points_of_values,
)
from gaussdp.accounting._roundoff import (
    EXTENDED_PROVEN,
    U_EXTENDED,
    centred_deviations,
    coefficient_error_l1,
    fft_gamma,
    full_weights,
    power,
    power_error,
    power_near_one,
    propagated_power_error,
    tail_dft,
)
from gaussdp.accounting.bounds import DeltaBounds, EpsilonBounds, LossMasses
from gaussdp.errors import invalid
from gaussdp.privacy import DiscreteGaussianDistribution

__all__ = [
    "DEFAULT_VALUE_DISCRETIZATION",
    "PrivacyLossDistribution",
    "check_discrete_gaussian_support",
    "check_tail_mass",
    "check_value_discretization",
    "subsampled_discrete_laplace_runs",
]

FloatArray = npt.NDArray[np.float64]

#: Default grid step h of the privacy loss, in nats.
DEFAULT_VALUE_DISCRETIZATION = 1e-4
#: Default bound on the mass that truncation and wrap-around may move, per operation.
DEFAULT_TAIL_MASS = 1e-15
# Unit round-off of float64.
_U = float(np.finfo(np.float64).eps) / 2
# Relative allowance for the round-off of the final sum over the grid (CKS Lemma 9).
_REL_MARGIN = 1e-10
# Standard normal quantile used to truncate continuous output distributions:
# Φ(−10) ≈ 7.6e-24 of P's mass lies beyond, and goes to +∞ on the upper side.
_Z_TRUNC = 10.0
# Privacy losses beyond ±64 nats are not resolved on the grid: above, the upper side
# puts the mass at +∞ (it then adds its full mass to δ, which it nearly does anyway
# for any ε < 50) and the lower side at the cap; below, the upper side rounds it up to
# −64 and the lower side drops it. This bounds the grid to 128/h points.
_LOSS_CAP = 64.0
# Width at which the inversion ε(δ) stops searching (relative, absolute): the closed form
# on the discretised PLD is that accurate; the search only absorbs its rounding.
_SEARCH_REL = 1e-12
_SEARCH_ABS = 1e-15
_SEARCH_TOL = {"rel_tol": _SEARCH_REL, "abs_tol": _SEARCH_ABS}
# Largest μ = Δ/σ of a (subsampled) Gaussian PLD built on the grid: beyond it μ²
# overflows. Every loss of the Gaussian is then far past the cap (its upper PLD is all
# mass at +∞); a subsampled one's δ tends to max(q, 1 − e^ε(1 − q)), and the
# accountants answer it from RDP instead.
MAX_SUBSAMPLED_MU = 1e100
# Largest number of support points enumerated for a discrete mechanism.
_MAX_POINTS = 4_000_000
# Points per block of the construction's long double sums and of the convex hull's
# tests: their temporaries stay a few MB whatever the grid's length.
_CHUNK = 1 << 16
# Memory of building one run's PMFs, in grid points of :func:`check_grid_points` (one
# is about 8 float64) per grid point: the bins (4 arrays), both sides' outputs, the
# lower side's curve, its abscissae and hull (about 12 float64 per point in all,
# measured at the peak of _from_bins; the CDFs before it hold fewer).
_BUILD_COST = 2
# Points tested by the local passes of :func:`_lower_hull`, in units of the set's size,
# before it turns to the monotone chain or the isotonic regression (measured: a
# subsampled Gaussian's add side settles in 5–11 passes, 1–3 times its size; the
# regression costs the import of scipy.optimize, about a second and 19 MB).
_HULL_WORK = 16
# Largest grid (points) whose long double e^{−t} the lowered chords keep between their
# two passes (4 MB) rather than form twice.
_EXP_KEPT = 1 << 18
# Largest number of points left by those passes that go through the monotone chain in
# Python (about 1 µs a point) rather than the regression.
_CHAIN_POINTS = 1 << 17


# Bytes of the block that :func:`_heap_for_temporaries` allocates and frees.
_HEAP_BLOCK = 1 << 22
# Grid points up to which the add direction reuses the remove direction's CDFs.
_CDF_REUSE_MAX = 1 << 18


@functools.cache
def _heap_for_temporaries() -> None:
    """Let malloc serve the temporaries of the PLD code from its heap (once per process).

    glibc's malloc maps every block above its mmap threshold (128 KiB in a fresh
    process) on its own and unmaps it when freed, so each temporary of a 20,000-point
    grid or a 10⁵-point transform comes in fresh pages: in a fresh process the DP-SGD
    reference took about 7,000 page faults, a fifth of its CPU time (in the kernel),
    against about 2,500 on a second run in the same process. Freeing a mapped block
    raises the threshold to that block's size and the trim threshold to twice it
    (mallopt(3), "dynamic mmap threshold") — what the first large array freed in any
    process does anyway; here one 4 MiB block, never touched (so never paged in), is
    allocated and freed up front. Blocks under 4 MiB then come from the heap, which
    keeps at most 8 MiB free at its top; larger ones are mapped as before (and raise
    the threshold further, as usual). With other allocators this does nothing.
    """
    np.empty(_HEAP_BLOCK // 8)


# --------------------------------------------------------------------------------------
# One discretised loss distribution (one bound side, one neighbouring direction)
# --------------------------------------------------------------------------------------
# First number of top grid points over which ε(δ) sums (then 2, 4, ... times as many).
_TOP_FIRST = 2048
# Largest number of top grid points whose sums a PMF keeps between ε(δ) queries (three
# float64 arrays: 6 MB); beyond it the sums are formed anew by each query.
_TOP_KEPT = 1 << 18


class _TopSums:
    """The suffix sums of a PMF's top grid points that ε(δ) queries use, kept between
    queries (a PMF's masses never change once built) and shared with the copy that
    :meth:`PrivacyLossDistribution.without_allowances` makes of it.

    Over the points ``offset`` … n − 1, with z_j the losses and z_max the largest:
    ``s1[t]`` = Σ_{i ≥ offset+t} p_i, ``s2[t]`` = Σ_{i ≥ offset+t} p_i e^{z_max − z_i}, and
    ``d_at[t]`` = s1[t + 1] − e^{z_{offset+t} − z_max}·s2[t + 1] (0 at the top): δ at the
    grid point z_{offset+t} by the closed form (CKS Lemma 9 on the discrete PLD). They
    only place a candidate ε, which the query then checks against the directly summed
    δ, so their rounding never reaches an answer. They grow downwards by blocks that
    carry the sums above them, so each point's values do not depend on how far earlier
    queries grew them (equal answers whatever the order of the queries).
    """

    __slots__ = ("sums",)

    def __init__(self) -> None:
        # (offset, s1, s2, d_at), replaced as one reference (threads sharing a PMF see
        # either the old sums or the new ones); None: nothing summed yet.
        self.sums: tuple[int, FloatArray, FloatArray, FloatArray] | None = None


@dataclass(frozen=True, slots=True)
class _LossPMF:
    """Mass ``probs[j]`` at loss ``(start + j) * h``, plus ``inf_mass`` at +∞.

    ``inf_mass`` is rounded up on the upper side and down on the lower side: the lower
    side's is at most the true pair's P-mass where Q has none (every δ(ε) counts it in
    full; dropping it would leave the lower bound of an (ε, δ)-DP step near 0).
    ``slack`` is a δ allowance: added to every δ when ``upper``, subtracted otherwise.
    ``fft_l1`` bounds the ℓ1 norm of the entrywise FFT round-off
    error; ``fft_l1`` is part of the δ allowance (see :func:`_clean`).
    ``checked``: ε(δ) checks its closed-form answer against the directly summed δ (the
    certified answer); False only for the uncertified copies of
    :meth:`PrivacyLossDistribution.without_allowances`, which only choose a grid.
    ``tops``: the kept sums of ε(δ) queries (:class:`_TopSums`).
    """

    h: float
    start: int
    probs: FloatArray
    inf_mass: float
    slack: float
    upper: bool
    fft_l1: float = 0.0
    checked: bool = True
    tops: _TopSums = field(default_factory=_TopSums, compare=False, repr=False)

    @property
    def allowance(self) -> float:
        return self.slack + self.fft_l1

    @property
    def losses(self) -> FloatArray:
        return np.arange(self.start, self.start + self.probs.size, dtype=np.float64) * self.h

    @property
    def mass(self) -> float:
        return float(self.probs.sum())

    # -- queries ----------------------------------------------------------------------
    def delta(self, epsilon: float) -> float:
        # CKS Lemma 9: δ(ε) = Σ_z max(0, 1 − e^{ε − z}) p(z) + p(∞).
        value = self.delta_raw(epsilon)
        if self.upper:
            value = value * (1.0 + _REL_MARGIN) + self.inf_mass + self.allowance
            if math.isnan(value):  # never read a failed computation as δ = 0
                return 1.0
        else:
            value = value * (1.0 - _REL_MARGIN)
            if math.isnan(value):
                return 0.0
            # value − allowance + inf_mass, rounded down (a float ≤ the exact sum)
            value = -add_up(-value, self.allowance, -self.inf_mass)
        return min(1.0, max(0.0, value))

    def epsilon(self, delta: float) -> float:
        """Smallest ε ≥ 0 with delta(ε) ≤ ``delta`` (exact on the discretised PLD)."""
        if self.upper:
            target = (delta - self.allowance - self.inf_mass) / (1.0 + _REL_MARGIN)
        else:
            # δ_lower(ε) = raw(ε)(1 − margin) − allowance + inf_mass ≥ δ iff raw(ε) ≥ this
            # target (its numerator rounded up). With the mass at +∞ alone above δ + the
            # allowance, every ε has δ(ε) > δ: the lower bound is +∞ (below, target ≤ 0).
            excess = add_up(delta, self.allowance, -self.inf_mass)
            if excess >= 0.0:
                excess = max(excess, math.ulp(0.0))  # δ(ε) > δ needs raw(ε) > 0
            target = math.nextafter(excess / (1.0 - _REL_MARGIN), math.inf)
        if math.isnan(target):  # NaN masses: nothing certified (upper ∞, lower 0)
            return math.inf if self.upper else 0.0
        if target <= 0.0:
            return math.inf
        if self.probs.size == 0:
            return 0.0  # δ(ε) is the mass at +∞ and the allowance, within the target
        # For ε in [z_{j−1}, z_j) the losses above ε are z_j, z_{j+1}, ...: δ(ε) =
        # S1_j − e^{ε − zmax} S2_j with the suffix sums of _TopSums (CKS Lemma 9 on the
        # discrete PLD). They cover a growing top part of the grid until δ at its first
        # point is well above the target (or the whole grid): the answer then lies inside.
        o, s1, s2, d_at = self._top_sums(target)
        # The last grid point where δ is above the target (searched from the top, where
        # the sums are exact to a few units of the target's last place); j is the next.
        high = d_at[::-1] > target
        t = int(np.argmax(high))
        j = d_at.size - t if high[t] else 0
        z_lo = (self.start + o + j - 1) * self.h  # the grid point below (none if j + o = 0)
        if (j + o == 0 or z_lo < 0.0) and self.delta_raw(0.0) <= target:
            return 0.0
        lo = 0.0 if j + o == 0 else max(0.0, z_lo)
        z_j = (self.start + o + j) * self.h
        zmax = (self.start + self.probs.size - 1) * self.h
        a, b = float(s1[j]), float(s2[j])
        eps = zmax + math.log((a - target) / b) if a > target and b > 0.0 else lo
        eps = min(max(eps, lo), z_j)
        if not self.checked:
            return eps  # not certified: only used to choose a grid
        # The closed form is checked against the directly summed δ with the one safe-side
        # search (gaussdp._search): the answer is a point where the check was evaluated.
        # The search asks again for the ends it was given: each ε's sum is kept (the same
        # value; on the lower side two of the five sums of the DP-SGD reference).
        raw = functools.cache(self.delta_raw)
        if not self.upper:
            # Never over-report the lower bound: the largest ε at which δ(ε) ≥ target
            # (δ(0) > target was checked above).
            def still_above(e: float) -> bool:
                return raw(e) >= target

            if still_above(eps):
                return eps
            lo = max(0.0, eps - _SEARCH_REL * abs(eps) - _SEARCH_ABS)
            lo = lo if still_above(lo) else 0.0
            return largest_passing(still_above, lo, max(eps, lo), **_SEARCH_TOL)

        # Never under-report: the smallest ε at which the directly summed δ meets the target.
        def meets(e: float) -> bool:
            return raw(e) <= target

        hi = eps + _SEARCH_REL * abs(eps) + _SEARCH_ABS
        return smallest_passing(meets, eps, hi, grow=True, **_SEARCH_TOL)

    def _top_sums(self, target: float) -> tuple[int, FloatArray, FloatArray, FloatArray]:
        """(offset, s1, s2, d_at) of :class:`_TopSums` over enough top grid points for
        ``target``: until ``d_at[0] > 2·target`` or the whole grid, growing by factors
        of 2 from :data:`_TOP_FIRST` points; kept up to :data:`_TOP_KEPT` points."""
        n = self.probs.size
        kept = self.tops
        sums = kept.sums
        if sums is not None:
            o, s1, s2, d_at = sums
        else:
            o, s1, s2, d_at = n, np.zeros(1), np.zeros(1), np.zeros(0)  # the sums above n
        zmax = (self.start + n - 1) * self.h
        while o == n or (o > 0 and not d_at[0] > 2.0 * target):
            m = n - o
            lo = max(0, n - max(_TOP_FIRST, 2 * m))
            z = np.arange(self.start + lo, self.start + o, dtype=np.float64) * self.h
            p = self.probs[lo:o]
            # Suffix sums of the new block, carrying the sums above it.
            b1 = np.cumsum(p[::-1])[::-1] + s1[0]
            b2 = np.cumsum((p * np.exp(np.minimum(zmax - z, 700.0)))[::-1])[::-1] + s2[0]
            d_new = np.empty(o - lo)
            d_new[:-1] = b1[1:] - np.exp(z[:-1] - zmax) * b2[1:]
            if o == n:
                d_new[-1] = 0.0  # no finite loss above the top point
                s1, s2 = b1, b2
            else:
                d_new[-1] = s1[0] - math.exp(float(z[-1]) - zmax) * s2[0]
                s1, s2 = np.concatenate((b1, s1)), np.concatenate((b2, s2))
            d_at = np.concatenate((d_new, d_at))
            o = lo
        if n - o <= _TOP_KEPT and (sums is None or o < sums[0]):
            kept.sums = (o, s1, s2, d_at)
        return o, s1, s2, d_at

    def delta_raw(self, epsilon: float) -> float:
        """Σ_{z > ε} p(z)(1 − e^{ε − z}) over the finite losses (no mass at +∞, no margin)."""
        n = self.probs.size
        if n == 0 or epsilon >= (self.start + n - 1) * self.h:
            return 0.0  # no finite loss above ε (also keeps a huge ε/h out of floor())
        # First index i with loss (start + i)·h > ε (the same products as ``losses``).
        i = min(max(math.floor(epsilon / self.h) - self.start, 0), n)
        while i > 0 and (self.start + i - 1) * self.h > epsilon:
            i -= 1
        while i < n and (self.start + i) * self.h <= epsilon:
            i += 1
        # By blocks of _CHUNK points (a few MB of temporaries whatever the grid's length;
        # the whole tail at once took three arrays of its length at the query's peak),
        # the block sums added exactly and rounded once (math.fsum).
        parts = []
        for lo in range(i, n, _CHUNK):
            hi = min(lo + _CHUNK, n)
            z = np.arange(self.start + lo, self.start + hi, dtype=np.float64) * self.h
            parts.append(float(np.sum(self.probs[lo:hi] * -np.expm1(epsilon - z))))
        return math.fsum(parts)

    # -- composition ------------------------------------------------------------------
    def compose(self, other: _LossPMF, tail_mass: float, extended: bool = False) -> _LossPMF:
        if self.h != other.h or self.upper != other.upper:
            raise ValueError("cannot compose PLDs on different grids or bound sides")
        _heap_for_temporaries()
        n = self.probs.size + other.probs.size - 1
        size = sp_fft.next_fast_len(n, real=True)
        check_grid_points(points_of_values(COMPOSE_ARRAYS * size), extended)
        dtype, unit = _precision(extended)
        fa = sp_fft.rfft(self.probs.astype(dtype, copy=False), size)
        fb = sp_fft.rfft(other.probs.astype(dtype, copy=False), size)
        m1, m2 = self.mass, other.mass
        # Lemma 1: |φ̃ − φ| ≤ γ(N)‖p‖₁; a product errs by ≤ e_a|φ_b| + e_b|φ_a| + e_a e_b
        # plus its own rounding (< 3u|φ̃_aφ̃_b|); Lemma 4 turns that into an ℓ1 bound.
        gamma = fft_gamma(size, unit)
        ea, eb = gamma * m1, gamma * m2
        mod_a = _modulus_up(fa, unit)
        mod_b = _modulus_up(fb, unit)
        err = ea * mod_b + eb * mod_a + ea * eb + 3.0 * unit * mod_a * mod_b
        prod = fa * fb
        weights = full_weights(size, prod.size)
        new_l1 = coefficient_error_l1(err, weights) + _inverse_own_l1(prod, weights, size, unit)
        del fa, fb, mod_a, mod_b, err, weights  # peak memory: only the product is needed now
        conv, rounding = _to_double(sp_fft.irfft(prod, size)[:n])
        del prod
        _evict_plans(size, extended)
        new_l1 += rounding
        conv = _clean(conv, self.upper)
        if self.upper:
            inf_mass = self.inf_mass * (m2 + other.inf_mass) + other.inf_mass * m1
        else:
            inf_mass = _either_down(self.inf_mass, other.inf_mass)
        slack = add_up(self.slack, other.slack)
        # Lemma 5 (Young): earlier errors E_a, E_b carry over as E_a‖b‖₁ + E_b‖a‖₁ + E_aE_b.
        fft_l1 = (self.fft_l1 * m2 + other.fft_l1 * m1 + self.fft_l1 * other.fft_l1) * (
            1.0 + 1e-13
        ) + new_l1
        out = _LossPMF(self.h, self.start + other.start, conv, inf_mass, slack, self.upper, fft_l1)
        return out._truncated(tail_mass, owned=True)

    def _truncated(self, tail_mass: float, owned: bool = False) -> _LossPMF:
        """Drop negligible tails: up to ``tail_mass`` below and above.

        ``owned``: ``probs`` is a fresh array that nothing else refers to (a transform's
        output), so the kept part may be a view of it rather than a copy where it is at
        least half of it (no new pages for the largest array of a power).
        """
        p = self.probs
        big = p > tail_mass
        if big.any():
            # The cut points lie outside the first and last entries above ``tail_mass``:
            # only the tails are summed (the same sums as over the whole array, and
            # cumulative sums of non-negative numbers never decrease).
            first = int(np.argmax(big))
            last = p.size - 1 - int(np.argmax(big[::-1]))
        else:
            first, last = p.size - 1, 0
        c_low = np.cumsum(p[: first + 1])
        c_high = np.cumsum(p[last:][::-1])[::-1]
        lo = int(np.searchsorted(c_low, tail_mass, side="right"))  # p[:lo] sums ≤ tail
        hi_candidates = np.nonzero(c_high > tail_mass)[0]
        hi = last + int(hi_candidates[-1]) + 1 if hi_candidates.size else p.size
        lo = min(lo, max(hi - 1, 0))
        if lo == 0 and hi == p.size:
            return self
        below = float(p[:lo].sum())
        above = float(p[hi:].sum())
        kept = p[lo:hi] if owned and 2 * (hi - lo) >= p.size else p[lo:hi].copy()
        inf_mass = self.inf_mass
        if self.upper:
            kept[0] += below  # rounding up is pessimistic
            inf_mass += above  # +∞ is pessimistic
        else:
            kept[-1] += above  # rounding down is optimistic; mass below is dropped
        return _LossPMF(
            self.h,
            self.start + lo,
            kept,
            inf_mass,
            self.slack,
            self.upper,
            self.fft_l1,
        )

    def self_compose(
        self, count: int, tail_mass: float, extended: bool = False, held: int = 0
    ) -> _LossPMF:
        """The ``count``-fold power; ``held``: the float64 values of the other arrays the
        caller holds meanwhile (counted in the memory check)."""
        if count == 1:
            return self
        # One Fourier stage whatever k: the round-off of φ^k grows like k·u (Lemmas 2, 3),
        # but so does that of staged powers (Lemma 5 multiplies the first stage's error by
        # the number of stages, and more coefficients survive a smaller power), and one
        # stage is cheaper (measured: 39,063 runs, 1.41e-9 against 1.81e-9 in two stages).
        return _power(self, count, tail_mass, extended, held)


def _power(
    base: _LossPMF, count: int, tail_mass: float, extended: bool = False, held: int = 0
) -> _LossPMF:
    """``count``-fold self-convolution of ``base``.

    Computed on a circular window of length N by raising the DFT to the power
    ``count``; the window is placed by Chernoff bounds on both tails of the sum
    S of ``count`` copies of base (a measure of mass m^count):

        μ(S ≥ a) ≤ e^{−λa} M(λ)^count,  μ(S ≤ a) ≤ e^{λa} M(−λ)^count,

    with M(λ) = Σ p_z e^{λz} computed exactly on the PMFs. Mass above the window wraps
    to lower losses: its bound is added to δ on the upper side. Mass below wraps to
    higher losses (pessimistic): its bound is subtracted from δ on the lower side.

    Memory: :data:`~gaussdp.accounting._adaptive.POWER_ARRAYS` arrays of the window's
    length at the peak, plus the ``held`` float64 values of the caller (checked before
    allocating).
    """
    _heap_for_temporaries()
    h = base.h
    p = base.probs
    m = base.mass
    if m == 0.0:
        # No finite loss (e.g. every loss beyond the cap went to +∞): the k-fold measure
        # is (p∞)^k at +∞ (and the allowances of the k runs).
        if base.upper:
            inf_mass = _power_up(base.inf_mass, count)
        else:
            inf_mass = _power_down(base.inf_mass, count)
        slack = count * base.slack * _power_up(max(1.0, base.inf_mass), count) * (1 + 1e-13)
        fft_l1 = propagated_power_error(0.0, base.fft_l1, count)
        return _LossPMF(h, count * base.start, np.zeros(1), inf_mass, slack, base.upper, fft_l1)
    if _power_up(m + base.inf_mass, count) == math.inf:
        # A super-probability measure (an envelope, round-off) whose k-th power overflows:
        # nothing can be certified (upper: all mass at +∞; lower: no mass).
        return _LossPMF(
            h, count * base.start, np.zeros(1), math.inf if base.upper else 0.0, 0.0, base.upper
        )
    log_eta = math.log(tail_mass)
    z = base.losses
    mean = float(np.sum(p * z)) / m
    var = max(float(np.sum(p * (z - mean) ** 2)) / m, (h / 2) ** 2)
    # λ near the normal-approximation optimum √(2 ln(1/η) / (k·var)).
    lam0 = math.sqrt(-2.0 * log_eta / (count * var))
    # Heavy right tails (subsampling) put the optimum far below λ0 (at a few units when
    # rare large losses dominate): search from 10⁻² up to 4λ0.
    # The window is placed with the MGF of a coarsened copy (cheap); the wrapped mass is
    # then bounded with the exact MGF at the best λ of each side (any λ gives a bound).
    lams = np.geomspace(min(1e-2, lam0 / 64), 4 * lam0, 32)
    pc, zc_hi, zc_lo = _coarsened(p, z)
    log_m_pos = count * _log_mgf(pc, zc_hi, lams)
    log_m_neg = count * _log_mgf(pc, -zc_lo, lams)
    z_min = count * float(z[0])
    z_max = count * float(z[-1])
    start = count * base.start
    a_hi = min(float(np.min((log_m_pos - log_eta) / lams)), z_max)
    a_lo = max(float(np.max(-(log_m_neg - log_eta) / lams)), z_min)
    # The block bounds widen the window by up to count·(block width): tighten both edges
    # with the exact MGF near the best λ of each side (any λ gives a valid bound). The
    # same λ then bound the wrapped mass: the window's edges lie beyond these edges.
    exact: dict[float, tuple[FloatArray, FloatArray]] = {}
    for sign, log_m in ((1.0, log_m_pos), (-1.0, log_m_neg)):
        lam = lams[int(np.argmin((log_m - log_eta) / lams))] * np.array([0.7, 1.0, 1.4])
        value = count * _log_mgf_grid(p, sign * z, lam, sign * h)
        exact[sign] = (lam, value)
        edge = float(np.min((value - log_eta) / lam))
        if sign > 0:
            a_hi = min(a_hi, edge)
        else:
            a_lo = max(a_lo, -edge)
    i_lo = math.floor(a_lo / h) - 1
    i_hi = math.ceil(a_hi / h) + 1
    size = _low_roundoff_len(max(i_hi - i_lo + 1, p.size))
    check_grid_points(points_of_values(POWER_ARRAYS * size + held), extended)
    i_hi = i_lo + size - 1
    # The wrapped mass: what lies above i_hi and below i_lo (Chernoff, exact MGF).
    a_top = (i_hi + 1) * h
    a_bot = (i_lo - 1) * h
    eta_hi = eta_lo = 0.0
    z_abs = float(np.max(np.abs(z)))
    if a_top <= z_max:
        lam, value = exact[1.0]
        exponent = value - lam * a_top + _mgf_error(value, lam, a_top, count, p.size, z_abs)
        eta_hi = math.exp(min(0.0, float(np.min(exponent)))) * (1 + 1e-13)
    if a_bot >= z_min:
        lam, value = exact[-1.0]
        exponent = value + lam * a_bot + _mgf_error(value, lam, a_bot, count, p.size, z_abs)
        eta_lo = math.exp(min(0.0, float(np.min(exponent)))) * (1 + 1e-13)
    # φ^k through its modulus and argument, with the proven bounds of _roundoff:
    # Lemma 1 (the DFT), Lemmas 2–3 (the power and its input's error), Lemma 4 (back to
    # the N outputs, in ℓ1).
    # In extended precision (long double, ``unit`` = 2⁻⁶⁴ on x86) the same lemmas hold
    # with that unit; the outputs' rounding to float64 adds u·Σ|out| (Lemma 6).
    dtype, unit = _precision(extended)
    gamma = fft_gamma(size, unit)
    # Memory: the transform is raised in place and only its surviving coefficients
    # (tens to thousands of the N/2) carry bounds; the spectrum is dropped once the
    # inverse transform has read it, and the window is rotated in place, so that at
    # most one N-point array besides the transforms' own buffers is alive
    # (:data:`~gaussdp.accounting._adaptive.POWER_ARRAYS`).
    spectrum = sp_fft.rfft(p.astype(dtype, copy=False), size)
    live, modulus, err = _powered(spectrum, count, gamma * m, extended)
    # The centred sums (float64, Lemmas 8–9) recompute the largest survivors from p
    # itself; each coefficient keeps the smaller of the two proven bounds, also after a
    # long double transform (whose Lemma 3 bound, k·γ′(N)·‖p‖₁, is larger than the
    # centred one at the few lowest j: DP-SGD reference, 1.83e-13 → 1.39e-13).
    _centre_survivors(p, size, count, live, modulus, spectrum, err, gamma)
    weights = _live_weights(size, spectrum.size, live)
    coeff_l1 = _coefficients_l1(err, weights, size)
    kept = spectrum[live]
    # Extended: the long double inverse transform is about as slow as the forward one,
    # and after a large power only a few coefficients are not negligible. So the powers
    # are rounded to complex128 (each part to u relative: a coefficient moves by at most
    # u|ψ̃_j| ≤ 1.01u|fl(ψ̃_j)|, Lemma 6) and transformed back in float64, whose own error
    # γ(N)·Σ|ψ̃_j| (Lemma 4) is then used if it is at most a tenth of the coefficients'.
    # (The coefficients set to 0 are exact zeros in both precisions.)
    rounded = kept.astype(np.complex128, copy=False)
    own_double = _inverse_own_l1(rounded, weights, size) if extended else math.inf
    if own_double <= 0.1 * coeff_l1:
        err = err + 1.01 * _U * _modulus_up(rounded, _U)
        new_l1 = add_up(_coefficients_l1(err, weights, size), own_double)
        del spectrum  # the long double spectrum: 2 N-point float64 arrays
        double = np.zeros(size // 2 + 1, dtype=np.complex128)
        double[live] = rounded
        circ = sp_fft.irfft(double, size)
        del double
    else:
        new_l1 = add_up(coeff_l1, _inverse_own_l1(kept, weights, size, unit))
        inverse = sp_fft.irfft(spectrum, size)
        del spectrum
        circ, rounding = _to_double(inverse)
        del inverse
        new_l1 = add_up(new_l1, rounding)
    del kept, rounded, err, weights
    _evict_plans(size, extended)
    shift = i_lo - start  # relative index of the window's first point
    out = _clean(_rotate_left(circ, shift % size), base.upper)
    del circ
    # Mass at +∞ and allowances, for (sub/super-)probability measures.
    total = m + base.inf_mass
    m_k = _power_up(m, count)
    inf_mass = 0.0
    if not base.upper:
        inf_mass = _power_down(base.inf_mass, count)
    elif base.inf_mass > 0:
        # (m + p∞)^k − m^k = m^k (e^{k ln(1 + p∞/m)} − 1), without cancellation; where
        # that is not finite (under/overflow), the bound (m + p∞)^k.
        t = count * math.log1p(base.inf_mass / m) if m > 0 else math.inf
        if t <= 709.0 and 0.0 < m_k < math.inf:
            inf_mass = m_k * math.expm1(t) * (1.0 + 4.04 * _U * (t + 1.0)) * (1.0 + 1e-13)
        else:
            inf_mass = _power_up(total, count)
    grow = _power_up(max(1.0, total), count)
    slack = count * base.slack * grow
    # Round-off already in ``base``: Lemma 5 (Young), k(‖p‖₁ + E)^{k−1}E.
    fft_l1 = propagated_power_error(m, base.fft_l1, count) + new_l1
    slack += eta_hi if base.upper else eta_lo
    pmf = _LossPMF(h, i_lo, out, inf_mass, slack, base.upper, fft_l1)
    return pmf._truncated(tail_mass, owned=True)


def _low_roundoff_len(n: int) -> int:
    """A transform length ≥ n, at most 10 % longer, whose γ(N) (Lemma 1) is smallest.

    γ(N) adds r + 6 per prime factor r: 8 per factor 2, 9 per 3, 11 per 5, i.e. 8, 5.7
    and 4.7 per bit of length. Lengths rich in 5s carry less round-off (e.g. 125,000:
    91u against 113u for 115,200), and the allowance of a k-fold power is proportional
    to γ(N). Only 5-smooth lengths are considered (pocketfft's fast ones).
    """
    top = max(n, int(n * 1.1))
    candidates = []
    p5 = 1
    while p5 <= top:
        p3 = p5
        while p3 <= top:
            m = p3
            while m < n:
                m *= 2
            if m <= top:
                candidates.append(m)
            p3 *= 3
        p5 *= 5
    if not candidates:  # small n: no 5-smooth length within 10 %
        return int(sp_fft.next_fast_len(n, real=True))
    return min(candidates, key=lambda m: (fft_gamma(m), m))


# Transform lengths from which the plans are evicted after use: a plan holds 8 to 16
# bytes a point, so pocketfft's 16 cached plans per precision of shorter lengths hold at
# most 16 × 2 MB.
_EVICT_POINTS = 1 << 17


def _evict_plans(size: int, extended: bool) -> None:
    """Evict the FFT plans cached by a transform of length ``size``, if it is long.

    scipy.fft (pocketfft) keeps the plans (twiddle factors, 8 to 16 bytes a point) of
    the lengths it last transformed, per precision; after the powers of one DP-SGD
    certification (N = 10⁶, batch 256, 10 epochs) they held 97 MB (measured), more than
    the PMFs themselves. Transforms of short lengths push them out (the eviction
    pocketfft's author suggests, scipy/scipy#5986); planning a long transform again
    costs far less than the transform. pocketfft's cache is a least-recently-used list
    of 16 plans per precision, shared by the forward and inverse real transforms
    (measured with scipy 1.17: 16 new lengths evict a long plan, 15 do not), so forward
    transforms of 20 distinct short lengths evict it, in the precisions the transforms
    used (float64, and long double if ``extended``). (Inverse transforms too, 32
    lengths, both precisions: 4 % of a DP-SGD certification.) Lengths below
    ``_EVICT_POINTS`` keep their plans (the 80 short transforms cost about 5 % of the
    DP-SGD reference, whose N = 125,000 plan holds 2 MB).
    """
    if size < _EVICT_POINTS:
        return
    for dtype in (np.float64, np.longdouble) if extended else (np.float64,):
        for n in range(1, 21):
            sp_fft.rfft(np.ones(n, dtype=dtype))


def _power_up(base: float, count: int) -> float:
    """A float ≥ base**count for base ≥ 0 (``inf`` where it overflows; never raises)."""
    if base == 0.0:
        return 0.0
    log = count * math.log(base)
    if log > 709.0:
        return math.inf
    # ln and exp are correct to 2u relative; the product k·ln(b) to u: the exponent errs
    # by at most 4u·|k ln b|, and e^t − 1 ≤ 1.01t.
    return math.exp(log) * (1.0 + 4.04 * _U * (abs(log) + 1.0))


def _either_down(a: float, b: float) -> float:
    """A float ≤ 1 − (1 − a)(1 − b), for a, b in [0, 1] (exact rational arithmetic,
    rounded down).

    The lower side's mass at +∞ of a composition: its loss is +∞ iff one run's is, so
    two independent runs whose masses at +∞ are at least a and b have at least this
    much (the expression grows with a and with b). The finite parts compose apart.
    """
    if a == 0.0 or b == 0.0:
        return min(max(a, b), 1.0)
    fa, fb = Fraction(min(a, 1.0)), Fraction(min(b, 1.0))
    return fraction_down(1 - (1 - fa) * (1 - fb))


def _power_down(a: float, count: int) -> float:
    """A float ≤ 1 − (1 − a)^count for a in [0, 1]: the lower side's mass at +∞ of
    ``count`` independent runs (:func:`_either_down`; KOV 2015 Thm 3.3's 1 − (1 − δ)^k).

    t = k·log1p(−a) errs by at most 3.01u|t| (log1p within 2u relative, the stated
    accuracy of the libm functions used in :func:`_power_up`; the product u; k is exact
    below 2⁵³); the slope of 1 − e^t is e^t, so 1 − e^t moves by at most
    3.01u|t|e^{−|t|(1 − 3.01u)} ≤ 3.02u(1 − e^t) (|t|/(e^{|t|} − 1) ≤ 1; where e^t
    underflows the value is within u of 1 anyway); expm1 adds 2u. So the computed value
    is within 5.02u relative of the truth, and ×(1 − 8u), itself rounded, goes below it.
    """
    if a <= 0.0 or count == 0:
        return 0.0
    if a >= 1.0:
        return 1.0
    value = -math.expm1(count * math.log1p(-a))
    return max(0.0, value * (1.0 - 8.0 * _U))


def _inverse_own_l1(
    coeffs: npt.NDArray[np.complexfloating], weights: FloatArray, n: int, unit: float = _U
) -> float:
    """Lemma 4, second part: the inverse transform's own ℓ1 error, γ(N)·Σ_full|ψ̃_j|."""
    total = float(np.sum(weights * _modulus_up(coeffs, unit))) * (1.0 + 1e-13)
    return fft_gamma(n, unit) * total * (1.0 + 1e-13)


def _powered(
    phi: npt.NDArray[np.complexfloating], count: int, e: float, extended: bool
) -> tuple[npt.NDArray[np.intp], FloatArray, FloatArray]:
    """Raise φ̃ to the power k in place, with the bounds on |ψ̃_j − φ_j^k| (Lemmas 2, 3)
    given |φ̃_j − φ_j| ≤ e. Returns the raised coefficients' indices (ascending), their
    moduli |φ̃_j| before raising, and their bounds; every other coefficient is set to 0.

    Only the coefficients whose power can exceed e^{−680} are raised: for the others
    |φ̃_j|(1 + 4u) + e ≤ c = fl(e^{−680/k})·(1 − 10⁻¹²) (|φ̃_j| computed to 2u, and to u
    more when rounded from long double; exp to 2u, so c ≤ e^{−680/k}), hence
    |φ_j^k| ≤ (|φ̃_j| + e)^k ≤ e^{−680} < 10⁻²⁹⁰ and ψ̃_j = 0 errs by less than
    :data:`_DEAD_ERR` = 10⁻²⁹⁰ (:func:`_coefficients_l1` counts it). (After k ≳ 10³ runs
    only tens to hundreds of the N/2 coefficients survive: their bounds are kept, not
    an N/2-point array.)

    Extended: ``phi`` is long double; the coefficients whose power survives
    (k·ln|φ̃| > −150) are raised in long double, the others in float64 from φ̃ rounded
    to float64 (which adds 1.01u|φ̃| to their input error e; their powers are below
    e^{−150}, so the coarser bound costs nothing).
    """
    modulus = np.abs(phi).astype(np.float64, copy=False)
    alive = modulus * (1.0 + 4.0 * _U) + e > math.exp(-680.0 / count) * (1.0 - 1e-12)
    live = np.flatnonzero(alive)
    mod_live = modulus[live]
    del modulus, alive
    values = phi[live]
    err = np.empty(live.size)
    if not extended:
        if live.size:
            values, mod_k, rho_k = power(values, count)
            err = power_error(mod_k, rho_k, e, count)
    else:
        with np.errstate(divide="ignore"):
            survives = count * np.log(mod_live) > -150.0
        low = np.flatnonzero(~survives)
        if low.size:
            kept_d, mod_d, rho_d = power(values[low].astype(np.complex128), count)
            values[low] = kept_d
            err[low] = power_error(mod_d, rho_d, e + 1.01 * _U * mod_d * (1.0 + 2.01 * _U), count)
        keep = np.flatnonzero(survives)
        if keep.size:
            kept, mod_k, rho_k = power(values[keep], count, U_EXTENDED)
            values[keep] = kept
            err[keep] = power_error(mod_k, rho_k, e, count, U_EXTENDED)
    phi.fill(0)
    phi[live] = values
    return live, mod_live, err


# Bound on the error of each coefficient that :func:`_powered` sets to 0.
_DEAD_ERR = 1e-290


def _live_weights(n: int, half: int, live: npt.NDArray[np.intp]) -> FloatArray:
    """The multiplicities (:func:`~gaussdp.accounting._roundoff.full_weights`) of the
    raised coefficients ``live`` of a length-``n`` real transform (``half`` = n//2 + 1)."""
    weights = np.full(live.size, 2.0)
    weights[live == 0] = 1.0
    if n % 2 == 0:
        weights[live == half - 1] = 1.0
    return weights


def _coefficients_l1(err: FloatArray, weights: FloatArray, n: int) -> float:
    """Lemma 4, first part, over the whole spectrum of a length-``n`` power: the raised
    coefficients' bounds ``err`` (multiplicities ``weights``) and the others, each
    within :data:`_DEAD_ERR`, whose multiplicities sum to at most n + 2.
    √(a + b) ≤ √a + √b: the zeros add at most 10⁻²⁹⁰·√(n + 2) (rounded up)."""
    return add_up(coefficient_error_l1(err, weights), _DEAD_ERR * math.sqrt(n + 2.0) * 1.01)


def _rotate_left(values: FloatArray, shift: int) -> FloatArray:
    """``np.roll(values, -shift)``, in place (0 ≤ shift < n), with a temporary of at
    most n/2 points: numpy copies overlapping one-dimensional slices of the same
    direction without a temporary (memmove)."""
    n = values.size
    if shift == 0:
        return values
    if 2 * shift <= n:
        head = values[:shift].copy()
        values[: n - shift] = values[shift:]
        values[n - shift :] = head
    else:
        tail = values[shift:].copy()
        values[n - shift :] = values[:shift]
        values[: n - shift] = tail
    return values


# The most array elements (about (core width + n/16) × coefficients) that the centred
# sums of Lemma 8 may use per power: about 80 MB at the peak.
_CENTRED_WORK = 1_000_000


def _centre_survivors(
    p: FloatArray,
    size: int,
    count: int,
    live: npt.NDArray[np.intp],
    modulus: FloatArray,
    powered: npt.NDArray[np.complexfloating],
    err: FloatArray,
    gamma: float,
) -> None:
    """Recompute the largest surviving coefficients' powers with centred sums, in place.

    Lemma 3 charges every surviving coefficient k·γ(N)·‖p‖₁: the FFT's error is relative
    to the whole mass. Around an integer centre c (the index nearest the mean), φ_j =
    e^{−2πi·cj/N}(1 − w_j) with w_j = (1 − m_c) + D_j − e^{2πi·cj/N}T_j: 1 − m_c the mass
    outside the core window, correctly rounded (``math.fsum``), D_j the core's centred
    deviation (Lemma 8(a), error u-relative to Re D_j and to the first moment's part of
    Im D_j, plus O(u) times the cubic rest), T_j the tail's DFT by blocked direct
    sums (Lemma 8(b), error about 128u·‖tail‖₁, the window chosen so that this is below
    ½u·π·sd/N). Then φ_j^k =
    e^{−2πi·ckj/N}(1 − w_j)^k is evaluated by Lemma 9 and bounded by Lemma 3 with e_j the
    bound on |w̃_j − w_j| (Lemma 8(b)). A coefficient takes the new value where its bound
    is smaller than the one it had.
    """
    n = p.size
    m = float(np.sum(p))
    e = gamma * m
    if n == 0 or m <= 0.0:
        return
    # Candidates: the raised coefficients (``live``, from :func:`_powered`, with their
    # moduli |φ̃_j| before raising and their bounds ``err``) whose Lemma 3 bound, about
    # k·e·(|φ̃| + e)^k, is not already below 10⁻³u. ``pos``: their places in ``live``.
    with np.errstate(divide="ignore"):
        key = count * np.log(modulus + e)
    keep_key = key > math.log(1e-3 * _U / (count * e))
    pos, key = np.flatnonzero(keep_key), key[keep_key]
    if pos.size == 0:
        return
    # Centre c: the index nearest the mean, so that the core's first moment about c, the
    # part of Im D_j that Lemma 8(a) sums to u of itself, is small (a skewed PLD's median
    # lies tens of points from its mean; any integer c is valid). Spread sd from the
    # quartiles (a normal's IQR/1.349).
    cs = np.concatenate(([0.0], np.cumsum(p)))
    q1, q3 = (int(i) for i in np.searchsorted(cs, m * np.array([0.25, 0.75])))
    mean = float(np.sum(p * np.arange(n, dtype=np.float64))) / m
    c = min(max(round(mean), 0), n - 1) if math.isfinite(mean) else n // 2
    sd = max((q3 - q1) / 1.349, 1.0)
    # The core window [lo, hi): widened until the tail's error (about 128u·‖tail‖₁,
    # tail_dft) is below ½u·π·sd/N or it holds all of p.
    target = math.pi * sd / (128.0 * size)
    half = max(8, int(8 * sd))
    while True:
        lo, hi = max(0, c - half), min(n, c + half + 1)
        if (lo == 0 and hi == n) or cs[-1] - (cs[hi] - cs[lo]) <= 0.5 * target:
            break
        half *= 2
    core = p[lo:hi]
    # Each coefficient costs about (core width) + n/16 array elements (the paired core
    # sums, the tail's block twiddles and products): bounded memory and time.
    keep = max(1, _CENTRED_WORK // (max(c - lo, hi - 1 - c) + 1 + n // 16))
    if pos.size > keep:
        pos = np.sort(pos[np.argsort(key)[::-1][:keep]])
    cand = live[pos]
    js = cand.tolist()
    tail = p.copy()
    tail[lo:hi] = 0.0
    # ‖tail‖₁ in float64 (any summation order: ≤ (n + 2)u relative), raised.
    tail_l1 = float(np.sum(tail)) * (1.0 + 1.01 * (n + 2) * _U)
    if tail_l1 > 0.0:
        tail_coeffs, tail_factor = tail_dft(tail, js, size)
    else:
        tail_coeffs, tail_factor = np.zeros(cand.size, dtype=np.complex128), 0.0
    del tail
    # The core as masses at c + t and c − t, t = 0 … T (zero outside [lo, hi)).
    width = max(c - lo, hi - 1 - c) + 1
    plus = np.zeros(width)
    minus = np.zeros(width)
    plus[: hi - c] = p[c:hi]
    minus[1 : c - lo + 1] = p[lo:c][::-1]
    dev, dev_err = centred_deviations(plus, minus, js, size)
    outside = math.fsum([1.0, *(-core).tolist()])  # 1 − m_c, correctly rounded
    turn_step = 2.0 * math.pi / size
    # Per coefficient (as arrays; the same operations as on scalars, and the complex
    # product r̃·t̃ written out as (ac − bd) + i(ad + bc)):
    r = (c * cand.astype(np.int64)) % size
    r[r > size // 2] -= size
    beta = turn_step * r  # 3.01u relative, |β| ≤ π
    # e^{iβ} within 3.01πu + 2√2u < 12.3u (Python's math functions: libm's 1 ulp).
    cos_b = np.array([math.cos(b) for b in beta.tolist()])
    sin_b = np.array([math.sin(b) for b in beta.tolist()])
    t_re, t_im = tail_coeffs.real, tail_coeffs.imag
    # √5u more: |r̃t − e^{iβ}T| ≤ 14.7u|t̃| + f‖tail‖₁(1 + 12.3u)
    rt_re = cos_b * t_re - sin_b * t_im
    rt_im = cos_b * t_im + sin_b * t_re
    w = np.empty(cand.size, dtype=np.complex128)
    w.real = (outside + dev.real) - rt_re
    w.imag = dev.imag - rt_im
    abs_rt = np.hypot(rt_re, rt_im)
    e_w = 1.01 * (
        _U * abs(outside)
        + dev_err
        + tail_factor * tail_l1 * (1.0 + 13.0 * _U)
        + 14.7 * _U * np.hypot(t_re, t_im)
        + 3.0 * _U * (abs(outside) + np.abs(dev.real) + np.abs(dev.imag) + 1.5 * abs_rt)
    )
    turns = [c * count * j for j in js]
    z, mod_up, rho = power_near_one(w, count, turns, size)
    ok = np.isfinite(rho)
    if not np.any(ok):
        return
    new_err = np.full(cand.size, np.inf)
    new_err[ok] = power_error(mod_up[ok], rho[ok], e_w[ok], count)
    better = new_err < err[pos]
    powered[cand[better]] = z[better]
    err[pos[better]] = new_err[better]


def _precision(extended: bool) -> tuple[type[np.floating], float]:
    """The dtype and unit round-off of the FFTs: float64, or long double (extended)."""
    return (np.longdouble, U_EXTENDED) if extended else (np.float64, _U)


def _modulus_up(z: npt.NDArray[np.complexfloating], unit: float) -> FloatArray:
    """float64 bounds ≥ |z_j|: hypot is correct to 2u; a long double z is first rounded
    to complex128 (each part to u relative, so the modulus to 1.01u)."""
    scale = 1.0 + (2.01 if z.dtype == np.complex128 else 3.05) * _U
    modulus = np.abs(z.astype(np.complex128, copy=False))
    modulus *= scale
    return np.asarray(modulus, dtype=np.float64)


def _to_double(values: npt.NDArray[np.floating]) -> tuple[FloatArray, float]:
    """``values`` as float64, and a bound on the ℓ1 error of that rounding (Lemma 6:
    each value moves by at most u·|value|; 0 when they already are float64)."""
    out = np.asarray(values, dtype=np.float64)
    if values.dtype == np.float64:
        return out, 0.0
    # numpy's pairwise sum errs by far less than 1e-9 relative for ≤ 3e6 terms.
    return out, _U * float(np.sum(np.abs(out))) * (1.0 + 1e-9)


def _clean(values: FloatArray, upper: bool) -> FloatArray:
    """Remove FFT round-off noise (the callers bound the error in ℓ1, see _roundoff).

    Negative entries are set to 0, which moves each towards the exact (non-negative)
    value, so the ℓ1 bound still holds. On the lower side the noise amplitude (the most
    negative entry) is also subtracted twice from every entry, which only lowers it.
    In place (the callers pass a fresh transform's output: a new array of a million
    points can cost more in page faults than the pass itself).
    """
    if not upper:
        amp = max(0.0, -float(values.min()))
        if amp > 0.0:
            values -= 2.0 * amp
    return np.maximum(values, 0.0, out=values)


def _coarsened(p: FloatArray, z: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """At most 1024 blocks: (block masses, largest loss, smallest loss of each block).

    Σ_b m_b e^{λ max_b} ≥ M(λ) ≥ Σ_b m_b e^{λ min_b} for λ ≥ 0, so the coarse MGFs are
    upper bounds of the exact ones on both tails and the windows they place hold at
    least the mass the exact Chernoff bound promises (they are at most k·block wider).
    """
    n = p.size
    block = max(1, math.ceil(n / 1024))
    if block == 1:
        return p, z, z
    nb = math.ceil(n / block)
    pad = nb * block - n
    mass = np.concatenate((p, np.zeros(pad))).reshape(nb, block).sum(axis=1)
    starts = z[::block]
    ends = np.concatenate((z[block - 1 :: block], [z[-1]]))[:nb]
    return mass, ends, starts


def _log_mgf(p: FloatArray, z: FloatArray, lams: FloatArray) -> FloatArray:
    """ln Σ_i p_i e^{λ z_i} for each λ in ``lams`` (λ > 0), without overflow."""
    keep = p > 0
    if not np.any(keep):
        return np.full(lams.shape, -np.inf)
    z, p = z[keep], p[keep]
    top = float(z.max())
    with np.errstate(divide="ignore"):
        sums = np.sum(np.exp(np.outer(lams, z - top)) * p, axis=1)
        return np.asarray(lams * top + np.log(sums), dtype=np.float64)


def _mgf_error(
    value: FloatArray, lams: FloatArray, edge: float, count: int, n: int, z_abs: float
) -> FloatArray:
    """A bound on the float error of ``value ∓ λ·edge``, ``value`` = count·ln M(λ) from
    :func:`_log_mgf_grid` (or :func:`_log_mgf`) over ``n`` points with |z| ≤ ``z_abs``.

    The sum Σ p_i e^{λ(z_i − top)} has n nonnegative terms, each from at most two
    exponentials (≤ 4u each, numpy's libm) and three products: relative error at most
    (n + 16)u with summation's (n − 1)u. Its logarithm then errs by that plus
    u·|ln sum|; λ·top by u·λ·z_abs; the multiplication by ``count`` and the final
    subtraction add u·(|value| + λ·|edge|) each. Everything is doubled for the
    first-order terms dropped (u = 2⁻⁵³).
    """
    u = 2.0**-53
    per_run = (n + 16) * u + u * (np.abs(value) / count + 2 * lams * z_abs)
    return np.asarray(2 * (count * per_run + u * (np.abs(value) + lams * abs(edge))))


# Block length of :func:`_log_mgf_grid`, and the largest λ·(block width) it takes.
_MGF_BLOCK = 256
_MGF_SPAN = 50.0


def _log_mgf_grid(p: FloatArray, z: FloatArray, lams: FloatArray, step: float) -> FloatArray:
    """:func:`_log_mgf` for losses on a uniform grid, z_i = z_0 + i·``step`` (offsets are
    taken as multiples of ``step``, not as differences of the rounded z_i), with one
    exponential per block and per point of a block instead of one per point:
    e^{λ(z_i − top)} = e^{λ(z_e − top)}·e^{λ(z_i − z_e)}, z_e the end of i's block of
    :data:`_MGF_BLOCK` points nearer the top, so both factors are at most
    e^{λ·step·block} ≤ e^{50} (else, and for short grids, :func:`_log_mgf` is used).
    Each term then carries two exponentials and two products instead of one
    exponential and one product (a few units in the last place, as before)."""
    n = p.size
    block = _MGF_BLOCK
    if n < 4 * block or not float(np.max(lams)) * abs(step) * block <= _MGF_SPAN:
        return _log_mgf(p, z, lams)
    nonzero = np.flatnonzero(p)
    if nonzero.size == 0:
        return np.full(lams.shape, -np.inf)
    first, last = int(nonzero[0]), int(nonzero[-1])
    i_top = last if step > 0 else first  # the largest loss with mass
    top = float(z[i_top])
    nb = -(-(last + 1 - first) // block)
    grid = np.zeros(nb * block)
    grid[: last + 1 - first] = p[first : last + 1]
    # Offsets from each block's end nearer the top: s − (block − 1) ≤ 0 going up
    # (step > 0), s ≥ 0 going down (step < 0): λ·offset·step ≤ 0.
    s = np.arange(block, dtype=np.float64)
    ends = first + np.arange(nb, dtype=np.float64) * block
    if step > 0:
        s -= block - 1
        ends += block - 1
    with np.errstate(divide="ignore", under="ignore"):
        inner = np.exp(np.outer(s * step, lams))  # (block, λ)
        outer = np.exp(np.outer((ends - i_top) * step, lams))  # (blocks, λ)
        # numpy's own loops, not BLAS (whose threads stall on a shared machine).
        sums = np.sum(np.einsum("bs,sl->bl", grid.reshape(nb, block), inner) * outer, axis=0)
        return np.asarray(lams * top + np.log(sums), dtype=np.float64)


# --------------------------------------------------------------------------------------
# Discretisation of a mechanism's pair
# --------------------------------------------------------------------------------------
CdfFn = Callable[[FloatArray], tuple[FloatArray, FloatArray, FloatArray, FloatArray]]


def _bin_masses(le: FloatArray, gt: FloatArray) -> FloatArray:
    """Masses of the bins (t_b, t_{b+1}] from P(L ≤ t) and P(L > t), without cancellation."""
    out = np.where(le[1:] < 0.5, le[1:] - le[:-1], gt[:-1] - gt[1:])
    return np.maximum(out, 0.0, out=out)


def _from_bins(
    h: float,
    i0: int,
    pb: FloatArray,
    qb: FloatArray,
    ab: FloatArray,
    bb: FloatArray,
    below: float,
    above: float,
) -> tuple[_LossPMF, _LossPMF]:
    r"""Upper and lower PMFs from the masses of the loss bins [t_b, t_{b+1}], t_b = (i0 + b)h.

    ``pb``, ``qb``: P- and Q-mass of each bin; ``ab`` = ∫_bin (1 − e^{t_b − L}) dP =
    P_b − e^{t_b}Q_b and ``bb`` = ∫_bin (e^{t_{b+1} − L} − 1) dP = e^{t_{b+1}}Q_b − P_b,
    both ≥ 0 and computed by the caller without cancellation where possible.
    ``below``/``above``: P-mass of losses under t_0 / over t_n (n = number of bins).

    Upper (Doroshenko et al. 2022, connect the dots): the bin's mass is split between
    t_b and t_{b+1} keeping P- and Q-mass, so the hockey-stick curve, as a function of
    x = e^ε, is the chord interpolation of the true (convex) curve: it lies above it, and
    the pair dominates the true pair. ``below`` is rounded up to t_0, ``above`` goes to +∞.

    Lower: the chord interpolation is lowered at each grid point x_j by G_j ≥ 0.
    Only bin b's own part C_b of the curve is non-linear on [x_b, x_{b+1}], and C_b lies
    above its two tangents (slope −Q_b from (x_b, a_b), and 0), which meet at
    x = P_b/Q_b, a fraction θ_b = a_b/(Q_bΔx_b) into the segment; the lowered chord is
    below them (hence below the curve) iff (1 − θ_b)G_b + θ_bG_{b+1} ≥ g_b =
    a_b·b_b/(Q_b·Δx_b). Each segment asks g_b at both ends, or (where g_b exceeds the
    curve's excess over its straight part below the support, so as not to create
    Q-mass; docs/accounting.md §1) 0 at its left end and b_b = g_b/θ_b at its right
    end; G_j is the larger request of its two segments. The lowered values (clipped at 0), with
    the exact value H(0) = total mass, are replaced by their greatest convex minorant
    (lower convex hull, kinks only at grid points): a convex, non-increasing, piecewise
    linear curve below the truth, i.e. the curve of a non-negative PMF on the grid
    (mass x_j·(slope change) at t_j), dominated by the true pair. Only the pointwise
    inequality of curves is used under composition (δ of a composition is
    E_R[H(x·e^{−L_R})]), so the implied Q-mass need not be exactly 1.

    Memory: besides the four inputs and the two outputs, the lower side holds its
    abscissae and its lowered curve (n + 2 points each) and the hull's indices; the long
    double suffix sums, the lowerings and the hull's tests are formed :data:`_CHUNK`
    points at a time (:data:`_BUILD_COST` counts the whole).
    """
    _heap_for_temporaries()
    n = pb.size
    # -- upper: connect the dots ------------------------------------------------------
    part = ab * (1.0 / -math.expm1(-h))
    np.clip(part, 0.0, pb, out=part)  # the share of each bin's mass put at its top
    ctd = np.zeros(n + 1)
    ctd[1:] = part
    np.subtract(pb, part, out=part)  # the share put at its bottom
    ctd[:-1] += part
    del part
    up = ctd.copy()
    up[0] += below  # rounded up to the lowest grid point
    upper = _LossPMF(h, i0, up, above, 0.0, True)
    # -- lower: tangent-corrected chords, then the greatest convex minorant ------------
    base = ctd  # the chords' PMF: ``above`` moved down to t_n, ``below`` dropped
    base[-1] += above
    lowered, xs = _lowered_chords(h, i0, base, qb, ab, bb)
    del base, ctd
    vertices = _lower_hull(xs, lowered)
    hull_f = np.interp(xs, xs[vertices], lowered[vertices])
    del lowered
    # The truth is ≥ max(hull, 0), but a zero crossing strictly inside a segment is not
    # on the grid: the curve is set to 0 from the grid point before the first one where
    # the hull is negative (a segment from a positive hull value down to 0 lies below the
    # hull), which rounds that part of the mass down. If the hull is already negative at
    # x_0, the whole lower curve is 0 (a valid, uninformative lower bound).
    neg = np.flatnonzero(hull_f < 0)
    w = np.maximum(hull_f, 0.0, out=hull_f)
    if neg.size:
        z0 = int(neg[0]) - 1 if neg[0] > 1 else 0
        w[z0:] = 0.0
        keep = _clipped_hull(xs, w, vertices[vertices < z0], z0)
    elif vertices.size == xs.size:
        keep = vertices[_lower_hull(xs, w)]
    else:
        keep = vertices[_lower_hull(xs[vertices], w[vertices])]
    del neg, vertices
    hx, hw = xs[keep], w[keep]
    del xs, w, hull_f
    slopes = np.concatenate(((hw[1:] - hw[:-1]) / (hx[1:] - hx[:-1]), [0.0]))
    masses = np.zeros(n + 1)
    # Vertex x_j > 0 carries x_j·(slope after − slope before); the vertex at 0 none.
    masses[keep[1:] - 1] = np.maximum(hx[1:] * (slopes[1:] - slopes[:-1]), 0.0)
    masses *= 1.0 - 1e-12
    lower = _LossPMF(h, i0, masses, 0.0, 0.0, False)
    return upper, lower


def _lowered_chords(
    h: float, i0: int, base: FloatArray, qb: FloatArray, ab: FloatArray, bb: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """The lowered chord values of :func:`_from_bins` and their abscissae, n + 2 points each.

    Returns ``(f, xs)``: ``xs`` = (0, x_0, …, x_n) with x_j = e^{t_j}, ``f`` = (H(0),
    H(x_0) − G_0, …, H(x_n) − G_n), where H is the chord interpolation of ``base``'s
    curve, H(x_j) = Σ_{i>j} base_i (1 − x_j e^{−t_i}) (suffix sums in long double: the
    difference cancels), H(0) = Σ base_i. The sums run from the top in blocks of
    :data:`_CHUNK` points carrying their totals, in the order of one cumulative sum.
    """
    n = base.size - 1
    ld = np.longdouble
    xs = np.empty(n + 2)
    xs[0] = 0.0
    x = xs[1:]
    total_ld, weight_ld = ld(0), ld(0)  # Σ base_i and Σ base_i e^{−t_i}
    # The long double e^{−t_i} are formed once for both passes where the grid is short
    # (at most _EXP_KEPT points, 4 MB), else in each pass's blocks (the same values).
    kept = None if n + 1 > _EXP_KEPT else np.empty(n + 1, dtype=ld)
    for a in range(0, n + 1, _CHUNK):
        c = min(a + _CHUNK, n + 1)
        t = np.arange(i0 + a, i0 + c, dtype=np.float64) * h
        x[a:c] = np.exp(t)
        bl = base[a:c].astype(ld)
        total_ld += np.sum(bl)
        e_t = np.exp(-t.astype(ld))
        if kept is not None:
            kept[a:c] = e_t
        weight_ld += np.sum(bl * e_t)
    total = float(total_ld)
    f = np.empty(n + 2)
    f[0] = total
    s1_carry, s2_carry = ld(0), ld(0)  # the suffix sums above the block
    for c in range(n + 1, 0, -_CHUNK):
        # Grid points [a, c); the block's sums also cover a − 1 (the segment below a).
        a = max(c - _CHUNK, 0)
        lo = max(a - 1, 0)
        t = np.arange(i0 + lo + 1, i0 + c, dtype=np.float64) * h
        bl = base[lo + 1 : c].astype(ld)
        s1 = np.cumsum(np.concatenate(([s1_carry], bl[::-1])))[::-1]  # S1_j, j = lo..c−1
        bl *= np.exp(-t.astype(ld)) if kept is None else kept[lo + 1 : c]
        s2 = np.cumsum(np.concatenate(([s2_carry], bl[::-1])))[::-1]
        del bl, t
        s1_carry, s2_carry = s1[0], s2[0]
        xl = x[lo:c].astype(ld)
        chord_ld = s1 - xl * s2
        del s1, s2
        # The curve below the support is exactly linear, total − x·Q(total); see below.
        excess = (chord_ld - (ld(total) - xl * weight_ld)).astype(np.float64)
        chord = np.maximum(chord_ld, ld(0)).astype(np.float64)
        del chord_ld, xl
        # Where to lower. Segment b only needs (1 − θ_b)ℓ_b + θ_bℓ_{b+1} ≥ g_b,
        # θ_b = a_b/(Q_bΔx_b) (the line is then below the two tangents at their meeting
        # point): ℓ = g_b at both ends, or 0 at the left end and g_b/θ_b = b_b at the
        # right end. A grid point lowered below the straight part of the curve below the
        # support steepens the hull's first segment: Q-mass is created, a shift of every
        # loss that compounds over k runs (a first-order error; at a pile-up of mass at
        # the bottom of the support, e.g. ln(1 − q) of a subsampled mechanism, it
        # dominated the lower bound). Where g_b exceeds the curve's excess E_b over that
        # line, the segment takes its lowering at the right end (E_{b+1} ≥ E_b + b_b, so
        # that end stays above the line). Segments b = lo..m−1 here.
        m = min(c, n)
        dx = x[lo + 1 : m + 1] - x[lo:m]
        a_s, b_s, q_s = ab[lo:m], bb[lo:m], qb[lo:m]
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.where(q_s > 0, np.clip(a_s, 0, None) * np.clip(b_s, 0, None) / (q_s * dx), 0.0)
        g = np.nan_to_num(g, nan=0.0, posinf=0.0)
        pinned = (g > 0) & (g > excess[: m - lo])
        left = np.where(pinned, 0.0, g)
        right = np.where(pinned, np.maximum(b_s, 0.0) * (1.0 + 1e-9), g)
        # G_j = max(right end of segment j − 1, left end of segment j), j = a..c−1
        # (no segment below t_0 or above t_n).
        r_full = right if a > 0 else np.concatenate(([0.0], right))
        l_full = left if c <= n else np.concatenate((left, [0.0]))
        big_g = np.maximum(r_full[: c - a], l_full[a - lo : a - lo + c - a])
        f[1 + a : 1 + c] = chord[a - lo :] - big_g
    return f, xs


def _clipped_hull(
    xs: FloatArray, w: FloatArray, chain: npt.NDArray[np.intp], z0: int
) -> npt.NDArray[np.intp]:
    """Lower hull of the points ``chain`` (convex: a hull's vertices), z0 and the last one.

    ``w`` is 0 from ``z0`` on. The hull is the chain up to its tangent point from
    (x_{z0}, 0), the vertex of largest slope −w_i/(x_{z0} − x_i) (every chain point lies
    on or above that line), then z0 and the last point. That candidate hull is checked
    against every point as :func:`_lower_hull` checks its own; a point strictly below it
    (floating-point ties) sends the whole set through :func:`_lower_hull`.
    """
    ends = np.array([z0, xs.size - 1], dtype=np.intp)
    cand = np.concatenate((chain, ends))
    cand = cand[np.concatenate(([True], cand[1:] > cand[:-1]))]
    if chain.size == 0:
        return cand[_lower_hull(xs[cand], w[cand])]
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = -w[chain] / (xs[z0] - xs[chain])
    k = chain.size - 1 - int(np.argmax(slope[::-1]))  # the last largest slope
    reduced = np.concatenate((chain[: k + 1], ends))
    reduced = reduced[np.concatenate(([True], reduced[1:] > reduced[:-1]))]
    hull = reduced[_lower_hull(xs[reduced], w[reduced])]
    x_c, w_c = xs[cand], w[cand]
    if _below(x_c, w_c, np.searchsorted(cand, hull)).size == 0:
        return hull
    return cand[_lower_hull(x_c, w_c)]


def _lower_hull(x: FloatArray, y: FloatArray) -> npt.NDArray[np.intp]:
    """Indices of the lower convex hull of the points (x_i, y_i), x increasing.

    A point on or above the segment joining two other points of the set is not a
    vertex of the hull (not an extreme point), so dropping any number of such points at
    once leaves the hull as it was: vectorised passes drop every point on or above its
    current neighbours' segment (a polyline with none left is strictly convex: the
    hull), while the points they test stay within :data:`_HULL_WORK` times the set.
    (Dropping the points *on* the segment too matters: where a run's curve is straight
    up to rounding, e.g. below the support of a subsampled mechanism's add direction,
    rounding noise of a unit in the last place makes a zigzag that passes dropping only
    the points strictly above took hundreds of passes and the monotone chain to clear:
    40–80 ms of a 39,063-step DP-SGD certification; now 5–11 passes, 1–3 ms.) If that
    has not settled, up to :data:`_CHAIN_POINTS` points left go through Andrew's
    monotone chain (:func:`_hull_of`). Beyond that, candidates come from the slopes:
    those of the greatest convex minorant of a piecewise-linear function are the
    isotonic (non-decreasing, least-squares with weights Δx) regression of its segment
    slopes, so every hull vertex starts a block of that regression (Barlow, Bartholomew,
    Bremner & Brunk 1972, Thm 1.1; scipy's PAVA, in C). The candidates' own hull
    (:func:`_hull_of`) is then *verified* against every point: a point strictly below
    it is added and the hull recomputed; after three rounds (floating-point ties) the
    hull of all points is taken.
    """
    idx = np.arange(x.size)
    work = 0
    while work <= _HULL_WORK * x.size:
        if idx.size <= 2:
            return idx
        work += idx.size
        above = _bends_up(x, y, idx)
        if not above.any():
            return idx
        drop = np.zeros(idx.size, dtype=bool)
        drop[1:-1] = above
        idx = idx[~drop]
    if idx.size <= _CHAIN_POINTS:
        return _hull_of(x, y, idx)
    xs, ys = x[idx], y[idx]
    dx = xs[1:] - xs[:-1]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        slopes = (ys[1:] - ys[:-1]) / dx
    if not np.all(np.isfinite(slopes)) or not np.all(dx > 0):
        return _hull_of(x, y, idx)
    # Imported here: scipy.optimize costs about a second at import (most PLDs never
    # reach this point).
    from scipy.optimize import isotonic_regression

    # The block starts, and the end (scipy includes both ends).
    blocks = np.asarray(isotonic_regression(slopes, weights=dx).blocks, dtype=np.intp)
    cand = idx[blocks]
    for _ in range(3):
        hull = _hull_of(x, y, cand)
        below = _below(x, y, hull)
        if below.size == 0:
            return hull
        keep = np.zeros(x.size, dtype=bool)
        keep[hull] = True
        keep[below] = True
        cand = np.nonzero(keep)[0]
    return _hull_of(x, y, np.arange(x.size))


def _bends_up(x: FloatArray, y: FloatArray, idx: npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
    """For each interior point of ``idx``: on or above its neighbours' segment."""
    out = np.empty(max(idx.size - 2, 0), dtype=bool)
    for a in range(0, out.size, _CHUNK):
        part = idx[a : a + _CHUNK + 2]
        xi, yi = x[part], y[part]
        xa, xb, xc = xi[:-2], xi[1:-1], xi[2:]
        ya, yb, yc = yi[:-2], yi[1:-1], yi[2:]
        out[a : a + _CHUNK] = (yb - ya) * (xc - xa) >= (yc - ya) * (xb - xa)
    return out


def _below(x: FloatArray, y: FloatArray, idx: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """Indices of the points strictly below the polyline through ``idx`` (same test as
    :func:`_hull_of`'s)."""
    x_idx = x[idx]
    found = [np.zeros(0, dtype=np.intp)]
    for a in range(0, x.size, _CHUNK):
        xp, yp = x[a : a + _CHUNK], y[a : a + _CHUNK]
        seg = np.clip(np.searchsorted(x_idx, xp, side="right") - 1, 0, idx.size - 2)
        left, right = idx[seg], idx[seg + 1]
        under = (yp - y[left]) * (x[right] - x[left]) < (y[right] - y[left]) * (xp - x[left])
        found.append(np.flatnonzero(under).astype(np.intp) + a)
    return np.concatenate(found)


def _hull_of(x: FloatArray, y: FloatArray, idx: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """Indices (a subset of ``idx``, sorted) of the lower convex hull of those points.

    A point on or above the segment joining two other points of the set is not a
    hull vertex (the hull lies below that segment). A few vectorised passes drop every
    point on or above its current neighbours' segment; what remains (usually convex already)
    goes through Andrew's monotone chain.
    """
    for _ in range(4):
        if idx.size <= 2:
            return idx
        above = _bends_up(x, y, idx)
        if not above.any():
            return idx
        drop = np.zeros(idx.size, dtype=bool)
        drop[1:-1] = above
        idx = idx[~drop]
    xs, ys = x[idx].tolist(), y[idx].tolist()
    hull: list[int] = []
    for i in range(len(xs)):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            if (ys[b] - ys[a]) * (xs[i] - xs[a]) >= (ys[i] - ys[a]) * (xs[b] - xs[a]):
                hull.pop()  # b is on or above the segment a–i
            else:
                break
        hull.append(i)
    return idx[np.asarray(hull, dtype=np.intp)]


def _from_continuous(
    h: float, loss_lo: float, loss_hi: float, cdfs: CdfFn
) -> tuple[_LossPMF, _LossPMF]:
    """Upper and lower PMFs of a pair given P(L ≤ t), P(L > t), Q(L ≤ t), Q(L > t)."""
    _heap_for_temporaries()  # before the CDFs' arrays
    # Losses beyond ±_LOSS_CAP nats go to +∞ / are moved to the edge (see _LOSS_CAP),
    # also when the whole window lies beyond one cap (e^{t} then stays finite).
    loss_lo = min(max(loss_lo, -_LOSS_CAP), _LOSS_CAP - h)
    loss_hi = max(min(loss_hi, _LOSS_CAP), -_LOSS_CAP + h)
    i0 = math.floor(loss_lo / h)
    i1 = max(math.ceil(loss_hi / h), i0 + 1)
    check_grid_points(_BUILD_COST * (i1 - i0 + 1))
    t = np.arange(i0, i1 + 1, dtype=np.float64) * h
    p_le, p_gt, q_le, q_gt = cdfs(t)
    below = float(p_le[0])
    above = float(p_gt[-1])
    pb = _bin_masses(p_le, p_gt)
    del p_le, p_gt
    qb = _bin_masses(q_le, q_gt)
    del q_le, q_gt
    # Bin (t_b, t_{b+1}]: a_b = P_b − e^{t_b} Q_b, b_b = e^{t_{b+1}} Q_b − P_b.
    x = np.exp(t, out=t)
    ab = pb - x[:-1] * qb
    np.maximum(ab, 0.0, out=ab)
    bb = x[1:] * qb
    bb -= pb
    np.maximum(bb, 0.0, out=bb)
    del x, t
    return _from_bins(h, i0, pb, qb, ab, bb, below, above)


def _all_at_infinity(
    h: float, mass: float = 1.0, low_mass: float = 0.0
) -> tuple[_LossPMF, _LossPMF]:
    """Upper: P-mass ``mass`` at +∞ and none finite; lower: ``low_mass`` (≤ the true
    mass at +∞) at +∞ and none finite."""
    empty = np.zeros(1)
    return _LossPMF(h, 0, empty, mass, 0.0, True), _LossPMF(h, 0, empty, low_mass, 0.0, False)


def _from_points(
    h: float, losses: FloatArray, probs: FloatArray, inf_mass: float, inf_low: float = 0.0
) -> tuple[_LossPMF, _LossPMF]:
    """Upper and lower PMFs of a discrete PLD: P-mass ``probs`` at finite ``losses``.

    ``inf_mass`` (upper side) is at least the true P-mass at +∞, ``inf_low`` (lower
    side) at most.

    The grid's memory is checked as that of :func:`_from_continuous` (:data:`_BUILD_COST`
    per grid point: :func:`_from_bins` holds its bins, both sides and the lower hull).
    """
    keep = probs > 0
    losses, probs = losses[keep], probs[keep]
    # Losses above _LOSS_CAP: +∞ on the upper side, the cap on the lower side. Losses
    # below −_LOSS_CAP: the cap on the upper side (rounded up), dropped on the lower.
    high = losses > _LOSS_CAP
    low = losses < -_LOSS_CAP
    high_mass = float(probs[high].sum())
    low_mass = float(probs[low].sum())
    inside = ~(high | low)
    losses, probs = losses[inside], probs[inside]
    if losses.size == 0 and high_mass == 0 and low_mass == 0:  # every P-mass is at +∞
        return _all_at_infinity(h, inf_mass, inf_low)
    if high_mass > 0 or low_mass > 0:
        losses = np.concatenate((losses, [-_LOSS_CAP, _LOSS_CAP]))
        probs = np.concatenate((probs, [0.0, 0.0]))
    lo_hi = np.floor(np.array([losses.min(), losses.max()]) / h)
    check_grid_points(_BUILD_COST * (int(lo_hi[1] - lo_hi[0]) + 2))
    idx = np.floor(losses / h).astype(np.int64)
    i0 = int(idx.min())
    n = int(idx.max()) - i0 + 1
    rel = idx - i0
    t_lo = idx * h

    # bincount with float64 weights returns float64 (asarray makes no copy).
    pb = np.asarray(np.bincount(rel, probs, n), dtype=np.float64)
    qb = np.asarray(np.bincount(rel, probs * np.exp(-losses), n), dtype=np.float64)
    # Per point: p(1 − e^{t_b − L}) and p(e^{t_{b+1} − L} − 1), without cancellation.
    ab = np.asarray(np.bincount(rel, probs * -np.expm1(t_lo - losses), n), dtype=np.float64)
    bb = np.asarray(np.bincount(rel, probs * np.expm1(t_lo + h - losses), n), dtype=np.float64)
    del idx, rel, t_lo, losses, probs, keep, high, low, inside
    upper, lower = _from_bins(h, i0, pb, qb, ab, bb, low_mass, 0.0)
    upper = _LossPMF(h, upper.start, upper.probs, inf_mass + high_mass, 0.0, True)
    if high_mass > 0:
        top = lower.probs.copy()
        top[math.floor(_LOSS_CAP / h) - lower.start] += high_mass  # rounded down to the cap
        lower = _LossPMF(h, lower.start, top, 0.0, lower.slack, False)
    if inf_low > 0:
        lower = _LossPMF(h, lower.start, lower.probs, inf_low, lower.slack, False)
    return upper, lower


# --------------------------------------------------------------------------------------
# Public object
# --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PrivacyLossDistribution:
    r"""A privacy loss distribution with a certified upper and a lower discretisation.

    Both neighbouring directions are kept: ``remove`` is the pair (M(D), M(D')) with
    D' = D minus one unit, ``add`` its reverse. The guarantee of a mechanism is the
    worse of the two, so every query takes the maximum over directions. Build one with
    the ``from_*`` constructors, combine with :meth:`compose` and
    :meth:`self_compose`, and query with :meth:`delta` and :meth:`epsilon`.

    Parameters
    ----------
    value_discretization : float
        Grid step h of the privacy loss, in nats.
    upper_remove, upper_add, lower_remove, lower_add
        The four discretised PMFs (internal representation).
    tail_mass : float
        Bound on the mass moved by each truncation or wrap-around.

    Notes
    -----
    ``delta(eps).upper`` and ``epsilon(delta).upper`` are certified (with the FFT
    round-off bounded as described in the module docstring); the ``lower`` values
    come from a dominated discretisation (the chord interpolation lowered by a tangent
    correction) and are of the same order of accuracy. See ``docs/accounting.md``.

    Examples
    --------
    Four Gaussian mechanisms with σ = 2 compose to one with μ = 1 (DRS Cor 3.3):

    >>> from gaussdp.privacy import gdp_delta
    >>> pld = PrivacyLossDistribution.from_gaussian(2.0).self_compose(4)
    >>> b = pld.delta(1.0)
    >>> b.lower <= gdp_delta(1.0, 1.0) <= b.upper
    True
    >>> round(b.upper, 8)
    0.12693674
    """

    value_discretization: float
    upper_remove: _LossPMF
    upper_add: _LossPMF
    lower_remove: _LossPMF
    lower_add: _LossPMF
    tail_mass: float = DEFAULT_TAIL_MASS

    # -- constructors -----------------------------------------------------------------
    @classmethod
    def _build(
        cls,
        h: float,
        remove: tuple[_LossPMF, _LossPMF],
        add: tuple[_LossPMF, _LossPMF] | None,
        tail_mass: float,
    ) -> PrivacyLossDistribution:
        add = remove if add is None else add
        return cls(h, remove[0], add[0], remove[1], add[1], tail_mass)

    @classmethod
    def from_gaussian(
        cls,
        sigma: float,
        sensitivity: float = 1.0,
        *,
        value_discretization: float = DEFAULT_VALUE_DISCRETIZATION,
        tail_mass: float = DEFAULT_TAIL_MASS,
    ) -> PrivacyLossDistribution:
        r"""PLD of the Gaussian mechanism N(0, σ²) with L2 sensitivity Δ.

        Under P the loss is N(μ²/2, μ²), under Q it is N(−μ²/2, μ²), μ = Δ/σ
        (DRS Thm 2.7); both directions are the same.

        Examples
        --------
        >>> from gaussdp.privacy import gdp_epsilon
        >>> b = PrivacyLossDistribution.from_gaussian(1.0).epsilon(1e-5)
        >>> b.lower <= gdp_epsilon(1.0, 1e-5) <= b.upper
        True
        """
        sigma = check_positive("sigma", sigma)
        sensitivity = check_positive("sensitivity", sensitivity)
        h = check_value_discretization(value_discretization)
        tail_mass = check_tail_mass(tail_mass)
        mu = sensitivity / sigma
        if not mu <= MAX_SUBSAMPLED_MU:  # μ² would overflow; every loss is far past the cap
            return cls._build(h, _all_at_infinity(h), None, tail_mass)
        mean = mu * mu / 2

        def cdfs(t: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
            zp = (t - mean) / mu
            zq = (t + mean) / mu
            return ndtr(zp), ndtr(-zp), ndtr(zq), ndtr(-zq)

        pair = _from_continuous(h, mean - _Z_TRUNC * mu, mean + _Z_TRUNC * mu, cdfs)
        return cls._build(h, pair, None, tail_mass)

    @classmethod
    def from_laplace(
        cls,
        scale: float,
        sensitivity: float = 1.0,
        *,
        sample_rate: float = 1.0,
        value_discretization: float = DEFAULT_VALUE_DISCRETIZATION,
        tail_mass: float = DEFAULT_TAIL_MASS,
    ) -> PrivacyLossDistribution:
        r"""PLD of the Laplace mechanism Lap(b) with L1 sensitivity Δ.

        The loss of Lap(0, b) against Lap(Δ, b) is (|y − Δ| − |y|)/b: an atom at
        ±Δ/b and a continuous part between (Koskela et al. 2021). With
        ``sample_rate`` q < 1 the pair is the Poisson-subsampled one,
        (1 − q)Lap(0, b) + qLap(Δ, b) against Lap(0, b) and the reverse; the loss
        ln(1 − q + q e^{(|y| − |y − Δ|)/b}) is non-decreasing in y, so bin masses
        come from Laplace CDFs.

        Examples
        --------
        >>> b = PrivacyLossDistribution.from_laplace(1.0).delta(0.5)
        >>> b.lower <= 1 - math.exp(-0.25) <= b.upper  # δ(ε) = 1 − e^{(ε − ε₀)/2}
        True
        """
        scale = check_positive("scale", scale)
        sensitivity = check_positive("sensitivity", sensitivity)
        h = check_value_discretization(value_discretization)
        tail_mass = check_tail_mass(tail_mass)
        rate = _check_rate(sample_rate)
        eps0 = sensitivity / scale
        if rate < 1.0:
            return cls._subsampled_laplace(scale, sensitivity, rate, h, tail_mass)

        def lap_sf(x: FloatArray, loc: float) -> tuple[FloatArray, FloatArray]:
            u = (x - loc) / scale
            sf = np.where(u >= 0, 0.5 * np.exp(-np.abs(u)), 1.0 - 0.5 * np.exp(-np.abs(u)))
            cdf = np.where(u >= 0, 1.0 - 0.5 * np.exp(-np.abs(u)), 0.5 * np.exp(-np.abs(u)))
            return sf, cdf

        def cdfs(t: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
            # L ≤ t  ⇔  y ≥ (Δ − b t)/2 for −Δ/b ≤ t < Δ/b.
            y = (sensitivity - scale * np.clip(t, -eps0, eps0)) / 2
            p_le, p_gt = lap_sf(y, 0.0)
            q_le, q_gt = lap_sf(y, sensitivity)
            top = t >= eps0
            bottom = t < -eps0
            p_le = np.where(top, 1.0, np.where(bottom, 0.0, p_le))
            p_gt = np.where(top, 0.0, np.where(bottom, 1.0, p_gt))
            q_le = np.where(top, 1.0, np.where(bottom, 0.0, q_le))
            q_gt = np.where(top, 0.0, np.where(bottom, 1.0, q_gt))
            return p_le, p_gt, q_le, q_gt

        pair = _from_continuous(h, -eps0 - h, eps0 + h, cdfs)
        return cls._build(h, pair, None, tail_mass)

    @classmethod
    def _subsampled_laplace(
        cls, scale: float, d: float, q: float, h: float, tail_mass: float
    ) -> PrivacyLossDistribution:
        """Poisson-subsampled Laplace; see :meth:`from_laplace`."""
        eps0 = d / scale
        # The loss range: ln(1 + q(e^{±ε₀} − 1)), the upper end as
        # ε₀ + ln(q + (1 − q)e^{−ε₀}) at large ε₀ (no overflow).
        lo_loss = math.log1p(q * math.expm1(-eps0))
        hi_loss = (
            math.log1p(q * math.expm1(eps0))
            if eps0 < 1.0
            else eps0 + math.log(q + (1.0 - q) * math.exp(-eps0))
        )

        def cdf_sf(x: FloatArray, loc: float) -> tuple[FloatArray, FloatArray]:
            u = (x - loc) / scale
            half = 0.5 * np.exp(-np.abs(u))
            return np.where(u >= 0, 1.0 - half, half), np.where(u >= 0, half, 1.0 - half)

        def threshold(t: FloatArray) -> FloatArray:
            # ln(1 − q + q r(y)) ≤ t  ⇔  r(y) ≤ R = (e^t − 1 + q)/q, r = e^{(|y|−|y−Δ|)/b}
            # ⇔ y ≤ y*(t) = (b ln R + Δ)/2, clipped to [0, Δ] (r is flat outside).
            arg = np.expm1(t) + q
            with np.errstate(divide="ignore", invalid="ignore"):
                log_r = np.log(np.where(arg > 0, arg, 1.0)) - math.log(q)
            log_r = np.where(arg > 0, log_r, -np.inf)
            return np.where(
                log_r < -eps0,
                -np.inf,
                np.where(log_r >= eps0, np.inf, (scale * log_r + d) / 2),
            )

        def mixture(y: FloatArray) -> tuple[FloatArray, FloatArray]:
            c0, s0 = cdf_sf(y, 0.0)
            c1, s1 = cdf_sf(y, d)
            return (1 - q) * c0 + q * c1, (1 - q) * s0 + q * s1

        def cdfs_remove(t: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
            y = threshold(t)
            p_le, p_gt = mixture(y)
            q_le, q_gt = cdf_sf(y, 0.0)
            return p_le, p_gt, q_le, q_gt

        def cdfs_add(t: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
            # −L(y) ≤ t  ⇔  L(y) ≥ −t  ⇔  y ≥ y*(−t) (up to the atoms' closed ends).
            y = threshold(-t)
            c0, s0 = cdf_sf(y, 0.0)
            cm, sm = mixture(y)
            # At the atoms (y* = 0 or Δ exactly) the event includes the whole flat part:
            lo_atom = np.isclose(-t, lo_loss, rtol=0, atol=1e-15)
            hi_atom = np.isclose(-t, hi_loss, rtol=0, atol=1e-15)
            s0 = np.where(lo_atom, 1.0, np.where(hi_atom, cdf_sf(np.full_like(t, d), 0.0)[1], s0))
            c0 = 1.0 - s0
            sm = np.where(lo_atom, 1.0, np.where(hi_atom, mixture(np.full_like(t, d))[1], sm))
            cm = 1.0 - sm
            return s0, c0, sm, cm

        remove = _from_continuous(h, lo_loss - h, hi_loss + h, cdfs_remove)
        add = _from_continuous(h, -hi_loss - h, -lo_loss + h, cdfs_add)
        return cls._build(h, remove, add, tail_mass)

    @classmethod
    def from_subsampled_gaussian(
        cls,
        sigma: float,
        sample_rate: float,
        sensitivity: float = 1.0,
        *,
        value_discretization: float = DEFAULT_VALUE_DISCRETIZATION,
        tail_mass: float = DEFAULT_TAIL_MASS,
    ) -> PrivacyLossDistribution:
        r"""PLD of the Poisson-subsampled Gaussian mechanism, both directions.

        Remove: P = (1 − q)N(0, σ²) + qN(Δ, σ²) against Q = N(0, σ²); add: the reverse
        pair (Koskela et al. 2021; REFERENCE §6). The loss is monotone in the output,
        so bin masses come from normal CDFs.

        Examples
        --------
        >>> pld = PrivacyLossDistribution.from_subsampled_gaussian(1.0, 0.01)
        >>> b = pld.self_compose(100).epsilon(1e-5)
        >>> b.lower <= b.upper < 1.0
        True
        """
        sigma = check_positive("sigma", sigma)
        q = _check_rate(sample_rate)
        sensitivity = check_positive("sensitivity", sensitivity)
        h = check_value_discretization(value_discretization)
        tail_mass = check_tail_mass(tail_mass)
        if q == 1.0:
            return cls.from_gaussian(
                sigma, sensitivity, value_discretization=h, tail_mass=tail_mass
            )
        # The pair depends on Δ/σ only: work in units of σ (no σ² underflow or overflow).
        d = sensitivity / sigma
        if not d <= MAX_SUBSAMPLED_MU:
            raise ValueError(
                invalid("sensitivity / sigma", f"at most {MAX_SUBSAMPLED_MU:g} for a PLD", d)
            )
        sigma = 1.0
        s2 = 1.0
        log1mq = math.log1p(-q)

        def loss_of_y(y: float) -> float:
            # L(y) = ln(1 − q + q e^{(2yΔ − Δ²)/(2σ²)}), increasing in y.
            x = (2 * y * d - d * d) / (2 * s2)
            return float(np.logaddexp(log1mq, math.log(q) + x))

        def y_of_loss(t: FloatArray) -> FloatArray:
            # Inverse of L for t > ln(1 − q): y = σ²/Δ · ln((e^t − 1 + q)/q) + Δ/2.
            arg = np.expm1(t) + q
            with np.errstate(divide="ignore", invalid="ignore"):
                y = s2 / d * (np.log(np.where(arg > 0, arg, 1.0)) - math.log(q)) + d / 2
            return np.where(arg > 0, y, -np.inf)

        def mixture(y: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
            # The mixture's CDF and SF at y, and N(0, σ²)'s (each normal CDF once).
            n_le, n_gt = ndtr(y / sigma), ndtr(-y / sigma)
            cdf = (1 - q) * n_le + q * ndtr((y - d) / sigma)
            sf = (1 - q) * n_gt + q * ndtr((d - y) / sigma)
            return cdf, sf, n_le, n_gt

        # Both grids are multiples of h and (−i)·h = −(i·h) exactly, so the add
        # direction's −t is (mostly) a stretch of the remove direction's t, reversed: the
        # remove direction's values there are taken (t checked point by point), not
        # evaluated again (normal CDFs: about 3 % of the DP-SGD reference).
        removed: list[tuple[int, tuple[FloatArray, FloatArray, FloatArray, FloatArray]]] = []

        def cdfs_remove(t: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
            out = mixture(y_of_loss(t))
            if t.size <= _CDF_REUSE_MAX:  # larger grids: memory, not CPU, is what limits them
                removed.append((round(float(t[0]) / h), out))
            return out

        def cdfs_add(t: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
            # Loss of N(0,σ²) against the mixture is −L(y): ≤ t  ⇔  y ≥ y(−t).
            neg = -t[::-1]
            first = round(float(neg[0]) / h)
            if removed:
                i0, values = removed[0]
                a = first - i0
                if a >= 0 and a + neg.size <= values[0].size:
                    grid = np.arange(first, first + neg.size, dtype=np.float64) * h
                    if np.array_equal(grid, neg):
                        cdf, sf, n_le, n_gt = (v[a : a + neg.size][::-1] for v in values)
                        return n_gt, n_le, sf, cdf
            q_gt, q_le, p_gt, p_le = mixture(y_of_loss(-t))
            return p_le, p_gt, q_le, q_gt

        # Outputs beyond y_hi carry P-mass ≤ tail_mass/2: (1 − q)Φ̄(y_hi/σ) + qΦ̄(z) with
        # both terms ≤ tail_mass/4. At small q the loss range shrinks a lot (σ = 0.6,
        # q = 1e-5: 6.5 → 2.1 nats): the range, not the bulk, sets the grid's length.
        # Remove: that mass goes to +∞ on the upper side (it is counted in δ). Add: it
        # has the most negative losses and is rounded up to the lowest grid point.
        z_mix = max(-float(ndtri(tail_mass / (4 * q))), -float(ndtri(tail_mass / 4)) - d / sigma)
        z_rm = min(_Z_TRUNC, max(1.0, z_mix))
        z_add = min(_Z_TRUNC, -float(ndtri(tail_mass / 2)))
        y_lo, y_hi = -_Z_TRUNC * sigma, d + z_rm * sigma
        remove = _from_continuous(h, loss_of_y(y_lo), loss_of_y(y_hi), cdfs_remove)
        add_lo = -loss_of_y(z_add * sigma)
        add_hi = -loss_of_y(-_Z_TRUNC * sigma)
        add = _from_continuous(h, add_lo, add_hi, cdfs_add)
        return cls._build(h, remove, add, tail_mass)

    @classmethod
    def from_distributions(
        cls,
        p: npt.ArrayLike,
        q: npt.ArrayLike,
        *,
        value_discretization: float = DEFAULT_VALUE_DISCRETIZATION,
        tail_mass: float = DEFAULT_TAIL_MASS,
    ) -> PrivacyLossDistribution:
        r"""PLD of a pair of distributions on a common finite list of outputs.

        ``p`` and ``q`` are the probabilities of each output under M(D) and M(D′);
        both directions (P, Q) and (Q, P) are kept. Mass of P where Q is 0 has
        infinite loss and adds to δ in full. Missing mass (sums below 1) is treated
        pessimistically: P's is put at +∞ on the upper side.

        Parameters
        ----------
        p, q : array_like
            Non-negative, same shape, each summing to at most 1.

        Examples
        --------
        Randomised response with probability 3/4 of telling the truth is (ln 3)-DP:

        >>> pld = PrivacyLossDistribution.from_distributions([0.75, 0.25], [0.25, 0.75])
        >>> b = pld.epsilon(1e-9)
        >>> b.lower <= math.log(3) <= b.upper < math.log(3) + 1e-4
        True
        """
        h = check_value_discretization(value_discretization)
        tail_mass = check_tail_mass(tail_mass)
        pa = np.asarray(p, dtype=np.float64).ravel()
        qa = np.asarray(q, dtype=np.float64).ravel()
        if pa.shape != qa.shape or pa.size == 0:
            raise ValueError(invalid("q", f"a non-empty array of the shape of p {pa.shape}", q))
        for name, arr in (("p", pa), ("q", qa)):
            if not np.all(np.isfinite(arr)) or np.any(arr < 0) or arr.sum() > 1 + 1e-9:
                raise ValueError(invalid(name, "non-negative probabilities summing to <= 1", arr))
        missing_p = max(0.0, 1.0 - float(pa.sum()))
        missing_q = max(0.0, 1.0 - float(qa.sum()))
        remove = _pair_points(h, pa, qa, missing_p, exact=True)
        add = _pair_points(h, qa, pa, missing_q, exact=True)
        return cls._build(h, remove, add, tail_mass)

    @classmethod
    def from_discrete_gaussian(
        cls,
        sigma2: Fraction | float | int | str,
        sensitivity: int | Sequence[int] = 1,
        *,
        sample_rate: float = 1.0,
        value_discretization: float = DEFAULT_VALUE_DISCRETIZATION,
        tail_mass: float = DEFAULT_TAIL_MASS,
        extended_precision: bool = False,
    ) -> PrivacyLossDistribution:
        r"""PLD of the discrete Gaussian N_Z(0, σ²) on an integer query.

        With a sequence of integer sensitivities (one per coordinate, independent
        noise N_Z(0, σ²) on each), the privacy loss is the sum of the coordinates'
        losses (CKS Thm 14, §2.4) and the per-coordinate PLDs are composed (their FFTs
        in long double if ``extended_precision``, as in :meth:`compose`). With
        ``sample_rate`` q < 1 (one coordinate only) the pair is the Poisson-subsampled
        one, (1 − q)N_Z(0, σ²) + qN_Z(Δ, σ²) against N_Z(0, σ²), both directions.

        Examples
        --------
        >>> from gaussdp.privacy import DiscreteGaussianDistribution  # CKS Thm 7
        >>> b = PrivacyLossDistribution.from_discrete_gaussian(4).delta(1.0)
        >>> b.lower <= DiscreteGaussianDistribution(4).delta(1.0) <= b.upper
        True
        """
        s2 = check_fraction("sigma2", sigma2)
        h = check_value_discretization(value_discretization)
        tail_mass = check_tail_mass(tail_mass)
        rate = _check_rate(sample_rate)
        if isinstance(sensitivity, Sequence):
            if len(sensitivity) == 0:
                raise ValueError(invalid("sensitivity", "a non-empty sequence", sensitivity))
            deltas = [check_int("sensitivity", s, minimum=0) for s in sensitivity]
        else:
            deltas = [check_int("sensitivity", sensitivity, minimum=1)]
        deltas = [d for d in deltas if d != 0]
        if not deltas:
            raise ValueError(invalid("sensitivity", "not all zero", sensitivity))
        if rate < 1.0 and len(deltas) > 1:
            raise ValueError(invalid("sample_rate", "1 for a vector sensitivity", sample_rate))
        result: PrivacyLossDistribution | None = None
        for d in sorted(set(deltas)):
            _, p, q, missing = _discrete_gaussian_points(s2, d)
            one = cls._from_shift_pair(h, p, q, missing, rate, tail_mass)
            ext = extended_precision
            one = one.self_compose(deltas.count(d), extended_precision=ext)
            result = one if result is None else result.compose(one, extended_precision=ext)
        if result is None:  # pragma: no cover - deltas is non-empty
            raise ValueError(invalid("sensitivity", "not all zero", sensitivity))
        return result

    @classmethod
    def from_discrete_gaussian_worst_case(
        cls,
        sigma2: Fraction | float | int | str,
        sensitivities: Sequence[Sequence[int]],
        *,
        value_discretization: float = DEFAULT_VALUE_DISCRETIZATION,
        tail_mass: float = DEFAULT_TAIL_MASS,
    ) -> PrivacyLossDistribution:
        r"""A PLD dominating N_Z(0, σ²) noise on every one of several sensitivity vectors.

        For a vector query whose neighbouring answers may differ by any of the integer
        vectors in ``sensitivities`` (independent N_Z(0, σ²) noise per coordinate,
        CKS Thm 14), one run is (ε, δ)-DP iff δ ≥ max_v δ_v(ε). Composing that
        maximum needs a *dominating pair* (Zhu, Dong & Wang 2022): a pair whose
        hockey-stick curve H(x) = E_P[(1 − x e^{−L})₊] lies above every candidate's, for
        every x = e^ε ≥ 0 (also ε < 0, which matters under composition). Dominance is
        preserved by (adaptive) composition, so any number of runs, each with its own
        vector, is bounded by the composition of the dominating pair.

        The upper side is such a pair: the chord interpolation, at the grid points
        x_i = e^{ih}, of the upper envelope max_v H_v of the candidates' certified upper
        curves (each piecewise linear between grid points, so the interpolation is
        above all of them), turned back into masses (see ``_envelope``). At the grid
        points its δ equals the largest candidate upper bound. The lower side is one
        realisable candidate's lower PMF (the one with the largest mean privacy loss,
        i.e. KL divergence, which decides long compositions), so ``lower`` stays a
        valid lower bound under composition but need not be the best one.

        Parameters
        ----------
        sigma2 : Fraction, int, float or str
            σ² > 0 of every coordinate.
        sensitivities : sequence of sequence of int
            The candidate sensitivity vectors (non-negative integers, each with a
            positive entry), e.g. :attr:`~gaussdp.accounting.events.DiscreteGaussianL2.candidates`.

        Examples
        --------
        >>> pld = PrivacyLossDistribution.from_discrete_gaussian_worst_case(4, [(2,), (1, 1, 1)])
        >>> one = [PrivacyLossDistribution.from_discrete_gaussian(4, v) for v in ([2], [1, 1, 1])]
        >>> pld.delta(1.0).upper >= max(p.delta(1.0).upper for p in one)
        True
        """
        candidates = cls._worst_case_candidates(
            sigma2, sensitivities, value_discretization, tail_mass
        )
        if len(candidates) == 1:
            return candidates[0]
        # Both directions of every candidate (the same object when symmetric).
        uppers = {id(u): u for c in candidates for u in (c.upper_remove, c.upper_add)}
        upper = _envelope(list(uppers.values()))
        # Lower: one realisable candidate, the one with the largest KL divergence.
        best = max(candidates, key=lambda c: _mean_loss(c.lower_remove))
        return cls(
            best.value_discretization,
            upper,
            upper,
            best.lower_remove,
            best.lower_add,
            best.tail_mass,
        )

    @classmethod
    def _worst_case_candidates(
        cls,
        sigma2: Fraction | float | int | str,
        sensitivities: Sequence[Sequence[int]],
        value_discretization: float,
        tail_mass: float,
    ) -> list[PrivacyLossDistribution]:
        """One PLD per distinct vector (|v_j| sorted, zeros dropped), sharing the parts."""
        s2 = check_fraction("sigma2", sigma2)
        h = check_value_discretization(value_discretization)
        tail_mass = check_tail_mass(tail_mass)
        if isinstance(sensitivities, (str, bytes)) or not isinstance(sensitivities, Sequence):
            raise TypeError(
                invalid("sensitivities", "a sequence of integer vectors", sensitivities)
            )
        vectors: list[tuple[int, ...]] = []
        for v in sensitivities:
            if isinstance(v, (str, bytes)) or not isinstance(v, Sequence):
                raise TypeError(invalid("sensitivities", "a sequence of integer vectors", v))
            parts = tuple(sorted((abs(check_int("sensitivities", a)) for a in v), reverse=True))
            parts = tuple(a for a in parts if a)
            if not parts:
                raise ValueError(invalid("sensitivities", "vectors with a positive entry", v))
            vectors.append(parts)
        if not vectors:
            raise ValueError(invalid("sensitivities", "a non-empty sequence", sensitivities))
        vectors = sorted(set(vectors))
        # One PLD per coordinate shift a, and per (a, multiplicity): shared by candidates.
        single: dict[int, PrivacyLossDistribution] = {}
        powers: dict[tuple[int, int], PrivacyLossDistribution] = {}
        candidates: list[PrivacyLossDistribution] = []
        for v in vectors:
            total: PrivacyLossDistribution | None = None
            for a in sorted(set(v)):
                m = v.count(a)
                if (a, m) not in powers:
                    if a not in single:
                        _, p, q, missing = _discrete_gaussian_points(s2, a)
                        single[a] = cls._from_shift_pair(h, p, q, missing, 1.0, tail_mass)
                    powers[a, m] = single[a].self_compose(m)
                part = powers[a, m]
                total = part if total is None else total.compose(part)
            if total is None:  # pragma: no cover - every vector has a positive part
                raise ValueError(invalid("sensitivities", "vectors with a positive entry", v))
            candidates.append(total)
        return candidates

    @classmethod
    def from_approx_dp(
        cls,
        epsilon: float,
        delta: float = 0.0,
        *,
        value_discretization: float | None = None,
        tail_mass: float = DEFAULT_TAIL_MASS,
    ) -> PrivacyLossDistribution:
        r"""The worst-case PLD of an (ε, δ)-DP mechanism (δ = 0: pure ε-DP).

        Every (ε, δ)-DP pair is dominated by the randomised-response-like pair
        P = (δ, (1 − δ)e^ε/(1 + e^ε), (1 − δ)/(1 + e^ε), 0) and Q its mirror image
        (Kairouz, Oh, Viswanath 2017, Thm 2.1 / Murtagh, Vadhan 2016): its loss is +∞
        with mass δ, +ε with mass (1 − δ)e^ε/(1 + e^ε) and −ε with the rest, and both
        neighbouring directions are the same. Composing k copies gives the optimal
        k-fold composition bound (KOV Thm 3.3). With the default step h = ε both atoms
        lie on the grid (of 3 points), and the k-fold result is exact up to the
        round-off allowance; composed with other events, give their common step.

        Examples
        --------
        >>> pld = PrivacyLossDistribution.from_approx_dp(0.5, 1e-6).self_compose(10)
        >>> round(pld.delta(1.0).upper, 6)  # KOV Thm 3.3 with i = 4: 0.3316851...
        0.331685
        """
        eps = check_epsilon("epsilon", epsilon)
        if not math.isfinite(eps):
            raise ValueError(invalid("epsilon", "finite", epsilon))
        d = float(delta)
        if isinstance(delta, bool) or not 0.0 <= d < 1.0:
            raise ValueError(invalid("delta", "in [0, 1)", delta))
        if value_discretization is None:
            h = eps if eps > 0 else DEFAULT_VALUE_DISCRETIZATION
        else:
            h = check_value_discretization(value_discretization)
        tail_mass = check_tail_mass(tail_mass)
        a = 1.0 / (1.0 + math.exp(-eps))  # e^ε/(1 + e^ε)
        losses = np.array([eps, -eps])
        probs = np.array([(1.0 - d) * a, (1.0 - d) * (1.0 - a)])
        # The mass δ at +∞ is exact: kept on both sides (off the grid, which stays
        # [−ε, ε]).
        return cls._build(h, _from_points(h, losses, probs, d, d), None, tail_mass)

    @classmethod
    def from_discrete_laplace(
        cls,
        scale: Fraction | float | int | str,
        sensitivity: int = 1,
        *,
        sample_rate: float = 1.0,
        value_discretization: float = DEFAULT_VALUE_DISCRETIZATION,
        tail_mass: float = DEFAULT_TAIL_MASS,
    ) -> PrivacyLossDistribution:
        r"""PLD of the discrete Laplace mechanism (pmf ∝ e^{−|x|/t}) with sensitivity Δ.

        Without subsampling the loss (|y − Δ| − |y|)/t takes finitely many values:
        Δ/t with mass 1/(1 + r), −Δ/t with mass r^Δ/(1 + r), and (Δ − 2y)/t for
        0 < y < Δ, with r = e^{−1/t} (CKS §4); nothing is truncated.

        Examples
        --------
        >>> b = PrivacyLossDistribution.from_discrete_laplace(2).epsilon(1e-6)
        >>> b.lower <= b.upper <= 0.5
        True
        """
        t = check_fraction("scale", scale)
        d = check_int("sensitivity", sensitivity, minimum=1)
        h = check_value_discretization(value_discretization)
        tail_mass = check_tail_mass(tail_mass)
        rate = _check_rate(sample_rate)
        if rate < 1.0:
            _, p, q, missing = _discrete_laplace_points(t, d)
            return cls._from_shift_pair(h, p, q, missing, rate, tail_mass)
        inv_t = 1.0 / float(t)
        r = math.exp(-inv_t)
        norm = math.tanh(inv_t / 2)
        ys_mid = np.arange(1, d, dtype=np.float64)
        losses = np.concatenate(([d * inv_t, -d * inv_t], (d - 2 * ys_mid) * inv_t))
        probs = np.concatenate(
            ([1 / (1 + r), math.exp(-d * inv_t) / (1 + r)], norm * np.exp(-ys_mid * inv_t))
        )
        pair = _from_points(h, losses.astype(np.float64), probs.astype(np.float64), 0.0)
        return cls._build(h, pair, None, tail_mass)

    @classmethod
    def _from_shift_pair(
        cls,
        h: float,
        p: FloatArray,
        q: FloatArray,
        missing: float,
        rate: float,
        tail_mass: float,
    ) -> PrivacyLossDistribution:
        """Symmetric pair (p, q) of a noise and its shift; Poisson-subsampled if rate < 1."""
        if rate == 1.0:
            return cls._build(h, _pair_points(h, p, q, missing), None, tail_mass)
        # Koskela et al. 2021: remove = ((1 − q)P0 + qPΔ, P0); add = the reverse pair.
        mix = (1.0 - rate) * p + rate * q
        remove = _pair_points(h, mix, p, missing)
        add = _pair_points(h, p, mix, missing)
        return cls._build(h, remove, add, tail_mass)

    # -- composition ------------------------------------------------------------------
    def compose(
        self, other: PrivacyLossDistribution, *, extended_precision: bool = False
    ) -> PrivacyLossDistribution:
        """The PLD of running both mechanisms on the same data (convolution by FFT).

        ``extended_precision``: FFTs in long double (about 4× slower); the round-off
        allowance shrinks by 2¹¹ on x86 (docs/accounting.md §3), which matters at small δ.
        Ignored where long double is not an IEEE format (double-double on ppc64le),
        for which the round-off lemmas are not proven.

        Examples
        --------
        >>> g = PrivacyLossDistribution.from_gaussian(2.0)
        >>> g.compose(g).delta(1.0).upper >= g.delta(1.0).upper
        True
        """
        if not isinstance(other, PrivacyLossDistribution):
            raise TypeError(invalid("other", "a PrivacyLossDistribution", other))
        if other.value_discretization != self.value_discretization:
            raise ValueError(
                invalid(
                    "other.value_discretization",
                    f"equal to {self.value_discretization!r}",
                    other.value_discretization,
                )
            )
        tm = max(self.tail_mass, other.tail_mass)
        ext = bool(extended_precision) and EXTENDED_PROVEN
        ur = self.upper_remove.compose(other.upper_remove, tm, ext)
        lr = self.lower_remove.compose(other.lower_remove, tm, ext)
        both = self.symmetric and other.symmetric
        ua = ur if both else self.upper_add.compose(other.upper_add, tm, ext)
        la = lr if both else self.lower_add.compose(other.lower_add, tm, ext)
        return PrivacyLossDistribution(self.value_discretization, ur, ua, lr, la, tm)

    def self_compose(
        self, count: int, *, extended_precision: bool = False
    ) -> PrivacyLossDistribution:
        """The PLD of ``count`` independent runs of this mechanism (Fourier powering).

        ``extended_precision``: as in :meth:`compose`. Raises
        :class:`~gaussdp.accounting._adaptive.GridTooLargeError` (a ``ValueError``) where
        the powers, or the queries of the result, would not fit the memory bound
        (docs/accounting.md, "Memory"); use a coarser ``value_discretization``.

        Examples
        --------
        >>> from gaussdp.privacy import gdp_epsilon
        >>> g = PrivacyLossDistribution.from_gaussian(10.0).self_compose(100)
        >>> b = g.epsilon(1e-5)     # exactly one Gaussian with μ = 1
        >>> b.lower <= gdp_epsilon(1.0, 1e-5) <= b.upper
        True
        """
        count = check_count("count", count)
        if count == 1:
            return self
        tm = self.tail_mass
        ext = bool(extended_precision) and EXTENDED_PROVEN
        # The memory check of each power counts this PLD's PMFs and the powers made.
        held = self._values()
        ur = self.upper_remove.self_compose(count, tm, ext, held)
        held += ur.probs.size
        lr = self.lower_remove.self_compose(count, tm, ext, held)
        held += lr.probs.size
        ua = ur if self.symmetric else self.upper_add.self_compose(count, tm, ext, held)
        held += 0 if self.symmetric else ua.probs.size
        la = lr if self.symmetric else self.lower_add.self_compose(count, tm, ext, held)
        held += 0 if self.symmetric else la.probs.size
        # Its queries then hold the ε(δ) search's suffix sums over the top of a PMF
        # (QUERY_ARRAYS arrays of the largest): a PLD whose queries would not fit is
        # refused here, before any query (and coarsened by the automatic policy).
        largest = max(ur.probs.size, lr.probs.size, ua.probs.size, la.probs.size)
        check_grid_points(points_of_values(held + QUERY_ARRAYS * largest))
        return PrivacyLossDistribution(self.value_discretization, ur, ua, lr, la, tm)

    def _values(self) -> int:
        """The float64 values of the (distinct) PMFs of this PLD."""
        pmfs = {id(pmf): pmf for pmf in (self.upper_remove, self.upper_add)}
        pmfs.update({id(pmf): pmf for pmf in (self.lower_remove, self.lower_add)})
        return sum(pmf.probs.size for pmf in pmfs.values())

    def regridded(self, value_discretization: float) -> PrivacyLossDistribution:
        r"""The same bounds on another grid step (for a PLD whose losses lie on a coarse
        lattice, e.g. a discrete mechanism self-composed on its own lattice).

        Each upper PMF, a discrete pair, is discretised again by connect the dots: its
        curve lies above the old one, so it still dominates; the old δ allowance is
        carried as an additive term (an extra mass at +∞). Each lower PMF gets the
        tangent-corrected lower discretisation of the old one: its curve lies below the
        old one, and the old allowance is subtracted as before. So the new bounds hold
        wherever the old ones held (docs/accounting.md, "Lattices first").

        Examples
        --------
        Three runs of the discrete Laplace mechanism with t = 2, whose losses are
        multiples of 1/2, composed on that lattice (exact up to round-off) and then
        moved to a grid that other events may share:

        >>> lat = PrivacyLossDistribution.from_discrete_laplace(2, value_discretization=0.5)
        >>> exact = lat.self_compose(3).delta(0.7)
        >>> b = lat.self_compose(3).regridded(0.01).delta(0.7)
        >>> b.lower <= exact.lower <= exact.upper <= b.upper
        True
        """
        h = check_value_discretization(value_discretization)
        if h == self.value_discretization:
            return self
        ur = _regrid(self.upper_remove, h)
        lr = _regrid(self.lower_remove, h)
        ua = ur if self.upper_add is self.upper_remove else _regrid(self.upper_add, h)
        la = lr if self.lower_add is self.lower_remove else _regrid(self.lower_add, h)
        return PrivacyLossDistribution(h, ur, ua, lr, la, self.tail_mass)

    @property
    def symmetric(self) -> bool:
        """True when both neighbouring directions are the same PMFs (half the work)."""
        return self.upper_add is self.upper_remove and self.lower_add is self.lower_remove

    # -- queries ----------------------------------------------------------------------
    @property
    def largest_grid(self) -> int:
        """The number of points of the largest of the four discretised PMFs."""
        return max(
            pmf.probs.size
            for pmf in (self.upper_remove, self.upper_add, self.lower_remove, self.lower_add)
        )

    @property
    def largest_finite_loss(self) -> float:
        """The largest loss on the grid of the four PMFs: δ(ε) is constant beyond it."""
        return max(
            (pmf.start + pmf.probs.size - 1) * pmf.h
            for pmf in (self.upper_remove, self.upper_add, self.lower_remove, self.lower_add)
        )

    def loss_masses(self, *, upper: bool, remove: bool) -> LossMasses:
        """The discretised losses and masses of one side (``upper``: the certified one)
        and one neighbouring direction (``remove`` or add), with its δ allowance."""
        if upper:
            pmf = self.upper_remove if remove else self.upper_add
        else:
            pmf = self.lower_remove if remove else self.lower_add
        masses = pmf.probs.view()
        masses.flags.writeable = False  # the PMF (and the sums its queries keep) is fixed
        return LossMasses(pmf.losses, masses, pmf.inf_mass, pmf.allowance, pmf.upper)

    def without_allowances(self) -> PrivacyLossDistribution:
        """The same PLD with its additive δ allowances (round-off, wrapped mass) set to 0
        (the mass at +∞ is kept): not certified, only used to tell the discretisation
        error from the allowances when choosing a grid. Its ε(δ) is the closed form on
        the grid, not checked against the directly summed δ (within about 10⁻¹²
        relative of it), from the sums its original keeps (the same masses)."""

        def bare(pmf: _LossPMF) -> _LossPMF:
            return _LossPMF(
                pmf.h, pmf.start, pmf.probs, pmf.inf_mass, 0.0, pmf.upper, 0.0, False, pmf.tops
            )

        return PrivacyLossDistribution(
            self.value_discretization,
            bare(self.upper_remove),
            bare(self.upper_add),
            bare(self.lower_remove),
            bare(self.lower_add),
            self.tail_mass,
        )

    def delta(self, epsilon: float) -> DeltaBounds:
        """Bounds on the smallest δ at ``epsilon`` (max over both directions).

        Examples
        --------
        >>> PrivacyLossDistribution.from_gaussian(1.0).delta(0.0).upper >= 0.3829
        True
        """
        epsilon = check_epsilon("epsilon", epsilon)
        upper = max(self.upper_remove.delta(epsilon), self.upper_add.delta(epsilon))
        lower = max(self.lower_remove.delta(epsilon), self.lower_add.delta(epsilon))
        return DeltaBounds(lower=min(lower, upper), upper=upper)

    def epsilon(self, delta: float) -> EpsilonBounds:
        """Bounds on the smallest ε at ``delta`` (max over both directions).

        ``upper`` is ``inf`` when the δ allowances alone exceed ``delta``.

        Examples
        --------
        >>> b = PrivacyLossDistribution.from_gaussian(1.0).epsilon(1e-5)
        >>> round(b.upper, 3)
        4.377
        """
        delta = check_delta("delta", delta)
        upper = _either_epsilon(self.upper_remove, self.upper_add, delta)
        lower = _either_epsilon(self.lower_remove, self.lower_add, delta)
        return EpsilonBounds(lower=min(lower, upper), upper=upper)


def _either_epsilon(first: _LossPMF, second: _LossPMF, delta: float) -> float:
    """max(first.epsilon(δ), second.epsilon(δ)) of one side, or ε₁ = first.epsilon(δ) alone
    where ``second``'s δ at ε₁ already places its ε on the right side of ε₁.

    Upper side: second.delta(ε₁) ≤ δ is the certified δ of that direction at ε₁, so ε₁
    is a proven upper bound for it too, and ε₁ ≤ the max (equal up to the search's
    resolution). Lower side: second.delta(ε₁) < δ puts second's lower bound (the largest
    ε with δ(ε) ≥ δ, δ(ε) non-increasing) below ε₁, and ε₁ alone is a valid lower bound
    anyway (the max of the directions is at least either). One δ sum (CKS Lemma 9)
    instead of a search over second's grid (DP-SGD reference: 3 % of the query).
    Uncertified PMFs (``checked`` false: grid choice only) take both searches.
    """
    eps = first.epsilon(delta)
    if first.checked and second.checked and math.isfinite(eps):
        d = second.delta(eps)
        if d <= delta if first.upper else d < delta:
            return eps
    return max(eps, second.epsilon(delta))


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
def check_value_discretization(value: object) -> float:
    """Return ``value`` as a grid step h in (0, 1] nats, else raise with the shared template."""
    h = check_positive("value_discretization", value)
    if h > 1.0:
        raise ValueError(invalid("value_discretization", "in (0, 1]", value))
    return h


def check_tail_mass(value: object) -> float:
    """Return ``value`` as a tail mass in (0, 1e-6), else raise with the shared template."""
    t = check_positive("tail_mass", value)
    if t >= 1e-6:
        raise ValueError(invalid("tail_mass", "in (0, 1e-6)", value))
    return t


def _check_rate(value: object) -> float:
    constraint = "a real number in (0, 1]"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, Fraction)):
        raise TypeError(invalid("sample_rate", constraint, value))
    q = float(value)
    if not 0.0 < q <= 1.0:  # also rejects NaN
        raise ValueError(invalid("sample_rate", constraint, value))
    return q


def check_discrete_gaussian_support(sigma2: Fraction, sensitivity: int) -> None:
    """Refuse a discrete Gaussian pair whose PLD cannot be built, naming the parameter at fault.

    The PLD of N_Z(0, σ²) against N_Z(Δ, σ²) lists the outputs |y| ≤ ⌈10σ⌉ + Δ + 2
    (at most :data:`_MAX_POINTS` of them) and needs σ² in the distribution's range
    [1e-12, 1e300]. The accountants ask this before composing (``supports`` and
    ``compose`` refuse what a query would), the constructions before building.

    Raises
    ------
    ValueError
        Naming ``sigma2`` (outside its range, or too large to list) or ``sensitivity``
        (too large to list at this σ²).
    """
    DiscreteGaussianDistribution(sigma2)  # σ² in [1e-12, 1e300], else ValueError naming it
    half = math.ceil(_Z_TRUNC * math.sqrt(sigma2)) + 2
    if 2 * (half + 1) + 1 > _MAX_POINTS:  # too many points even for Δ = 1
        # ⌈10σ⌉ ≤ (M − 1)//2 − 3 iff σ² ≤ (((M − 1)//2 − 3)/10)², rounded down.
        limit = math.floor(Fraction((_MAX_POINTS - 1) // 2 - 3, int(_Z_TRUNC)) ** 2)
        raise ValueError(invalid("sigma2", f"at most {limit} for PLD accounting", sigma2))
    if 2 * (half + sensitivity) + 1 > _MAX_POINTS:
        most = (_MAX_POINTS - 1) // 2 - half
        constraint = f"at most {most} for PLD accounting with sigma2 = {float(sigma2):.6g}"
        raise ValueError(invalid("sensitivity", constraint, sensitivity))


def _discrete_gaussian_points(
    s2: Fraction, d: int
) -> tuple[FloatArray, FloatArray, FloatArray, float]:
    """Outputs y, P-masses, Q-masses of N_Z(0, σ²) vs N_Z(Δ, σ²), and the un-listed P-mass.

    CKS Def 1: P[Y = y] = e^{−y²/(2σ²)}/Z(σ²), with Z from
    :meth:`gaussdp.privacy.DiscreteGaussianDistribution.log_normalizer`.
    """
    check_discrete_gaussian_support(s2, d)
    bound = math.ceil(_Z_TRUNC * math.sqrt(s2)) + d + 2
    log_norm = DiscreteGaussianDistribution(s2).log_normalizer()
    fs2 = float(s2)
    ys = np.arange(-bound, bound + 1, dtype=np.float64)
    p = np.exp(-(ys**2) / (2 * fs2) - log_norm)
    q = np.exp(-((ys - d) ** 2) / (2 * fs2) - log_norm)
    # Mass of |y| > bound: at most 2 e^{−bound²/(2σ²)}/(1 − e^{−bound/σ²}) / Z (geometric tail).
    log_tail = -(bound**2) / (2 * fs2) - log_norm - math.log(-math.expm1(-bound / fs2))
    missing = 2 * math.exp(log_tail) if log_tail > -745 else 0.0
    return ys, p, q, missing


def _discrete_laplace_points(
    t: Fraction, d: int
) -> tuple[FloatArray, FloatArray, FloatArray, float]:
    """Outputs, P-masses, Q-masses of DLap(t) vs Δ + DLap(t), outputs −B..B+Δ, and the rest.

    CKS §4: P[Y = y] = tanh(1/(2t)) e^{−|y|/t}.
    """
    inv_t = 1.0 / float(t)
    bound = math.ceil(60.0 * float(t)) + d + 2
    if 2 * bound + 1 > _MAX_POINTS:
        raise ValueError(invalid("scale", "at most 3e4 for PLD accounting", t))
    ys = np.arange(-bound, bound + 1, dtype=np.float64)
    c = math.tanh(inv_t / 2)
    p = c * np.exp(-np.abs(ys) * inv_t)
    q = c * np.exp(-np.abs(ys - d) * inv_t)
    missing = 2 * c * math.exp(-(bound + 1) * inv_t) / -math.expm1(-inv_t)
    return ys, p, q, missing


def _mean_loss(pmf: _LossPMF) -> float:
    """E_P[L] of a finite PMF (the KL divergence of its pair), +∞ with mass at +∞."""
    if pmf.inf_mass > 0:
        return math.inf
    return float(np.sum(pmf.probs * pmf.losses))


def _envelope(pmfs: Sequence[_LossPMF]) -> _LossPMF:
    r"""An upper PMF whose hockey-stick curve lies above every one of ``pmfs`` (upper side).

    Write H_v(x) = Σ_j p_j (1 − x e^{−t_j})₊ + p_∞ for x = e^ε ≥ 0 (CKS Lemma 9 on a
    discrete PLD): convex, decreasing, linear between the grid points x_i = e^{t_i}
    and on [0, x_lo] below every candidate's support. Let E_i = max_v H_v(x_i) and
    E(0) = max_v H_v(0) (the total masses). The chord interpolation C of E at 0 and the
    x_i (constant = max_v p_∞,v beyond the top) is convex, and C ≥ H_v everywhere:
    on each interval H_v is linear, so below the chord of its own endpoint values,
    which are ≤ E. C is the curve of the PMF with mass x_i·(b_{i−1} − b_i) at t_i,
    b_i the slope magnitude of C on [x_i, x_{i+1}] (b_{−1} on [0, x_lo], b_top = 0),
    and p_∞ = E_top: a measure, so (with its implied Q-masses p_i e^{−t_i}) a pair that
    dominates every candidate, and dominance survives composition (Zhu, Dong & Wang
    2022).

    The second differences are taken in extended precision (``np.longdouble``). The
    result is then *verified*: its curve is recomputed at 0 and every x_i, and all
    masses are scaled by r·(1 + 1e-12), r = max_i E_i/C_i, if some C_i falls short —
    raising a mass raises the whole curve, so the scaled PMF still dominates. A
    candidate's δ allowance c (``slack`` + ``fft_l1``) is an additive term: H_v + c is
    the curve of the pair with an extra P-mass c at +∞, so the envelope is taken of
    these curves (tighter than adding the largest allowance everywhere).
    """
    h = pmfs[0].h
    i_lo = min(p.start for p in pmfs)
    i_hi = max(p.start + p.probs.size - 1 for p in pmfs)
    n = i_hi - i_lo + 1
    check_grid_points(n, extended=True)  # its arrays are long double
    ld = np.longdouble
    t = np.arange(i_lo, i_hi + 1, dtype=ld) * ld(h)
    env = np.zeros(n, dtype=ld)
    at_zero = ld(0)
    inf_top = 0.0
    for pmf in pmfs:
        p = pmf.probs.astype(ld)
        lo = pmf.start - i_lo
        hi = lo + p.size
        tz = t[lo:hi]
        # Suffix sums over j > i of p_j and p_j e^{−t_j}: H(x_i) = S1_i − x_i S2_i.
        s1 = np.concatenate((np.cumsum(p[::-1])[::-1][1:], [ld(0)]))
        s2 = np.concatenate((np.cumsum((p * np.exp(-tz))[::-1])[::-1][1:], [ld(0)]))
        # The allowance c is an additive δ term: H + c is the curve of the pair with an
        # extra P-mass c at +∞, so it is folded into the envelope as such. The finite
        # part gets the candidate's round-off margin, so that the envelope's δ is at least
        # each candidate's reported δ.
        extra = ld(pmf.inf_mass) + ld(pmf.allowance)
        margin = ld(1.0 + _REL_MARGIN)
        curve = np.maximum(s1 - np.exp(tz) * s2, ld(0)) * margin + extra
        total = np.sum(p) * margin + extra
        env[lo:hi] = np.maximum(env[lo:hi], curve)
        # Below the support the curve is linear: total − x·(Q-mass).
        if lo > 0:
            q_mass = np.sum(p * np.exp(-tz))
            env[:lo] = np.maximum(env[:lo], total - np.exp(t[:lo]) * q_mass * margin)
        # Above the support it is the mass at +∞.
        env[hi:] = np.maximum(env[hi:], extra)
        at_zero = max(at_zero, total)
        inf_top = max(inf_top, float(extra))
    x = np.exp(t)
    # Slope magnitudes: b_{−1} on [0, x_0], b_i on [x_i, x_{i+1}], b_top = 0.
    slopes = np.empty(n + 1, dtype=ld)
    slopes[0] = (at_zero - env[0]) / x[0]
    slopes[1:-1] = (env[:-1] - env[1:]) / (x[1:] - x[:-1])
    slopes[-1] = ld(0)
    masses = np.maximum(x * (slopes[:-1] - slopes[1:]), ld(0))
    inf_mass = float(env[-1])
    out = np.nextafter(masses.astype(np.float64), np.inf)  # rounded up
    inf_mass = math.nextafter(max(inf_mass, inf_top), math.inf)
    # Verify: the curve of ``out`` at 0 and at every x_i, against the envelope.
    o = out.astype(ld)
    c1 = np.concatenate((np.cumsum(o[::-1])[::-1][1:], [ld(0)]))
    c2 = np.concatenate((np.cumsum((o * np.exp(-t))[::-1])[::-1][1:], [ld(0)]))
    built = np.maximum(c1 - x * c2, ld(0)) + ld(inf_mass)
    ratio = 1.0
    short = (env > built) & (built > 0)
    if np.any(short):
        ratio = float(np.max(env[short] / built[short]))
    # Where the built curve is 0 but the envelope is not (not seen in practice), the
    # envelope's value is added to the δ allowance instead.
    allowance = float(np.max(np.where(built > 0, ld(0), env)))
    built_zero = np.sum(o) + ld(inf_mass)
    if at_zero > built_zero:
        ratio = max(ratio, float(at_zero / built_zero))
    if ratio > 1.0:
        scale = ratio * (1.0 + 1e-12)
        out = out * scale
        inf_mass = inf_mass * scale
    return _LossPMF(h, i_lo, out, inf_mass, allowance, True)


def subsampled_discrete_laplace_runs(
    scale: Fraction | float | int | str,
    sample_rate: float,
    count: int,
    *,
    value_discretization: float = DEFAULT_VALUE_DISCRETIZATION,
    tail_mass: float = DEFAULT_TAIL_MASS,
    extended_precision: bool = False,
) -> PrivacyLossDistribution:
    r"""``count`` runs of Poisson-subsampled DLap(t) with sensitivity 1, composed on
    the lattice of their two losses and moved to the grid once.

    With r = e^{−1/t}, P0[Y ≥ 1] = r/(1 + r) =: H and P0[Y ≤ 0] = 1/(1 + r) =: F (CKS
    §4), the remove pair ((1 − q)P0 + qP1, P0) has loss a = ln(1 − q + qr) on y ≤ 0
    (P-mass (1 − q)F + qH) and b = ln(1 − q + q/r) on y ≥ 1 (mass (1 − q)H + qF); the
    add pair has −b (mass H) and −a (mass F). So every run's loss is lo + {0, s},
    s = hi − lo, and k runs' is k·lo + j·s: composed on the lattice of step s (both
    bounds exact up to round-off, :func:`_power`), then moved to ``value_discretization``
    as :meth:`PrivacyLossDistribution.regridded` does, with the shift k·lo added back
    (δ at ε of L + c is δ of L at ε − c). On the grid directly every run's two atoms fall between
    grid points and the lower bound loses O(h) per run: 1000 runs of t = 5, q = 0.01
    gave δ(0.2) ≥ (1 − 4.4·10⁻³)·exact at h ≈ 10⁻⁶. The losses are rounded up on the
    upper side and down on the lower (δ(ε) grows with every loss). For t ≥ 1 and
    q ≤ 1/2, where a and b are computed to 11u relative (below).
    """
    t = check_fraction("scale", scale)
    rate = _check_rate(sample_rate)
    if t < 1 or rate > 0.5:
        raise ValueError(invalid("scale and sample_rate", "t >= 1 and q <= 1/2", (t, rate)))
    count = check_count("count", count)
    h = check_value_discretization(value_discretization)
    tail_mass = check_tail_mass(tail_mass)
    ext = bool(extended_precision) and EXTENDED_PROVEN
    inv_t = 1.0 / float(t)
    r = math.exp(-inv_t)
    f_mass, h_mass = 1.0 / (1.0 + r), r / (1.0 + r)
    a = math.log1p(rate * math.expm1(-inv_t))  # < 0
    b = math.log1p(rate * math.expm1(inv_t))  # > 0
    remove = (a, b, (1 - rate) * f_mass + rate * h_mass, (1 - rate) * h_mass + rate * f_mass)
    add = (-b, -a, h_mass, f_mass)
    sides: list[_LossPMF] = []
    for upper in (True, False):
        for lo, hi, m_lo, m_hi in (remove, add):
            sides.append(_two_point_runs(lo, hi, m_lo, m_hi, count, h, upper, tail_mass, ext))
    ur, ua, lr, la = sides
    return PrivacyLossDistribution(h, ur, ua, lr, la, tail_mass)


def _two_point_runs(
    lo: float,
    hi: float,
    m_lo: float,
    m_hi: float,
    count: int,
    h: float,
    upper: bool,
    tail_mass: float,
    extended: bool,
) -> _LossPMF:
    """One side of ``count`` runs of a loss that is ``lo`` (P-mass ``m_lo``) or ``hi``
    (``m_hi``), computed to a few units in the last place: composed on the lattice
    lo + {0, s}, moved to step ``h`` (:func:`subsampled_discrete_laplace_runs`).

    The true losses are within 11u relative of ``lo`` and ``hi``: x = ±1/t (≤ 1 in
    size) is within 2u, expm1(x) then within (|x|e^x/|expm1 x| ≤ 2)·2u + 2u, the
    product by q within u more, and log1p(y) for y ≥ −q(1 − e^{−1}) ≥ −0.32 multiplies
    that by at most |y|/((1 + y)|log1p y|) ≤ 1.22 and adds 2u. They are moved by
    16u|·| outwards (up on the upper side, down on the lower), with the step rounded so
    that lo + s is on the same side of hi: each run's losses, hence k·lo + j·s for every
    j, are then above (below) the truth. The shifted losses are formed in float64 (three
    roundings, each within u(|k·lo| + |j·s|)) and moved outwards by 8u(|k·lo| + |j·s|).
    """
    sign = 1.0 if upper else -1.0
    lo = lo + sign * 16.0 * _U * abs(lo)
    hi = hi + sign * 16.0 * _U * abs(hi)
    step = math.nextafter(hi - lo, sign * math.inf)
    lattice = _LossPMF(step, 0, np.array([m_lo, m_hi]), 0.0, 0.0, upper)
    runs = lattice.self_compose(count, tail_mass, extended)
    shift = count * lo
    offsets = runs.losses
    losses = offsets + shift
    losses = losses + sign * 8.0 * _U * (np.abs(offsets) + abs(shift))
    return _regrid(runs, h, losses)


def _regrid(pmf: _LossPMF, h: float, losses: FloatArray | None = None) -> _LossPMF:
    """``pmf`` discretised on grid step ``h`` on its own side (see ``regridded``);
    ``losses``: its losses, where they are not those of its own grid (shifted)."""
    keep = pmf.probs > 0
    losses = pmf.losses[keep] if losses is None else losses[keep]
    probs = pmf.probs[keep]
    allowance = add_up(pmf.slack, pmf.fft_l1)
    if losses.size == 0:  # no finite loss: only the mass at +∞ and the allowance
        return _LossPMF(h, 0, np.zeros(1), pmf.inf_mass, allowance, pmf.upper)
    if pmf.upper:
        up = _from_points(h, losses, probs, pmf.inf_mass)[0]
        # The split of each mass between two grid points is exact up to a few units in
        # the last place of each mass: raising every mass by 1e-12 relative raises the
        # curve above that (the lower side's masses are lowered by as much, _from_bins).
        raised = up.probs * (1.0 + 1e-12)
        return _LossPMF(h, up.start, raised, up.inf_mass, allowance, True)
    low = _from_points(h, losses, probs, 0.0)[1]
    return _LossPMF(h, low.start, low.probs, pmf.inf_mass, allowance, False)


def _pair_points(
    h: float, p: FloatArray, q: FloatArray, missing_p: float, exact: bool = False
) -> tuple[_LossPMF, _LossPMF]:
    """PMFs of the pair (P, Q) given on a common finite list of outputs.

    P's mass where Q is 0 has loss +∞: on the upper side with the missing mass (which
    may be anywhere), rounded up; on the lower side only where ``p`` and ``q`` are the
    pair itself (``exact``; a computed q may be 0 by underflow where the true loss is
    finite), its sum rounded down.
    """
    pos = (p > 0) & (q > 0)
    losses = np.log(p[pos]) - np.log(q[pos])
    at_inf = p[(p > 0) & (q <= 0)].tolist()
    inf_mass = add_up(*at_inf, missing_p)
    inf_low = -add_up(*(-x for x in at_inf)) if exact else 0.0
    return _from_points(h, losses, p[pos], inf_mass, inf_low)
