"""DuckDB's compiled bounding path gives exactly the SQL's pre-noise aggregate.

``GAUSSDP_BOUNDING=sql`` runs the SQL template (the reference); ``compiled`` runs
``gaussdp.release._compiled`` and fails where it cannot, or warns where it falls back to
the SQL after the reservation (warnings are errors in the tests: a test of it cannot pass
on the SQL by accident); ``auto`` (the default) takes the compiled path where it can. Every
comparison is of the engine's result before noise, value for value.
"""

from __future__ import annotations

import errno
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from gaussdp.budget import Budget
from gaussdp.random import ChaCha20Random
from gaussdp.release import Release
from gaussdp.release import sql as sql_module
from gaussdp.release.core import _aggregate

pytest.importorskip("numba")

BUDGET = Budget(epsilon=1.0, delta=1e-6)


def pre_noise(
    monkeypatch: pytest.MonkeyPatch, mode: str, build: Any, seed: int = 3
) -> list[list[tuple[Any, ...]]]:
    monkeypatch.setenv("GAUSSDP_BOUNDING", mode)
    return _aggregate(build(), rng=ChaCha20Random(seed))[1]


def both(monkeypatch: pytest.MonkeyPatch, build: Any, seed: int = 3) -> list[Any]:
    """The SQL's and the compiled path's results, asserted equal; returns them."""
    want = pre_noise(monkeypatch, "sql", build, seed)
    got = pre_noise(monkeypatch, "compiled", build, seed)
    assert got == want
    return want


def random_table(seed: int) -> pd.DataFrame:
    """Units with up to 12 cells and up to 9 rows a cell, duplicate rows, NULL and NaN
    values, values outside the bounds, NULL units and keys, two key columns."""
    rng = np.random.default_rng(seed)
    parts = []
    for unit in range(int(rng.integers(20, 120))):
        cells = int(rng.integers(1, 13))
        for _ in range(cells):
            rows = int(rng.integers(1, 10))
            page = f"p{int(rng.integers(0, 15))}"
            day = int(rng.integers(0, 3))
            values = rng.choice([-50.0, 0.3, 7.25, 33.0, 99.9, 250.0, np.nan], size=rows)
            parts.append(pd.DataFrame({"user": unit, "page": page, "day": day, "minutes": values}))
    frame = pd.concat(parts, ignore_index=True)
    frame = pd.concat([frame, frame.sample(frac=0.1, random_state=seed)])  # duplicates
    frame["user"] = frame["user"].astype("Int64")
    frame["page"] = frame["page"].astype(object)
    blank = rng.random(len(frame))
    frame.loc[blank < 0.02, "user"] = pd.NA
    frame.loc[(blank >= 0.02) & (blank < 0.04), "page"] = None
    frame.loc[(blank >= 0.04) & (blank < 0.08), "minutes"] = None
    return frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)


