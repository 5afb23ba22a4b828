"""The SQLite ledger: refusals, concurrent processes racing, crashes, corrupt files."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import sqlite3
from pathlib import Path

import pytest

from gaussdp.budget import Budget
from gaussdp.errors import BudgetExceededError
from gaussdp.privacy import gdp_epsilon, zcdp_epsilon
from gaussdp.release import Ledger


def test_create_reserve_commit_show(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    ledger = Ledger(path, total=Budget(epsilon=1.0, delta=1e-6))
    r = ledger.reserve(rho=0.01, delta=1e-7, label="counts", detail={"q": 1})
    assert ledger.entries()[0].status == "reserved"
    ledger.commit(r)
    (e,) = Ledger(path).entries()
    assert (e.status, e.rho, e.delta, e.label, e.detail) == (
        "committed",
        0.01,
        1e-7,
        "counts",
        {"q": 1},
    )
    assert e.committed_at is not None
    assert "pid" in e.who
    assert ledger.epsilon_spent is not None
    assert ledger.epsilon_spent < 1.0
    with pytest.raises(ValueError, match="open reservation"):
        ledger.commit(r)
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_refusal_writes_nothing(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "b.db", total=Budget(rho=1.0))
    ledger.reserve(rho=0.6, label="a")
    with pytest.raises(BudgetExceededError, match="within the ledger"):
        ledger.reserve(rho=0.5, label="b")
    with pytest.raises(BudgetExceededError):
        ledger.reserve(rho=0.1, delta=1e-9, label="δ on a ρ budget")
    assert [e.label for e in ledger.entries()] == ["a"]
    assert ledger.remaining_rho == pytest.approx(0.4)


def test_missing_corrupt_and_mismatched_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="total="):
        Ledger(tmp_path / "none.db")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ValueError, match="ledger"):
        Ledger(junk)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE t (x)")
    with pytest.raises(ValueError, match="gaussdp ledger"):
        Ledger(other)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="gaussdp ledger"):
        Ledger(empty)
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(ValueError, match="ledger"):
        Ledger(tmp_path / "dir.db")
    Ledger(tmp_path / "b.db", total=Budget(rho=1.0))
    with pytest.raises(ValueError, match="stored total"):
        Ledger(tmp_path / "b.db", total=Budget(rho=2.0))


def _spend(path: str, barrier: mp.synchronize.Barrier, out: mp.Queue) -> None:  # type: ignore[type-arg]
    ledger = Ledger(path)
    barrier.wait()
    try:
        r = ledger.reserve(rho=0.1, label=f"pid {os.getpid()}")
        ledger.commit(r)
        out.put(True)
    except BudgetExceededError:
        out.put(False)


def test_racing_processes_never_overspend(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    Ledger(path, total=Budget(rho=0.35))  # room for three spends of 0.1
    ctx = mp.get_context("spawn")
    n = 8
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_spend, args=(str(path), barrier, out)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    outcomes = [out.get(timeout=5) for _ in range(n)]
    assert sum(outcomes) == 3
    ledger = Ledger(path)
    assert len(ledger.entries()) == 3
    assert ledger.spent_rho <= 0.35


def _reserve_then_crash(path: str) -> None:
    Ledger(path).reserve(rho=0.3, label="crashes before commit")
    os._exit(1)  # no commit, no cleanup


def test_crash_between_reserve_and_commit_stays_counted(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    Ledger(path, total=Budget(rho=0.5))
    p = mp.get_context("spawn").Process(target=_reserve_then_crash, args=(str(path),))
    p.start()
    p.join(timeout=60)
    assert p.exitcode == 1
    ledger = Ledger(path)
    (e,) = ledger.entries()
    assert e.status == "reserved"
    with pytest.raises(BudgetExceededError):
        ledger.reserve(rho=0.3, label="would overspend")


def test_mu_entries_compose_exactly(tmp_path: Path) -> None:
    # Four entries of μ = 0.25 are one of μ = 0.5 (DRS Cor 3.3): they fit a total whose ε is
    # that of μ = 0.5, which the ρ composition (4·0.25²/2 = 0.125, CKS Cor 13) would overshoot.
    eps = gdp_epsilon(0.5, 1e-6) * (1 + 1e-9)
    assert zcdp_epsilon(0.125, 1e-6) > eps
    ledger = Ledger(tmp_path / "b.db", total=Budget(epsilon=eps, delta=1e-6))
    for i in range(4):
        ledger.commit(ledger.reserve(rho=0.03125, mu=0.25, slack=1e-76, label=f"q{i}"))
    with pytest.raises(BudgetExceededError, match="mu="):
        ledger.reserve(rho=1e-9, mu=0.01, label="one more")
    assert ledger.spent_mu == pytest.approx(0.5, rel=1e-14)
    assert ledger.spent_mu >= 0.5  # rounded up
    assert ledger.spent_slack == pytest.approx(4e-76)
    assert ledger.epsilon_spent == pytest.approx(gdp_epsilon(0.5, 1e-6), rel=1e-12)
    assert ledger.remaining_mu == pytest.approx(0.0, abs=1e-4)
    (first, *_) = ledger.entries()
    assert (first.mu, first.slack) == (0.25, 1e-76)


def test_an_entry_without_mu_composes_in_rho(tmp_path: Path) -> None:
    total = Budget(epsilon=1.0, delta=1e-6)
    ledger = Ledger(tmp_path / "b.db", total=total)
    ledger.reserve(rho=0.01, mu=0.1, label="certified in μ and ρ")
    assert ledger.spent_mu is not None
    ledger.reserve(rho=0.01, label="certified in ρ only")
    assert ledger.spent_mu is None
    assert ledger.remaining_mu is None
    assert ledger.epsilon_spent == zcdp_epsilon(ledger.spent_rho, 1e-6)
    assert ledger.remaining_rho == pytest.approx(total.rho_capacity() - 0.02)


def test_mu_total(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "b.db", total=Budget(mu=1.0))
    ledger.reserve(rho=0.1, mu=0.6, slack=1e-76, label="a")
    ledger.reserve(rho=0.1, mu=0.7, slack=1e-76, label="b")  # √(0.36 + 0.49) ≈ 0.92
    with pytest.raises(BudgetExceededError):
        ledger.reserve(rho=0.01, mu=0.4, label="√1.01 > 1")
    with pytest.raises(BudgetExceededError):
        ledger.reserve(rho=1e-6, label="ρ-zCDP is not μ-GDP")
    with pytest.raises(BudgetExceededError):
        ledger.reserve(rho=1e-6, mu=1e-3, delta=1e-9, label="no δ to spend")
    assert [e.label for e in ledger.entries()] == ["a", "b"]
    assert ledger.remaining_rho is None
    assert ledger.remaining_mu == pytest.approx(math.sqrt(1 - 0.85))
    assert ledger.epsilon_spent is None  # no δ to report at


def test_old_format_is_a_clear_error(tmp_path: Path) -> None:
    # A format-1 ledger (ρ and δ per entry, before μ accounting), as that version wrote it.
    path = tmp_path / "b.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        con.execute(
            "CREATE TABLE entries (id INTEGER PRIMARY KEY AUTOINCREMENT, status TEXT NOT NULL,"
            " rho REAL NOT NULL, delta REAL NOT NULL, label TEXT NOT NULL, who TEXT NOT NULL,"
            " reserved_at TEXT NOT NULL, committed_at TEXT, detail TEXT)"
        )
        con.execute("INSERT INTO meta VALUES ('format', 'gaussdp-ledger-1')")
        con.execute("INSERT INTO meta VALUES ('total', '{\"rho\": 1.0}')")
    with pytest.raises(ValueError, match="gaussdp-ledger-2 file .*format gaussdp-ledger-1"):
        Ledger(path)
