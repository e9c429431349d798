"""A SQLite store copied into a PostgreSQL store (``kip848 store copy``): how a deployment of
one node moves to several nodes without losing its groups, offsets, topics, ACLs or
credentials.

Offline: the SQLite store is opened for writing, so its writer lock keeps a server off it for
the whole copy (one running on it is refused with :class:`StoreLockedError`). The target is a
PostgreSQL store that no node has used: created here if the database holds none, or one that
holds no record, no node and no lease (a copy that failed earlier left such a store). Every
log's compacted view and journal are copied record for record — the same offsets, times,
groups, keys and values — and its expired prefix too, so each log goes on at the offset the
SQLite store would have given next. All of it is one PostgreSQL transaction, taken under the
lock of every log's row (the one a node's takeover takes first), and checked before it commits:
per log and table, the rows, the last offset and the bytes against what was read from SQLite.
A copy that fails or does not check out commits nothing."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .api import StoreAccessError, StoreError, log_ids
from .postgres import PostgresRecordStore
from .postgres_schema import connect_options, dsn_for_log, scrub
from .sqlite import SqliteRecordStore

__all__ = ["CopyResult", "Tally", "check_tallies", "connect", "copy_to_postgres", "line"]


@dataclass(slots=True)
class Tally:
    """One log's rows of one table as they are copied: how many, the last offset, the bytes of
    their keys and values (what the copy checks the target against)."""

    rows: int = 0
    last: int = -1
    nbytes: int = 0

    def add(self, offset: int, key: bytes, value: bytes | None) -> None:
        self.rows += 1
        self.last = max(self.last, offset)
        self.nbytes += len(key) + (0 if value is None else len(value))

    def figures(self) -> tuple[int, int, int]:
        return (self.rows, self.last, self.nbytes)


@dataclass(frozen=True, slots=True)
class CopyResult:
    where: str
    partitions: int
    journal_entries: int
    compacted_records: int
    next_offsets: dict[int, int] = field(default_factory=dict)


def copy_to_postgres(source: SqliteRecordStore, dsn: str) -> CopyResult:
    """Copy ``source`` (open for writing: its lock keeps servers off) into the PostgreSQL store
    at ``dsn`` (see the module docstring). Raises :class:`StoreError` (nothing committed)."""
    import psycopg

    where = dsn_for_log(dsn)
    partitions = source.partitions
    # Creates the store if the database holds none (its own transaction: an empty store),
    # migrates an older one, and checks the one there is.
    with PostgresRecordStore(dsn, partitions=partitions, application_name="kip848-copy") as target:
        if target.partitions != partitions:
            raise StoreError(
                f"the PostgreSQL store at {where} has {target.partitions} coordinator "
                f"partitions and the SQLite store {partitions}: a group's records would be in "
                "another partition than the one it hashes to; copy into a new database"
            )
    stats = source.stats()
    logs = stats["logs"]
    conn = connect(dsn)
    journal_tally = {log: Tally() for log in log_ids(partitions)}
    compacted_tally = {log: Tally() for log in log_ids(partitions)}
    try:
        with conn:
            conn.execute("BEGIN")
            _check_unused(conn, where)
            for log in log_ids(partitions):
                with conn.cursor().copy(
                    'COPY kip848_journal (log, "offset", timestamp_ms, leader_epoch, group_id,'
                    " key, value) FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.set_types(["int4", "int8", "int8", "int8", "text", "bytea", "bytea"])
                    for offset, ts, group_id, key, value in _rows(source.journal_rows(log)):
                        copy.write_row((log, offset, ts, 0, group_id, key, value))
                        journal_tally[log].add(offset, key, value)
                with conn.cursor().copy(
                    'COPY kip848_compacted (log, key, "offset", group_id, value)'
                    " FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.set_types(["int4", "bytea", "int8", "text", "bytea"])
                    for offset, key, value, group_id in _rows(source.load_rows(log)):
                        copy.write_row((log, key, offset, group_id, value))
                        compacted_tally[log].add(offset, key, value)
                info = logs[log]
                first = info["journal_first_offset"]
                expired = info["last_offset"] if first is None else first - 1
                conn.execute(
                    "UPDATE kip848_logs SET expired_through = %s WHERE log = %s", (expired, log)
                )
            _check_copied(conn, where, journal_tally, compacted_tally)
            # The store's own reckoning (journal, compacted view, expired prefix; it reads only
            # through ``conn``), in this uncommitted transaction: where a node would go on.
            next_offsets = target._read_next_offsets(conn)
            wanted = {log: logs[log]["last_offset"] + 1 for log in log_ids(partitions)}
            if next_offsets != wanted:
                raise StoreError(
                    f"the copy into {where} does not check out: its logs would go on at "
                    f"{next_offsets}, the SQLite store's at {wanted}; nothing was committed"
                )
            conn.execute("COMMIT")
    except psycopg.Error as e:
        raise StoreError(
            f"copying into the PostgreSQL store at {where} failed (nothing was committed): "
            f"{line(e, dsn)}"
        ) from None
    finally:
        conn.close()
    return CopyResult(
        where,
        partitions,
        sum(t.rows for t in journal_tally.values()),
        sum(t.rows for t in compacted_tally.values()),
        next_offsets,
    )


def connect(dsn: str) -> Any:
    """The copy's own connection (autocommit: it runs its transaction itself). Raises
    :class:`StoreAccessError`."""
    import psycopg

    try:
        return psycopg.connect(
            dsn, autocommit=True, application_name="kip848-copy", **connect_options(dsn)
        )
    except psycopg.Error as e:
        raise StoreAccessError(
            f"cannot connect to the PostgreSQL store at {dsn_for_log(dsn)}: {line(e, dsn)}"
        ) from None


def line(e: BaseException, dsn: str) -> str:
    return scrub(" ".join(str(e).split()), dsn) or type(e).__name__


def _rows(chunks: Iterable[list[Any]]) -> Iterator[Any]:
    for chunk in chunks:
        yield from chunk


def _check_unused(conn: Any, where: str) -> None:
    """Under the lock of every log's row (a node's takeover locks it first): no node, no lease
    and no record yet. Raises :class:`StoreError` otherwise."""
    conn.execute("SELECT log FROM kip848_logs FOR UPDATE").fetchall()
    leased = conn.execute(
        "SELECT count(*) FROM kip848_logs WHERE leader IS NOT NULL OR leader_epoch > 0"
        " OR expired_through >= 0"
    ).fetchone()[0]
    nodes = conn.execute(
        "SELECT (SELECT count(*) FROM kip848_nodes) + (SELECT count(*) FROM kip848_controller"
        " WHERE node_id IS NOT NULL OR epoch > 0)"
    ).fetchone()[0]
    journal = conn.execute("SELECT EXISTS (SELECT 1 FROM kip848_journal)").fetchone()[0]
    compacted = conn.execute("SELECT EXISTS (SELECT 1 FROM kip848_compacted)").fetchone()[0]
    if leased or nodes or journal or compacted:
        raise StoreError(
            f"the PostgreSQL store at {where} is in use (it holds records, or nodes have "
            "registered or led partitions there): a store is copied only into one no node has "
            "used; nothing was changed"
        )


def _check_copied(
    conn: Any, where: str, journal: dict[int, Tally], compacted: dict[int, Tally]
) -> None:
    for table, tally in (("kip848_journal", journal), ("kip848_compacted", compacted)):
        found = {
            int(log): (int(rows), int(last), int(nbytes))
            for log, rows, last, nbytes in conn.execute(
                f'SELECT log, count(*), max("offset"), sum(length(key) +'
                f" coalesce(length(value), 0)) FROM {table} GROUP BY log"
            ).fetchall()
        }
        check_tallies(where, table, found, tally, "SQLite")


def check_tallies(
    where: str,
    table: str,
    found: dict[int, tuple[int, int, int]],
    tally: dict[int, Tally],
    source: str,
) -> None:
    """Raise :class:`StoreError` unless the copy's ``table`` holds, per log, the rows, last offset
    and bytes read from the ``source`` store."""
    wanted = {log: t.figures() for log, t in tally.items() if t.rows}
    if found != wanted:
        raise StoreError(
            f"the copy into {where} does not check out ({table}: rows, last offset and bytes "
            f"per log {found}, read from {source} {wanted}); nothing was committed"
        )
