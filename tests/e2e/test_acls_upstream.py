"""In front of a broker: ACL requests on the Kafka listener (GROUP ACLs are the coordinator's,
the other resource types the broker's: kafka/acl_split.py), and the topic ACLs the listener
checks on the data requests it forwards to an open broker (kafka/topic_guard.py). The broker is
the fake cluster of ``fake_upstream.py`` (it keeps the ACLs it is sent and logs every request);
the coordinator's ACLs are read and written over gRPC."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import every_acl
from fake_upstream import TOPIC as TOPIC_NAME
from fake_upstream import TOPIC_ID, FakeCluster
from kafka_support import KafkaServer, fetch_request, request

from kip848.v1 import admin_pb2

GROUP, TOPIC, CLUSTER, ANY = 3, 2, 4, 1
LITERAL, PREFIXED = 3, 4
READ, WRITE, ALL = 3, 4, 2
ALLOW = 3


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    c = FakeCluster()
    c.add_node(1)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def server(cluster: FakeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    s = KafkaServer(
        tmp_path_factory.mktemp("acls-upstream") / "data",
        "--kafka-upstream",
        cluster.nodes[1].address,
        clock="system",
    )
    try:
        yield s
    finally:
        assert s.stop() == 0, s.stderr_text()


def creation(rtype: int, name: str, op: int, pattern: int = LITERAL) -> dict[str, object]:
    return {
        "resource_type": rtype,
        "resource_name": name,
        "resource_pattern_type": pattern,
        "principal": "User:alice",
        "host": "*",
        "operation": op,
        "permission_type": ALLOW,
    }


def any_filter(**kw: object) -> dict[str, object]:
    return {
        "resource_type_filter": ANY,
        "resource_name_filter": None,
        "pattern_type_filter": ANY,
        "principal_filter": None,
        "host_filter": None,
        "operation": ANY,
        "permission_type": ANY,
        **kw,
    }


def coordinators_acls(server: KafkaServer) -> list[tuple[int, str, int]]:
    resp = every_acl(server.admin)
    return [(r.resource_type, r.resource_name, a.operation) for r in resp.resources for a in r.acls]


def test_group_acls_stay_here_the_others_go_to_the_broker(
    cluster: FakeCluster, server: KafkaServer
) -> None:
    client = server.client()
    try:
        created = client.call(
            request(
                30,
                3,
                creations=[
                    creation(TOPIC, "orders", WRITE),
                    creation(GROUP, "payments-", READ, PREFIXED),
                    creation(CLUSTER, "kafka-cluster", ALL),
                    creation(GROUP, "", READ),  # invalid: answered here, in its place
                ],
            )
        )
        assert [(int(r.error_code), r.error_message) for r in created.results] == [
            (0, None),
            (0, None),
            (0, None),
            (42, "Resource name should not be empty"),
        ]
        assert coordinators_acls(server) == [(GROUP, "payments-", READ)]
        with cluster.lock:
            assert sorted(cluster.acls) == [
                (TOPIC, "orders", LITERAL, "User:alice", "*", WRITE, ALLOW),
                (CLUSTER, "kafka-cluster", LITERAL, "User:alice", "*", ALL, ALLOW),
            ]
        described = client.call(request(29, 3, **any_filter()))
        assert int(described.error_code) == 0
        assert sorted((int(r.resource_type), r.resource_name) for r in described.resources) == [
            (TOPIC, "orders"),
            (GROUP, "payments-"),
            (CLUSTER, "kafka-cluster"),
        ]
        only_groups = client.call(request(29, 3, **any_filter(resource_type_filter=GROUP)))
        assert [r.resource_name for r in only_groups.resources] == ["payments-"]
        assert cluster.requests(29) == [1]  # the GROUP-only describe never reached the broker
        deleted = client.call(
            request(
                31,
                3,
                filters=[any_filter(resource_type_filter=TOPIC), any_filter()],
            )
        )
        assert [
            sorted((int(a.resource_type), a.resource_name) for a in r.matching_acls)
            for r in deleted.filter_results
        ] == [[(TOPIC, "orders")], [(GROUP, "payments-"), (CLUSTER, "kafka-cluster")]]
        assert coordinators_acls(server) == []
        with cluster.lock:
            assert cluster.acls == set()
    finally:
        client.close()


def _grant(server: KafkaServer, principal: str, op: int) -> None:
    made = server.admin.CreateAcls(
        admin_pb2.CreateAclsRequest(
            creations=[
                admin_pb2.AclBinding(
                    resource_type=TOPIC,
                    resource_name=TOPIC_NAME,
                    pattern_type=LITERAL,
                    principal=principal,
                    host="*",
                    operation=op,
                    permission_type=ALLOW,
                )
            ]
        ),
        timeout=10,
    )
    assert [r.error_code for r in made.results] == [0]


def _data_requests() -> dict[int, object]:
    return {
        0: request(
            0,
            8,
            transactional_id=None,
            acks=1,
            timeout=1000,
            topic_data=[{"name": TOPIC_NAME, "partition_data": [{"index": 0, "records": None}]}],
        ),
        1: fetch_request(13, TOPIC_ID, 0),  # by id: the guard finds its name in the registry
        2: request(
            2,
            7,
            replica_id=-1,
            isolation_level=0,
            topics=[
                {
                    "name": TOPIC_NAME,
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
                    ],
                }
            ],
        ),
    }


def _codes(key: int, resp: object) -> list[int]:
    topics = {0: "responses", 1: "responses", 2: "topics"}[key]
    parts = {0: "partition_responses", 1: "partitions", 2: "partitions"}[key]
    return [int(p.error_code) for t in getattr(resp, topics) for p in getattr(t, parts)]


def test_forwarded_data_requests_are_checked_against_topic_acls(
    cluster: FakeCluster, server: KafkaServer
) -> None:
    """In front of an open broker (no pass-through), Produce WRITE, Fetch READ, ListOffsets and
    Metadata DESCRIBE are the coordinator's to check: a refused one never reaches the broker."""
    _grant(server, "User:alice", ALL)  # the topic has ACLs: the anonymous client may not use it
    client = server.client()
    try:
        seen = {key: len(cluster.requests(key)) for key in (0, 1, 2)}
        for key, req in _data_requests().items():
            assert _codes(key, client.call(req)) == [29], key
            assert len(cluster.requests(key)) == seen[key], f"API {key} reached the broker"
        everything = client.call(request(3, 12, topics=None, allow_auto_topic_creation=False))
        assert TOPIC_NAME not in [t.name for t in everything.topics]
        named = client.call(
            request(
                3,
                12,
                topics=[{"name": TOPIC_NAME, "topic_id": None}],
                allow_auto_topic_creation=False,
            )
        )
        assert [(t.name, int(t.error_code)) for t in named.topics] == [(TOPIC_NAME, 29)]
        _grant(server, "User:ANONYMOUS", READ)
        _grant(server, "User:ANONYMOUS", WRITE)
        for key, req in _data_requests().items():
            assert 29 not in _codes(key, client.call(req)), key
            assert len(cluster.requests(key)) == seen[key] + 1, f"API {key} was not forwarded"
        everything = client.call(request(3, 12, topics=None, allow_auto_topic_creation=False))
        assert TOPIC_NAME in [t.name for t in everything.topics]
    finally:
        client.close()
        server.admin.DeleteAcls(
            admin_pb2.DeleteAclsRequest(
                filters=[
                    admin_pb2.AclFilter(
                        resource_type_filter=ANY,
                        pattern_type_filter=ANY,
                        operation=ANY,
                        permission_type=ANY,
                    )
                ]
            ),
            timeout=10,
        )
