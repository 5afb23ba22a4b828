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
