"""Fixtures for gaussdp.release: small tables, a zero-noise seam, one Spark session."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from gaussdp.release import _noise


@pytest.fixture
def no_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test-only seam: every draw of the release path returns zeros."""

    def zeros(sigma2: Any, size: int, rng: Any) -> np.ndarray[Any, Any]:
        return np.zeros(size, dtype=np.int64)

    monkeypatch.setattr(_noise, "draw", zeros)


@pytest.fixture(params=["sql", "auto"])
def bounding(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Run the test with DuckDB's SQL bounding, then with its default (the compiled path
    where a grouping allows it; ``GAUSSDP_BOUNDING``). Returns the path each grouping took
    (``DuckDBEngine.bounded_by`` of every engine closed during the test)."""
    from gaussdp.release.engines import DuckDBEngine

    monkeypatch.setenv("GAUSSDP_BOUNDING", request.param)
    paths: list[str] = []
    close = DuckDBEngine.close

    def closing(engine: DuckDBEngine) -> None:
        paths.extend(engine.bounded_by)
        close(engine)

    monkeypatch.setattr(DuckDBEngine, "close", closing)
    return paths


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One local Spark session for all Spark tests (ENGINES.md: start it once)."""
    from pyspark import sql as pyspark_sql  # the spark extra; `make test` installs it

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        pyspark_sql.SparkSession.builder.master("local[2]")
        .appName("gaussdp-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
