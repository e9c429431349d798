"""End-to-end: a real ``kip848 serve`` (manual clock) and the generated stubs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ServerProcess, join_request, owned
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from kip848.v1 import admin_pb2, common_pb2
from kip848.v1 import consumer_group_pb2 as cg

pytestmark = pytest.mark.postgresql_too

Resp = cg.ConsumerGroupHeartbeatResponse
Described = cg.ConsumerGroupDescribeResponse.DescribedGroup
Member = cg.ConsumerGroupDescribeResponse.Member
MemberAssignment = cg.ConsumerGroupDescribeResponse.MemberAssignment
NOT_REQUESTED = -2147483648


def tps(topic_id: bytes, partitions: list[int], name: str) -> common_pb2.TopicPartitions:
    return common_pb2.TopicPartitions(topic_id=topic_id, partitions=partitions, topic_name=name)


def assigned(*items: common_pb2.TopicPartitions, pending: tuple = ()) -> cg.Assignment:
    return cg.Assignment(
        assigned_topic_partitions=list(items), pending_topic_partitions=list(pending)
    )


def member(
    member_id: str,
    epoch: int,
    parts: list,
    target: list,
    topics: list[str],
    client_id: str = "client",
) -> Member:
    return Member(
        member_id=member_id,
        member_epoch=epoch,
        client_id=client_id,
        client_host="/127.0.0.1",
        subscribed_topic_names=topics,
        assignment=MemberAssignment(topic_partitions=parts),
        target_assignment=MemberAssignment(topic_partitions=target),
        member_type=1,
    )


def test_member_joins_reconciles_and_leaves(manual_server: ServerProcess) -> None:
    s = manual_server
    t = s.create_topic("jrl", 3)
    join = s.heartbeat(client_id="app-1", **join_request("g-jrl", ["jrl"]))
    member_id = join.member_id
    assert len(member_id) == 22
    assert join == Resp(
        member_id=member_id,
        member_epoch=1,
        heartbeat_interval_ms=5000,
        assignment=assigned(tps(t, [0, 1, 2], "jrl")),
    )
    # The member confirms it owns its partitions: steady state, nothing new to say.
    steady = s.heartbeat(
        client_id="app-1",
        group_id="g-jrl",
        member_id=member_id,
        member_epoch=1,
        topic_partitions=owned((t, [0, 1, 2])),
    )
    assert steady == Resp(member_id=member_id, member_epoch=1, heartbeat_interval_ms=5000)
    desc = s.describe("g-jrl")
    uid = desc.groups[0].group_uid
    assert uid.startswith("cgp_") and len(uid) == 30
    assert desc == cg.ConsumerGroupDescribeResponse(
        groups=[
            Described(
                group_id="g-jrl",
                group_uid=uid,
                group_state="Stable",
                group_epoch=1,
                assignment_epoch=1,
                assignor_name="uniform",
                authorized_operations=NOT_REQUESTED,
                members=[
                    member(
                        member_id,
                        1,
                        [tps(t, [0, 1, 2], "jrl")],
                        [tps(t, [0, 1, 2], "jrl")],
                        ["jrl"],
                        "app-1",
                    )
                ],
            )
        ]
    )
    leave = s.heartbeat(group_id="g-jrl", member_id=member_id, member_epoch=-1)
    assert leave == Resp(member_id=member_id, member_epoch=-1, heartbeat_interval_ms=0)
    assert s.describe("g-jrl") == cg.ConsumerGroupDescribeResponse(
        groups=[
            Described(
                group_id="g-jrl",
                group_uid=uid,
                group_state="Empty",
                group_epoch=2,
                assignment_epoch=2,  # an emptied group's caught up (Kafka 4.3, KAFKA-20442)
                assignor_name="uniform",
                authorized_operations=NOT_REQUESTED,
            )
        ]
    )


def test_two_members_rebalance_incrementally(manual_server: ServerProcess) -> None:
    s = manual_server
    t = s.create_topic("inc", 4)
    a = s.heartbeat(**join_request("g-inc", ["inc"], member_id="A"))
    assert a == Resp(
        member_id="A",
        member_epoch=1,
        heartbeat_interval_ms=5000,
        assignment=assigned(tps(t, [0, 1, 2, 3], "inc")),
    )
    # B joins: epoch 2; its partitions are pending until A releases them.
    b = s.heartbeat(**join_request("g-inc", ["inc"], member_id="B"))
    assert b == Resp(
        member_id="B",
        member_epoch=2,
        heartbeat_interval_ms=5000,
        assignment=assigned(pending=(tps(t, [2, 3], "inc"),)),
    )
    # A is asked to revoke 2 and 3, staying at epoch 1 until it confirms.
    a = s.heartbeat(
        group_id="g-inc", member_id="A", member_epoch=1, topic_partitions=owned((t, [0, 1, 2, 3]))
    )
    assert a == Resp(
        member_id="A",
        member_epoch=1,
        heartbeat_interval_ms=5000,
        assignment=assigned(tps(t, [0, 1], "inc")),
    )
    b = s.heartbeat(group_id="g-inc", member_id="B", member_epoch=2)
    assert b == Resp(member_id="B", member_epoch=2, heartbeat_interval_ms=5000)  # still waiting
    a = s.heartbeat(
        group_id="g-inc", member_id="A", member_epoch=1, topic_partitions=owned((t, [0, 1]))
    )
    # A moves to epoch 2 keeping [0, 1]: an unchanged assignment is not sent (Kafka)
    assert a == Resp(member_id="A", member_epoch=2, heartbeat_interval_ms=5000)
    b = s.heartbeat(group_id="g-inc", member_id="B", member_epoch=2)
    assert b == Resp(
        member_id="B",
        member_epoch=2,
        heartbeat_interval_ms=5000,
        assignment=assigned(tps(t, [2, 3], "inc")),
    )
    desc = s.describe("g-inc").groups[0]
    assert (desc.group_state, desc.group_epoch, desc.assignment_epoch) == ("Stable", 2, 2)
    assert list(desc.members) == [
        member("A", 2, [tps(t, [0, 1], "inc")], [tps(t, [0, 1], "inc")], ["inc"]),
        member("B", 2, [tps(t, [2, 3], "inc")], [tps(t, [2, 3], "inc")], ["inc"]),
    ]


def test_session_timeout_fires_under_manual_clock(manual_server: ServerProcess) -> None:
    s = manual_server
    s.create_topic("sto", 2)
    before = s.advance(0).now_ms
    join = s.heartbeat(**join_request("g-sto", ["sto"]))
    assert join.error_code == 0
    assert s.advance(44_999).now_ms == before + 44_999
    assert len(s.describe("g-sto").groups[0].members) == 1
    assert s.advance(1).now_ms == before + 45_000
    desc = s.describe("g-sto").groups[0]
    assert (desc.group_state, desc.group_epoch, list(desc.members)) == ("Empty", 2, [])
    late = s.heartbeat(group_id="g-sto", member_id=join.member_id, member_epoch=1)
    assert late == Resp(
        error_code=25, error_message=f"Member {join.member_id} is not a member of group g-sto."
    )


def test_in_band_errors(manual_server: ServerProcess) -> None:
    s = manual_server
    bad = s.heartbeat(group_id="", member_epoch=0)
    assert bad == Resp(error_code=42, error_message="GroupId can't be empty.")
    bad_id = s.heartbeat(
        **{**join_request("g-err", []), "topic_partitions": owned((b"short", [0]))}
    )
    assert bad_id == Resp(error_code=42, error_message="A topic id has 16 bytes, got 5.")
    assert s.describe("nope") == cg.ConsumerGroupDescribeResponse(
        groups=[
            Described(
                group_id="nope",
                error_code=69,
                error_message="Group nope not found.",
                authorized_operations=NOT_REQUESTED,
            )
        ]
    )


def test_group_configs(manual_server: ServerProcess) -> None:
    s = manual_server
    Alter = admin_pb2.IncrementalAlterConfigsRequest
    resp = s.admin.IncrementalAlterConfigs(
        Alter(
            resources=[
                Alter.Resource(
                    resource_type=16,
                    resource_name="g-cfg",
                    configs=[
                        Alter.AlterableConfig(
                            name="consumer.heartbeat.interval.ms", config_operation=0, value="7000"
                        )
                    ],
                )
            ]
        ),
        timeout=10,
    )
    assert resp == admin_pb2.IncrementalAlterConfigsResponse(
        responses=[
            admin_pb2.IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
                resource_type=16, resource_name="g-cfg"
            )
        ]
    )
    Desc = admin_pb2.DescribeConfigsRequest
    got = s.admin.DescribeConfigs(
        Desc(resources=[Desc.Resource(resource_type=16, resource_name="g-cfg")]), timeout=10
    )
    C = admin_pb2.DescribeConfigsResponse.Config
    assert got == admin_pb2.DescribeConfigsResponse(
        results=[
            admin_pb2.DescribeConfigsResponse.Result(
                resource_type=16,
                resource_name="g-cfg",
                configs=[
                    C(
                        name="consumer.session.timeout.ms",
                        value="45000",
                        config_source=5,
                        config_type=3,
                    ),
                    C(
                        name="consumer.heartbeat.interval.ms",
                        value="7000",
                        config_source=8,
                        config_type=3,
                    ),
                    C(
                        name="consumer.assignment.interval.ms",
                        value="0",
                        config_source=5,
                        config_type=3,
                    ),
                ],
            )
        ]
    )


def test_health_and_reflection(manual_server: ServerProcess) -> None:
    health = health_pb2_grpc.HealthStub(manual_server.channel)
    for service in ("", "kip848.v1.ConsumerGroupService"):
        assert health.Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5
        ) == health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)
    stub = reflection_pb2_grpc.ServerReflectionStub(manual_server.channel)
    responses = list(
        stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
        )
    )
    names = sorted(s.name for s in responses[0].list_services_response.service)
    assert names == [
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "kip848.v1.AdminService",
        "kip848.v1.ClassicGroupService",
        "kip848.v1.ConsumerGroupService",
        "kip848.v1.OffsetService",
        "kip848.v1.TestingService",
    ]


def _cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator.cli", *args, "--bootstrap-server", server.address],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_cli_topic_replica_racks(manual_server: ServerProcess) -> None:
    """``topics create --replica-racks``: entries given to the partitions in turn; ``topics
    list`` shows them (a RACKS column, a replica_racks key) once some topic has racks."""
    s = manual_server
    made = _cli(
        s, "topics", "create", "racked", "--partitions", "5", "--replica-racks", "a,b; b,c;"
    )
    assert made.returncode == 0, made.stderr
    try:
        listed = _cli(s, "topics", "list", "--output", "json")
        [item] = [t for t in json.loads(listed.stdout) if t["name"] == "racked"]
        assert item["replica_racks"] == [
            {"partitions": [0, 3], "racks": ["a", "b"]},
            {"partitions": [1, 4], "racks": ["b", "c"]},
        ]
        table = _cli(s, "topics", "list").stdout.splitlines()
        assert table[0].split() == ["TOPIC", "TOPIC", "ID", "PARTITIONS", "RACKS"]
        assert [line.split() for line in table if line.startswith("racked")] == [
            ["racked", item["topic_id"], "5", "a,b,c"]
        ]
        blank = _cli(s, "topics", "create", "none", "--partitions", "1", "--replica-racks", ";")
        assert blank.returncode == 2 and "--replica-racks names no rack" in blank.stderr
    finally:  # the module's other tests see a registry without racks
        assert _cli(s, "topics", "delete", "racked").returncode == 0


def test_cli_against_the_server(manual_server: ServerProcess) -> None:
    s = manual_server
    created = _cli(s, "topics", "create", "cli-topic", "--partitions", "2", "--output", "json")
    assert created.returncode == 0, created.stderr
    [item] = json.loads(created.stdout)
    assert item["name"] == "cli-topic" and item["num_partitions"] == 2 and item["error"] is None
    listed = _cli(s, "topics", "list", "--output", "json")
    assert {"name": "cli-topic", "topic_id": item["topic_id"], "num_partitions": 2} in json.loads(
        listed.stdout
    )
    table = _cli(s, "topics", "list")
    assert table.stdout.splitlines()[0].split() == ["TOPIC", "TOPIC", "ID", "PARTITIONS"]
    assert [line.split() for line in table.stdout.splitlines() if line.startswith("cli-topic")] == [
        ["cli-topic", item["topic_id"], "2"]
    ]
    again = _cli(s, "topics", "create", "cli-topic", "--partitions", "2")
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr

    join = s.heartbeat(client_id="cli-app", **join_request("g-cli", ["cli-topic"]))
    described = _cli(s, "groups", "describe", "g-cli", "--output", "json")
    assert described.returncode == 0, described.stderr
    [group] = json.loads(described.stdout)
    parts = [{"topic_id": item["topic_id"], "topic_name": "cli-topic", "partitions": [0, 1]}]
    assert group == {
        "group_id": "g-cli",
        "group_type": "consumer",
        "error": None,
        "group_uid": group["group_uid"],
        "group_state": "Stable",
        "group_epoch": 1,
        "assignment_epoch": 1,
        "assignor_name": "uniform",
        "members": [
            {
                "member_id": join.member_id,
                "instance_id": None,
                "rack_id": None,
                "member_epoch": 1,
                "client_id": "cli-app",
                "client_host": "/127.0.0.1",
                "subscribed_topic_names": ["cli-topic"],
                "subscribed_topic_regex": None,
                "assignment": parts,
                "target_assignment": parts,
                "member_type": 1,
            }
        ],
    }
    human = _cli(s, "groups", "describe", "g-cli")
    assert (
        human.returncode == 0 and "state Stable" in human.stdout and join.member_id in human.stdout
    )
    missing = _cli(s, "groups", "describe", "no-such-group")
    assert missing.returncode == 1 and "GROUP_ID_NOT_FOUND" in missing.stderr
