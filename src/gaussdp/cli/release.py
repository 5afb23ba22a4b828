"""``gaussdp release`` (the main job) and ``gaussdp ledger init|show``."""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gaussdp.cli._output import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    CliError,
    ceil_text,
    console,
    error_console,
    fail,
    floor_text,
    format_value,
    handle_errors,
    is_interrupt,
    is_quiet,
    json_number,
)
from gaussdp.errors import invalid

if TYPE_CHECKING:
    from rich.table import Table

    from gaussdp.release import Ledger, ReleaseResult
    from gaussdp.release.core import RunProgress
    from gaussdp.release.ledger import LedgerSummary

__all__ = ["register"]

log = logging.getLogger(__name__)

JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON object instead of tables.")
]
OUTPUT_FORMATS = {".csv": "csv", ".parquet": "parquet", ".json": "json"}
RELEASE_OOM_HINT = (
    "the engine or the per-group result did not fit; release fewer groups (public keys, "
    "a smaller max_groups_per_unit) or run on Spark (--engine spark)"
)


def open_ledger(path: Path) -> Ledger:
    """The existing ledger at ``path``; if there is none, say how to create one here.

    :class:`~gaussdp.release.Ledger`'s own message advises ``total=``, which is the
    Python API; on the command line the way is ``gaussdp ledger init``.
    """
    from gaussdp.release import Ledger

    if not path.exists():
        fail(
            invalid(
                "ledger",
                "an existing ledger file (create one with `gaussdp ledger init PATH "
                "--epsilon E --delta D`)",
                str(path),
            )
        )
    return Ledger(path)


def check_writable(path: Path, option: str) -> None:
    """Check that ``path`` (the value of ``option``) can be written; before any spend.

    Raises :class:`CliError` (exit status 2) for a path that is a folder, in a
    missing folder, or not writable.
    """
    if path.is_dir():
        fail(f"{option} must be a file path, got {str(path)!r} (a folder)")
    folder = path.parent
    if not folder.is_dir():
        fail(
            f"{option} must be in an existing folder, got {str(path)!r} "
            f"({str(folder)!r} is missing)"
        )
    try:
        if path.exists():
            with path.open("ab"):
                pass
        else:
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".gaussdp-check-"):
                pass
    except OSError as error:
        fail(write_failure(option, path, error))


def write_failure(option: str, path: Path, error: OSError) -> str:
    """The one line for a write to ``path`` (the value of ``option``) that failed."""
    reason = error.strerror or type(error).__name__
    return f"{option} must be writable, got {str(path)!r} ({reason})"


def _same_file(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)  # hard links, case-insensitive file systems
    except OSError:  # one of them does not exist yet
        return False


def _glob_takes(pattern: str, path: Path) -> bool:
    """Whether the glob ``pattern`` (``**`` recursive, as the engines read it) matches
    ``path``, compared as absolute paths part by part; ``*`` matching dotfiles too (the
    engines' glob does not: a wider match only refuses more)."""
    want = Path(os.path.abspath(pattern)).parts
    have = Path(os.path.abspath(path)).parts

    def match(i: int, j: int) -> bool:
        if i == len(want):
            return j == len(have)
        if want[i] == "**":
            return match(i + 1, j) or (j < len(have) and match(i, j + 1))
        return j < len(have) and fnmatch.fnmatchcase(have[j], want[i]) and match(i + 1, j + 1)

    return match(0, 0)


def _local_data(data: str) -> str | None:
    """``--data`` as a local path: a ``file://`` URI's path; ``None`` for another URI
    (``hdfs://``, ``s3a://``, …), which names no file on this machine — and which the
    engines refuse anyway (they read local files, directories, globs or Spark tables)."""
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", data)
    if scheme is None:
        return data
    if scheme.group(1).lower() != "file":
        return None
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    return url2pathname(urlparse(data).path)


