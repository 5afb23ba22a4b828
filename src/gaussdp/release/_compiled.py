"""Contribution bounding in one pass, compiled: the DuckDB engine's fast path.

Optional: needs numba (the ``torch`` extra); only :mod:`gaussdp.release.engines` imports
this module, when a grouping can use it. It computes exactly what
:func:`gaussdp.release.sql.grouping_sql`'s query returns, with no table per
(unit, group): DuckDB sends the rows that the query's ``base`` step keeps
(:func:`gaussdp.release.sql.stream_sql`: the same filters, clamps and grid integers,
the same cell hash ``h`` and salt, and an exact integer code of the group keys that
sorts as the keys do), in record batches, and the compiled loops here keep, per unit,
its first L0 cells in the order ``(h, keys…)``:

- a unit's state is at most L0 slots, each a cell ``(h, key code)`` with its row
  count and, per value, its valid-row count, exact integer sum and (for a variance)
  sum of squares;
- a row of a cell in a slot adds to it; a row of another cell takes a free slot, or
  replaces the unit's last slot in ``(h, key code)`` order when it comes before it
  (the replaced cell has L0 cells of the unit before it: it is never among the first
  L0), and is dropped otherwise (its cell is not among the first L0 either, and the
  last slot only moves forward, so none of that cell's rows was kept before);
- so at the end the slots are exactly the unit's first L0 cells, each with all of its
  rows: a function of the unit's own rows and the salt, whatever the row order.

Each kept cell then gets the SQL's L∞ rule (``min(n, L)`` rows; an integer sum ``S``
of ``n > L`` values becomes ``⌊S·L/n + ½⌋``, in integer arithmetic; sums of squares
likewise; per-cell clamps) and is added to its group; ``units`` counts the kept cells.
No floating-point step: every number here is an integer.

Memory and speed: each batch is partitioned by a hash of the unit (a counting sort,
:func:`partition`), so that the units of one partition, bounded together
(:func:`feed`, :func:`collect`), fit in the processor's cache; the partitioned rows are held
until all have arrived (24 bytes a row with one value, plus 4 per further value), and
:func:`bound` gives up (returns ``None``, and the engine runs the SQL) when they would
pass the memory budget, or when a sum could leave int64 (where the SQL raises).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from gaussdp.release.sql import STREAM_NULL, Bounding

__all__ = ["KINDS", "bound", "collect", "feed", "partition", "row_bytes"]

I64 = npt.NDArray[np.int64]

_jit = numba.njit(cache=True, nogil=True)

#: Output kinds the compiled path computes (``Output.kind`` → the code of its loops).
KINDS = {"rows": 0, "valid": 1, "sum": 2, "sumsq": 3, "units": 4}


def row_bytes(values: int) -> int:
    """Bytes a held row takes (unit, ``h``, key code, one int32 per value)."""
    return 8 + 8 + 4 + 4 * values


_SIGN = np.int64(-(2**63))  # h ^ _SIGN as int64 sorts as h as uint64
_MUL = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing of the unit
_PART_BITS = 8  # 256 partitions
_FULL = -1  # feed: the table needs to grow


@_jit
def partition(
    pu: Any, h: Any, kc: Any, v: Any, bits: int
) -> tuple[Any, Any, Any, Any, Any]:  # pragma: no cover - compiled
    """One batch's rows ordered by the top ``bits`` of their unit's hash (a counting
    sort): the units, ``h`` as sortable int64, key codes, values (int32, rows × values)
    and the partitions' offsets (``bits``² + 1)."""
    n = pu.shape[0]
    nv = v.shape[1]
    shift = np.uint64(64 - bits)
    part = np.empty(n, np.int64)
    offsets = np.zeros((1 << bits) + 1, np.int64)
    for r in range(n):
        q = np.int64((np.uint64(pu[r]) * _MUL) >> shift)
        part[r] = q
        offsets[q + 1] += 1
    for k in range(1 << bits):
        offsets[k + 1] += offsets[k]
    at = offsets[:-1].copy()
    opu = np.empty(n, np.int64)
    oh = np.empty(n, np.int64)
    okc = np.empty(n, np.int32)
    ov = np.empty((n, nv), np.int32)
    for r in range(n):
        q = part[r]
        d = at[q]
        at[q] = d + 1
        opu[d] = pu[r]
        oh[d] = np.int64(h[r]) ^ _SIGN
        okc[d] = kc[r]
        for a in range(nv):
            ov[d, a] = v[r, a]
    return opu, oh, okc, ov, offsets


@_jit
def _rescaled(n: int, s: int, linf: int) -> int:  # pragma: no cover - compiled
    """⌊S·L/n + ½⌋ = ⌊(2SL + n)/(2n)⌋ when n > L (else S); numba's ``//`` floors."""
    if n > linf:
        return (2 * s * linf + n) // (2 * n)
    return s


