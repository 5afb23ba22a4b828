"""A persistent privacy budget in SQLite that concurrent processes cannot overspend.

One file per dataset or project. A release *reserves* its cost in a write
transaction (``BEGIN IMMEDIATE``: SQLite's single writer lock, so two processes
cannot both read the old total and both pass the check) before any noise is
drawn, and *commits* it afterwards. A reservation that is never committed — the
process crashed, or the release failed after reading the data — stays counted
(DESIGN decision 6): spending is only ever over-estimated.

Composition of entries: each entry holds the ρ of its discrete Gaussian noise
and the δ of its partition selection. All entries compose as approximate zCDP:
ρ's add and δ's add (Bun & Steinke 2016 Lemma 2.3, Lemma 8.3; this is
√Σμᵢ² in μ with μ = √(2ρ)); a new entry is accepted iff
``Σρ ≤ total.rho_capacity(Σδ)`` (:meth:`gaussdp.Budget.rho_capacity`), i.e. the
whole history stays within the ledger's total budget at its δ (CKS Cor 13).

Examples
--------
>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "budget.db"
>>> ledger = Ledger(path, total=Budget(rho=1.0))
>>> r = ledger.reserve(rho=0.4, label="first")
>>> ledger.commit(r)
>>> round(ledger.spent_rho, 6), round(ledger.remaining_rho, 6)
(0.4, 0.6)
>>> try:
...     ledger.reserve(rho=0.7, label="too much")
... except BudgetExceededError as error:
...     print("refused")
refused
"""

from __future__ import annotations

import datetime as _dt
import getpass
import json
import math
import os
import socket
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gaussdp._validation import check_epsilon, check_positive
from gaussdp.budget import Budget
from gaussdp.errors import BudgetExceededError, invalid

__all__ = ["Ledger", "LedgerEntry", "Reservation"]

_FORMAT = "gaussdp-ledger-1"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    status TEXT NOT NULL CHECK (status IN ('reserved', 'committed')),
    rho REAL NOT NULL CHECK (rho >= 0),
    delta REAL NOT NULL CHECK (delta >= 0),
    label TEXT NOT NULL,
    who TEXT NOT NULL,
    reserved_at TEXT NOT NULL,
    committed_at TEXT,
    detail TEXT
);
"""


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
    rho: float
    delta: float


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One row of the ledger: what was spent (ρ, δ), by whom, when, on what."""

    id: int
    status: str
    rho: float
    delta: float
    label: str
    who: str
    reserved_at: str
    committed_at: str | None
    detail: dict[str, Any] | None

    @property
    def mu(self) -> float:
        """√(2ρ): the entry's ρ in μ units."""
        return math.sqrt(2 * self.rho)


