"""End-to-end: group administration through a real ``kip848 serve`` (manual clock):
ConsumerGroupDescribe, ListGroups filters, DeleteGroups, and GROUP configs (persisted, taking
effect on the next heartbeat)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ServerProcess, join_request, owned

from kip848.v1 import admin_pb2, common_pb2, offsets_pb2, offsets_pb2_grpc
from kip848.v1 import consumer_group_pb2 as cg

pytestmark = pytest.mark.postgresql_too

Described = cg.ConsumerGroupDescribeResponse.DescribedGroup
Member = cg.ConsumerGroupDescribeResponse.Member
MemberAssignment = cg.ConsumerGroupDescribeResponse.MemberAssignment
Listed = admin_pb2.ListGroupsResponse.ListedGroup
Alter = admin_pb2.IncrementalAlterConfigsRequest
AlterResult = admin_pb2.IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
Desc = admin_pb2.DescribeConfigsRequest
DescResult = admin_pb2.DescribeConfigsResponse.Result
Config = admin_pb2.DescribeConfigsResponse.Config
Synonym = admin_pb2.DescribeConfigsResponse.Synonym
NOT_REQUESTED = -2147483648
SESSION = "consumer.session.timeout.ms"
INTERVAL = "consumer.heartbeat.interval.ms"
ASSIGNMENT = "consumer.assignment.interval.ms"


def tps(topic_id: bytes, partitions: list[int], name: str) -> common_pb2.TopicPartitions:
    return common_pb2.TopicPartitions(topic_id=topic_id, partitions=partitions, topic_name=name)


def admin_commit(s: ServerProcess, group: str, topic: str, partition: int, offset: int) -> None:
    OC = offsets_pb2.OffsetCommitRequest
    resp = offsets_pb2_grpc.OffsetServiceStub(s.channel).OffsetCommit(
        OC(
            group_id=group,
            topics=[
                OC.Topic(
                    name=topic,
                    partitions=[OC.Partition(partition_index=partition, committed_offset=offset)],
                )
            ],
        ),
        timeout=10,
    )
    assert resp.topics[0].partitions[0].error_code == 0, resp


def list_groups(
    s: ServerProcess, states: tuple[str, ...] = (), types: tuple[str, ...] = ()
) -> admin_pb2.ListGroupsResponse:
    return s.admin.ListGroups(
        admin_pb2.ListGroupsRequest(states_filter=states, types_filter=types), timeout=10
    )


# ---------------------------------------------------------------- describe


def test_describe_is_complete(manual_server: ServerProcess) -> None:
    s = manual_server
    a = s.create_topic("da", 4)
    b = s.create_topic("db-1", 2)
    first = s.heartbeat(
        client_id="app-a",
        **join_request(
            "g-desc",
            ["da"],
            member_id="A",
            instance_id="inst-a",
            rack_id="rack-1",
            server_assignor="range",
        ),
    )
    assert first.member_epoch == 1
    second = s.heartbeat(
        client_id="app-b",
        **{**join_request("g-desc", [], member_id="B"), "subscribed_topic_regex": "db-.*"},
    )
    # Kafka 4.x: a new regex is resolved off the heartbeat path. B joins with nothing; the
    # resolution bumps the group epoch; once the assignment interval passed the target gives B
    # the regex's topic, which B's next heartbeat gets.
    assert second.member_epoch == 1, second
    s.wait_group_epoch("g-desc", 2)
    s.advance(1_000)
    third = s.heartbeat(client_id="app-b", group_id="g-desc", member_id="B", member_epoch=1)
    assert third.member_epoch == 2, third
    desc = s.describe("g-desc", "g-desc-missing", "")
    uid = desc.groups[0].group_uid
    assert uid.startswith("cgp_") and len(uid) == 30
    # A owns what it was given at epoch 1 and has not heartbeated since: the group reconciles.
    assert desc == cg.ConsumerGroupDescribeResponse(
        groups=[
            Described(
                group_id="g-desc",
                group_uid=uid,
                group_state="Reconciling",
                group_epoch=2,
                assignment_epoch=2,
                assignor_name="range",
                authorized_operations=NOT_REQUESTED,
                members=[
                    Member(
                        member_id="A",
                        instance_id="inst-a",
                        rack_id="rack-1",
                        member_epoch=1,
                        client_id="app-a",
                        client_host="/127.0.0.1",
                        subscribed_topic_names=["da"],
                        assignment=MemberAssignment(topic_partitions=[tps(a, [0, 1, 2, 3], "da")]),
                        target_assignment=MemberAssignment(
                            topic_partitions=[tps(a, [0, 1, 2, 3], "da")]
                        ),
                        member_type=1,
                    ),
                    Member(
                        member_id="B",
                        member_epoch=2,
                        client_id="app-b",
                        client_host="/127.0.0.1",
                        subscribed_topic_regex="db-.*",
                        assignment=MemberAssignment(topic_partitions=[tps(b, [0, 1], "db-1")]),
                        target_assignment=MemberAssignment(
                            topic_partitions=[tps(b, [0, 1], "db-1")]
                        ),
                        member_type=1,
                    ),
                ],
            ),
            Described(
                group_id="g-desc-missing",
                error_code=69,
                error_message="Group g-desc-missing not found.",
                authorized_operations=NOT_REQUESTED,
            ),
            Described(
                group_id="",
                error_code=24,
                error_message="Group id can't be empty.",
                authorized_operations=NOT_REQUESTED,
            ),
        ]
    )
    # A topic that no longer exists is left out of the assignments shown (Kafka).
    assert (
        s.admin.DeleteTopics(admin_pb2.DeleteTopicsRequest(names=["db-1"]), timeout=10)
        .results[0]
        .error_code
        == 0
    )
    after = s.describe("g-desc").groups[0]
    assert [list(m.assignment.topic_partitions) for m in after.members] == [
        [tps(a, [0, 1, 2, 3], "da")],
        [],
    ]
    assert [list(m.target_assignment.topic_partitions) for m in after.members] == [
        [tps(a, [0, 1, 2, 3], "da")],
        [],
    ]


def test_describe_of_an_offsets_only_group_is_not_a_consumer_group(
    manual_server: ServerProcess,
) -> None:
    """Kafka holds a simple group (offsets only) as a classic group: ConsumerGroupDescribe
    answers GROUP_ID_NOT_FOUND with its consumerGroup lookup's message for another type."""
    s = manual_server
    s.create_topic("simple-desc", 1)
    admin_commit(s, "g-simple-desc", "simple-desc", 0, 1)
    assert s.describe("g-simple-desc") == cg.ConsumerGroupDescribeResponse(
        groups=[
            Described(
                group_id="g-simple-desc",
                error_code=69,
                error_message="Group g-simple-desc is not a consumer group.",
                authorized_operations=NOT_REQUESTED,
            )
        ]
    )


