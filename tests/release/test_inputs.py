"""Every input kind gives the same release: files, directories, globs, frames, DuckDB tables."""

from __future__ import annotations

import gzip
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from gaussdp.budget import Budget
from gaussdp.release import Ledger, Release
from gaussdp.release.engines import read_csv_text

FRAME = pd.DataFrame(
    {"user": [1, 1, 2, 3, 4, 5], "page": ["a", "b", "a", "a", "b", "a"], "minutes": 1.0}
)


def frame_release(source: object, engine: str = "duckdb") -> Release:
    """A release of ``source`` (FRAME's columns): unit ``user``, L0 = 2, L∞ = 1."""
    return Release(
        source,
        privacy_unit="user",
        budget=Budget(rho=1.0),
        max_groups_per_unit=2,
        max_rows_per_group=1,
        engine=engine,
    )


def counts(source: object, engine: str = "duckdb") -> list[float]:
    release = frame_release(source, engine).count(by="page", keys=["a", "b"])
    return release.run().frame["value"].tolist()


def test_all_input_kinds_agree(tmp_path: Path, no_noise: None) -> None:
    pl = pytest.importorskip("polars")
    parts = tmp_path / "parts"
    (parts / "day=1").mkdir(parents=True)
    FRAME.iloc[:3].to_parquet(parts / "one.parquet")
    FRAME.iloc[3:].to_parquet(parts / "day=1" / "two.parquet")
    FRAME.iloc[:2].to_csv(tmp_path / "x1.csv", index=False)
    FRAME.iloc[2:].to_csv(tmp_path / "x2.csv", index=False)
    con = duckdb.connect()
    con.register("frame", FRAME)
    con.execute("CREATE TABLE visits AS SELECT * FROM frame")
    sources: list[Any] = [
        FRAME,
        parts,  # a directory, recursively
        str(tmp_path / "parts" / "**" / "*.parquet"),  # a glob
        str(tmp_path / "x*.csv"),
        pl.from_pandas(FRAME).lazy(),  # written to a Parquet file by polars, then read
        ds.dataset(pa.Table.from_pandas(FRAME)),
        con.table("visits"),  # another connection's relation
        (con, "visits"),  # a connection and a table name
    ]
    want = [4.0, 2.0]
    for source in sources:
        assert counts(source) == want, type(source)
    assert con.execute("SELECT COUNT(*) FROM visits").fetchone() == (6,)  # still usable


