"""The SQLite store's schema: creating it, checking its version, migrating older ones.

Schema version 2 (``PRAGMA application_id`` = 0x4B383438, "K848", marks the file as ours)::

    meta(name TEXT PRIMARY KEY, value)        schema_version, partitions, created_at_ms,
                                              created_by, clean_shutdown, migrated_from_version
    logs(log INTEGER PRIMARY KEY,             one row per log (-1 = the cluster log, then the
         expired_through)                     partitions): the last offset retention removed
    journal(pos INTEGER PRIMARY KEY,          every record ever appended (minus retention);
            timestamp_ms, group_id, key, value)  value NULL = tombstone
    compacted(pos INTEGER PRIMARY KEY, log,   latest live value per (log, key)
              key, group_id, value, UNIQUE (log, key))
    triggers journal_compact_put/_delete      keep ``compacted`` in step with every journal
                                              insert, inside the same transaction

``pos`` is a record's place in the file: ``(log + 1) << 48 | offset``. A log's records are one
contiguous range of the rowid in offset order, so loading a partition, reading its journal or
cutting its prefix is a sequential range scan, and offsets go up to 2**48 per log.

Version 1 (up to kip848-coordinator 0.1) held one log: ``journal``/``compacted`` keyed by
``offset``. :func:`migrate_v1` rewrites it as version 2 in one transaction: every record goes
to its group's partition (the cluster log for topic records), keeping the order of the old
offsets within each log; the compacted view and the journal are kept whole (a record the
journal had already expired stays in the compacted view, before the log's journal).
"""

from __future__ import annotations

import importlib.metadata
import sqlite3
import time
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from coordinator.routing import CLUSTER_LOG

from .api import StoreCorruptError, StoreVersionError, log_ids, log_of

SCHEMA_VERSION = 2
APPLICATION_ID = 0x4B383438  # "K848"
OFFSET_BITS = 48
OFFSET_MASK = (1 << OFFSET_BITS) - 1
_CHUNK = 50_000  # rows per executemany while migrating

_SCHEMA_V2 = (
    "CREATE TABLE meta (name TEXT PRIMARY KEY NOT NULL, value NOT NULL)",
    "CREATE TABLE logs (log INTEGER PRIMARY KEY, expired_through INTEGER NOT NULL)",
    (
        "CREATE TABLE journal (pos INTEGER PRIMARY KEY, timestamp_ms INTEGER NOT NULL,"
        " group_id TEXT, key BLOB NOT NULL, value BLOB)"
    ),
    (
        "CREATE TABLE compacted (pos INTEGER PRIMARY KEY, log INTEGER NOT NULL,"
        " key BLOB NOT NULL, group_id TEXT, value BLOB NOT NULL, UNIQUE (log, key))"
    ),
    # INSERT OR REPLACE removes the row holding the old value of the key (found through the
    # UNIQUE index) and inserts the new one at its new position: the table stays in log and
    # offset order.
    (
        "CREATE TRIGGER journal_compact_put AFTER INSERT ON journal WHEN NEW.value IS NOT NULL"
        " BEGIN INSERT OR REPLACE INTO compacted (pos, log, key, group_id, value)"
        f" VALUES (NEW.pos, (NEW.pos >> {OFFSET_BITS}) - 1, NEW.key, NEW.group_id, NEW.value);"
        " END"
    ),
    (
        "CREATE TRIGGER journal_compact_delete AFTER INSERT ON journal WHEN NEW.value IS NULL"
        f" BEGIN DELETE FROM compacted WHERE log = (NEW.pos >> {OFFSET_BITS}) - 1"
        " AND key = NEW.key; END"
    ),
)

COMPACT_TRIGGERS = ("journal_compact_put", "journal_compact_delete")
"""The triggers that keep ``compacted`` in step with the journal: dropped by a copy that writes
both tables as they are, then made again (:func:`create_compact_triggers`)."""


def create_compact_triggers(conn: sqlite3.Connection) -> None:
    for stmt in _SCHEMA_V2:
        if stmt.startswith("CREATE TRIGGER"):
            conn.execute(stmt)


