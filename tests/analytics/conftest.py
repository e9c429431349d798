"""Fixtures of the analytics tests: one SparkSession for the whole run (starting the JVM
costs seconds; pytest-xdist must stay away from these tests), and stores written by the
workload generator (the real runtime on virtual time)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from coordinator.analytics.spark import java_available, start_session

    if not java_available():  # pragma: no cover - scripts/bootstrap installs Java 17
        pytest.fail("Java 17 is needed for the Spark tests (scripts/bootstrap installs it)")
    local = tmp_path_factory.mktemp("spark-local")
    session = start_session(
        "local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g"},
        local_dir=str(local),
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def workload(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A generated store (12 groups, 20 virtual minutes; half of them classic: eager and
    cooperative, staying classic, upgraded, one downgraded again) and its export."""
    from coordinator.analytics.export import export_journal
    from coordinator.analytics.workload import WorkloadOptions, generate

    base = tmp_path_factory.mktemp("workload")
    opts = WorkloadOptions(
        seed=10, groups=12, duration_s=1200, events_per_group_hour=12.0, classic_fraction=0.5
    )
    gen = generate(str(base / "store"), opts)
    result = export_journal(base / "store", base / "journal.parquet")
    return {
        "store": base / "store",
        "parquet": base / "journal.parquet",
        "gen": gen,
        "info": result.info,
    }


@pytest.fixture(scope="session")
def report(spark: Any, workload: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The report of the generated workload, computed by the session's local Spark."""
    from coordinator.analytics.report import run_report

    return run_report(workload["parquet"], tmp_path_factory.mktemp("report"), spark=spark)


def chromium() -> str:
    path = "/usr/bin/chromium"
    if not Path(path).exists():  # pragma: no cover - scripts/bootstrap installs it
        pytest.fail("Debian's chromium is needed (scripts/bootstrap installs it)")
    return path
