r"""Vectorised exact samplers: the distributions of CKS §5 Alg 2 and 3, in numpy batches.

Canonne, Kamath and Steinke (2020), §5. :func:`discrete_gaussian` returns
draws of N_Z(0, sigma2) and :func:`discrete_laplace` draws with pmf
proportional to ``exp(-|x| / scale)``, with *exactly* the distributions of CKS
Algorithms 3 and 2 (and of the scalar reference in
:mod:`gaussdp.sampling.reference`). The argument is in
``docs/sampler-exactness.md``; the section numbers below refer to it.

How a batch is drawn (σ below ``2**26``, "small path"):

1. CKS Alg 2, geometric part: the magnitude ``G`` of a discrete Laplace with
   scale ``tau`` is ``floor(-tau ln U)`` for a uniform ``U`` (inversion, §2.1).
   ``U`` is read to 52 (or, for ``t <= 256``, 31) bits; a float estimate of
   ``-tau ln U`` with a rigorous error bound decides ``G`` unless an integer
   lies within the bound (rare); those lanes are finished exactly
   (:func:`gaussdp.sampling._exact.floor_neg_log`).
2. CKS Alg 2, sign: a fair bit of the same word; ``(negative, 0)`` is rejected.
3. CKS Alg 3, acceptance: Bernoulli(exp(-gamma)) with
   ``gamma = (|Y| - sigma2/t)**2 / (2 sigma2)`` is ``U' < exp(-gamma)`` for a
   second uniform ``U'`` read to 32 bits; it is decided by integer
   comparisons with thresholds that bracket ``2**32 exp(-gamma)`` rigorously
   (§2.2), and the rare undecided lanes are finished exactly
   (:class:`gaussdp.sampling._exact.LazyUniform`). Bits are packed so that a
   candidate costs one word (``t <= 256``) or 1.5 words (§2.4).

For 2**12 <= sigma2 < 2**52 the Gaussian's candidates come instead from a discrete
ziggurat (:mod:`gaussdp.sampling._ziggurat`, §2.6): an alias table over 1022 blocks of
a step envelope, one word per candidate, about 99.4 % accepted, most by an integer
comparison; the same law.

For larger scales ("huge path": t or the Laplace scale above ``2**26``, e.g.
sigma2 = 10**100) the geometric ``floor(scale E)`` is split as ``S G + Lo``:
``G`` geometric with a scale in ``[2**20, 2**21)``, read as on the small path,
and ``Lo`` in ``[0, S)``, independent, by rejection; outputs are assembled as
64-bit limbs without Python ints (§2.3).

Up to 16 outputs (without fixed work) the small path runs the same candidates
one at a time on Python numbers, which avoids numpy's per-call overhead (§4.1).

Floating point only *brackets* probabilities; every decision is an integer
comparison whose outcome is proved by the bracket, or is made exactly.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from math import isqrt
from types import ModuleType
from typing import ClassVar, Literal, Protocol, overload

import numpy as np
import numpy.typing as npt

from gaussdp._validation import check_fraction, check_int, check_probability
from gaussdp.errors import SamplingShortfallError, invalid
from gaussdp.random import RandomSource, check_rng
from gaussdp.sampling._exact import LazyUniform, exp_neg_bounds, floor_neg_log
from gaussdp.sampling._limbs import BigIntArray
from gaussdp.sampling._ziggurat import SIGMA2_MAX, SIGMA2_MIN, Ziggurat, accepted
from gaussdp.sampling.reference import discrete_gaussian_scalar, discrete_laplace_scalar

__all__ = [
    "FixedWork",
    "SamplingShortfallError",
    "discrete_gaussian",
    "discrete_laplace",
]

IntArray = npt.NDArray[np.int64]
U64Array = npt.NDArray[np.uint64]
F64Array = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
ObjectArray = npt.NDArray[np.object_]

# §1 assumption 3: the log and exp kernels (numpy's, or torch's in the noise worker, see
# _Kernels) return results within relative error 2**-44 of the true value for normal
# results (documented worst cases are below 4 ulp ~ 2**-50).
# tests/sampling/test_sampling_exact.py::test_log_and_exp_are_within_the_assumed_error
# checks it on this platform.
_REL_ERR_LIBM = 2.0**-44
# §2.1: |v - (-tau ln u_mid)| <= |v| (REL_ERR_LIBM + 2**-51) (1 + 2**-40); 2x slack -> 2**-42.
_ETA_REL = 2.0**-42
# §2.2: |x_f - gamma| <= 2**-47 (1 + x_f) (2**-45 assumed), so with p_f = fl(exp(-x_f)),
# |2**bits (e^-gamma - p_f)| <= 2**bits (1.5 * 2**-43 (1 + 2**-44) + 2**-60); with the
# rounding of p_f 2**bits +- delta (<= 2**(bits - 52)) that is below
# delta = _BRACKET_REL 2**bits: 2x slack and more.
_BRACKET_REL = 2.0**-41
_TWO52 = 2.0**52
_TWO53 = 2.0**53
_TWO_M53 = 2.0**-53
# Scales up to this use the float-inversion geometric (§2.1); larger ones split the
# geometric in a high part read the same way and low bits (Gaussian) or use the CKS Alg 2
# decomposition (Laplace), §2.3.
_SMALL_SCALE_MAX = Fraction(2**26)
# Huge path (Gaussian and Laplace): G = floor(-tau ln U), tau = scale / 2**shift in
# [2**20, 2**21) (§2.3).
_HUGE_TAU_BITS = 21
# Outputs are int64 when the scale is at most 2**40 (so |value| >= 2**63 has probability
# below 10**-(10**6)); otherwise an object array of Python ints.
_INT64_SCALE_MAX = Fraction(2**40)
# Candidates per block: the ~45 numpy calls per block cost ~1 µs each whatever its size,
# and larger blocks spill the caches (docs §6: 16384 beat 8192 by ~10 %, 65536 lost 2x).
_CHUNK = 1 << 14
# Below this the float brackets could underflow; such (near point-mass) distributions are
# drawn with the scalar reference instead (docs §5).
_TINY_PARAM = Fraction(1, 2**60)
# Gaussian small path with t <= this packs a candidate in one word (docs §2.4).
_PACKED_T_MAX = 256
# Up to this many outputs (without fixed work) the small path runs candidate by
# candidate on Python numbers instead of numpy arrays (docs §4.1).
_FEW_MAX = 16


@dataclass(frozen=True, slots=True)
class FixedWork:
    r"""Request a fixed, data-independent amount of work for a batch.

    The sampler draws exactly :meth:`candidates` candidates for ``n`` outputs
    (a number fixed by ``n``, the distribution's parameter and
    ``delta_prime``), runs every vectorised pass over all of them, and returns
    the first ``n`` accepted. If fewer than ``n`` are accepted it raises
    :class:`SamplingShortfallError` and returns nothing.

    Parameters
    ----------
    delta_prime : float
        Upper bound on the probability of a shortfall, in ``(0, 1)``. Default
        ``2**-64``. Conditioned on no shortfall the output is exactly i.i.d.
        from the target distribution (``docs/sampler-exactness.md`` §4), so a
        shortfall costs availability, not privacy; callers who account
        conservatively add ``delta_prime`` to their reported δ.

    Examples
    --------
    >>> from gaussdp.random import ChaCha20Random
    >>> work = FixedWork(delta_prime=2**-64)
    >>> work.candidates_for_gaussian(1000, 100)
    1869
    >>> discrete_gaussian(100, 3, rng=ChaCha20Random(0), work=work)
    array([  0,  -1, -17])
    """

    delta_prime: float = 2.0**-64

    def __post_init__(self) -> None:
        check_probability("delta_prime", self.delta_prime, open_interval=True)

    def candidates(self, n: int, acceptance: float) -> int:
        """Candidates that yield ``n`` accepted with probability ``>= 1 - delta_prime``.

        ``acceptance`` is a lower bound on the per-candidate acceptance
        probability ``a``. By the Chernoff bound
        ``P[Bin(C, a) < n] <= exp(-(Ca - n)**2 / (2 Ca))`` for ``Ca >= n``, it
        suffices that ``Ca >= n + L + sqrt(L**2 + 2 n L)`` with
        ``L = ln(1/delta_prime)``.
        """
        if n == 0:
            return 0
        log_inv = -math.log(self.delta_prime)
        mean = n + log_inv + math.sqrt(log_inv * log_inv + 2.0 * n * log_inv)
        return math.ceil(mean * (1.0 + 1e-9) / acceptance) + 1

    def candidates_for_gaussian(self, n: int, sigma2: object) -> int:
        """:meth:`candidates` for ``n`` draws of N_Z(0, sigma2)."""
        return self.candidates(n, _gaussian_plan(check_fraction("sigma2", sigma2)).acceptance)

    def candidates_for_laplace(self, n: int, scale: object) -> int:
        """:meth:`candidates` for ``n`` discrete Laplace draws with this scale."""
        return self.candidates(n, _laplace_plan(check_fraction("scale", scale)).acceptance)


# ---------------------------------------------------------------------------
# Shared fast-path pieces
# ---------------------------------------------------------------------------


def _numpy_log(values: F64Array) -> None:
    np.log(values, out=values)


def _numpy_exp(values: F64Array) -> None:
    np.exp(values, out=values)


class _Kernels:
    """The in-place elementwise ``log`` and ``exp`` of the fast path (docs §1, assumption 3).

    numpy's by default (on x86-64 without AVX-512 these are the C library's scalar
    functions, ≈ 5–8 ns per value). :func:`_use_torch_kernels` switches this process to
    torch's vectorised float64 kernels (SLEEF/VML, ≈ 2–4 ns per value): the noise worker
    of DP-SGD does, where torch is installed anyway. Only the float brackets change
    (both kernels meet assumption 3, which the platform test checks), never a decision's
    law: outputs for a seed are the same except when a lane's uniform falls between the
    two kernels' bracket ends (probability ~2**-50 per candidate, docs §8).
    """

    log: ClassVar[Callable[[F64Array], None]] = _numpy_log
    exp: ClassVar[Callable[[F64Array], None]] = _numpy_exp
    #: :mod:`gaussdp.sampling._fused` once :func:`_use_fused_kernels` succeeded: the
    #: Gaussian small path's blocks then run as one compiled loop (§2.5).
    fused: ClassVar[ModuleType | None] = None


def _torch_kernels() -> tuple[Callable[[F64Array], None], Callable[[F64Array], None]] | None:
    """torch's in-place float64 ``log`` and ``exp`` on numpy arrays; None without torch."""
    try:
        import torch  # optional, and heavy: imported only where asked for
    except ImportError:
        return None
    from_numpy = torch.from_numpy

    def log(values: F64Array) -> None:
        from_numpy(values).log_()

    def exp(values: F64Array) -> None:
        from_numpy(values).exp_()

    return log, exp


