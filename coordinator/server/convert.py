"""Protobuf <-> the service layer's dataclasses: the one place where gRPC's wire types meet
the core (``service.py`` defines each RPC; ``services.py`` runs them over gRPC).

Rules: absent proto3 ``optional`` scalars map to None (or -1 where Kafka's default is -1);
wrapper lists (``TopicNames``, ``TopicPartitionsList``) map absent -> None and present-but-empty
-> empty. Topic ids travel as 16 raw bytes and are base64url text in the core; bytes that are
not 16 long raise :class:`InvalidRequestError` (answered in-band as INVALID_REQUEST).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from coordinator.core.commands import ConsumerGroupHeartbeat, ConsumerGroupHeartbeatResponse
from coordinator.core.errors import CoordinatorError, ErrorCode, InvalidRequestError
from coordinator.core.model import (
    ZERO_TOPIC_ID,
    Assignment,
    make_assignment,
    topic_id_from_bytes,
    topic_id_to_bytes,
)
from coordinator.core.offsets import (
    ListedGroup,
    OffsetCommit,
    OffsetCommitPartition,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetDeleteResponse,
    OffsetFetchGroup,
    OffsetFetchGroupResponse,
    OffsetFetchTopic,
)
from coordinator.core.shard import GroupDescription
from coordinator.core.topics import NewTopic, TopicResult
from kip848.v1 import admin_pb2, classic_group_pb2, common_pb2, consumer_group_pb2, offsets_pb2
from legacy_bridge import messages as bridge

from .api import (
    AlterConfig,
    AlterResource,
    AlterResult,
    ConfigResource,
    ConfigResult,
    Coordinator,
    DescribeConfigs,
    DescribedConsumerGroup,
    GroupError,
    IncrementalAlterConfigs,
    Reply,
    WatchEvent,
)
from .log_offsets import ListOffsets, LogOffset, OffsetQuery

M = TypeVar("M")
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
"""Kafka's "not requested" sentinel for authorized operations (Integer.MIN_VALUE)."""

NameOf = Callable[[str], str]


def with_error(message_type: type[M], code: ErrorCode, text: str | None, **fields: Any) -> M:
    """A response of ``message_type`` carrying a top-level error."""
    make: Any = message_type
    out = make(error_code=int(code), **fields)
    if text is not None:
        out.error_message = text
    return out


def _top(message_type: type[M], reply: Reply[Any]) -> M:
    return with_error(message_type, reply.error_code, reply.error_message)


def reply_to_proto(message_type: type[M], reply: Reply[Any], encode: Callable[[Any], M]) -> M:
    """``encode(reply.value)``, or, for a top-level error, the response type with that error
    only (gRPC responses all have a top-level error)."""
    if reply.value is None or reply.error_code:
        return _top(message_type, reply)
    return encode(reply.value)


def _no_name(_topic_id: str) -> str:
    return ""


def topic_id_in(raw: bytes) -> str:
    try:
        return topic_id_from_bytes(raw)
    except ValueError:
        raise InvalidRequestError(f"A topic id has 16 bytes, got {len(raw)}.") from None


def assignment_from_proto(items: Iterable[common_pb2.TopicPartitions]) -> Assignment:
    return make_assignment((topic_id_in(tp.topic_id), tp.partitions) for tp in items)


def assignment_to_proto(
    assignment: Assignment, name_of: NameOf = _no_name
) -> list[common_pb2.TopicPartitions]:
    return [
        common_pb2.TopicPartitions(
            topic_id=topic_id_to_bytes(topic_id),
            partitions=sorted(assignment[topic_id]),
            topic_name=name_of(topic_id),
        )
        for topic_id in sorted(assignment)
    ]