def test_a_lazy_frame_is_streamed_to_a_file_not_collected_in_python(
    tmp_path: Path, no_noise: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (audit26): DuckDB's scan had polars collect the LazyFrame at each pass,
    # memory outside memory_limit that grew with its rows. It is written by polars'
    # streaming sink to a Parquet file under the spill folder, removed on close.
    pl = pytest.importorskip("polars")
    from gaussdp.release.engines import DuckDBEngine

    collected: list[tuple[int, int]] = []
    collect = pl.LazyFrame.collect

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        frame = collect(self, *args, **kwargs)
        collected.append(frame.shape)
        return frame

    monkeypatch.setattr(pl.LazyFrame, "collect", counting)
    lazy = pl.from_pandas(FRAME).lazy().with_columns(pl.col("minutes") * 2)
    assert counts(lazy) == [4.0, 2.0]
    assert [shape for shape in collected if shape[0] > 0] == []  # no row in Python
    spill = tmp_path / "spill"
    engine = DuckDBEngine(lazy, temp_directory=spill)
    try:
        (written,) = spill.glob("gaussdp-lazy-*/frame.parquet")
        assert engine.schema == {"user": "BIGINT", "page": "VARCHAR", "minutes": "DOUBLE"}
    finally:
        engine.close()
    assert not written.exists()
    # Types a Parquet file does not keep are refused by the schema, nothing written.
    for kind in (pl.Duration("us"), pl.Int128):
        odd = lazy.with_columns(pl.col("user").cast(kind).alias("odd"))
        with pytest.raises(TypeError, match=r"without Duration, Int128 or UInt128 .*\['odd'\]"):
            counts(odd)


def test_refused_inputs(tmp_path: Path) -> None:
    (tmp_path / "mixed").mkdir()
    FRAME.to_csv(tmp_path / "mixed" / "a.csv", index=False)
    FRAME.to_parquet(tmp_path / "mixed" / "b.parquet")
    with pytest.raises(ValueError, match="one kind"):
        counts(tmp_path / "mixed")
    with pytest.raises(FileNotFoundError, match="an existing file, directory or glob"):
        counts(str(tmp_path / "missing" / "*.csv"))  # a glob's folder must exist
    reader = pa.Table.from_pandas(FRAME).to_reader()
    with pytest.raises(TypeError, match="read only once"):
        counts(reader)
    (tmp_path / "t.json").write_text("{}")
    with pytest.raises(ValueError, match="tsv"):  # the message lists what is accepted
        counts(tmp_path / "t.json")


def test_duckdb_runs_at_most_one_thread_per_125_mb_of_its_memory_limit() -> None:
    # The SQL bounding path at memory_limit 32 MiB ran out of memory with 4 threads (2·10⁶
    # rows), and with one at 10⁷ rows: an EngineError after the reservation, whether it
    # happened depending on the table's size. DuckDB documents 125 MB a thread as its
    # minimum: a connection runs at most one thread per 125 MB, and a smaller limit is
    # refused when the Release is made, before anything is read or spent.
    from gaussdp.release.engines import THREAD_MEMORY, DuckDBEngine

    def threads(limit: int | str, asked: int | None) -> int:
        engine = DuckDBEngine(FRAME, memory_limit=limit, threads=asked)
        try:
            setting = engine._con.execute("SELECT current_setting('threads')")  # type: ignore[attr-defined]
            return int(setting.fetchone()[0])
        finally:
            engine.close()

    assert threads(THREAD_MEMORY, 4) == threads("128MiB", 4) == 1
    assert threads("250MB", 4) == 2
    assert 1 <= threads("250MB", None) <= 2  # DuckDB's default, all cores, capped
    assert threads("1GB", 16) == 8
    assert threads("4GB", 3) == 3
    for small in (32 * 2**20, THREAD_MEMORY - 1, "124MB", "100MiB"):
        with pytest.raises(ValueError, match="memory_limit must be at least 125 MB"):
            Release(
                FRAME,
                privacy_unit="user",
                budget=Budget(rho=1.0),
                max_groups_per_unit=1,
                max_rows_per_group=1,
                memory_limit=small,
            )
        with pytest.raises(ValueError, match="memory_limit must be at least 125 MB"):
            DuckDBEngine(FRAME, memory_limit=small)


def test_the_specs_duckdb_settings_reach_the_connection(tmp_path: Path) -> None:
    from gaussdp.release import load_spec, release_from_spec
    from gaussdp.release.core import _open

    examples = Path(__file__).parents[2] / "examples"
    spill = tmp_path / "spill"
    text = (examples / "visits.toml").read_text(encoding="utf-8")
    settings = f'memory_limit = "128MB"\ntemp_directory = "{spill}"\nthreads = 1\n'
    spec = tmp_path / "visits.toml"
    spec.write_text(settings + text.replace('memory_limit = "1GB"', ""), encoding="utf-8")
    release = release_from_spec(load_spec(spec), examples / "visits.csv")
    engine = _open(release)
    try:
        con = engine._con  # type: ignore[attr-defined]
        setting = "SELECT current_setting(?)"
        assert con.execute(setting, ["temp_directory"]).fetchone()[0] == str(spill)
        assert con.execute(setting, ["threads"]).fetchone()[0] == 1
        limit = con.execute(setting, ["memory_limit"]).fetchone()[0]
        assert limit.replace(" ", "") in {"128.0MB", "122.0MiB"}, limit
    finally:
        engine.close()
    # A directory the user named is theirs: closing does not remove it (DuckDB creates
    # it only when it spills); the default one is gaussdp's and is removed.
    default = _open(release_from_spec(load_spec(examples / "visits.toml"), examples / "visits.csv"))
    made = Path(default._tmp)  # type: ignore[attr-defined]
    assert made.is_dir()
    default.close()
    assert not made.exists()


def mixed_parquet(directory: Path) -> Path:
    """Parquet files that disagree: ``minutes`` text in one, ``user`` text in another, one
    file without ``minutes``; the same rows as :data:`MIXED_CSV` (text)."""
    directory.mkdir()
    pd.DataFrame({"user": [1, 2], "minutes": [10.0, 2.5]}).to_parquet(directory / "a.parquet")
    pd.DataFrame({"user": [3, 4], "minutes": ["abc", "7"]}).to_parquet(directory / "b.parquet")
    pd.DataFrame({"user": ["x", "5"], "minutes": [5.0, 1e30]}).to_parquet(directory / "c.parquet")
    pd.DataFrame({"user": [6]}).to_parquet(directory / "d.parquet")
    return directory


MIXED_CSV = "user,minutes\n1,10.0\n2,2.5\n3,abc\n4,7\nx,5.0\n5,1e30\n6,\n"


def mixed_sums(source: object, engine: str = "duckdb") -> list[float]:
    return (
        Release(
            source,
            privacy_unit="user",
            budget=Budget(rho=1.0),
            max_groups_per_unit=1,
            max_rows_per_group=1,
            engine=engine,
        )
        .sum("minutes", bounds=(0, 60))
        .count()
        .run()
        .frame["value"]
        .tolist()
    )


@pytest.mark.parametrize(
    ("minutes", "want"),
    [
        ([], [0.0, 0.0]),
        ([None, None], [0.0, 2.0]),
        ([None, 5], [5.0, 2.0]),
        ([None, "5"], [5.0, 2.0]),
        (["x", 5.5], [5.5, 2.0]),
    ],
)
def test_a_pandas_object_column_is_typed_by_its_dtype_not_its_values(
    minutes: list[object], want: list[float], no_noise: None, tmp_path: Path
) -> None:
    # DuckDB typed an object column from its values: a column of None (type NULL) was
    # refused, one int made it BIGINT and released, one string made it VARCHAR and
    # refused: one row decided refusal vs release. Now the dtype decides: summed, it is
    # refused (nothing charged) unless declared, then converted value by value.
    users = ["a", "b"][: len(minutes)]
    frame = pd.DataFrame({"user": users, "minutes": pd.Series(minutes, dtype=object)})
    ledger = Ledger(tmp_path / "b.db", total=Budget(rho=10.0))
    bounded = {"max_groups_per_unit": 1, "max_rows_per_group": 1}
    with pytest.raises(ValueError, match=r"^column 'minutes' must be numeric to be summed"):
        Release(frame, privacy_unit="user", budget=Budget(rho=1.0), **bounded).sum(
            "minutes", bounds=(0, 60)
        ).run(ledger=ledger)
    assert ledger.entries() == []
    declared = Release(
        frame,
        privacy_unit="user",
        budget=Budget(rho=1.0),
        column_types={"minutes": "DOUBLE"},
        **bounded,
    )
    assert declared.sum("minutes", bounds=(0, 60)).count().run().frame["value"].tolist() == want


def test_parquet_files_that_disagree_are_read_value_by_value(
    tmp_path: Path, no_noise: None
) -> None:
    # Whether one unit's file exists must not decide refusal or release: a value that
    # does not convert to the column's type is NULL, as in a CSV (docs/release.md).
    parts = mixed_parquet(tmp_path / "parts")
    (tmp_path / "t.csv").write_text(MIXED_CSV)
    want = mixed_sums(tmp_path / "t.csv")
    assert want == [10.0 + 2.5 + 7 + 5 + 60, 7.0]
    assert mixed_sums(parts) == want
    assert mixed_sums(str(parts / "[ab].parquet")) == [19.5, 4.0]
    assert mixed_sums(str(parts / "[ac].parquet")) == [77.5, 4.0]


SEVEN = [7, 7.0, np.int64(7), np.float32(7.0), Decimal("7.00"), Fraction(7), -0.0, 0]


def test_python_values_that_are_equal_are_one_unit(no_noise: None) -> None:
    # The text of 7.0 was '7.0' and of 7 was '7': one person of an object column was two
    # units, each bounded alone (sensitivity 2, accounted 1). Python calls them one value.
    frame = pd.DataFrame(
        {"user": pd.Series([*SEVEN, "x"], dtype=object), "page": ["a"] * 6 + ["b"] * 3}
    )
    assert counts(frame) == [1.0, 2.0]  # 7 in a; 0 (and -0.0) and 'x' in b


#: Values with no text (NULL), and one whose text is a unit of its own (10**400).
ODD = [[7], {"a": 1}, 10**5000, Decimal("sNaN"), b"\xff", "\udcff", {1}, 10**400]


@pytest.mark.parametrize("column", ["user", "page"])
@pytest.mark.parametrize("odd", ODD, ids=lambda v: type(v).__name__)
def test_one_odd_python_value_is_null_not_a_refusal(
    column: str, odd: object, no_noise: None
) -> None:
    # One row's value (a signalling NaN, bytes that are not UTF-8) refused the release,
    # and the error quoted the byte; its neighbour without the row was released.
    users, pages = ["u1", "u2", "u3", "u4"], ["a", "b", "a", "b"]
    frame = pd.DataFrame({"user": pd.Series(users[:3], dtype=object), "page": pages[:3]})
    (users if column == "user" else pages)[3] = odd
    assert counts(frame) == [2.0, 1.0]
    a_unit = column == "user" and odd is ODD[-1]
    want = [2.0, 2.0] if a_unit else [2.0, 1.0]
    with_odd = pd.DataFrame(
        {"user": pd.Series(users, dtype=object), "page": pd.Series(pages, dtype=object)}
    )
    assert counts(with_odd) == want


BOUNDED = {"max_groups_per_unit": 1, "max_rows_per_group": 1}


def test_a_category_column_is_read_as_its_values(no_noise: None) -> None:
    # DuckDB read it as ENUM('a', 'b', …): public keys were refused, and the message
    # listed every category (the data's distinct values).
    frame = pd.DataFrame({"user": [1, 2, 3], "page": ["a", "b", "a"]})
    categories = frame.astype({"page": "category", "user": "category"})
    assert counts(categories) == counts(frame) == [2.0, 1.0]
    binned = frame.assign(page=pd.cut([0.5, 1.5, 0.5], [0, 1, 2]))  # interval categories
    labels = Release(binned, privacy_unit="user", budget=Budget(rho=1.0), **BOUNDED)
    got = labels.count(by="page", keys=["(0, 1]", "(1, 2]"]).run().frame["value"]
    assert got.tolist() == [2.0, 1.0]
    secret = frame.assign(v=pd.Series(["1", "Jane Roe, HIV+", "1"], dtype="category"))
    with pytest.raises(ValueError, match="numeric to be summed") as caught:
        Release(secret, privacy_unit="user", budget=Budget(rho=1.0), **BOUNDED).sum(
            "v", bounds=(0, 1)
        ).run()
    assert "Jane" not in str(caught.value)


def test_an_enum_type_is_named_without_its_values() -> None:
    con = duckdb.connect()
    con.execute("CREATE TYPE mood AS ENUM ('Jane Roe, HIV+', 'a')")
    con.execute("CREATE TABLE t AS SELECT 1 AS user, 'a'::mood AS page")
    release = Release((con, "t"), privacy_unit="user", budget=Budget(rho=1.0), **BOUNDED)
    with pytest.raises(TypeError, match=r"got 'ENUM'$") as caught:
        release.count(by="page", keys=["a"]).run()
    with pytest.raises(ValueError, match=r"got 'ENUM'$"):
        Release((con, "t"), privacy_unit="user", budget=Budget(rho=1.0), **BOUNDED).sum(
            "page", bounds=(0, 1)
        ).run()
    assert "Jane" not in str(caught.value)


def test_a_connection_with_an_unfinished_result_is_refused_and_left_as_it_is(
    no_noise: None,
) -> None:
    # Once: "ResourceInUseException (message withheld)" while preparing the data. The
    # caller's result must survive: on DuckDB 2 any other statement is refused while it
    # is unfinished, and execute() would end it.
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i % 5 AS user, 'a' AS page FROM range(10) r(i)")
    pending = con.execute("SELECT * FROM range(100000)")
    assert pending.fetchone() == (0,)

    def count(source: object) -> Release:
        release = Release(source, privacy_unit="user", budget=Budget(rho=1.0), **BOUNDED)
        return release.count(by="page", keys=["a"])

    if int(duckdb.__version__.split(".")[0]) >= 2:
        release = count((con, "t"))
        with pytest.raises(
            ValueError,
            match=r"^source must be a \(connection, table\) whose connection has no "
            r"unfinished result from execute\(\), .* call connection\.complete\(\) or "
            r"connection\.abort\(\); or give \(connection\.cursor\(\), table\), .*\), "
            r"got 'a connection with an unfinished result'$",
        ):
            release.run()
        assert release.filter.spent == 0
        # A cursor is a second connection to the same database: the result is untouched.
        assert count((con.cursor(), "t")).run().frame["value"].tolist() == [5.0]
        assert pending.fetchone() == (1,)
        assert len(pending.fetchall()) == 100000 - 2
    pending.fetchall()  # read to its end (DuckDB 1.x: ended by the release's statements)
    assert count((con, "t")).run().frame["value"].tolist() == [5.0]


def per_unit_files(directory: Path, *, with_ten: bool) -> Path:
    """One Parquet file per unit; only unit 10's file has the columns ``v`` and ``k``."""
    directory.mkdir()
    for unit in range(10):
        pd.DataFrame({"id": [unit]}).to_parquet(directory / f"u{unit}.parquet")
    if with_ten:
        ten = pd.DataFrame({"id": [10], "v": [0.75], "k": ["a"]})
        ten.to_parquet(directory / "u10.parquet")
    return directory


def sums_by_k(source: object, engine: str = "duckdb") -> list[float]:
    release = Release(
        source,
        privacy_unit="id",
        budget=Budget(rho=1.0),
        max_groups_per_unit=1,
        max_rows_per_group=1,
        engine=engine,
    )
    return release.sum("v", bounds=(0, 1), by="k", keys=["a"]).run().frame["value"].tolist()


def test_a_column_only_one_file_has_is_null_without_that_file(
    tmp_path: Path, no_noise: None
) -> None:
    # Without unit 10's file the columns did not exist and the release was refused; with
    # it the release ran: one unit's file decided refusal vs release (docs/release.md).
    without = per_unit_files(tmp_path / "without", with_ten=False)
    with_ten = per_unit_files(tmp_path / "with", with_ten=True)
    assert sums_by_k(without) == [0.0]
    assert sums_by_k(str(without / "*.parquet")) == [0.0]
    assert sums_by_k(with_ten) == [0.75]
    # One file is the table itself: its schema is the table's, a missing column refused.
    with pytest.raises(ValueError, match="must be a column among"):
        sums_by_k(without / "u0.parquet")


def test_a_summed_text_column_of_a_folder_is_read_per_value(tmp_path: Path, no_noise: None) -> None:
    # Absent from every file, 'v' read as NULL and the release ran; as text in one unit's
    # file it was refused: that file decided refusal vs release. Now read per value.
    parts = per_unit_files(tmp_path / "parts", with_ten=False)
    assert sums_by_k(parts) == [0.0]
    pd.DataFrame({"id": [10], "v": ["0.75"], "k": ["a"]}).to_parquet(parts / "u10.parquet")
    assert sums_by_k(parts) == [0.75]
    pd.DataFrame({"id": [11], "v": ["x"], "k": ["a"]}).to_parquet(parts / "u11.parquet")
    assert sums_by_k(parts) == [0.75]  # text in every file that has it: 'x' is NULL
    # One file is the table itself: its text column is refused by its type.
    with pytest.raises(ValueError, match="must be numeric to be summed"):
        sums_by_k(parts / "u10.parquet")


@pytest.mark.parametrize(
    ("k", "keys", "want"), [(5, ["a"], 0.0), ("5", [5], 0.75), (True, ["a"], 0.0)]
)
def test_a_key_column_of_a_folder_takes_its_public_keys_type(
    k: object, keys: list[object], want: float, tmp_path: Path, no_noise: None
) -> None:
    # Absent from every file, 'k' read as its keys' type and the release ran; of another
    # type in one unit's file, the keys were refused: that file decided. Now per value.
    parts = per_unit_files(tmp_path / "parts", with_ten=False)
    pd.DataFrame({"id": [10], "v": [0.75], "k": [k]}).to_parquet(parts / "u10.parquet")
    release = Release(
        parts,
        privacy_unit="id",
        budget=Budget(rho=1.0),
        max_groups_per_unit=1,
        max_rows_per_group=1,
    )
    assert release.sum("v", bounds=(0, 1), by="k", keys=keys).run().frame["value"].tolist() == [
        want
    ]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_0_byte_file_of_a_folder_holds_no_rows(
    suffix: str, tmp_path: Path, no_noise: None
) -> None:
    # One empty file (one unit's, say) refused the whole folder; it now adds no rows.
    parts = tmp_path / "parts"
    parts.mkdir()
    if suffix == ".csv":
        FRAME.to_csv(parts / "a.csv", index=False)
    else:
        FRAME.to_parquet(parts / "a.parquet")
    want = counts(parts)
    (parts / f"b{suffix}").write_bytes(b"")
    assert counts(parts) == counts(str(parts / f"*{suffix}")) == want == [4.0, 2.0]
    with pytest.raises(ValueError, match="non-empty files"):
        counts(str(parts / f"b{suffix}"))


def count_and_sum(source: object, engine: str = "duckdb") -> list[float]:
    """Counts by page (keys a, b) and sums of ``minutes`` by page (key a) of ``source``."""
    release = frame_release(source, engine).count(by="page", keys=["a", "b"])
    release.sum("minutes", bounds=(0, 10), by="page", keys=["a"])
    return [float(v) for v in release.run().frame["value"]]


def folders_of_no_rows(root: Path) -> dict[str, Path | str]:
    """Folders and globs of ``root`` none of whose files adds a row, by what they hold."""
    root.mkdir()
    whole = gzip.compress(b"user,page,minutes\n1,a,1.0\n2,b,1.0\n")
    files = {
        "0-byte CSVs": {"a.csv": b"", "b.csv": b""},
        "0-byte Parquet": {"a.parquet": b""},
        "invalid headers": bad_headers(),
        "a truncated .gz": {"a.csv.gz": whole[:-5]},
        "header only": {"a.csv": b"user,page,minutes\n"},
        "no data file": {},
    }
    sources: dict[str, Path | str] = {}
    for what, named in files.items():
        folder = root / what.replace(" ", "-")
        folder.mkdir()
        for name, data in named.items():
            (folder / name).write_bytes(data)
        sources[what] = folder
    sources["a glob matching no file"] = str(root / "no-data-file" / "*.csv")
    return sources


def test_a_folder_whose_files_add_no_rows_is_released_as_an_empty_table(
    tmp_path: Path, no_noise: None
) -> None:
    # A folder or glob of only 0-byte files, of files whose headers are not valid, or
    # (new) of no data file, was refused while a header-only CSV was released: one
    # unit's file (whether it exists) decided refusal vs release, and the refusal told
    # that the table is empty. Now it is an empty table; the columns the release
    # needs, which no file has, are NULL (docs/release.md).
    for what, source in folders_of_no_rows(tmp_path / "folders").items():
        assert count_and_sum(source) == [0.0, 0.0, 0.0], what
    # A file named alone is the table: one that cannot be read as one is still refused.
    with pytest.raises(ValueError, match="non-empty files"):
        count_and_sum(tmp_path / "folders" / "0-byte-CSVs" / "a.csv")
    with pytest.raises(ValueError, match="compressed data is whole"):
        count_and_sum(tmp_path / "folders" / "a-truncated-.gz" / "a.csv.gz")


def test_a_csv_without_a_header_line_is_refused_without_printing_its_first_row(
    tmp_path: Path,
) -> None:
    # Its first row is read as the names: the refusal says how many, not which (an audit
    # found "privacy_unit must be a column among ['7', 'home', 'secret42']").
    path = tmp_path / "rows.csv"
    path.write_text("7,home,secret42\n8,a,2.5\n")
    with pytest.raises(ValueError, match="among the 3 names of the CSV header line") as error:
        count_and_sum(path)
    assert "secret42" not in str(error.value)
    assert "home" not in str(error.value)


def test_a_column_no_csv_file_of_a_folder_has_is_null(tmp_path: Path, no_noise: None) -> None:
    # As for Parquet folders: only u.csv (one unit's) has 'minutes'; without it the
    # folder's release was refused ("must be a column among ['page', 'user']").
    parts = tmp_path / "parts"
    parts.mkdir()
    FRAME.drop(columns="minutes").to_csv(parts / "a.csv", index=False)
    (parts / "u.csv").write_text("user,page,minutes\n9,a,4.5\n")
    assert count_and_sum(parts) == [5.0, 2.0, 4.5]
    (parts / "u.csv").unlink()
    assert count_and_sum(parts) == [4.0, 2.0, 0.0]
    with pytest.raises(ValueError, match="column among"):  # a file named alone is the table
        count_and_sum(parts / "a.csv")


def gzip_not_whole(data: bytes) -> dict[str, bytes]:
    """``data`` gzipped, then spoilt in each way a gzipped file can be, by name."""
    whole = gzip.compress(data)
    flipped, crc = bytearray(whole), bytearray(whole)
    flipped[len(whole) // 2] ^= 0xFF
    crc[-6] ^= 0xFF  # the CRC-32 in the trailer
    return {
        "truncated": whole[: len(whole) // 2],
        "no trailer": whole[:-8],
        "a flipped byte": bytes(flipped),
        "a wrong CRC": bytes(crc),
        "trailing text": whole + b"user,page\n",
        "trailing zeros": whole + bytes(64),
    }


def unit_rows(first: int, count: int) -> bytes:
    """A CSV of FRAME's columns: units ``first`` … on page b, one row each."""
    rows = "".join(f"{u},b,1.0\n" for u in range(first, first + count))
    return ("user,page,minutes\n" + rows).encode()


def test_a_gzipped_csv_that_is_not_whole_holds_no_rows(tmp_path: Path, no_noise: None) -> None:
    # A truncated .gz, trailing bytes or zeros failed the whole read on DuckDB (one
    # file, one unit's, refused the folder); DuckDB read a file with a flipped byte in
    # part (28,537 of 50,000 lines, no error) and one with a wrong CRC whole. Each is
    # now left out whole, as a file whose header is not valid is.
    parts = tmp_path / "parts"
    parts.mkdir()
    FRAME.to_csv(parts / "a.csv", index=False)
    want = count_and_sum(parts)
    data = unit_rows(100, 50_000)
    for what, spoilt in gzip_not_whole(data).items():
        (parts / "u.csv.gz").write_bytes(spoilt)
        assert count_and_sum(parts) == count_and_sum(str(parts / "*")) == want, what
        with pytest.raises(ValueError, match="gzipped CSV whose compressed data is whole"):
            count_and_sum(parts / "u.csv.gz")
    # Whole gzip members one after another are one file, read whole.
    (parts / "u.csv.gz").write_bytes(gzip.compress(data[:1000]) + gzip.compress(data[1000:]))
    assert count_and_sum(parts) == [want[0], want[1] + 50_000, want[2]]


def header_is_a_data_line(parts: Path) -> Path:
    """A folder of FRAME's CSV, then a file whose header is that CSV's line ``1,a,1.0``."""
    parts.mkdir()
    FRAME.to_csv(parts / "a.csv", index=False)
    assert "1,a,1.0\n" in (parts / "a.csv").read_text()
    (parts / "u.csv").write_text("1,a,1.0\n6,b,1.0\n")
    return parts


def test_a_files_header_drops_no_other_files_line(tmp_path: Path, no_noise: None) -> None:
    # Every file's header was dropped from every file: u.csv's header '1,a,1.0' dropped
    # a.csv's row '1,a,1.0' (another unit's row): one unit's file changed others' data.
    parts = header_is_a_data_line(tmp_path / "parts")
    assert counts(parts) == counts(parts / "a.csv") == [4.0, 2.0]
    with duckdb.connect() as con:
        rows = read_csv_text(con, [str(parts / "a.csv"), str(parts / "u.csv")]).fetchall()
    assert rows.count(("1", "a", "1.0", None, None, None)) == 1
    assert (None, None, None, "6", "b", "1.0") in rows


def test_csv_files_whose_headers_differ_are_read_by_name(tmp_path: Path, no_noise: None) -> None:
    # One file with its columns swapped or one more column refused the whole folder.
    parts = tmp_path / "parts"
    parts.mkdir()
    FRAME.to_csv(parts / "a.csv", index=False)
    want = counts(parts)
    extra = pd.DataFrame({"page": ["b", "a"], "note": ["x", "y"], "user": [9, 10]})
    extra.to_csv(parts / "b.csv", index=False)
    assert counts(parts) == [want[0] + 1, want[1] + 1] == [5.0, 3.0]
    assert counts(tmp_path / "parts" / "a.csv") == want
    lacking = pd.DataFrame({"user": [11]})  # no page: NULL, its row is in no group
    lacking.to_csv(parts / "c.csv", index=False)
    assert counts(parts) == [5.0, 3.0]


def frame_folder(tmp_path: Path) -> tuple[Path, list[float]]:
    """A folder ``parts`` holding FRAME as ``a.csv``, and its counts."""
    parts = tmp_path / "parts"
    parts.mkdir()
    FRAME.to_csv(parts / "a.csv", index=False)
    return parts, counts(parts)


def test_a_tsv_file_of_a_csv_folder_is_read_by_its_own_separator(
    tmp_path: Path, no_noise: None
) -> None:
    # One unit's .tsv file among .csv files refused the whole folder ("CSV files of one
    # kind"), before the reservation: that file decided refusal vs release (rev28-rel).
    # Each file is split by its own name's separator; a comma in a .tsv field is text.
    parts, want = frame_folder(tmp_path)
    (parts / "b.tsv").write_text("page\tuser\nb\t12\na,b\t13\n")
    (parts / "c.tsv.gz").write_bytes(gzip.compress(b"user\tpage\n14\ta\n"))
    assert counts(parts) == [want[0] + 1, want[1] + 1] == [5.0, 3.0]
    assert counts(parts / "b.tsv") == [0.0, 1.0]


def bad_headers() -> dict[str, bytes]:
    """One CSV file per way a file's own header can be invalid, each with a row (unit 9 on
    page b) that must not be read."""
    from gaussdp.release.engines import CSV_MAX_COLUMNS

    wide = ",".join(["user", "page", *(f"c{i}" for i in range(CSV_MAX_COLUMNS - 1))])
    return {
        "repeats.csv": b"user,page,page\n9,b,b\n",
        "too-wide.csv": f"{wide}\n9,b{',x' * (CSV_MAX_COLUMNS - 1)}\n".encode(),
        "not-utf8.csv": b"us\xe9r,page\n9,b\n",
        "two-lines.csv": b'"user\n,page"\n9,b\n',
    }


def test_a_csv_file_whose_own_header_is_invalid_holds_no_rows(
    tmp_path: Path, no_noise: None
) -> None:
    # A file whose header repeated a name (when the headers differed) refused the whole
    # folder, and so did more than 1,000 names in the merged header: one file (one unit's)
    # decided refusal vs release. Each file's header is now judged alone.
    from gaussdp.release.engines import CSV_MAX_COLUMNS

    parts, want = frame_folder(tmp_path)
    for name, data in bad_headers().items():
        (parts / name).write_bytes(data)
        assert counts(parts) == counts(str(parts / "*.csv")) == want == [4.0, 2.0], name
        with pytest.raises(ValueError, match=name):  # named alone, a file is the table
            counts(parts / name)
        (parts / name).unlink()
    # A valid file of 1,000 columns, with a.csv's 3: 1,001 names in all, read by name.
    names = ["user", "page", *(f"c{i}" for i in range(CSV_MAX_COLUMNS - 2))]
    (parts / "wide.csv").write_text(",".join(names) + "\n9,b" + ",x" * (CSV_MAX_COLUMNS - 2) + "\n")
    assert counts(parts) == [4.0, 3.0]
    # A header that repeats a name is refused as the only file too (which column is which
    # is ambiguous), with its reason.
    (parts / "r.csv").write_bytes(b"user,page,page\n1,a,a\n")
    with pytest.raises(ValueError, match="a CSV whose header repeats no name, got 'r.csv'$"):
        counts(parts / "r.csv")
