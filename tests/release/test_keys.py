"""Public keys are normalised once to the column's type: no cell is released twice."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gaussdp.budget import Budget
from gaussdp.release import Ledger, Release, release_from_spec
from gaussdp.release.keys import typed_keys

BUDGET = Budget(epsilon=1.0, delta=1e-6)


def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "b.db", total=Budget(epsilon=5.0, delta=1e-5))


def counts(source: object, keys: list[Any], by: str = "k") -> dict[Any, float]:
    frame = (
        Release(
            source, privacy_unit="u", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
        )
        .count(by=by, keys=keys)
        .run()
        .frame
    )
    return dict(zip(frame[by], frame["value"], strict=True))


def test_int_and_string_one_is_refused_before_spending(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    frame = pd.DataFrame({"u": [1, 2], "k": [1, 2]})
    release = Release(
        frame, privacy_unit="u", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
    ).count(by="k", keys=[1, "1"])
    with pytest.raises(TypeError, match=r"keys for column 'k' \(BIGINT\) must be integers"):
        release.run(ledger=book)
    assert book.entries() == []


def test_string_column_refuses_an_int_key(tmp_path: Path) -> None:
    frame = pd.DataFrame({"u": [1, 2], "k": ["1", "2"]})
    release = Release(
        frame, privacy_unit="u", budget=BUDGET, max_groups_per_unit=1, max_rows_per_group=1
    ).count(by="k", keys=["1", 1])
    book = ledger(tmp_path)
    with pytest.raises(TypeError, match="must be strings"):
        release.run(ledger=book)
    assert book.entries() == []


def test_toml_date_and_string_are_one_cell(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("u,day\n1,2026-03-02\n2,2026-03-03\n")
    spec = {
        "privacy_unit": "u",
        "max_groups_per_unit": 1,
        "max_rows_per_group": 1,
        "budget": {"epsilon": 1.0, "delta": 1e-6},
        # What TOML's `keys = [2026-03-02, "2026-03-02"]` parses to.
        "query": [{"statistic": "count", "by": "day", "keys": [dt.date(2026, 3, 2), "2026-03-02"]}],
    }
    book = ledger(tmp_path)
    with pytest.raises(ValueError, match="these two are one cell"):
        release_from_spec(spec, data).run(ledger=book)
    assert book.entries() == []


def test_converted_keys_match_the_engine_values(no_noise: None) -> None:
    frame = pd.DataFrame(
        {
            "u": range(6),
            "k": np.array([0.1, 0.1, 0.1, 0.7, 0.7, 2.5], dtype=np.float32),
            "n": [5, 5, 5, 5, 7, 7],
            "day": pd.to_datetime(["2026-03-02"] * 4 + ["2026-03-03"] * 2).date,
        }
    )
    # A float32 column: 0.1 is matched as float32(0.1), the value the column holds.
    assert counts(frame, [0.1, 0.7, 9.0]) == {0.1: 3, 0.7: 2, 9.0: 0}
    assert counts(frame, [5.0, 7], by="n") == {5.0: 4, 7: 2}  # integral floats
    got = counts(frame, ["2026-03-02", dt.date(2026, 3, 3)], by="day")
    assert got == {"2026-03-02": 4, dt.date(2026, 3, 3): 2}


@pytest.mark.parametrize(
    ("keys", "types", "error", "match"),
    [
        ([(1.5,)], ["INTEGER"], TypeError, "must be integers"),
        ([(True,)], ["BIGINT"], TypeError, "must be integers"),
        ([(float("nan"),)], ["DOUBLE"], TypeError, "not NaN"),
        ([(1e39,)], ["FLOAT"], TypeError, "float32"),
        ([("x",)], ["DATE"], TypeError, "ISO date"),
        ([(1,)], ["STRUCT(a INTEGER)"], TypeError, "to take public keys"),
        ([(1.0,), (1,)], ["double"], ValueError, "one cell"),  # Spark's type names too
        ([("a", 1), ("a", 1.0)], ["string", "bigint"], ValueError, "one cell"),
    ],
)
def test_refusals(keys: list[Any], types: list[str], error: type[Exception], match: str) -> None:
    columns = [f"c{i}" for i in range(len(types))]
    with pytest.raises(error, match=match):
        typed_keys(keys, columns, types)
