"""Fixtures shared by every test directory: small real file systems for fault tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


class Tmpfs:
    """A real tmpfs mounted for one test: a full disk is a full disk, a read-only mount is a
    read-only mount (what SQLite and the kernel really do, not a simulation)."""

    def __init__(self, point: Path, size_kib: int) -> None:
        self.point = point
        self.size_kib = size_kib

    def remount(self, *options: str) -> None:
        r = _run("mount", "-o", ",".join(("remount", *options)), str(self.point))
        assert r.returncode == 0, r.stderr

    def resize(self, size_kib: int) -> None:
        self.remount(f"size={size_kib}k")
        self.size_kib = size_kib

    def free_bytes(self) -> int:
        st = os.statvfs(self.point)
        return st.f_bavail * st.f_frsize


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Tmpfs]]:
    """Factory: ``tmpfs(size_kib=1024)`` mounts a fresh tmpfs under ``tmp_path`` and returns it;
    everything mounted is unmounted (lazily, in case a server still holds it) at the end.
    Mounting needs root (CAP_SYS_ADMIN): the CI machine runs the suite as root."""
    mounted: list[Path] = []

    def mount(size_kib: int = 1024, name: str = "fs") -> Tmpfs:
        point = tmp_path / name
        point.mkdir()
        r = _run("mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0755", "tmpfs", str(point))
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): {r.stderr}")
        mounted.append(point)
        return Tmpfs(point, size_kib)

    yield mount
    for point in reversed(mounted):
        _run("umount", "-l", str(point))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[object]:
    """One real PostgreSQL for the session (tests/pg.py), started on first use."""
    from pg import PostgresServer

    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture
def pg_dsn(pg_server: object) -> str:
    """A fresh, empty schema (in a database owned by the tests' role) of the session's
    PostgreSQL: a new store."""
    from pg import PostgresServer

    assert isinstance(pg_server, PostgresServer)
    return pg_server.fresh_store_dsn()