SCHEMA_V1 = (
    "CREATE TABLE meta (name TEXT PRIMARY KEY NOT NULL, value NOT NULL)",
    (
        "CREATE TABLE journal (offset INTEGER PRIMARY KEY, timestamp_ms INTEGER NOT NULL,"
        " group_id TEXT, key BLOB NOT NULL, value BLOB)"
    ),
    (
        "CREATE TABLE compacted (offset INTEGER PRIMARY KEY, key BLOB NOT NULL UNIQUE,"
        " group_id TEXT, value BLOB NOT NULL)"
    ),
    (
        "CREATE TRIGGER journal_compact_put AFTER INSERT ON journal WHEN NEW.value IS NOT NULL"
        " BEGIN INSERT OR REPLACE INTO compacted (offset, key, group_id, value)"
        " VALUES (NEW.offset, NEW.key, NEW.group_id, NEW.value); END"
    ),
    (
        "CREATE TRIGGER journal_compact_delete AFTER INSERT ON journal WHEN NEW.value IS NULL"
        " BEGIN DELETE FROM compacted WHERE key = NEW.key; END"
    ),
)
"""The version 1 schema, as 0.1 created it: what :func:`migrate_v1` reads (and tests build)."""


def pos_range(log: int) -> tuple[int, int]:
    """The first and last ``pos`` a log's records may have."""
    base = (log + 1) << OFFSET_BITS
    return base, base | OFFSET_MASK


def package_version() -> str:
    try:
        return "kip848-coordinator " + importlib.metadata.version("kip848-coordinator")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "kip848-coordinator (unknown version)"


