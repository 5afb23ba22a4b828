"""Thin engine adapters: register the input under internal names, run SQL, fetch rows.

An adapter does three things only: open the input (a CSV/Parquet path, a
pandas/polars/Arrow frame, or for Spark a DataFrame or table name) and report
its schema; register a view whose columns carry gaussdp's fixed internal names
(the user's names are passed as column *objects*, never spliced into SQL); run
the SQL of :mod:`gaussdp.release.sql` and return the small per-group result as
Python tuples. The privacy-relevant logic is all in that one SQL text, and in
DuckDB's compiled path (``gaussdp.release._compiled``), which computes the same result.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import glob
import gzip
import itertools
import logging
import os
import re
import shutil
import tempfile
import threading
import uuid
import warnings
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from gaussdp.errors import EngineError, MissingExtraError, invalid
from gaussdp.release.sql import (
    Bounding,
    ScalarValue,
    codes_sql,
    key_hashes_sql,
    keys_sql,
    stream_sql,
)
from gaussdp.release.values import column_text, type_label

__all__ = [
    "BOUNDING_MODES",
    "DATA_SUFFIXES",
    "DECLARABLE",
    "DuckDBEngine",
    "Engine",
    "SparkEngine",
    "bounding_mode",
    "data_files",
    "failure_message",
    "is_glob",
    "open_engine",
    "raise_detached",
]

_CSV_SUFFIXES = (".csv", ".tsv", ".csv.gz", ".tsv.gz", ".txt")
_PARQUET_SUFFIXES = (".parquet", ".pq")
#: The files a data folder's reading takes (:func:`data_files`).
DATA_SUFFIXES = _CSV_SUFFIXES + _PARQUET_SUFFIXES

_DUCKDB_NUMERIC = {
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
    "FLOAT",
    "DOUBLE",
}
_SPARK_NUMERIC = {"tinyint", "smallint", "int", "bigint", "float", "double"}
_NULL_TYPES = {"NULL", "void"}  # DuckDB's and Spark's type of a column that holds no value


def _file_kind(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(_PARQUET_SUFFIXES):
        return "parquet"
    if name.endswith(_CSV_SUFFIXES):
        return "csv"
    raise ValueError(
        invalid(
            "data",
            f"a CSV ({', '.join(_CSV_SUFFIXES)}) or Parquet ({', '.join(_PARQUET_SUFFIXES)}) file",
            str(path),
        )
    )


def _files(source: str | os.PathLike[str]) -> tuple[str, list[str]]:
    """The kind (``'csv'``/``'parquet'``) and the files of a path, a directory or a glob
    that are read.

    A directory means every ``.csv``/``.parquet`` file under it (recursively);
    a string with ``*``, ``?`` or ``[`` is a glob (``**`` recursive). All files
    must be of one kind. A file named alone is the table: one that cannot be read as
    one (:func:`_unreadable`: 0 bytes, a CSV's header not valid, a gzipped CSV whose
    compressed data is not whole) is refused. A directory or glob is a set of files,
    perhaps one a unit: such a file holds no rows and is left out, so no file decides
    whether the others are refused, and a folder or glob none of whose files adds
    rows (or that holds no data file at all) is an empty table, released as one
    (docs/release.md). A glob's leading folder (its part before the first pattern)
    must exist: a misspelt one is refused, as a missing file is.
    """
    text = os.fspath(source)
    path = Path(text)
    if not (path.is_file() or path.is_dir() or (is_glob(text) and _glob_root(text).is_dir())):
        raise FileNotFoundError(invalid("data", "an existing file, directory or glob", text))
    names = data_files(text)
    kinds = {_file_kind(p) for p in names}
    if len(kinds) > 1:
        raise ValueError(invalid("data", "files of one kind (CSV or Parquet), not both", text))
    kind = kinds.pop() if kinds else "parquet"
    if path.is_file():
        reason = _unreadable(text, kind)
        if reason is not None:
            raise ValueError(reason)
        return kind, [text]
    return kind, [str(p) for p in names if _unreadable(str(p), kind) is None]


def _glob_root(pattern: str) -> Path:
    """The folder a glob's matches lie under: its path up to the first part with a pattern."""
    parts = Path(pattern).parts
    fixed = list(itertools.takewhile(lambda part: not is_glob(part), parts))
    return Path(*fixed) if fixed else Path(".")


def _unreadable(name: str, kind: str) -> str | None:
    """Why the data file ``name`` (of ``kind``) cannot be read as a table, or ``None``.

    Facts of the file as a whole, never of one row: 0 bytes (a CSV needs its header); a
    gzipped CSV whose compressed data is not whole (:func:`_gzip_whole`); a CSV whose
    header is not valid (:func:`_header`).
    """
    if Path(name).stat().st_size == 0:
        return invalid("data", "non-empty files (a CSV needs its header)", name)
    if kind != "csv":
        return None
    if name.lower().endswith(".gz") and not _gzip_whole(name):
        return invalid(
            "data",
            "a gzipped CSV whose compressed data is whole (it ends early, is corrupt, "
            "or has bytes after its last gzip member)",
            Path(name).name,
        )
    try:
        _header(name, _separator(name))
    except ValueError as error:
        return str(error)
    return None


def _gzip_whole(name: str) -> bool:
    """Whether the file ``name`` is one or more whole gzip members and nothing else.

    The whole file is decompressed (output discarded) with each member's CRC-32 and
    length checked. Both engines read such a file whole; on other files they differ,
    each in its own way: DuckDB read 28,537 of 50,000 lines of a file with one byte
    flipped (no error) and every line of one whose CRC was wrong, and failed the whole
    read on a truncated file or trailing bytes, zeros included.
    """
    member = zlib.decompressobj(wbits=31)
    started = False  # some bytes of the current member have been read
    with open(name, "rb") as handle:
        while chunk := handle.read(2**20):
            while chunk:
                try:
                    member.decompress(chunk, 2**20)
                    while member.unconsumed_tail:
                        member.decompress(member.unconsumed_tail, 2**20)
                except zlib.error:
                    return False
                started = True
                if not member.eof:
                    break
                chunk = member.unused_data  # another member follows (or nothing)
                member = zlib.decompressobj(wbits=31)
                started = False
    return member.eof or not started


def _shown(source: str | os.PathLike[str], files: Sequence[str]) -> str:
    """What an engine's error in opening ``files`` (:func:`_files` of ``source``) names: the
    file's name, or the folder or glob as given (the engine's error may come from any of
    its files, and its text, which names the file, is withheld)."""
    return Path(files[0]).name if Path(source).is_file() else os.fspath(source)


@dataclass(frozen=True)
class ParquetLayout:
    """How Parquet ``files`` of a folder or glob are read together (:func:`parquet_layout`)."""

    #: The columns of all files, by name, in DuckDB's order.
    names: list[str]
    #: Columns that are text in one file and not in another, or numbers of two types one of
    #: which is not an integer type: read as text (:func:`number_text`), converted per value.
    mixed: frozenset[str]
    #: The files by their schema (files of one group have the same columns and types), when
    #: some file has a ``FLOAT`` or a mixed column and not all files have one schema; else
    #: ``None``.
    groups: list[list[str]] | None


def parquet_layout(files: Sequence[str]) -> ParquetLayout:
    """The columns of Parquet ``files`` read together by name, and those that are mixed.

    A column missing from a file is NULL there; integers of different widths,
    dates and timestamps widen to one type (DuckDB's union by name). A column
    that is text in one file and not in another (``minutes`` a string in one
    file, a number in the others), or a number of two types one of which is not an
    integer type (a ``BIGINT`` and a ``DOUBLE``), is *mixed*: it is read as text (each
    number as :func:`number_text` writes it, in its own file) and converted
    by the spec as a CSV's column is, so a value that does not convert is NULL
    (refusing it would make the refusal depend on which files, hence which
    units, exist). Only the files' footers are read.

    A value's reading depends on its own file only: a ``FLOAT`` (float32) column is
    widened to ``DOUBLE`` in its own file before the files are read together. Read
    together as they are, it would turn the other files' integers into float32 (a
    ``FLOAT`` union), and be written as the shortest text that rounds back to
    *float32* when another file has the column as text (``0.501953125`` as
    ``'0.50195312'``, a different double): one file would move every other
    file's values. :attr:`ParquetLayout.groups` names the files to read apart then.
    """
    import duckdb

    with duckdb.connect() as con:
        union = con.read_parquet(list(files), union_by_name=True)
        kinds = [str(t) for t in union.types]
        if len(files) == 1 or not any(k in ("VARCHAR", "FLOAT") or _fractional(k) for k in kinds):
            return ParquetLayout(list(union.columns), frozenset(), None)
        # One read of every footer: the files grouped by their whole schema (nested
        # fields included, so that one group's files have the same top-level types).
        grouped = con.execute(
            "SELECT list(file_name ORDER BY file_name) FROM ("
            " SELECT file_name, list((name, duckdb_type) ORDER BY column_id) AS fields"
            " FROM parquet_schema(?) GROUP BY file_name"
            ") GROUP BY fields ORDER BY min(file_name)",
            [list(files)],
        ).fetchall()
        groups = [list(names) for (names,) in grouped]
        text = {c for c, t in zip(union.columns, kinds, strict=True) if t == "VARCHAR"}
        mixed: set[str] = set()
        floats = False
        numbers: dict[str, set[str]] = {}  # a column's number types
        for group in groups:
            rel = con.read_parquet(group[0])
            for c, t in zip(rel.columns, rel.types, strict=True):
                mixed |= {c} if c in text and str(t) != "VARCHAR" else set()
                floats |= str(t) == "FLOAT"
                if str(t) in _DUCKDB_NUMERIC or _fractional(str(t)):
                    numbers.setdefault(c, set()).add(str(t))
        # Numbers of two types, one of them not an integer type: the union would make
        # integers doubles (2⁵³ + 1 as 2⁵³) and decimals doubles; each file's text instead.
        mixed |= {c for c, ts in numbers.items() if len(ts) > 1 and any(map(_fractional, ts))}
        apart = (floats or mixed) and len(groups) > 1
        return ParquetLayout(list(union.columns), frozenset(mixed), groups if apart else None)


def read_parquet_groups(con: Any, layout: ParquetLayout, groups: list[list[str]]) -> Any:
    """Parquet files (``layout.groups``) as one DuckDB relation, read as
    :func:`parquet_layout` says: each group's ``FLOAT`` columns widened to ``DOUBLE``
    (and a mixed one then written as text) before the groups are read together by name."""

    def name(column: str) -> str:
        return '"' + column.replace('"', '""') + '"'

    parts = []
    for group in groups:
        rel = con.read_parquet(group[0])
        fields = []
        for c, t in zip(rel.columns, rel.types, strict=True):
            if c in layout.mixed and str(t) != "VARCHAR":
                fields.append(f"{number_text(name(c), str(t))} AS {name(c)}")
            elif str(t) == "FLOAT":
                fields.append(f"CAST({name(c)} AS DOUBLE) AS {name(c)}")
            else:
                fields.append(name(c))
        paths = ", ".join("'" + f.replace("'", "''") + "'" for f in group)
        parts.append(
            f"SELECT {', '.join(fields)} FROM read_parquet([{paths}], union_by_name = true)"
        )
    union = " UNION ALL BY NAME ".join(parts)
    return con.sql(f"SELECT {', '.join(map(name, layout.names))} FROM ({union})")


_FLOATS = ("float", "double", "real")  # DuckDB's and Spark's floating-point types, in lower case


def _fractional(kind: str) -> bool:
    """Whether the engine's type ``kind`` may hold a value that is not an integer's."""
    return kind.lower() in _FLOATS or kind.lower().startswith("decimal")


#: 2⁶³ (a double literal on both engines): an integral double below it is written as its
#: digits (Spark's TRY_CAST to BIGINT saturates rather than failing beyond it).
_TWO_63 = "9.223372036854775808e18"


def number_text(column: str, kind: str) -> str:
    """SQL (DuckDB's and Spark's alike) for the one text of a number in ``column`` (quoted
    for the engine) of the engine's type ``kind``, where a folder reads it as text.

    The text depends on the value alone, never on its file's type, so a folder that reads
    the column as text groups units and keys as it does when it reads numbers: integral
    values are their digits (``5``, ``5.0`` and ``Decimal('5.00')`` are all ``'5'``;
    ``-0.0`` is ``'0'``); other values the shortest decimal that reads back as the same
    double, written as Python's ``repr`` writes it (``'0.5'``, ``'1e-05'``); decimals
    exactly, in that form (``Decimal('0.50')`` is ``'0.5'``); ``'nan'`` (a NaN unit or key,
    dropped), ``'inf'``, ``'-inf'``. A double of 2⁶³ or more is integral: its shortest
    decimal's digits padded with zeros. Integers and other types: the engine's text.
    """
    if kind.lower() in _FLOATS:
        x = f"CAST({column} AS DOUBLE)"  # a float32 value's double (exact)
        integer = f"TRY_CAST({x} AS BIGINT)"
        return (
            f"(CASE WHEN isnan({x}) THEN 'nan'"
            f" WHEN isnan({x} - {x}) THEN (CASE WHEN {x} > 0 THEN 'inf' ELSE '-inf' END)"
            f" WHEN abs({x}) < {_TWO_63} AND {x} = CAST({integer} AS DOUBLE)"
            f" THEN CAST({integer} AS STRING)"
            f" ELSE {_decimal_text(f'CAST({x} AS STRING)')} END)"
        )
    if kind.lower().startswith("decimal"):
        return _decimal_text(f"CAST({column} AS STRING)")
    return f"CAST({column} AS STRING)"


def _decimal_text(text: str) -> str:
    """SQL for :func:`number_text`'s form of ``text``, a finite number's text as DuckDB or
    Spark write a double or decimal (``-12.50``, ``1e-05``, ``1.0E-5``, ``1e+20``)."""
    pattern = "'^(-?)([0-9]*)[.]?([0-9]*)(?:[eE]([-+]?[0-9]+))?$'"

    def part(i: int) -> str:
        return f"regexp_extract({text}, {pattern}, {i})"

    digits = f"({part(2)} || {part(3)})"
    exponent = (
        f"(CASE WHEN {part(4)} = '' THEN 0 ELSE CAST(replace({part(4)}, '+', '') AS INTEGER) END)"
    )
    unled = f"regexp_replace({digits}, '^0+', '')"
    kept = f"regexp_replace({unled}, '0+$', '')"  # the significant digits
    # The value is 0.{kept} × 10^{point}
    point = (
        f"(CAST(length({part(2)}) AS INTEGER) + {exponent}"
        f" - CAST(length({digits}) - length({unled}) AS INTEGER))"
    )
    width = f"CAST(length({kept}) AS INTEGER)"
    scientific = (
        f"substring({kept}, 1, 1) || (CASE WHEN {width} > 1 THEN '.' || substring({kept}, 2)"
        f" ELSE '' END) || 'e' || (CASE WHEN {point} < 1 THEN '-' ELSE '+' END)"
        f" || (CASE WHEN abs({point} - 1) < 10 THEN '0' ELSE '' END)"
        f" || CAST(abs({point} - 1) AS STRING)"
    )
    return (
        f"(CASE WHEN {kept} = '' THEN '0' ELSE {part(1)} || (CASE"
        f" WHEN {point} >= {width} THEN {kept} || repeat('0', {point} - {width})"
        f" WHEN {point} BETWEEN -3 AND 0 THEN '0.' || repeat('0', -{point}) || {kept}"
        f" WHEN {point} BETWEEN 1 AND 16"
        f" THEN substring({kept}, 1, {point}) || '.' || substring({kept}, {point} + 1)"
        f" ELSE {scientific} END) END)"
    )


#: The one reading of a CSV, the same on both engines (docs/release.md, "Reading a CSV").
#: A number: optional sign, decimal digits with an optional point, an optional
#: exponent, nothing else (spaces around it ignored); ``1_000``, ``1,000``, ``0x10``,
#: ``inf``, ``nan`` are not numbers. Anchored with ``\\z`` (RE2 and Java agree: ``$``
#: in Java also matches before a final newline).
CSV_NUMBER = r"^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?\z"
CSV_INTEGER = r"^[+-]?[0-9]+\z"
_YEAR = "(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"  # 0001-9999
_DAY = f"{_YEAR}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
#: A date: ``YYYY-MM-DD``, year 0001-9999 (a day the calendar lacks, ``2021-02-29``,
#: passes the pattern and is NULL by both engines' cast: tested).
CSV_DATE = f"^{_DAY}\\z"
#: A timestamp: a date, ``' '`` or ``T``, ``HH:MM[:SS[.f]]`` (1-6 digits of fraction),
#: then no zone (the wall-clock time as written) or ``Z`` or an offset ``±HH``,
#: ``±HH:MM``, ``±HHMM``, which is subtracted (UTC). Groups: 1 the time without its
#: zone, 2 the offset's sign, 3 its hours, 4 its minutes.
CSV_TIMESTAMP = (
    f"^({_DAY}[ T](?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:[.][0-9]{{1,6}})?)?)"
    "(?:Z|([+-])([01][0-9]|2[0-3])(?::?([0-5][0-9]))?)?\\z"
)
#: A boolean: these spellings in any ASCII case (not ``(?i)``: RE2 folds ``ſ`` to ``s``).
CSV_TRUE = "^(?:[Tt][Rr][Uu][Ee]|[Tt]|[Yy][Ee][Ss]|[Yy]|1)\\z"
CSV_FALSE = "^(?:[Ff][Aa][Ll][Ss][Ee]|[Ff]|[Nn][Oo]|[Nn]|0)\\z"
#: The range of a converted timestamp (Python's): an offset may carry a time past it.
_FIRST_TIME, _LAST_TIME = "0001-01-01 00:00:00", "9999-12-31 23:59:59.999999"
#: Longest CSV line read, in bytes without its line end (a longer one is a malformed line,
#: dropped on both engines): 1 GiB in a plain file, 1 MiB in a gzipped one. DuckDB holds a
#: compressed file's lines in buffers it allocates whole (16 times ``max_line_size`` by
#: default: 16 GiB for 1 GiB, over any memory limit, so every ``.gz`` failed), and
#: ``buffer_size`` bounds those; a plain file's buffers are read from the file as needed.
CSV_MAX_LINE = 2**30
CSV_MAX_LINE_GZIP = 2**20
#: DuckDB's buffer for a gzipped CSV (one a file being read): 8 times its longest line.
#: Measured: 16 files on 16 threads read under ``memory_limit="128MB"``; 2 MiB buffers
#: took more CPU than 8 MiB (0.26 s against 0.18 s for 3·10⁶ lines), 32 MB no less.
_GZIP_BUFFER = 8 * CSV_MAX_LINE_GZIP
_MAX_FINITE = 1.7976931348623157e308  # the largest double
#: Most columns a CSV may have: Java's regex engine recurses per field, so Spark's split
#: of a line of 2,000 quoted fields overflows the executor's stack (1,500 pass on a local
#: session); a cap on the header makes that a refusal of the schema, never of one row.
CSV_MAX_COLUMNS = 1000


_BOM = b"\xef\xbb\xbf"


def _first_line(name: str) -> bytes:
    r"""A file's first line as bytes (up to its first ``\r`` or ``\n``), without a leading
    UTF-8 byte-order mark (Excel's "CSV UTF-8"). Only this line is read: nothing after it
    (no row) changes what it is."""
    opener: Any = gzip.open if name.lower().endswith(".gz") else open
    parts = []
    with opener(name, "rb") as handle:
        while chunk := handle.read(65536):
            end = min((i for i in (chunk.find(b"\r"), chunk.find(b"\n")) if i >= 0), default=-1)
            if end >= 0:
                parts.append(chunk[:end])
                break
            parts.append(chunk)
    return b"".join(parts).removeprefix(_BOM)


def csv_layout(files: Sequence[str]) -> list[str]:
    """The column names of CSV ``files``: their schema only.

    The names are those of every file's header (:func:`csv_headers`), in the order they
    first appear (the files sorted by name): files whose headers differ are read by
    name, a column a file lacks NULL there, as Parquet files are.
    """
    return _union(csv_headers(files))


def _separator(name: str) -> str:
    """The field separator of CSV file ``name``: a tab for ``.tsv`` (``.tsv.gz``), else ``,``."""
    return "\t" if name.lower().endswith((".tsv", ".tsv.gz")) else ","


def csv_headers(files: Sequence[str]) -> list[list[str]]:
    """The column names of CSV ``files``.

    Each file has its own separator (:func:`_separator`: ``.tsv`` and ``.tsv.gz`` files
    are tab-separated, others comma-separated; a folder may hold both); the names
    are each file's first line (a leading UTF-8 byte-order mark dropped), split as a
    data line is (:func:`csv_line_pattern`'s fields). Only the first line is read and
    decoded: nothing is sniffed from the rows, so no row changes how the others are
    read or whether the files are refused. Files whose headers differ are read
    together by name, however many names that makes in all.

    A folder's or glob's files whose own header is not valid are left out before this
    (:func:`_files`), so no file — one unit's, say — decides whether the others are
    refused.

    Raises
    ------
    ValueError
        A file whose header is not valid (:func:`_header`), with its reason.
    """
    return [_header(name, _separator(name)) for name in files]


def _header(name: str, sep: str) -> list[str]:
    """The column names of the CSV file ``name``, from its first line alone.

    Raises
    ------
    ValueError
        A first line that is not UTF-8 or not a line of fields (a quoted newline in a
        name: the header spans lines), that repeats a name (which column is which
        would be ambiguous) or has more than :data:`CSV_MAX_COLUMNS` names.
    """
    field = f'(?:"(?:[^"]|"")*"|[^{sep}"]*)'
    try:
        line = _first_line(name).decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, zlib.error):  # zlib: a corrupt .gz
        line = None
    if not line or not re.fullmatch(f"{field}(?:{sep}{field})*", line):
        what = (
            "a CSV whose header is one line"
            if line and line.count('"') % 2
            else "a CSV whose first line is a UTF-8 header"
        )
        raise ValueError(invalid("data", what, Path(name).name))
    header = next(csv.reader([line], delimiter=sep))
    if len(header) > CSV_MAX_COLUMNS:
        raise ValueError(
            invalid(
                "data",
                f"a CSV of at most {CSV_MAX_COLUMNS} columns (Parquet has no limit)",
                f"{len(header)} columns in {Path(name).name}",
            )
        )
    if len(set(header)) < len(header):
        raise ValueError(invalid("data", "a CSV whose header repeats no name", Path(name).name))
    return header