# ---------------------------------------------------------------- list and delete


def test_list_groups_filters_are_case_insensitive(start_server, tmp_path: Path) -> None:
    s: ServerProcess = start_server(tmp_path / "data")
    t = s.create_topic("lt", 2)
    s.heartbeat(**join_request("g-stable", ["lt"], member_id="A"))
    s.heartbeat(
        group_id="g-stable", member_id="A", member_epoch=1, topic_partitions=owned((t, [0, 1]))
    )
    s.heartbeat(**join_request("g-empty", ["lt"], member_id="B"))
    s.heartbeat(group_id="g-empty", member_id="B", member_epoch=-1)
    admin_commit(s, "g-simple", "lt", 0, 5)
    stable = Listed(
        group_id="g-stable", protocol_type="consumer", group_state="Stable", group_type="consumer"
    )
    empty = Listed(
        group_id="g-empty", protocol_type="consumer", group_state="Empty", group_type="consumer"
    )
    simple = Listed(
        group_id="g-simple", protocol_type="", group_state="Empty", group_type="classic"
    )
    assert list_groups(s) == admin_pb2.ListGroupsResponse(groups=[empty, simple, stable])
    assert list_groups(s, states=("STABLE",)) == admin_pb2.ListGroupsResponse(groups=[stable])
    assert list_groups(s, states=("empty", "Dead")) == admin_pb2.ListGroupsResponse(
        groups=[empty, simple]
    )
    assert list_groups(s, types=("Consumer",)) == admin_pb2.ListGroupsResponse(
        groups=[empty, stable]
    )
    assert list_groups(s, types=("CLASSIC",)) == admin_pb2.ListGroupsResponse(groups=[simple])
    assert list_groups(s, states=("Empty",), types=("consumer",)) == admin_pb2.ListGroupsResponse(
        groups=[empty]
    )
    assert list_groups(s, types=("share",)) == admin_pb2.ListGroupsResponse()
    assert list_groups(s, states=("Reconciling",)) == admin_pb2.ListGroupsResponse()
    assert s.stop() == 0


