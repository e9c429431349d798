"""The listener in front of a multi-broker upstream (a fake kio cluster, tests/e2e/fake_upstream.py):
each upstream node gets a listener port of its own, requests reach the node of the port they
arrived on, every broker address a client learns is rewritten to ours (Metadata, DescribeCluster,
FindCoordinator for transactions, Produce/Fetch node_endpoints), the configured address is used
for its node whatever it advertises, and a broker that appears later gets a port."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_upstream import PARTITIONS, TOPIC, TOPIC_ID, FakeCluster
from kafka_support import KafkaClient, KafkaServer, fetch_request, request
from kio.schema.errors import ErrorCode as E

from kip848.v1 import admin_pb2


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    c = FakeCluster()
    # Node 1 advertises an address nobody can reach: the listener must use the configured one.
    c.add_node(1, advertised_host="node-1.invalid")
    c.add_node(2)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def server(cluster: FakeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    s = KafkaServer(
        tmp_path_factory.mktemp("multibroker") / "data",
        "--kafka-upstream",
        cluster.nodes[1].address,
        "--set",
        "kafka.upstream.metadata.max.age.ms=300",
        clock="system",
    )
    try:
        yield s
    finally:
        assert s.stop() == 0, s.stderr_text()


def brokers(server: KafkaServer) -> dict[int, tuple[str, int]]:
    """Node id -> (host, port) as Metadata through the bootstrap port names them."""
    c = server.client()
    resp = c.call(request(3, 12, topics=None, allow_auto_topic_creation=False))
    c.close()
    return {b.node_id: (b.host, b.port) for b in resp.brokers}


def list_offsets(address: str) -> list[int]:
    c = KafkaClient(address)
    resp = c.call(
        request(
            2,
            7,
            replica_id=-1,
            isolation_level=0,
            topics=[
                {
                    "name": TOPIC,
                    "partitions": [
                        {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                        for p in range(PARTITIONS)
                    ],
                }
            ],
        )
    )
    c.close()
    return [p.offset for t in resp.topics for p in t.partitions]


def test_each_node_has_a_port_and_metadata_names_ours(
    cluster: FakeCluster, server: KafkaServer
) -> None:
    host, port = server.kafka_address.rsplit(":", 1)
    c = server.client()
    resp = c.call(
        request(3, 12, topics=[{"name": TOPIC, "topic_id": None}], allow_auto_topic_creation=False)
    )
    c.close()
    ours = {b.node_id: (b.host, b.port) for b in resp.brokers}
    assert sorted(ours) == [1, 2] and ours[1] == (host, int(port))
    assert ours[2][0] == host and ours[2][1] not in (
        int(port),
        *[n.port for n in cluster.nodes.values()],
    )
    assert resp.controller_id == 2 and resp.cluster_id == "fake-cluster"
    (t,) = resp.topics
    assert (t.name, t.topic_id) == (TOPIC, TOPIC_ID)
    assert [p.leader_id for p in t.partitions] == [1, 2, 1, 2]  # node ids as the broker said


def test_requests_reach_the_node_of_their_port(cluster: FakeCluster, server: KafkaServer) -> None:
    nodes = brokers(server)
    before = len(cluster.requests(2))
    by_port = {node_id: list_offsets(f"{host}:{port}") for node_id, (host, port) in nodes.items()}
    assert by_port == {1: [1000, 1001, 1002, 1003], 2: [2000, 2001, 2002, 2003]}
    assert cluster.requests(2)[before:] == [1, 2]


def test_describe_cluster_and_transaction_coordinators_name_our_ports(
    server: KafkaServer,
) -> None:
    nodes = brokers(server)
    host, port2 = nodes[2]
    c = KafkaClient(f"{host}:{port2}")  # any of our ports
    desc = c.call(request(60, 1, include_cluster_authorized_operations=False, endpoint_type=1))
    assert desc.error_code == E.none and desc.controller_id == 2
    assert {b.broker_id: (b.host, b.port) for b in desc.brokers} == nodes

    txn = c.call(request(10, 4, key_type=1, coordinator_keys=["tx-1", "tx-2"]))
    assert [(x.key, x.node_id, x.host, x.port, x.error_code) for x in txn.coordinators] == [
        ("tx-1", 2, host, port2, E.none),
        ("tx-2", 2, host, port2, E.none),
    ]
    old = c.call(request(10, 3, key="tx-3", key_type=1))
    assert (old.error_code, old.node_id, old.host, old.port) == (E.none, 2, host, port2)
    # A GROUP key is ours, answered by the node of the port it came through.
    group = c.call(request(10, 4, key_type=0, coordinator_keys=["g"]))
    assert [(x.node_id, x.host, x.port) for x in group.coordinators] == [(2, host, port2)]
    c.close()


def test_produce_and_fetch_node_endpoints_name_our_ports(server: KafkaServer) -> None:
    nodes = brokers(server)
    host, port1 = nodes[1]
    c = KafkaClient(f"{host}:{port1}")
    produced = c.call(
        request(
            0,
            10,
            transactional_id=None,
            acks=-1,
            timeout=1000,
            topic_data=[{"name": TOPIC, "partition_data": [{"index": 1, "records": b""}]}],
        )
    )
    (pr,) = produced.responses[0].partition_responses
    assert pr.error_code == E.not_leader_or_follower and pr.current_leader.leader_id == 1
    assert [(n.node_id, n.host, n.port) for n in produced.node_endpoints] == [(1, *nodes[1])]
    fetched = c.call(fetch_request(16, TOPIC_ID, 1))
    assert fetched.responses[0].partitions[0].error_code == E.not_leader_or_follower
    assert [(n.node_id, n.host, n.port) for n in fetched.node_endpoints] == [(1, *nodes[1])]
    c.close()


def test_the_registry_follows_the_cluster(server: KafkaServer) -> None:
    resp = server.admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=10)
    assert [(t.name, t.topic_id, t.num_partitions) for t in resp.topics] == [
        (TOPIC, TOPIC_ID.bytes, PARTITIONS)
    ]


def test_a_broker_that_joins_later_gets_a_port_of_its_own(
    cluster: FakeCluster, server: KafkaServer
) -> None:
    before = brokers(server)
    cluster.add_node(3)
    deadline = time.monotonic() + 10
    nodes = brokers(server)
    while 3 not in nodes:  # the topic feed (every 300 ms here) binds a port for it
        assert time.monotonic() < deadline, nodes
        time.sleep(0.1)
        nodes = brokers(server)
    assert {k: v for k, v in nodes.items() if k != 3} == before
    host, port3 = nodes[3]
    assert port3 not in {p for _h, p in before.values()} and port3 != cluster.nodes[3].port
    assert list_offsets(f"{host}:{port3}") == [3000, 3001, 3002, 3003]
    assert "Upstream broker 3" in server.stderr_text()


def test_configs_split_group_resources_from_the_brokers(
    cluster: FakeCluster, server: KafkaServer
) -> None:
    """GROUP resources (32) are ours; TOPIC/BROKER/CLIENT_METRICS(16) go to the broker of the
    port; the answers come back merged in request order."""
    nodes = brokers(server)
    host, port2 = nodes[2]
    c = KafkaClient(f"{host}:{port2}")
    before = len(cluster.requests(32))
    resp = c.call(
        request(
            32,
            4,
            resources=[
                {"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None},
                {"resource_type": 32, "resource_name": "cfg-g", "configuration_keys": None},
                {"resource_type": 4, "resource_name": "2", "configuration_keys": None},
                {"resource_type": 16, "resource_name": "metrics", "configuration_keys": None},
            ],
            include_synonyms=False,
            include_documentation=False,
        )
    )
    assert [(r.resource_type, r.resource_name, r.error_code) for r in resp.results] == [
        (2, TOPIC, E.none),
        (32, "cfg-g", E.none),
        (4, "2", E.none),
        (16, "metrics", E.none),
    ]
    theirs = [resp.results[i] for i in (0, 2, 3)]
    assert all([(x.name, x.value) for x in r.configs] == [("answered.by", "2")] for r in theirs)
    group = {x.name: x.value for x in resp.results[1].configs}
    assert group["consumer.session.timeout.ms"] == "45000"
    assert cluster.requests(32)[before:] == [2]  # one request, to node 2 (the port's node)

    altered = c.call(
        request(
            44,
            1,
            resources=[
                {
                    "resource_type": 32,
                    "resource_name": "cfg-g",
                    "configs": [
                        {
                            "name": "consumer.session.timeout.ms",
                            "config_operation": 0,
                            "value": "50000",
                        }
                    ],
                },
                {
                    "resource_type": 2,
                    "resource_name": TOPIC,
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1"}],
                },
            ],
            validate_only=False,
        )
    )
    assert [
        (r.resource_type, r.resource_name, r.error_code, r.error_message) for r in altered.responses
    ] == [(32, "cfg-g", E.none, None), (2, TOPIC, E.none, "node 2")]
    again = c.call(
        request(
            32,
            4,
            resources=[
                {
                    "resource_type": 32,
                    "resource_name": "cfg-g",
                    "configuration_keys": ["consumer.session.timeout.ms"],
                }
            ],
            include_synonyms=False,
            include_documentation=False,
        )
    )
    assert [(x.name, x.value) for x in again.results[0].configs] == [
        ("consumer.session.timeout.ms", "50000")
    ]
    # Only the broker's resources: forwarded as they are (the broker's own reverse order).
    only = c.call(
        request(
            32,
            4,
            resources=[
                {"resource_type": 2, "resource_name": "a", "configuration_keys": None},
                {"resource_type": 2, "resource_name": "b", "configuration_keys": None},
            ],
            include_synonyms=False,
            include_documentation=False,
        )
    )
    assert [r.resource_name for r in only.results] == ["b", "a"]
    c.close()


def test_topic_rpcs_refuse_what_the_broker_lacks_and_an_unreachable_broker(
    tmp_path: Path,
) -> None:
    """Against a cluster that offers no CreateTopics/DeleteTopics/CreatePartitions: each topic
    gets UNSUPPORTED_VERSION saying so. Once the broker is gone, the registry still answers
    ListTopics and the coordinator keeps serving groups."""
    lone = FakeCluster()
    lone.add_node(7)
    server = KafkaServer(
        tmp_path / "data",
        "--kafka-upstream",
        lone.nodes[7].address,
        "--set",
        "kafka.upstream.metadata.max.age.ms=200",
        clock="system",
    )
    try:
        T = admin_pb2.CreateTopicsRequest.CreatableTopic
        made = server.admin.CreateTopics(
            admin_pb2.CreateTopicsRequest(topics=[T(name="new", num_partitions=1)]), timeout=10
        )
        gone = server.admin.DeleteTopics(admin_pb2.DeleteTopicsRequest(names=[TOPIC]), timeout=10)
        grown = server.admin.CreatePartitions(
            admin_pb2.CreatePartitionsRequest(
                topics=[
                    admin_pb2.CreatePartitionsRequest.CreatePartitionsTopic(name=TOPIC, count=9)
                ]
            ),
            timeout=10,
        )
        assert [
            (t.name, t.error_code, t.error_message)
            for t in [*made.topics, *gone.results, *grown.results]
        ] == [
            ("new", 35, "The upstream broker does not offer CreateTopics (API key 19)."),
            (TOPIC, 35, "The upstream broker does not offer DeleteTopics (API key 20)."),
            (TOPIC, 35, "The upstream broker does not offer CreatePartitions (API key 37)."),
        ]
        lone.stop()
        time.sleep(0.5)  # a refresh or two fail meanwhile
        listed = server.admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=10)
        assert [(t.name, t.num_partitions) for t in listed.topics] == [(TOPIC, PARTITIONS)]
        c = server.client()
        found = c.call(request(10, 4, key_type=0, coordinator_keys=["g"]))
        c.close()
        assert found.coordinators[0].error_code == E.none
        assert "Topic refresh from the upstream failed" in server.stderr_text()
    finally:
        lone.stop()
        assert server.stop() == 0, server.stderr_text()


def test_serve_refuses_to_start_without_its_upstream(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens there
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "coordinator.cli",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--kafka-listen",
            "127.0.0.1:0",
            "--kafka-upstream",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done
    assert f"ApiVersions to the upstream broker at 127.0.0.1:{port} failed" in done.stderr


def _racks(server: KafkaServer) -> dict[str, list[tuple[list[int], list[str]]]]:
    listed = server.admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=10)
    return {
        t.name: [(list(e.partitions), list(e.racks)) for e in t.replica_racks]
        for t in listed.topics
    }


def test_replica_racks_follow_the_brokers_metadata(tmp_path: Path) -> None:
    """Each partition's racks are its replicas' brokers' racks (a broker without a rack adds
    none); a reassignment upstream shows at the next refresh. Racks cannot be given to a topic
    created through the coordinator in front of a broker."""
    racked = FakeCluster()
    racked.add_node(1, rack="a")
    racked.add_node(2, rack="b")
    racked.add_node(3)
    racked.replicas = {0: [1, 2], 1: [2, 3], 2: [3]}  # partition 3: every node
    server = KafkaServer(
        tmp_path / "data",
        "--kafka-upstream",
        racked.nodes[1].address,
        "--set",
        "kafka.upstream.metadata.max.age.ms=200",
        clock="system",
    )
    try:
        assert _racks(server) == {TOPIC: [([0, 3], ["a", "b"]), ([1], ["b"])]}
        racked.replicas = {0: [1], 1: [1, 2], 2: [2, 3], 3: [3]}
        deadline = time.monotonic() + 10
        while _racks(server) != {TOPIC: [([0], ["a"]), ([1], ["a", "b"]), ([2], ["b"])]}:
            assert time.monotonic() < deadline, _racks(server)
            time.sleep(0.05)
        T = admin_pb2.CreateTopicsRequest.CreatableTopic
        made = server.admin.CreateTopics(
            admin_pb2.CreateTopicsRequest(
                topics=[
                    T(
                        name="new",
                        num_partitions=1,
                        replica_racks=[admin_pb2.PartitionRacks(partitions=[0], racks=["a"])],
                    )
                ]
            ),
            timeout=10,
        )
        assert [(t.name, t.error_code, t.error_message) for t in made.topics] == [
            (
                "new",
                42,
                "Replica racks cannot be given in front of a broker (--kafka-upstream): they "
                "come from the broker's metadata.",
            )
        ]
    finally:
        racked.stop()
        assert server.stop() == 0, server.stderr_text()
