"""The PostgreSQL store gone back in time under running nodes (docs/ha.md "Failure modes"): the
database restored from a backup taken a moment before (``pg_dump``, then ``pg_restore`` into
the database dropped and created again), as a restore or a standby that lacked the last
commits, promoted, leaves it — with real node processes on a real PostgreSQL.

What must hold: a node whose state the store no longer has — the cluster log ending before
what the node applied of it, a partition's leader epoch below the one the node leads it at,
or a partition's log ending before what the node wrote to it — never goes on as if nothing happened (it would keep topics the log no longer has, never
apply entries others append at offsets it took for applied, and leave gaps in the logs): it
exits (code 1) with the reason, and a node started again on the store follows it as it is.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psycopg
import pytest
from cluster_support import Nodes, PartitionGroups, served, settings, until
from conftest import run_cli
from pg import ADMIN_PASSWORD, PostgresServer, postgres_bin

from kip848.v1 import admin_pb2

pytestmark = pytest.mark.slow

P = 4
LEASE_MS = 4_000
"""Longer than a restore takes on a busy machine: the nodes still lead their partitions when
they reach the restored store."""
SETTINGS = settings(
    P, coordinator_lease_ms=LEASE_MS, coordinator_heartbeat_interval_ms=LEASE_MS // 10
)
WENT_BACK = (
    "kip848 serve: the store in PostgreSQL went back in time ({}: restored from a backup, or a "
    "standby that lacked commits promoted); this node holds state the store no longer has: "
    "exiting"
)


class Backup:
    """``pg_dump`` of one database of ``pg``, and its restore in place (the database dropped,
    its sessions ended, created again and filled from the dump)."""

    def __init__(self, pg: PostgresServer, dsn: str, path: Path) -> None:
        self.pg, self.db, self.path = pg, dsn.rsplit("/", 1)[1], path
        self.env = dict(os.environ, PGPASSWORD=ADMIN_PASSWORD)
        self.where = ["-h", "127.0.0.1", "-p", str(pg.port), "-U", "admin"]

    def take(self) -> None:
        dump = [str(postgres_bin() / "pg_dump"), *self.where, "-Fc", "-f", str(self.path)]
        subprocess.run([*dump, self.db], check=True, env=self.env, timeout=60)

    def restore(self) -> None:
        with psycopg.connect(self.pg.admin_dsn(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {self.db} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {self.db} OWNER kip848")
        restore = [str(postgres_bin() / "pg_restore"), *self.where, "--no-owner"]
        subprocess.run(
            [*restore, "--role=kip848", "-d", self.db, str(self.path)],
            check=True,
            env=self.env,
            timeout=60,
        )


def topics(nodes: Nodes, node_id: int) -> list[str]:
    resp = nodes.procs[node_id].admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=5)
    return sorted(t.name for t in resp.topics)


def balanced(dsn: str) -> bool:
    """Each of the two nodes serves half the partitions."""
    leaders = [n for n, _ in (served(dsn) or {}).values()]
    return sorted(leaders) == [1] * (P // 2) + [2] * (P // 2)


def test_nodes_ahead_of_a_restored_cluster_log_exit_and_start_again_on_it(
    pg_server: PostgresServer, tmp_path: Path
) -> None:
    """Topic ``before`` created, the backup taken, ``after`` created through node 2, then the
    backup restored: both nodes had applied ``after`` (offset 1) and the restored log ends at
    offset 0. Both exit (code 1) with the reason. Before, both went on: node 2 listed
    ``after`` for good, and a topic node 1 created next landed at offset 1, which node 2 took
    for ``after`` and never applied. Started again, each lists the log's topics and creates
    one that the other lists."""
    dsn = pg_server.create_database()
    nodes = Nodes(tmp_path, dsn, *SETTINGS)
    backup = Backup(pg_server, dsn, tmp_path / "store.dump")
    try:
        for n in (1, 2):
            nodes.start(n)
        nodes.procs[1].create_topic("before", 1)
        until(lambda: topics(nodes, 2) == ["before"], "node 2 to follow the log")
        backup.take()
        nodes.procs[2].create_topic("after", 1)
        until(lambda: topics(nodes, 1) == ["after", "before"], "node 1 to follow the log")
        backup.restore()
        reason = "the cluster log ends at offset 0, before offset 1 this node applied"
        for n in (1, 2):
            server = nodes.procs[n]
            assert server.wait(timeout=LEASE_MS / 1000 + 10) == 1
            del nodes.procs[n]  # exited (else stopped below)
            assert WENT_BACK.format(reason) in server.stderr_text()
        for n in (1, 2):
            nodes.start(n)
        assert topics(nodes, 1) == topics(nodes, 2) == ["before"]
        nodes.procs[1].create_topic("again", 1)
        until(lambda: topics(nodes, 2) == ["again", "before"], "node 2 to follow the log")
    finally:
        nodes.stop_all()


def test_nodes_leading_partitions_at_epochs_the_restored_store_lacks_exit(
    pg_server: PostgresServer, tmp_path: Path
) -> None:
    """The backup taken with the partitions spread evenly, then one moved (``kip848 cluster
    move``) to the other node, which leads it at the next epoch (and the balancer, evening out,
    moves another back at its next epoch); the backup restored: the leases the store has are
    of the earlier epochs. Each node that leads a partition at an epoch the store lacks exits
    (code 1) naming the first such partition (before, they served on: their appends would
    have gone after offsets the store no longer has); started again on the store, they serve
    the partitions they named again, at epochs above the backup's."""
    dsn = pg_server.create_database()
    nodes = Nodes(tmp_path, dsn, *SETTINGS)
    backup = Backup(pg_server, dsn, tmp_path / "store.dump")
    try:
        for n in (1, 2):
            nodes.start(n)
        until(lambda: balanced(dsn), "an even spread")  # the balancer moves nothing more
        before = served(dsn)
        assert before is not None
        backup.take()
        p, (leader, epoch) = min(before.items())
        argv = ("--store", dsn, "--partition", str(p), "--to", str(3 - leader))
        moved = run_cli("cluster", "move", *argv)
        assert moved.returncode == 0, moved
        until(
            lambda: (served(dsn) or {}).get(p) == (3 - leader, epoch + 1) and balanced(dsn),
            "the move, and the balancer's",
        )
        after = served(dsn)
        assert after is not None
        ahead = {
            n: min(q for q, (m, e) in after.items() if m == n and e > before[q][1])
            for n in (1, 2)
            if any(m == n and e > before[q][1] for q, (m, e) in after.items())
        }
        assert ahead, (before, after)
        backup.restore()
        for n, q in ahead.items():
            server = nodes.procs[n]
            assert server.wait(timeout=LEASE_MS / 1000 + 10) == 1
            del nodes.procs[n]  # exited (else stopped below)
            reason = (
                f"coordinator partition {q}'s leader epoch is {before[q][1]}, below the "
                f"{after[q][1]} this node leads it at"
            )
            assert WENT_BACK.format(reason) in server.stderr_text()
        for n in ahead:
            nodes.start(n)
        until(lambda: served(dsn) is not None, "every partition served again")
        again = served(dsn)
        assert again is not None
        assert all(again[q][1] > before[q][1] for q in ahead.values()), (before, again)
    finally:
        nodes.stop_all()


