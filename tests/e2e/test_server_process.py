"""The e2e harness's ``ServerProcess``: a server that does not start in time is stopped, not
left running for the rest of the run (one CI run under heavy load left nine such servers)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import serve_support
from conftest import ServerProcess


def test_a_server_that_does_not_start_in_time_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[subprocess.Popen[bytes]] = []
    popen = subprocess.Popen

    def recording(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        proc = popen(*args, **kwargs)
        started.append(proc)
        return proc

    monkeypatch.setattr(serve_support, "START_TIMEOUT_S", 1.0)
    monkeypatch.setattr(subprocess, "Popen", recording)
    # A "server" that prints nothing for a minute: `sh -c 'exec sleep 60'` (what follows is
    # only its positional parameters).
    with pytest.raises(AssertionError, match="server did not start"):
        ServerProcess(tmp_path / "data", prefix=("sh", "-c", "exec sleep 60", "sh"))
    assert len(started) == 1
    assert started[0].poll() == -9  # killed, and reaped
