"""The SQLite ledger: refusals, concurrent processes racing, crashes, corrupt files."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
from pathlib import Path

import pytest

from gaussdp.budget import Budget
from gaussdp.errors import BudgetExceededError
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
