r"""The small-path Gaussian block of :mod:`gaussdp.sampling.vectorized` as compiled loops.

Optional: needs numba (the ``torch`` extra). ``_gaussian_small`` in ``vectorized.py``
runs about 30 numpy passes over a block of candidates, each with ≈ 1 µs of fixed cost
and a trip through memory, and calls the C library's scalar ``log`` and ``exp``.
:func:`gaussian_block` makes the same decisions on the same words with the same bit
layout (docs/sampler-exactness.md §2.4) in one compiled call: the float brackets of
§2.1 and §2.2, computed in the same order, with this module's own ``log`` and ``exp``
(:func:`log_into`, :func:`exp_into`: range reduction and a truncated series, written
so that the compiler vectorises them, with the error bounds proved in §2.5). The
lanes it cannot decide are finished exactly by the caller, in the numpy path's order.

Compiled on first use and cached on disk (``cache=True``: next to this file, or in
numba's user cache directory where that is not writable, or ``NUMBA_CACHE_DIR``).
Importing this module imports numba; only
:func:`gaussdp.sampling.vectorized._use_fused_kernels` imports it, when asked to.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import numpy.typing as npt

__all__ = [
    "ACCEPTED",
    "BERNOULLI_UNDECIDED",
    "GEOMETRIC_UNDECIDED",
    "REJECTED",
    "compact",
    "exp_into",
    "exp_one",
    "gaussian_block",
    "log_into",
    "ziggurat_block",
]

F64Array = npt.NDArray[np.float64]

#: Lane codes written by :func:`gaussian_block`.
REJECTED, ACCEPTED, BERNOULLI_UNDECIDED, GEOMETRIC_UNDECIDED = 0, 1, 2, 3

_jit = numba.njit(cache=True, nogil=True, error_model="numpy")

# Lanes per inner pass: the scratch vectors stay in the L1 cache.
_LANES = 256
# The ziggurat's wedge bracket (§2.6): |p_f - S rho(x) / H_k| < 2**-43 < this.
_WEDGE_REL = 2.0**-42
_LN2 = math.log(2.0)  # ln 2 rounded to nearest (relative error <= 2**-53)
# Cody-Waite split of ln 2 (§2.5): _LN2_HI has 32 significant bits, so k * _LN2_HI is
# exact for |k| < 2**21; |ln 2 - _LN2_HI - _LN2_LO| < 2**-86.
_LN2_HI = float.fromhex("0x1.62e42fee00000p-1")
_LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")
_INV_LN2 = 1.0 / _LN2
# Adding 1.5 * 2**52 rounds a float of magnitude < 2**51 to an integer; the sum's bit
# pattern minus this constant's is that integer (§2.5).
_ROUND = 6755399441055744.0
_ROUND_BITS = 0x4338000000000000
# exp(x) for x below: 0.0. The smallest float >= -1022 ln 2 (fl(-1022 ln 2)): e^x < 2**-1022
# for every float x below it, e^x >= 2**-1022 (normal) from it on (§2.5; checked with mpmath
# in tests/sampling/test_sampling_exact.py).
_EXP_FLOOR = -708.3964185322641
_MANTISSA = 0xFFFFFFFFFFFFF
_SQRT2_MANTISSA = 0x6A09E667F3BCD  # the mantissa bits of fl(sqrt(2))
# 2 atanh(s) = 2 s sum_k s**(2k) / (2k + 1), k = 0..10 (§2.5)
_A1, _A2, _A3, _A4, _A5 = 1 / 3, 1 / 5, 1 / 7, 1 / 9, 1 / 11
_A6, _A7, _A8, _A9, _A10 = 1 / 13, 1 / 15, 1 / 17, 1 / 19, 1 / 21
# exp(r) = sum_j r**j / j!, j = 0..12 (§2.5)
_E3, _E4, _E5, _E6, _E7 = (1 / math.factorial(j) for j in range(3, 8))
_E8, _E9, _E10, _E11, _E12 = (1 / math.factorial(j) for j in range(8, 13))


@_jit
def log_into(values: F64Array, offset: int, out: F64Array, exponents: F64Array) -> None:
    """``out = log(values * 2**offset)`` for positive normal ``values`` and an integer
    ``offset`` (relative error < 2**-47, §2.5).

    ``values = 2**e y`` with ``y`` in ``[sqrt(2)/2, sqrt(2))``, read off the bits;
    ``log = (e + offset) ln 2 + 2 atanh((y - 1) / (y + 1))``: the power of two is added
    as an integer, so a result near 0 keeps its relative accuracy. ``exponents`` is
    scratch.
    """
    bits = values.view(np.int64)
    reduced = out.view(np.int64)
    for i in range(values.size):
        b = bits[i]
        mantissa = b & _MANTISSA
        high = mantissa >= _SQRT2_MANTISSA  # y in [sqrt 2, 2): halve it
        exponents[i] = (b >> 52) - 1023 + offset + (1 if high else 0)
        reduced[i] = mantissa | ((1022 if high else 1023) << 52)
    for i in range(values.size):
        y = out[i]
        s = (y - 1.0) / (y + 1.0)  # y - 1 is exact (Sterbenz)
        z = s * s
        p = _A10 * z + _A9
        p = ((((((((p * z + _A8) * z + _A7) * z + _A6) * z + _A5) * z + _A4) * z + _A3) * z + _A2)
             * z + _A1) * z + 1.0  # fmt: skip
        out[i] = exponents[i] * _LN2 + 2.0 * s * p


@_jit
def exp_into(values: F64Array, out: F64Array, rounded: F64Array) -> None:
    """``out = exp(values)`` for ``values <= 0`` (relative error < 2**-47 down to
    :data:`_EXP_FLOOR` = fl(-1022 ln 2), and 0.0 below, where e^x < 2**-1022, §2.5).
    ``values``, ``out`` and the scratch ``rounded`` must not overlap.

    ``k = round(x / ln 2)`` is computed once, as ``fl(x / ln 2) + 1.5 * 2**52`` in
    ``rounded``: both the bits of ``2**k`` and the float ``k`` of the reduction are read
    from that one stored value, so they cannot disagree.
    """
    scale = out.view(np.int64)
    rounded_bits = rounded.view(np.int64)
    for i in range(values.size):
        rounded[i] = max(values[i], _EXP_FLOOR) * _INV_LN2 + _ROUND  # k + 1.5 * 2**52
    for i in range(values.size):
        scale[i] = (rounded_bits[i] - _ROUND_BITS + 1023) << 52  # the bits of 2**k
    for i in range(values.size):
        x = max(values[i], _EXP_FLOOR)
        k = rounded[i] - _ROUND  # exact (§2.5)
        r = (x - k * _LN2_HI) - k * _LN2_LO  # Cody-Waite: x - k ln 2, |r| <= 0.3466
        p = _E12 * r + _E11
        p = ((((((((p * r + _E10) * r + _E9) * r + _E8) * r + _E7) * r + _E6) * r + _E5) * r
              + _E4) * r + _E3) * r  # fmt: skip
        p = ((p + 0.5) * r + 1.0) * r + 1.0
        out[i] = p * out[i] if values[i] >= _EXP_FLOOR else 0.0


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def exp_one(value: float) -> float:
    """``exp_into`` of one value: the same operations in the same order, so the same float.

    For the ziggurat's wedge lanes (§2.6), about 1 % of a block, decided one at a time:
    ``exp_into`` on arrays of one cost a call and three loops each. ``2**k`` is
    ``ldexp(1, k)``, exact, where ``exp_into`` writes the same power's bits.
    """
    x = max(value, _EXP_FLOOR)
    k = (x * _INV_LN2 + _ROUND) - _ROUND  # exact (§2.5)
    r = (x - k * _LN2_HI) - k * _LN2_LO
    p = _E12 * r + _E11
    p = ((((((((p * r + _E10) * r + _E9) * r + _E8) * r + _E7) * r + _E6) * r + _E5) * r
          + _E4) * r + _E3) * r  # fmt: skip
    p = ((p + 0.5) * r + 1.0) * r + 1.0
    return p * math.ldexp(1.0, int(k)) if value >= _EXP_FLOOR else 0.0


@_jit
def gaussian_block(
    words: npt.NDArray[np.uint64],
    n: int,
    packed: bool,
    tau_f: float,
    c_f: float,
    inv_two_sigma2_f: float,
    eta_rel: float,
    bracket_rel: float,
    values: F64Array,
    codes: npt.NDArray[np.uint8],
) -> int:
    """Decide ``n`` candidates of CKS Alg 3 from ``words``; the number of undecided lanes.

    ``words`` holds ``n`` words (``packed``: ``[31 bits of U | B | 32 bits of U']``) or
    ``n + ceil(n / 2)`` (``[52 bits of U | B]``, then ``U'`` of candidate ``i`` in 32-bit
    half ``i`` of the extra words), as in ``_gaussian_small`` (§2.4). For each lane
    ``i``: ``values[i]`` is ``(1 - 2B) G`` as a float (``G`` the decided geometric) and
    ``codes[i]`` one of :data:`REJECTED`, :data:`ACCEPTED`, :data:`BERNOULLI_UNDECIDED`
    (``G`` decided, the acceptance not) or :data:`GEOMETRIC_UNDECIDED` (``values[i]`` is
    then ``floor(v - eta)``, the hint of §3).
    """
    geo_bits = 31 if packed else 52
    delta = bracket_rel * 4294967296.0  # 2**32 U' prefixes (§2.2)
    twice = np.empty(_LANES)  # 2m + 1
    logs = np.empty(_LANES)
    scratch = np.empty(_LANES)
    lows = np.empty(_LANES)
    geometric = np.empty(_LANES)
    negative = np.empty(_LANES)
    m_acc = np.empty(_LANES + 1)
    minus_x = np.empty(_LANES)
    probs = np.empty(_LANES)
    undecided = 0
    for start in range(0, n, _LANES):
        lanes = min(_LANES, n - start)
        if packed:
            for j in range(lanes):
                w = words[start + j]
                twice[j] = 2.0 * float(np.int64(w >> np.uint64(33))) + 1.0  # exact: < 2**53
                negative[j] = float(np.int64((w >> np.uint64(32)) & np.uint64(1)))
                m_acc[j] = float(np.int64(w & np.uint64(0xFFFFFFFF)))
        else:
            for j in range(lanes):
                w = words[start + j]
                twice[j] = 2.0 * float(np.int64(w >> np.uint64(12))) + 1.0  # exact: < 2**53
                negative[j] = float(np.int64(w & np.uint64(1)))
            for j in range(0, lanes, 2):  # U' of candidate i: 32-bit half i of the extra words
                extra = words[n + ((start + j) >> 1)]
                m_acc[j] = float(np.int64(extra & np.uint64(0xFFFFFFFF)))
                m_acc[j + 1] = float(np.int64(extra >> np.uint64(32)))
        log_into(twice[:lanes], -(geo_bits + 1), logs[:lanes], scratch[:lanes])
        for j in range(lanes):  # branch-free, so that it is vectorised
            # §2.1: v = -tau ln u_mid, u_mid = (2m + 1) / 2**(bits + 1); decided unless an
            # integer lies within eta of v (or m = 0 with tau < 1).
            m = (twice[j] - 1.0) * 0.5
            v = logs[j] * -tau_f
            eta = tau_f / max(m, 1.0) + v * eta_rel
            low = np.floor(v - eta)
            geometric[j] = float(int((low != np.floor(v + eta)) | ((m == 0.0) & (tau_f < 1.0))))
            lows[j] = low
            # §2.2: -x_f = -(G - c)^2 / (2 sigma2), as in _gaussian_small
            d = low - c_f
            minus_x[j] = d * d * -inv_two_sigma2_f
        exp_into(minus_x[:lanes], probs[:lanes], scratch[:lanes])
        for j in range(lanes):  # branch-free too: accept and reject are coin flips
            i = start + j
            low = lows[j]
            geo = geometric[j]
            neg = negative[j]
            values[i] = low * (1.0 - 2.0 * neg * (1.0 - geo))  # G unsigned: the §3 hint
            scaled = probs[j] * 4294967296.0
            accept = float(int(m_acc[j] <= scaled - (1.0 + delta)))
            open_ = float(int(m_acc[j] < scaled + delta)) - accept
            # CKS Alg 2: B = 1 and Y = 0 is restarted (REJECTED)
            keep = 1.0 - neg * float(int(low == 0.0))
            code = geo * GEOMETRIC_UNDECIDED + (1.0 - geo) * keep * (
                accept * ACCEPTED + open_ * BERNOULLI_UNDECIDED
            )
            codes[i] = np.uint8(code)
            undecided += int(code >= BERNOULLI_UNDECIDED)
    return undecided


@_jit
def compact(values: F64Array, codes: npt.NDArray[np.uint8]) -> int:
    """Move the accepted lanes' values to the front of ``values``, in order; their number."""
    count = 0
    for i in range(codes.size):  # branch-free: a lane is accepted about half the time
        values[count] = values[i]
        count += int(codes[i] == ACCEPTED)
    return count


@_jit
def ziggurat_block(
    words: npt.NDArray[np.uint64],
    b: int,
    e: int,
    beta: int,
    blocks: int,
    buckets: npt.NDArray[np.uint64],
    slots: npt.NDArray[np.uint64],
    ratios: F64Array,
    inv_two_sigma2_f: float,
    codes: npt.NDArray[np.uint8],
    out: npt.NDArray[np.int64],
) -> int:
    """:meth:`gaussdp.sampling._ziggurat.Ziggurat.block` as one compiled call (§2.6).

    ``buckets[i]`` is ``prob << 32 | primary << 16 | alias`` of alias bucket ``i`` and
    ``slots[2 i]``, ``slots[2 i + 1]`` are ``entry << 48 | T`` of its primary and alias
    entries, ``T`` the entry's quick-accept threshold
    (:class:`gaussdp.sampling._ziggurat.Tables`). The same fields of the same words, the
    same integer decisions, and for the wedge lanes the same floats (:func:`exp_one`, the
    arithmetic of ``exp_into``, instead of numpy's ``exp``). Writes ``codes[i]`` (0
    rejected, 1 accepted, 2 undecided, 3 tail). If no lane is undecided or in the tail,
    the accepted ``(1 - 2B) x`` are at the front of ``out`` in lane order, CKS Alg 2's
    restarted zeros left out, and their number is returned; otherwise minus the number
    of lanes left to decide (``out`` is then scratch).

    In passes over :data:`_LANES` lanes: the two table look-ups (scalar: ``out`` takes
    the slots, so the compiler does not turn them into vector gathers, which cost more
    here), the fields and the quick accept (vectorised), then lane by lane the other
    lanes' decisions and the compaction.
    """
    shift_b = np.uint64(64 - b)
    shift_v = np.uint64(48 - b)
    shift_s = np.uint64(beta + e)
    shift_u = np.uint64(beta)
    shift_e = np.uint64(e)
    u_mask = np.uint64((1 << e) - 1)
    m_mask = np.uint64((1 << beta) - 1)
    v_mask = np.uint64(0xFFFF)
    t_mask = np.uint64((1 << 48) - 1)
    zero, one, high, entry_shift = np.uint64(0), np.uint64(1), np.uint64(32), np.uint64(48)
    tail = np.uint64(blocks)
    two_beta = float(1 << beta)
    delta = _WEDGE_REL * two_beta
    signed = np.empty(_LANES, dtype=np.int64)
    flags = np.empty(_LANES, dtype=np.uint64)  # quick accept | restart << 1
    pending = 0
    kept = 0
    for start in range(0, words.size, _LANES):
        lanes = min(_LANES, words.size - start)
        block = words[start : start + lanes]
        chosen = out[start : start + lanes]  # the slots; overwritten only once read
        for j in range(lanes):
            word = block[j]
            bucket = word >> shift_b
            alias = np.uint64(((word >> shift_v) & v_mask) >= (buckets[bucket] >> high))
            chosen[j] = np.int64(slots[(bucket << one) | alias])
        for j in range(lanes):
            word = block[j]
            slot = np.uint64(chosen[j])
            x = ((slot >> entry_shift) << shift_e) | ((word >> shift_u) & u_mask)
            negative = (word >> shift_s) & one
            signed[j] = np.int64((x ^ (zero - negative)) + negative)
            quick = np.uint64((word & m_mask) < (slot & t_mask))
            flags[j] = quick | (np.uint64((negative == one) & (x == zero)) << one)
        for j in range(lanes):
            flag = flags[j]
            code = np.uint8(flag & one)
            if code == REJECTED:  # about 1 % of lanes: the wedge, the tail, the reject entry
                entry = np.uint64(chosen[j]) >> entry_shift
                if entry == tail:
                    code = np.uint8(3)
                    pending += 1
                elif entry < tail:  # the wedge: §2.6's float bracket
                    word = block[j]
                    xf = float(np.int64((entry << shift_e) | ((word >> shift_u) & u_mask)))
                    big = exp_one(xf * xf * -inv_two_sigma2_f) * ratios[entry] * two_beta
                    mf = float(np.int64(word & m_mask))
                    if mf + 1.0 <= big - delta:
                        code = np.uint8(ACCEPTED)
                    elif mf < big + delta:
                        code = np.uint8(2)
                        pending += 1
            codes[start + j] = code
            out[kept] = signed[j]  # branch-free compaction; CKS Alg 2's restart of (B = 1, 0)
            kept += int(code == ACCEPTED) & ~int(flag >> one)
    return -pending if pending else kept