def _data_takes(data: str, path: Path) -> str | None:
    """How ``--data`` would read the output ``path``: ``'is'`` if it is one of the files
    it names now (:func:`~gaussdp.release.engines.data_files`), ``'would'`` if the glob
    or the folder would take it as data once written, else ``None``."""
    from gaussdp.release.engines import DATA_SUFFIXES, data_files, is_glob

    local = _local_data(data)
    if local is None:
        return None
    if any(_same_file(path, named) for named in data_files(local)) or _same_file(path, Path(local)):
        return "is"
    # The output as named (its folder resolved: the file may be a symlink, even a
    # dangling one, that the engines would read) and as resolved.
    named = path.absolute().parent.resolve() / path.name
    if is_glob(local):
        patterns = (local, _resolved_prefix(local))
        if any(_glob_takes(p, q) for p in patterns for q in (path, named, path.resolve())):
            return "would"
    folder = Path(local)
    if folder.is_dir() and any(q.is_relative_to(folder.resolve()) for q in (named, path.resolve())):
        return "would" if path.name.lower().endswith(DATA_SUFFIXES) else None
    return None


def _resolved_prefix(pattern: str) -> str:
    """``pattern`` with its literal folder part resolved (symlinks, then ``..``), as the
    engines' glob walks it: ``link/*.csv`` reads the files of ``link``'s target."""
    parts = Path(pattern).parts
    literal = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    if literal == 0:
        return pattern
    return str(Path(*parts[:literal]).resolve().joinpath(*parts[literal:]))


def check_distinct(outputs: dict[str, Path | None], inputs: dict[str, Path | str | None]) -> None:
    """Refuse an output file that is an input file or another output; before any spend.

    ``outputs`` and ``inputs`` map an option (``"--report"``, ``"--ledger"``) to its
    path (``None``: not given; ``"-"``: standard input). Writing the report over the
    ledger would erase its history (a re-initialised ledger has its whole budget back);
    ``--out`` and ``--report`` on one file would lose the paid results. ``--data`` is
    read as the engines read it: a glob or a folder names every file it matches (an
    output among them would overwrite the data; one it would match once written would
    be read as data by the next run: both refused); a ``file://`` URI is its path; any
    other URI names no local file, so no output can be it. Raises :class:`CliError`
    (exit status 2).
    """
    given = [(option, path) for option, path in outputs.items() if path is not None]
    others = [
        (o, Path(p)) for o, p in inputs.items() if p is not None and p != "-" and o != "--data"
    ]
    data = inputs.get("--data")
    for i, (option, path) in enumerate(given):
        for other, other_path in given[:i] + others:
            if _same_file(path, other_path):
                fail(invalid(option, f"a different file from {other}", str(path)))
        takes = None if data is None or data == "-" else _data_takes(str(data), path)
        if takes == "is":
            fail(invalid(option, "a different file from --data", str(path)))
        if takes == "would":
            fail(
                invalid(
                    option,
                    "a file outside what --data matches (the next run would read it as data)",
                    str(path),
                )
            )


def check_output(out: Path) -> str:
    """The format of ``out`` (by suffix), after checking it can be written; before any spend.

    Raises :class:`CliError` (exit status 2) for an unknown suffix, a missing or
    read-only folder, or a path that is a folder.
    """
    if out.is_dir():
        fail(f"--out must be a file path, got {str(out)!r} (a folder)")
    fmt = OUTPUT_FORMATS.get(out.suffix.lower())
    if fmt is None:
        fail(f"--out must end in .csv, .parquet or .json, got {str(out)!r}")
    check_writable(out, "--out")
    return fmt


def _payload(result: ReleaseResult) -> dict[str, Any]:
    return {
        # ISO dates (pandas writes epoch milliseconds by default).
        "results": json.loads(result.frame.to_json(orient="records", date_format="iso")),
        "report": result.report.to_dict(),
    }


def write_output(result: ReleaseResult, out: Path, fmt: str) -> None:
    """Write the results table to ``out`` as CSV, Parquet or JSON (results and report)."""
    if fmt == "csv":
        result.frame.to_csv(out, index=False)
    elif fmt == "parquet":
        # DuckDB (a core dependency) writes Parquet itself: the base install needs no pyarrow.
        import duckdb

        with duckdb.connect() as con:
            con.from_df(result.frame).write_parquet(str(out))
    else:
        out.write_text(json.dumps(_payload(result), indent=2, default=str), encoding="utf-8")


