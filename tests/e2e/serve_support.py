"""Starting a ``kip848 serve`` subprocess in tests: its first stdout lines and its gRPC
channel, each within a bounded wait, with the server's stderr in the failure."""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable
from typing import IO

import grpc

START_TIMEOUT_S = 20.0


def read_lines(
    proc: subprocess.Popen[bytes], stdout: IO[bytes], count: int, stderr: Callable[[], str]
) -> list[str]:
    """The first ``count`` lines a starting server prints (bounded wait); its stderr if it
    exits first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    buf = b""
    while buf.count(b"\n") < count:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            raise AssertionError(f"server did not start (exit {proc.poll()}): {stderr()}")
        ready, _, _ = select.select([stdout], [], [], left)
        if ready:
            buf += os.read(stdout.fileno(), 4096)
    return buf.decode().splitlines()[:count]


def ready(channel: grpc.Channel, proc: subprocess.Popen[bytes], stderr: Callable[[], str]) -> None:
    """Until ``channel`` connects (bounded); a server that exited meanwhile is reported with its
    stderr instead of a bare timeout."""
    try:
        grpc.channel_ready_future(channel).result(timeout=START_TIMEOUT_S)
    except grpc.FutureTimeoutError:
        raise AssertionError(
            f"server not reachable within {START_TIMEOUT_S} s (exit {proc.poll()}): {stderr()}"
        ) from None