class Ledger:
    """A persistent budget (one SQLite file, WAL mode).

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
    ValueError
        The file is not a gaussdp ledger (corrupt, or another database), or
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
        self.total = self._load_total()
        if total is not None and total != self.total:
            raise ValueError(invalid("total", f"the ledger's stored total {self.total}", total))

    # -- storage ----------------------------------------------------------------------
    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            con = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
        except sqlite3.Error as error:
            raise ValueError(
                invalid("ledger", "a readable gaussdp ledger (SQLite)", f"{self.path}: {error}")
            ) from error
        try:
            con.execute("PRAGMA synchronous=FULL")
            yield con
        except sqlite3.DatabaseError as error:
            raise ValueError(
                invalid("ledger", "a readable gaussdp ledger (SQLite)", f"{self.path}: {error}")
            ) from error
        finally:
            con.close()

    def _create(self, total: Budget) -> None:
        with self._connect() as con:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("BEGIN IMMEDIATE")
            try:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        con.execute(statement)
                con.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (_FORMAT,))
                con.execute(
                    "INSERT OR IGNORE INTO meta VALUES ('total', ?)", (json.dumps(total.as_dict()),)
                )
                con.execute("INSERT OR IGNORE INTO meta VALUES ('created', ?)", (_now(),))
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise

    def _load_total(self) -> Budget:
        with self._connect() as con:
            try:
                meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
                con.execute("SELECT id, status, rho, delta FROM entries LIMIT 1").fetchall()
            except sqlite3.OperationalError as error:
                raise ValueError(
                    invalid(
                        "ledger", "a gaussdp ledger (tables meta, entries)", f"{self.path}: {error}"
                    )
                ) from error
        if meta.get("format") != _FORMAT or "total" not in meta:
            raise ValueError(invalid("ledger", f"a {_FORMAT} file", str(self.path)))
        try:
            return Budget(**json.loads(meta["total"]))
        except (TypeError, ValueError, json.JSONDecodeError) as error:
            raise ValueError(invalid("ledger total", "a valid budget", meta["total"])) from error

    # -- spending ---------------------------------------------------------------------
    def _check(self, rho_total: float, delta_total: float) -> bool:
        if delta_total > 0 and self.total.kind != "approx_dp":
            return False
        capacity = self.total.rho_capacity(delta_total)
        return rho_total <= capacity

    def reserve(
        self,
        *,
        rho: float,
        delta: float = 0.0,
        label: str,
        detail: dict[str, Any] | None = None,
    ) -> Reservation:
        """Reserve a cost of ``rho`` (zCDP) plus ``delta`` (partition selection), atomically.

        Raises
        ------
        BudgetExceededError
            If the ledger's history plus this cost would exceed the total.
            Nothing is written.
        """
        rho = check_epsilon("rho", rho)
        delta = check_epsilon("delta", delta)
        if not isinstance(label, str):
            raise TypeError(invalid("label", "a str", label))
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")  # the writer lock: checks cannot interleave
            try:
                rows = con.execute("SELECT rho, delta FROM entries").fetchall()
                new_rho = math.fsum([r for r, _ in rows] + [rho])
                new_delta = math.fsum([d for _, d in rows] + [delta])
                if not self._check(new_rho, new_delta):
                    raise BudgetExceededError(
                        invalid(
                            "spending",
                            f"within the ledger's total {self.total} (spent rho="
                            f"{new_rho - rho:.6g}, delta={new_delta - delta:.3g})",
                            f"rho={rho:.6g}, delta={delta:.3g} more",
                        )
                    )
                cur = con.execute(
                    "INSERT INTO entries (status, rho, delta, label, who, reserved_at, detail)"
                    " VALUES ('reserved', ?, ?, ?, ?, ?, ?)",
                    (
                        rho,
                        delta,
                        label,
                        _who(),
                        _now(),
                        None if detail is None else json.dumps(detail),
                    ),
                )
                entry_id = int(cur.lastrowid or 0)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        return Reservation(entry_id, rho, delta)

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

    # -- reading ----------------------------------------------------------------------
    def entries(self) -> list[LedgerEntry]:
        """All entries, oldest first (reserved ones included: they count)."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT id, status, rho, delta, label, who, reserved_at, committed_at, detail"
                " FROM entries ORDER BY id"
            ).fetchall()
        return [
            LedgerEntry(
                id=int(row[0]),
                status=str(row[1]),
                rho=float(row[2]),
                delta=float(row[3]),
                label=str(row[4]),
                who=str(row[5]),
                reserved_at=str(row[6]),
                committed_at=None if row[7] is None else str(row[7]),
                detail=json.loads(row[8]) if row[8] else None,
            )
            for row in rows
        ]

    @property
    def spent_rho(self) -> float:
        """Total ρ of all entries."""
        return math.fsum(e.rho for e in self.entries())

    @property
    def spent_delta(self) -> float:
        """Total δ of all entries (partition selection)."""
        return math.fsum(e.delta for e in self.entries())

    @property
    def remaining_rho(self) -> float:
        """ρ still available if no further δ is spent."""
        return (
            max(0.0, self.total.rho_capacity(self.spent_delta) - self.spent_rho)
            if (self.spent_delta == 0 or self.total.kind == "approx_dp")
            else 0.0
        )

    @property
    def epsilon_spent(self) -> float | None:
        """ε at the total's δ for everything spent so far (CKS Cor 13), if the total has a δ."""
        return self.total.epsilon_at(self.spent_rho, self.spent_delta)