def write_recovery(result: ReleaseResult) -> Path | None:
    """Save results and report to a new JSON file in the working or temporary folder."""
    return save_recovery(json.dumps(_payload(result), indent=2, default=str), ".json")


def save_recovery(text: str, suffix: str) -> Path | None:
    """Save ``text`` to a new file ``gaussdp-recovered-…{suffix}`` in the working or temporary
    folder; None if neither can take it."""
    name = f"gaussdp-recovered-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}{suffix}"
    for folder in (Path.cwd(), Path(tempfile.gettempdir())):
        path = folder / name
        try:
            with path.open("x", encoding="utf-8") as handle:
                handle.write(text)
        except OSError:
            continue
        return path
    return None


def _report_failure(
    result: ReleaseResult, report: Path, error: OSError, ledger: Path | None, out: Path | None
) -> CliError:
    """Exit status 4 for a report that could not be written after the release (spend made)."""
    if out is not None:
        saved = f"the results are in {out}"
    else:
        recovered = write_recovery(result)
        saved = (
            f"the results are saved in {recovered}"
            if recovered is not None
            else "no recovery file could be written either; the results are printed above"
        )
    return late_write_error(report, error, ledger, saved)


def late_write_error(path: Path, error: OSError, ledger: Path | None, saved: str) -> CliError:
    """Exit status 4 for ``path`` not written after the spend; ``saved`` tells where the
    results are instead."""
    spent = "the spend is committed in the ledger; " if ledger is not None else ""
    reason = error.strerror or type(error).__name__
    return CliError(f"could not write {path} ({reason}); {spent}{saved}", EXIT_FAILURE)


def _interrupt_message(ledger: Path | None, label: str) -> str:
    if ledger is None:
        return "nothing released"
    from gaussdp.release import Ledger

    try:
        pending = [
            e for e in Ledger(ledger).entries() if e.status == "reserved" and e.label == label
        ]
    except Exception:
        return (
            f"nothing released; a reservation already made stays counted in {ledger} "
            f"(gaussdp ledger show {ledger})"
        )
    if not pending:
        return f"nothing released and nothing reserved in {ledger}"
    return (
        f"nothing released; the reservation stays counted in {ledger} "
        f"(entry {pending[-1].id}; gaussdp ledger show {ledger})"
    )


NUMERIC_COLUMNS = ("value", "std", "ci_low", "ci_high")
#: Rows of the results printed by default (``--show head``); ``--show all`` prints every row.
HEAD_ROWS = 15


#: The narrowest a column of text is folded to while a wider layout could hold it (a
#: 20-column screen folded the ledger's text column to one character a line).
MIN_FOLD = 12


def fit_table(
    title: str,
    header: list[tuple[str, bool]],
    rows: list[list[str]],
    width: int,
    *,
    separator: str = " · ",
) -> Table:
    """A table of ``rows`` (cells as text) that fits ``width`` columns without cutting a value.

    ``header`` gives each column's name and whether it holds numbers. The first
    layout whose minimum width fits is used: one column per field; then the text
    fields stacked as ``name: value`` lines in one column; then also the numbers
    as ``name=value`` items in one column, wrapped between items; then every field
    as a ``name: value`` line of one column (a narrow screen). Numbers are never
    wrapped inside, and text is folded only where a single word is wider than the
    whole column. Where no layout fits whole (a word wider than the screen, or a
    screen narrower than the widest number), the first one that fits with its text
    folded at :data:`MIN_FOLD` characters is used (else the last): each number keeps
    its width, the text columns share the rest, and a word that does not fit continues
    on the next lines, whole. Stacked text fields are joined by ``separator``.
    """
    text = [i for i, (_, numeric) in enumerate(header) if not numeric]
    numbers = [i for i, (_, numeric) in enumerate(header) if numeric]
    layouts = [
        _layout(title, header, rows, text, numbers, stack, separator)
        for stack in ("none", "text", "all", "lines")
    ]
    for table, _ in layouts:
        needed = 1 + sum((c.min_width or 1) + 3 for c in table.columns)
        if needed <= width:
            # Each wrapping column may grow to its least width plus an equal share of what
            # is left, so the columns add up to at most `width` (rich never cuts a cell).
            flexible = [c for c in table.columns if not c.no_wrap]
            share = (width - needed) // max(1, len(flexible))
            for column in flexible:
                column.max_width = (column.min_width or 1) + share
            return table
    table, floors = next(
        ((table, floors) for table, floors in layouts if 1 + sum(f + 3 for f in floors) <= width),
        layouts[-1],
    )
    # From the narrowest column on, each keeps its least width while the others can
    # still have their floors; a text column gets the rest (at least its floor where the
    # screen allows) and folds a longer word onto the next lines, whole (rich would
    # otherwise cut the table, and its caption, at the screen's edge).
    left = width - 1 - 3 * len(table.columns)
    order = sorted(range(len(floors)), key=lambda j: table.columns[j].min_width or 1)
    for k, j in enumerate(order):
        column = table.columns[j]
        reserve = sum(floors[i] for i in order[k + 1 :])
        fit = max(1, min(column.min_width or 1, left - reserve))
        column.min_width = column.max_width = fit
        left -= fit
    return table


