"""Partition leases in PostgreSQL: who leads which coordinator partition, at which leader epoch,
until when (docs/ha.md "Leases and fencing"). PostgreSQL is the arbiter: every decision is one
UPDATE of ``kip848_logs`` rows, serialised by their row locks, timed by the server's clock
(``clock_timestamp()``), never by a node's.

* ``acquire``: a partition nobody holds, or whose lease expired, becomes the caller's at the
  next leader epoch (the epoch only ever grows).
* ``renew``: extends the caller's leases, each only at the epoch it holds; what it no longer
  holds (taken over after it expired) is missing from the answer, and the node must stop
  serving it at once.
* ``release``: a graceful hand-over (the leader unloaded the partition first): the row is free
  at once, its epoch kept (the next leader bumps it).

A fenced append (:class:`~.api.Fence`, the store's ``kip848_fence``) locks the same rows
``FOR KEY SHARE`` in its own transaction, and a takeover locks them ``FOR UPDATE`` first, so a
takeover either waits for the append or is seen by it: a node that lost a partition can never
write to it again. A renewal (an UPDATE of the expiry only) takes no lock an append holds: a
node's renewals never wait behind its own writes.

The nodes (``kip848_nodes``) and the controller (``kip848_controller``) live here too:

* ``register``: a node id is taken by one process (its *incarnation*) at a time; another
  process with the same id is refused until the first one's registration expired.
* ``tick``: a node's heartbeat, one transaction in one round trip: extend its registration,
  renew its leases, take the partitions targeted at it that are free, take or keep the
  controller's lease, record what it has loaded, and read the whole cluster back
  (:class:`ClusterState`).
* ``set_targets``: the controller's decisions, written only while it holds the controller's
  lease at the epoch it was given (a deposed controller writes nothing).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .api import StoreAccessError, StoreError, StoreVersionError
from .postgres_schema import SCHEMA_VERSION, check_version, connect_options, read_meta, scrub

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "CHANNEL",
    "ClusterState",
    "Lease",
    "Listener",
    "NodeRow",
    "PostgresLeases",
    "TickResult",
]

_MS = "* interval '1 millisecond'"
CHANNEL = "kip848_cluster"
"""Every node LISTENs here: told at once of a node joining or leaving, new targets, released
and loaded partitions (a heartbeat follows at once instead of a heartbeat interval later)."""
_NOTIFY = f"pg_notify('{CHANNEL}', '')"
_LEFT = "(extract(epoch FROM {} - clock_timestamp()) * 1000)::bigint"
_FREE = "(leader IS NULL OR lease_expires_at < clock_timestamp())"
"""A lease anyone may take. A takeover locks the rows FOR UPDATE first (a plain UPDATE of
them would not wait for the appends' FOR KEY SHARE: module docstring); a heartbeat skips the
rows an append still holds (the previous leader's, in flight or stopped before its COMMIT
until PostgreSQL ends its session) and takes them at a later heartbeat, rather than wait."""


@dataclass(frozen=True, slots=True)
class Lease:
    """One partition's lease as PostgreSQL has it."""

    partition: int
    leader: int | None
    epoch: int
    expires_in_ms: int | None
    """Until the lease expires, by the server's clock (negative: expired; None: never held)."""
    target: int | None
    pinned: bool = False
    """Placed by an operator (``kip848 cluster move``): the balancer leaves it there."""
    loaded_epoch: int = 0
    """The epoch at which its leader finished loading it (== epoch: serving)."""

    @property
    def held(self) -> bool:
        """Led by a node whose lease has not expired."""
        return self.leader is not None and self.expires_in_ms is not None and self.expires_in_ms > 0


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One coordinator node as it registered."""

    node_id: int
    address: str
    """Where its gRPC service is reached (``--advertised-address``)."""
    kafka_address: str | None
    """Where its Kafka listener is reached (None: it has none)."""
    expires_in_ms: int
    """Until its registration expires (negative: it stopped heartbeating)."""
    cluster_offset: int
    """The last offset of the cluster log it has applied."""
    incarnation: str | None

    @property
    def live(self) -> bool:
        return self.expires_in_ms > 0


@dataclass(frozen=True, slots=True)
class ClusterState:
    """The whole cluster as PostgreSQL had it at one moment (a tick's read)."""

    leases: list[Lease]
    nodes: dict[int, NodeRow]
    controller: int | None
    """The node holding the controller's lease (None: nobody, or expired)."""
    controller_epoch: int
    cluster_log_end: int
    """The cluster log's last offset (-1: empty)."""
    controller_expires_in_ms: int | None = None
    """Until the controller's lease expires, by the server's clock (None: never held)."""
    schema_version: int = SCHEMA_VERSION
    """The store's schema version (``kip848_meta``; -1: missing or not a number), read with
    the cluster log's end (no statement of its own): :func:`.postgres_schema.schema_changed`."""

    def live(self) -> list[int]:
        return sorted(n for n, row in self.nodes.items() if row.live)


@dataclass(frozen=True, slots=True)
class TickResult:
    """What one heartbeat of a node found."""

    registered: bool
    """False: another process registered this node id (this one must stop)."""
    renewed: set[int]
    """The partitions still held (of those it said it held)."""
    acquired: dict[int, int]
    """Partitions taken now (they were targeted at it and free): partition -> leader epoch."""
    controller_epoch: int | None
    """The controller lease's epoch if this node holds it, else None."""
    state: ClusterState
    log_ends: dict[int, int] = field(default_factory=dict)
    """The last offset of each partition's log it was asked about (``written``)."""


class PostgresLeases:
    """Lease operations on their own connection (renewals must not wait behind a batch)."""

    def __init__(
        self,
        dsn: str,
        *,
        where: str,
        connect_timeout_s: float = 10.0,
        statement_timeout_s: float = 10.0,
    ) -> None:
        self.dsn = dsn
        self.where = where
        self.connect_timeout_s = connect_timeout_s
        self.statement_timeout_s = statement_timeout_s
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None

    def _connection(self) -> psycopg.Connection[Any]:
        """The open connection, or a new one (under ``_lock``)."""
        import psycopg

        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            try:
                conn = self._conn = psycopg.connect(
                    self.dsn,
                    autocommit=True,
                    connect_timeout=max(1, round(self.connect_timeout_s)),
                    application_name="kip848-leases",
                    **connect_options(self.dsn),
                )
                # A statement that waits longer than this (a lock held by a stopped process's
                # transaction) fails instead of stopping the heartbeats. (Not in the options
                # of connect: they would replace the URI's, a search_path for one.)
                conn.execute(f"SET statement_timeout = {int(self.statement_timeout_s * 1000)}")
            except psycopg.Error as e:
                raise StoreAccessError(
                    f"cannot reach the PostgreSQL store at {self.where} for leases: "
                    f"{scrub(' '.join(str(e).split()), self.dsn)}"
                ) from None
        return conn

    def _drop(self, conn: psycopg.Connection[Any]) -> None:
        """After a failed statement: end its transaction, or drop a broken connection."""
        try:
            if not conn.broken and not conn.closed:
                conn.execute("ROLLBACK")
                return
        except Exception:  # noqa: BLE001 - a connection that cannot roll back is dropped
            pass
        conn.close()
        self._conn = None

    def _run(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        import psycopg

        with self._lock:
            conn = self._connection()
            try:
                cur = conn.execute(sql, params)
                return cur.fetchall() if cur.description is not None else []
            except psycopg.Error as e:
                self._drop(conn)
                raise StoreError(
                    f"lease operation on {self.where} failed: {' '.join(str(e).split())}"
                ) from e

    def check_store(self) -> None:
        """Raise :class:`StoreError` unless the database holds a store of this build's schema
        (``kip848 cluster``, which reads and writes the leases without opening the store): no
        store, a partial or damaged one, one written by a newer build (its leases may mean
        something else), or one of version 1 that no node of this build has migrated yet."""
        import psycopg

        with self._lock:
            conn = self._connection()
            try:
                meta = read_meta(conn, self.where)
            except psycopg.Error as e:
                self._drop(conn)
                raise StoreError(
                    f"reading the store's schema in {self.where} failed: {' '.join(str(e).split())}"
                ) from e
        if meta is None:
            raise StoreError(f"no record store in the PostgreSQL database {self.where}")
        version = check_version(meta, self.where)
        if version < SCHEMA_VERSION:
            raise StoreVersionError(
                f"record store in {self.where} is of schema version {version} (one node): a "
                "node of this build migrates it when it starts on it (kip848 serve --store)"
            )

    def acquire(self, node_id: int, partitions: Iterable[int], lease_ms: int) -> dict[int, int]:
        """Take the free or expired ones of ``partitions`` (a target set for another node is
        left to it): partition -> the new leader epoch."""
        rows = self._run(
            "UPDATE kip848_logs SET leader = %s, leader_epoch = leader_epoch + 1,"
            " lease_expires_at = clock_timestamp() + %s * interval '1 millisecond'"
            " WHERE log IN (SELECT log FROM kip848_logs WHERE log = ANY(%s::int[]) AND log >= 0"
            f" AND {_FREE} AND (target IS NULL OR target = %s) FOR UPDATE)"
            f" AND {_FREE} AND (target IS NULL OR target = %s)"
            " RETURNING log, leader_epoch",
            (node_id, lease_ms, sorted(partitions), node_id, node_id),
        )
        return {int(p): int(e) for p, e in rows}

    def renew(self, node_id: int, held: Mapping[int, int], lease_ms: int) -> set[int]:
        """Extend the leases ``node_id`` holds (partition -> epoch); the answer is what it still
        holds. A lease that expired but was not taken over is renewed (nobody else wrote)."""
        if not held:
            return set()
        parts = sorted(held)
        rows = self._run(
            "UPDATE kip848_logs l SET lease_expires_at = clock_timestamp() + %s * interval"
            " '1 millisecond' FROM unnest(%s::int[], %s::bigint[]) AS h(log, epoch)"
            " WHERE l.log = h.log AND l.leader = %s AND l.leader_epoch = h.epoch RETURNING l.log",
            (lease_ms, parts, [held[p] for p in parts], node_id),
        )
        return {int(r[0]) for r in rows}

    def release(self, node_id: int, held: Mapping[int, int]) -> None:
        """Give up these leases at once (after the partitions were unloaded)."""
        if not held:
            return
        parts = sorted(held)
        self._run(
            "WITH freed AS (UPDATE kip848_logs l SET leader = NULL, lease_expires_at = NULL"
            " FROM unnest(%s::int[], %s::bigint[]) AS h(log, epoch)"
            " WHERE l.log = h.log AND l.leader = %s AND l.leader_epoch = h.epoch RETURNING 1)"
            f" SELECT {_NOTIFY} FROM (SELECT count(*) FROM freed) AS f",
            (parts, [held[p] for p in parts], node_id),
        )

    def set_target(self, partition: int, node_id: int | None) -> None:
        """Who should lead ``partition`` next (the balancer's, or ``kip848 cluster move``)."""
        self._run("UPDATE kip848_logs SET target = %s WHERE log = %s", (node_id, partition))

    def leases(self) -> list[Lease]:
        return [_lease(row) for row in self._run(_LEASES)]

    # -- nodes and the controller -------------------------------------------------------------

    def register(
        self,
        node_id: int,
        incarnation: str,
        address: str,
        kafka_address: str | None,
        lease_ms: int,
    ) -> int | None:
        """Take ``node_id`` for this process (``incarnation``). None when done; else the
        milliseconds until the registration of the process that has it now expires (ask again
        then)."""
        rows = self._run(
            "INSERT INTO kip848_nodes AS n (node_id, address, kafka_address, started_at,"
            " expires_at, incarnation) VALUES (%s, %s, %s, clock_timestamp(), clock_timestamp()"
            f" + %s {_MS}, %s) ON CONFLICT (node_id) DO UPDATE SET address = EXCLUDED.address,"
            " kafka_address = EXCLUDED.kafka_address, started_at = EXCLUDED.started_at,"
            " expires_at = EXCLUDED.expires_at, incarnation = EXCLUDED.incarnation,"
            " cluster_offset = -1 WHERE n.expires_at < clock_timestamp()"
            " OR n.incarnation = EXCLUDED.incarnation RETURNING 1",
            (node_id, address, kafka_address, lease_ms, incarnation),
        )
        if rows:
            self._run(f"SELECT {_NOTIFY}")  # the controller: a node joined
            return None
        left = self._run(
            f"SELECT {_LEFT.format('expires_at')} FROM kip848_nodes WHERE node_id = %s",
            (node_id,),
        )
        return max(1, int(left[0][0])) if left else 1

    def unregister(self, node_id: int, incarnation: str) -> None:
        """A node leaving for good (after releasing its leases): gone at once, so the
        controller moves its partitions without waiting for its registration to expire."""
        self._run(
            "UPDATE kip848_nodes SET expires_at = clock_timestamp() - interval '1 millisecond'"
            " WHERE node_id = %s AND incarnation = %s",
            (node_id, incarnation),
        )
        self._run(  # the controller's lease only if this process holds it, not a later one
            "UPDATE kip848_controller SET expires_at = NULL, node_id = NULL WHERE node_id = %s"
            " AND EXISTS (SELECT 1 FROM kip848_nodes WHERE node_id = %s AND incarnation = %s)",
            (node_id, node_id, incarnation),
        )
        self._run(f"SELECT {_NOTIFY}")

    def tick(
        self,
        node_id: int,
        incarnation: str,
        held: Mapping[int, int],
        lease_ms: int,
        *,
        controller_epoch: int | None,
        cluster_offset: int,
        loaded: Mapping[int, int],
        acquire: bool = True,
        written: Iterable[int] = (),
    ) -> TickResult:
        """One heartbeat of ``node_id`` (see the module docstring), in one transaction and
        one round trip. ``held``: partition -> epoch it leads; ``loaded``: partitions it
        finished loading since the last tick (-> their epochs); ``acquire``: take the free
        partitions targeted at it (False while it stops); ``written``: partitions whose
        logs' last offsets to read (``log_ends``)."""
        import psycopg

        parts = sorted(held)
        done = sorted(loaded)
        mine = "EXISTS (SELECT 1 FROM kip848_nodes WHERE node_id = %s AND incarnation = %s)"
        with self._lock:
            conn = self._connection()
            try:
                with conn.pipeline():
                    conn.execute("BEGIN")
                    reg = conn.execute(
                        f"UPDATE kip848_nodes SET expires_at = clock_timestamp() + %s {_MS},"
                        " cluster_offset = %s WHERE node_id = %s AND incarnation = %s"
                        " RETURNING 1",
                        (lease_ms, cluster_offset, node_id, incarnation),
                    )
                    renew = conn.execute(
                        f"UPDATE kip848_logs l SET lease_expires_at = clock_timestamp() + %s {_MS}"
                        " FROM unnest(%s::int[], %s::bigint[]) AS h(log, epoch)"
                        " WHERE l.log = h.log AND l.leader = %s AND l.leader_epoch = h.epoch"
                        f" AND {mine} RETURNING l.log",
                        (lease_ms, parts, [held[p] for p in parts], node_id, node_id, incarnation),
                    )
                    if done:
                        conn.execute(
                            "UPDATE kip848_logs l SET loaded_epoch = h.epoch"
                            " FROM unnest(%s::int[], %s::bigint[]) AS h(log, epoch)"
                            " WHERE l.log = h.log AND l.leader = %s AND l.leader_epoch = h.epoch",
                            (done, [loaded[p] for p in done], node_id),
                        )
                        conn.execute(f"SELECT {_NOTIFY}")  # the controller: moves done
                    take = conn.execute(
                        f"UPDATE kip848_logs SET leader = %s, leader_epoch = leader_epoch + 1,"
                        f" lease_expires_at = clock_timestamp() + %s {_MS}, loaded_epoch = 0"
                        " WHERE log IN (SELECT log FROM kip848_logs WHERE log >= 0"
                        f" AND target = %s AND {_FREE} FOR UPDATE SKIP LOCKED)"
                        " AND target = %s AND %s"
                        f" AND {_FREE} AND {mine} RETURNING log, leader_epoch",
                        (node_id, lease_ms, node_id, node_id, acquire, node_id, incarnation),
                    )
                    ctl = conn.execute(
                        "UPDATE kip848_controller SET node_id = %s, expires_at ="
                        f" clock_timestamp() + %s {_MS}, epoch = CASE WHEN node_id = %s AND"
                        " epoch = %s THEN epoch ELSE epoch + 1 END WHERE id = 1 AND %s AND"
                        " ((node_id = %s AND epoch = %s) OR node_id IS NULL OR expires_at IS NULL"
                        f" OR expires_at < clock_timestamp()) AND {mine} RETURNING epoch",
                        (
                            node_id,
                            lease_ms,
                            node_id,
                            -1 if controller_epoch is None else controller_epoch,
                            acquire,
                            node_id,
                            -1 if controller_epoch is None else controller_epoch,
                            node_id,
                            incarnation,
                        ),
                    )
                    reads = _read_state(conn)
                    ends = [  # the log a constant: one partition's index each
                        conn.execute(
                            'SELECT greatest((SELECT max("offset") FROM kip848_journal'
                            f" WHERE log = {int(p)}), expired_through) FROM kip848_logs"
                            f" WHERE log = {int(p)}"
                        )
                        for p in sorted(written)
                    ]
                    conn.execute("COMMIT")
                log_ends = {
                    p: int(row[0])
                    for p, cur in zip(sorted(written), ends, strict=True)
                    for row in cur.fetchall()
                }
                registered = bool(reg.fetchall())
                renewed = {int(r[0]) for r in renew.fetchall()}
                acquired = {int(p): int(e) for p, e in take.fetchall()}
                ctl_rows = ctl.fetchall()
                state = _state(reads)
            except psycopg.Error as e:
                self._drop(conn)
                raise StoreError(
                    f"heartbeat of node {node_id} to {self.where} failed: "
                    f"{' '.join(str(e).split())}"
                ) from e
        return TickResult(
            registered=registered,
            renewed=renewed,
            acquired=acquired,
            controller_epoch=int(ctl_rows[0][0]) if ctl_rows else None,
            state=state,
            log_ends=log_ends,
        )

    def set_targets(
        self, node_id: int, controller_epoch: int, targets: Mapping[int, int | None]
    ) -> bool:
        """The controller's new targets (partition -> node; unpinned unless the target stays
        the pinned node), written only if ``node_id`` still holds the controller's lease at
        ``controller_epoch``. True if written."""
        if not targets:
            return True
        parts = sorted(targets)
        rows = self._run(
            "UPDATE kip848_logs l SET target = h.target, pinned = l.pinned AND"
            " l.target IS NOT DISTINCT FROM h.target"
            " FROM unnest(%s::int[], %s::int[]) AS h(log, target)"
            " WHERE l.log = h.log AND EXISTS (SELECT 1 FROM kip848_controller WHERE id = 1 AND"
            " node_id = %s AND epoch = %s AND expires_at > clock_timestamp()) RETURNING l.log",
            (parts, [targets[p] for p in parts], node_id, controller_epoch),
        )
        if rows:
            self._run(f"SELECT {_NOTIFY}")  # the nodes concerned: hand over, take
        return len(rows) == len(parts)

    def move(self, partition: int, node_id: int) -> None:
        """An operator's move (``kip848 cluster move``): ``partition`` should be led by
        ``node_id``, pinned there while that node lives. Raises ``StoreError`` for a partition
        that does not exist or a node that is not live."""
        live = self._run(
            f"SELECT {_LEFT.format('expires_at')} > 0 FROM kip848_nodes WHERE node_id = %s",
            (node_id,),
        )
        if not live or not live[0][0]:
            raise StoreError(f"node {node_id} is not a live coordinator node")
        rows = self._run(
            "UPDATE kip848_logs SET target = %s, pinned = true WHERE log = %s AND log >= 0"
            " RETURNING 1",
            (node_id, partition),
        )
        if not rows:
            raise StoreError(f"there is no coordinator partition {partition}")
        self._run(f"SELECT {_NOTIFY}")

    def state(self) -> ClusterState:
        """The whole cluster as PostgreSQL has it now (``kip848 cluster describe``)."""
        import psycopg

        with self._lock:
            conn = self._connection()
            try:
                with conn.pipeline():
                    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    reads = _read_state(conn)
                    conn.execute("COMMIT")
                return _state(reads)
            except psycopg.Error as e:
                self._drop(conn)
                raise StoreError(
                    f"reading the cluster from {self.where} failed: {' '.join(str(e).split())}"
                ) from e

    def nodes(self) -> dict[int, NodeRow]:
        rows = self._run(
            f"SELECT node_id, address, kafka_address, {_LEFT.format('expires_at')},"
            " cluster_offset, incarnation FROM kip848_nodes ORDER BY node_id"
        )
        return {
            int(n): NodeRow(int(n), addr, kafka, int(left), int(offset), inc)
            for n, addr, kafka, left, offset, inc in rows
        }

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


_LEASES = (
    "SELECT log, leader, leader_epoch, (extract(epoch FROM lease_expires_at - clock_timestamp())"
    " * 1000)::bigint, target, pinned, loaded_epoch FROM kip848_logs WHERE log >= 0 ORDER BY log"
)


def _read_state(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
    """The cluster's reads (in a pipeline: their cursors; :func:`_state` makes them one)."""
    return (
        conn.execute(_LEASES),
        conn.execute(
            f"SELECT node_id, address, kafka_address, {_LEFT.format('expires_at')},"
            " cluster_offset, incarnation FROM kip848_nodes ORDER BY node_id"
        ),
        conn.execute(
            f"SELECT node_id, epoch, {_LEFT.format('expires_at')} FROM kip848_controller"
            " WHERE id = 1"
        ),
        conn.execute(
            'SELECT greatest((SELECT max("offset") FROM kip848_journal WHERE log = -1),'
            " (SELECT expired_through FROM kip848_logs WHERE log = -1)), (SELECT value FROM"
            " kip848_meta WHERE name = 'schema_version')"
        ),
    )


def _state(reads: tuple[Any, ...]) -> ClusterState:
    leases, nodes, who, end = reads
    who_row, end_row = who.fetchone(), end.fetchone()
    controller, epoch, left = None, 0, None
    if who_row is not None:
        epoch = int(who_row[1])
        left = None if who_row[2] is None else int(who_row[2])
        if who_row[0] is not None and who_row[2] is not None and int(who_row[2]) > 0:
            controller = int(who_row[0])
    return ClusterState(
        leases=[_lease(row) for row in leases.fetchall()],
        nodes={
            int(n): NodeRow(int(n), addr, kafka, int(left), int(offset), inc)
            for n, addr, kafka, left, offset, inc in nodes.fetchall()
        },
        controller=controller,
        controller_epoch=epoch,
        cluster_log_end=-1 if end_row is None or end_row[0] is None else int(end_row[0]),
        controller_expires_in_ms=left,
        schema_version=int(end_row[1]) if end_row and str(end_row[1]).isdigit() else -1,
    )


def _lease(row: tuple[Any, ...]) -> Lease:
    p, leader, epoch, left, target, pinned, loaded = row
    return Lease(
        int(p), leader, int(epoch), None if left is None else int(left), target, pinned, int(loaded)
    )


class Listener:
    """A thread LISTENing on :data:`CHANNEL` on a connection of its own, calling ``wake`` for
    every notification (reconnecting after a failure, bounded waits throughout)."""

    def __init__(self, dsn: str, wake: Callable[[], None]) -> None:
        self.dsn = dsn
        self.wake = wake
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kip848-listen", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        import psycopg

        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    self.dsn,
                    autocommit=True,
                    connect_timeout=5,
                    application_name="kip848-listen",
                    **connect_options(self.dsn),
                ) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=0.5):
                            self.wake()
            except psycopg.Error:
                self._stop.wait(1.0)  # PostgreSQL away: the heartbeats notice; try again