@pytest.mark.parametrize("seed", range(12))
def test_compiled_equals_sql_on_random_tables(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    frame = random_table(seed)
    l0, linf = [(1, 1), (2, 3), (3, 2), (5, 1), (4, 7), (12, 2)][seed % 6]

    def build() -> Release:
        return (
            Release(
                frame,
                privacy_unit="user",
                budget=BUDGET,
                max_groups_per_unit=l0,
                max_rows_per_group=linf,
            )
            .count(by="page")
            .sum("minutes", bounds=(0, 60), by="page")
            .mean("minutes", bounds=(-20, 100), by="page")
            .variance("minutes", bounds=(-5, 120), by="page")
            .distinct_units(
                by=["page", "day"], keys=[(f"p{i}", d) for i in range(15) for d in (0, 1)]
            )
            .std("minutes", bounds=(0, 100), by=["day", "page"], max_rows_per_group=1)
        )

    results = both(monkeypatch, build, seed)
    assert all(rows for rows in results)  # non-trivial: every grouping has groups


@pytest.mark.parametrize(("batch", "bits", "first"), [(5, 1, 2), (7, 3, 4), (64, 2, 2)])
def test_many_batches_partitions_and_table_growth(
    monkeypatch: pytest.MonkeyPatch, batch: int, bits: int, first: int
) -> None:
    """Record batches of a few rows, 2 to 8 partitions, a first table of 2 or 4 rows (so
    that it grows, and a partition is fed again): the same result."""
    from gaussdp.release import _compiled, engines

    monkeypatch.setattr(engines, "_BATCH_ROWS", batch)
    monkeypatch.setattr(_compiled, "_PART_BITS", bits)
    monkeypatch.setattr(_compiled, "_TABLE_ROWS", first)
    frame = random_table(200 + bits)

    def build() -> Release:
        return (
            Release(
                frame,
                privacy_unit="user",
                budget=BUDGET,
                max_groups_per_unit=3,
                max_rows_per_group=2,
            )
            .count(by="page")
            .variance("minutes", bounds=(-5, 120), by="page")
            .mean("minutes", bounds=(0, 60), by="page")
        )

    assert all(both(monkeypatch, build))


def test_more_rows_than_counted_take_the_sql() -> None:
    """The buffer is sized by the rows counted before the stream: more rows (the input
    changed between the two reads) give up, as the memory budget does."""
    from gaussdp.release import _compiled

    batch = pa.record_batch(
        {"pu": pa.array([1, 2, 3], pa.int64()), "kc": pa.array([0, 0, 1], pa.int32())}
    )
    b = sql_module.Bounding("v", ("k0",), None, (), (sql_module.Output("rows"),), 2, 3, 5)
    hashes = (np.array([[5], [6]], np.uint64), 7, False)
    assert _compiled.bound([batch], b, 2, 2**20, 2, hashes) is None
    assert _compiled.bound([batch, batch], b, 2, 2**20, 5, hashes) is None
    assert _compiled.bound([batch, batch], b, 2, 2**20, 6, hashes) is not None
    result = _compiled.bound([batch], b, 2, 2**20, 3, hashes)
    assert result is not None
    units, totals = result
    assert units.tolist() == [2, 1]
    assert totals[:, 0].tolist() == [2, 1]


@pytest.mark.parametrize(
    "key",
    [
        "'x'",  # every cell of a unit ties
        "CASE WHEN right(k0, 1) IN ('1', '3', '5') THEN 'x' ELSE k0 END",  # some tie
        "k0",  # the cell hash itself
    ],
)
def test_hash_ties_are_broken_by_the_keys_on_both_paths(
    monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """A cell hash of the unit and ``key`` (an expression of the key) instead of the keys:
    ties among a unit's cells wherever two keys give one value, settled by the keys in the
    engine's order. The SQL template with that cell hash and the compiled loops given
    DuckDB's hashes of ``key`` per key code keep the same cells and give the same sums."""
    import duckdb

    from gaussdp.release import _compiled

    frame = random_table(100 + len(key))[["user", "page", "minutes"]].dropna(subset=["user"])
    frame = frame.rename(columns={"user": "pu", "page": "k0", "minutes": "x0"})
    frame["pu"] = frame["pu"].astype("int64")
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE VIEW v AS SELECT * FROM frame")
    value = sql_module.ScalarValue("x0", 0.0, 60.0, 0.125)
    outputs = (
        sql_module.Output("rows"),
        sql_module.Output("valid", 0),
        sql_module.Output("sum", 0, -1, 0, 960),
    )
    b = sql_module.Bounding("v", ("k0",), None, (value,), outputs, 3, 2, 12345)
    con.execute(f"CREATE TABLE keys AS {sql_module.keys_sql(b)}")
    con.execute(f"CREATE TABLE codes AS {sql_module.codes_sql(b, 'keys')}")
    ((groups,),) = con.execute("SELECT COUNT(*) FROM codes").fetchall()
    listed = [r[0] for r in con.execute(f"SELECT hash({key}) FROM codes ORDER BY kc").fetchall()]
    ((salt,),) = con.execute(f"SELECT hash({b.salt})").fetchall()
    ((rows,),) = con.execute("SELECT SUM(kept) FROM keys").fetchall()
    reader = con.sql(sql_module.stream_sql(b, "codes")).to_arrow_reader(64)
    hashes = (np.array(listed, np.uint64).reshape(groups, 1), salt, False)
    result = _compiled.bound(reader, b, groups, 2**30, int(rows), hashes)
    assert result is not None
    units, totals = result
    monkeypatch.setattr(sql_module, "CELL_HASH", f"hash(hash(pu, {key}, {{salt}}))")
    want = con.execute(b.sql()).fetchall()
    codes = [r[0] for r in con.execute("SELECT k0 FROM codes ORDER BY kc").fetchall()]
    got = [(codes[g], int(units[g]), *map(int, totals[g])) for g in range(groups) if units[g] > 0]
    assert got == [tuple(r) for r in want]
    assert len(got) > 5


def test_a_cell_hash_the_compiled_loops_do_not_compute_leaves_the_sql(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another :data:`~gaussdp.release.sql.CELL_HASH` text (or another DuckDB hash) than
    :func:`_compiled.cell_hash` computes: the compiled path is not taken (checked before
    anything is reserved, on fixed values), and the release is the SQL's."""
    monkeypatch.setattr(sql_module, "CELL_HASH", "(hash(hash(pu{keys}, {salt})) % 5)")
    frame = random_table(7)

    def build() -> Release:
        return Release(
            frame, privacy_unit="user", budget=BUDGET, max_groups_per_unit=3, max_rows_per_group=2
        ).count(by="page")

    monkeypatch.setenv("GAUSSDP_BOUNDING", "compiled")
    with pytest.raises(ValueError, match="cell hash"):
        build().run(rng=ChaCha20Random(1))
    monkeypatch.setenv("GAUSSDP_BOUNDING", "auto")
    assert pre_noise(monkeypatch, "auto", build) == pre_noise(monkeypatch, "sql", build)


def test_integer_keys_and_units_of_every_integer_width(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    n = 5000
    table = pa.table(
        {
            "user": pa.array(rng.integers(-100, 100, n), pa.int8()),
            "page": pa.array(rng.integers(0, 40, n) * 1000, pa.uint32()),
            "ok": pa.array(rng.random(n) < 0.5),
            "minutes": pa.array(rng.normal(10, 20, n)),
        }
    )

    def build() -> Release:
        return (
            Release(
                table,
                privacy_unit="user",
                budget=BUDGET,
                max_groups_per_unit=4,
                max_rows_per_group=3,
            )
            .count(by=["ok", "page"])
            .mean("minutes", bounds=(-30, 30), by=["ok", "page"])
        )

    both(monkeypatch, build)


def test_rescaling_and_clamping_are_the_sqls(monkeypatch: pytest.MonkeyPatch) -> None:
    # One unit, 7 rows: S = 26 grid steps, L∞ = 3 → ⌊26·3/7 + ½⌋ (and −26 the same way).
    frame = pd.DataFrame({"user": [0] * 14, "page": ["a"] * 7 + ["b"] * 7})
    frame["minutes"] = [3.5] + [0.6] * 6 + [-3.5] + [-0.6] * 6

    def build() -> Release:
        return Release(
            frame, privacy_unit="user", budget=BUDGET, max_groups_per_unit=2, max_rows_per_group=3
        ).sum("minutes", bounds=(-100, 100), by="page", keys=["a", "b"])

    ((a, b),) = both(monkeypatch, build)
    assert (a[0], a[2], b[2]) == ("a", (2 * 26 * 3 + 7) // 14, (-2 * 26 * 3 + 7) // 14)


@pytest.mark.parametrize(
    ("name", "frame", "release"),
    [
        (
            "float unit",
            pd.DataFrame({"user": [1.0, 2.0, np.nan], "page": ["a", "b", "a"]}),
            lambda r: r.count(by="page", keys=["a", "b"]),
        ),
        (
            "text unit",
            pd.DataFrame({"user": ["u", "v", "u"], "page": ["a", "b", "a"]}),
            lambda r: r.count(by="page", keys=["a", "b"]),
        ),
        (
            "float key",
            pd.DataFrame({"user": [1, 2, 1], "page": [0.5, -0.0, 0.0]}),
            lambda r: r.count(by="page", keys=[0.5, 0.0]),
        ),
        (
            "no key",
            pd.DataFrame({"user": [1, 2, 1], "page": ["a", "b", "a"]}),
            lambda r: r.count(),
        ),
        (
            "large L0",
            pd.DataFrame({"user": [1, 2, 1], "page": ["a", "b", "c"]}),
            lambda r: r.count(by="page", keys=["a", "b", "c"], max_groups_per_unit=33),
        ),
        (
            "histogram",
            pd.DataFrame({"user": [1, 2, 1], "minutes": [1.0, 50.0, 99.0]}),
            lambda r: r.histogram("minutes", bins=[0, 50, 100]),
        ),
        (
            "vector sum",
            pd.DataFrame({"user": [1, 2, 1], "page": ["a"] * 3, "x": [1.0, 2, 3], "y": [0.0] * 3}),
            lambda r: r.vector_sum(["x", "y"], norm=2.0, by="page", keys=["a"]),
        ),
    ],
)
def test_out_of_scope_groupings_take_the_sql(
    monkeypatch: pytest.MonkeyPatch, name: str, frame: pd.DataFrame, release: Any
) -> None:
    def build() -> Release:
        return release(
            Release(
                frame,
                privacy_unit="user",
                budget=BUDGET,
                max_groups_per_unit=2,
                max_rows_per_group=2,
            )
        )

    with pytest.raises(ValueError, match="GAUSSDP_BOUNDING=compiled: not for"):
        pre_noise(monkeypatch, "compiled", build)
    assert pre_noise(monkeypatch, "auto", build) == pre_noise(monkeypatch, "sql", build)


def test_past_the_memory_limit_it_takes_the_sql(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gaussdp.release import _compiled

    rng = np.random.default_rng(8)
    n = 2_000_000
    frame = pd.DataFrame({"user": rng.integers(0, 10**5, n), "page": rng.integers(0, 50, n)})
    # 80 bytes a held row: 160 MB, past a 128 MiB limit (the least memory_limit is
    # 125 MB, so the rows are made to weigh more than they do)
    monkeypatch.setattr(_compiled, "row_bytes", lambda values: 80)

    def build(limit: int | str | None) -> Any:
        return lambda: Release(
            frame,
            privacy_unit="user",
            budget=BUDGET,
            max_groups_per_unit=2,
            max_rows_per_group=2,
            memory_limit=limit,
        ).count(by="page", keys=list(range(50)))

    with pytest.raises(ValueError, match="the memory limit"):
        pre_noise(monkeypatch, "compiled", build(128 * 2**20))
    want = pre_noise(monkeypatch, "sql", build(None))
    assert pre_noise(monkeypatch, "auto", build(128 * 2**20)) == want
    assert pre_noise(monkeypatch, "compiled", build(None)) == want
    assert pre_noise(monkeypatch, "compiled", build("1GB")) == want  # a size string too
    with pytest.raises(ValueError, match="the memory limit"):
        pre_noise(monkeypatch, "compiled", build("128MiB"))


@pytest.mark.parametrize(
    "error",
    [OSError(errno.ENOMEM, "Cannot allocate memory"), OverflowError("too big"), ValueError("x")],
    ids=["ENOMEM", "overflow", "value"],
)
@pytest.mark.parametrize("mode", ["auto", "compiled"])
def test_rows_that_cannot_be_mapped_take_the_sql_after_the_reservation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, error: Exception, mode: str
) -> None:
    """The held rows' memory is mapped after the reservation; where that fails (``mmap``'s
    ``OSError`` for ENOMEM or an address-space limit, ``OverflowError``/``ValueError`` for
    a size past the platform's), the SQL bounds the grouping, with the same result, and
    the release is charged once. Before, the ``OSError`` ended the charged release as an
    engine failure (rev28-rel); under ``GAUSSDP_BOUNDING=compiled`` it ends nothing now
    either — a failure after the reservation would depend on the table — but warns."""
    import mmap

    from gaussdp.release import Ledger, _compiled

    real = mmap.mmap

    def failing(fileno: int, length: int, *args: Any, **options: Any) -> Any:
        if fileno == -1:  # anonymous memory: the held rows
            raise error
        return real(fileno, length, *args, **options)

    frame = random_table(31)

    def build() -> Release:
        return Release(
            frame, privacy_unit="user", budget=BUDGET, max_groups_per_unit=3, max_rows_per_group=2
        ).sum("minutes", bounds=(0, 60), by="page")

    want = pre_noise(monkeypatch, "sql", build)
    monkeypatch.setattr(mmap, "mmap", failing)
    with pytest.raises(MemoryError):
        _compiled._buffer(10, 3)
    if mode == "compiled":
        with pytest.warns(RuntimeWarning, match="the SQL path bounds it, with the same result"):
            assert pre_noise(monkeypatch, mode, build) == want
    else:
        assert pre_noise(monkeypatch, mode, build) == want
    book = Ledger(tmp_path / "b.db", total=Budget(epsilon=5.0, delta=1e-5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        build().run(ledger=book)
    assert [e.status for e in book.entries()] == ["committed"]


def test_a_callers_connection_takes_the_sql(monkeypatch: pytest.MonkeyPatch) -> None:
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE visits AS SELECT range % 7 AS user, range % 3 AS page FROM range(50)")

    def build() -> Release:
        return Release(
            (con, "visits"),
            privacy_unit="user",
            budget=BUDGET,
            max_groups_per_unit=2,
            max_rows_per_group=2,
        ).count(by="page", keys=[0, 1, 2])

    with pytest.raises(ValueError, match="a caller's connection"):
        pre_noise(monkeypatch, "compiled", build)
    assert pre_noise(monkeypatch, "auto", build) == pre_noise(monkeypatch, "sql", build)


def test_an_unknown_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    frame = pd.DataFrame({"user": [1], "page": ["a"]})
    release = Release(
        frame, privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
    ).count(by="page", keys=["a"])
    with pytest.raises(ValueError, match="GAUSSDP_BOUNDING"):
        pre_noise(monkeypatch, "fast", lambda: release)


def test_an_engine_failure_on_the_compiled_path_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gaussdp.errors import EngineError

    # The stream's query fails in DuckDB (a value quoting a record): one line, no record.
    monkeypatch.setattr(sql_module, "STREAM_TEMPLATE", "SELECT CAST('7,a,abc' AS INTEGER)")
    frame = pd.DataFrame({"user": [1, 2], "page": ["a", "b"]})
    release = Release(
        frame, privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
    ).count(by="page", keys=["a"])
    with pytest.raises(EngineError) as caught:
        pre_noise(monkeypatch, "compiled", lambda: release)
    assert "\n" not in str(caught.value)
    assert "abc" not in str(caught.value)
    assert caught.value.__cause__ is None or "abc" not in str(caught.value.__cause__)


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (pd.DataFrame({"user": [1.0, 2.0], "page": ["a", "b"]}), "a privacy unit of type DOUBLE"),
        (pd.DataFrame({"user": [1, 2], "page": [0.5, 1.5]}), "group keys of types"),
    ],
)
def test_a_refusal_of_the_compiled_mode_spends_and_draws_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, frame: pd.DataFrame, why: str
) -> None:
    """``GAUSSDP_BOUNDING=compiled`` on a grouping the compiled path cannot take is refused
    while the data are read, before the reservation: one line, the ledger unchanged, the
    seeded rng not drawn from (its next draw is a fresh one's)."""
    from gaussdp.release import Ledger

    monkeypatch.setenv("GAUSSDP_BOUNDING", "compiled")
    book = Ledger(tmp_path / "b.db", total=Budget(epsilon=5.0, delta=1e-5))
    before = (tmp_path / "b.db").read_bytes()
    release = Release(
        frame, privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
    ).count(by="page")
    rng = ChaCha20Random(7)
    with pytest.raises(ValueError, match=f"GAUSSDP_BOUNDING=compiled: not for {why}") as caught:
        release.run(ledger=book, rng=rng)
    assert "\n" not in str(caught.value)
    assert book.entries() == []
    assert (tmp_path / "b.db").read_bytes() == before
    assert rng.randbits(62) == ChaCha20Random(7).randbits(62)
    monkeypatch.setenv("GAUSSDP_BOUNDING", "auto")
    assert len(release.run(ledger=book).frame) >= 0  # the same release runs on the SQL
    assert len(book.entries()) == 1


def test_the_cli_refuses_the_compiled_mode_before_the_ledger(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The example CSV (a CSV's unit is text: never compiled) under
    ``GAUSSDP_BOUNDING=compiled``: exit status 2, one line, no ledger entry (it was an
    "internal error … a bug" after the reservation)."""
    from typer.testing import CliRunner

    from gaussdp.cli import app

    examples = Path(__file__).parents[2] / "examples"
    ledger = tmp_path / "budget.db"
    runner = CliRunner()
    made = runner.invoke(app, ["ledger", "init", str(ledger), "--epsilon", "3", "--delta", "1e-5"])
    assert made.exit_code == 0, made.output
    monkeypatch.setenv("GAUSSDP_BOUNDING", "compiled")
    args = ["release", str(examples / "visits.toml"), "--data", str(examples / "visits.csv")]
    result = runner.invoke(app, [*args, "--ledger", str(ledger)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "GAUSSDP_BOUNDING=compiled: not for a privacy unit of type VARCHAR" in lines[0]
    assert "internal error" not in result.output
    shown = runner.invoke(app, ["ledger", "show", str(ledger), "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["entries"] == []


@pytest.mark.parametrize("seed", [0, 1])
def test_the_keys_read_counts_as_the_plain_validation(seed: int) -> None:
    """The compiled path's validation read (:func:`keys_sql`, grouped by the keys) gives
    the plain read's counts; its codes are the ranks of the key tuples of the rows the
    template keeps, and it counts those rows."""
    from dataclasses import replace

    from gaussdp.release.engines import DuckDBEngine

    frame = random_table(300 + seed)
    internal = {"pu": "user", "k0": "page", "k1": "day", "x0": "minutes"}
    b = sql_module.Bounding("", ("k0", "k1"), None, (), (sql_module.Output("rows"),), 2, 2, 1)
    counts = []
    for compiled in (False, True):
        engine = DuckDBEngine(frame)
        try:
            view = engine.register(internal)
            drafts = [replace(b, source=view)] if compiled else []
            counts.append(engine.validate(view, list(internal), drafts))
            assert len(engine._keys) == int(compiled)
            if compiled:
                ((table, kept),) = engine._keys.values()
                con = engine._con
                codes = con.execute(sql_module.codes_sql(b, table) + " ORDER BY kc").fetchall()
                where = "WHERE pu IS NOT NULL AND k0 IS NOT NULL AND k1 IS NOT NULL"
                want = con.execute(
                    f"SELECT k0, k1 FROM {view} {where} GROUP BY k0, k1 ORDER BY k0, k1"
                ).fetchall()
                assert [c[:2] for c in codes] == want
                assert [c[2] for c in codes] == list(range(len(want)))
                ((n,),) = con.execute(f"SELECT COUNT(*) FROM {view} {where}").fetchall()
                assert kept == n
        finally:
            engine.close()
    assert counts[0] == counts[1]
    assert 0 < counts[0]["pu"] < len(frame)  # NULL units are in the table


def test_an_unknown_mode_spends_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An unknown ``GAUSSDP_BOUNDING`` is refused while the data are read: no ledger entry."""
    from gaussdp.release import Ledger

    book = Ledger(tmp_path / "b.db", total=Budget(epsilon=5.0, delta=1e-5))
    before = (tmp_path / "b.db").read_bytes()
    monkeypatch.setenv("GAUSSDP_BOUNDING", "fast")
    release = Release(
        pd.DataFrame({"user": [1, 2], "page": ["a", "b"]}),
        privacy_unit="user",
        budget=BUDGET,
        max_groups_per_unit=1,
        max_rows_per_group=1,
    ).count(by="page", keys=["a"])
    with pytest.raises(ValueError, match="GAUSSDP_BOUNDING"):
        release.run(ledger=book)
    assert book.entries() == []
    assert (tmp_path / "b.db").read_bytes() == before


class _Unloadable:
    """An import hook under which ``gaussdp.release._compiled`` fails as numba does where
    it cannot cache (a read-only installation, no writable home): a ``RuntimeError``."""

    def find_spec(self, name: str, path: object, target: object = None) -> None:
        if name == "gaussdp.release._compiled":
            raise RuntimeError("cannot cache function 'partition': no locator available")


def test_a_compiled_module_that_does_not_load_leaves_the_sql(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where the compiled module fails to load, ``auto`` runs the SQL (the same result)
    and ``compiled`` is refused before the reservation; nothing fails after a charge."""
    import sys

    import gaussdp.release
    from gaussdp.release import Ledger

    frame = pd.DataFrame({"user": [1, 2, 2, 3], "page": ["a", "b", "a", "a"]})

    def build() -> Release:
        return Release(
            frame, privacy_unit="user", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
        ).count(by="page", keys=["a", "b"])

    want = pre_noise(monkeypatch, "sql", build)
    monkeypatch.delitem(sys.modules, "gaussdp.release._compiled", raising=False)
    monkeypatch.delattr(gaussdp.release, "_compiled", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Unloadable(), *sys.meta_path])
    assert pre_noise(monkeypatch, "auto", build) == want
    book = Ledger(tmp_path / "b.db", total=Budget(epsilon=5.0, delta=1e-5))
    monkeypatch.setenv("GAUSSDP_BOUNDING", "compiled")
    with pytest.raises(ValueError, match="numba is not installed or does not load here"):
        build().run(ledger=book)
    assert book.entries() == []


def test_numba_without_a_writable_cache_still_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """numba refuses ``cache=True`` where it has nowhere to write (``RuntimeError`` when a
    function is decorated): the compiled loops are then compiled once a process."""
    import numba

    from gaussdp.release import _compiled

    njit = numba.njit

    def no_cache(*args: Any, **options: Any) -> Any:
        if options.get("cache"):
            raise RuntimeError("cannot cache function 'f': no locator available for file")
        return njit(*args, **options)

    monkeypatch.setattr(numba, "njit", no_cache)

    def twice(x: int) -> int:
        return 2 * x

    assert _compiled._jit(twice)(21) == 42


def test_an_error_while_the_batches_are_read_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB's errors while the compiled path reads its record batches come through Arrow
    as an ``OSError`` quoting the value: one scrubbed line, as on the SQL path."""
    from gaussdp.errors import EngineError
    from gaussdp.release import _compiled

    def failing(*args: Any, **options: Any) -> None:
        raise OSError("Conversion Error: Could not convert string 'secret-of-unit-7' to INT32")

    monkeypatch.setattr(_compiled, "bound", failing)
    release = Release(
        pd.DataFrame({"user": [1, 2], "page": ["a", "b"]}),
        privacy_unit="user",
        budget=BUDGET,
        max_groups_per_unit=1,
        max_rows_per_group=1,
    ).count(by="page", keys=["a"])
    with pytest.raises(EngineError) as caught:
        pre_noise(monkeypatch, "compiled", lambda: release)
    assert "\n" not in str(caught.value)
    assert "secret" not in str(caught.value)
    assert caught.value.__cause__ is None or "secret" not in str(caught.value.__cause__)


def test_the_keys_read_decides_key_filters_per_group_as_row_by_row() -> None:
    """:func:`keys_sql` counts a key column and ``kept`` once a group (its rows share the
    key values): the same per-group numbers as counting row by row with the template's
    filter, with NULL, NaN and ±0 float keys, ``'nan'`` text keys in any case, and a float
    privacy unit with NaN and NULL."""
    import duckdb

    rng = np.random.default_rng(11)
    n = 4000
    con = duckdb.connect()
    frame = pd.DataFrame(
        {
            "pu": rng.choice([1.0, 2.0, 3.5, np.nan, None], n),
            "k0": rng.choice([0.0, -0.0, 1.5, np.nan, None], n),
            "k1": rng.choice(["a", "nan", "NaN", "b", None], n),
            "x0": rng.choice([1.0, np.nan, None], n),
        }
    )
    con.register("frame", frame)
    con.execute("CREATE VIEW v AS SELECT * FROM frame")
    nan = {"pu": "float", "k0": "float", "k1": "text"}
    b = sql_module.Bounding("v", ("k0", "k1"), None, (), (sql_module.Output("rows"),), 2, 2, 1, nan)
    columns = ["pu", "k0", "k1", "x0"]
    got = con.execute(
        f"SELECT * FROM ({sql_module.keys_sql(b, columns)}) ORDER BY k0, k1"
    ).fetchall()
    row_filter = sql_module._row_filter(b.keys, nan)
    want = con.execute(
        "SELECT k0, k1, COUNT(pu), COUNT(k0), COUNT(k1), COUNT(x0), "
        f"COUNT(*) FILTER (WHERE pu IS NOT NULL{row_filter}) FROM v GROUP BY k0, k1 "
        "ORDER BY k0, k1"
    ).fetchall()
    assert len(got) == len(want) >= 12
    assert sum(row[-1] for row in got) > 0
    for g, w in zip(got, want, strict=True):
        assert g[:2] == w[:2] or (g[0] != g[0] and w[0] != w[0] and g[1] == w[1])  # NaN keys
        assert g[2:] == w[2:]


@pytest.mark.parametrize(
    ("lo", "hi", "center", "gamma"),
    [
        (0.0, 60.0, None, 0.125),
        (-100.0, 100.0, None, 0.5),
        (-3.0, 5.0, 1.0, 0.03125),
        (1e-300, 2e-300, None, 2.0**-1040),
        (-1e300, 1e300, None, 2.0**988),
    ],
)
def test_the_compiled_grid_integers_are_the_sqls(
    lo: float, hi: float, center: float | None, gamma: float
) -> None:
    """The compiled loops put a value on the grid (``_compiled._grid``) as
    :data:`~gaussdp.release.sql.TEMPLATE`'s text does in DuckDB, for NULL, NaN, ±0, ±inf,
    the bounds and the doubles next to them, half-grid points and the doubles next to
    them, subnormals and random values."""
    import duckdb

    from gaussdp.release import _compiled
    from gaussdp.release.sql import ScalarValue, _base

    rng = np.random.default_rng(5)
    half = [(k + 0.5) * gamma for k in range(-8, 8)] + [lo + gamma / 2, hi - gamma / 2]
    points = [lo, hi, 0.0, -0.0, 5e-324, -5e-324, 2.2e-308, np.inf, -np.inf, 1e308, -1e308]
    points += half
    near = np.array(points, np.float64)
    values = np.concatenate(
        [
            near,
            np.nextafter(near, np.inf),
            np.nextafter(near, -np.inf),
            rng.uniform(lo - (hi - lo), hi + (hi - lo), 2000),
            [np.nan],
        ]
    )
    column = pa.array([*values, None], pa.float64())
    table = pa.table({"i": pa.array(range(len(column))), "x0": column})
    con = duckdb.connect()
    con.register("t", table)
    value = ScalarValue("x0", lo, hi, gamma, center)
    select = _base(keys=(), histogram=None, values=(value,), nan=None).value_select
    want = [r[1] for r in con.execute(f"SELECT i{select} FROM t ORDER BY i").fetchall()]
    got = [
        _compiled._grid(x, lo, hi, center or 0.0, center is not None, gamma)
        for x in column.to_numpy(zero_copy_only=False)
    ]
    null = _compiled._NULL
    assert got == [null if w is None else w for w in want]
    assert got.count(null) == 2
    assert len(set(got)) > 10