def _use_torch_kernels() -> bool:
    """Compute the fast path's log and exp with torch in this process; False without torch.

    For the noise worker (:mod:`gaussdp.sampling._worker`): it also sets torch to one
    thread, since a parallel kernel on a block of candidates costs more CPU in all than
    it saves in wall time (measured here: 2 threads took 3-7x the CPU of one).
    """
    kernels = _torch_kernels()
    if kernels is None:
        return False
    import torch  # imported by _torch_kernels already

    torch.set_num_threads(1)
    _Kernels.log, _Kernels.exp = kernels
    return True


def _fused_module() -> ModuleType | None:
    """:mod:`gaussdp.sampling._fused` (the compiled block, §2.5); None without numba.

    None too (numpy's kernels stay) where numba's JIT is disabled (``NUMBA_DISABLE_JIT``:
    the kernel would run as plain Python, correct but about 100 µs per candidate) and
    where the compiled kernel fails its known-answer self-test (:func:`_fused_agrees`).
    """
    try:
        from numba import config  # only where asked for

        if config.DISABLE_JIT:  # type: ignore[attr-defined]
            return None
        from gaussdp.sampling import _fused  # imports numba: only where asked for

        # compiled (or loaded from numba's cache) here, for the types of every later call
        words, codes = np.zeros(3, dtype=np.uint64), np.empty(2, dtype=np.uint8)
        _fused.gaussian_block(words, 2, False, 2.0, 1.0, 0.125, _ETA_REL, _BRACKET_REL,
                              np.empty(2), codes)  # fmt: skip
        _fused.compact(np.empty(2), codes)
        if not _fused_agrees(_fused):
            return None
    except Exception:  # no numba, no cache directory, or a numba that cannot compile it
        return None
    return _fused


def _fused_agrees(fused: ModuleType) -> bool:
    """The compiled kernel's known-answer self-test, against numpy's kernels.

    Its ``log`` and ``exp`` at a few points within 2**-46 (relative) of numpy's (both are
    within 2**-47 of the truth, §2.5), 0 below the exp's floor, its scalar ``exp_one``
    equal to its ``exp_into`` at the same points, and one seeded block of
    each word layout equal to the numpy passes' block (the same decisions on the same
    words). A compiler that broke the kernel's arithmetic fails here, before any draw.
    """
    from gaussdp.random import ChaCha20Random  # a fixed seed: the values are compared only

    odd = np.array([1.0, 3.0, 2.0**52 + 1.0, 6369051672525773.0, 2.0**53 - 1.0])
    logs, scratch = np.empty_like(odd), np.empty_like(odd)
    fused.log_into(odd, -53, logs, scratch)
    expected = np.log(odd * 2.0**-53)
    points = np.array([0.0, -1e-300, -0.5, -1.0, -37.5, -700.0, -708.3964185322641])
    exps = np.empty_like(points)
    fused.exp_into(points, exps, np.empty_like(points))
    below = np.empty(1)
    fused.exp_into(np.array([-708.3964185322642]), below, np.empty(1))
    ones = [fused.exp_one(x) for x in [*points.tolist(), -708.3964185322642]]
    if not (
        np.all(np.abs(logs - expected) <= 2.0**-46 * np.abs(expected))
        and np.all(np.abs(exps - np.exp(points)) <= 2.0**-46 * np.exp(points))
        and below[0] == 0.0
        and ones == [*exps.tolist(), 0.0]  # the ziggurat's scalar exp: the same floats
    ):
        return False
    for sigma2 in (Fraction(2), Fraction(66000)):  # t <= 256 (packed words), t > 256
        plan = _gaussian_plan(sigma2)
        got = _gaussian_small_fused(fused, plan, 300, ChaCha20Random(0))
        want = _gaussian_small_numpy(plan, 300, ChaCha20Random(0))
        if not np.array_equal(np.asarray(got, dtype=np.int64), np.asarray(want, dtype=np.int64)):
            return False
    # the ziggurat's block (§2.6): its codes and outputs on one seeded block, wedge included
    zig = Ziggurat(Fraction(66000))
    words = ChaCha20Random(0).words(2000)
    t = zig.tables
    codes, out = np.empty(2000, dtype=np.uint8), np.empty(2000, dtype=np.int64)
    count = fused.ziggurat_block(words, zig.b, zig.e, zig.beta, zig.blocks, t.packed,
                                 t.slots, t.ratios, zig.inv_two_sigma2_f, codes,
                                 out)  # fmt: skip
    values, numpy_codes, _ = zig.block(words, _numpy_exp)
    zig.signed(words, codes)  # the restarted lanes, coded as the numpy block codes them
    agree = np.array_equal(codes, numpy_codes) and np.array_equal(
        out[:count], accepted(values, numpy_codes)
    )
    return bool(agree)


def _use_fused_kernels() -> bool:
    """Draw the Gaussian small path's blocks with the compiled kernel (§2.5) in this process.

    For the noise worker (:mod:`gaussdp.sampling._worker`). False without numba (the
    numpy kernels stay). The law is the same, and so are the values for a seed except
    where the two kernels' brackets differ (§8).
    """
    _Kernels.fused = _fused_module()
    return _Kernels.fused is not None


def _geometric(m_int: U64Array, bits: int, tau_f: float) -> tuple[F64Array, BoolArray]:
    """``floor(-tau ln U)`` as integer-valued floats where decided, and the undecided lanes.

    ``U`` is in ``[m, m + 1) / 2**bits`` (``bits <= 52``, §2.1). The estimate
    ``v = fl(-tau_f * log(u_mid))`` at the exact midpoint
    ``u_mid = (2m + 1) / 2**(bits + 1)`` is within ``eta = 2**-42 v + tau / m`` of
    ``-tau ln U``; the lane is decided when ``floor(v - eta) == floor(v + eta)``.
    Operations run in place on two buffers: this is the sampler's hot loop.
    """
    # exact: m < 2**52; read as int64 (the same values), which converts faster than uint64
    m = m_int.view(np.int64).astype(np.float64)
    v = np.multiply(m, 2.0**-bits)  # exact scaling by a power of two
    v += 2.0 ** -(bits + 1)  # u_mid = (2m + 1) / 2**(bits + 1), exact: 2m + 1 < 2**53
    _Kernels.log(v)
    v *= -tau_f
    eta = np.maximum(m, 1.0, out=m)
    np.divide(tau_f, eta, out=eta)
    high = np.multiply(v, _ETA_REL)
    eta += high
    np.add(v, eta, out=high)
    np.floor(high, out=high)
    v -= eta
    low = np.floor(v, out=v)
    undecided = np.not_equal(low, high)
    # m = 0: u_mid's interval reaches 0, where the estimate is unbounded. For tau >= 1 such
    # a lane has eta >= tau / 1 >= 1, so its floors differ and it is undecided already (§2.1).
    if tau_f < 1.0 and not m_int.all():
        undecided |= m_int == 0
    return low, undecided


