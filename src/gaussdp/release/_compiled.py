"""Contribution bounding in one pass, compiled: the DuckDB engine's fast path.

Optional: needs numba (the ``torch`` extra); only :mod:`gaussdp.release.engines` imports
this module, when a grouping can use it. It computes exactly what
:func:`gaussdp.release.sql.grouping_sql`'s query returns, with no table per
(unit, group): DuckDB sends the rows that the query's ``base`` step keeps
(:func:`gaussdp.release.sql.stream_sql`: the same filters, the unit, an exact integer
code of the group keys that sorts as the keys do, and each value as a double), in record
batches; the compiled loops here put each value on the grid with the SQL's own
operations (:func:`partition`) and compute the SQL's cell hash ``h`` of a unit and a key
code (:func:`cell_hash`: DuckDB's ``hash`` of the unit, combined with DuckDB's hashes of
the keys and of the salt as DuckDB combines them, checked against DuckDB itself before
this path is taken, :func:`hash_agrees`), then keep, per unit, its first L0 cells in the
order ``(h, keys…)``:

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

Memory and speed: each record batch is partitioned by a hash of the unit (a counting
sort, :func:`partition`) into one buffer of packed rows (:func:`row_words` 64-bit words a
row: the unit, then the key code and the values' grid integers as 32-bit fields), so
that the units of one partition, bounded together (:func:`bound_all`, one call for every
partition), fit in the processor's cache. The buffer holds every row until all have
arrived; it is sized from the rows DuckDB counted before (an exact count of the rows the
stream sends), and :func:`bound` gives up (returns ``None``, and the engine runs the SQL)
when it would pass the memory budget, when more rows arrive than were counted (the input
changed), or when a sum could leave int64 (where the SQL raises).
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from gaussdp.release.sql import Bounding, Output, ScalarValue

__all__ = [
    "KINDS",
    "bound",
    "bound_all",
    "cell_hash",
    "hash_agrees",
    "partition",
    "row_bytes",
    "row_words",
    "warm",
]

I64 = npt.NDArray[np.int64]


def _jit(function: Any) -> Any:
    """numba's ``njit``, its machine code cached on disk (next to this file, or in numba's
    user cache folder, or ``NUMBA_CACHE_DIR``) where numba finds a writable place, else
    compiled once a process: a read-only installation run by a user without a writable
    home still takes the compiled path (numba refuses ``cache=True`` there with a
    ``RuntimeError`` when the function is decorated)."""
    try:
        return numba.njit(cache=True, nogil=True)(function)
    except RuntimeError:
        return numba.njit(nogil=True)(function)


#: Output kinds the compiled path computes (``Output.kind`` → the code of its loops).
KINDS = {"rows": 0, "valid": 1, "sum": 2, "sumsq": 3, "units": 4}


def row_words(values: int) -> int:
    """64-bit words a held row takes: the unit, then the key code and one grid integer
    per value as 32-bit fields, two to a word."""
    return 1 + (2 + values) // 2


def row_bytes(values: int) -> int:
    """Bytes a held row takes (:func:`row_words`)."""
    return 8 * row_words(values)


_SIGN = np.int64(-(2**63))  # h ^ _SIGN as int64 sorts as h as uint64
_MUL = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing of the unit
_MIX = np.uint64(0xD6E8FEB86659FD93)  # DuckDB's MurmurHash64 and CombineHash multiplier
_LOW32 = np.uint64(0xFFFFFFFF)
_PART_BITS = 10  # 1024 partitions: ≈ 10³ units each at 10⁶ units, a table in L2
_TABLE_ROWS = 256  # a partition's first table; doubled while its units do not fit
_OK, _MEMORY, _INT64 = 0, 1, 2  # bound_all's outcomes
#: A NULL or NaN value in the held rows (grid integers are ``|v| ≤ 2⁹ + 1``).
_NULL = -(2**31)


@_jit
def _grid(
    x: float, lo: float, hi: float, center: float, centred: bool, gamma: float
) -> int:  # pragma: no cover - compiled
    """The SQL's grid integer of one value (:func:`gaussdp.release.sql._base`): ``NULL``
    (here NaN) or NaN → :data:`_NULL`, else ``FLOOR((LEAST(GREATEST(x, lo), hi)[ −
    center]) / γ + ½)``, the same IEEE double operations in the same order (numba keeps
    them: no fast-math; only a ±0 may differ from DuckDB's ``GREATEST``, and its grid
    integer is the same)."""
    if x != x:
        return _NULL
    c = min(max(x, lo), hi)
    if centred:
        c = c - center
    return int(np.floor(c / gamma + 0.5))


@_jit
def partition(
    pu: Any,
    kc: Any,
    v: Any,
    grid: Any,
    bits: int,
    wide: Any,
    narrow: Any,
    start: int,
    offsets: Any,
) -> None:  # pragma: no cover - compiled
    """Write one batch's rows to ``wide[start:start + n]`` ordered by the top ``bits``
    (1 to 16) of their unit's hash (a counting sort): the unit in ``wide`` (rows × words,
    int64), the key code and the values' grid integers (:func:`_grid` of ``v``, rows ×
    values, float64, NaN for NULL, with ``grid``'s row per value: lo, hi, center, centred
    (0 or 1), γ) in ``narrow``, the same buffer as int32 (fields 2, 3, …). ``offsets``
    (``2**bits`` + 1) gets each partition's first row in the buffer, then the end."""
    n = pu.shape[0]
    nv = v.shape[1]
    shift = np.uint64(64 - bits)
    part = np.empty(n, np.uint16)
    counts = np.zeros((1 << bits) + 1, np.int64)
    for r in range(n):
        q = np.int64((np.uint64(pu[r]) * _MUL) >> shift)
        part[r] = q
        counts[q + 1] += 1
    offsets[0] = start
    for k in range(1 << bits):
        offsets[k + 1] = offsets[k] + counts[k + 1]
    at = offsets[:-1].copy()
    for r in range(n):
        q = part[r]
        d = at[q]
        at[q] = d + 1
        wide[d, 0] = pu[r]
        narrow[d, 2] = kc[r]
        for a in range(nv):
            g = grid[a]
            narrow[d, 3 + a] = _grid(v[r, a], g[0], g[1], g[2], g[3] != 0.0, g[4])


