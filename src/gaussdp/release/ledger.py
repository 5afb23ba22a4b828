"""A persistent privacy budget in SQLite that concurrent processes cannot overspend.

One file per dataset or project. A release *reserves* its cost in a write
transaction (``BEGIN IMMEDIATE``: SQLite's single writer lock, so two processes
cannot both read the old total and both pass the check) before any noise is
drawn, and *commits* it afterwards. A reservation that is never committed — the
process crashed, or the release failed after reading the data — stays counted
(DESIGN decision 6): spending is only ever over-estimated.

Composition of entries: each entry holds the costs of one release — ρ (its
exact ρ-zCDP, CKS Thm 4/14; always present), μ and the smoothing slack A (its
μ-GDP up to e^{±A}, :class:`gaussdp.LatticeGaussian`; μ is NULL for an entry
not certified in μ) and δ (partition selection). The history composes both
ways at once: ρ's add (Bun & Steinke 2016 Lemma 2.3, 8.3 with the δ's), and
μ_total = √Σμᵢ² (DRS Cor 3.3) with A = ΣAᵢ and the δ's added. A new entry is
accepted iff the whole history fits the ledger's total
(:meth:`gaussdp.Budget.admits`): ρ totals check Σρ; μ totals check μ_total
(entries without μ are refused); (ε, δ) totals take the smaller of the two
certified ε's at δ − Σδ — ε_μ((δ − Σδ)e^{−A}) + 2A and CKS Cor 13 — since both
bound the same composed mechanism. Sums are rounded up.

Examples
--------
>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "budget.db"
>>> ledger = Ledger(path, total=Budget(rho=1.0))
>>> r = ledger.reserve(rho=0.4, label="first")
>>> ledger.commit(r)
>>> round(ledger.spent_rho, 6), round(ledger.remaining_rho, 6)
(0.4, 0.6)
>>> ledger.spent_mu is None  # an entry reserved with ρ only
True
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

# Format 2 (μ accounting) added the columns mu and slack; format-1 files are refused.
_FORMAT = "gaussdp-ledger-2"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    status TEXT NOT NULL CHECK (status IN ('reserved', 'committed')),
    rho REAL NOT NULL CHECK (rho >= 0),
    mu REAL CHECK (mu IS NULL OR mu >= 0),
    slack REAL NOT NULL CHECK (slack >= 0),
    delta REAL NOT NULL CHECK (delta >= 0),
    label TEXT NOT NULL,
    who TEXT NOT NULL,
    reserved_at TEXT NOT NULL,
    committed_at TEXT,
    detail TEXT
);
"""


def _up(x: float) -> float:
    """A float ≥ the exact value of a sum or product of a few correctly rounded terms."""
    return math.nextafter(x * (1 + 1e-15), math.inf) if x > 0 else x


