"""Stores of schema version 1 (one log) become partitioned logs, nothing lost.

``tests/golden/stores/*.v1.db`` were written by kip848-coordinator 0.1 itself (commit b77a0ad:
``SqliteRecordStore.append`` of each golden record log's records, one batch each, timestamps
1000, 1001, ...; the second store then had its journal expired before 1030), so they are
exactly what an existing installation holds. Other version 1 stores are built here with the
version 1 schema (``sqlite_schema.SCHEMA_V1``) and random content.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from coordinator.cli import main
from coordinator.core.commands import SequentialIds
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.topics import TopicRegistry
from coordinator.factory import new_shard
from coordinator.runtime.loader import load_into
from coordinator.runtime.store import (
    CLUSTER_LOG,
    DATA_FILE_NAME,
    SqliteRecordStore,
    StoreCorruptError,
    StoreVersionError,
    log_ids,
    log_of,
    sqlite_schema,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
STORES = sorted((GOLDEN / "stores").glob("*.v1.db"))


def v1_rows(path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], int]:
    """(journal rows, compacted rows, expired-through offset) of a version 1 store."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        journal = db.execute(
            "SELECT offset, timestamp_ms, group_id, key, value FROM journal ORDER BY offset"
        ).fetchall()
        compacted = db.execute(
            "SELECT offset, key, value, group_id FROM compacted ORDER BY offset"
        ).fetchall()
        expired = db.execute(
            "SELECT value FROM meta WHERE name = 'journal_expired_through_offset'"
        ).fetchone()[0]
    finally:
        db.close()
    return journal, compacted, expired


def check_migrated(data: Path, before: tuple[Any, ...], partitions: int) -> None:
    """Each log holds exactly the version 1 records of its groups, in their order: the records
    only the compacted view still held first, then the journal, offsets counting on."""
    journal, compacted, expired = before
    first = journal[0][0] if journal else expired + 1
    with SqliteRecordStore(data, read_only=True) as store:
        assert store.partitions == partitions
        for log in log_ids(partitions):
            mine = [r for r in compacted if log_of(r[3], partitions) == log]
            old_only = [r for r in mine if r[0] < first]
            entries = [r for r in journal if log_of(r[2], partitions) == log]
            assert [(e.timestamp_ms, e.group_id, e.key, e.value) for e in store.journal(log)] == [
                tuple(r[1:]) for r in entries
            ]
            assert [e.offset for e in store.journal(log)] == list(
                range(len(old_only), len(old_only) + len(entries))
            )
            assert [(rec.key, rec.value, rec.group_id) for _, rec in store.load(log)] == [
                tuple(r[1:]) for r in mine
            ]
            # A compacted record's offset is that of its key's last write in the journal.
            last_write = {e.key: e.offset for e in store.journal(log)}
            for offset, rec in store.load(log):
                assert offset == last_write.get(rec.key, offset)
                assert offset < len(old_only) or rec.key in last_write
            assert store.last_offset(log) == len(old_only) + len(entries) - 1


