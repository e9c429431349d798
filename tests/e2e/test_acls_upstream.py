"""ACL requests on the Kafka listener in front of a broker: GROUP ACLs are the coordinator's,
the other resource types the broker's (kafka/acl_split.py). The broker is the fake cluster of
``fake_upstream.py`` (it keeps the ACLs it is sent); the coordinator's are read back over gRPC."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_upstream import FakeCluster
from kafka_support import KafkaServer, request

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
    resp = server.admin.DescribeAcls(
        admin_pb2.DescribeAclsRequest(
            filter=admin_pb2.AclFilter(
                resource_type_filter=ANY,
                pattern_type_filter=ANY,
                operation=ANY,
                permission_type=ANY,
            )
        ),
        timeout=10,
    )
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
