"""A real Prometheus server (Debian's ``prometheus``) for tests: 127.0.0.1 only, a temporary
config and data directory, bounded waits, stopped and reaped by ``close()``.

Usage::

    with PrometheusServer(tmp_path, targets=["127.0.0.1:PORT"]) as prom:
        value = prom.wait_for('kip848_offset_commits_total{error="NONE"}', lambda v: v >= 3)
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

START_TIMEOUT_S = 30.0
SCRAPE_INTERVAL = "1s"


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


LISTENING = re.compile(r'msg="Listening on" address=(127\.0\.0\.1:\d+)')
"""Prometheus's log line naming the port it bound (``--web.listen-address=127.0.0.1:0``)."""


class PrometheusServer:
    def __init__(self, workdir: Path, *, targets: list[str], job: str = "kip848") -> None:
        binary = prometheus_binary()
        if binary is None:
            raise RuntimeError("prometheus is not installed (bash scripts/bootstrap installs it)")
        self.dir = workdir / "prometheus"
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "prometheus.yml"
        config.write_text(
            json.dumps(  # YAML is a superset of JSON
                {
                    "global": {
                        "scrape_interval": SCRAPE_INTERVAL,
                        "evaluation_interval": SCRAPE_INTERVAL,
                    },
                    "scrape_configs": [
                        {
                            "job_name": job,
                            "scrape_interval": SCRAPE_INTERVAL,
                            "scrape_timeout": SCRAPE_INTERVAL,
                            "static_configs": [{"targets": targets}],
                        }
                    ],
                }
            )
        )
        self.url = ""  # http://127.0.0.1:PORT once it listens (_wait_ready)
        self.log_path = self.dir / "prometheus.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                "--web.listen-address=127.0.0.1:0",
                "--web.enable-lifecycle",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log_text()}")
            if not self.url:
                found = LISTENING.search(self.log_path.read_text(errors="replace"))
                if found is None:
                    time.sleep(0.1)
                    continue
                self.url = f"http://{found.group(1)}"
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"prometheus not ready within {START_TIMEOUT_S} s: {self.log_text()}")

    def log_text(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    # ------------------------------------------------------------------ HTTP API

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=5) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        """An instant query: [(labels, value)] (vector results)."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return [(item["metric"], float(item["value"][1])) for item in data["result"]]

    def targets_up(self) -> bool:
        data = self.api("targets")
        active = data["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)

    def wait_for(
        self, expr: str, accept: Callable[[float], bool], timeout_s: float = 30.0
    ) -> float:
        """Poll ``expr`` (one series) until ``accept(value)``; returns the value."""
        deadline = time.monotonic() + timeout_s
        last: list[tuple[dict[str, str], float]] = []
        while time.monotonic() < deadline:
            last = self.query(expr)
            if len(last) == 1 and accept(last[0][1]):
                return last[0][1]
            time.sleep(0.25)
        raise AssertionError(f"{expr}: no accepted value within {timeout_s} s; last {last}")

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self._log.close()

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