def test_delete_groups(manual_server: ServerProcess) -> None:
    s = manual_server
    t = s.create_topic("dg", 1)
    join = s.heartbeat(**join_request("g-dg-busy", ["dg"], member_id="A"))
    s.heartbeat(**join_request("g-dg-empty", ["dg"], member_id="B"))
    s.heartbeat(group_id="g-dg-empty", member_id="B", member_epoch=-1)
    admin_commit(s, "g-dg-empty", "dg", 0, 7)
    admin_commit(s, "g-dg-simple", "dg", 0, 8)
    assert alter(s, "g-dg-empty", set_(INTERVAL, "7000")).responses[0].error_code == 0
    R = admin_pb2.DeleteGroupsResponse.DeletableGroupResult
    resp = s.admin.DeleteGroups(
        admin_pb2.DeleteGroupsRequest(
            group_ids=["g-dg-busy", "g-dg-empty", "g-dg-nope", "", "g-dg-simple"]
        ),
        timeout=10,
    )
    assert resp == admin_pb2.DeleteGroupsResponse(
        results=[
            R(
                group_id="g-dg-busy",
                error_code=68,
                error_message="Group g-dg-busy is not empty (1 members).",
            ),
            R(group_id="g-dg-empty"),
            R(group_id="g-dg-nope", error_code=69, error_message="Group g-dg-nope not found."),
            R(group_id="", error_code=24, error_message="Group id can't be empty."),
            R(group_id="g-dg-simple"),
        ]
    )
    assert [g.group_id for g in list_groups(s).groups if g.group_id.startswith("g-dg")] == [
        "g-dg-busy"
    ]
    assert s.describe("g-dg-empty").groups[0].error_code == 69
    fetched = offsets_pb2_grpc.OffsetServiceStub(s.channel).OffsetFetch(
        offsets_pb2.OffsetFetchRequest(
            groups=[
                offsets_pb2.OffsetFetchRequest.Group(group_id="g-dg-empty"),
                offsets_pb2.OffsetFetchRequest.Group(group_id="g-dg-simple"),
            ]
        ),
        timeout=10,
    )
    assert fetched == offsets_pb2.OffsetFetchResponse(
        groups=[
            offsets_pb2.OffsetFetchResponse.Group(group_id="g-dg-empty"),
            offsets_pb2.OffsetFetchResponse.Group(group_id="g-dg-simple"),
        ]
    )
    # A deleted consumer group starts over: a new uid, epoch 1, but its config overrides are
    # the cluster's and outlive it (KIP-848, Kafka).
    again = s.heartbeat(**join_request("g-dg-empty", ["dg"], member_id="C"))
    assert again.member_epoch == 1 and join.member_epoch == 1
    assert again.heartbeat_interval_ms == 7000
    assert (
        s.heartbeat(
            group_id="g-dg-busy", member_id="A", member_epoch=1, topic_partitions=owned((t, [0]))
        ).error_code
        == 0
    )


# ---------------------------------------------------------------- configs


