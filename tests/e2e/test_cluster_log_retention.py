"""The cluster log under ``--journal-retention-ms`` (docs/ha.md, The cluster log): real node
processes on one PostgreSQL store. A node paused (SIGSTOP) while the entries it missed were
removed from the journal replaces its copy with the log's compacted view once it runs again,
as a broker that fell behind loads a metadata snapshot: its authorizer refuses what a revoked
ACL allowed, a deleted topic is gone, and it writes to the cluster log. A node started after the newest entries (a
topic deleted: tombstones) were removed from the journal writes to the cluster log too."""

from __future__ import annotations

import time
from pathlib import Path

from cluster_support import Nodes, settings, simple_commit, until
from cluster_support import describe_cluster as describe
from conftest import every_acl

from kip848.v1 import admin_pb2

P = 2
RETENTION_MS = 1_000
ANY = 1


def acls(server) -> list[tuple[str, str]]:
    """Every ACL ``server`` knows: (resource name, principal)."""
    resp = every_acl(server.admin)
    return [(r.resource_name, a.principal) for r in resp.resources for a in r.acls]


def topics(server) -> set[str]:
    return {
        t.name for t in server.admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=10).topics
    }


def cluster_journal(dsn: str) -> list[int]:
    """The offsets the cluster log's journal still holds."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute('SELECT "offset" FROM kip848_journal WHERE log = -1 ORDER BY 1')
        return [int(r[0]) for r in rows.fetchall()]


def allow(server, principal: str) -> None:
    """``principal`` may do anything with topic "secret"."""
    made = server.admin.CreateAcls(
        admin_pb2.CreateAclsRequest(
            creations=[
                admin_pb2.AclBinding(
                    resource_type=2,  # TOPIC
                    resource_name="secret",
                    pattern_type=3,  # LITERAL
                    principal=principal,
                    host="*",
                    operation=2,  # ALL
                    permission_type=3,  # ALLOW
                )
            ]
        ),
        timeout=10,
    )
    assert [r.error_code for r in made.results] == [0]


def revoke(server, principal: str) -> None:
    """Every ACL of ``principal`` deleted."""
    deleted = server.admin.DeleteAcls(
        admin_pb2.DeleteAclsRequest(
            filters=[
                admin_pb2.AclFilter(
                    resource_type_filter=ANY,
                    pattern_type_filter=ANY,
                    principal_filter=principal,
                    operation=ANY,
                    permission_type=ANY,
                )
            ]
        ),
        timeout=10,
    )
    assert [(r.error_code, len(r.matching_acls)) for r in deleted.filter_results] == [(0, 1)]


def create_topic(server, name: str) -> None:
    """CreateTopics of ``name`` through ``server``: the whole answer's codes must be 0."""
    made = server.admin.CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreateTopicsRequest.CreatableTopic(name=name, num_partitions=1)]
        ),
        timeout=10,
    )
    assert (made.error_code, [(t.name, t.error_code) for t in made.topics]) == (0, [(name, 0)])


def delete_topic(server, name: str) -> None:
    deleted = server.admin.DeleteTopics(admin_pb2.DeleteTopicsRequest(names=[name]), timeout=10)
    assert [(t.name, t.error_code) for t in deleted.results] == [(name, 0)]


def test_nodes_behind_the_cluster_logs_retention_load_its_compacted_view(
    pg_server, tmp_path: Path
) -> None:
    dsn = pg_server.fresh_store_dsn()
    nodes = Nodes(tmp_path, dsn, *settings(P), "--journal-retention-ms", str(RETENTION_MS))
    try:
        one, two = nodes.start(1), nodes.start(2)
        # Topic "secret": only the ACLs decide who sees it (this test's clients are
        # User:ANONYMOUS), and both principals may.
        one.create_topic("orders", 1)
        one.create_topic("secret", 1)
        allow(one, "User:ANONYMOUS")
        allow(one, "User:alice")
        both = [("secret", "User:ANONYMOUS"), ("secret", "User:alice")]
        until(
            lambda: sorted(acls(two)) == both and topics(two) == {"orders", "secret"},
            "node 2 to apply the topics and the ACLs",
        )
        until(
            lambda: all(n["cluster_log_lag"] == 0 for n in describe(dsn)["nodes"]),
            "both nodes to report the cluster log applied",
        )
        applied = describe(dsn)["cluster_log_end"]

        # Node 2 hangs; meanwhile User:ANONYMOUS's ACL is revoked, a topic deleted and one
        # created, and retention (applied by node 1's next append past the retention)
        # removes it all from the journal.
        nodes.pause(2)
        revoke(one, "User:ANONYMOUS")
        delete_topic(one, "orders")
        one.create_topic("later", 1)
        time.sleep(RETENTION_MS * 1.5 / 1e3)
        one.create_topic("trigger", 1)
        end = describe(dsn)["cluster_log_end"]
        assert cluster_journal(dsn) == [end], "retention did not remove what node 2 missed"
        assert end > applied + 1
        assert topics(one) == {"later", "trigger"}  # "secret" is no longer ANONYMOUS's

        nodes.resume(2)
        # Node 2's authorizer refuses the revoked ACL (ListTopics lists what the caller may
        # DESCRIBE); before, it listed "secret" and "orders" until restarted.
        until(
            lambda: acls(two) == [("secret", "User:alice")] and topics(two) == {"later", "trigger"},
            "node 2 to drop the revoked ACL and the deleted topic",
        )
        assert "loading the log's compacted view" in nodes.log_text(2)
        create_topic(two, "after")  # its appends land
        until(
            lambda: topics(one) == topics(two) == {"later", "trigger", "after"},
            "node 1 to apply node 2's topic",
        )
        until(
            lambda: all(n["cluster_log_lag"] == 0 for n in describe(dsn)["nodes"]),
            "both nodes to report the cluster log applied",
        )
    finally:
        nodes.stop_all()


def test_a_node_started_after_the_newest_tombstones_expired_writes_to_the_cluster_log(
    pg_server, tmp_path: Path
) -> None:
    """The cluster log's newest entries are tombstones (a topic deleted) and retention removes
    them (node 1's next append, an offset commit, past the retention): a node started then
    loads the compacted view with the log's end past its last record, and its appends land.
    Before, it stood at the view's last record, behind the log's end, and CreateTopics through
    it answered COORDINATOR_NOT_AVAILABLE."""
    dsn = pg_server.fresh_store_dsn()
    nodes = Nodes(tmp_path, dsn, *settings(P), "--journal-retention-ms", str(RETENTION_MS))
    try:
        one = nodes.start(1)
        until(
            lambda: {q["leader"] for q in describe(dsn)["partitions"]} == {1},
            "node 1 to lead every partition",
        )
        one.create_topic("kept", 1)
        one.create_topic("gone", 1)
        delete_topic(one, "gone")
        end = describe(dsn)["cluster_log_end"]
        time.sleep(RETENTION_MS * 1.5 / 1e3)
        assert simple_commit(one.channel, "committer", 1, topic="kept") == {0}
        assert cluster_journal(dsn) == []
        assert describe(dsn)["cluster_log_end"] == end
        two = nodes.start(2)
        create_topic(two, "fresh")
        assert topics(two) == {"kept", "fresh"}
        until(lambda: "fresh" in topics(one), "node 1 to apply node 2's topic")
        assert "loading the log's compacted view" not in nodes.log_text(2)
    finally:
        nodes.stop_all()
