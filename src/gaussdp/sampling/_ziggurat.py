r"""A discrete ziggurat for N_Z(0, sigma2), 2**12 <= sigma2 < 2**52 (docs §2.6).

Rejection sampling from a step envelope over rho(x) = exp(-x^2 / (2 sigma2)): the
magnitudes are cut into blocks of w = 2**e integers (w in (sigma/128, sigma/64]);
block k has the integer height H_k >= S rho(k w) for one integer scale S, and the
blocks from K on are covered by heights halving block by block (the "tail" entry).
A candidate is one 64-bit word: an alias table picks an entry with probability
exactly its integer weight over 2**(b + 16), then a uniform offset in the block and a
sign; the uniform U of the acceptance ``U < S rho(x) / H_k`` is accepted from its
prefix by an integer comparison when it is below the next block's lower height (the
common case), and otherwise decided by a proven float bracket or exactly
(:meth:`LazyUniform.below_scaled_exp_neg`). About 99.4 % of candidates are accepted,
one word each; CKS Alg 3 needs 1.5 words per candidate and accepts about 76 %.

The tables are built with floats whose errors are bounded (§2.6): every height is
proven above S rho and every threshold below it. This module holds the tables, the
numpy block, the one-candidate path (§4.1) and the exact finish; the compiled block
is :func:`gaussdp.sampling._fused.ziggurat_block`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from fractions import Fraction
from math import isqrt
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from gaussdp.random import RandomSource
from gaussdp.sampling._exact import LazyUniform

__all__ = [
    "ACCEPTED",
    "REJECTED",
    "SIGMA2_MAX",
    "SIGMA2_MIN",
    "TAIL",
    "UNDECIDED",
    "Ziggurat",
    "accepted",
]

#: The sigma2 range of the ziggurat: sigma >= 64 (at least 64 integers per block of
#: width >= 1) and sigma < 2**26 (U keeps at least 13 bits of the word, §2.6).
SIGMA2_MIN = Fraction(2**12)
SIGMA2_MAX = Fraction(2**52)  # exclusive

#: Lane codes of a block.
REJECTED, ACCEPTED, UNDECIDED, TAIL = 0, 1, 2, 3

_V_BITS = 16  # alias capacity per bucket: 2**16
_BUCKET_BITS = 10  # 1024 alias buckets: K blocks, the tail and the reject entry
# Relative margin of the tables' float heights (their error is below 2**-42, §2.6).
_MARGIN = 2.0**-30
# exp(-gamma) for gamma above this (e^-700 < 2**-1009): the height is 1 and the lower
# bounds 0, without a float exp (which would leave the normal range).
_GAMMA_CUT = 700.0
# Bracket of the wedge (§2.6): |p_f - S rho(x) / H_k| < 2**-43, doubled.
_WEDGE_REL = 2.0**-42
# ln 2 < 0.6932: K w^2 >= 0.6932 sigma2 makes the tail's heights halve per block.
_LN2_UP = Fraction(6932, 10000)

I64Array = npt.NDArray[np.int64]
F64Array = npt.NDArray[np.float64]
U64Array = npt.NDArray[np.uint64]
U8Array = npt.NDArray[np.uint8]
BoolArray = npt.NDArray[np.bool_]


def accepted(values: I64Array, codes: U8Array) -> I64Array:
    """The accepted values, in lane order."""
    return np.compress(codes == ACCEPTED, values)


class Ziggurat:
    """The tables of the discrete ziggurat for one sigma2 (built once, §2.6)."""

    def __init__(self, sigma2: Fraction, bucket_bits: int = _BUCKET_BITS) -> None:
        """``bucket_bits`` (10) sets K = 2**bucket_bits - 2 blocks; tests shrink it so
        that the tail carries mass."""
        assert SIGMA2_MIN <= sigma2 < SIGMA2_MAX
        self.sigma2 = sigma2
        floor_sigma = isqrt(sigma2.numerator // sigma2.denominator)  # floor(sigma) >= 64
        self.e = floor_sigma.bit_length() - 7  # w = 2**e: sigma / w in [64, 128)
        self.w = 1 << self.e
        self.blocks = (1 << bucket_bits) - 2  # K = 1022: K w >= 7.98 sigma
        # tail super-blocks of 2**h blocks: K w 2**h w >= ln 2 sigma2 (2**h <= 16 for K = 1022)
        self.h = 0
        while self.blocks * self.w * (self.w << self.h) < _LN2_UP * sigma2:
            self.h += 1
        self.b = bucket_bits
        self.beta = 64 - self.b - _V_BITS - 1 - self.e  # bits of U's prefix, >= 18
        self.inv_two_sigma2_f = float(1 / (2 * sigma2))

    @functools.cached_property
    def tables(self) -> Tables:
        """The alias table, heights, thresholds and slacks, built on first use."""
        return _build(self)

    @property
    def acceptance(self) -> float:
        """A lower bound of the per-candidate acceptance probability (§2.6, §4)."""
        total = 1 << (self.b + _V_BITS)
        root = math.sqrt(2 * math.pi * float(self.sigma2))
        return self.tables.scale * root / (2 * self.w * total) * (1 - 1e-9)

    def block(
        self, words: U64Array, exp: Callable[[F64Array], None]
    ) -> tuple[I64Array, U8Array, int]:
        """Decide the candidates of ``words`` with numpy passes: ``(values, codes, pending)``.

        ``values`` are the signed ``(1 - 2B) x``; CKS Alg 2's restarted ``(B = 1, 0)`` are
        coded REJECTED; ``pending`` counts the UNDECIDED and TAIL lanes. ``exp`` is the
        kernel of the wedge's bracket (in place, assumption 3).
        """
        t = self.tables
        _, _, entry, x, negative = self._decode(words)
        values = ((x ^ (np.uint64(0) - negative)) + negative).view(np.int64)
        threshold = t.thresholds.view(np.uint64)[entry]  # T_k >= 0: the same integers
        m = words & np.uint64((1 << self.beta) - 1)
        quick = m < threshold
        codes = quick.view(np.uint8)  # ACCEPTED, or REJECTED for now
        slow = np.flatnonzero(~quick)  # about 1 % of lanes
        slow_entry = entry[slow]
        codes[slow[slow_entry == self.blocks]] = TAIL
        in_block = slow_entry < self.blocks
        wedge = slow[in_block]
        if wedge.size:
            xw = x[wedge].astype(np.float64)
            p = xw * xw * -self.inv_two_sigma2_f
            exp(p)
            p *= t.ratios[slow_entry[in_block]]
            codes[wedge] = _wedge_codes(p, m[wedge].view(np.int64), self.beta)
        self._restart(x, negative, codes)
        return values, codes, int(np.count_nonzero(codes[slow] >= UNDECIDED))

    def _decode(self, words: U64Array) -> tuple[I64Array, BoolArray, U64Array, U64Array, U64Array]:
        """``(bucket, alias chosen, entry, x, B)`` of each word (§2.6's layout)."""
        t = self.tables
        bucket = (words >> np.uint64(64 - self.b)).view(np.int64)
        packed = t.packed[bucket]
        v = (words >> np.uint64(48 - self.b)) & np.uint64(0xFFFF)
        alias = v >= (packed >> np.uint64(32))
        entry = np.where(alias, packed, packed >> np.uint64(16)) & np.uint64(0xFFFF)
        u = (words >> np.uint64(self.beta)) & np.uint64(self.w - 1)
        x = (entry << np.uint64(self.e)) | u
        negative = (words >> np.uint64(self.beta + self.e)) & np.uint64(1)
        return bucket, alias, entry, x, negative

    @staticmethod
    def _restart(x: U64Array, negative: U64Array, codes: U8Array) -> None:
        """Code CKS Alg 2's restarted ``(B = 1, x = 0)`` REJECTED."""
        zero = np.flatnonzero(x == np.uint64(0))
        codes[zero[negative[zero] == np.uint64(1)]] = REJECTED

    def signed(self, words: U64Array, codes: U8Array) -> I64Array:
        """The signed values of ``words``, with the restarted lanes coded REJECTED in
        ``codes`` (the compiled block's codes, before :meth:`finish`)."""
        _, _, _, x, negative = self._decode(words)
        self._restart(x, negative, codes)
        return ((x ^ (np.uint64(0) - negative)) + negative).view(np.int64)

    def finish(self, words: U64Array, values: I64Array, codes: U8Array, rng: RandomSource) -> None:
        """Decide the UNDECIDED and TAIL lanes exactly, in lane order (§2.6)."""
        for i in np.flatnonzero(codes >= UNDECIDED).tolist():
            word = int(words[i])
            accepted, x = self.decide_exactly(word, int(codes[i]) == TAIL, rng)
            codes[i] = ACCEPTED if accepted else REJECTED
            values[i] = -x if self.fields(word)[1] else x  # x > 0: restarts are coded already

    def fields(self, word: int) -> tuple[int, bool, int, int]:
        """``(entry, negative, u, m)`` of one candidate word (§2.6's layout)."""
        t = self.tables
        bucket = word >> (64 - self.b)
        v = (word >> (48 - self.b)) & 0xFFFF
        entry = int(t.primary[bucket]) if v < int(t.prob[bucket]) else int(t.alias[bucket])
        negative = bool((word >> (self.beta + self.e)) & 1)
        u = (word >> self.beta) & (self.w - 1)
        return entry, negative, u, word & ((1 << self.beta) - 1)

    def decide_exactly(self, word: int, tail: bool, rng: RandomSource) -> tuple[bool, int]:
        """The acceptance of one candidate, exactly: ``(accepted, |x|)``."""
        entry, _, u, m = self.fields(word)
        scale, heights = self.tables.scale, self.tables.heights
        if tail:  # super-block J (geometric(1/2)), height H_K 2**-J / S: fresh bits
            j = _geometric_half(rng)
            span = self.w << self.h
            x = self.blocks * self.w + j * span + rng.randbits(self.h + self.e)
            weight = Fraction(scale << j, int(heights[self.blocks]))
        else:
            x = entry * self.w + u
            weight = Fraction(scale, int(heights[entry]))
        gamma = Fraction(x * x) / (2 * self.sigma2)
        return LazyUniform(m, self.beta, rng).below_scaled_exp_neg(gamma, weight), x

    def few(self, n: int, need: int, rng: RandomSource) -> list[int]:
        """The block of ``n`` candidates one at a time, up to ``need`` outputs (§4.1)."""
        thresholds, ratios = self.tables.thresholds, self.tables.ratios
        out: list[int] = []
        two_beta = float(1 << self.beta)
        for word in rng._word_tuple(n):
            entry, negative, u, m = self.fields(word)
            x = entry * self.w + u
            if entry == self.blocks + 1 or (negative and x == 0):
                continue  # the reject entry, or CKS Alg 2's restart of (B = 1, 0)
            if entry == self.blocks:
                accepted, x = self.decide_exactly(word, True, rng)
            elif m < int(thresholds[entry]):
                accepted = True
            else:
                xf = float(x)
                big = math.exp(xf * xf * -self.inv_two_sigma2_f) * float(ratios[entry]) * two_beta
                delta = _WEDGE_REL * two_beta
                if m + 1 <= big - delta:
                    accepted = True
                elif m >= big + delta:
                    accepted = False
                else:
                    accepted = self.decide_exactly(word, False, rng)[0]
            if accepted:
                out.append(-x if negative else x)
                if len(out) == need:
                    break
        return out


def _geometric_half(rng: RandomSource) -> int:
    """J with P[J = j] = 2**-(j + 1): the number of 1 bits before the first 0."""
    j = 0
    while True:
        word = rng.randbits(64)
        ones = (~word & (word + 1)).bit_length() - 1  # trailing ones
        if ones < 64:
            return j + ones
        j += 64


def _wedge_codes(p: F64Array, m: I64Array, beta: int) -> U8Array:
    """§2.6's bracket: ACCEPTED, REJECTED or UNDECIDED from p_f ~ S rho(x) / H_k."""
    two_beta = float(1 << beta)
    big = p * two_beta
    delta = _WEDGE_REL * two_beta
    accept = (m + 1) <= big - delta
    reject = m >= big + delta
    return np.where(accept, ACCEPTED, np.where(reject, REJECTED, UNDECIDED)).astype(np.uint8)


def _heights(zig: Ziggurat) -> tuple[I64Array, I64Array, int]:
    """``(H, L, S)``: H_k >= S rho(k w) for k <= K, L_k <= S rho((k + 1) w - 1) for
    k < K, and the scale S (§2.6)."""
    k_f = zig.inv_two_sigma2_f
    blocks, w = zig.blocks, zig.w
    start = np.arange(blocks + 1, dtype=np.float64) * w  # exact: < 2**35
    end = start[:blocks] + (w - 1)

    def rho(x: F64Array) -> tuple[F64Array, npt.NDArray[np.bool_]]:
        gamma = x * x * k_f
        small = gamma <= _GAMMA_CUT
        return np.exp(-np.minimum(gamma, _GAMMA_CUT)), small

    p_start, ok_start = rho(start)
    p_end, ok_end = rho(end)
    total = 1 << (zig.b + _V_BITS)
    # sum H_k + 2 H_K <= S (1 + 2**-29) (sum p + 2 p_K) + K + 1 <= total
    mass = float(np.sum(p_start[:blocks])) + float(p_start[blocks]) * (2 << zig.h)
    scale = int((total - blocks - (4 << zig.h)) / (mass * (1.0 + 2.0**-28)))
    heights = np.where(ok_start, np.floor(scale * p_start * (1.0 + _MARGIN)) + 1.0, 1.0)
    lows = np.where(ok_end, np.floor(scale * p_end * (1.0 - _MARGIN)), 0.0)
    return heights.astype(np.int64), lows.astype(np.int64), scale


class Tables(NamedTuple):
    """A ziggurat's tables (§2.6)."""

    primary: I64Array  # per alias bucket: its own entry, chosen if v < prob
    alias: I64Array  # per alias bucket: the other entry
    prob: I64Array
    thresholds: I64Array  # per entry: m < T_k accepts at once
    ratios: F64Array  # per entry: fl(S / H_k), 0 for the tail and reject entries
    heights: I64Array  # H_k for k <= K
    scale: int  # S
    packed: U64Array  # per bucket: prob << 32 | primary << 16 | alias (the compiled block)
    slots: U64Array  # per bucket: entry << 48 | T_entry of its primary, then of its alias


def _build(zig: Ziggurat) -> Tables:
    """The alias table over the K + 2 entries, the quick-accept thresholds and the
    wedge's slack (§2.6); the alias masses are checked against the weights exactly."""
    heights, lows, scale = _heights(zig)
    blocks, capacity = zig.blocks, 1 << _V_BITS
    buckets = 1 << zig.b
    total = buckets * capacity
    weights = [int(h) for h in heights[:blocks]] + [int(heights[blocks]) << (zig.h + 1)]
    used = sum(weights)
    if used > total:
        raise AssertionError("ziggurat heights exceed the alias capacity")
    weights.append(total - used)  # the reject entry K + 1
    weights += [0] * (buckets - len(weights))  # empty entries: always aliased
    primary = list(range(buckets))
    alias = list(range(buckets))
    prob = [capacity] * buckets
    rest = list(weights)
    small = [i for i in range(buckets) if rest[i] < capacity]
    large = [i for i in range(buckets) if rest[i] >= capacity]
    while small and large:
        s, big = small.pop(), large[-1]
        prob[s], alias[s] = rest[s], big
        rest[big] -= capacity - rest[s]
        if rest[big] < capacity:
            small.append(large.pop())
    for i in small + large:  # what is left fills its bucket (its rest is the capacity)
        prob[i], alias[i] = capacity, i
    reject = blocks + 1
    for i in range(blocks + 2, buckets):
        primary[i] = reject  # never chosen (prob 0 unless a leftover), but never a block
    primary_a = np.array(primary, dtype=np.int64)
    alias_a = np.array(alias, dtype=np.int64)
    alias_a[alias_a >= blocks + 2] = reject
    prob_a = np.array(prob, dtype=np.int64)
    mass = np.zeros(buckets, dtype=np.int64)
    np.add.at(mass, primary_a, prob_a)
    np.add.at(mass, alias_a, capacity - prob_a)
    expected = np.array(weights, dtype=np.int64)
    expected[reject] += int(np.sum(expected[blocks + 2 :]))
    expected[blocks + 2 :] = 0
    if not np.array_equal(mass, expected):
        raise AssertionError("the ziggurat's alias table does not carry its weights")
    # quick accept: m < T_k proves U < L_k / H_k <= S rho(x) / H_k (m < 2**beta)
    thresholds = np.zeros(blocks + 2, dtype=np.int64)
    thresholds[:blocks] = (lows << zig.beta) // heights[:blocks]
    ratios = np.zeros(blocks + 2, dtype=np.float64)
    ratios[:blocks] = [float(Fraction(scale, int(h))) for h in heights[:blocks]]  # rounded once
    packed = (prob_a << 32 | primary_a << 16 | alias_a).astype(np.uint64)
    both = np.stack([primary_a, alias_a], axis=1).reshape(-1)
    assert int(thresholds.max()) < 1 << 48  # T_k < 2**beta <= 2**37
    slots = (both << 48 | thresholds[both]).astype(np.uint64)
    return Tables(primary_a, alias_a, prob_a, thresholds, ratios, heights, scale, packed, slots)