def _longest_word(cells: list[str]) -> int:
    return max((len(word) for cell in cells for word in cell.split()), default=1)


def _layout(
    title: str,
    header: list[tuple[str, bool]],
    rows: list[list[str]],
    text: list[int],
    numbers: list[int],
    stack: str,
    separator: str = " · ",
) -> tuple[Table, list[int]]:
    """The table for one layout (``stack``: ``"none"``, ``"text"``, ``"all"`` or
    ``"lines"``, :func:`fit_table`) and each column's floor: the width below which a
    number in it would be wrapped (for a column of text alone, :data:`MIN_FOLD` or its
    longest word if less). Each column's ``min_width`` is its longest word."""
    from rich.table import Table

    # A rule between rows where each row is a block of lines (one field a line).
    table = Table(title=title, show_header=True, header_style="bold", show_lines=stack == "lines")
    # Each column: its header, whether it holds one number a row (no_wrap), the text
    # of its cells and the numbers' words in it.
    columns: list[tuple[str, bool, list[str], list[str]]] = []

    def stacked(fields: list[int], sign: str, join: str) -> tuple[str, bool, list[str], list[str]]:
        cells = [
            join.join(f"{header[i][0]}{sign}{row[i]}" for i in fields if row[i]) for row in rows
        ]
        words = [row[i] for row in rows for i in fields if i in numbers and row[i]]
        if sign == "=":  # name=value is one word
            words = [
                f"{header[i][0].split()[-1]}={row[i]}" for row in rows for i in fields if row[i]
            ]
        return " · ".join(header[i][0] for i in fields), False, cells, words

    if stack == "lines":
        columns.append(stacked(list(range(len(header))), ": ", "\n"))
    else:
        if stack == "none":
            columns += [(header[i][0], False, [row[i] for row in rows], []) for i in text]
        else:
            columns.append(stacked(text, ": ", separator))
        if stack == "all":
            columns.append(stacked(numbers, "=", "  "))
            columns[-1] = ("values", *columns[-1][1:])
        else:
            columns += [(header[i][0], True, [row[i] for row in rows], []) for i in numbers]
    floors = []
    for name, alone, cells, words in columns:
        if alone:
            table.add_column(name, justify="right", no_wrap=True)
        else:
            table.add_column(name, overflow="fold")
        least = _longest_word([name, *cells])
        table.columns[-1].min_width = least
        floors.append(least if alone else max(min(least, MIN_FOLD), _longest_word(words)))
    for j in range(len(rows)):
        table.add_row(*(cells[j] for _, _, cells, _ in columns))
    return table, floors


