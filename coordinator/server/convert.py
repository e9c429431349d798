"""Protobuf <-> core dataclasses: the one place where wire types meet the core.

Rules: absent proto3 ``optional`` scalars map to None (or -1 where Kafka's default is -1);
wrapper lists (``TopicNames``, ``TopicPartitionsList``) map absent -> None and present-but-empty
-> empty. Topic ids travel as 16 raw bytes and are base64url text in the core; bytes that are
not 16 long raise :class:`InvalidRequestError` (answered in-band as INVALID_REQUEST).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from kip848.v1 import admin_pb2, common_pb2, consumer_group_pb2

from coordinator.core.commands import ConsumerGroupHeartbeat, ConsumerGroupHeartbeatResponse
from coordinator.core.errors import ErrorCode, InvalidRequestError
from coordinator.core.model import (
    Assignment,
    make_assignment,
    topic_id_from_bytes,
    topic_id_to_bytes,
)
from coordinator.core.shard import GroupDescription
from coordinator.core.topics import NewTopic, TopicResult

NameOf = Callable[[str], str]


def _no_name(_topic_id: str) -> str:
    return ""


def topic_id_in(raw: bytes) -> str:
    try:
        return topic_id_from_bytes(raw)
    except ValueError:
        raise InvalidRequestError(f"A topic id has 16 bytes, got {len(raw)}.") from None


def assignment_from_proto(items: Iterable[common_pb2.TopicPartitions]) -> Assignment:
    return make_assignment((topic_id_in(tp.topic_id), tp.partitions) for tp in items)


def assignment_to_proto(assignment: Assignment, name_of: NameOf = _no_name) -> list[common_pb2.TopicPartitions]:
    return [
        common_pb2.TopicPartitions(
            topic_id=topic_id_to_bytes(topic_id),
            partitions=sorted(assignment[topic_id]),
            topic_name=name_of(topic_id),
        )
        for topic_id in sorted(assignment)
    ]


def heartbeat_from_proto(
    req: consumer_group_pb2.ConsumerGroupHeartbeatRequest, *, client_id: str = "", client_host: str = ""
) -> ConsumerGroupHeartbeat:
    has = req.HasField
    return ConsumerGroupHeartbeat(
        group_id=req.group_id,
        member_id=req.member_id,
        member_epoch=req.member_epoch,
        instance_id=req.instance_id if has("instance_id") else None,
        rack_id=req.rack_id if has("rack_id") else None,
        rebalance_timeout_ms=req.rebalance_timeout_ms if has("rebalance_timeout_ms") else -1,
        subscribed_topic_names=(
            tuple(req.subscribed_topic_names.names) if has("subscribed_topic_names") else None
        ),
        subscribed_topic_regex=req.subscribed_topic_regex if has("subscribed_topic_regex") else None,
        server_assignor=req.server_assignor if has("server_assignor") else None,
        topic_partitions=(
            assignment_from_proto(req.topic_partitions.items) if has("topic_partitions") else None
        ),
        client_id=client_id,
        client_host=client_host,
    )


def heartbeat_to_proto(
    resp: ConsumerGroupHeartbeatResponse, name_of: NameOf = _no_name
) -> consumer_group_pb2.ConsumerGroupHeartbeatResponse:
    out = consumer_group_pb2.ConsumerGroupHeartbeatResponse(
        error_code=0,
        member_epoch=resp.member_epoch,
        heartbeat_interval_ms=resp.heartbeat_interval_ms,
        should_compute_assignment=resp.should_compute_assignment,
    )
    if resp.member_id is not None:
        out.member_id = resp.member_id
    if resp.assignment is not None:
        out.assignment.assigned_topic_partitions.extend(assignment_to_proto(resp.assignment.assigned, name_of))
        out.assignment.pending_topic_partitions.extend(assignment_to_proto(resp.assignment.pending, name_of))
    return out


def heartbeat_error(code: ErrorCode, message: str | None) -> consumer_group_pb2.ConsumerGroupHeartbeatResponse:
    out = consumer_group_pb2.ConsumerGroupHeartbeatResponse(error_code=int(code))
    if message is not None:
        out.error_message = message
    return out


_Described = consumer_group_pb2.ConsumerGroupDescribeResponse.DescribedGroup
_Member = consumer_group_pb2.ConsumerGroupDescribeResponse.Member
_MemberAssignment = consumer_group_pb2.ConsumerGroupDescribeResponse.MemberAssignment


def described_group_to_proto(desc: GroupDescription, name_of: NameOf = _no_name) -> _Described:
    members = []
    for m in desc.members:
        pm = _Member(
            member_id=m.member_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            assignment=_MemberAssignment(topic_partitions=assignment_to_proto(m.assignment, name_of)),
            target_assignment=_MemberAssignment(topic_partitions=assignment_to_proto(m.target_assignment, name_of)),
            member_type=m.member_type,
        )
        if m.instance_id is not None:
            pm.instance_id = m.instance_id
        if m.rack_id is not None:
            pm.rack_id = m.rack_id
        if m.subscribed_topic_regex is not None:
            pm.subscribed_topic_regex = m.subscribed_topic_regex
        members.append(pm)
    return _Described(
        error_code=0,
        group_id=desc.group_id,
        group_uid=desc.group_uid,
        group_state=desc.group_state,
        group_epoch=desc.group_epoch,
        assignment_epoch=desc.assignment_epoch,
        assignor_name=desc.assignor_name,
        members=members,
        authorized_operations=-2147483648,  # Kafka's "not requested" sentinel (Integer.MIN_VALUE)
    )


def described_group_error(group_id: str, code: ErrorCode, message: str | None) -> _Described:
    out = _Described(group_id=group_id, error_code=int(code), authorized_operations=-2147483648)
    if message is not None:
        out.error_message = message
    return out


# ---------------------------------------------------------------- topic registry


def new_topics_from_proto(req: admin_pb2.CreateTopicsRequest) -> list[NewTopic]:
    return [
        NewTopic(
            name=t.name,
            num_partitions=t.num_partitions,
            topic_id=topic_id_in(t.topic_id) if t.HasField("topic_id") else None,
        )
        for t in req.topics
    ]


def _tid(result: TopicResult) -> bytes:
    return topic_id_to_bytes(result.topic_id)


def create_topics_to_proto(results: Iterable[TopicResult]) -> admin_pb2.CreateTopicsResponse:
    out = admin_pb2.CreateTopicsResponse(error_code=0)
    for r in results:
        item = out.topics.add(
            name=r.name, topic_id=_tid(r), error_code=int(r.error_code), num_partitions=r.num_partitions
        )
        if r.error_message is not None:
            item.error_message = r.error_message
    return out


def create_partitions_to_proto(results: Iterable[TopicResult]) -> admin_pb2.CreatePartitionsResponse:
    out = admin_pb2.CreatePartitionsResponse(error_code=0)
    for r in results:
        item = out.results.add(name=r.name, error_code=int(r.error_code))
        if r.error_message is not None:
            item.error_message = r.error_message
    return out


def delete_topics_to_proto(results: Iterable[TopicResult]) -> admin_pb2.DeleteTopicsResponse:
    out = admin_pb2.DeleteTopicsResponse(error_code=0)
    for r in results:
        item = out.results.add(name=r.name, topic_id=_tid(r), error_code=int(r.error_code))
        if r.error_message is not None:
            item.error_message = r.error_message
    return out


def list_topics_to_proto(results: Iterable[TopicResult]) -> admin_pb2.ListTopicsResponse:
    out = admin_pb2.ListTopicsResponse(error_code=0)
    for r in results:
        out.topics.add(name=r.name, topic_id=_tid(r), num_partitions=r.num_partitions)
    return out


# ---------------------------------------------------------------- group configs

GROUP_RESOURCE = 16
CONFIG_SOURCE_DYNAMIC_GROUP = 8  # Kafka's DescribeConfigsResponse.ConfigSource.GROUP_CONFIG
CONFIG_SOURCE_DEFAULT = 5  # DEFAULT_CONFIG
CONFIG_TYPE_INT = 3
OP_SET, OP_DELETE = 0, 1


def describe_config_result(
    name: str, configs: Mapping[str, str], overrides: Mapping[str, str], keys: Iterable[str] | None
) -> admin_pb2.DescribeConfigsResponse.Result:
    result = admin_pb2.DescribeConfigsResponse.Result(error_code=0, resource_type=GROUP_RESOURCE, resource_name=name)
    wanted = list(configs) if keys is None else [k for k in keys if k in configs]
    for key in wanted:
        result.configs.add(
            name=key,
            value=configs[key],
            read_only=False,
            config_source=CONFIG_SOURCE_DYNAMIC_GROUP if key in overrides else CONFIG_SOURCE_DEFAULT,
            is_sensitive=False,
            config_type=CONFIG_TYPE_INT,
        )
    return result
