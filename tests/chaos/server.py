"""Real ``kip848 serve`` processes for chaos runs: plain subprocesses, or children of a fork
server that imported the coordinator once (restarts in milliseconds instead of a second of
interpreter start-up and imports; the child runs the same ``coordinator.cli.main``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0

# The fork server: imports everything a server needs (no gRPC object is created, no thread is
# started, so forking is safe), then serves requests, one JSON line each, on stdin/stdout:
#   {"spawn": argv, "out": path, "err": path} -> {"pid": n}   (a child running main(argv))
#   {"wait": pid, "timeout": s}               -> {"status": n | null}
# At the end of its input (the test is done, or died) it SIGKILLs the children still running:
# they run in sessions of their own, so nothing else would stop them.
FORK_SERVER = r"""
import json, os, signal, sys, time
import grpc, uvloop  # noqa: F401 - imported once, before any fork
import coordinator.cli
from coordinator.cli import main
import coordinator.cli.serve, coordinator.server.app, coordinator.server.loop  # noqa: F401
import coordinator.runtime, coordinator.runtime.store  # noqa: F401

children = set()

def spawn(argv, out, err):
    pid = os.fork()
    if pid:
        children.add(pid)
        return pid
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 1)
        os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        code = main(argv)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    except BaseException:
        import traceback
        traceback.print_exc()
        os._exit(70)

def wait(pid, timeout):
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)

print(json.dumps({"ready": os.getpid()}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if "spawn" in req:
        reply = {"pid": spawn(req["spawn"], req["out"], req["err"])}
    else:
        reply = {"status": wait(req["wait"], req["timeout"])}
    print(json.dumps(reply), flush=True)
for pid in children:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass
"""


class Server:
    """One running server: its address, and how to stop or kill it."""

    def __init__(
        self, pid: int, out: Path, err: Path, waiter: Any, proc: subprocess.Popen[bytes] | None
    ) -> None:
        self.pid = pid
        self.out = out
        self.err = err
        self._waiter = waiter
        self._proc = proc
        self.address = self._read_address()

    def _read_address(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.out.read_text() if self.out.exists() else ""
            if "\n" in text:
                line = text.splitlines()[0]
                if not line.startswith("listening on "):
                    raise AssertionError(f"unexpected first line {line!r}: {self.stderr()}")
                return line.removeprefix("listening on ")
            if self.exit_status(0) is not None:
                raise AssertionError(f"server exited at start: {self.stderr()}")
            time.sleep(0.01)
        raise AssertionError(f"server did not start: {self.stderr()}")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace") if self.err.exists() else ""

    def exit_status(self, timeout_s: float) -> int | None:
        if self._proc is not None:
            try:
                return self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return None
        return self._waiter(self.pid, timeout_s)  # type: ignore[no-any-return]

    def kill9(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        status = self.exit_status(10)
        assert status == -signal.SIGKILL, status

    def kill_quietly(self) -> None:
        """SIGKILL, whatever state the server is in (cleanup after a failure)."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.exit_status(5)

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM; the exit status (0 after a clean shutdown)."""
        os.kill(self.pid, signal.SIGTERM)
        status = self.exit_status(timeout_s)
        if status is None:
            os.kill(self.pid, signal.SIGKILL)
            raise AssertionError(f"server did not stop within {timeout_s} s: {self.stderr()}")
        return status


def serve_argv(data_dir: Path, *extra: str) -> list[str]:
    return ["serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), *extra]


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")


def start_subprocess(data_dir: Path, *extra: str) -> Server:
    """A server as ``kip848 serve`` in its own interpreter."""
    stamp = time.monotonic_ns()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    out = data_dir.parent / f"{data_dir.name}-{stamp}.out"
    err = data_dir.parent / f"{data_dir.name}-{stamp}.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(
            [sys.executable, "-m", "coordinator.cli", *serve_argv(data_dir, *extra)],
            stdout=fo,
            stderr=fe,
            env=env(),
        )
    return Server(proc.pid, out, err, None, proc)


class ForkServer:
    """Starts servers by forking a process that has already imported the coordinator."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FORK_SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env(),
        )
        ready = self._reply()
        assert "ready" in ready, ready

    def _reply(self) -> dict[str, Any]:
        out: IO[bytes] | None = self.proc.stdout
        assert out is not None
        line = out.readline()
        if not line:
            raise AssertionError("the fork server died")
        return json.loads(line)  # type: ignore[no-any-return]

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        return self._reply()

    def _wait(self, pid: int, timeout_s: float) -> int | None:
        return self._ask({"wait": pid, "timeout": timeout_s})["status"]  # type: ignore[no-any-return]

    def start(self, data_dir: Path, *extra: str) -> Server:
        stamp = time.monotonic_ns()
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        out = data_dir.parent / f"{data_dir.name}-{stamp}.out"
        err = data_dir.parent / f"{data_dir.name}-{stamp}.err"
        pid = self._ask({"spawn": serve_argv(data_dir, *extra), "out": str(out), "err": str(err)})
        return Server(pid["pid"], out, err, self._wait, None)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
