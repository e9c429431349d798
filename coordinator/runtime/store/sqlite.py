"""The embedded default :class:`~.api.RecordStore`: one SQLite file in WAL mode.

File: ``<data-dir>/coordinator.db`` (plus SQLite's ``-wal``/``-shm`` and our ``.lock``).
Schema version 1 (``PRAGMA application_id`` = 0x4B383438, "K848", marks the file as ours)::

    meta(name TEXT PRIMARY KEY, value)          schema_version, created_at_ms, created_by,
                                                journal_expired_through_offset
    journal(offset INTEGER PRIMARY KEY,         every record ever appended (minus retention);
            timestamp_ms, group_id, key, value)   value NULL = tombstone. Read it for analytics.
    compacted(offset INTEGER PRIMARY KEY,       latest live value per key; rowid = offset, so
              key BLOB UNIQUE, group_id, value)   loading is a sequential scan in offset order
    triggers journal_compact_put/_delete       keep ``compacted`` in step with every journal
                                                insert, inside the same transaction

Durability: one batch = one ``BEGIN IMMEDIATE ... COMMIT``. With ``sync="full"`` (default)
SQLite fsyncs the WAL on every commit, so an acknowledged batch survives ``kill -9`` and power
loss (as far as the disk honours fsync). ``sync="normal"`` survives ``kill -9`` but may lose the
last commits on power loss. ``sync="off"`` is for benchmark fixtures only.

Retention: with ``journal_retention_ms``, each ``append`` whose timestamp is due (once a minute)
runs one extra small transaction after its batch is durable, deleting at most 2,000 expired
journal entries (more on the next appends while a backlog remains); its errors are logged.

Thread model: every method may be called from any thread; one lock serialises the single writer
connection (the runtime calls ``append`` from one writer thread anyway). ``load``/``journal``/
``stats`` read through their own short-lived read-only connection, so a long read neither
blocks nor sees appends made after it started (WAL snapshot isolation). Only one process may
open a store for writing: an exclusive ``flock`` on ``coordinator.db.lock`` enforces it.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Literal, Self

from .api import (
    JournalEntry,
    StoredRecord,
    StoreError,
    StoreVersionError,
    StoreWriteError,
    check_batch,
    retention_interval_ms,
)

try:  # POSIX only; elsewhere the single-writer rule is documented but not enforced.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

__all__ = ["DATA_FILE_NAME", "SCHEMA_VERSION", "SqliteRecordStore"]

log = logging.getLogger(__name__)

DATA_FILE_NAME = "coordinator.db"
SCHEMA_VERSION = 1
APPLICATION_ID = 0x4B383438  # "K848"
Sync = Literal["full", "normal", "off"]
_SYNC_PRAGMA = {"full": "FULL", "normal": "NORMAL", "off": "OFF"}
_FETCH = 8192  # rows per fetchmany: one C call per chunk instead of one per row
_EXPIRE_CHUNK = 50_000  # journal rows deleted per transaction, so appends interleave
_RETENTION_STEP = 2_000  # journal rows at most deleted by the automatic retention of one append

_SCHEMA_V1 = (
    "CREATE TABLE meta (name TEXT PRIMARY KEY NOT NULL, value NOT NULL)",
    (
        "CREATE TABLE journal (offset INTEGER PRIMARY KEY, timestamp_ms INTEGER NOT NULL,"
        " group_id TEXT, key BLOB NOT NULL, value BLOB)"
    ),
    (
        "CREATE TABLE compacted (offset INTEGER PRIMARY KEY, key BLOB NOT NULL UNIQUE,"
        " group_id TEXT, value BLOB NOT NULL)"
    ),
    # INSERT OR REPLACE removes the row holding the old value of the key (found through the
    # UNIQUE index) and inserts the new one at its new offset: the table stays in offset order.
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

# MIGRATIONS[n] upgrades a store from schema version n to n + 1 inside one transaction.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {}


def _package_version() -> str:
    try:
        return "kip848-coordinator " + importlib.metadata.version("kip848-coordinator")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "kip848-coordinator (unknown version)"


def resolve_path(path_or_dir: str | os.PathLike[str]) -> Path:
    """The data file for ``path_or_dir``: an existing directory or a path without a ``.db``
    suffix is a data directory (``<dir>/coordinator.db``); anything else is the file itself."""
    p = Path(path_or_dir)
    if p.is_dir() or (not p.exists() and p.suffix != ".db"):
        return p / DATA_FILE_NAME
    return p


class SqliteRecordStore:
    """See the module docstring. ``read_only=True`` opens an existing store for inspection
    (``kip848 replay``/dump, analytics) without the writer lock; ``append`` then fails."""

    def __init__(
        self,
        path_or_dir: str | os.PathLike[str],
        *,
        journal_retention_ms: int | None = None,
        sync: Sync = "full",
        read_only: bool = False,
    ) -> None:
        if sync not in _SYNC_PRAGMA:
            raise ValueError(f"sync must be one of {sorted(_SYNC_PRAGMA)}, got {sync!r}")
        if journal_retention_ms is not None and journal_retention_ms < 0:
            raise ValueError("journal_retention_ms must be >= 0 or None")
        self.path = resolve_path(path_or_dir).absolute()
        self.journal_retention_ms = journal_retention_ms
        self.sync = sync
        self.read_only = read_only
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._lock_file: BinaryIO | None = None
        self._failed = False
        self._retention_due_ms = -(2**63)  # the first append checks
        self._ro_uri = self.path.as_uri() + "?mode=ro"
        try:
            self._open()
        except BaseException:
            self._release()
            raise

    # -- opening ----------------------------------------------------------------------------

    def _open(self) -> None:
        path = self.path
        if self.read_only and not path.is_file():
            raise StoreError(f"no record store at {path}")
        try:
            if not self.read_only:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._lock_file = _lock_exclusively(path.with_name(path.name + ".lock"), path)
            created = not path.exists() or path.stat().st_size == 0
            if self.read_only:
                conn = sqlite3.connect(
                    self._ro_uri, uri=True, isolation_level=None, check_same_thread=False
                )
            else:
                conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._conn = conn
            conn.execute("PRAGMA busy_timeout = 5000")
            # Identify the file before changing anything in it (WAL mode is persistent):
            # a foreign database must be left exactly as it was.
            is_new = self._identify(conn)
            if not self.read_only:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if mode.lower() != "wal":
                    raise StoreError(f"cannot put {path} in WAL mode (got {mode!r})")
                conn.execute(f"PRAGMA synchronous = {_SYNC_PRAGMA[self.sync]}")
                conn.execute("PRAGMA fullfsync = ON")  # macOS: a real flush; no-op on Linux
                conn.execute("PRAGMA journal_size_limit = 67108864")  # shrink WAL after bursts
                conn.execute("PRAGMA cache_size = -65536")  # 64 MiB
            if is_new:
                self._create_schema(conn)
            else:
                self._check_version(conn)
            self._next_offset = self._read_last_offset(conn) + 1
        except sqlite3.DatabaseError as e:
            raise StoreError(
                f"cannot open record store at {path}: {e} (corrupt, or not a kip848 store)"
            ) from e
        except OSError as e:
            raise StoreError(f"cannot open record store at {path}: {e}") from e
        if created and not self.read_only:
            _fsync_dir(path.parent)  # make the new file's directory entry durable

    def _identify(self, conn: sqlite3.Connection) -> bool:
        """True for an empty database (a new store); raise unless the file is ours."""
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        n_objects = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if app_id == 0 and n_objects == 0 and not self.read_only:
            return True
        if app_id != APPLICATION_ID:
            raise StoreError(
                f"{self.path} is not a kip848 record store (SQLite application_id "
                f"{app_id:#x}, expected {APPLICATION_ID:#x}); refusing to use it"
            )
        return False

    def _check_version(self, conn: sqlite3.Connection) -> None:
        path = self.path
        row = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        if row is None or type(row[0]) is not int or row[0] < 1:
            raise StoreError(f"record store at {path} is corrupt: no valid schema_version")
        version = row[0]
        if version > SCHEMA_VERSION:
            raise StoreVersionError(
                f"record store at {path} was written by schema version {version}; this build "
                f"understands up to {SCHEMA_VERSION}; upgrade kip848-coordinator"
            )
        if version < SCHEMA_VERSION:
            self._migrate(conn, version)

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for stmt in _SCHEMA_V1:
                conn.execute(stmt)
            conn.executemany(
                "INSERT INTO meta (name, value) VALUES (?, ?)",
                [
                    ("schema_version", SCHEMA_VERSION),
                    ("created_at_ms", int(time.time() * 1000)),
                    ("created_by", _package_version()),
                    ("journal_expired_through_offset", -1),
                ],
            )
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _migrate(self, conn: sqlite3.Connection, version: int) -> None:
        missing = [v for v in range(version, SCHEMA_VERSION) if v not in MIGRATIONS]
        if missing or self.read_only:
            why = "opened read-only" if self.read_only else "no migration from it exists"
            raise StoreVersionError(
                f"record store at {self.path} was written by schema version {version}; this "
                f"build uses {SCHEMA_VERSION} and {why}"
            )
        for v in range(version, SCHEMA_VERSION):
            conn.execute("BEGIN IMMEDIATE")
            try:
                MIGRATIONS[v](conn)
                conn.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (v + 1,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    @staticmethod
    def _read_last_offset(conn: sqlite3.Connection) -> int:
        # Offsets are never reused: after retention emptied the journal and tombstones emptied
        # the compacted view, the meta high-water mark still remembers the last one.
        row = conn.execute(
            "SELECT max(coalesce((SELECT max(offset) FROM journal), -1),"
            " coalesce((SELECT max(offset) FROM compacted), -1),"
            " (SELECT value FROM meta WHERE name = 'journal_expired_through_offset'))"
        ).fetchone()
        return int(row[0])

    # -- writing ----------------------------------------------------------------------------

    def append(self, records: Sequence[StoredRecord], timestamp_ms: int) -> int:
        check_batch(records, timestamp_ms)
        with self._lock:
            conn = self._writer()
            if not records:
                return self._next_offset - 1
            start = self._next_offset
            rows = [
                (start + i, timestamp_ms, rec.group_id, rec.key, rec.value)
                for i, rec in enumerate(records)
            ]
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(
                    "INSERT INTO journal (offset, timestamp_ms, group_id, key, value)"
                    " VALUES (?, ?, ?, ?, ?)",
                    rows,
                )
            except BaseException as e:
                self._rollback()
                if not isinstance(e, Exception):
                    raise
                raise StoreWriteError(f"append to {self.path} failed, rolled back: {e}") from e
            try:
                self._commit()
            except BaseException as e:
                # A failed COMMIT may still have reached the disk (e.g. fsync reported an error
                # after the commit frame was written): the outcome is unknown, so stop here.
                self._failed = True
                self._rollback()
                if not isinstance(e, Exception):
                    raise
                raise StoreWriteError(
                    f"commit to {self.path} failed; the batch may or may not be durable: {e}",
                    outcome_unknown=True,
                ) from e
            last = start + len(rows) - 1
            self._next_offset = last + 1
        if self.journal_retention_ms is not None and timestamp_ms >= self._retention_due_ms:
            self._retention_step(timestamp_ms)
        return last

    def _commit(self) -> None:
        assert self._conn is not None
        self._conn.execute("COMMIT")

    def _rollback(self) -> None:
        conn = self._conn
        if conn is None or not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            self._failed = True  # state unknown; refuse further writes

    def _writer(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreWriteError(f"record store at {self.path} is closed")
        if self.read_only:
            raise StoreWriteError(f"record store at {self.path} is open read-only")
        if self._failed:
            raise StoreWriteError(
                f"record store at {self.path} failed earlier (see the first StoreWriteError);"
                " close and reopen it"
            )
        return self._conn

    def expire_journal(self, older_than_ms: int) -> int:
        if type(older_than_ms) is not int:
            raise TypeError("older_than_ms must be an int")
        deleted, more = 0, True
        while more:  # one transaction per chunk, so appends interleave
            n, more = self._expire_chunk(older_than_ms, _EXPIRE_CHUNK)
            deleted += n
        return deleted

    def _expire_chunk(self, older_than_ms: int, limit: int) -> tuple[int, bool]:
        """Expire the expired prefix of the first ``limit`` journal entries. Returns (entries
        deleted, whether the whole chunk expired, i.e. there may be more)."""
        with self._lock:
            conn = self._writer()
            try:
                conn.execute("BEGIN IMMEDIATE")
                head = conn.execute(
                    "SELECT offset, timestamp_ms FROM journal ORDER BY offset LIMIT ?", (limit,)
                ).fetchall()
                n = next((i for i, (_, ts) in enumerate(head) if ts >= older_than_ms), len(head))
                if n:
                    through = head[n - 1][0]
                    conn.execute("DELETE FROM journal WHERE offset <= ?", (through,))
                    conn.execute(
                        "UPDATE meta SET value = max(value, ?)"
                        " WHERE name = 'journal_expired_through_offset'",
                        (through,),
                    )
                    self._commit()
                else:
                    conn.execute("ROLLBACK")
            except sqlite3.Error as e:
                self._rollback()
                raise StoreWriteError(f"journal expiry in {self.path} failed: {e}") from e
        return n, n == limit

    def apply_retention(self, now_ms: int) -> int:
        if self.journal_retention_ms is None:
            return 0
        return self.expire_journal(now_ms - self.journal_retention_ms)

    def _retention_step(self, now_ms: int) -> None:
        """Automatic retention, run by append() after its batch is durable: at most one small
        chunk per append, so an append never pays for a large backlog at once. A failure here
        is logged, never raised: the caller's batch is already durable."""
        retention = self.journal_retention_ms
        assert retention is not None
        try:
            _, more = self._expire_chunk(now_ms - retention, _RETENTION_STEP)
        except StoreError as e:
            log.warning("journal retention step failed (will retry): %s", e)
            more = False
        self._retention_due_ms = now_ms if more else now_ms + retention_interval_ms(retention)

    # -- reading ----------------------------------------------------------------------------

    def _read(self) -> sqlite3.Connection:
        """A fresh read-only connection: its own WAL snapshot, no contention with the writer."""
        if self._conn is None:
            raise StoreError(f"record store at {self.path} is closed")
        try:
            conn = sqlite3.connect(
                self._ro_uri, uri=True, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA busy_timeout = 5000")
        except sqlite3.Error as e:
            raise StoreError(f"cannot read record store at {self.path}: {e}") from e
        return conn

    def _query(
        self, sql: str, params: Sequence[Any] = ()
    ) -> tuple[sqlite3.Connection, sqlite3.Cursor]:
        conn = self._read()
        try:
            # pysqlite steps a SELECT once inside execute(): the snapshot starts here, at the
            # call of load()/journal(), not at the first next() of the iterator.
            return conn, conn.execute(sql, params)
        except sqlite3.Error as e:
            conn.close()
            raise StoreError(f"cannot read record store at {self.path}: {e}") from e

    def load(self) -> Iterator[tuple[int, StoredRecord]]:
        conn, cur = self._query(
            "SELECT offset, key, value, group_id FROM compacted ORDER BY offset"
        )
        return self._iter_load(conn, cur)

    def load_rows(self) -> Iterator[list[tuple[int, bytes, bytes, str | None]]]:
        conn, cur = self._query(
            "SELECT offset, key, value, group_id FROM compacted ORDER BY offset"
        )
        return self._iter_rows(conn, cur)

    def _iter_rows(
        self, conn: sqlite3.Connection, cur: sqlite3.Cursor
    ) -> Iterator[list[tuple[int, bytes, bytes, str | None]]]:
        try:
            while rows := cur.fetchmany(_FETCH):
                yield rows
        except sqlite3.Error as e:
            raise StoreError(f"cannot load record store at {self.path}: {e}") from e
        finally:
            conn.close()

    def _iter_load(
        self, conn: sqlite3.Connection, cur: sqlite3.Cursor
    ) -> Iterator[tuple[int, StoredRecord]]:
        record = StoredRecord
        try:
            while rows := cur.fetchmany(_FETCH):
                for offset, key, value, group_id in rows:
                    yield offset, record(key, value, group_id)
        except sqlite3.Error as e:
            raise StoreError(f"cannot load record store at {self.path}: {e}") from e
        finally:
            conn.close()

    def journal(
        self, *, from_offset: int = 0, to_offset: int | None = None
    ) -> Iterator[JournalEntry]:
        conn, cur = self._query(
            "SELECT offset, timestamp_ms, group_id, key, value FROM journal"
            " WHERE offset >= ? AND offset < ? ORDER BY offset",
            (from_offset, (1 << 63) - 1 if to_offset is None else to_offset),
        )
        return self._iter_journal(conn, cur)

    def journal_rows(
        self, *, from_offset: int = 0, to_offset: int | None = None
    ) -> Iterator[list[tuple[int, int, str | None, bytes, bytes | None]]]:
        """The same entries as :meth:`journal`, as chunks of plain ``(offset, timestamp_ms,
        group_id, key, value)`` tuples: the fast path for reading millions of entries
        (``kip848 analytics export``). One snapshot, taken at call time."""
        conn, cur = self._query(
            "SELECT offset, timestamp_ms, group_id, key, value FROM journal"
            " WHERE offset >= ? AND offset < ? ORDER BY offset",
            (from_offset, (1 << 63) - 1 if to_offset is None else to_offset),
        )
        return self._iter_rows(conn, cur)  # type: ignore[return-value]

    def _iter_journal(
        self, conn: sqlite3.Connection, cur: sqlite3.Cursor
    ) -> Iterator[JournalEntry]:
        entry = JournalEntry
        try:
            while rows := cur.fetchmany(_FETCH):
                for row in rows:
                    yield entry(*row)
        except sqlite3.Error as e:
            raise StoreError(f"cannot read the journal of {self.path}: {e}") from e
        finally:
            conn.close()

    def last_offset(self) -> int:
        if self.read_only and self._conn is not None:  # another process may be appending
            with self._lock:
                return self._read_last_offset(self._conn)
        return self._next_offset - 1  # an int read: atomic, no need to wait for a commit

    def stats(self) -> dict[str, Any]:
        conn = self._read()
        try:

            def q(sql: str) -> Any:
                return conn.execute(sql).fetchone()

            conn.execute("BEGIN")  # one snapshot for all the numbers
            j_n, j_first, j_tomb, j_bytes = q(
                "SELECT count(*), min(offset), count(*) - count(value),"
                " coalesce(sum(length(key) + coalesce(length(value), 0)), 0) FROM journal"
            )
            c_n, c_groups, c_kb, c_vb = q(
                "SELECT count(*), count(DISTINCT group_id), coalesce(sum(length(key)), 0),"
                " coalesce(sum(length(value)), 0) FROM compacted"
            )
            meta = dict(conn.execute("SELECT name, value FROM meta").fetchall())
            last = self._read_last_offset(conn)
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            raise StoreError(f"cannot read record store at {self.path}: {e}") from e
        finally:
            conn.close()
        wal = self.path.with_name(self.path.name + "-wal")
        return {
            "implementation": "sqlite",
            "path": str(self.path),
            "schema_version": meta.get("schema_version"),
            "created_at_ms": meta.get("created_at_ms"),
            "created_by": meta.get("created_by"),
            "sync": self.sync,
            "last_offset": last,
            "journal_entries": j_n,
            "journal_first_offset": j_first,
            "journal_tombstones": j_tomb,
            "journal_bytes": j_bytes,
            "compacted_records": c_n,
            "compacted_groups": c_groups,
            "compacted_key_bytes": c_kb,
            "compacted_value_bytes": c_vb,
            "journal_retention_ms": self.journal_retention_ms,
            "file_bytes": self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0),
        }

    def check_integrity(self) -> None:
        """Run SQLite's full ``integrity_check`` (reads the whole file); raise
        :class:`StoreError` listing the first problems. For tools, not for every start-up."""
        conn = self._read()
        try:
            problems = [row[0] for row in conn.execute("PRAGMA integrity_check(20)")]
        except sqlite3.Error as e:
            raise StoreError(f"record store at {self.path} is corrupt: {e}") from e
        finally:
            conn.close()
        if problems != ["ok"]:
            raise StoreError(f"record store at {self.path} is corrupt: {'; '.join(problems)}")

    # -- closing ----------------------------------------------------------------------------

    @property
    def failed(self) -> bool:
        return self._failed

    def close(self) -> None:
        with self._lock:
            self._release()

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()  # the last connection checkpoints and removes the WAL
            except sqlite3.Error:  # pragma: no cover
                pass
        lock_file, self._lock_file = self._lock_file, None
        if lock_file is not None:
            lock_file.close()  # releases the flock

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else ("read-only" if self.read_only else "open")
        return f"SqliteRecordStore({str(self.path)!r}, sync={self.sync!r}, {state})"


def _lock_exclusively(lock_path: Path, db_path: Path) -> BinaryIO | None:
    """Hold an exclusive flock on ``lock_path`` for the life of the store. It is released by
    close(), by the death of the process (even SIGKILL) and, being a file object, by garbage
    collection of a store that was never closed."""
    if fcntl is None:  # pragma: no cover
        return None
    f = open(lock_path, "a+b")  # noqa: SIM115 - held open on purpose
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read(32).decode("ascii", "replace").strip() or "?"
        f.close()
        raise StoreError(
            f"record store at {db_path} is already open for writing (pid {holder} holds "
            f"{lock_path})"
        ) from None
    except BaseException:
        f.close()
        raise
    f.truncate(0)
    f.write(str(os.getpid()).encode("ascii"))
    f.flush()
    return f


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)