def _union(headers: Sequence[list[str]]) -> list[str]:
    """The column names of files with these headers: the one header, or every name once."""
    if all(h == headers[0] for h in headers):
        return headers[0]
    return list(dict.fromkeys(name for header in headers for name in header))


def _positions(header: Sequence[str], names: Sequence[str]) -> list[tuple[str, int | None]]:
    """Each of ``names`` with its field's index in ``header`` (None: the file lacks it)."""
    if list(header) == list(names):
        return list(zip(names, range(len(names)), strict=True))
    at = {name: i for i, name in enumerate(header)}  # a header repeats no name (_header)
    return [(name, at.get(name)) for name in names]


def csv_max_line(name: str) -> int:
    """The longest line, in bytes without its line end, read from CSV file ``name``
    (:data:`CSV_MAX_LINE`, :data:`CSV_MAX_LINE_GZIP` for a ``.gz`` file)."""
    return CSV_MAX_LINE_GZIP if name.lower().endswith(".gz") else CSV_MAX_LINE


def _by_header(
    files: Sequence[str], headers: Sequence[list[str]]
) -> list[tuple[list[str], list[str], int, str, list[str]]]:
    """``files`` grouped by their first line, their longest line (:func:`csv_max_line`)
    and their separator (:func:`_separator`): (header, the lines dropped, that length,
    the separator, files) in the files' order.

    A data line equal to its file's first line (with or without a byte-order mark) is a
    repeated header and is dropped; only its own file's first line counts, never another
    file's: a file whose first line is another file's data line (``bob,5``) would drop
    that file's rows, one unit's file changing other units' data. Files of one group
    share their first line, so which other files exist changes no file's rows.
    """
    groups: dict[tuple[str, int, str], tuple[list[str], list[str]]] = {}
    for name, header in zip(files, headers, strict=True):
        line = _first_line(name).decode("utf-8")  # csv_headers has checked it is UTF-8
        key = (line, csv_max_line(name), _separator(name))
        groups.setdefault(key, (header, []))[1].append(name)
    return [
        (header, [line, "\ufeff" + line], longest, sep, group)
        for (line, longest, sep), (header, group) in groups.items()
    ]


