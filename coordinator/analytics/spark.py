"""Starting Spark for the report: ``local[*]`` by default, or any master URL
(``spark://HOST:PORT`` for a standalone cluster).

Loopback rules for this machine and for tests (see docs/analytics.md): ``SPARK_LOCAL_IP`` is set
to 127.0.0.1 unless the environment says otherwise, and for a local master or a master on a
loopback address the driver binds and advertises 127.0.0.1. For a remote cluster, set
``SPARK_LOCAL_IP`` / ``spark.driver.host`` to an address the executors can reach (``--conf``).
Executors run ``PYSPARK_PYTHON`` (default: this interpreter), which must have
kip848-coordinator installed (the what-if job runs the project's assignors there).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["AnalyticsError", "java_available", "start_session"]


class AnalyticsError(Exception):
    """The report cannot run (no Java, bad input, Spark failed). One clear line for the CLI."""


def java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return True
    return shutil.which("java") is not None


def _loopback(master: str) -> bool:
    if master.startswith("local"):
        return True
    host = master.split("://", 1)[-1].split(":", 1)[0]
    return host in ("127.0.0.1", "localhost", "::1", "[::1]")


def start_session(
    master: str = "local[*]",
    *,
    app_name: str = "kip848-analytics",
    conf: Mapping[str, str] | None = None,
    local_dir: str | None = None,
) -> Any:
    """A SparkSession for the report (``getOrCreate``: an active session is reused)."""
    if not java_available():
        raise AnalyticsError(
            "Spark needs a Java 17 runtime and none was found (no JAVA_HOME, no java on PATH);"
            " on Debian: apt-get install openjdk-17-jre-headless (scripts/bootstrap does it)"
        )
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - the analytics extra is missing
        raise AnalyticsError(
            f"pyspark is not installed ({exc}); install kip848-coordinator[analytics]"
        ) from exc
    cores = os.cpu_count() or 2
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # The report is many short jobs over modest data: per-job overhead dominates, not
        # throughput (measured: bench/analytics.py). Adaptive execution splits every query
        # into one job per shuffle stage and re-plans between them; whole-stage code
        # generation compiles each plan with Janino before running it; C2 JIT compilation and
        # G1's threads compete with the work on a small machine. Off for this workload (the
        # scans of the whole journal turn code generation on for themselves: common.compiled).
        .config("spark.sql.shuffle.partitions", str(max(2, cores)))
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.codegen.wholeStage", "false")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "2g")
        .config("spark.executorEnv.PYSPARK_PYTHON", os.environ["PYSPARK_PYTHON"])
    )
    if _loopback(master):
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    if local_dir:
        builder = builder.config("spark.local.dir", local_dir).config(
            "spark.sql.warehouse.dir", os.path.join(local_dir, "warehouse")
        )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
