"""A release on a real Spark standalone cluster: a master and two workers on 127.0.0.1.

The cluster is started by ``scripts/spark-cluster`` (the script users run) and
stopped at teardown. The release runs in a child Python process whose
SparkSession connects to the master (one SparkContext per process: the other
Spark tests keep their ``local[2]`` session). The child records, for every
query the Spark adapter runs, the physical plan and the number of rows that
came back to the driver; the test checks that the aggregation is planned as a
distributed (shuffled) aggregation with nothing broadcast or collected from
the table, that only the per-group rows reach the driver, that the work ran
on the two workers' executors, and that the pre-noise aggregates equal
DuckDB's on the same Parquet file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from release_reference import arrow_table, make_rows
from test_spark import build, normalise

from gaussdp.random import ChaCha20Random
from gaussdp.release.core import _aggregate

pytestmark = pytest.mark.spark

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "spark-cluster"
SEED = 12
# Bounds on a loaded machine (JVM start-up of a master, two workers and executors).
START_TIMEOUT_S = 300
RELEASE_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The master URL of a fresh two-worker cluster; its processes are stopped afterwards."""
    state = tmp_path_factory.mktemp("spark-cluster")
    env = {**os.environ, "PYTHON": sys.executable, "SPARK_CLUSTER_TIMEOUT": str(START_TIMEOUT_S)}
    args = ["--dir", str(state), "--workers", "2", "--memory", "512m"]
    try:
        started = subprocess.run(
            [str(SCRIPT), "start", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=3 * START_TIMEOUT_S,
            check=False,
        )
        assert started.returncode == 0, started.stderr
        yield started.stdout.strip()
    finally:
        subprocess.run([str(SCRIPT), "stop", *args], env=env, timeout=120, check=False)
        assert not list(state.glob("*.pid"))


def test_release_on_standalone_cluster(cluster: str, tmp_path: Path) -> None:
    assert cluster.startswith("spark://127.0.0.1:")
    rows = make_rows()
    # NaN/NULL: keep only NULLs so that every input route sees the same values.
    table = arrow_table([r for r in rows if r["minutes"] is None or r["minutes"] == r["minutes"]])
    path = tmp_path / "visits.parquet"
    pq.write_table(table, path)
    out = tmp_path / "child.json"
    child = subprocess.run(
        [sys.executable, __file__, cluster, str(path), str(out)],
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=RELEASE_TIMEOUT_S,
        check=False,
        cwd=tmp_path,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    got = json.loads(out.read_text())

    # The work ran on the cluster: two executors (one per worker) besides the driver,
    # all on loopback.
    assert got["master"] == cluster
    assert len(got["executors"]) == 2
    assert got["hosts"] == ["127.0.0.1"]

    # Same pre-noise aggregates as DuckDB on the same file and salt.
    _, duck = _aggregate(build(path, "duckdb"), ChaCha20Random(SEED))
    duck = json.loads(json.dumps(duck))
    assert normalise(got["aggregates"]) == normalise(duck)

    # Only per-group rows came back to the driver: the validation pass returns one row
    # (a COUNT per column) and each release query its groups, never the table's rows.
    release_rows = [len(r) for r in got["aggregates"]]
    assert got["returned"] == [1, *release_rows]
    assert sum(release_rows) < table.num_rows / 10
    for plan in got["plans"]:
        assert "FileScan parquet" in plan or "Scan parquet" in plan
        # A distributed aggregation: partial aggregates shuffled to the final ones...
        assert "Exchange hashpartitioning" in plan or "Exchange SinglePartition" in plan
        # ...and no stage that gathers rows to the driver to ship them back out.
        for gather in ("BroadcastExchange", "CollectLimit", "SubqueryBroadcast"):
            assert gather not in plan


def _child(master: str, path: str, out: str) -> None:
    """Connect to ``master``, run the engine part of a release, record what the driver got."""
    from pyspark.sql import SparkSession

    from gaussdp.release.engines import SparkEngine

    spark = (
        SparkSession.builder.master(master)
        .appName("gaussdp-cluster-test")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    plans: list[str] = []
    returned: list[int] = []
    collect = SparkEngine._collect  # what query() and columns() both bring to the driver

    def recording(self: SparkEngine, sql: str, action: str) -> tuple[list[Any], int]:
        plans.append(str(self._spark.sql(sql)._jdf.queryExecution().executedPlan().toString()))
        rows, width = collect(self, sql, action)
        returned.append(len(rows))
        return rows, width

    SparkEngine._collect = recording  # type: ignore[method-assign]
    try:
        _, aggregates = _aggregate(build(path, "spark"), ChaCha20Random(SEED))
        context = spark.sparkContext._jsc.sc()
        executors = str(context.getExecutorIds().mkString(",")).split(",")  # not the driver
        hosts = {str(i.host()) for i in context.statusTracker().getExecutorInfos()}
        payload = {
            "master": spark.sparkContext.master,
            "aggregates": aggregates,
            "returned": returned,
            "plans": plans,
            "executors": executors,
            "hosts": sorted(hosts),
        }
        Path(out).write_text(json.dumps(payload, default=str))
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    _child(*sys.argv[1:4])
