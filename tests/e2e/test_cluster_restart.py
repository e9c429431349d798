"""A whole cluster of coordinator nodes stopped and started again (docs/ha.md "Starting a
whole cluster again"), and an append fenced off by a take-over (docs/ha.md "Every batch
append is fenced by the epoch"), with real node processes on a real PostgreSQL.

What must hold: three nodes stopped at once (SIGTERM) and started again together take each
partition once, each the ones it led (leader epoch one higher), nothing handed over or moved
by the controller after; the same after ``kill -9`` of every node; a node that does not come
back has its partitions waiting for it (the metric ``kip848_node_expected_back_ms`` and
``kip848 cluster describe`` show it) until the startup grace of the first node up has run
out, then taken by the others, once each. And a commit whose append is fenced off because
another node took its partition's lease over is answered NOT_COORDINATOR (16), with a
message, over gRPC and over the Kafka listener — the client finds the new leader at once —
while another partition's commits go on.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from cluster_support import (
    STOP_TIMEOUT_S,
    Nodes,
    PartitionGroups,
    commit_answer,
    describe_cluster,
    journal_epochs,
    served,
    settings,
    simple_commit,
    until,
)
from conftest import run_cli
from kafka_support import KafkaClient, request
from test_cluster_operations import samples, scrape

pytestmark = pytest.mark.slow

P = 9
TOPIC = "events"
GRACE_MS = 10_000
"""``coordinator.startup.grace.ms`` of these nodes: longer than the spread of three Python
processes started together on a busy 2-core machine, and than the three views of node 3's
partitions waiting for it (two CLI processes and two scrapes) take there (6 s once ran out
before the last view, at load 6)."""
SETTINGS = (
    *settings(P, coordinator_startup_grace_ms=GRACE_MS),
    "--metrics-listen",
    "127.0.0.1:0",
)


def start_together(nodes: Nodes, ids: list[int]) -> None:
    """Start nodes ``ids`` at once; back when every one reports SERVING."""
    with ThreadPoolExecutor(len(ids)) as pool:
        list(pool.map(nodes.start, ids))


def stop_together(nodes: Nodes, sig: int) -> None:
    """``sig`` to every node at once, then wait for each to exit (bounded)."""
    procs = [nodes.procs.pop(n) for n in sorted(nodes.procs)]
    for proc in procs:
        proc.signal(sig)
    for proc in procs:
        proc.wait(timeout=STOP_TIMEOUT_S)


def test_a_cluster_stopped_and_started_again_takes_each_partition_once(
    pg_server, tmp_path: Path
) -> None:
    dsn = pg_server.fresh_store_dsn()
    nodes = Nodes(tmp_path, dsn, *SETTINGS)
    groups = PartitionGroups(P, TOPIC)

    def commit_all(offset: int) -> None:
        groups.commit_all(nodes.any(), offset)

    def log_marks() -> dict[int, int]:
        return {n: len(nodes.log_text(n)) for n in (1, 2, 3)}

    def since(marks: dict[int, int]) -> str:
        return "".join(nodes.log_text(n)[marks[n] :] for n in (1, 2, 3))

    try:
        start_together(nodes, [1, 2, 3])
        nodes.procs[1].create_topic(TOPIC, 1)
        until(
            lambda: (
                (s := served(dsn)) is not None
                and sorted(Counter(n for n, _ in s.values()).values()) == [3, 3, 3]
            ),
            "three partitions served by each node",
            60,
        )
        commit_all(1)

        # Every node stopped at once, then started again together.
        stop_together(nodes, signal.SIGTERM)
        stopped = {
            p["partition"]: (p["target"], p["leader_epoch"])
            for p in describe_cluster(dsn)["partitions"]
        }
        assert all(p["leader"] is None for p in describe_cluster(dsn)["partitions"])
        marks = log_marks()
        start_together(nodes, [1, 2, 3])
        until(lambda: served(dsn) is not None, "every partition served again", 30)
        time.sleep(1)  # a few heartbeats: nothing moves
        assert served(dsn) == {p: (n, e + 1) for p, (n, e) in stopped.items()}
        after = since(marks)
        assert "hands partition" not in after, after
        assert re.search(r"Controller \d+: partition", after) is None, after
        commit_all(2)

        # Every node killed; nodes 1 and 2 start again, node 3 does not.
        killed = served(dsn)
        assert killed is not None
        third = sorted(p for p, (n, _) in killed.items() if n == 3)
        stop_together(nodes, signal.SIGKILL)
        marks = log_marks()
        start_together(nodes, [1, 2])
        up = time.monotonic()
        # Node 3's partitions wait for it, visibly: the metric and cluster describe.
        expected = {
            n: samples(scrape(nodes.procs[n]), "kip848_node_expected_back_ms") for n in (1, 2)
        }
        assert any(list(e) == ['{node="3"}'] for e in expected.values()), expected
        assert all(0 < v <= GRACE_MS for e in expected.values() for v in e.values()), expected
        table = run_cli("cluster", "describe", "--store", dsn)
        assert table.returncode == 0, table.stderr
        assert f"Partitions waiting for nodes not running: node 3 ({len(third)})." in table.stdout
        out = run_cli("cluster", "describe", "--store", dsn, "--output", "json")
        node3 = next(n for n in json.loads(out.stdout)["nodes"] if n["node_id"] == 3)
        assert (node3["live"], node3["targeted"]) == (False, len(third))
        until(lambda: served(dsn) is not None, "node 3's partitions taken", GRACE_MS / 1000 + 10)
        took = time.monotonic() - up
        assert took < GRACE_MS / 1000 + 2, took  # the grace counts from before SERVING
        now = served(dsn)
        assert now is not None
        for p, (n, e) in killed.items():  # taken once: by its node, or node 3's by 1 or 2
            assert now[p][1] == e + 1, (p, killed[p], now[p])
            assert now[p][0] == n or (p in third and now[p][0] in (1, 2)), (p, now[p])
        assert "nodes 3 did not come back within the startup grace" in since(marks)
        commit_all(3)
        assert groups.committed_all(nodes.any()) == {
            g: {(TOPIC, 0): 3} for g in groups.groups.values()
        }
        print(f"node 3 not back: its partitions served {took:.2f} s after nodes 1, 2 served")
    finally:
        nodes.stop_all()
        groups.close()
    for log, epochs in journal_epochs(dsn).items():
        assert epochs == sorted(epochs), (log, epochs)


def test_a_commit_fenced_off_by_a_take_over_is_answered_not_coordinator(
    pg_server, tmp_path: Path
) -> None:
    """One node leads every partition, with a long lease (its next heartbeat is seconds
    away). Another node's take-over of a partition is written in PostgreSQL (its lease at the
    next epoch), which the node has not heard of yet: its next commit there is fenced off,
    nothing written, and answered NOT_COORDINATOR with a message (gRPC; then, for another
    partition taken over, the Kafka listener), as Kafka's coordinator answers a write whose
    partition's leadership moved. A partition still led here commits as before."""
    dsn = pg_server.fresh_store_dsn()
    long_lease = settings(3, coordinator_lease_ms=60_000, coordinator_heartbeat_interval_ms=20_000)
    nodes = Nodes(tmp_path, dsn, *long_lease)
    by_partition = PartitionGroups(3, TOPIC, prefix="f").groups
    grpc_group, kafka_group, kept = (by_partition[p] for p in range(3))
    node = nodes.start(1)
    client = KafkaClient(nodes.kafka_address(1))
    try:
        node.create_topic(TOPIC, 1)
        for group in by_partition.values():
            assert simple_commit(node.channel, group, 1) == {0}

        def written() -> dict[int, int]:
            """Journal entries of each coordinator partition."""
            with psycopg.connect(dsn) as conn:
                rows = conn.execute(
                    "SELECT log, count(*) FROM kip848_journal WHERE log >= 0 GROUP BY log"
                ).fetchall()
            return {int(log): int(n) for log, n in rows}

        before = written()

        def take_over(partition: int) -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "UPDATE kip848_logs SET leader = 2, leader_epoch = leader_epoch + 1,"
                    " lease_expires_at = clock_timestamp() + interval '60 seconds'"
                    " WHERE log = %s",
                    (partition,),
                )

        take_over(0)
        answer = commit_answer(node.channel, grpc_group, 2)
        ((part,),) = [t.partitions for t in answer.topics]
        assert (part.error_code, part.error_message) == (
            16,
            "This node's lease of coordinator partition 0 was taken over by another node "
            "before the write landed (nothing of it was written): ask FindCoordinator again.",
        )

        take_over(1)
        resp = client.call(
            request(
                8,
                8,
                group_id=kafka_group,
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=[
                    {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 2}]}
                ],
            )
        )
        assert [(p.partition_index, p.error_code) for t in resp.topics for p in t.partitions] == [
            (0, 16)
        ]

        assert simple_commit(node.channel, kept, 2) == {0}
        assert written() == {0: before[0], 1: before[1], 2: before[2] + 1}
    finally:
        client.close()
        nodes.stop_all()