def alter(
    s: ServerProcess,
    group: str,
    *configs: Alter.AlterableConfig,
    resource_type: int = 16,
    validate_only: bool = False,
) -> admin_pb2.IncrementalAlterConfigsResponse:
    return s.admin.IncrementalAlterConfigs(
        Alter(
            resources=[
                Alter.Resource(
                    resource_type=resource_type, resource_name=group, configs=list(configs)
                )
            ],
            validate_only=validate_only,
        ),
        timeout=10,
    )


def set_(name: str, value: str) -> Alter.AlterableConfig:
    return Alter.AlterableConfig(name=name, config_operation=0, value=value)


def describe_configs(
    s: ServerProcess, group: str, resource_type: int = 16, **kw: bool
) -> admin_pb2.DescribeConfigsResponse:
    return s.admin.DescribeConfigs(
        Desc(resources=[Desc.Resource(resource_type=resource_type, resource_name=group)], **kw),
        timeout=10,
    )


def test_group_configs_take_effect_on_the_next_heartbeat_and_persist(
    start_server, tmp_path: Path
) -> None:
    s: ServerProcess = start_server(tmp_path / "data")
    t = s.create_topic("cfg", 1)
    s.heartbeat(**join_request("g-cfg", ["cfg"], member_id="A"))
    assert alter(
        s, "g-cfg", set_(INTERVAL, "7000"), set_(SESSION, "50000")
    ) == admin_pb2.IncrementalAlterConfigsResponse(
        responses=[AlterResult(resource_type=16, resource_name="g-cfg")]
    )
    beat = s.heartbeat(
        group_id="g-cfg", member_id="A", member_epoch=1, topic_partitions=owned((t, [0]))
    )
    assert (beat.error_code, beat.heartbeat_interval_ms) == (0, 7000)
    # The new session timeout (50 s) is armed by that heartbeat: alive at 45 s, fenced at 50 s.
    s.advance(49_999)
    assert len(s.describe("g-cfg").groups[0].members) == 1
    s.advance(1)
    assert list(s.describe("g-cfg").groups[0].members) == []
    s.stop()
    again: ServerProcess = start_server(tmp_path / "data")
    assert describe_configs(
        again, "g-cfg", include_synonyms=True
    ) == admin_pb2.DescribeConfigsResponse(
        results=[
            DescResult(
                resource_type=16,
                resource_name="g-cfg",
                configs=[
                    Config(
                        name=SESSION,
                        value="50000",
                        config_source=8,
                        config_type=3,
                        synonyms=[Synonym(name=SESSION, value="50000", source=8)],
                    ),
                    Config(
                        name=INTERVAL,
                        value="7000",
                        config_source=8,
                        config_type=3,
                        synonyms=[Synonym(name=INTERVAL, value="7000", source=8)],
                    ),
                    Config(name=ASSIGNMENT, value="0", config_source=5, config_type=3),
                ],
            )
        ]
    )
    # Deleting an override reverts to the server's value, again from the next heartbeat.
    assert (
        alter(again, "g-cfg", Alter.AlterableConfig(name=INTERVAL, config_operation=1))
        .responses[0]
        .error_code
        == 0
    )
    rejoin = again.heartbeat(**join_request("g-cfg", ["cfg"], member_id="B"))
    assert rejoin.heartbeat_interval_ms == 5000
    assert again.stop() == 0


