"""The embedded default :class:`~.api.RecordStore`: one SQLite file in WAL mode, one writer.

File: ``<data-dir>/coordinator.db`` (plus SQLite's ``-wal``/``-shm`` and our ``.lock``); its
schema (partitioned logs in one file) and migrations are in :mod:`.sqlite_schema`, its files
(location checks, lock, identity) in :mod:`.sqlite_files`.

Durability: one batch = one ``BEGIN IMMEDIATE ... COMMIT``, whatever logs it touches. With
``sync="full"`` (default) SQLite fsyncs the WAL on every commit, so an acknowledged batch
survives ``kill -9`` and power loss (as far as the disk honours fsync). ``sync="normal"``
survives ``kill -9`` but may lose the last commits on power loss. ``sync="off"`` is for
benchmark fixtures only.

Retention: with ``journal_retention_ms``, each ``append`` whose timestamp is due (once a minute)
runs one extra small transaction after its batch is durable, deleting at most 2,000 expired
journal entries (more on the next appends while a backlog remains); its errors are logged.

Opening (start-up safety): only a *missing* ``coordinator.db`` is created, atomically (built as
``coordinator.db.new``, flushed, renamed into place), with ``partitions`` logs; an existing
store keeps its own count. Anything present that is not a valid, complete store is refused and
left as it was (:class:`StoreCorruptError`: empty, short or truncated files, foreign files,
directories, dangling links, a ``-wal`` without its database, a ``-wal`` lost after an unclean
shutdown); what cannot be accessed says why (:class:`StoreAccessError`: read-only mount,
permissions, a data directory that is a file). ``meta.clean_shutdown`` (0 while open, 1 after
``close``; checkpointed into the main file at both moments) is how a lost ``-wal`` is noticed: a
file that says 0 needs its log. A store of schema version 1 (one log) is migrated when opened
for writing; a read-only open refuses it and names the command that migrates it.
``read_only`` opens work on read-only media (``immutable`` when there is no log to recover).

Thread model: every method may be called from any thread; one lock serialises the single writer
connection (the runtime calls ``append`` from one writer thread anyway). ``load``/``journal``/
``stats`` read through their own short-lived read-only connection, so a long read neither
blocks nor sees appends made after it started (WAL snapshot isolation). Only one process may
open a store for writing: an exclusive ``flock`` on ``coordinator.db.lock`` enforces it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Self

import orjson

from coordinator.routing import DEFAULT_PARTITIONS

from .api import (
    Fence,
    GroupRecords,
    JournalEntry,
    StoreAccessError,
    StoreCorruptError,
    StoredRecord,
    StoreError,
    StoreLostError,
    StoreWriteError,
    check_batch,
    check_log,
    check_partitions,
    groups_of_rows,
    log_ids,
    retention_interval_ms,
    split_batch,
)
from .sqlite_files import (
    DATA_FILE_NAME,
    SQLITE_CANTOPEN,
    SQLITE_FULL,
    WAL_HEADER_BYTES,
    Handles,
    Identity,
    check_location,
    describe_loss,
    fsync_dir,
    fsync_file,
    identity_of,
    lock_exclusively,
    open_error,
    primary,
    resolve_path,
    set_clean_shutdown,
    sidecar,
    unwritable,
)
from .sqlite_schema import (
    APPLICATION_ID,
    OFFSET_BITS,
    OFFSET_MASK,
    SCHEMA_VERSION,
    create_schema,
    migrate_v1,
    next_offsets,
    pos_range,
    refuse_old_version,
    schema_version,
    stored_partitions,
)

__all__ = ["DATA_FILE_NAME", "SCHEMA_VERSION", "SqliteRecordStore", "resolve_path"]

log = logging.getLogger(__name__)

Sync = Literal["full", "normal", "off"]
_SYNC_PRAGMA = {"full": "FULL", "normal": "NORMAL", "off": "OFF"}
_FETCH = 8192  # rows per fetchmany: one C call per chunk instead of one per row
_EXPIRE_CHUNK = 50_000  # journal rows deleted per transaction, so appends interleave
_PROBE_BYTES = 64 * 1024  # the room probe_write() checks for
_RETENTION_STEP = 2_000  # journal rows at most deleted by the automatic retention of one append


_COMPACTED = (
    "SELECT pos - ?, key, value, group_id FROM compacted WHERE pos BETWEEN ? AND ? ORDER BY pos"
)
_GROUPS = (
    "SELECT group_id, count(*), max(pos) - ?, CAST('[' || group_concat(CAST(key AS TEXT) || ','"
    " || CAST(value AS TEXT), ',') || ']' AS BLOB), group_concat(pos) FROM compacted"
    " WHERE pos BETWEEN ? AND ? GROUP BY group_id ORDER BY min(pos)"
)
"""RecordStore.load_groups: each group's records joined (key and value bytes kept as they
are: a BLOB cast to TEXT and back is the same bytes), with their positions in the order
joined."""


def _ascending(positions: str) -> bool:
    values = orjson.loads(f"[{positions}]")
    return values == sorted(values)


class SqliteRecordStore:
    """See the module docstring. ``read_only=True`` opens an existing store for inspection
    (``kip848 replay``/dump, analytics) without the writer lock; ``append`` then fails."""

    def __init__(
        self,
        path_or_dir: str | os.PathLike[str],
        *,
        partitions: int = DEFAULT_PARTITIONS,
        journal_retention_ms: int | None = None,
        sync: Sync = "full",
        read_only: bool = False,
        accept_lost_wal: bool = False,
    ) -> None:
        if sync not in _SYNC_PRAGMA:
            raise ValueError(f"sync must be one of {sorted(_SYNC_PRAGMA)}, got {sync!r}")
        if journal_retention_ms is not None and journal_retention_ms < 0:
            raise ValueError("journal_retention_ms must be >= 0 or None")
        self.path = resolve_path(path_or_dir).absolute()
        self._partitions = check_partitions(partitions)  # the store's own, once open
        self._next_offset: dict[int, int] = {}
        self.journal_retention_ms = journal_retention_ms
        self.sync = sync
        self.read_only = read_only
        self.last_commit_seconds: float | None = None  # duration of the last COMMIT (metrics)
        self.accept_lost_wal = accept_lost_wal
        self._lock = threading.Lock()
        # Connection and lock file, released by close() or, for a store never closed, when it
        # is collected or the interpreter exits (weakref.finalize): SQLite's own close would
        # otherwise remove the WAL without the clean-shutdown mark (see _check_complete).
        self._h = Handles(self.path)
        self._finalizer = weakref.finalize(self, self._h.release)
        self._identity: Identity | None = None
        self._lost: str | None = None
        self._retention_due_ms = -(2**63)  # the first append checks
        self._ro_uri = self.path.as_uri() + "?mode=ro"
        try:
            self._open()
        except BaseException:
            self._release()
            raise

    @property
    def partitions(self) -> int:
        """The store's partition count (fixed when it was created)."""
        return self._partitions

    @classmethod
    def in_data_dir(cls, data_dir: str | os.PathLike[str], **options: Any) -> SqliteRecordStore:
        """The store of a data directory (``<data_dir>/coordinator.db``), as ``kip848 serve``,
        ``replay`` and ``dump`` open it: a ``data_dir`` that exists but is not a directory is
        refused (:class:`StoreAccessError`) instead of being taken for the database file."""
        directory = Path(data_dir)
        if directory.exists() and not directory.is_dir():
            raise StoreAccessError(
                f"data directory {directory.absolute()} is not a directory (a file is in the way)"
            )
        path = directory / DATA_FILE_NAME
        if path.is_dir():  # the constructor would take it for a data directory
            raise StoreCorruptError(
                f"{path.absolute()} exists but is a directory, not a store file; refusing to use it"
            )
        return cls(path, **options)

    # -- opening ----------------------------------------------------------------------------

    def _open(self) -> None:
        """Open (or, only where nothing exists, create) the store; refuse anything present that
        is not a valid, complete store. Order matters: the location is checked and the writer
        lock taken before anything is created or changed."""
        path = self.path
        wal = sidecar(path, "-wal")
        try:
            exists = check_location(path, creating=not self.read_only)
            if not exists and self.read_only:
                raise StoreError(f"no record store at {path}")
            if not self.read_only:
                self._h.lock_file = lock_exclusively(path.with_name(path.name + ".lock"), path)
                exists = check_location(path, creating=True)  # again, under the lock
            if not exists:
                if wal.exists():
                    raise StoreCorruptError(
                        f"{path} does not exist but its write-ahead log {wal.name} does: the "
                        "store file was removed or lost, and the log alone cannot rebuild it. "
                        f"Restore {path.name} (e.g. from the backup or snapshot the log belongs "
                        f"to), or remove {wal.name} to start a new, empty store; refusing to "
                        "start"
                    )
                self._create_new(path)
            # A WAL that holds anything has at least its 32-byte header. An empty one is what
            # any connection (even a read-only one, e.g. a refused earlier open) creates.
            wal_existed = wal.exists() and wal.stat().st_size >= WAL_HEADER_BYTES
            conn = self._connect(wal.exists())
            self._h.conn = conn
            conn.execute("PRAGMA busy_timeout = 5000")
            # Identify the file before changing anything in it (WAL mode is persistent):
            # a foreign database must be left exactly as it was.
            self._identify(conn)
            if not self.read_only:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if mode.lower() != "wal":
                    raise StoreError(f"cannot put {path} in WAL mode (got {mode!r})")
                conn.execute(f"PRAGMA synchronous = {_SYNC_PRAGMA[self.sync]}")
                conn.execute("PRAGMA fullfsync = ON")  # macOS: a real flush; no-op on Linux
                conn.execute("PRAGMA journal_size_limit = 67108864")  # shrink WAL after bursts
                conn.execute("PRAGMA cache_size = -65536")  # 64 MiB
            self._check_version(conn)
            self._check_complete(conn, wal_existed)
            if not self.read_only:
                set_clean_shutdown(conn, self.path, False)
                self._h.mark_clean_on_close = True
                self._record_identity()
            self._partitions = stored_partitions(conn, path)
            self._next_offset = next_offsets(conn, self._partitions)
        except sqlite3.Error as e:
            raise open_error(path, e) from e
        except OSError as e:
            raise open_error(path, e) from e

    def _connect(self, wal_exists: bool) -> sqlite3.Connection:
        if not self.read_only:
            return sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            conn = sqlite3.connect(
                self._ro_uri, uri=True, isolation_level=None, check_same_thread=False
            )
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.Error as e:
            if primary(e) != SQLITE_CANTOPEN or wal_exists or unwritable(self.path) is None:
                raise
        # A WAL-mode database on read-only media without its -shm/-wal files: SQLite cannot
        # create them, so it refuses a plain read-only open. With no -wal there is nothing to
        # recover and no writer can exist (nobody can write there), so the main file is the
        # whole store: open it as immutable.
        self._ro_uri = self.path.as_uri() + "?mode=ro&immutable=1"
        return sqlite3.connect(
            self._ro_uri, uri=True, isolation_level=None, check_same_thread=False
        )

    def _create_new(self, path: Path) -> None:
        """Create a new, empty store atomically: built complete in ``<name>.new`` (schema,
        WAL mode, application id), flushed, then renamed into place. A crash leaves either no
        store (and a ``.new`` file, discarded by the next start) or a complete one, never a
        half-made file that the next start would have to guess about."""
        tmp = path.with_name(path.name + ".new")
        for leftover in (tmp, sidecar(tmp, "-wal"), sidecar(tmp, "-shm")):
            leftover.unlink(missing_ok=True)  # an earlier creation that crashed; never a store
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            create_schema(conn, self._partitions)
        finally:
            conn.close()  # checkpoints the schema into the file and removes its WAL
        fsync_file(tmp)
        os.rename(tmp, path)
        fsync_dir(path.parent)  # make the new file's directory entry durable

    def _identify(self, conn: sqlite3.Connection) -> None:
        """Raise unless the file is a kip848 record store."""
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if app_id != APPLICATION_ID:
            n_objects = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            what = (
                "an empty SQLite database"
                if app_id == 0 and n_objects == 0
                else f"SQLite application_id {app_id:#x}, expected {APPLICATION_ID:#x}"
            )
            raise StoreCorruptError(
                f"{self.path} is not a kip848 record store ({what}); refusing to use it. A "
                "new store is created only where no file exists: move the file away if it "
                "is not needed"
            )

    def _check_complete(self, conn: sqlite3.Connection, wal_existed: bool) -> None:
        """Refuse a store whose write-ahead log went missing after an unclean shutdown.

        The database file says whether it was shut down cleanly (``meta.clean_shutdown``,
        written into the file itself by a checkpoint at open and at close). After a crash the
        commits since the last checkpoint live only in ``-wal``; without it SQLite would
        silently open an older state, losing acknowledged writes."""
        row = conn.execute("SELECT value FROM meta WHERE name = 'clean_shutdown'").fetchone()
        if row is None or row[0] != 0 or wal_existed:  # None: written by an older build
            return
        message = (
            f"record store at {self.path} was not shut down cleanly and its write-ahead log "
            f"{self.path.name}-wal is missing: the commits it held (acknowledged writes among "
            f"them) are not in {self.path.name}"
        )
        if self.accept_lost_wal:
            log.warning("%s; opening it anyway (accept_lost_wal)", message)
            return
        raise StoreCorruptError(
            f"{message}. Refusing to start from an older state: restore {self.path.name}-wal "
            f"together with {self.path.name} (from the same copy or snapshot), or accept the "
            "loss explicitly (kip848 serve --accept-lost-wal)"
        )

    def _check_version(self, conn: sqlite3.Connection) -> None:
        version = schema_version(conn, self.path)
        if version == SCHEMA_VERSION:
            return
        if self.read_only:
            raise refuse_old_version(self.path, version)
        started = time.monotonic()
        conn.execute("BEGIN IMMEDIATE")
        try:
            counts = migrate_v1(conn, self.path, self._partitions)
            conn.execute(
                "UPDATE meta SET value = ? WHERE name = 'schema_version'", (SCHEMA_VERSION,)
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        log.warning(
            "Migrated the record store at %s from schema version %d (one log) to %d: %d "
            "partitions and the cluster log, %d journal entries and %d compacted records kept, "
            "in %.1f s.",
            self.path,
            version,
            SCHEMA_VERSION,
            counts["partitions"],
            counts["journal"],
            counts["compacted"],
            time.monotonic() - started,
        )

    # -- writing ----------------------------------------------------------------------------

    def append(
        self, records: Sequence[StoredRecord], timestamp_ms: int, *, fence: Fence | None = None
    ) -> dict[int, int]:
        check_batch(records, timestamp_ms)
        if fence is not None:
            raise StoreWriteError(
                f"the SQLite store at {self.path} has one writer and no leases; a fenced "
                "append needs a store shared by several nodes (--store postgresql://)"
            )
        with self._lock:
            conn = self._writer()
            if not records:
                return {}
            self._check_identity_locked()  # never write into files that are gone from disk
            rows = []
            last: dict[int, int] = {}
            for log_id, recs in split_batch(records, self._partitions).items():
                offset = self._next_offset[log_id]
                pos = ((log_id + 1) << OFFSET_BITS) | offset
                rows += [
                    (pos + i, timestamp_ms, rec.group_id, rec.key, rec.value)
                    for i, rec in enumerate(recs)
                ]
                last[log_id] = offset + len(recs) - 1
            if max(last.values()) > OFFSET_MASK:
                raise StoreWriteError(f"a log of {self.path} is full (2**{OFFSET_BITS} offsets)")
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(
                    "INSERT INTO journal (pos, timestamp_ms, group_id, key, value)"
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
                if isinstance(e, sqlite3.Error) and primary(e) == SQLITE_FULL:
                    # No space for the log frames: SQLite did not commit (the WAL index was not
                    # advanced; the next commit overwrites the partial frames), so nothing of
                    # the batch is visible and later appends may succeed once space is freed.
                    self._rollback()
                    raise StoreWriteError(
                        f"append to {self.path} failed, rolled back: no space left on the "
                        f"device ({e})"
                    ) from e
                # Any other failed COMMIT may still have reached the disk (e.g. fsync reported
                # an error after the commit frame was written): the outcome is unknown, so stop.
                self._failed = True
                self._rollback()
                if not isinstance(e, Exception):
                    raise
                raise StoreWriteError(
                    f"commit to {self.path} failed; the batch may or may not be durable: {e}",
                    outcome_unknown=True,
                ) from e
            for log_id, offset in last.items():
                self._next_offset[log_id] = offset + 1
            # Committed to the files we hold open; are they still the store on disk? (A data
            # directory deleted a moment ago would take this batch with it at the next start.)
            self._check_identity_locked()
        if self.journal_retention_ms is not None and timestamp_ms >= self._retention_due_ms:
            self._retention_step(timestamp_ms)
        return last

    def _commit(self) -> None:
        assert self._conn is not None
        started = time.monotonic()
        self._conn.execute("COMMIT")
        self.last_commit_seconds = time.monotonic() - started  # the fsync, with --sync full

    def _rollback(self) -> None:
        conn = self._conn
        if conn is None or not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            self._failed = True  # state unknown; refuse further writes

    # -- identity: is the store we hold open still the one on disk? ---------------------------

    def _record_identity(self) -> None:
        """Remember which files the open store is (device and inode of the database file, its
        write-ahead log and its directory), for :meth:`check_identity`."""
        self._identity = identity_of(self.path)

    def check_identity(self) -> None:
        """Raise :class:`StoreLostError` if the store open here is no longer the store on disk:
        its file, write-ahead log or directory was deleted, replaced, truncated to nothing or
        unmounted since it was opened. ``append`` checks after every commit; the runtime also
        calls this on an interval, so an idle coordinator notices too. Once lost, the store
        refuses every append (and the runtime stops acknowledging); :meth:`rescue` saves what
        the files still open here hold."""
        with self._lock:
            if self._conn is None or self.read_only:
                return
            self._check_identity_locked()

    def _check_identity_locked(self) -> None:
        if self._lost is not None:
            raise StoreLostError(self._lost)
        expected = self._identity
        if expected is None:
            return
        now = identity_of(self.path)
        if now == expected:
            return
        self._lost = describe_loss(self.path, expected, now)
        self._h.mark_clean_on_close = False  # the path may hold another (or a rescued) store
        log.critical("%s", self._lost)
        raise StoreLostError(self._lost)

    @property
    def lost(self) -> str | None:
        """Why the store is no longer the one on disk (None while it is)."""
        return self._lost

    def rescue(self) -> Path:
        """Save the store held open here after it was lost from disk (:meth:`check_identity`),
        from the files this process still holds open (deleted files live on while open).

        Where the store file was (its path now free: deleted, or its directory deleted or
        unmounted) the copy is written there, so a restart comes up with every acknowledged
        record instead of an empty store; where something else is there now (replaced), the
        copy goes beside it as ``coordinator.db.rescued-<ms>``. Returns the path written;
        raises :class:`StoreError` when nothing could be saved (then the log must say so)."""
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreError(f"record store at {self.path} is closed; nothing to rescue")
            path = self.path
            free = not path.exists() and not path.is_symlink()
            target = (
                path if free else path.with_name(f"{path.name}.rescued-{int(time.time() * 1000)}")
            )
            tmp = target.with_name(target.name + ".partial")
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                for leftover in (tmp, sidecar(tmp, "-wal"), sidecar(tmp, "-shm")):
                    leftover.unlink(missing_ok=True)
                dest = sqlite3.connect(tmp, isolation_level=None)
                try:
                    conn.backup(dest)
                    # The copy is complete and closed: nothing of it lives in a log.
                    dest.execute("UPDATE meta SET value = 1 WHERE name = 'clean_shutdown'")
                    dest.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                finally:
                    dest.close()
                fsync_file(tmp)
                os.rename(tmp, target)
                fsync_dir(target.parent)
            except (sqlite3.Error, OSError) as e:
                raise StoreError(f"could not rescue the store to {target}: {e}") from e
            return target

    def probe_write(self) -> None:
        """Durable writes that learn whether appends can succeed again after they failed (e.g.
        the disk was full): a meta row of ``_PROBE_BYTES`` committed (so the log has room for a
        batch of that size, not just one page), then shrunk back. Raises
        :class:`StoreWriteError` if not. Touches no record and no offset."""
        with self._lock:
            conn = self._writer()
            for value in (_PROBE_BYTES, 0):
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    conn.execute(
                        "INSERT OR REPLACE INTO meta (name, value) VALUES ('write_probe', "
                        "zeroblob(?))",
                        (value,),
                    )
                    self._commit()
                except sqlite3.Error as e:
                    self._rollback()
                    raise StoreWriteError(f"write probe of {self.path} failed: {e}") from e
            self._check_identity_locked()

    def _writer(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreWriteError(f"record store at {self.path} is closed")
        if self._lost is not None:
            raise StoreLostError(self._lost)
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
        """Expire the expired prefix of each log's journal, at most ``limit`` entries in all,
        in one transaction. Returns (entries deleted, whether there may be more)."""
        with self._lock:
            conn = self._writer()
            deleted, more = 0, False
            try:
                conn.execute("BEGIN IMMEDIATE")
                for log_id in log_ids(self._partitions):
                    budget = limit - deleted
                    if budget <= 0:
                        more = True
                        break
                    lo, hi = pos_range(log_id)
                    head = conn.execute(
                        "SELECT pos, timestamp_ms FROM journal WHERE pos BETWEEN ? AND ?"
                        " ORDER BY pos LIMIT ?",
                        (lo, hi, budget),
                    ).fetchall()
                    n = next(
                        (i for i, (_, ts) in enumerate(head) if ts >= older_than_ms), len(head)
                    )
                    if not n:
                        continue
                    through = head[n - 1][0]
                    conn.execute("DELETE FROM journal WHERE pos BETWEEN ? AND ?", (lo, through))
                    conn.execute(
                        "UPDATE logs SET expired_through = max(expired_through, ?) WHERE log = ?",
                        (through & OFFSET_MASK, log_id),
                    )
                    deleted += n
                    more = more or n == budget
                if deleted:
                    self._commit()
                else:
                    conn.execute("ROLLBACK")
            except sqlite3.Error as e:
                self._rollback()
                raise StoreWriteError(f"journal expiry in {self.path} failed: {e}") from e
        return deleted, more

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

    def _compacted(self, log: int) -> tuple[sqlite3.Connection, sqlite3.Cursor]:
        check_log(log, self._partitions)
        base, top = pos_range(log)
        return self._query(_COMPACTED, (base, base, top))

    def load(self, log: int) -> Iterator[tuple[int, StoredRecord]]:
        return self._iter_load(*self._compacted(log))

    def load_rows(self, log: int) -> Iterator[list[tuple[int, bytes, bytes, str | None]]]:
        return self._iter_rows(*self._compacted(log))

    def load_snapshot(self, log: int) -> tuple[int, Iterator[list[Any]]]:
        check_log(log, self._partitions)
        base, top = pos_range(log)
        conn = self._read()
        try:
            conn.execute("BEGIN")  # one snapshot, taken by the first read: the log's end
            end = next_offsets(conn, self._partitions)[log] - 1
            return end, self._iter_rows(conn, conn.execute(_COMPACTED, (base, base, top)))
        except sqlite3.Error as e:
            conn.close()
            raise StoreError(f"cannot load record store at {self.path}: {e}") from e

    def load_groups(self, log: int) -> Iterator[list[GroupRecords]]:
        # Joined by SQLite (in C, without the GIL: in a reader thread it runs beside the
        # loader building the previous partition). group_concat's order is not promised
        # before SQLite 3.44: each group's positions come too, and a group whose records were
        # not joined in their order makes the partition read row by row in the same snapshot.
        check_log(log, self._partitions)
        base, top = pos_range(log)
        conn = self._read()
        try:
            # The sort of a partition's records by group stays in memory (64 MiB of page cache
            # for this connection, which ends with the read): a third faster than spilling.
            conn.execute("PRAGMA cache_size = -65536")
            conn.execute("BEGIN")
            groups = conn.execute(_GROUPS, (base, base, top)).fetchall()
            if not all(_ascending(row[4]) for row in groups):
                rows = conn.execute(_COMPACTED, (base, base, top)).fetchall()
                return groups_of_rows(iter([rows]))
        except sqlite3.Error as e:
            raise StoreError(f"cannot load record store at {self.path}: {e}") from e
        finally:
            conn.close()
        return iter([[row[:4] for row in groups]] if groups else [])

    def _iter_rows(self, conn: sqlite3.Connection, cur: sqlite3.Cursor) -> Iterator[list[Any]]:
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
        for rows in self._iter_rows(conn, cur):
            for offset, key, value, group_id in rows:
                yield offset, record(key, value, group_id)

    def _journal(
        self, log: int, from_offset: int, to_offset: int | None
    ) -> tuple[sqlite3.Connection, sqlite3.Cursor]:
        check_log(log, self._partitions)
        base, top = pos_range(log)
        lo = base + max(0, min(from_offset, OFFSET_MASK))
        hi = top if to_offset is None else base + max(0, min(to_offset, OFFSET_MASK + 1)) - 1
        return self._query(
            "SELECT pos - ?, timestamp_ms, group_id, key, value FROM journal"
            " WHERE pos BETWEEN ? AND ? ORDER BY pos",
            (base, lo, hi),
        )

    def journal(
        self, log: int, *, from_offset: int = 0, to_offset: int | None = None
    ) -> Iterator[JournalEntry]:
        return self._iter_journal(self._iter_rows(*self._journal(log, from_offset, to_offset)), log)

    @staticmethod
    def _iter_journal(chunks: Iterator[list[Any]], log: int) -> Iterator[JournalEntry]:
        entry = JournalEntry
        for rows in chunks:
            for offset, ts, group_id, key, value in rows:
                yield entry(offset, ts, group_id, key, value, log)

    def journal_rows(
        self, log: int, *, from_offset: int = 0, to_offset: int | None = None
    ) -> Iterator[list[tuple[int, int, str | None, bytes, bytes | None]]]:
        """The same entries as :meth:`journal`, as chunks of plain ``(offset, timestamp_ms,
        group_id, key, value)`` tuples: the fast path for reading millions of entries
        (``kip848 analytics export``). One snapshot, taken at call time."""
        return self._iter_rows(*self._journal(log, from_offset, to_offset))

    def last_offset(self, log: int) -> int:
        check_log(log, self._partitions)
        if self.read_only and self._conn is not None:  # another process may be appending
            with self._lock:
                return next_offsets(self._conn, self._partitions)[log] - 1
        return self._next_offset[log] - 1  # a dict read: atomic, no need to wait for a commit

    def stats(self) -> dict[str, Any]:
        conn = self._read()
        try:

            def q(sql: str) -> Any:
                return conn.execute(sql).fetchone()

            conn.execute("BEGIN")  # one snapshot for all the numbers
            j_n, j_tomb, j_bytes = q(
                "SELECT count(*), count(*) - count(value),"
                " coalesce(sum(length(key) + coalesce(length(value), 0)), 0) FROM journal"
            )
            c_n, c_groups, c_kb, c_vb = q(
                "SELECT count(*), count(DISTINCT group_id), coalesce(sum(length(key)), 0),"
                " coalesce(sum(length(value)), 0) FROM compacted"
            )
            meta = dict(conn.execute("SELECT name, value FROM meta").fetchall())
            logs = {}
            following = next_offsets(conn, self._partitions)
            for log_id in log_ids(self._partitions):
                lo, hi = pos_range(log_id)
                j_first, j_count = q(
                    f"SELECT min(pos) & {OFFSET_MASK}, count(*) FROM journal"
                    f" WHERE pos BETWEEN {lo} AND {hi}"
                )
                (c_count,) = q(f"SELECT count(*) FROM compacted WHERE pos BETWEEN {lo} AND {hi}")
                logs[log_id] = {
                    "last_offset": following[log_id] - 1,
                    "journal_first_offset": j_first,
                    "journal_entries": j_count,
                    "compacted_records": c_count,
                }
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            raise StoreError(f"cannot read record store at {self.path}: {e}") from e
        finally:
            conn.close()
        wal = sidecar(self.path, "-wal")
        return {
            "implementation": "sqlite",
            "path": str(self.path),
            "schema_version": meta.get("schema_version"),
            "partitions": self._partitions,
            "created_at_ms": meta.get("created_at_ms"),
            "created_by": meta.get("created_by"),
            "migrated_from_version": meta.get("migrated_from_version"),
            "sync": self.sync,
            "journal_entries": j_n,
            "journal_tombstones": j_tomb,
            "journal_bytes": j_bytes,
            "compacted_records": c_n,
            "compacted_groups": c_groups,
            "compacted_key_bytes": c_kb,
            "compacted_value_bytes": c_vb,
            "journal_retention_ms": self.journal_retention_ms,
            "file_bytes": self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0),
            "logs": logs,
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

    @property
    def _failed(self) -> bool:
        return self._h.failed

    @_failed.setter
    def _failed(self, value: bool) -> None:
        self._h.failed = value

    @property
    def _conn(self) -> sqlite3.Connection | None:
        return self._h.conn

    def close(self) -> None:
        """Mark the store cleanly shut down (unless a write failed), close the connection (the
        last one checkpoints and removes the WAL) and release the writer lock. Idempotent."""
        with self._lock:
            self._release()

    def _release(self) -> None:
        self._finalizer()  # runs Handles.release once

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else ("read-only" if self.read_only else "open")
        return f"SqliteRecordStore({str(self.path)!r}, sync={self.sync!r}, {state})"