def heartbeat_from_proto(
    req: consumer_group_pb2.ConsumerGroupHeartbeatRequest,
    *,
    client_id: str = "",
    client_host: str = "",
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
        subscribed_topic_regex=req.subscribed_topic_regex
        if has("subscribed_topic_regex")
        else None,
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
        out.assignment.assigned_topic_partitions.extend(
            assignment_to_proto(resp.assignment.assigned, name_of)
        )
        out.assignment.pending_topic_partitions.extend(
            assignment_to_proto(resp.assignment.pending, name_of)
        )
    return out


def heartbeat_error(
    code: ErrorCode, message: str | None
) -> consumer_group_pb2.ConsumerGroupHeartbeatResponse:
    out = consumer_group_pb2.ConsumerGroupHeartbeatResponse(error_code=int(code))
    if message is not None:
        out.error_message = message
    return out


_Described = consumer_group_pb2.ConsumerGroupDescribeResponse.DescribedGroup
_Member = consumer_group_pb2.ConsumerGroupDescribeResponse.Member
_MemberAssignment = consumer_group_pb2.ConsumerGroupDescribeResponse.MemberAssignment


def _known_topics(assignment: Assignment, name_of: NameOf) -> list[common_pb2.TopicPartitions]:
    """Describe shows topics by id and name and omits topics that no longer exist (Kafka's
    ConsumerGroup.asDescribedGroup)."""
    return [tp for tp in assignment_to_proto(assignment, name_of) if tp.topic_name]


def described_group_to_proto(desc: GroupDescription, name_of: NameOf = _no_name) -> _Described:
    members = []
    for m in desc.members:
        pm = _Member(
            member_id=m.member_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            assignment=_MemberAssignment(topic_partitions=_known_topics(m.assignment, name_of)),
            target_assignment=_MemberAssignment(
                topic_partitions=_known_topics(m.target_assignment, name_of)
            ),
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
        authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def described_group_error(group_id: str, code: ErrorCode, message: str | None) -> _Described:
    out = _Described(
        group_id=group_id, error_code=int(code), authorized_operations=AUTHORIZED_OPERATIONS_OMITTED
    )
    if message is not None:
        out.error_message = message
    return out


# ---------------------------------------------------------------- topic registry


def consumer_group_describe_to_proto(
    groups: Iterable[DescribedConsumerGroup], name_of: NameOf = _no_name
) -> consumer_group_pb2.ConsumerGroupDescribeResponse:
    out = consumer_group_pb2.ConsumerGroupDescribeResponse(error_code=0)
    for g in groups:
        out.groups.append(
            described_group_to_proto(g.description, name_of)
            if g.description is not None
            else described_group_error(g.group_id, g.error_code, g.error_message)
        )
    return out


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
            name=r.name,
            topic_id=_tid(r),
            error_code=int(r.error_code),
            num_partitions=r.num_partitions,
        )
        if r.error_message is not None:
            item.error_message = r.error_message
    return out


def create_partitions_to_proto(
    results: Iterable[TopicResult],
) -> admin_pb2.CreatePartitionsResponse:
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


# ---------------------------------------------------------------- log offsets


def list_offsets_from_proto(req: admin_pb2.ListOffsetsRequest) -> ListOffsets:
    return ListOffsets(
        isolation_level=req.isolation_level,
        queries=tuple(
            OffsetQuery(topic=t.name, partition=p.partition_index, timestamp=p.timestamp)
            for t in req.topics
            for p in t.partitions
        ),
    )


def list_offsets_to_proto(answers: Iterable[LogOffset]) -> admin_pb2.ListOffsetsResponse:
    """One topic entry per run of answers of the same topic, in the request's order."""
    out = admin_pb2.ListOffsetsResponse(error_code=0)
    topic = None
    for a in answers:
        if topic is None or topic.name != a.topic:
            topic = out.topics.add(name=a.topic)
        item = topic.partitions.add(
            partition_index=a.partition,
            error_code=a.error_code,
            timestamp=a.timestamp,
            offset=a.offset,
            leader_epoch=a.leader_epoch,
        )
        if a.error_message is not None:
            item.error_message = a.error_message
    return out


# ---------------------------------------------------------------- group configs


def describe_configs_from_proto(req: admin_pb2.DescribeConfigsRequest) -> DescribeConfigs:
    return DescribeConfigs(
        resources=tuple(
            ConfigResource(
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                keys=tuple(r.configuration_keys.names)
                if r.HasField("configuration_keys")
                else None,
            )
            for r in req.resources
        ),
        include_synonyms=req.include_synonyms,
        include_documentation=req.include_documentation,
    )


def describe_configs_to_proto(
    reply: Reply[list[ConfigResult]],
) -> admin_pb2.DescribeConfigsResponse:
    out = _top(admin_pb2.DescribeConfigsResponse, reply)
    for r in reply.value or ():
        result = out.results.add(
            error_code=int(r.error_code),
            resource_type=r.resource_type,
            resource_name=r.resource_name,
        )
        if r.error_message is not None:
            result.error_message = r.error_message
        for c in r.configs:
            item = result.configs.add(
                name=c.name,
                value=c.value,
                read_only=c.read_only,
                config_source=c.source,
                is_sensitive=c.is_sensitive,
                config_type=c.config_type,
            )
            for syn in c.synonyms:
                item.synonyms.add(name=syn.name, value=syn.value, source=syn.source)
            if c.documentation is not None:
                item.documentation = c.documentation
    return out


def alter_configs_from_proto(
    req: admin_pb2.IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigs:
    return IncrementalAlterConfigs(
        resources=tuple(
            AlterResource(
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                configs=tuple(
                    AlterConfig(
                        name=c.name,
                        operation=c.config_operation,
                        value=c.value if c.HasField("value") else None,
                    )
                    for c in r.configs
                ),
            )
            for r in req.resources
        ),
        validate_only=req.validate_only,
    )


def alter_configs_to_proto(
    reply: Reply[list[AlterResult]],
) -> admin_pb2.IncrementalAlterConfigsResponse:
    out = _top(admin_pb2.IncrementalAlterConfigsResponse, reply)
    for r in reply.value or ():
        item = out.responses.add(
            error_code=int(r.error_code),
            resource_type=r.resource_type,
            resource_name=r.resource_name,
        )
        if r.error_message is not None:
            item.error_message = r.error_message
    return out


# ---------------------------------------------------------------- groups


def list_groups_to_proto(groups: Iterable[ListedGroup]) -> admin_pb2.ListGroupsResponse:
    out = admin_pb2.ListGroupsResponse(error_code=0)
    for g in groups:
        out.groups.add(
            group_id=g.group_id,
            protocol_type=g.protocol_type,
            group_state=g.group_state,
            group_type=g.group_type,
        )
    return out


def delete_groups_to_proto(
    results: Iterable[tuple[str, ErrorCode, str | None]],
) -> admin_pb2.DeleteGroupsResponse:
    out = admin_pb2.DeleteGroupsResponse(error_code=0)
    for group_id, code, message in results:
        item = out.results.add(group_id=group_id, error_code=int(code))
        if message is not None:
            item.error_message = message
    return out


# ---------------------------------------------------------------- offsets


def _topic_id_in_or_zero(raw: bytes) -> str:
    """Empty (or all zero) bytes = no id."""
    return topic_id_in(raw) if raw else ZERO_TOPIC_ID


def _topic_id_out(topic_id: str) -> bytes:
    return b"" if topic_id == ZERO_TOPIC_ID else topic_id_to_bytes(topic_id)


def offset_commit_from_proto(req: offsets_pb2.OffsetCommitRequest) -> OffsetCommit:
    return OffsetCommit(
        group_id=req.group_id,
        generation_id_or_member_epoch=(
            req.generation_id_or_member_epoch
            if req.HasField("generation_id_or_member_epoch")
            else -1
        ),
        member_id=req.member_id,
        group_instance_id=req.group_instance_id if req.HasField("group_instance_id") else None,
        topics=tuple(
            OffsetCommitTopic(
                name=t.name,
                topic_id=_topic_id_in_or_zero(t.topic_id),
                partitions=tuple(
                    OffsetCommitPartition(
                        partition_index=p.partition_index,
                        committed_offset=p.committed_offset,
                        committed_leader_epoch=(
                            p.committed_leader_epoch if p.HasField("committed_leader_epoch") else -1
                        ),
                        committed_metadata=p.committed_metadata
                        if p.HasField("committed_metadata")
                        else None,
                    )
                    for p in t.partitions
                ),
            )
            for t in req.topics
        ),
    )


def offset_commit_to_proto(resp: OffsetCommitResponse) -> offsets_pb2.OffsetCommitResponse:
    out = offsets_pb2.OffsetCommitResponse(error_code=0)
    for t in resp.topics:
        topic = out.topics.add(name=t.name, topic_id=_topic_id_out(t.topic_id))
        for p in t.partitions:
            item = topic.partitions.add(
                partition_index=p.partition_index, error_code=int(p.error_code)
            )
            if p.error_message is not None:
                item.error_message = p.error_message
    return out


def offset_commit_error(
    req: offsets_pb2.OffsetCommitRequest, code: ErrorCode, message: str | None
) -> offsets_pb2.OffsetCommitResponse:
    """A group-level error on every partition of the request, as Kafka answers OffsetCommit
    (built from the request itself, so it also serves a request that does not convert)."""
    out = offsets_pb2.OffsetCommitResponse(error_code=0)
    for t in req.topics:
        topic = out.topics.add(name=t.name, topic_id=t.topic_id)
        for p in t.partitions:
            item = topic.partitions.add(partition_index=p.partition_index, error_code=int(code))
            if message is not None:
                item.error_message = message
    return out


def offset_fetch_group_from_proto(g: offsets_pb2.OffsetFetchRequest.Group) -> OffsetFetchGroup:
    return OffsetFetchGroup(
        group_id=g.group_id,
        member_id=g.member_id if g.HasField("member_id") else None,
        member_epoch=g.member_epoch if g.HasField("member_epoch") else -1,
        topics=(
            tuple(
                OffsetFetchTopic(
                    name=t.name,
                    topic_id=_topic_id_in_or_zero(t.topic_id),
                    partition_indexes=tuple(t.partition_indexes),
                )
                for t in g.topics.items
            )
            if g.HasField("topics")
            else None
        ),
    )


def offset_fetch_group_to_proto(
    resp: OffsetFetchGroupResponse,
) -> offsets_pb2.OffsetFetchResponse.Group:
    out = offsets_pb2.OffsetFetchResponse.Group(
        group_id=resp.group_id, error_code=int(resp.error_code)
    )
    if resp.error_message is not None:
        out.error_message = resp.error_message
    for t in resp.topics:
        topic = out.topics.add(name=t.name, topic_id=_topic_id_out(t.topic_id))
        for p in t.partitions:
            item = topic.partitions.add(
                partition_index=p.partition_index,
                committed_offset=p.committed_offset,
                committed_leader_epoch=p.committed_leader_epoch,
                error_code=int(p.error_code),
            )
            if p.metadata is not None:
                item.metadata = p.metadata
    return out


def offset_fetch_group_error(
    group_id: str, code: ErrorCode, message: str | None
) -> offsets_pb2.OffsetFetchResponse.Group:
    out = offsets_pb2.OffsetFetchResponse.Group(group_id=group_id, error_code=int(code))
    if message is not None:
        out.error_message = message
    return out


def offset_delete_to_proto(resp: OffsetDeleteResponse) -> offsets_pb2.OffsetDeleteResponse:
    out = offsets_pb2.OffsetDeleteResponse(error_code=0)
    for t in resp.topics:
        topic = out.topics.add(name=t.name)
        for p in t.partitions:
            item = topic.partitions.add(
                partition_index=p.partition_index, error_code=int(p.error_code)
            )
            if p.error_message is not None:
                item.error_message = p.error_message
    return out


def offset_fetch_from_proto(
    req: offsets_pb2.OffsetFetchRequest,
) -> list[OffsetFetchGroup | GroupError]:
    """A group whose part of the request does not convert (a bad topic id) becomes its error."""
    out: list[OffsetFetchGroup | GroupError] = []
    for g in req.groups:
        try:
            out.append(offset_fetch_group_from_proto(g))
        except CoordinatorError as exc:
            out.append(
                GroupError(group_id=g.group_id, error_code=exc.code, error_message=exc.message)
            )
    return out


def offset_fetch_to_proto(
    groups: Iterable[OffsetFetchGroupResponse],
) -> offsets_pb2.OffsetFetchResponse:
    out = offsets_pb2.OffsetFetchResponse(error_code=0)
    for g in groups:
        out.groups.append(offset_fetch_group_to_proto(g))
    return out


# ---------------------------------------------------------------- classic groups (the bridge)


def _opt(msg: Any, field: str) -> Any:
    return getattr(msg, field) if msg.HasField(field) else None


def find_coordinator_from_proto(
    req: classic_group_pb2.FindCoordinatorRequest,
) -> tuple[int, list[str]]:
    return req.key_type, list(req.coordinator_keys)


def find_coordinator_to_proto(
    reply: Reply[list[Coordinator]],
) -> classic_group_pb2.FindCoordinatorResponse:
    out = _top(classic_group_pb2.FindCoordinatorResponse, reply)
    for c in reply.value or ():
        item = out.coordinators.add(
            key=c.key, node_id=c.node_id, host=c.host, port=c.port, error_code=int(c.error_code)
        )
        if c.error_message is not None:
            item.error_message = c.error_message
    return out


def join_from_proto(
    req: classic_group_pb2.JoinGroupRequest, *, client_id: str = "", client_host: str = ""
) -> bridge.JoinGroup:
    return bridge.JoinGroup(
        group_id=req.group_id,
        session_timeout_ms=req.session_timeout_ms,
        rebalance_timeout_ms=req.rebalance_timeout_ms
        if req.HasField("rebalance_timeout_ms")
        else -1,
        member_id=req.member_id,
        group_instance_id=_opt(req, "group_instance_id"),
        protocol_type=req.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in req.protocols),
        reason=_opt(req, "reason"),
        client_id=client_id,
        client_host=client_host,
    )


def join_to_proto(resp: bridge.JoinGroupResponse) -> classic_group_pb2.JoinGroupResponse:
    out = classic_group_pb2.JoinGroupResponse(
        error_code=int(resp.error_code),
        generation_id=resp.generation_id,
        leader=resp.leader,
        skip_assignment=resp.skip_assignment,
        member_id=resp.member_id,
    )
    if resp.error_message is not None:
        out.error_message = resp.error_message
    if resp.protocol_type is not None:
        out.protocol_type = resp.protocol_type
    if resp.protocol_name is not None:
        out.protocol_name = resp.protocol_name
    for x in resp.members:
        item = out.members.add(member_id=x.member_id, metadata=x.metadata)
        if x.group_instance_id is not None:
            item.group_instance_id = x.group_instance_id
    return out


def sync_from_proto(req: classic_group_pb2.SyncGroupRequest) -> bridge.SyncGroup:
    return bridge.SyncGroup(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=_opt(req, "group_instance_id"),
        protocol_type=_opt(req, "protocol_type"),
        protocol_name=_opt(req, "protocol_name"),
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in req.assignments),
    )


