"""``kip848 serve`` and ``kip848 replay`` on stores that cannot be trusted: both refuse with the
same clear message and a non-zero exit, and leave the files exactly as they were (#12 item 3).
The store-level cases are in tests/unit/test_store_startup.py; here the real commands."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from conftest import ServerProcess, run_cli

from coordinator.runtime.store import SqliteRecordStore, StoredRecord


def kip848(*argv: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*argv)


def serve_once(data_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """A serve that must refuse before it listens (it would otherwise run until the timeout)."""
    return kip848("serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), *extra)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def test_truncated_store_file_is_refused_by_serve_and_replay(tmp_path: Path) -> None:
    data = tmp_path / "var"
    with SqliteRecordStore(data) as store:
        store.append([StoredRecord(b"k", b"v", "g")], 1)
    os.truncate(data / "coordinator.db", 0)
    before = snapshot(data)
    store_path = data.absolute() / "coordinator.db"
    expected = (
        f"{store_path} is empty (0 bytes): not a kip848 record store (truncated, or never "
        "completed). A new store is created only where no file exists; refusing to start empty "
        "in its place. Restore the file, or move it away to start a new store"
    )
    served = serve_once(data)
    assert served.returncode == 1 and served.stdout == ""
    assert served.stderr == (f"kip848 serve: cannot open the store in {data}: {expected}\n"), (
        served.stderr
    )
    replayed = kip848("replay", "--data-dir", str(data))
    assert (replayed.returncode, replayed.stdout) == (1, "")
    assert replayed.stderr == f"kip848 replay: {expected}\n"
    assert snapshot(data) == before


def test_data_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "var").write_text("oops")
    served = serve_once(tmp_path / "var")
    assert served.returncode == 1
    assert served.stderr == (
        f"kip848 serve: cannot open the store in {tmp_path / 'var'}: data directory "
        f"{tmp_path / 'var'} is not a directory (a file is in the way)\n"
    )
    assert (tmp_path / "var").read_text() == "oops"


def test_read_only_mount_says_read_only(tmpfs: Callable[..., object]) -> None:
    fs = tmpfs(size_kib=2048)
    data = fs.point / "var"  # type: ignore[attr-defined]
    server = ServerProcess(data, clock="manual")
    server.create_topic("t", 3)
    assert server.stop() == 0
    fs.remount("ro")  # type: ignore[attr-defined]
    served = serve_once(data)
    assert served.returncode == 1
    assert "is mounted read-only" in served.stderr and "corrupt" not in served.stderr
    replayed = kip848("replay", "--data-dir", str(data), "--output", "json")
    assert replayed.returncode == 0, replayed.stderr  # inspection works on read-only media
    assert json.loads(replayed.stdout)["topics"] == 1


def test_lost_wal_is_refused_until_accepted(tmp_path: Path) -> None:
    data = tmp_path / "var"
    server = ServerProcess(data, clock="manual")
    server.create_topic("kept", 1)  # checkpointed into the main file when the server stops
    assert server.stop() == 0
    server = ServerProcess(data, clock="manual")
    server.create_topic("only-in-the-wal", 1)
    server.kill9()
    (data / "coordinator.db-wal").unlink()
    served = serve_once(data)
    assert served.returncode == 1
    assert "was not shut down cleanly and its write-ahead log coordinator.db-wal is missing" in (
        served.stderr
    )
    assert kip848("replay", "--data-dir", str(data)).returncode == 1
    server = ServerProcess(data, "--accept-lost-wal", clock="manual")
    try:
        from kip848.v1 import admin_pb2

        names = [t.name for t in server.admin.ListTopics(admin_pb2.ListTopicsRequest()).topics]
        assert names == ["kept"]
        assert "opening it anyway (accept_lost_wal)" in server.stderr_text()
    finally:
        assert server.stop() == 0
