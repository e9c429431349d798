"""Exactly-once applications against several coordinator nodes on one PostgreSQL store in front
of one Kafka broker (Tansu) (docs/kafka.md, "Transactions"; docs/ha.md): a transactional id is
served by the node leading the group its transactions commit offsets to
(``coordinator/server/kafka/txn_routing.py``).

* confluent-kafka's consume-transform-produce application (tests/e2e/eos_app.py, transaction
  version 1: AddOffsetsToTxn) bootstrapped at the node that does NOT lead its group: its
  AddOffsetsToTxn there is answered NOT_COORDINATOR, the id is mapped to the group, and the
  client finds the group's node as its transaction coordinator (an id of its own, listed in
  Metadata) and ends its transactions there; then that node is killed (``kill -9``) mid-run
  and the survivor takes the group and the id over. Every input's output committed exactly
  once, the committed offsets never ahead of the committed output.
* kafka-python's transactional producer, bootstrapped at the other node too: committed and
  aborted at the group's node.
* Transaction version 2 (TxnOffsetCommit v5, no AddOffsetsToTxn; no client here sends it
  through the listener, which advertises no ``transaction.version`` feature), by hand: the
  commit at the group's node maps the id, and an EndTxn or InitProducerId at the other node is
  answered NOT_COORDINATOR instead of being forwarded where the group never hears of it.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_support import Nodes, served, settings, until
from kafka_clients import STACK_SETTINGS
from kafka_support import KafkaClient, Tansu, create_topics, request
from kio.schema.errors import ErrorCode as E
from test_kafka_transactions import App, committed_log, committed_offsets, produce

from coordinator.routing import partition_for
from coordinator.server.cluster import UPSTREAM_COORDINATOR_ID_BASE

pytestmark = pytest.mark.slow

SESSION = ("--set", "group.consumer.min.session.timeout.ms=6000")


def _nodes(pg_server: Any, tmp_path: Path, tansu: Tansu) -> Nodes:
    return Nodes(
        tmp_path,
        pg_server.fresh_store_dsn(),
        "--kafka-upstream",
        tansu.address,
        *STACK_SETTINGS,
        *SESSION,
        "--set",
        "group.consumer.session.timeout.ms=6000",
        *settings(6),
    )


def _group_of(nodes: Nodes, leader: int, prefix: str) -> str:
    """A group id whose coordinator partition node ``leader`` leads once the partitions are
    spread (3 each: they move no more until a node goes)."""

    def spread() -> dict[int, tuple[int, int]] | None:
        found = served(nodes.dsn)
        if found is None or sorted(n for n, _e in found.values()) != [1, 1, 1, 2, 2, 2]:
            return None
        return found

    until(lambda: spread() is not None, "three partitions served by each node", timeout=30)
    led = spread()
    assert led is not None
    return next(
        g for g in (f"{prefix}{i}" for i in range(500)) if led[partition_for(g, 6)][0] == leader
    )


def txn_coordinator(address: str, transactional_id: str) -> tuple[int, int, str]:
    """FindCoordinator v4 for a transactional id: (error, node id, HOST:PORT)."""
    c = KafkaClient(address)
    try:
        resp: Any = c.call(request(10, 4, key_type=1, coordinator_keys=[transactional_id]))
    finally:
        c.close()
    (found,) = resp.coordinators
    return int(found.error_code), int(found.node_id), f"{found.host}:{found.port}"


def test_an_exactly_once_app_follows_its_group_and_survives_its_nodes_kill(
    pg_server: Any, tmp_path: Path
) -> None:
    tansu = Tansu(tmp_path)
    nodes = _nodes(pg_server, tmp_path, tansu)
    app: App | None = None
    try:
        nodes.start(1), nodes.start(2)
        broker = KafkaClient(tansu.address)
        create_topics(broker, **{"eos-in": 2, "eos-out": 2})
        broker.close()
        group = _group_of(nodes, 1, "eos")
        bootstrap, at_one = nodes.kafka_address(2), nodes.kafka_address(1)
        tid = "eos-across"
        # Nothing mapped yet: the upstream's coordinator, at node 2's own port.
        assert txn_coordinator(bootstrap, tid)[2] == bootstrap
        # Metadata lists the coordinator nodes after the upstream's broker (librdkafka takes
        # a transaction coordinator only among the brokers Metadata listed).
        c = KafkaClient(bootstrap)
        try:
            meta: Any = c.call(request(3, 12, topics=None, allow_auto_topic_creation=False))
        finally:
            c.close()
        assert [(b.node_id, f"{b.host}:{b.port}") for b in meta.brokers][1:] == [
            (UPSTREAM_COORDINATOR_ID_BASE + 1, at_one),
            (UPSTREAM_COORDINATOR_ID_BASE + 2, bootstrap),
        ]
        values = [f"r{i}" for i in range(80)]
        produce(bootstrap, "eos-in", values, 2)
        config = {
            "bootstrap": bootstrap,
            "group": group,
            "input": "eos-in",
            "output": "eos-out",
            "transactional_id": tid,
            "protocol": "consumer",
            "idle_s": 15,
            "delay_s": 0.2,
            "producer": {"debug": "eos"},
        }
        app = App(None, config, tmp_path / "app.log")  # type: ignore[arg-type]

        def check_prefix(address: str) -> None:
            offsets = committed_offsets(address, group, "eos-in", 2, timeout=30)
            for p in range(2):
                outputs = {
                    v.decode().split(":")[1] for v in committed_log(tansu.address, "eos-out", p)
                }
                for offset in range(max(offsets[p], 0)):
                    assert str(offset) in outputs, (p, offset, offsets, sorted(outputs))

        deadline = time.monotonic() + 60
        while sum(line.get("committed", 0) for line in app.lines) < 20:
            assert time.monotonic() < deadline and app.alive(), app.lines[-10:]
            time.sleep(0.1)
        # The id is mapped to the group: every node names node 1 for it.
        assert txn_coordinator(bootstrap, tid) == (0, UPSTREAM_COORDINATOR_ID_BASE + 1, at_one)
        check_prefix(at_one)
        time.sleep(random.Random("eos-across").uniform(0.1, 1.0))
        nodes.kill9(1)  # mid-run: inside a transaction (each waits 0.2 s before its end)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if committed_offsets(bootstrap, group, "eos-in", 2, timeout=30) == [40, 40]:
                break
            assert app.alive(), app.lines[-10:]
            time.sleep(0.5)
        assert committed_offsets(bootstrap, group, "eos-in", 2, timeout=30) == [40, 40], app.lines[
            -10:
        ]
        check_prefix(bootstrap)
        seen: dict[str, int] = {}
        for p in range(2):
            for v in committed_log(tansu.address, "eos-out", p):
                part, _offset, value = v.decode().split(":")[:3]
                assert int(part) == p
                seen[value] = seen.get(value, 0) + 1
        assert seen == dict.fromkeys(values, 1), {k: n for k, n in seen.items() if n != 1}
        # Node 2 leads the group now: it names itself for the id.
        assert txn_coordinator(bootstrap, tid) == (0, UPSTREAM_COORDINATOR_ID_BASE + 2, bootstrap)
        assert not [line for line in app.lines if "fatal" in line], app.lines
        assert app.wait(60) == 0
        app = None
    finally:
        if app is not None and app.alive():
            app.kill()
        nodes.stop_all()
        tansu.stop()


def test_transaction_version_2_ends_at_the_groups_node(pg_server: Any, tmp_path: Path) -> None:
    """TxnOffsetCommit v5 at the group's node maps the id (durably, before its answer); the
    EndTxn and InitProducerId of the id at the other node are NOT_COORDINATOR, nothing
    forwarded; FindCoordinator at either node names the group's node; the EndTxn there commits
    the offsets. Before, node 2 forwarded the EndTxn and the offsets stayed pending."""
    tansu = Tansu(tmp_path)
    nodes = _nodes(pg_server, tmp_path, tansu)
    try:
        nodes.start(1), nodes.start(2)
        broker = KafkaClient(tansu.address)
        create_topics(broker, **{"v2-in": 1})
        broker.close()
        group = _group_of(nodes, 1, "v2g")
        other = _group_of(nodes, 2, "v2h")  # a group node 2 leads
        at_one, at_two = nodes.kafka_address(1), nodes.kafka_address(2)
        tid = "v2-across"
        one, two = KafkaClient(at_one), KafkaClient(at_two)
        try:
            init: Any = two.call(request(22, 4, transactional_id=tid, transaction_timeout=60_000))
            assert init.error_code == E.none, init
            producer = {
                "transactional_id": tid,
                "producer_id": int(init.producer_id),
                "producer_epoch": int(init.producer_epoch),
            }

            def commit(c: KafkaClient, group_id: str) -> list[tuple[str, list[int]]]:
                partition = {"partition_index": 0, "committed_offset": 9, "committed_metadata": ""}
                resp: Any = c.call(
                    request(
                        28,
                        5,
                        group_id=group_id,
                        generation_id=-1,
                        member_id="",
                        topics=[{"name": "v2-in", "partitions": [partition]}],
                        **producer,
                    )
                )
                return [(t.name, [int(p.error_code) for p in t.partitions]) for t in resp.topics]

            # Not the group's node: refused before anything is added upstream.
            assert commit(two, group) == [("v2-in", [E.not_coordinator])]
            assert commit(one, group) == [("v2-in", [E.none])]
            end = request(26, 3, committed=True, **producer)
            refused: Any = two.call(end)
            assert refused.error_code == E.not_coordinator
            again: Any = two.call(request(22, 4, transactional_id=tid, transaction_timeout=60_000))
            assert (again.error_code, again.producer_id, again.producer_epoch) == (
                E.not_coordinator,
                -1,
                -1,
            )
            # The id is node 1's now: both nodes (node 2 caught up with the cluster log by the
            # EndTxn) name node 1.
            for at in (at_two, at_one):
                assert txn_coordinator(at, tid) == (0, UPSTREAM_COORDINATOR_ID_BASE + 1, at_one)
            stable = request(
                9,
                8,
                groups=[
                    {"group_id": group, "topics": [{"name": "v2-in", "partition_indexes": [0]}]}
                ],
                require_stable=True,
            )
            pending: Any = one.call(stable)
            assert pending.groups[0].topics[0].partitions[0].error_code == E.unstable_offset_commit
            ended: Any = one.call(end)
            assert ended.error_code == E.none, ended
            fetched: Any = one.call(stable)
            part = fetched.groups[0].topics[0].partitions[0]
            assert (part.committed_offset, part.error_code) == (9, E.none)
            # Another node's group while the id is node 1's: refused (node 1 may hold an open
            # transaction of it).
            assert commit(two, other) == [("v2-in", [E.invalid_txn_state])]
        finally:
            one.close()
            two.close()
    finally:
        nodes.stop_all()
        tansu.stop()


def test_kafka_pythons_producer_is_sent_to_the_groups_node(pg_server: Any, tmp_path: Path) -> None:
    """kafka-python's transactional producer (transaction version 1, send_offsets_to_transaction
    with a group id) bootstrapped at node 2, the group node 1's: its AddOffsetsToTxn at node 2
    is NOT_COORDINATOR, it finds node 1 and ends its transactions there — a commit commits
    the offset, an abort leaves it."""
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    tansu = Tansu(tmp_path)
    nodes = _nodes(pg_server, tmp_path, tansu)
    try:
        nodes.start(1), nodes.start(2)
        broker = KafkaClient(tansu.address)
        create_topics(broker, **{"kp-in": 1, "kp-out": 1})
        broker.close()
        group = _group_of(nodes, 1, "kpg")
        at_one, at_two = nodes.kafka_address(1), nodes.kafka_address(2)

        def fetch(stable: bool) -> list[tuple[int, int]]:
            c = KafkaClient(at_one)
            try:
                resp: Any = c.call(
                    request(
                        9,
                        7,
                        group_id=group,
                        topics=[{"name": "kp-in", "partition_indexes": [0]}],
                        require_stable=stable,
                    )
                )
            finally:
                c.close()
            return [(p.committed_offset, p.error_code) for p in resp.topics[0].partitions]

        producer = KafkaProducer(bootstrap_servers=at_two, transactional_id="kp-across")
        try:
            producer.init_transactions()
            for commit, offset in ((True, 11), (False, 12)):
                producer.begin_transaction()
                producer.send("kp-out", b"v", partition=0)
                producer.send_offsets_to_transaction(
                    {KTP("kp-in", 0): OffsetAndMetadata(offset, "", -1)}, group
                )
                assert fetch(True) == [(-1, E.unstable_offset_commit)]
                if commit:
                    producer.commit_transaction()
                else:
                    producer.abort_transaction()
                assert fetch(True) == [(11, E.none)]
        finally:
            producer.close()
        assert txn_coordinator(at_two, "kp-across") == (0, UPSTREAM_COORDINATOR_ID_BASE + 1, at_one)
    finally:
        nodes.stop_all()
        tansu.stop()
