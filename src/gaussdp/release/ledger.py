"""A persistent privacy filter in SQLite that concurrent processes cannot overspend.

One file per dataset or project. The ledger stores the *events* themselves
(their JSON form, :func:`gaussdp.accounting.events.event_to_json`): a release,
a DP-SGD run, a third-party (ε, δ) step. A spend *reserves* its event in a write
transaction (``BEGIN IMMEDIATE``: SQLite's single writer lock, so two processes
cannot both read the old history and both pass the check) before any data is
read or noise drawn, and *commits* it afterwards. A reservation that is never
committed — the process crashed, or the run failed after reading the data —
stays counted (DESIGN decision 6): spending is only ever over-estimated.

An event is admitted iff the whole history plus the event fits the ledger's
total, by the same check as the in-memory filter
(:func:`gaussdp.accounting.filter.refusal`): the PLD accountant for an (ε, δ)
total, zCDP for a ρ total, exact μ-GDP for a μ total.

Files written by earlier versions (format 1: ρ and δ per entry; format 2: ρ,
μ, slack and δ) are migrated in place to this format on first use, each entry
becoming a :class:`~gaussdp.accounting.RecordedCost` with the costs it was
certified with. A file that cannot be used raises
:class:`~gaussdp.errors.LedgerError` with one line naming the file and what to
do; nothing is spent.

Examples
--------
>>> import tempfile, pathlib
>>> from gaussdp.mechanisms import Gaussian
>>> path = pathlib.Path(tempfile.mkdtemp()) / "budget.db"
>>> ledger = Ledger(path, total=Budget(rho=1.0))
>>> r = ledger.reserve(Gaussian(sigma=1.25), label="first")  # ρ = 0.32
>>> ledger.commit(r)
>>> round(ledger.spent, 6), round(ledger.remaining, 6)
(0.32, 0.68)
>>> try:
...     ledger.reserve(Gaussian(sigma=0.8), label="too much")  # ρ ≈ 0.78
... except BudgetExceededError as error:
...     print(error)
refused: this costs ρ = 0.782; the ledger has ρ = 0.679 left of 1
"""

from __future__ import annotations

import datetime as _dt
import getpass
import json
import os
import socket
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gaussdp._validation import check_count, check_positive
from gaussdp.accounting.accountants import Accountant
from gaussdp.accounting.events import (
    Composed,
    Event,
    RecordedCost,
    SelfComposed,
    UnknownEventError,
    check_event,
    describe,
    event_from_json,
    event_to_json,
)
from gaussdp.accounting.filter import (
    Spent,
    SpentMemo,
    budget_accountant,
    budget_limit,
    left_of,
    refusal,
)
from gaussdp.budget import Budget
from gaussdp.errors import BudgetExceededError, LedgerError, invalid

__all__ = ["Ledger", "LedgerEntry", "LedgerRow", "LedgerSummary", "Reservation"]

_FORMAT = "gaussdp-ledger-3"
#: Formats migrated on first use: (format, has a mu/slack column).
_OLD_FORMATS = {"gaussdp-ledger-1": False, "gaussdp-ledger-2": True}
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    status TEXT NOT NULL CHECK (status IN ('reserved', 'committed')),
    event TEXT NOT NULL,
    label TEXT NOT NULL,
    who TEXT NOT NULL,
    reserved_at TEXT NOT NULL,
    committed_at TEXT,
    detail TEXT
);
"""
_ENTRIES_V3 = _SCHEMA.split(";")[1].replace("IF NOT EXISTS entries", "entries_v3")
_INIT_HINT = "give the path of a gaussdp ledger, or create one with `gaussdp ledger init`"


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # pragma: no cover - no login name in some containers
        user = f"uid {os.getuid()}" if hasattr(os, "getuid") else "unknown"
    return f"{user}@{socket.gethostname()} (pid {os.getpid()})"


@dataclass(frozen=True, slots=True)
class Reservation:
    """A reserved (not yet committed) ledger entry."""

    id: int
    event: Event


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One row of the ledger: what was spent (the event), by whom, when, on what."""

    id: int
    status: str
    event: Event
    label: str
    who: str
    reserved_at: str
    committed_at: str | None
    detail: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """One entry as ``gaussdp ledger show`` lists it, with its cost alone.

    ``cost`` is the entry alone in the total's unit (ε at the ledger's δ, ρ or μ;
    certified upper bound); ``event`` a one-line description of the event.
    """

    id: int
    status: str
    what: str
    when: str
    committed_at: str | None
    who: str
    event: str
    cost: float


