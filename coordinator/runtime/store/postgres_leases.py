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
``FOR SHARE`` in its own transaction, so a takeover either waits for it or is seen by it:
a node that lost a partition can never write to it again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .api import StoreAccessError, StoreError

if TYPE_CHECKING:
    import psycopg

__all__ = ["Lease", "PostgresLeases"]


@dataclass(frozen=True, slots=True)
class Lease:
    """One partition's lease as PostgreSQL has it."""

    partition: int
    leader: int | None
    epoch: int
    expires_in_ms: int | None
    """Until the lease expires, by the server's clock (negative: expired; None: never held)."""
    target: int | None


class PostgresLeases:
    """Lease operations on their own connection (renewals must not wait behind a batch)."""

    def __init__(self, dsn: str, *, where: str, connect_timeout_s: float = 10.0) -> None:
        self.dsn = dsn
        self.where = where
        self.connect_timeout_s = connect_timeout_s
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None

    def _run(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        import psycopg

        with self._lock:
            conn = self._conn
            if conn is None or conn.closed or conn.broken:
                try:
                    conn = self._conn = psycopg.connect(
                        self.dsn,
                        autocommit=True,
                        connect_timeout=max(1, round(self.connect_timeout_s)),
                        application_name="kip848-leases",
                    )
                except psycopg.Error as e:
                    raise StoreAccessError(
                        f"cannot reach the PostgreSQL store at {self.where} for leases: "
                        f"{' '.join(str(e).split())}"
                    ) from e
            try:
                cur = conn.execute(sql, params)
                return cur.fetchall() if cur.description is not None else []
            except psycopg.Error as e:
                if conn.broken:
                    conn.close()
                    self._conn = None
                raise StoreError(
                    f"lease operation on {self.where} failed: {' '.join(str(e).split())}"
                ) from e

    def acquire(self, node_id: int, partitions: Iterable[int], lease_ms: int) -> dict[int, int]:
        """Take the free or expired ones of ``partitions`` (a target set for another node is
        left to it): partition -> the new leader epoch."""
        rows = self._run(
            "UPDATE kip848_logs SET leader = %s, leader_epoch = leader_epoch + 1,"
            " lease_expires_at = clock_timestamp() + %s * interval '1 millisecond'"
            " WHERE log = ANY(%s::int[]) AND log >= 0"
            " AND (leader IS NULL OR lease_expires_at < clock_timestamp())"
            " AND (target IS NULL OR target = %s)"
            " RETURNING log, leader_epoch",
            (node_id, lease_ms, sorted(partitions), node_id),
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
            "UPDATE kip848_logs l SET leader = NULL, lease_expires_at = NULL"
            " FROM unnest(%s::int[], %s::bigint[]) AS h(log, epoch)"
            " WHERE l.log = h.log AND l.leader = %s AND l.leader_epoch = h.epoch",
            (parts, [held[p] for p in parts], node_id),
        )

    def set_target(self, partition: int, node_id: int | None) -> None:
        """Who should lead ``partition`` next (the balancer's, or ``kip848 cluster move``)."""
        self._run("UPDATE kip848_logs SET target = %s WHERE log = %s", (node_id, partition))

    def leases(self) -> list[Lease]:
        rows = self._run(
            "SELECT log, leader, leader_epoch, (extract(epoch FROM lease_expires_at"
            " - clock_timestamp()) * 1000)::bigint, target FROM kip848_logs WHERE log >= 0"
            " ORDER BY log"
        )
        return [
            Lease(int(p), leader, int(epoch), None if left is None else int(left), target)
            for p, leader, epoch, left, target in rows
        ]

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