def create_schema(conn: sqlite3.Connection, partitions: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for stmt in _SCHEMA_V2:
            conn.execute(stmt)
        conn.executemany(
            "INSERT INTO meta (name, value) VALUES (?, ?)",
            [
                ("schema_version", SCHEMA_VERSION),
                ("partitions", partitions),
                ("created_at_ms", int(time.time() * 1000)),
                ("created_by", package_version()),
                ("clean_shutdown", 1),
            ],
        )
        conn.executemany(
            "INSERT INTO logs (log, expired_through) VALUES (?, -1)",
            [(log,) for log in log_ids(partitions)],
        )
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def schema_version(conn: sqlite3.Connection, path: Path) -> int:
    try:
        row = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
    except sqlite3.OperationalError as e:  # no meta table
        raise StoreCorruptError(f"record store at {path} is corrupt: {e}") from e
    if row is None or type(row[0]) is not int or row[0] < 1:
        raise StoreCorruptError(f"record store at {path} is corrupt: no valid schema_version")
    version: int = row[0]
    if version > SCHEMA_VERSION:
        raise StoreVersionError(
            f"record store at {path} was written by schema version {version}; this build "
            f"understands up to {SCHEMA_VERSION}; upgrade kip848-coordinator"
        )
    return version


def stored_partitions(conn: sqlite3.Connection, path: Path) -> int:
    row = conn.execute("SELECT value FROM meta WHERE name = 'partitions'").fetchone()
    if row is None or type(row[0]) is not int or row[0] < 1:
        raise StoreCorruptError(f"record store at {path} is corrupt: no valid partition count")
    n: int = row[0]
    logs = [r[0] for r in conn.execute("SELECT log FROM logs ORDER BY log")]
    if logs != list(log_ids(n)):
        raise StoreCorruptError(
            f"record store at {path} is corrupt: {n} partitions, but logs {logs[:5]}..."
        )
    return n


def refuse_old_version(path: Path, version: int) -> StoreVersionError:
    return StoreVersionError(
        f"record store at {path} was written by schema version {version} (one log, before "
        f"coordinator partitions); this build reads version {SCHEMA_VERSION}. Migrate it "
        f"first: `kip848 store migrate --data-dir {path.parent}` (kip848 serve also migrates "
        "it when it starts); nothing is lost"
    )


def next_offsets(conn: sqlite3.Connection, partitions: int) -> dict[int, int]:
    """Each log's next offset: after its last journal entry, compacted record and expired
    prefix (offsets are never reused, even once retention and tombstones removed them all)."""
    expired = dict(conn.execute("SELECT log, expired_through FROM logs").fetchall())
    out = {}
    for log in log_ids(partitions):
        lo, hi = pos_range(log)
        row = conn.execute(
            "SELECT max(coalesce((SELECT max(pos) FROM journal WHERE pos BETWEEN ?1 AND ?2),"
            " -1), coalesce((SELECT max(pos) FROM compacted WHERE pos BETWEEN ?1 AND ?2), -1))",
            (lo, hi),
        ).fetchone()
        last = row[0] & OFFSET_MASK if row[0] >= 0 else -1
        out[log] = max(last, expired[log]) + 1
    return out


def migrate_v1(conn: sqlite3.Connection, path: Path, partitions: int) -> dict[str, int]:
    """Rewrite a version 1 store (one log) as version 2 (``partitions`` logs), inside the
    caller's transaction. Returns counts for the log line; raises :class:`StoreCorruptError`
    (the caller rolls back) if the result does not hold exactly the records it started from."""
    for stmt in (
        "DROP TRIGGER journal_compact_put",
        "DROP TRIGGER journal_compact_delete",
        "ALTER TABLE journal RENAME TO journal_v1",
        "ALTER TABLE compacted RENAME TO compacted_v1",
    ):
        conn.execute(stmt)
    for stmt in _SCHEMA_V2[1:]:  # meta stays
        conn.execute(stmt)
    first = conn.execute("SELECT min(offset) FROM journal_v1").fetchone()[0]
    before = _counts(conn, "journal_v1", "compacted_v1")
    next_offset: dict[int, int] = dict.fromkeys(log_ids(partitions), 0)
    cache: dict[str | None, int] = {}

    def place(group_id: str | None) -> int:
        log = cache.get(group_id)
        if log is None:
            log = cache[group_id] = log_of(group_id, partitions)
        offset = next_offset[log]
        next_offset[log] = offset + 1
        return ((log + 1) << OFFSET_BITS) | offset

    # Records only the compacted view still holds (their journal entries expired) come first in
    # each log, in their old order; the journal follows, through the triggers.
    only_compacted = conn.execute(
        "SELECT offset, key, group_id, value FROM compacted_v1"
        + ("" if first is None else " WHERE offset < ?")
        + " ORDER BY offset",
        () if first is None else (first,),
    )
    insert_chunks(
        conn,
        "INSERT INTO compacted (pos, log, key, group_id, value) VALUES (?, ?, ?, ?, ?)",
        (
            (pos, (pos >> OFFSET_BITS) - 1, key, gid, value)
            for pos, key, gid, value in (
                (place(gid), key, gid, value) for _o, key, gid, value in only_compacted
            )
        ),
    )
    expired = {log: n - 1 for log, n in next_offset.items()}
    conn.executemany(
        "INSERT INTO logs (log, expired_through) VALUES (?, ?)", sorted(expired.items())
    )
    journal = conn.execute(
        "SELECT timestamp_ms, group_id, key, value FROM journal_v1 ORDER BY offset"
    )
    insert_chunks(
        conn,
        "INSERT INTO journal (pos, timestamp_ms, group_id, key, value) VALUES (?, ?, ?, ?, ?)",
        ((place(gid), ts, gid, key, value) for ts, gid, key, value in journal),
    )
    after = _counts(conn, "journal", "compacted")
    same = conn.execute(
        "SELECT count(*) FROM compacted_v1 o JOIN compacted n ON n.key = o.key"
        " AND n.value = o.value AND n.group_id IS o.group_id"
    ).fetchone()[0]
    if after != before or same != before["compacted"]:
        raise StoreCorruptError(
            f"migrating the record store at {path} to schema version {SCHEMA_VERSION} did not "
            f"keep every record (before {before}, after {after}, {same} compacted records "
            "unchanged); the store was left as it was"
        )
    conn.execute("DROP TABLE journal_v1")
    conn.execute("DROP TABLE compacted_v1")
    conn.execute("DELETE FROM meta WHERE name = 'journal_expired_through_offset'")
    conn.executemany(
        "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
        [
            ("partitions", partitions),
            ("migrated_from_version", 1),
            ("migrated_at_ms", int(time.time() * 1000)),
            ("migrated_by", package_version()),
        ],
    )
    return {**after, "partitions": partitions, "cluster_records": next_offset[CLUSTER_LOG]}


def _counts(conn: sqlite3.Connection, journal: str, compacted: str) -> dict[str, int]:
    return {
        "journal": conn.execute(f"SELECT count(*) FROM {journal}").fetchone()[0],
        "compacted": conn.execute(f"SELECT count(*) FROM {compacted}").fetchone()[0],
    }


def insert_chunks(conn: sqlite3.Connection, sql: str, rows: Iterator[Any]) -> None:
    while chunk := list(islice(rows, _CHUNK)):
        conn.executemany(sql, chunk)
