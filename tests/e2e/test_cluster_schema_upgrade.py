"""A rolling upgrade that migrates the PostgreSQL store's schema under a running node of the
older build (docs/ha.md "Upgrading"): a real node process on a real PostgreSQL, the store's
schema version bumped as a newer build's migration does it (the journal locked first, so no
append is in flight, then ``kip848_meta``'s ``schema_version`` set, one transaction).

What must hold: the older node writes nothing into the layout it does not know — every append
after the bump is refused by the append's own statement (nothing lands, nothing is
acknowledged) — and it stops at its next heartbeat: it exits (code 1) naming both versions and
telling the operator to upgrade it.
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import psycopg
import pytest
from cluster_support import Nodes, PartitionGroups, served, settings, simple_commit, until
from pg import PostgresServer

from coordinator.runtime.store.postgres_schema import SCHEMA_VERSION

pytestmark = pytest.mark.slow

P = 2
LEASE_MS = 6_000
HEARTBEAT_MS = LEASE_MS // 3
"""The longest interval allowed: commits sent right after the bump reach the node well before
its next heartbeat reads the new version, so only the append's own check keeps them out."""
SETTINGS = settings(
    P, coordinator_lease_ms=LEASE_MS, coordinator_heartbeat_interval_ms=HEARTBEAT_MS
)
NEWER = SCHEMA_VERSION + 1
STOPPED = (
    f"kip848 serve: the store in PostgreSQL is at schema version {NEWER}, newer than this "
    f"build's {SCHEMA_VERSION} (a node of a newer build migrated it); this node can neither "
    "read nor write it: upgrade this node to that build: exiting"
)


def migrate_to_newer(dsn: str) -> int:
    """What a newer build's migration does first and last: lock the journal and the compacted
    view (waits for every append in flight, holds back the next ones), set the version,
    commit. Returns the journal's row count at that moment."""
    with psycopg.connect(dsn) as conn:
        conn.execute("LOCK TABLE kip848_journal, kip848_compacted IN SHARE MODE")
        row = conn.execute("SELECT count(*) FROM kip848_journal").fetchone()
        conn.execute(
            "UPDATE kip848_meta SET value = %s WHERE name = 'schema_version'", (str(NEWER),)
        )
    assert row is not None
    return int(row[0])


def journal_rows(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM kip848_journal").fetchone()
    assert row is not None
    return int(row[0])


def test_a_node_of_the_older_build_writes_nothing_after_the_migration_and_exits(
    pg_server: PostgresServer, tmp_path: Path
) -> None:
    """Node 1 leads both partitions and commits a group's offsets in each; the store migrated
    to the next schema version; commits sent to the node at once (before its next heartbeat)
    are all refused, none lands; the node exits (code 1) within a heartbeat (and the time to
    stop) with the message naming both versions; the journal holds what it held at the
    migration, and the version stays the newer one. Before, the commits were acknowledged and
    written in the old layout, and the node served on for good."""
    dsn = pg_server.create_database()
    nodes = Nodes(tmp_path, dsn, *SETTINGS)
    groups = PartitionGroups(P)
    try:
        node = nodes.start(1)
        node.create_topic("events", 1)
        until(lambda: served(dsn) is not None, "both partitions served")
        groups.commit_all(node, 5)
        channel = groups.channel_for(node.address)
        migrated = migrate_to_newer(dsn)
        bumped = time.monotonic()
        answers: list[object] = []
        for i, group in enumerate(sorted(groups.groups.values()) * 3):
            if node.proc.poll() is not None:
                break
            try:
                answers.append(simple_commit(channel, group, 10 + i, timeout=2))
            except grpc.RpcError as e:  # the node stopping meanwhile
                answers.append(e.code())
        assert answers and all(a != {0} for a in answers), answers
        assert node.wait(timeout=HEARTBEAT_MS / 1000 + 10) == 1
        stopped_s = time.monotonic() - bumped
        del nodes.procs[1]  # exited (else stopped below)
        assert STOPPED in node.stderr_text()
        assert stopped_s < HEARTBEAT_MS / 1000 + 10, stopped_s
        assert journal_rows(dsn) == migrated
        with psycopg.connect(dsn) as conn:
            version = conn.execute(
                "SELECT value FROM kip848_meta WHERE name = 'schema_version'"
            ).fetchone()
        assert version == (str(NEWER),)
    finally:
        groups.close()
        nodes.stop_all()