def sync_to_proto(resp: bridge.SyncGroupResponse) -> classic_group_pb2.SyncGroupResponse:
    out = classic_group_pb2.SyncGroupResponse(
        error_code=int(resp.error_code), assignment=resp.assignment
    )
    if resp.error_message is not None:
        out.error_message = resp.error_message
    if resp.protocol_type is not None:
        out.protocol_type = resp.protocol_type
    if resp.protocol_name is not None:
        out.protocol_name = resp.protocol_name
    return out


def classic_heartbeat_from_proto(req: classic_group_pb2.HeartbeatRequest) -> bridge.Heartbeat:
    return bridge.Heartbeat(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=_opt(req, "group_instance_id"),
    )


def classic_heartbeat_to_proto(
    resp: bridge.HeartbeatResponse,
) -> classic_group_pb2.HeartbeatResponse:
    return with_error(
        classic_group_pb2.HeartbeatResponse, ErrorCode(resp.error_code), resp.error_message
    )


def leave_from_proto(req: classic_group_pb2.LeaveGroupRequest) -> bridge.LeaveGroup:
    return bridge.LeaveGroup(
        group_id=req.group_id,
        members=tuple(
            bridge.LeaveMember(
                member_id=x.member_id,
                group_instance_id=_opt(x, "group_instance_id"),
                reason=_opt(x, "reason"),
            )
            for x in req.members
        ),
    )