@dataclass(frozen=True, slots=True)
class LedgerSummary:
    """A ledger's entries and totals, in the total's unit.

    ``unit`` is ``"epsilon"`` (at ``delta``, the ledger's δ), ``"rho"`` or
    ``"mu"``; ``spent`` the certified upper bound of the whole history and
    ``spent_lower`` a lower bound (0 where the accountant gives none);
    ``remaining`` what a next release can spend for ρ (total − spent) and μ
    (√(total² − spent²)), NaN for ε (ε at a fixed δ does not add; see
    :func:`~gaussdp.accounting.filter.left_of`); ``selection_delta`` the δ spent
    outside the composition (partition selection, of ``delta``) and ``slack`` the
    smoothing slack included in ``spent``; ``note`` which bound certified ``spent``
    where it is not the PLD (e.g. the zCDP fallback for an event known only by its ρ,
    :attr:`~gaussdp.accounting.filter.Spent.note`), else "".
    """

    total: Budget
    unit: str
    delta: float | None
    spent: float
    spent_lower: float
    remaining: float
    selection_delta: float
    slack: float
    rows: tuple[LedgerRow, ...]
    note: str = ""

    @property
    def symbol(self) -> str:
        """The unit's symbol: ``"ε"``, ``"ρ"`` or ``"μ"``."""
        return {"epsilon": "ε", "rho": "ρ", "mu": "μ"}[self.unit]

    @property
    def lower(self) -> float | None:
        """:attr:`spent_lower`, or ``None`` where the accountant computes no lower bound.

        The accountants give 0 where they have none: after partition selection (its
        δ-close argument gives none: the selecting mechanism may be more private than
        the noise it thresholds), with a ρ budget, or with no PLD. A 0 below a positive
        spend is such a placeholder, never an informative bound, so displays show "no
        lower bound computed" rather than 0.
        """
        if self.spent_lower == 0.0 and self.spent > 0.0:
            return None
        return self.spent_lower


