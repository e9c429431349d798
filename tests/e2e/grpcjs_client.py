"""grpc-js, an independent gRPC implementation (npm ``@grpc/grpc-js``, installed by
scripts/bootstrap from ``tests/e2e/grpcjs/package-lock.json``), as a client of a real server:
``grpcjs/driver.js`` runs in Node and takes one JSON command a line; :class:`GrpcJs` sends
them and reads the results, every wait bounded."""

from __future__ import annotations

import base64
import itertools
import json
import os
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "grpcjs" / "driver.js"
PROTO_DIR = HERE.parents[1] / "proto"
WAIT_S = 20.0


class GrpcJs:
    """One Node process running grpc-js against ``address``; channels by name."""

    def __init__(self, address: str) -> None:
        assert (HERE / "grpcjs" / "node_modules" / "@grpc" / "grpc-js").is_dir(), (
            "grpc-js is not installed: run scripts/bootstrap (npm ci in tests/e2e/grpcjs)"
        )
        self.proc = subprocess.Popen(
            ["node", str(DRIVER), address, str(PROTO_DIR)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, GRPC_NODE_VERBOSITY="NONE"),
        )
        self._ids = itertools.count(1)
        self._results: dict[int, dict[str, Any]] = {}
        self._arrived: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._arrived.put(json.loads(line))

    def send(self, op: str, **fields: Any) -> int:
        """Start a command; its id (see :meth:`result`)."""
        command_id = next(self._ids)
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"id": command_id, "op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        return command_id

    def result(self, command_id: int, timeout: float = WAIT_S) -> dict[str, Any]:
        while command_id not in self._results:
            try:
                got = self._arrived.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(
                    f"grpc-js gave no result for command {command_id} in {timeout} s"
                ) from None
            self._results[got["id"]] = got
        return self._results.pop(command_id)

    def do(self, op: str, **fields: Any) -> dict[str, Any]:
        return self.result(self.send(op, **fields))

    def channel(self, name: str, **options: Any) -> None:
        assert self.do("channel", name=name, options=options)["code"] == 0

    def close(self) -> None:
        """Close its stdin; it exits once its calls are done (killed past a bound)."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)