def leave_to_proto(resp: bridge.LeaveGroupResponse) -> classic_group_pb2.LeaveGroupResponse:
    out = classic_group_pb2.LeaveGroupResponse(error_code=int(resp.error_code))
    if resp.error_message is not None:
        out.error_message = resp.error_message
    for x in resp.members:
        item = out.members.add(member_id=x.member_id, error_code=int(x.error_code))
        if x.group_instance_id is not None:
            item.group_instance_id = x.group_instance_id
        if x.error_message is not None:
            item.error_message = x.error_message
    return out


_Classic = classic_group_pb2.DescribeGroupsResponse.DescribedGroup


def classic_described_group_to_proto(g: bridge.DescribedGroup) -> _Classic:
    out = _Classic(
        error_code=int(g.error_code),
        group_id=g.group_id,
        group_state=g.group_state,
        protocol_type=g.protocol_type,
        protocol_data=g.protocol_data,
        authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )
    if g.error_message is not None:
        out.error_message = g.error_message
    for x in g.members:
        item = out.members.add(
            member_id=x.member_id,
            client_id=x.client_id,
            client_host=x.client_host,
            member_metadata=x.member_metadata,
            member_assignment=x.member_assignment,
        )
        if x.group_instance_id is not None:
            item.group_instance_id = x.group_instance_id
    return out


def describe_groups_to_proto(
    groups: Iterable[bridge.DescribedGroup],
) -> classic_group_pb2.DescribeGroupsResponse:
    out = classic_group_pb2.DescribeGroupsResponse(error_code=0)
    for g in groups:
        out.groups.append(classic_described_group_to_proto(g))
    return out


def watch_event_to_proto(
    event: WatchEvent, name_of: NameOf = _no_name
) -> consumer_group_pb2.ConsumerGroupWatchResponse:
    """One message of the push stream (ConsumerGroupWatch)."""
    out = consumer_group_pb2.ConsumerGroupWatchResponse(
        error_code=int(event.error_code),
        member_epoch=event.member_epoch,
        group_epoch=event.group_epoch,
        assignment_epoch=event.assignment_epoch,
        target_topic_partitions=assignment_to_proto(event.target, name_of),
        released_topic_partitions=assignment_to_proto(event.released, name_of),
    )
    if event.error_message is not None:
        out.error_message = event.error_message
    return out