@_jit
def _murmur(x: Any) -> Any:  # pragma: no cover - compiled
    """DuckDB's ``MurmurHash64`` of a uint64 (its ``hash`` of a BIGINT or UBIGINT)."""
    x ^= x >> np.uint64(32)
    x *= _MIX
    x ^= x >> np.uint64(32)
    x *= _MIX
    return x ^ (x >> np.uint64(32))


@_jit
def _unit_part(u: int, narrow: bool) -> Any:  # pragma: no cover - compiled
    """:func:`cell_hash`'s first step, which depends on the unit alone."""
    x = np.uint64(u)
    if narrow:
        x &= _LOW32
    a = _murmur(x)
    return (a ^ (a >> np.uint64(32))) * _MIX


@_jit
def _cell_part(part: Any, kc: int, keys: Any, salt: Any) -> Any:  # pragma: no cover - compiled
    """:func:`cell_hash` from its unit's part (:func:`_unit_part`)."""
    a = part ^ keys[kc, 0]
    for j in range(1, keys.shape[1]):
        a = ((a ^ (a >> np.uint64(32))) * _MIX) ^ keys[kc, j]
    a = ((a ^ (a >> np.uint64(32))) * _MIX) ^ salt
    return np.int64(_murmur(a)) ^ _SIGN


@_jit
def cell_hash(u: int, kc: int, keys: Any, salt: Any, narrow: bool) -> Any:  # pragma: no cover
    """The SQL's cell hash ``hash(hash(pu, keys…, salt))`` (:data:`~gaussdp.release.sql.
    CELL_HASH`) of unit ``u`` (as BIGINT; ``narrow``: a unit type of 8 to 32 bits, which
    DuckDB hashes by its low 32 bits) and the keys of code ``kc``, as a sortable int64
    (``h ^ 2⁶³``: int64 order is uint64 order). ``keys`` (codes × key columns, uint64)
    holds DuckDB's ``hash`` of each key value, ``salt`` DuckDB's ``hash`` of the salt:
    DuckDB hashes the first argument and folds each next one in as
    ``(a ^ a >> 32)·M ^ b`` (its ``CombineHash``), then ``hash`` of the result is
    MurmurHash64 again (:func:`hash_agrees` checks this against DuckDB). At least one
    key column."""
    return _cell_part(_unit_part(u, narrow), kc, keys, salt)


@_jit
def _rescaled(n: int, s: int, linf: int) -> int:  # pragma: no cover - compiled
    """⌊S·L/n + ½⌋ = ⌊(2SL + n)/(2n)⌋ when n > L (else S); numba's ``//`` floors."""
    if n > linf:
        return (2 * s * linf + n) // (2 * n)
    return s


