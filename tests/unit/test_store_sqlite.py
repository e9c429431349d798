"""SqliteRecordStore specifics: file layout, durability settings, schema versions, refusal of
foreign or corrupt files, the single-writer lock, commit failures. The shared semantics are in
test_store_contract.py."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from coordinator.runtime.store import (
    DATA_FILE_NAME,
    SCHEMA_VERSION,
    SqliteRecordStore,
    StoredRecord,
    StoreError,
    StoreVersionError,
    StoreWriteError,
    log_of,
)
from coordinator.runtime.store import sqlite as sqlite_store

LOG = log_of("g", SqliteRecordStore.__init__.__kwdefaults__["partitions"])
"""The partition of group "g" in a store of the default partition count."""


def put(key: bytes, value: bytes = b"v", group_id: str | None = "g") -> StoredRecord:
    return StoredRecord(key=key, value=value, group_id=group_id)


def make_store(directory: Path, n: int = 3) -> Path:
    with SqliteRecordStore(directory) as store:
        store.append([put(b"k%d" % i) for i in range(n)], 1)
        return store.path


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


# -- layout and settings ------------------------------------------------------------------------


def test_data_dir_layout(tmp_path: Path) -> None:
    with SqliteRecordStore(tmp_path / "a" / "b") as store:
        assert store.path == tmp_path / "a" / "b" / DATA_FILE_NAME
        store.append([put(b"x")], 1)
        assert (tmp_path / "a" / "b" / "coordinator.db.lock").exists()
    # The last connection checkpoints and removes the WAL on close.
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == [
        "coordinator.db",
        "coordinator.db.lock",
    ]
    with SqliteRecordStore(tmp_path / "a" / "b" / DATA_FILE_NAME) as store:  # the file itself
        assert store.last_offset(LOG) == 0
    with SqliteRecordStore(tmp_path / "other.db") as store:
        assert store.path == tmp_path / "other.db"


def test_schema_and_settings(tmp_path: Path) -> None:
    with SqliteRecordStore(tmp_path) as store:
        conn = store._conn
        assert conn is not None
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL: fsync per commit
        db = raw(store.path)
        assert db.execute("PRAGMA application_id").fetchone() == (0x4B383438,)
        meta = dict(db.execute("SELECT name, value FROM meta"))
        assert meta["schema_version"] == SCHEMA_VERSION == 2
        assert meta["partitions"] == store.partitions == 50
        assert meta["created_by"].startswith("kip848-coordinator")
        assert isinstance(meta["created_at_ms"], int)
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert names == {"meta", "logs", "journal", "compacted"}
        assert [r[0] for r in db.execute("SELECT log FROM logs")] == list(range(-1, 50))
        for table in ("compacted", "journal"):  # a log is a range of the rowid: no sort, no index
            plan = db.execute(
                f"EXPLAIN QUERY PLAN SELECT pos, key, value FROM {table}"
                " WHERE pos BETWEEN ? AND ? ORDER BY pos",
                (1 << 48, (2 << 48) - 1),
            ).fetchall()
            assert [row[3] for row in plan] == [
                f"SEARCH {table} USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"
            ]
        db.close()
        stats = store.stats()
        assert stats["schema_version"] == 2 and stats["sync"] == "full"
        assert stats["file_bytes"] > 0
    with SqliteRecordStore(tmp_path, sync="normal") as store:
        assert store._conn is not None
        assert store._conn.execute("PRAGMA synchronous").fetchone() == (1,)
    with pytest.raises(ValueError, match="sync must be one of"):
        SqliteRecordStore(tmp_path, sync="sometimes")  # type: ignore[arg-type]


# -- versions -----------------------------------------------------------------------------------


def set_schema_version(path: Path, version: int) -> None:
    db = raw(path)
    db.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (version,))
    db.close()


def test_newer_schema_version_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = make_store(tmp_path)
    set_schema_version(path, 7)
    with pytest.raises(StoreVersionError) as info:
        SqliteRecordStore(tmp_path)
    assert str(info.value) == (
        f"record store at {path} was written by schema version 7; this build understands up "
        f"to {SCHEMA_VERSION}; upgrade kip848-coordinator"
    )
    with pytest.raises(StoreVersionError):
        SqliteRecordStore(tmp_path, read_only=True)
    db = raw(path)
    assert db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone() == (7,)
    assert db.execute("SELECT count(*) FROM journal").fetchone() == (3,)
    db.close()
    # The refusal released the lock: a fixed build can open it.
    set_schema_version(path, SCHEMA_VERSION)
    with SqliteRecordStore(tmp_path) as store:
        assert store.last_offset(LOG) == 2


# -- foreign and corrupt files ------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"hello, I am a text file\n" * 10, os.urandom(8192), b"SQLite format 3\x00" + b"\xff" * 4000],
    ids=["text", "random", "bad-header"],
)
def test_non_sqlite_file_is_refused_and_left_alone(tmp_path: Path, content: bytes) -> None:
    (tmp_path / DATA_FILE_NAME).write_bytes(content)
    with pytest.raises(StoreError, match="cannot open record store at .*corrupt, or not a kip848"):
        SqliteRecordStore(tmp_path)
    assert (tmp_path / DATA_FILE_NAME).read_bytes() == content


def test_foreign_sqlite_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    db = raw(tmp_path / DATA_FILE_NAME)
    db.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY)")
    db.close()
    before = (tmp_path / DATA_FILE_NAME).read_bytes()
    with pytest.raises(StoreError, match="is not a kip848 record store"):
        SqliteRecordStore(tmp_path)
    assert (tmp_path / DATA_FILE_NAME).read_bytes() == before  # not even switched to WAL


def test_missing_schema_version_is_corrupt(tmp_path: Path) -> None:
    path = make_store(tmp_path)
    db = raw(path)
    db.execute("DELETE FROM meta WHERE name = 'schema_version'")
    db.close()
    with pytest.raises(StoreError, match="is corrupt: no valid schema_version"):
        SqliteRecordStore(tmp_path)


@pytest.mark.parametrize("damage", ["all-but-header", "middle"])
def test_damaged_pages_are_refused(tmp_path: Path, damage: str) -> None:
    path = make_store(tmp_path, n=2000)
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 8 * page
    start, end = (page, len(data)) if damage == "all-but-header" else (3 * page, len(data) // 2)
    data[start:end] = b"\xa5" * (end - start)
    path.write_bytes(bytes(data))
    with (
        pytest.raises(StoreError, match="malformed|corrupt|not a database"),
        SqliteRecordStore(tmp_path) as store,
    ):
        list(store.load(LOG))


def test_integrity_check(tmp_path: Path) -> None:
    make_store(tmp_path)
    with SqliteRecordStore(tmp_path) as store:
        store.check_integrity()


# -- single writer, readers -----------------------------------------------------------------------


def test_second_writer_is_refused(tmp_path: Path) -> None:
    store = SqliteRecordStore(tmp_path)
    with pytest.raises(StoreError, match=rf"already open for writing \(pid {os.getpid()} holds"):
        SqliteRecordStore(tmp_path)
    store.append([put(b"a")], 1)  # the refused opener did no harm
    store.close()
    with SqliteRecordStore(tmp_path) as again:
        assert again.last_offset(LOG) == 0


def test_read_only_store(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no record store at"):
        SqliteRecordStore(tmp_path / "nothing", read_only=True)
    writer = SqliteRecordStore(tmp_path)
    writer.append([put(b"a")], 1)
    reader = SqliteRecordStore(tmp_path, read_only=True)  # alongside the writer
    assert [rec.key for _, rec in reader.load(LOG)] == [b"a"]
    writer.append([put(b"b")], 2)
    assert reader.last_offset(LOG) == 1  # sees the writer's progress
    assert [e.key for e in reader.journal(LOG)] == [b"a", b"b"]
    with pytest.raises(StoreWriteError, match="read-only"):
        reader.append([put(b"c")], 3)
    with pytest.raises(StoreWriteError, match="read-only"):
        reader.expire_journal(10)
    reader.close()
    writer.close()


def test_iterators_survive_close_and_release_their_connection(tmp_path: Path) -> None:
    store = SqliteRecordStore(tmp_path)
    store.append([put(b"%d" % i) for i in range(10_000)], 1)
    view = store.load(LOG)
    assert next(view)[0] == 0
    store.close()
    assert sum(1 for _ in view) == 9_999
    abandoned = SqliteRecordStore(tmp_path)
    it = abandoned.journal(LOG)
    next(it)
    it.close()  # type: ignore[attr-defined]
    abandoned.close()
    assert not (tmp_path / "coordinator.db-wal").exists()  # no reader left behind


# -- failures -----------------------------------------------------------------------------------


def test_failed_commit_has_unknown_outcome_and_stops_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteRecordStore(tmp_path)
    store.append([put(b"a")], 1)
    real_commit = store._commit

    def commit_then_fail() -> None:
        real_commit()
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store, "_commit", commit_then_fail)
    with pytest.raises(StoreWriteError, match="may or may not be durable") as info:
        store.append([put(b"b")], 2)
    assert info.value.outcome_unknown is True
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    assert store.failed
    monkeypatch.undo()
    with pytest.raises(StoreWriteError, match="failed earlier") as info:
        store.append([put(b"c")], 3)
    assert info.value.outcome_unknown is False
    assert store.last_offset(LOG) == 0  # never acknowledged
    store.close()
    with SqliteRecordStore(tmp_path) as store:  # the store, not the process, has the truth
        assert [rec.key for _, rec in store.load(LOG)] == [b"a", b"b"]
        assert store.append([put(b"c")], 3) == {LOG: 2}


def test_failure_to_begin_is_a_write_error(tmp_path: Path) -> None:
    store = SqliteRecordStore(tmp_path)
    other = raw(store.path)
    other.execute("PRAGMA busy_timeout = 0")
    other.execute("BEGIN IMMEDIATE")  # a foreign writer holds the write lock
    assert store._conn is not None
    store._conn.execute("PRAGMA busy_timeout = 50")
    with pytest.raises(StoreWriteError, match="database is locked"):
        store.append([put(b"a")], 1)
    other.execute("ROLLBACK")
    other.close()
    assert not store.failed
    assert store.append([put(b"a")], 2) == {LOG: 0}
    store.close()


def test_expire_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store, "_EXPIRE_CHUNK", 3)
    with SqliteRecordStore(tmp_path) as store:
        for ts in range(10):
            store.append([put(b"%d" % ts)], ts)
        assert store.expire_journal(8) == 8
        assert [e.offset for e in store.journal(LOG)] == [8, 9]
        assert len(list(store.load(LOG))) == 10
    db = raw(tmp_path / DATA_FILE_NAME)
    expired = dict(db.execute("SELECT log, expired_through FROM logs"))
    assert expired == {log: 7 if log == LOG else -1 for log in range(-1, 50)}
    db.close()


def test_automatic_retention_is_bounded_per_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "_RETENTION_STEP", 3)
    with SqliteRecordStore(tmp_path) as store:
        store.append([put(b"%d" % i) for i in range(10)], 0)
    with SqliteRecordStore(tmp_path, journal_retention_ms=100) as store:
        sizes = []
        for i in range(5):
            store.append([put(b"new%d" % i)], 1000 + i)  # backlog: 10 expired entries
            sizes.append(len(list(store.journal(LOG))))
        # 10 old + 1 new - 3 = 8; 9 - 3 = 6; 7 - 3 = 4; 5 - 1 (the last old one: a partial
        # chunk, so the backlog is done and the next check waits); 4 + 1
        assert sizes == [8, 6, 4, 4, 5]
        assert len(list(store.load(LOG))) == 15


def test_automatic_retention_failure_does_not_fail_the_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with SqliteRecordStore(tmp_path, journal_retention_ms=10) as store:

        def broken(*_: object) -> tuple[int, bool]:
            raise StoreWriteError("journal expiry failed: disk I/O error")

        monkeypatch.setattr(store, "_expire_chunk", broken)
        assert store.append([put(b"a")], 0) == {LOG: 0}
        assert "journal retention step failed" in caplog.text
        assert [e.key for e in store.journal(LOG)] == [b"a"]


def test_appends_from_a_writer_thread_while_loading(tmp_path: Path) -> None:
    """The runtime's model: appends on one executor thread, reads on the loop thread."""
    from concurrent.futures import ThreadPoolExecutor

    with SqliteRecordStore(tmp_path) as store, ThreadPoolExecutor(1) as writer:
        writer.submit(store.append, [put(b"%d" % i) for i in range(1000)], 1).result(timeout=10)
        view = store.load(LOG)
        futures = [
            writer.submit(store.append, [put(b"n%d" % i), put(b"%d" % i, b"w")], 2)
            for i in range(50)
        ]
        assert [f.result(timeout=10) for f in futures] == [
            {LOG: last} for last in range(1001, 1100, 2)
        ]
        assert [rec.value for _, rec in view] == [b"v"] * 1000
        assert len(list(store.load(LOG))) == 1050


