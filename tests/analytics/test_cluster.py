"""The same report on a real Spark standalone cluster (a master and a worker started from the
pyspark distribution on 127.0.0.1) gives the same tables as ``local``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from coordinator.analytics.report import TABLES

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1800)]


def _wait_for(path: Path, text: str, proc: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            pytest.fail(f"{proc.args[2]} exited: {path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.5)
    pytest.fail(f"no {text!r} within {seconds} s: {path.read_text(errors='replace')[-2000:]}")


def _rows(directory: Path) -> list[str]:
    table = pq.read_table(directory)
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in table.to_pylist())


def test_standalone_cluster_gives_the_same_tables_as_local(
    report: Any, workload: dict[str, Any], tmp_path: Path
) -> None:
    import pyspark

    home = Path(pyspark.__file__).parent
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
    }
    spark_class = str(home / "bin" / "spark-class")
    master_log = tmp_path / "master.log"
    worker_log = tmp_path / "worker.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(master_log, "wb") as out:
            procs.append(
                subprocess.Popen(
                    [
                        spark_class,
                        "org.apache.spark.deploy.master.Master",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        "0",  # any free port: the master logs the one it bound
                        "--webui-port",
                        "0",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
        _wait_for(master_log, "I have been elected leader", procs[0], 120)
        started = re.search(
            r"Starting Spark master at (spark://127\.0\.0\.1:\d+)", master_log.read_text()
        )
        assert started is not None, master_log.read_text()[-2000:]
        url = started.group(1)
        with open(worker_log, "wb") as out:
            procs.append(
                subprocess.Popen(
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        url,
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        "2",
                        "--memory",
                        "2g",
                        "--webui-port",
                        "0",
                        "--work-dir",
                        str(tmp_path / "work"),
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
        _wait_for(worker_log, "Successfully registered with master", procs[1], 120)
        out_dir = tmp_path / "cluster-report"
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "coordinator.cli",
                "analytics",
                "report",
                "--input",
                str(workload["parquet"]),
                "--out",
                str(out_dir),
                "--master",
                url,
                "--conf",
                "spark.executor.memory=1g",
                "--conf",
                "spark.sql.shuffle.partitions=3",
            ],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )
        assert p.returncode == 0, p.stderr[-3000:]
        assert "Report:" in p.stdout
        # The job really ran on the cluster's executor.
        assert "Launching executor" in master_log.read_text(errors="replace")
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
    for name in TABLES:
        assert _rows(out_dir / "tables" / name) == _rows(report.tables[name]), name
    assert (out_dir / "report.html").stat().st_size > 10_000