def _report_table(report: dict[str, Any], width: int) -> Table:
    from gaussdp.budget import Budget

    names = ("query", "by", "part", "sensitivity", "γ", "σ", "μ", "ρ", "δ", "τ")
    header = [(name, name not in ("query", "by", "part")) for name in names]
    rows = [
        [
            c["query"],
            ", ".join(c["by"]) or "—",
            c["part"],
            format_value(c["sensitivity"]),
            format_value(c["gamma"]),
            format_value(c["sigma"]),
            format_value(c["mu"]),
            format_value(c["rho"]),
            format_value(c["delta"]) if c["delta"] else "—",
            format_value(c["threshold"]),
        ]
        for c in report["costs"]
    ]
    table = fit_table("privacy report", header, rows, width)
    eps = report["epsilon"]
    if report["mode"] == "gdp":
        totals = (
            f"accounted in μ: total μ = {ceil_text(report['mu'])} "
            f"(slack A = {ceil_text(report['slack'], 3)}; "
            f"ρ = {ceil_text(report['rho'])} for information); "
        )
    elif report["mode"] == "pld":
        totals = (
            "accounted by PLDs (exact for count-like parts; "
            f"slack A = {ceil_text(report['slack'], 3)}; "
            f"ρ = {ceil_text(report['rho'])} for information); "
        )
    else:
        mu = report["mu"]
        totals = f"accounted in ρ: total ρ = {ceil_text(report['rho'])}" + (
            "; " if mu is None else f" (μ = {ceil_text(mu)} for information); "
        )
    table.caption = (
        totals
        + f"selection δ = {ceil_text(report['selection_delta'], 3)}; "
        + (
            f"ε = {ceil_text(eps)} at δ = {ceil_text(report['delta'], 3)}"
            if eps is not None
            else "no δ given"
        )
        + f"; budget {Budget(**report['budget'])}\n{report['accounting']}"
    )
    return table


def group_columns(frame: Any) -> list[str]:
    """The group columns of a results frame (the user's ``by`` names)."""
    return [c for c in frame.columns if c not in ("bin", "statistic", *NUMERIC_COLUMNS)]


def _frame_table(frame: Any, width: int, rows: int | None = None) -> Table:
    """The results (the first ``rows`` of them if given) as a table that fits ``width``."""
    shown = frame if rows is None else frame.head(rows)
    header = [(str(c), c in NUMERIC_COLUMNS) for c in frame.columns]
    names = [str(c) for c in frame.columns]
    cells = [
        [_cell(v, name) for v, name in zip(row, names, strict=True)]
        for row in shown.itertuples(index=False)
    ]
    return fit_table("release", header, cells, width)


def _cell(value: object, column: str) -> str:
    """A results value as shown: a float to 6 significant digits, ``value`` and ``std``
    rounded to nearest, the interval's ends outward (``ci_low`` down, ``ci_high`` up: the
    shown interval holds the released one); ``--out`` files hold every digit."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and column in ("ci_low", "ci_high"):
        return format_value(value, up=column == "ci_high")
    if isinstance(value, float):
        return f"{value:.6g}"
    return format_value(value)


def summary_lines(
    result: ReleaseResult, *, queries: int, engine: str, spent: str, left: str
) -> list[str]:
    """The short summary: queries, values and groups released, budget spent and left."""
    frame = result.frame
    keys = group_columns(frame)
    groups = len(frame[keys].dropna(how="all").drop_duplicates()) if keys else 0
    by = f" ({', '.join(keys)})" if keys else ""
    return [
        f"released {queries} quer{'y' if queries == 1 else 'ies'} on {engine}: "
        f"{len(frame)} values, {groups} groups{by}",
        f"budget: spent {spent}; left {left}",
    ]


def _budget_lines(release: Any, book: Any) -> tuple[str, str]:
    """(spent, left) in the budget's unit: the ledger's totals if one is used, else the
    release's in-memory filter."""
    from gaussdp.accounting.filter import budget_limit, left_text, spent

    if book is not None:
        summary = book.summary()
        unit = summary.symbol
        at = f" at δ = {ceil_text(summary.delta, 3)}" if summary.unit == "epsilon" else ""
        return (
            f"{unit} = {ceil_text(summary.spent)}{at} in all (ledger {book.path})",
            left_text(summary.total, summary.spent, summary.selection_delta, summary.note),
        )
    symbol, _ = budget_limit(release.budget)
    at = f" at δ = {ceil_text(release.budget.delta, 3)}" if symbol == "ε" else ""
    used = spent(release.budget, release.filter.accountant)
    left = left_text(release.budget, used.value, used.delta, used.note)
    return f"{symbol} = {ceil_text(used.value)}{at}", left