@_jit
def _feed(
    wide: Any,
    narrow: Any,
    offsets: Any,
    q: int,
    nv: int,
    table: Any,
    l0: int,
    per: int,
    hashes: tuple[Any, Any, bool],
) -> bool:  # pragma: no cover - compiled
    """Add partition ``q``'s rows (of every batch) to the open-addressing ``table``, emptied
    first (one row per unit: the unit, its slots used, its part of the cell hash
    (:func:`_unit_part`), then L0 slots of
    ``h, key code, n, (valid, sum[, sum of squares]) per value``: ``per`` = 2 or 3 words a
    value); ``False`` where its units do not fit (grow the table and feed again). A row's
    cell is in a slot when its key code is (one unit: the same cell); the cell hash
    (:func:`cell_hash` with ``hashes``: key hashes, salt hash, narrow unit) is computed
    for a row whose cell is not."""
    keys, salt, narrow_unit = hashes
    sw = 3 + per * nv
    mask = table.shape[0] - 1
    limit = (table.shape[0] * 5) // 8
    # A unit's first slot: the bits of its Fibonacci hash just below the partition's (the
    # top ones, which spread units best; the bits further down left sequential ids in a
    # third of the slots, and lookups probed twice as far).
    span, k = (offsets.shape[1] - 1) * table.shape[0], 0
    while (np.int64(1) << k) < span:
        k += 1
    shift = np.uint64(max(64 - k, 0))
    table[:, 1] = 0
    count = 0
    for b in range(offsets.shape[0]):
        for r in range(offsets[b, q], offsets[b, q + 1]):
            u = wide[r, 0]
            p = np.int64((np.uint64(u) * _MUL) >> shift) & mask
            while True:
                if table[p, 1] == 0:
                    if count >= limit:
                        return False
                    table[p, 0] = u
                    table[p, 2] = np.int64(_unit_part(u, narrow_unit))
                    count += 1
                    break
                if table[p, 0] == u:
                    break
                p = (p + 1) & mask
            kr = np.int64(narrow[r, 2])
            # computed for every row (a hit does not need it): independent of the slots'
            # loads, the processor overlaps it with them
            hr = _cell_part(np.uint64(table[p, 2]), kr, keys, salt)
            used = table[p, 1]
            hit = -1
            last = -1
            lh = np.int64(0)
            lk = np.int64(0)
            for j in range(used):
                c = 3 + j * sw
                sh = table[p, c]
                sk = table[p, c + 1]
                if sk == kr:
                    hit = c
                    break
                if last < 0 or sh > lh or (sh == lh and sk > lk):
                    last, lh, lk = c, sh, sk
            if hit < 0:
                if used < l0:
                    hit = 3 + used * sw
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
                x = np.int64(narrow[r, 3 + a])
                if x != _NULL:
                    c = hit + 3 + per * a
                    table[p, c] += 1
                    table[p, c + 1] += x
                    if per == 3:
                        table[p, c + 2] += x * x
    return True