class Ledger:
    """A persistent privacy filter (one SQLite file, WAL mode).

    Parameters
    ----------
    path : str or path
        The ledger file.
    total : Budget, optional
        The total budget. Required to create a new ledger; for an existing one
        it must equal the stored total if given.
    timeout : float
        Seconds to wait for another process's write lock (default 30).

    Raises
    ------
    FileNotFoundError
        The file does not exist and no ``total`` was given.
    LedgerError
        The file is not a usable ledger: not SQLite, another program's
        database, an unknown format, read-only, or holding events this version
        does not know. Nothing is spent.
    ValueError
        ``total`` differs from the stored one.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, total: Budget | None = None, timeout: float = 30.0
    ) -> None:
        self.path = Path(path)
        self._timeout = check_positive("timeout", timeout)
        if total is not None and not isinstance(total, Budget):
            raise TypeError(invalid("total", "a gaussdp.Budget", total))
        if not self.path.exists():
            if total is None:
                raise FileNotFoundError(
                    invalid(
                        "ledger",
                        "an existing ledger file (pass total= to create one)",
                        str(self.path),
                    )
                )
            self._create(total)
        if self.path.is_dir():
            raise self._error("is a directory", _INIT_HINT)
        self.total = self._load_total()
        if total is not None and total != self.total:
            raise ValueError(invalid("total", f"the ledger's stored total {self.total}", total))
        # What each history spends, remembered (see _measure).
        self._spent = SpentMemo(32)

    def __getstate__(self) -> dict[str, object]:
        # The spend cache (with its lock, which does not pickle) stays behind; the file
        # holds everything that is spent.
        state = dict(self.__dict__)
        del state["_spent"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._spent = SpentMemo(32)

    # -- storage ----------------------------------------------------------------------
    def _error(self, what: str, todo: str) -> LedgerError:
        return LedgerError(f"ledger {str(self.path)!r} {what}; {todo}")

    def _sqlite_error(self, error: sqlite3.Error) -> LedgerError:
        text = str(error)
        if "readonly" in text or "read-only" in text:
            return self._error(
                "is read-only (nothing was spent)",
                "make the file and its directory writable, or use a copy",
            )
        if "locked" in text or "busy" in text:
            return self._error(
                f"is locked by another process (waited {self._timeout:g} s; nothing was spent)",
                "retry, or pass a longer timeout",
            )
        if "not a database" in text or "malformed" in text:
            return self._error(f"is not a SQLite database ({text})", _INIT_HINT)
        return self._error(f"cannot be used ({text}; nothing was spent)", _INIT_HINT)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            con = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
        except sqlite3.Error as error:
            raise self._sqlite_error(error) from error
        try:
            con.execute("PRAGMA synchronous=FULL")
            yield con
        except sqlite3.Error as error:
            raise self._sqlite_error(error) from error
        finally:
            con.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding SQLite's writer lock (``BEGIN IMMEDIATE``)."""
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")  # the writer lock: checks cannot interleave
            try:
                self._same_total(con)
                yield con
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise

    def _create(self, total: Budget) -> None:
        with self._connect() as con:
            con.execute("PRAGMA journal_mode=WAL")
        with self._write() as con:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    con.execute(statement)
            con.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (_FORMAT,))
            con.execute(
                "INSERT OR IGNORE INTO meta VALUES ('total', ?)", (json.dumps(total.as_dict()),)
            )
            con.execute("INSERT OR IGNORE INTO meta VALUES ('created', ?)", (_now(),))

    def _same_total(self, con: sqlite3.Connection) -> None:
        """Refuse a write when the file's stored total is not the one this object read.

        The checks of :meth:`reserve` and :meth:`commit_part` use ``self.total``; a file
        replaced under a running process (a restored backup, a new ledger moved to the
        path) with another total would otherwise be spent past its own total. Read under
        the writer lock, so no write can come between this and the check.
        """
        total = getattr(self, "total", None)
        if total is None:  # creating or migrating: the total is not read yet
            return
        stored = self._meta(con).get("total")
        try:
            same = stored is not None and Budget(**json.loads(stored)) == total
        except (TypeError, ValueError, json.JSONDecodeError):
            same = False
        if not same:
            raise self._error(
                f"changed under this process: its stored total is {stored!r}, this object "
                f"read {total} (nothing was spent)",
                "open the ledger again (Ledger(path)) to spend from the file's own total",
            )

    def _meta(self, con: sqlite3.Connection) -> dict[str, str]:
        try:
            return dict(con.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.OperationalError as error:
            raise self._error(
                "is a SQLite database but not a gaussdp ledger (no meta table)", _INIT_HINT
            ) from error

    def _load_total(self) -> Budget:
        with self._connect() as con:
            meta = self._meta(con)
        found = meta.get("format")
        if found in _OLD_FORMATS:
            self._migrate()
            with self._connect() as con:
                meta = self._meta(con)
            found = meta.get("format")
        if found != _FORMAT:
            raise self._error(
                f"has format {found!r}, not one this gaussdp reads ({_FORMAT}, or "
                f"{' and '.join(sorted(_OLD_FORMATS))} which are migrated)",
                "upgrade gaussdp, or start a new ledger",
            )
        if "total" not in meta:
            raise self._error("has no total budget", "start a new ledger")
        try:
            return Budget(**json.loads(meta["total"]))
        except (TypeError, ValueError, json.JSONDecodeError) as error:
            raise self._error(
                f"has an invalid total budget {meta['total']!r}", "start a new ledger"
            ) from error

    def _migrate(self) -> None:
        """Rewrite a format-1 or format-2 file as format 3, each entry a RecordedCost."""
        with self._write() as con:
            found = self._meta(con).get("format")  # another process may have migrated it
            if found not in _OLD_FORMATS:
                return
            mu_cols = "mu, slack" if _OLD_FORMATS[found] else "NULL, 0.0"
            rows = con.execute(
                f"SELECT id, status, rho, {mu_cols}, delta, label, who, reserved_at,"
                " committed_at, detail FROM entries ORDER BY id"
            ).fetchall()
            con.execute(_ENTRIES_V3)
            for row in rows:
                cost = RecordedCost(
                    rho=float(row[2]),
                    mu=None if row[3] is None else float(row[3]),
                    slack=float(row[4]),
                    delta=float(row[5]),
                )
                con.execute(
                    "INSERT INTO entries_v3 (id, status, event, label, who, reserved_at,"
                    " committed_at, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (row[0], row[1], event_to_json(cost), *row[6:]),
                )
            con.execute("DROP TABLE entries")
            con.execute("ALTER TABLE entries_v3 RENAME TO entries")
            con.execute("UPDATE meta SET value = ? WHERE key = 'format'", (_FORMAT,))
            con.execute(
                "INSERT OR REPLACE INTO meta VALUES ('migrated', ?)", (f"{found} at {_now()}",)
            )

    def _read_entries(self, con: sqlite3.Connection) -> list[LedgerEntry]:
        rows = con.execute(
            "SELECT id, status, event, label, who, reserved_at, committed_at, detail"
            " FROM entries ORDER BY id"
        ).fetchall()
        out = []
        for row in rows:
            try:
                event = event_from_json(row[2])
            except UnknownEventError as error:
                raise self._error(
                    f"entry {row[0]} holds an event this gaussdp does not know ({error}; "
                    "nothing was spent)",
                    "upgrade gaussdp",
                ) from error
            except (TypeError, ValueError) as error:
                raise self._error(
                    f"entry {row[0]} holds an invalid event ({error}; nothing was spent)",
                    "restore the file from a backup",
                ) from error
            out.append(
                LedgerEntry(
                    id=int(row[0]),
                    status=str(row[1]),
                    event=event,
                    label=str(row[3]),
                    who=str(row[4]),
                    reserved_at=str(row[5]),
                    committed_at=None if row[6] is None else str(row[6]),
                    detail=json.loads(row[7]) if row[7] else None,
                )
            )
        return out

    def _accountant_of(self, entries: list[LedgerEntry]) -> Accountant:
        acc = budget_accountant(self.total)
        for entry in entries:
            try:
                acc.compose(entry.event)
            except ValueError as error:
                raise self._error(
                    f"entry {entry.id} cannot be accounted against its total {self.total} "
                    f"({error}; nothing was spent)",
                    "start a new ledger with a total in another unit",
                ) from error
        return acc

    def _measure(self, budget: Budget, accountant: Accountant) -> Spent:
        """:func:`~gaussdp.accounting.filter.spent`, remembered per history
        (:class:`~gaussdp.accounting.filter.SpentMemo`, the 32 most recent).

        Every accountant here is a fresh one of the budget's kind
        (:meth:`_accountant_of`, or ``refusal``'s own), so a remembered value is the
        one a new computation would give. A reserve's total is the next reserve's
        history, and a refused request's cost alone and the history's spend are
        asked again on a retry: each composition (a PLD build, about a second for a
        synthesis run) is then made once per process.
        """
        return self._spent(budget, accountant)

    # -- spending ---------------------------------------------------------------------
    def check(self, event: Event, count: int = 1, *, what: str = "this") -> None:
        """Raise :class:`BudgetExceededError` if ``event`` would be refused now (writes nothing).

        A read-only look for refusing early (before any data is read); the
        binding check is the one in :meth:`reserve`. ``what`` names the event in
        the message.
        """
        check_event(event)
        acc = self.accountant()
        message, _ = refusal(
            self.total, acc, event, count, owner="ledger", what=what, measure=self._measure
        )
        if message is not None:
            raise BudgetExceededError(message)

    def reserve(
        self,
        event: Event,
        *,
        label: str,
        detail: dict[str, Any] | None = None,
        what: str = "this",
    ) -> Reservation:
        """Reserve ``event`` atomically if the whole history plus it fits the total.

        Parameters
        ----------
        event : Event
            What will be run (a release's :attr:`~gaussdp.release.plan.Plan.event`,
            a DP-SGD run, a third-party step).
        label : str
            What was released.
        detail : dict, optional
            A JSON-ready description (e.g. the privacy report).
        what : str, default "this"
            How the refusal message names the event ("this release").

        Raises
        ------
        BudgetExceededError
            If the history plus ``event`` would exceed the total, with a message in
            the total's terms. Nothing is written.
        UnsupportedEventError
            If the total's accountant cannot account for ``event``. Nothing is written.
        LedgerError
            If the file cannot be written (read-only, locked). Nothing is spent.
        """
        check_event(event)
        if not isinstance(label, str):
            raise TypeError(invalid("label", "a str", label))
        text = event_to_json(event)
        payload = None if detail is None else json.dumps(detail)
        with self._write() as con:
            before = self._accountant_of(self._read_entries(con))
            message, _ = refusal(
                self.total, before, event, owner="ledger", what=what, measure=self._measure
            )
            if message is not None:
                raise BudgetExceededError(message)
            cur = con.execute(
                "INSERT INTO entries (status, event, label, who, reserved_at, detail)"
                " VALUES ('reserved', ?, ?, ?, ?, ?)",
                (text, label, _who(), _now(), payload),
            )
            entry_id = int(cur.lastrowid or 0)
        return Reservation(entry_id, event)

    def commit(self, reservation: Reservation) -> None:
        """Mark a reservation as spent (its cost was counted from the moment it was reserved)."""
        with self._connect() as con:
            cur = con.execute(
                "UPDATE entries SET status = 'committed', committed_at = ?"
                " WHERE id = ? AND status = 'reserved'",
                (_now(), reservation.id),
            )
            if cur.rowcount != 1:
                raise ValueError(
                    invalid("reservation", "an open reservation of this ledger", reservation)
                )

    def commit_part(self, reservation: Reservation, count: int) -> None:
        """Commit ``count`` of the k runs an open ``SelfComposed(event, k)`` reservation holds.

        The entry becomes ``SelfComposed(event, count)`` (``event`` when ``count`` is
        1): the runs never taken are returned. An entry can only shrink, so the
        history stays within the total. DP-SGD reserves blocks of steps this way
        (:func:`gaussdp.ml.make_private`); a process that dies before committing
        leaves the whole block counted.

        Raises
        ------
        ValueError
            If the reservation is not an open ``SelfComposed`` reservation of this
            ledger, or ``count`` is not in [1, k]. Nothing changes.
        """
        reserved = reservation.event
        if not isinstance(reserved, SelfComposed):
            raise ValueError(
                invalid("reservation", "a reservation of SelfComposed(event, k)", reservation)
            )
        n = check_count("count", count)
        if n > reserved.count:
            raise ValueError(invalid("count", f"at most the {reserved.count} reserved", count))
        used = reserved.event if n == 1 else SelfComposed(reserved.event, n)
        with self._write() as con:
            cur = con.execute(
                "UPDATE entries SET status = 'committed', committed_at = ?, event = ?"
                " WHERE id = ? AND status = 'reserved' AND event = ?",
                (_now(), event_to_json(used), reservation.id, event_to_json(reserved)),
            )
            if cur.rowcount != 1:
                raise ValueError(
                    invalid("reservation", "an open reservation of this ledger", reservation)
                )

    def charge(self, event: Event, *, label: str, detail: dict[str, Any] | None = None) -> None:
        """Reserve and commit ``event`` at once (for a spend with nothing to run in between)."""
        self.commit(self.reserve(event, label=label, detail=detail))

    # -- reading ----------------------------------------------------------------------
    def entries(self) -> list[LedgerEntry]:
        """All entries, oldest first (reserved ones included: they count)."""
        with self._connect() as con:
            return self._read_entries(con)

    @property
    def history(self) -> Composed:
        """Every entry's event, oldest first, as one event."""
        return Composed(tuple(e.event for e in self.entries()))

    def accountant(self) -> Accountant:
        """The total's accountant holding every entry (reserved ones included)."""
        return self._accountant_of(self.entries())

    @property
    def spent(self) -> float:
        """What the history spends in the total's unit (ε at its δ, ρ or μ; upper bound)."""
        return self._measure(self.total, self.accountant()).value

    @property
    def remaining(self) -> float:
        """What a next release can spend (ρ: total − spent; μ: √(total² − spent²); ε: NaN)."""
        return self.summary().remaining

    def summary(self) -> LedgerSummary:
        """Entries with their cost alone, and the totals: what ``gaussdp ledger show`` prints."""
        entries = self.entries()
        total = self._measure(self.total, self._accountant_of(entries))
        symbol, limit = budget_limit(self.total)
        rows = tuple(
            LedgerRow(
                id=e.id,
                status=e.status,
                what=e.label,
                when=e.reserved_at,
                committed_at=e.committed_at,
                who=e.who,
                event=describe(e.event),
                cost=self._measure(self.total, self._accountant_of([e])).value,
            )
            for e in entries
        )
        return LedgerSummary(
            total=self.total,
            unit=_UNITS[symbol],
            delta=self.total.delta,
            spent=total.value,
            spent_lower=total.lower,
            remaining=left_of(symbol, limit, total.value),
            selection_delta=total.delta,
            slack=total.slack,
            rows=rows,
            note=total.note,
        )


_UNITS = {"ε": "epsilon", "ρ": "rho", "μ": "mu"}