def _compose_mu(mus: list[float | None]) -> float | None:
    """√Σμᵢ² (DRS Cor 3.3), rounded up; None if some entry has no μ."""
    if any(m is None for m in mus):
        return None
    return _up(math.sqrt(_up(math.fsum(m * m for m in mus if m is not None))))


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
    mu: float | None
    slack: float
    delta: float


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One row of the ledger: what was spent (ρ; μ with its slack; δ), by whom, when, on what."""

    id: int
    status: str
    rho: float
    mu: float | None
    slack: float
    delta: float
    label: str
    who: str
    reserved_at: str
    committed_at: str | None
    detail: dict[str, Any] | None


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
                found = meta.get("format")
                if isinstance(found, str) and found.startswith("gaussdp-") and found != _FORMAT:
                    # Another version's schema: say so before its columns are looked at.
                    raise ValueError(
                        invalid(
                            "ledger",
                            f"a {_FORMAT} file (this gaussdp cannot read format {found}; "
                            "start a new ledger)",
                            str(self.path),
                        )
                    )
                con.execute("SELECT id, status, rho, mu, slack, delta FROM entries LIMIT 1")
            except sqlite3.OperationalError as error:
                raise ValueError(
                    invalid(
                        "ledger", "a gaussdp ledger (tables meta, entries)", f"{self.path}: {error}"
                    )
                ) from error
        if found != _FORMAT or "total" not in meta:
            raise ValueError(invalid("ledger", f"a {_FORMAT} file", str(self.path)))
        try:
            return Budget(**json.loads(meta["total"]))
        except (TypeError, ValueError, json.JSONDecodeError) as error:
            raise ValueError(invalid("ledger total", "a valid budget", meta["total"])) from error

    # -- spending ---------------------------------------------------------------------
    def reserve(
        self,
        *,
        rho: float,
        mu: float | None = None,
        slack: float = 0.0,
        delta: float = 0.0,
        label: str,
        detail: dict[str, Any] | None = None,
    ) -> Reservation:
        """Reserve a release's cost atomically: ρ, μ with its slack, and δ.

        Parameters
        ----------
        rho : float
            ρ-zCDP of the release's Gaussian parts, ≥ 0.
        mu : float, optional
            μ-GDP of the same parts up to ``slack`` (``None``: not certified in
            μ; a μ total then refuses the entry, an (ε, δ) total composes it
            in ρ).
        slack : float, default 0.0
            The smoothing slack A ≥ 0 of ``mu``.
        delta : float, default 0.0
            δ spent outside the composition (private partition selection).
        label : str
            What was released.
        detail : dict, optional
            A JSON-ready description (e.g. the privacy report).

        Raises
        ------
        BudgetExceededError
            If the ledger's history plus this cost would exceed the total
            (:meth:`gaussdp.Budget.admits`). Nothing is written.
        """
        rho = check_epsilon("rho", rho)
        if mu is not None:
            mu = check_epsilon("mu", mu)
        slack = check_epsilon("slack", slack)
        delta = check_epsilon("delta", delta)
        if not isinstance(label, str):
            raise TypeError(invalid("label", "a str", label))
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")  # the writer lock: checks cannot interleave
            try:
                rows = con.execute("SELECT rho, mu, slack, delta FROM entries").fetchall()
                spent = _Spent.of([(float(r), m, float(a), float(d)) for r, m, a, d in rows])
                new = _Spent.of([*spent.rows, (rho, mu, slack, delta)])
                if not self.total.admits(
                    rho=new.rho, mu=new.mu, slack=new.slack, extra_delta=new.delta
                ):
                    raise BudgetExceededError(
                        invalid(
                            "spending",
                            f"within the ledger's total {self.total} (spent {spent})",
                            f"{_Spent.of([(rho, mu, slack, delta)])} more",
                        )
                    )
                cur = con.execute(
                    "INSERT INTO entries (status, rho, mu, slack, delta, label, who, reserved_at,"
                    " detail) VALUES ('reserved', ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        rho,
                        mu,
                        slack,
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
        return Reservation(entry_id, rho, mu, slack, delta)

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
                "SELECT id, status, rho, mu, slack, delta, label, who, reserved_at, committed_at,"
                " detail FROM entries ORDER BY id"
            ).fetchall()
        return [
            LedgerEntry(
                id=int(row[0]),
                status=str(row[1]),
                rho=float(row[2]),
                mu=None if row[3] is None else float(row[3]),
                slack=float(row[4]),
                delta=float(row[5]),
                label=str(row[6]),
                who=str(row[7]),
                reserved_at=str(row[8]),
                committed_at=None if row[9] is None else str(row[9]),
                detail=json.loads(row[10]) if row[10] else None,
            )
            for row in rows
        ]

    def _spent(self) -> _Spent:
        return _Spent.of([(e.rho, e.mu, e.slack, e.delta) for e in self.entries()])

    @property
    def spent_rho(self) -> float:
        """Total ρ of all entries (rounded up)."""
        return self._spent().rho

    @property
    def spent_mu(self) -> float | None:
        """√Σμ² of all entries (rounded up), or ``None`` if some entry has no μ."""
        return self._spent().mu

    @property
    def spent_slack(self) -> float:
        """Total smoothing slack A of all entries."""
        return self._spent().slack

    @property
    def spent_delta(self) -> float:
        """Total δ of all entries (partition selection)."""
        return self._spent().delta

    @property
    def remaining_rho(self) -> float | None:
        """ρ a further entry spending no δ could still spend in ρ; ``None`` for a μ total."""
        if self.total.mu is not None:
            return None
        spent = self._spent()
        if spent.delta > 0 and self.total.kind != "approx_dp":
            return 0.0
        return max(0.0, self.total.rho_capacity(spent.delta) - spent.rho)

    @property
    def remaining_mu(self) -> float | None:
        """μ a further entry with no δ (and negligible slack) could still spend.

        ``None`` for a ρ total, or when some entry has no μ (the history then
        composes in ρ only).
        """
        spent = self._spent()
        if self.total.rho is not None or spent.mu is None:
            return None
        capacity = self.total.mu_capacity(spent.delta, spent.slack)
        return math.sqrt(max(0.0, capacity * capacity - spent.mu * spent.mu))

    @property
    def epsilon_spent(self) -> float | None:
        """ε at the total's δ for everything spent so far, if the total has a δ.

        The smaller of the μ-GDP (with slack) and ρ-zCDP (CKS Cor 13)
        certificates of the history (:meth:`gaussdp.Budget.spent_epsilon`).
        """
        spent = self._spent()
        return self.total.spent_epsilon(
            rho=spent.rho, mu=spent.mu, slack=spent.slack, extra_delta=spent.delta
        )


@dataclass(frozen=True, slots=True)
class _Spent:
    """Totals of a list of (ρ, μ, A, δ) costs, each rounded up."""

    rows: tuple[tuple[float, float | None, float, float], ...]
    rho: float
    mu: float | None
    slack: float
    delta: float

    @classmethod
    def of(cls, rows: list[tuple[float, float | None, float, float]]) -> _Spent:
        return cls(
            tuple(rows),
            _up(math.fsum(r for r, _, _, _ in rows)),  # Bun & Steinke 2016 Lemma 2.3
            _compose_mu([m for _, m, _, _ in rows]) if rows else 0.0,  # DRS Cor 3.3
            _up(math.fsum(a for _, _, a, _ in rows)),
            _up(math.fsum(d for _, _, _, d in rows)),
        )

    def __str__(self) -> str:
        mu = "none" if self.mu is None else f"{self.mu:.6g}"
        return f"rho={self.rho:.6g}, mu={mu}, slack={self.slack:.3g}, delta={self.delta:.3g}"
