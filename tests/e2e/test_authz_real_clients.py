"""Kafka's ACLs as real clients meet them (docs/security.md "What each request needs"): over
SASL/SCRAM-SHA-256, librdkafka (confluent-kafka) joins a group its user may read, with the
classic and the consumer protocol, and is refused one it may not (GROUP_AUTHORIZATION_FAILED,
reported to the application); kafka-python's admin client cannot read another group's
offsets. The ACLs and users are set up over gRPC by an anonymous operator before the cluster is
locked."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from conftest import ServerProcess

from coordinator.security import scram
from kip848.v1 import admin_pb2, admin_pb2_grpc

TOPIC = "authz-topic"
SALT = b"authz-test-salt!"
READ, DESCRIBE, ALL = 3, 8, 2
GROUP, TOPIC_TYPE, CLUSTER = 3, 2, 4


def _acl(rtype: int, name: str, principal: str, op: int) -> admin_pb2.AclBinding:
    return admin_pb2.AclBinding(
        resource_type=rtype,
        resource_name=name,
        pattern_type=3,
        principal=principal,
        host="*",
        operation=op,
        permission_type=3,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("authz-clients") / "d",
        "--set",
        "listeners=SASL://127.0.0.1:0",
        "--set",
        "listener.security.protocol.map=SASL:SASL_PLAINTEXT,GRPC:PLAINTEXT",
        "--set",
        "listener.name.sasl.sasl.enabled.mechanisms=SCRAM-SHA-256",
        clock="system",
        lines=2,
    )
    admin = admin_pb2_grpc.AdminServiceStub(proc.channel)
    for name in ("alice", "mallory"):
        salted = scram.salted_password(scram.ScramMechanism.SCRAM_SHA_256, f"{name}-pw", SALT, 4096)
        reply = admin.AlterUserScramCredentials(
            admin_pb2.AlterUserScramCredentialsRequest(
                upsertions=[
                    admin_pb2.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                        name=name, mechanism=1, iterations=4096, salt=SALT, salted_password=salted
                    )
                ]
            ),
            timeout=10,
        )
        assert [r.error_code for r in reply.results] == [0]
    proc.create_topic(TOPIC, 2)
    acls = [
        _acl(GROUP, "alice-classic", "User:alice", READ),
        _acl(GROUP, "alice-consumer", "User:alice", READ),
        _acl(TOPIC_TYPE, TOPIC, "User:alice", READ),
        _acl(TOPIC_TYPE, TOPIC, "User:mallory", DESCRIBE),
        _acl(GROUP, "payments", "User:payments-app", ALL),  # alice may not: only this ACL decides
        _acl(CLUSTER, "kafka-cluster", "User:ops", ALL),  # locks administration
    ]
    made = admin.CreateAcls(admin_pb2.CreateAclsRequest(creations=acls), timeout=10)
    assert [r.error_code for r in made.results] == [0] * len(acls)
    yield proc
    assert proc.stop() == 0


def _config(server: ServerProcess, user: str) -> dict[str, object]:
    return {
        "bootstrap.servers": server.lines[1].rpartition(" ")[2],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": f"{user}-pw",
    }


def _join(config: dict[str, object], group: str, protocol: str) -> tuple[list[int], list[str]]:
    """A confluent-kafka consumer subscribes in ``group``: (partitions it was given, errors it
    was told), within a bounded wait."""
    from confluent_kafka import Consumer

    errors: list[str] = []
    extra: dict[str, object] = (
        {"group.protocol": "consumer"}
        if protocol == "consumer"
        else {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    )
    consumer = Consumer(
        {
            **config,
            **extra,
            "group.id": group,
            "enable.auto.commit": False,
            "error_cb": lambda e: errors.append(e.name()),
        }
    )
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not consumer.assignment():
            msg = consumer.poll(0.1)
            if msg is not None and msg.error():
                errors.append(msg.error().name())
            if "GROUP_AUTHORIZATION_FAILED" in errors:
                break
        return sorted(tp.partition for tp in consumer.assignment()), errors
    finally:
        consumer.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_librdkafka_joins_the_group_it_may_read_and_is_refused_another(
    server: ServerProcess, protocol: str
) -> None:
    config = _config(server, "alice")
    assigned, errors = _join(config, f"alice-{protocol}", protocol)
    assert assigned == [0, 1], errors
    assigned, errors = _join(config, "payments", protocol)
    assert assigned == []
    assert "GROUP_AUTHORIZATION_FAILED" in errors


def test_another_user_is_refused_the_group_alice_may_read(server: ServerProcess) -> None:
    """mallory may describe the topic but read no group: alice's group is refused to it."""
    assigned, errors = _join(_config(server, "mallory"), "alice-classic", "classic")
    assert assigned == [] and "GROUP_AUTHORIZATION_FAILED" in errors


def test_kafka_python_cannot_read_another_groups_offsets(server: ServerProcess) -> None:
    from kafka import KafkaAdminClient
    from kafka.errors import GroupAuthorizationFailedError

    admin = KafkaAdminClient(
        bootstrap_servers=server.lines[1].rpartition(" ")[2],
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="alice",
        sasl_plain_password="alice-pw",
        request_timeout_ms=10_000,
    )
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            admin.list_group_offsets("payments")
        assert admin.list_group_offsets("alice-classic") is not None
    finally:
        admin.close()
