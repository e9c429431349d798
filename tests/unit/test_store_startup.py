"""Start-up safety of the SQLite store: only a *missing* store is created; anything present that
is not a valid, complete store is refused with a typed error and a message that says what was
found, and left exactly as it was.

Covers: empty, short and truncated files, a directory or a dangling link in place of the file,
a data directory that is a file, a write-ahead log without its database, a write-ahead log lost
after a crash (and the shm file lost, which is harmless), atomic creation, read-only mounts
(a real tmpfs remounted read-only), permissions, a newer schema version.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from coordinator.runtime.store import (
    DATA_FILE_NAME,
    SqliteRecordStore,
    StoreAccessError,
    StoreCorruptError,
    StoredRecord,
    StoreError,
    StoreVersionError,
    log_of,
    sqlite_files,
)
from coordinator.runtime.store import sqlite as sqlite_store

REPO = Path(__file__).resolve().parents[2]


def put(key: bytes, value: bytes = b"v") -> StoredRecord:
    return StoredRecord(key=key, value=value, group_id="g")


def make_store(directory: Path, n: int = 3) -> Path:
    with SqliteRecordStore(directory) as store:
        store.append([put(b"k%d" % i) for i in range(n)], 1)
        return store.path


def keys(directory: Path, **options: object) -> list[bytes]:
    with SqliteRecordStore(directory, **options) as store:  # type: ignore[arg-type]
        return [rec.key for _, rec in store.load(log_of("g", store.partitions))]


def crash_after_appends(directory: Path, n: int) -> None:
    """A real process appends ``n`` batches (acknowledged: append returned) and is SIGKILLed
    with the store open: the WAL holds commits not yet checkpointed into the main file."""
    child = (
        "import os, signal, sys\n"
        "from coordinator.runtime.store import SqliteRecordStore, StoredRecord\n"
        "s = SqliteRecordStore(sys.argv[1])\n"
        "for i in range(int(sys.argv[2])):\n"
        "    s.append([StoredRecord(b'c%d' % i, b'v', 'g')], i)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-c", child, str(directory), str(n)], env=env, timeout=60, check=False
    )
    assert proc.returncode == -signal.SIGKILL


# -- files that are not stores ------------------------------------------------------------------


def test_empty_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / DATA_FILE_NAME
    path.touch()
    for read_only in (False, True):
        with pytest.raises(StoreCorruptError) as info:
            SqliteRecordStore(tmp_path, read_only=read_only)
        assert str(info.value) == (
            f"{path} is empty (0 bytes): not a kip848 record store (truncated, or never "
            "completed). A new store is created only where no file exists; refusing to start "
            "empty in its place. Restore the file, or move it away to start a new store"
        )
    assert path.read_bytes() == b""
    assert [p.name for p in tmp_path.iterdir()] == [DATA_FILE_NAME]  # nothing created beside


def test_file_shorter_than_a_header_is_refused(tmp_path: Path) -> None:
    path = make_store(tmp_path)
    os.truncate(path, 60)
    with pytest.raises(StoreCorruptError, match=r"is 60 bytes long, shorter than any SQLite"):
        SqliteRecordStore(tmp_path)
    assert path.stat().st_size == 60


def test_truncated_store_is_refused(tmp_path: Path) -> None:
    path = make_store(tmp_path, n=3000)
    size = path.stat().st_size
    os.truncate(path, size // 2)
    with (  # refused at open or at load: either way never served
        pytest.raises(StoreError, match="malformed|corrupt"),
        SqliteRecordStore(tmp_path) as store,
    ):
        list(store.load(log_of("g", store.partitions)))
    assert path.stat().st_size == size // 2


def test_empty_sqlite_database_is_not_taken_for_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / DATA_FILE_NAME
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 0")
    db.execute("VACUUM")  # writes a valid header: an empty database, 1 page
    db.close()
    assert path.stat().st_size > 0
    with pytest.raises(StoreCorruptError, match=r"is not a kip848 record store \(an empty SQLite"):
        SqliteRecordStore(tmp_path)


def test_directory_in_place_of_the_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / DATA_FILE_NAME).mkdir()
    with pytest.raises(StoreCorruptError, match="exists but is a directory, not a store file"):
        SqliteRecordStore.in_data_dir(tmp_path)
    assert list((tmp_path / DATA_FILE_NAME).iterdir()) == []
    (tmp_path / "sub").mkdir()
    os.mkfifo(tmp_path / "sub" / DATA_FILE_NAME)
    with pytest.raises(StoreCorruptError, match="exists but is not a regular file"):
        SqliteRecordStore.in_data_dir(tmp_path / "sub")


def test_dangling_symlink_is_refused_not_replaced(tmp_path: Path) -> None:
    link = tmp_path / DATA_FILE_NAME
    link.symlink_to(tmp_path / "volume" / "coordinator.db")
    with pytest.raises(StoreCorruptError, match="is a symbolic link to .* which does not exist"):
        SqliteRecordStore(tmp_path)
    assert link.is_symlink() and not (tmp_path / "volume").exists()


def test_data_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "var").write_bytes(b"not a directory")
    with pytest.raises(StoreAccessError) as info:
        SqliteRecordStore.in_data_dir(tmp_path / "var")
    assert str(info.value) == (
        f"data directory {tmp_path / 'var'} is not a directory (a file is in the way)"
    )
    with pytest.raises(StoreAccessError, match=r"cannot create data directory .*var/sub: .*var is"):
        SqliteRecordStore.in_data_dir(tmp_path / "var" / "sub")
    assert (tmp_path / "var").read_bytes() == b"not a directory"


def test_newer_schema_version_is_a_version_error(tmp_path: Path) -> None:
    path = make_store(tmp_path)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE meta SET value = 3 WHERE name = 'schema_version'")
    db.close()
    for read_only in (False, True):
        with pytest.raises(StoreVersionError, match="written by schema version 3; this build"):
            SqliteRecordStore(tmp_path, read_only=read_only)


# -- creation -----------------------------------------------------------------------------------


def test_creation_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash_midway(conn: sqlite3.Connection, partitions: int) -> None:
        conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY NOT NULL, value NOT NULL)")
        raise OSError("power lost while creating")

    monkeypatch.setattr(sqlite_store, "create_schema", crash_midway)
    with pytest.raises(StoreAccessError, match="power lost while creating"):
        SqliteRecordStore(tmp_path)
    assert not (tmp_path / DATA_FILE_NAME).exists()  # never a half-made store in place
    assert (tmp_path / "coordinator.db.new").exists()
    monkeypatch.undo()
    with SqliteRecordStore(tmp_path) as store:  # the leftover is discarded, a store created
        assert store.append([put(b"a")], 1) == {log_of("g", store.partitions): 0}
    assert sorted(p.name for p in tmp_path.iterdir()) == [DATA_FILE_NAME, "coordinator.db.lock"]


def test_a_new_store_is_marked_and_complete_on_disk(tmp_path: Path) -> None:
    store = SqliteRecordStore(tmp_path)
    db = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
    assert dict(db.execute("SELECT name, value FROM meta"))["clean_shutdown"] == 0  # open
    db.close()
    store.close()
    db = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
    assert dict(db.execute("SELECT name, value FROM meta"))["clean_shutdown"] == 1
    db.close()


# -- write-ahead log and shared-memory files -----------------------------------------------------


def test_wal_without_its_database_is_refused(tmp_path: Path) -> None:
    crash_after_appends(tmp_path, 5)
    (tmp_path / DATA_FILE_NAME).unlink()
    wal = (tmp_path / "coordinator.db-wal").read_bytes()
    with pytest.raises(StoreCorruptError) as info:
        SqliteRecordStore(tmp_path)
    assert str(info.value).startswith(
        f"{tmp_path / DATA_FILE_NAME} does not exist but its write-ahead log coordinator.db-wal "
        "does: the store file was removed or lost"
    )
    assert (tmp_path / "coordinator.db-wal").read_bytes() == wal
    assert not (tmp_path / DATA_FILE_NAME).exists()


def test_wal_lost_after_a_crash_is_refused(tmp_path: Path) -> None:
    make_store(tmp_path, n=2)  # checkpointed at close: k0, k1 are in the main file
    crash_after_appends(tmp_path, 5)  # c0..c4 acknowledged, only in the WAL
    (tmp_path / "coordinator.db-wal").unlink()
    # (The refused read-only open may leave an empty WAL behind: it must not count.)
    for read_only in (False, True, False):
        with pytest.raises(StoreCorruptError) as info:
            SqliteRecordStore(tmp_path, read_only=read_only)
        assert str(info.value) == (
            f"record store at {tmp_path / DATA_FILE_NAME} was not shut down cleanly and its "
            "write-ahead log coordinator.db-wal is missing: the commits it held (acknowledged "
            "writes among them) are not in coordinator.db. Refusing to start from an older "
            "state: restore coordinator.db-wal together with coordinator.db (from the same copy "
            "or snapshot), or accept the loss explicitly (kip848 serve --accept-lost-wal)"
        )
    # The operator's explicit choice: serve what the main file holds.
    assert keys(tmp_path, accept_lost_wal=True) == [b"k0", b"k1"]
    assert keys(tmp_path) == [b"k0", b"k1"]  # accepted once; closed cleanly since


def test_wal_kept_after_a_crash_recovers_everything(tmp_path: Path) -> None:
    make_store(tmp_path, n=1)
    crash_after_appends(tmp_path, 4)
    assert (tmp_path / "coordinator.db-wal").exists()
    (tmp_path / "coordinator.db-shm").unlink()  # harmless: SQLite rebuilds it from the WAL
    assert keys(tmp_path, read_only=True) == [b"k0", b"c0", b"c1", b"c2", b"c3"]
    assert keys(tmp_path) == [b"k0", b"c0", b"c1", b"c2", b"c3"]


def test_a_store_never_closed_is_marked_clean_when_collected(tmp_path: Path) -> None:
    import gc

    store = SqliteRecordStore(tmp_path)
    store.append([put(b"a")], 1)
    del store
    gc.collect()
    assert not (tmp_path / "coordinator.db-wal").exists()  # SQLite checkpointed and removed it
    assert keys(tmp_path) == [b"a"]  # ... and the file says it was closed cleanly


def test_failed_clean_mark_keeps_the_wal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SqliteRecordStore(tmp_path)
    store.append([put(b"a")], 1)

    def cannot_write(*_: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(sqlite_files, "set_clean_shutdown", cannot_write)  # the store's Handles
    store.close()
    monkeypatch.undo()
    assert (tmp_path / "coordinator.db-wal").exists()  # the next open needs it and finds it
    assert keys(tmp_path) == [b"a"]


def test_interpreter_exit_without_close_is_a_clean_shutdown(tmp_path: Path) -> None:
    child = (
        "import sys\n"
        "from coordinator.runtime.store import SqliteRecordStore, StoredRecord\n"
        "s = SqliteRecordStore(sys.argv[1])\n"
        "s.append([StoredRecord(b'x', b'v', 'g')], 1)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-c", child, str(tmp_path)], env=env, timeout=60, check=True)
    assert keys(tmp_path) == [b"x"]


# -- read-only media and permissions ------------------------------------------------------------


def test_read_only_mount_is_reported_as_read_only(tmpfs: Callable[..., object]) -> None:
    fs = tmpfs(size_kib=2048)
    data = fs.point / "data"  # type: ignore[attr-defined]
    make_store(data, n=3)
    fs.remount("ro")  # type: ignore[attr-defined]
    with pytest.raises(StoreAccessError) as info:
        SqliteRecordStore.in_data_dir(data)
    message = str(info.value)
    assert f"the file system holding {data / DATA_FILE_NAME} is mounted read-only" in message
    assert "corrupt" not in message
    # Inspection still works on read-only media (the clean store has no WAL to recover).
    assert keys(data, read_only=True) == [b"k0", b"k1", b"k2"]


def test_read_only_mount_after_a_crash(tmpfs: Callable[..., object]) -> None:
    fs = tmpfs(size_kib=2048)
    data = fs.point / "data"  # type: ignore[attr-defined]
    crash_after_appends(data, 3)
    fs.remount("ro")  # type: ignore[attr-defined]
    with pytest.raises(StoreAccessError, match="mounted read-only"):
        SqliteRecordStore(data)
    assert keys(data, read_only=True) == [b"c0", b"c1", b"c2"]  # the WAL is read as it is


@contextlib.contextmanager
def as_unprivileged_user() -> Iterator[int]:
    """Permission checks as an ordinary user: root ignores file modes, so a root test process
    drops its effective uid to nobody (65534) for the duration; other users already are."""
    if os.geteuid() != 0:
        yield os.geteuid()
        return
    os.seteuid(65534)
    try:
        yield 65534
    finally:
        os.seteuid(0)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory an unprivileged user can traverse (pytest's tmp dirs are private to root)."""
    with tempfile.TemporaryDirectory(prefix="kip848-perm-") as d:
        os.chmod(d, 0o755)
        yield Path(d)