def csv_line_pattern(sep: str, count: int, *, java: bool) -> str:
    """A regex that matches a CSV line of ``count`` fields whole, one group a field.

    A field is unquoted (no separator, no ``"``) or quoted (``"`` … ``"``, with ``""``
    for a ``"`` inside and no newline, since the line has none). RE2 (DuckDB) and Java
    (Spark) read it alike; Java's loop is possessive (``*+``), which it runs without
    recursion (a greedy group loop recurses once per pair and overflows the stack on a
    field of many ``""``), and which matches the same lines since a field's end is
    never ambiguous.
    """
    loop = "*+" if java else "*"
    field = f'("(?:[^"]|""){loop}"|[^{sep}"]*)'
    return "^" + sep.join([field] * count) + r"\z"


def read_csv_text(con: Any, files: Sequence[str]) -> Any:
    """CSV ``files`` as a DuckDB relation of text columns, read as :func:`csv_layout`
    says (the fixed dialect, one record a line; a malformed line dropped, never an error).

    DuckDB's own CSV parser lets a quoted field span lines (an unclosed quote then takes
    every later line with it), so the lines are read raw (no quote; the separator is
    U+0001, a line with one is malformed) and each is split by :func:`csv_line_pattern`.
    """
    headers = csv_headers(files)
    names = _union(headers)
    parts = [
        _csv_text_part(con, group, sep, header, names, dropped, longest)
        for header, dropped, longest, sep, group in _by_header(files, headers)
    ]
    return functools.reduce(lambda a, b: a.union(b), parts)


def _csv_text_part(
    con: Any,
    files: Sequence[str],
    sep: str,
    header: Sequence[str],
    names: Sequence[str],
    header_lines: Sequence[str],
    longest: int,
) -> Any:
    r"""CSV ``files`` that share their first line, with the columns ``names`` (NULL where
    ``header`` lacks one), read as :func:`read_csv_text` says; a line among
    ``header_lines`` (their own first line: :func:`_by_header`) or longer than
    ``longest`` bytes is dropped.

    DuckDB drops a line of more than ``max_line_size`` bytes (``ignore_errors``), but
    one of exactly that many, its ``\r`` counted, only at some places in its buffers:
    it reads up to ``longest + 2`` and the length is tested here, so whether a line
    is read depends on that line alone.
    """
    sizes = {"max_line_size": longest + 2}
    if longest < CSV_MAX_LINE:
        sizes["buffer_size"] = _GZIP_BUFFER
    raw = con.read_csv(
        list(files),
        header=True,
        auto_detect=False,
        columns={"line": "VARCHAR", "rest": "VARCHAR"},
        delimiter="\x01",
        quotechar="",
        escapechar="",
        strict_mode=False,
        null_padding=True,
        ignore_errors=True,
        **sizes,
        # No field holds a newline: nothing reads as NULL but a missing ``rest`` (a line
        # ending in 0x01 has an empty ``rest``, dropped as on Spark), not even ''.
        na_values="\n",
    )
    pattern = csv_line_pattern(sep, len(header), java=False)
    lines = ", ".join(_sql_text(h) for h in header_lines)
    keep = (
        f"rest IS NULL AND line IS NOT NULL AND line NOT IN ({lines}) "
        f"AND strlen(line) <= {longest} "
        f"AND NOT contains(line, '\ufffd') AND regexp_full_match(line, {_sql_text(pattern)})"
    )
    groups = ", ".join(f"'c{i}'" for i in range(len(header)))
    split = raw.filter(keep).select(f"regexp_extract(line, {_sql_text(pattern)}, [{groups}]) AS f")
    fields = []
    for name, at in _positions(header, names):
        v = f"f.c{at}"
        value = (
            "NULL::VARCHAR"
            if at is None
            else f"CASE WHEN starts_with({v}, '\"') "
            f"THEN replace({v}[2:-2], '\"\"', '\"') ELSE nullif({v}, '') END"
        )
        fields.append(f'{value} AS "{name.replace(chr(34), chr(34) * 2)}"')
    return split.select(", ".join(fields))