def _bernoulli_exp_fast(minus_x: F64Array, m: F64Array, bits: int) -> tuple[BoolArray, BoolArray]:
    """Decide ``U' < exp(-gamma)`` from ``minus_x = -x_f``, ``|x_f - gamma| <= 2**-45 (1 + x_f)``.

    ``U'`` is in ``[m, m + 1) / 2**bits`` (``bits <= 52``); ``m`` holds the integers as
    floats (exact). With ``P = fl(exp(-x_f)) 2**bits`` and ``delta = 2**(bits - 41)``,
    ``fl(P - (1 + delta)) + 1 <= 2**bits exp(-gamma) <= fl(P + delta)`` (§2.2):
    ``m <= fl(P - (1 + delta))`` proves acceptance, ``m >= fl(P + delta)`` proves
    rejection, anything else is undecided. ``minus_x`` is overwritten. Returns
    ``(accepted, undecided)``.
    """
    delta = _BRACKET_REL * 2.0**bits
    _Kernels.exp(minus_x)
    scaled = minus_x
    scaled *= 2.0**bits  # exact: a power of two
    undecided = np.less(m, np.add(scaled, delta))  # not rejected: m < fl(P + delta)
    scaled -= 1.0 + delta
    accepted = np.less_equal(m, scaled)
    # accepted lanes have m <= fl(P - 1 - delta) < fl(P + delta), so they are not rejected
    undecided ^= accepted
    return accepted, undecided


def _resolve_bernoulli(
    accepted: BoolArray,
    undecided: BoolArray,
    m_int: F64Array,
    bits: int,
    gamma: Callable[[int], Fraction],
    rng: RandomSource,
) -> None:
    """Finish the undecided lanes of :func:`_bernoulli_exp_fast` exactly, in place."""
    for i in np.flatnonzero(undecided).tolist():
        u = LazyUniform(int(m_int[i]), bits, rng)
        accepted[i] = u.below_exp_neg(gamma(i))


# ---------------------------------------------------------------------------
# Plans: constants of one distribution
# ---------------------------------------------------------------------------


class _GaussianPlan:
    """Constants of N_Z(0, sigma2) for the fast path (CKS Alg 3)."""

    def __init__(self, sigma2: Fraction) -> None:
        self.sigma2 = sigma2
        # CKS Alg 3: t = floor(sigma) + 1, exactly (floor(sqrt(a/b)) = isqrt(ab) // b).
        self.t = isqrt(sigma2.numerator * sigma2.denominator) // sigma2.denominator + 1
        self.tau = Fraction(self.t)  # the scale of CKS Alg 3's discrete Laplace
        self.t_f = float(self.t)
        self.c = sigma2 / self.t  # gamma = (|Y| - c)^2 / (2 sigma2), CKS Alg 3
        self.c_f = float(self.c)
        self.inv_two_sigma2_f = float(1 / (2 * sigma2))
        self.small = self.t <= _SMALL_SCALE_MAX
        self.int64 = sigma2 <= _INT64_SCALE_MAX**2
        self.huge = None if self.small else _HugeScale(Fraction(self.t), sigma2)
        # 2**12 <= sigma2 < 2**52: the discrete ziggurat (§2.6) instead of CKS Alg 3
        self.ziggurat = Ziggurat(sigma2) if SIGMA2_MIN <= sigma2 < SIGMA2_MAX else None
        t = self.t
        # Per-candidate acceptance lower bound (docs §4), on both paths:
        # (1 - q)/2 e^{-sigma2/(2t^2)} sqrt(2 pi sigma2) with q = e^{-1/t}.
        log_sigma2 = math.log(sigma2.numerator) - math.log(sigma2.denominator)
        common = -float(sigma2 / (2 * t * t)) + 0.5 * (math.log(2 * math.pi) + log_sigma2)
        if self.small:
            self.acceptance = -math.expm1(-1.0 / t) / 2.0 * math.exp(common) * (1 - 1e-9)
        else:  # in log space (sqrt(2 pi sigma2) overflows for sigma2 > 1e616), with
            # 1 - e^{-1/t} >= (1/t)(1 - 1/(2t)) since 1/t underflows for t > 1e308
            log_one_minus_q = -math.log(t) + math.log1p(-0.5 / t)
            self.acceptance = math.exp(log_one_minus_q - math.log(2.0) + common) * (1 - 1e-9)
        self.cks_acceptance = self.acceptance  # of CKS Alg 3's candidates
        if self.ziggurat is not None:  # of the path that draws
            self.acceptance = self.ziggurat.acceptance

    def gamma(self, magnitude: int) -> Fraction:
        """CKS Alg 3: gamma = (|Y| - sigma^2/t)^2 / (2 sigma^2), exactly."""
        return (magnitude - self.c) ** 2 / (2 * self.sigma2)

    def few(self, n: int, need: int, rng: RandomSource) -> list[int]:
        """Up to ``need`` outputs of ``n`` candidates, one candidate at a time (§4.1)."""
        if self.ziggurat is not None:
            return self.ziggurat.few(n, need, rng)
        if self.huge is None:
            return _gaussian_small_few(self, n, need, rng)
        return _gaussian_huge_few(self, self.huge, n, need, rng)