@pytest.mark.parametrize("v1", STORES, ids=lambda p: p.name)
@pytest.mark.parametrize("partitions", [1, 7, 50])
def test_a_store_written_by_version_1_is_migrated_whole(
    v1: Path, partitions: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(v1, data / DATA_FILE_NAME)
    before = v1_rows(data / DATA_FILE_NAME)
    # Read-only tools refuse it and name the command that migrates it.
    with pytest.raises(StoreVersionError) as info:
        SqliteRecordStore(data, read_only=True)
    assert f"kip848 store migrate --data-dir {data}" in str(info.value)
    assert main(["replay", "--data-dir", str(data)]) == 1
    assert "kip848 store migrate" in capsys.readouterr().err
    assert v1_rows(data / DATA_FILE_NAME) == before  # untouched
    args = ["store", "migrate", "--data-dir", str(data), "--partitions", str(partitions)]
    assert main([*args, "--output", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary == {
        "data_dir": str(data),
        "migrated": True,
        "schema_version": 2,
        "migrated_from_version": 1,
        "partitions": partitions,
        "journal_entries": len(before[0]),
        "compacted_records": len(before[1]),
    }
    check_migrated(data, before, partitions)
    assert main(args) == 0  # again: nothing to do
    assert "nothing to migrate" in capsys.readouterr().out
    assert main(["replay", "--data-dir", str(data), "--output", "json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["ok"] and replayed["partitions"] == partitions


@pytest.mark.parametrize("v1", STORES, ids=lambda p: p.name)
def test_the_migrated_store_loads_the_golden_state(v1: Path, tmp_path: Path) -> None:
    from golden.make_record_log import summary

    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(v1, data / DATA_FILE_NAME)
    SqliteRecordStore(data, partitions=1).close()  # opened for writing: migrated
    ids = SequentialIds()
    from assignors.range import RangeAssignor
    from assignors.uniform import UniformAssignor

    shard = new_shard(
        config=GroupCoordinatorConfig(), assignors=[UniformAssignor(), RangeAssignor()], ids=ids
    )
    registry = TopicRegistry(ids)
    with SqliteRecordStore(data, read_only=True) as store:
        load_into(store, [shard], registry)
    name = v1.name.removesuffix(".v1.db")
    expected = json.loads((GOLDEN / "logs" / f"{name}.expected.json").read_text())
    assert json.loads(json.dumps(summary(shard, registry), sort_keys=True)) == expected


def make_v1_store(path: Path, seed: int) -> None:
    """A version 1 store as 0.1 wrote it: random batches over a few groups and the cluster,
    puts and tombstones, then a journal expiry (so some records live only in the compacted
    view)."""
    rng = random.Random(seed)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")
    for stmt in sqlite_schema.SCHEMA_V1:
        db.execute(stmt)
    db.executemany(
        "INSERT INTO meta (name, value) VALUES (?, ?)",
        [
            ("schema_version", 1),
            ("created_at_ms", 1),
            ("created_by", "kip848-coordinator 0.1.0"),
            ("journal_expired_through_offset", -1),
            ("clean_shutdown", 1),
        ],
    )
    db.execute(f"PRAGMA application_id = {sqlite_schema.APPLICATION_ID}")
    groups = [None, "g", "h", "a", "b", "group-ü", "x"]
    offset = 0
    for ts in range(rng.randint(1, 60)):
        for _ in range(rng.randint(1, 8)):
            gid = rng.choice(groups)
            key = b"%s/%d" % ((gid or "-").encode(), rng.randint(0, 6))
            value = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 5))
            db.execute(
                "INSERT INTO journal (offset, timestamp_ms, group_id, key, value)"
                " VALUES (?, ?, ?, ?, ?)",
                (offset, ts, gid, key, value),
            )
            offset += 1
    cut = rng.randint(0, 60)
    through = db.execute(
        "SELECT max(offset) FROM journal WHERE timestamp_ms < ?", (cut,)
    ).fetchone()[0]
    if through is not None:
        db.execute("DELETE FROM journal WHERE offset <= ?", (through,))
        db.execute(
            "UPDATE meta SET value = ? WHERE name = 'journal_expired_through_offset'", (through,)
        )
    db.execute("COMMIT")
    db.close()


@pytest.mark.parametrize("seed", range(12))
def test_random_version_1_stores_are_migrated_whole(seed: int, tmp_path: Path) -> None:
    path = tmp_path / DATA_FILE_NAME
    make_v1_store(path, seed)
    before = v1_rows(path)
    partitions = 1 + seed % 5
    SqliteRecordStore(tmp_path, partitions=partitions).close()
    check_migrated(tmp_path, before, partitions)
    with SqliteRecordStore(tmp_path) as store:  # offsets go on after the migrated ones
        total = sum(store.last_offset(log) + 1 for log in log_ids(partitions))
        assert total == len(before[0]) + len(
            [r for r in before[1] if not before[0] or r[0] < before[0][0][0]]
        )
        assert store.last_offset(CLUSTER_LOG) >= -1


def test_a_failed_migration_leaves_the_store_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / DATA_FILE_NAME
    make_v1_store(path, 3)
    before = v1_rows(path)
    real = sqlite_schema.insert_chunks
    calls = []

    def fail_on_the_journal(conn: sqlite3.Connection, sql: str, rows: Any) -> None:
        calls.append(sql)
        if "INTO journal" in sql:
            real(conn, sql, rows)
            raise StoreCorruptError("the disk went away in the middle of the migration")
        real(conn, sql, rows)

    monkeypatch.setattr(sqlite_schema, "insert_chunks", fail_on_the_journal)
    with pytest.raises(StoreCorruptError, match="went away"):
        SqliteRecordStore(tmp_path, partitions=3)
    assert len(calls) == 2
    monkeypatch.undo()
    assert v1_rows(path) == before
    db = sqlite3.connect(path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert tables == {"meta", "journal", "compacted"}
    SqliteRecordStore(tmp_path, partitions=3).close()  # and a second attempt succeeds
    check_migrated(tmp_path, before, 3)