@contextlib.contextmanager
def stdin_csv() -> Iterator[Path]:
    """Standard input copied, in chunks, to ``stdin.csv`` in a private temporary folder
    (removed after).

    The release reads its input more than once (validation, then one pass per
    grouping), so a pipe is kept on disk, readable by this user only, for the run.
    The file's name is what an engine's error line shows (``opening stdin.csv``);
    empty input is refused here, naming standard input.
    """
    folder = Path(tempfile.mkdtemp(prefix="gaussdp-stdin-"))  # mode 0700
    path = folder / "stdin.csv"
    try:
        with path.open("wb") as handle:
            shutil.copyfileobj(sys.stdin.buffer, handle, 2**20)
        if path.stat().st_size == 0:
            fail(invalid("standard input (--data -)", "a CSV with at least its header line", ""))
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _describe(step: RunProgress, engine: str) -> str:
    """One progress line: the stage, the pass, rows read (estimated) of the table's rows."""
    text = f"{step.stage} on {engine} (pass {step.step} of {step.passes})"
    if step.stage == "adding noise":
        return f"adding noise (after {step.passes} passes on {engine})"
    if step.rows is not None and step.done is not None:
        text += f": ~{round(step.done * step.rows):,} of {step.rows:,} rows read"
    elif step.rows is not None:
        text += f": {step.rows:,} rows"
    return text + "…"


@contextlib.contextmanager
def run_progress(engine: str, *, as_json: bool) -> Iterator[Callable[[RunProgress], None] | None]:
    """A transient progress line on a terminal's stderr — stage, rows read, elapsed time —
    fed by :meth:`Release.run`'s ``progress``; nothing (``None``) under ``--quiet``,
    ``--json`` or when stderr is not a terminal."""
    screen = error_console()
    if as_json or is_quiet() or not screen.is_terminal:
        yield None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=screen, transient=True) as bar:
        task = bar.add_task(f"opening the data on {engine}…", total=None)

        def update(step: RunProgress) -> None:
            bar.update(task, description=_describe(step, engine))

        yield update