class _HugeScale:
    """The geometric ``X = floor(scale E)`` for ``scale > 2**26``: X = S G + Lo (docs §2.3).

    ``S = 2**shift`` with ``tau = scale / S`` in ``[2**20, 2**21)``; ``G = floor(-tau ln U)``
    is read off like the small path, and ``Lo`` in ``[0, S)`` has
    ``P[Lo = l] ∝ e^{-l/scale}``. ``Lo`` is stored as the top ``shift`` bits of
    ``low_words`` big-endian words. ``scale`` is the Gaussian's ``t`` (with ``sigma2``,
    for CKS Alg 3's acceptance) or the discrete Laplace's rational scale.
    """

    def __init__(self, scale: Fraction, sigma2: Fraction | None = None) -> None:
        self.scale = scale
        self.shift = (scale.numerator // scale.denominator).bit_length() - _HUGE_TAU_BITS
        self.tau = scale / (1 << self.shift)
        self.tau_f = float(self.tau)
        self.low_words = -(-self.shift // 64)
        self.drop = 64 * self.low_words - self.shift  # unused low bits of the last word
        self.limbs = self.low_words + 1  # 64-bit limbs of X = (G << shift) | Lo
        self.frac_bits = min(self.shift, 53)  # bits of Lo / S read as a float
        # Lo is accepted without looking at it when U'' < e^{-1/tau} <= e^{-Lo/scale}:
        # lo_accept <= 2**32 e^{-S/scale} (exact integer bound, docs §2.3).
        self.lo_accept = exp_neg_bounds(Fraction(1 << self.shift) / scale, 32)[0]
        self.c_units_f = self.k_f = 0.0
        if sigma2 is not None:  # CKS Alg 3's acceptance, in units of S
            self.c_units_f = float(sigma2 / scale / (1 << self.shift))  # c / S
            self.k_f = float(Fraction(1 << (2 * self.shift)) / (2 * sigma2))  # S^2/(2 sigma2)

    def lo_exponent(self, lo: int) -> Fraction:
        """``lo / scale``: ``Lo = lo`` is accepted with probability ``e^{-lo/scale}``."""
        return lo / self.scale


class _LaplacePlan:
    """Constants of the discrete Laplace with rational scale (CKS Alg 2)."""

    def __init__(self, scale: Fraction) -> None:
        self.scale = scale
        self.small = scale <= _SMALL_SCALE_MAX
        self.int64 = scale <= _INT64_SCALE_MAX
        if self.small:
            q = math.exp(-1.0 / float(scale))
            self.acceptance = (1.0 + q) / 2.0 * (1 - 1e-9)  # only (negative, 0) is rejected
            self.huge = None
        else:  # rejected: B = 1 and Y = 0, probability (1 - e^{-1/scale})/2 < 2**-27
            self.huge = _HugeScale(scale)
            self.acceptance = (1.0 - 2.0**-27) * (1 - 1e-9)

    def few(self, n: int, need: int, rng: RandomSource) -> list[int]:
        """Up to ``need`` outputs of ``n`` candidates, one candidate at a time (§4.1)."""
        if self.huge is None:
            return _laplace_small_few(self, n, need, rng)
        return _laplace_huge_few(self.huge, n, need, rng)


# ---------------------------------------------------------------------------
# Small path
# ---------------------------------------------------------------------------


def _geometric_exact(m_int: U64Array, bits: int, tau: Fraction, rng: RandomSource) -> IntArray:
    """``G = floor(-tau ln U)`` for every lane, exactly: :func:`_geometric`, then §3.

    ``U`` is in ``[m, m + 1) / 2**bits``; undecided lanes are finished by
    :func:`gaussdp.sampling._exact.floor_neg_log`, in lane order.
    """
    # CKS Alg 2: Y geometric with ratio exp(-1/tau), as floor(-tau ln U) (§2.1).
    low, undecided = _geometric(m_int, bits, float(tau))
    g = low.astype(np.int64)
    for i, value in _finish_geometric(low, undecided, m_int, bits, tau, rng).items():
        g[i] = value
    return g


def _finish_geometric(
    low: F64Array,
    undecided: BoolArray,
    m_int: U64Array,
    bits: int,
    tau: Fraction,
    rng: RandomSource,
) -> dict[int, int]:
    """The exact ``G`` of the undecided lanes of :func:`_geometric` (§3), in lane order."""
    exact: dict[int, int] = {}
    if undecided.any():
        for i in np.flatnonzero(undecided).tolist():
            prefix = int(m_int[i])
            u = LazyUniform(prefix, bits, rng)
            hint = int(low[i]) if prefix else int(bits * tau) // 2 + 1
            exact[i] = floor_neg_log(u, tau, max(hint, 0))
    return exact


def _laplace_magnitudes(
    m_int: U64Array,
    bits: int,
    negative: BoolArray,
    tau: Fraction,
    rng: RandomSource,
) -> tuple[IntArray, BoolArray]:
    """CKS Alg 2 on a batch: magnitudes ``G = floor(-tau ln U)`` and the kept lanes (§2.1).

    ``U`` is in ``[m, m + 1) / 2**bits``; ``negative`` holds the sign bits B, drawn from
    other bits of the same words. Returns ``(g, keep)``; ``keep`` is False for
    ``(negative, 0)`` (CKS Alg 2: if B = 1 and Y = 0, restart).
    """
    g = _geometric_exact(m_int, bits, tau, rng)
    keep = ~(negative & (g == 0))  # CKS Alg 2: if B = 1 and Y = 0, restart
    return g, keep


def _signed(g: IntArray, negative: BoolArray) -> IntArray:
    """(1 − 2B)·G: a product with ±1 (2.4× faster here than ``np.where(B, -G, G)``)."""
    signed: IntArray = g * (1 - 2 * negative.view(np.int8))
    return signed


def _half_words(words: U64Array, out: F64Array) -> None:
    """``out[i]`` = 32-bit half ``i`` of ``words``, converted exactly to float.

    Half ``i`` is the low half (``w & 0xFFFFFFFF``) of word ``i // 2`` for even ``i`` and
    its high half (``w >> 32``) for odd ``i``: on a little-endian machine, the words'
    memory read as uint32 (one contiguous conversion, docs §2.4).
    """
    halves = words.view(np.uint32)
    n = len(out)
    if sys.byteorder == "little":
        out[:] = halves[:n]
    else:  # memory order is [high, low] per word
        out[0::2] = halves[1::2][: (n + 1) // 2]
        out[1::2] = halves[0::2][: n // 2]


def _split_word(words: U64Array) -> tuple[U64Array, BoolArray]:
    """52-bit prefix ``w >> 12`` of ``U`` and sign bit ``w & 1`` (independent bits)."""
    return words >> np.uint64(12), (words & np.uint64(1)).astype(np.bool_)


def _gaussian_small(plan: _GaussianPlan, n: int, rng: RandomSource) -> IntArray | F64Array:
    """``n`` candidates of CKS Alg 3 on the small path; returns the accepted values.

    The values are int64, or (without exact lanes) float64 holding integers below 2**52.

    Bits per candidate (§2.4): for ``t <= 256`` one word holds
    ``[31 bits of U | sign | 32 bits of U']``; otherwise one word gives 52 bits of
    ``U`` and the sign, and each half of a further word gives 32 bits of ``U'``
    (candidate ``2j`` the low half of extra word ``j``, candidate ``2j + 1`` its high half).
    """
    if _Kernels.fused is not None:
        return _gaussian_small_fused(_Kernels.fused, plan, n, rng)
    return _gaussian_small_numpy(plan, n, rng)


def _gaussian_small_numpy(plan: _GaussianPlan, n: int, rng: RandomSource) -> IntArray | F64Array:
    """:func:`_gaussian_small` with numpy's passes (the kernels of :class:`_Kernels`)."""
    tau = plan.tau
    m_acc = np.empty(n, dtype=np.float64)  # U' prefixes, exact integers < 2**32
    if plan.t <= _PACKED_T_MAX:
        words = rng.words(n)
        m_geo, geo_bits, sign_shift = words >> np.uint64(33), 31, 32
        m_acc[:] = (words & np.uint64(0xFFFFFFFF)).view(np.int64)
    else:
        n_half = (n + 1) // 2
        words = rng.words(n + n_half)
        m_geo, geo_bits, sign_shift = words[:n] >> np.uint64(12), 52, 0
        _half_words(words[n:], m_acc)  # candidate i: 32-bit half i of the extra words
        words = words[:n]
    # CKS Alg 3: Y <- discrete Laplace with scale t (CKS Alg 2, by inversion, §2.1).
    low, undecided = _geometric(m_geo, geo_bits, plan.t_f)
    exact = _finish_geometric(low, undecided, m_geo, geo_bits, tau, rng)
    for i, value in exact.items():
        low[i] = value  # rounded if >= 2**53; such lanes are decided from the int below
    # CKS Alg 3: accept Y with probability exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)).
    # x = (G - c)^2 / (2 sigma^2) in floats (§2.2), negated exactly for the bracket.
    minus_x = np.subtract(low, plan.c_f)
    np.multiply(minus_x, minus_x, out=minus_x)
    minus_x *= -plan.inv_two_sigma2_f
    accepted, undecided = _bernoulli_exp_fast(minus_x, m_acc, 32)
    # Decided lanes have m >= 1, so G <= 37 t < 2**52; only exact lanes can exceed it,
    # where the float of G is not exact: decide those exactly.
    if exact:
        undecided[[i for i, value in exact.items() if value >= 2**52]] = True
    # CKS Alg 2: if B = 1 and Y = 0, restart. B is bit `sign_shift` of the word; it
    # becomes the float's sign bit, so the lanes to restart are those equal to -0.0.
    signs = np.left_shift(words, np.uint64(63 - sign_shift), out=words)  # words: no longer read
    if sign_shift:
        signs &= np.uint64(1 << 63)
    low_bits = low.view(np.uint64)
    low_bits |= signs
    if not low.all():  # some G = 0 (rare for large t): drop the restarted lanes
        keep = low_bits != np.uint64(1 << 63)
        undecided &= keep
        accepted &= keep
    if undecided.any():
        _resolve_bernoulli(
            accepted,
            undecided,
            m_acc,
            32,
            lambda i: plan.gamma(exact[i] if i in exact else int(abs(low[i]))),
            rng,
        )
    if exact:  # values from exact ints (a float of G >= 2**53 would be rounded)
        g = np.abs(low).astype(np.int64)
        for i, value in exact.items():
            g[i] = value
        return np.compress(accepted, _signed(g, low_bits >= np.uint64(1 << 63)))
    # (1 - 2B) G: the signed floats are exact integers below 2**52, converted exactly to
    # int64 where _draw copies them into the output (np.compress beats a boolean index)
    signed: F64Array = np.compress(accepted, low)
    return signed


def _gaussian_small_fused(
    fused: ModuleType, plan: _GaussianPlan, n: int, rng: RandomSource
) -> IntArray | F64Array:
    """:func:`_gaussian_small` with the compiled block (§2.5): the same words, decisions
    and exact fallbacks in the same order, so the same values for the same words."""
    packed = plan.t <= _PACKED_T_MAX
    words = rng.words(n if packed else n + (n + 1) // 2)
    values = np.empty(n, dtype=np.float64)
    codes = np.empty(n, dtype=np.uint8)
    undecided = fused.gaussian_block(
        words,
        n,
        packed,
        plan.t_f,
        plan.c_f,
        plan.inv_two_sigma2_f,
        _ETA_REL,
        _BRACKET_REL,
        values,
        codes,
    )
    if undecided:
        return _finish_fused(fused, plan, words, packed, values, codes, rng)
    count = fused.compact(values, codes)
    signed: F64Array = values[:count]
    return signed


def _finish_fused(
    fused: ModuleType,
    plan: _GaussianPlan,
    words: U64Array,
    packed: bool,
    values: F64Array,
    codes: npt.NDArray[np.uint8],
    rng: RandomSource,
) -> IntArray:
    """The undecided lanes of :func:`_gaussian_small_fused`, in :func:`_gaussian_small`'s
    order: first every undecided geometric exactly (§3), then every undecided acceptance."""
    n = len(values)
    if packed:
        m_geo, geo_bits, signs = words >> np.uint64(33), 31, words >> np.uint64(32)
        m_acc = (words & np.uint64(0xFFFFFFFF)).view(np.int64).astype(np.float64)
    else:
        m_geo, geo_bits, signs = words[:n] >> np.uint64(12), 52, words[:n]
        m_acc = np.empty(n, dtype=np.float64)
        _half_words(words[n:], m_acc)
    negative = (signs & np.uint64(1)).astype(np.bool_)
    magnitudes = np.abs(values).astype(np.int64)  # exact: decided G < 2**52
    geometric = codes == fused.GEOMETRIC_UNDECIDED
    exact = _finish_geometric(values, geometric, m_geo, geo_bits, plan.tau, rng)
    for i, g in exact.items():
        magnitudes[i] = g
        if negative[i] and g == 0:  # CKS Alg 2: if B = 1 and Y = 0, restart
            codes[i] = fused.REJECTED
            continue
        # §2.2 as in _gaussian_small: the float bracket, unless the float of G is not exact
        d = float(g) - plan.c_f
        decided = (
            _accept_one(d * d * plan.inv_two_sigma2_f, int(m_acc[i]), 32) if g < 2**52 else None
        )
        codes[i] = (
            fused.BERNOULLI_UNDECIDED
            if decided is None
            else fused.ACCEPTED
            if decided
            else fused.REJECTED
        )
    for i in np.flatnonzero(codes == fused.BERNOULLI_UNDECIDED).tolist():
        u = LazyUniform(int(m_acc[i]), 32, rng)
        accepted = u.below_exp_neg(plan.gamma(int(magnitudes[i])))
        codes[i] = fused.ACCEPTED if accepted else fused.REJECTED
    keep = codes == fused.ACCEPTED
    return np.compress(keep, _signed(magnitudes, negative))


def _gaussian_ziggurat(zig: Ziggurat, n: int, rng: RandomSource) -> IntArray:
    """``n`` candidates of the discrete ziggurat (§2.6), one word each; the accepted values."""
    words = rng.words(n)
    fused = _Kernels.fused
    if fused is None:
        values, codes, pending = zig.block(words, _Kernels.exp)
    else:
        t = zig.tables
        codes = np.empty(n, dtype=np.uint8)
        out = np.empty(n, dtype=np.int64)
        count = fused.ziggurat_block(
            words, zig.b, zig.e, zig.beta, zig.blocks, t.packed, t.slots, t.ratios,
            zig.inv_two_sigma2_f, codes, out,
        )  # fmt: skip
        if count >= 0:
            return out[:count]
        values, pending = zig.signed(words, codes), -count  # the kernel's codes
    if pending:
        zig.finish(words, values, codes, rng)
    return accepted(values, codes)


def _laplace_small(plan: _LaplacePlan, n: int, rng: RandomSource) -> IntArray:
    """``n`` candidates of CKS Alg 2 on the small path; returns the kept values."""
    m_geo, negative = _split_word(rng.words(n))  # U and CKS Alg 2's sign bit B
    g, keep = _laplace_magnitudes(m_geo, 52, negative, plan.scale, rng)
    return np.compress(keep, _signed(g, negative))  # CKS Alg 2: return (1 - 2B) Y


# ---------------------------------------------------------------------------
# Small batches: the same candidates, one at a time (§4.1)
# ---------------------------------------------------------------------------


def _word_list(rng: RandomSource, count: int) -> tuple[int, ...]:
    """``rng.words(count)`` as Python ints: the same little-endian words, without numpy."""
    return rng._word_tuple(count)


def _geometric_one(m: int, bits: int, tau: Fraction, tau_f: float, rng: RandomSource) -> int:
    """:func:`_geometric` and its exact fallback for one lane: ``floor(-tau ln U)``.

    The same float operations in the same order as the vectorised bracket (§2.1), on
    Python floats (``math.log`` is the platform libm, covered by assumption 3).
    """
    if m:
        # U's midpoint (m + 1/2) 2**-bits, exact as in the block (2m + 1 < 2**53).
        v = math.log(math.ldexp(2 * m + 1, -(bits + 1))) * -tau_f
        eta = tau_f / m + v * _ETA_REL
        low = math.floor(v - eta)
        if low == math.floor(v + eta):
            return low
        hint = low
    else:  # m = 0: the interval of U reaches 0, where the estimate is unbounded
        hint = int(bits * tau) // 2 + 1
    return floor_neg_log(LazyUniform(m, bits, rng), tau, max(hint, 0))


def _accept_one(x: float, m: int, bits: int) -> bool | None:
    """:func:`_bernoulli_exp_fast` for one lane (§2.2): True, False, or None if undecided."""
    two_bits = 2.0**bits
    delta = _BRACKET_REL * two_bits
    scaled = math.exp(-x) * two_bits
    if m <= scaled - (1.0 + delta):
        return True
    if m < scaled + delta:
        return None
    return False


def _gaussian_small_few(plan: _GaussianPlan, n: int, need: int, rng: RandomSource) -> list[int]:
    """:func:`_gaussian_small` on ``n`` candidates, stopping after ``need`` acceptances.

    Reads the same words with the same bit layout (§2.4) and makes the same decision
    for each candidate, one candidate at a time on Python ints and floats: for a few
    outputs this avoids numpy's per-call overhead (§4.1).
    """
    tau, tau_f, c_f, inv = plan.tau, float(plan.t), plan.c_f, plan.inv_two_sigma2_f
    out: list[int] = []
    packed = plan.t <= _PACKED_T_MAX
    words = _word_list(rng, n if packed else n + (n + 1) // 2)
    for i in range(n):
        w = words[i]
        if packed:  # [31 bits of U | sign | 32 bits of U']
            m_geo, geo_bits, negative, m_acc = w >> 33, 31, (w >> 32) & 1, w & 0xFFFFFFFF
        else:  # 52 bits of U and the sign; U' from the halves of the words after the n
            m_geo, geo_bits, negative = w >> 12, 52, w & 1
            m_acc = (words[n + i // 2] >> (32 * (i & 1))) & 0xFFFFFFFF  # half i (§2.4)
        g = _geometric_one(m_geo, geo_bits, tau, tau_f, rng)
        if negative and g == 0:  # CKS Alg 2: if B = 1 and Y = 0, restart
            continue
        # CKS Alg 3: accept Y with probability exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)).
        d = float(g) - c_f
        accepted = _accept_one(d * d * inv, m_acc, 32) if g < 2**52 else None
        if accepted is None:  # undecided, or the float of G is not exact: decide exactly
            accepted = LazyUniform(m_acc, 32, rng).below_exp_neg(plan.gamma(g))
        if accepted:
            out.append(-g if negative else g)
            if len(out) == need:
                break
    return out


def _laplace_small_few(plan: _LaplacePlan, n: int, need: int, rng: RandomSource) -> list[int]:
    """:func:`_laplace_small` on ``n`` candidates, one at a time, stopping after ``need``."""
    tau, tau_f = plan.scale, float(plan.scale)
    out: list[int] = []
    for w in _word_list(rng, n):
        negative = w & 1
        g = _geometric_one(w >> 12, 52, tau, tau_f, rng)
        if negative and g == 0:  # CKS Alg 2: if B = 1 and Y = 0, restart
            continue
        out.append(-g if negative else g)
        if len(out) == need:
            break
    return out


# ---------------------------------------------------------------------------
# Huge path, Gaussian and Laplace (§2.3): X = S G + Lo, outputs as 64-bit limbs
# ---------------------------------------------------------------------------


def _low_int(huge: _HugeScale, low: U64Array, i: int) -> int:
    """Lane ``i``'s ``Lo``: the top ``shift`` bits of its big-endian low words."""
    value = 0
    for word in low[:, i].tolist():
        value = (value << 64) | word
    return value >> huge.drop


def _set_low(huge: _HugeScale, low: U64Array, i: int, value: int) -> None:
    """Store ``value`` (< 2**shift) as lane ``i``'s ``Lo`` (inverse of :func:`_low_int`)."""
    shifted = value << huge.drop
    for j in range(huge.low_words - 1, -1, -1):
        low[j, i] = shifted & 0xFFFFFFFFFFFFFFFF
        shifted >>= 64


def _accept_low(huge: _HugeScale, lo: int, m: int, rng: RandomSource) -> int:
    """``Lo`` when ``U''`` (prefix ``m``, 32 bits) did not accept the first ``lo`` unseen.

    ``Lo`` has ``P[Lo = l] ∝ e^{-l/t}`` on ``[0, S)``: a uniform ``l`` accepted when
    ``U'' < e^{-l/t}`` (decided exactly, §3), otherwise a fresh uniform ``l`` and a
    fresh ``U''``, until one is accepted (rejection sampling, independent of ``G``).
    """
    accepted = LazyUniform(m, 32, rng).below_exp_neg(huge.lo_exponent(lo))
    while not accepted:
        lo = rng.randbits(huge.shift)
        accepted = LazyUniform(0, 0, rng).below_exp_neg(huge.lo_exponent(lo))
    return lo


def _finish_low(huge: _HugeScale, low: U64Array, i: int, m: int, rng: RandomSource) -> None:
    """Lane ``i``'s ``Lo`` by :func:`_accept_low`, stored back in ``low``."""
    _set_low(huge, low, i, _accept_low(huge, _low_int(huge, low, i), m, rng))


def _gaussian_huge(plan: _GaussianPlan, huge: _HugeScale, n: int, rng: RandomSource) -> U64Array:
    """``n`` candidates of CKS Alg 3 with ``t > 2**26``; the accepted ones as limb rows.

    Each candidate reads ``2 + low_words`` words (§2.4): ``[52 bits of U | B]``,
    ``[32 bits of U'' | 32 bits of U']`` and the words of ``Lo``. CKS Alg 2's geometric
    ``X = floor(t E)`` (E exponential) is ``S G + Lo`` with ``G = floor(-tau ln U)`` and
    ``Lo`` the truncated geometric of :func:`_finish_low` (§2.3). Returns an array of
    shape ``(accepted, 1 + limbs)``: column 0 is B, then ``X``'s 64-bit limbs, least
    significant first.
    """
    words = rng.words(n * (2 + huge.low_words)).reshape(2 + huge.low_words, n)
    m_geo, negative = _split_word(words[0])
    low = words[2:]  # big-endian words whose top `shift` bits are Lo
    # CKS Alg 2: the geometric X = S G + Lo (§2.3); first G, by inversion (§2.1),
    g = _geometric_exact(m_geo, 52, huge.tau, rng)
    # then Lo: accepted unseen when U'' < (m'' + 1) / 2**32 <= lo_accept / 2**32 <= e^{-S/t}.
    m_lo = words[1] >> np.uint64(32)
    for i in np.flatnonzero(m_lo >= np.uint64(huge.lo_accept)).tolist():
        _finish_low(huge, low, i, int(m_lo[i]), rng)
    # CKS Alg 2: if B = 1 and Y = 0, restart (X = 0 iff G = 0 and Lo = 0).
    keep = np.ones(n, dtype=np.bool_)
    for i in np.flatnonzero(negative & (g == 0)).tolist():
        keep[i] = _low_int(huge, low, i) != 0
    # CKS Alg 3 acceptance: in units of S, X/S is in [G + f, G + f + 2**-53) with f the
    # top bits of Lo/S, so d = G + f - c/S is within 2**-51 (c/S + |d|) of X/S - c/S.
    d = (low[0] >> np.uint64(64 - huge.frac_bits)).astype(np.float64)
    d *= 2.0**-huge.frac_bits
    d += g
    d -= huge.c_units_f
    minus_x = np.multiply(d, d, out=d)
    minus_x *= -huge.k_f  # -x_f, exactly (negation)
    m_acc = (words[1] & np.uint64(0xFFFFFFFF)).view(np.int64).astype(np.float64)
    accepted, undecided = _bernoulli_exp_fast(minus_x, m_acc, 32)
    if g.max(initial=0) >= 2**52:  # float of G not exact: decide exactly
        undecided |= g >= 2**52
    undecided &= keep
    accepted &= keep
    for i in np.flatnonzero(undecided).tolist():
        magnitude = (int(g[i]) << huge.shift) | _low_int(huge, low, i)
        lazy = LazyUniform(int(m_acc[i]), 32, rng)
        accepted[i] = lazy.below_exp_neg(plan.gamma(magnitude))
    return _limb_rows(huge, g, low, negative, np.flatnonzero(accepted))


def _laplace_huge_few(huge: _HugeScale, n: int, need: int, rng: RandomSource) -> list[int]:
    """:func:`_laplace_huge` on ``n`` candidates, one at a time, stopping after ``need``.

    The same words in the same layout and the same decisions (§2.3, §4.1), on Python
    ints; the outputs are Python ints.
    """
    n_half = (n + 1) // 2
    words = _word_list(rng, n + n_half + n * huge.low_words)
    out: list[int] = []
    for i in range(n):
        w = words[i]
        negative = w & 1
        g = _geometric_one(w >> 12, 52, huge.tau, huge.tau_f, rng)
        m_lo = words[n + i] >> 32 if i < n_half else words[n + i - n_half] & 0xFFFFFFFF
        lo = 0
        for word in words[n + n_half + i :: n]:
            lo = (lo << 64) | word
        lo >>= huge.drop
        if m_lo >= huge.lo_accept:  # U'' did not accept Lo unseen (m'' + 1 > lo_accept)
            lo = _accept_low(huge, lo, m_lo, rng)
        if negative and g == 0 and lo == 0:  # CKS Alg 2: if B = 1 and Y = 0, restart
            continue
        magnitude = (g << huge.shift) | lo
        out.append(-magnitude if negative else magnitude)
        if len(out) == need:
            break
    return out


def _limb_rows(
    huge: _HugeScale, g: IntArray, low: U64Array, negative: BoolArray, index: IntArray
) -> U64Array:
    """Rows ``[B, limbs of X...]`` (least significant limb first) of the lanes ``index``.

    X = (G << shift) | Lo: the big-endian words [G, low...] shifted right by ``drop``.
    """
    out = np.empty((index.size, 1 + huge.limbs), dtype=np.uint64)
    out[:, 0] = negative[index]
    high = g[index].view(np.uint64)
    rows = [high, *(low[j, index] for j in range(huge.low_words))]
    drop = np.uint64(huge.drop)
    back = np.uint64(64 - huge.drop)
    for j, word in enumerate(rows):  # limb (limbs - 1 - j), most significant first
        limb = word >> drop if huge.drop else word.copy()
        if j and huge.drop:
            limb |= rows[j - 1] << back
        out[:, huge.limbs - j] = limb
    return out


def _laplace_huge(huge: _HugeScale, n: int, rng: RandomSource) -> U64Array:
    """``n`` candidates of CKS Alg 2 with scale above ``2**26``; the kept ones as limb rows.

    The magnitude ``Y = floor(scale E)`` is ``S G + Lo`` as in :func:`_gaussian_huge`
    (§2.3). Each candidate reads ``1.5 + low_words`` words: ``[52 bits of U | B]``, half
    a word for the 32 bits of ``U''`` and the words of ``Lo``. Returns rows
    ``[B, limbs of Y...]`` like :func:`_gaussian_huge`.
    """
    n_half = (n + 1) // 2
    words = rng.words(n + n_half + n * huge.low_words)
    m_geo, negative = _split_word(words[:n])
    halves = words[n : n + n_half]
    m_lo = np.concatenate([halves >> np.uint64(32), halves & np.uint64(0xFFFFFFFF)])[:n]
    low = words[n + n_half :].reshape(huge.low_words, n)  # big-endian words, Lo on top
    # CKS Alg 2: Y geometric with ratio e^{-1/scale}, as S G + Lo (§2.3): G by inversion
    # (§2.1), then Lo, accepted unseen when U'' < (m'' + 1) / 2**32 <= lo_accept / 2**32.
    g = _geometric_exact(m_geo, 52, huge.tau, rng)
    for i in np.flatnonzero(m_lo >= np.uint64(huge.lo_accept)).tolist():
        _finish_low(huge, low, i, int(m_lo[i]), rng)
    # CKS Alg 2: if B = 1 and Y = 0, restart (Y = 0 iff G = 0 and Lo = 0).
    keep = np.ones(n, dtype=np.bool_)
    for i in np.flatnonzero(negative & (g == 0)).tolist():
        keep[i] = _low_int(huge, low, i) != 0
    return _limb_rows(huge, g, low, negative, np.flatnonzero(keep))


def _gaussian_huge_few(
    plan: _GaussianPlan, huge: _HugeScale, n: int, need: int, rng: RandomSource
) -> list[int]:
    """:func:`_gaussian_huge` on ``n`` candidates, one at a time, stopping after ``need``.

    The same words in the same layout and the same decisions (§2.3, §4.1), on Python
    ints and floats; the outputs are Python ints.
    """
    words = _word_list(rng, n * (2 + huge.low_words))
    out: list[int] = []
    for i in range(n):
        w = words[i]
        negative = w & 1
        g = _geometric_one(w >> 12, 52, huge.tau, huge.tau_f, rng)
        low_words = words[2 * n + i :: n]
        lo = 0
        for word in low_words:
            lo = (lo << 64) | word
        lo >>= huge.drop
        m_lo, m_acc = words[n + i] >> 32, words[n + i] & 0xFFFFFFFF
        if m_lo >= huge.lo_accept:  # U'' did not accept Lo unseen (m'' + 1 > lo_accept)
            lo = _accept_low(huge, lo, m_lo, rng)
        if negative and g == 0 and lo == 0:  # CKS Alg 2: if B = 1 and Y = 0, restart
            continue
        magnitude = (g << huge.shift) | lo
        accepted: bool | None = None
        if g < 2**52:  # CKS Alg 3 acceptance, _gaussian_huge's float operations in order
            d = (lo >> (huge.shift - huge.frac_bits)) * 2.0**-huge.frac_bits
            d += g
            d -= huge.c_units_f
            accepted = _accept_one(d * d * huge.k_f, m_acc, 32)
        if accepted is None:  # undecided, or the float of G is not exact: decide exactly
            accepted = LazyUniform(m_acc, 32, rng).below_exp_neg(plan.gamma(magnitude))
        if accepted:
            out.append(-magnitude if negative else magnitude)
            if len(out) == need:
                break
    return out


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


# numpy refuses larger shapes with its own message.
_SHAPE_LIMIT = int(np.iinfo(np.intp).max)


def _check_size(size: object) -> tuple[int, ...]:
    """Normalise ``size`` (an int or a tuple of ints, each ``>= 0``) to a shape."""
    if type(size) is tuple and not size:  # a scalar draw, the common case
        return ()
    if isinstance(size, tuple):
        shape = tuple(check_int("size", s, minimum=0) for s in size)
    elif isinstance(size, list):
        raise TypeError(invalid("size", "an integer >= 0 or a tuple of them", size))
    else:
        shape = (check_int("size", size, minimum=0),)
    if max(shape, default=0) > _SHAPE_LIMIT or math.prod(shape) > _SHAPE_LIMIT:
        raise ValueError(invalid("size", f"a shape of at most {_SHAPE_LIMIT} values", size))
    return shape


class _LimbRows:
    """The output of the huge path: the signs and the limbs of ``n`` values.

    Filled with rows ``[B, limbs...]`` of :func:`_gaussian_huge` or :func:`_laplace_huge`,
    block by block, into two contiguous arrays (no second copy of the limbs when the
    output is built).
    """

    def __init__(self, n: int, limbs: int) -> None:
        self.negative = np.empty(n, dtype=np.bool_)
        self.magnitude = np.empty((n, limbs), dtype=np.uint64)

    def __setitem__(self, index: slice, rows: npt.NDArray[np.generic]) -> None:
        self.negative[index] = rows[:, 0]
        self.magnitude[index] = rows[:, 1:]


Rows = npt.NDArray[np.generic] | _LimbRows


def _draw(
    batch: Callable[[int], npt.NDArray[np.generic]],
    n: int,
    acceptance: float,
    empty: Callable[[int], Rows],
    work: FixedWork | None,
) -> Rows:
    """Run ``batch`` on candidate blocks until ``n`` outputs (or a fixed total).

    Accepted rows are copied into the preallocated output ``empty(n)`` in candidate
    order, so the working memory beyond the output is one block of at most ``_CHUNK``
    candidates.
    """
    out = empty(n)
    have = 0

    def take(part: npt.NDArray[np.generic]) -> None:
        nonlocal have
        count = min(len(part), n - have)
        if count:
            out[have : have + count] = part[:count]
        have += count

    if work is None:
        while have < n:
            want = math.ceil((n - have) / acceptance * 1.02) + 16
            take(batch(min(want, _CHUNK)))
        return out
    total = work.candidates(n, acceptance)
    accepted = 0
    for start in range(0, total, _CHUNK):
        part = batch(min(_CHUNK, total - start))
        accepted += len(part)
        take(part)
    if accepted < n:
        raise SamplingShortfallError(
            f"fixed-work batch accepted {accepted} of {total} candidates, fewer than the "
            f"{n} requested (probability <= delta_prime = {work.delta_prime!r}); "
            "nothing was released"
        )
    return out


def _tiny(
    draw: Callable[[], int], n: int, work: FixedWork | None, name: str, value: Fraction
) -> IntArray:
    """Parameters below 2**-60: the scalar reference, one exact draw per output (docs §5)."""
    if work is not None:
        raise ValueError(invalid(name, ">= 2**-60 for fixed-work sampling", value))
    return np.array([draw() for _ in range(n)], dtype=np.int64)


# Plans depend only on the parameter; caching them saves their exact arithmetic per call.
_gaussian_plan = functools.lru_cache(maxsize=256)(_GaussianPlan)
_laplace_plan = functools.lru_cache(maxsize=256)(_LaplacePlan)

BigInts = Literal["object", "limbs"]
Output = IntArray | ObjectArray | BigIntArray


@dataclass(frozen=True, slots=True)
class _Drawer:
    """How to draw one distribution: blocks of candidates, and the output they make."""

    batch: Callable[[int], npt.NDArray[np.generic]]  # candidates -> accepted rows
    acceptance: float  # lower bound on the acceptance per candidate (docs §4)
    empty: Callable[[int], Rows]  # the output buffer of n rows
    finish: Callable[[Rows, tuple[int, ...], BigInts], Output]


def _empty_values(dtype: type) -> Callable[[int], npt.NDArray[np.generic]]:
    return lambda n: np.empty(n, dtype=dtype)


def _reshaped(raw: Rows, shape: tuple[int, ...], big_ints: BigInts) -> Output:
    assert isinstance(raw, np.ndarray)
    return raw.reshape(shape)  # type: ignore[return-value]


def _finish_limbs(plan: Plan, raw: Rows, shape: tuple[int, ...], big_ints: BigInts) -> Output:
    """The values of :func:`_gaussian_huge` or :func:`_laplace_huge` as the output type
    (docs §5)."""
    assert isinstance(raw, _LimbRows)
    negative, magnitude = raw.negative, raw.magnitude
    if plan.int64:
        if magnitude[:, 1:].any() or bool((magnitude[:, 0] >= np.uint64(2**63)).any()):
            raise OverflowError("a draw exceeds the int64 range")
        return _signed(magnitude[:, 0].astype(np.int64), negative).reshape(shape)
    big = BigIntArray._owned(negative.reshape(shape), magnitude.reshape((*shape, -1)))
    return big if big_ints == "limbs" else big.to_object()


def _gaussian_drawer(plan: Plan, source: RandomSource) -> _Drawer:
    """CKS Alg 3 for ``plan``: the small path (§2.1-2.2) or the huge one (§2.3)."""
    assert isinstance(plan, _GaussianPlan)
    huge, zig = plan.huge, plan.ziggurat
    if zig is not None:
        return _Drawer(
            lambda m: _gaussian_ziggurat(zig, m, source),
            plan.acceptance,
            _empty_values(np.int64),
            _reshaped,
        )
    if huge is None:
        return _Drawer(
            lambda m: _gaussian_small(plan, m, source),
            plan.acceptance,
            _empty_values(np.int64),
            _reshaped,
        )
    return _Drawer(
        lambda m: _gaussian_huge(plan, huge, m, source),
        plan.acceptance,
        lambda n: _LimbRows(n, huge.limbs),
        functools.partial(_finish_limbs, plan),
    )


def _laplace_drawer(plan: Plan, source: RandomSource) -> _Drawer:
    """CKS Alg 2 for ``plan``: the small path (§2.1) or the huge one (§2.3)."""
    assert isinstance(plan, _LaplacePlan)
    huge = plan.huge
    if huge is None:
        return _Drawer(
            lambda m: _laplace_small(plan, m, source),
            plan.acceptance,
            _empty_values(np.int64),
            _reshaped,
        )
    return _Drawer(
        lambda m: _laplace_huge(huge, m, source),
        plan.acceptance,
        lambda n: _LimbRows(n, huge.limbs),
        functools.partial(_finish_limbs, plan),
    )


def _draw_few(
    plan: Plan, shape: tuple[int, ...], n: int, rng: RandomSource
) -> IntArray | ObjectArray:
    """:func:`_draw` without fixed work, one candidate at a time (§4.1), by ``plan.few``;
    the ``n`` outputs in ``shape``.

    The blocks of candidates are those :func:`_draw` would draw; each stops once the
    outputs are complete, where :func:`_draw` would finish the block and discard the rest.
    """
    out: list[int] = []
    while len(out) < n:
        want = math.ceil((n - len(out)) / plan.acceptance * 1.02) + 16
        out += plan.few(min(want, _CHUNK), n - len(out), rng)
    if not plan.int64:
        values = np.empty(n, dtype=object)
        values[:] = out
        return values.reshape(shape)
    if not shape:  # a scalar draw: the 0-d array at once
        return np.array(out[0], dtype=np.int64)
    return np.array(out, dtype=np.int64).reshape(shape)


Plan = _GaussianPlan | _LaplacePlan
_PLANS: dict[str, Callable[[Fraction], Plan]] = {"sigma2": _gaussian_plan, "scale": _laplace_plan}


#: Largest sigma2 accepted: the Gaussian plan's constants t = floor(sigma) + 1 and
#: sigma2 / t must be finite doubles (at sigma2 = 2**2048, t = 2**1024 + 1 is not).
_SIGMA2_MAX = 2**2047


def _prepared(name: str, exact: Fraction) -> tuple[Fraction, Plan | None]:
    """The parameter and its plan (None below 2**-60: the scalar reference is used)."""
    if name == "sigma2" and exact > _SIGMA2_MAX:
        raise ValueError(invalid("sigma2", "a number <= 2**2047", exact))
    return exact, None if exact < _TINY_PARAM else _PLANS[name](exact)


@functools.lru_cache(maxsize=256)
def _cached_parameter(name: str, kind: type, value: object) -> tuple[Fraction, Plan | None]:
    """:func:`_prepared` per (name, type, value); a refusal raises and is not cached."""
    return _prepared(name, check_fraction(name, value))


def _parameter(name: str, value: object) -> tuple[Fraction, Plan | None]:
    """Validate the parameter; cached for ints, floats, strings and Fractions (exact keys).

    The type is part of the key, so ``True`` (refused) never hits the entry of ``1``.
    """
    kind = type(value)
    if kind is int or kind is float or kind is str or kind is Fraction:
        return _cached_parameter(name, kind, value)
    return _prepared(name, check_fraction(name, value))


class _ScalarSampler(Protocol):
    """A scalar reference sampler (CKS Alg 2 or 3), ``rng`` keyword-only."""

    def __call__(self, parameter: Fraction, /, *, rng: RandomSource | None = None) -> int: ...


def _sample(
    name: str,
    parameter: object,
    size: object,
    rng: RandomSource | None,
    work: FixedWork | None,
    scalar: _ScalarSampler,
    drawer: Callable[[Plan, RandomSource], _Drawer],
    big_ints: object = "object",
) -> Output:
    """Validate everything, then draw ``size`` samples; nothing is drawn on a refusal."""
    exact, plan = _parameter(name, parameter)
    shape = _check_size(size)
    if work is not None and not isinstance(work, FixedWork):
        raise TypeError(invalid("work", "None or a FixedWork", work))
    if big_ints != "object" and big_ints != "limbs":
        raise ValueError(invalid("big_ints", "'object' or 'limbs'", big_ints))
    source = check_rng(rng)
    n = math.prod(shape)
    if plan is None:
        return _tiny(lambda: scalar(exact, rng=source), n, work, name, exact).reshape(shape)
    if work is None and n <= _FEW_MAX:
        values = _draw_few(plan, shape, n, source)
        if not plan.int64 and big_ints == "limbs":
            assert isinstance(plan, _GaussianPlan)
            assert plan.huge is not None  # not int64: the huge path (limbs: Gaussian only)
            return BigIntArray._from_ints(values, plan.huge.limbs)
        return values
    draw = drawer(plan, source)
    return draw.finish(_draw(draw.batch, n, draw.acceptance, draw.empty, work), shape, big_ints)


def _discrete_gaussian_into(sigma2: Fraction, out: IntArray, rng: RandomSource) -> None:
    """``out[:] = discrete_gaussian(sigma2, out.size, rng=rng)``: the same values from the
    same words, written into ``out`` (a contiguous int64 vector) without a temporary.

    For the noise worker (:mod:`gaussdp.sampling._worker`), which fills shared memory;
    ``sigma2`` is already validated. Paths other than the vectorised small one go
    through :func:`discrete_gaussian`.
    """
    exact, plan = _parameter("sigma2", sigma2)
    n = out.size
    if plan is None or plan.huge is not None or n <= _FEW_MAX:
        out[:] = discrete_gaussian(exact, n, rng=rng)
        return
    assert isinstance(plan, _GaussianPlan)
    zig, fused = plan.ziggurat, _Kernels.fused
    if zig is None or fused is None:
        draw = _gaussian_drawer(plan, rng)
        _draw(draw.batch, n, draw.acceptance, lambda _: out, None)
        return
    # _draw over the blocks of _gaussian_ziggurat, the same words block by block, with
    # the compiled kernel writing a block's accepted values straight into ``out`` where
    # the whole block fits (it writes one entry per lane, kept ones at the front): no
    # copy of the block, no arrays per block. The same values.
    t = zig.tables
    codes = np.empty(_CHUNK, dtype=np.uint8)
    scratch = np.empty(_CHUNK, dtype=np.int64)
    have = 0
    while have < n:
        m = min(math.ceil((n - have) / plan.acceptance * 1.02) + 16, _CHUNK)
        words = rng.words(m)
        fits = have + m <= n
        target = out[have : have + m] if fits else scratch[:m]
        count = fused.ziggurat_block(
            words, zig.b, zig.e, zig.beta, zig.blocks, t.packed, t.slots, t.ratios,
            zig.inv_two_sigma2_f, codes[:m], target,
        )  # fmt: skip
        if count < 0:  # lanes left to decide: as _gaussian_ziggurat, into ``out`` after
            values = zig.signed(words, codes[:m])  # the kernel's codes
            zig.finish(words, values, codes[:m], rng)
            part = accepted(values, codes[:m])
        elif fits:  # already in place
            have += count
            continue
        else:
            part = scratch[:count]
        count = min(len(part), n - have)
        out[have : have + count] = part[:count]
        have += count


@overload
def discrete_gaussian(
    sigma2: object,
    size: int | tuple[int, ...] = (),
    *,
    rng: RandomSource | None = None,
    work: FixedWork | None = None,
    big_ints: Literal["object"] = "object",
) -> IntArray | ObjectArray: ...
@overload
def discrete_gaussian(
    sigma2: object,
    size: int | tuple[int, ...] = (),
    *,
    rng: RandomSource | None = None,
    work: FixedWork | None = None,
    big_ints: BigInts,
) -> IntArray | ObjectArray | BigIntArray: ...
def discrete_gaussian(
    sigma2: object,
    size: int | tuple[int, ...] = (),
    *,
    rng: RandomSource | None = None,
    work: FixedWork | None = None,
    big_ints: BigInts = "object",
) -> IntArray | ObjectArray | BigIntArray:
    r"""Draw exact samples of the discrete Gaussian N_Z(0, sigma2).

    The pmf is ``P[X = x] ∝ exp(-x**2 / (2 sigma2))`` on the integers (CKS §1).
    The distribution is exactly that of CKS Algorithm 3 (see
    ``docs/sampler-exactness.md``; for 2**12 <= sigma2 < 2**52 it is drawn by a discrete
    ziggurat with the same law, §2.6); numpy does the bulk of the work and the
    rare comparisons that 53 bits cannot settle are finished with exact
    arithmetic.

    Parameters
    ----------
    sigma2 : int, Fraction, float or str
        The scale parameter 0 < sigma^2 <= 2**2047, taken as an exact rational (a
        float at its exact binary value, ``"p/q"`` strings allowed).
    size : int or tuple of int, optional
        Output shape; ``()`` (the default) gives a 0-d array.
    rng : RandomSource, optional
        Source of random bits, safe to share between threads; ``None`` means
        the per-process default :class:`~gaussdp.random.SystemRandom`. A bare
        int is refused: use
        :class:`~gaussdp.random.ChaCha20Random` for reproducible draws.
    work : FixedWork, optional
        Fixed-work mode: a data-independent number of candidates, raising
        :class:`SamplingShortfallError` (nothing released) with probability at
        most ``work.delta_prime``. ``None`` (default) draws until done.
    big_ints : {"object", "limbs"}, optional
        How values are returned when ``sigma2 > 2**80`` (they can exceed the
        int64 range): ``"object"`` (default), a numpy object array of Python
        ints; ``"limbs"``, a :class:`BigIntArray` (sign and 64-bit limbs). Both
        come from the same draw, with the same exact values for the same random
        words; ``"limbs"`` only skips building the Python ints, about 3× faster
        again (``"object"`` is above 5·10⁶ samples/s at ``sigma2 = 10**100``,
        ``docs/sampling.md``). Ignored for ``sigma2 <= 2**80``.

    Returns
    -------
    numpy.ndarray or BigIntArray
        ``int64`` when ``sigma2 <= 2**80``; otherwise ``object`` holding
        Python ints, or a :class:`BigIntArray` with ``big_ints="limbs"``. In
        the int64 case a value beyond int64 (probability below
        ``10**-(10**6)``) raises ``OverflowError``.

    Raises
    ------
    TypeError, ValueError
        For a ``sigma2`` that is not a finite positive rational, a negative or
        non-integer ``size``, an ``rng`` that is not a RandomSource, or another
        ``big_ints``. Nothing is drawn.
    SamplingShortfallError
        Fixed-work mode only, with probability at most ``work.delta_prime``.

    References
    ----------
    Canonne, Kamath, Steinke (2020), §5, Algorithms 1-3.

    Examples
    --------
    >>> from gaussdp.random import ChaCha20Random
    >>> discrete_gaussian(4, 6, rng=ChaCha20Random(0))
    array([ 0, -1, -4,  3, -2, -2])
    >>> discrete_gaussian(Fraction(1, 4), (2, 3), rng=ChaCha20Random(1))
    array([[ 0,  0,  0],
           [-1,  0,  1]])
    >>> discrete_gaussian(10**100, 2, rng=ChaCha20Random(2)).dtype
    dtype('O')
    >>> big = discrete_gaussian(10**100, 2, rng=ChaCha20Random(2), big_ints="limbs")
    >>> big.limbs, big.tolist() == discrete_gaussian(10**100, 2, rng=ChaCha20Random(2)).tolist()
    (4, True)
    """
    return _sample(
        "sigma2", sigma2, size, rng, work, discrete_gaussian_scalar, _gaussian_drawer, big_ints
    )


def discrete_laplace(
    scale: object,
    size: int | tuple[int, ...] = (),
    *,
    rng: RandomSource | None = None,
    work: FixedWork | None = None,
) -> IntArray | npt.NDArray[np.object_]:
    r"""Draw exact samples of the discrete Laplace with pmf ∝ ``exp(-|x| / scale)``.

    The distribution is exactly that of CKS Algorithm 2 (see
    ``docs/sampler-exactness.md``). Its variance is
    ``2 q / (1 - q)**2`` with ``q = exp(-1/scale)`` (CKS §4).

    Parameters
    ----------
    scale : int, Fraction, float or str
        The scale ``t > 0`` (the mechanism is ``(Δ/t, 0)``-DP), an exact rational.
    size : int or tuple of int, optional
        Output shape; ``()`` (the default) gives a 0-d array.
    rng : RandomSource, optional
        Source of random bits; ``None`` means the per-process default
        :class:`~gaussdp.random.SystemRandom`.
    work : FixedWork, optional
        Fixed-work mode, as in :func:`discrete_gaussian`.

    Returns
    -------
    numpy.ndarray
        ``int64`` when ``scale <= 2**40``, otherwise ``object`` holding Python
        ints; see :func:`discrete_gaussian`.

    Raises
    ------
    TypeError, ValueError
        For invalid ``scale``, ``size`` or ``rng``; nothing is drawn.
    SamplingShortfallError
        Fixed-work mode only, with probability at most ``work.delta_prime``.

    References
    ----------
    Canonne, Kamath, Steinke (2020), §5.2, Algorithm 2.

    Examples
    --------
    >>> from gaussdp.random import ChaCha20Random
    >>> discrete_laplace(Fraction(5, 2), 6, rng=ChaCha20Random(0))
    array([ 0,  0,  0, -3, -2,  2])
    """
    values = _sample("scale", scale, size, rng, work, discrete_laplace_scalar, _laplace_drawer)
    assert not isinstance(values, BigIntArray)  # limbs are for the Gaussian only
    return values