@_jit
def _collect(
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
    """Add the kept cells of ``table`` (see :func:`_feed`) to ``units`` and ``totals``
    (groups × outputs) by the SQL's L∞ rule; ``False`` (nothing added) where a
    rescaling's ``2·S·L + n`` could leave int64 (the SQL then decides)."""
    sw = 3 + per * nv
    # |grid integer| ≤ 2¹⁰, so a cell's sums stay far inside int64; 2·S·L + n must too.
    cap = (np.int64(1) << 61) // linf
    for p in range(table.shape[0]):
        for j in range(table[p, 1]):
            c = 3 + j * sw
            for a in range(nv):
                if abs(table[p, c + 4 + per * a]) > cap:
                    return False
                if per == 3 and table[p, c + 5 + per * a] > cap:
                    return False
    for p in range(table.shape[0]):
        for j in range(table[p, 1]):
            c = 3 + j * sw
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


@_jit
def bound_all(
    wide: Any,
    narrow: Any,
    offsets: Any,
    nv: int,
    l0: int,
    linf: int,
    per: int,
    kinds: Any,
    which: Any,
    lo: Any,
    hi: Any,
    units: Any,
    totals: Any,
    first: int,
    room: int,
    hashes: tuple[Any, Any, bool],
) -> int:  # pragma: no cover - compiled
    """Bound every partition of the buffer (:func:`partition`; ``offsets``: batches ×
    (partitions + 1)) into ``units`` and ``totals``, with a table of ``first`` rows (a
    power of two) doubled while a partition's units do not fit: ``_OK``, or ``_MEMORY``
    when a table would pass ``room`` bytes, ``_INT64`` when a sum could leave int64."""
    table = np.zeros((first, 3 + l0 * (3 + per * nv)), np.int64)
    for q in range(offsets.shape[1] - 1):
        while not _feed(wide, narrow, offsets, q, nv, table, l0, per, hashes):
            if 2 * table.nbytes > room:
                return _MEMORY
            table = np.zeros((2 * table.shape[0], table.shape[1]), np.int64)
        if not _collect(table, nv, per, linf, kinds, which, lo, hi, units, totals):
            return _INT64
    return _OK


def _buffer(rows: int, words: int) -> I64:
    """A zeroed (rows × words) int64 buffer in anonymous memory of the system's ordinary
    page size, its pages mapped at once where the system can (``MAP_POPULATE``). numpy
    asks for transparent huge pages on large arrays; on a busy machine the kernel's
    compaction to find them took 0.4–0.6 s of system CPU for the 10⁷-row benchmark's
    240 MB, against ≈ 0.2 s for ordinary pages (fresh processes, measured).

    Raises ``MemoryError`` where the memory cannot be mapped: ``mmap`` raises ``OSError``
    (``ENOMEM``, an address-space limit) or, for a size past the platform's,
    ``OverflowError``/``ValueError``; the caller then leaves the grouping to the SQL."""
    if not hasattr(mmap, "MAP_PRIVATE"):  # pragma: no cover - Windows: numpy's own memory
        return np.zeros((rows, words), np.int64)
    flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0)
    try:
        memory = mmap.mmap(-1, max(rows * words * 8, 1), flags=flags)
    except (OSError, OverflowError, ValueError):
        raise MemoryError(f"cannot map {rows} rows of {words} words") from None
    return np.frombuffer(memory, np.int64, rows * words).reshape(rows, words)


def bound(
    batches: Iterable[Any],
    b: Bounding,
    groups: int,
    budget: int,
    rows: int,
    hashes: tuple[npt.NDArray[np.uint64], int, bool],
) -> tuple[I64, I64] | None:
    """Bound and aggregate the record ``batches`` of :func:`stream_sql` (columns ``pu``,
    ``kc``, ``v0``, …) for ``b``, with ``groups`` key codes and at most ``rows`` rows
    (counted before). ``hashes`` are :func:`cell_hash`'s: DuckDB's ``hash`` of every key
    value (groups × key columns, by key code), of the salt, and whether the unit's type
    is narrower than 64 bits.

    Returns
    -------
    (units, totals) or None
        Per group code: units after bounding (``int64``, groups) and the outputs
        (``int64``, groups × outputs), as the SQL computes them; ``None`` when the
        held rows and tables pass ``budget`` bytes, when more than ``rows`` rows
        arrive, or when a sum could leave int64.
    """
    nv = len(b.values)
    if rows * row_bytes(nv) > budget:
        return None
    kinds = np.array([KINDS[o.kind] for o in b.outputs], np.int64)
    which = np.array([max(o.value, 0) for o in b.outputs], np.int64)
    lo = np.array([o.total_lo for o in b.outputs], np.int64)
    hi = np.array([o.total_hi for o in b.outputs], np.int64)
    grid = np.array(
        [
            (x.lo, x.hi, x.center or 0.0, x.center is not None, x.gamma)
            for x in b.values
            if isinstance(x, ScalarValue)
        ],
        np.float64,
    ).reshape(nv, 5)
    wide = _buffer(rows, row_words(nv))
    narrow = wide.view(np.int32)
    offsets: list[I64] = []
    held = 0
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        if held + n > rows:
            return None
        v = np.empty((n, nv), np.float64)
        for a in range(nv):  # a NULL value: NaN, which _grid takes as the SQL takes NULL
            v[:, a] = batch.column(2 + a).to_numpy(zero_copy_only=False)
        at = np.empty((1 << _PART_BITS) + 1, np.int64)
        pu, kc = (batch.column(i).to_numpy() for i in range(2))
        partition(pu, kc, v, grid, _PART_BITS, wide, narrow, held, at)
        offsets.append(at)
        held += n
    units = np.zeros(groups, np.int64)
    totals = np.zeros((groups, len(b.outputs)), np.int64)
    if not offsets:
        return units, totals
    per = 3 if "sumsq" in {o.kind for o in b.outputs} else 2  # words per value and slot
    room = budget - held * row_bytes(nv)
    args = (np.stack(offsets), nv, b.l0, b.linf, per, kinds, which, lo, hi, units, totals)
    key_hashes, salt, narrow_unit = hashes
    if key_hashes.shape != (groups, len(b.keys)):
        raise ValueError(f"key hashes of shape {key_hashes.shape}, not ({groups}, {len(b.keys)})")
    typed = (np.ascontiguousarray(key_hashes, np.uint64), np.uint64(salt), bool(narrow_unit))
    if bound_all(wide, narrow, *args, _TABLE_ROWS, room, typed) != _OK:
        return None
    return units, totals