@_jit
def feed(
    pu: Any,
    h: Any,
    kc: Any,
    v: Any,
    start: int,
    stop: int,
    table: Any,
    count: int,
    l0: int,
    per: int,
) -> int:  # pragma: no cover - compiled
    """Add rows ``start:stop`` of one partitioned batch to the open-addressing ``table``
    (one row per unit: the unit, its slots used, then L0 slots of
    ``h, key code, n, (valid, sum[, sum of squares]) per value``: ``per`` = 2 or 3
    words a value) that holds ``count`` units; returns the new count, or ``_FULL``
    (grow the table and start the partition again: it is then partly filled)."""
    nv = v.shape[1]
    sw = 3 + per * nv
    mask = table.shape[0] - 1
    limit = (table.shape[0] * 5) // 8
    for r in range(start, stop):
        u = pu[r]
        p = np.int64((np.uint64(u) * _MUL) >> np.uint64(24)) & mask
        while True:
            if table[p, 1] == 0:
                if count >= limit:
                    return _FULL
                table[p, 0] = u
                count += 1
                break
            if table[p, 0] == u:
                break
            p = (p + 1) & mask
        hr = h[r]
        kr = np.int64(kc[r])
        used = table[p, 1]
        hit = -1
        last = -1
        lh = np.int64(0)
        lk = np.int64(0)
        for j in range(used):
            c = 2 + j * sw
            sh = table[p, c]
            sk = table[p, c + 1]
            if sh == hr and sk == kr:
                hit = c
                break
            if last < 0 or sh > lh or (sh == lh and sk > lk):
                last, lh, lk = c, sh, sk
        if hit < 0:
            if used < l0:
                hit = 2 + used * sw
                table[p, 1] = used + 1
            elif hr < lh or (hr == lh and kr < lk):
                hit = last  # the unit's last cell so far: never among its first L0
            else:
                continue  # after L0 cells of the unit: never among its first L0
            table[p, hit] = hr
            table[p, hit + 1] = kr
            for w in range(hit + 2, hit + sw):
                table[p, w] = 0
        table[p, hit + 2] += 1
        for a in range(nv):
            x = np.int64(v[r, a])
            if x != STREAM_NULL:
                c = hit + 3 + per * a
                table[p, c] += 1
                table[p, c + 1] += x
                if per == 3:
                    table[p, c + 2] += x * x
    return count


@_jit
def collect(
    table: Any,
    nv: int,
    per: int,
    linf: int,
    kinds: Any,
    which: Any,
    lo: Any,
    hi: Any,
    units: Any,
    totals: Any,
) -> bool:  # pragma: no cover - compiled
    """Add the kept cells of ``table`` (see :func:`feed`) to ``units`` and ``totals``
    (groups × outputs) by the SQL's L∞ rule; ``False`` (nothing added) where a
    rescaling's ``2·S·L + n`` could leave int64 (the SQL then decides)."""
    sw = 3 + per * nv
    # |grid integer| ≤ 2¹⁰, so a cell's sums stay far inside int64; 2·S·L + n must too.
    cap = (np.int64(1) << 61) // linf
    for p in range(table.shape[0]):
        for j in range(table[p, 1]):
            c = 2 + j * sw
            for a in range(nv):
                if abs(table[p, c + 4 + per * a]) > cap:
                    return False
                if per == 3 and table[p, c + 5 + per * a] > cap:
                    return False
    for p in range(table.shape[0]):
        for j in range(table[p, 1]):
            c = 2 + j * sw
            g = table[p, c + 1]
            units[g] += 1
            for o in range(kinds.shape[0]):
                kind = kinds[o]
                if kind == 0:
                    totals[g, o] += min(table[p, c + 2], linf)
                elif kind == 4:
                    totals[g, o] += 1
                else:
                    at = c + 3 + per * which[o]
                    m = table[p, at]
                    if kind == 1:
                        totals[g, o] += min(m, linf)
                    else:
                        s = _rescaled(m, table[p, at + 1 if kind == 2 else at + 2], linf)
                        totals[g, o] += min(max(s, lo[o]), hi[o])
    return True


def bound(batches: Iterable[Any], b: Bounding, groups: int, budget: int) -> tuple[I64, I64] | None:
    """Bound and aggregate the record ``batches`` of :func:`stream_sql` (columns ``pu``,
    ``h``, ``kc``, ``v0``, …) for ``b``, with ``groups`` key codes.

    Returns
    -------
    (units, totals) or None
        Per group code: units after bounding (``int64``, groups) and the outputs
        (``int64``, groups × outputs), as the SQL computes them; ``None`` when the
        partitioned rows pass ``budget`` bytes or a sum could leave int64.
    """
    nv = len(b.values)
    kinds = np.array([KINDS[o.kind] for o in b.outputs], np.int64)
    which = np.array([max(o.value, 0) for o in b.outputs], np.int64)
    lo = np.array([o.total_lo for o in b.outputs], np.int64)
    hi = np.array([o.total_hi for o in b.outputs], np.int64)
    parts: tuple[list[Any], ...] = ([], [], [], [], [])
    held = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pu = batch.column(0).to_numpy()
        h = batch.column(1).to_numpy()
        kc = batch.column(2).to_numpy()
        v = np.empty((batch.num_rows, nv), np.int64)
        for a in range(nv):
            v[:, a] = batch.column(3 + a).to_numpy()
        for store, array in zip(parts, partition(pu, h, kc, v, _PART_BITS), strict=True):
            store.append(array)
            held += array.nbytes
        if held > budget:
            return None
    units = np.zeros(groups, np.int64)
    totals = np.zeros((groups, len(b.outputs)), np.int64)
    per = 3 if "sumsq" in {o.kind for o in b.outputs} else 2  # words per value and slot
    width = 2 + b.l0 * (3 + per * nv)
    table = np.zeros((1 << 12, width), np.int64)
    batches = list(zip(*parts, strict=True))
    for q in range(1 << _PART_BITS):
        count = _FULL
        while count == _FULL:
            table[:, 1] = 0
            count = 0
            for pu, h, kc, v, offsets in batches:
                count = feed(pu, h, kc, v, offsets[q], offsets[q + 1], table, count, b.l0, per)
                if count == _FULL:
                    if held + 2 * table.nbytes > budget:
                        return None
                    table = np.zeros((2 * table.shape[0], width), np.int64)
                    break
        if not collect(table, nv, per, b.linf, kinds, which, lo, hi, units, totals):
            return None
    return units, totals