@handle_errors(RELEASE_OOM_HINT)
def release_command(
    spec: Annotated[
        Path, typer.Argument(help="The TOML spec: privacy unit, budget, bounds, queries.")
    ],
    data: Annotated[
        str,
        typer.Option(
            "--data",
            help="CSV or Parquet file, directory or glob; - for CSV on standard input (or, "
            "with --engine spark, a table name).",
        ),
    ],
    engine: Annotated[
        str | None, typer.Option("--engine", help="duckdb (default) or spark; overrides the spec.")
    ] = None,
    ledger: Annotated[
        Path | None,
        typer.Option("--ledger", help="A budget ledger to spend from (gaussdp ledger init)."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Also write the results to this file: .csv, .parquet or .json (results and "
            "report). Checked before any budget is spent.",
        ),
    ] = None,
    report_file: Annotated[
        Path | None,
        typer.Option(
            "--report",
            help="Also write a self-contained HTML report to this file (checked before any "
            "budget is spent).",
        ),
    ] = None,
    show: Annotated[
        str,
        typer.Option(
            "--show",
            help=f"head (default): the first {HEAD_ROWS} results and how many more; all: every "
            "result. The full table goes to --out either way.",
        ),
    ] = "head",
    as_json: JsonOption = False,
) -> None:
    """Release private statistics from a table, as a TOML spec describes.

    Bounds each person's contribution inside the engine, adds exact discrete
    Gaussian noise, prints the values with their noise std and confidence
    intervals, and the privacy report. If the results cannot be written after
    the ledger committed the spend, they are saved to a recovery file that the
    error line names.

    Example: gaussdp release examples/visits.toml --data examples/visits.csv
    """
    if show not in ("head", "all"):
        fail(f"--show must be 'head' or 'all', got {show!r}")
    fmt = check_output(out) if out is not None else None
    if report_file is not None:
        check_writable(report_file, "--report")
    check_distinct(
        {"--out": out, "--report": report_file}, {"--ledger": ledger, "spec": spec, "--data": data}
    )
    from gaussdp.release import load_spec, release_from_spec

    parsed = load_spec(spec)
    if data == "-":  # checked before standard input is read
        chosen = engine or parsed.get("engine", "duckdb")
        if chosen not in ("duckdb", "spark"):
            fail(invalid("engine", "'duckdb' or 'spark'", chosen))
        if chosen != "duckdb":
            fail(invalid("--engine", "'duckdb' with --data - (CSV on standard input)", chosen))
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(stdin_csv()) if data == "-" else data
        release = release_from_spec(parsed, source, engine=engine)
        _release(release, spec, data, ledger, out, fmt, report_file, show, as_json)


def _release(
    release: Any,
    spec: Path,
    data: str,
    ledger: Path | None,
    out: Path | None,
    fmt: str | None,
    report_file: Path | None,
    show: str,
    as_json: bool,
) -> None:
    book = open_ledger(ledger) if ledger is not None else None
    label = f"{spec.name} on {'standard input' if data == '-' else data}"
    log.info("releasing %s on %s (ledger: %s)", spec, release.engine, ledger or "in memory")
    try:
        with run_progress(release.engine, as_json=as_json) as update:
            result = release.run(ledger=book, label=label, progress=update)
    except BaseException as error:
        if is_interrupt(error):
            message = _interrupt_message(ledger, label)
            raise CliError(message, EXIT_INTERRUPTED, prefix="interrupted;") from error
        raise
    failure: CliError | None = None
    try:
        if out is not None and fmt is not None:
            write_output(result, out, fmt)
            log.info("wrote %s (%s)", out, fmt)
    except BaseException as error:
        recovered = write_recovery(result)
        saved = (
            f"the results are saved in {recovered}"
            if recovered is not None
            else "no recovery file could be written either; the results follow on stdout"
        )
        spent = "the spend is committed in the ledger; " if ledger is not None else ""
        if is_interrupt(error):
            failure = CliError(
                f"after the release; {spent}{saved}", EXIT_INTERRUPTED, prefix="interrupted"
            )
        else:
            reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
            failure = CliError(f"could not write {out} ({reason}); {spent}{saved}", EXIT_FAILURE)
    if as_json:
        typer.echo(json.dumps(_payload(result), indent=2, default=str))
    else:
        screen = console()
        width = screen.width
        frame = result.frame
        head = None if show == "all" or len(frame) <= HEAD_ROWS + 5 else HEAD_ROWS
        screen.print(_frame_table(frame, width, head))
        if head is not None:
            where = f"all in {out}" if out is not None and failure is None else "--out FILE"
            screen.print(
                f"… {len(frame) - head} more rows (--show all prints them; {where})",
                highlight=False,
            )
        screen.print(_report_table(result.report.to_dict(), width))
        spent, left = _budget_lines(release, book)
        for line in summary_lines(
            result, queries=len(release.queries), engine=release.engine, spent=spent, left=left
        ):
            screen.print(line, highlight=False)
        if out is not None and failure is None and not is_quiet():
            typer.echo(f"results written to {out}", err=True)
    if report_file is not None:
        from gaussdp.audit.report import html_report

        page = html_report(result, ledger=book, privacy_unit=release.privacy_unit)
        try:
            report_file.write_text(page, encoding="utf-8")
        except OSError as error:  # checked before the spend; the disk may still fail
            if failure is None:
                failure = _report_failure(result, report_file, error, ledger, out)
    if failure is not None:
        raise failure


ledger_app = typer.Typer(
    help="A persistent privacy budget (SQLite) that cannot be overspent.", no_args_is_help=True
)


@ledger_app.command("init")
@handle_errors()
def ledger_init(
    path: Annotated[Path, typer.Argument(help="The ledger file to create.")],
    epsilon: Annotated[float | None, typer.Option("--epsilon", "-e", help="Total ε.")] = None,
    delta: Annotated[float | None, typer.Option("--delta", "-d", help="Total δ.")] = None,
    rho: Annotated[float | None, typer.Option("--rho", help="Total ρ (zCDP).")] = None,
    mu: Annotated[float | None, typer.Option("--mu", help="Total μ (GDP).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Create a ledger holding a total budget.

    Example: gaussdp ledger init budget.db --epsilon 3 --delta 1e-5
    """
    from gaussdp.budget import Budget
    from gaussdp.release import Ledger

    if path.exists():
        fail(f"ledger must be a new file, got {str(path)!r} (it exists)")
    book = Ledger(path, total=Budget(epsilon=epsilon, delta=delta, rho=rho, mu=mu))
    if as_json:
        typer.echo(json.dumps({"path": str(path), "total": book.total.as_dict()}, indent=2))
    else:
        typer.echo(f"created {path} holding {book.total}")


@ledger_app.command("show")
@handle_errors()
def ledger_show(
    path: Annotated[Path, typer.Argument(help="The ledger file.")],
    report_file: Annotated[
        Path | None,
        typer.Option("--report", help="Also write a self-contained HTML report to this file."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List what was spent, by whom, when, on what — and what remains.

    Example: gaussdp ledger show budget.db
    """

    if report_file is not None:
        check_distinct({"--report": report_file}, {"ledger": path})
        check_writable(report_file, "--report")
    book = open_ledger(path)
    summary = book.summary()
    if report_file is not None:
        from gaussdp.audit.report import html_report

        page = html_report(ledger=book)
        try:
            report_file.write_text(page, encoding="utf-8")
        except OSError as error:  # checked above; the disk may still fail
            fail(write_failure("--report", report_file, error))
    if as_json:
        typer.echo(json.dumps(ledger_json(summary), indent=2, allow_nan=False))
        return
    screen = console()
    screen.print(ledger_table(f"ledger {path}", summary, screen.width))


def ledger_json(summary: LedgerSummary) -> dict[str, object]:
    """A ledger's entries and totals as JSON values (``gaussdp ledger show --json``,
    ``gaussdp explain --ledger --json``); NaN and infinities become null, and so
    does ``spent_lower`` where no lower bound is computed (:attr:`LedgerSummary.lower`)."""
    return {
        "total": {key: json_number(value) for key, value in summary.total.as_dict().items()},
        "unit": summary.unit,
        "delta": json_number(summary.delta),
        "spent": json_number(summary.spent),
        "spent_lower": json_number(summary.lower),
        "remaining": json_number(summary.remaining),
        "selection_delta": json_number(summary.selection_delta),
        "slack": json_number(summary.slack),
        "note": summary.note,
        "entries": [
            {
                "id": r.id,
                "status": r.status,
                "what": r.what,
                "reserved_at": r.when,
                "committed_at": r.committed_at,
                "who": r.who,
                "event": r.event,
                "cost": json_number(r.cost),
            }
            for r in summary.rows
        ],
    }


def ledger_table(title: str, summary: LedgerSummary, width: int) -> Table:
    """A ledger's entries and totals (``gaussdp ledger show``, ``gaussdp explain --ledger``).

    Every value whole at any width: the text fields are stacked one per line
    when the columns do not fit (the event description is long), never cut.
    """
    from gaussdp.accounting.filter import left_text

    unit = summary.symbol
    names = ("id", "status", f"{unit} alone", "what", "event", "who", "reserved", "committed")
    header = [(name, name == f"{unit} alone") for name in names]
    rows = [
        [
            str(r.id),
            r.status,
            format_value(r.cost),
            r.what,
            r.event,
            r.who,
            r.when,
            r.committed_at or "—",
        ]
        for r in summary.rows
    ]
    table = fit_table(title, header, rows, width, separator="\n")
    at = f" at δ = {ceil_text(summary.delta, 3)}" if summary.unit == "epsilon" else ""
    lower = summary.lower
    shown = "no lower bound computed" if lower is None else f"lower bound {floor_text(lower)}"
    table.caption = (
        f"total {summary.total}; spent {unit} = {ceil_text(summary.spent)}{at} (certified upper "
        f"bound; {shown}); left: "
        f"{left_text(summary.total, summary.spent, summary.selection_delta, summary.note)}"
    )
    return table


def register(app: typer.Typer) -> None:
    """Add ``release`` and the ``ledger`` sub-app to ``app``."""
    app.command("release")(release_command)
    app.add_typer(ledger_app, name="ledger")