def test_resolve_path(tmp_path: Path) -> None:
    resolve: Any = sqlite_store.resolve_path
    assert resolve(tmp_path) == tmp_path / DATA_FILE_NAME
    assert resolve(tmp_path / "new-dir") == tmp_path / "new-dir" / DATA_FILE_NAME
    assert resolve(tmp_path / "x.db") == tmp_path / "x.db"
    (tmp_path / "plainfile").write_bytes(b"")
    assert resolve(tmp_path / "plainfile") == tmp_path / "plainfile"


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_a_store_never_closed_releases_its_lock_when_collected(tmp_path: Path) -> None:
    import gc

    store = SqliteRecordStore(tmp_path)
    store.append([put(b"a")], 1)
    del store
    gc.collect()
    with SqliteRecordStore(tmp_path) as again:
        assert again.last_offset(LOG) == 0


def test_unusable_location_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    with pytest.raises(StoreError, match="cannot create data directory .*a-file/sub: .*a-file is"):
        SqliteRecordStore(tmp_path / "a-file" / "sub")


def test_a_fenced_append_is_refused_by_a_single_writer_store(tmp_path: Path) -> None:
    from coordinator.runtime.store import Fence

    with SqliteRecordStore(tmp_path) as store:
        with pytest.raises(StoreWriteError, match="one writer and no leases"):
            store.append([put(b"a")], 1, fence=Fence(1, {LOG: 1}))
        assert store.last_offset(LOG) == -1