def test_config_resource_types_validation_and_documentation(manual_server: ServerProcess) -> None:
    s = manual_server
    # Kafka's own number for GROUP (32) is accepted and answered as asked.
    assert alter(
        s, "g-cfg32", set_(INTERVAL, "6000"), resource_type=32
    ) == admin_pb2.IncrementalAlterConfigsResponse(
        responses=[AlterResult(resource_type=32, resource_name="g-cfg32")]
    )
    docs = describe_configs(s, "g-cfg32", resource_type=32, include_documentation=True)
    assert docs == admin_pb2.DescribeConfigsResponse(
        results=[
            DescResult(
                resource_type=32,
                resource_name="g-cfg32",
                configs=[
                    Config(
                        name=SESSION,
                        value="45000",
                        config_source=5,
                        config_type=3,
                        documentation="The timeout to detect client failures when using the consumer group protocol.",
                    ),
                    Config(
                        name=INTERVAL,
                        value="6000",
                        config_source=8,
                        config_type=3,
                        documentation="The heartbeat interval given to the members of a consumer group.",
                    ),
                    Config(name=ASSIGNMENT, value="0", config_source=5, config_type=3),
                ],
            )
        ]
    )
    only = s.admin.DescribeConfigs(
        Desc(
            resources=[
                Desc.Resource(
                    resource_type=16,
                    resource_name="g-cfg32",
                    configuration_keys=Desc.ConfigurationKeys(names=[INTERVAL, "no.such.config"]),
                )
            ]
        ),
        timeout=10,
    )
    assert only == admin_pb2.DescribeConfigsResponse(
        results=[
            DescResult(
                resource_type=16,
                resource_name="g-cfg32",
                configs=[Config(name=INTERVAL, value="6000", config_source=8, config_type=3)],
            )
        ]
    )
    wrong = "Only GROUP resources (16, or Kafka's 32) are supported."
    assert describe_configs(s, "t", resource_type=2) == admin_pb2.DescribeConfigsResponse(
        results=[DescResult(error_code=42, error_message=wrong, resource_type=2, resource_name="t")]
    )
    assert describe_configs(s, "") == admin_pb2.DescribeConfigsResponse(
        results=[
            DescResult(
                error_code=42, error_message="Group name must not be empty.", resource_type=16
            )
        ]
    )
    twice = s.admin.IncrementalAlterConfigs(
        Alter(
            resources=[
                Alter.Resource(
                    resource_type=16, resource_name="g-twice", configs=[set_(INTERVAL, "6000")]
                ),
                Alter.Resource(
                    resource_type=16, resource_name="g-twice", configs=[set_(INTERVAL, "7000")]
                ),
                Alter.Resource(
                    resource_type=16,
                    resource_name="g-dup",
                    configs=[set_(INTERVAL, "6000"), set_(INTERVAL, "7000")],
                ),
                Alter.Resource(
                    resource_type=16, resource_name="g-bad", configs=[set_(SESSION, "1")]
                ),
                Alter.Resource(
                    resource_type=16,
                    resource_name="g-unknown",
                    configs=[set_("session.timeout.ms", "1")],
                ),
                Alter.Resource(
                    resource_type=16,
                    resource_name="g-append",
                    configs=[Alter.AlterableConfig(name=INTERVAL, config_operation=2, value="1")],
                ),
            ]
        ),
        timeout=10,
    )
    assert twice == admin_pb2.IncrementalAlterConfigsResponse(
        responses=[
            AlterResult(
                error_code=42,
                error_message="Each resource must appear at most once.",
                resource_type=16,
                resource_name="g-twice",
            ),
            AlterResult(
                error_code=42,
                error_message="Each resource must appear at most once.",
                resource_type=16,
                resource_name="g-twice",
            ),
            AlterResult(
                error_code=42,
                error_message="Error due to duplicate config keys.",
                resource_type=16,
                resource_name="g-dup",
            ),
            AlterResult(
                error_code=40,
                error_message=f"invalid value 1 for '{SESSION}': must be between 45000 and 60000",
                resource_type=16,
                resource_name="g-bad",
            ),
            AlterResult(
                error_code=40,
                error_message=(
                    "unknown group config 'session.timeout.ms' "
                    f"(supported: {SESSION}, {INTERVAL}, {ASSIGNMENT})"
                ),
                resource_type=16,
                resource_name="g-unknown",
            ),
            AlterResult(
                error_code=42,
                error_message=f"Config {INTERVAL}: operation 2 is not supported for GROUP configs.",
                resource_type=16,
                resource_name="g-append",
            ),
        ]
    )
    # validate_only changes nothing.
    assert (
        alter(s, "g-validate", set_(INTERVAL, "8000"), validate_only=True).responses[0].error_code
        == 0
    )
    assert [c.config_source for c in describe_configs(s, "g-validate").results[0].configs] == [
        5,
        5,
        5,
    ]