def _sql_text(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _spark_csv_text(spark: Any, files: Sequence[str]) -> Any:
    r"""CSV ``files`` as a Spark DataFrame of text columns, read as :func:`read_csv_text`
    reads them on DuckDB: each line (``\n``, ``\r\n`` or ``\r`` ends it) split by
    :func:`csv_line_pattern`, a line that does not match it dropped; files whose headers
    differ read by name."""
    from pyspark.sql import functions as F  # noqa: N812 - PySpark's idiom

    headers = csv_headers(files)
    names = _union(headers)
    line = F.col("value")
    parts = []
    for header, header_lines, longest, sep, group in _by_header(files, headers):
        pattern = csv_line_pattern(sep, len(header), java=True)
        # Text lines hold raw bytes: invalid UTF-8 is dropped here as DuckDB drops it.
        # The files' own first line (each file's header) is dropped, no other file's,
        # and a line longer than DuckDB reads.
        bad = line.isin(header_lines) | line.contains("\x01") | line.contains("\ufffd")
        bad = bad | (F.octet_length(line) > longest)
        bad = bad | ~F.is_valid_utf8(line) | (line == "")  # DuckDB skips empty lines
        lines = spark.read.text(list(group)).filter(~bad & line.rlike(pattern))
        fields = []
        for name, at in _positions(header, names):
            if at is None:
                fields.append(F.lit(None).cast("string").alias(name))
                continue
            v = F.regexp_extract(line, pattern, at + 1)
            inner = F.replace(v.substr(F.lit(2), F.length(v) - 2), F.lit('""'), F.lit('"'))
            fields.append(
                F.when(v.startswith('"'), inner).otherwise(F.nullif(v, F.lit(""))).alias(name)
            )
        parts.append(lines.select(*fields))
    return functools.reduce(lambda a, b: a.unionByName(b), parts)


def is_glob(text: str) -> bool:
    """Whether a data path is a glob (it has ``*``, ``?`` or ``[``)."""
    return any(c in text for c in "*?[")


def data_files(source: str | os.PathLike[str]) -> list[Path]:
    """The files a data path names, sorted; none if it names none.

    A file is itself; a directory, every ``.csv``/``.parquet`` (…) file under it,
    recursively; a glob (:func:`is_glob`; ``**`` recursive), the files it matches.
    The engines read these (:func:`_files`); the CLI checks its outputs against
    them.
    """
    text = os.fspath(source)
    path = Path(text)
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(
            p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(DATA_SUFFIXES)
        )
    if is_glob(text):
        return sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
    return []


def _module(obj: object) -> str:
    return type(obj).__module__.split(".")[0]


#: Column types a user may declare (``column_types=``), DuckDB name → Spark name.
DECLARABLE = {
    "BIGINT": "bigint",
    "DOUBLE": "double",
    "VARCHAR": "string",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
    "BOOLEAN": "boolean",
}

_REASONS = {
    "ConversionException": "a value does not convert to its column's type",
    "InvalidInputException": "the input is malformed (not a table it can parse, or a ragged line)",
    "IOException": "the file cannot be read",
    "OutOfRangeException": "an integer overflowed",
    "OutOfMemoryException": "it ran out of memory (raise memory_limit)",
    "NumberFormatException": "a value does not convert to its column's type",
    "AnalysisException": "the input cannot be analysed as a table",
    "ArithmeticException": "an integer overflowed",
    "NotImplementedException": "a column of a type it cannot read (Arrow float16, decimal256)",
}


#: Attributes of PySpark's exceptions that hold the JVM's text (the description, its stack
#: trace, the Java exception and its cause): blanked in an engine error that is dropped.
_ENGINE_TEXT = {"_desc": "", "_stackTrace": "", "_origin": None, "_cause": None}


def failure_message(engine: str, action: str, error: BaseException) -> str:
    """One line about an engine failure that never repeats data values.

    Only the exception's class and a fixed explanation are used: engine messages
    quote raw records and values (``Original Line: 7,a,abc``), which may identify a
    privacy unit, and their line numbers tell the table's size or where a record
    sits (a malformed last line is at line n + 1) before any budget is spent.
    The engine's exception is scrubbed too (its ``args`` replaced, its notes,
    traceback and PySpark's JVM text dropped) in case something still holds it:
    :func:`raise_detached` leaves it out of the chain of the error raised instead.

    Examples
    --------
    >>> class ConversionException(Exception): ...
    >>> failure_message("duckdb", "reading the data", ConversionException(
    ...     "CSV Error on Line: 70002 Original Line: 7,abc"))
    "duckdb failed reading the data: a value does not convert to its column's type
    (ConversionException; data values and line numbers are not shown)"
    """
    kind = type(error).__name__
    text = str(error)
    for name, reason in _REASONS.items():
        if name == kind or f".{name}" in text.split(":", 1)[0]:
            kind, explanation = name, reason
            break
    else:
        explanation = (
            "not a readable CSV/Parquet table"
            if action.startswith("opening")
            else "the engine reported an error"
        )
    error.args = (_withheld(kind),)
    if hasattr(error, "__notes__"):
        del error.__notes__
    error.__cause__ = error.__context__ = None  # PySpark's: the Py4JJavaError and its message
    error.__traceback__ = None  # its frames' locals: the query's text, PySpark's objects
    for name, blank in _ENGINE_TEXT.items():
        if name in vars(error):
            setattr(error, name, blank)
    return (
        f"{engine} failed {action}: {explanation} "
        f"({kind}; data values and line numbers are not shown)"
    )


def _withheld(kind: str) -> str:
    return f"{kind} (message withheld: it may quote data values)"


class _WithheldError(Exception):
    """Stands in for an engine's exception in a chain: its class name, nothing it said."""


def raise_detached(error: BaseException, kind: str) -> NoReturn:
    """Raise ``error`` (its message from :func:`failure_message`) while an engine's
    exception (of class ``kind``) is being handled, with no link to it.

    ``raise … from None`` still keeps the handled exception as ``__context__``, and
    scrubbing its ``args`` is not enough for PySpark's: their text comes from the
    JVM (the description, its stack trace, the ``Py4JJavaError``), which quotes
    malformed records. The raised error's ``__context__`` is a stand-in that names
    only the engine exception's class, with no context of its own.
    """
    stand_in = _WithheldError(_withheld(kind))
    try:
        raise stand_in
    except _WithheldError as withheld:
        withheld.__context__ = None  # it was raised while the engine's error was handled
        raise error from None


class _Failures:
    """:meth:`Engine.failures`: an engine exception raised inside becomes :class:`EngineError`.

    A class, not a ``contextlib.contextmanager``: the generator's ``__exit__`` frame keeps
    the handled exception as a local, reachable from the raised error's traceback (a
    debugger, ``traceback`` with ``capture_locals=True``), and PySpark's text comes from
    the JVM, quoting records. Here the message is built first, then the engine exception
    is scrubbed (:func:`failure_message`) and no frame of the raised error's traceback
    holds it.
    """

    def __init__(self, engine: str, action: str, errors: tuple[type[BaseException], ...]):
        self._engine, self._action, self._errors = engine, action, errors

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> None:
        if not isinstance(error, self._errors):
            return
        message = failure_message(self._engine, self._action, error)
        kind = type(error).__name__
        del error, trace  # this frame is in the raised error's traceback
        raise_detached(EngineError(message), kind)


class Engine(ABC):
    """An opened input on one engine.

    ``on_progress``, if set, is called (from another thread) with the engine's
    estimate of the fraction of the running query done, in [0, 1], a few
    times a second; engines that cannot tell never call it.
    """

    name: str
    _declared: dict[str, str]
    on_progress: Callable[[float], None] | None = None
    #: Every column is text (a CSV): each needed column is converted by the one
    #: reading of :func:`csv_layout`'s docs (a value that does not convert is NULL).
    text_columns: bool = False
    #: Columns of a Parquet directory or glob whose files disagree on the type in a way
    #: that only text holds exactly (a number in one file, text or another kind of number
    #: in another), and a folder's numeric unit and key columns: read as text (a number as
    #: :func:`number_text` writes it) and converted as a CSV's column is, value by value
    #: (:func:`parquet_layout`).
    mixed_columns: frozenset[str] = frozenset()
    #: A pandas frame's ``object`` columns (among ``mixed_columns``): read as text, and
    #: summed only with a type declared in ``column_types`` (their values say nothing).
    object_columns: frozenset[str] = frozenset()
    #: The input is Parquet files of a directory or glob: which columns exist depends on
    #: which files do, so a needed column that no file has is read as NULL (:meth:`absent`).
    several_files: bool = False
    _absent: dict[str, str] = {}  # noqa: RUF012 - replaced, never mutated
    #: A folder or glob none of whose files adds rows: a table of no rows and no columns.
    _no_columns: bool = False

    @property
    def schema(self) -> dict[str, str]:
        """Column name → the engine's type name (declared types replace inferred ones)."""
        inferred = {} if self._no_columns else self._schema()
        return {**inferred, **self._absent, **self._declared}

    def absent(self, types: Mapping[str, str]) -> None:
        """Read these columns (name → a type among :data:`DECLARABLE`), which no file of
        :attr:`several_files` has, as NULL: refusing them would depend on whether the one
        file that has the column exists (docs/release.md)."""
        self._absent = {c: self._type_name(t) for c, t in types.items()}

    def _type_name(self, kind: str) -> str:
        """The engine's name of a :data:`DECLARABLE` type."""
        return kind

    @abstractmethod
    def _schema(self) -> dict[str, str]:
        """Column name → the type the engine inferred."""

    @abstractmethod
    def _errors(self) -> tuple[type[BaseException], ...]:
        """The exception types the engine raises for bad data or failed queries."""

    def failures(self, action: str) -> _Failures:
        """Turn an engine exception into :class:`EngineError` (one line, no data-bearing cause)."""
        return _Failures(self.name, action, self._errors())

    def declare(self, types: Mapping[str, str]) -> None:
        """Use these column types (names among :data:`DECLARABLE`) instead of inferred ones;
        :meth:`register` converts the columns with ``TRY_CAST``, a text column (a CSV's,
        a mixed or ``object`` one) only after its type's pattern matched (:data:`_RULED`);
        a value that does not convert is NULL: refusing it would depend on one row."""
        self._declared = dict(types)

    def validate(
        self, view: str, columns: Sequence[str], boundings: Sequence[Bounding] = ()
    ) -> dict[str, int]:
        """Read every row of ``view`` (all of ``columns``, internal names) once.

        A value that does not convert, a malformed line or a corrupt page fails
        here, before anything is reserved (:class:`EngineError`). Returns the
        number of non-NULL values per column. ``boundings`` are the groupings
        :meth:`columns` will bound (their salts not yet drawn): an engine may choose
        their path here, and refuse one it cannot take as told (``ValueError``).
        """
        counts = ", ".join(f"COUNT({c})" for c in columns)
        (row,) = self.query(f"SELECT {counts} FROM {view}", action="reading the data")
        return {c: int(n) for c, n in zip(columns, row, strict=True)}

    @abstractmethod
    def is_numeric(self, column: str) -> bool:
        """Whether ``column`` has a numeric type (integers, floats, decimals)."""

    @abstractmethod
    def register(self, columns: dict[str, str]) -> str:
        """Register a view with internal names (``{internal: user column}``); return its name."""

    @abstractmethod
    def query(
        self, sql: str, *, action: str = "running the release query"
    ) -> list[tuple[Any, ...]]:
        """Run ``sql`` and return all rows (:class:`EngineError` on failure)."""

    @abstractmethod
    def columns(
        self,
        sql: str,
        *,
        action: str = "running the release query",
        bounding: Bounding | None = None,
    ) -> list[np.ndarray[Any, Any]]:
        """Run ``sql`` and return its result column by column (:class:`EngineError` on failure).

        Each column is an object array of the values :meth:`query` returns
        (``int``, ``str``, ``datetime.date``, …), except that an engine may
        return a column of integers without NULLs as ``int64``. ``bounding``, where
        ``sql`` is its :meth:`Bounding.sql`, lets an engine compute the same result
        another way (DuckDB's compiled path, :func:`bounding_mode`).
        """

    @abstractmethod
    def close(self) -> None:
        """Release what :meth:`register` created."""

    def check_columns(self, columns: dict[str, bool]) -> None:
        """Check that each column exists and, where ``True`` is given, is numeric.

        By the schema alone: whether the column holds values, and which, never
        matters (a string column with no value is refused as one with values, or an
        empty table would be told apart from one with a row). A column whose type
        is NULL (DuckDB; Spark's ``void``) holds no value in any table: it passes.

        Raises
        ------
        ValueError
            Naming the first missing or non-numeric column.
        """
        schema = self.schema
        for column, numeric in columns.items():
            if column not in schema:
                raise ValueError(invalid("column", f"one of {sorted(schema)}", column))
            kind = schema[column].strip('"')  # DuckDB quotes its NULL type: '"NULL"'
            if numeric and not self.is_numeric(column) and kind not in _NULL_TYPES:
                raise ValueError(
                    invalid(f"column {column!r}", "numeric to be summed", type_label(kind))
                )


#: DuckDB's documented minimum of memory a thread needs ("as a rule of thumb, DuckDB
#: requires a minimum of 125 MB of memory per thread": duckdb.org, Guides, Performance,
#: Environment). A connection runs at most ``memory_limit`` // this many threads, and
#: ``memory_limit`` may not be below it: measured on the SQL bounding path (count by
#: page, L0 = 2, 2·10⁶ rows), 32 MiB ran out of memory on 4 threads (2 passed) and on
#: one thread at 10⁷ rows, 16 MiB on one thread at 2·10⁶; 125 MB passed 10⁷ rows on
#: 1, 2 and 4 threads. Running out of memory happens after the reservation, and
#: whether it does depends on the table's size.
THREAD_MEMORY = 125 * 10**6


def check_memory_limit(limit: int | str) -> int | None:
    """``limit`` (bytes, or a size as ``memory_limit`` takes it) in bytes, or ``None`` if
    the text is not one this reads (DuckDB then judges it).

    Raises
    ------
    ValueError
        A limit below :data:`THREAD_MEMORY`.
    """
    size = limit if isinstance(limit, int) else _size_bytes(limit)
    if size is not None and size < THREAD_MEMORY:
        raise ValueError(
            invalid(
                "memory_limit",
                "at least 125 MB (DuckDB's documented minimum for one thread; "
                "below it a large table runs out of memory)",
                limit,
            )
        )
    return size


def default_memory_limit() -> int:
    """DuckDB's memory limit when none is given: a quarter of the machine's memory, at most
    1 GiB (at least 256 MiB). Beyond it DuckDB spills to its temporary directory, so a
    release's peak memory does not grow with the table."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):  # pragma: no cover - not POSIX
        total = 4 * 2**30
    return max(256 * 2**20, min(2**30, total // 4))


#: Values of ``GAUSSDP_BOUNDING`` (:func:`bounding_mode`).
BOUNDING_MODES = ("auto", "sql", "compiled")

#: Column types the compiled path takes: a unit (its own exact code as int64), group keys
#: (equal in a join exactly when equal in a GROUP BY; no floats: -0.0 and NaN).
_COMPILED_UNITS = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER"}
_COMPILED_KEYS = _COMPILED_UNITS | {"UBIGINT", "VARCHAR", "DATE", "BOOLEAN"}

#: Largest L0 the compiled path takes: its state is L0 slots per unit, and each row scans
#: its unit's slots.
_COMPILED_MAX_L0 = 32

#: Rows per record batch of the compiled path's stream.
_BATCH_ROWS = 2**17


def bounding_mode() -> str:
    """How DuckDB bounds contributions, from the environment variable ``GAUSSDP_BOUNDING``.

    ``auto`` (the default): the compiled path (``gaussdp.release._compiled``) for a
    grouping it covers — numba installed, an integer privacy unit, group keys of integer,
    text, date or boolean type, outputs among counts, sums, sums of squares and distinct
    units of scalar values (no histogram, vector or quantile tree), rows that fit the
    memory limit — and the SQL otherwise; ``sql``: always the SQL; ``compiled``: the
    compiled path, or a one-line ``ValueError`` saying why not, raised while the data are
    read (:meth:`DuckDBEngine.validate`), before anything is reserved (for tests and
    benchmarks: that refusal depends on the table's size). Both paths give identical
    results (docs/release.md): where the compiled path cannot finish after the
    reservation (memory, more rows than counted, int64), the SQL bounds the grouping,
    under ``compiled`` with a ``RuntimeWarning``.

    Raises
    ------
    ValueError
        An unknown value.
    """
    mode = os.environ.get("GAUSSDP_BOUNDING", "").strip().lower() or "auto"
    if mode not in BOUNDING_MODES:
        raise ValueError(invalid("GAUSSDP_BOUNDING", f"one of {list(BOUNDING_MODES)}", mode))
    return mode


def _keys_key(b: Bounding) -> tuple[object, ...]:
    """What a grouping's key codes depend on: the view, the key columns, the NaN rule."""
    return (b.source, b.keys, tuple(sorted((b.nan or {}).items())))


def _compiled_module() -> Any:
    """``gaussdp.release._compiled``, or ``None`` without numba or where it fails to
    load (any exception: a numba that cannot compile or cache here); then the SQL path
    runs, with the same result. Called while the data are checked, before the
    reservation, so such a failure never ends a release that was charged."""
    try:
        from gaussdp.release import _compiled
    except Exception:
        return None
    return _compiled


_SIZE_UNITS = {"": 1, "B": 1, "BYTES": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_SIZE_UNITS |= {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def _size_bytes(text: str) -> int | None:
    """A size as ``memory_limit`` takes it (``'2GB'``, ``'512 MiB'``) in bytes, or ``None``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if match is None or match.group(2).upper() not in _SIZE_UNITS:
        return None
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()])


#: DuckDB types whose Arrow form converts to the same Python values as DuckDB's ``fetchall``.
_ARROW_EXACT = re.compile(
    r"(U?(TINYINT|SMALLINT|INTEGER|BIGINT)|FLOAT|DOUBLE|DECIMAL\(\d+,\s*\d+\)|VARCHAR|DATE"
    r"|TIMESTAMP|TIMESTAMP WITH TIME ZONE|BOOLEAN)"
    r"\Z"
)


def _from_arrow(column: Any) -> np.ndarray[Any, Any]:
    """One Arrow result column as numpy (see :meth:`DuckDBEngine.columns`)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    kind = column.type
    if column.null_count == 0:
        # Integers that fit int64 (not UBIGINT: those beyond 2⁶³ would wrap).
        if pa.types.is_integer(kind) and (kind.bit_width < 64 or pa.types.is_signed_integer(kind)):
            return np.asarray(column.to_numpy(), dtype=np.int64)
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return np.asarray(column.to_numpy(zero_copy_only=False), dtype=object)
    return np.fromiter(column.to_pylist(), dtype=object, count=len(column))


def _columns_of(rows: Sequence[Sequence[Any]], width: int) -> list[np.ndarray[Any, Any]]:
    """Result rows as ``width`` object columns (``np.fromiter``: a value that is itself a
    sequence stays one value)."""
    return [
        np.fromiter((row[j] for row in rows), dtype=object, count=len(rows)) for j in range(width)
    ]


#: Declared types a text column is converted to by the one rule (docs/release.md,
#: "Reading a CSV"): a fixed pattern the text, spaces around it ignored, must match
#: before the engine's cast; anything else is NULL, identically on both engines.
_RULED = ("BIGINT", "DOUBLE", "DATE", "TIMESTAMP", "BOOLEAN")


def _duckdb_by_rule(duck: Any, column: Any, kind: str, names: Sequence[str]) -> Any:
    """Text ``column`` as a DuckDB expression of type ``kind`` (among :data:`_RULED`) over
    a relation of columns ``names``."""
    const, fn = duck.ConstantExpression, duck.FunctionExpression
    text = fn("trim", column, const(" "))  # spaces only, as Spark's (not U+00A0)

    def matches(pattern: str) -> Any:
        return fn("regexp_full_match", text, const(pattern))

    if kind == "BOOLEAN":
        return duck.CaseExpression(matches(CSV_TRUE), const(True)).when(
            matches(CSV_FALSE), const(False)
        )
    if kind == "TIMESTAMP":
        # One match a value, its groups bound by lambdas (the expression API repeats a
        # shared subexpression: five matches a value cost 4x the CPU, measured). A column
        # of the source hides a lambda parameter of its name: theirs are other names.
        taken = {c.lower() for c in names}
        m, v = (
            next(f"gdp_{x}{i}" for i in itertools.count() if f"gdp_{x}{i}" not in taken)
            for x in "mv"
        )
        offset = f"(CAST('0' || {m}.h AS BIGINT) * 60 + CAST('0' || {m}.m AS BIGINT))"
        shifted = (
            f"CASE WHEN {m}.l <> '' THEN TRY_CAST({m}.l AS TIMESTAMP) - "
            f"to_minutes(CASE WHEN {m}.s = '-' THEN -{offset} ELSE {offset} END) END"
        )
        groups = f"regexp_extract({text}, {_sql_text(CSV_TIMESTAMP)}, ['l', 's', 'h', 'm'])"
        first, last = (f"CAST({_sql_text(t)} AS TIMESTAMP)" for t in (_FIRST_TIME, _LAST_TIME))
        return duck.SQLExpression(
            f"list_transform([list_transform([{groups}], lambda {m}: {shifted})[1]], "
            f"lambda {v}: CASE WHEN {v} BETWEEN {first} AND {last} THEN {v} END)[1]"
        )
    pattern = {"BIGINT": CSV_INTEGER, "DOUBLE": CSV_NUMBER, "DATE": CSV_DATE}[kind]
    value = text.try_cast(duck.sqltype(kind))
    if kind == "DOUBLE":  # '1e999' reads as inf here, as in Spark: not a number
        value = duck.CaseExpression(fn("abs", value) <= const(_MAX_FINITE), value)
    return duck.CaseExpression(matches(pattern), value)


def _spark_by_rule(column: Any, kind: str) -> Any:
    """Text ``column`` as a Spark column of type ``kind`` (among :data:`_RULED`, DuckDB's
    names): the same rule as :func:`_duckdb_by_rule`. A timestamp is ``timestamp_ntz``,
    the time as written (or in UTC), never shifted by the session's or Python's zone."""
    from pyspark.sql import functions as F  # noqa: N812 - PySpark's idiom

    text = F.trim(column)  # spaces only, as DuckDB's trim(x, ' ')
    if kind == "BOOLEAN":
        return F.when(text.rlike(CSV_TRUE), F.lit(True)).when(text.rlike(CSV_FALSE), F.lit(False))
    if kind == "TIMESTAMP":

        def group(i: int) -> Any:
            return F.regexp_extract(text, CSV_TIMESTAMP, i)

        hours, minutes = (F.concat(F.lit("0"), group(i)).cast("int") for i in (3, 4))
        offset = hours * 60 + minutes  # '' (no zone, Z) reads as '0'
        signed = F.when(group(2) == "-", -offset).otherwise(offset)
        local = group(1).try_cast("timestamp_ntz")
        value = F.timestamp_add("MINUTE", -signed, local)
        first, last = (F.lit(t).cast("timestamp_ntz") for t in (_FIRST_TIME, _LAST_TIME))
        return F.when(text.rlike(CSV_TIMESTAMP) & value.between(first, last), value)
    pattern = {"BIGINT": CSV_INTEGER, "DOUBLE": CSV_NUMBER, "DATE": CSV_DATE}[kind]
    value = text.try_cast(DECLARABLE[kind])
    if kind == "DOUBLE":
        value = F.when(F.abs(value) <= F.lit(_MAX_FINITE), value)
    return F.when(text.rlike(pattern), value)


#: The DuckDB optimizer gaussdp's queries run without. It decides expressions from a
#: column's statistics, and a Parquet file's min/max leave NaN out (the format's rule), so
#: with no NULL in the column DuckDB (2.0.1) takes ``isnan(x)`` to be false for every row
#: and drops the test: NaN units were kept (all of them one unit) and NaN values clamped
#: and counted. No formulation of the test is safe from that in general; without the
#: optimizer each row is tested. Measured cost: +4.5 % CPU (median of 5 interleaved rounds,
#: ranges overlapping) for count, sum, mean and median by page on a 2·10⁶-row Parquet file.
_NO_STATISTICS = "statistics_propagation"


#: Held while a gaussdp query runs on a caller's connection (:meth:`DuckDBEngine._nan_exact`).
_CALLERS_SETTINGS = threading.RLock()


def _refuse_unfinished(duckdb: Any, connection: Any) -> None:
    """Refuse a caller's connection whose ``execute()`` result is not read to its end.

    DuckDB 2 runs no other statement on such a connection: it raises
    ``ResourceInUseException`` and leaves the result as it is, which the probe
    ``SELECT 1`` relies on (gaussdp's first statement once failed there with "message
    withheld"). DuckDB 1.x has no such error: there a statement on the connection
    (the probe too) ends the result, at once or after the rows it has already
    produced (documented in docs/release.md; not detectable on 1.x).

    Raises
    ------
    ValueError
        On DuckDB 2, if the connection has an unfinished result; nothing has been read
        and the result is unchanged.
    """
    try:
        connection.sql("SELECT 1").fetchall()
    except getattr(duckdb, "ResourceInUseException", ()):
        raise ValueError(
            invalid(
                "source",
                "a (connection, table) whose connection has no unfinished result from "
                "execute(), since DuckDB runs nothing else on it until that result is read "
                "(fetch the rest first, or call connection.complete() or "
                "connection.abort(); or give (connection.cursor(), table), a second "
                "connection to the same database, which does not see the first one's TEMP "
                "tables or session settings)",
                "a connection with an unfinished result",
            )
        ) from None


class DuckDBEngine(Engine):
    """DuckDB (embedded): CSV or Parquet paths, pandas, polars and Arrow frames.

    ``memory_limit`` (bytes, or a DuckDB size string such as ``"2GB"``; default
    :func:`default_memory_limit`; at least :data:`THREAD_MEMORY`), ``temp_directory``
    (where DuckDB spills; default a fresh directory under the system's temporary
    directory, removed on :meth:`close`) and ``threads`` (default: DuckDB's, all
    cores; at most one per :data:`THREAD_MEMORY` of ``memory_limit``) configure
    the connection. Its queries run with DuckDB's statistics propagation off
    (:data:`_NO_STATISTICS`: NaN in a Parquet file); a caller's connection has it off
    only while a gaussdp query runs, then gets its own setting back.
    """

    name = "duckdb"

    def __init__(
        self,
        source: object,
        *,
        memory_limit: int | str | None = None,
        temp_directory: str | os.PathLike[str] | None = None,
        threads: int | None = None,
    ) -> None:
        import duckdb  # core dependency; imported here so `import gaussdp` stays light

        self._duckdb = duckdb
        self._declared = {}
        self._tmp: str | None = None
        self._sunk: str | None = None  # the folder of a LazyFrame's Parquet file
        self._views: list[str] = []
        self._owned = True
        self._settings: Any = None  # a cursor of a caller's connection (_nan_exact)
        #: Per :meth:`columns` call with a ``bounding``, the path taken: compiled or sql.
        self.bounded_by: list[str] = []
        self._memory: int | None = None  # the memory limit in bytes (own connection)
        self._rows: dict[str, int] = {}  # view → rows with a unit (validate)
        #: Per (view, keys, NaN rule): a table of keys_sql's rows and the rows it keeps.
        self._keys: dict[tuple[object, ...], tuple[str, int]] = {}
        if isinstance(source, tuple) and len(source) == 2:
            # (connection, table name): the caller's connection and settings, used as they are.
            connection, table = source
            if (memory_limit, temp_directory, threads) != (None, None, None):
                raise ValueError(
                    invalid(
                        "memory_limit, temp_directory and threads",
                        "omitted with a (connection, table) source (its settings are used)",
                        (memory_limit, temp_directory, threads),
                    )
                )
            if not isinstance(connection, duckdb.DuckDBPyConnection) or not isinstance(table, str):
                raise TypeError(
                    invalid("source", "a (duckdb connection, table name) pair", type(source))
                )
            self._con, self._owned = connection, False
            with self.failures("opening the table"):
                _refuse_unfinished(duckdb, connection)
                self._rel = connection.table(table)
                # Its own transaction: a caller's aborted one runs no statement (_nan_exact)
                self._settings = connection.cursor()
            return
        if temp_directory is None:
            self._tmp = tempfile.mkdtemp(prefix="gaussdp-duckdb-")
            temp_directory = self._tmp
        limit = default_memory_limit() if memory_limit is None else memory_limit
        try:
            self._memory = check_memory_limit(limit)
        except ValueError:
            self._remove_tmp()
            raise
        config: dict[str, Any] = {
            "memory_limit": f"{limit}B" if isinstance(limit, int) else limit,
            "temp_directory": str(temp_directory),
            "preserve_insertion_order": False,  # results are keyed, never ordered by input
            "disabled_optimizers": _NO_STATISTICS,
        }
        if threads is not None:
            config["threads"] = threads
        try:
            self._con = duckdb.connect(config=config)
        except duckdb.Error as error:
            self._remove_tmp()
            raise ValueError(
                invalid("DuckDB settings", "valid (memory_limit, threads)", str(error))
            ) from None
        con = self._con
        if self._memory is not None:  # at most one thread per THREAD_MEMORY (at least one)
            ((running,),) = con.execute("SELECT current_setting('threads')").fetchall()
            most = max(1, self._memory // THREAD_MEMORY)
            if int(running) > most:
                con.execute(f"SET threads = {most}")
        # DuckDB prints its own progress bar by default (to stderr, on long queries): a library
        # prints nothing; Release.run's `progress` reports to whoever asks.
        con.execute("SET enable_progress_bar_print = false")
        try:
            if isinstance(source, str | os.PathLike):
                kind, files = _files(source)
                # A folder or glob: which columns exist depends on which files do
                self.several_files = not Path(source).is_file()
                with self.failures(f"opening {_shown(source, files)}"):
                    if not files:  # no file adds rows: an empty table of no columns
                        self._rel = con.sql("SELECT NULL AS gdp_no_column LIMIT 0")
                        self._no_columns = True
                    elif kind == "parquet":
                        # By name, so that files may differ (parquet_layout)
                        self._rel = con.read_parquet(files, union_by_name=True)
                        if len(files) > 1:  # one file's columns have one type each
                            layout = parquet_layout(files)
                            self.mixed_columns = layout.mixed
                            if layout.groups is not None:
                                self._rel = read_parquet_groups(con, layout, layout.groups)
                    else:
                        # Text, read by a fixed dialect (nothing sniffed from the rows); a
                        # malformed line is dropped, never an error (docs/release.md).
                        self._rel = read_csv_text(con, files)
                        self.text_columns = True
            elif _module(source) == "pandas":
                frame, self.mixed_columns = _object_columns_as_text(source)
                self.object_columns = self.mixed_columns
                self._rel = con.from_df(frame)
            elif _module(source) == "polars" and type(source).__name__ == "LazyFrame":
                self._rel = self._sink(source, temp_directory)
            elif _module(source) == "polars":
                # A DataFrame: DuckDB scans it through Arrow.
                with self.failures("opening the table"):  # a type DuckDB cannot read
                    self._rel = con.from_arrow(source)
            elif _module(source) == "pyarrow":
                if type(source).__name__ == "RecordBatchReader":
                    raise TypeError(
                        invalid(
                            "source",
                            "an Arrow table or dataset (a RecordBatchReader can be read only "
                            "once; gaussdp reads the data twice: checks, then the release)",
                            type(source).__name__,
                        )
                    )
                with self.failures("opening the table"):  # a type DuckDB cannot read
                    self._rel = con.from_arrow(source)
            elif isinstance(source, duckdb.DuckDBPyRelation):
                # Another connection's relation: fetched as an Arrow table.
                self._rel = con.from_arrow(source.to_arrow_table())
            else:
                raise TypeError(
                    invalid(
                        "source",
                        "a CSV/Parquet file, directory or glob, a pandas or polars (lazy) frame, "
                        "an Arrow table or dataset, a DuckDB relation or (connection, table) "
                        "for engine 'duckdb'",
                        type(source).__name__,
                    )
                )
        except BaseException:
            self.close()
            raise

    def _sink(self, frame: Any, temp_directory: str | os.PathLike[str]) -> Any:
        """A polars ``LazyFrame`` written by polars' streaming engine to a Parquet file in
        a fresh folder under ``temp_directory`` (removed on :meth:`close`), read as a file.

        DuckDB's scan of a ``LazyFrame`` has polars collect it in Python at each pass
        (twice a release), memory outside ``memory_limit`` that grows with its rows;
        the file is written in batches and DuckDB reads it within its limit. Columns
        whose type Parquet does not keep (polars ``Duration`` would read as integers,
        ``Int128`` and ``UInt128`` as bytes) are refused by the schema before anything
        is written.
        """
        import polars as pl

        schema = frame.collect_schema()
        lost = [
            name
            for name, kind in schema.items()
            if isinstance(kind, pl.Duration) or kind in (pl.Int128, pl.UInt128)
        ]
        if lost:
            raise TypeError(
                invalid(
                    "source",
                    "a polars LazyFrame without Duration, Int128 or UInt128 columns (it is "
                    "read through a Parquet file, which does not keep those types)",
                    f"columns {lost}",
                )
            )
        os.makedirs(temp_directory, exist_ok=True)
        self._sunk = tempfile.mkdtemp(prefix="gaussdp-lazy-", dir=temp_directory)
        path = os.path.join(self._sunk, "frame.parquet")
        with _Failures("polars", "writing the LazyFrame", (pl.exceptions.PolarsError,)):
            frame.sink_parquet(path)
        with self.failures("opening the LazyFrame's file"):
            return self._con.read_parquet(path)

    def _schema(self) -> dict[str, str]:
        return {c: str(t) for c, t in zip(self._rel.columns, self._rel.types, strict=True)}

    def _errors(self) -> tuple[type[BaseException], ...]:
        return (self._duckdb.Error,)

    def is_numeric(self, column: str) -> bool:
        kind = self.schema[column]
        return kind in _DUCKDB_NUMERIC or kind.startswith("DECIMAL")

    def register(self, columns: dict[str, str]) -> str:
        view = f"gdp_src_{uuid.uuid4().hex}"
        duck = self._duckdb
        const, fn = duck.ConstantExpression, duck.FunctionExpression
        selected = []
        for internal, user in columns.items():
            if user in self._absent:  # NULL, of its declared or implied type: nothing to read
                selected.append(const(None).cast(duck.sqltype(self._absent[user])).alias(internal))
                continue
            expr = duck.ColumnExpression(user)
            kind = self._declared.get(user)
            text_read = self.text_columns or user in self.mixed_columns
            if user in self.mixed_columns and _fractional(self._schema().get(user, "")):
                # Read as text: one text per value, as when another file has it as text
                quoted = '"' + user.replace('"', '""') + '"'
                expr = duck.SQLExpression(number_text(quoted, self._schema()[user]))
            integers = self._schema().get(user) in _DUCKDB_NUMERIC - {"FLOAT", "DOUBLE"}
            if user in self.mixed_columns and kind == "BIGINT" and integers:
                # An integer's digits read back by the rule: the integer (or NULL beyond BIGINT)
                expr = expr.try_cast(duck.sqltype("BIGINT"))
            elif kind is not None and text_read and kind in _RULED:
                if user in self.mixed_columns:  # text, or of a type that is not the spec's
                    expr = expr.cast(duck.sqltype("VARCHAR"))
                expr = _duckdb_by_rule(duck, expr, kind, self._rel.columns)
            elif kind is not None:
                if self.text_columns and kind != "VARCHAR":
                    # DuckDB pushes a cast into its CSV reader, where a value that does not
                    # convert fails the scan even under TRY_CAST (duckdb 1.x and 2.0); going
                    # through the text (concat with '') keeps TRY_CAST's NULL.
                    expr = fn("concat", expr, const(""))
                expr = expr.try_cast(duck.sqltype(kind))
            selected.append(expr.alias(internal))
        with self.failures("preparing the data"):
            self._rel.select(*selected).create_view(view)
        self._views.append(view)
        return view

    def query(
        self, sql: str, *, action: str = "running the release query"
    ) -> list[tuple[Any, ...]]:
        with self.failures(action), self._watch(), self._nan_exact():
            return [tuple(row) for row in self._con.execute(sql).fetchall()]

    def columns(
        self,
        sql: str,
        *,
        action: str = "running the release query",
        bounding: Bounding | None = None,
    ) -> list[np.ndarray[Any, Any]]:
        """The result through Arrow, column by column: no Python tuple per row.

        With ``bounding``, by the compiled path where :func:`bounding_mode` and the
        grouping allow (the same result), else by running ``sql``.

        A 10⁶-row result comes back in a fraction of the time ``fetchall`` and
        the copy of its tuples into arrays take. Integer columns without NULLs
        are ``int64``; strings are object arrays of ``str``; other types are
        converted value by value as :meth:`query` returns them. Where Arrow's
        Python values differ from DuckDB's own (``HUGEINT`` comes back as a
        ``Decimal``, ``INTERVAL`` as Arrow's own type), where Arrow cannot
        convert a value (a ``DATE`` or ``TIMESTAMP`` beyond Python's range,
        such as ``'infinity'``, which ``fetchall`` clamps), or without pyarrow
        (an optional dependency), the rows are fetched as by :meth:`query`.
        """
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            arrow = False
        else:
            arrow = True
        if bounding is not None:
            compiled = self._compiled(bounding, action)
            self.bounded_by.append("sql" if compiled is None else "compiled")
            if compiled is not None:
                return compiled
        with self.failures(action), self._watch(), self._nan_exact():
            relation = self._con.sql(sql)
            if relation is None:  # pragma: no cover - gaussdp's SQL is always a SELECT
                return []
            if not arrow or not all(_ARROW_EXACT.match(str(t)) for t in relation.types):
                return _columns_of(relation.fetchall(), len(relation.columns))
            table = relation.to_arrow_table()
            try:
                return [_from_arrow(table.column(i)) for i in range(table.num_columns)]
            except (OverflowError, ValueError):
                # Values beyond Python's range (DuckDB's 'infinity'::DATE or TIMESTAMP):
                # Arrow's conversion raises where ``fetchall`` clamps them.
                return _columns_of(relation.fetchall(), len(relation.columns))

    def validate(
        self, view: str, columns: Sequence[str], boundings: Sequence[Bounding] = ()
    ) -> dict[str, int]:
        """:meth:`Engine.validate`, which also decides which ``boundings`` take the compiled
        path (:func:`bounding_mode`) before anything is reserved: for the first one that
        does, the read is :func:`keys_sql` (its keys and how many rows it keeps, with
        every column's count), so that its key codes need no pass of their own. Under
        ``GAUSSDP_BOUNDING=compiled`` a grouping the compiled path cannot take is refused
        here (``ValueError``, one line saying why): nothing is spent on it."""
        mode = bounding_mode()
        fast = [b for b in boundings if mode != "sql" and self._not_compiled(b, 0) is None]
        if not fast:
            counts = super().validate(view, columns)
        else:
            first = fast[0]
            table = f"gdp_keys_{uuid.uuid4().hex}"
            sums = ", ".join(f"SUM(c{i})" for i in range(len(columns)))
            with self.failures("reading the data"), self._watch(), self._nan_exact():
                self._con.execute(f"CREATE TEMP TABLE {table} AS {keys_sql(first, columns)}")
                row = self._con.execute(f"SELECT {sums}, SUM(kept) FROM {table}").fetchall()[0]
            *sums_read, kept = (0 if n is None else int(n) for n in row)  # NULL: no rows
            counts = dict(zip(columns, sums_read, strict=True))
            self._keys[_keys_key(first)] = (table, kept)
        if "pu" in counts:  # the compiled path's bound on the rows it would hold
            self._rows[view] = counts["pu"]
        if mode == "compiled":
            for b in boundings:
                reason = self._not_compiled(b, self._held_rows(b))
                if reason is not None:
                    raise ValueError(f"GAUSSDP_BOUNDING=compiled: not for {reason}")
        return counts

    def _held_rows(self, b: Bounding) -> int:
        """The rows the compiled path would hold for ``b``: those its keys' table counted
        as kept (:meth:`validate`), else every row with a unit."""
        known = self._keys.get(_keys_key(b))
        return known[1] if known is not None else self._rows.get(b.source, 0)

    def _not_compiled(self, b: Bounding, rows: int) -> str | None:
        """Why ``b`` cannot take the compiled path here with ``rows`` rows held, or
        ``None``."""
        module = _compiled_module()
        if module is None:
            return "numba is not installed or does not load here"
        try:
            import pyarrow  # noqa: F401  (the stream's record batches)
        except ImportError:  # pragma: no cover - pyarrow comes with the extras numba does
            return "pyarrow is not installed"
        if not self._owned:
            return "a caller's connection (its settings, collations)"
        if not b.keys or b.histogram is not None:
            return "a grouping without keys or with histogram bins"
        if b.l0 > _COMPILED_MAX_L0:
            return f"max_groups_per_unit above {_COMPILED_MAX_L0}"
        if not all(isinstance(v, ScalarValue) for v in b.values):
            return "a vector sum"
        if any(o.kind not in module.KINDS for o in b.outputs):
            return "an output other than counts, sums, sums of squares and units"
        if self._memory is None:
            return "an unknown memory limit"
        if rows * module.row_bytes(len(b.values)) > self._memory:
            return "a table whose rows would pass the memory limit"
        columns = ", ".join(("pu", *b.keys))
        unit, *keys = (str(t) for t in self._con.sql(f"SELECT {columns} FROM {b.source}").types)
        if unit not in _COMPILED_UNITS:
            return f"a privacy unit of type {unit}"
        if any(k not in _COMPILED_KEYS for k in keys):
            return f"group keys of types {keys}"
        if not module.hash_agrees(self._con, unit):
            return f"this DuckDB's cell hash (version {self._duckdb.__version__})"
        return None

    def _compiled(self, b: Bounding, action: str) -> list[np.ndarray[Any, Any]] | None:
        """``b``'s result by ``gaussdp.release._compiled``, or ``None`` for the SQL."""
        mode = bounding_mode()
        if mode == "sql":
            return None
        rows = self._held_rows(b)
        reason = self._not_compiled(b, rows)
        if reason is not None:
            if mode == "compiled":  # pragma: no cover - validate() refused it
                raise RuntimeError(f"GAUSSDP_BOUNDING=compiled: not for {reason}")
            return None
        assert self._memory is not None
        known = self._keys.get(_keys_key(b))
        codes = f"gdp_codes_{uuid.uuid4().hex}"
        keys = ", ".join(b.keys)
        with self.failures(action), self._watch(), self._nan_exact():
            if known is None:  # a second grouping's keys: read them now
                name = f"gdp_keys_{uuid.uuid4().hex}"
                self._con.execute(f"CREATE TEMP TABLE {name} AS {keys_sql(b)}")
                ((kept,),) = self._con.execute(f"SELECT SUM(kept) FROM {name}").fetchall()
                known = self._keys[_keys_key(b)] = (name, int(kept or 0))
                rows = known[1]
            self._con.execute(f"CREATE TEMP TABLE {codes} AS {codes_sql(b, known[0])}")
            try:
                ((groups,),) = self._con.execute(f"SELECT COUNT(*) FROM {codes}").fetchall()
                ((listed, salt),) = self._con.execute(key_hashes_sql(b, codes)).fetchall()
                key_hashes = np.array(listed or [], np.uint64).reshape(int(groups), len(b.keys))
                unit_type = str(self._con.sql(f"SELECT pu FROM {b.source}").types[0])
                hashes = (key_hashes, int(salt), unit_type in _compiled_module().NARROW_UNITS)
                reader = self._con.sql(stream_sql(b, codes)).to_arrow_reader(_BATCH_ROWS)
                # DuckDB's errors while the batches are read come through Arrow (an
                # OSError quoting the value): scrubbed to one line like DuckDB's own
                import pyarrow as pa

                with _Failures(self.name, action, (OSError, pa.ArrowException)):
                    try:
                        result = _compiled_module().bound(
                            reader, b, int(groups), self._memory, rows, hashes
                        )
                    except MemoryError:  # the SQL (which can spill) takes it, or refuses
                        result = None
                    finally:
                        reader.close()
                if result is not None:
                    table = self._con.sql(f"SELECT {keys} FROM {codes} ORDER BY kc")
                    key_table = table.to_arrow_table()
            finally:
                self._con.execute(f"DROP TABLE IF EXISTS {codes}")
        if result is None:
            if mode == "compiled":  # after the reservation: the SQL, never a failure
                warnings.warn(
                    "GAUSSDP_BOUNDING=compiled: the compiled path could not bound a "
                    "grouping (memory past the limit or not mapped, more rows than "
                    "counted, or a sum past int64); the SQL path bounds it, with the "
                    "same result",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return None
        units, totals = result
        kept_groups = np.flatnonzero(units > 0)
        key_table = key_table.take(kept_groups)
        try:
            out = [_from_arrow(key_table.column(i)) for i in range(key_table.num_columns)]
        except (OverflowError, ValueError):  # as in columns(): values beyond Python's range
            return None
        out.append(units[kept_groups])
        out += [np.ascontiguousarray(totals[kept_groups, j]) for j in range(totals.shape[1])]
        return out

    @contextlib.contextmanager
    def _nan_exact(self) -> Iterator[None]:
        """Run a query with DuckDB's statistics propagation off (:data:`_NO_STATISTICS`).

        gaussdp's own connection has it off from the start. On a caller's connection
        ``disabled_optimizers`` is a global setting (DuckDB 2.0 refuses to set it for
        one connection: "cannot be set locally"), so it is off for the whole database
        while the query runs — other connections' queries then run without that
        optimizer, with the same results — and set back to its exact prior text after,
        however the query ends. Both statements run on a cursor of gaussdp's own (its own
        transaction: in a caller's transaction that a failed query has aborted, DuckDB
        runs no statement, and the setting stayed changed). One lock for the process:
        two gaussdp queries on connections to one database never overlap, so neither
        sets the value back while the other runs.
        """
        if self._owned:
            yield
            return
        with _CALLERS_SETTINGS:
            settings = self._settings
            ((before,),) = settings.execute(
                "SELECT current_setting('disabled_optimizers')"
            ).fetchall()
            names = [n.strip().lower() for n in str(before).split(",")]
            if _NO_STATISTICS in names:
                yield
                return
            off = ",".join(
                [str(before), _NO_STATISTICS] if str(before).strip() else [_NO_STATISTICS]
            )
            try:
                settings.execute(f"SET disabled_optimizers = {_sql_text(off)}")
                yield
            finally:
                settings.execute(f"SET disabled_optimizers = {_sql_text(str(before))}")

    @contextlib.contextmanager
    def _watch(self) -> Iterator[None]:
        """Report DuckDB's progress estimate to :attr:`on_progress` while a query runs."""
        report = self.on_progress
        if report is None:
            yield
            return
        if self._owned:  # never change the settings of a caller's connection
            self._con.execute("SET enable_progress_bar = true")
            self._con.execute("SET enable_progress_bar_print = false")
        done = threading.Event()

        def poll() -> None:
            while not done.wait(0.2):
                try:
                    percent = self._con.query_progress()
                    if percent >= 0:
                        report(min(percent, 100.0) / 100.0)
                except Exception:  # a display only: a failing callback must not touch the run
                    return

        watcher = threading.Thread(target=poll, name="gaussdp-progress", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            done.set()
            watcher.join()

    def close(self) -> None:
        if self._owned:
            self._con.close()
        else:  # the caller's connection: remove only what gaussdp created
            for view in self._views:
                with contextlib.suppress(self._duckdb.Error):
                    self._con.execute(f"DROP VIEW IF EXISTS {view}")
            if self._settings is not None:
                self._settings.close()
        self._views.clear()
        self._remove_tmp()

    def _remove_tmp(self) -> None:
        if self._sunk is not None:
            shutil.rmtree(self._sunk, ignore_errors=True)
            self._sunk = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def _spark_parquet(reader: Any, files: list[str]) -> tuple[Any, frozenset[str]]:
    """Parquet ``files`` as one Spark DataFrame, read as DuckDB reads them (parquet_layout):
    by name, a missing column NULL, a mixed column text."""
    from pyspark.sql import functions as F  # noqa: N812 - PySpark's idiom

    layout = parquet_layout(files)
    names, mixed = layout.names, layout.mixed
    if len(files) == 1:
        return reader.parquet(*files), mixed

    def read(column: str, kind: str) -> Any:
        # A float32 column is widened in its own file first (parquet_layout): Spark's
        # union would turn other files' integers into float32, and its text is float32's;
        # a mixed one is written as one text per value (number_text), whatever its type.
        quoted = "`" + column.replace("`", "``") + "`"
        if column in mixed:
            return F.expr(number_text(quoted, kind)).alias(column)
        expr = F.col(quoted)
        return (expr.cast("double") if kind == "float" else expr).alias(column)

    frames = []
    for f in files:
        frame = reader.parquet(f)
        frames.append(frame.select(*(read(c, t) for c, t in frame.dtypes)))
    union = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
    return union.select(*(F.col("`" + c.replace("`", "``") + "`") for c in names)), mixed


class SparkEngine(Engine):
    """PySpark: a Spark DataFrame, a table name, a CSV/Parquet path, or a local frame."""

    name = "spark"

    def __init__(self, source: object) -> None:
        try:
            from pyspark.sql import DataFrame, SparkSession
        except ImportError as error:
            raise MissingExtraError("the Spark engine", "spark") from error
        spark = SparkSession.getActiveSession() or _new_session(SparkSession)
        self._spark = spark
        self._declared = {}
        if isinstance(source, DataFrame):
            self._df = source
        elif isinstance(source, str | os.PathLike):
            text = os.fspath(source)
            if Path(text).exists() or is_glob(text):
                kind, files = _files(source)
                reader = spark.read
                self.several_files = not Path(text).is_file()
                with self.failures(f"opening {_shown(source, files)}"):
                    if not files:  # no file adds rows: an empty table of no columns
                        self._df = spark.range(0)
                        self._no_columns = True
                    elif kind == "parquet":
                        self._df, self.mixed_columns = _spark_parquet(reader, files)
                    else:
                        self._df = _spark_csv_text(spark, files)
                        self.text_columns = True
            elif isinstance(source, str) and _spark_table_exists(spark, source):
                self._df = spark.table(source)
            else:
                raise FileNotFoundError(
                    invalid("data", "an existing file or Spark table", str(source))
                )
        elif _module(source) in ("pandas", "polars", "pyarrow"):
            frame, self.mixed_columns = _object_columns_as_text(_to_pandas(source))
            self.object_columns = self.mixed_columns
            self._df = spark.createDataFrame(frame)
        else:
            raise TypeError(
                invalid(
                    "source",
                    "a Spark DataFrame, a table name, a CSV/Parquet path or a local frame",
                    type(source).__name__,
                )
            )
        self._views: list[str] = []

    def _schema(self) -> dict[str, str]:
        return dict(self._df.dtypes)

    def _errors(self) -> tuple[type[BaseException], ...]:
        import duckdb
        from py4j.protocol import Py4JError  # type: ignore[import-untyped]
        from pyspark.errors import PySparkException

        # DuckDB's: Parquet files' footers are read by it (parquet_layout).
        return (PySparkException, Py4JError, duckdb.Error)

    def declare(self, types: Mapping[str, str]) -> None:
        self._declared = {c: DECLARABLE[t] for c, t in types.items()}

    def _type_name(self, kind: str) -> str:
        return DECLARABLE[kind]

    def is_numeric(self, column: str) -> bool:
        kind = self.schema[column]
        return kind in _SPARK_NUMERIC or kind.startswith("decimal")

    def register(self, columns: dict[str, str]) -> str:
        from pyspark.sql import functions as F  # noqa: N812 - PySpark's idiom

        view = f"gdp_src_{uuid.uuid4().hex}"
        selected = []

        def column(user: str) -> Any:
            return F.col("`" + user.replace("`", "``") + "`")

        for internal, user in columns.items():
            if user in self._absent:  # NULL, of its declared or implied type: nothing to read
                selected.append(F.lit(None).cast(self._absent[user]).alias(internal))
                continue
            expr = column(user)
            kind = self._declared.get(user)
            text_read = self.text_columns or user in self.mixed_columns
            if user in self.mixed_columns and _fractional(self._schema().get(user, "")):
                # Read as text: one text per value, as when another file has it as text
                quoted = "`" + user.replace("`", "``") + "`"
                expr = F.expr(number_text(quoted, self._schema()[user]))
            integers = self._schema().get(user) in _SPARK_NUMERIC - {"float", "double"}
            if user in self.mixed_columns and (kind or "").upper() == "BIGINT" and integers:
                # An integer's digits read back by the rule: the integer (or NULL beyond BIGINT)
                expr = expr.try_cast("bigint")
            elif kind is not None and text_read and kind.upper() in _RULED:
                if user in self.mixed_columns:  # text, or of a type that is not the spec's
                    expr = expr.cast("string")
                expr = _spark_by_rule(expr, kind.upper())
            elif kind is not None:
                expr = expr.try_cast(kind)
            selected.append(expr.alias(internal))
        with self.failures("preparing the data"):
            self._df.select(*selected).createOrReplaceTempView(view)
        self._views.append(view)
        return view

    def query(
        self, sql: str, *, action: str = "running the release query"
    ) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self._collect(sql, action)[0]]

    def columns(
        self,
        sql: str,
        *,
        action: str = "running the release query",
        bounding: Bounding | None = None,
    ) -> list[np.ndarray[Any, Any]]:
        rows, width = self._collect(sql, action)
        return _columns_of(rows, width)

    def _collect(self, sql: str, action: str) -> tuple[list[Any], int]:
        """The result's rows (collected to the driver: the small per-group result) and width."""
        # ANSI mode: an integer overflow in the bounding raises instead of wrapping.
        settings = {"spark.sql.ansi.enabled": "true"}
        conf = self._spark.conf
        before = {key: conf.get(key, None) for key in settings}
        for key, value in settings.items():
            conf.set(key, value)
        try:
            with self.failures(action):
                frame = self._spark.sql(sql)
                return frame.collect(), len(frame.columns)
        finally:
            for key, old in before.items():
                if old is None:
                    conf.unset(key)
                else:
                    conf.set(key, old)

    def close(self) -> None:
        for view in self._views:
            self._spark.catalog.dropTempView(view)
        self._views.clear()


#: Spark's own log lines off, errors too: a failed read's ERROR lines and Java stack
#: trace (43 lines for a truncated .csv.gz) came before gaussdp's one line, and a
#: failed cast's quote the value that gaussdp's message withholds. The root logger
#: stays at WARN, the level Spark gives an interactive (PySpark) driver: at another
#: level Spark prints "Setting default log level to ..." itself; the appender's
#: threshold drops every line instead.
_QUIET_LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = off
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
"""


def _new_session(session: Any) -> Any:
    """The Spark session gaussdp starts when none is active (``session`` is ``SparkSession``).

    Unless the ``gaussdp`` logger shows INFO (the CLI's ``--verbose``), Spark's
    own log lines (its log4j warnings and errors, from the JVM's start on:
    :data:`_QUIET_LOG4J`) and its console progress bars are off; gaussdp's
    :class:`EngineError` says what failed. A session the caller made is used as is.
    """
    builder = session.builder
    if logging.getLogger("gaussdp").isEnabledFor(logging.INFO):
        return builder.getOrCreate()
    # log4j reads its configuration when the JVM starts, within getOrCreate.
    handle, config = tempfile.mkstemp(prefix="gaussdp-log4j2-", suffix=".properties")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(_QUIET_LOG4J)
        spark = (
            builder.config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{config}")
            .getOrCreate()
        )
    finally:
        os.unlink(config)
    spark.sparkContext.setLogLevel("OFF")
    return spark


def _object_columns_as_text(frame: Any) -> tuple[Any, frozenset[str]]:
    """A pandas frame with its ``object`` columns as text, and their names.

    The ``object`` dtype says nothing of what a column holds, and DuckDB and Spark infer
    its type from the values: one row could turn a summed column into VARCHAR and refuse
    the release, or a column of ``None`` pass every check. These columns are read as
    text, value by value (:func:`gaussdp.release.values.value_text`: ``7`` and ``7.0`` one
    text, a value with none NULL, never an error): the unit and keys as a CSV's are, and
    a summed one is refused by its schema unless ``column_types`` declares a type, then
    converted value by value (docs/release.md).

    A ``category`` column is read as its categories' values (DuckDB would read it as an
    ``ENUM`` whose type names every category): numbers, booleans, dates and timestamps
    as a column of their own dtype (integers and booleans nullable, so a missing value
    does not change the column's type), any other (strings, ``pandas.cut``'s intervals)
    as an ``object`` column (text).
    """
    import pandas as pd

    changed: dict[Any, Any] = {}
    objects = []
    for column, kind in frame.dtypes.items():
        if isinstance(kind, pd.CategoricalDtype):
            values = frame[column]
            inner = kind.categories.dtype
            if not isinstance(inner, np.dtype) or inner.kind not in "iufbmM":
                changed[column] = column_text(values.astype(object))
                objects.append(column)
            else:
                changed[column] = values.astype(_nullable(inner))
        elif kind == np.dtype(object):
            changed[column] = column_text(frame[column])
            objects.append(column)
    if not changed:
        return frame, frozenset()
    out = frame.copy(deep=False)
    for column, values in changed.items():
        out[column] = values
    return out, frozenset(map(str, objects))


def _nullable(kind: Any) -> Any:
    """The pandas dtype that holds ``kind``'s values and a missing value (``Int64`` for
    ``int64``, ``boolean`` for ``bool``; others as they are)."""
    if kind.kind == "b":
        return "boolean"
    if kind.kind in "iu":
        return ("UInt" if kind.kind == "u" else "Int") + str(8 * kind.itemsize)
    return kind


def _to_pandas(source: Any) -> Any:
    """A local frame for Spark: pandas as is; polars (lazy) and Arrow tables/datasets converted."""
    if _module(source) == "pandas":
        return source
    if hasattr(source, "collect") and _module(source) == "polars":  # a LazyFrame
        source = source.collect()
    if hasattr(source, "to_table"):  # an Arrow dataset
        source = source.to_table()
    return source.to_pandas()


def _spark_table_exists(spark: Any, name: str) -> bool:
    try:
        return bool(spark.catalog.tableExists(name))
    except Exception:  # e.g. a path that is not a valid identifier
        return False


def open_engine(engine: str, source: object, **options: Any) -> Engine:
    """Open ``source`` on ``engine`` (``'duckdb'`` or ``'spark'``); ``options`` are DuckDB's
    ``memory_limit``, ``temp_directory`` and ``threads`` (``None`` values are ignored)."""
    options = {k: v for k, v in options.items() if v is not None}
    if engine == "duckdb":
        return DuckDBEngine(source, **options)
    if options:
        raise ValueError(
            invalid(
                "engine options",
                "given only for engine 'duckdb' (configure Spark through its session)",
                sorted(options),
            )
        )
    if engine == "spark":
        return SparkEngine(source)
    raise ValueError(invalid("engine", "'duckdb' or 'spark'", engine))