def test_store_not_writable_is_permission_denied_not_corrupt(shared_dir: Path) -> None:
    path = make_store(shared_dir / "data", n=2)
    os.chmod(shared_dir / "data", 0o755)
    os.chmod(path, 0o444)
    lock = shared_dir / "data" / "coordinator.db.lock"
    os.chmod(lock, 0o666)  # the lock can be taken; the database cannot be written
    with as_unprivileged_user() as uid, pytest.raises(StoreAccessError) as info:
        SqliteRecordStore.in_data_dir(shared_dir / "data")
    message = str(info.value)
    assert "permission denied:" in message and f"not writable by uid {uid}" in message
    assert "corrupt" not in message
    os.chmod(lock, 0o644)
    with as_unprivileged_user(), pytest.raises(StoreAccessError, match="permission denied"):
        SqliteRecordStore.in_data_dir(shared_dir / "data")
    assert keys(shared_dir / "data") == [b"k0", b"k1"]  # untouched


def test_unreadable_store_is_permission_denied(shared_dir: Path) -> None:
    path = make_store(shared_dir / "data", n=1)
    os.chmod(shared_dir / "data", 0o755)
    os.chmod(path, 0o200)
    with as_unprivileged_user(), pytest.raises(StoreAccessError, match="permission denied"):
        SqliteRecordStore.in_data_dir(shared_dir / "data", read_only=True)


def test_data_dir_that_cannot_be_created(shared_dir: Path) -> None:
    os.chmod(shared_dir, 0o555)
    with as_unprivileged_user(), pytest.raises(StoreAccessError, match="permission denied"):
        SqliteRecordStore.in_data_dir(shared_dir / "data")
    assert not (shared_dir / "data").exists()