def log_ends(dsn: str) -> dict[int, int]:
    """Each coordinator partition's last offset, as the store has it."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            'SELECT l.log, greatest(max(j."offset"), l.expired_through) FROM kip848_logs l'
            " LEFT JOIN kip848_journal j ON j.log = l.log WHERE l.log >= 0"
            " GROUP BY l.log, l.expired_through"
        ).fetchall()
    return {int(log): int(end) for log, end in rows}


def test_nodes_that_wrote_what_the_restored_store_lacks_exit(
    pg_server: PostgresServer, tmp_path: Path
) -> None:
    """The backup taken with the partitions spread evenly and a group's offsets committed in
    each, then committed again (the commits a standby lacking the last ones, promoted, loses:
    nothing else changed, no epoch, no topic); the backup restored. Each node exits (code 1)
    naming the first partition it leads whose log ends before what it wrote there. Before, both
    served on, answering the lost offsets, and appended after offsets the store no longer had
    (a gap in each log). Started again, they answer the offsets the store kept."""
    dsn = pg_server.create_database()
    nodes = Nodes(tmp_path, dsn, *SETTINGS)
    backup = Backup(pg_server, dsn, tmp_path / "store.dump")
    groups = PartitionGroups(P)
    try:
        for n in (1, 2):
            nodes.start(n)
        nodes.procs[1].create_topic("events", 1)
        until(lambda: balanced(dsn), "an even spread")  # the balancer moves nothing more
        groups.commit_all(nodes.procs[1], 5)
        before, kept = served(dsn), log_ends(dsn)
        assert before is not None
        backup.take()
        groups.commit_all(nodes.procs[1], 6)
        assert served(dsn) == before
        wrote = log_ends(dsn)
        backup.restore()
        for n in (1, 2):
            p = min(q for q, (m, _) in before.items() if m == n)
            server = nodes.procs[n]
            assert server.wait(timeout=LEASE_MS / 1000 + 10) == 1
            del nodes.procs[n]  # exited (else stopped below)
            reason = (
                f"coordinator partition {p}'s log ends at offset {kept[p]}, before offset "
                f"{wrote[p]} this node wrote"
            )
            assert WENT_BACK.format(reason) in server.stderr_text()
        for n in (1, 2):
            nodes.start(n)
        assert groups.committed_all(nodes.procs[2]) == {
            g: {("events", 0): 5} for g in groups.groups.values()
        }
    finally:
        groups.close()
        nodes.stop_all()
