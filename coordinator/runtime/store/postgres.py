"""A :class:`~.api.RecordStore` in PostgreSQL (``kip848 serve --store postgresql://...``).

The same contract as the SQLite store, in a database that several coordinator nodes share
(docs/ha.md): PostgreSQL is the one arbiter, its own replication gives the database's
availability. Connection: a libpq URI (``postgresql://user:password@host:port/db``); the role
needs to own the tables it creates (a database owner is enough, no superuser).

Schema version 1 (in the connection's schema, every name prefixed ``kip848_``)::

    kip848_meta(name PRIMARY KEY, value)        schema_version, partitions, store_id,
                                                created_at_ms, created_by
    kip848_logs(log PRIMARY KEY, expired_through, leader, leader_epoch, lease_expires_at,
                target)                         one row per log (-1 = the cluster log): the last
                                                offset retention removed; the partition's lease
    kip848_journal(log, offset, timestamp_ms, leader_epoch, group_id, key, value)
                                                PRIMARY KEY (log, offset); LIST-partitioned by
                                                log, one table per log
    kip848_compacted(log, key, offset, group_id, value)
                                                PRIMARY KEY (log, key); partitioned the same way
    kip848_nodes(node_id PRIMARY KEY, ...)      the coordinator nodes (docs/ha.md)

Durability: one batch = one transaction (``BEGIN ... COMMIT``), its statements pipelined (one
round trip, then the commit's): journal rows inserted from arrays, the compacted view upserted
(each key's last write of the batch) and tombstoned keys deleted. PostgreSQL acknowledges a
commit once its write-ahead log is flushed (``synchronous_commit``; with a synchronous standby,
once the standby has it too). Offsets are the writer's: a log has one writer at a time (its
leader), and the journal's primary key refuses an offset written twice.

A connection lost during ``COMMIT`` does not leave the outcome unknown: the transaction's id is
read at its start, and after reconnecting ``txid_status`` tells whether it committed (checked
against the batch's first row: after a crash an id can name another transaction). Only when
PostgreSQL cannot tell (it is unreachable for the whole retry window) is the outcome unknown
(``StoreWriteError.outcome_unknown``). Reads (``load``, ``journal``, ``stats``) use their own
connection in a read-only, repeatable-read transaction: a snapshot taken when they are called.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Self, TypeVar

from coordinator.routing import DEFAULT_PARTITIONS

from .api import (
    CLUSTER_LOG,
    Fence,
    GroupRecords,
    JournalEntry,
    StoreAccessError,
    StoreCorruptError,
    StoredRecord,
    StoreError,
    StoreFencedError,
    StoreLostError,
    StoreWriteError,
    check_batch,
    check_log,
    check_partitions,
    log_ids,
    retention_interval_ms,
    split_batch,
)
from .postgres_rows import Rows, landed
from .postgres_schema import (
    FENCED,
    SCHEMA_GATE,
    check_version,
    connect_options,
    create_schema,
    dsn_for_log,
    ensure_fence_function,
    migrate,
    read_meta,
    schema_refusal,
    scrub,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresRecordStore"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_FETCH = 8192
_READ_ONLY = "25006"
"""SQLSTATE read_only_sql_transaction: a hot standby, or ``default_transaction_read_only``."""
_EXPIRE_CHUNK = 50_000
_RETENTION_STEP = 2_000
_IDLE_READERS = 4
"""Read connections kept open for the next read (connecting, with SCRAM, costs milliseconds)."""
_RESOLVE_WINDOW_S = 30.0
"""How long an append whose COMMIT lost its connection keeps asking PostgreSQL whether the
transaction committed before it calls the outcome unknown."""

# One batch is one statement (in its own transaction, committed by the next round trip): its
# CTEs first pass the gate (the fence, the cluster log's end), then write the journal and the
# compacted view. One statement because a process stopped between the statements of a batch
# (SIGSTOP, a VM pause) would hold its locks (the lease rows, the rows it wrote) while
# PostgreSQL waits for the rest, a wait no timeout of PostgreSQL 15 ends; a statement is
# executed once whole, and the session then waits for the COMMIT "idle in transaction",
# which ``idle_in_transaction_session_timeout`` limits (``bound_idle_transactions``).
_GATE_FENCE = ", kip848_fence(%s, %s::int[], %s::bigint[])"
_GATE_CLUSTER = ", kip848_cluster_at(%s)"
_INSERT_JOURNAL = (
    ' j AS (INSERT INTO kip848_journal (log, "offset", timestamp_ms, leader_epoch, group_id,'
    " key, value) SELECT u.* FROM g, unnest(%b::int[], %b::bigint[], %b::bigint[],"
    " %b::bigint[], %b::text[], %b::bytea[], %b::bytea[]) AS u)"
)
_UPSERT_COMPACTED = (
    ' c AS (INSERT INTO kip848_compacted (log, key, "offset", group_id, value)'
    " SELECT u.* FROM g, unnest(%b::int[], %b::bytea[], %b::bigint[], %b::text[],"
    ' %b::bytea[]) AS u ON CONFLICT (log, key) DO UPDATE SET "offset" = EXCLUDED."offset",'
    " group_id = EXCLUDED.group_id, value = EXCLUDED.value)"
)
_DELETE_COMPACTED = (
    " d AS (DELETE FROM kip848_compacted c USING g, unnest(%b::int[], %b::bytea[]) AS"
    " t(log, key) WHERE c.log = t.log AND c.key = t.key)"
)


def is_postgres_dsn(spec: str) -> bool:
    return spec.startswith(("postgresql://", "postgres://"))


class PostgresRecordStore:
    """See the module docstring. ``read_only=True`` never creates or migrates anything and
    refuses ``append``."""

    def __init__(
        self,
        dsn: str,
        *,
        partitions: int = DEFAULT_PARTITIONS,
        journal_retention_ms: int | None = None,
        read_only: bool = False,
        connect_timeout_s: float = 10.0,
        application_name: str = "kip848",
    ) -> None:
        if not is_postgres_dsn(dsn):
            raise ValueError(f"not a PostgreSQL URI: {dsn_for_log(dsn)}")
        if journal_retention_ms is not None and journal_retention_ms < 0:
            raise ValueError("journal_retention_ms must be >= 0 or None")
        self.dsn = dsn
        self.where = dsn_for_log(dsn)
        self.read_only = read_only
        self.journal_retention_ms = journal_retention_ms
        self.connect_timeout_s = connect_timeout_s
        self.application_name = application_name
        self.last_commit_seconds: float | None = None
        self._partitions = check_partitions(partitions)
        self._lock = threading.Lock()
        self._lock_readers = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._readers: list[psycopg.Connection[Any]] = []  # idle, for the next read
        self._closed = False
        self._failed = False
        self._lost: str | None = None
        self._store_id = ""
        self._next_offset: dict[int, int] = {}
        self._retention_due_ms = -(2**63)
        self._idle_ms: int | None = None  # bound_idle_transactions
        conn = self._connect()
        import psycopg

        try:
            meta = read_meta(conn, self.where)
            if meta is None:
                if read_only:
                    raise StoreError(f"no record store in the PostgreSQL database {self.where}")
                meta = create_schema(conn, self.where, self._partitions)
            self._check_version(meta)
            if not read_only:
                meta = migrate(conn, meta)
                ensure_fence_function(conn)
            self._partitions = int(meta["partitions"])
            self._store_id = meta["store_id"]
            self._next_offset = self._read_next_offsets(conn)
        except psycopg.Error as e:
            # Refused by the server (a standby, which takes no writes; a role without the
            # rights the store needs; ...): said in one line, never a traceback.
            conn.close()
            hint = (
                " (this server takes no writes: a standby? --store must reach the primary)"
                if e.sqlstate == _READ_ONLY
                else ""
            )
            raise StoreAccessError(
                f"PostgreSQL store at {self.where}: {scrub(_one_line(e), self.dsn)}{hint}"
            ) from None
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    # -- connections ------------------------------------------------------------------------

    def _connect(self, *, read: bool = False) -> psycopg.Connection[Any]:
        import psycopg

        try:
            conn = psycopg.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=max(1, round(self.connect_timeout_s)),
                application_name=self.application_name + ("-reader" if read else ""),
                **connect_options(self.dsn),
            )
        except psycopg.OperationalError as e:
            raise StoreAccessError(
                f"cannot connect to the PostgreSQL store at {self.where}: "
                f"{scrub(_one_line(e), self.dsn)}"
            ) from None
        except psycopg.Error as e:
            raise StoreAccessError(
                f"PostgreSQL store at {self.where}: {scrub(_one_line(e), self.dsn)}"
            ) from None
        return conn

    def _check_version(self, meta: dict[str, str]) -> None:
        check_version(meta, self.where)

    @property
    def partitions(self) -> int:
        return self._partitions

    @property
    def failed(self) -> bool:
        return self._failed

    @property
    def lost(self) -> str | None:
        return self._lost

    def _read_next_offsets(
        self, conn: psycopg.Connection[Any], logs: Sequence[int] | None = None
    ) -> dict[int, int]:
        """Each log's next offset (of ``logs``, default all): after its last journal entry,
        compacted record and expired prefix (offsets are never reused)."""
        expired = dict(conn.execute("SELECT log, expired_through FROM kip848_logs").fetchall())
        if sorted(expired) != list(log_ids(self._partitions)):
            raise StoreCorruptError(
                f"record store in {self.where} is corrupt: {self._partitions} partitions, but "
                f"logs {sorted(expired)[:5]}..."
            )
        # One query per log and table, the log a constant: each reads one partition's index
        # (a query joining the logs would plan and probe every partition for every log).
        wanted = log_ids(self._partitions) if logs is None else logs
        cursors = []
        with conn.pipeline():
            for log in wanted:
                cursors.append(
                    conn.execute(
                        'SELECT greatest((SELECT max("offset") FROM kip848_journal'
                        f' WHERE log = {log}), (SELECT max("offset") FROM kip848_compacted'
                        f" WHERE log = {log}))"
                    )
                )
        found = {}
        for log, cur in zip(wanted, cursors, strict=True):
            row = cur.fetchone()
            last = -1 if row is None or row[0] is None else int(row[0])
            found[log] = max(last, int(expired[log])) + 1
        if logs is None and sorted(found) != list(log_ids(self._partitions)):
            raise StoreCorruptError(
                f"record store in {self.where} is corrupt: {self._partitions} partitions, but "
                f"logs {sorted(found)[:5]}..."
            )
        return found

    def _writer(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise StoreWriteError(f"record store in {self.where} is closed")
        if self._lost is not None:
            raise StoreLostError(self._lost)
        if self.read_only:
            raise StoreWriteError(f"record store in {self.where} is open read-only")
        if self._failed:
            raise StoreWriteError(
                f"record store in {self.where} failed earlier (the outcome of a commit is "
                "unknown); close and reopen it"
            )
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                conn.close()
            self._conn = None
            try:
                conn = self._connect()
                self._limit_idle(conn)
            except StoreAccessError as e:
                raise StoreWriteError(str(e)) from e
            self._conn = conn
        return conn

    def bound_idle_transactions(self, ms: int) -> None:
        """Sharing the store with other nodes: PostgreSQL ends this writer's session when a
        transaction of it waits for this process longer than ``ms``. An append holds its lease
        rows locked (``kip848_fence``) until its COMMIT, and a takeover waits for them: a
        process stopped between an append's statements and its COMMIT (SIGSTOP, a VM pause)
        must not hold them (its COMMIT then fails, and PostgreSQL says it did not commit)."""
        with self._lock:
            self._idle_ms = ms
            conn = self._conn
            if conn is not None and not conn.closed and not conn.broken:
                self._limit_idle(conn)

    def _limit_idle(self, conn: psycopg.Connection[Any]) -> None:
        import psycopg

        if self._idle_ms is None:
            return
        try:
            conn.execute(f"SET idle_in_transaction_session_timeout = {int(self._idle_ms)}")
            if conn.info.server_version >= 170000:
                # And a process stopped in the middle of sending a batch (PostgreSQL 17+).
                conn.execute(f"SET transaction_timeout = {int(self._idle_ms) * 4}")
        except psycopg.Error as e:
            conn.close()
            raise StoreAccessError(f"PostgreSQL store at {self.where}: {_one_line(e)}") from e

    # -- writing ----------------------------------------------------------------------------

    def append(
        self, records: Sequence[StoredRecord], timestamp_ms: int, *, fence: Fence | None = None
    ) -> dict[int, int]:
        check_batch(records, timestamp_ms)
        import psycopg

        with self._lock:
            conn = self._writer()
            if not records:
                return {}
            rows = Rows(fence)
            last: dict[int, int] = {}
            for log_id, recs in split_batch(records, self._partitions).items():
                offset = self._next_offset[log_id]
                rows.add(log_id, offset, timestamp_ms, recs)
                last[log_id] = offset + len(recs) - 1
            started = time.monotonic()
            for attempt in (1, 2):
                try:
                    txid = self._write(conn, rows)
                    break
                except psycopg.Error as e:
                    broken = _connection_trouble(e, conn)
                    self._abandon(conn)
                    if e.sqlstate == FENCED:
                        detail = (e.diag.message_detail or "").split(",")
                        raise StoreFencedError(
                            f"append to {self.where} fenced off: {_one_line(e)}",
                            frozenset(int(p) for p in detail if p),
                        ) from e
                    if (why := schema_refusal(e)) is not None:  # another build migrated it
                        raise StoreWriteError(f"append to {self.where} refused: {why}") from e
                    if broken and attempt == 1:
                        # Nothing was committed (no COMMIT was sent): the connection was stale
                        # (PostgreSQL restarted since it was used); once more on a new one.
                        conn = self._writer()
                        continue
                    raise StoreWriteError(
                        f"append to {self.where} failed, rolled back: {_one_line(e)}"
                    ) from e
            try:
                conn.execute("COMMIT")
            except psycopg.Error as e:
                if not _connection_trouble(e, conn):
                    self._abandon(conn)  # refused by the server: rolled back
                    raise StoreWriteError(
                        f"commit to {self.where} failed, rolled back: {_one_line(e)}"
                    ) from e
                if not self._committed(txid, e, rows):
                    raise StoreWriteError(
                        f"append to {self.where} failed, rolled back (the connection was lost "
                        f"while committing; PostgreSQL says transaction {txid} did not "
                        f"commit): {_one_line(e)}"
                    ) from e
            self.last_commit_seconds = time.monotonic() - started
            for log_id, offset in last.items():
                self._next_offset[log_id] = offset + 1
        if self.journal_retention_ms is not None and timestamp_ms >= self._retention_due_ms:
            self._retention_step(timestamp_ms)
        return last

    @staticmethod
    def _write(conn: psycopg.Connection[Any], rows: Rows) -> int:
        """Everything of the batch but its COMMIT (one statement: see ``_GATE_FENCE``);
        returns the transaction id."""
        gate = [f"SELECT {SCHEMA_GATE}"]
        params: list[Any] = []
        if rows.fence is not None:
            gate.append(_GATE_FENCE)
            params.extend(rows.fenced())
            if CLUSTER_LOG in rows.firsts:
                gate.append(_GATE_CLUSTER)
                params.append(rows.firsts[CLUSTER_LOG])
        # Every write joins the gate's one row: none is made unless the gate passed.
        sql = [f"WITH g AS MATERIALIZED ({''.join(gate)}),", _INSERT_JOURNAL]
        params.extend(rows.journal())
        if rows.puts:
            sql.append("," + _UPSERT_COMPACTED)
            params.extend(rows.upserts())
        if rows.deletes:
            sql.append("," + _DELETE_COMPACTED)
            params.extend(rows.tombstones())
        sql.append(" SELECT txid_current()")
        conn.execute("BEGIN")
        row = conn.execute("".join(sql), params).fetchone()
        assert row is not None
        return int(row[0])

    def adopt(self, log: int, next_offset: int | None = None) -> int:
        """This writer now appends to ``log`` after others did (a partition it just took over,
        or the cluster log it caught up with): its next offset is ``next_offset``, or, when
        None, what PostgreSQL says now. Returns it. (A fenced append to the cluster log is
        refused unless it lands at the log's end: the offset given here is the writer's
        claim of being up to date.)"""
        check_log(log, self._partitions)
        if next_offset is None:
            conn, offsets = self._on_reader(lambda c: self._read_next_offsets(c, [log]))
            self._release_reader(conn)
            next_offset = offsets[log]
        with self._lock:
            self._next_offset[log] = next_offset
        return next_offset

    def _abandon(self, conn: psycopg.Connection[Any]) -> None:
        """Roll back what the failed statements left open (or drop a broken connection)."""
        try:
            if not conn.broken:
                conn.execute("ROLLBACK")
                return
        except Exception:  # noqa: BLE001 - a connection that cannot roll back is dropped
            pass
        conn.close()
        self._conn = None

    def _committed(self, txid: int, cause: Exception, rows: Rows) -> bool:
        """After the connection was lost during COMMIT: did transaction ``txid`` (writing
        ``rows``) commit? Asks PostgreSQL (``txid_status``) on a new connection, for up to
        ``_RESOLVE_WINDOW_S``; raises ``StoreWriteError(outcome_unknown=True)`` (and refuses
        every later append) if it cannot tell. "committed" counts only with the batch's first
        row in the journal: a transaction id is given out again after PostgreSQL crashed
        before any of the transaction reached its write-ahead log, and then names another
        transaction (a committed one, after a crash during our COMMIT)."""
        import psycopg

        self._abandon_quietly()
        deadline = time.monotonic() + _RESOLVE_WINDOW_S
        last_error: Exception = cause
        while time.monotonic() < deadline:
            try:
                conn = self._connect()
            except StoreAccessError as e:
                last_error = e
                time.sleep(0.5)
                continue
            try:
                status = conn.execute("SELECT txid_status(%s)", (txid,)).fetchone()
                state = None if status is None else status[0]
                reused = state == "committed" and not landed(conn, rows)
                self._limit_idle(conn)
            except (psycopg.Error, StoreAccessError) as e:
                conn.close()
                last_error = e
                time.sleep(0.5)
                continue
            self._conn = conn
            if reused:
                log.warning(
                    "The connection to %s was lost while committing and PostgreSQL restarted: "
                    "transaction id %d names another transaction now; the batch did not commit.",
                    self.where,
                    txid,
                )
                return False
            if state == "committed":
                log.warning(
                    "The connection to %s was lost while committing; transaction %d committed.",
                    self.where,
                    txid,
                )
                return True
            if state in ("aborted", None):
                return False
            time.sleep(0.1)  # "in progress": the server has not finished with it yet
        self._failed = True
        raise StoreWriteError(
            f"commit to {self.where} lost its connection and PostgreSQL could not tell within "
            f"{_RESOLVE_WINDOW_S:.0f} s whether transaction {txid} committed: the batch may or "
            f"may not be durable ({_one_line(last_error)})",
            outcome_unknown=True,
        ) from cause

    def _abandon_quietly(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass

    def probe_write(self) -> None:
        """A small durable write that touches no record (after appends failed)."""
        import psycopg

        with self._lock:
            conn = self._writer()
            try:
                conn.execute(
                    "UPDATE kip848_meta SET value = %s WHERE name = 'write_probe'"
                    f" AND {SCHEMA_GATE} = 1",
                    (str(time.time_ns()),),
                )
            except psycopg.Error as e:
                self._abandon(conn)
                why = schema_refusal(e) or _one_line(e)
                raise StoreWriteError(f"write probe of {self.where} failed: {why}") from e

    def check_identity(self) -> None:
        """Raise :class:`StoreLostError` if the database answering is no longer the store this
        was opened on (dropped and re-created, or another database restored in its place):
        its ``store_id`` changed. Unreachable is not lost: that is a write failure."""
        import psycopg

        with self._lock:
            if self._closed or self.read_only:
                return
            if self._lost is not None:
                raise StoreLostError(self._lost)
            try:
                conn = self._writer()
                row = conn.execute(
                    "SELECT value FROM kip848_meta WHERE name = 'store_id'"
                ).fetchone()
            except (psycopg.Error, StoreWriteError):
                return
            if row is not None and row[0] == self._store_id:
                return
            self._lost = (
                f"the record store in {self.where} is no longer the one this server opened (its "
                "store id changed or its tables are gone): writes would not reach the store it "
                "loaded from, so none are acknowledged any more"
            )
            log.critical("%s", self._lost)
            raise StoreLostError(self._lost)

    def rescue(self) -> Any:
        raise StoreError(
            f"nothing to rescue: the store is the PostgreSQL database {self.where}, whose "
            "durability is PostgreSQL's"
        )

    # -- retention --------------------------------------------------------------------------

    def expire_journal(self, older_than_ms: int) -> int:
        if type(older_than_ms) is not int:
            raise TypeError("older_than_ms must be an int")
        deleted, more = 0, True
        while more:
            n, more = self._expire_chunk(older_than_ms, _EXPIRE_CHUNK)
            deleted += n
        return deleted

    def _expire_chunk(self, older_than_ms: int, limit: int) -> tuple[int, bool]:
        import psycopg

        with self._lock:
            conn = self._writer()
            deleted, more = 0, False
            try:
                conn.execute("BEGIN")
                for log_id in log_ids(self._partitions):
                    budget = limit - deleted
                    if budget <= 0:
                        more = True
                        break
                    head = conn.execute(
                        'SELECT "offset", timestamp_ms FROM kip848_journal WHERE log = %s'
                        ' ORDER BY "offset" LIMIT %s',
                        (log_id, budget),
                    ).fetchall()
                    n = next(
                        (i for i, (_, ts) in enumerate(head) if ts >= older_than_ms), len(head)
                    )
                    if not n:
                        continue
                    through = head[n - 1][0]
                    conn.execute(
                        'DELETE FROM kip848_journal WHERE log = %s AND "offset" <= %s',
                        (log_id, through),
                    )
                    conn.execute(
                        "UPDATE kip848_logs SET expired_through = greatest(expired_through, %s)"
                        " WHERE log = %s",
                        (through, log_id),
                    )
                    deleted += n
                    more = more or n == budget
                conn.execute("COMMIT")
            except psycopg.Error as e:
                self._abandon(conn)
                raise StoreWriteError(
                    f"journal expiry in {self.where} failed: {_one_line(e)}"
                ) from e
        return deleted, more

    def apply_retention(self, now_ms: int) -> int:
        if self.journal_retention_ms is None:
            return 0
        return self.expire_journal(now_ms - self.journal_retention_ms)

    def _retention_step(self, now_ms: int) -> None:
        retention = self.journal_retention_ms
        assert retention is not None
        try:
            _, more = self._expire_chunk(now_ms - retention, _RETENTION_STEP)
        except StoreError as e:
            log.warning("journal retention step failed (will retry): %s", e)
            more = False
        self._retention_due_ms = now_ms if more else now_ms + retention_interval_ms(retention)

    # -- reading ----------------------------------------------------------------------------

    def _snapshot_cursor(self, sql: str, params: Sequence[Any]) -> Iterator[list[Any]]:
        """Run ``sql`` in a read-only, repeatable-read transaction on a connection of its own,
        now (the snapshot is taken at the call), and iterate its rows in chunks."""
        return self._snapshot(sql, params, None)[1]

    def _snapshot(
        self, sql: str, params: Sequence[Any], end_of: int | None
    ) -> tuple[int, Iterator[list[Any]]]:
        """:meth:`_snapshot_cursor`, and the last offset of log ``end_of`` in the same
        snapshot (-1 without one)."""
        ends = [-1]

        def open_cursor(conn: psycopg.Connection[Any]) -> tuple[Any, list[Any]]:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute("SET LOCAL work_mem = '256MB'")  # a log's sort stays in memory
            if end_of is not None:  # the snapshot's first query: the view below is as of it
                ends[0] = self._read_next_offsets(conn, [end_of])[end_of] - 1
            cur = conn.cursor(name=f"kip848_{uuid.uuid4().hex}", binary=True)
            cur.itersize = _FETCH
            cur.execute(sql, params)
            return cur, cur.fetchmany(_FETCH)

        conn, (cur, first) = self._on_reader(open_cursor)
        return ends[0], self._chunks(conn, cur, first)

    def _on_reader(self, read: Callable[[psycopg.Connection[Any]], T]) -> tuple[Any, T]:
        """``read`` on an idle reader: (the connection, its result); the caller gives the
        connection back (``_release_reader``). The idle readers go stale together when
        PostgreSQL restarts after they were used: a read that fails so runs once more, on a
        new connection (it changes nothing)."""
        import psycopg

        retried = False
        while True:
            conn = self._reader()
            try:
                return conn, read(conn)
            except psycopg.Error as e:
                stale = _connection_trouble(e, conn)
                conn.close()
                if retried or not stale:
                    raise StoreError(
                        f"cannot read the record store in {self.where}: {_one_line(e)}"
                    ) from e
                self._drop_idle_readers()
                retried = True
            except BaseException:
                self._release_reader(conn)
                raise

    def _drop_idle_readers(self) -> None:
        with self._lock_readers:
            readers, self._readers = self._readers, []
        for conn in readers:
            conn.close()

    def _reader(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise StoreError(f"record store in {self.where} is closed")
        with self._lock_readers:
            while self._readers:
                conn = self._readers.pop()
                if not conn.closed and not conn.broken:
                    return conn
        return self._connect(read=True)

    def _release_reader(self, conn: psycopg.Connection[Any]) -> None:
        """A read is over: end its transaction and keep the connection for the next one."""
        try:
            if not conn.closed and not conn.broken:
                conn.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - a connection that cannot end its read is dropped
            conn.close()
            return
        with self._lock_readers:
            if not self._closed and len(self._readers) < _IDLE_READERS and not conn.closed:
                self._readers.append(conn)
                return
        conn.close()

    def _chunks(
        self, conn: psycopg.Connection[Any], cur: Any, first: list[Any]
    ) -> Iterator[list[Any]]:
        import psycopg

        try:
            rows = first
            while rows:
                yield rows
                rows = cur.fetchmany(_FETCH)
        except psycopg.Error as e:
            raise StoreError(f"cannot read the record store in {self.where}: {_one_line(e)}") from e
        finally:
            self._release_reader(conn)

    def load_rows(self, log: int) -> Iterator[list[tuple[int, bytes, bytes, str | None]]]:
        check_log(log, self._partitions)
        return self._snapshot_cursor(
            'SELECT "offset", key, value, group_id FROM kip848_compacted WHERE log = %s'
            ' ORDER BY "offset"',
            (log,),
        )

    def load_snapshot(
        self, log: int
    ) -> tuple[int, Iterator[list[tuple[int, bytes, bytes, str | None]]]]:
        check_log(log, self._partitions)
        return self._snapshot(
            'SELECT "offset", key, value, group_id FROM kip848_compacted WHERE log = %s'
            ' ORDER BY "offset"',
            (log,),
            log,
        )

    def load(self, log: int) -> Iterator[tuple[int, StoredRecord]]:
        return _records(self.load_rows(log))

    def load_groups(self, log: int) -> Iterator[list[GroupRecords]]:
        # Joined in the server, which does it in C on a core of its own while this process
        # builds the previous partition: one row per group, one JSON array of its records.
        check_log(log, self._partitions)
        return self._snapshot_cursor(
            "SELECT group_id, count(*), max(\"offset\"), '\\x5b'::bytea || string_agg(key ||"
            " '\\x2c'::bytea || value, '\\x2c'::bytea ORDER BY \"offset\") || '\\x5d'::bytea"
            ' FROM kip848_compacted WHERE log = %s GROUP BY group_id ORDER BY min("offset")',
            (log,),
        )

    def journal_rows(
        self, log: int, *, from_offset: int = 0, to_offset: int | None = None
    ) -> Iterator[list[tuple[int, int, str | None, bytes, bytes | None]]]:
        check_log(log, self._partitions)
        return self._snapshot_cursor(
            'SELECT "offset", timestamp_ms, group_id, key, value FROM kip848_journal'
            ' WHERE log = %s AND "offset" >= %s AND "offset" < %s ORDER BY "offset"',
            (log, from_offset, (1 << 63) - 1 if to_offset is None else to_offset),
        )

    def journal(
        self, log: int, *, from_offset: int = 0, to_offset: int | None = None
    ) -> Iterator[JournalEntry]:
        check_log(log, self._partitions)
        return _entries(
            self._snapshot_cursor(
                'SELECT "offset", timestamp_ms, group_id, key, value, leader_epoch'
                ' FROM kip848_journal WHERE log = %s AND "offset" >= %s AND "offset" < %s'
                ' ORDER BY "offset"',
                (log, from_offset, (1 << 63) - 1 if to_offset is None else to_offset),
            ),
            log,
        )

    def last_offset(self, log: int) -> int:
        check_log(log, self._partitions)
        if self.read_only:  # another process may be appending
            conn, offsets = self._on_reader(self._read_next_offsets)
            self._release_reader(conn)
            return offsets[log] - 1
        return self._next_offset[log] - 1

    def stats(self) -> dict[str, Any]:
        chunks = self._snapshot_cursor(
            "SELECT 'journal', log, count(*), min(\"offset\"), count(*) - count(value),"
            " coalesce(sum(length(key) + coalesce(length(value), 0)), 0), 0, 0"
            " FROM kip848_journal GROUP BY log"
            " UNION ALL SELECT 'compacted', log, count(*), 0, count(DISTINCT group_id),"
            " coalesce(sum(length(key)), 0), coalesce(sum(length(value)), 0), 0"
            " FROM kip848_compacted GROUP BY log",
            (),
        )
        per: dict[tuple[str, int], tuple[Any, ...]] = {}
        for rows in chunks:
            for kind, log_id, *figures in rows:
                per[(kind, log_id)] = tuple(figures)
        conn = self._reader()
        try:
            groups = conn.execute(
                "SELECT count(DISTINCT group_id) FROM kip848_compacted"
            ).fetchone()
            meta = dict(conn.execute("SELECT name, value FROM kip848_meta").fetchall())
            following = self._read_next_offsets(conn)
        finally:
            self._release_reader(conn)
        journal = [v for (kind, _), v in per.items() if kind == "journal"]
        compacted = [v for (kind, _), v in per.items() if kind == "compacted"]
        return {
            "implementation": "postgresql",
            "where": self.where,
            "schema_version": int(meta.get("schema_version", 0)),
            "partitions": self._partitions,
            "created_at_ms": int(meta.get("created_at_ms", 0)),
            "created_by": meta.get("created_by"),
            "journal_entries": sum(int(v[0]) for v in journal),
            "journal_tombstones": sum(int(v[2]) for v in journal),
            "journal_bytes": sum(int(v[3]) for v in journal),
            "compacted_records": sum(int(v[0]) for v in compacted),
            "compacted_groups": 0 if groups is None else int(groups[0]),
            "compacted_key_bytes": sum(int(v[3]) for v in compacted),
            "compacted_value_bytes": sum(int(v[4]) for v in compacted),
            "journal_retention_ms": self.journal_retention_ms,
            "logs": {
                log_id: {
                    "last_offset": following[log_id] - 1,
                    "journal_first_offset": per.get(("journal", log_id), (0, None))[1],
                    "journal_entries": int(per.get(("journal", log_id), (0,))[0]),
                    "compacted_records": int(per.get(("compacted", log_id), (0,))[0]),
                }
                for log_id in log_ids(self._partitions)
            },
        }

    # -- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._abandon_quietly()
        self._drop_idle_readers()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("read-only" if self.read_only else "open")
        return f"PostgresRecordStore({self.where!r}, {state})"


def _records(chunks: Iterator[list[Any]]) -> Iterator[tuple[int, StoredRecord]]:
    record = StoredRecord
    for rows in chunks:
        for offset, key, value, group_id in rows:
            yield offset, record(key, value, group_id)


def _entries(chunks: Iterator[list[Any]], log: int) -> Iterator[JournalEntry]:
    entry = JournalEntry
    for rows in chunks:
        for offset, ts, group_id, key, value, epoch in rows:
            yield entry(offset, ts, group_id, key, value, log, epoch)


def _connection_trouble(e: Exception, conn: Any) -> bool:
    import psycopg

    return isinstance(e, psycopg.OperationalError) or bool(getattr(conn, "broken", False))


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())