def warm() -> None:
    """Load the compiled loops into this process now (numba's own set-up and the machine
    code from its cache, ≈ 0.2 s of CPU; on a new installation, compile them, ≈ 1.5 s):
    what the first compiled release in a process otherwise does. Bounds one row of one
    unit, with the types a release's record batches have."""
    import pyarrow as pa  # type: ignore[import-untyped]

    batch = pa.record_batch(
        [pa.array([1], pa.int64()), pa.array([0], pa.int32()), pa.array([1.0], pa.float64())],
        names=["pu", "kc", "v0"],
    )
    value = ScalarValue("x0", 0.0, 1.0, 1.0)
    b = Bounding("", ("k0",), None, (value,), (Output("sum", 0, -1, 0, 1),), 1, 1, 0)
    key_hashes = np.zeros((1, 1), np.uint64)
    bound([batch], b, 1, 2**20, 1, (key_hashes, 0, False))
    cell_hash(1, 0, key_hashes, np.uint64(0), False)  # hash_agrees's check, from Python


#: Unit types whose DuckDB ``hash`` is that of the value's low 32 bits (:func:`cell_hash`).
NARROW_UNITS = frozenset({"TINYINT", "SMALLINT", "INTEGER", "UTINYINT", "USMALLINT", "UINTEGER"})

_AGREES: dict[tuple[str, str, str], bool] = {}


def hash_agrees(con: Any, unit_type: str) -> bool:
    """Whether :func:`cell_hash` gives the cell hash that :data:`~gaussdp.release.sql.
    CELL_HASH`'s text gives in this DuckDB, for units of ``unit_type``: checked once a
    process on fixed values (the type's ends, 0, ±1 and values between; one text key,
    and a text and a date key; two salts), never on the data. ``False`` leaves the SQL
    path (decided before anything is reserved)."""
    import duckdb

    from gaussdp.release.sql import CELL_HASH

    memo = (duckdb.__version__, unit_type, CELL_HASH)
    known = _AGREES.get(memo)
    if known is not None:
        return known
    ends = {
        "TINYINT": (-(2**7), 2**7 - 1),
        "SMALLINT": (-(2**15), 2**15 - 1),
        "INTEGER": (-(2**31), 2**31 - 1),
        "BIGINT": (-(2**63), 2**63 - 1),
        "UTINYINT": (0, 2**8 - 1),
        "USMALLINT": (0, 2**16 - 1),
        "UINTEGER": (0, 2**32 - 1),
    }.get(unit_type)
    if ends is None:
        return False
    lo, hi = ends
    units = sorted({lo, lo + 1, -1 if lo < 0 else 2, 0, 1, 77, (lo + hi) // 3, hi - 1, hi})
    salts = (5, 2**62 - 1)
    agrees = True
    for keys in (("'page-001'",), ("'page-001'", "DATE '2026-03-02'")):
        names = [f"k{i}" for i in range(len(keys))]
        cells = ", ".join(
            CELL_HASH.format(keys="".join(f", {k}" for k in names), salt=s) for s in salts
        )
        hashes = ", ".join([*(f"hash({k})" for k in names), *(f"hash({s})" for s in salts)])
        columns = ", ".join(f"{k} AS {n}" for k, n in zip(keys, names, strict=True))
        rows = con.execute(
            f"SELECT pu, {hashes}, {cells} FROM (SELECT CAST(unnest([{', '.join(map(str, units))}])"
            f" AS {unit_type}) AS pu, {columns})"
        ).fetchall()
        for u, *got in rows:
            key_hashes = np.array([got[: len(keys)]], np.uint64)
            for j in range(len(salts)):
                salt = np.uint64(got[len(keys) + j])
                mine = cell_hash(u, 0, key_hashes, salt, unit_type in NARROW_UNITS)
                agrees = agrees and (int(mine) % 2**64) ^ 2**63 == int(got[len(keys) + 2 + j])
    _AGREES[memo] = agrees
    return agrees
