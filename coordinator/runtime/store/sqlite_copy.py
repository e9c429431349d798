"""A PostgreSQL store copied into a new SQLite store (``kip848 store copy --to sqlite``): how a
deployment of several nodes goes back to one node without losing its groups, offsets, topics,
ACLs or credentials — the way back of :mod:`.postgres_copy`.

Offline: every log's row is locked first (``FOR UPDATE``, as a node's takeover locks it), so
no node can take a partition, append to one or to the cluster log, or cut a journal while the
copy reads; under those locks the copy is refused if a node is still registered or leads a
partition with a lease that has not expired (stop the nodes first; a node killed without
stopping is registered until its lease runs out). The target is the SQLite store of a data
directory that holds none (created here, with the PostgreSQL store's partition count) or an
empty one (what a copy that failed earlier left). Every log's journal and compacted view are
copied record for record — the same offsets, times, groups, keys and values — and its expired
prefix too, so each log goes on at the offset the PostgreSQL store would have given next. The
writes are one SQLite transaction, checked before it commits: per log and table, the rows, the
last offset and the bytes against what was read from PostgreSQL, and each log's next offset. A
copy that fails or does not check out commits nothing. The PostgreSQL store is only read: it
is left as it was (do not start nodes on it again once the one node runs on the copy)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from typing import Any

from .api import StoreError, log_ids
from .postgres import PostgresRecordStore
from .postgres_copy import CopyResult, Tally, check_tallies, connect, line
from .postgres_schema import dsn_for_log
from .sqlite import SqliteRecordStore
from .sqlite_schema import (
    COMPACT_TRIGGERS,
    OFFSET_BITS,
    create_compact_triggers,
    insert_chunks,
    next_offsets,
    pos_range,
)

__all__ = ["copy_to_sqlite"]


def copy_to_sqlite(dsn: str, data_dir: str | os.PathLike[str]) -> CopyResult:
    """Copy the PostgreSQL store at ``dsn`` into the SQLite store of ``data_dir`` (see the
    module docstring). Raises :class:`StoreError` (nothing committed)."""
    import psycopg

    where = dsn_for_log(dsn)
    # Never creates or migrates anything: a database without a store, or a store of another
    # schema, is refused here.
    with PostgresRecordStore(dsn, read_only=True, application_name="kip848-copy") as source:
        partitions = source.partitions
        conn = connect(dsn)
        try:
            with conn:
                conn.execute("BEGIN")
                _check_stopped(conn, where)
                with SqliteRecordStore.in_data_dir(data_dir, partitions=partitions) as target:
                    result = _copy(conn, source, target, where)
                conn.execute("ROLLBACK")  # read only: the locks go
        except psycopg.Error as e:
            raise StoreError(
                f"reading the PostgreSQL store at {where} failed (nothing was committed): "
                f"{line(e, dsn)}"
            ) from None
        finally:
            conn.close()
    return result


def _copy(
    conn: Any, source: PostgresRecordStore, target: SqliteRecordStore, where: str
) -> CopyResult:
    partitions = source.partitions
    path = target.path
    if target.partitions != partitions:
        raise StoreError(
            f"the SQLite store at {path} has {target.partitions} coordinator partitions and "
            f"the PostgreSQL store {partitions}: a group's records would be in another "
            "partition than the one it hashes to; copy into a new data directory"
        )
    journal_tally = {log: Tally() for log in log_ids(partitions)}
    compacted_tally = {log: Tally() for log in log_ids(partitions)}
    expired = dict(conn.execute("SELECT log, expired_through FROM kip848_logs").fetchall())
    wanted = source._read_next_offsets(conn)  # where a node would go on
    sq = target._writer()
    try:
        sq.execute("BEGIN IMMEDIATE")
        _check_empty(sq, target)
        for trigger in COMPACT_TRIGGERS:  # the compacted view is copied as it is, not rebuilt
            sq.execute(f"DROP TRIGGER {trigger}")
        for log in log_ids(partitions):
            base = (log + 1) << OFFSET_BITS
            insert_chunks(
                sq,
                "INSERT INTO journal (pos, timestamp_ms, group_id, key, value)"
                " VALUES (?, ?, ?, ?, ?)",
                (
                    (base | offset, ts, group_id, key, value)
                    for offset, ts, group_id, key, value in _tallied(
                        _read(
                            conn,
                            'SELECT "offset", timestamp_ms, group_id, key, value FROM'
                            f' kip848_journal WHERE log = {log} ORDER BY "offset"',
                            ["int8", "int8", "text", "bytea", "bytea"],
                        ),
                        journal_tally[log],
                        3,
                    )
                ),
            )
            insert_chunks(
                sq,
                "INSERT INTO compacted (pos, log, key, group_id, value) VALUES (?, ?, ?, ?, ?)",
                (
                    (base | offset, log, key, group_id, value)
                    for offset, key, value, group_id in _tallied(
                        _read(
                            conn,
                            'SELECT "offset", key, value, group_id FROM kip848_compacted'
                            f' WHERE log = {log} ORDER BY "offset"',
                            ["int8", "bytea", "bytea", "text"],
                        ),
                        compacted_tally[log],
                        1,
                    )
                ),
            )
            sq.execute("UPDATE logs SET expired_through = ? WHERE log = ?", (expired[log], log))
        create_compact_triggers(sq)
        _check_copied(sq, path, journal_tally, compacted_tally)
        found = next_offsets(sq, partitions)
        if found != wanted:
            raise StoreError(
                f"the copy into {path} does not check out: its logs would go on at {found}, the "
                f"PostgreSQL store's at {wanted}; nothing was committed"
            )
        sq.execute("COMMIT")
    except sqlite3.Error as e:
        raise StoreError(
            f"copying into the SQLite store at {path} failed (nothing was committed): {e}"
        ) from None
    finally:
        if sq.in_transaction:
            sq.execute("ROLLBACK")
    return CopyResult(
        str(path),
        partitions,
        sum(t.rows for t in journal_tally.values()),
        sum(t.rows for t in compacted_tally.values()),
        found,
    )


def _check_stopped(conn: Any, where: str) -> None:
    """Take the lock of every log's row (no takeover, append or retention can run until the
    copy ends) and refuse a store a node may still be using: a registration or a lease that
    has not expired. Raises :class:`StoreError` otherwise."""
    conn.execute("SELECT log FROM kip848_logs ORDER BY log FOR UPDATE").fetchall()
    conn.execute("SELECT id FROM kip848_controller FOR UPDATE").fetchall()
    nodes = [
        int(row[0])
        for row in conn.execute(
            "SELECT node_id FROM kip848_nodes WHERE expires_at > clock_timestamp()"
            " UNION SELECT leader FROM kip848_logs WHERE leader IS NOT NULL"
            " AND lease_expires_at >= clock_timestamp()"
            " UNION SELECT node_id FROM kip848_controller WHERE node_id IS NOT NULL"
            " AND expires_at > clock_timestamp() ORDER BY 1"
        ).fetchall()
    ]
    if nodes:
        left = conn.execute(
            "SELECT ceil(extract(epoch FROM greatest("
            " (SELECT max(expires_at) FROM kip848_nodes),"
            " (SELECT max(lease_expires_at) FROM kip848_logs),"
            " (SELECT expires_at FROM kip848_controller)) - clock_timestamp()))"
        ).fetchone()[0]
        raise StoreError(
            f"the PostgreSQL store at {where} is in use by node{'s' if len(nodes) > 1 else ''} "
            f"{', '.join(map(str, nodes))} (registered or leading partitions): stop every node "
            f"first (a node killed without stopping holds the store for its lease, here "
            f"{int(left or 0)} s more); nothing was changed"
        )


def _check_empty(sq: sqlite3.Connection, target: SqliteRecordStore) -> None:
    (used,) = sq.execute(
        "SELECT EXISTS (SELECT 1 FROM journal) OR EXISTS (SELECT 1 FROM compacted)"
        " OR EXISTS (SELECT 1 FROM logs WHERE expired_through >= 0)"
    ).fetchone()
    if used:
        raise StoreError(
            f"the SQLite store at {target.path} holds records: a store is copied only into a "
            "data directory that holds none; nothing was changed"
        )


def _read(conn: Any, query: str, types: list[str]) -> Iterator[tuple[Any, ...]]:
    with conn.cursor().copy(f"COPY ({query}) TO STDOUT (FORMAT BINARY)") as copy:
        copy.set_types(types)
        yield from copy.rows()


def _tallied(
    rows: Iterator[tuple[Any, ...]], tally: Tally, key_at: int
) -> Iterator[tuple[Any, ...]]:
    """The rows (the offset first, the key at ``key_at`` and the value next), each counted in
    ``tally`` as it passes."""
    for row in rows:
        tally.add(row[0], row[key_at], row[key_at + 1])
        yield row


def _check_copied(
    sq: sqlite3.Connection, path: Any, journal: dict[int, Tally], compacted: dict[int, Tally]
) -> None:
    for table, tally in (("journal", journal), ("compacted", compacted)):
        found = {}
        for log in tally:
            lo, hi = pos_range(log)
            rows, last, nbytes = sq.execute(
                f"SELECT count(*), max(pos) - ?, sum(length(key) + coalesce(length(value), 0))"
                f" FROM {table} WHERE pos BETWEEN ? AND ?",
                (lo, lo, hi),
            ).fetchone()
            if rows:
                found[log] = (int(rows), int(last), int(nbytes))
        check_tallies(str(path), table, found, tally, "PostgreSQL")
